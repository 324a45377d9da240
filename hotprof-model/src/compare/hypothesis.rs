//! Welch's unequal-variances t-test and the Holm step-down correction.

use super::special::{student_t_quantile, student_t_two_sided_p};

/// Two-sided confidence level of every interval this module reports.
pub const CONFIDENCE: f64 = 0.95;

/// Size, mean and sample variance of one side: all Welch's test needs, whether the values are
/// per-run figures or (exactly, from the in-kernel sums) every call of a function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moments {
    pub n: f64,
    pub mean: f64,
    /// Sample variance (divisor n − 1); 0 for a single value.
    pub variance: f64,
}

impl Moments {
    pub fn of(values: &[f64]) -> Self {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let squares: f64 = values.iter().map(|v| (v - mean) * (v - mean)).sum();
        let variance = if values.len() > 1 {
            squares / (n - 1.0)
        } else {
            0.0
        };
        Self { n, mean, variance }
    }

    /// Squared standard error of the mean.
    fn mean_variance(&self) -> f64 {
        if self.n > 0.0 {
            self.variance / self.n
        } else {
            0.0
        }
    }

    /// This side's term in the Welch–Satterthwaite denominator.
    fn satterthwaite_term(&self) -> f64 {
        if self.n > 1.0 {
            self.mean_variance().powi(2) / (self.n - 1.0)
        } else {
            0.0
        }
    }
}

/// Welch's test of `new.mean − base.mean = 0`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Welch {
    /// `new.mean − base.mean`.
    pub difference: f64,
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// [`CONFIDENCE`] interval of the difference.
    pub ci: (f64, f64),
}

/// Welch's t-test. With zero variance on both sides the difference is exact: p is 1 when the
/// means are equal and 0 otherwise (t is then ±∞, kept finite here as ±f64::MAX for JSON).
pub fn welch(base: Moments, new: Moments) -> Welch {
    let difference = new.mean - base.mean;
    let standard_error_sq = base.mean_variance() + new.mean_variance();
    if standard_error_sq <= 0.0 {
        let (t, p) = if difference == 0.0 {
            (0.0, 1.0)
        } else {
            (f64::MAX.copysign(difference), 0.0)
        };
        let df = (base.n + new.n - 2.0).max(1.0);
        return Welch {
            difference,
            t,
            df,
            p,
            ci: (difference, difference),
        };
    }
    let standard_error = standard_error_sq.sqrt();
    let df = standard_error_sq.powi(2) / (base.satterthwaite_term() + new.satterthwaite_term());
    let t = difference / standard_error;
    let half_width = student_t_quantile(0.5 + CONFIDENCE / 2.0, df) * standard_error;
    Welch {
        difference,
        t,
        df,
        p: student_t_two_sided_p(t, df),
        ci: (difference - half_width, difference + half_width),
    }
}

/// Holm's step-down adjustment of a family of p-values: controls the family-wise error rate
/// like Bonferroni without assuming independence, and rejects at least as much. Adjusted
/// p-values are returned in the input order, so "adjusted p < α" is the decision.
pub fn holm_adjust(p_values: &[f64]) -> Vec<f64> {
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p_values[a].total_cmp(&p_values[b]));
    let mut adjusted = vec![0.0; m];
    let mut running_max: f64 = 0.0;
    for (rank, &index) in order.iter().enumerate() {
        let scaled = ((m - rank) as f64 * p_values[index]).min(1.0);
        running_max = running_max.max(scaled);
        adjusted[index] = running_max;
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welch_matches_scipy() {
        // scipy.stats.ttest_ind(a, b, equal_var=False)
        let a = [
            27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7,
            21.4,
        ];
        let b = [
            27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5,
            24.4,
        ];
        let result = welch(Moments::of(&b), Moments::of(&a));
        assert!(
            (result.t - -2.455_356_398_286_006).abs() < 1e-12,
            "{result:?}"
        );
        assert!(
            (result.df - 24.988_529_290_231_416).abs() < 1e-9,
            "{result:?}"
        );
        assert!(
            (result.p - 0.021_378_001_462_866_992).abs() < 1e-12,
            "{result:?}"
        );
        let (low, high) = result.ci;
        assert!(
            low < result.difference && result.difference < high && high < 0.0,
            "{result:?}"
        );
    }

    #[test]
    fn welch_on_exact_values() {
        let same = Moments::of(&[5.0, 5.0, 5.0]);
        assert_eq!(welch(same, same).p, 1.0);
        let other = Moments::of(&[6.0, 6.0, 6.0]);
        let result = welch(same, other);
        assert_eq!(
            (result.p, result.difference, result.ci),
            (0.0, 1.0, (1.0, 1.0))
        );
    }

    #[test]
    fn holm_matches_the_textbook_procedure() {
        // Sorted 0.005, 0.01, 0.03, 0.04 → ×4, ×3, ×2, ×1 = 0.02, 0.03, 0.06, 0.04 → monotone.
        let adjusted = holm_adjust(&[0.01, 0.04, 0.03, 0.005]);
        let expected = [0.03, 0.06, 0.06, 0.02];
        for (got, want) in adjusted.iter().zip(expected) {
            assert!((got - want).abs() < 1e-15, "{adjusted:?}");
        }
        assert_eq!(holm_adjust(&[0.9, 0.8]), vec![1.0, 1.0]);
        assert!(holm_adjust(&[]).is_empty());
    }
}
