//! What the instruction count measures: each probe mechanism, the variants run on it (no
//! probe, its empty pair, its timing floor, hotprof with options, bpftrace), and the guests
//! (suites) that run them: 6.12 for every mechanism it has, 7.x for fsession against fentry,
//! and with `--arch aarch64` an arm64 6.12 for its mechanisms and call-site mode's cost.

use super::super::{empty_probe, first_calls_line};
use super::{MARKED_WORKLOAD, STACKS_EVERY};
use crate::arch::Arch;
use crate::kernels::Kernel;
use crate::peer_output::{bpftrace_hist_total, log2_hist_total, perf_latency_count};
use crate::peers::{SID_BPFTRACE, SID_FUNCLATENCY, SID_PERF};

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
    /// Another mechanism timing the same function, whose hotprof row this one's is compared
    /// with (call-site kprobes against fentry): its key.
    pub(super) against_hotprof_of: Option<&'static str>,
    /// How many more calls than the loop's the tool may count: the function's calls in the
    /// followed workload outside the loop (the wrapper shell's start and exec).
    pub(super) other_calls: u64,
}

/// getpid outside the loop: the wrapper shell's own (ash reads its pid at start).
const GETPID_OTHER_CALLS: u64 = 4;

/// The guests the section boots, each with the mechanisms it measures.
pub(super) struct Suite {
    pub(super) arch: Arch,
    pub(super) kernel: Kernel,
    pub(super) mechanisms: &'static [Mechanism],
}

pub(super) const SUITES: [Suite; 3] = [
    Suite {
        arch: Arch::X86_64,
        kernel: Kernel::V6_12,
        mechanisms: &MECHANISMS,
    },
    Suite {
        arch: Arch::X86_64,
        kernel: Kernel::V7,
        mechanisms: &FSESSION_MECHANISMS,
    },
    Suite {
        arch: Arch::Aarch64,
        kernel: Kernel::V6_12,
        mechanisms: &ARM64_MECHANISMS,
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
    against_hotprof_of: None,
    other_calls: GETPID_OTHER_CALLS,
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
        against_hotprof_of: None,
        other_calls: GETPID_OTHER_CALLS,
    },
    FENTRY,
    Mechanism {
        key: "tracepoint",
        title: "syscall tracepoints `sys_enter_getpid` + `sys_exit_getpid`",
        floor_title: TASK_STORAGE_FLOOR,
        variants: &TRACEPOINT_VARIANTS,
        empty_mode: "tracepoint",
        empty_target: "getpid",
        hotprof_args: "--syscall getpid",
        frames_flag: "",
        bpftrace_entry: "tracepoint:syscalls:sys_enter_getpid",
        bpftrace_return: "tracepoint:syscalls:sys_exit_getpid",
        bpftrace_goal: 0.5,
        below_floor_of: None,
        against_hotprof_of: None,
        other_calls: GETPID_OTHER_CALLS,
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
        against_hotprof_of: None,
        other_calls: GETPID_OTHER_CALLS,
    },
];

/// The 7.x guest: fsession (7.0+) against fentry/fexit pairs on the same function, each with
/// its own empty pair and timing floor. Issue #32's goals: hotprof through fsession at most
/// 0.80× the pairs' timing floor and 0.35× bpftrace's fentry histogram. Tracing-multi links
/// (`--tracing-multi`) on the same function against the pairs: the same trampoline and frame
/// stack, the function's slot from the link's cookie instead of the program's constant.
pub(super) const FSESSION_MECHANISMS: [Mechanism; 3] = [
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
        variants: &FSESSION_VARIANTS,
        empty_mode: "fsession",
        hotprof_args: "--fn __do_sys_getpid --mode fsession",
        bpftrace_goal: 0.35,
        below_floor_of: Some(("fentry", 0.80)),
        ..FENTRY
    },
    Mechanism {
        key: "multi",
        title: "tracing-multi links on `__do_sys_getpid` (7.x, x86-64: `--tracing-multi`, one \
                fentry.multi and one fexit.multi program for any number of functions)",
        floor_title: "timing floor (task-storage start + 1 bucket, through tracing-multi links)",
        variants: &MULTI_VARIANTS,
        empty_mode: "multi",
        hotprof_args: "--fn __do_sys_getpid --mode fentry --tracing-multi",
        against_hotprof_of: Some("fentry"),
        ..FENTRY
    },
];

/// The arm64 guest (6.12: no fprobe, so no kprobe.session; bpftrace is sid's arm64 build, the
/// host's being an x86-64 one). arm64 syscalls enter `__arm64_sys_getpid` directly (no
/// `__do_sys_` for a syscall without arguments), which fentry and kprobes both take. Call-site
/// mode times `__task_pid_nr_ns` at its `bl` in `__arm64_sys_getpid` (getpid's own path: one
/// call per getpid), against fentry on the same function: arm64 has no kprobe jump
/// optimisation, so each call-site kprobe is a breakpoint exception and the return site is
/// single-stepped.
const ARM64_KPROBE: Mechanism = Mechanism {
    key: "kprobe",
    title: "kprobe + kretprobe on `__arm64_sys_getpid` (arm64)",
    floor_title: TASK_STORAGE_FLOOR,
    variants: &ARM64_VARIANTS,
    empty_mode: "kprobe",
    empty_target: "__arm64_sys_getpid",
    hotprof_args: "--fn __arm64_sys_getpid --mode kprobe",
    frames_flag: "",
    bpftrace_entry: "kprobe:__arm64_sys_getpid",
    bpftrace_return: "kretprobe:__arm64_sys_getpid",
    bpftrace_goal: 0.5,
    below_floor_of: None,
    against_hotprof_of: None,
    other_calls: GETPID_OTHER_CALLS,
};

pub(super) const ARM64_MECHANISMS: [Mechanism; 5] = [
    ARM64_KPROBE,
    Mechanism {
        key: "fentry",
        title: "fentry + fexit on `__arm64_sys_getpid` (arm64)",
        variants: &ARM64_FENTRY_VARIANTS,
        empty_mode: "fentry",
        hotprof_args: "--fn __arm64_sys_getpid --mode fentry",
        bpftrace_entry: "fentry:__arm64_sys_getpid",
        bpftrace_return: "fexit:__arm64_sys_getpid",
        ..ARM64_KPROBE
    },
    Mechanism {
        key: "tracepoint",
        title: "syscall tracepoints `sys_enter_getpid` + `sys_exit_getpid` (arm64)",
        variants: &ARM64_VARIANTS,
        empty_mode: "tracepoint",
        empty_target: "getpid",
        hotprof_args: "--syscall getpid",
        bpftrace_entry: "tracepoint:syscalls:sys_enter_getpid",
        bpftrace_return: "tracepoint:syscalls:sys_exit_getpid",
        ..ARM64_KPROBE
    },
    Mechanism {
        key: "neighbour",
        title: "fentry + fexit on `__task_pid_nr_ns` (arm64; call-site mode's reference)",
        variants: &[Variant::Hotprof],
        empty_mode: "fentry",
        empty_target: "__task_pid_nr_ns",
        hotprof_args: "--fn __task_pid_nr_ns --mode fentry",
        other_calls: PID_NR_OTHER_CALLS,
        ..ARM64_KPROBE
    },
    Mechanism {
        key: "callsite",
        title: "call-site kprobes on `__task_pid_nr_ns` (arm64: a breakpoint at each `bl`, \
                the next instruction single-stepped)",
        variants: &[Variant::Hotprof],
        empty_mode: "",
        empty_target: "__task_pid_nr_ns",
        hotprof_args: "--fn __task_pid_nr_ns --mode callsite",
        against_hotprof_of: Some("neighbour"),
        other_calls: PID_NR_OTHER_CALLS,
        ..ARM64_KPROBE
    },
];

/// `__task_pid_nr_ns` outside getpid: the wrapper shell's start, fork and exec (18 on arm64
/// 6.12, in fentry and call-site mode alike).
const PID_NR_OTHER_CALLS: u64 = 40;

/// Tracing-multi links: their own empty pair and floor (fentry's programs through the links),
/// and hotprof; the peers have no such link.
const MULTI_VARIANTS: [Variant; 3] = [Variant::Empty, Variant::Floor, Variant::Hotprof];

const ARM64_FENTRY_VARIANTS: [Variant; 6] = [
    Variant::Empty,
    Variant::Floor,
    Variant::Hotprof,
    Variant::HotprofStacks,
    Variant::SidBpftrace,
    Variant::Funclatency,
];

/// The kprobe's and the syscall tracepoints' on arm64: funclatency takes fentry wherever the
/// function is in BTF (`__arm64_sys_getpid` is), so its row is fentry's; it times no
/// tracepoint.
const ARM64_VARIANTS: [Variant; 5] = [
    Variant::Empty,
    Variant::Floor,
    Variant::Hotprof,
    Variant::HotprofStacks,
    Variant::SidBpftrace,
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
    /// The host's bpftrace (bookworm's 0.17 on the development machines): the history row.
    Bpftrace,
    /// Debian sid's bpftrace (0.27), the same program: the newest peer.
    SidBpftrace,
    /// Debian sid's libbpf-tools `funclatency` (0.37): fentry where the function is in BTF,
    /// else a kprobe pair; system-wide (it runs no command), so stopped after the workload.
    Funclatency,
    /// Debian sid's `perf ftrace latency` (7.2): ftrace's function_graph tracer, the
    /// histogram in perf from the trace buffer (Debian's perf has no BPF skeletons, so no
    /// `--use-bpf`). System-wide (`-a`): its pid filter (`set_ftrace_pid`) follows the
    /// command's first thread only, not the workload's loop thread.
    PerfFtrace,
}

/// The function mechanisms' (kprobe, fentry) on the 6.12 guest.
pub(super) const VARIANTS: [Variant; 10] = [
    Variant::Empty,
    Variant::Floor,
    Variant::Hotprof,
    Variant::HotprofStacks,
    Variant::HotprofStacksEvery,
    Variant::HotprofOffCpu,
    Variant::Bpftrace,
    Variant::SidBpftrace,
    Variant::Funclatency,
    Variant::PerfFtrace,
];

/// The syscall tracepoints': funclatency and perf ftrace time functions only.
const TRACEPOINT_VARIANTS: [Variant; 8] = [
    Variant::Empty,
    Variant::Floor,
    Variant::Hotprof,
    Variant::HotprofStacks,
    Variant::HotprofStacksEvery,
    Variant::HotprofOffCpu,
    Variant::Bpftrace,
    Variant::SidBpftrace,
];

/// The 7.x guest's fentry/fexit pairs, with funclatency (an fentry pair too) and perf
/// ftrace.
const PAIR_VARIANTS: [Variant; 7] = [
    Variant::Empty,
    Variant::Floor,
    Variant::Hotprof,
    Variant::Bpftrace,
    Variant::SidBpftrace,
    Variant::Funclatency,
    Variant::PerfFtrace,
];

/// The 7.x guest's fsession: the pairs row is its own mechanism there.
const FSESSION_VARIANTS: [Variant; 5] = [
    Variant::Empty,
    Variant::Floor,
    Variant::Hotprof,
    Variant::Bpftrace,
    Variant::SidBpftrace,
];

/// kprobe.session's: the stack and off-CPU options need frames, so their rows would be the
/// kprobe.multi link's, which `HotprofFrames` measures plainly.
const SESSION_VARIANTS: [Variant; 6] = [
    Variant::Empty,
    Variant::Floor,
    Variant::Hotprof,
    Variant::HotprofFrames,
    Variant::Bpftrace,
    Variant::SidBpftrace,
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
            Variant::SidBpftrace => "sidbpftrace",
            Variant::Funclatency => "funclatency",
            Variant::PerfFtrace => "perf-ftrace",
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
            Variant::Bpftrace => "bpftrace, the host's (@start[tid] + hist())".into(),
            Variant::SidBpftrace => "bpftrace, sid's (@start[tid] + hist())".into(),
            Variant::Funclatency => format!("funclatency {}, sid's", mechanism.empty_target),
            Variant::PerfFtrace => format!(
                "perf ftrace latency -a -T {}, sid's (function_graph)",
                mechanism.empty_target
            ),
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
            Variant::Bpftrace | Variant::SidBpftrace => format!(
                "{} -e '{} /pid == cpid/ {{ @start[tid] = nsecs; }} \
                 {} /@start[tid]/ {{ @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }}' \
                 -c \"/bin/sh {workload}\"",
                if self == Variant::Bpftrace {
                    "bpftrace"
                } else {
                    SID_BPFTRACE
                },
                mechanism.bpftrace_entry,
                mechanism.bpftrace_return
            ),
            // It runs no command: started in the background, the workload once its programs
            // are loaded (its `Tracing` line sits in a stdio buffer until it exits) and a second
            // for the attach, then Ctrl-C, which prints its histogram. The call count checks
            // that it was attached for the whole loop.
            Variant::PerfFtrace => format!(
                "{SID_PERF} ftrace latency -a -n -T {} -- /bin/sh {workload}",
                mechanism.empty_target
            ),
            Variant::Funclatency => {
                return format!(
                    "( taskset 1 {SID_FUNCLATENCY} {target} > /tmp/fl.txt 2>&1 & fl=$!; \
                     until grep -q '_dummy_' /proc/kallsyms || ! kill -0 $fl 2>/dev/null; do sleep 0.2; done; \
                     sleep 1; /bin/sh {workload}; kill -INT $fl; wait $fl; s=$?; cat /tmp/fl.txt; exit $s )",
                    target = mechanism.empty_target
                );
            }
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
            Variant::Bpftrace | Variant::SidBpftrace => Some(bpftrace_hist_total(output)),
            Variant::Funclatency => Some(log2_hist_total(output)),
            Variant::PerfFtrace => Some(perf_latency_count(output)),
        }
    }

    /// Whether the tool times calls with BPF programs (which the plugin counts as they start).
    pub(super) fn runs_programs(self) -> bool {
        self != Variant::PerfFtrace
    }

    /// Whether the tool counts every task's calls, not only the workload's.
    pub(super) fn system_wide(self) -> bool {
        matches!(
            self,
            Variant::Floor | Variant::Funclatency | Variant::PerfFtrace
        )
    }
}
