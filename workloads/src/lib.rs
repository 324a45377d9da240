//! Shared plumbing for hotprof's workload programs.
//!
//! The programs run inside a minimal qemu guest (busybox initramfs, static
//! binaries, no other libraries), where the VM integration tests and
//! benchmarks drive them and compare their self-reported figures with what
//! the profiler measured. So every program follows the same contract, which
//! this crate implements once:
//!
//! * `--help` prints usage and exits 0;
//! * a bad command line prints one `<name>: error: ...` line and exits 2,
//!   a failed system call prints one such line and exits 1 — never a panic;
//! * on success the last line on stdout is `<name>: key=value key=value ...`.

pub mod audit;
pub mod cli;
pub mod clock;
pub mod fileio;
pub mod marker;
pub mod report;
pub mod screen;
pub mod workers;

pub use cli::{Args, Error, run_main};
pub use report::Report;

/// This process's id, read from the `/proc/self` link so that reporting it makes no `getpid`
/// call: profilers count this program's getpid calls exactly.
pub fn own_pid() -> u32 {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|link| link.to_str()?.parse().ok())
        .unwrap_or_else(std::process::id)
}

/// Makes one real `getpid` system call and returns its result.
///
/// Goes through `syscall(2)` rather than `libc::getpid` because the point of
/// the callers is to enter the kernel every time: a libc wrapper is free to
/// cache the pid (glibc did so before 2.25) and then the profiler would see
/// nothing.
#[inline(always)]
pub fn getpid_syscall() -> libc::c_long {
    // SAFETY: SYS_getpid takes no arguments, touches no memory and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) }
}
