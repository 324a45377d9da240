//! Per-part rows: a function's calls split by call site (`callers`, call-site mode) or by
//! `--by` key value (`keys`). Each part present on both sides gets its own calls/run, avg,
//! p50 and p99 rows; one implementation serves both splits.
//!
//! A part is identified by its values: the site (`generic_perform_write+0x14e`) or the key's
//! values in `by` order (`[4096, 8192)`, `ENOENT`). Its per-run values come from each run's
//! `functions[i].callers` or `.keys`, matched by that identity. A run whose function lists
//! parts but not this one had no calls from it: 0 calls/run, no latencies. A run whose
//! function lists no parts at all (recorded without call-site mode or `--by`, or never
//! called) has no value.
//!
//! Parts are tested on runs only: a call site keeps no histogram, and a key value keeps no
//! sum of squares, so neither supports the call-level tests of a function. With ≥ 3 runs per
//! side a part's rows get Welch's test on the per-run values, exactly like a function's rows
//! (same Holm family, range rule and one-bucket resolution floor for p50/p99); with fewer
//! runs they are not tested. Parts recorded on one side only are notes, not rows. Key values
//! are matched only when both sides keyed their calls by the same fields ([`key_fields`]).

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::MIN_RUNS_FOR_RUN_TEST;
use super::decide::{resolution_pct, run_test};
use super::error::short_list;
use super::metric::{Metric, RunFigures};
use super::row::Row;
use super::side::Side;
use crate::model::FunctionRecord;

/// The rows of one call site of a function, present on both sides.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallerComparison {
    /// The call instruction, `caller+0xoff`, as recorded on both sides.
    pub site: String,
    /// calls/run, avg, p50 and p99 of the calls made from this site.
    pub rows: Vec<Row>,
}

/// The rows of one `--by` key value of a function, present on both sides.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KeyComparison {
    /// The value of each key field, in the comparison's `by` order.
    pub key: Vec<String>,
    /// calls/run, avg, p50 and p99 of the calls with this key value.
    pub rows: Vec<Row>,
}

impl KeyComparison {
    /// The key's values, one string: `[4096, 8192) ENOENT`.
    pub fn label(&self) -> String {
        self.key.join(" ")
    }
}

/// How a function's calls are split into parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Breakdown {
    /// By call site: `FunctionRecord::callers`.
    CallSites,
    /// By `--by` key value: `FunctionRecord::keys`.
    Keys,
}

/// One part's calls in one run.
#[derive(Clone, Copy, Debug, Default)]
struct Part {
    count: u64,
    sum_ns: u64,
    p50_ns: u64,
    p99_ns: u64,
}

impl RunFigures for Part {
    fn calls(&self) -> u64 {
        self.count
    }
    fn mean_ns(&self) -> f64 {
        self.sum_ns as f64 / self.count as f64
    }
    fn p50_ns(&self) -> u64 {
        self.p50_ns
    }
    fn p99_ns(&self) -> u64 {
        self.p99_ns
    }
    fn p90_ns(&self) -> Option<u64> {
        None
    }
    fn max_ns(&self) -> Option<u64> {
        None
    }
}

/// A part's identity: its values (one for a call site, one per field for a key).
type PartId<'a> = &'a [String];

impl Breakdown {
    /// Each part of one run's function, with its identity.
    fn parts(self, function: &FunctionRecord) -> Vec<(PartId<'_>, Part)> {
        match self {
            Self::CallSites => function
                .callers
                .iter()
                .map(|c| {
                    let part = Part {
                        count: c.count,
                        sum_ns: c.sum_ns,
                        p50_ns: c.p50_ns,
                        p99_ns: c.p99_ns,
                    };
                    (std::slice::from_ref(&c.site), part)
                })
                .collect(),
            Self::Keys => function
                .keys
                .iter()
                .map(|k| {
                    let part = Part {
                        count: k.count,
                        sum_ns: k.sum_ns,
                        p50_ns: k.p50_ns,
                        p99_ns: k.p99_ns,
                    };
                    (k.key.as_slice(), part)
                })
                .collect(),
        }
    }

    /// What notes call one part, and all of them.
    fn nouns(self) -> (&'static str, &'static str) {
        match self {
            Self::CallSites => ("call site", "call sites"),
            Self::Keys => ("key value", "keys"),
        }
    }

    /// Why rows are not tested with fewer runs.
    fn runs_only_reason(self) -> &'static str {
        match self {
            Self::CallSites => "a call site keeps no histogram",
            Self::Keys => "a key value keeps no sum of squares",
        }
    }
}

/// One side's parts of a function. Hashed per run: `--by pid` can give thousands of keys.
struct SideParts<'a> {
    /// Each run's parts by identity; runs that list no parts are left out (no value).
    runs: Vec<HashMap<PartId<'a>, Part>>,
    /// Identities in order of first appearance (each run lists its parts busiest first).
    ids: Vec<PartId<'a>>,
}

impl<'a> SideParts<'a> {
    fn new(breakdown: Breakdown, runs: &[&'a FunctionRecord]) -> Self {
        let mut ids = Vec::new();
        let mut seen = HashSet::new();
        let mut by_run = Vec::new();
        for function in runs {
            let parts = breakdown.parts(function);
            if parts.is_empty() {
                continue;
            }
            let mut by_id = HashMap::with_capacity(parts.len());
            for (id, part) in parts {
                if seen.insert(id) {
                    ids.push(id);
                }
                by_id.entry(id).or_insert(part); // the first, if a run lists one twice
            }
            by_run.push(by_id);
        }
        Self { runs: by_run, ids }
    }

    /// The part in every run that lists parts (zero calls where it is absent).
    fn per_run(&self, id: PartId) -> Vec<Part> {
        self.runs
            .iter()
            .map(|parts| parts.get(id).copied().unwrap_or_default())
            .collect()
    }

    /// The identities not in `other`, as printed.
    fn labels_not_in(&self, other: &SideParts) -> Vec<String> {
        let theirs: HashSet<PartId> = other.ids.iter().copied().collect();
        self.ids
            .iter()
            .filter(|id| !theirs.contains(*id))
            .map(|id| id.join(" "))
            .collect()
    }
}

/// Rows for every part both sides recorded (p-values not yet adjusted), in base's order;
/// empty unless both sides have parts.
fn compare_parts<'a>(
    breakdown: Breakdown,
    base_runs: &[&'a FunctionRecord],
    new_runs: &[&'a FunctionRecord],
) -> Vec<(PartId<'a>, Vec<Row>)> {
    let base = SideParts::new(breakdown, base_runs);
    let new = SideParts::new(breakdown, new_runs);
    let new_ids: HashSet<PartId> = new.ids.iter().copied().collect();
    base.ids
        .iter()
        .filter(|id| new_ids.contains(*id))
        .map(|&id| {
            let (base_parts, new_parts) = (base.per_run(id), new.per_run(id));
            let rows = Metric::PART
                .iter()
                .map(|&metric| part_row(breakdown, metric, &base_parts, &new_parts))
                .collect();
            (id, rows)
        })
        .collect()
}

/// Rows for every call site both sides recorded.
pub(super) fn compare_callers(
    base_runs: &[&FunctionRecord],
    new_runs: &[&FunctionRecord],
) -> Vec<CallerComparison> {
    compare_parts(Breakdown::CallSites, base_runs, new_runs)
        .into_iter()
        .map(|(id, rows)| CallerComparison {
            site: id.join(" "),
            rows,
        })
        .collect()
}

/// Rows for every key value both sides recorded; call only when [`key_fields`] matched.
pub(super) fn compare_keys(
    base_runs: &[&FunctionRecord],
    new_runs: &[&FunctionRecord],
) -> Vec<KeyComparison> {
    compare_parts(Breakdown::Keys, base_runs, new_runs)
        .into_iter()
        .map(|(id, rows)| KeyComparison {
            key: id.to_vec(),
            rows,
        })
        .collect()
}

fn part_row(breakdown: Breakdown, metric: Metric, base: &[Part], new: &[Part]) -> Row {
    let values = |runs: &[Part]| -> Vec<f64> {
        runs.iter()
            .filter_map(|part| metric.per_run(part))
            .collect()
    };
    let (base_values, new_values) = (values(base), values(new));
    let mut row = metric.row(&base_values, &new_values);
    let test = if base_values.is_empty() || new_values.is_empty() {
        Err("no calls on one side".to_string())
    } else if base_values.len() >= MIN_RUNS_FOR_RUN_TEST
        && new_values.len() >= MIN_RUNS_FOR_RUN_TEST
    {
        run_test(&base_values, &new_values)
    } else {
        Err(format!(
            "needs ≥ {MIN_RUNS_FOR_RUN_TEST} runs per side ({})",
            breakdown.runs_only_reason()
        ))
    };
    match test {
        Ok(test) => row.test = Some(test),
        Err(reason) => row.not_tested = Some(reason),
    }
    if matches!(metric, Metric::P50 | Metric::P99) {
        row.resolution_pct = resolution_pct(row.base.mean, row.new.mean, false);
    }
    row
}

/// Notes on the parts of `name` that are not compared: parts recorded on one side only, or
/// a split recorded by one side only. None when neither side has parts.
pub(super) fn part_notes(
    breakdown: Breakdown,
    name: &str,
    base_runs: &[&FunctionRecord],
    new_runs: &[&FunctionRecord],
) -> Vec<String> {
    let (one, all) = breakdown.nouns();
    let base = SideParts::new(breakdown, base_runs);
    let new = SideParts::new(breakdown, new_runs);
    match (base.ids.is_empty(), new.ids.is_empty()) {
        (true, true) => return Vec::new(),
        (false, true) => return vec![format!("{name}: {all} recorded only in base, not compared")],
        (true, false) => return vec![format!("{name}: {all} recorded only in new, not compared")],
        (false, false) => {}
    }
    [
        ("base", base.labels_not_in(&new)),
        ("new", new.labels_not_in(&base)),
    ]
    .into_iter()
    .filter(|(_, labels)| !labels.is_empty())
    .map(|(label, labels)| {
        format!(
            "{name}: {one}(s) only in {label}, not compared: {}",
            short_list(&labels)
        )
    })
    .collect()
}

/// Whether the two sides' key values can be matched: only if both keyed their calls by the
/// same `--by` fields (an `errno` value means nothing next to an `arg2:log2` one).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum KeyFields<'a> {
    /// Neither side recorded key values.
    Absent,
    /// Both sides keyed by these fields: key values are compared.
    Same(&'a [String]),
    /// Key values are not compared; the note says why.
    Mismatched(String),
}

impl<'a> KeyFields<'a> {
    /// The fields whose key values are compared; empty when none are.
    pub fn compared(&self) -> &'a [String] {
        match self {
            Self::Same(fields) => fields,
            Self::Absent | Self::Mismatched(_) => &[],
        }
    }
}

/// Whether, and by which fields, the two sides' key values are compared.
pub(super) fn key_fields<'a>(base: &Side<'a>, new: &Side<'a>) -> KeyFields<'a> {
    if !base.has_keys() && !new.has_keys() {
        return KeyFields::Absent;
    }
    let shown = |fields: &[String]| {
        if fields.is_empty() {
            "no --by".to_string()
        } else {
            format!("by {}", fields.join(", "))
        }
    };
    let mut side_fields = Vec::new();
    for side in [base, new] {
        let fields = side.key_fields();
        if let [only] = fields[..] {
            side_fields.push(only);
        } else {
            let all: Vec<String> = fields.iter().map(|f| shown(f)).collect();
            return KeyFields::Mismatched(format!(
                "{} mixes --by fields across its files ({}): key values not compared",
                side.label,
                all.join("; ")
            ));
        }
    }
    let (b, n) = (side_fields[0], side_fields[1]);
    if b == n {
        KeyFields::Same(b)
    } else if n.is_empty() {
        KeyFields::Mismatched(format!(
            "keys ({}) recorded only in base, not compared",
            shown(b)
        ))
    } else if b.is_empty() {
        KeyFields::Mismatched(format!(
            "keys ({}) recorded only in new, not compared",
            shown(n)
        ))
    } else {
        KeyFields::Mismatched(format!(
            "--by fields differ (base {}, new {}): key values not compared",
            shown(b),
            shown(n)
        ))
    }
}
