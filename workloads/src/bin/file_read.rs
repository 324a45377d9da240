//! `file_read PATH MIB [--chunk BYTES]`: read a file of (at least) MIB MiB.
//!
//! Creates the file first when needed, so the timed part is a pure read(2)
//! loop, mostly served from the page cache; the exact number of read calls
//! is printed for comparison with the profiler's count.

use std::fs::{self, File};
use std::io;
use std::process::ExitCode;

use workloads::cli::{Opt, parse_bytes, parse_int};
use workloads::clock::Stopwatch;
use workloads::fileio::{MIB, create_file, read_chunks};
use workloads::{Args, Error, Report, run_main};

const NAME: &str = "file_read";
const USAGE: &str = "\
file_read - read PATH to its end in fixed-size read(2) calls

Usage: file_read PATH MIB [--chunk BYTES]

  PATH           file to read; created (MIB MiB) if missing or shorter than
                 MIB MiB, left as it is if at least that long
  MIB            MiB the file must hold (1..=65536)
  --chunk BYTES  bytes per read call (1..=64M, suffixes K/M; default 64K)

The whole file is read, to end of file. (Process-wide there is one more
read(2) before: Rust's runtime reads /proc/self/maps at startup.)

Output (last line):
  file_read: bytes=B reads=R chunk=C created=0|1 elapsed_ns=E pid=P
    bytes       bytes read (the file size)
    reads       read(2) calls made, including the final one returning 0
    created     1 if the file was (re)written first
    elapsed_ns  the read loop only (open to end of file), CLOCK_MONOTONIC
";

const DEFAULT_CHUNK: u64 = 64 * 1024;

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
    let created = ensure_size(path, mib * MIB)?;
    let watch = Stopwatch::start();
    let done = File::open(path)
        .and_then(|mut file| read_chunks(&mut file, chunk as usize))
        .map_err(|err| Error::os(&format!("reading {path}"), err))?;
    let elapsed_ns = watch.elapsed_ns();
    Ok(Report::new(NAME)
        .field("bytes", done.bytes)
        .field("reads", done.calls)
        .field("chunk", chunk)
        .field("created", u8::from(created))
        .field("elapsed_ns", elapsed_ns)
        .field("pid", workloads::own_pid()))
}

/// Makes sure `path` holds at least `size` bytes, (re)writing it if not.
/// Returns whether it had to write.
fn ensure_size(path: &str, size: u64) -> Result<bool, Error> {
    match fs::metadata(path) {
        Ok(meta) if meta.is_file() && meta.len() >= size => return Ok(false),
        Ok(meta) if !meta.is_file() => {
            return Err(Error::failed(format!("{path} is not a regular file")));
        }
        Ok(_) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(Error::os(&format!("stat {path}"), err)),
    }
    create_file(path, size, MIB as usize)
        .map_err(|err| Error::os(&format!("creating {path}"), err))?;
    Ok(true)
}
