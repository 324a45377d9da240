//! The page comparing two recordings ([`render_comparison`]): both runs' metadata side by
//! side, the change per function, and each function's two distributions on one chart.

use std::fmt::Write as _;

use super::{
    BASE_COLOR, NEW_COLOR, losses_table, meta_rows, ns, page, stat_cells, stat_header_cells,
};
use crate::export::chart::{self, Series};
use crate::export::escape::escape;
use crate::model::{FunctionRecord, Recording};
use crate::units::format_ns;

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
    use crate::export::html::tests::recording;

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
}
