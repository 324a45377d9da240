//! The page of one recording ([`render_recording`]): run metadata, the percentile table, a
//! latency chart per function (with its per-call-site and `--by` tables), the latency heatmap
//! of its intervals, losses, per-run figures and the embedded flamegraph.

use std::fmt::Write as _;

use super::flamegraph::flamegraph_section;
use super::{
    BASE_COLOR, losses_table, meta_rows, ns, page, shell_words, stat_cells, stat_header_cells,
};
use crate::export::chart::{self, Series};
use crate::export::escape::escape;
use crate::export::heatmap::{self, HeatmapOptions};
use crate::export::{BREAKDOWN_ROWS, key_fields};
use crate::model::{FunctionRecord, Recording};

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

    let fields = key_fields(recording);
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
        body.push_str(&callers_table(function));
        body.push_str(&keys_table(function, &fields));
        body.push_str(&slowest_table(function, &fields));
    }

    body.push_str(&heatmap_section(recording));

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
        // `--stacks-every N`: the widths are estimates; say so above the picture too.
        if let Some(sampling) = crate::report::stacks::sampling_summary(recording) {
            body.push_str(&format!("<p>{}</p>\n", escape(&sampling)));
        }
        body.push_str(&flamegraph_section(svg));
    }
    page(&title, &body)
}

/// The latency heatmap of the recording's intervals (`--interval`, `--heatmap`), inline;
/// nothing for a recording without them.
fn heatmap_section(recording: &Recording) -> String {
    let options = HeatmapOptions {
        title: crate::report::heatmap_title(recording),
        width: 1100,
        key_names: recording.by.clone(),
        standalone: false,
    };
    match heatmap::render(&recording.intervals, &options) {
        Ok(svg) => format!(
            "<h2>Latency over time</h2>\n<p class=\"note\">A column per interval, a row per \
             quarter of a power of two of latency; colour = calls per cell, log scale (hover a \
             cell for its figures).</p>\n{svg}"
        ),
        Err(_) => String::new(),
    }
}

/// The per-call-site table of `function` (call-site mode; empty without callers).
fn callers_table(function: &FunctionRecord) -> String {
    let rows = function.callers.iter().map(|caller| Row {
        labels: vec![caller.site.as_str()],
        count: caller.count,
        sum_ns: caller.sum_ns,
        p50_ns: caller.p50_ns,
        p99_ns: caller.p99_ns,
    });
    breakdown_table(function, "callers", &["call site"], rows.collect(), "sites")
}

/// The `--by` table of `function` (empty without key rows): a column per key field, headed
/// by its name in `fields` (see [`key_fields`]).
fn keys_table(function: &FunctionRecord, fields: &[String]) -> String {
    let header: Vec<&str> = fields.iter().map(String::as_str).collect();
    let rows = function.keys.iter().map(|key| Row {
        labels: key.key.iter().map(String::as_str).collect(),
        count: key.count,
        sum_ns: key.sum_ns,
        p50_ns: key.p50_ns,
        p99_ns: key.p99_ns,
    });
    breakdown_table(function, "keys", &header, rows.collect(), "keys")
}

/// `--slowest`: one row per kept call (duration, when, off-CPU part, CPU, task, the `--by`
/// fields), its innermost kernel frames below; every recorded text escaped.
fn slowest_table(function: &FunctionRecord, fields: &[String]) -> String {
    if function.slowest.is_empty() {
        return String::new();
    }
    let mut html = String::from(
        "<div class=\"scroll\"><table class=\"slowest\"><tr><th class=\"num\">duration</th><th class=\"num\">at</th><th class=\"num\">off-CPU</th><th class=\"num\">cpu</th><th>task</th>",
    );
    for field in fields {
        let _ = write!(html, "<th>{}</th>", escape(field));
    }
    html.push_str("<th>kernel stack (innermost first)</th></tr>");
    for call in &function.slowest {
        let _ = write!(
            html,
            "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"code\">{} {}/{}</td>",
            ns(call.duration_ns as f64),
            ns(call.at_ns as f64),
            call.off_cpu_ns
                .map_or_else(String::new, |off| ns(off as f64)),
            call.cpu,
            escape(&call.comm),
            call.pid,
            call.tid
        );
        for column in 0..fields.len() {
            let value = call.key.get(column).map_or("", String::as_str);
            let _ = write!(html, "<td class=\"code\">{}</td>", escape(value));
        }
        let frames: Vec<String> = call.stack.iter().take(8).map(|f| escape(f)).collect();
        let _ = write!(
            html,
            "<td class=\"code\">{}</td></tr>",
            frames.join(" &larr; ")
        );
    }
    html.push_str("</table></div>\n");
    html
}

/// One row of a breakdown table: its label cells and its calls.
struct Row<'a> {
    labels: Vec<&'a str>,
    count: u64,
    sum_ns: u64,
    p50_ns: u64,
    p99_ns: u64,
}

/// A breakdown of `function`'s calls (call sites, `--by` key values), empty without rows: a
/// column per `header` label, then calls, p50, p99 and share of the function's total time,
/// in the recording's order (busiest first), at most [`BREAKDOWN_ROWS`] rows and then one
/// "N more {noun}" row summing the rest. Labels are escaped: they hold recorded text (task
/// names, symbols).
fn breakdown_table(
    function: &FunctionRecord,
    class: &str,
    header: &[&str],
    rows: Vec<Row<'_>>,
    noun: &str,
) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let share = |sum_ns: u64| {
        let percent = if function.sum_ns > 0 {
            100.0 * sum_ns as f64 / function.sum_ns as f64
        } else {
            0.0
        };
        format!("{percent:.1}%")
    };
    let mut html = format!("<div class=\"scroll\"><table class=\"{class}\"><tr>");
    for title in header {
        let _ = write!(html, "<th>{}</th>", escape(title));
    }
    html.push_str("<th class=\"num\">calls</th><th class=\"num\">p50</th><th class=\"num\">p99</th><th class=\"num\">time share</th></tr>");
    for row in rows.iter().take(BREAKDOWN_ROWS) {
        html.push_str("<tr>");
        for column in 0..header.len() {
            let label = row.labels.get(column).copied().unwrap_or_default();
            let _ = write!(html, "<td class=\"code\">{}</td>", escape(label));
        }
        let _ = write!(
            html,
            "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            row.count,
            ns(row.p50_ns as f64),
            ns(row.p99_ns as f64),
            share(row.sum_ns)
        );
    }
    let rest = &rows[rows.len().min(BREAKDOWN_ROWS)..];
    if !rest.is_empty() {
        let calls: u64 = rest.iter().map(|r| r.count).sum();
        let sum_ns: u64 = rest.iter().map(|r| r.sum_ns).sum();
        let span = match header.len() {
            0 | 1 => String::new(),
            columns => format!(" colspan=\"{columns}\""),
        };
        let _ = write!(
            html,
            "<tr><td{span}>{} more {noun}</td><td class=\"num\">{calls}</td><td class=\"num\"></td><td class=\"num\"></td><td class=\"num\">{}</td></tr>",
            rest.len(),
            share(sum_ns)
        );
    }
    html.push_str("</table></div>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::html::tests::recording;
    use crate::export::test_support::{caller, key};

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
    fn flamegraph_is_embedded_as_a_data_url_sized_to_the_svg() {
        let svg = br#"<?xml version="1.0"?><!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd"><svg version="1.1" width="1200" height="342" xmlns="http://www.w3.org/2000/svg" xmlns:fg="http://github.com/jonhoo/inferno"><rect/></svg>"#;
        let html = render_recording(&recording("f", &[1]), Some(svg));
        assert!(html.contains("style=\"height:342px\" src=\"data:image/svg+xml;base64,"));
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(!html.contains("per-path figures are estimates"));
        // `--stacks-every 8`: the page says the widths are estimates.
        let mut sampled = recording("f", &[1]);
        sampled.functions[0].note_stacks(8, 1);
        let html = render_recording(&sampled, Some(svg));
        assert!(html.contains(
            "<h2>Flamegraph</h2>\n<p>stacks of a random 1 in 8 calls, each counted ×8: \
             per-path figures are estimates</p>"
        ));
    }

    #[test]
    fn callers_get_an_escaped_table_under_their_function() {
        let mut recording = recording("vfs_write", &[1_000, 2_000, 3_000, 4_000]);
        let without = render_recording(&recording, None);
        assert!(!without.contains("class=\"callers\""));
        recording.functions[0].callers = vec![
            caller("generic_perform_write+0x14e", 3, 7_500),
            caller("evil<img src=x>+0x1", 1, 2_500),
        ];
        let html = render_recording(&recording, None);
        assert!(!html.contains("<img"));
        let table = &html[html
            .find("<table class=\"callers\">")
            .expect("callers table")..];
        let table = &table[..table.find("</table>").unwrap()];
        assert!(table.contains("<th>call site</th>"), "{table}");
        assert!(
            table.contains("<tr><td class=\"code\">generic_perform_write+0x14e</td><td class=\"num\">3</td><td class=\"num\">1.50 µs</td><td class=\"num\">40.0 µs</td><td class=\"num\">75.0%</td></tr>"),
            "{table}"
        );
        assert!(table.contains("evil&lt;img src=x&gt;+0x1"), "{table}");
        assert!(table.contains("25.0%</td></tr>"), "{table}");
        assert!(!table.contains("more sites"));
        // The table follows the function's chart, and nothing else changed.
        let chart = html.find("<h3>vfs_write</h3>").unwrap();
        assert!(html.find("<table class=\"callers\">").unwrap() > chart);
        let start = html
            .find("<div class=\"scroll\"><table class=\"callers\">")
            .unwrap();
        let end =
            start + html[start..].find("</table></div>\n").unwrap() + "</table></div>\n".len();
        assert_eq!(format!("{}{}", &html[..start], &html[end..]), without);
    }

    #[test]
    fn callers_beyond_the_cap_are_summed_in_one_row() {
        let mut recording = recording("f", &[1_000; 100]);
        recording.functions[0].callers = (0..25u64)
            .map(|i| caller(&format!("site{i}+0x{i:x}"), 4, 4_000))
            .collect();
        let html = render_recording(&recording, None);
        assert_eq!(
            html.matches("<td class=\"code\">site").count(),
            BREAKDOWN_ROWS
        );
        assert!(html.contains("site19+0x13") && !html.contains("site20+0x14"));
        assert!(
            html.contains("<tr><td>5 more sites</td><td class=\"num\">20</td><td class=\"num\"></td><td class=\"num\"></td><td class=\"num\">20.0%</td></tr>"),
            "{html}"
        );
    }

    /// The `<table class="keys">…</table>` of `html`.
    fn keys_table_of(html: &str) -> &str {
        let table = &html[html.find("<table class=\"keys\">").expect("keys table")..];
        &table[..table.find("</table>").unwrap()]
    }

    #[test]
    fn the_slowest_calls_get_a_row_each_with_escaped_task_and_stack() {
        let mut recording = recording("do_nanosleep", &[1_000, 2_000, 300_000_000]);
        assert!(!render_recording(&recording, None).contains("class=\"slowest\""));
        recording.by = vec!["pid".into()];
        recording.functions[0].slowest = vec![crate::model::SlowCallRecord {
            at_ns: 1_500_000_000,
            duration_ns: 300_000_000,
            off_cpu_ns: Some(299_000_000),
            cpu: 1,
            pid: 42,
            tid: 43,
            comm: "<sleeper>".into(),
            key: vec!["42".into()],
            stack: vec!["do_nanosleep".into(), "hrtimer_nanosleep".into()],
        }];
        let html = render_recording(&recording, None);
        let table = &html[html
            .find("<table class=\"slowest\">")
            .expect("slowest table")..];
        let table = &table[..table.find("</table>").unwrap()];
        assert!(table.contains("&lt;sleeper&gt; 42/43"), "{table}");
        assert!(
            table.contains("do_nanosleep &larr; hrtimer_nanosleep"),
            "{table}"
        );
        assert!(
            table.contains("<th>pid</th>") && table.contains(">42<"),
            "{table}"
        );
        assert_eq!(table.matches("<tr>").count(), 2, "{table}");
    }

    #[test]
    fn keys_get_a_column_per_field_and_escaped_values() {
        let mut recording = recording("vfs_write", &[1_000, 2_000, 3_000, 4_000]);
        let without = render_recording(&recording, None);
        assert!(!without.contains("class=\"keys\""));
        recording.by = vec!["arg2:log2".into(), "comm".into()];
        recording.functions[0].keys = vec![
            key(&["[4096, 8192)", "dd"], 3, 7_500),
            key(&["1", "<script>alert(\"x\")</script>"], 1, 2_500),
        ];
        let html = render_recording(&recording, None);
        assert!(!html.contains("<script>alert"), "{html}");
        let table = keys_table_of(&html);
        assert!(
            table.starts_with("<table class=\"keys\"><tr><th>arg2:log2</th><th>comm</th><th class=\"num\">calls</th><th class=\"num\">p50</th><th class=\"num\">p99</th><th class=\"num\">time share</th></tr>"),
            "{table}"
        );
        assert!(
            table.contains("<tr><td class=\"code\">[4096, 8192)</td><td class=\"code\">dd</td><td class=\"num\">3</td><td class=\"num\">1.50 µs</td><td class=\"num\">40.0 µs</td><td class=\"num\">75.0%</td></tr>"),
            "{table}"
        );
        assert!(
            table.contains("<td class=\"code\">1</td><td class=\"code\">&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;</td><td class=\"num\">1</td>"),
            "{table}"
        );
        assert!(!table.contains("more keys"));
        // The table follows the function's chart (and its call sites), and nothing else changed.
        recording.functions[0].callers = vec![caller("a+0x1", 4, 10_000)];
        let html = render_recording(&recording, None);
        let callers = html.find("<table class=\"callers\">").unwrap();
        let keys = html.find("<table class=\"keys\">").unwrap();
        assert!(html.find("<h3>vfs_write</h3>").unwrap() < callers && callers < keys);
        recording.functions[0].callers.clear();
        let html = render_recording(&recording, None);
        let start = html
            .find("<div class=\"scroll\"><table class=\"keys\">")
            .unwrap();
        let end =
            start + html[start..].find("</table></div>\n").unwrap() + "</table></div>\n".len();
        assert_eq!(format!("{}{}", &html[..start], &html[end..]), without);
    }

    #[test]
    fn keys_beyond_the_cap_are_summed_in_one_row_spanning_the_fields() {
        let mut recording = recording("f", &[1_000; 100]);
        recording.by = vec!["errno".into(), "comm".into()];
        recording.functions[0].keys = (0..23u64)
            .map(|i| key(&["ok", &format!("task{i}")], 4, 4_000))
            .collect();
        let html = render_recording(&recording, None);
        let table = keys_table_of(&html);
        assert_eq!(
            table.matches("<td class=\"code\">task").count(),
            BREAKDOWN_ROWS
        );
        assert!(table.contains(">task19<") && !table.contains(">task20<"));
        assert!(
            table.contains("<tr><td colspan=\"2\">3 more keys</td><td class=\"num\">12</td><td class=\"num\"></td><td class=\"num\"></td><td class=\"num\">12.0%</td></tr>"),
            "{table}"
        );
    }

    #[test]
    fn keys_with_more_values_than_fields_get_extra_columns() {
        let mut recording = recording("f", &[1_000; 4]);
        recording.by = vec!["cpu".into()];
        recording.functions[0].keys = vec![key(&["0", "x"], 2, 2_000), key(&["1"], 2, 2_000)];
        let html = render_recording(&recording, None);
        let table = keys_table_of(&html);
        assert!(table.contains("<th>cpu</th><th>key1</th>"), "{table}");
        assert!(
            table.contains(
                "<td class=\"code\">1</td><td class=\"code\"></td><td class=\"num\">2</td>"
            ),
            "{table}"
        );
    }
}
