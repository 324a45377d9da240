//! The probe modes by name: the mode asked for (`--mode`) and the mechanism in use. A leaf,
//! so that the mechanisms and the policy choosing between them (`mode.rs`) can all name them.

/// Which mechanism to attach `--fn` targets with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// fentry/fexit when BTF and trampolines work (decided by trying), else kprobe.
    #[default]
    Auto,
    /// fentry/fexit only (5.5+, BTF).
    Fentry,
    /// One fsession program only (7.0+, BTF): a lone function that needs no frames.
    Fsession,
    /// kprobe/kretprobe only (4.17+; more than 64 functions: 5.15+).
    Kprobe,
    /// kprobes on each `call F` and the instruction after it (4.17+): for functions without
    /// an ftrace location, which refuse kprobes inside themselves.
    Callsite,
}

/// How one function, call site or syscall is attached: each slot's own mechanism (in kprobe
/// mode, perf kprobes and one kprobe.multi link may share a run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkKind {
    /// An fentry/fexit pair.
    Fentry,
    /// fentry mode's fsession program (a trampoline at both sides; no frames).
    Fsession,
    /// fentry mode's tracing-multi links (fentry.multi/fexit.multi; each call in a frame).
    TracingMulti,
    /// A perf kprobe and kretprobe (a function's entry), or a call site's pair of kprobes.
    Perf,
    /// kprobe mode's kprobe.multi link (an fprobe, not a perf kprobe).
    Multi,
    /// kprobe mode's kprobe.session link (an fprobe; no frames).
    Session,
    /// A syscall's tracepoints (perf or raw: [`AttachedMode`] says which).
    Tracepoint,
}

/// The mechanism actually in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachedMode {
    Fentry,
    Kprobe,
    /// `syscalls:sys_enter_NAME`/`sys_exit_NAME` perf tracepoints.
    Syscall,
    /// `raw_syscalls:sys_enter`/`sys_exit` raw tracepoints (see `syscalls.rs`).
    RawSyscall,
    /// Every function at its call sites.
    Callsite,
    /// No function or syscall timed: `hotprof sample`'s perf-event sampler alone.
    Sampling,
}

impl AttachedMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fentry => "fentry",
            Self::Kprobe => "kprobe",
            Self::Syscall => "syscall",
            Self::RawSyscall => "raw_syscall",
            Self::Callsite => "callsite",
            Self::Sampling => "sampling",
        }
    }
}
