//! kprobe mode through one kprobe.session link (Linux 6.10+, fprobe): one program
//! (`kprobe_session`) runs at each call's entry and return, keeping the entry time in the
//! call's own session cookie, so a call costs no per-task lookup at all. Without frames it
//! sees no nesting, so the run uses it only when that loses nothing: one function, timed at
//! its entry, with no option that keeps state in a frame (`super::super::session` decides).
//!
//! Its kfuncs (`bpf_session_is_return`, `bpf_session_cookie`) are called by BTF id, which
//! aya 0.14 cannot relocate: the program writes placeholders, and the patched aya's
//! `KProbe::load_for_session_link` writes the ids found here in the kernel's BTF.

use aya::{Ebpf, programs::KProbe};
use profiler_common::kfunc::KFUNCS;

use super::btf::{BtfIndex, KernelBtfError, kernel_btf};
use super::error::{Reason, one_line};
use super::links::RunLinks;
use super::program::{program, take};
use crate::resolve::Target;

/// The link's program.
pub const SESSION_PROGRAM: &str = "kprobe_session";

/// Why the kprobe.session link was not used (the kprobe.multi link is tried next).
#[derive(Debug, thiserror::Error)]
pub enum SessionRefused {
    /// A kernel before 6.10 (or without `CONFIG_FPROBE`): not worth a note.
    #[error("this kernel has no kprobe.session (Linux 6.10): no {kfunc} in its BTF")]
    NoKfunc { kfunc: &'static str },
    #[error("kprobe.session needs the kernel's BTF: {0}")]
    NoBtf(#[source] KernelBtfError),
    #[error("loading {SESSION_PROGRAM} for a kprobe.session link: {reason}")]
    Load { reason: Reason },
    #[error("the kernel refused a kprobe.session link: {reason}")]
    Link { reason: Reason },
}

impl SessionRefused {
    /// Whether this is only a kernel without kprobe.session (before 6.10) or without BTF
    /// (which kprobe.session needs as much as fentry does), not a failure to report.
    pub fn is_expected(&self) -> bool {
        matches!(
            self,
            SessionRefused::NoKfunc { .. } | SessionRefused::NoBtf(_)
        )
    }
}

/// Each kfunc placeholder of the program with its BTF id in `btf`.
pub fn kfunc_ids(btf: &BtfIndex) -> Result<Vec<(i32, u32)>, SessionRefused> {
    KFUNCS
        .iter()
        .map(|&(placeholder, name)| {
            btf.function(name)
                .map(|id| (placeholder, id))
                .ok_or(SessionRefused::NoKfunc { kfunc: name })
        })
        .collect()
}

/// Attaches `target`, the run's one function (slot 0, which the program records into without
/// asking the link's cookie), with a kprobe.session link. On failure nothing stays attached.
pub fn attach_session(ebpf: &mut Ebpf, target: &Target) -> Result<RunLinks, SessionRefused> {
    let kfuncs = kfunc_ids(kernel_btf().map_err(SessionRefused::NoBtf)?)?;
    let functions = [(target.address, 0)];
    let load_refused = |reason| SessionRefused::Load { reason };
    let program: &mut KProbe =
        program(ebpf, SESSION_PROGRAM).map_err(|e| load_refused(Reason::of(e, |e| e.message())))?;
    if program.fd().is_err() {
        program
            .load_for_session_link(&kfuncs)
            .map_err(|e| load_refused(Reason::of(e, |e| one_line(e))))?;
    }
    let link_refused = |reason| SessionRefused::Link { reason };
    let id = program
        .attach_session(&functions)
        .map_err(|e| link_refused(Reason::of(e, |e| one_line(e))))?;
    let link =
        take(program.take_link(id)).map_err(|e| link_refused(Reason::of(e, |e| e.message())))?;
    let mut links = RunLinks::default();
    links.kprobes.push(link);
    Ok(links)
}
