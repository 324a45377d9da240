//! The command line: `hotprof [record options] [-- CMD]` or `hotprof <subcommand>`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::attach::Mode;
use crate::units::{parse_duration, parse_positive_duration};

/// `hotprof --help` examples: the four seed scenarios, each a command that was run (the
/// README's "Recipes" shows their output). `syscall_lat` and `audit_rules` are this repo's
/// `workloads/`; `hackbench` is Debian's rt-tests.
const EXAMPLES: &str = "\
Examples:
  # Audit filter cost per syscall: load audit rules (auditctl, or `audit_rules add 3`),
  # then time __audit_filter_op under a getpid loop; 5 runs kept for `hotprof compare`
  sudo hotprof --fn __audit_filter_op --runs 5 --json base.json -- syscall_lat 100000
  # Page-cache writes to tmpfs/shmem, and where they come from. copy_page_from_iter_atomic
  # is notrace on Debian's 6.1/6.12 (kprobes refuse it), so time its caller
  sudo hotprof --fn generic_perform_write --stacks -- dd if=/dev/zero of=/dev/shm/x bs=4k count=100000
  # Page-cache reads (the seed: _copy_to_user under hdparm -T) with a latency flamegraph;
  # _copy_to_user is notrace on Debian's 6.1/6.12 too, so time the read path above it
  sudo hotprof --fn filemap_read --stacks --flamegraph read.svg -- dd if=big.file of=/dev/null bs=1M
  # Syscall latency under a hackbench load, a report per second (tracepoints, no kprobes)
  sudo hotprof --syscall write --syscall read --interval 1s -- hackbench -g 10 -l 2000
  # Which functions a glob matches, and which probe modes can attach to them
  sudo hotprof list 'copy_*_iter*'

Completions and man pages: hotprof completions bash, hotprof man --out DIR";

const COMPARE_EXAMPLES: &str = "\
Examples:
  # Base kernel, then the patched one (same command), then the verdict
  sudo hotprof --fn __audit_filter_op --runs 5 --json base.json -- syscall_lat 100000
  sudo hotprof --fn __audit_filter_op --runs 5 --json new.json -- syscall_lat 100000
  hotprof compare base.json new.json
  # CI gate: exit 3 if a significant slowdown exceeds 5 %, plus an HTML overlay
  hotprof compare base.json new.json --fail-if-slower 5 --html cmp.html
  # Sides recorded interleaved (a1 b1 a2 b2 ...) so drift hits both alike
  hotprof compare a1.json,a2.json,a3.json b1.json,b2.json,b3.json";

const DIFF_FLAME_EXAMPLES: &str = "\
Examples:
  sudo hotprof --fn generic_perform_write --folded base.folded -- tmpfs_write /dev/shm/x 64
  sudo hotprof --fn generic_perform_write --folded new.folded -- tmpfs_write /dev/shm/x 64
  hotprof diff-flame base.folded new.folded -o diff.svg";

const SAMPLE_EXAMPLES: &str = "\
Examples:
  # Where a getpid loop spends its CPU, like perf record -g (no kprobes needed)
  sudo hotprof sample --flamegraph cpu.svg -- syscall_lat 5000000
  # A running process for 10 s, top 30 rows
  sudo hotprof sample -p 1234 --duration 10s --top 30";

const LIST_EXAMPLES: &str = "\
Examples:
  sudo hotprof list 'copy_*_iter*'
  sudo hotprof list 'vfs_*'
  # Why a function cannot be probed (notrace, inlined, blacklisted) and what is close
  sudo hotprof list copy_page_from_iter_atomic";

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
    #[command(after_help = LIST_EXAMPLES)]
    List(ListArgs),
    /// Compare two recordings (`--json`, ideally with `--runs N`): %change, stddev and a
    /// significance verdict per function and metric, like the kernel test robot.
    #[command(after_help = COMPARE_EXAMPLES)]
    Compare(crate::compare_cmd::CompareArgs),
    /// Differential flamegraph of two folded-stack files (`--folded`), normalized.
    #[command(after_help = DIFF_FLAME_EXAMPLES)]
    DiffFlame(crate::compare_cmd::DiffFlameArgs),
    /// Flame graph SVG of a folded-stacks file (`--folded`, or any other tool's).
    Flamegraph(crate::flame_cmd::FlamegraphArgs),
    /// Show hotprof programs and kprobes still in the kernel (exit 1 if any): there should
    /// never be any once hotprof has exited.
    Status,
    /// On-CPU sampling profile with kernel and user stacks (perf_event; no kprobes needed).
    #[command(after_help = SAMPLE_EXAMPLES)]
    Sample(crate::sample::SampleArgs),
    /// Serve the probes' latency histograms as a Prometheus/OpenMetrics `/metrics` endpoint,
    /// read fresh from the kernel on every scrape; report on exit.
    Serve(crate::serve::ServeArgs),
    /// Print a shell completion script to stdout (bash, zsh, fish, elvish, powershell).
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions(CompletionsArgs),
    /// Write the man pages generated from these definitions: hotprof.1 and one page per
    /// subcommand with --out DIR, else hotprof.1 to stdout.
    #[command(after_help = MAN_EXAMPLES)]
    Man(ManArgs),
}

const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  hotprof completions bash > /etc/bash_completion.d/hotprof
  hotprof completions zsh > /usr/local/share/zsh/site-functions/_hotprof
  hotprof completions fish > ~/.config/fish/completions/hotprof.fish";

const MAN_EXAMPLES: &str = "\
Examples:
  sudo hotprof man --out /usr/local/share/man/man1 && man hotprof
  hotprof man | man -l -";

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to generate the completion script for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Directory to write hotprof.1 and hotprof-SUBCOMMAND.1 into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Function name or glob (`copy_*_iter*`).
    pub pattern: String,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub probe: ProbeArgs,

    /// Stop after this long (e.g. 10s, 500ms). Default: until Ctrl-C or the workload exits.
    #[arg(long, value_parser = parse_positive_duration)]
    pub duration: Option<Duration>,

    /// Print (and start afresh) a report every interval.
    #[arg(long, value_parser = parse_positive_duration)]
    pub interval: Option<Duration>,

    /// Write the recording (raw buckets included) as versioned JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Also measure the time spent switched out inside each call (sched_switch).
    #[arg(long)]
    pub off_cpu: bool,

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

    /// Workload to run and measure (only its process tree, only while it runs).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// What to probe and whose calls count: shared by the default command and `serve`.
#[derive(Debug, Args)]
pub struct ProbeArgs {
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

    /// Ignore calls faster than this (they are still counted).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub min_latency: Option<Duration>,

    /// Skip measuring hotprof's own per-call overhead at start-up.
    #[arg(long)]
    pub no_calibrate: bool,

    #[command(flatten)]
    pub filter: FilterArgs,
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
