//! `syscall_lat N [--threads T] [--marker] [--call getppid]`: the getpid latency benchmark.
//!
//! getpid is about the cheapest system call there is, so its average cost is
//! a direct measure of the syscall entry/exit path — and of anything a
//! kernel change or an attached probe adds to it (the seeds' "getpid
//! 203 → 173 ns" figures come from here).

use std::process::ExitCode;
use std::sync::Barrier;

use workloads::cli::{Opt, parse_int};
use workloads::clock::Stopwatch;
use workloads::marker::{MARKER_SUPPORTED, bench_marker};
use workloads::report::average;
use workloads::workers::run_workers;
use workloads::{Args, Error, Report, run_main};

const NAME: &str = "syscall_lat";
const USAGE: &str = "\
syscall_lat - time N real getpid system calls

Usage: syscall_lat N [--threads T] [--marker] [--call getpid|getppid] [--migrate]

  N            getpid calls per thread (1..=10^12), each a real system call
               made through syscall(SYS_getpid), never the libc wrapper
  --threads T  run T threads (1..=1024, default 1) that start together and
               each make N calls
  --call C     the system call to make: getpid (default) or getppid, which
               takes the same path through its own functions
  --marker     execute the bench's marker instruction (a nop, x86-64 or arm64,
               that `cargo xtask bench --only insns` counts instructions between)
               right before and right after the loop; one thread only
  --migrate    move every thread across all the CPUs this process may run on,
               in lockstep: N is split into one chunk per CPU (N must be a
               multiple of their number); before chunk k thread i pins itself to
               CPU number (i + k) mod CPUS (sched_setaffinity) and all threads
               wait for each other, so no two threads share a CPU when
               T <= CPUS and every CPU sees exactly T * N / CPUS calls

Each thread times its own loop with CLOCK_MONOTONIC.

Output (last line):
  syscall_lat: calls=C threads=T avg_ns=A total_ns=S wall_ns=W pid=P
    calls    all calls made (N * T)
    avg_ns   total_ns / calls, in ns with one decimal
    total_ns sum over threads of each thread's loop time
    wall_ns  from the first thread's start to the last one's end
    cpus     with --migrate: the CPUs the threads moved across
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
            Opt::Flag("migrate"),
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
    let migration = if args.flag("migrate") {
        if marker {
            return Err(Error::usage("--marker and --migrate do not go together"));
        }
        let cpus = allowed_cpus()?;
        if calls % cpus.len() as u64 != 0 {
            return Err(Error::usage(format!(
                "--migrate: N ({calls}) must be a multiple of the {} CPUs it moves across",
                cpus.len()
            )));
        }
        Some(cpus)
    } else {
        None
    };
    let pid = workloads::own_pid();
    let timing = match &migration {
        None => run_threads(calls, threads as usize, marker, number)?,
        Some(cpus) => run_migrating(calls, threads as usize, cpus, number)?,
    };
    let total_calls = calls * threads;
    let mut report = Report::new(NAME)
        .field("calls", total_calls)
        .field("threads", threads)
        .float("avg_ns", average(timing.total_ns, total_calls), 1)
        .field("total_ns", timing.total_ns)
        .field("wall_ns", timing.wall_ns);
    if let Some(cpus) = &migration {
        report = report.field("cpus", cpus.len());
    }
    Ok(report.field("pid", pid))
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

/// [`run_threads`] with every thread moving across `cpus` in lockstep (`--migrate`).
fn run_migrating(
    calls: u64,
    threads: usize,
    cpus: &[usize],
    number: libc::c_long,
) -> Result<Timing, Error> {
    let chunk = calls / cpus.len() as u64;
    let step = Barrier::new(threads);
    let wall = Stopwatch::start();
    let loop_times = run_workers(
        NAME,
        threads,
        |index| -> Result<u64, Error> {
            let (mut total_ns, mut failed) = (0, None);
            for k in 0..cpus.len() {
                if failed.is_none() {
                    failed = pin_to(cpus[(index + k) % cpus.len()]).err();
                }
                // Every thread is on its new CPU before any makes a call there. A thread
                // that could not move still takes every step, so none waits forever.
                step.wait();
                if failed.is_none() {
                    total_ns += timed_loop(chunk, false, number);
                }
            }
            failed.map_or(Ok(total_ns), Err)
        },
        || {},
    )?;
    let mut total_ns = 0;
    for time in loop_times {
        total_ns += time?;
    }
    Ok(Timing {
        total_ns,
        wall_ns: wall.elapsed_ns(),
    })
}

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Result<Vec<usize>, Error> {
    // SAFETY: an all-zero cpu_set_t is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t and the size passed is its own.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Err(Error::last_os("sched_getaffinity"));
    }
    // SAFETY: CPU_ISSET only reads `set`, for indices below CPU_SETSIZE.
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect();
    Ok(cpus)
}

/// Pins the calling thread to `cpu`; the kernel moves it there before returning.
fn pin_to(cpu: usize) -> Result<(), Error> {
    // SAFETY: an all-zero cpu_set_t is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` comes from `allowed_cpus`, so it is below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; `set` is a live cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc != 0 {
        return Err(Error::last_os(&format!("sched_setaffinity to CPU {cpu}")));
    }
    Ok(())
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
