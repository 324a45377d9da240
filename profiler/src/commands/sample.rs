//! `hotprof sample`: on-CPU sampling profile with kernel and user stacks via perf_event, the
//! equivalent of `perf record -g` + a flamegraph + `perf report`'s top table. Works on any
//! kernel with perf events (no kprobes needed).

use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::args::{DEFAULT_STACK_MAP_SIZE, worded};
use crate::collect::CollectedStack;
use crate::session::{
    self, FilterSpec, Filters, MapsWatcher, ProbeSpec, Run, SessionSpec, Signals, Targets,
};

const EXAMPLES: &str = "\
Examples:
  # Where a getpid loop spends its CPU, like perf record -g (no kprobes needed)
  sudo hotprof sample --flamegraph cpu.svg -- syscall_lat 5000000
  # A running process for 10 s, top 30 rows
  sudo hotprof sample -p 1234 --duration 10s --top 30";

/// Options of `hotprof sample`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct SampleArgs {
    /// Samples per second per CPU.
    #[arg(long, default_value_t = 999, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub freq: u64,
    /// Stop after this long (default: when the workload exits, or Ctrl-C).
    #[arg(long, value_parser = crate::units::parse_positive_duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// Only this process (and not its children).
    #[arg(short = 'p', long = "pid", value_parser = clap::value_parser!(u32).range(1..))]
    pub pid: Option<u32>,
    /// Write a flamegraph SVG of the samples.
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<std::path::PathBuf>,
    /// Write the samples in folded format.
    #[arg(long, value_name = "FILE")]
    pub folded: Option<std::path::PathBuf>,
    /// Rows in the top table.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Only samples taken while the sampled task is inside FUNC (FUNC's entry and return are
    /// probed; its frames live in the task's own storage): a flamegraph of what runs inside
    /// FUNC, including inlined and notrace code no probe can time.
    /// Example: `hotprof sample --inside generic_perform_write -- dd if=/dev/zero of=/dev/shm/x bs=1M count=64`.
    #[arg(long, value_name = "FUNC")]
    pub inside: Option<String>,
    /// Distinct stacks kept in the kernel.
    #[arg(long, default_value_t = DEFAULT_STACK_MAP_SIZE, value_parser = clap::value_parser!(u32).range(16..=1_048_576))]
    pub stack_map_size: u32,
    /// Workload to run and sample (its process tree only).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// What a sampling session collected.
pub struct Samples {
    pub stacks: Vec<CollectedStack>,
    pub elapsed: Duration,
    pub lost_stacks: u64,
    pub full: u64,
    /// `--inside`: samples of traced tasks outside the function, left out.
    pub outside: u64,
    /// `--inside`: the function's symbol and address.
    pub inside: Option<(String, u64)>,
    /// The sampled processes' mappings, saved while they lived.
    pub maps: crate::flame::SavedMaps,
    pub exit_code: i32,
}

/// `hotprof sample`: collect, then report.
pub async fn run(args: &SampleArgs) -> anyhow::Result<i32> {
    use crate::report::stacks as out;
    let samples = collect(args).await?;
    let total: u64 = samples.stacks.iter().map(|s| s.count).sum();
    let kernel =
        crate::flame::KernelSymbolizer::from_system().context("cannot symbolize kernel stacks")?;
    // Inside a function: a sample in the function's own entry or return probe has the probe's
    // frames, not the function's, on top.
    let records = match &samples.inside {
        Some((symbol, address)) => {
            out::inside_records(&samples.stacks, (symbol.as_str(), *address), &kernel)
        }
        None => out::sampled_records(&samples.stacks),
    };
    println!(
        "hotprof sample: {total} samples, {} distinct stacks, {} at {} Hz, kernel {}",
        samples.stacks.len(),
        crate::units::format_ns(samples.elapsed.as_nanos() as f64),
        args.freq,
        crate::kernel_release()
    );
    if let Some(function) = &args.inside {
        println!(
            "only inside {function}: {} samples of the traced tasks outside it left out",
            samples.outside
        );
    }
    print!(
        "{}",
        out::top_table(&records, &kernel, Some(&samples.maps), args.top)
    );
    if samples.lost_stacks + samples.full > 0 {
        println!(
            "losses: {} stacks not stored, {} samples missing from the totals (raise --stack-map-size)",
            samples.lost_stacks, samples.full
        );
    } else {
        println!("losses: none");
    }
    if args.folded.is_some() || args.flamegraph.is_some() {
        let folded = out::fold(
            &records,
            crate::flame::Weight::Count,
            &kernel,
            Some(&samples.maps),
        );
        if let Some(path) = &args.folded {
            out::write_folded(&folded, path)?;
            eprintln!("hotprof: wrote {}", path.display());
        }
        if let Some(path) = &args.flamegraph {
            let subtitle = format!(
                "on-CPU samples at {} Hz, kernel {}, {total} samples",
                args.freq,
                crate::kernel_release()
            );
            out::write_flamegraph(
                &folded,
                "hotprof sample: on-CPU flame graph",
                &subtitle,
                "samples",
                path,
            )?;
            eprintln!("hotprof: wrote {}", path.display());
        }
    }
    Ok(samples.exit_code)
}

/// Runs the sampling session and returns the raw samples (symbolized by the caller).
pub async fn collect(args: &SampleArgs) -> anyhow::Result<Samples> {
    let pids: Vec<u32> = args.pid.into_iter().collect();
    session::check_processes(&pids, &args.command).map_err(worded)?;
    if let Some(pid) = args.pid {
        session::check_pid(pid).map_err(worded)?;
    }
    session::check_system(&args.command)?;
    let follow = !args.command.is_empty();
    // With --inside, the function's probes too (whose frames the sampler checks).
    let probe = match &args.inside {
        Some(function) => ProbeSpec {
            targets: Targets::Functions(vec![function.clone()]),
            // Any frame of the functions it names counts as inside.
            max_functions: usize::MAX,
            filter: FilterSpec {
                pids: pids.clone(),
                ..FilterSpec::default()
            },
            ..ProbeSpec::default()
        },
        None => ProbeSpec {
            filter: FilterSpec {
                pids: pids.clone(),
                ..FilterSpec::default()
            },
            ..ProbeSpec::default()
        },
    };
    let spec = SessionSpec {
        probe,
        stack_map_size: args.stack_map_size,
        command: args.command.clone(),
        sample_inside: args.inside.is_some(),
        sample_frequency: Some(args.freq),
        ..SessionSpec::default()
    };
    let filters = match args.inside {
        Some(_) => session::validate(&spec).map_err(worded)?,
        None => Filters::default(),
    };
    let mut signals = Signals::new()?;
    let mut run = Run::start(&spec, &filters).map_err(worded)?;
    let inside = run.targets().first().map(|t| (t.symbol.clone(), t.address));

    let mut workload = run.follow(&args.command, &pids)?;
    let started = Instant::now();
    workload.release()?;
    eprintln!(
        "hotprof: sampling {} CPU(s) at {} Hz{}",
        run.sampled_cpus(),
        args.freq,
        if follow {
            format!(", running: {}", args.command.join(" "))
        } else {
            String::new()
        }
    );
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    let mut exit_code = 0;
    // User frames are named from the processes' mappings, saved while they live.
    let mut maps = MapsWatcher::default();
    if let Some(pid) = workload.pid() {
        maps.after_exec(pid).await;
    }
    pids.iter().for_each(|&pid| {
        maps.saved.save(pid);
    });
    let mut maps_ticker = tokio::time::interval(MapsWatcher::PERIOD);
    loop {
        tokio::select! {
            _ = signals.recv() => break,
            status = workload.exit(), if workload.running() => {
                exit_code = status?;
                break;
            }
            _ = async { tokio::time::sleep_until(deadline.unwrap()).await }, if deadline.is_some() => break,
            _ = maps_ticker.tick() => run.poll_maps(&mut maps),
        }
    }
    let elapsed = started.elapsed();
    if workload.running() {
        workload.signal(libc::SIGTERM);
        if let Some(code) = workload.reap().await {
            exit_code = code;
        }
    }
    let finished = run.finish()?;
    let counters = finished.snapshot;
    let stacks = finished.samples.unwrap_or_default();
    Ok(Samples {
        stacks,
        elapsed,
        lost_stacks: counters.counter(profiler_common::Counter::StackLost),
        full: counters.counter(profiler_common::Counter::StackTotalsFull),
        outside: counters.counter(profiler_common::Counter::OutsideParent),
        inside,
        maps: maps.saved,
        exit_code,
    })
}
