//! A recording as Prometheus metrics, for a scrape endpoint or the node exporter's textfile
//! collector.
//!
//! Two text encodings of the same metric families, chosen with [`Format`] (and a third,
//! [`protobuf`], which also carries the latency histogram as a native histogram):
//! - [`Format::Prometheus`]: the Prometheus text exposition format 0.0.4
//!   (`text/plain; version=0.0.4`), what `promtool check metrics`, the node exporter's
//!   textfile collector and every Prometheus-compatible scraper read.
//! - [`Format::OpenMetrics`]: OpenMetrics 1.0.0 text (`application/openmetrics-text;
//!   version=1.0.0`). The two differ only where OpenMetrics insists: a counter's `# TYPE`
//!   names the family without its `_total` suffix, `# UNIT` lines, and the `# EOF` trailer.
//!   No single text is valid in both (the counter `# TYPE` rule conflicts), hence the choice.
//!
//! Every value is cumulative since the probes were attached, as Prometheus expects of
//! counters and histograms: render the same (growing) recording again on every scrape.
//!
//! # Histogram buckets
//!
//! The in-kernel histogram is log-linear (32 buckets per power of two). Exposing all of them
//! would be ~1000 series per function, so they are collapsed onto [`LE_BOUNDARIES_NS`]: one
//! `le` per power of two from 64 ns to 2^36 ns (68.7 s), plus `+Inf`. Each boundary is
//! `2^k − 1` ns, the inclusive upper edge of an in-kernel bucket, because Prometheus buckets
//! count `value ≤ le` and durations are whole nanoseconds: `≤ 2^k − 1 ns` is exactly
//! `< 2^k ns`, and no in-kernel bucket straddles it. So every cumulative count is exact,
//! not interpolated (`le="0.000000063"` is "at most 63 ns", i.e. "under 64 ns").

pub mod protobuf;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::export::{BREAKDOWN_ROWS, key_fields};
use crate::model::{FunctionRecord, Recording};

/// The exposition format to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Prometheus,
    /// OpenMetrics 1.0.0 text format.
    OpenMetrics,
}

impl Format {
    /// The HTTP `Content-Type` a scrape endpoint must send with this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Smallest and largest power of two (as exponents) that get an `le` boundary.
const FIRST_POWER: u32 = 6;
const LAST_POWER: u32 = 36;

/// The finite `le` boundaries in nanoseconds: `2^k − 1` for k in 6..=36 (63 ns … 68.7 s),
/// each the inclusive upper edge of an in-kernel bucket (see the module documentation).
pub const LE_BOUNDARIES_NS: [u64; (LAST_POWER - FIRST_POWER + 1) as usize] = {
    let mut bounds = [0u64; (LAST_POWER - FIRST_POWER + 1) as usize];
    let mut i = 0;
    while i < bounds.len() {
        bounds[i] = (1u64 << (FIRST_POWER + i as u32)) - 1;
        i += 1;
    }
    bounds
};

/// Cumulative counts for [`LE_BOUNDARIES_NS`] followed by `+Inf`, from raw
/// `[lower_ns, upper_ns, count]` buckets (any order).
///
/// A bucket counts towards every boundary at or above its inclusive upper edge. For buckets
/// of the hotprof layout that is exact; a foreign bucket straddling a boundary is counted
/// above it (never under-reporting latency).
pub fn cumulative_buckets(buckets: &[[u64; 3]]) -> [u64; LE_BOUNDARIES_NS.len() + 1] {
    let mut per_slot = [0u64; LE_BOUNDARIES_NS.len() + 1];
    for &[_, upper, count] in buckets {
        let slot = LE_BOUNDARIES_NS.partition_point(|&bound| bound < upper);
        per_slot[slot] += count;
    }
    let mut running = 0;
    for slot in &mut per_slot {
        running += *slot;
        *slot = running;
    }
    per_slot
}

/// `ns` nanoseconds as an exact decimal number of seconds (`1500` → `0.0000015`,
/// `2_000_000_000` → `2.0`): no float rounding on the way out.
pub fn seconds(ns: u64) -> String {
    let fraction = format!("{:09}", ns % 1_000_000_000);
    let fraction = fraction.trim_end_matches('0');
    let fraction = if fraction.is_empty() { "0" } else { fraction };
    format!("{}.{fraction}", ns / 1_000_000_000)
}

/// Escapes a label value: backslash, double quote and newline (both formats).
pub fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes `# HELP` text: backslash and newline (and, for OpenMetrics, double quote).
fn escape_help(text: &str, format: Format) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if format == Format::OpenMetrics => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
    /// A constant 1 carrying labels: a gauge in 0.0.4, OpenMetrics' `info` type.
    Info,
}

/// A metric family's name (without the `_total` (counter) or `_info` (info) suffix), type,
/// unit and help: what the text and the protobuf encodings ([`protobuf`]) both write.
struct Family {
    name: &'static str,
    kind: Kind,
    unit: Option<&'static str>,
    help: &'static str,
}

const RECORDING: Family = Family {
    name: "hotprof_recording",
    kind: Kind::Info,
    unit: None,
    help: "The hotprof run these metrics come from (always 1).",
};
const DURATION: Family = Family {
    name: "hotprof_recording_duration_seconds",
    kind: Kind::Gauge,
    unit: Some("seconds"),
    help: "Wall time the probes have been attached and measuring.",
};
const LATENCY: Family = Family {
    name: "hotprof_function_latency_seconds",
    kind: Kind::Histogram,
    unit: Some("seconds"),
    help: "Latency of each timed call of a kernel function, from entry to return. Buckets are exact: le=2^k-1 ns.",
};
const SELF_TIME: Family = Family {
    name: "hotprof_function_self_seconds",
    kind: Kind::Counter,
    unit: Some("seconds"),
    help: "Total self time of the timed calls: each duration minus the probed calls nested inside it.",
};
const BELOW_MIN_LATENCY: Family = Family {
    name: "hotprof_function_below_min_latency_calls",
    kind: Kind::Counter,
    unit: None,
    help: "Calls faster than --min-latency: counted here, not in the latency histogram.",
};
const LOSSES: Family = Family {
    name: "hotprof_losses",
    kind: Kind::Counter,
    unit: None,
    help: "Events the probes could not time, by kind (the fields of losses in docs/json-schema.md).",
};
const PROBE_OVERHEAD: Family = Family {
    name: "hotprof_probe_overhead_seconds",
    kind: Kind::Gauge,
    unit: Some("seconds"),
    help: "hotprof's own measured cost per probed call (entry and return), calibrated at start-up.",
};
const CALLER_LATENCY: &str = "hotprof_function_caller_latency_seconds";
const KEY_LATENCY: &str = "hotprof_function_key_latency_seconds";

fn caller_latency_help() -> String {
    format!(
        "Latency of the timed calls of a kernel function by call site (call-site mode): the {BREAKDOWN_ROWS} busiest sites per function, the rest summed in caller other without quantiles."
    )
}

fn key_latency_help(key_fields: &[String]) -> String {
    format!(
        "Latency of the timed calls of a kernel function by --by key value ({}), a label per key field: the {BREAKDOWN_ROWS} busiest values per function, the rest summed in one series with every key label other, without quantiles.",
        key_fields.join(", ")
    )
}

/// Writes the `# HELP`/`# TYPE` (and OpenMetrics `# UNIT`) header of `family`.
fn family_header(out: &mut String, format: Format, family: &Family) {
    header(
        out,
        format,
        family.name,
        family.kind,
        family.unit,
        family.help,
    );
}

/// Writes the `# HELP`/`# TYPE` (and OpenMetrics `# UNIT`) header of a family. `name` is
/// the family name without the `_total` (counter) or `_info` (info) suffix.
fn header(
    out: &mut String,
    format: Format,
    name: &str,
    kind: Kind,
    unit: Option<&str>,
    help: &str,
) {
    let type_name = match kind {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
        Kind::Histogram => "histogram",
        Kind::Summary => "summary",
        Kind::Info if format == Format::OpenMetrics => "info",
        Kind::Info => "gauge",
    };
    // Prometheus 0.0.4 types the sample name (`x_total`, `x_info`); OpenMetrics types the
    // family (`x`).
    let typed = match (format, kind) {
        (Format::Prometheus, Kind::Counter) => format!("{name}_total"),
        (Format::Prometheus, Kind::Info) => format!("{name}_info"),
        _ => name.to_string(),
    };
    let _ = writeln!(out, "# HELP {typed} {}", escape_help(help, format));
    let _ = writeln!(out, "# TYPE {typed} {type_name}");
    if let (Format::OpenMetrics, Some(unit)) = (format, unit) {
        let _ = writeln!(out, "# UNIT {typed} {unit}");
    }
}

/// `{a="x",b="y"}` from label pairs, values escaped; empty string for no labels.
fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// One function's series after merging duplicates of the same `(name, symbol)`.
struct Series<'a> {
    name: &'a str,
    symbol: &'a str,
    /// Cumulative bucket counts; the last (`+Inf`) is also `_count`, so the two always agree
    /// and the buckets stay monotonic even for a hand-built record whose `count` disagrees.
    cumulative: [u64; LE_BOUNDARIES_NS.len() + 1],
    /// The raw `[lower_ns, upper_ns, count]` buckets of every merged record (the native
    /// histogram's, [`protobuf`]).
    buckets: Vec<[u64; 3]>,
    sum_ns: u64,
    self_sum_ns: u64,
    below_min_latency: u64,
    /// Call sites (call-site mode), one label value each; empty otherwise.
    callers: Breakdown<'a>,
    /// `--by` key values, one label value per key field; empty without `--by`.
    keys: Breakdown<'a>,
}

/// A breakdown of one function's calls (by call site, by `--by` key value): one row per
/// tuple of label values, rows of duplicate records merged.
#[derive(Default)]
struct Breakdown<'a>(Vec<Row<'a>>);

/// One row of a [`Breakdown`]: a label value per label of its family, and its calls.
struct Row<'a> {
    labels: Vec<&'a str>,
    count: u64,
    sum_ns: u64,
    /// `(p50, p99)` in ns; `None` once merged from duplicate records (not combinable).
    quantiles: Option<(u64, u64)>,
}

impl<'a> Breakdown<'a> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds a row, merged into the one with the same label values if there is one.
    fn add(&mut self, labels: Vec<&'a str>, count: u64, sum_ns: u64, quantiles: (u64, u64)) {
        if let Some(row) = self.0.iter_mut().find(|r| r.labels == labels) {
            row.count += count;
            row.sum_ns += sum_ns;
            row.quantiles = None;
        } else {
            self.0.push(Row {
                labels,
                count,
                sum_ns,
                quantiles: Some(quantiles),
            });
        }
    }

    /// The [`BREAKDOWN_ROWS`] busiest rows (by total time, ties by label values, as in the
    /// recording), then `(count, sum_ns)` summing the rest when there is a rest. A row whose
    /// every label value is literally `other` is summed there too, so no label set repeats.
    fn busiest(&self) -> (Vec<&Row<'a>>, Option<(u64, u64)>) {
        let is_other = |row: &Row<'_>| row.labels.iter().all(|l| *l == OTHER);
        let mut rows: Vec<&Row<'a>> = self.0.iter().filter(|r| !is_other(r)).collect();
        rows.sort_by(|a, b| {
            b.sum_ns
                .cmp(&a.sum_ns)
                .then_with(|| a.labels.cmp(&b.labels))
        });
        let rest: Vec<&Row<'a>> = self
            .0
            .iter()
            .filter(|r| is_other(r))
            .chain(rows.iter().skip(BREAKDOWN_ROWS).copied())
            .collect();
        rows.truncate(BREAKDOWN_ROWS);
        let other = (!rest.is_empty()).then(|| {
            (
                rest.iter().map(|r| r.count).sum(),
                rest.iter().map(|r| r.sum_ns).sum(),
            )
        });
        (rows, other)
    }

    /// What a breakdown family exports of it: the [`busiest`](Self::busiest) rows, then the
    /// rest summed in a row whose `width` label values are all `other`, without quantiles.
    fn exported(&self, width: usize) -> Vec<Row<'a>> {
        let (rows, other) = self.busiest();
        rows.into_iter()
            .map(|row| Row {
                labels: row.labels.clone(),
                ..*row
            })
            .chain(other.map(|(count, sum_ns)| Row {
                labels: vec![OTHER; width],
                count,
                sum_ns,
                quantiles: None,
            }))
            .collect()
    }
}

impl<'a> Series<'a> {
    /// Adds `function`'s call sites and key values (`key_width` label values each; a
    /// hand-made key with fewer is padded with empty values), merging rows already listed.
    fn add_breakdowns(&mut self, function: &'a FunctionRecord, key_width: usize) {
        for caller in &function.callers {
            self.callers.add(
                vec![caller.site.as_str()],
                caller.count,
                caller.sum_ns,
                (caller.p50_ns, caller.p99_ns),
            );
        }
        for key in &function.keys {
            let labels = (0..key_width)
                .map(|i| key.key.get(i).map_or("", String::as_str))
                .collect();
            self.keys
                .add(labels, key.count, key.sum_ns, (key.p50_ns, key.p99_ns));
        }
    }

    /// The label set every per-function family shares.
    fn base_labels(&self, mode: &'a str, kernel: &'a str) -> [(&'static str, &'a str); 4] {
        [
            ("function", self.name),
            ("symbol", self.symbol),
            ("mode", mode),
            ("kernel", kernel),
        ]
    }
}

/// Functions keyed by their label values, in recording order. A function listed twice
/// (same name and symbol) is merged: two series with one label set would be rejected.
/// `key_width` is the number of `--by` key labels.
fn series(functions: &[FunctionRecord], key_width: usize) -> Vec<Series<'_>> {
    let mut out: Vec<Series<'_>> = Vec::new();
    let mut index: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for function in functions {
        let cumulative = cumulative_buckets(&function.buckets);
        let key = (function.name.as_str(), function.symbol.as_str());
        if let Some(&i) = index.get(&key) {
            let s = &mut out[i];
            for (total, add) in s.cumulative.iter_mut().zip(cumulative) {
                *total += add;
            }
            s.buckets.extend_from_slice(&function.buckets);
            s.sum_ns += function.sum_ns;
            s.self_sum_ns += function.self_sum_ns;
            s.below_min_latency += function.below_min_latency;
            s.add_breakdowns(function, key_width);
        } else {
            index.insert(key, out.len());
            out.push(Series {
                name: &function.name,
                symbol: &function.symbol,
                cumulative,
                buckets: function.buckets.clone(),
                sum_ns: function.sum_ns,
                self_sum_ns: function.self_sum_ns,
                below_min_latency: function.below_min_latency,
                callers: Breakdown::default(),
                keys: Breakdown::default(),
            });
            out.last_mut().unwrap().add_breakdowns(function, key_width);
        }
    }
    out
}

/// Labels of the per-function families besides the `--by` ones: a key label must not take
/// one of these names.
const FUNCTION_LABELS: [&str; 6] = ["function", "symbol", "mode", "kernel", "quantile", "le"];

/// Prometheus label names for the `--by` key fields, in order: every character outside
/// `[a-zA-Z0-9_]` becomes `_` (`arg2:log2` → `arg2_log2`; `errno`, `comm`, `caller` stay),
/// and a name that would be invalid (empty, leading digit), reserved (leading `__`) or taken
/// (a function label, an earlier field) gets `key_` prefixed until it is none of these.
fn key_label_names(fields: &[String]) -> Vec<String> {
    let mut names: Vec<String> = Vec::with_capacity(fields.len());
    for field in fields {
        let mut name: String = field
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        while name.is_empty()
            || name.starts_with(|c: char| c.is_ascii_digit())
            || name.starts_with("__")
            || FUNCTION_LABELS.contains(&name.as_str())
            || names.contains(&name)
        {
            name.insert_str(0, "key_");
        }
        names.push(name);
    }
    names
}

/// The fields of [`crate::model::Losses`], by their JSON names, so a field added there is
/// exported without touching this file.
fn loss_fields(recording: &Recording) -> Vec<(String, u64)> {
    let value = serde_json::to_value(&recording.losses).unwrap_or_default();
    let Some(map) = value.as_object() else {
        return Vec::new();
    };
    map.iter()
        .filter_map(|(k, v)| v.as_u64().map(|n| (k.clone(), n)))
        .collect()
}

/// Renders `recording` as metrics text in `format`.
///
/// Families: `hotprof_recording_info` (1, labelled `tool`, `kernel`, `mode`: a gauge in
/// 0.0.4, an `info` in OpenMetrics),
/// `hotprof_recording_duration_seconds`, `hotprof_function_latency_seconds` (histogram,
/// labels `function`, `symbol`, `mode`, `kernel`), `hotprof_function_self_seconds_total`,
/// `hotprof_function_below_min_latency_calls_total`, `hotprof_losses_total{kind}` (one per
/// field of `Losses`), when calibrated, `hotprof_probe_overhead_seconds`, when any
/// function has call sites (call-site mode), `hotprof_function_caller_latency_seconds`
/// (summary, the function labels plus `caller`), and when any has `--by` key rows,
/// `hotprof_function_key_latency_seconds` (summary, the function labels plus one per key
/// field, e.g. `arg2_log2` and `errno`). Both are bounded; see [`Context::breakdown`].
pub fn render(recording: &Recording, format: Format) -> String {
    let mut out = String::new();
    let mode = recording.mode.as_str();
    let kernel = recording.kernel.as_str();

    family_header(&mut out, format, &RECORDING);
    let info = labels(&[
        ("tool", &recording.tool),
        ("kernel", kernel),
        ("mode", mode),
    ]);
    let _ = writeln!(out, "hotprof_recording_info{info} 1");

    family_header(&mut out, format, &DURATION);
    let _ = writeln!(out, "{} {}", DURATION.name, seconds(recording.duration_ns));

    let key_fields = key_fields(recording);
    let all = series(&recording.functions, key_fields.len());
    let name = LATENCY.name;
    family_header(&mut out, format, &LATENCY);
    for s in &all {
        let base = s.base_labels(mode, kernel);
        for (bound, cumulative) in LE_BOUNDARIES_NS.iter().zip(&s.cumulative) {
            let le = seconds(*bound);
            let mut pairs = base.to_vec();
            pairs.push(("le", &le));
            let _ = writeln!(out, "{name}_bucket{} {cumulative}", labels(&pairs));
        }
        let mut pairs = base.to_vec();
        pairs.push(("le", "+Inf"));
        let total = s.cumulative[LE_BOUNDARIES_NS.len()];
        let _ = writeln!(out, "{name}_bucket{} {total}", labels(&pairs));
        let _ = writeln!(out, "{name}_count{} {total}", labels(&base));
        let _ = writeln!(out, "{name}_sum{} {}", labels(&base), seconds(s.sum_ns));
    }

    let name = SELF_TIME.name;
    family_header(&mut out, format, &SELF_TIME);
    for s in &all {
        let pairs = labels(&s.base_labels(mode, kernel));
        let _ = writeln!(out, "{name}_total{pairs} {}", seconds(s.self_sum_ns));
    }

    let name = BELOW_MIN_LATENCY.name;
    family_header(&mut out, format, &BELOW_MIN_LATENCY);
    for s in &all {
        let pairs = labels(&s.base_labels(mode, kernel));
        let _ = writeln!(out, "{name}_total{pairs} {}", s.below_min_latency);
    }

    let context = Context {
        format,
        all: &all,
        mode,
        kernel,
    };
    if all.iter().any(|s| !s.callers.is_empty()) {
        context.breakdown(
            &mut out,
            CALLER_LATENCY,
            &caller_latency_help(),
            &["caller".to_string()],
            |s| &s.callers,
        );
    }
    if all.iter().any(|s| !s.keys.is_empty()) {
        context.breakdown(
            &mut out,
            KEY_LATENCY,
            &key_latency_help(&key_fields),
            &key_label_names(&key_fields),
            |s| &s.keys,
        );
    }

    let name = LOSSES.name;
    family_header(&mut out, format, &LOSSES);
    for (kind, value) in loss_fields(recording) {
        let _ = writeln!(out, "{name}_total{} {value}", labels(&[("kind", &kind)]));
    }

    if let Some(overhead) = recording
        .probe_overhead_ns
        .filter(|v| v.is_finite() && *v >= 0.0)
    {
        let name = PROBE_OVERHEAD.name;
        family_header(&mut out, format, &PROBE_OVERHEAD);
        let _ = writeln!(out, "{name} {}", float(overhead / 1e9));
    }

    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// The label value (every key label's, for `--by` keys) of the series summing the rows
/// beyond the [`BREAKDOWN_ROWS`] busiest.
const OTHER: &str = "other";

/// What the per-function breakdown families are rendered from.
struct Context<'r, 'a> {
    format: Format,
    all: &'r [Series<'a>],
    mode: &'r str,
    kernel: &'r str,
}

impl<'r, 'a> Context<'r, 'a> {
    /// A breakdown family: per function, a summary per row of its [`Breakdown`] (picked by
    /// `pick`), labelled with the function labels plus `label_names`, with the row's p50 and
    /// p99 (`quantile="0.5"`, `"0.99"`), `_count` and `_sum`. Bounded: the
    /// [`BREAKDOWN_ROWS`] busiest rows by total time, the rest summed in one series whose
    /// every breakdown label is `other` (`_count` and `_sum` only: quantiles do not add up,
    /// nor do those of a row merged from duplicate records). A summary, not a histogram: a
    /// call site keeps only its count, sum and two quantiles, and the buckets a key value
    /// does keep would make 33 series of each row instead of 4.
    ///
    /// `hotprof_function_caller_latency_seconds` (`caller="generic_perform_write+0x14e"`)
    /// and `hotprof_function_key_latency_seconds` (`arg2_log2="[4096, 8192)",errno="ok"`).
    fn breakdown(
        &self,
        out: &mut String,
        name: &str,
        help: &str,
        label_names: &[String],
        pick: impl Fn(&'r Series<'a>) -> &'r Breakdown<'a>,
    ) {
        header(out, self.format, name, Kind::Summary, Some("seconds"), help);
        for s in self.all {
            let base = s.base_labels(self.mode, self.kernel);
            for row in pick(s).exported(label_names.len()) {
                let Row {
                    labels: values,
                    count,
                    sum_ns,
                    quantiles,
                } = row;
                let mut pairs = base.to_vec();
                pairs.extend(
                    label_names
                        .iter()
                        .map(String::as_str)
                        .zip(values.iter().copied()),
                );
                if let Some((p50, p99)) = quantiles {
                    for (quantile, value) in [("0.5", p50), ("0.99", p99)] {
                        let mut pairs = pairs.clone();
                        pairs.push(("quantile", quantile));
                        let _ = writeln!(out, "{name}{} {}", labels(&pairs), seconds(value));
                    }
                }
                let _ = writeln!(out, "{name}_count{} {count}", labels(&pairs));
                let _ = writeln!(out, "{name}_sum{} {}", labels(&pairs), seconds(sum_ns));
            }
        }
    }
}

/// A float in a form both formats parse (Rust's shortest round-trip representation, which
/// never uses an exponent and always has a digit on each side of the point for
/// non-integers).
fn float(value: f64) -> String {
    let text = format!("{value}");
    if text.contains('.') {
        text
    } else {
        format!("{text}.0")
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::{NUM_BUCKETS, bucket_index, bucket_lower_bound, bucket_upper_bound};

    use super::*;
    use crate::export::test_support::{caller, key};
    use crate::model::{FunctionTotals, Histogram, Losses};

    #[test]
    fn boundaries_are_inclusive_upper_edges_of_kernel_buckets() {
        assert_eq!(LE_BOUNDARIES_NS[0], 63);
        assert_eq!(*LE_BOUNDARIES_NS.last().unwrap(), 68_719_476_735);
        for bound in LE_BOUNDARIES_NS {
            let index = bucket_index(bound);
            assert_eq!(bucket_upper_bound(index), bound);
            assert_eq!(
                bucket_lower_bound(index + 1),
                bound + 1,
                "{bound} must end a bucket"
            );
        }
        assert!(LE_BOUNDARIES_NS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn no_kernel_bucket_straddles_a_boundary() {
        for index in 0..NUM_BUCKETS {
            let (lower, upper) = (bucket_lower_bound(index), bucket_upper_bound(index));
            for bound in LE_BOUNDARIES_NS {
                assert!(
                    upper <= bound || lower > bound,
                    "bucket [{lower}, {upper}] straddles {bound}"
                );
            }
        }
    }

    /// The cumulative counts equal a brute-force count of `value ≤ le` over the raw values.
    #[test]
    fn cumulative_counts_are_exact() {
        let mut values = vec![
            0u64,
            1,
            62,
            63,
            64,
            65,
            127,
            128,
            1_000,
            1_023,
            1_024,
            68_719_476_735,
            68_719_476_736,
            u64::MAX,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5_000 {
            // xorshift: values spread over 2^0..2^40 ns.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x >> (24 + x % 40));
        }
        let mut histogram = Histogram::new();
        for &v in &values {
            histogram.record(v);
        }
        let buckets: Vec<[u64; 3]> = histogram.iter().map(|(l, u, c)| [l, u, c]).collect();
        let cumulative = cumulative_buckets(&buckets);
        for (i, bound) in LE_BOUNDARIES_NS.iter().enumerate() {
            let expected = values.iter().filter(|&&v| v <= *bound).count() as u64;
            assert_eq!(cumulative[i], expected, "le {bound}");
        }
        assert_eq!(*cumulative.last().unwrap(), values.len() as u64);
        assert!(cumulative.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn straddling_foreign_buckets_count_above() {
        // [60, 70] straddles 63: counted from le=127 on.
        let cumulative = cumulative_buckets(&[[60, 70, 5]]);
        assert_eq!((cumulative[0], cumulative[1]), (0, 5));
    }

    #[test]
    fn seconds_are_exact_decimals() {
        assert_eq!(seconds(0), "0.0");
        assert_eq!(seconds(63), "0.000000063");
        assert_eq!(seconds(1_500), "0.0000015");
        assert_eq!(seconds(2_000_000_000), "2.0");
        assert_eq!(seconds(68_719_476_735), "68.719476735");
        assert_eq!(seconds(u64::MAX), "18446744073.709551615");
        for ns in [63u64, 1_023, 1_048_575, 68_719_476_735] {
            let parsed: f64 = seconds(ns).parse().unwrap();
            assert_eq!(parsed, ns as f64 / 1e9);
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label_value(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label_value("x\ny"), "x\\ny");
        assert_eq!(escape_label_value("µs ok"), "µs ok");
    }

    fn recording() -> Recording {
        let totals = FunctionTotals {
            sum_sq_ns2: 0,
            ..FunctionTotals::from_durations(&[50, 63, 64, 100, 5_000])
        };
        let function = FunctionRecord::from_aggregates("f".into(), "f.isra.0".into(), &totals);
        Recording {
            schema_version: crate::model::SCHEMA_VERSION,
            by: Vec::new(),
            filter: None,
            tool: "hotprof 0.1.0".into(),
            kernel: "6.1.0-\"weird\"\\".into(),
            mode: "kprobe".into(),
            task_store: None,
            duration_ns: 2_500_000_000,
            command: vec![],
            functions: vec![function.clone(), function],
            losses: Losses {
                depth_exceeded: 3,
                ..Losses::default()
            },
            probe_overhead_ns: Some(412.5),
            probe_bias_ns: None,
            runs: vec![],
            intervals: vec![],
        }
    }

    #[test]
    fn renders_histogram_counters_and_losses() {
        let text = render(&recording(), Format::Prometheus);
        // Duplicated function merged into one series.
        assert_eq!(
            text.matches("hotprof_function_latency_seconds_count{")
                .count(),
            1
        );
        assert!(text.contains(r#"kernel="6.1.0-\"weird\"\\""#), "{text}");
        assert!(text.contains(r#"le="0.000000063"} 4"#), "{text}");
        assert!(text.contains(r#"le="0.000000127"} 8"#), "{text}");
        assert!(text.contains(r#"le="+Inf"} 10"#), "{text}");
        assert!(text.contains("_sum{function=\"f\",symbol=\"f.isra.0\",mode=\"kprobe\",kernel=\"6.1.0-\\\"weird\\\"\\\\\"} 0.000010554"));
        assert!(text.contains("# TYPE hotprof_losses_total counter"));
        assert!(text.contains("hotprof_losses_total{kind=\"depth_exceeded\"} 3"));
        let losses = serde_json::to_value(Losses::default()).unwrap();
        for kind in losses.as_object().unwrap().keys() {
            assert!(
                text.contains(&format!("hotprof_losses_total{{kind=\"{kind}\"}}")),
                "{kind}"
            );
        }
        assert!(text.contains("hotprof_probe_overhead_seconds 0.0000004125"));
        assert!(text.contains("hotprof_recording_duration_seconds 2.5"));
        assert!(!text.contains("# EOF"));
        assert!(text.contains("# TYPE hotprof_recording_info gauge\nhotprof_recording_info{"));
    }

    #[test]
    fn openmetrics_types_counter_families_and_ends_with_eof() {
        let text = render(&recording(), Format::OpenMetrics);
        assert!(text.contains("# TYPE hotprof_losses counter"));
        assert!(text.contains("# TYPE hotprof_recording info\nhotprof_recording_info{"));
        assert!(text.contains("# UNIT hotprof_function_latency_seconds seconds"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn uncalibrated_recording_has_no_overhead_gauge() {
        let mut recording = recording();
        recording.probe_overhead_ns = None;
        assert!(!render(&recording, Format::Prometheus).contains("overhead"));
    }

    #[test]
    fn recordings_without_call_sites_have_no_caller_family() {
        for format in [Format::Prometheus, Format::OpenMetrics] {
            assert!(!render(&recording(), format).contains("caller"));
        }
    }

    #[test]
    fn call_sites_are_a_bounded_summary_per_function() {
        let mut recording = recording();
        recording.functions.truncate(1);
        recording.kernel = "6.1".into();
        recording.functions[0].callers = (0..23u64)
            .map(|i| caller(&format!("site\"{i}\"+0x{i:x}"), 2, 1_000 * (30 - i)))
            .collect();
        let without = {
            let mut r = recording.clone();
            r.functions[0].callers.clear();
            render(&r, Format::Prometheus)
        };
        let text = render(&recording, Format::Prometheus);
        let base = "function=\"f\",symbol=\"f.isra.0\",mode=\"kprobe\",kernel=\"6.1\"";
        let name = "hotprof_function_caller_latency_seconds";
        for line in [
            format!("# TYPE {name} summary"),
            format!("{name}{{{base},caller=\"site\\\"0\\\"+0x0\",quantile=\"0.5\"}} 0.0000015"),
            format!("{name}{{{base},caller=\"site\\\"0\\\"+0x0\",quantile=\"0.99\"}} 0.00004"),
            format!("{name}_count{{{base},caller=\"site\\\"0\\\"+0x0\"}} 2"),
            format!("{name}_sum{{{base},caller=\"site\\\"0\\\"+0x0\"}} 0.00003"),
            format!("{name}_count{{{base},caller=\"site\\\"19\\\"+0x13\"}} 2"),
            // Sites 20..=22 (10 + 9 + 8 µs): summed, without quantiles.
            format!("{name}_count{{{base},caller=\"other\"}} 6"),
            format!("{name}_sum{{{base},caller=\"other\"}} 0.000027"),
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        assert!(!text.contains("0x14\""), "{text}");
        assert!(!text.contains("caller=\"other\",quantile"), "{text}");
        assert_eq!(
            text.matches(&format!("{name}_count{{")).count(),
            BREAKDOWN_ROWS + 1
        );
        // The function-level families are untouched: removing the new family gives the
        // rendering without call sites.
        let start = text.find(&format!("# HELP {name} ")).unwrap();
        let end = text.find("# HELP hotprof_losses_total ").unwrap();
        assert_eq!(format!("{}{}", &text[..start], &text[end..]), without);
        let open = render(&recording, Format::OpenMetrics);
        assert!(open.contains(&format!("# TYPE {name} summary\n# UNIT {name} seconds\n")));
    }

    #[test]
    fn duplicate_functions_merge_their_call_sites_without_quantiles() {
        let mut recording = recording();
        recording.functions[0].callers = vec![caller("a+0x1", 1, 100), caller("b+0x2", 1, 50)];
        recording.functions[1].callers = vec![caller("b+0x2", 3, 500), caller("other", 1, 7)];
        let text = render(&recording, Format::Prometheus);
        let name = "hotprof_function_caller_latency_seconds";
        let b = text.find("caller=\"b+0x2\"").unwrap();
        let a = text.find("caller=\"a+0x1\"").unwrap();
        assert!(b < a, "busiest first: {text}");
        assert!(text.contains("caller=\"a+0x1\",quantile=\"0.5\"} 0.0000015"));
        assert!(!text.contains("caller=\"b+0x2\",quantile"), "{text}");
        assert!(text.contains("caller=\"b+0x2\"} 4\n"), "{text}");
        assert!(text.contains("caller=\"b+0x2\"} 0.00000055\n"), "{text}");
        assert_eq!(text.matches("caller=\"other\"").count(), 2, "{text}");
        assert!(
            text.contains(&format!("caller=\"other\"}} 1\n{name}_sum")),
            "{text}"
        );
    }

    #[test]
    fn recordings_without_keys_have_no_key_family() {
        let mut recording = recording();
        recording.by = vec!["comm".into()];
        for format in [Format::Prometheus, Format::OpenMetrics] {
            assert!(!render(&recording, format).contains("key_latency"));
        }
    }

    #[test]
    fn key_label_names_are_prometheus_safe_and_distinct() {
        let names = |fields: &[&str]| {
            key_label_names(&fields.iter().map(|f| f.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(
            names(&["arg2:log2", "errno", "comm"]),
            ["arg2_log2", "errno", "comm"]
        );
        assert_eq!(
            names(&["caller", "ret", "cgroup"]),
            ["caller", "ret", "cgroup"]
        );
        assert_eq!(
            names(&[
                "arg2:log2",
                "arg2_log2",
                "mode",
                "quantile",
                "9x",
                "",
                "__name__",
                "é"
            ]),
            [
                "arg2_log2",
                "key_arg2_log2",
                "key_mode",
                "key_quantile",
                "key_9x",
                "key_",
                "key___name__",
                "_"
            ]
        );
    }

    #[test]
    fn keys_are_a_bounded_summary_per_function_with_a_label_per_field() {
        let mut recording = recording();
        recording.functions.truncate(1);
        recording.kernel = "6.1".into();
        recording.by = vec!["arg2:log2".into(), "comm".into()];
        recording.functions[0].keys = (0..23u64)
            .map(|i| {
                key(
                    &["[4096, 8192)", &format!("t\"{i}\"\\\n")],
                    2,
                    1_000 * (30 - i),
                )
            })
            .collect();
        let without = {
            let mut r = recording.clone();
            r.functions[0].keys.clear();
            render(&r, Format::Prometheus)
        };
        let text = render(&recording, Format::Prometheus);
        let base = "function=\"f\",symbol=\"f.isra.0\",mode=\"kprobe\",kernel=\"6.1\"";
        let name = "hotprof_function_key_latency_seconds";
        let first = "arg2_log2=\"[4096, 8192)\",comm=\"t\\\"0\\\"\\\\\\n\"";
        for line in [
            format!("# TYPE {name} summary"),
            format!(
                "# HELP {name} Latency of the timed calls of a kernel function by --by key value (arg2:log2, comm), a label per key field: the 20 busiest values per function, the rest summed in one series with every key label other, without quantiles."
            ),
            format!("{name}{{{base},{first},quantile=\"0.5\"}} 0.0000015"),
            format!("{name}{{{base},{first},quantile=\"0.99\"}} 0.00004"),
            format!("{name}_count{{{base},{first}}} 2"),
            format!("{name}_sum{{{base},{first}}} 0.00003"),
            // Keys 20..=22 (10 + 9 + 8 µs): summed, without quantiles.
            format!("{name}_count{{{base},arg2_log2=\"other\",comm=\"other\"}} 6"),
            format!("{name}_sum{{{base},arg2_log2=\"other\",comm=\"other\"}} 0.000027"),
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        assert!(text.contains("comm=\"t\\\"19\\\"\\\\\\n\"}"), "{text}");
        assert!(!text.contains("comm=\"t\\\"20\\\""), "{text}");
        assert!(!text.contains("comm=\"other\",quantile"), "{text}");
        assert_eq!(
            text.matches(&format!("{name}_count{{")).count(),
            BREAKDOWN_ROWS + 1
        );
        // The other families are untouched: removing the new family gives the rendering
        // without keys.
        let start = text.find(&format!("# HELP {name} ")).unwrap();
        let end = text.find("# HELP hotprof_losses_total ").unwrap();
        assert_eq!(format!("{}{}", &text[..start], &text[end..]), without);
        let open = render(&recording, Format::OpenMetrics);
        assert!(open.contains(&format!("# TYPE {name} summary\n# UNIT {name} seconds\n")));
    }

    #[test]
    fn duplicate_functions_merge_their_keys_and_an_all_other_key_joins_other() {
        let mut recording = recording();
        recording.by = vec!["errno".into(), "comm".into()];
        recording.functions[0].keys = vec![
            key(&["ok", "dd"], 1, 100),
            key(&["ENOENT", "dd"], 1, 50),
            key(&["other", "dd"], 1, 20),
        ];
        recording.functions[1].keys = vec![
            key(&["ENOENT", "dd"], 3, 500),
            key(&["other", "other"], 1, 7),
            // Fewer values than fields: padded, not a label set of its own per length.
            key(&["ok"], 1, 5),
        ];
        let text = render(&recording, Format::Prometheus);
        let name = "hotprof_function_key_latency_seconds";
        let enoent = text.find("errno=\"ENOENT\",comm=\"dd\"").unwrap();
        let ok = text.find("errno=\"ok\",comm=\"dd\"").unwrap();
        assert!(enoent < ok, "busiest first: {text}");
        assert!(text.contains("errno=\"ok\",comm=\"dd\",quantile=\"0.5\"} 0.0000015"));
        assert!(
            !text.contains("errno=\"ENOENT\",comm=\"dd\",quantile"),
            "{text}"
        );
        assert!(text.contains("errno=\"ENOENT\",comm=\"dd\"} 4\n"), "{text}");
        // Only both values `other` is the rest's label set; one is an ordinary key.
        assert!(
            text.contains("errno=\"other\",comm=\"dd\",quantile=\"0.5\"}"),
            "{text}"
        );
        assert!(
            text.contains(&format!("errno=\"other\",comm=\"other\"}} 1\n{name}_sum")),
            "{text}"
        );
        assert!(
            text.contains("errno=\"ok\",comm=\"\",quantile=\"0.5\"}"),
            "{text}"
        );
        assert_eq!(
            text.matches(&format!("{name}_count{{")).count(),
            5,
            "{text}"
        );
    }
}
