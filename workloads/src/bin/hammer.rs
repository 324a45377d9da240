//! `hammer THREADS SECONDS`: getpid as fast as possible on several threads.
//!
//! The exact number of calls each thread made is printed so that a test can
//! compare it with the number of getpid calls the profiler counted under
//! load from several CPUs at once (lost or double-counted events show up as
//! a mismatch).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use workloads::cli::{parse_duration, parse_int};
use workloads::clock::Stopwatch;
use workloads::workers::run_workers;
use workloads::{Args, Error, Report, getpid_syscall, run_main};

const NAME: &str = "hammer";
const USAGE: &str = "\
hammer - call getpid in a tight loop on THREADS threads for SECONDS

Usage: hammer THREADS SECONDS

  THREADS  number of threads (1..=1024)
  SECONDS  how long to run: seconds, optionally fractional, or with a unit
           ns/us/ms/s (e.g. 2, 0.5, 250ms); at most 3600 s

Every call is a real system call (syscall(SYS_getpid)). The threads start
together and stop when the main thread, after sleeping SECONDS, raises a
flag they check between calls; each counts its calls exactly.

Output (last line):
  hammer: threads=T seconds=S calls=C per_thread=C0,C1,... tids=I0,I1,... elapsed_ns=E pid=P
    calls       total getpid calls, the sum of per_thread
    per_thread  calls made by each thread, in thread order
    tids        the kernel thread id of each thread, in the same order
    elapsed_ns  from releasing the threads to all of them having stopped
";

fn main() -> ExitCode {
    run_main(NAME, USAGE, &[], run)
}

fn run(args: &Args) -> Result<Report, Error> {
    let [threads, seconds] = args.positionals(["THREADS", "SECONDS"])?;
    let threads = parse_int("THREADS", threads, 1, 1024)?;
    let length = parse_duration(
        "SECONDS",
        seconds,
        Duration::from_nanos(1),
        Duration::from_secs(3600),
    )?;
    let stop = AtomicBool::new(false);
    let mut released = None;
    let results = run_workers(
        NAME,
        threads as usize,
        |_| hammer_until(&stop),
        || {
            released = Some(Stopwatch::start());
            std::thread::sleep(length);
            stop.store(true, Ordering::Relaxed);
        },
    )?;
    let elapsed_ns = released.map_or(0, |watch| watch.elapsed_ns());
    let counts: Vec<u64> = results.iter().map(|r| r.calls).collect();
    let tids: Vec<i64> = results.iter().map(|r| r.tid).collect();
    Ok(Report::new(NAME)
        .field("threads", threads)
        .float("seconds", length.as_secs_f64(), 3)
        .field("calls", counts.iter().sum::<u64>())
        .list("per_thread", &counts)
        .list("tids", &tids)
        .field("elapsed_ns", elapsed_ns)
        .field("pid", workloads::own_pid()))
}

/// What one thread did.
struct ThreadResult {
    calls: u64,
    tid: i64,
}

/// Calls getpid until `stop` is raised; counts every call.
fn hammer_until(stop: &AtomicBool) -> ThreadResult {
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    let mut calls = 0u64;
    while !stop.load(Ordering::Relaxed) {
        std::hint::black_box(getpid_syscall());
        calls += 1;
    }
    ThreadResult { calls, tid }
}
