//! Choosing a probe mode for `--fn` targets: the auto-fallback policy from fentry/fexit
//! (`fsession.rs` for one frameless function, else `fentry.rs`) to kprobe/kretprobe
//! (`kprobe.rs`).

use aya::Ebpf;
use profiler_common::FENTRY_SLOTS;

use super::error::{AttachError, FsessionRefused, Reason, one_line};
use super::fentry::{attach_fentry, detach_fentry};
use super::fsession::{FentryAttach, attach_fsession, detach_fsession};
use super::interrupt::AttachSignals;
use super::kprobe::{AttachedKprobes, attach_kprobes};
use super::links::RunLinks;
use super::modes::{AttachedMode, LinkKind, Mode};
use super::multi::KprobeAttach;
use super::program::kprobes_available;
use super::tracing_multi::{attach_tracing_multi, unload_tracing_multi};
use crate::progress::Progress;
use crate::resolve::Target;

/// Attached function probes: the mode used, notes for the user (fallbacks), and the kprobe
/// links (empty in fentry mode, whose links stay in their programs).
pub struct AttachedFunctions {
    pub mode: AttachedMode,
    pub notes: Vec<String>,
    pub links: RunLinks,
    /// Per target: how it was attached.
    pub kinds: Vec<LinkKind>,
}

/// How each mode attaches a run's functions, within the mode: the run's choice of links.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mechanisms {
    pub kprobe: KprobeAttach,
    pub fentry: FentryAttach,
}

impl Mechanisms {
    /// Every function in a frame of its own: kprobe.multi links and fentry/fexit pairs.
    pub const WITH_FRAMES: Mechanisms = Mechanisms {
        kprobe: KprobeAttach::Multi,
        fentry: FentryAttach::Pairs,
    };
}

/// Attaches the function probes, each in a frame (kprobe mode through a kprobe.multi link
/// where the kernel has one). `progress` shows how far attaching has got (a 1000-function
/// glob takes a while).
pub fn attach_functions(
    ebpf: &mut Ebpf,
    targets: &[Target],
    mode: Mode,
    progress: &mut Progress,
) -> Result<AttachedFunctions, AttachError> {
    attach_functions_with(ebpf, targets, mode, Mechanisms::WITH_FRAMES, progress)
}

/// [`attach_functions`], with each mode attaching as `how` says. SIGINT and SIGTERM are
/// caught meanwhile: one ends the attaching with [`AttachError::Interrupted`], once whatever
/// was attached is detached again.
pub fn attach_functions_with(
    ebpf: &mut Ebpf,
    targets: &[Target],
    mode: Mode,
    how: Mechanisms,
    progress: &mut Progress,
) -> Result<AttachedFunctions, AttachError> {
    let _signals = AttachSignals::catch();
    let mut notes = Vec::new();
    let fentry = |notes, (kinds, links)| AttachedFunctions {
        mode: AttachedMode::Fentry,
        notes,
        links,
        kinds,
    };
    let kprobe = |mut notes: Vec<String>, attached: AttachedKprobes| {
        notes.extend(attached.notes);
        AttachedFunctions {
            mode: AttachedMode::Kprobe,
            notes,
            links: attached.links,
            kinds: attached.kinds,
        }
    };
    match mode {
        Mode::Fentry => {
            let kinds = attach_trampolines(ebpf, targets, how.fentry, progress, &mut notes)?;
            Ok(fentry(notes, kinds))
        }
        // Only where the run needs no frames (which `how` says: one function, no option
        // keeping state per call); the kernel's refusal is the error.
        Mode::Fsession => match (how.fentry, targets) {
            (FentryAttach::Fsession, [target]) => {
                attach_fsession(ebpf, target)?;
                AttachSignals::check("functions (one fsession program)", 1, 1)?;
                Ok(fentry(
                    notes,
                    (vec![LinkKind::Fsession], RunLinks::default()),
                ))
            }
            _ => Err(FsessionRefused::NeedsFrames.into()),
        },
        // Call sites are attached on their own (`attach_call_sites`); a function given here
        // is timed at its entry.
        Mode::Kprobe | Mode::Callsite => {
            let attached = attach_kprobes(ebpf, targets, how.kprobe, progress)?;
            Ok(kprobe(notes, attached))
        }
        Mode::Auto => match attach_trampolines(ebpf, targets, how.fentry, progress, &mut notes) {
            Ok(kinds) => Ok(fentry(notes, kinds)),
            Err(error @ AttachError::Interrupted { .. }) => {
                detach_trampolines(ebpf, targets.len());
                Err(error)
            }
            Err(error) => {
                detach_trampolines(ebpf, targets.len());
                notes.push(fall_back_from_fentry(
                    error,
                    kprobes_available(),
                    crate::kernel_release,
                )?);
                let attached = attach_kprobes(ebpf, targets, how.kprobe, progress)?;
                Ok(kprobe(notes, attached))
            }
        },
    }
}

/// fentry mode's attaching: the fsession program for a run of one function where `how`
/// allows and the kernel has it (7.0+; a note where it has it and refuses); past 64
/// functions (or where `how` says so) tracing-multi links; else an fentry/fexit pair per
/// function. Each target's link kind, and the links not owned by the programs.
fn attach_trampolines(
    ebpf: &mut Ebpf,
    targets: &[Target],
    how: FentryAttach,
    progress: &mut Progress,
    notes: &mut Vec<String>,
) -> Result<(Vec<LinkKind>, RunLinks), AttachError> {
    let forced = how == FentryAttach::Multi;
    if forced || targets.len() > FENTRY_SLOTS as usize {
        let count = targets.len();
        let links = attach_tracing_multi(ebpf, targets, forced)?;
        progress.attaching("functions (two tracing-multi links)", count, count);
        AttachSignals::check("functions (two tracing-multi links)", count, count)?;
        return Ok((
            vec![LinkKind::TracingMulti; count],
            RunLinks {
                kprobes: Vec::new(),
                tracing_multi: links,
            },
        ));
    }
    if let (FentryAttach::Fsession, [target]) = (how, targets) {
        match attach_fsession(ebpf, target) {
            Ok(()) => {
                progress.attaching("fsession functions", 1, 1);
                AttachSignals::check("functions (one fsession program)", 1, 1)?;
                return Ok((vec![LinkKind::Fsession], RunLinks::default()));
            }
            Err(refused) if refused.is_expected() => {}
            Err(refused) => notes.push(format!(
                "{}; using fentry/fexit instead",
                one_line(&refused)
            )),
        }
    }
    attach_fentry(ebpf, targets, progress)?;
    Ok((vec![LinkKind::Fentry; targets.len()], RunLinks::default()))
}

/// Unloads whatever [`attach_trampolines`] left behind.
fn detach_trampolines(ebpf: &mut Ebpf, slots: usize) {
    detach_fsession(ebpf);
    unload_tracing_multi(ebpf);
    detach_fentry(ebpf, slots);
}

/// Auto mode, once fentry/fexit could not be attached (`fentry` says why): the note saying
/// that kprobe/kretprobe is used instead, or, where this kernel has no kprobes either
/// (`kprobes` false), one error naming both reasons. `release` is asked for only then.
fn fall_back_from_fentry(
    fentry: AttachError,
    kprobes: bool,
    release: impl FnOnce() -> String,
) -> Result<String, AttachError> {
    if kprobes {
        return Ok(format!(
            "{}; using kprobe/kretprobe instead",
            fentry.message()
        ));
    }
    let fentry = match fentry {
        AttachError::Fentry { reason, .. } => reason,
        other => {
            let text = other.message();
            Reason::of(other, |_| text)
        }
    };
    Err(AttachError::NoKprobes {
        release: release(),
        fentry: Some(fentry),
    })
}

#[cfg(test)]
mod tests {
    use super::super::error::one_line;
    use super::super::error::testing::{io_error, printed};
    use super::*;

    fn no_release() -> String {
        panic!("the kernel release is only looked up for an error that names it")
    }

    #[test]
    fn auto_mode_falls_back_to_kprobes_with_a_note_saying_why_not_fentry() {
        let refused = AttachError::Fentry {
            function: "vfs_read".into(),
            reason: Reason::of(io_error(libc::EOPNOTSUPP), |e| one_line(e)),
        };
        assert_eq!(
            fall_back_from_fentry(refused, true, no_release).unwrap(),
            "fentry cannot attach to vfs_read: Operation not supported (os error 95); \
             using kprobe/kretprobe instead"
        );
        let too_many = AttachError::TooManyForFentry { requested: 65 };
        assert_eq!(
            fall_back_from_fentry(too_many, true, no_release).unwrap(),
            "fentry mode handles at most 64 functions per run (65 requested): use --mode \
             kprobe; using kprobe/kretprobe instead"
        );
    }

    #[test]
    fn without_kprobes_auto_mode_fails_with_one_error_naming_both_reasons() {
        let refused = AttachError::Fentry {
            function: "vfs_read".into(),
            reason: Reason::of(io_error(libc::EOPNOTSUPP), |e| one_line(e)),
        };
        let error = fall_back_from_fentry(refused, false, || "6.8.0-test".into()).unwrap_err();
        let AttachError::NoKprobes {
            release,
            fentry: Some(fentry),
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!(release, "6.8.0-test");
        // The fentry reason, with the error under it kept; the function is named by the run.
        assert_eq!(fentry.to_string(), "Operation not supported (os error 95)");
        assert!(fentry.error().unwrap().is::<std::io::Error>());
        let text = printed(error);
        assert!(
            text.starts_with("this kernel (6.8.0-test) has no kprobes (no kprobe PMU in "),
            "{text}"
        );
        assert!(
            text.contains(" and fentry is refused (Operation not supported (os error 95)): "),
            "{text}"
        );
        assert!(!text.contains("fentry cannot attach"), "{text}");
        assert!(text.contains("`hotprof --syscall NAME`"), "{text}");

        // Refused for another reason than a function: that whole message is the reason.
        let error = fall_back_from_fentry(
            AttachError::TooManyForFentry { requested: 65 },
            false,
            || "6.8.0-test".into(),
        )
        .unwrap_err();
        let AttachError::NoKprobes {
            fentry: Some(fentry),
            ..
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!(
            fentry.to_string(),
            "fentry mode handles at most 64 functions per run (65 requested): use --mode kprobe"
        );
        assert!(fentry.error().unwrap().is::<AttachError>());
    }
}
