//! The run's specification, as plain domain structs the command layer fills in: what to
//! probe ([`ProbeSpec`], its [`Targets`]), whose calls count ([`FilterSpec`], and [`Filters`] as the probes
//! compare them), and what the run attaches for ([`SessionSpec`]); [`Probed`] is one slot
//! of what was asked for and attached.

use std::path::PathBuf;
use std::time::Duration;

use profiler_common::StackCapture;

use crate::attach::{self, LinkKind, Mode};
use crate::model::{FilterExpr, KeySpec, PmuEvent};

/// What a run times: kernel functions or syscalls, never both.
#[derive(Clone, Debug, Default)]
pub enum Targets {
    /// Neither: `hotprof sample`'s sampler alone.
    #[default]
    Nothing,
    /// Kernel functions or globs.
    Functions(Vec<String>),
    /// Syscalls, timed at their tracepoints.
    Syscalls(Vec<String>),
}

impl Targets {
    /// The functions named (none for syscalls).
    pub fn functions(&self) -> &[String] {
        match self {
            Self::Functions(functions) => functions,
            _ => &[],
        }
    }

    /// The syscalls named (none for functions).
    pub fn syscalls(&self) -> &[String] {
        match self {
            Self::Syscalls(syscalls) => syscalls,
            _ => &[],
        }
    }
}

/// What to probe and whose calls count.
#[derive(Clone, Debug, Default)]
pub struct ProbeSpec {
    pub targets: Targets,
    /// Which tracepoints time syscalls.
    pub syscall_mode: attach::SyscallMode,
    pub mode: Mode,
    /// How kprobe mode attaches (`--no-kprobe-session`: the kprobe.multi link's frames;
    /// `--no-kprobe-multi`: a perf kprobe per function) and fentry mode (`--no-fsession`:
    /// fentry/fexit pairs).
    pub mechanisms: attach::Mechanisms,
    /// Calls faster than this are only counted.
    pub min_latency: Option<Duration>,
    /// Measure the probes' own cost per call at start-up.
    pub calibrate: bool,
    /// Only call sites in callers matching this glob (call-site mode).
    pub callers: Option<String>,
    /// `--children`: functions (or globs) timed only inside the one `--fn` parent.
    pub children: Vec<String>,
    /// Most functions `--fn` may match.
    pub max_functions: usize,
    /// `--by`: the fields each call is also keyed by (empty: none).
    pub by: KeySpec,
    /// `--by`: distinct keys each CPU keeps.
    pub max_keys: u32,
    /// `--filter`: only calls that satisfy it are recorded.
    pub condition: Option<FilterExpr>,
    pub filter: FilterSpec,
}

/// Whose calls count, as the user named them.
#[derive(Clone, Debug, Default)]
pub struct FilterSpec {
    pub pids: Vec<u32>,
    pub tid: Option<u32>,
    /// A command name, as in `/proc/PID/comm`.
    pub comm: Option<String>,
    /// A cgroup v2 directory.
    pub cgroup: Option<PathBuf>,
    pub cpu: Option<u32>,
}

/// Everything a long-running command attaches for.
#[derive(Clone, Debug, Default)]
pub struct SessionSpec {
    pub probe: ProbeSpec,
    /// Account time switched out inside each call.
    pub off_cpu: bool,
    pub stacks: StackCapture,
    /// `--stacks-every N`: walk the stacks of a random 1 in N calls (0 or 1: every call).
    pub stack_sample_every: u32,
    /// Distinct stacks the kernel maps hold.
    pub stack_map_size: u32,
    /// The workload to run and follow (empty: none).
    pub command: Vec<String>,
    /// `--slowest N`: the slowest calls kept per function (0: none).
    pub slowest: u32,
    /// `hotprof sample --inside F`: load for sampling too, only inside the probed frames.
    pub sample_inside: bool,
    /// `--counter`: PMU events counted per call, in order (each a histogram beside the
    /// latency's).
    pub pmu_events: Vec<PmuEvent>,
    /// `hotprof sample`: sample every online CPU this many times a second (perf events), with
    /// or without functions probed.
    pub sample_frequency: Option<u64>,
}

/// The filters as the probes compare them.
#[derive(Default)]
pub struct Filters {
    pub(super) cgroup_id: Option<u64>,
    pub(super) comm: Option<[u8; 16]>,
}

/// One probed function or syscall, or one call site of a function: what the user asked for
/// and what was attached. Each is one slot of the per-function maps.
#[derive(Clone, Debug)]
pub struct Probed {
    pub name: String,
    pub symbol: String,
    /// The call site (`caller+0xoff`) this slot times, in call-site mode. A function's
    /// sites are consecutive slots.
    pub site: Option<String>,
    /// `--children`: timed only inside the parent's frames.
    pub child: bool,
    /// How it is attached.
    pub link: LinkKind,
}
