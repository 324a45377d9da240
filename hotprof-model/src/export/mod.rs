//! Exports of recordings for other tools and for people: Prometheus metrics
//! ([`prometheus`]), pprof profiles ([`pprof`]), a self-contained HTML report ([`html`]) and
//! latency heatmaps ([`heatmap`]).
//! The report's charts are drawn by `chart`, and `escape` makes recorded text safe in both.
//! Per-function breakdowns (call sites, `--by` key values) are bounded the same way in the
//! report and the metrics (`BREAKDOWN_ROWS`).
//!
//! Everything here is pure (recording or stacks in, text or bytes out): it is tested without
//! probes, against the real consumers (promtool, a Prometheus server, `go tool pprof`,
//! headless Chromium), and any command can call it to write files or answer scrapes.

mod chart;
mod escape;
pub mod heatmap;
pub mod html;
pub mod pprof;
pub mod prometheus;

#[cfg(test)]
mod test_support;

/// Rows shown per function of a breakdown (call sites in call-site mode, `--by` key values),
/// as in the text report: the HTML table sums the rest into one "N more sites/keys" row, the
/// metrics into one `other` series, so a function with hundreds of callers or key values
/// stays readable and the series count bounded (the JSON keeps every row).
const BREAKDOWN_ROWS: usize = 20;

/// The column (HTML) or label (metrics) names of a recording's `--by` key: `by`, extended
/// with `key<i>` (`i` the value's 0-based position) should a key hold more values than `by`
/// names, or at least one column if `by` names none (a hand-made recording), so no value
/// goes unlabelled.
fn key_fields(recording: &crate::model::Recording) -> Vec<String> {
    let widest = recording
        .functions
        .iter()
        .flat_map(|f| &f.keys)
        .map(|k| k.key.len().max(1))
        .max()
        .unwrap_or(0);
    let mut fields = recording.by.clone();
    fields.extend((fields.len()..widest).map(|i| format!("key{i}")));
    fields
}
