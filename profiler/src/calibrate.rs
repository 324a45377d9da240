//! Measuring hotprof's own cost per probed call on this kernel, in the mode the run uses.
//!
//! A probe pair is attached to the path of a cheap syscall in hotprof's own process (getpid,
//! or the first of getppid, getuid, … whose functions the run does not probe itself), then N
//! such calls are timed with it and compared with the same calls timed *before the run's
//! probes were attached*. The difference per call is what one entry + return costs a traced
//! program: the trap or trampoline (and, for syscall tracepoints, the slow syscall path that
//! any attached syscall tracepoint switches every task to), both programs and their map
//! updates, with the run's stacks, `--by` keys and `--slowest`. (Measured after the run's
//! probes, with their programs in the baseline, it was the cost of a second pair only: 179 ns
//! printed where the workload paid 440 ns more per getpid on the host.)
//!
//! Only part of that cost lies inside the durations hotprof reports: the entry program takes
//! its timestamp last and the return program first, so what is inside is the way from the
//! entry timestamp into the function (the rest of the trampoline or kprobe path) and from its
//! return to the exit timestamp. That part, the *bias*, is measured as the shortest duration
//! the calibration pair reports for its function, which does little (a few dozen
//! instructions, still in the figure: the bias is overstated by them). The shortest, not the
//! median: in the 6.12 TCG guest the median of `__do_sys_getpid` was 411 ns while
//! `__audit_filter_op`'s own median was 331 ns. `--subtract-bias` takes it off the reported
//! averages and percentiles.

use std::time::Instant;

use aya::{
    EbpfError,
    maps::{HashMap, MapError},
};
use profiler_common::names;

use crate::attach::{self, AttachError, AttachedMode, Mode, ProbeConfig};
use crate::model::TaskStore;
use crate::resolve::callsites::{self, CallSite, CallSiteError};
use crate::resolve::kcore::Kcore;
use crate::resolve::{KernelFunctions, Target};

const CALLS_PER_ROUND: u32 = 2_000;
const ROUNDS: usize = 7;

/// The calibration result, per call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Overhead {
    /// What a probed call costs the traced program, entry + return.
    pub per_call_ns: f64,
    /// The part of it inside every reported duration (the bias).
    pub in_window_ns: f64,
}

/// A cheap syscall without arguments or side effects, and the kernel functions on its path a
/// run could probe (the x86-64 entry point and the body it calls).
#[derive(Debug, PartialEq)]
pub struct CalibrationPath {
    pub syscall: &'static str,
    number: libc::c_long,
    pub entry: &'static str,
    pub body: &'static str,
    /// The first ftrace-able function it calls, for call-site mode.
    helper: &'static str,
}

const PATHS: [CalibrationPath; 4] = [
    CalibrationPath {
        syscall: "getpid",
        number: libc::SYS_getpid,
        entry: "__x64_sys_getpid",
        body: "__do_sys_getpid",
        helper: "__task_pid_nr_ns",
    },
    CalibrationPath {
        syscall: "getppid",
        number: libc::SYS_getppid,
        entry: "__x64_sys_getppid",
        body: "__do_sys_getppid",
        helper: "__task_pid_nr_ns",
    },
    CalibrationPath {
        syscall: "getuid",
        number: libc::SYS_getuid,
        entry: "__x64_sys_getuid",
        body: "__do_sys_getuid",
        helper: "from_kuid_munged",
    },
    CalibrationPath {
        syscall: "getgid",
        number: libc::SYS_getgid,
        entry: "__x64_sys_getgid",
        body: "__do_sys_getgid",
        helper: "from_kgid_munged",
    },
];

/// What calibration needs from before the run's probes are attached: the path to calibrate
/// on and its unprobed cost.
#[derive(Debug)]
pub struct Baseline {
    path: &'static CalibrationPath,
    bare_ns: f64,
}

/// Everything a calibration needs, kept from the run's attach until it is measured: right
/// after attaching (`serve`, whose overhead is exported while it runs), or once the run's
/// probes are detached (a recording, so that calibrating does not delay the workload's start).
pub struct Calibration {
    pub baseline: Baseline,
    pub mode: AttachedMode,
    /// In kprobe mode: through a kprobe.multi link, or a perf kprobe per function.
    pub kprobe_attach: attach::KprobeAttach,
    pub store: TaskStore,
    pub kernel: Option<KernelFunctions>,
    /// The run's per-call configuration (stacks, `--by` keys, `--slowest`).
    pub run: ProbeConfig,
}

impl Calibration {
    /// [`measure`] with what the run kept; the reason as one line when it cannot.
    pub fn measure(&self) -> Result<Overhead, CalibrationError> {
        measure(
            &self.baseline,
            self.mode,
            self.kprobe_attach,
            self.store,
            self.kernel.as_ref(),
            &self.run,
        )
    }

    /// The overhead, or `None` after printing the note saying why it was not measured.
    pub fn measure_or_note(&self) -> Option<Overhead> {
        self.measure()
            .map_err(|reason| eprintln!("hotprof: note: probe overhead not calibrated: {reason}"))
            .ok()
    }
}

/// Picks the first calibration path the run does not probe (by symbol or syscall name) and
/// times it unprobed. Call it before attaching anything: with the run's probes attached, the
/// baseline would already hold part of the cost. A run that probes every path is calibrated
/// on getpid's, and its own probes there are counted in the overhead too.
pub fn baseline(probed_symbols: &[&str], probed_syscalls: &[String]) -> Baseline {
    let path = choose_path(probed_symbols, probed_syscalls);
    Baseline {
        path,
        bare_ns: best_of_rounds(path.number),
    }
}

fn choose_path(probed_symbols: &[&str], probed_syscalls: &[String]) -> &'static CalibrationPath {
    PATHS
        .iter()
        .find(|path| {
            !probed_syscalls.iter().any(|s| s == path.syscall)
                && !probed_symbols
                    .iter()
                    .any(|symbol| *symbol == path.entry || *symbol == path.body)
        })
        .unwrap_or(&PATHS[0])
}

fn time_round(number: libc::c_long) -> f64 {
    let start = Instant::now();
    for _ in 0..CALLS_PER_ROUND {
        // SAFETY: every calibration syscall takes no arguments and has no side effects.
        std::hint::black_box(unsafe { libc::syscall(number) });
    }
    start.elapsed().as_nanos() as f64 / CALLS_PER_ROUND as f64
}

fn best_of_rounds(number: libc::c_long) -> f64 {
    (0..ROUNDS)
        .map(|_| time_round(number))
        .fold(f64::INFINITY, f64::min)
}

/// Why the overhead could not be measured.
///
/// Its `Display` is the whole reason on one line, causes included, as the run's note prints
/// it ("probe overhead not calibrated: REASON"); the typed cause is also its `source()`, for
/// whoever wants to look into it (print this error alone, not its chain, which would
/// repeat the cause).
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error("{}", attach::one_line(.0))]
    Load(#[source] EbpfError),
    #[error("no tracefs")]
    NoTracefs,
    #[error("no kallsyms")]
    NoKallsyms,
    #[error("no function on the calibration syscall's path to calibrate on")]
    NoTarget,
    #[error("{0}")]
    CallSites(#[source] CallSiteError),
    #[error("{}", .0.message())]
    Attach(#[source] AttachError),
    #[error("TGIDS missing")]
    NoTgids,
    #[error("{0}")]
    Map(#[source] MapError),
    #[error("{0}")]
    Snapshot(#[source] anyhow::Error),
    #[error("calibration probe counted {counted} of {expected} calls")]
    Undercounted { counted: u64, expected: u64 },
}

/// A call on the calibration path, to time a call-site probe pair on: the first direct call of
/// the first ftrace-able function there (the syscall's own functions are notrace on Debian's
/// kernels; the helper each calls, e.g. `__task_pid_nr_ns` for getpid, is not).
fn call_site_on(
    path: &CalibrationPath,
    kernel: &KernelFunctions,
) -> Result<CallSite, CalibrationError> {
    let kcore = Kcore::open().map_err(|e| CalibrationError::CallSites(e.into()))?;
    for function in [path.entry, path.body, path.helper] {
        if let Some(site) =
            callsites::first_call(kernel, &kcore, function).map_err(CalibrationError::CallSites)?
        {
            return Ok(site);
        }
    }
    Err(CalibrationError::NoTarget)
}

/// Measures the per-call overhead of `mode` with the object whose per-task state is in
/// `store` (the run's), with what the run's probes do per call (`run`: stacks, `--by`
/// keys, `--slowest`) and the same eBPF object (a run with any per-call option loads the main
/// one, whose programs read each option at every call); an error saying why when it cannot.
/// Not its `--filter`, under which the calibration calls might not count, nor `--off-cpu`,
/// whose cost is paid at context switches rather than per call.
pub fn measure(
    baseline: &Baseline,
    mode: AttachedMode,
    kprobe_attach: attach::KprobeAttach,
    store: TaskStore,
    kernel: Option<&KernelFunctions>,
    run: &ProbeConfig,
) -> Result<Overhead, CalibrationError> {
    let path = baseline.path;
    let config = ProbeConfig {
        functions: 1,
        filter_tgids: true,
        capture_stacks: run.capture_stacks,
        stack_sample_every: run.stack_sample_every,
        stack_map_size: run.stack_map_size,
        by: run.by,
        max_keys: run.max_keys,
        slowest: run.slowest,
        main_object: run.sets_per_call_options(),
        ..Default::default()
    };
    let mut ebpf = attach::load_object(&config, store).map_err(CalibrationError::Load)?;
    let mut links = attach::KprobeLinks::default();
    match mode {
        AttachedMode::Callsite => {
            let kernel = kernel.ok_or(CalibrationError::NoKallsyms)?;
            let site = call_site_on(path, kernel)?;
            links = attach::attach_call_sites(
                &mut ebpf,
                std::slice::from_ref(&site),
                0,
                &mut crate::progress::Progress::quiet(),
            )
            .map_err(CalibrationError::Attach)?;
        }
        AttachedMode::Syscall | AttachedMode::RawSyscall => {
            let tracefs = crate::resolve::tracefs_root().ok_or(CalibrationError::NoTracefs)?;
            attach::attach_syscalls_in(
                &mut ebpf,
                &[path.syscall.to_string()],
                &tracefs,
                attach::SyscallMode::of(mode),
                true,
            )
            .map_err(CalibrationError::Attach)?;
        }
        AttachedMode::Kprobe | AttachedMode::Fentry => {
            let kernel = kernel.ok_or(CalibrationError::NoKallsyms)?;
            // fentry and kprobe.multi links cannot attach to the `__x64_sys_*` entry points
            // on Debian's kernels (ftrace does not list them); a perf kprobe can.
            let candidates =
                if mode == AttachedMode::Fentry || kprobe_attach != attach::KprobeAttach::Single {
                    [path.body, path.entry]
                } else {
                    [path.entry, path.body]
                };
            let target: Target = candidates
                .iter()
                .find_map(|name| kernel.resolve(name, &|_| false).ok()?.into_iter().next())
                .ok_or(CalibrationError::NoTarget)?;
            let wanted = if mode == AttachedMode::Fentry {
                Mode::Fentry
            } else {
                Mode::Kprobe
            };
            // Kept until calibration ends: the links detach when this is dropped.
            links = attach::attach_functions_with(
                &mut ebpf,
                std::slice::from_ref(&target),
                wanted,
                kprobe_attach,
                &mut crate::progress::Progress::quiet(),
            )
            .map_err(CalibrationError::Attach)?
            .links;
        }
    }
    {
        let mut tgids: HashMap<_, u32, u8> = HashMap::try_from(
            ebpf.map_mut(names::TGIDS)
                .ok_or(CalibrationError::NoTgids)?,
        )
        .map_err(CalibrationError::Map)?;
        tgids
            .insert(std::process::id(), 1, 0)
            .map_err(CalibrationError::Map)?;
    }
    let probed = best_of_rounds(path.number);
    let snapshot = crate::collect::snapshot(&ebpf, 1).map_err(CalibrationError::Snapshot)?;
    drop(links);
    drop(ebpf);
    let expected = u64::from(CALLS_PER_ROUND) * ROUNDS as u64;
    let timed = snapshot.functions.first();
    let counted = timed.map_or(0, |f| f.count);
    if counted < expected {
        return Err(CalibrationError::Undercounted { counted, expected });
    }
    let in_window_ns = timed.map_or(0, |f| f.min_ns) as f64;
    Ok(Overhead {
        per_call_ns: (probed - baseline.bare_ns).max(0.0),
        in_window_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibrates_on_the_first_path_the_run_does_not_probe() {
        assert_eq!(choose_path(&[], &[]).syscall, "getpid");
        assert_eq!(choose_path(&["__do_sys_getpid"], &[]).syscall, "getppid");
        assert_eq!(
            choose_path(&["vfs_read"], &["getpid".into()]).syscall,
            "getppid"
        );
        let pid_family = ["__x64_sys_getpid", "__x64_sys_getppid"];
        assert_eq!(choose_path(&pid_family, &[]).syscall, "getuid");
        let every: Vec<&str> = PATHS.iter().map(|p| p.entry).collect();
        assert_eq!(choose_path(&every, &[]).syscall, "getpid", "fallback");
    }

    #[test]
    fn reasons_read_as_the_note_always_printed_them() {
        assert_eq!(CalibrationError::NoTracefs.to_string(), "no tracefs");
        assert_eq!(
            CalibrationError::Undercounted {
                counted: 3,
                expected: 14_000
            }
            .to_string(),
            "calibration probe counted 3 of 14000 calls"
        );
        // A typed cause is the source, and its text is in the message, on one line.
        let load = CalibrationError::Load(EbpfError::MapError(MapError::CreateError {
            name: names::TGIDS.into(),
            io_error: std::io::Error::from_raw_os_error(libc::EPERM),
        }));
        let text = load.to_string();
        assert!(
            text.starts_with("map error: failed to create map `TGIDS`"),
            "{text}"
        );
        assert!(text.contains("os error 1"), "{text}");
        assert!(std::error::Error::source(&load).is_some_and(|s| s.is::<EbpfError>()));
        let attach = CalibrationError::Attach(AttachError::TooManySyscalls { requested: 17 });
        assert_eq!(
            attach.to_string(),
            "at most 16 syscalls per run (17 requested)"
        );
        // anyhow's context: the outermost message, as `to_string` gave before.
        let snapshot =
            CalibrationError::Snapshot(anyhow::anyhow!("inner").context("HIST map missing"));
        assert_eq!(snapshot.to_string(), "HIST map missing");
    }
}
