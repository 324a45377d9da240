//! What the instruction count measures: each probe mechanism, the variants run on it (no
//! probe, its empty pair, its timing floor, hotprof with options, bpftrace), and the guests
//! (suites) that run them: 6.12 for every mechanism it has, 7.x for fsession against fentry.

use super::super::{bpftrace_hist_total, empty_probe, first_calls_line};
use super::{MARKED_WORKLOAD, STACKS_EVERY};
use crate::kernels::Kernel;

/// One probe mechanism and how each variant uses it.
pub(super) struct Mechanism {
    pub(super) key: &'static str,
    pub(super) title: &'static str,
    /// What its timing floor keeps the start time in.
    floor_title: &'static str,
    /// The variants it runs.
    pub(super) variants: &'static [Variant],
    empty_mode: &'static str,
    empty_target: &'static str,
    hotprof_args: &'static str,
    /// The option that times the same function with frames instead (sessions only).
    frames_flag: &'static str,
    bpftrace_entry: &'static str,
    bpftrace_return: &'static str,
    /// The goal for hotprof's added instructions against bpftrace's.
    pub(super) bpftrace_goal: f64,
    /// A session's goal against another mechanism's timing floor in the same guest: that
    /// mechanism's key and the most hotprof may cost against it.
    pub(super) below_floor_of: Option<(&'static str, f64)>,
}

/// The guests the section boots, each with the mechanisms it measures.
pub(super) struct Suite {
    pub(super) kernel: Kernel,
    pub(super) mechanisms: &'static [Mechanism],
}

pub(super) const SUITES: [Suite; 2] = [
    Suite {
        kernel: Kernel::V6_12,
        mechanisms: &MECHANISMS,
    },
    Suite {
        kernel: Kernel::V7,
        mechanisms: &FSESSION_MECHANISMS,
    },
];

/// The timing floor of the per-task mechanisms.
const TASK_STORAGE_FLOOR: &str = "timing floor (task-storage start + 1 bucket)";

// fentry cannot attach to `__x64_sys_getpid` on Debian kernels; `__do_sys_getpid` it can.
const FENTRY: Mechanism = Mechanism {
    key: "fentry",
    title: "fentry + fexit on `__do_sys_getpid`",
    floor_title: TASK_STORAGE_FLOOR,
    variants: &VARIANTS,
    empty_mode: "fentry",
    empty_target: "__do_sys_getpid",
    hotprof_args: "--fn __do_sys_getpid --mode fentry",
    frames_flag: "",
    bpftrace_entry: "kfunc:__do_sys_getpid",
    bpftrace_return: "kretfunc:__do_sys_getpid",
    bpftrace_goal: 0.5,
    below_floor_of: None,
};

pub(super) const MECHANISMS: [Mechanism; 4] = [
    Mechanism {
        key: "kprobe",
        title: "kprobe + kretprobe on `__x64_sys_getpid`",
        floor_title: TASK_STORAGE_FLOOR,
        variants: &VARIANTS,
        empty_mode: "kprobe",
        empty_target: "__x64_sys_getpid",
        hotprof_args: "--fn __x64_sys_getpid --mode kprobe",
        frames_flag: "",
        bpftrace_entry: "kprobe:__x64_sys_getpid",
        bpftrace_return: "kretprobe:__x64_sys_getpid",
        bpftrace_goal: 0.5,
        below_floor_of: None,
    },
    FENTRY,
    Mechanism {
        key: "tracepoint",
        title: "syscall tracepoints `sys_enter_getpid` + `sys_exit_getpid`",
        floor_title: TASK_STORAGE_FLOOR,
        variants: &VARIANTS,
        empty_mode: "tracepoint",
        empty_target: "getpid",
        hotprof_args: "--syscall getpid",
        frames_flag: "",
        bpftrace_entry: "tracepoint:syscalls:sys_enter_getpid",
        bpftrace_return: "tracepoint:syscalls:sys_exit_getpid",
        bpftrace_goal: 0.5,
        below_floor_of: None,
    },
    // kprobe mode's own choice for a lone ftrace-able function on 6.10+; `__x64_sys_getpid`
    // is not ftrace-able on Debian kernels. Its frames row is the kprobe.multi link.
    Mechanism {
        key: "session",
        title: "kprobe.session on `__do_sys_getpid` (fprobe; one program for entry and return)",
        floor_title: "timing floor (start in the session cookie + 1 bucket)",
        variants: &SESSION_VARIANTS,
        empty_mode: "session",
        empty_target: "__do_sys_getpid",
        hotprof_args: "--fn __do_sys_getpid --mode kprobe",
        frames_flag: " --no-kprobe-session",
        bpftrace_entry: "kprobe:__do_sys_getpid",
        bpftrace_return: "kretprobe:__do_sys_getpid",
        bpftrace_goal: 0.5,
        // Below the perf kprobe's timing floor.
        below_floor_of: Some(("kprobe", 1.0)),
    },
];

/// The 7.x guest: fsession (7.0+) against fentry/fexit pairs on the same function, each with
/// its own empty pair and timing floor. Issue #32's goals: hotprof through fsession at most
/// 0.80× the pairs' timing floor and 0.35× bpftrace's fentry histogram.
pub(super) const FSESSION_MECHANISMS: [Mechanism; 2] = [
    Mechanism {
        title: "fentry + fexit on `__do_sys_getpid` (7.x)",
        variants: &PAIR_VARIANTS,
        hotprof_args: "--fn __do_sys_getpid --mode fentry --no-fsession",
        ..FENTRY
    },
    Mechanism {
        key: "fsession",
        title: "fsession on `__do_sys_getpid` (7.0+; one trampoline program for entry and exit)",
        floor_title: "timing floor (start in the session cookie + 1 bucket)",
        variants: &PAIR_VARIANTS,
        empty_mode: "fsession",
        hotprof_args: "--fn __do_sys_getpid --mode fsession",
        bpftrace_goal: 0.35,
        below_floor_of: Some(("fentry", 0.80)),
        ..FENTRY
    },
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Variant {
    Empty,
    Floor,
    Hotprof,
    HotprofStacks,
    HotprofStacksEvery,
    HotprofOffCpu,
    /// The session's function with frames instead (`--no-kprobe-session`: the kprobe.multi
    /// link's frame stack).
    HotprofFrames,
    Bpftrace,
}

pub(super) const VARIANTS: [Variant; 7] = [
    Variant::Empty,
    Variant::Floor,
    Variant::Hotprof,
    Variant::HotprofStacks,
    Variant::HotprofStacksEvery,
    Variant::HotprofOffCpu,
    Variant::Bpftrace,
];

/// kprobe.session's: the stack and off-CPU options need frames, so their rows would be the
/// kprobe.multi link's, which `HotprofFrames` measures plainly.
/// The 7.x guest's: the pairs row is its own mechanism there.
const PAIR_VARIANTS: [Variant; 4] = [
    Variant::Empty,
    Variant::Floor,
    Variant::Hotprof,
    Variant::Bpftrace,
];

const SESSION_VARIANTS: [Variant; 5] = [
    Variant::Empty,
    Variant::Floor,
    Variant::Hotprof,
    Variant::HotprofFrames,
    Variant::Bpftrace,
];

impl Variant {
    pub(super) fn key(self) -> &'static str {
        match self {
            Variant::Empty => "empty",
            Variant::Floor => "floor",
            Variant::Hotprof => "hotprof",
            Variant::HotprofStacks => "hotprof-stacks",
            Variant::HotprofStacksEvery => "hotprof-stacks-every",
            Variant::HotprofOffCpu => "hotprof-offcpu",
            Variant::HotprofFrames => "hotprof-frames",
            Variant::Bpftrace => "bpftrace",
        }
    }

    pub(super) fn title(self, mechanism: &Mechanism) -> String {
        match self {
            Variant::Empty => "empty pair".into(),
            Variant::Floor => mechanism.floor_title.into(),
            Variant::Hotprof => format!("hotprof {}", mechanism.hotprof_args),
            Variant::HotprofStacks => "hotprof … --stacks".into(),
            Variant::HotprofStacksEvery => format!("hotprof … --stacks-every {STACKS_EVERY}"),
            Variant::HotprofOffCpu => "hotprof … --off-cpu".into(),
            Variant::HotprofFrames => format!("hotprof …{}", mechanism.frames_flag),
            Variant::Bpftrace => "bpftrace (@start[tid] + hist())".into(),
        }
    }

    /// The guest command: every variant runs [`MARKED_WORKLOAD`] with `syms` as its argument.
    pub(super) fn command(self, mechanism: &Mechanism, syms: &str) -> String {
        let workload = format!("{MARKED_WORKLOAD} {syms}");
        let hotprof = |extra: &str| {
            format!(
                "hotprof {}{extra} --no-calibrate -- {workload}",
                mechanism.hotprof_args
            )
        };
        let tool = match self {
            Variant::Empty | Variant::Floor => empty_probe(
                self == Variant::Floor,
                mechanism.empty_mode,
                mechanism.empty_target,
                &workload,
            ),
            Variant::Hotprof => hotprof(""),
            Variant::HotprofStacks => hotprof(" --stacks"),
            Variant::HotprofStacksEvery => hotprof(&format!(" --stacks-every {STACKS_EVERY}")),
            Variant::HotprofOffCpu => hotprof(" --off-cpu"),
            Variant::HotprofFrames => hotprof(mechanism.frames_flag),
            // The same program as the probe-cost section's bpftrace variant. `-c` wants an
            // ELF file, so the shell runs the script (and execs the workload: same pid).
            Variant::Bpftrace => format!(
                "bpftrace -e '{} /pid == cpid/ {{ @start[tid] = nsecs; }} \
                 {} /@start[tid]/ {{ @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }}' \
                 -c \"/bin/sh {workload}\"",
                mechanism.bpftrace_entry, mechanism.bpftrace_return
            ),
        };
        format!("taskset 1 {tool}")
    }

    /// The tool's own count of the calls it timed, where it prints one.
    pub(super) fn tool_count(self, output: &str) -> Option<Option<u64>> {
        match self {
            Variant::Empty => None,
            Variant::Floor
            | Variant::Hotprof
            | Variant::HotprofStacks
            | Variant::HotprofStacksEvery
            | Variant::HotprofOffCpu
            | Variant::HotprofFrames => Some(first_calls_line(output)),
            Variant::Bpftrace => Some(bpftrace_hist_total(output)),
        }
    }
}
