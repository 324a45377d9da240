//! `--syscall`: which mechanism times the syscalls, and attaching it.
//!
//! - **tracepoint**: the perf tracepoints `syscalls:sys_enter_NAME`/`sys_exit_NAME`, one
//!   program pair per syscall slot ([`attach_syscalls`]). The kernel fills a perf record
//!   before the program runs; only the traced syscalls run a program. Linux 4.7.
//! - **raw**: the raw tracepoints `raw_syscalls:sys_enter`/`sys_exit`, one program pair for
//!   every syscall of the system, which finds the traced ones by number in a table
//!   (`RAW_SYSCALL_SLOTS`). No record is built, but every other syscall pays the lookup.
//!   Linux 4.17; the numbers are the machine's (`crate::arch`), and compat (32-bit) syscalls
//!   are left out.
//!
//! `--syscall-mode auto` picks by [`choose`] (the measurements behind it are in its doc):
//! raw for a run limited to a command or `--pid` before Linux 7.0, the perf tracepoints for a
//! system-wide one and on 7.0+ (where raw runs are preemptible and lose calls: [`RawRuns`]).

use std::path::Path;

use aya::{
    Ebpf,
    maps::{Array, MapError},
    programs::{BtfTracePoint, ProgramError, RawTracePoint, TracePoint},
};
use profiler_common::SYSCALL_SLOTS;

use super::btf::kernel_btf;
use super::error::{AttachError, Reason, one_line};
use super::modes::AttachedMode;
use super::program::program;
use crate::arch::Arch;

/// Syscall numbers `RAW_SYSCALL_SLOTS` covers (`profiler-ebpf/src/raw_syscalls.rs`).
const RAW_SYSCALL_NUMBERS: u32 = 512;
/// The eBPF map from syscall number to slot + 1.
const RAW_SYSCALL_SLOTS: &str = "RAW_SYSCALL_SLOTS";

/// How the user asked `--syscall` to be timed (`--syscall-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyscallMode {
    /// Whichever [`choose`] finds cheaper for the request.
    #[default]
    Auto,
    /// The perf tracepoints `syscalls:sys_enter_NAME`/`sys_exit_NAME`.
    Tracepoint,
    /// The raw tracepoints `raw_syscalls:sys_enter`/`sys_exit`.
    Raw,
}

impl SyscallMode {
    /// The mode that attaches what `mode` names (calibration repeats a run's choice).
    pub fn of(mode: AttachedMode) -> Self {
        match mode {
            AttachedMode::RawSyscall => Self::Raw,
            _ => Self::Tracepoint,
        }
    }
}

/// What the running kernel does to the raw pair's runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawRuns {
    /// Before Linux 7.0 tracepoint callbacks run with preemption off: nothing but an NMI
    /// can come between a run's start and end on its CPU.
    NotPreemptible,
    /// Linux 7.0 runs tracepoint callbacks preemptibly (SRCU-fast, a46023d5616e; BPF raw
    /// tracepoint programs with only migration off, f7d327654b88), but a program's guard
    /// against recursion is still per CPU: while a preempted run holds it, every syscall
    /// another task makes on that CPU skips the program, a kernel-missed run. Measured on
    /// 7.2 and 7.2-rt (TCG, 2 vCPUs, four `dd bs=1` beside `syscall_lat 20000`): 103k–175k
    /// missed runs and 2–18 % of the getpids lost; the perf tracepoints lost none (their
    /// programs still run with preemption off), nor did either on 6.12.
    Preemptible,
}

impl RawRuns {
    /// The running kernel's: preemptible from 7.0 (an unknown version counts as older).
    pub fn running() -> Self {
        match crate::sys::uname::kernel_version() {
            Some(version) if version >= (7, 0) => Self::Preemptible,
            _ => Self::NotPreemptible,
        }
    }
}

/// Picks the mechanism for syscalls whose numbers are `numbers` (None: not in
/// [`syscall_number`]'s table, which only the tracepoints can time). `targeted`: the run
/// counts only a command's process tree or `--pid` processes, not the whole system. `raw`:
/// whether the raw pair's runs can be preempted, which makes auto take the perf tracepoints.
///
/// Auto, from the host measurements (6.18 in a 2-core VM on a real CPU; the workload's CPU
/// ns per call, median of 12 interleaved rounds; see the issue #16 report): per traced
/// getpid the raw pair adds ~350 ns and the perf pair ~480 ns, but every *untraced* syscall
/// of the system pays ~145 ns under the raw pair against ~65 ns under the perf one (which
/// only sends syscalls through the kernel's slow path). So raw is cheaper overall only where
/// the traced syscalls are more than ~40 % of all syscalls. A targeted run (`-- CMD`, `-p`)
/// is usually there to measure that workload's calls, for a short time: raw. A system-wide
/// run watches a few syscalls among all the others, often for long: the perf tracepoints.
/// Where raw runs are preemptible (7.0+), cheaper is no reason to lose calls: the perf
/// tracepoints, always.
pub fn choose(
    mode: SyscallMode,
    names: &[String],
    numbers: &[Option<u32>],
    targeted: bool,
    raw: RawRuns,
) -> Result<AttachedMode, AttachError> {
    let unknown = names
        .iter()
        .zip(numbers)
        .find(|(_, number)| number.is_none())
        .map(|(name, _)| name);
    match (mode, unknown) {
        (SyscallMode::Tracepoint, _) => Ok(AttachedMode::Syscall),
        (SyscallMode::Raw, Some(name)) => Err(AttachError::NoSyscallNumber { name: name.clone() }),
        (SyscallMode::Raw, None) => Ok(AttachedMode::RawSyscall),
        (SyscallMode::Auto, None) if targeted && raw == RawRuns::NotPreemptible => {
            Ok(AttachedMode::RawSyscall)
        }
        (SyscallMode::Auto, _) => Ok(AttachedMode::Syscall),
    }
}

/// Attaches `syscalls` with the mechanism [`choose`] picks for the running kernel; returns
/// the one in use and a note for the user, if any.
pub fn attach_syscalls_in(
    ebpf: &mut Ebpf,
    syscalls: &[String],
    tracefs: &Path,
    mode: SyscallMode,
    targeted: bool,
) -> Result<(AttachedMode, Option<&'static str>), AttachError> {
    if syscalls.len() > SYSCALL_SLOTS as usize {
        return Err(AttachError::TooManySyscalls {
            requested: syscalls.len(),
        });
    }
    // The names tracefs knows first, so a typo gets the closest names whatever the mode.
    check_syscall_names(syscalls, tracefs)?;
    let numbers: Vec<Option<u32>> = syscalls.iter().map(|s| syscall_number(s)).collect();
    let raw = RawRuns::running();
    match choose(mode, syscalls, &numbers, targeted, raw)? {
        AttachedMode::RawSyscall => {
            let numbers: Vec<u32> = numbers.into_iter().flatten().collect();
            attach_raw(ebpf, &numbers)?;
            let note = (raw == RawRuns::Preemptible).then_some(PREEMPTIBLE_RAW_NOTE);
            Ok((AttachedMode::RawSyscall, note))
        }
        _ => {
            attach_syscalls(ebpf, syscalls, tracefs)?;
            Ok((AttachedMode::Syscall, None))
        }
    }
}

/// Said when `--syscall-mode raw` is forced where its runs are preemptible ([`RawRuns`]).
const PREEMPTIBLE_RAW_NOTE: &str = "on Linux 7.0+ the raw tracepoints' programs can be \
    preempted, and then the kernel skips other tasks' syscalls on that CPU: calls can be lost \
    (counted as missed by the kernel); --syscall-mode tracepoint loses none";

/// Attaches `syscalls/sys_enter_NAME` and `sys_exit_NAME` for each syscall.
pub fn attach_syscalls(
    ebpf: &mut Ebpf,
    syscalls: &[String],
    tracefs: &Path,
) -> Result<(), AttachError> {
    if syscalls.len() > SYSCALL_SLOTS as usize {
        return Err(AttachError::TooManySyscalls {
            requested: syscalls.len(),
        });
    }
    check_syscall_names(syscalls, tracefs)?;
    for (slot, name) in syscalls.iter().enumerate() {
        for (side, program_name) in [
            ("enter", format!("sys_enter_{slot}")),
            ("exit", format!("sys_exit_{slot}")),
        ] {
            let tracepoint = format!("sys_{side}_{name}");
            let fail = |e: ProgramError| AttachError::Tracepoint {
                tracepoint: format!("syscalls/{tracepoint}"),
                reason: Reason::of(e, |e| one_line(e)),
            };
            let prog: &mut TracePoint = program(ebpf, &program_name)?;
            prog.load().map_err(fail)?;
            prog.attach("syscalls", &tracepoint).map_err(fail)?;
        }
    }
    Ok(())
}

/// Fails on the first of `syscalls` that has no `syscalls/sys_enter_NAME` tracepoint, with
/// the closest known names.
fn check_syscall_names(syscalls: &[String], tracefs: &Path) -> Result<(), AttachError> {
    let events = tracefs.join("events/syscalls");
    match syscalls
        .iter()
        .find(|name| !events.join(format!("sys_enter_{name}")).is_dir())
    {
        Some(name) => Err(AttachError::UnknownSyscall {
            name: name.clone(),
            elsewhere: Arch::NATIVE.elsewhere(name),
            suggestions: similar_syscalls(&events, name),
        }),
        None => Ok(()),
    }
}

fn similar_syscalls(events: &Path, name: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(events) else {
        return Vec::new();
    };
    let known = entries.filter_map(|e| {
        e.ok()?
            .file_name()
            .to_str()?
            .strip_prefix("sys_enter_")
            .map(str::to_string)
    });
    closest_syscalls(known, name)
}

/// The syscalls (of `known`) to suggest for an unknown `name`: those containing it or
/// contained in it, closest in length first, at most three.
fn closest_syscalls(known: impl Iterator<Item = String>, name: &str) -> Vec<String> {
    let mut names: Vec<String> = known
        .filter(|candidate| candidate.contains(name) || name.contains(candidate.as_str()))
        .collect();
    names.sort_by_key(|c| c.len().abs_diff(name.len()));
    names.truncate(3);
    names
}

/// Fills the number table (slot `i` for `numbers[i]`) and attaches the raw pair.
fn attach_raw(ebpf: &mut Ebpf, numbers: &[u32]) -> Result<(), AttachError> {
    let internal = |what: String| {
        move |e: MapError| {
            AttachError::Internal(Reason::of(e, |e| format!("{what}: {}", one_line(e))))
        }
    };
    let map = ebpf.map_mut(RAW_SYSCALL_SLOTS).ok_or_else(|| {
        AttachError::Internal(Reason::of(MissingFromObject(RAW_SYSCALL_SLOTS), |e| {
            e.to_string()
        }))
    })?;
    let mut slots: Array<_, u32> =
        Array::try_from(map).map_err(internal(format!("map {RAW_SYSCALL_SLOTS}")))?;
    for (slot, &number) in (1u32..).zip(numbers) {
        slots
            .set(number, slot, 0)
            .map_err(internal(format!("syscall number {number}")))?;
    }
    // The task-storage object has the pair as BTF tracepoints (typed arguments, read
    // without helper calls); the hash-map object, for kernels that may lack BTF, only as
    // raw tracepoints.
    let btf = if ebpf.program(BTF_PROGRAMS[0].0).is_some() {
        Some(kernel_btf().map_err(|e| AttachError::Tracepoint {
            tracepoint: "raw_syscalls/sys_enter".into(),
            reason: Reason::of(e, |e| format!("reading kernel BTF: {}", one_line(e))),
        })?)
    } else {
        None
    };
    let programs = if btf.is_some() {
        BTF_PROGRAMS
    } else {
        RAW_PROGRAMS
    };
    for (program_name, tracepoint) in programs {
        let fail = |e: ProgramError| AttachError::Tracepoint {
            tracepoint: format!("raw_syscalls/{tracepoint}"),
            reason: Reason::of(e, |e| one_line(e)),
        };
        let program = ebpf.program_mut(program_name).ok_or_else(|| {
            AttachError::Internal(Reason::of(MissingFromObject(program_name), |e| {
                e.to_string()
            }))
        })?;
        match &btf {
            Some(btf) => {
                let btf_id = btf
                    .tracepoint(tracepoint)
                    .ok_or_else(|| AttachError::Tracepoint {
                        tracepoint: format!("raw_syscalls/{tracepoint}"),
                        reason: Reason::new("no such BTF tracepoint in this kernel"),
                    })?;
                let program: &mut BtfTracePoint = program.try_into().map_err(fail)?;
                program.load_by_btf_id(btf_id).map_err(fail)?;
                program.attach().map_err(fail)?;
            }
            None => {
                let program: &mut RawTracePoint = program.try_into().map_err(fail)?;
                program.load().map_err(fail)?;
                program.attach(tracepoint).map_err(fail)?;
            }
        }
    }
    Ok(())
}

/// The raw syscall pair's programs and tracepoints: as BTF tracepoints (only in the
/// task-storage object) and as raw tracepoints (in both).
const BTF_PROGRAMS: [(&str, &str); 2] =
    [("btf_sys_enter", "sys_enter"), ("btf_sys_exit", "sys_exit")];
const RAW_PROGRAMS: [(&str, &str); 2] =
    [("raw_sys_enter", "sys_enter"), ("raw_sys_exit", "sys_exit")];

/// A program or map the eBPF object should have and has not (a build mismatch: a bug).
#[derive(Debug, thiserror::Error)]
#[error("{0} missing from the eBPF object")]
struct MissingFromObject(&'static str);

/// The syscall number of `name` (as tracefs names it) on this machine's architecture, if
/// known and within the eBPF number table.
pub fn syscall_number(name: &str) -> Option<u32> {
    Arch::NATIVE
        .syscall_number(name)
        .filter(|&number| number < RAW_SYSCALL_NUMBERS)
}

/// The running kernel's offset of the word holding the compat-syscall flag in `task_struct`.
pub fn running_thread_info_status_offset() -> u32 {
    Arch::NATIVE.compat_word_offset(crate::sys::uname::kernel_version())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn auto_picks_raw_for_targeted_runs_with_known_numbers_before_7_0_and_tracepoints_otherwise() {
        let both = names(&["getpid", "uprobe"]);
        let mode = |mode, numbers: &[Option<u32>]| {
            choose(
                mode,
                &both[..numbers.len()],
                numbers,
                true,
                RawRuns::NotPreemptible,
            )
        };
        let system_wide = |raw| choose(SyscallMode::Auto, &both[..1], &[Some(39)], false, raw);
        assert_eq!(
            system_wide(RawRuns::NotPreemptible).unwrap(),
            AttachedMode::Syscall
        );
        assert_eq!(
            system_wide(RawRuns::Preemptible).unwrap(),
            AttachedMode::Syscall
        );
        let forced = |raw| choose(SyscallMode::Raw, &both[..1], &[Some(39)], false, raw);
        assert_eq!(
            forced(RawRuns::NotPreemptible).unwrap(),
            AttachedMode::RawSyscall
        );
        assert_eq!(
            forced(RawRuns::Preemptible).unwrap(),
            AttachedMode::RawSyscall
        );
        // 7.0+: a targeted run too, as raw would lose calls to preemption.
        let targeted_7 = choose(
            SyscallMode::Auto,
            &both[..1],
            &[Some(39)],
            true,
            RawRuns::Preemptible,
        );
        assert_eq!(targeted_7.unwrap(), AttachedMode::Syscall);
        assert_eq!(
            mode(SyscallMode::Auto, &[Some(39)]).unwrap(),
            AttachedMode::RawSyscall
        );
        assert_eq!(
            mode(SyscallMode::Auto, &[Some(39), None]).unwrap(),
            AttachedMode::Syscall
        );
        assert_eq!(
            mode(SyscallMode::Tracepoint, &[Some(39)]).unwrap(),
            AttachedMode::Syscall
        );
        assert_eq!(
            mode(SyscallMode::Raw, &[Some(39)]).unwrap(),
            AttachedMode::RawSyscall
        );
        let refused = mode(SyscallMode::Raw, &[Some(39), None])
            .unwrap_err()
            .message();
        assert_eq!(
            refused,
            format!(
                "--syscall-mode raw: no {} syscall number known for 'uprobe' (use \
                 --syscall-mode tracepoint)",
                Arch::NATIVE.name()
            )
        );
    }

    #[test]
    fn unknown_syscalls_get_the_closest_known_names() {
        let known = [
            "read",
            "pread64",
            "readv",
            "preadv2",
            "write",
            "readahead",
            "getpid",
        ];
        let closest = |name| closest_syscalls(known.iter().map(|s| s.to_string()), name);
        // Containing it or contained in it, closest in length first, three at most.
        assert_eq!(closest("read"), ["read", "readv", "pread64"]);
        assert_eq!(closest("readx"), ["read"]);
        assert_eq!(closest("getpidd"), ["getpid"]);
        assert!(closest("nosuch").is_empty());
    }
}
