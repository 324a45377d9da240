//! `syscall_lat N [--threads T] [--marker] [--call getppid]`: the getpid latency benchmark.
//!
//! getpid is about the cheapest system call there is, so its average cost is
//! a direct measure of the syscall entry/exit path — and of anything a
//! kernel change or an attached probe adds to it (the seeds' "getpid
//! 203 → 173 ns" figures come from here).

use std::process::ExitCode;

use workloads::cli::{Opt, parse_int};
use workloads::clock::Stopwatch;
use workloads::marker::{MARKER_SUPPORTED, bench_marker};
use workloads::report::average;
use workloads::workers::run_workers;
use workloads::{Args, Error, Report, run_main};

const NAME: &str = "syscall_lat";
const USAGE: &str = "\
syscall_lat - time N real getpid system calls

Usage: syscall_lat N [--threads T] [--marker] [--call getpid|getppid]

  N            getpid calls per thread (1..=10^12), each a real system call
               made through syscall(SYS_getpid), never the libc wrapper
  --threads T  run T threads (1..=1024, default 1) that start together and
               each make N calls
  --call C     the system call to make: getpid (default) or getppid, which
               takes the same path through its own functions
  --marker     execute the bench's marker instruction (a nop, x86-64 or arm64,
               that `cargo xtask bench --only insns` counts instructions between)
               right before and right after the loop; one thread only

Each thread times its own loop with CLOCK_MONOTONIC.

Output (last line):
  syscall_lat: calls=C threads=T avg_ns=A total_ns=S wall_ns=W pid=P
    calls    all calls made (N * T)
    avg_ns   total_ns / calls, in ns with one decimal
    total_ns sum over threads of each thread's loop time
    wall_ns  from the first thread's start to the last one's end
    pid      this process id (read from /proc/self: no extra getpid call)
";

fn main() -> ExitCode {
    run_main(
        NAME,
        USAGE,
        &[
            Opt::Value("threads"),
            Opt::Flag("marker"),
            Opt::Value("call"),
        ],
        run,
    )
}

fn run(args: &Args) -> Result<Report, Error> {
    let [n] = args.positionals(["N"])?;
    let calls = parse_int("N", n, 1, 1_000_000_000_000)?;
    let threads = match args.value("threads") {
        Some(text) => parse_int("--threads", text, 1, 1024)?,
        None => 1,
    };
    let marker = args.flag("marker");
    let number = match args.value("call") {
        None | Some("getpid") => libc::SYS_getpid,
        Some("getppid") => libc::SYS_getppid,
        Some(other) => {
            return Err(Error::usage(format!(
                "--call {other}: want getpid or getppid"
            )));
        }
    };
    if marker && threads != 1 {
        return Err(Error::usage("--marker needs one thread (--threads 1)"));
    }
    if marker && !MARKER_SUPPORTED {
        return Err(Error::usage(
            "--marker has no instruction on this architecture (x86-64 and arm64 only)",
        ));
    }
    let pid = workloads::own_pid();
    let timing = run_threads(calls, threads as usize, marker, number)?;
    let total_calls = calls * threads;
    Ok(Report::new(NAME)
        .field("calls", total_calls)
        .field("threads", threads)
        .float("avg_ns", average(timing.total_ns, total_calls), 1)
        .field("total_ns", timing.total_ns)
        .field("wall_ns", timing.wall_ns)
        .field("pid", pid))
}

/// Times of one run.
struct Timing {
    total_ns: u64,
    wall_ns: u64,
}

/// Runs `threads` threads, released together, each making `calls` calls of
/// syscall `number`.
fn run_threads(
    calls: u64,
    threads: usize,
    marker: bool,
    number: libc::c_long,
) -> Result<Timing, Error> {
    let wall = Stopwatch::start();
    let loop_times = run_workers(NAME, threads, |_| timed_loop(calls, marker, number), || {})?;
    Ok(Timing {
        total_ns: loop_times.iter().sum(),
        wall_ns: wall.elapsed_ns(),
    })
}

/// Makes exactly `calls` system calls `number` (getpid or getppid); returns the loop's
/// duration. With `marker`, the bench's marker instruction brackets the loop (and nothing else).
fn timed_loop(calls: u64, marker: bool, number: libc::c_long) -> u64 {
    let watch = Stopwatch::start();
    if marker {
        bench_marker();
    }
    for _ in 0..calls {
        // SAFETY: getpid and getppid take no arguments, touch no memory and cannot fail.
        std::hint::black_box(unsafe { libc::syscall(number) });
    }
    if marker {
        bench_marker();
    }
    watch.elapsed_ns()
}
