//! Measuring hotprof's own cost per probed call on this kernel, in the mode the run uses.
//!
//! The probe pair is attached to the getpid path of hotprof's own process, then N getpid
//! system calls are timed with and without it (best of several rounds each, alternating
//! nothing else). The difference per call is what one entry + return costs the traced
//! program: the trap or trampoline, both programs and their map updates, with the run's
//! stacks, `--by` keys and `--slowest`. Only part of it lies inside the durations hotprof
//! reports: the entry program takes its timestamp last and the return program first, so
//! what is inside is the way from the entry timestamp into the function (the rest of the
//! trampoline or kprobe return path) and from its return to the exit timestamp. That part is
//! not measured separately yet.

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
    pub per_call_ns: f64,
}

fn time_getpid_round() -> f64 {
    let start = Instant::now();
    for _ in 0..CALLS_PER_ROUND {
        // SAFETY: getpid has no arguments and no side effects.
        std::hint::black_box(unsafe { libc::syscall(libc::SYS_getpid) });
    }
    start.elapsed().as_nanos() as f64 / CALLS_PER_ROUND as f64
}

fn best_of_rounds() -> f64 {
    (0..ROUNDS)
        .map(|_| time_getpid_round())
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
    #[error("no getpid function to calibrate on")]
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

/// A call on the getpid path, to time a call-site probe pair on: the first direct call of the
/// first ftrace-able function there (the syscall's own functions are notrace on Debian's
/// kernels; `__task_pid_nr_ns`, which every getpid calls, is not).
fn getpid_call_site(kernel: &KernelFunctions) -> Result<CallSite, CalibrationError> {
    let kcore = Kcore::open().map_err(|e| CalibrationError::CallSites(e.into()))?;
    for function in ["__x64_sys_getpid", "__do_sys_getpid", "__task_pid_nr_ns"] {
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
/// keys, `--slowest`); an error saying why when it cannot. Not its `--filter`, under which
/// the calibration calls might not count, nor `--off-cpu`, whose cost is paid at context
/// switches rather than per call.
pub fn measure(
    mode: AttachedMode,
    store: TaskStore,
    kernel: Option<&KernelFunctions>,
    run: &ProbeConfig,
) -> Result<Overhead, CalibrationError> {
    let baseline_before = best_of_rounds();
    let config = ProbeConfig {
        functions: 1,
        filter_tgids: true,
        capture_stacks: run.capture_stacks,
        stack_map_size: run.stack_map_size,
        by: run.by,
        max_keys: run.max_keys,
        slowest: run.slowest,
        ..Default::default()
    };
    let mut ebpf = attach::load_object(&config, store).map_err(CalibrationError::Load)?;
    let mut links = attach::KprobeLinks::default();
    match mode {
        AttachedMode::Callsite => {
            let kernel = kernel.ok_or(CalibrationError::NoKallsyms)?;
            let site = getpid_call_site(kernel)?;
            links = attach::attach_call_sites(
                &mut ebpf,
                std::slice::from_ref(&site),
                0,
                &mut crate::progress::Progress::quiet(),
            )
            .map_err(CalibrationError::Attach)?;
        }
        AttachedMode::Syscall => {
            let tracefs = crate::resolve::tracefs_root().ok_or(CalibrationError::NoTracefs)?;
            attach::attach_syscalls(&mut ebpf, &["getpid".to_string()], &tracefs)
                .map_err(CalibrationError::Attach)?;
        }
        AttachedMode::Kprobe | AttachedMode::Fentry => {
            let kernel = kernel.ok_or(CalibrationError::NoKallsyms)?;
            let candidates: &[&str] = if mode == AttachedMode::Fentry {
                &["__do_sys_getpid", "__x64_sys_getpid"]
            } else {
                &["__x64_sys_getpid", "__do_sys_getpid"]
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
            links = attach::attach_functions(
                &mut ebpf,
                std::slice::from_ref(&target),
                wanted,
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
    let probed = best_of_rounds();
    let snapshot = crate::collect::snapshot(&ebpf, 1).map_err(CalibrationError::Snapshot)?;
    drop(links);
    drop(ebpf);
    let baseline_after = best_of_rounds();
    // Unprobed before and after; the better of the two is the floor.
    let baseline = baseline_before.min(baseline_after);
    let expected = u64::from(CALLS_PER_ROUND) * ROUNDS as u64;
    let counted = snapshot.functions.first().map_or(0, |f| f.count);
    if counted < expected {
        return Err(CalibrationError::Undercounted { counted, expected });
    }
    Ok(Overhead {
        per_call_ns: (probed - baseline).max(0.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            CalibrationError::Snapshot(anyhow::anyhow!("inner").context("STATS map missing"));
        assert_eq!(snapshot.to_string(), "STATS map missing");
    }
}
