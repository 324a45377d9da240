//! fentry mode past its 64 fentry/fexit pairs (`FENTRY_SLOTS`), or with `--tracing-multi`:
//! one tracing-multi link per side (`BPF_TRACE_FENTRY_MULTI`/`FEXIT_MULTI`, Linux 7.x on
//! x86-64), each over every function of the run with the function's slot as its cookie,
//! through the `fentry_multi_entry`/`fexit_multi_exit` programs. One `BPF_LINK_CREATE` per
//! side however many functions, where pairs need a program, a load and an attach each.
//! Where the kernel has no such links, past 64 functions fentry mode fails in one line and
//! auto mode takes kprobe mode, as before.
//!
//! aya has no such link: the programs are loaded by the patched aya (`load_for_multi`, no
//! attach BTF id: the kernel verifies them against its placeholder `bpf_multi_func`, whose
//! prototype has no arguments, so they read none), the links made by `sys/bpf.rs`, and owned
//! as plain descriptors with the run's kprobe links. Checked on Debian's 7.2.13, whose BTF
//! has these attach types (6.12's has not).

use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};

use aya::{
    Ebpf,
    programs::{FEntry, FExit, ProgramError},
};

use super::btf::{kernel_btf, module_refusal};
use super::error::{AttachError, Reason, one_line};
use super::program::program;
use crate::resolve::Target;
use crate::sys::bpf;

pub const FENTRY_MULTI_PROGRAM: &str = "fentry_multi_entry";
pub const FEXIT_MULTI_PROGRAM: &str = "fexit_multi_exit";

/// The kernel's values of the two attach types (`enum bpf_attach_type` in its BTF), or why
/// there are none (all kernels before 7.x).
pub fn attach_types() -> Result<(u32, u32), &'static str> {
    let types = || {
        let btf = kernel_btf().ok()?;
        let entry = btf.enumerator("BPF_TRACE_FENTRY_MULTI")?;
        let exit = btf.enumerator("BPF_TRACE_FEXIT_MULTI")?;
        Some((u32::try_from(entry).ok()?, u32::try_from(exit).ok()?))
    };
    types().ok_or(
        "this kernel has no tracing-multi links (Linux 7.x): no BPF_TRACE_FENTRY_MULTI in its BTF",
    )
}

/// Attaches every one of `targets` (slot = index) through two tracing-multi links, which it
/// returns (entry, return): closing them detaches every function. Where the kernel has no
/// such links, [`AttachError::TooManyForFentry`] (the limit they would have lifted) unless
/// they were asked for (`forced`); where it refuses them, or has none that were asked for,
/// [`AttachError::TracingMultiRefused`]. Nothing stays attached on an error.
pub(super) fn attach_tracing_multi(
    ebpf: &mut Ebpf,
    targets: &[Target],
    forced: bool,
) -> Result<Vec<OwnedFd>, AttachError> {
    let requested = targets.len();
    let refused = |reason: Reason| AttachError::TracingMultiRefused { requested, reason };
    let (entry_type, exit_type) = match attach_types() {
        Ok(types) => types,
        Err(why) if forced => return Err(refused(Reason::new(why))),
        Err(_) => return Err(AttachError::TooManyForFentry { requested }),
    };
    let btf =
        kernel_btf().map_err(|e| refused(Reason::of(e, |e| format!("no kernel BTF: {e}"))))?;
    let names: Vec<&str> = targets.iter().map(|t| t.symbol.as_str()).collect();
    let ids = btf
        .trampoline_targets(&names)
        .into_iter()
        .zip(targets)
        .map(|(answer, target)| {
            let refused = |why: String| AttachError::Fentry {
                function: target.symbol.clone(),
                reason: Reason::new(why),
            };
            if let Some(why) = module_refusal(target) {
                return Err(refused(why));
            }
            answer.map_err(|why| refused(why.to_string()))
        })
        .collect::<Result<Vec<u32>, _>>()?;
    let cookies: Vec<u64> = (0..requested as u64).collect();
    let load_error = |e: ProgramError| refused(Reason::of(e, |e| one_line(e)));
    let entry: &mut FEntry = program(ebpf, FENTRY_MULTI_PROGRAM)?;
    entry.load_for_multi(entry_type).map_err(load_error)?;
    let entry_fd = entry.fd().map_err(load_error)?.as_fd();
    let entry_link = match link(entry_fd, entry_type, &ids, &cookies) {
        Ok(link) => link,
        // The kernel refuses the whole link for one function it cannot take, and says not
        // which: found by halves, the run's error names it, as fentry/fexit pairs' would.
        // EOPNOTSUPP: no such links on this architecture (arm64's 7.2 has the attach types).
        Err(reason) if errno(&reason) == Some(libc::EOPNOTSUPP) => return Err(refused(reason)),
        Err(reason) => match first_refused(entry_fd, entry_type, &ids) {
            Some((index, reason)) => {
                return Err(AttachError::Fentry {
                    function: targets[index].symbol.clone(),
                    reason,
                });
            }
            None => return Err(refused(reason)),
        },
    };
    let exit: &mut FExit = program(ebpf, FEXIT_MULTI_PROGRAM)?;
    exit.load_for_multi(exit_type).map_err(load_error)?;
    let exit_link = link(
        exit.fd().map_err(load_error)?.as_fd(),
        exit_type,
        &ids,
        &cookies,
    )
    .map_err(refused)?;
    Ok(vec![entry_link, exit_link])
}

/// The first of `ids` the kernel refuses in a tracing-multi link of `program` on its own, and
/// its reason: the links over halves tried in turn (about 2 × log2 of the count of links), each
/// closed again. `None` when the refusal is not one function's: a function alone is taken,
/// or no link was taken at all and another function alone is refused too (a kernel that has
/// the attach types but makes no such link, as arm64's may).
fn first_refused(
    program: BorrowedFd<'_>,
    attach_type: u32,
    ids: &[u32],
) -> Option<(usize, Reason)> {
    let (mut start, mut end) = (0, ids.len());
    let mut any_taken = false;
    while end - start > 1 {
        let middle = start + (end - start) / 2;
        let cookies = vec![0; middle - start];
        match link(program, attach_type, &ids[start..middle], &cookies) {
            Err(_) => end = middle,
            Ok(_closed) => {
                any_taken = true;
                start = middle;
            }
        }
    }
    let reason = link(program, attach_type, &ids[start..end], &[0]).err()?;
    if !any_taken && ids.len() > 1 {
        let other = if start + 1 < ids.len() {
            start + 1
        } else {
            start - 1
        };
        if link(program, attach_type, &ids[other..=other], &[0]).is_err() {
            return None;
        }
    }
    Some((start, reason))
}

/// The errno under `reason`, where it words one.
fn errno(reason: &Reason) -> Option<i32> {
    reason
        .error()?
        .downcast_ref::<std::io::Error>()?
        .raw_os_error()
}

/// One tracing-multi link of `program` over the functions `ids`. ENOENT is the kernel's
/// answer for a function it has no ftrace entry for (no trampoline can be placed there).
fn link(
    program: BorrowedFd<'_>,
    attach_type: u32,
    ids: &[u32],
    cookies: &[u64],
) -> Result<OwnedFd, Reason> {
    bpf::link_create_tracing_multi(program, attach_type, ids, cookies).map_err(|e| {
        Reason::of(e, |e| match e.raw_os_error() {
            Some(libc::ENOENT) => format!(
                "creating the tracing-multi link: {e}: a function without an ftrace entry \
                 (not in /sys/kernel/tracing/available_filter_functions)"
            ),
            _ => format!("creating the tracing-multi link: {e}"),
        })
    })
}

/// Unloads the two programs (their links are closed by whoever holds them).
pub(super) fn unload_tracing_multi(ebpf: &mut Ebpf) {
    if let Some(Ok(program)) = ebpf
        .program_mut(FENTRY_MULTI_PROGRAM)
        .map(<&mut FEntry>::try_from)
    {
        let _ = program.unload();
    }
    if let Some(Ok(program)) = ebpf
        .program_mut(FEXIT_MULTI_PROGRAM)
        .map(<&mut FExit>::try_from)
    {
        let _ = program.unload();
    }
}
