//! The figures compared per run, for a function and for each of its parts (call sites, key
//! values): one enum, read from either through [`RunFigures`].

use super::row::{Row, SideStats, Unit};
use crate::model::FunctionRecord;

/// A figure compared per run, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Metric {
    CallsPerRun,
    Avg,
    P50,
    P90,
    P99,
    Max,
}

/// What one run records of a function or of one of its parts.
pub(super) trait RunFigures {
    fn calls(&self) -> u64;
    fn mean_ns(&self) -> f64;
    fn p50_ns(&self) -> u64;
    fn p99_ns(&self) -> u64;
    /// `None` where the record keeps no such figure (a part has no p90 or max).
    fn p90_ns(&self) -> Option<u64>;
    fn max_ns(&self) -> Option<u64>;
}

impl Metric {
    /// A function's rows.
    pub(super) const FUNCTION: [Self; 6] = [
        Self::CallsPerRun,
        Self::Avg,
        Self::P50,
        Self::P90,
        Self::P99,
        Self::Max,
    ];

    /// A part's rows: a call site or key value records no p90 and no max.
    pub(super) const PART: [Self; 4] = [Self::CallsPerRun, Self::Avg, Self::P50, Self::P99];

    pub(super) fn label(self) -> &'static str {
        match self {
            Self::CallsPerRun => "calls/run",
            Self::Avg => "avg",
            Self::P50 => "p50",
            Self::P90 => "p90",
            Self::P99 => "p99",
            Self::Max => "max",
        }
    }

    /// The quantile a metric reads from the histogram (and so is quantized by it).
    pub(super) fn quantile(self) -> Option<f64> {
        match self {
            Self::P50 => Some(0.5),
            Self::P90 => Some(0.9),
            Self::P99 => Some(0.99),
            _ => None,
        }
    }

    /// The figure of one run; latencies do not exist in a run without calls.
    pub(super) fn per_run(self, run: &impl RunFigures) -> Option<f64> {
        if self != Self::CallsPerRun && run.calls() == 0 {
            return None;
        }
        Some(match self {
            Self::CallsPerRun => run.calls() as f64,
            Self::Avg => run.mean_ns(),
            Self::P50 => run.p50_ns() as f64,
            Self::P90 => run.p90_ns()? as f64,
            Self::P99 => run.p99_ns() as f64,
            Self::Max => run.max_ns()? as f64,
        })
    }

    /// The metric's row over each side's per-run values, not yet tested.
    pub(super) fn row(self, base_values: &[f64], new_values: &[f64]) -> Row {
        let unit = if self == Self::CallsPerRun {
            Unit::Calls
        } else {
            Unit::Ns
        };
        Row::new(
            self.label().into(),
            unit,
            unit == Unit::Ns,
            SideStats::of(base_values),
            SideStats::of(new_values),
        )
    }
}

impl RunFigures for FunctionRecord {
    fn calls(&self) -> u64 {
        self.count
    }
    fn mean_ns(&self) -> f64 {
        self.mean_ns
    }
    fn p50_ns(&self) -> u64 {
        self.p50_ns
    }
    fn p99_ns(&self) -> u64 {
        self.p99_ns
    }
    fn p90_ns(&self) -> Option<u64> {
        Some(self.p90_ns)
    }
    fn max_ns(&self) -> Option<u64> {
        Some(self.max_ns)
    }
}
