//! The text table: the robot's `base ± stddev%   %change   new ± stddev%   metric` layout,
//! with the verdict in place of the bare metric name.

use super::row::{Row, Unit, format_p};
use super::{Comparison, FunctionComparison, SideInfo};
use crate::units::format_ns;

/// Renders the comparison as aligned text, one section per function, then workload metrics.
pub fn render_table(comparison: &Comparison) -> String {
    let mut lines = vec![
        title(comparison),
        rule_line(comparison),
        MANN_WHITNEY_LEGEND.into(),
    ];
    let prefixed = |prefix: &str, texts: &[String]| {
        texts
            .iter()
            .map(|t| format!("{prefix}: {t}"))
            .collect::<Vec<_>>()
    };
    let messages = [
        prefixed("warning", &comparison.warnings),
        prefixed("note", &comparison.notes),
    ]
    .concat();
    if !messages.is_empty() {
        lines.push(String::new());
        lines.extend(messages);
    }
    let mut table = Table::default();
    for function in &comparison.functions {
        table.section(function_heading(function));
        function.rows.iter().for_each(|row| table.row(row));
        for caller in &function.callers {
            table.section(format!("  at {}", caller.site));
            caller.rows.iter().for_each(|row| table.row(row));
        }
        if !function.keys.is_empty() {
            table.section(format!("  by {}", comparison.by.join(", ")));
        }
        for key in &function.keys {
            table.section(format!("    {}", key.label()));
            key.rows.iter().for_each(|row| table.row(row));
        }
    }
    if !comparison.workload.is_empty() {
        table.section("workload".into());
        comparison.workload.iter().for_each(|row| table.row(row));
    }
    lines.push(String::new());
    lines.extend(table.render());
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

fn title(comparison: &Comparison) -> String {
    let side = |info: &SideInfo| {
        let files = if info.files == 1 {
            "1 file".to_string()
        } else {
            format!("{} files", info.files)
        };
        format!(
            "{} run(s) ({files}; {}; {})",
            info.runs,
            info.kernels.join(", "),
            info.modes.join(", ")
        )
    };
    format!(
        "hotprof compare: base {}  vs  new {}",
        side(&comparison.base),
        side(&comparison.new)
    )
}

fn rule_line(comparison: &Comparison) -> String {
    format!(
        "significant = Holm-adjusted p < {} over {} tests, run ranges apart, change beyond histogram resolution",
        comparison.alpha, comparison.tests
    )
}

const MANN_WHITNEY_LEGEND: &str = "calls: Mann–Whitney on all calls pooled, as if independent: \
                                    context for the rows, never a verdict";

fn function_heading(function: &FunctionComparison) -> String {
    let symbol = match (&function.base_symbol, &function.new_symbol) {
        (b, n) if b != n => format!(" [{b} → {n}]"),
        (b, _) if *b != function.name => format!(" [{b}]"),
        _ => String::new(),
    };
    let distribution = function.calls_distribution.map(|mw| {
        format!(
            "   calls: P(new slower) = {:.2}, Mann–Whitney {}",
            mw.prob_new_slower,
            format_p(mw.p)
        )
    });
    format!(
        "{}{symbol}{}",
        function.name,
        distribution.unwrap_or_default()
    )
}

/// A value in its unit: auto-scaled ns/µs/ms/s for latencies, plain numbers otherwise.
pub(super) fn format_value(value: f64, unit: Unit) -> String {
    match unit {
        Unit::Ns => format_ns(value),
        Unit::Calls | Unit::Number => format_number(value),
    }
}

/// Like the robot: whole numbers from 100 up, scientific from a million.
fn format_number(value: f64) -> String {
    match value.abs() {
        0.0 => "0".into(),
        v if v >= 1e6 => format!("{value:.3e}"),
        v if v >= 100.0 => format!("{value:.0}"),
        v if v >= 1.0 => format!("{value:.2}"),
        _ => format!("{value:.3}"),
    }
}

fn format_stddev(pct: Option<f64>) -> String {
    match pct {
        Some(pct) if pct < 10.0 => format!("± {pct:.1}%"),
        Some(pct) => format!("± {pct:.0}%"),
        None => String::new(),
    }
}

/// Numeric columns right-aligned to their widest cell; headings and the verdict left as is.
#[derive(Default)]
struct Table {
    lines: Vec<Line>,
}

enum Line {
    Section(String),
    Cells([String; 6]),
}

const HEADER: [&str; 6] = [
    "base",
    "±stddev",
    "%change",
    "new",
    "±stddev",
    "metric / verdict",
];

impl Table {
    fn section(&mut self, heading: String) {
        self.lines.push(Line::Section(heading));
    }

    fn row(&mut self, row: &Row) {
        let present = |stats: &super::SideStats| stats.runs > 0;
        let value = |stats: &super::SideStats| {
            if present(stats) {
                format_value(stats.mean, row.unit)
            } else {
                "-".into()
            }
        };
        self.lines.push(Line::Cells([
            value(&row.base),
            format_stddev(row.base.stddev_pct),
            row.change_pct
                .map(|pct| format!("{pct:+.1}%"))
                .unwrap_or_default(),
            value(&row.new),
            format_stddev(row.new.stddev_pct),
            row.verdict_text.clone(),
        ]));
    }

    fn render(&self) -> Vec<String> {
        let mut widths = HEADER.map(|h| h.chars().count());
        for line in &self.lines {
            if let Line::Cells(cells) = line {
                for (width, cell) in widths.iter_mut().zip(cells) {
                    *width = (*width).max(cell.chars().count());
                }
            }
        }
        let format_cells = |cells: [&str; 6]| {
            let numeric: Vec<String> = cells[..5]
                .iter()
                .zip(&widths)
                .map(|(cell, &width)| format!("{cell:>width$}"))
                .collect();
            format!("  {}   {}", numeric.join("  "), cells[5])
                .trim_end()
                .to_string()
        };
        let mut out = vec![format_cells(HEADER)];
        for line in &self.lines {
            out.push(match line {
                Line::Section(heading) => heading.clone(),
                Line::Cells(cells) => format_cells(cells.each_ref().map(String::as_str)),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_formatted_like_the_robot() {
        assert_eq!(format_number(1.573e9), "1.573e9");
        assert_eq!(format_number(20_000.0), "20000");
        assert_eq!(format_number(2.329), "2.33");
        assert_eq!(format_number(0.0123), "0.012");
        assert_eq!(format_stddev(Some(0.48)), "± 0.5%");
        assert_eq!(format_stddev(Some(41.2)), "± 41%");
        assert_eq!(format_value(203.0, Unit::Ns), "203 ns");
    }
}
