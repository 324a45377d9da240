//! `hotprof --fn …` / `--syscall …`: the pipeline resolve → attach → collect → model → report.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use aya::maps::HashMap;
use tokio::signal::unix::{SignalKind, signal};

use crate::attach::{self, AttachedMode, ProbeConfig, TracepointOffsets};
use crate::cli::{FilterArgs, RecordArgs};
use crate::collect::{self, Snapshot};
use crate::model::{
    FunctionRecord, IntervalFunction, IntervalRecord, Recording, RunRecord, SCHEMA_VERSION,
    TaskStore,
};
use crate::progress::Progress;
use crate::report;
use crate::resolve::{self, KernelFunctions};
use crate::workload::Workload;

/// One probed function or syscall: what the user asked for and what was attached.
pub(crate) struct Probed {
    pub(crate) name: String,
    pub(crate) symbol: String,
}

/// The probes of one invocation, loaded and attached: what `hotprof` (record) and
/// `hotprof serve` share. Dropping `links` and `ebpf` detaches and unloads everything.
pub(crate) struct Attached {
    pub(crate) ebpf: aya::Ebpf,
    /// kprobe mode's links, owned apart from `ebpf` so they close in parallel.
    pub(crate) links: attach::KprobeLinks,
    pub(crate) probed: Vec<Probed>,
    pub(crate) targets: Vec<resolve::Target>,
    pub(crate) mode: AttachedMode,
    /// Where the loaded object keeps per-task state (what this kernel can create).
    pub(crate) task_store: TaskStore,
    /// Calibrated probe overhead per call (ns), unless skipped or not measurable.
    pub(crate) overhead: Option<f64>,
}

/// Checks the arguments and the system before anything is loaded, so a typo costs nothing;
/// returns the filters as the probes compare them.
pub(crate) fn validate(args: &RecordArgs) -> anyhow::Result<Filters> {
    if args.probe.functions.is_empty() && args.probe.syscalls.is_empty() {
        bail!("nothing to measure: give --fn FUNC or --syscall NAME (see hotprof --help)");
    }
    if !args.probe.functions.is_empty() && !args.probe.syscalls.is_empty() {
        bail!("--fn and --syscall cannot be combined in one run");
    }
    if args.runs > 1 && args.command.is_empty() {
        bail!("--runs needs a workload command after --");
    }
    if args.runs > 1 && args.interval.is_some() {
        bail!("--runs and --interval cannot be combined");
    }
    if !args.command.is_empty() && !args.probe.filter.pids.is_empty() {
        bail!("give either -p/--pid or a command after --, not both");
    }
    let filter = validate_filters(&args.probe.filter)?;
    for (option, path) in [
        ("--json", &args.json),
        ("--flamegraph", &args.flamegraph),
        ("--folded", &args.folded),
        ("--pprof", &args.pprof),
        ("--html", &args.html),
    ] {
        if let Some(path) = path {
            check_writable(option, path)?;
        }
    }
    if let Some(program) = args.command.first() {
        crate::workload::check_runnable(program)?;
    }
    attach::check_privileges().map_err(anyhow::Error::msg)?;
    Ok(filter)
}

/// Resolves the targets, loads the programs with `args`' filters and attaches them, then
/// calibrates the probe overhead (unless `--no-calibrate`).
pub(crate) fn attach_probes(args: &RecordArgs, filter: Filters) -> anyhow::Result<Attached> {
    let tracefs = resolve::tracefs_root();

    let mut targets = Vec::new();
    let mut kernel = None;
    let probed: Vec<Probed> = if !args.probe.functions.is_empty() {
        let functions =
            kernel.insert(KernelFunctions::from_system().context("cannot read /proc/kallsyms")?);
        let btf = aya::Btf::from_sys_fs().ok();
        let in_btf = |name: &str| {
            btf.as_ref().is_some_and(|b| {
                b.id_by_type_name_kind(name, aya_obj::btf::BtfKind::Func)
                    .is_ok()
            })
        };
        let mut names = Vec::new();
        for requested in &args.probe.functions {
            for target in functions.resolve(requested, &in_btf)? {
                if let Some(note) = &target.note {
                    eprintln!("hotprof: note: {note}");
                }
                if !targets
                    .iter()
                    .any(|t: &resolve::Target| t.symbol == target.symbol)
                {
                    let name = if resolve::is_glob(requested) {
                        target.symbol.clone()
                    } else {
                        requested.clone()
                    };
                    names.push(Probed {
                        name,
                        symbol: target.symbol.clone(),
                    });
                    targets.push(target);
                }
            }
        }
        names
    } else {
        if tracefs.is_none() {
            bail!("--syscall needs tracefs (mount -t tracefs tracefs /sys/kernel/tracing)");
        }
        args.probe
            .syscalls
            .iter()
            .map(|s| Probed {
                name: s.clone(),
                symbol: format!("sys_enter_{s}"),
            })
            .collect()
    };

    let follow = !args.command.is_empty();
    let offsets = match &tracefs {
        Some(root) if follow || args.off_cpu => {
            Some(TracepointOffsets::read(root).map_err(anyhow::Error::msg)?)
        }
        _ => None,
    };
    let config = ProbeConfig {
        functions: probed.len() as u32,
        filter_tgids: follow || !args.probe.filter.pids.is_empty(),
        exclude_tgid: Some(std::process::id()),
        tid: args.probe.filter.tid,
        cpu: args.probe.filter.cpu,
        cgroup_id: filter.cgroup_id,
        comm: filter.comm,
        min_latency_ns: args.probe.min_latency.map_or(0, |d| d.as_nanos() as u64),
        off_cpu: args.off_cpu,
        capture_stacks: if args.user_stacks {
            2
        } else {
            u8::from(args.wants_stacks())
        },
        sampling: false,
        stack_map_size: args.stack_map_size,
        offsets,
    };
    let attach::Loaded {
        mut ebpf,
        task_store,
    } = attach::load(&config).map_err(|e| anyhow::anyhow!("cannot load the eBPF programs: {e}"))?;
    let mut links = attach::KprobeLinks::default();
    let mode = if targets.is_empty() {
        attach::attach_syscalls(
            &mut ebpf,
            &args.probe.syscalls,
            tracefs.as_deref().unwrap_or(std::path::Path::new("")),
        )?;
        AttachedMode::Syscall
    } else {
        if args.probe.mode == attach::Mode::Kprobe && !attach::kprobes_available() {
            return Err(attach::AttachError::NoKprobes {
                release: crate::kernel_release(),
                fentry: None,
            }
            .into());
        }
        if let Err(err) = attach::raise_fd_limit(targets.len()) {
            eprintln!("hotprof: note: could not raise the open-file limit: {err}");
        }
        let mut progress = Progress::stderr();
        let attached =
            attach::attach_functions(&mut ebpf, &targets, args.probe.mode, &mut progress)?;
        progress.clear();
        for note in attached.notes {
            eprintln!("hotprof: note: {note}");
        }
        links = attached.links;
        attached.mode
    };
    attach::attach_tracking(&mut ebpf, task_store, args.off_cpu, follow)?;
    let overhead = if args.probe.no_calibrate {
        None
    } else {
        match crate::calibrate::measure(mode, task_store, kernel.as_ref()) {
            Ok(overhead) => Some(overhead.per_call_ns),
            Err(reason) => {
                eprintln!("hotprof: note: probe overhead not calibrated: {reason}");
                None
            }
        }
    };
    Ok(Attached {
        ebpf,
        links,
        probed,
        targets,
        mode,
        task_store,
        overhead,
    })
}

/// Runs a recording; returns the process exit code (the workload's, when there is one).
pub async fn run(args: RecordArgs) -> anyhow::Result<i32> {
    let filter = validate(&args)?;
    let Attached {
        mut ebpf,
        links,
        probed,
        targets,
        mode,
        task_store,
        overhead,
    } = attach_probes(&args, filter)?;
    let follow = !args.command.is_empty();

    let session = Session {
        probed: &probed,
        mode,
        task_store,
        overhead,
        args: &args,
    };
    let mut signals = Signals {
        int: signal(SignalKind::interrupt())?,
        term: signal(SignalKind::terminate())?,
    };
    let started = Instant::now();
    let mut runs = Vec::new();
    let mut intervals = Vec::new();
    let mut exit_code = 0;
    let mut previous = Snapshot::default();
    for run in 1..=args.runs {
        if args.runs > 1 {
            eprintln!("hotprof: run {run}/{}", args.runs);
        }
        let mut outcome = measure(&mut ebpf, &session, &mut signals, &previous).await?;
        exit_code = outcome.exit_code;
        intervals.append(&mut outcome.intervals);
        let now = collect::snapshot(&ebpf, probed.len())?;
        if follow {
            let delta = now.since(&previous);
            let single = session.recording(&delta, outcome.elapsed);
            runs.push(RunRecord {
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
    let last = collect::snapshot(&ebpf, probed.len())?;
    let kernel_missed = attach::recursion_misses(&ebpf);
    let stacks = if args.wants_stacks() {
        Some(collect::stacks(&ebpf)?)
    } else {
        None
    };
    // Detach every probe before printing.
    drop(links);
    drop(ebpf);
    let mut recording = session.recording(&last, started.elapsed());
    recording.losses.kernel_missed = kernel_missed;
    recording.runs = runs;
    recording.intervals = intervals;
    if args.interval.is_some() || args.runs > 1 {
        println!(
            "--- total{}",
            if args.runs > 1 {
                format!(" of {} runs", recording.runs.len())
            } else {
                String::new()
            }
        );
    }
    print!("{}", report::render_recording(&recording));
    let flamegraph = match stacks {
        Some(stacks) => write_stacks(&args, &recording, &stacks, &targets)?,
        None => None,
    };
    if let Some(path) = &args.html {
        let page = crate::export::html::render_recording(&recording, flamegraph.as_deref());
        std::fs::write(path, page).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    if let Some(path) = &args.json {
        report::write_json(&recording, path)?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    Ok(exit_code)
}

/// `--stacks` outputs: a top-stacks summary, `--folded`, `--pprof` and `--flamegraph`.
/// Returns the flamegraph SVG (for `--html`), rendered whenever an output wants it.
fn write_stacks(
    args: &RecordArgs,
    recording: &Recording,
    stacks: &[collect::CollectedStack],
    targets: &[resolve::Target],
) -> anyhow::Result<Option<Vec<u8>>> {
    use crate::flame::Weight;
    use crate::report::stacks as out;
    let kernel =
        crate::flame::KernelSymbolizer::from_system().context("cannot symbolize kernel stacks")?;
    let weight = match args.weight {
        crate::cli::StackWeight::Latency => Weight::LatencyNs,
        crate::cli::StackWeight::Count => Weight::Count,
    };
    let mut records = Vec::new();
    for id in 0..recording.functions.len() {
        let leaf = targets.get(id).map(|t| (t.symbol.as_str(), t.address));
        records.extend(out::records_for(stacks, id as u32, leaf, &kernel));
    }
    let folded = out::fold(&records, weight, &kernel, args.user_stacks);
    print!("{}", out::top_stacks(&folded, weight.count_name(), 5));
    if let Some(path) = &args.folded {
        out::write_folded(&folded, path)?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    if let Some(path) = &args.pprof {
        // Latency and calls per stack, frames root first as pprof wants them.
        let by_latency = out::fold(&records, Weight::LatencyNs, &kernel, args.user_stacks);
        let by_count: std::collections::HashMap<String, u64> =
            out::fold(&records, Weight::Count, &kernel, args.user_stacks)
                .into_iter()
                .collect();
        let samples: Vec<crate::export::pprof::StackSample> = by_latency
            .into_iter()
            .map(|(stack, ns)| {
                let calls = by_count.get(&stack).copied().unwrap_or(0);
                let frames = stack
                    .split(';')
                    .map(|f| f.trim_end_matches(crate::flame::KERNEL_SUFFIX).to_string())
                    .collect();
                (frames, ns, calls)
            })
            .collect();
        let meta = crate::export::pprof::ProfileMeta {
            duration_nanos: recording.duration_ns,
            comments: vec![format!(
                "hotprof {} mode, kernel {}",
                recording.mode, recording.kernel
            )],
            ..Default::default()
        };
        std::fs::write(path, crate::export::pprof::encode(&samples, &meta))
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    if args.flamegraph.is_none() && args.html.is_none() {
        return Ok(None);
    }
    {
        let names: Vec<&str> = recording
            .functions
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        let title = format!("hotprof: {} by call path", names.join(", "));
        let summary: Vec<String> = recording
            .functions
            .iter()
            .map(|f| {
                format!(
                    "{}: {} calls, total {}, p50 {}, p99 {}",
                    f.name,
                    f.count,
                    crate::units::format_ns(f.sum_ns as f64),
                    crate::units::format_ns(f.p50_ns as f64),
                    crate::units::format_ns(f.p99_ns as f64)
                )
            })
            .collect();
        let subtitle = format!(
            "{} mode, kernel {}; width = {}; {}",
            recording.mode,
            recording.kernel,
            if weight == Weight::LatencyNs {
                "latency (ns)"
            } else {
                "calls"
            },
            summary.join("; ")
        );
        let svg =
            crate::flame::render_flamegraph(&folded, &title, Some(&subtitle), weight.count_name())?;
        if let Some(path) = &args.flamegraph {
            std::fs::write(path, &svg)
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("hotprof: wrote {}", path.display());
        }
        Ok(Some(svg))
    }
}

/// What stays the same across the runs of one invocation.
pub(crate) struct Session<'a> {
    pub(crate) probed: &'a [Probed],
    pub(crate) mode: AttachedMode,
    pub(crate) task_store: TaskStore,
    pub(crate) overhead: Option<f64>,
    pub(crate) args: &'a RecordArgs,
}

struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
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
}

/// CPU time this thread has used (the runtime is single-threaded, so this is hotprof's own
/// work, whatever else the machine is doing).
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_THREAD_CPUTIME_ID exists on every Linux (2.6.12).
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
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
            })
            .collect(),
    }
}

/// One measurement: runs the workload (if any) to its end, or waits for the duration or a
/// signal, printing interval reports on the way.
async fn measure(
    ebpf: &mut aya::Ebpf,
    session: &Session<'_>,
    signals: &mut Signals,
    since: &Snapshot,
) -> anyhow::Result<RunOutcome> {
    let args = session.args;
    let mut workload = spawn_followed(ebpf, args)?;
    let started = Instant::now();
    if let Some(w) = workload.as_mut() {
        w.release()?;
    }
    eprintln!(
        "hotprof: {} {} attached ({} mode){}",
        session.probed.len(),
        if session.mode == AttachedMode::Syscall {
            "syscall(s)"
        } else {
            "function(s)"
        },
        session.mode.as_str(),
        match (&workload, args.duration) {
            (Some(_), _) => format!(", running: {}", args.command.join(" ")),
            (None, Some(d)) => format!(", for {}", crate::units::format_ns(d.as_nanos() as f64)),
            (None, None) => ", Ctrl-C to stop".to_string(),
        }
    );

    let mut exited = workload.as_ref().map(|w| {
        let pid = w.pid;
        tokio::task::spawn_blocking(move || crate::workload::wait_pid(pid))
    });
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    let mut ticker = args
        .interval
        .map(|i| tokio::time::interval_at(tokio::time::Instant::now() + i, i));
    // Elapsed/remaining of --duration on a terminal; not while a workload runs, whose own
    // output would interleave with the redrawn line.
    let mut progress = Progress::stderr();
    let mut progress_ticker = deadline
        .filter(|_| workload.is_none() && progress.is_enabled())
        .map(|_| tokio::time::interval(Duration::from_millis(250)));
    let mut previous = since.clone();
    let mut previous_at = Duration::ZERO;
    let mut interval_index = 0u64;
    let mut outcome = RunOutcome {
        exit_code: 0,
        elapsed: Duration::ZERO,
        interrupted: false,
        workload_metrics: Default::default(),
        intervals: Vec::new(),
    };
    loop {
        tokio::select! {
            _ = signals.int.recv() => {
                if let Some(w) = &workload { w.signal(libc::SIGINT); }
                outcome.interrupted = true;
                break;
            }
            _ = signals.term.recv() => {
                if let Some(w) = &workload { w.signal(libc::SIGTERM); }
                outcome.interrupted = true;
                break;
            }
            status = async { exited.as_mut().unwrap().await }, if exited.is_some() => {
                outcome.exit_code = status.context("waiting for the workload")?.context("waiting for the workload")?;
                exited = None;
                break;
            }
            _ = async { tokio::time::sleep_until(deadline.unwrap()).await }, if deadline.is_some() => {
                if let Some(w) = &workload { w.signal(libc::SIGTERM); }
                break;
            }
            _ = async { ticker.as_mut().unwrap().tick().await }, if ticker.is_some() => {
                interval_index += 1;
                progress.clear();
                let woke_at = started.elapsed();
                let cpu_at = thread_cpu_time();
                let now = collect::snapshot(ebpf, session.probed.len())?;
                let elapsed = started.elapsed();
                // Counted by the probes as they create entries: no walk of the map per report.
                let stack_entries = args.wants_stacks().then(|| now.counter(profiler_common::Counter::StackEntries));
                let recording = session.recording(&now.since(&previous), args.interval.unwrap_or_default());
                println!("--- interval {interval_index} ({} elapsed)", crate::units::format_ns(elapsed.as_nanos() as f64));
                print!("{}", report::render_recording(&recording));
                println!("{}", report::render_map_entries(now.task_entries, stack_entries));
                let mut record = interval_record(
                    interval_index,
                    elapsed,
                    elapsed - previous_at,
                    now.task_entries,
                    stack_entries,
                    &recording,
                );
                record.report_ns = Some((started.elapsed() - woke_at).as_nanos() as u64);
                record.report_cpu_ns = Some((thread_cpu_time().saturating_sub(cpu_at)).as_nanos() as u64);
                outcome.intervals.push(record);
                previous = now;
                previous_at = elapsed;
            }
            _ = async { progress_ticker.as_mut().unwrap().tick().await }, if progress_ticker.is_some() => {
                progress.waiting(started.elapsed(), args.duration.unwrap_or_default());
            }
        }
    }
    progress.clear();
    outcome.elapsed = started.elapsed();
    if let Some(waiting) = exited {
        // Stopped by a signal or the deadline: the workload was told to stop; reap it so it
        // is not left behind, and kill it if it ignores the request.
        match tokio::time::timeout(Duration::from_secs(5), waiting).await {
            Ok(Ok(Ok(code))) => outcome.exit_code = code,
            _ => {
                if let Some(w) = &workload {
                    w.signal(libc::SIGKILL);
                }
            }
        }
    }
    if let Some(w) = workload.as_mut() {
        outcome.workload_metrics = w.metrics();
    }
    Ok(outcome)
}

/// Spawns the workload after `--` (held at its gate: [`Workload::release`] starts it) and
/// tells the probes which processes to follow: the workload, or the `-p` processes.
pub(crate) fn spawn_followed(
    ebpf: &mut aya::Ebpf,
    args: &RecordArgs,
) -> anyhow::Result<Option<Workload>> {
    let workload = if args.command.is_empty() {
        None
    } else {
        Some(Workload::spawn(&args.command)?)
    };
    let mut tgids: HashMap<_, u32, u8> = HashMap::try_from(
        ebpf.map_mut(profiler_common::names::TGIDS)
            .context("TGIDS map missing")?,
    )?;
    let pids = workload
        .as_ref()
        .map(|w| vec![w.pid])
        .unwrap_or_else(|| args.probe.filter.pids.clone());
    for pid in pids {
        tgids.insert(pid, 1, 0)?;
    }
    Ok(workload)
}

impl Session<'_> {
    /// A recording of `snapshot` (cumulative or one run's delta) over `elapsed`.
    pub(crate) fn recording(&self, snapshot: &Snapshot, elapsed: Duration) -> Recording {
        let functions = self
            .probed
            .iter()
            .zip(&snapshot.functions)
            .map(|(p, t)| {
                let mut record = FunctionRecord::from_aggregates(
                    p.name.clone(),
                    p.symbol.clone(),
                    &t.histogram,
                    t.count,
                    t.sum_ns,
                    t.sum_sq_ns2,
                    t.min_ns,
                    t.max_ns,
                );
                record.below_min_latency = t.below_min;
                record.self_sum_ns = t.self_sum_ns;
                record.outer_count = t.outer_count;
                record.outer_sum_ns = t.outer_sum_ns;
                record.on_cpu_sum_ns = self.args.off_cpu.then_some(t.on_cpu_sum_ns);
                record
            })
            .collect();
        Recording {
            schema_version: SCHEMA_VERSION,
            tool: format!("hotprof {}", env!("CARGO_PKG_VERSION")),
            kernel: crate::kernel_release(),
            mode: self.mode.as_str().into(),
            task_store: Some(self.task_store),
            duration_ns: elapsed.as_nanos() as u64,
            command: self.args.command.clone(),
            functions,
            losses: snapshot.losses(),
            probe_overhead_ns: self.overhead,
            runs: Vec::new(),
            intervals: Vec::new(),
        }
    }
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

pub(crate) struct Filters {
    cgroup_id: Option<u64>,
    comm: Option<[u8; 16]>,
}

/// Checks filter arguments against the system, turning them into what the probes compare.
fn validate_filters(filter: &FilterArgs) -> anyhow::Result<Filters> {
    for pid in &filter.pids {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process with pid {pid}");
        }
    }
    if let Some(cpu) = filter.cpu {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        if cpu >= cpus {
            bail!("--cpu {cpu}: this machine has CPUs 0..{}", cpus - 1);
        }
    }
    let comm = match &filter.comm {
        None => None,
        Some(comm) if comm.is_empty() || comm.len() > 15 => {
            bail!("--comm '{comm}': a command name has 1 to 15 bytes")
        }
        Some(comm) => {
            let mut bytes = [0u8; 16];
            bytes[..comm.len()].copy_from_slice(comm.as_bytes());
            Some(bytes)
        }
    };
    let cgroup_id = match &filter.cgroup {
        None => None,
        Some(path) => {
            use std::os::unix::fs::MetadataExt as _;
            let meta =
                std::fs::metadata(path).with_context(|| format!("--cgroup {}", path.display()))?;
            if !meta.is_dir() {
                bail!("--cgroup {}: not a cgroup directory", path.display());
            }
            Some(meta.ino())
        }
    };
    Ok(Filters { cgroup_id, comm })
}
