//! A pooled latency distribution seen through its histogram: a weighted sample in which each
//! bucket's calls all sit at the bucket's midpoint. Everything here costs O(buckets), never
//! O(calls), so millions of calls are as cheap as ten.

use serde::Serialize;

use super::special::normal_two_sided_p;
use crate::model::Histogram;

/// The calls of one function on one side, bucketed.
#[derive(Clone, Debug, PartialEq)]
pub struct BinnedSample {
    /// Lower bound of each non-empty bucket, ascending: equal bounds mean tied calls.
    lowers: Vec<u64>,
    /// The value every call of the bucket stands for: its midpoint clamped to the exact
    /// `[min, max]`, the same reading as [`Histogram::quantile`].
    values: Vec<f64>,
    /// Calls in this bucket and all below it.
    cumulative: Vec<u64>,
}

impl BinnedSample {
    /// `min`/`max` are the exact extremes of the calls (from the recording, not the buckets).
    pub fn new(histogram: &Histogram, min: u64, max: u64) -> Self {
        let mut sample = Self {
            lowers: Vec::new(),
            values: Vec::new(),
            cumulative: Vec::new(),
        };
        let mut seen = 0;
        for (lower, upper, count) in histogram.iter() {
            let midpoint = lower + (upper - lower) / 2;
            seen += count;
            sample.lowers.push(lower);
            sample.values.push(midpoint.clamp(min, max.max(min)) as f64);
            sample.cumulative.push(seen);
        }
        sample
    }

    pub fn total(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    /// The `q`-quantile by the recording's own rule: the value of the call of rank ⌈q·n⌉.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let index = self.cumulative.partition_point(|&seen| seen < rank);
        Some(self.values[index])
    }

    /// The inverse empirical CDF: the value of the first bucket whose cumulative share of the
    /// calls reaches `fraction` (0 < fraction ≤ 1).
    pub fn value_at_fraction(&self, fraction: f64) -> f64 {
        let target = fraction * self.total() as f64;
        let index = self
            .cumulative
            .partition_point(|&seen| (seen as f64) < target);
        self.values[index.min(self.values.len() - 1)]
    }

    /// `(lower bound, calls)` of every bucket, ascending.
    fn counts(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let previous = std::iter::once(0).chain(self.cumulative.iter().copied());
        self.lowers.iter().copied().zip(
            self.cumulative
                .iter()
                .zip(previous)
                .map(|(now, before)| now - before),
        )
    }
}

/// Mann–Whitney U test of the pooled calls, treating each call as independent.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MannWhitney {
    /// U of the new side: pairs (base call, new call) in which the new call is slower, ties
    /// (same bucket) counting ½.
    pub u: f64,
    /// Normal approximation with tie and continuity corrections.
    pub z: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// U / (n_base · n_new): the chance that a random new call is slower than a random base
    /// call (ties ½). 0.5 is no shift; it is the effect size, which p is not.
    pub prob_new_slower: f64,
}

/// Mann–Whitney U on two bucketed samples. Calls in the same bucket are ties (the histogram
/// cannot order them), which the variance's tie correction accounts for. `None` when a side
/// has no calls.
pub fn mann_whitney(base: &BinnedSample, new: &BinnedSample) -> Option<MannWhitney> {
    let (n_base, n_new) = (base.total() as f64, new.total() as f64);
    if n_base == 0.0 || n_new == 0.0 {
        return None;
    }
    let mut u = 0.0;
    let mut tie_cubes = 0.0;
    let mut base_below = 0.0;
    for (base_count, new_count) in merged_counts(base, new) {
        let (a, b) = (base_count as f64, new_count as f64);
        u += b * (base_below + 0.5 * a);
        base_below += a;
        let tied = a + b;
        tie_cubes += tied * tied * tied - tied;
    }
    let total = n_base + n_new;
    let mean = n_base * n_new / 2.0;
    let variance = n_base * n_new / 12.0 * ((total + 1.0) - tie_cubes / (total * (total - 1.0)));
    let distance = u - mean;
    let z = if variance > 0.0 {
        distance.signum() * (distance.abs() - 0.5).max(0.0) / variance.sqrt()
    } else {
        0.0
    };
    Some(MannWhitney {
        u,
        z,
        p: normal_two_sided_p(z),
        prob_new_slower: u / (n_base * n_new),
    })
}

/// `(base calls, new calls)` per distinct bucket of either side, ascending.
fn merged_counts(base: &BinnedSample, new: &BinnedSample) -> Vec<(u64, u64)> {
    let mut merged = std::collections::BTreeMap::<u64, (u64, u64)>::new();
    for (lower, count) in base.counts() {
        merged.entry(lower).or_default().0 += count;
    }
    for (lower, count) in new.counts() {
        merged.entry(lower).or_default().1 += count;
    }
    merged.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(values: &[u64]) -> BinnedSample {
        let mut histogram = Histogram::new();
        values.iter().for_each(|&v| histogram.record(v));
        BinnedSample::new(
            &histogram,
            *values.iter().min().unwrap(),
            *values.iter().max().unwrap(),
        )
    }

    #[test]
    fn mann_whitney_matches_scipy_with_ties() {
        // scipy.stats.mannwhitneyu(x, y, method="asymptotic", use_continuity=True):
        // U_x = 28, U_y = 82, p = 0.05991651506217645. Values < 64 ns have exact buckets.
        let x = sample(&[1, 2, 2, 3, 3, 3, 4, 5, 7, 7]);
        let y = sample(&[2, 3, 4, 4, 5, 6, 6, 7, 8, 8, 9]);
        let result = mann_whitney(&x, &y).unwrap();
        assert_eq!(result.u, 82.0);
        assert!(
            (result.p - 0.059_916_515_062_176_45).abs() < 1e-12,
            "{result:?}"
        );
        assert!((result.prob_new_slower - 82.0 / 110.0).abs() < 1e-15);
        let reverse = mann_whitney(&y, &x).unwrap();
        assert_eq!(reverse.u, 28.0);
        assert!((reverse.p - result.p).abs() < 1e-15 && reverse.z == -result.z);
    }

    #[test]
    fn mann_whitney_of_identical_samples_is_no_shift() {
        let mut histogram = Histogram::new();
        for v in 0..100_000u64 {
            histogram.add_bucket(profiler_common::bucket_index(1_000 + v % 997), 10);
        }
        let pooled = BinnedSample::new(&histogram, 1_000, 1_996);
        let result = mann_whitney(&pooled, &pooled).unwrap();
        assert_eq!(
            (result.prob_new_slower, result.z, result.p),
            (0.5, 0.0, 1.0)
        );
        assert!(mann_whitney(&pooled, &BinnedSample::new(&Histogram::new(), 0, 0)).is_none());
    }

    #[test]
    fn quantiles_agree_with_the_histogram() {
        let mut histogram = Histogram::new();
        for v in 1..=5_000u64 {
            histogram.record(v * 37);
        }
        let pooled = BinnedSample::new(&histogram, 37, 5_000 * 37);
        for q in [0.001, 0.5, 0.9, 0.99, 1.0] {
            let expected = histogram.quantile(q, Some(37), Some(5_000 * 37)).unwrap() as f64;
            assert_eq!(pooled.quantile(q), Some(expected), "q{q}");
        }
        assert_eq!(pooled.value_at_fraction(1.0), pooled.quantile(1.0).unwrap());
        assert_eq!(pooled.value_at_fraction(0.5), pooled.quantile(0.5).unwrap());
    }
}
