//! A recording (or a comparison of two) as one self-contained HTML page.
//!
//! Self-contained means the page works from a file, offline, forever: no scripts, styles,
//! fonts or images are fetched from anywhere. Charts are inline SVG; the flamegraph, when
//! given, is embedded as a `data:` URL (see [`render_recording`]). A Content-Security-Policy
//! `<meta>` (`default-src 'none'`, with inline styles and `data:` frames and images allowed)
//! makes the browser itself refuse any fetch, should one ever slip in. Every string from
//! the recording (function names, the command, the kernel release …) is HTML-escaped.
//!
//! This file holds the page frame (CSP, the style sheet `html/report.css`) and the parts
//! both pages share: run metadata, percentile cells and the losses table. The pages are in
//! `html/recording.rs` and `html/comparison.rs`; `html/flamegraph.rs` checks and embeds the
//! flamegraph.

mod comparison;
mod flamegraph;
mod recording;

use std::fmt::Write as _;

pub use comparison::render_comparison;
pub use recording::render_recording;

use super::escape::escape;
use crate::model::{FunctionRecord, Recording};
use crate::units::format_ns;

/// Series colours: colour-blind-safe blue and orange (Tableau 10), distinct from the
/// red-yellow flamegraph palette.
const BASE_COLOR: &str = "#4c78a8";
const NEW_COLOR: &str = "#f58518";

/// The Content-Security-Policy: nothing may be fetched; inline styles and scripts, and
/// `data:` images and frames (the flamegraph), are allowed.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-src data:; \
                   script-src 'unsafe-inline'";

/// The page's style sheet (inline: the page fetches nothing).
const STYLE: &str = include_str!("html/report.css");

/// The page around `body`.
fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<main>\n{body}</main>\n</body>\n</html>\n",
        escape(title)
    )
}

/// A duration in ns, scaled to its unit and escaped.
fn ns(value: f64) -> String {
    escape(&format_ns(value))
}

/// `a b 'c d'`: the command as one could retype it (words with spaces or quotes quoted).
fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Key/value rows describing a recording: tool, kernel, mode, duration, command, overhead.
fn meta_rows(recording: &Recording) -> Vec<(&'static str, String)> {
    let command = if recording.command.is_empty() {
        "—".to_string()
    } else {
        shell_words(&recording.command)
    };
    let overhead = match recording.probe_overhead_ns {
        Some(v) => format!("{} per call", format_ns(v)),
        None => "not calibrated".to_string(),
    };
    vec![
        ("Kernel", recording.kernel.clone()),
        ("Probe mode", recording.mode.clone()),
        ("Duration", format_ns(recording.duration_ns as f64)),
        ("Command", command),
        ("Probe overhead", overhead),
        ("Functions", recording.functions.len().to_string()),
        (
            "Runs",
            if recording.runs.is_empty() {
                "1".into()
            } else {
                recording.runs.len().to_string()
            },
        ),
        (
            "Calls dropped",
            recording.losses.total_dropped().to_string(),
        ),
        ("Written by", recording.tool.clone()),
    ]
}

/// Percentile table header cells, shared by the single and per-function comparison tables.
const STAT_HEADERS: [&str; 10] = [
    "calls", "min", "avg", "p50", "p90", "p99", "p99.9", "max", "stddev", "total",
];

/// The statistic cells of one function, in [`STAT_HEADERS`] order.
fn stat_cells(function: &FunctionRecord) -> String {
    if function.count == 0 {
        return format!(
            "<td class=\"num\">0</td>{}",
            "<td class=\"num\">—</td>".repeat(STAT_HEADERS.len() - 1)
        );
    }
    let values = [
        function.min_ns as f64,
        function.mean_ns,
        function.p50_ns as f64,
        function.p90_ns as f64,
        function.p99_ns as f64,
        function.p999_ns as f64,
        function.max_ns as f64,
        function.stddev_ns,
        function.sum_ns as f64,
    ];
    let mut cells = format!("<td class=\"num\">{}</td>", function.count);
    for value in values {
        let _ = write!(cells, "<td class=\"num\">{}</td>", ns(value));
    }
    cells
}

/// The header cells for [`stat_cells`], in [`STAT_HEADERS`] order.
fn stat_header_cells() -> String {
    STAT_HEADERS
        .iter()
        .map(|h| format!("<th class=\"num\">{h}</th>"))
        .collect()
}

/// The losses as a table, every field of `Losses` by its JSON name; non-zero rows stand out.
fn losses_table(recordings: &[(&str, &Recording)]) -> String {
    let fields: Vec<Vec<(String, u64)>> = recordings
        .iter()
        .map(|(_, r)| {
            let value = serde_json::to_value(&r.losses).unwrap_or_default();
            value
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| v.as_u64().map(|n| (k.clone(), n)))
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect();
    let mut html = String::from("<table class=\"losses\"><tr><th>kind</th>");
    for (label, _) in recordings {
        let _ = write!(html, "<th class=\"num\">{}</th>", escape(label));
    }
    html.push_str("</tr>");
    for (i, (kind, _)) in fields
        .first()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let values: Vec<u64> = fields
            .iter()
            .map(|f| f.get(i).map_or(0, |(_, v)| *v))
            .collect();
        let class = if values.iter().any(|v| *v > 0) {
            " class=\"nonzero\""
        } else {
            ""
        };
        let _ = write!(html, "<tr{class}><td class=\"code\">{}</td>", escape(kind));
        for value in values {
            let _ = write!(html, "<td class=\"num\">{value}</td>");
        }
        html.push_str("</tr>");
    }
    html.push_str("</table>");
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FunctionTotals, Losses, SCHEMA_VERSION};

    /// A recording of one function `name` with the given latencies, and strings that need
    /// escaping in the kernel release and the command. Shared by the pages' tests.
    pub(super) fn recording(name: &str, values: &[u64]) -> Recording {
        let function = FunctionRecord::from_aggregates(
            name.into(),
            format!("{name}.isra.0"),
            &FunctionTotals::from_durations(values),
        );
        Recording {
            schema_version: SCHEMA_VERSION,
            by: Vec::new(),
            filter: None,
            tool: "hotprof 0.1.0".into(),
            kernel: "6.1.0-<script>".into(),
            mode: "kprobe".into(),
            task_store: None,
            duration_ns: 1_000_000_000,
            command: vec!["sh".into(), "-c".into(), "echo \"<b>hi</b>\" & true".into()],
            functions: vec![function],
            losses: Losses {
                orphaned_frames: 2,
                ..Losses::default()
            },
            probe_overhead_ns: Some(120.0),
            probe_bias_ns: None,
            runs: vec![],
            intervals: vec![],
        }
    }

    #[test]
    fn escapes_everything() {
        let html = render_recording(&recording("evil<img src=x>", &[100, 200, 300]), None);
        assert!(!html.contains("<script>") && !html.contains("<img") && !html.contains("<b>hi"));
        assert!(html.contains("evil&lt;img src=x&gt;"));
        assert!(html.contains("6.1.0-&lt;script&gt;"));
        assert!(html.contains("sh -c &#39;echo &quot;&lt;b&gt;hi&lt;/b&gt;&quot; &amp; true&#39;"));
    }

    #[test]
    fn empty_functions_and_recordings_render() {
        let mut recording = recording("idle", &[]);
        let html = render_recording(&recording, None);
        assert!(html.contains("no timed calls"));
        assert!(html.contains("<td class=\"num\">0</td><td class=\"num\">—</td>"));
        let comparison = render_comparison(&recording, &recording, "t");
        assert!(comparison.contains("no timed calls"));
        recording.functions.clear();
        assert!(render_recording(&recording, None).contains("</html>"));
        assert!(render_comparison(&recording, &recording, "t").contains("</html>"));
    }
}
