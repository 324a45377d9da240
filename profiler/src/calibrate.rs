//! Measuring hotprof's own cost per probed call on this kernel, in the mode the run uses.
//!
//! The probe pair is attached to the getpid path of hotprof's own process, then N getpid
//! system calls are timed with and without it (best of several rounds each, alternating
//! nothing else). The difference per call is what one entry + return costs: the trap or
//! trampoline, both programs and their map updates. It is included in every duration hotprof
//! reports, so it is printed beside them.

use std::time::Instant;

use aya::maps::HashMap;
use profiler_common::names;

use crate::attach::{self, AttachedMode, Mode, ProbeConfig};
use crate::model::TaskStore;
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

/// Measures the per-call overhead of `mode` with the object whose per-task state is in
/// `store` (the run's); `None` with a reason when it cannot.
pub fn measure(
    mode: AttachedMode,
    store: TaskStore,
    kernel: Option<&KernelFunctions>,
) -> Result<Overhead, String> {
    let baseline_before = best_of_rounds();
    let config = ProbeConfig {
        functions: 1,
        filter_tgids: true,
        ..Default::default()
    };
    let mut ebpf = attach::load_object(&config, store).map_err(|e| attach::one_line(&e))?;
    let mut links = attach::KprobeLinks::default();
    match mode {
        AttachedMode::Syscall => {
            let tracefs = crate::resolve::tracefs_root().ok_or("no tracefs")?;
            attach::attach_syscalls(&mut ebpf, &["getpid".to_string()], &tracefs)
                .map_err(|e| e.to_string())?;
        }
        AttachedMode::Kprobe | AttachedMode::Fentry => {
            let kernel = kernel.ok_or("no kallsyms")?;
            let candidates: &[&str] = if mode == AttachedMode::Fentry {
                &["__do_sys_getpid", "__x64_sys_getpid"]
            } else {
                &["__x64_sys_getpid", "__do_sys_getpid"]
            };
            let target: Target = candidates
                .iter()
                .find_map(|name| kernel.resolve(name, &|_| false).ok()?.into_iter().next())
                .ok_or("no getpid function to calibrate on")?;
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
            .map_err(|e| e.to_string())?
            .links;
        }
    }
    {
        let mut tgids: HashMap<_, u32, u8> =
            HashMap::try_from(ebpf.map_mut(names::TGIDS).ok_or("TGIDS missing")?)
                .map_err(|e| e.to_string())?;
        tgids
            .insert(std::process::id(), 1, 0)
            .map_err(|e| e.to_string())?;
    }
    let probed = best_of_rounds();
    let snapshot = crate::collect::snapshot(&ebpf, 1).map_err(|e| e.to_string())?;
    drop(links);
    drop(ebpf);
    let baseline_after = best_of_rounds();
    // Unprobed before and after; the better of the two is the floor.
    let baseline = baseline_before.min(baseline_after);
    let expected = u64::from(CALLS_PER_ROUND) * ROUNDS as u64;
    let counted = snapshot.functions.first().map_or(0, |f| f.count);
    if counted < expected {
        return Err(format!(
            "calibration probe counted {counted} of {expected} calls"
        ));
    }
    Ok(Overhead {
        per_call_ns: (probed - baseline).max(0.0),
    })
}
