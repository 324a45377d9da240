//! The command line: `hotprof [record options] [-- CMD]` or `hotprof <subcommand>`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::attach::Mode;
use crate::units::{parse_duration, parse_positive_duration};

const EXAMPLES: &str = "\
Examples:
  # Per-call latency of the audit filter while a getpid loop runs (seed: 203 -> 173 ns)
  sudo hotprof --fn __audit_filter_op -- syscall_lat 100000
  # Every copy_*_iter* function for 5 s, one histogram each, JSON for later comparison
  sudo hotprof --fn 'copy_*_iter*' --duration 5s --json copy.json
  # _copy_to_user while reading a file, only calls slower than 1 us
  sudo hotprof --fn _copy_to_user --min-latency 1us -- dd if=/tmp/f of=/dev/null bs=1M
  # Syscall latency via tracepoints (works on kernels without kprobes)
  sudo hotprof --syscall getpid --interval 1s
  # Which functions match, and which probe modes can attach to them
  sudo hotprof list 'copy_*_iter*'";

#[derive(Debug, Parser)]
#[command(
    name = "hotprof",
    version,
    about = "Per-call latency of kernel functions, measured in the kernel with eBPF",
    after_help = EXAMPLES,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub record: RecordArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List kernel functions matching a glob and which probe modes can attach to each.
    List(ListArgs),
    /// Compare two recordings (`--json`, ideally with `--runs N`): %change, stddev and a
    /// significance verdict per function and metric, like the kernel test robot.
    Compare(crate::compare_cmd::CompareArgs),
    /// Differential flamegraph of two folded-stack files (`--folded`), normalized.
    DiffFlame(crate::compare_cmd::DiffFlameArgs),
    /// Show hotprof programs and kprobes still in the kernel (exit 1 if any): there should
    /// never be any once hotprof has exited.
    Status,
    /// On-CPU sampling profile with kernel and user stacks (perf_event; no kprobes needed).
    Sample(crate::sample::SampleArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Function name or glob (`copy_*_iter*`).
    pub pattern: String,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Kernel function (or glob) to time; repeat for several. GCC clones (.isra/.constprop/
    /// .part) are resolved automatically.
    #[arg(long = "fn", value_name = "FUNC|GLOB")]
    pub functions: Vec<String>,

    /// Syscall to time via its sys_enter/sys_exit tracepoints (no kprobes needed).
    #[arg(long = "syscall", value_name = "NAME")]
    pub syscalls: Vec<String>,

    /// Probe mechanism for --fn.
    #[arg(long, value_enum, default_value_t = Mode::Auto)]
    pub mode: Mode,

    /// Stop after this long (e.g. 10s, 500ms). Default: until Ctrl-C or the workload exits.
    #[arg(long, value_parser = parse_positive_duration)]
    pub duration: Option<Duration>,

    /// Print (and start afresh) a report every interval.
    #[arg(long, value_parser = parse_positive_duration)]
    pub interval: Option<Duration>,

    /// Write the recording (raw buckets included) as versioned JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Ignore calls faster than this (they are still counted).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub min_latency: Option<Duration>,

    /// Also measure the time spent switched out inside each call (sched_switch).
    #[arg(long)]
    pub off_cpu: bool,

    /// Capacity of the per-task map: live tasks that have made a probed call (a task keeps
    /// its entry between calls, so a call costs one lookup; it is freed when the task exits).
    #[arg(long, default_value_t = 16384, value_parser = clap::value_parser!(u32).range(1..=4_194_304))]
    pub max_tasks: u32,

    /// Capture the kernel stack at each call's entry and aggregate latency per stack.
    #[arg(long)]
    pub stacks: bool,

    /// Also capture user stacks (implies --stacks).
    #[arg(long)]
    pub user_stacks: bool,

    /// Write a flamegraph SVG of the stacks, weighted by latency (implies --stacks).
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,

    /// Write the stacks in folded format (`a;b;c WEIGHT`, implies --stacks).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,

    /// Write the stacks as a gzip'd pprof profile (latency and call-count samples; implies
    /// --stacks), for `go tool pprof`, Parca or Pyroscope.
    #[arg(long, value_name = "FILE.pb.gz")]
    pub pprof: Option<PathBuf>,

    /// Write a self-contained HTML report (percentiles, histogram chart, flamegraph).
    #[arg(long, value_name = "FILE.html")]
    pub html: Option<PathBuf>,

    /// What a stack's width means in --flamegraph/--folded.
    #[arg(long, value_enum, default_value_t = StackWeight::Latency)]
    pub weight: StackWeight,

    /// Distinct stacks kept in the kernel (beyond that they are counted as lost).
    #[arg(long, default_value_t = 16384, value_parser = clap::value_parser!(u32).range(16..=1_048_576))]
    pub stack_map_size: u32,

    /// Run the workload this many times (like `perf stat -r`), keeping each run's figures
    /// in the JSON for `hotprof compare`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: u32,

    /// Skip measuring hotprof's own per-call overhead at start-up.
    #[arg(long)]
    pub no_calibrate: bool,

    #[command(flatten)]
    pub filter: FilterArgs,

    /// Workload to run and measure (only its process tree, only while it runs).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Width of a flamegraph frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StackWeight {
    /// Total nanoseconds spent in the probed function under that stack.
    Latency,
    /// Number of calls.
    Count,
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

impl RecordArgs {
    /// Whether any option needs stacks captured.
    pub fn wants_stacks(&self) -> bool {
        self.stacks
            || self.user_stacks
            || self.flamegraph.is_some()
            || self.folded.is_some()
            || self.pprof.is_some()
    }
}
