//! What decides a row, shared by the function rows and their breakdowns (callers, keys):
//! Welch's test on per-run values and the smallest change the histogram resolves.

use profiler_common::{bucket_index, bucket_lower_bound, bucket_upper_bound};

use super::hypothesis::Moments;
use super::row::{TestMethod, TestResult};

/// Welch's test on per-run values.
pub(super) fn run_test(base_values: &[f64], new_values: &[f64]) -> Result<TestResult, String> {
    let base = Moments::of(base_values);
    if base.mean == 0.0 {
        return Err("base is 0, so no relative change".into());
    }
    Ok(TestResult::welch(
        TestMethod::WelchRuns,
        base,
        Moments::of(new_values),
    ))
}

/// The largest error of a midpoint reading of the bucket holding `value_ns`.
fn reading_error_ns(value_ns: f64) -> f64 {
    let index = bucket_index(value_ns.max(0.0).round() as u64);
    (bucket_upper_bound(index) - bucket_lower_bound(index)).div_ceil(2) as f64
}

/// Smallest change of a quantile the histogram resolves, in percent of base. A quantile
/// reading is a bucket midpoint, off by up to half the bucket (≤ 1.6%; 0 below 64 ns where
/// buckets are exact).
/// - Tested on runs: the sum of both half-widths too (~one bucket). Seen on a real A/A pair:
///   a sub-percent drift moved every run's p50 of one side into the next bucket, so the run
///   ranges were apart and a pure quantization step of 2.5% passed as "significant".
/// - Tested on calls (< 3 runs): the sum of both half-widths (~one bucket, 1.6–3.1%). With one
///   reading per side, a one-bucket step may be a tiny change crossing a bucket boundary.
///   The same floor applies to avg tested on calls: the exact mean is not quantized, but one
///   run per side cannot measure boot-to-boot variation (commonly 0.5–4% for kernel paths),
///   which a per-call standard error (~0.01% at 20k calls) would otherwise call significant.
pub(super) fn resolution_pct(base_ns: f64, new_ns: f64, on_calls: bool) -> f64 {
    if base_ns <= 0.0 {
        return 0.0;
    }
    let (base_error, new_error) = (reading_error_ns(base_ns), reading_error_ns(new_ns));
    let _ = on_calls; // the same floor either way; see above
    100.0 * (base_error + new_error) / base_ns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_is_one_bucket_on_runs_and_on_calls() {
        // 203 ns lies in [200, 203] (width 4 in [128, 256)): a reading is off by ≤ 2 ns.
        assert!((resolution_pct(203.0, 173.0, false) - 100.0 * 4.0 / 203.0).abs() < 1e-12);
        assert!((resolution_pct(203.0, 173.0, true) - 100.0 * 4.0 / 203.0).abs() < 1e-12);
        // At the bottom of an octave a bucket is 3.1% wide; at the top 1.6%.
        assert!((resolution_pct(1_024.0, 1_024.0, true) - 3.125).abs() < 1e-12);
        assert!((resolution_pct(1_024.0, 1_024.0, false) - 3.125).abs() < 1e-12);
        assert!((resolution_pct(2_000.0, 2_000.0, true) - 1.6).abs() < 1e-12);
        assert_eq!(resolution_pct(40.0, 41.0, true), 0.0);
    }
}
