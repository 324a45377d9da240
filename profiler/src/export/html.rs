//! A recording (or a comparison of two) as one self-contained HTML page.
//!
//! Self-contained means the page works from a file, offline, forever: no scripts, styles,
//! fonts or images are fetched from anywhere. Charts are inline SVG; the flamegraph, when
//! given, is embedded as a `data:` URL (see [`render_recording`]). A Content-Security-Policy
//! `<meta>` (`default-src 'none'`, with inline styles and `data:` frames and images allowed)
//! makes the browser itself refuse any fetch, should one ever slip in. Every string from
//! the recording (function names, the command, the kernel release …) is HTML-escaped.

use std::fmt::Write as _;

use super::chart::{self, Series};
use crate::model::{FunctionRecord, Recording};
use crate::units::format_ns;

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Series colours: colour-blind-safe blue and orange (Tableau 10), distinct from the
/// red-yellow flamegraph palette.
const BASE_COLOR: &str = "#4c78a8";
const NEW_COLOR: &str = "#f58518";

const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-src data:; \
                   script-src 'unsafe-inline'";

const STYLE: &str = r#"
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; background: #fff; color: #1d2330; }
main { max-width: 1120px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 1.5rem; margin: 8px 0 4px; }
h2 { font-size: 1.15rem; margin: 28px 0 8px; border-bottom: 1px solid #d8dde6; padding-bottom: 4px; }
h3 { font-size: 1rem; margin: 18px 0 4px; font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
p.sub, p.note { color: #5a6475; margin: 4px 0; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e6e9ef; text-align: left; vertical-align: top; }
th { background: #f3f5f9; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; overflow-wrap: anywhere; }
td.fn { font-family: ui-monospace, "DejaVu Sans Mono", monospace; white-space: nowrap; }
td.worse { color: #b42318; font-weight: 600; }
td.better { color: #067647; font-weight: 600; }
tr.nonzero td { color: #b42318; font-weight: 600; }
.scroll { overflow-x: auto; }
svg.chart { width: 100%; height: auto; display: block; }
svg.chart text { font-size: 12px; fill: #3b4454; }
svg.chart .grid line.major { stroke: #c9d0db; }
svg.chart .grid line.minor { stroke: #edf0f4; }
svg.chart .axis line { stroke: #5a6475; }
svg.chart path.series { fill-opacity: 0.35; stroke-width: 1.5; }
svg.chart line.marker { stroke-dasharray: 4 3; stroke-width: 1.2; }
svg.chart text.marker-label { font-size: 11px; }
svg.chart text.empty { font-size: 16px; fill: #8a93a3; }
iframe.flame { width: 100%; border: 1px solid #d8dde6; display: block; }
"#;

/// The page around `body`.
fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n{body}</main>\n</body>\n</html>\n",
        escape(title)
    )
}

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

/// Renders one recording: run metadata, the percentile table, each function's latency
/// histogram, losses, per-run figures (with `--runs`), and the flamegraph when given.
///
/// `flamegraph` is an SVG document (as inferno writes it). It is embedded as
/// `<iframe src="data:image/svg+xml;base64,…">` rather than pasted inline: inline SVG goes
/// through the HTML parser, which does not process the XML namespaces of inferno's `fg:`
/// attributes, and inferno's click-to-zoom/search script finds its elements page-wide
/// (`getElementsByTagName("svg")[0]`, ids like `details`), so it would grab this page's
/// charts. In its own document it works exactly as the standalone file does; a `data:`
/// document has an opaque origin, so its script cannot reach this page either. (No
/// `sandbox` attribute: Chromium renders sandboxed frames in a separate process, which makes
/// headless screenshots race the frame, and the opaque origin already isolates it.)
///
/// An SVG that refers to external resources (`href="https://…"`, `url(http…)`, `@import`)
/// is not embedded — the page would no longer be self-contained — and a note says so.
pub fn render_recording(recording: &Recording, flamegraph: Option<&[u8]>) -> String {
    let title = if recording.command.is_empty() {
        format!("hotprof: {} on {}", recording.mode, recording.kernel)
    } else {
        format!("hotprof: {}", shell_words(&recording.command))
    };
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>{}</h1>\n<p class=\"sub\">Per-call latency of kernel functions, measured in the kernel with eBPF.</p>\n",
        escape(&title)
    );

    body.push_str("<h2>Run</h2>\n<table class=\"meta\">");
    for (key, value) in meta_rows(recording) {
        let _ = write!(
            body,
            "<tr><th>{key}</th><td class=\"code\">{}</td></tr>",
            escape(&value)
        );
    }
    body.push_str("</table>\n");

    body.push_str("<h2>Latency per function</h2>\n<div class=\"scroll\"><table class=\"stats\"><tr><th>function</th>");
    body.push_str(&stat_header_cells());
    body.push_str("</tr>");
    for function in &recording.functions {
        let _ = write!(body, "<tr><td class=\"fn\">{}", escape(&function.name));
        if function.symbol != function.name && !function.symbol.is_empty() {
            let _ = write!(body, "<br><small>{}</small>", escape(&function.symbol));
        }
        let _ = write!(body, "</td>{}</tr>", stat_cells(function));
    }
    body.push_str("</table></div>\n");
    if recording.functions.iter().any(|f| f.below_min_latency > 0) {
        body.push_str("<p class=\"note\">Calls faster than <code>--min-latency</code> are counted but not in the table or the histograms:");
        for function in recording
            .functions
            .iter()
            .filter(|f| f.below_min_latency > 0)
        {
            let _ = write!(
                body,
                " <code>{}</code> {};",
                escape(&function.name),
                function.below_min_latency
            );
        }
        body.push_str("</p>\n");
    }

    body.push_str("<h2>Latency distributions</h2>\n<p class=\"note\">Log-scaled latency axis; each bar's area is its share of the calls. Dashed lines: p50, p99, max.</p>\n");
    for function in &recording.functions {
        let label = format!("{} calls", function.count);
        let markers = if function.count > 0 {
            vec![
                ("p50", function.p50_ns),
                ("p99", function.p99_ns),
                ("max", function.max_ns),
            ]
        } else {
            Vec::new()
        };
        let series = [Series {
            label: &label,
            color: BASE_COLOR,
            buckets: &function.buckets,
            markers,
        }];
        let _ = write!(
            body,
            "<h3>{}</h3>\n{}\n",
            escape(&function.name),
            chart::histogram_svg(
                &format!("Latency distribution of {}", function.name),
                &series
            )
        );
    }

    body.push_str("<h2>Losses</h2>\n<p class=\"note\">Everything the probes could not time (see docs/json-schema.md).</p>\n");
    body.push_str(&losses_table(&[("calls", recording)]));
    body.push('\n');

    if !recording.runs.is_empty() {
        body.push_str("<h2>Runs</h2>\n<div class=\"scroll\"><table class=\"runs\"><tr><th class=\"num\">run</th><th class=\"num\">duration</th><th class=\"num\">exit</th>");
        for function in &recording.functions {
            let _ = write!(
                body,
                "<th class=\"num\">{} p50</th>",
                escape(&function.name)
            );
        }
        body.push_str("<th>workload metrics</th></tr>");
        for (i, run) in recording.runs.iter().enumerate() {
            let _ = write!(
                body,
                "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
                i + 1,
                ns(run.duration_ns as f64),
                run.exit_code
            );
            for function in &run.functions {
                let _ = write!(
                    body,
                    "<td class=\"num\">{}</td>",
                    ns(function.p50_ns as f64)
                );
            }
            let metrics: Vec<String> = run
                .workload_metrics
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = write!(
                body,
                "<td class=\"code\">{}</td></tr>",
                escape(&metrics.join(" "))
            );
        }
        body.push_str("</table></div>\n");
    }

    if let Some(svg) = flamegraph {
        body.push_str("<h2>Flamegraph</h2>\n");
        body.push_str(&flamegraph_section(svg));
    }
    page(&title, &body)
}

/// The flamegraph as a `data:` iframe, or a note explaining why it is missing.
fn flamegraph_section(svg: &[u8]) -> String {
    let text = String::from_utf8_lossy(svg);
    if !text.contains("<svg") {
        return "<p class=\"note\">Flamegraph omitted: the data given is not an SVG document.</p>\n".into();
    }
    if let Some(reference) = external_reference(&text) {
        return format!(
            "<p class=\"note\">Flamegraph omitted: it refers to an external resource ({}), so embedding it would \
             make this page fetch from the network.</p>\n",
            escape(&reference)
        );
    }
    let height = svg_height(&text).unwrap_or(600.0).clamp(120.0, 20_000.0);
    format!(
        "<p class=\"note\">Click a frame to zoom, Ctrl-F to search.</p>\n<iframe class=\"flame\" title=\"Flamegraph\" \
         style=\"height:{}px\" src=\"data:image/svg+xml;base64,{}\"></iframe>\n",
        height.ceil(),
        base64(svg)
    )
}

/// `height` of the root `<svg>` element in px, if given as a plain number.
fn svg_height(svg: &str) -> Option<f64> {
    let start = svg.find("<svg")?;
    let tag = &svg[start..start + svg[start..].find('>')?];
    let value = attribute_values(tag)
        .into_iter()
        .find(|(name, _)| name == "height")?
        .1;
    value
        .trim()
        .trim_end_matches("px")
        .parse()
        .ok()
        .filter(|h: &f64| h.is_finite())
}

/// `(name, value)` of every `name="value"` / `name='value'` in `text`.
fn attribute_values(text: &str) -> Vec<(String, String)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(eq) = text[i..].find('=').map(|p| p + i) {
        i = eq + 1;
        let mut q = eq + 1;
        while q < bytes.len() && bytes[q].is_ascii_whitespace() {
            q += 1;
        }
        let Some(&quote) = bytes.get(q) else { break };
        if quote != b'"' && quote != b'\'' {
            continue;
        }
        let Some(end) = text[q + 1..].find(quote as char).map(|p| p + q + 1) else {
            break;
        };
        let mut n = eq;
        while n > 0 && bytes[n - 1].is_ascii_whitespace() {
            n -= 1;
        }
        let name_end = n;
        while n > 0 && (bytes[n - 1].is_ascii_alphanumeric() || b":-_".contains(&bytes[n - 1])) {
            n -= 1;
        }
        out.push((
            text[n..name_end].to_ascii_lowercase(),
            text[q + 1..end].to_string(),
        ));
        i = end + 1;
    }
    out
}

/// The first reference in `svg` a browser would fetch from the network: an attribute value
/// that is an absolute or scheme-relative URL (namespace declarations, `xmlns…`, are names,
/// not fetched), a CSS `url(…)` that is not a fragment or `data:`, or an `@import`.
fn external_reference(svg: &str) -> Option<String> {
    let is_remote = |url: &str| {
        let url = url
            .trim()
            .trim_matches(|c| c == '"' || c == '\'')
            .trim()
            .to_ascii_lowercase();
        !(url.is_empty()
            || url.starts_with('#')
            || url.starts_with("data:")
            || url.starts_with("javascript:"))
            && (url.starts_with("//") || url.contains(':'))
    };
    for (name, value) in attribute_values(svg) {
        if name.starts_with("xmlns") || !matches!(name.rsplit(':').next(), Some("href" | "src")) {
            continue;
        }
        if is_remote(&value) {
            return Some(value);
        }
    }
    let lower = svg.to_ascii_lowercase();
    if let Some(at) = lower.find("@import") {
        return Some(svg[at..].chars().take(60).collect());
    }
    let mut rest = lower.as_str();
    while let Some(at) = rest.find("url(") {
        let after = &rest[at + 4..];
        let url = &after[..after.find(')').unwrap_or(after.len())];
        if is_remote(url) {
            return Some(format!("url({url})"));
        }
        rest = after;
    }
    None
}

/// Standard base64 with padding (RFC 4648), for the `data:` URL.
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Relative change from `base` to `new` as a table cell, red when slower by more than 2 %,
/// green when faster by more than 2 % (the histogram's own resolution is ±1.6 %).
fn delta_cell(base: f64, new: f64) -> String {
    if base <= 0.0 || !base.is_finite() || !new.is_finite() {
        return "<td class=\"num\">—</td>".into();
    }
    let change = (new - base) / base * 100.0;
    let class = if change > 2.0 {
        " worse"
    } else if change < -2.0 {
        " better"
    } else {
        ""
    };
    format!("<td class=\"num{class}\">{change:+.1}%</td>")
}

/// Renders a comparison of two recordings of the same functions: both runs' metadata side
/// by side, a summary of the change per function, and for each function both latency
/// distributions overlaid on one chart (base in blue, new in orange) with their full
/// percentile tables. Functions are matched by name; unmatched ones are listed.
pub fn render_comparison(base: &Recording, new: &Recording, title: &str) -> String {
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>{}</h1>\n<p class=\"sub\">Comparison of two hotprof recordings: <b>base</b> and <b>new</b>.</p>\n",
        escape(title)
    );

    body.push_str(
        "<h2>Runs</h2>\n<table class=\"meta\"><tr><th></th><th>base</th><th>new</th></tr>",
    );
    for ((key, b), (_, n)) in meta_rows(base).into_iter().zip(meta_rows(new)) {
        let _ = write!(
            body,
            "<tr><th>{key}</th><td class=\"code\">{}</td><td class=\"code\">{}</td></tr>",
            escape(&b),
            escape(&n)
        );
    }
    body.push_str("</table>\n");

    let pairs: Vec<(&FunctionRecord, &FunctionRecord)> = base
        .functions
        .iter()
        .filter_map(|b| {
            new.functions
                .iter()
                .find(|n| n.name == b.name)
                .map(|n| (b, n))
        })
        .collect();

    body.push_str(
        "<h2>Change per function</h2>\n<div class=\"scroll\"><table class=\"stats\"><tr><th>function</th>\
         <th class=\"num\">calls base → new</th>",
    );
    for stat in ["avg", "p50", "p99"] {
        let _ = write!(
            body,
            "<th class=\"num\">{stat} base → new</th><th class=\"num\">Δ</th>"
        );
    }
    body.push_str("</tr>");
    for (b, n) in &pairs {
        let _ = write!(
            body,
            "<tr><td class=\"fn\">{}</td><td class=\"num\">{} → {}</td>",
            escape(&b.name),
            b.count,
            n.count
        );
        for (bv, nv) in [
            (b.mean_ns, n.mean_ns),
            (b.p50_ns as f64, n.p50_ns as f64),
            (b.p99_ns as f64, n.p99_ns as f64),
        ] {
            if b.count == 0 || n.count == 0 {
                body.push_str("<td class=\"num\">—</td><td class=\"num\">—</td>");
                continue;
            }
            let _ = write!(
                body,
                "<td class=\"num\">{} → {}</td>{}",
                ns(bv),
                ns(nv),
                delta_cell(bv, nv)
            );
        }
        body.push_str("</tr>");
    }
    body.push_str("</table></div>\n");
    let only = |from: &Recording, other: &Recording| -> Vec<String> {
        from.functions
            .iter()
            .filter(|f| !other.functions.iter().any(|o| o.name == f.name))
            .map(|f| format!("<code>{}</code>", escape(&f.name)))
            .collect()
    };
    for (which, names) in [("base", only(base, new)), ("new", only(new, base))] {
        if !names.is_empty() {
            let _ = writeln!(
                body,
                "<p class=\"note\">Only in {which}: {}</p>",
                names.join(", ")
            );
        }
    }

    body.push_str("<h2>Latency distributions</h2>\n<p class=\"note\">Log-scaled latency axis; each curve's area is its share of that recording's calls, so recordings with different call counts compare directly. Dashed lines: p50 and p99.</p>\n");
    for (b, n) in &pairs {
        let base_label = format!(
            "base: {} calls, p50 {}",
            b.count,
            format_ns(b.p50_ns as f64)
        );
        let new_label = format!("new: {} calls, p50 {}", n.count, format_ns(n.p50_ns as f64));
        let markers = |f: &FunctionRecord, p50: &'static str, p99: &'static str| {
            if f.count > 0 {
                vec![(p50, f.p50_ns), (p99, f.p99_ns)]
            } else {
                Vec::new()
            }
        };
        let series = [
            Series {
                label: &base_label,
                color: BASE_COLOR,
                buckets: &b.buckets,
                markers: markers(b, "base p50", "base p99"),
            },
            Series {
                label: &new_label,
                color: NEW_COLOR,
                buckets: &n.buckets,
                markers: markers(n, "new p50", "new p99"),
            },
        ];
        let _ = write!(
            body,
            "<h3>{}</h3>\n{}\n<div class=\"scroll\"><table class=\"stats\"><tr><th></th>{}</tr>\
             <tr><th>base</th>{}</tr><tr><th>new</th>{}</tr></table></div>\n",
            escape(&b.name),
            chart::histogram_svg(
                &format!("Latency distribution of {}: base and new", b.name),
                &series
            ),
            stat_header_cells(),
            stat_cells(b),
            stat_cells(n)
        );
    }

    body.push_str("<h2>Losses</h2>\n");
    body.push_str(&losses_table(&[("base", base), ("new", new)]));
    body.push('\n');
    page(title, &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Histogram, Losses, SCHEMA_VERSION};

    fn recording(name: &str, values: &[u64]) -> Recording {
        let mut histogram = Histogram::new();
        for &v in values {
            histogram.record(v);
        }
        let sum: u64 = values.iter().sum();
        let sum_sq: u128 = values.iter().map(|&v| u128::from(v) * u128::from(v)).sum();
        let (min, max) = (
            values.iter().copied().min().unwrap_or(0),
            values.iter().copied().max().unwrap_or(0),
        );
        let function = FunctionRecord::from_aggregates(
            name.into(),
            format!("{name}.isra.0"),
            &histogram,
            values.len() as u64,
            sum,
            sum_sq,
            min,
            max,
        );
        Recording {
            schema_version: SCHEMA_VERSION,
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
            runs: vec![],
            intervals: vec![],
        }
    }

    #[test]
    fn escapes_everything() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        let html = render_recording(&recording("evil<img src=x>", &[100, 200, 300]), None);
        assert!(!html.contains("<script>") && !html.contains("<img") && !html.contains("<b>hi"));
        assert!(html.contains("evil&lt;img src=x&gt;"));
        assert!(html.contains("6.1.0-&lt;script&gt;"));
        assert!(html.contains("sh -c &#39;echo &quot;&lt;b&gt;hi&lt;/b&gt;&quot; &amp; true&#39;"));
    }

    #[test]
    fn recording_page_has_table_chart_and_losses() {
        let values: Vec<u64> = (1..2_000).map(|i| 500 + i * 3).collect();
        let html = render_recording(&recording("vfs_read", &values), None);
        for needle in [
            "<table class=\"stats\">",
            "<svg class=\"chart\"",
            "orphaned_frames",
            "p99.9",
            "kprobe",
            "120 ns per call",
        ] {
            assert!(html.contains(needle), "missing {needle}");
        }
        assert!(!html.contains("Flamegraph"));
    }

    #[test]
    fn comparison_overlays_both_and_lists_unmatched() {
        let base = recording("vfs_read", &[1_000, 1_100, 1_200]);
        let mut new = recording("vfs_read", &[2_000, 2_100, 2_200]);
        new.functions
            .push(recording("vfs_write", &[5]).functions.remove(0));
        let html = render_comparison(&base, &new, "before & after");
        assert!(html.contains("<title>before &amp; after</title>"));
        assert_eq!(html.matches("<path class=\"series\"").count(), 2);
        assert!(html.contains("base: 3 calls") && html.contains("new: 3 calls"));
        assert!(html.contains("Only in new: <code>vfs_write</code>"));
        assert!(
            html.contains("class=\"num worse\">+90.9%"),
            "avg 1.1 µs → 2.1 µs"
        );
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

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
    }

    #[test]
    fn flamegraph_is_embedded_as_a_data_url_sized_to_the_svg() {
        let svg = br#"<?xml version="1.0"?><!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd"><svg version="1.1" width="1200" height="342" xmlns="http://www.w3.org/2000/svg" xmlns:fg="http://github.com/jonhoo/inferno"><rect/></svg>"#;
        let html = render_recording(&recording("f", &[1]), Some(svg));
        assert!(html.contains("style=\"height:342px\" src=\"data:image/svg+xml;base64,"));
        assert!(!html.contains("http://") && !html.contains("https://"));
    }

    #[test]
    fn external_references_are_found_and_namespaces_are_not() {
        let ok = r##"<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"><a xlink:href="#x"/><rect style="fill:url(#g)"/><image href="data:image/png;base64,AA"/></svg>"##;
        assert_eq!(external_reference(ok), None);
        for bad in [
            r#"<svg><image href="https://example.com/x.png"/></svg>"#,
            r#"<svg><image xlink:href = '//cdn.example/x.png'/></svg>"#,
            r#"<svg><style>@import "x.css";</style></svg>"#,
            r#"<svg><rect style="fill:url( 'http://x/y#g' )"/></svg>"#,
            r#"<svg><script src="http://x/y.js"/></svg>"#,
        ] {
            assert!(external_reference(bad).is_some(), "{bad}");
            assert!(
                render_recording(&recording("f", &[1]), Some(bad.as_bytes()))
                    .contains("Flamegraph omitted")
            );
        }
        assert!(render_recording(&recording("f", &[1]), Some(b"not svg")).contains("not an SVG"));
    }

    #[test]
    fn svg_height_reads_the_root_element() {
        assert_eq!(
            svg_height(r#"<?xml?><svg width="1200" height="342.5px">"#),
            Some(342.5)
        );
        assert_eq!(svg_height(r#"<svg width="100%">"#), None);
    }
}
