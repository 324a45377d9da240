//! One row of a comparison (a metric of a function, or a workload metric), its test, and the
//! verdict rule documented in the module root.

use serde::Serialize;

use super::ALPHA;
use super::hypothesis::{Moments, Welch, welch};

/// How a row's values are printed, and whether higher means slower.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// A latency: higher is slower.
    Ns,
    /// Calls per run.
    Calls,
    /// A workload figure of unknown direction.
    Number,
}

/// Min/avg/max/pstdev of one side's per-run values, as `perf stat -r` and the robot print them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SideStats {
    /// Runs that have a value (a run in which the function was never called has no latency).
    pub runs: usize,
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    /// Population standard deviation across runs.
    pub pstdev: f64,
    /// `pstdev / mean` in percent: the robot's `± stddev%` column. `None` below 2 runs.
    pub stddev_pct: Option<f64>,
}

impl SideStats {
    pub fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let pstdev = (values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n).sqrt();
        Self {
            runs: values.len(),
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            mean,
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            pstdev,
            stddev_pct: (values.len() > 1 && mean != 0.0).then(|| 100.0 * pstdev / mean.abs()),
        }
    }

    /// The robot's noise rule: the [min, max] ranges of the runs overlap.
    fn overlaps(&self, other: &Self) -> bool {
        self.min <= other.max && other.min <= self.max
    }
}

/// Which test produced a row's p-value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TestMethod {
    /// Welch's t-test on the per-run values (≥ 3 runs per side).
    WelchRuns,
    /// Welch's test on every call's duration, from the exact sums (avg with < 3 runs).
    WelchCalls,
    /// Bootstrap of the quantile difference on the pooled histograms (quantiles with < 3 runs).
    BootstrapCalls,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TestResult {
    pub method: TestMethod,
    /// t (Welch) or z (bootstrap); `None` when the difference is exact (zero variance).
    pub statistic: Option<f64>,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: Option<f64>,
    /// Two-sided p-value of this row alone.
    pub p: f64,
    /// `p` after Holm's correction over every tested row of the comparison: what decides.
    pub p_adjusted: f64,
    /// The change the test measured, in percent of base (for run tests: of the run means).
    pub change_pct: f64,
    /// Unadjusted 95% confidence interval of that change, in percent of base.
    pub ci_low_pct: f64,
    pub ci_high_pct: f64,
}

impl TestResult {
    /// A Welch result, expressed relative to `base_mean`.
    pub fn from_welch(method: TestMethod, result: Welch, base_mean: f64) -> Self {
        let pct = |v: f64| 100.0 * v / base_mean;
        Self {
            method,
            statistic: (result.t.abs() < f64::MAX).then_some(result.t),
            df: Some(result.df),
            p: result.p,
            p_adjusted: result.p,
            change_pct: pct(result.difference),
            ci_low_pct: pct(result.ci.0),
            ci_high_pct: pct(result.ci.1),
        }
    }

    pub fn welch(method: TestMethod, base: Moments, new: Moments) -> Self {
        Self::from_welch(method, welch(base, new), base.mean)
    }

    fn ci_half_width_pct(&self) -> f64 {
        (self.ci_high_pct - self.ci_low_pct) / 2.0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Significant,
    NoSignificantChange,
    /// Significant p, but the runs' [min, max] ranges overlap (the robot hides these).
    Noise,
    /// Significant p, but the change is within the histogram's quantization.
    BelowResolution,
    /// No test applies (too few runs, no calls on a side).
    NotTested,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// `calls/run`, `avg`, `p50`, `p90`, `p99`, `max`, or a workload metric's key.
    pub metric: String,
    pub unit: Unit,
    /// Whether an increase is a slowdown (latencies; workload metrics ending in `_ns`/`_us`/`_ms`).
    pub higher_is_slower: bool,
    pub base: SideStats,
    pub new: SideStats,
    /// Change of the run means, in percent of base (`None` when base is 0 or a side is empty).
    pub change_pct: Option<f64>,
    /// The runs' [min, max] ranges overlap.
    pub ranges_overlap: bool,
    /// Smallest change this row resolves, in percent: about one histogram bucket for
    /// p50/p90/p99, and for avg when tested on calls; 0 otherwise.
    pub resolution_pct: f64,
    pub test: Option<TestResult>,
    /// Why there is no test.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_tested: Option<String>,
    pub verdict: Verdict,
    pub significant: bool,
    /// `p50 -14.8% ± 0.6% (significant, p < 0.001)`.
    pub verdict_text: String,
}

impl Row {
    /// A row before the family-wide correction: verdict still undecided.
    pub fn new(
        metric: String,
        unit: Unit,
        higher_is_slower: bool,
        base: SideStats,
        new: SideStats,
    ) -> Self {
        let comparable = base.runs > 0 && new.runs > 0;
        Self {
            metric,
            unit,
            higher_is_slower,
            base,
            new,
            change_pct: (comparable && base.mean != 0.0)
                .then(|| 100.0 * (new.mean - base.mean) / base.mean),
            ranges_overlap: comparable && base.overlaps(&new),
            resolution_pct: 0.0,
            test: None,
            not_tested: None,
            verdict: Verdict::NotTested,
            significant: false,
            verdict_text: String::new(),
        }
    }

    /// Applies the decision rule once `p_adjusted` is set.
    pub fn decide(&mut self) {
        self.verdict = match &self.test {
            None => Verdict::NotTested,
            Some(test) if test.p_adjusted >= ALPHA => Verdict::NoSignificantChange,
            Some(test) if test.method == TestMethod::WelchRuns && self.ranges_overlap => {
                Verdict::Noise
            }
            Some(test) if test.change_pct.abs() <= self.resolution_pct => Verdict::BelowResolution,
            Some(_) => Verdict::Significant,
        };
        self.significant = self.verdict == Verdict::Significant;
        self.verdict_text = self.describe();
    }

    fn describe(&self) -> String {
        let metric = &self.metric;
        let Some(test) = &self.test else {
            let reason = self.not_tested.as_deref().unwrap_or("no test applies");
            return format!("{metric} not tested: {reason}");
        };
        let p = format_p(test.p_adjusted);
        let change = format!(
            "{:+.1}% ± {:.1}%",
            test.change_pct,
            test.ci_half_width_pct()
        );
        match self.verdict {
            Verdict::Significant => format!("{metric} {change} (significant, {p})"),
            Verdict::NoSignificantChange => format!("{metric} no significant change ({p})"),
            Verdict::Noise => format!("{metric} {change}: noise, run ranges overlap ({p})"),
            Verdict::BelowResolution => {
                format!(
                    "{metric} {change}: below the {:.1}% resolution ({p})",
                    self.resolution_pct
                )
            }
            Verdict::NotTested => unreachable!("a tested row is decided"),
        }
    }

    /// How much slower `new` is, in percent, if this row is a significant slowdown.
    pub fn significant_slowdown_pct(&self) -> Option<f64> {
        let change = self.test.as_ref()?.change_pct;
        (self.significant && self.higher_is_slower && change > 0.0).then_some(change)
    }
}

/// `p < 0.001` or `p = 0.012`.
pub fn format_p(p: f64) -> String {
    if p < 0.001 {
        "p < 0.001".into()
    } else {
        format!("p = {p:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tested(p_adjusted: f64, change_pct: f64, method: TestMethod) -> TestResult {
        TestResult {
            method,
            statistic: None,
            df: None,
            p: p_adjusted,
            p_adjusted,
            change_pct,
            ci_low_pct: change_pct - 0.6,
            ci_high_pct: change_pct + 0.6,
        }
    }

    fn row(base: &[f64], new: &[f64], test: Option<TestResult>, resolution_pct: f64) -> Row {
        let mut row = Row::new(
            "p50".into(),
            Unit::Ns,
            true,
            SideStats::of(base),
            SideStats::of(new),
        );
        row.test = test;
        row.resolution_pct = resolution_pct;
        row.decide();
        row
    }

    #[test]
    fn every_condition_of_the_rule_is_needed() {
        let (base, new) = ([203.0, 204.0, 205.0], [173.0, 173.0, 174.0]);
        let significant = row(
            &base,
            &new,
            Some(tested(0.0001, -14.8, TestMethod::WelchRuns)),
            2.0,
        );
        assert_eq!(
            significant.verdict_text,
            "p50 -14.8% ± 0.6% (significant, p < 0.001)"
        );
        assert!(significant.significant);
        let not_p = row(
            &base,
            &new,
            Some(tested(0.05, -14.8, TestMethod::WelchRuns)),
            2.0,
        );
        assert_eq!(not_p.verdict_text, "p50 no significant change (p = 0.050)");
        let overlapping = row(
            &base,
            &[170.0, 175.0, 203.0],
            Some(tested(0.01, -10.0, TestMethod::WelchRuns)),
            2.0,
        );
        assert_eq!(overlapping.verdict, Verdict::Noise);
        let small = row(
            &base,
            &new,
            Some(tested(0.001, -1.5, TestMethod::WelchRuns)),
            2.0,
        );
        assert_eq!(small.verdict, Verdict::BelowResolution);
        // Call-level tests have no run ranges: one run per side never counts as overlap.
        let single = row(
            &[203.0],
            &[203.0],
            Some(tested(0.001, -14.8, TestMethod::BootstrapCalls)),
            2.0,
        );
        assert_eq!(single.verdict, Verdict::Significant);
        let untested = row(&[203.0], &[173.0], None, 0.0);
        assert_eq!(
            (untested.verdict, untested.significant),
            (Verdict::NotTested, false)
        );
    }

    #[test]
    fn side_stats_are_min_avg_max_pstdev() {
        let stats = SideStats::of(&[203.0, 203.0, 209.0, 197.0]);
        assert_eq!(
            (stats.runs, stats.min, stats.mean, stats.max),
            (4, 197.0, 203.0, 209.0)
        );
        assert!((stats.pstdev - 18f64.sqrt()).abs() < 1e-12);
        assert!((stats.stddev_pct.unwrap() - 100.0 * 18f64.sqrt() / 203.0).abs() < 1e-12);
        assert_eq!(SideStats::of(&[5.0]).stddev_pct, None);
    }
}
