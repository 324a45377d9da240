//! The command line: `hotprof [record options] [-- CMD]` or `hotprof <subcommand>`, and the
//! dispatch to the command that runs it.

use clap::{CommandFactory as _, Parser, Subcommand};

use crate::commands::{
    LONG_VERSION, compare, completions, diff_flame, doctor, flamegraph, heatmap, list, man, record,
    record::RecordArgs, sample, serve, status, top,
};

#[derive(Debug, Parser)]
#[command(
    name = "hotprof",
    version,
    long_version = LONG_VERSION,
    about = "Per-call latency of kernel functions, measured in the kernel with eBPF",
    after_help = record::EXAMPLES,
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
    List(list::ListArgs),
    /// Compare two recordings (`--json`, ideally with `--runs N`): %change, stddev and a
    /// significance verdict per function and metric, like the kernel test robot.
    Compare(compare::CompareArgs),
    /// Differential flamegraph of two folded-stack files (`--folded`), normalized.
    DiffFlame(diff_flame::DiffFlameArgs),
    /// Flame graph SVG of a folded-stacks file (`--folded`, or any other tool's).
    Flamegraph(flamegraph::FlamegraphArgs),
    /// Latency heatmap SVG (time across, latency up, colour = calls) of a recording made with
    /// `--interval` or `--heatmap`.
    Heatmap(heatmap::HeatmapArgs),
    /// Check what this machine supports: one row per kernel feature, privilege and setting
    /// hotprof depends on, each tried where possible; exit 1 when hotprof cannot work here.
    Doctor(doctor::DoctorArgs),
    /// Show hotprof programs and kprobes still in the kernel (exit 1 if any): there should
    /// never be any once hotprof has exited.
    Status,
    /// On-CPU sampling profile with kernel and user stacks (perf_event; no kprobes needed).
    Sample(sample::SampleArgs),
    /// Serve the probes' latency histograms as a Prometheus/OpenMetrics `/metrics` endpoint,
    /// read fresh from the kernel on every scrape; report on exit.
    Serve(Box<serve::ServeArgs>),
    /// Live terminal table of the probes: calls/s, p50, p99, max over the last refresh and
    /// since start, a p99 trend, hotprof's own cost; keys to sort, filter, pause and open a
    /// histogram.
    ///
    /// Keys: q or Ctrl-C quit; Up/Down (or k/j) select a row; Enter opens its histogram since
    /// start (Esc goes back); / filters the rows by name (Enter keeps the filter, Esc clears
    /// it); space pauses; t, c, 9, m, n sort by total time, calls/s, p99, max, name (s
    /// cycles).
    Top(Box<top::TopArgs>),
    /// Print a shell completion script to stdout (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
    /// Write the man pages generated from these definitions: hotprof.1 and one page per
    /// subcommand with --out DIR, else hotprof.1 to stdout.
    Man(man::ManArgs),
}

impl Cli {
    /// Runs the command; returns the process exit code.
    pub async fn run(self) -> anyhow::Result<i32> {
        match self.command {
            Some(Command::List(args)) => list::run(&args),
            Some(Command::Sample(args)) => sample::run(&args).await,
            Some(Command::Serve(args)) => serve::run(*args).await,
            Some(Command::Top(args)) => top::run(*args).await,
            Some(Command::Status) => status::run(),
            Some(Command::Doctor(args)) => doctor::run(&args),
            Some(Command::Compare(args)) => compare::run(&args),
            Some(Command::DiffFlame(args)) => diff_flame::run(&args),
            Some(Command::Completions(args)) => completions::run(&args, Cli::command()),
            Some(Command::Man(args)) => man::run(&args, Cli::command()),
            Some(Command::Flamegraph(args)) => flamegraph::run(&args),
            Some(Command::Heatmap(args)) => heatmap::run(&args),
            None => record::run(self.record).await,
        }
    }
}
