//! Per-call-site rows: where a function recorded `callers` (call-site mode) on both sides,
//! each site present on both sides gets its own calls/run, avg, p50 and p99 rows.
//!
//! A site's per-run values come from each run's `functions[i].callers`, matched by `site`
//! (`generic_perform_write+0x14e`). A run whose function lists call sites but not this one had
//! no calls from it: 0 calls/run, no latencies. A run whose function lists no call sites at
//! all (recorded without call-site mode, or never called) has no value.
//!
//! A call site keeps no histogram, so there are no call-level tests: with ≥ 3 runs per side a
//! site's rows get Welch's test on the per-run values, exactly like a function's rows (same
//! Holm family, range rule and one-bucket resolution floor for p50/p99); with fewer runs they
//! are not tested. Sites recorded on one side only are notes, not rows.

use serde::Serialize;

use super::MIN_RUNS_FOR_RUN_TEST;
use super::error::short_list;
use super::row::{Row, SideStats, Unit};
use super::rows::{resolution_pct, run_test};
use crate::model::{CallerRecord, FunctionRecord};

/// The rows of one call site of a function, present on both sides.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallerComparison {
    /// The call instruction, `caller+0xoff`, as recorded on both sides.
    pub site: String,
    /// calls/run, avg, p50 and p99 of the calls made from this site.
    pub rows: Vec<Row>,
}

/// The metrics compared per call site, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SiteMetric {
    CallsPerRun,
    Avg,
    P50,
    P99,
}

impl SiteMetric {
    const ALL: [Self; 4] = [Self::CallsPerRun, Self::Avg, Self::P50, Self::P99];

    fn label(self) -> &'static str {
        match self {
            Self::CallsPerRun => "calls/run",
            Self::Avg => "avg",
            Self::P50 => "p50",
            Self::P99 => "p99",
        }
    }

    /// The figure of one run; latencies do not exist in a run without calls from the site.
    fn per_run(self, site: &CallerRecord) -> Option<f64> {
        if self != Self::CallsPerRun && site.count == 0 {
            return None;
        }
        Some(match self {
            Self::CallsPerRun => site.count as f64,
            Self::Avg => site.sum_ns as f64 / site.count as f64,
            Self::P50 => site.p50_ns as f64,
            Self::P99 => site.p99_ns as f64,
        })
    }
}

/// Sites of a side's runs, in order of first appearance (each run lists them busiest first).
fn sites<'a>(runs: &[&'a FunctionRecord]) -> Vec<&'a str> {
    let mut sites: Vec<&str> = Vec::new();
    for caller in runs.iter().flat_map(|f| f.callers.iter()) {
        if !sites.contains(&caller.site.as_str()) {
            sites.push(&caller.site);
        }
    }
    sites
}

/// The site's record in every run that recorded call sites (zero calls where it is absent).
fn site_runs(runs: &[&FunctionRecord], site: &str) -> Vec<CallerRecord> {
    runs.iter()
        .filter(|f| !f.callers.is_empty())
        .map(|f| {
            f.callers
                .iter()
                .find(|c| c.site == site)
                .cloned()
                .unwrap_or_else(|| CallerRecord {
                    site: site.into(),
                    ..CallerRecord::default()
                })
        })
        .collect()
}

/// Rows for every call site both sides recorded (p-values not yet adjusted); empty unless
/// both sides have call sites.
pub(super) fn compare_callers(
    base_runs: &[&FunctionRecord],
    new_runs: &[&FunctionRecord],
) -> Vec<CallerComparison> {
    let new_sites = sites(new_runs);
    sites(base_runs)
        .into_iter()
        .filter(|site| new_sites.contains(site))
        .map(|site| {
            let (base, new) = (site_runs(base_runs, site), site_runs(new_runs, site));
            CallerComparison {
                site: site.to_string(),
                rows: SiteMetric::ALL
                    .iter()
                    .map(|&metric| site_row(metric, &base, &new))
                    .collect(),
            }
        })
        .collect()
}

fn site_row(metric: SiteMetric, base: &[CallerRecord], new: &[CallerRecord]) -> Row {
    let values = |runs: &[CallerRecord]| -> Vec<f64> {
        runs.iter()
            .filter_map(|site| metric.per_run(site))
            .collect()
    };
    let (base_values, new_values) = (values(base), values(new));
    let unit = if metric == SiteMetric::CallsPerRun {
        Unit::Calls
    } else {
        Unit::Ns
    };
    let mut row = Row::new(
        metric.label().into(),
        unit,
        unit == Unit::Ns,
        SideStats::of(&base_values),
        SideStats::of(&new_values),
    );
    let test = if base_values.is_empty() || new_values.is_empty() {
        Err("no calls on one side".to_string())
    } else if base_values.len() >= MIN_RUNS_FOR_RUN_TEST
        && new_values.len() >= MIN_RUNS_FOR_RUN_TEST
    {
        run_test(&base_values, &new_values)
    } else {
        Err(format!(
            "needs ≥ {MIN_RUNS_FOR_RUN_TEST} runs per side (a call site keeps no histogram)"
        ))
    };
    match test {
        Ok(test) => row.test = Some(test),
        Err(reason) => row.not_tested = Some(reason),
    }
    if matches!(metric, SiteMetric::P50 | SiteMetric::P99) {
        row.resolution_pct = resolution_pct(row.base.mean, row.new.mean, false);
    }
    row
}

/// Notes on the call sites of `name` that are not compared: sites recorded on one side only,
/// or call sites recorded by one side only. None when neither side has call sites.
pub(super) fn caller_notes(
    name: &str,
    base_runs: &[&FunctionRecord],
    new_runs: &[&FunctionRecord],
) -> Vec<String> {
    let (base_sites, new_sites) = (sites(base_runs), sites(new_runs));
    match (base_sites.is_empty(), new_sites.is_empty()) {
        (true, true) => return Vec::new(),
        (false, true) => {
            return vec![format!(
                "{name}: call sites recorded only in base, not compared"
            )];
        }
        (true, false) => {
            return vec![format!(
                "{name}: call sites recorded only in new, not compared"
            )];
        }
        (false, false) => {}
    }
    let only = |these: &[&str], others: &[&str]| -> Vec<String> {
        these
            .iter()
            .filter(|site| !others.contains(site))
            .map(|site| site.to_string())
            .collect()
    };
    [
        ("base", only(&base_sites, &new_sites)),
        ("new", only(&new_sites, &base_sites)),
    ]
    .into_iter()
    .filter(|(_, sites)| !sites.is_empty())
    .map(|(label, sites)| {
        format!(
            "{name}: call site(s) only in {label}, not compared: {}",
            short_list(&sites)
        )
    })
    .collect()
}
