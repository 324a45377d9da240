//! Exports of recordings for other tools and for people: Prometheus metrics
//! ([`prometheus`]), pprof profiles ([`pprof`]) and a self-contained HTML report ([`html`]).
//! The report's charts are drawn by `chart`, and `escape` makes recorded text safe in both.
//!
//! Everything here is pure (recording or stacks in, text or bytes out): it is tested without
//! probes, against the real consumers (promtool, a Prometheus server, `go tool pprof`,
//! headless Chromium), and any command can call it to write files or answer scrapes.

mod chart;
mod escape;
pub mod html;
pub mod pprof;
pub mod prometheus;

/// Call sites shown per function (call-site mode), as in the text report: the HTML table
/// sums the rest into one "N more sites" row, the metrics into `caller="other"`, so a
/// function with hundreds of callers stays readable and the series count bounded (the JSON
/// keeps every site).
const CALLER_SITES: usize = 20;
