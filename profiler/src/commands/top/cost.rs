//! hotprof's own cost as `top` shows it: the kernel's run time of the run's programs, which
//! it counts only while its run-time statistics are on (`BPF_ENABLE_STATS`, Linux 5.8+).
//! [`StatsSwitch`] holds them on while `top` runs; closing its descriptor restores what was
//! there before (the kernel counts the holders).

use std::os::fd::OwnedFd;
use std::time::Duration;

use crate::session::ProgramsRunTime;
use crate::units::format_ns;

/// The kernel's run-time statistics, on while this is held (or why they could not be).
pub enum StatsSwitch {
    /// Held, not read: closing it turns them off.
    On {
        _held: OwnedFd,
    },
    Unavailable(String),
}

impl StatsSwitch {
    /// Turns the statistics on, or says why not.
    pub fn turn_on() -> Self {
        match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
            Ok(fd) => StatsSwitch::On { _held: fd },
            Err(error) => StatsSwitch::Unavailable(format!(
                "the kernel's BPF run-time statistics could not be turned on ({error}; Linux \
                 5.8+ has them)"
            )),
        }
    }
}

/// What the header says about hotprof's own cost.
#[derive(Clone, Debug, PartialEq)]
pub enum OwnCost {
    /// Nothing read yet.
    Pending,
    Unavailable(String),
    Measured {
        since_start: ProgramsRunTime,
        last: ProgramsRunTime,
        /// The wall time `last` covers.
        period: Duration,
    },
}

impl OwnCost {
    /// One line for the header.
    pub fn describe(&self) -> String {
        match self {
            OwnCost::Pending => "hotprof's cost: measuring…".into(),
            OwnCost::Unavailable(why) => format!("hotprof's cost: unknown: {why}"),
            OwnCost::Measured {
                since_start,
                last,
                period,
            } => {
                let share = if period.is_zero() {
                    0.0
                } else {
                    100.0 * last.run_time.as_secs_f64() / period.as_secs_f64()
                };
                let per_run = if last.run_count == 0 {
                    String::new()
                } else {
                    format!(
                        ", {}/run",
                        format_ns(last.run_time.as_nanos() as f64 / last.run_count as f64)
                    )
                };
                format!(
                    "hotprof's cost (BPF stats, {} programs): {share:.2} % of a CPU in the last \
                     refresh ({}, {} runs{per_run}); since start {}, {} runs",
                    since_start.programs,
                    format_ns(last.run_time.as_nanos() as f64),
                    last.run_count,
                    format_ns(since_start.run_time.as_nanos() as f64),
                    since_start.run_count,
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_line_gives_the_share_of_a_cpu_and_the_time_per_run() {
        let cost = OwnCost::Measured {
            since_start: ProgramsRunTime {
                programs: 2,
                run_time: Duration::from_millis(30),
                run_count: 300_000,
            },
            last: ProgramsRunTime {
                programs: 2,
                run_time: Duration::from_millis(10),
                run_count: 100_000,
            },
            period: Duration::from_secs(1),
        };
        assert_eq!(
            cost.describe(),
            "hotprof's cost (BPF stats, 2 programs): 1.00 % of a CPU in the last refresh \
             (10.0 ms, 100000 runs, 100 ns/run); since start 30.0 ms, 300000 runs"
        );
    }
}
