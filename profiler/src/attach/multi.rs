//! kprobe mode through one kprobe.multi link per side (Linux 5.18+, fprobe): every function
//! of the run attached by one `BPF_LINK_CREATE` for the entries and one for the returns, each
//! function's cookie being its id. A link attaches and detaches its functions in one ftrace
//! update, where perf kprobes take one registration (and one RCU grace period to detach)
//! each: 1000 functions took 30.9 s to attach and 83 s to detach that way in a 6.12 test
//! guest.
//!
//! aya 0.14 cannot load a program for this link nor create it; `third_party/aya` is aya
//! 0.14.0 with the two methods added (see its `HOTPROF-PATCH.md`).
//!
//! fprobe attaches only what ftrace can trace (`available_filter_functions`); the other
//! functions (notrace, or unknown without tracefs and then refused) are attached as perf
//! kprobes in the same run, and where the kernel has no such link (before 5.18, or without
//! `CONFIG_FPROBE`) all of them are.

use aya::{
    Ebpf,
    programs::{KProbe, ProgramError},
};
use aya_obj::generated::bpf_func_id;

use super::error::{Reason, one_line};
use super::links::RunLinks;
use super::program::{program, refuses_helper, take};
use super::session_link::{SessionRefused, attach_session};
use crate::resolve::Target;

/// The entry program of the link.
pub const MULTI_ENTRY: &str = "kprobe_multi_entry";
/// The return program of the link.
pub const MULTI_EXIT: &str = "kretprobe_multi_exit";

/// How kprobe mode attaches its functions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KprobeAttach {
    /// One kprobe.session link (6.10+, [`super::session_link`]) where the kernel has it and
    /// ftrace lists every function; else as `Multi`. The run decides whether it can do
    /// without frames (`mechanisms` in `session/start.rs`).
    #[default]
    Session,
    /// A kprobe.multi link for the functions ftrace can trace, where the kernel has it; perf
    /// kprobes for the rest (`--no-kprobe-session`).
    Multi,
    /// A perf kprobe and kretprobe per function, as before kprobe.multi (`--no-kprobe-multi`).
    Single,
}

impl KprobeAttach {
    /// Attaches `target` alone with this kind's link through the run's own code
    /// ([`attach_multi`], [`attach_session`]) and drops it at once: `hotprof doctor` asks the
    /// kernel this way, so that its answer is what a run gets. `Single` has no link to try.
    pub fn try_link(self, ebpf: &mut Ebpf, target: &Target) -> Result<(), LinkRefused> {
        match self {
            KprobeAttach::Session => attach_session(ebpf, target)
                .map(drop)
                .map_err(LinkRefused::Session),
            KprobeAttach::Multi => attach_multi(ebpf, std::slice::from_ref(target), &[0])
                .map(drop)
                .map_err(LinkRefused::Multi),
            KprobeAttach::Single => Ok(()),
        }
    }
}

/// Why [`KprobeAttach::try_link`] created no link.
#[derive(Debug, thiserror::Error)]
pub enum LinkRefused {
    #[error(transparent)]
    Multi(MultiRefused),
    #[error(transparent)]
    Session(SessionRefused),
}

impl LinkRefused {
    /// The kernel's error when its program loaded and the kernel refused the link itself
    /// (`EOPNOTSUPP` without `CONFIG_FPROBE`); None when it got no further than loading.
    pub fn kernel_refusal(&self) -> Option<&std::io::Error> {
        let reason = match self {
            LinkRefused::Multi(MultiRefused::Link { reason })
            | LinkRefused::Session(SessionRefused::Link { reason }) => reason,
            _ => return None,
        };
        let mut error = reason
            .error()
            .map(|e| e as &(dyn std::error::Error + 'static));
        while let Some(cause) = error {
            if let Some(io_error) = cause.downcast_ref::<std::io::Error>() {
                return Some(io_error);
            }
            error = cause.source();
        }
        None
    }
}

/// Why the kprobe.multi link was not used; the functions are attached as perf kprobes instead.
#[derive(Debug, thiserror::Error)]
pub enum MultiRefused {
    #[error("loading {program} for a kprobe.multi link: {reason}")]
    Load {
        program: &'static str,
        reason: Reason,
    },
    #[error("the kernel refused a kprobe.multi link: {reason}")]
    Link { reason: Reason },
}

/// Which of `targets` (by index) go through the link: those ftrace lists or that no tracefs
/// said anything about (the kernel then decides for all of them); the others are perf kprobes.
pub fn split_for_multi(targets: &[Target]) -> (Vec<usize>, Vec<usize>) {
    (0..targets.len()).partition(|&id| targets[id].traceable != Some(false))
}

/// Attaches `ids` (indexes into `targets`, each function's id) with the return link first,
/// then the entry link: the kernel runs the newest ftrace handler on a function first, so
/// each entry reads the return address before the return side's rethook replaces it (before
/// 6.14; the function-graph tracer after replaces it only after every entry handler ran).
/// On failure nothing stays attached.
pub fn attach_multi(
    ebpf: &mut Ebpf,
    targets: &[Target],
    ids: &[usize],
) -> Result<RunLinks, MultiRefused> {
    let functions: Vec<(u64, u64)> = ids
        .iter()
        .map(|&id| (targets[id].address, id as u64))
        .collect();
    let mut links = RunLinks::default();
    for name in [MULTI_EXIT, MULTI_ENTRY] {
        let program = loaded_for_multi(ebpf, name)?;
        let id = program
            .attach_multi(&functions)
            .map_err(|e| MultiRefused::Link {
                reason: Reason::of(e, |e| one_line(e)),
            })?;
        let link = take(program.take_link(id)).map_err(|e| MultiRefused::Link {
            reason: Reason::of(e, |e| e.message()),
        })?;
        links.kprobes.push(link);
    }
    Ok(links)
}

/// `name`, loaded for a kprobe.multi link (once: a second attempt in the same run reuses it).
fn loaded_for_multi<'a>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut KProbe, MultiRefused> {
    let refused = |reason| MultiRefused::Load {
        program: name,
        reason,
    };
    let program: &mut KProbe =
        program(ebpf, name).map_err(|e| refused(Reason::of(e, |e| e.message())))?;
    if program.fd().is_err() {
        program
            .load_for_multi_link()
            .map_err(|e| refused(load_reason(e)))?;
    }
    Ok(program)
}

/// Why a link program did not load, in one line: a verifier that does not know
/// `bpf_get_attach_cookie` (before 5.15) is a kernel without kprobe.multi links (5.18), said so
/// rather than with its log.
fn load_reason(error: ProgramError) -> Reason {
    let old_kernel = matches!(&error, ProgramError::LoadError { verifier_log, .. }
        if refuses_helper(&verifier_log.to_string(), bpf_func_id::BPF_FUNC_get_attach_cookie));
    if old_kernel {
        Reason::of(error, |_| {
            "this kernel has no bpf_get_attach_cookie (Linux 5.15), nor kprobe.multi links (5.18)"
                .into()
        })
    } else {
        Reason::of(error, |e| one_line(e))
    }
}

/// The note saying that `count` functions are attached as perf kprobes although kprobe.multi
/// was wanted: ftrace cannot trace them (`refused` None), or the link failed.
pub fn single_note(count: usize, refused: Option<&MultiRefused>) -> String {
    match refused {
        None => format!(
            "{count} function(s) not in available_filter_functions, which kprobe.multi cannot \
             attach: using a perf kprobe/kretprobe each"
        ),
        Some(refused) => format!(
            "{}; using a perf kprobe/kretprobe per function instead",
            error_line(refused)
        ),
    }
}

/// `error` on one line, its reason included.
fn error_line(error: &MultiRefused) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if !text.contains(&cause.to_string()) {
            text.push_str(": ");
            text.push_str(&cause.to_string());
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(symbol: &str, traceable: Option<bool>) -> Target {
        Target {
            symbol: symbol.into(),
            address: 0x1000,
            traceable,
            note: None,
            module: None,
        }
    }

    #[test]
    fn functions_ftrace_cannot_trace_are_left_to_perf_kprobes() {
        let targets = [
            target("vfs_read", Some(true)),
            target("memcpy_notrace", Some(false)),
            target("no_tracefs", None),
            target("vfs_write", Some(true)),
        ];
        assert_eq!(split_for_multi(&targets), (vec![0, 2, 3], vec![1]));
        assert_eq!(split_for_multi(&[]), (vec![], vec![]));
    }

    #[test]
    fn a_kernel_without_attach_cookies_is_said_to_lack_the_link() {
        // 5.10's verifier on kretprobe_multi_exit: helper 174 is past its last one.
        let error = ProgramError::LoadError {
            io_error: std::io::Error::from_raw_os_error(libc::EINVAL),
            verifier_log: aya_obj::VerifierLog::new(
                "0: (85) call unknown#174\ninvalid func unknown#174\n".into(),
            ),
        };
        let refused = MultiRefused::Load {
            program: MULTI_EXIT,
            reason: load_reason(error),
        };
        assert_eq!(
            single_note(1, Some(&refused)),
            "loading kretprobe_multi_exit for a kprobe.multi link: this kernel has no \
             bpf_get_attach_cookie (Linux 5.15), nor kprobe.multi links (5.18); using a perf \
             kprobe/kretprobe per function instead"
        );
    }

    #[test]
    fn only_a_refused_link_gives_the_kernel_error() {
        // As the patched aya's attach_multi/attach_session return a refused BPF_LINK_CREATE.
        let refused_link = || {
            let error = ProgramError::SyscallError(aya::sys::SyscallError {
                call: "bpf_link_create",
                io_error: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            });
            Reason::of(error, |e| one_line(e))
        };
        let multi = LinkRefused::Multi(MultiRefused::Link {
            reason: refused_link(),
        });
        let session = LinkRefused::Session(SessionRefused::Link {
            reason: refused_link(),
        });
        for refused in [multi, session] {
            assert_eq!(
                refused.kernel_refusal().map(|e| e.raw_os_error()),
                Some(Some(libc::EOPNOTSUPP)),
                "{refused}"
            );
        }
        let not_loaded = LinkRefused::Multi(MultiRefused::Load {
            program: MULTI_ENTRY,
            reason: Reason::of(std::io::Error::from_raw_os_error(libc::EPERM), |e| {
                one_line(e)
            }),
        });
        assert!(not_loaded.kernel_refusal().is_none());
        assert_eq!(
            not_loaded.to_string(),
            "loading kprobe_multi_entry for a kprobe.multi link: Operation not permitted (os \
             error 1)"
        );
        let old = LinkRefused::Session(SessionRefused::NoKfunc {
            kfunc: "bpf_session_is_return",
        });
        assert!(old.kernel_refusal().is_none());
    }

    #[test]
    fn notes_say_why_functions_are_perf_kprobes() {
        assert_eq!(
            single_note(2, None),
            "2 function(s) not in available_filter_functions, which kprobe.multi cannot \
             attach: using a perf kprobe/kretprobe each"
        );
        let refused = MultiRefused::Link {
            reason: Reason::of(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP), |e| {
                one_line(e)
            }),
        };
        assert_eq!(
            single_note(5, Some(&refused)),
            "the kernel refused a kprobe.multi link: Operation not supported (os error 95); \
             using a perf kprobe/kretprobe per function instead"
        );
    }
}
