//! `hotprof compare BASE.json NEW.json [more...]`: is a latency change real or noise?
//!
//! Modelled on the kernel test robot's `%stddev %change %stddev` tables and `perf stat -r`,
//! for kernel function latency distributions.
//!
//! # Inputs
//! Each side is one or more recordings. A side's runs are all `runs[]` of all its files; a file
//! recorded without `--runs` is one run made from its top-level figures. Functions are matched
//! by `name` (the attached `symbol` is shown, and a difference noted). No common function is an
//! error ([`CompareError`]); functions on one side only, another kernel, or a different probe
//! mode are notes and warnings, since comparing kernels is the point but fentry and kprobe add
//! different overheads to every call.
//!
//! # Rows
//! Per function: calls/run, avg, p50, p90, p99 and max; then every workload metric (e.g.
//! `syscall_lat.avg_ns`) that both sides report. Per side: min/avg/max/pstdev of the per-run
//! values and `± stddev%` = pstdev / avg (the robot's column). `%change` is that of the
//! run averages.
//!
//! # Call sites
//! When a function has `callers` (call-site mode) on both sides, every site recorded on both
//! sides (matched by `site`, e.g. `generic_perform_write+0x14e`) gets calls/run, avg, p50 and
//! p99 rows from each run's own `callers`, printed under the function as `  at SITE`. Sites keep
//! no histogram, so these rows are tested on runs only (≥ 3 per side; otherwise not tested);
//! they are part of the Holm family and of [`regression`]. Sites on one side only, or call
//! sites recorded by one side only, are notes. In `--json`, each function gets
//! `"callers": [{"site": "...", "rows": [...]}]` with rows shaped like its own `rows`, omitted
//! when there are none (so comparisons of recordings without call sites are unchanged). See
//! the `breakdown` module for how absent sites count.
//!
//! # Keys
//! Likewise for `--by` key values (`keys`): when both sides keyed their calls by the same
//! fields (`by`), every key value recorded on both sides (matched by all its values) gets the
//! same four rows, printed after the call sites under `  by FIELD, FIELD` as `    VALUE VALUE`,
//! tested on runs only and part of the Holm family and of [`regression`]. Key values on one
//! side only, keys on one side only, and sides keyed by different fields (whose values cannot
//! be matched: then no key value is compared) are notes. In `--json`, the comparison gets
//! `"by": [...]` and each function `"keys": [{"key": [...], "rows": [...]}]`, both omitted
//! when empty.
//!
//! # Which test decides
//! Exactly one test per row gives its p-value:
//! - **Both sides have ≥ 3 runs** ([`MIN_RUNS_FOR_RUN_TEST`]): Welch's t-test on the per-run
//!   values, for every metric. The run is the unit of replication: calls within one boot share
//!   its cache layout and frequency, so only runs measure how much a figure really moves.
//! - **Fewer runs**, only for what the pooled calls can answer:
//!   - avg: Welch's test on every call (exact count, mean and variance from the in-kernel sums);
//!   - p50/p90/p99: a seeded bootstrap of the quantile difference on the pooled histograms
//!     (2000 resamples, each an exact order-statistic draw, O(log buckets) however many calls;
//!     p from the bootstrap standard error);
//!   - calls/run, max and workload metrics: not tested.
//!
//!   These treat every call as independent and so understate the uncertainty; a note says so.
//!
//! A row is **significant** iff all hold:
//! 1. its p-value, **Holm**-adjusted over every tested row of the comparison (all functions,
//!    metrics and workload metrics together), is below [`ALPHA`] = 0.05. Holm controls the
//!    chance of even one false alarm in the whole table, like Bonferroni, but rejects more;
//! 2. for run tests: the two sides' [min, max] ranges over the runs do not overlap (the robot's
//!    rule; otherwise the verdict is `noise`);
//! 3. |change| exceeds the row's resolution. For p50/p90/p99: a quantile reading is a
//!    bucket midpoint, off by up to half a bucket (≤ 1.6%; buckets below 64 ns are exact).
//!    The floor is the sum of both sides' half-widths (about one bucket, 1.6–3.1%), on runs
//!    and on calls alike: a one-bucket step can be a tiny change crossing a boundary (seen on
//!    a real A/A pair where every run of one side landed one bucket up). avg tested on calls gets the
//!    same one-bucket floor: one run per side measures no boot-to-boot variation, and shifts
//!    of a few tenths of a percent would otherwise all be "significant" on 20k calls (in a
//!    simulation, 37 of 40 A/A pairs of single runs with 0.3% boot jitter; 0 with the floor).
//!    avg on runs, max, calls/run and workload metrics are exact and have no floor. Failing
//!    this: `below resolution`.
//!
//! The verdict's `± x%` is the unadjusted 95% confidence half-width of the change (Welch's t
//! interval, or the bootstrap percentile interval).
//!
//! Per function, a Mann–Whitney U test of the pooled calls (ties within a bucket, tie- and
//! continuity-corrected normal approximation) reports whether the whole distribution shifted
//! and by how much (`P(new slower)`, 0.5 = none). It treats calls as independent, so with
//! millions of calls it finds any shift "significant"; it is shown, never used in a verdict.
//!
//! [`regression`] lists the significant rows where new is slower than base by more than a
//! threshold, for `--fail-if-slower PCT`.

mod binned;
mod bootstrap;
mod breakdown;
mod decide;
mod error;
mod hypothesis;
mod metric;
mod notes;
mod render;
mod row;
mod rows;
mod side;
mod special;
#[cfg(test)]
mod tests;

use serde::Serialize;

pub use binned::MannWhitney;
pub use breakdown::{CallerComparison, KeyComparison};
pub use error::CompareError;
pub use render::render_table;
pub use row::{Row, SideStats, TestMethod, TestResult, Unit, Verdict};

use crate::model::Recording;
use side::Side;

/// Family-wise significance level of a comparison.
pub const ALPHA: f64 = 0.05;
/// Runs per side from which run-level tests are used (and below which they are not possible
/// in a meaningful way: Welch needs a variance on each side, and the robot asks for 3).
pub const MIN_RUNS_FOR_RUN_TEST: usize = 3;

/// A whole comparison; serializes to the `--json` output.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub base: SideInfo,
    pub new: SideInfo,
    pub alpha: f64,
    /// Multiple-comparison correction applied to the p-values: always `holm`.
    pub correction: &'static str,
    /// Rows with a test: the size of the Holm family.
    pub tests: usize,
    /// The `--by` fields whose key values are compared; omitted when none are.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by: Vec<String>,
    /// Differences that bias the latencies (probe mode, dropped calls).
    pub warnings: Vec<String>,
    /// Context: unmatched functions, kernels, too few runs.
    pub notes: Vec<String>,
    pub functions: Vec<FunctionComparison>,
    pub workload: Vec<Row>,
}

/// What one side is made of.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SideInfo {
    pub files: usize,
    pub runs: usize,
    /// Distinct kernels and probe modes of the side's files, in order of appearance.
    pub kernels: Vec<String>,
    pub modes: Vec<String>,
    /// Mean calibrated probe overhead per call over the files that have one.
    pub probe_overhead_ns: Option<f64>,
    /// Mean calibrated bias (the part of the overhead inside each latency), likewise.
    pub probe_bias_ns: Option<f64>,
    /// Calls the probes could not time (`losses`, summed over files).
    pub dropped_calls: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionComparison {
    pub name: String,
    pub base_symbol: String,
    pub new_symbol: String,
    /// Mann–Whitney on the pooled calls (informational; `None` when a side has no calls).
    pub calls_distribution: Option<MannWhitney>,
    pub rows: Vec<Row>,
    /// Per call site recorded on both sides (call-site mode); omitted when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<CallerComparison>,
    /// Per `--by` key value recorded on both sides; omitted when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<KeyComparison>,
}

/// Which of a function's calls a row is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowScope<'a> {
    /// All of them.
    Function,
    /// Those made from this call site.
    Site(&'a str),
    /// Those with this `--by` key value (one value per field of [`Comparison::by`]).
    Key(&'a [String]),
}

impl FunctionComparison {
    /// The function's rows, then every call site's rows, then every key value's rows.
    pub fn all_rows(&self) -> impl Iterator<Item = (RowScope<'_>, &Row)> {
        let sites = self.callers.iter().flat_map(|c| {
            let scope = RowScope::Site(&c.site);
            c.rows.iter().map(move |row| (scope, row))
        });
        let keys = self.keys.iter().flat_map(|k| {
            let scope = RowScope::Key(&k.key);
            k.rows.iter().map(move |row| (scope, row))
        });
        let own = self.rows.iter().map(|row| (RowScope::Function, row));
        own.chain(sites).chain(keys)
    }

    /// Every row, mutably, in the order of [`Self::all_rows`].
    fn all_rows_mut(&mut self) -> impl Iterator<Item = &mut Row> {
        let sites = self.callers.iter_mut().flat_map(|c| c.rows.iter_mut());
        let keys = self.keys.iter_mut().flat_map(|k| k.rows.iter_mut());
        self.rows.iter_mut().chain(sites).chain(keys)
    }
}

/// Compares every function and workload metric common to `base` and `new`.
pub fn compare(base: &[Recording], new: &[Recording]) -> Result<Comparison, CompareError> {
    let (base, new) = (Side::new("base", base)?, Side::new("new", new)?);
    let new_names = new.function_names();
    let base_names = base.function_names();
    let common: Vec<&str> = base_names
        .iter()
        .copied()
        .filter(|name| new_names.contains(name))
        .collect();
    if common.is_empty() {
        return Err(CompareError::NoCommonFunction {
            base: error::short_list(&base_names),
            new: error::short_list(&new_names),
        });
    }
    let key_fields = breakdown::key_fields(&base, &new);
    let compare_keys = matches!(key_fields, breakdown::KeyFields::Same(_));
    let mut functions: Vec<FunctionComparison> = common
        .iter()
        .map(|name| rows::compare_function(name, &base, &new, compare_keys))
        .collect();
    let mut workload = rows::compare_workload(&base, &new);
    let tests = adjust_and_decide(
        functions
            .iter_mut()
            .flat_map(FunctionComparison::all_rows_mut)
            .chain(workload.iter_mut()),
    );
    let (base_info, new_info) = (base.info(), new.info());
    Ok(Comparison {
        warnings: notes::warnings(&base_info, &new_info),
        notes: notes::notes(&base, &new, &functions, &key_fields),
        base: base_info,
        new: new_info,
        alpha: ALPHA,
        correction: "holm",
        tests,
        by: key_fields.compared().to_vec(),
        functions,
        workload,
    })
}

/// Holm-adjusts the p-values of all tested rows together, then applies the decision rule to
/// every row. Returns the family size.
fn adjust_and_decide<'a>(rows: impl Iterator<Item = &'a mut Row>) -> usize {
    let mut rows: Vec<&mut Row> = rows.collect();
    let p_values: Vec<f64> = rows
        .iter()
        .filter_map(|row| row.test.as_ref().map(|t| t.p))
        .collect();
    let mut adjusted = hypothesis::holm_adjust(&p_values).into_iter();
    for row in rows.iter_mut() {
        if let Some(test) = row.test.as_mut() {
            test.p_adjusted = adjusted.next().unwrap_or(1.0);
        }
        row.decide();
    }
    p_values.len()
}

/// The significant slowdowns larger than `fail_if_slower_pct` percent, one line each
/// (`getpid p50: 173 ns → 203 ns, p50 +17.3% ± 0.9% (significant, p < 0.001)`; a call site's
/// as `vfs_write at SITE p50: …`, a key value's as `vfs_write by errno=EIO p50: …`). Only
/// rows where higher is slower count (latencies, workload metrics in ns/µs/ms), never
/// calls/run.
pub fn regression(comparison: &Comparison, fail_if_slower_pct: f64) -> Vec<String> {
    let function_rows = comparison.functions.iter().flat_map(|f| {
        f.all_rows()
            .map(move |(scope, row)| (Some((f, scope)), row))
    });
    let workload_rows = comparison.workload.iter().map(|row| (None, row));
    function_rows
        .chain(workload_rows)
        .filter(|(_, row)| {
            row.significant_slowdown_pct()
                .is_some_and(|pct| pct > fail_if_slower_pct)
        })
        .map(|(function, row)| {
            let name = match function {
                Some((f, RowScope::Function)) => format!("{} ", f.name),
                Some((f, RowScope::Site(site))) => format!("{} at {site} ", f.name),
                Some((f, RowScope::Key(key))) => {
                    format!("{} by {} ", f.name, key_text(&comparison.by, key))
                }
                None => String::new(),
            };
            let (from, to) = (
                render::format_value(row.base.mean, row.unit),
                render::format_value(row.new.mean, row.unit),
            );
            format!("{name}{}: {from} → {to}, {}", row.metric, row.verdict_text)
        })
        .collect()
}

/// A key value with its fields, `arg2:log2=[4096, 8192) errno=EIO`; just the values if the
/// counts disagree (a malformed file), so nothing is silently dropped.
fn key_text(fields: &[String], key: &[String]) -> String {
    if fields.len() != key.len() {
        return key.join(" ");
    }
    let pairs: Vec<String> = fields
        .iter()
        .zip(key)
        .map(|(field, value)| format!("{field}={value}"))
        .collect();
    pairs.join(" ")
}
