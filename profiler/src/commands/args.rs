//! Argument groups more than one command flattens into its own, and their conversion into the
//! domain types below the command layer ([`crate::session`], [`crate::attach::Mode`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use clap::Args;

use profiler_common::DEFAULT_MAX_KEYS;

use crate::attach::{FentryAttach, KprobeAttach, Mechanisms, Mode, SyscallMode};
use crate::model::{ByError, ByField, FilterError, FilterExpr, KeySpec};
use crate::session::{FilterSpec, ProbeSpec, SpecError, Targets};
use crate::units::parse_duration;

/// Functions `--fn` may match unless `--max-functions` says otherwise.
pub const DEFAULT_MAX_FUNCTIONS: usize = 1000;

/// Distinct stacks kept in the kernel unless `--stack-map-size` says otherwise.
pub const DEFAULT_STACK_MAP_SIZE: u32 = 16384;

/// What to probe and whose calls count: shared by the default command and `serve`.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Kernel function (or glob) to time; repeat, or separate with commas, for several. GCC
    /// clones (.isra/.constprop/.part) are resolved automatically.
    #[arg(long = "fn", value_name = "FUNC|GLOB", value_delimiter = ',')]
    pub functions: Vec<String>,

    /// Syscall to time via its sys_enter/sys_exit tracepoints (no kprobes needed); repeat, or
    /// separate with commas (`getpid,read`), for several.
    #[arg(long = "syscall", value_name = "NAME", value_delimiter = ',')]
    pub syscalls: Vec<String>,

    /// Probe mechanism for --fn.
    #[arg(long, value_enum, default_value_t = ModeArg::Auto)]
    pub mode: ModeArg,

    /// Probe mechanism for --syscall: the per-syscall perf tracepoints
    /// (syscalls:sys_enter_NAME) or the raw tracepoints every syscall passes
    /// (raw_syscalls:sys_enter, found by number). The report's mode says which ran.
    #[arg(long, value_enum, default_value_t = SyscallModeArg::Auto)]
    pub syscall_mode: SyscallModeArg,

    /// Ignore calls faster than this (they are still counted).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", allow_hyphen_values = true)]
    pub min_latency: Option<Duration>,

    /// Skip measuring hotprof's own per-call overhead at start-up.
    #[arg(long)]
    pub no_calibrate: bool,

    /// In kprobe mode, attach a perf kprobe and kretprobe per function, as on kernels before
    /// 5.18, instead of one kprobe.multi link for all of them (which attaches and detaches
    /// 1000 functions in seconds rather than minutes): to compare the two, or to rule out
    /// the kernel's fprobe.
    #[arg(long)]
    pub no_kprobe_multi: bool,

    /// In kprobe mode, time a lone function through the kprobe.multi link's frame stack
    /// instead of a kprobe.session link (Linux 6.10+), which keeps each call's entry time in
    /// the call itself and costs less, but sees no nesting: a recursive function's outermost
    /// calls and self time are not reported.
    #[arg(long)]
    pub no_kprobe_session: bool,

    /// In fentry mode, time a lone function with an fentry/fexit pair and its frame stack
    /// instead of one fsession program (Linux 7.0+), which keeps each call's entry time in
    /// the call itself and costs less, but sees no nesting: a recursive function's outermost
    /// calls and self time are not reported.
    #[arg(long)]
    pub no_fsession: bool,

    /// In fentry mode, attach the functions through two tracing-multi links (Linux 7.x,
    /// x86-64: one fentry.multi and one fexit.multi program for all of them, each function's
    /// slot its cookie) however few they are. Past 64 functions fentry mode takes them that
    /// way anyway where the kernel has them, as fentry/fexit pairs stop at 64.
    #[arg(long)]
    pub tracing_multi: bool,

    /// Call-site mode: only the call sites in callers matching this glob, or any of several
    /// separated by commas (`_copy_to_user` has hundreds).
    #[arg(long, value_name = "GLOB[,GLOB]")]
    pub callers: Option<String>,

    /// Most functions the --fn globs may match: a limit against a glob that matches far more
    /// than meant. Through a kprobe.multi link (5.18+ with fprobe) a thousand attach in under
    /// a second; as perf kprobes, one at a time, in tens of seconds (docs/bench.md).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_FUNCTIONS)]
    pub max_functions: usize,

    /// Time the functions matching GLOB only while the --fn function is open on the same task,
    /// and report the "where inside it" table: calls per call, share of its time (self time,
    /// so the shares and the parent's own add up to 100 %), p50, p99. Repeat, or separate
    /// with commas, for several.
    /// Example: `hotprof --fn generic_perform_write --children 'shmem_write_*' -- dd ...`.
    #[arg(long, value_name = "GLOB", value_delimiter = ',')]
    pub children: Vec<String>,

    /// Also break each function's calls down by KEY, with a histogram per key value:
    /// argN or argN:log2 (N = 0..5), ret, errno, caller, cpu, pid, tid, comm, cgroup.
    /// Repeat or comma-separate to combine up to 3 (`--by arg2:log2,errno`).
    /// Example: `hotprof --fn vfs_write --by arg2:log2 -- dd if=/dev/zero of=/dev/null bs=4k count=1000`.
    #[arg(long = "by", value_name = "KEY", value_delimiter = ',', value_parser = parse_by_field)]
    pub by: Vec<ByField>,

    /// Record only calls that satisfy EXPR, checked in the kernel: conditions on the --by
    /// fields joined by &&, with ==, !=, <, <=, >, >= (comm: == and != only).
    /// Example: `--filter 'arg2>=4096 && comm==dd'`, `--filter errno==ENOENT`.
    #[arg(long = "filter", value_name = "EXPR", value_parser = parse_filter)]
    pub condition: Option<FilterExpr>,

    /// Distinct --by key values kept per CPU; calls of further values are counted as losses.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_KEYS,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_keys: u32,

    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `--mode`: the values of [`Mode`], as the command line spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// fentry/fexit when BTF and trampolines work (decided by trying), else kprobe.
    Auto,
    /// fentry/fexit only (5.5+, BTF).
    Fentry,
    /// One fsession program (7.0+, BTF) for a lone function with no option that needs frames
    /// (auto and fentry mode pick it for those where the kernel has it).
    Fsession,
    /// kprobe/kretprobe only (4.17+; more than 64 functions: 5.15+).
    Kprobe,
    /// kprobes on each `call FUNC` and the instruction after it, in ftrace-able callers: for
    /// functions without an ftrace location (auto mode picks it for those).
    Callsite,
}

/// `--syscall-mode`: the values of [`SyscallMode`], as the command line spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SyscallModeArg {
    /// raw for a run limited to a command or --pid (every syscall's number known), tracepoint
    /// system-wide, where every other syscall would pay raw's number check, and on Linux 7.0+,
    /// where raw's programs can be preempted and lose calls.
    Auto,
    /// syscalls:sys_enter_NAME/sys_exit_NAME (4.7+): only the traced syscalls run a program.
    Tracepoint,
    /// raw_syscalls:sys_enter/sys_exit (4.17+): no perf record, every syscall checks its number.
    Raw,
}

impl From<SyscallModeArg> for SyscallMode {
    fn from(mode: SyscallModeArg) -> Self {
        match mode {
            SyscallModeArg::Auto => SyscallMode::Auto,
            SyscallModeArg::Tracepoint => SyscallMode::Tracepoint,
            SyscallModeArg::Raw => SyscallMode::Raw,
        }
    }
}

impl From<ModeArg> for Mode {
    fn from(mode: ModeArg) -> Self {
        match mode {
            ModeArg::Auto => Mode::Auto,
            ModeArg::Fentry => Mode::Fentry,
            ModeArg::Fsession => Mode::Fsession,
            ModeArg::Kprobe => Mode::Kprobe,
            ModeArg::Callsite => Mode::Callsite,
        }
    }
}

#[derive(Debug, Args, Default)]
pub struct FilterArgs {
    /// Only these processes (thread-group ids); repeatable.
    #[arg(short = 'p', long = "pid", value_name = "PID", value_parser = clap::value_parser!(u32).range(1..))]
    pub pids: Vec<u32>,
    /// Only this thread.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub tid: Option<u32>,
    /// Only tasks with this command name (as in /proc/PID/comm, at most 15 bytes).
    #[arg(long)]
    pub comm: Option<String>,
    /// Only tasks in this cgroup v2 directory (e.g. /sys/fs/cgroup/system.slice/foo.service).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Only calls entered on this CPU.
    #[arg(long)]
    pub cpu: Option<u32>,
}

/// `--filter`: the domain's own parser, whose errors name the bad token.
fn parse_filter(text: &str) -> Result<FilterExpr, FilterError> {
    text.parse()
}

/// `--by` values: the domain's own parser, whose errors name the bad key.
fn parse_by_field(text: &str) -> Result<ByField, ByError> {
    text.parse()
}

impl ProbeArgs {
    /// The spec, or the one-line reason the `--by` key cannot be used.
    pub fn to_spec(&self) -> anyhow::Result<ProbeSpec> {
        let by = KeySpec::new(self.by.clone())?;
        let targets = match (&self.functions[..], &self.syscalls[..]) {
            ([], []) => {
                bail!("nothing to measure: give --fn FUNC or --syscall NAME (see hotprof --help)")
            }
            ([], syscalls) => Targets::Syscalls(syscalls.to_vec()),
            (functions, []) => Targets::Functions(functions.to_vec()),
            _ => bail!("--fn and --syscall cannot be combined in one run"),
        };
        if self.no_fsession && self.mode == ModeArg::Fsession {
            bail!("--no-fsession and --mode fsession contradict each other: give one");
        }
        if self.tracing_multi
            && matches!(
                self.mode,
                ModeArg::Fsession | ModeArg::Kprobe | ModeArg::Callsite
            )
        {
            bail!("--tracing-multi is fentry mode's: give --mode fentry or leave --mode out");
        }
        Ok(ProbeSpec {
            targets,
            syscall_mode: self.syscall_mode.into(),
            mode: self.mode.into(),
            mechanisms: Mechanisms {
                kprobe: if self.no_kprobe_multi {
                    KprobeAttach::Single
                } else if self.no_kprobe_session {
                    KprobeAttach::Multi
                } else {
                    KprobeAttach::Session
                },
                fentry: if self.tracing_multi {
                    FentryAttach::Multi
                } else if self.no_fsession {
                    FentryAttach::Pairs
                } else {
                    FentryAttach::Fsession
                },
            },
            min_latency: self.min_latency,
            calibrate: !self.no_calibrate,
            callers: self.callers.clone(),
            children: self.children.clone(),
            max_functions: self.max_functions,
            by,
            max_keys: self.max_keys,
            condition: self.condition.clone(),
            filter: self.filter.to_spec(),
        })
    }
}

impl FilterArgs {
    pub fn to_spec(&self) -> FilterSpec {
        FilterSpec {
            pids: self.pids.clone(),
            tid: self.tid,
            comm: self.comm.clone(),
            cgroup: self.cgroup.clone(),
            cpu: self.cpu,
        }
    }
}

/// A session error in the user's words: the options named as they are spelled on the command
/// line (the session knows them only by what they mean). Any other error passes unchanged.
pub fn worded(error: anyhow::Error) -> anyhow::Error {
    let spec = match error.downcast::<SpecError>() {
        Ok(spec) => spec,
        Err(other) => return other,
    };
    let text = match spec {
        SpecError::PidsAndCommand => "give either -p/--pid or a command after --, not both".into(),
        SpecError::SyscallCallerKey => {
            "--by caller needs --fn: a syscall's caller is user space".into()
        }
        SpecError::SyscallCallerFilter => {
            "--filter on caller needs --fn: a syscall's caller is user space".into()
        }
        SpecError::NoKeyRoom => "--max-keys must be at least 1".into(),
        SpecError::NoProcess(pid) => format!("no process with pid {pid}"),
        SpecError::Itself(pid) => {
            format!("-p {pid} is this hotprof itself, whose own calls are never traced")
        }
        SpecError::NoCpu { cpu, last } => format!("--cpu {cpu}: this machine has CPUs 0..{last}"),
        SpecError::Cgroup { path, source } => {
            return anyhow::Error::new(source).context(format!("--cgroup {}", path.display()));
        }
        SpecError::NotCgroup { path } => {
            format!("--cgroup {}: not a cgroup directory", path.display())
        }
        SpecError::Comm(comm) => format!("--comm '{comm}': a command name has 1 to 15 bytes"),
        SpecError::ChildrenNeedOneParent { matched } => format!(
            "--children times functions inside one parent: give one --fn (it matched {matched} \
             functions)"
        ),
        SpecError::ChildrenOnlyParent => "--children matched only the parent itself".into(),
        SpecError::TooManyChildren => {
            "--children: at most 63 child functions and call sites per run (narrow the glob)".into()
        }
        SpecError::CallersWithoutSites => "--callers applies to functions timed at their call \
                                           sites (--mode callsite, or a notrace function in auto \
                                           mode)"
            .into(),
        SpecError::NoMatchingCaller {
            glob,
            function,
            sites,
            callers,
        } => format!(
            "--callers '{glob}' matches no caller of {function} (it has {sites} call sites in \
             {callers} callers; `hotprof list {function}` counts them)"
        ),
        SpecError::SyscallsNeedTracefs => {
            "--syscall needs tracefs (mount -t tracefs tracefs /sys/kernel/tracing)".into()
        }
        SpecError::TooManyFunctions {
            patterns,
            matched,
            max,
        } => {
            let what = patterns
                .iter()
                .map(|f| format!("'{f}'"))
                .collect::<Vec<_>>()
                .join(" ");
            format!(
                "--fn {what} matches {matched} functions, more than --max-functions {max} allows: \
                 each gets its own in-kernel histograms and probes (in a 6.12 test guest 1000 \
                 functions took 14 s to start through the kprobe.multi link, 11 s of it creating \
                 the histograms; through a perf kprobe each, as before Linux 5.18, 31 s to attach \
                 and 83 s to detach); narrow the glob or pass --max-functions {matched}"
            )
        }
        SpecError::CallerNames(source) => {
            return anyhow::Error::new(source).context("--by caller names callers");
        }
    };
    anyhow::Error::msg(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(error: SpecError) -> String {
        format!("{:#}", worded(error.into()))
    }

    #[test]
    fn session_errors_are_worded_with_the_options_as_spelled() {
        assert_eq!(
            said(SpecError::PidsAndCommand),
            "give either -p/--pid or a command after --, not both"
        );
        assert_eq!(
            said(SpecError::NoCpu { cpu: 8, last: 1 }),
            "--cpu 8: this machine has CPUs 0..1"
        );
        assert_eq!(
            said(SpecError::Cgroup {
                path: "/x".into(),
                source: std::io::Error::from_raw_os_error(2),
            }),
            "--cgroup /x: No such file or directory (os error 2)"
        );
        assert_eq!(
            said(SpecError::ChildrenNeedOneParent { matched: 3 }),
            "--children times functions inside one parent: give one --fn (it matched 3 functions)"
        );
        assert_eq!(
            said(SpecError::CallersWithoutSites),
            "--callers applies to functions timed at their call sites (--mode callsite, or a \
             notrace function in auto mode)"
        );
        let too_many = said(SpecError::TooManyFunctions {
            patterns: vec!["vfs_*".into(), "ksys_*".into()],
            matched: 40,
            max: 3,
        });
        assert!(
            too_many.starts_with(
                "--fn 'vfs_*' 'ksys_*' matches 40 functions, more than --max-functions 3 allows: \
                 each gets its own in-kernel histograms and probes (in a 6.12 test guest"
            ),
            "{too_many}"
        );
        assert!(
            too_many.ends_with("narrow the glob or pass --max-functions 40"),
            "{too_many}"
        );
        // Anything else passes as it was.
        assert_eq!(
            format!("{:#}", worded(anyhow::anyhow!("cannot load"))),
            "cannot load"
        );
    }
}
