//! `--counter`: the PMU events a run counts per call, and what a function's counts become in
//! a recording ([`CounterRecord`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::FunctionTotals;

/// A hardware event counted per call: perf's generic hardware events, which every PMU driver
/// maps to its own (on arm64 `instructions` is `INST_RETIRED`, `cycles` `CPU_CYCLES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PmuEvent {
    Instructions,
    Cycles,
    Branches,
    BranchMisses,
    CacheReferences,
    CacheMisses,
}

impl PmuEvent {
    pub const ALL: [PmuEvent; 6] = [
        PmuEvent::Instructions,
        PmuEvent::Cycles,
        PmuEvent::Branches,
        PmuEvent::BranchMisses,
        PmuEvent::CacheReferences,
        PmuEvent::CacheMisses,
    ];

    /// The name `--counter` takes and the reports print (perf's).
    pub fn name(self) -> &'static str {
        match self {
            PmuEvent::Instructions => "instructions",
            PmuEvent::Cycles => "cycles",
            PmuEvent::Branches => "branches",
            PmuEvent::BranchMisses => "branch-misses",
            PmuEvent::CacheReferences => "cache-references",
            PmuEvent::CacheMisses => "cache-misses",
        }
    }
}

impl fmt::Display for PmuEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PmuEvent {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        PmuEvent::ALL
            .into_iter()
            .find(|event| event.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = PmuEvent::ALL.iter().map(|e| e.name()).collect();
                format!("unknown PMU event '{text}': one of {}", names.join(", "))
            })
    }
}

/// One PMU event's counts per call of a function: the same aggregates and histogram as its
/// latency, in events instead of nanoseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CounterRecord {
    /// The event, as `--counter` names it.
    pub event: String,
    /// Calls counted: the function's calls less those skipped (returned on another CPU,
    /// or the event multiplexed out meanwhile).
    pub count: u64,
    pub sum: u64,
    pub min: u64,
    pub max: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    /// `[lower, upper, count]` for every non-empty bucket.
    pub buckets: Vec<[u64; 3]>,
    /// The part of every count that is hotprof's own reading of the events (the fewest
    /// counted for a near-empty function), when calibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bias: Option<u64>,
}

impl CounterRecord {
    /// The record of `totals`, one event's counts of a function's calls.
    pub fn of(event: PmuEvent, totals: &FunctionTotals) -> Self {
        let (min, max) = if totals.count > 0 {
            (Some(totals.min_ns), Some(totals.max_ns))
        } else {
            (None, None)
        };
        let quantile = |q| totals.histogram.quantile(q, min, max).unwrap_or(0);
        CounterRecord {
            event: event.name().to_owned(),
            count: totals.count,
            sum: totals.sum_ns,
            min: min.unwrap_or(0),
            max: max.unwrap_or(0),
            mean: if totals.count > 0 {
                totals.sum_ns as f64 / totals.count as f64
            } else {
                0.0
            },
            p50: quantile(0.5),
            p90: quantile(0.9),
            p99: quantile(0.99),
            buckets: totals
                .histogram
                .iter()
                .map(|(lower, upper, count)| [lower, upper, count])
                .collect(),
            bias: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_parses_from_its_own_name_and_nothing_else_does() {
        for event in PmuEvent::ALL {
            assert_eq!(event.name().parse::<PmuEvent>(), Ok(event));
        }
        let error = "insns".parse::<PmuEvent>().unwrap_err();
        assert!(error.starts_with("unknown PMU event 'insns': one of instructions, cycles"));
    }

    #[test]
    fn a_record_holds_the_counts_their_percentiles_and_buckets() {
        let totals = FunctionTotals::from_durations(&[100, 100, 100, 104, 5_000]);
        let record = CounterRecord::of(PmuEvent::Instructions, &totals);
        assert_eq!(record.event, "instructions");
        assert_eq!((record.count, record.sum), (5, 5_404));
        assert_eq!((record.min, record.max), (100, 5_000));
        assert_eq!(record.p50, 100);
        assert_eq!(record.buckets.iter().map(|b| b[2]).sum::<u64>(), 5);
        let empty = CounterRecord::of(PmuEvent::Cycles, &FunctionTotals::default());
        assert_eq!((empty.count, empty.min, empty.p99), (0, 0, 0));
    }
}
