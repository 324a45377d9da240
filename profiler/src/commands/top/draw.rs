//! Drawing `hotprof top`'s screen with ratatui: the header (what is attached, the workload,
//! hotprof's own cost), the table or one row's histogram, and the keys.

use std::time::Duration;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Text};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row as TableRow, Table as TableWidget};

use super::cost::OwnCost;
use super::table::{self, Row, Table, View};
use crate::units::format_ns;

/// What the header says besides the table.
pub struct Header<'a> {
    /// `2 syscall(s) attached (syscall mode): getpid, read`.
    pub attached: &'a str,
    /// `running: CMD`, `CMD exited with code 0`, with its last line; `None` without one.
    pub workload: Option<String>,
    pub uptime: Duration,
    pub period: Duration,
    pub cost: &'a OwnCost,
    /// The newest note about the run (a probed module unloaded, a module a glob matches
    /// loaded), kept on screen until another replaces it.
    pub note: Option<&'a str>,
}

/// The whole screen.
pub fn screen(frame: &mut Frame, header: &Header, table: &Table) {
    let header_height = if header.note.is_some() { 4 } else { 3 };
    let [top, middle, bottom] = Layout::vertical([
        Constraint::Length(header_height),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(header_lines(header, table)), top);
    match table.opened() {
        Some(row) => histogram(frame, middle, row),
        None => rows(frame, middle, table, header.period),
    }
    frame.render_widget(Paragraph::new(footer(table)), bottom);
}

fn header_lines<'a>(header: &'a Header, table: &Table) -> Text<'a> {
    let mut first = format!(
        "hotprof top: {}  up {}  refresh {}",
        header.attached,
        seconds(header.uptime),
        seconds(header.period)
    );
    if table.paused {
        first.push_str("  [PAUSED]");
    }
    let mut lines = vec![
        Line::from(first).style(Style::new().add_modifier(Modifier::BOLD)),
        Line::from(header.workload.clone().unwrap_or_default()),
        Line::from(header.cost.describe()),
    ];
    if let Some(note) = header.note {
        lines.push(Line::from(format!("note: {note}")));
    }
    Text::from(lines)
}

fn seconds(duration: Duration) -> String {
    let s = duration.as_secs_f64();
    if s < 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

fn rows(frame: &mut Frame, area: Rect, table: &Table, period: Duration) {
    let last = format!("last {}", seconds(period));
    let titles = [
        ("", "NAME"),
        (last.as_str(), "CALLS/S"),
        ("", "P50"),
        ("", "P99"),
        ("", "MAX"),
        ("since start", "CALLS"),
        ("", "P50"),
        ("", "P99"),
        ("", "MAX"),
        ("", "TIME"),
        ("p99, last refreshes", "TREND"),
    ];
    let head =
        TableRow::new(titles.iter().map(|(group, name)| {
            Cell::from(Text::from(vec![Line::from(*group), Line::from(*name)]))
        }))
        .height(2)
        .style(Style::new().add_modifier(Modifier::BOLD));
    let visible = table.visible();
    let body = visible.iter().enumerate().map(|(index, row)| {
        let line = TableRow::new(cells(row));
        if index == table.selected {
            line.style(Style::new().add_modifier(Modifier::REVERSED))
        } else {
            line
        }
    });
    let widths = [
        Constraint::Min(16),
        Constraint::Length(10),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(12),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(table::HISTORY as u16),
    ];
    let title = format!(
        " {} of {} rows, sorted by {} ",
        visible.len(),
        table.total_rows(),
        table.sort.describe()
    );
    frame.render_widget(
        TableWidget::new(body, widths)
            .header(head)
            .block(Block::new().borders(Borders::TOP).title(title)),
        area,
    );
}

fn cells(row: &Row) -> Vec<Cell<'static>> {
    let latency = |ns: u64, calls: u64| {
        if calls == 0 {
            "-".to_string()
        } else {
            format_ns(ns as f64)
        }
    };
    vec![
        Cell::from(row.name.clone()),
        Cell::from(format!("{:.0}", row.calls_per_s)),
        Cell::from(latency(row.last.p50_ns, row.last.calls)),
        Cell::from(latency(row.last.p99_ns, row.last.calls)),
        Cell::from(latency(row.last.max_ns, row.last.calls)),
        Cell::from(row.total.calls.to_string()),
        Cell::from(latency(row.total.p50_ns, row.total.calls)),
        Cell::from(latency(row.total.p99_ns, row.total.calls)),
        Cell::from(latency(row.total.max_ns, row.total.calls)),
        Cell::from(format_ns(row.total.sum_ns as f64)),
        Cell::from(table::sparkline(row.p99_history.iter().copied())),
    ]
}

fn histogram(frame: &mut Frame, area: Rect, row: &Row) {
    let ranges = table::power_of_two_ranges(&row.buckets);
    let most = ranges.iter().map(|r| r.2).max().unwrap_or(0).max(1);
    let calls: u64 = ranges.iter().map(|r| r.2).sum();
    let width = area.width.saturating_sub(50) as u64;
    let lines: Vec<Line> = ranges
        .iter()
        .map(|&(lower, upper, count)| {
            let bar = "█".repeat((count * width).div_ceil(most) as usize);
            Line::from(format!(
                "[{:>9}, {:>9})  {count:>12}  {:>5.1} %  {bar}",
                format_ns(lower as f64),
                format_ns(upper as f64),
                100.0 * count as f64 / calls.max(1) as f64
            ))
        })
        .collect();
    let title = format!(
        " {}: latency since start, {calls} calls (Esc to go back) ",
        row.name
    );
    frame.render_widget(
        Paragraph::new(lines).block(Block::new().borders(Borders::TOP).title(title)),
        area,
    );
}

fn footer(table: &Table) -> Line<'static> {
    match table.view {
        View::EditingFilter => Line::from(format!(
            "filter: {}_   (Enter keeps it, Esc clears it)",
            table.filter
        )),
        _ => {
            let filter = if table.filter.is_empty() {
                String::new()
            } else {
                format!("   filter: {}", table.filter)
            };
            Line::from(format!(
                "q quit  ↑↓ select  Enter histogram  / filter  space pause  sort: t time, c calls/s, 9 p99, m max, n name, s next{filter}"
            ))
            .style(Style::new().add_modifier(Modifier::DIM))
        }
    }
}
