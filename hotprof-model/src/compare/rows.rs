//! Building the rows: which figure each metric reads per run, and which test applies to it.

use super::binned::mann_whitney;
use super::bootstrap::{RESAMPLES, quantile_difference, seed_for};
use super::breakdown::{compare_callers, compare_keys};
use super::decide::{resolution_pct, run_test};
use super::metric::Metric;
use super::row::{Row, SideStats, TestMethod, TestResult, Unit};
use super::side::{Pooled, Side, pool};
use super::{FunctionComparison, MIN_RUNS_FOR_RUN_TEST};
use crate::model::FunctionRecord;

/// Pooled calls and per-run records of one function on one side.
struct FunctionSide<'a> {
    runs: Vec<&'a FunctionRecord>,
    pooled: Pooled,
}

impl<'a> FunctionSide<'a> {
    fn new(side: &Side<'a>, name: &str) -> Self {
        let runs = side.function_runs(name);
        let pooled = pool(&runs);
        Self { runs, pooled }
    }

    fn values(&self, metric: Metric) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|function| metric.per_run(*function))
            .collect()
    }
}

/// Every metric row of one function present on both sides (p-values not yet adjusted); its
/// key values only with `with_keys` (both sides keyed by the same fields).
pub(super) fn compare_function(
    name: &str,
    base: &Side,
    new: &Side,
    with_keys: bool,
) -> FunctionComparison {
    let (base, new) = (FunctionSide::new(base, name), FunctionSide::new(new, name));
    let rows = Metric::FUNCTION
        .iter()
        .map(|&metric| metric_row(name, metric, &base, &new))
        .collect();
    let symbol = |side: &FunctionSide| {
        side.runs
            .first()
            .map(|f| f.symbol.clone())
            .unwrap_or_default()
    };
    FunctionComparison {
        name: name.to_string(),
        base_symbol: symbol(&base),
        new_symbol: symbol(&new),
        calls_distribution: mann_whitney(&base.pooled.sample, &new.pooled.sample),
        rows,
        callers: compare_callers(&base.runs, &new.runs),
        keys: if with_keys {
            compare_keys(&base.runs, &new.runs)
        } else {
            Vec::new()
        },
    }
}

fn metric_row(name: &str, metric: Metric, base: &FunctionSide, new: &FunctionSide) -> Row {
    let (base_values, new_values) = (base.values(metric), new.values(metric));
    let mut row = metric.row(&base_values, &new_values);
    match choose_test(name, metric, (&base_values, &new_values), base, new) {
        Ok(test) => row.test = Some(test),
        Err(reason) => row.not_tested = Some(reason),
    }
    let on_calls = row
        .test
        .is_some_and(|test| test.method != TestMethod::WelchRuns);
    if metric.quantile().is_some() || (metric == Metric::Avg && on_calls) {
        row.resolution_pct = resolution_pct(row.base.mean, row.new.mean, on_calls);
    }
    row
}

/// Welch on the runs when both sides have enough of them; otherwise the call-level test the
/// metric allows (see the module docs).
fn choose_test(
    name: &str,
    metric: Metric,
    (base_values, new_values): (&[f64], &[f64]),
    base: &FunctionSide,
    new: &FunctionSide,
) -> Result<TestResult, String> {
    if base_values.is_empty() || new_values.is_empty() {
        return Err("no calls on one side".into());
    }
    if base_values.len() >= MIN_RUNS_FOR_RUN_TEST && new_values.len() >= MIN_RUNS_FOR_RUN_TEST {
        return run_test(base_values, new_values);
    }
    match metric {
        Metric::Avg if base.pooled.calls.n >= 2.0 && new.pooled.calls.n >= 2.0 => Ok(
            TestResult::welch(TestMethod::WelchCalls, base.pooled.calls, new.pooled.calls),
        ),
        Metric::P50 | Metric::P90 | Metric::P99 => {
            let q = metric.quantile().unwrap_or(0.5);
            bootstrap_test(
                &format!("{name}/{}", metric.label()),
                q,
                &base.pooled,
                &new.pooled,
            )
        }
        _ => Err(format!("needs ≥ {MIN_RUNS_FOR_RUN_TEST} runs per side")),
    }
}

/// The seeded bootstrap of a quantile difference on the pooled calls.
fn bootstrap_test(
    seed_name: &str,
    q: f64,
    base: &Pooled,
    new: &Pooled,
) -> Result<TestResult, String> {
    let base_quantile = base
        .sample
        .quantile(q)
        .filter(|&v| v > 0.0)
        .ok_or("no calls on one side")?;
    let result = quantile_difference(&base.sample, &new.sample, q, RESAMPLES, seed_for(seed_name))
        .ok_or("no calls on one side")?;
    let pct = |v: f64| 100.0 * v / base_quantile;
    Ok(TestResult {
        method: TestMethod::BootstrapCalls,
        statistic: (result.standard_error > 0.0).then(|| result.observed / result.standard_error),
        df: None,
        p: result.p,
        p_adjusted: result.p,
        change_pct: pct(result.observed),
        ci_low_pct: pct(result.ci.0),
        ci_high_pct: pct(result.ci.1),
    })
}

/// Rows for the workload metrics both sides reported (Welch on runs only: a workload metric
/// is one number per run, with no calls to pool).
pub(super) fn compare_workload(base: &Side, new: &Side) -> Vec<Row> {
    let new_keys = new.workload_keys();
    let common = base
        .workload_keys()
        .into_iter()
        .filter(|key| new_keys.contains(key));
    common
        .map(|key| workload_row(key, &base.workload_values(key), &new.workload_values(key)))
        .collect()
}

fn workload_row(key: &str, base_values: &[f64], new_values: &[f64]) -> Row {
    let unit = if key.ends_with("_ns") {
        Unit::Ns
    } else {
        Unit::Number
    };
    let is_time = ["_ns", "_us", "_ms"]
        .iter()
        .any(|suffix| key.ends_with(suffix));
    let mut row = Row::new(
        key.into(),
        unit,
        is_time,
        SideStats::of(base_values),
        SideStats::of(new_values),
    );
    let enough =
        base_values.len() >= MIN_RUNS_FOR_RUN_TEST && new_values.len() >= MIN_RUNS_FOR_RUN_TEST;
    let test = if enough {
        run_test(base_values, new_values)
    } else {
        Err(format!("needs ≥ {MIN_RUNS_FOR_RUN_TEST} runs per side"))
    };
    match test {
        Ok(test) => row.test = Some(test),
        Err(reason) => row.not_tested = Some(reason),
    }
    row
}
