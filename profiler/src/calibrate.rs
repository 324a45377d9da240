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
//! the calibration pair reports for a function that does (nearly) nothing, so that it is a
//! lower bound of what lies inside any reported duration, never more than the fastest call
//! of a short function: `personality(0xffffffff)`, which only reads the task's persona
//! (`__x64_sys_personality`: five instructions, listed by ftrace on 5.10 to 7.x, and a
//! syscall tracepoint of its own). Measured on getpid's path before (`__do_sys_getpid`, a
//! call into `__task_pid_nr_ns`), the bias was 421 ns in a 6.12 TCG guest where
//! `__audit_filter_op`'s fastest call took 340 ns. Call-site mode has no call on that path:
//! it is calibrated on the direct calls in getpid's functions, each tried, the shortest
//! made once per getpid kept (`__rcu_read_lock` on 7.x, `rcu_read_unlock_strict` on 5.10:
//! a few instructions each). `--subtract-bias` takes the bias off the reported averages and
//! percentiles.

use std::time::Instant;

use aya::{
    EbpfError,
    maps::{HashMap, MapError},
};
use profiler_common::names;

use crate::arch::Arch;
use crate::attach::{self, AttachError, AttachedMode, Mode, ProbeConfig};
use crate::model::TaskStore;
use crate::resolve::callsites::{self, CallSite, CallSiteError};
use crate::resolve::kcore::Kcore;
use crate::resolve::{KernelFunctions, Target};
use crate::sys::cheap_calls;

const CALLS_PER_ROUND: u32 = 2_000;
/// The pause before each timed round.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(10);
const ROUNDS: usize = 7;

/// The calibration result, per call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Overhead {
    /// What a probed call costs the traced program, entry + return.
    pub per_call_ns: f64,
    /// The part of it inside every reported duration (the bias).
    pub in_window_ns: f64,
    /// `--counter`: per PMU event, the part of hotprof's own reading inside every count, as
    /// the fewest counted for the near-empty calibration function (its latency bias's way).
    pub pmu_in_window: [Option<u64>; profiler_common::PMU_EVENTS_MAX],
}

/// A cheap syscall without side effects, and the kernel functions on its path.
#[derive(Debug)]
pub struct CalibrationPath {
    /// The syscall as x86-64 names it (see [`CalibrationPath::syscall`]).
    syscall: &'static str,
    /// Makes the syscall once.
    call: fn() -> libc::c_long,
    /// The function entry-probe modes time (fentry, kprobes): the syscall's own code, listed
    /// by ftrace.
    function: Symbol,
    /// Other names of the same code (aliases at its address), which a run may probe.
    aliases: &'static [Symbol],
    /// The functions whose direct calls call-site mode may time, in path order.
    call_sites_in: &'static [Symbol],
}

/// A kernel symbol on a calibration path: named alike on every architecture, or the
/// syscall's entry wrapper, whose name carries the architecture (`__x64_sys_getpid`,
/// `__arm64_sys_getpid`).
#[derive(Clone, Copy, Debug)]
enum Symbol {
    Plain(&'static str),
    Wrapper(&'static str),
}

impl Symbol {
    fn name(self) -> std::borrow::Cow<'static, str> {
        match self {
            Symbol::Plain(name) => name.into(),
            Symbol::Wrapper(syscall) => Arch::NATIVE
                .syscall_wrapper(Arch::NATIVE.tracefs_syscall(syscall))
                .into(),
        }
    }
}

impl CalibrationPath {
    /// The syscall as this machine's tracefs names it (arm64: `arm64_personality`).
    pub fn syscall(&self) -> &'static str {
        Arch::NATIVE.tracefs_syscall(self.syscall)
    }

    /// The function entry-probe modes time on this machine.
    pub fn function(&self) -> std::borrow::Cow<'static, str> {
        self.function.name()
    }

    fn probed_by(&self, symbols: &[&str], syscalls: &[String]) -> bool {
        syscalls.iter().any(|s| s == self.syscall())
            || symbols.iter().any(|symbol| {
                *symbol == self.function.name() || self.aliases.iter().any(|a| *symbol == a.name())
            })
    }
}

const PATHS: [CalibrationPath; 3] = [
    CalibrationPath {
        syscall: "personality",
        call: cheap_calls::query_persona,
        function: Symbol::Wrapper("personality"),
        aliases: &[],
        call_sites_in: &[],
    },
    CalibrationPath {
        syscall: "getpid",
        call: cheap_calls::getpid,
        function: Symbol::Plain("__do_sys_getpid"),
        aliases: &[Symbol::Wrapper("getpid")],
        // The wrapper too: where `__do_sys_getpid` is inlined into it (arm64), its calls are.
        call_sites_in: &[
            Symbol::Plain("__do_sys_getpid"),
            Symbol::Wrapper("getpid"),
            Symbol::Plain("__task_pid_nr_ns"),
        ],
    },
    CalibrationPath {
        syscall: "getppid",
        call: cheap_calls::getppid,
        function: Symbol::Plain("__do_sys_getppid"),
        aliases: &[Symbol::Wrapper("getppid")],
        call_sites_in: &[
            Symbol::Plain("__do_sys_getppid"),
            Symbol::Wrapper("getppid"),
            Symbol::Plain("__task_pid_nr_ns"),
        ],
    },
];

/// What calibration needs from before the run's probes are attached: the path to calibrate
/// on (for entry probes and tracepoints, or one with calls for call-site mode) and its
/// unprobed cost per call.
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
    /// How the run's functions were attached within their mode (a session, a kprobe.multi
    /// link, perf kprobes, fentry pairs): the calibration attaches the same way.
    pub mechanisms: attach::Mechanisms,
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
            self.mechanisms,
            self.store,
            self.kernel.as_ref(),
            &self.run,
        )
    }

    /// The overhead, or `None` after printing the note saying why it was not measured. A
    /// signal that interrupted it is noted again: it was meant for the run (`serve` calibrates
    /// as it starts, and a SIGINT then used to leave it serving).
    pub fn measure_or_note(&self) -> Option<Overhead> {
        self.measure()
            .map_err(|reason| {
                eprintln!("hotprof: note: probe overhead not calibrated: {reason}");
                if let CalibrationError::Attach(AttachError::Interrupted { signal, .. }) = reason {
                    attach::AttachSignals::renote(signal);
                }
            })
            .ok()
    }
}

/// Picks the first calibration path the run does not probe (by symbol or syscall name; one
/// with calls when the run is in call-site mode, `at_call_sites`) and times it unprobed. Call
/// it before attaching anything: with the run's probes attached, the baseline would already
/// hold part of the cost. A run that probes every path is calibrated on the first, and its own
/// probes there are counted in the overhead too.
pub fn baseline(
    probed_symbols: &[&str],
    probed_syscalls: &[String],
    at_call_sites: bool,
) -> Baseline {
    let path = choose_path(probed_symbols, probed_syscalls, at_call_sites);
    Baseline {
        path,
        bare_ns: best_of_rounds(path, std::time::Duration::ZERO),
    }
}

/// The first path the run does not probe (with calls to time, for call-site mode).
fn choose_path(
    probed_symbols: &[&str],
    probed_syscalls: &[String],
    with_calls: bool,
) -> &'static CalibrationPath {
    let mut usable = PATHS
        .iter()
        .filter(|path| !with_calls || !path.call_sites_in.is_empty());
    let first = usable.clone().next().unwrap_or(&PATHS[0]);
    usable
        .find(|path| !path.probed_by(probed_symbols, probed_syscalls))
        .unwrap_or(first)
}

fn time_round(path: &CalibrationPath, calls: u32) -> f64 {
    let start = Instant::now();
    for _ in 0..calls {
        std::hint::black_box((path.call)());
    }
    start.elapsed().as_nanos() as f64 / f64::from(calls)
}

/// The fastest of [`ROUNDS`] rounds, a `pause` before each: with probes attached, a machine
/// busy for a while (a virtual CPU descheduled, deferred work of probes just detached) slows
/// every call of a round, and rounds spread over time ([`SETTLE`]) let the fastest be found.
/// The baseline, timed at start-up with nothing attached, does not pause.
fn best_of_rounds(path: &CalibrationPath, pause: std::time::Duration) -> f64 {
    (0..ROUNDS)
        .map(|_| {
            std::thread::sleep(pause);
            time_round(path, CALLS_PER_ROUND)
        })
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
    #[error("no direct call on {syscall}'s path was made once per call")]
    NoSiteOnPath { syscall: &'static str },
    #[error("{0}")]
    Pmu(#[source] attach::PmuError),
}

/// Loads the calibration's object for `config`, its PMU events (`--counter`) in place: the
/// run's probes read them at every call, so the calibration's must too.
fn load(config: &ProbeConfig, store: TaskStore) -> Result<aya::Ebpf, CalibrationError> {
    let pmu = attach::PmuCounters::open(&config.pmu_events).map_err(CalibrationError::Pmu)?;
    let ebpf = attach::load_object(config, store).map_err(CalibrationError::Load)?;
    pmu.install(&ebpf).map_err(CalibrationError::Pmu)?;
    Ok(ebpf)
}

/// Calls tried per candidate call site: enough to tell a site made on every call from one
/// on a branch the path rarely takes.
const CALLS_PER_TRY: u32 = 200;
/// At most this many candidate call sites are tried at once.
const MOST_CANDIDATES: usize = 16;

/// The call site on `path` to time a call-site probe pair on, found by trying: every direct
/// call in its functions is probed at once, the path is called [`CALLS_PER_TRY`] times, and of
/// the sites that counted each call exactly once, the one with the shortest call is kept (its
/// callee does least, so its duration is nearest the probes' own part). Which calls the path
/// makes differs by kernel: on 5.10 `__task_pid_nr_ns` calls `rcu_read_unlock_strict` on one
/// of two branches, so the first call in the code was not always made.
fn call_site_on(
    path: &CalibrationPath,
    kernel: &KernelFunctions,
    store: TaskStore,
    config: &ProbeConfig,
) -> Result<CallSite, CalibrationError> {
    let kcore = Kcore::open().map_err(|e| CalibrationError::CallSites(e.into()))?;
    let mut candidates = Vec::new();
    for function in path.call_sites_in {
        candidates.extend(
            callsites::direct_calls(kernel, &kcore, &function.name())
                .map_err(CalibrationError::CallSites)?,
        );
    }
    candidates.truncate(MOST_CANDIDATES);
    if candidates.is_empty() {
        return Err(CalibrationError::NoTarget);
    }
    let config = ProbeConfig {
        functions: candidates.len() as u32,
        ..config.clone()
    };
    let mut ebpf = load(&config, store)?;
    let one_each: Vec<Vec<CallSite>> = candidates.iter().map(|c| vec![c.clone()]).collect();
    let links = attach::attach_call_sites(
        &mut ebpf,
        &one_each,
        0,
        &mut crate::progress::Progress::quiet(),
    )
    .map_err(CalibrationError::Attach)?
    .links;
    follow_self(&mut ebpf)?;
    time_round(path, CALLS_PER_TRY);
    let snapshot = crate::collect::snapshot(&ebpf, candidates.len(), config.pmu_events.len())
        .map_err(CalibrationError::Snapshot)?;
    drop(links);
    drop(ebpf);
    let chosen = snapshot
        .functions
        .iter()
        .zip(candidates)
        .filter(|(timed, _)| timed.count == u64::from(CALLS_PER_TRY))
        .min_by_key(|(timed, _)| timed.min_ns)
        .map(|(_, site)| site);
    chosen.ok_or(CalibrationError::NoSiteOnPath {
        syscall: path.syscall(),
    })
}

/// Tells `ebpf`'s probes to count hotprof's own calls (its process alone).
fn follow_self(ebpf: &mut aya::Ebpf) -> Result<(), CalibrationError> {
    let mut tgids: HashMap<_, u32, u8> = HashMap::try_from(
        ebpf.map_mut(names::TGIDS)
            .ok_or(CalibrationError::NoTgids)?,
    )
    .map_err(CalibrationError::Map)?;
    tgids
        .insert(std::process::id(), 1, 0)
        .map_err(CalibrationError::Map)
}

/// Measures the per-call overhead of `mode` with the object whose per-task state is in
/// `store` (the run's), with what the run's probes do per call (`run`: stacks, `--by`
/// keys, `--slowest`, `--counter`) and the same eBPF object (a run with any per-call option loads the main
/// one, whose programs read each option at every call); an error saying why when it cannot.
/// Not its `--filter`, under which the calibration calls might not count, nor `--off-cpu`,
/// whose cost is paid at context switches rather than per call.
pub fn measure(
    baseline: &Baseline,
    mode: AttachedMode,
    mechanisms: attach::Mechanisms,
    store: TaskStore,
    kernel: Option<&KernelFunctions>,
    run: &ProbeConfig,
) -> Result<Overhead, CalibrationError> {
    let config = ProbeConfig {
        functions: 1,
        filter_tgids: true,
        capture_stacks: run.capture_stacks,
        stack_sample_every: run.stack_sample_every,
        stack_map_size: run.stack_map_size,
        by: run.by,
        max_keys: run.max_keys,
        slowest: run.slowest,
        pmu_events: run.pmu_events.clone(),
        main_object: run.sets_per_call_options(),
        ..Default::default()
    };
    let path = baseline.path;
    // Tried before the object below is loaded: its own probes must not count the tries.
    let site = match mode {
        AttachedMode::Callsite => {
            let kernel = kernel.ok_or(CalibrationError::NoKallsyms)?;
            Some(call_site_on(path, kernel, store, &config)?)
        }
        _ => None,
    };
    let mut ebpf = load(&config, store)?;
    let mut links = attach::RunLinks::default();
    match mode {
        AttachedMode::Callsite => {
            let site = site.ok_or(CalibrationError::NoTarget)?;
            links = attach::attach_call_sites(
                &mut ebpf,
                &[vec![site]],
                0,
                &mut crate::progress::Progress::quiet(),
            )
            .map_err(CalibrationError::Attach)?
            .links;
        }
        // Nothing timed, nothing to calibrate (`hotprof sample` never asks).
        AttachedMode::Sampling => return Err(CalibrationError::NoTarget),
        AttachedMode::Syscall | AttachedMode::RawSyscall => {
            let tracefs = crate::resolve::tracefs_root().ok_or(CalibrationError::NoTracefs)?;
            attach::attach_syscalls_in(
                &mut ebpf,
                &[path.syscall().to_string()],
                &tracefs,
                attach::SyscallMode::of(mode),
                true,
            )
            .map_err(CalibrationError::Attach)?;
        }
        AttachedMode::Kprobe | AttachedMode::Fentry => {
            let kernel = kernel.ok_or(CalibrationError::NoKallsyms)?;
            let target: Target = kernel
                .resolve(&path.function(), &|_| false)
                .ok()
                .and_then(|targets| targets.into_iter().next())
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
                mechanisms,
                &mut crate::progress::Progress::quiet(),
            )
            .map_err(CalibrationError::Attach)?
            .links;
        }
    }
    follow_self(&mut ebpf)?;
    // A round not timed first: right after attaching (and after the run's own probes were
    // detached, whose deferred work, RCU callbacks and freed trampolines, runs on the same
    // CPUs), every call of a round can be slower (seen on 7.x under TCG: a kprobe pair's
    // shortest call 781 ns in one run, 600 ± 10 in four runs after this round), which would
    // put the bias above what it lies inside.
    time_round(path, CALLS_PER_ROUND);
    let probed = best_of_rounds(path, SETTLE);
    let snapshot = crate::collect::snapshot(&ebpf, 1, config.pmu_events.len())
        .map_err(CalibrationError::Snapshot)?;
    drop(links);
    drop(ebpf);
    let expected = u64::from(CALLS_PER_ROUND) * (ROUNDS as u64 + 1);
    let calls = snapshot.functions.first();
    let counted = calls.map_or(0, |f| f.count);
    if counted < expected {
        return Err(CalibrationError::Undercounted { counted, expected });
    }
    let in_window_ns = calls.map_or(0, |f| f.min_ns) as f64;
    let mut pmu_in_window = [None; profiler_common::PMU_EVENTS_MAX];
    for (bias, per_slot) in pmu_in_window.iter_mut().zip(&snapshot.pmu) {
        *bias = per_slot
            .first()
            .filter(|counted| counted.count > 0)
            .map(|counted| counted.min_ns);
    }
    Ok(Overhead {
        per_call_ns: (probed - baseline.bare_ns).max(0.0),
        in_window_ns,
        pmu_in_window,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibrates_on_the_first_path_the_run_does_not_probe() {
        let entry = |symbols: &[&str], syscalls: &[String]| choose_path(symbols, syscalls, false);
        let sites = |symbols: &[&str], syscalls: &[String]| choose_path(symbols, syscalls, true);
        assert_eq!(entry(&[], &[]).syscall, "personality");
        assert_eq!(
            sites(&[], &[]).syscall,
            "getpid",
            "personality makes no call"
        );
        // The wrappers as this build's architecture names them (`__x64_sys_`, `__arm64_sys_`).
        let wrapper = |syscall| Arch::NATIVE.syscall_wrapper(Arch::NATIVE.tracefs_syscall(syscall));
        assert_eq!(entry(&[&wrapper("personality")], &[]).syscall, "getpid");
        assert_eq!(
            entry(&["vfs_read"], &["personality".into()]).syscall,
            "getpid"
        );
        assert_eq!(
            sites(&[&wrapper("getpid")], &[]).syscall,
            "getppid",
            "an alias"
        );
        assert_eq!(sites(&[], &["getpid".into()]).syscall, "getppid");
        let names: Vec<_> = PATHS.iter().map(|p| p.function()).collect();
        let every: Vec<&str> = names.iter().map(|name| name.as_ref()).collect();
        assert_eq!(entry(&every, &[]).syscall, "personality", "fallback");
        assert_eq!(sites(&every, &[]).syscall, "getpid", "fallback");
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
