//! clock_gettime(2) on the two clocks hotprof reads itself.

use std::time::Duration;

fn read(clock: libc::clockid_t) -> Option<Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `now`, which is valid and writable.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return None;
    }
    Some(Duration::new(now.tv_sec as u64, now.tv_nsec as u32))
}

/// CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID, on every Linux since
/// 2.6.12); zero if the clock cannot be read. On hotprof's single-threaded runtime, hotprof's
/// own work, whatever else the machine is doing.
pub fn thread_cpu_time() -> Duration {
    read(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or_default()
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock `bpf_ktime_get_ns` reads.
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC).map_or(0, |now| now.as_nanos() as u64)
}
