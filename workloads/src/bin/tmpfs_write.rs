//! `tmpfs_write PATH MIB [--chunk BYTES]`: write MIB MiB to PATH.
//!
//! Meant for a tmpfs path (no disk in the guest), so the profiled write path
//! is the VFS and page cache rather than a device; the exact number of
//! write(2) calls is printed for comparison with the profiler's count.

use std::process::ExitCode;

use workloads::cli::{Opt, parse_bytes, parse_int};
use workloads::clock::Stopwatch;
use workloads::fileio::{MIB, create_file};
use workloads::{Args, Error, Report, run_main};

const NAME: &str = "tmpfs_write";
const USAGE: &str = "\
tmpfs_write - write MIB MiB to PATH in fixed-size write(2) calls

Usage: tmpfs_write PATH MIB [--chunk BYTES]

  PATH           file to create or truncate (e.g. /tmp/data or /dev/shm/data)
  MIB            MiB to write (1..=65536)
  --chunk BYTES  bytes per write call (1..=64M, suffixes K/M; default 4096)

No fsync. The file is left in place.

Output (last line):
  tmpfs_write: bytes=B writes=W chunk=C elapsed_ns=E pid=P
    writes      write(2) calls made (bytes / chunk, rounded up, unless the
                kernel wrote short)
    elapsed_ns  open to last write, CLOCK_MONOTONIC
";

const DEFAULT_CHUNK: u64 = 4096;

fn main() -> ExitCode {
    run_main(NAME, USAGE, &[Opt::Value("chunk")], run)
}

fn run(args: &Args) -> Result<Report, Error> {
    let [path, mib] = args.positionals(["PATH", "MIB"])?;
    let mib = parse_int("MIB", mib, 1, 65536)?;
    let chunk = match args.value("chunk") {
        Some(text) => parse_bytes("--chunk", text, 1, 64 * MIB)?,
        None => DEFAULT_CHUNK,
    };
    let watch = Stopwatch::start();
    let done = create_file(path, mib * MIB, chunk as usize)
        .map_err(|err| Error::os(&format!("writing {path}"), err))?;
    let elapsed_ns = watch.elapsed_ns();
    Ok(Report::new(NAME)
        .field("bytes", done.bytes)
        .field("writes", done.calls)
        .field("chunk", chunk)
        .field("elapsed_ns", elapsed_ns)
        .field("pid", workloads::own_pid()))
}
