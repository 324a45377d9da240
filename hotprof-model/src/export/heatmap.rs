//! Latency heatmaps (Brendan Gregg's): time across, latency up on a log scale, the colour of a
//! cell the number of calls that took that long in that interval. They show what a p99 hides:
//! two modes, a drift, a stall of a few intervals.
//!
//! Drawn from a recording's `--interval` records: a column per interval (the time it really
//! covered), a row per quarter of a power of two ([`crate::model::heat_row`]), one panel per
//! function. The colour scale is logarithmic in calls per cell, so a cell with a thousand times
//! the calls of its neighbours does not wash them out; the legend says so and gives the counts
//! its colours stand for. Each cell's `<title>` (a tooltip in browsers) names its time range,
//! latency range and calls.

use std::fmt::Write as _;

use super::escape::escape;
use crate::model::IntervalRecord;
use crate::units::format_ns;

/// What to draw.
#[derive(Clone, Debug)]
pub struct HeatmapOptions {
    /// The heading above the panels.
    pub title: String,
    /// Width of the whole image in pixels.
    pub width: u32,
    /// An SVG file (with its XML namespace), or `false` for SVG inline in an HTML page,
    /// whose parser gives the namespace (and whose self-containment check allows no URL).
    pub standalone: bool,
}

impl Default for HeatmapOptions {
    fn default() -> Self {
        Self {
            title: "hotprof latency heatmap".into(),
            width: 1000,
            standalone: true,
        }
    }
}

/// Why a recording cannot be drawn as a heatmap.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeatmapError {
    #[error("the recording has no interval records, which are a heatmap's columns")]
    NoIntervals,
    #[error(
        "the recording's interval records have no latency rows (it was written before heatmaps existed)"
    )]
    NoRows,
}

/// Left margin (latency labels), right margin, and the heights of the texts around a panel.
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const HEADING: f64 = 34.0;
const PANEL_TITLE: f64 = 22.0;
const AXIS: f64 = 34.0;
const LEGEND: f64 = 56.0;
/// Tallest a panel's plot gets, and the bounds of one row's height within it.
const PLOT_HEIGHT: f64 = 240.0;
const ROW_HEIGHT: (f64, f64) = (4.0, 14.0);

/// Light yellow (fewest calls) to dark red (most), ColorBrewer's YlOrRd ends.
const COLD: (f64, f64, f64) = (255.0, 237.0, 160.0);
const HOT: (f64, f64, f64) = (189.0, 0.0, 38.0);

/// One function's cells: `(column, row's lower ns, row's upper ns, calls)`.
struct Panel<'a> {
    name: &'a str,
    calls: u64,
    cells: Vec<(usize, u64, u64, u64)>,
    /// Every row from the fastest to the slowest occupied one, ascending, gaps included.
    rows: Vec<(u64, u64)>,
}

/// The heatmap of a recording's interval records (`Recording::intervals`) as an SVG document.
pub fn render(
    intervals: &[IntervalRecord],
    options: &HeatmapOptions,
) -> Result<String, HeatmapError> {
    if intervals.is_empty() {
        return Err(HeatmapError::NoIntervals);
    }
    let panels = panels(intervals);
    if panels.iter().all(|p| p.cells.is_empty()) {
        let any_calls = intervals
            .iter()
            .flat_map(|i| &i.functions)
            .any(|f| f.count > 0);
        // Calls but no rows: a recording from before heatmaps. No calls at all: an empty map.
        if any_calls {
            return Err(HeatmapError::NoRows);
        }
    }
    let max_calls = panels
        .iter()
        .flat_map(|p| &p.cells)
        .map(|c| c.3)
        .max()
        .unwrap_or(0);
    let end_ns = intervals
        .iter()
        .map(|i| i.elapsed_ns)
        .max()
        .unwrap_or(0)
        .max(1);
    let width = f64::from(options.width.max(300));
    let plot_width = width - LEFT - RIGHT;
    let x = |ns: u64| LEFT + ns as f64 / end_ns as f64 * plot_width;

    let mut body = String::new();
    let mut top = HEADING;
    for panel in &panels {
        top = draw_panel(&mut body, panel, intervals, top, &x, end_ns, max_calls);
    }
    let height = top + LEGEND;
    draw_legend(&mut body, max_calls, top);

    let mut svg = String::new();
    let namespace = if options.standalone {
        " xmlns=\"http://www.w3.org/2000/svg\""
    } else {
        ""
    };
    let _ = writeln!(
        svg,
        "<svg{namespace} width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} \
         {height:.0}\" font-family=\"Verdana, sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(svg, "<title>{}</title>", escape(&options.title));
    let _ = writeln!(
        svg,
        "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n\
         <text x=\"{:.1}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{}</text>",
        width / 2.0,
        escape(&options.title)
    );
    svg.push_str(&body);
    svg.push_str("</svg>\n");
    Ok(svg)
}

/// Each function's cells, in the order of the interval records' functions.
fn panels(intervals: &[IntervalRecord]) -> Vec<Panel<'_>> {
    let functions = intervals
        .iter()
        .map(|i| i.functions.len())
        .max()
        .unwrap_or(0);
    (0..functions)
        .map(|f| {
            let mut panel = Panel {
                name: intervals
                    .iter()
                    .find_map(|i| i.functions.get(f))
                    .map_or("", |function| function.name.as_str()),
                calls: 0,
                cells: Vec::new(),
                rows: Vec::new(),
            };
            for (column, interval) in intervals.iter().enumerate() {
                let Some(function) = interval.functions.get(f) else {
                    continue;
                };
                panel.calls = panel.calls.saturating_add(function.count);
                for &[lower, upper, calls] in &function.heat_buckets {
                    if calls > 0 {
                        panel.cells.push((column, lower, upper, calls));
                    }
                }
            }
            let fastest = panel.cells.iter().map(|c| c.1).min();
            let slowest = panel.cells.iter().map(|c| c.1).max();
            if let (Some(fastest), Some(slowest)) = (fastest, slowest) {
                let mut row = crate::model::heat_row(fastest);
                loop {
                    panel.rows.push(row);
                    if row.0 >= slowest || row.1 == u64::MAX {
                        break;
                    }
                    row = crate::model::heat_row(row.1 + 1);
                }
            }
            panel
        })
        .collect()
}

/// Draws one panel from `top`; returns where the next one starts.
fn draw_panel(
    out: &mut String,
    panel: &Panel<'_>,
    intervals: &[IntervalRecord],
    top: f64,
    x: &dyn Fn(u64) -> f64,
    end_ns: u64,
    max_calls: u64,
) -> f64 {
    let _ = writeln!(
        out,
        "<text x=\"{LEFT:.1}\" y=\"{:.1}\" font-size=\"13\" font-weight=\"bold\">{} \
         <tspan font-weight=\"normal\">({} calls in {} intervals)</tspan></text>",
        top + 15.0,
        escape(panel.name),
        panel.calls,
        intervals.len()
    );
    let plot_top = top + PANEL_TITLE;
    let rows = panel.rows.len().max(1);
    let row_height = (PLOT_HEIGHT / rows as f64).clamp(ROW_HEIGHT.0, ROW_HEIGHT.1);
    let plot_height = row_height * rows as f64;
    let plot_bottom = plot_top + plot_height;
    let _ = writeln!(
        out,
        "<rect x=\"{LEFT:.1}\" y=\"{plot_top:.1}\" width=\"{:.1}\" height=\"{plot_height:.1}\" \
         fill=\"#f2f2f2\"/>",
        x(end_ns) - LEFT
    );
    // Row `i` counted from the fastest, drawn from the bottom up.
    let row_top = |i: usize| plot_bottom - (i + 1) as f64 * row_height;
    for &(column, lower, upper, calls) in &panel.cells {
        let Some(i) = panel.rows.iter().position(|r| r.0 == lower) else {
            continue;
        };
        let interval = &intervals[column];
        let start = interval.elapsed_ns.saturating_sub(interval.duration_ns);
        let (x0, x1) = (x(start), x(interval.elapsed_ns));
        let _ = writeln!(
            out,
            "<rect x=\"{x0:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{row_height:.2}\" \
             fill=\"{}\"><title>{}–{} s, {}–{}: {calls} calls</title></rect>",
            row_top(i),
            (x1 - x0).max(0.5),
            colour(calls, max_calls),
            seconds(start),
            seconds(interval.elapsed_ns),
            format_ns(lower as f64),
            format_ns(upper.saturating_add(1) as f64),
        );
    }
    // Latency labels at each power of two, and at the lowest row unless one is close above.
    let first_power = panel.rows.iter().position(|r| r.0.is_power_of_two());
    for (i, &(lower, _)) in panel.rows.iter().enumerate() {
        let lowest_labelled = i == 0 && first_power.is_none_or(|p| p >= 3);
        if lowest_labelled || lower.is_power_of_two() {
            let y = row_top(i) + row_height;
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n\
                 <line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{LEFT:.1}\" y2=\"{y:.1}\" stroke=\"#888\"/>",
                LEFT - 6.0,
                y + 4.0,
                format_ns(lower as f64),
                LEFT - 4.0,
            );
        }
    }
    if panel.rows.is_empty() {
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#666\">no calls</text>",
            (LEFT + x(end_ns)) / 2.0,
            plot_top + plot_height / 2.0 + 4.0
        );
    }
    // Time axis.
    let step = tick_step(end_ns);
    let mut tick = 0;
    while tick <= end_ns {
        let tx = x(tick);
        let _ = writeln!(
            out,
            "<line x1=\"{tx:.1}\" y1=\"{plot_bottom:.1}\" x2=\"{tx:.1}\" y2=\"{:.1}\" stroke=\"#888\"/>\n\
             <text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{} s</text>",
            plot_bottom + 4.0,
            plot_bottom + 16.0,
            seconds(tick)
        );
        tick += step;
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#444\">time since the start</text>",
        (LEFT + x(end_ns)) / 2.0,
        plot_bottom + 29.0
    );
    plot_bottom + AXIS
}

/// The legend: what the colours count, the scale, and the counts five swatches stand for.
fn draw_legend(out: &mut String, max_calls: u64, top: f64) {
    let _ = writeln!(
        out,
        "<text x=\"{LEFT:.1}\" y=\"{:.1}\">colour: calls per cell (one interval × a quarter of a \
         power of two of latency), log scale; grey: none</text>",
        top + 14.0
    );
    // The counts whose colours are at fifths of the scale (the inverse of `colour`), each once.
    let mut swatches: Vec<u64> = (0..=5u32)
        .map(|step| {
            let fraction = f64::from(step) / 5.0;
            let calls = ((max_calls as f64 + 1.0).powf(fraction) - 1.0)
                .round()
                .max(1.0) as u64;
            calls.min(max_calls.max(1))
        })
        .collect();
    swatches.dedup();
    for (step, &calls) in swatches.iter().enumerate() {
        let left = LEFT + step as f64 * 90.0;
        let _ = writeln!(
            out,
            "<rect x=\"{left:.1}\" y=\"{:.1}\" width=\"24\" height=\"14\" fill=\"{}\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\">{calls}</text>",
            top + 24.0,
            colour(calls, max_calls),
            left + 28.0,
            top + 35.0
        );
    }
}

/// The fill of a cell of `calls` calls where the busiest cell has `max_calls`:
/// `ln(1 + calls) / ln(1 + max_calls)` of the way from [`COLD`] to [`HOT`].
fn colour(calls: u64, max_calls: u64) -> String {
    let fraction = if max_calls <= 1 {
        1.0
    } else {
        ((calls as f64).ln_1p() / (max_calls as f64).ln_1p()).clamp(0.0, 1.0)
    };
    let mix = |a: f64, b: f64| (a + (b - a) * fraction).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(COLD.0, HOT.0),
        mix(COLD.1, HOT.1),
        mix(COLD.2, HOT.2)
    )
}

/// Nanoseconds as seconds with at most three decimals (`1_250_000_000` → `1.25`).
fn seconds(ns: u64) -> String {
    let text = format!("{:.3}", ns as f64 / 1e9);
    let text = text.trim_end_matches('0');
    text.trim_end_matches('.').to_string()
}

/// A time-axis step of 1, 2 or 5 × 10^k ns giving at most ten ticks over `end_ns`.
fn tick_step(end_ns: u64) -> u64 {
    let mut step = 1_000_000u64; // 1 ms
    loop {
        for factor in [1, 2, 5] {
            if end_ns / (step * factor) <= 10 {
                return step * factor;
            }
        }
        step *= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{IntervalFunction, IntervalRecord};

    fn interval(index: u64, rows: Vec<[u64; 3]>) -> IntervalRecord {
        IntervalRecord {
            index,
            elapsed_ns: index * 100_000_000,
            duration_ns: 100_000_000,
            functions: vec![IntervalFunction {
                name: "vfs_read".into(),
                count: rows.iter().map(|r| r[2]).sum(),
                heat_buckets: rows,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_cell_per_occupied_row_and_interval_with_its_calls() {
        let intervals = [
            interval(1, vec![[256, 319, 1000], [4096, 5119, 3]]),
            interval(2, vec![[256, 319, 10]]),
        ];
        let svg = render(&intervals, &HeatmapOptions::default()).unwrap();
        assert_eq!(svg.matches("calls</title></rect>").count(), 3);
        assert!(svg.contains("0.1–0.2 s, 256 ns–320 ns: 10 calls"), "{svg}");
        assert!(svg.contains("0–0.1 s, 4.10 µs–5.12 µs: 3 calls"), "{svg}");
        assert!(svg.contains("vfs_read <tspan font-weight=\"normal\">(1013 calls in 2 intervals)"));
        // The busiest cell is the hottest colour, the legend's last swatch the busiest count.
        assert!(svg.contains(&format!(
            "fill=\"{}\"><title>0–0.1 s, 256",
            colour(1000, 1000)
        )));
        assert!(svg.contains(">1000</text>"));
    }

    #[test]
    fn the_log_scale_keeps_small_cells_visible() {
        // One call beside a million is still a third of the way up the scale, not white.
        assert_eq!(colour(1_000_000, 1_000_000), "#bd0026");
        assert_ne!(colour(1, 1_000_000), colour(0, 1_000_000));
        assert_eq!(colour(0, 1_000_000), "#ffeda0");
    }

    #[test]
    fn recordings_without_rows_say_why() {
        assert_eq!(
            render(&[], &HeatmapOptions::default()),
            Err(HeatmapError::NoIntervals)
        );
        let mut old = interval(1, vec![]);
        old.functions[0].count = 5;
        assert_eq!(
            render(&[old], &HeatmapOptions::default()),
            Err(HeatmapError::NoRows)
        );
    }

    #[test]
    fn ticks_are_few_and_round() {
        assert_eq!(tick_step(1_000_000_000), 100_000_000);
        assert_eq!(tick_step(3_000_000_000), 500_000_000);
        assert_eq!(tick_step(60_000_000_000), 10_000_000_000);
        assert_eq!(seconds(1_250_000_000), "1.25");
        assert_eq!(seconds(0), "0");
    }
}
