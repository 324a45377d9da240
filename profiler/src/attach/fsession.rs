//! fentry mode through one fsession program (Linux 7.0+, `BPF_TRACE_FSESSION`): a single
//! trampoline-attached program (`fsession`) runs at the function's entry and at its exit,
//! keeping the entry time in the call's own session cookie on the trampoline's stack. Like
//! kprobe.session (`session_link.rs`) it needs no per-task state, and like it it sees no
//! nesting: the run uses it only for one function with no option that keeps state in a frame
//! (`super::super::session` decides), else the fentry/fexit pairs (`fentry.rs`).
//!
//! aya 0.14 knows neither the attach type nor the program: the patched aya's
//! `FEntry::load_for_fsession` loads it with `BPF_TRACE_FSESSION`'s value as the running
//! kernel's BTF numbers it (a kernel without it has no fsession), and the session kfuncs' ids
//! written in, as for kprobe.session.

use aya::{Ebpf, programs::FEntry};

use super::btf::{kernel_btf, module_refusal};
use super::error::{FsessionRefused, Reason, one_line};
use super::session_link::kfunc_ids;
use crate::resolve::Target;

/// The program.
pub const FSESSION_PROGRAM: &str = "fsession";

/// How fentry mode attaches its functions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FentryAttach {
    /// One fsession program where the kernel has it (7.0+) and the run is one function that
    /// needs no frames (`session/start.rs` decides); else as `Pairs`.
    #[default]
    Fsession,
    /// An fentry/fexit pair per function, each call in a frame (`--no-fsession`); past 64
    /// functions, tracing-multi links where the kernel has them.
    Pairs,
    /// Tracing-multi links (7.x, x86-64) whatever the number of functions
    /// (`--tracing-multi`, and the calibration of a run whose functions went through them).
    Multi,
}

/// Attaches `target`, the run's one function (slot 0), with the fsession program. On failure
/// nothing stays attached (the program is unloaded again).
pub fn attach_fsession(ebpf: &mut Ebpf, target: &Target) -> Result<(), FsessionRefused> {
    let btf = kernel_btf().map_err(FsessionRefused::NoBtf)?;
    let attach_type = btf
        .enumerator("BPF_TRACE_FSESSION")
        .ok_or(FsessionRefused::NoAttachType)?;
    // Both kfuncs exist since 6.10: a kernel with fsession has them.
    let kfuncs = kfunc_ids(btf).map_err(|_| FsessionRefused::NoAttachType)?;
    let refused = |reason| FsessionRefused::Refused {
        function: target.symbol.clone(),
        reason,
    };
    if let Some(why) = module_refusal(target) {
        return Err(refused(Reason::new(why)));
    }
    let btf_id = btf
        .trampoline_target(&target.symbol)
        .map_err(|why| refused(Reason::new(why.to_string())))?;
    let program: &mut FEntry = ebpf
        .program_mut(FSESSION_PROGRAM)
        .ok_or(FsessionRefused::NoProgram)?
        .try_into()
        .map_err(|e| refused(Reason::of(e, |e| one_line(e))))?;
    let attached = program
        .load_for_fsession(btf_id, attach_type as u32, &kfuncs)
        .and_then(|()| program.attach().map(drop));
    attached.map_err(|e| {
        let _ = program.unload();
        refused(Reason::of(e, |e| one_line(e)))
    })
}

/// Unloads the fsession program, with its link, where a run attached it.
pub fn detach_fsession(ebpf: &mut Ebpf) {
    if let Some(Ok(program)) = ebpf
        .program_mut(FSESSION_PROGRAM)
        .map(<&mut FEntry>::try_from)
    {
        let _ = program.unload();
    }
}
