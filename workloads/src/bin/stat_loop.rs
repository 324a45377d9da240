//! `stat_loop N PATH`: N fstat calls on PATH.
//!
//! Each fstat copies one `struct stat` to user space, from `cp_new_stat`, an ordinary
//! (ftrace-able) kernel function: a workload whose number of user copies from one known call
//! site is exact, for timing a notrace copy routine (`_copy_to_user`) at its call sites.

use std::os::fd::AsRawFd as _;
use std::process::ExitCode;

use workloads::cli::parse_int;
use workloads::clock::Stopwatch;
use workloads::report::average;
use workloads::{Args, Error, Report, run_main};

const NAME: &str = "stat_loop";
const USAGE: &str = "\
stat_loop - call fstat(2) N times on PATH

Usage: stat_loop N PATH

  N     fstat calls (1..=10^9), each a real system call
  PATH  file to open once (read-only) and fstat

Process-wide there is one more fstat before the loop: the C runtime's read of
/proc/self/maps at startup (stdio sizes its buffer with fstat).

Output (last line):
  stat_loop: calls=N avg_ns=A total_ns=S pid=P
    calls     fstat calls made (no other stat-family call follows the open)
    avg_ns    total_ns / calls
    total_ns  the fstat loop, CLOCK_MONOTONIC
";

fn main() -> ExitCode {
    run_main(NAME, USAGE, &[], run)
}

fn run(args: &Args) -> Result<Report, Error> {
    let [n, path] = args.positionals(["N", "PATH"])?;
    let calls = parse_int("N", n, 1, 1_000_000_000)?;
    let file = std::fs::File::open(path).map_err(|err| Error::os(&format!("open {path}"), err))?;
    let fd = file.as_raw_fd();
    let watch = Stopwatch::start();
    for _ in 0..calls {
        // SAFETY: an all-zero `stat` is a valid value to overwrite, and fstat writes at most
        // one `struct stat` into it.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open for the whole loop (`file` lives past it) and `stat` is a
        // valid, writable `struct stat`.
        if unsafe { libc::fstat(fd, &mut stat) } != 0 {
            return Err(Error::last_os("fstat"));
        }
        std::hint::black_box(&stat);
    }
    let total_ns = watch.elapsed_ns();
    drop(file);
    Ok(Report::new(NAME)
        .field("calls", calls)
        .float("avg_ns", average(total_ns, calls), 1)
        .field("total_ns", total_ns)
        .field("pid", workloads::own_pid()))
}
