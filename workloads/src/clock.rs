//! CLOCK_MONOTONIC timing.
//!
//! Read explicitly (rather than through `Instant`) so the clock is stated,
//! not an implementation detail: the figures are compared with the
//! profiler's, which also uses the monotonic clock (`bpf_ktime_get_ns`).

use std::time::Duration;

/// Nanoseconds on CLOCK_MONOTONIC.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec. CLOCK_MONOTONIC is always
    // supported, so the call cannot fail and its result needs no check.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // Both parts are non-negative for CLOCK_MONOTONIC.
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Measures one interval on CLOCK_MONOTONIC.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch {
    start_ns: u64,
}

impl Stopwatch {
    pub fn start() -> Self {
        Self {
            start_ns: monotonic_ns(),
        }
    }

    pub fn elapsed_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.start_ns)
    }
}

/// A `timespec` for a relative sleep of `duration`.
pub fn timespec(duration: Duration) -> libc::timespec {
    libc::timespec {
        // Callers bound their durations far below time_t's range (named `_`: musl's
        // `libc::time_t` is deprecated).
        tv_sec: duration.as_secs() as _,
        tv_nsec: libc::c_long::from(duration.subsec_nanos()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_advances() {
        let watch = Stopwatch::start();
        std::thread::sleep(Duration::from_millis(2));
        assert!(watch.elapsed_ns() >= 2_000_000);
    }

    #[test]
    fn timespec_splits_seconds_and_nanos() {
        let ts = timespec(Duration::from_micros(2_500_000));
        assert_eq!((ts.tv_sec, ts.tv_nsec), (2, 500_000_000));
    }
}
