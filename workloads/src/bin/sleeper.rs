//! `sleeper COUNT MICROS [--alternate MICROS2]`: COUNT relative sleeps of MICROS µs each (every
//! second one MICROS2 µs long with `--alternate`: a known bimodal latency).
//!
//! Gives the profiler a workload whose kernel time is mostly spent blocked
//! (hrtimer sleeps), with a known number of sleeps and a known requested
//! length, to check off-CPU latency accounting against.

use std::process::ExitCode;
use std::time::Duration;

use workloads::cli::{Opt, parse_int};
use workloads::clock::{Stopwatch, timespec};
use workloads::report::average;
use workloads::{Args, Error, Report, run_main};

const NAME: &str = "sleeper";
const USAGE: &str = "\
sleeper - sleep COUNT times for MICROS microseconds each

Usage: sleeper COUNT MICROS [--alternate MICROS2]

  COUNT               number of sleeps (1..=10000000)
  MICROS              length of each sleep in microseconds (0..=60000000)
  --alternate MICROS2 every second sleep (the 2nd, 4th, ...) is MICROS2 long
                      instead: two modes of COUNT/2 sleeps each

Each sleep is one relative clock_nanosleep(CLOCK_MONOTONIC) call (resumed
with the remaining time if a signal interrupts it) and is timed with
CLOCK_MONOTONIC.

Output (last line):
  sleeper: count=C sleep_us=U[,U2] avg_ns=A p50_ns=M min_ns=L max_ns=H total_ns=S pid=P
    avg_ns, p50_ns, min_ns, max_ns  measured length of one sleep (p50: the median)
    total_ns                sum of all measured sleeps
";

fn main() -> ExitCode {
    run_main(NAME, USAGE, &[Opt::Value("alternate")], run)
}

fn run(args: &Args) -> Result<Report, Error> {
    let [count, micros] = args.positionals(["COUNT", "MICROS"])?;
    let count = parse_int("COUNT", count, 1, 10_000_000)?;
    let micros = parse_int("MICROS", micros, 0, 60_000_000)?;
    let alternate = match args.value("alternate") {
        Some(text) => parse_int("--alternate", text, 0, 60_000_000)?,
        None => micros,
    };
    let lengths = [micros, alternate].map(Duration::from_micros);
    let stats = sleep_repeatedly(count, lengths)?;
    let sleep_us = if alternate == micros {
        micros.to_string()
    } else {
        format!("{micros},{alternate}")
    };
    Ok(Report::new(NAME)
        .field("count", count)
        .field("sleep_us", sleep_us)
        .float("avg_ns", average(stats.total_ns, count), 1)
        .field("p50_ns", stats.median_ns)
        .field("min_ns", stats.min_ns)
        .field("max_ns", stats.max_ns)
        .field("total_ns", stats.total_ns)
        .field("pid", workloads::own_pid()))
}

/// Measured sleep lengths.
struct SleepStats {
    total_ns: u64,
    median_ns: u64,
    min_ns: u64,
    max_ns: u64,
}

/// `count` sleeps, the odd ones (1st, 3rd, …) `lengths[0]` long, the even ones `lengths[1]`.
fn sleep_repeatedly(count: u64, lengths: [Duration; 2]) -> Result<SleepStats, Error> {
    let mut stats = SleepStats {
        total_ns: 0,
        median_ns: 0,
        min_ns: u64::MAX,
        max_ns: 0,
    };
    let mut measured = Vec::with_capacity(count.min(1 << 20) as usize);
    for i in 0..count {
        let watch = Stopwatch::start();
        sleep_once(lengths[(i % 2) as usize])?;
        let slept = watch.elapsed_ns();
        stats.total_ns += slept;
        stats.min_ns = stats.min_ns.min(slept);
        stats.max_ns = stats.max_ns.max(slept);
        measured.push(slept);
    }
    measured.sort_unstable();
    stats.median_ns = measured[(measured.len() - 1) / 2];
    Ok(stats)
}

/// One relative sleep on CLOCK_MONOTONIC, resumed after signal interruptions.
fn sleep_once(length: Duration) -> Result<(), Error> {
    let mut request = timespec(length);
    loop {
        let mut remaining = timespec(Duration::ZERO);
        // SAFETY: both timespecs are valid; flags 0 means a relative sleep.
        let rc =
            unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &request, &mut remaining) };
        match rc {
            0 => return Ok(()),
            libc::EINTR => request = remaining,
            errno => {
                return Err(Error::os(
                    "clock_nanosleep",
                    std::io::Error::from_raw_os_error(errno),
                ));
            }
        }
    }
}
