//! One function's aggregates as the probes add them up: what the profiler's collector reads
//! from the kernel and [`FunctionRecord::from_aggregates`] makes a record of.
//!
//! [`FunctionRecord::from_aggregates`]: super::FunctionRecord::from_aggregates

use super::Histogram;

/// Cumulative per-function aggregates, merged over CPUs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FunctionTotals {
    pub count: u64,
    pub sum_ns: u64,
    pub sum_sq_ns2: u128,
    /// Exact over the whole run; for an interval delta, bucket bounds (±3%).
    pub min_ns: u64,
    pub max_ns: u64,
    pub on_cpu_sum_ns: u64,
    pub below_min: u64,
    pub self_sum_ns: u64,
    pub outer_count: u64,
    pub outer_sum_ns: u64,
    pub histogram: Histogram,
}

impl FunctionTotals {
    /// Adds `other`'s calls (another call site of the same function, say) to these.
    pub fn absorb(&mut self, other: &FunctionTotals) {
        if other.count > 0 {
            self.min_ns = if self.count > 0 {
                self.min_ns.min(other.min_ns)
            } else {
                other.min_ns
            };
            self.max_ns = self.max_ns.max(other.max_ns);
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        self.sum_sq_ns2 += other.sum_sq_ns2;
        self.on_cpu_sum_ns += other.on_cpu_sum_ns;
        self.below_min += other.below_min;
        self.self_sum_ns += other.self_sum_ns;
        self.outer_count += other.outer_count;
        self.outer_sum_ns += other.outer_sum_ns;
        self.histogram.merge(&other.histogram);
    }

    /// The totals of calls that took `durations`, as the probes would add them up if none of
    /// the calls was nested in another probed call or below `--min-latency`: self time and
    /// outer calls are then the calls themselves. For tests and fixtures.
    pub fn from_durations(durations: &[u64]) -> Self {
        let mut histogram = Histogram::new();
        durations.iter().for_each(|&d| histogram.record(d));
        let count = durations.len() as u64;
        let sum_ns = durations.iter().sum();
        Self {
            count,
            sum_ns,
            sum_sq_ns2: durations
                .iter()
                .map(|&d| u128::from(d) * u128::from(d))
                .sum(),
            min_ns: durations.iter().copied().min().unwrap_or(0),
            max_ns: durations.iter().copied().max().unwrap_or(0),
            on_cpu_sum_ns: 0,
            below_min: 0,
            self_sum_ns: sum_ns,
            outer_count: count,
            outer_sum_ns: sum_ns,
            histogram,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absorbing_is_adding_the_calls() {
        let mut total = FunctionTotals::default();
        total.absorb(&FunctionTotals::from_durations(&[300, 10_000]));
        total.absorb(&FunctionTotals::default());
        total.absorb(&FunctionTotals::from_durations(&[100, 200]));
        assert_eq!(
            total,
            FunctionTotals::from_durations(&[100, 200, 300, 10_000])
        );
    }

    #[test]
    fn durations_add_up_like_the_probes_do() {
        let totals = FunctionTotals::from_durations(&[100, 200, 300, 10_000]);
        assert_eq!(
            (totals.count, totals.sum_ns, totals.sum_sq_ns2),
            (4, 10_600, 100_140_000)
        );
        assert_eq!((totals.min_ns, totals.max_ns), (100, 10_000));
        assert_eq!(
            (totals.self_sum_ns, totals.outer_count, totals.outer_sum_ns),
            (10_600, 4, 10_600)
        );
        assert_eq!(totals.histogram.total(), 4);
        assert_eq!(
            FunctionTotals::from_durations(&[]),
            FunctionTotals::default()
        );
    }
}
