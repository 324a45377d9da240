//! Why a spec cannot run, in the session's own terms. No option is spelled here: the command
//! layer, which knows how the user named each one, words these (`commands::args::worded`).
//! The `Display` below is what shows should an error ever reach the user unworded.

use std::path::PathBuf;

/// A spec the system, or the session's rules, cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("both processes and a command to follow")]
    PidsAndCommand,
    #[error("a syscall's caller is user space: it cannot key the calls")]
    SyscallCallerKey,
    #[error("a syscall's caller is user space: it cannot filter the calls")]
    SyscallCallerFilter,
    #[error("keys asked for, but room for none")]
    NoKeyRoom,
    #[error("no process with pid {0}")]
    NoProcess(u32),
    #[error("pid {0} is this hotprof itself, whose own calls are never traced")]
    Itself(u32),
    #[error("CPU {cpu}: this machine has CPUs 0..{last}")]
    NoCpu { cpu: u32, last: u32 },
    #[error("cgroup {}", .path.display())]
    Cgroup {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cgroup {}: not a cgroup directory", .path.display())]
    NotCgroup { path: PathBuf },
    #[error("command name '{0}': a command name has 1 to 15 bytes")]
    Comm(String),
    /// Children are timed inside one parent; the functions matched `matched`.
    #[error("children are timed inside one parent function ({matched} matched)")]
    ChildrenNeedOneParent { matched: usize },
    #[error("the children matched only the parent itself")]
    ChildrenOnlyParent,
    #[error("more than 63 child functions and call sites")]
    TooManyChildren,
    #[error("callers apply to functions timed at their call sites")]
    CallersWithoutSites,
    /// `glob` matches none of `function`'s callers, of `callers` with `sites` call sites.
    #[error("callers '{glob}' match no caller of {function}")]
    NoMatchingCaller {
        glob: String,
        function: String,
        sites: usize,
        callers: usize,
    },
    #[error("syscalls are timed at tracepoints, and there is no tracefs")]
    SyscallsNeedTracefs,
    /// The function patterns matched more functions than the run allows.
    #[error("{} functions matched, more than {max} allowed", .matched)]
    TooManyFunctions {
        patterns: Vec<String>,
        matched: usize,
        max: usize,
    },
    /// The kernel's symbols, needed to name callers in keys, could not be read.
    #[error("naming callers needs the kernel's symbols")]
    CallerNames(#[source] std::io::Error),
}
