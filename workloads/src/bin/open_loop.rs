//! `open_loop FOUND MISSING DIR`: FOUND opens that succeed and MISSING that fail with ENOENT.
//!
//! A workload whose mix of successful and failing calls is known exactly, for keying a
//! function's latency by its return value (`hotprof --syscall openat --by errno`).

use std::ffi::CString;
use std::process::ExitCode;

use workloads::cli::parse_int;
use workloads::clock::Stopwatch;
use workloads::{Args, Error, Report, run_main};

const NAME: &str = "open_loop";
const USAGE: &str = "\
open_loop - FOUND openat(2) calls that succeed, then MISSING that fail with ENOENT

Usage: open_loop FOUND MISSING DIR

  FOUND    opens of DIR itself (read-only), each closed at once (0..=10^8)
  MISSING  opens of DIR/hotprof-missing-file, which must not exist (0..=10^8)
  DIR      an existing directory

Process-wide there is one more successful openat before the loops: the C
runtime's read of /proc/self/maps at startup.

Output (last line):
  open_loop: found=F missing=M enoent=E elapsed_ns=T pid=P
    enoent      failed opens that returned ENOENT (equals M, or the run fails)
";

fn main() -> ExitCode {
    run_main(NAME, USAGE, &[], run)
}

fn run(args: &Args) -> Result<Report, Error> {
    let [found, missing, dir] = args.positionals(["FOUND", "MISSING", "DIR"])?;
    let found = parse_int("FOUND", found, 0, 100_000_000)?;
    let missing = parse_int("MISSING", missing, 0, 100_000_000)?;
    let existing = CString::new(dir).map_err(|_| Error::usage("DIR holds a NUL byte"))?;
    let absent = CString::new(format!("{dir}/hotprof-missing-file"))
        .map_err(|_| Error::usage("DIR holds a NUL byte"))?;
    let watch = Stopwatch::start();
    for _ in 0..found {
        // SAFETY: `existing` is a NUL-terminated path that outlives the call.
        let fd = unsafe { libc::openat(libc::AT_FDCWD, existing.as_ptr(), libc::O_RDONLY) };
        if fd < 0 {
            return Err(Error::last_os(&format!("open {dir}")));
        }
        // SAFETY: `fd` was just opened here and is closed once.
        unsafe { libc::close(fd) };
    }
    let mut enoent = 0u64;
    for _ in 0..missing {
        // SAFETY: as above.
        let fd = unsafe { libc::openat(libc::AT_FDCWD, absent.as_ptr(), libc::O_RDONLY) };
        if fd >= 0 {
            return Err(Error::failed(format!(
                "{dir}/hotprof-missing-file exists: remove it"
            )));
        }
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT) {
            enoent += 1;
        }
    }
    let elapsed_ns = watch.elapsed_ns();
    if enoent != missing {
        return Err(Error::failed(format!(
            "{} of {missing} failed opens were not ENOENT",
            missing - enoent
        )));
    }
    Ok(Report::new(NAME)
        .field("found", found)
        .field("missing", missing)
        .field("enoent", enoent)
        .field("elapsed_ns", elapsed_ns)
        .field("pid", workloads::own_pid()))
}
