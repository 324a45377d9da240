//! Why attaching failed, in hotprof's words: [`AttachError`] and the [`Reason`] under it,
//! each one line.

use std::fmt;

use profiler_common::{FENTRY_SLOTS, KPROBE_SLOTS, SYSCALL_SLOTS};

use super::btf::KernelBtfError;

/// Why probes could not be attached.
///
/// A variant with a [`Reason`] words only its own part (`fentry cannot attach to vfs_read`);
/// the reason is its `source()`, so hotprof's one-line error (`{:#}`: every source joined with
/// ": ") reads `fentry cannot attach to vfs_read: REASON`, as it always has. [`Self::message`]
/// is that line, for notes.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error(
        "this kernel ({release}) has no kprobes (no kprobe PMU in /sys/bus/event_source/devices){}: \
         kernel functions cannot be probed here; `hotprof --syscall NAME` and `hotprof sample` still \
         work, or run inside a VM with a kprobe-enabled kernel: `cargo xtask vm -- hotprof --fn ...`",
        .fentry.as_ref().map(|f| format!(" and fentry is refused ({f})")).unwrap_or_default()
    )]
    NoKprobes {
        release: String,
        /// Why fentry was refused, where it was tried first (auto mode). Not the source: the
        /// message names it in passing.
        fentry: Option<Reason>,
    },
    #[error("fentry cannot attach to {function}")]
    Fentry {
        function: String,
        #[source]
        reason: Reason,
    },
    #[error(
        "fentry mode handles at most {FENTRY_SLOTS} functions per run ({requested} requested): use --mode kprobe"
    )]
    TooManyForFentry { requested: usize },
    /// Tracing-multi links refused (past `FENTRY_SLOTS` functions, or `--tracing-multi`).
    #[error(
        "the kernel refused tracing-multi links for {requested} function(s): {reason}; without them fentry mode takes at most {FENTRY_SLOTS} functions (kprobe mode any number)"
    )]
    TracingMultiRefused { requested: usize, reason: Reason },
    /// `--mode fsession` refused: the kernel's reason, or a run that needs frames.
    #[error(transparent)]
    Fsession(#[from] FsessionRefused),
    #[error("kprobe cannot attach to {function}")]
    Kprobe {
        function: String,
        #[source]
        reason: Reason,
    },
    #[error(
        "more than {KPROBE_SLOTS} functions in kprobe mode needs Linux 5.15+ (bpf_get_func_ip), \
         which this kernel ({release}) lacks: probe at most {KPROBE_SLOTS} functions per run \
         ({requested} requested)"
    )]
    TooManyForKprobe { release: String, requested: usize },
    #[error(
        "call-site mode has {KPROBE_SLOTS} kprobe slots per run, one for each function timed at \
         its entry and at least one for each timed at its call sites ({requested} needed): \
         narrow the --fn globs"
    )]
    TooManyCallSites { requested: usize },
    #[error("kprobe cannot attach at {site}")]
    CallSite {
        site: String,
        #[source]
        reason: Reason,
    },
    #[error("at most {SYSCALL_SLOTS} syscalls per run ({requested} requested)")]
    TooManySyscalls { requested: usize },
    #[error(
        "unknown syscall '{name}': {}{}",
        .elsewhere.map_or(format!("no tracepoint syscalls/sys_enter_{name}"), |other| format!(
            "{} has it, {} does not",
            other.name(),
            crate::arch::Arch::NATIVE.name()
        )),
        crate::resolve::did_you_mean(.suggestions)
    )]
    UnknownSyscall {
        name: String,
        /// Another architecture that has it (a command line carried over from there).
        elsewhere: Option<crate::arch::Arch>,
        suggestions: Vec<String>,
    },
    #[error(
        "--syscall-mode raw: no {} syscall number known for '{name}' (use --syscall-mode tracepoint)",
        crate::arch::Arch::NATIVE.name()
    )]
    NoSyscallNumber { name: String },
    #[error("cannot attach tracepoint {tracepoint}")]
    Tracepoint {
        tracepoint: String,
        #[source]
        reason: Reason,
    },
    #[error(
        "interrupted by {} while attaching, after {progress}; every probe attached so far \
         was detached",
        crate::sys::signal::name(*.signal)
    )]
    Interrupted {
        /// The signal's number (SIGINT or SIGTERM).
        signal: libc::c_int,
        /// How far attaching got: `312 of 1000 kprobes`.
        progress: String,
    },
    #[error("internal")]
    Internal(#[source] Reason),
}

impl AttachError {
    /// The whole message on one line: this error's words, then its reason (what hotprof's
    /// error line shows).
    pub fn message(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }
}

/// Why an attach step failed, in hotprof's words: a sentence of its own, or the underlying
/// error on one line ([`one_line`]: with the causes aya nests in it, such as the errno), with
/// any context hotprof puts around it.
///
/// The underlying error is kept ([`Reason::error`]) but is not this one's `source()`: its text
/// and its causes' are already here, and an error line that follows sources would repeat
/// them (and could print a whole verifier log, which [`one_line`] shortens).
#[derive(Debug)]
pub struct Reason {
    text: String,
    error: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Reason {
    /// A reason with no error under it.
    pub(super) fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            error: None,
        }
    }

    /// `error`, worded by `describe` (usually [`one_line`]).
    pub(super) fn of<E>(error: E, describe: impl FnOnce(&E) -> String) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Self {
            text: describe(&error),
            error: Some(Box::new(error)),
        }
    }

    /// This reason with `hint` after it, in parentheses.
    pub(super) fn with_hint(self, hint: &str) -> Self {
        Self {
            text: format!("{} ({hint})", self.text),
            ..self
        }
    }

    /// The error this reason words, if there is one (aya's, mostly).
    pub fn error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.error.as_deref()
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Reason {}

/// Why the kernel refused a kprobe, with what EINVAL means there.
pub(super) fn kprobe_refusal(error: &dyn std::error::Error) -> String {
    let text = one_line(error);
    if text.contains("os error 22") {
        format!(
            "{text}: the kernel does not allow a kprobe at this function's entry \
             (noinstr code, a jump label or BUG site there); probe a caller instead"
        )
    } else {
        text
    }
}

/// Why the kernel refuses a kprobe inside a function: EINVAL there is an instruction it will
/// not probe, not an entry it keeps out of reach.
pub(super) fn callsite_refusal(error: &dyn std::error::Error) -> String {
    let text = one_line(error);
    if text.contains("os error 22") {
        format!(
            "{text}: the kernel will not probe this address (an instruction it cannot \
             single-step or emulate, or a range kept from kprobes)"
        )
    } else {
        text
    }
}

/// An error and its causes on one line (aya nests the useful part, e.g. the errno).
pub fn one_line(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    let text = without_empty_verifier_log(&text.replace('\n', " "));
    // A verifier log can be megabytes; its end says why the program was rejected.
    const KEEP: usize = 400;
    if text.len() > 2 * KEEP {
        let head_end = text.floor_char_boundary(KEEP);
        let tail_start = text.ceil_char_boundary(text.len() - KEEP);
        format!("{} [...] {}", &text[..head_end], &text[tail_start..])
    } else {
        text
    }
}

/// aya's load error with nothing after "Verifier output:" (the kernel refused the load
/// before the verifier ran, e.g. EPERM), without that dangling clause.
fn without_empty_verifier_log(text: &str) -> String {
    const CLAUSE: &str = ". Verifier output:";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(CLAUSE) {
        let after = &rest[at + CLAUSE.len()..];
        let log = after.trim_start();
        out.push_str(&rest[..at]);
        if log.is_empty() || log.starts_with([')', ':', ';']) {
            rest = log;
        } else {
            out.push_str(CLAUSE);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Errors as the kernel and aya give them, for the tests of `attach/`.
#[cfg(test)]
pub(super) mod testing {
    use aya::programs::ProgramError;

    use super::AttachError;

    pub fn io_error(errno: i32) -> std::io::Error {
        std::io::Error::from_raw_os_error(errno)
    }

    pub fn load_error(verifier_log: &str) -> ProgramError {
        ProgramError::LoadError {
            io_error: io_error(libc::EINVAL),
            verifier_log: aya_obj::VerifierLog::new(verifier_log.into()),
        }
    }

    /// The error hotprof prints: the error and its sources joined with ": " (`{:#}`).
    pub fn printed(error: AttachError) -> String {
        format!("{:#}", anyhow::Error::new(error))
    }
}

/// Why the fsession program was not used (the fentry/fexit pair is tried next).
#[derive(Debug, thiserror::Error)]
pub enum FsessionRefused {
    /// A kernel before 7.0: not worth a note.
    #[error("this kernel has no fsession (Linux 7.0): no BPF_TRACE_FSESSION in its BTF")]
    NoAttachType,
    #[error("fsession needs the kernel's BTF: {0}")]
    NoBtf(#[source] KernelBtfError),
    /// The object loaded for this run has no fsession program (the 5.10 one).
    #[error("this run's eBPF object has no fsession program")]
    NoProgram,
    #[error("fsession cannot attach to {function}: {reason}")]
    Refused { function: String, reason: Reason },
    /// `--mode fsession` for a run that needs frames.
    #[error(
        "fsession mode times one function with none of --by, --filter, --stacks, --slowest, \
         --off-cpu, --children or sample's --inside (they need a frame per call): use --mode fentry"
    )]
    NeedsFrames,
}

impl FsessionRefused {
    /// Whether this is only a kernel without fsession (before 7.0), without BTF (which fentry
    /// needs as well) or an object without the program, not a failure to report.
    pub fn is_expected(&self) -> bool {
        !matches!(
            self,
            FsessionRefused::Refused { .. } | FsessionRefused::NeedsFrames
        )
    }
}

#[cfg(test)]
mod tests {
    use aya::programs::ProgramError;

    use super::testing::{io_error, load_error, printed};
    use super::*;

    #[test]
    fn errors_with_a_reason_print_as_one_line_that_ends_with_it() {
        let kprobe = AttachError::Kprobe {
            function: "vfs_read".into(),
            reason: Reason::of(io_error(libc::EACCES), |e| kprobe_refusal(e)),
        };
        let line = "kprobe cannot attach to vfs_read: Permission denied (os error 13)";
        assert_eq!(kprobe.to_string(), "kprobe cannot attach to vfs_read");
        assert_eq!(kprobe.message(), line);
        // The reason ends the chain: its text already holds the error's own causes.
        let reason = std::error::Error::source(&kprobe).expect("the reason is the source");
        assert!(reason.source().is_none());
        assert_eq!(printed(kprobe), line);

        let tracepoint = AttachError::Tracepoint {
            tracepoint: "sched/sched_process_exit".into(),
            reason: Reason::of(load_error("R1 invalid mem access 'scalar'\n"), |e| {
                one_line(e)
            }),
        };
        assert_eq!(
            tracepoint.message(),
            "cannot attach tracepoint sched/sched_process_exit: the BPF_PROG_LOAD syscall \
             returned Invalid argument (os error 22). Verifier output: R1 invalid mem access \
             'scalar' "
        );
        let internal = AttachError::Internal(Reason::new("FUNC_IPS map missing"));
        assert_eq!(printed(internal), "internal: FUNC_IPS map missing");
        // Without a reason, the message is the error's own words.
        let too_many = AttachError::TooManySyscalls { requested: 17 };
        assert_eq!(too_many.message(), too_many.to_string());
        assert!(std::error::Error::source(&too_many).is_none());
    }

    /// A load refused before the verifier ran (EPERM) has an empty log: the clause that
    /// would introduce it is left out, wherever it stands in the line.
    #[test]
    fn an_empty_verifier_log_leaves_no_dangling_clause() {
        let refused = "the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1)";
        let with_empty = format!("{refused}. Verifier output: ");
        assert_eq!(without_empty_verifier_log(&with_empty), refused);
        assert_eq!(
            without_empty_verifier_log(&format!("fentry is refused ({with_empty}): use --syscall")),
            format!("fentry is refused ({refused}): use --syscall")
        );
        let with_log = "returned Invalid argument (os error 22). Verifier output: R1 invalid";
        assert_eq!(without_empty_verifier_log(with_log), with_log);
        let error = load_error("");
        assert!(
            !one_line(&error).contains("Verifier output"),
            "{}",
            one_line(&error)
        );
    }

    #[test]
    fn a_reason_keeps_the_error_it_words() {
        let reason = Reason::of(load_error("x"), |e| one_line(e));
        let kept = reason
            .error()
            .and_then(|e| e.downcast_ref::<ProgramError>());
        assert!(
            matches!(kept, Some(ProgramError::LoadError { io_error, .. })
                if io_error.raw_os_error() == Some(libc::EINVAL)),
            "{kept:?}"
        );
        assert!(Reason::new("no error here").error().is_none());
    }

    #[test]
    fn a_kprobe_refused_with_einval_says_what_the_kernel_does_not_allow() {
        let einval = kprobe_refusal(&io_error(libc::EINVAL));
        assert!(
            einval
                .starts_with("Invalid argument (os error 22): the kernel does not allow a kprobe"),
            "{einval}"
        );
        assert!(einval.ends_with("probe a caller instead"), "{einval}");
        assert_eq!(
            kprobe_refusal(&io_error(libc::ENOENT)),
            "No such file or directory (os error 2)"
        );
    }

    #[test]
    fn too_many_kprobes_for_the_kernel_is_one_line_naming_what_is_missing() {
        let text = AttachError::TooManyForKprobe {
            release: "5.10.0-30-cloud-amd64".into(),
            requested: 65,
        }
        .to_string();
        assert!(
            text.starts_with(
                "more than 64 functions in kprobe mode needs Linux 5.15+ (bpf_get_func_ip)"
            ),
            "{text}"
        );
        assert!(text.contains("5.10.0-30-cloud-amd64"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }
}
