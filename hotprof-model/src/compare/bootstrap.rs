//! Seeded bootstrap of the difference of two quantiles of bucketed samples.
//!
//! Resampling n calls and sorting them would cost O(n) per resample, and n is often millions.
//! It is not needed: the r-th smallest of n draws from a distribution F is F⁻¹(U₍ᵣ₎), where
//! U₍ᵣ₎ ~ Beta(r, n − r + 1) is the r-th smallest of n uniforms. So one resampled quantile is
//! one Beta variate and one binary search over the buckets: the same distribution as the
//! naive bootstrap (a test checks this), at O(log buckets) per resample.

use super::binned::BinnedSample;
use super::hypothesis::CONFIDENCE;
use super::special::normal_two_sided_p;

/// Resamples per bootstrap; the percentile interval's ends are then the 50th and 1950th values.
pub const RESAMPLES: usize = 2_000;

/// SplitMix64 (Steele, Lea & Flood 2014): a tiny, fast generator that passes BigCrush. Fixed
/// seeds make every comparison reproducible bit for bit.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform on the open interval (0, 1), so its logarithm is always finite.
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Gamma(shape, 1) by Marsaglia & Tsang (2000); exact for any shape, O(1) even for 10⁹.
    pub fn gamma(&mut self, shape: f64) -> f64 {
        if shape < 1.0 {
            // Gamma(a) = Gamma(a + 1) · U^(1/a).
            return self.gamma(shape + 1.0) * self.uniform().powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            if self.uniform().ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }

    /// Beta(a, b) as X / (X + Y) with X ~ Gamma(a), Y ~ Gamma(b).
    pub fn beta(&mut self, a: f64, b: f64) -> f64 {
        let x = self.gamma(a);
        x / (x + self.gamma(b))
    }
}

/// A 64-bit FNV-1a hash: a row's bootstrap seed is derived from its name, so results do not
/// depend on which other functions or rows a comparison holds.
pub fn seed_for(name: &str) -> u64 {
    const SEED: u64 = 0x686f_7470_726f_6621; // "hotprof!"
    name.bytes()
        .fold(0xcbf2_9ce4_8422_2325 ^ SEED, |hash, byte| {
            (hash ^ byte as u64).wrapping_mul(0x100_0000_01b3)
        })
}

/// The bootstrap picture of `quantile(new) − quantile(base)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BootstrapDifference {
    /// The difference on the samples themselves.
    pub observed: f64,
    /// Standard deviation of the resampled differences.
    pub standard_error: f64,
    /// Percentile interval at [`CONFIDENCE`].
    pub ci: (f64, f64),
    /// Two-sided p-value of a Wald test with the bootstrap standard error, observed / SE ~ N(0, 1):
    /// unlike a count of resamples it is not floored at 1/[`RESAMPLES`], so it survives a Holm
    /// correction over hundreds of rows. With SE 0 (each quantile always in one bucket) the
    /// difference is certain: p is 0 if it is non-zero, else 1.
    pub p: f64,
}

/// Bootstraps the difference of the `q`-quantiles; `None` when a side has no calls.
pub fn quantile_difference(
    base: &BinnedSample,
    new: &BinnedSample,
    q: f64,
    resamples: usize,
    seed: u64,
) -> Option<BootstrapDifference> {
    let observed = new.quantile(q)? - base.quantile(q)?;
    let mut rng = Rng::new(seed);
    let mut differences: Vec<f64> = (0..resamples.max(2))
        .map(|_| resampled_quantile(new, q, &mut rng) - resampled_quantile(base, q, &mut rng))
        .collect();
    differences.sort_by(f64::total_cmp);
    let standard_error = standard_deviation(&differences);
    let p = if standard_error > 0.0 {
        normal_two_sided_p(observed / standard_error)
    } else if observed == 0.0 {
        1.0
    } else {
        0.0
    };
    let tail = (1.0 - CONFIDENCE) / 2.0;
    let ci = (
        percentile_of_sorted(&differences, tail),
        percentile_of_sorted(&differences, 1.0 - tail),
    );
    Some(BootstrapDifference {
        observed,
        standard_error,
        ci,
        p,
    })
}

/// The `q`-quantile of one bootstrap resample of `sample` (rank ⌈q·n⌉, as the recording reads it).
fn resampled_quantile(sample: &BinnedSample, q: f64, rng: &mut Rng) -> f64 {
    let n = sample.total();
    let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
    let uniform_order_statistic = rng.beta(rank as f64, (n - rank + 1) as f64);
    sample.value_at_fraction(uniform_order_statistic)
}

fn standard_deviation(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    (values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0)).sqrt()
}

/// Linear-interpolated percentile (Hyndman & Fan type 7) of sorted values.
fn percentile_of_sorted(sorted: &[f64], fraction: f64) -> f64 {
    let position = fraction * (sorted.len() - 1) as f64;
    let (below, above) = (position.floor() as usize, position.ceil() as usize);
    sorted[below] + (sorted[above] - sorted[below]) * (position - below as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Histogram;

    fn spread_sample(center: u64, spread: u64, calls_per_value: u64) -> BinnedSample {
        let mut histogram = Histogram::new();
        for offset in 0..=2 * spread {
            // A triangular shape, so the middle buckets dominate.
            let weight = spread + 1 - offset.abs_diff(spread);
            histogram.add_bucket(
                profiler_common::bucket_index(center - spread + offset),
                weight * calls_per_value,
            );
        }
        BinnedSample::new(&histogram, center - spread, center + spread)
    }

    /// `calls` normal durations: few enough that resampled quantiles move across buckets.
    fn normal_sample(mean: f64, sd: f64, calls: usize, seed: u64) -> BinnedSample {
        let mut rng = Rng::new(seed);
        let values: Vec<u64> = (0..calls)
            .map(|_| (mean + sd * rng.normal()).max(1.0) as u64)
            .collect();
        let mut histogram = Histogram::new();
        values.iter().for_each(|&v| histogram.record(v));
        BinnedSample::new(
            &histogram,
            *values.iter().min().unwrap(),
            *values.iter().max().unwrap(),
        )
    }

    #[test]
    fn gamma_and_beta_have_the_right_moments() {
        let mut rng = Rng::new(7);
        for shape in [0.5, 3.0, 1e6] {
            let draws: Vec<f64> = (0..40_000).map(|_| rng.gamma(shape)).collect();
            let mean = draws.iter().sum::<f64>() / draws.len() as f64;
            let variance =
                draws.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / draws.len() as f64;
            // Mean and variance of Gamma(k, 1) are both k.
            assert!(
                (mean - shape).abs() < 4.0 * (shape / 40_000.0).sqrt(),
                "shape {shape}: mean {mean}"
            );
            assert!(
                (variance / shape - 1.0).abs() < 0.05,
                "shape {shape}: variance {variance}"
            );
        }
        let draws: Vec<f64> = (0..40_000).map(|_| rng.beta(2.0, 6.0)).collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 0.25).abs() < 0.003, "{mean}");
    }

    #[test]
    fn order_statistic_resampling_equals_naive_resampling() {
        // 31 calls over 5 distinct values; the naive bootstrap draws 31 indices and sorts.
        let values: Vec<u64> = [(10, 4), (11, 9), (12, 8), (13, 6), (14, 4)]
            .iter()
            .flat_map(|&(value, count)| std::iter::repeat_n(value, count))
            .collect();
        let mut histogram = Histogram::new();
        values.iter().for_each(|&v| histogram.record(v));
        let sample = BinnedSample::new(&histogram, 10, 14);
        let (mut rng, trials) = (Rng::new(1), 40_000);
        let mut naive = [0usize; 5];
        let mut fast = [0usize; 5];
        for _ in 0..trials {
            let mut draw: Vec<u64> = (0..values.len())
                .map(|_| values[(rng.uniform() * values.len() as f64) as usize])
                .collect();
            draw.sort_unstable();
            naive[(draw[15] - 10) as usize] += 1; // rank ⌈0.5·31⌉ = 16
            fast[(resampled_quantile(&sample, 0.5, &mut rng) - 10.0) as usize] += 1;
        }
        for (value, (a, b)) in naive.iter().zip(fast).enumerate() {
            let (a, b) = (*a as f64 / trials as f64, b as f64 / trials as f64);
            assert!(
                (a - b).abs() < 0.012,
                "median = {}: naive {a:.3}, order statistic {b:.3}",
                value + 10
            );
        }
    }

    #[test]
    fn bootstrap_is_deterministic_and_seed_dependent() {
        let (base, new) = (
            normal_sample(1_000.0, 100.0, 500, 1),
            normal_sample(1_020.0, 100.0, 500, 2),
        );
        let first = quantile_difference(&base, &new, 0.5, RESAMPLES, seed_for("f/p50")).unwrap();
        let again = quantile_difference(&base, &new, 0.5, RESAMPLES, seed_for("f/p50")).unwrap();
        assert_eq!(first, again);
        let other = quantile_difference(&base, &new, 0.5, RESAMPLES, seed_for("g/p50")).unwrap();
        assert_ne!(first.standard_error, other.standard_error);
        assert_eq!(first.observed, other.observed);
        assert_ne!(seed_for("f/p50"), seed_for("f/p90"));
    }

    #[test]
    fn bootstrap_separates_shifts_from_sameness() {
        let base = normal_sample(10_000.0, 2_000.0, 2_000, 3);
        let shifted = normal_sample(11_000.0, 2_000.0, 2_000, 4);
        let result = quantile_difference(&base, &shifted, 0.5, RESAMPLES, 1).unwrap();
        assert!((result.observed - 1_000.0).abs() < 350.0, "{result:?}");
        assert!(
            result.ci.0 > 0.0 && result.ci.0 <= result.observed && result.observed <= result.ci.1,
            "{result:?}"
        );
        assert!(result.p < 1e-6, "{result:?}");
        let same = quantile_difference(&base, &base, 0.9, RESAMPLES, 1).unwrap();
        assert_eq!(same.observed, 0.0);
        assert!(
            same.ci.0 < 0.0 && same.ci.1 > 0.0 && same.p == 1.0,
            "{same:?}"
        );
        // With so many calls that each quantile stays in its bucket, the difference is exact.
        let (dense, dense_shifted) = (
            spread_sample(10_000, 2_000, 50),
            spread_sample(11_000, 2_000, 50),
        );
        let exact = quantile_difference(&dense, &dense_shifted, 0.5, RESAMPLES, 1).unwrap();
        assert_eq!((exact.standard_error, exact.p), (0.0, 0.0), "{exact:?}");
        assert_eq!(exact.ci, (exact.observed, exact.observed));
    }

    #[test]
    fn millions_of_calls_cost_no_more_than_a_few() {
        let huge = spread_sample(50_000, 10_000, 1_000_000); // ~10¹⁴ calls
        let start = std::time::Instant::now();
        let result = quantile_difference(&huge, &huge, 0.99, RESAMPLES, 3).unwrap();
        assert!(start.elapsed().as_secs_f64() < 2.0);
        assert_eq!(result.observed, 0.0);
    }
}
