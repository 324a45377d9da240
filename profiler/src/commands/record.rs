//! `hotprof --fn …` / `--syscall …`, the default command: the pipeline resolve → attach →
//! collect → model → report, once or for `--runs N`, with interval reports and the outputs
//! (`--json`, stacks, `--html`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use profiler_common::StackCapture;

use super::args::{DEFAULT_STACK_MAP_SIZE, ProbeArgs, worded};
use crate::collect::{self, Snapshot};
use crate::model::{IntervalFunction, IntervalRecord, PmuEvent, Recording, RunRecord};
use crate::progress::Progress;
use crate::report;
use crate::session::{
    self, Filters, Finished, MapsWatcher, ModuleWatcher, Run, SessionSpec, Signals,
};
use crate::sys::clock;
use crate::units::parse_positive_duration;

/// `hotprof --help` examples: the four seed scenarios, each a command that was run (the
/// README's "Recipes" shows their output). `syscall_lat` and `audit_rules` are this repo's
/// `workloads/`; `hackbench` is Debian's rt-tests.
pub const EXAMPLES: &str = "\
Examples:
  # Audit filter cost per syscall: load audit rules (auditctl, or `audit_rules add 3`),
  # then time __audit_filter_op under a getpid loop; 5 runs kept for `hotprof compare`
  sudo hotprof --fn __audit_filter_op --runs 5 --json base.json -- syscall_lat 100000
  # Page-cache writes to tmpfs/shmem: the copy is notrace on Debian's kernels, so it is
  # timed at its call sites (a row per caller), its caller at its entry
  sudo hotprof --fn generic_perform_write --fn copy_page_from_iter_atomic -- dd if=/dev/zero of=/dev/shm/x bs=4k count=100000
  # Page-cache reads (the seed: _copy_to_user under hdparm -T) and the read copy
  sudo hotprof --fn filemap_read --fn copy_page_to_iter -- dd if=big.file of=/dev/null bs=1M
  # _copy_to_user has hundreds of call sites: time the ones in matching callers
  sudo hotprof --fn _copy_to_user --callers 'cp_new_stat*' -- stat /etc/passwd
  # Syscall latency under a hackbench load, a report per second (tracepoints, no kprobes)
  sudo hotprof --syscall write --syscall read --interval 1s -- hackbench -g 10 -l 2000
  # Which functions a glob matches, and which probe modes can attach to them
  sudo hotprof list 'copy_*_iter*'

Completions and man pages: hotprof completions bash, hotprof man --out DIR";

#[derive(Debug, Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub probe: ProbeArgs,

    /// Stop after this long (e.g. 10s, 500ms). Default: until Ctrl-C or the workload exits.
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,

    /// Print (and start afresh) a report every interval.
    #[arg(long, value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub interval: Option<Duration>,

    /// Write the recording (raw buckets included) as versioned JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Show every duration minus the calibrated bias: the part of hotprof's own probe work
    /// that lies inside each measured call. The text and HTML reports only; the JSON keeps
    /// the raw durations and the bias beside them (`probe_bias_ns`).
    #[arg(long, conflicts_with = "no_calibrate")]
    pub subtract_bias: bool,

    /// Also measure the time spent switched out inside each call (sched_switch).
    #[arg(long)]
    pub off_cpu: bool,

    /// Keep the N slowest calls of each function (up to 16) in the kernel and print them
    /// after the histogram: when, how long, off-CPU part (--off-cpu), CPU, task, the --by
    /// fields and, with --stacks, the kernel stack.
    /// Example: `hotprof --fn do_nanosleep --slowest 3 --off-cpu --stacks -- sleep 1`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16))]
    pub slowest: Option<u32>,

    /// Also count a PMU event per call, read at entry and return (repeatable, at most 2):
    /// instructions, cycles, branches, branch-misses, cache-references or cache-misses.
    /// A line and a histogram per event beside the latency's (JSON: functions[].counters);
    /// calls that return on another CPU are left out of them. Needs a PMU that counts the
    /// event: `hotprof doctor` says which do here.
    /// Example: `hotprof --fn __task_pid_nr_ns --counter instructions -- syscall_lat 10000`.
    #[arg(long = "counter", value_name = "EVENT", value_parser = clap::value_parser!(PmuEvent))]
    pub counters: Vec<PmuEvent>,

    /// Capture the kernel stack at each call's entry and aggregate latency per stack.
    #[arg(long)]
    pub stacks: bool,

    /// Also capture user stacks (implies --stacks).
    #[arg(long)]
    pub user_stacks: bool,

    /// Walk the stacks of a random 1 in N calls instead of every call (implies --stacks):
    /// --stacks at a fraction of its cost. The stack outputs count each walked call N times,
    /// so their per-path figures are estimates (the report says how close, and paths of
    /// fewer than ~N calls may be missing); the function's own figures still count every
    /// call, and --slowest shows the stacks of walked calls only.
    /// Example: `hotprof --fn vfs_write --stacks-every 16 --flamegraph w.svg -- make`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub stacks_every: Option<u32>,

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

    /// Write a latency heatmap SVG: time across, latency up (log scale), colour = calls.
    /// A column per --interval report, else a silent snapshot every 100 ms (kept in --json's
    /// intervals too, for `hotprof heatmap`).
    /// Example: `hotprof --syscall read --heatmap read.svg -- dd if=/dev/zero of=/dev/null count=200000`.
    #[arg(long, value_name = "FILE.svg")]
    pub heatmap: Option<PathBuf>,

    /// What a stack's width means in --flamegraph/--folded.
    #[arg(long, value_enum, default_value_t = StackWeight::Latency)]
    pub weight: StackWeight,

    /// Distinct stacks kept in the kernel (beyond that they are counted as lost).
    #[arg(long, default_value_t = DEFAULT_STACK_MAP_SIZE, value_parser = clap::value_parser!(u32).range(16..=1_048_576))]
    pub stack_map_size: u32,

    /// Run the workload this many times (like `perf stat -r`), keeping each run's figures
    /// in the JSON for `hotprof compare`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: u32,

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

impl RecordArgs {
    /// Whether any option needs stacks captured.
    pub fn wants_stacks(&self) -> bool {
        self.stacks
            || self.user_stacks
            || self.stacks_every.is_some()
            || self.flamegraph.is_some()
            || self.folded.is_some()
            || self.pprof.is_some()
    }
}

impl RecordArgs {
    /// The session this command runs.
    pub fn session_spec(&self) -> anyhow::Result<SessionSpec> {
        Ok(SessionSpec {
            probe: self.probe.to_spec()?,
            off_cpu: self.off_cpu,
            stacks: self.stack_capture(),
            stack_sample_every: self.stacks_every.unwrap_or(1),
            stack_map_size: self.stack_map_size,
            command: self.command.clone(),
            slowest: self.slowest.unwrap_or(0),
            pmu_events: self.counters.clone(),
            sample_inside: false,
            sample_frequency: None,
        })
    }

    fn stack_capture(&self) -> StackCapture {
        if self.user_stacks {
            StackCapture::KernelAndUser
        } else if self.wants_stacks() {
            StackCapture::Kernel
        } else {
            StackCapture::None
        }
    }
}

/// A recording as the arguments ask for it, converted once and checked: nothing after
/// [`RecordArgs::plan`] reads an argument.
pub struct RecordPlan {
    pub session: SessionSpec,
    /// The filters as the probes compare them.
    pub filters: Filters,
    pub schedule: Schedule,
    /// `--duration`: how long each measurement lasts at most (else until the workload exits
    /// or a signal).
    pub duration: Option<Duration>,
    pub outputs: Outputs,
}

/// How the measurements and their reports follow each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// One measurement, one report.
    Once,
    /// `--runs N` (N > 1): the workload N times, each run's figures kept, then the total.
    Runs(u32),
    /// `--interval`: a report every interval (each starting afresh), then the total; or,
    /// for `--heatmap` alone, [`HEATMAP_COLUMN`]'s silent snapshots (the heatmap's columns).
    Every { period: Duration, printed: bool },
}

/// How often a `--heatmap` run without `--interval` snapshots the histograms: fine enough to
/// show a stall of a few hundred milliseconds, and a map read per 100 ms costs the probed
/// calls nothing (the interval records' `report_cpu_ns` says what it costs hotprof).
pub const HEATMAP_COLUMN: Duration = Duration::from_millis(100);

impl Schedule {
    /// How many times the workload is run.
    fn runs(self) -> u32 {
        match self {
            Self::Runs(n) => n,
            _ => 1,
        }
    }

    /// Whether reports of parts (runs, intervals) come before the total.
    fn prints_parts(self) -> bool {
        !matches!(self, Self::Once | Self::Every { printed: false, .. })
    }
}

/// What is written besides the text report, and how the reports show durations.
pub struct Outputs {
    pub json: Option<PathBuf>,
    pub flamegraph: Option<PathBuf>,
    pub folded: Option<PathBuf>,
    pub pprof: Option<PathBuf>,
    pub html: Option<PathBuf>,
    pub heatmap: Option<PathBuf>,
    pub weight: StackWeight,
    /// `--subtract-bias`: the text and HTML reports without the calibrated bias.
    pub subtract_bias: bool,
}

impl RecordArgs {
    /// Converts the arguments into the plan, checking them and the system before anything is
    /// loaded, so a typo costs nothing: the session first, then the command's own options.
    pub fn plan(&self) -> anyhow::Result<RecordPlan> {
        let session = self.session_spec()?;
        let filters = session::validate(&session).map_err(worded)?;
        check_options(self)?;
        session::check_system(&self.command)?;
        let schedule = match (self.runs, self.interval, &self.heatmap) {
            (2.., _, _) => Schedule::Runs(self.runs),
            (_, Some(period), _) => Schedule::Every {
                period,
                printed: true,
            },
            (_, None, Some(_)) => Schedule::Every {
                period: HEATMAP_COLUMN,
                printed: false,
            },
            _ => Schedule::Once,
        };
        Ok(RecordPlan {
            session,
            filters,
            schedule,
            duration: self.duration,
            outputs: Outputs {
                json: self.json.clone(),
                flamegraph: self.flamegraph.clone(),
                folded: self.folded.clone(),
                pprof: self.pprof.clone(),
                html: self.html.clone(),
                heatmap: self.heatmap.clone(),
                weight: self.weight,
                subtract_bias: self.subtract_bias,
            },
        })
    }
}

/// The command's own rules: which options go together, and that every output can be
/// written (the file system is all it looks at).
fn check_options(args: &RecordArgs) -> anyhow::Result<()> {
    if args.runs > 1 && args.command.is_empty() {
        bail!("--runs needs a workload command after --");
    }
    if args.runs > 1 && args.interval.is_some() {
        bail!("--runs and --interval cannot be combined");
    }
    if args.counters.len() > profiler_common::PMU_EVENTS_MAX {
        bail!(
            "--counter: at most {} events per run, {} given",
            profiler_common::PMU_EVENTS_MAX,
            args.counters.len()
        );
    }
    if let Some(twice) = args
        .counters
        .iter()
        .enumerate()
        .find_map(|(i, event)| args.counters[..i].contains(event).then_some(event))
    {
        bail!("--counter {twice} is given twice");
    }
    if args.runs > 1 && args.heatmap.is_some() {
        bail!("--heatmap draws one measurement over time: it cannot be combined with --runs");
    }
    for (option, path) in [
        ("--json", &args.json),
        ("--flamegraph", &args.flamegraph),
        ("--folded", &args.folded),
        ("--pprof", &args.pprof),
        ("--html", &args.html),
        ("--heatmap", &args.heatmap),
    ] {
        if let Some(path) = path {
            check_writable(option, path)?;
        }
    }
    Ok(())
}

/// Runs a recording: plan → start → schedule → finish → outputs. Returns the process exit
/// code (the workload's, when there is one).
pub async fn run(args: RecordArgs) -> anyhow::Result<i32> {
    let plan = args.plan()?;
    // Caught from before anything is attached to the report: a signal while attaching stops
    // it there, one later ends the run.
    let mut signals = Signals::new()?;
    let mut run = Run::start(&plan.session, &plan.filters).map_err(worded)?;
    let mut measured = schedule(&mut run, &plan, &mut signals).await?;
    // Detaches every probe before printing, and before calibrating: the run's probes must
    // not be in the calibration's figures, nor calibration delay the workload's start.
    let finished = run.finish()?;
    let exit_code = measured.exit_code;
    let maps = std::mem::take(&mut measured.maps.saved);
    let (recording, stacks, targets) = assemble(&plan, finished, measured);
    outputs(&plan, &recording, stacks, &targets, &maps)?;
    Ok(exit_code)
}

/// What the schedule measured, besides what the maps hold.
struct Measured {
    exit_code: i32,
    /// When measuring started, and the same on the probes' clock (CLOCK_MONOTONIC), to place
    /// the slowest calls in the run.
    started: Instant,
    started_monotonic_ns: u64,
    runs: Vec<RunRecord>,
    intervals: Vec<IntervalRecord>,
    /// With `--heatmap` (one run only): where its last column starts.
    last_report: Option<LastReport>,
    maps: MapsWatcher,
}

/// The plan's schedule: one measurement, `--runs N` of them, or one with interval reports;
/// stopped early by a signal.
async fn schedule(
    run: &mut Run,
    plan: &RecordPlan,
    signals: &mut Signals,
) -> anyhow::Result<Measured> {
    let follow = !plan.session.command.is_empty();
    let mut measured = Measured {
        exit_code: 0,
        started: Instant::now(),
        started_monotonic_ns: clock::monotonic_ns(),
        runs: Vec::new(),
        intervals: Vec::new(),
        last_report: None,
        maps: MapsWatcher::default(),
    };
    let mut previous = Snapshot::default();
    let parts = plan.schedule.runs();
    for part in 1..=parts {
        if parts > 1 {
            eprintln!("hotprof: run {part}/{parts}");
        }
        let mut outcome = measure(run, plan, signals, &previous, &mut measured.maps).await?;
        measured.exit_code = outcome.exit_code;
        measured.intervals.append(&mut outcome.intervals);
        measured.last_report = outcome.last_report.take();
        let now = run.snapshot()?;
        if follow {
            let delta = now.since(&previous);
            let single = run.recording(&delta, outcome.elapsed);
            measured.runs.push(RunRecord {
                duration_ns: outcome.elapsed.as_nanos() as u64,
                exit_code: outcome.exit_code,
                workload_metrics: outcome.workload_metrics,
                functions: single.functions,
            });
        }
        previous = now;
        if outcome.interrupted {
            break;
        }
    }
    Ok(measured)
}

/// The whole recording of a finished run: its totals, the overhead, the slowest calls, the
/// runs and intervals, how its stacks were sampled; the stacks (weighted) and the slots'
/// targets for the outputs.
fn assemble(
    plan: &RecordPlan,
    finished: Finished,
    measured: Measured,
) -> (
    Recording,
    Option<Vec<collect::CollectedStack>>,
    Vec<crate::resolve::Target>,
) {
    let spec = &plan.session;
    let Finished {
        mut layout,
        targets,
        snapshot: last,
        kernel_missed,
        detached,
        overhead,
        mut stacks,
        slowest,
        ..
    } = finished;
    // Measured after detaching: the recording's overhead, bias and PMU biases.
    if overhead.is_some() {
        layout.overhead = overhead;
    }
    let mut recording = layout.recording(&last, detached.duration_since(measured.started));
    if let Some(slowest) = &slowest {
        let kernel = if spec.stacks != StackCapture::None {
            crate::flame::KernelSymbolizer::from_system().ok()
        } else {
            None
        };
        let stack = |slot: u32, id: i32| -> Vec<String> {
            let (Some(kernel), Some(frames)) = (&kernel, slowest.frames.get(&id)) else {
                return Vec::new();
            };
            let leaf = targets
                .get(slot as usize)
                .map(|t| (t.symbol.as_str(), t.address));
            report::stacks::without_probe_frames(frames.clone(), leaf, kernel)
                .into_iter()
                .map(|ip| kernel.frame_name(ip))
                .collect()
        };
        layout.add_slowest(
            &mut recording,
            &slowest.calls,
            spec.slowest as usize,
            measured.started_monotonic_ns,
            stack,
        );
    }
    recording.losses.kernel_missed = kernel_missed;
    recording.runs = measured.runs;
    recording.intervals = measured.intervals;
    if let Some(since) = measured.last_report {
        // The heatmap's last column: what the final read holds beyond the last report.
        let covered = detached.saturating_duration_since(since.at);
        let previous_end = recording.intervals.last().map_or(0, |i| i.elapsed_ns);
        let tail = layout.recording(&last.since(&since.snapshot), covered);
        recording.intervals.push(interval_record(
            since.index + 1,
            Duration::from_nanos(previous_end) + covered,
            covered,
            last.task_entries,
            stack_entries(spec, &last),
            &tail,
        ));
    }
    if let Some(stacks) = &mut stacks {
        // The report and the JSON say how many calls were walked; the outputs weight them.
        let every = spec.stack_sample_every;
        let walked = collect::walked_calls(stacks, layout.probed.len());
        layout.add_stack_sampling(&mut recording, &walked, every);
        collect::weight_sampled(stacks, every);
    }
    (recording, stacks, targets)
}

/// The text report, then the files the plan asks for.
fn outputs(
    plan: &RecordPlan,
    recording: &Recording,
    stacks: Option<Vec<collect::CollectedStack>>,
    targets: &[crate::resolve::Target],
    maps: &crate::flame::SavedMaps,
) -> anyhow::Result<()> {
    let outputs = &plan.outputs;
    if plan.schedule.prints_parts() {
        println!(
            "--- total{}",
            if plan.schedule.runs() > 1 {
                format!(" of {} runs", recording.runs.len())
            } else {
                String::new()
            }
        );
    }
    let shown = displayed(recording, outputs.subtract_bias);
    print!("{}", report::render_recording(&shown));
    if outputs.subtract_bias {
        match recording.probe_bias_ns {
            Some(bias) => println!(
                "durations above: minus the ~{} bias (--subtract-bias; --json keeps them raw)",
                crate::units::format_ns(bias)
            ),
            None => eprintln!(
                "hotprof: note: --subtract-bias: no bias was calibrated, the durations are raw"
            ),
        }
    }
    let flamegraph = match stacks {
        Some(stacks) => {
            let user = plan.session.stacks == StackCapture::KernelAndUser;
            let syscalls = matches!(plan.session.probe.targets, session::Targets::Syscalls(_));
            let slots = Slots { targets, syscalls };
            write_stacks(outputs, recording, &stacks, slots, user.then_some(maps))?
        }
        None => None,
    };
    if let Some(path) = &outputs.html {
        let page = crate::export::html::render_recording(&shown, flamegraph.as_deref());
        std::fs::write(path, page).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    if let Some(path) = &outputs.json {
        report::write_json(recording, path)?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    if let Some(path) = &outputs.heatmap {
        super::heatmap::write(recording, &report::heatmap_title(recording), path)?;
    }
    Ok(())
}

/// What the text and HTML reports show: with `--subtract-bias`, the durations without the
/// calibrated bias (the JSON stays raw).
fn displayed(recording: &Recording, subtract_bias: bool) -> std::borrow::Cow<'_, Recording> {
    if subtract_bias {
        for (function, min_ns) in crate::model::not_subtracted(recording) {
            eprintln!(
                "hotprof: note: --subtract-bias: {function}'s fastest call ({}) is not longer \
                 than the bias ({}): shown as measured",
                crate::units::format_ns(min_ns as f64),
                crate::units::format_ns(recording.probe_bias_ns.unwrap_or(0.0))
            );
        }
    }
    match subtract_bias
        .then(|| crate::model::without_bias(recording))
        .flatten()
    {
        Some(corrected) => std::borrow::Cow::Owned(corrected),
        None => std::borrow::Cow::Borrowed(recording),
    }
}

/// What the slots of a `--stacks` run measured: functions (their targets), or syscalls.
#[derive(Clone, Copy)]
struct Slots<'a> {
    targets: &'a [crate::resolve::Target],
    syscalls: bool,
}

impl<'a> Slots<'a> {
    /// The frame slot `id`'s stacks end in: the probed function, or the syscall (its name is
    /// the recording's function name), whose tracepoint stacks otherwise end in entry code.
    fn leaf(self, id: usize, recording: &'a Recording) -> report::stacks::Leaf<'a> {
        use report::stacks::Leaf;
        match (self.targets.get(id), recording.functions.get(id)) {
            (Some(target), _) => Leaf::Function(&target.symbol, target.address),
            (None, Some(function)) if self.syscalls => Leaf::Syscall(&function.name),
            _ => Leaf::Unknown,
        }
    }
}

/// `--stacks` outputs: a top-stacks summary, `--folded`, `--pprof` and `--flamegraph`.
/// Returns the flamegraph SVG (for `--html`), rendered whenever an output wants it.
fn write_stacks(
    outputs: &Outputs,
    recording: &Recording,
    stacks: &[collect::CollectedStack],
    slots: Slots,
    user: Option<&crate::flame::SavedMaps>,
) -> anyhow::Result<Option<Vec<u8>>> {
    use crate::flame::Weight;
    use crate::report::stacks as out;
    let kernel =
        crate::flame::KernelSymbolizer::from_system().context("cannot symbolize kernel stacks")?;
    let weight = match outputs.weight {
        StackWeight::Latency => Weight::LatencyNs,
        StackWeight::Count => Weight::Count,
    };
    let mut records = Vec::new();
    // One slot per function, syscall or call site (each site of a function has its own).
    let count = slots.targets.len().max(recording.functions.len());
    for id in 0..count {
        let leaf = slots.leaf(id, recording);
        records.extend(out::records_for(stacks, id as u32, leaf, &kernel));
    }
    let folded = out::fold(&records, weight, &kernel, user);
    print!("{}", out::top_stacks(&folded, weight.count_name(), 5));
    if let Some(path) = &outputs.folded {
        out::write_folded(&folded, path)?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    if let Some(path) = &outputs.pprof {
        let by_latency = out::fold(&records, Weight::LatencyNs, &kernel, user);
        let by_count = out::fold(&records, Weight::Count, &kernel, user);
        let samples = crate::export::pprof::stack_samples(by_latency, &by_count);
        let mut meta = crate::export::pprof::ProfileMeta::of_recording(recording);
        meta.comments.extend(out::sampling_summary(recording));
        std::fs::write(path, crate::export::pprof::encode(&samples, &meta))
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    if outputs.flamegraph.is_none() && outputs.html.is_none() {
        return Ok(None);
    }
    let (title, mut subtitle) = report::flamegraph_titles(recording, weight);
    if let Some(sampling) = out::sampling_summary(recording) {
        subtitle = format!("{subtitle}; {sampling}");
    }
    let svg =
        crate::flame::render_flamegraph(&folded, &title, Some(&subtitle), weight.count_name())?;
    if let Some(path) = &outputs.flamegraph {
        std::fs::write(path, &svg).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    Ok(Some(svg))
}

/// How one measurement ended.
struct RunOutcome {
    exit_code: i32,
    elapsed: Duration,
    /// Ctrl-C or SIGTERM: stop, do not start another run.
    interrupted: bool,
    workload_metrics: std::collections::BTreeMap<String, f64>,
    /// `--interval` reports, for the JSON recording.
    intervals: Vec<IntervalRecord>,
    /// With `--heatmap`: where the last column starts.
    last_report: Option<LastReport>,
}

/// The last interval report's snapshot, when it was taken and its number: the heatmap's last
/// column is the run's final read since then.
struct LastReport {
    snapshot: Snapshot,
    at: Instant,
    index: u64,
}

/// The compact JSON form of one interval report.
fn interval_record(
    index: u64,
    elapsed: Duration,
    covered: Duration,
    task_entries: u64,
    stack_entries: Option<u64>,
    recording: &Recording,
) -> IntervalRecord {
    IntervalRecord {
        index,
        elapsed_ns: elapsed.as_nanos() as u64,
        duration_ns: covered.as_nanos() as u64,
        task_entries,
        stack_entries,
        report_ns: None,
        report_cpu_ns: None,
        functions: recording
            .functions
            .iter()
            .map(|f| IntervalFunction {
                name: f.name.clone(),
                count: f.count,
                sum_ns: f.sum_ns,
                p50_ns: f.p50_ns,
                p99_ns: f.p99_ns,
                max_ns: f.max_ns,
                heat_buckets: crate::model::heat_buckets(&f.buckets),
                keys: crate::model::interval_keys(&f.keys),
            })
            .collect(),
    }
}

/// Live entries of the per-stack totals map at `snapshot` (`--stacks` only), as an interval
/// record keeps them: counted by the probes as they create entries, so no walk of the map.
fn stack_entries(spec: &SessionSpec, snapshot: &Snapshot) -> Option<u64> {
    (spec.stacks != StackCapture::None)
        .then(|| snapshot.counter(profiler_common::Counter::StackEntries))
}

/// Interval reports in the making: each takes a snapshot, turns what changed since the
/// previous one into a recording, prints it (`--interval`) and keeps its compact record.
struct IntervalReports {
    previous: Snapshot,
    /// When `previous` was taken, from the start of measuring.
    previous_at: Duration,
    /// The last report's number (1, 2, …).
    index: u64,
    /// The nominal interval (the recordings' duration until they are measured).
    period: Duration,
    printed: bool,
}

impl IntervalReports {
    fn take(
        &mut self,
        run: &mut Run,
        plan: &RecordPlan,
        started: Instant,
    ) -> anyhow::Result<IntervalRecord> {
        self.index += 1;
        let woke_at = started.elapsed();
        let cpu_at = clock::thread_cpu_time();
        let now = run.snapshot()?;
        let elapsed = started.elapsed();
        let stack_entries = stack_entries(&plan.session, &now);
        let recording = run.recording(&now.since(&self.previous), self.period);
        if self.printed {
            println!(
                "--- interval {} ({} elapsed)",
                self.index,
                crate::units::format_ns(elapsed.as_nanos() as f64)
            );
            let shown = displayed(&recording, plan.outputs.subtract_bias);
            print!("{}", report::render_recording(&shown));
            println!(
                "{}",
                report::render_map_entries(now.task_entries, stack_entries)
            );
        }
        let mut record = interval_record(
            self.index,
            elapsed,
            elapsed - self.previous_at,
            now.task_entries,
            stack_entries,
            &recording,
        );
        record.report_ns = Some((started.elapsed() - woke_at).as_nanos() as u64);
        record.report_cpu_ns =
            Some((clock::thread_cpu_time().saturating_sub(cpu_at)).as_nanos() as u64);
        self.previous = now;
        self.previous_at = elapsed;
        Ok(record)
    }
}

/// One measurement: runs the workload (if any) to its end, or waits for the duration or a
/// signal, printing interval reports on the way.
async fn measure(
    run: &mut Run,
    plan: &RecordPlan,
    signals: &mut Signals,
    since: &Snapshot,
    maps: &mut MapsWatcher,
) -> anyhow::Result<RunOutcome> {
    let spec = &plan.session;
    let command = &spec.command;
    let user_stacks = spec.stacks == StackCapture::KernelAndUser;
    let (interval, printed) = match plan.schedule {
        Schedule::Every { period, printed } => (Some(period), printed),
        _ => (None, false),
    };
    let mut workload = run.follow(command, &spec.probe.filter.pids)?;
    let started = Instant::now();
    workload.release()?;
    // User frames are named from the processes' mappings, saved while they live.
    let mut maps_ticker = user_stacks.then(|| tokio::time::interval(MapsWatcher::PERIOD));
    if let (true, Some(pid)) = (user_stacks, workload.pid()) {
        maps.after_exec(pid).await;
    }
    eprintln!(
        "hotprof: {}{}",
        run.layout().attached(),
        match (workload.is_some(), plan.duration) {
            (true, _) => format!(", running: {}", command.join(" ")),
            (false, Some(d)) => format!(", for {}", crate::units::format_ns(d.as_nanos() as f64)),
            (false, None) => ", Ctrl-C to stop".to_string(),
        }
    );

    let mut modules = run.module_watcher(&spec.probe);
    let mut modules_ticker = modules
        .is_some()
        .then(|| tokio::time::interval(ModuleWatcher::PERIOD));
    let deadline = plan.duration.map(|d| tokio::time::Instant::now() + d);
    let mut ticker = interval.map(|i| tokio::time::interval_at(tokio::time::Instant::now() + i, i));
    // Elapsed/remaining of --duration on a terminal; not while a workload runs, whose own
    // output would interleave with the redrawn line.
    let mut progress = Progress::stderr();
    let mut progress_ticker = deadline
        .filter(|_| !workload.is_some() && progress.is_enabled())
        .map(|_| tokio::time::interval(Duration::from_millis(250)));
    let mut reports = IntervalReports {
        previous: since.clone(),
        previous_at: Duration::ZERO,
        index: 0,
        period: interval.unwrap_or_default(),
        printed,
    };
    let mut outcome = RunOutcome {
        exit_code: 0,
        elapsed: Duration::ZERO,
        interrupted: false,
        workload_metrics: Default::default(),
        intervals: Vec::new(),
        last_report: None,
    };
    loop {
        tokio::select! {
            signal = signals.recv() => {
                workload.signal(signal);
                outcome.interrupted = true;
                break;
            }
            status = workload.exit(), if workload.running() => {
                outcome.exit_code = status?;
                break;
            }
            _ = async { tokio::time::sleep_until(deadline.unwrap()).await }, if deadline.is_some() => {
                workload.signal(libc::SIGTERM);
                break;
            }
            _ = async { maps_ticker.as_mut().unwrap().tick().await }, if maps_ticker.is_some() => {
                run.poll_maps(maps);
            }
            _ = async { modules_ticker.as_mut().unwrap().tick().await }, if modules_ticker.is_some() => {
                for note in modules.as_mut().map(|m| m.poll(started.elapsed())).unwrap_or_default() {
                    progress.clear();
                    eprintln!("hotprof: note: {note}");
                }
            }
            _ = async { ticker.as_mut().unwrap().tick().await }, if ticker.is_some() => {
                progress.clear();
                let record = reports.take(run, plan, started)?;
                outcome.intervals.push(record);
            }
            _ = async { progress_ticker.as_mut().unwrap().tick().await }, if progress_ticker.is_some() => {
                progress.waiting(started.elapsed(), plan.duration.unwrap_or_default());
            }
        }
    }
    progress.clear();
    // A heatmap's last column is what the run's final read adds to the last report (see
    // `assemble`): calls after this point, as the workload is reaped, are in the total too.
    if plan.outputs.heatmap.is_some() {
        outcome.last_report = Some(LastReport {
            snapshot: reports.previous,
            at: started + reports.previous_at,
            index: reports.index,
        });
    }
    outcome.elapsed = started.elapsed();
    // Stopped by a signal or the deadline: the workload was told to stop; reap it so it is
    // not left behind (killed if it ignores the request).
    if let Some(code) = workload.reap().await {
        outcome.exit_code = code;
    }
    outcome.workload_metrics = workload.metrics();
    Ok(outcome)
}

/// Fails before anything is measured if `path` (given to `option`) cannot be written, so no
/// run is lost to a typo; the error names the option, as one run may have several outputs.
fn check_writable(option: &str, path: &std::path::Path) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        bail!(
            "{option} {}: directory {} does not exist",
            path.display(),
            dir.display()
        );
    }
    if path.is_dir() {
        bail!("{option} {}: is a directory", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use clap::Parser as _;

    use super::*;

    fn args(line: &[&str]) -> RecordArgs {
        let argv = std::iter::once("hotprof").chain(line.iter().copied());
        crate::cli::Cli::try_parse_from(argv).unwrap().record
    }

    fn error<T>(result: anyhow::Result<T>) -> String {
        match result {
            Ok(_) => panic!("accepted"),
            Err(error) => error.to_string(),
        }
    }

    /// A directory of its own under the system's temporary one, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let path =
                std::env::temp_dir().join(format!("hotprof-record-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn runs_need_a_workload_and_no_interval() {
        let no_workload = args(&["--fn", "vfs_read", "--runs", "3"]);
        assert_eq!(
            error(check_options(&no_workload)),
            "--runs needs a workload command after --"
        );
        let with_interval = args(&[
            "--fn",
            "vfs_read",
            "--runs",
            "3",
            "--interval",
            "1s",
            "--",
            "true",
        ]);
        assert_eq!(
            error(check_options(&with_interval)),
            "--runs and --interval cannot be combined"
        );
        // The workload rule comes first.
        let both = args(&["--fn", "vfs_read", "--runs", "3", "--interval", "1s"]);
        assert_eq!(
            error(check_options(&both)),
            "--runs needs a workload command after --"
        );
        for fine in [
            &["--fn", "vfs_read", "--runs", "3", "--", "true"][..],
            &["--fn", "vfs_read", "--interval", "1s"],
            &["--fn", "vfs_read", "--interval", "1s", "--", "true"],
            &["--fn", "vfs_read", "--runs", "1", "--interval", "1s"],
            &["--fn", "vfs_read"],
        ] {
            assert!(check_options(&args(fine)).is_ok(), "{fine:?}");
        }
    }

    #[test]
    fn the_session_is_checked_before_the_options() {
        let nothing = args(&["--runs", "3"]);
        assert!(error(nothing.session_spec()).starts_with("nothing to measure"));
        let both = args(&["--fn", "vfs_read", "--syscall", "getpid", "--runs", "3"]);
        assert_eq!(
            error(both.session_spec()),
            "--fn and --syscall cannot be combined in one run"
        );
        let runs = args(&["--fn", "vfs_read", "--runs", "3"]);
        assert_eq!(
            error(runs.plan()),
            "--runs needs a workload command after --"
        );
    }

    #[test]
    fn an_output_needs_an_existing_directory_and_must_not_be_one() {
        let dir = TempDir::new("writable");
        let missing = dir.0.join("no-such-dir").join("out.json");
        assert_eq!(
            error(check_writable("--json", &missing)),
            format!(
                "--json {}: directory {} does not exist",
                missing.display(),
                dir.0.join("no-such-dir").display()
            )
        );
        assert_eq!(
            error(check_writable("--html", &dir.0)),
            format!("--html {}: is a directory", dir.0.display())
        );
        // A new file and an existing one are both fine, and nothing is created.
        let fresh = dir.0.join("out.json");
        assert!(check_writable("--json", &fresh).is_ok());
        assert!(!fresh.exists());
        std::fs::write(&fresh, b"old").unwrap();
        assert!(check_writable("--json", &fresh).is_ok());
        // A bare file name is in the current directory.
        assert!(check_writable("--folded", Path::new("stacks.folded")).is_ok());
    }

    #[test]
    fn every_output_option_is_checked_and_named() {
        let dir = TempDir::new("options");
        let missing = dir.0.join("missing").join("out");
        let missing = missing.to_str().unwrap();
        for option in ["--json", "--flamegraph", "--folded", "--pprof", "--html"] {
            let message = error(check_options(&args(&["--fn", "vfs_read", option, missing])));
            assert_eq!(
                message,
                format!(
                    "{option} {missing}: directory {} does not exist",
                    dir.0.join("missing").display()
                )
            );
        }
        let fine = dir.0.join("out");
        let fine = fine.to_str().unwrap();
        assert!(
            check_options(&args(&["--fn", "vfs_read", "--json", fine, "--html", fine])).is_ok()
        );
        // The first unwritable output is the one named.
        let directory = dir.0.to_str().unwrap();
        let message = error(check_options(&args(&[
            "--fn", "vfs_read", "--json", fine, "--pprof", directory, "--html", missing,
        ])));
        assert!(message.starts_with("--pprof "), "{message}");
        assert!(message.ends_with(": is a directory"), "{message}");
    }
}
