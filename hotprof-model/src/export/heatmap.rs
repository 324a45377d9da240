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
    /// The recording's `--by` fields (`Recording::by`), naming each key value's panel.
    pub key_names: Vec<String>,
    /// An SVG file (with its XML namespace), or `false` for SVG inline in an HTML page,
    /// whose parser gives the namespace (and whose self-containment check allows no URL).
    pub standalone: bool,
}

impl Default for HeatmapOptions {
    fn default() -> Self {
        Self {
            title: "hotprof latency heatmap".into(),
            width: 1000,
            key_names: Vec::new(),
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

/// The narrowest a column is drawn, in pixels.
const MIN_COLUMN_WIDTH: f64 = 3.0;

/// The intervals as columns: `group` neighbours each.
#[derive(Clone, Copy)]
struct Columns<'a> {
    intervals: &'a [IntervalRecord],
    group: usize,
}

impl Columns<'_> {
    /// The time column `column` covers, in ns from the start.
    fn span(self, column: usize) -> (u64, u64) {
        let first = &self.intervals[(column * self.group).min(self.intervals.len() - 1)];
        let last = &self.intervals[((column + 1) * self.group).min(self.intervals.len()) - 1];
        (
            first.elapsed_ns.saturating_sub(first.duration_ns),
            last.elapsed_ns,
        )
    }
}

/// Light yellow (fewest calls) to dark red (most), ColorBrewer's YlOrRd ends.
const COLD: (f64, f64, f64) = (255.0, 237.0, 160.0);
const HOT: (f64, f64, f64) = (189.0, 0.0, 38.0);

/// Key values drawn in panels of their own per function (`--by`); the rest share one.
const KEY_PANELS: usize = 8;

/// One panel: a function, or one of its `--by` key values (or the rest of them).
struct Panel {
    name: String,
    calls: u64,
    /// `(column, row's lower ns, row's upper ns, calls)`, one per occupied cell.
    cells: Vec<(usize, u64, u64, u64)>,
    /// Every row from the fastest to the slowest occupied one, ascending, gaps included.
    rows: Vec<(u64, u64)>,
}

impl Panel {
    /// A panel of the calls and rows `rows_of` picks from each interval, its columns the
    /// intervals grouped `group` at a time.
    fn new(
        name: String,
        intervals: &[IntervalRecord],
        group: usize,
        rows_of: impl Fn(&IntervalRecord) -> (u64, Vec<[u64; 3]>),
    ) -> Self {
        let mut calls = 0u64;
        // Grouped intervals merge per cell.
        let mut cells = std::collections::BTreeMap::<(u64, usize), (u64, u64)>::new();
        for (i, interval) in intervals.iter().enumerate() {
            let (count, rows) = rows_of(interval);
            calls = calls.saturating_add(count);
            for &[lower, upper, n] in rows.iter().filter(|r| r[2] > 0) {
                let cell = cells.entry((lower, i / group)).or_insert((upper, 0));
                cell.1 = cell.1.saturating_add(n);
            }
        }
        let mut rows = Vec::new();
        let fastest = cells.keys().next().map(|k| k.0);
        let slowest = cells.keys().next_back().map(|k| k.0);
        if let (Some(fastest), Some(slowest)) = (fastest, slowest) {
            let mut row = crate::model::heat_row(fastest);
            loop {
                rows.push(row);
                if row.0 >= slowest || row.1 == u64::MAX {
                    break;
                }
                row = crate::model::heat_row(row.1 + 1);
            }
        }
        let cells = cells
            .into_iter()
            .map(|((lower, column), (upper, n))| (column, lower, upper, n))
            .collect();
        Panel {
            name,
            calls,
            cells,
            rows,
        }
    }
}

/// The heatmap of a recording's interval records (`Recording::intervals`) as an SVG document.
pub fn render(
    intervals: &[IntervalRecord],
    options: &HeatmapOptions,
) -> Result<String, HeatmapError> {
    if intervals.is_empty() {
        return Err(HeatmapError::NoIntervals);
    }
    let width = f64::from(options.width.max(300));
    let plot_width = width - LEFT - RIGHT;
    // A column narrower than a few pixels would only overlap its neighbours (an hour of
    // 100 ms snapshots is 36,000 of them): neighbouring intervals share a column instead.
    let columns = (plot_width / MIN_COLUMN_WIDTH) as usize;
    let group = intervals.len().div_ceil(columns.max(1)).max(1);
    let panels = panels(intervals, &options.key_names, group);
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
    let x = |ns: u64| LEFT + ns as f64 / end_ns as f64 * plot_width;

    let mut body = String::new();
    let mut top = HEADING;
    let columns = Columns { intervals, group };
    for panel in &panels {
        top = draw_panel(&mut body, panel, columns, top, &x, end_ns, max_calls);
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

/// The panels, in the order of the interval records' functions: one per function, or with
/// `--by` one per key value among its [`KEY_PANELS`] busiest over the run, then one for the
/// rest: the function's calls that no such panel holds (other values, values an interval
/// record did not keep, calls the kernel could not key), so every call is drawn once.
fn panels(intervals: &[IntervalRecord], key_names: &[String], group: usize) -> Vec<Panel> {
    let functions = intervals
        .iter()
        .map(|i| i.functions.len())
        .max()
        .unwrap_or(0);
    let mut panels = Vec::new();
    for f in 0..functions {
        let function_of = |interval: &IntervalRecord| -> (u64, Vec<[u64; 3]>) {
            interval
                .functions
                .get(f)
                .map_or((0, Vec::new()), |function| {
                    (function.count, function.heat_buckets.clone())
                })
        };
        let name = intervals
            .iter()
            .find_map(|i| i.functions.get(f))
            .map_or(String::new(), |function| function.name.clone());
        let mut totals = std::collections::BTreeMap::<&[String], u64>::new();
        for function in intervals.iter().filter_map(|i| i.functions.get(f)) {
            for key in &function.keys {
                *totals.entry(&key.key).or_default() += key.count;
            }
        }
        if totals.is_empty() {
            panels.push(Panel::new(name, intervals, group, function_of));
            continue;
        }
        let mut ranked: Vec<(&[String], u64)> = totals.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let shown: Vec<&[String]> = ranked.iter().take(KEY_PANELS).map(|k| k.0).collect();
        for key in &shown {
            let label = key_label(key, key_names);
            panels.push(Panel::new(
                format!("{name}, {label}"),
                intervals,
                group,
                |interval| key_rows(interval, f, key),
            ));
        }
        let rest = Panel::new(
            format!("{name}, other key values"),
            intervals,
            group,
            |interval| {
                let (mut count, rows) = function_of(interval);
                let mut rest: std::collections::BTreeMap<u64, [u64; 3]> =
                    rows.into_iter().map(|row| (row[0], row)).collect();
                for key in &shown {
                    let (calls, rows) = key_rows(interval, f, key);
                    count = count.saturating_sub(calls);
                    for [lower, _, n] in rows {
                        if let Some(row) = rest.get_mut(&lower) {
                            row[2] = row[2].saturating_sub(n);
                        }
                    }
                }
                (count, rest.into_values().collect())
            },
        );
        if rest.calls > 0 {
            panels.push(rest);
        }
    }
    panels
}

/// The calls and rows of function `f`'s key value `key` in `interval` (none where the
/// interval's record did not keep it).
fn key_rows(interval: &IntervalRecord, f: usize, key: &[String]) -> (u64, Vec<[u64; 3]>) {
    interval
        .functions
        .get(f)
        .and_then(|function| function.keys.iter().find(|k| k.key == key))
        .map_or((0, Vec::new()), |k| (k.count, k.heat_buckets.clone()))
}

/// `comm=dd errno=ok`: each field's name (`key<i>` where the recording names none) and value.
fn key_label(key: &[String], key_names: &[String]) -> String {
    key.iter()
        .enumerate()
        .map(|(i, value)| match key_names.get(i) {
            Some(name) => format!("{name}={value}"),
            None => format!("key{i}={value}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Draws one panel from `top`; returns where the next one starts.
fn draw_panel(
    out: &mut String,
    panel: &Panel,
    columns: Columns<'_>,
    top: f64,
    x: &dyn Fn(u64) -> f64,
    end_ns: u64,
    max_calls: u64,
) -> f64 {
    let _ = writeln!(
        out,
        "<text x=\"{LEFT:.1}\" y=\"{:.1}\" font-size=\"13\" font-weight=\"bold\">{} \
         <tspan font-weight=\"normal\">({} calls in {} intervals{})</tspan></text>",
        top + 15.0,
        escape(&panel.name),
        panel.calls,
        columns.intervals.len(),
        if columns.group > 1 {
            format!(", {} a column", columns.group)
        } else {
            String::new()
        }
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
        let (start, end) = columns.span(column);
        let (x0, x1) = (x(start), x(end));
        let _ = writeln!(
            out,
            "<rect x=\"{x0:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{row_height:.2}\" \
             fill=\"{}\"><title>{}–{} s, {}–{}: {calls} calls</title></rect>",
            row_top(i),
            (x1 - x0).max(0.5),
            colour(calls, max_calls),
            seconds(start),
            seconds(end),
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
    for tick in (0..=end_ns / step).map(|i| i * step) {
        let tx = x(tick);
        let _ = writeln!(
            out,
            "<line x1=\"{tx:.1}\" y1=\"{plot_bottom:.1}\" x2=\"{tx:.1}\" y2=\"{:.1}\" stroke=\"#888\"/>\n\
             <text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{} s</text>",
            plot_bottom + 4.0,
            plot_bottom + 16.0,
            seconds(tick)
        );
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
         power of two of latency), log scale, one scale for every panel; grey: none</text>",
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
            match step.checked_mul(factor) {
                Some(candidate) if end_ns / candidate <= 10 => return candidate,
                Some(_) => {}
                None => return step,
            }
        }
        step = step.saturating_mul(10);
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
    fn key_values_get_panels_of_their_own_and_the_rest_one() {
        let keyed = |index: u64, keys: Vec<(&str, u64)>| {
            let mut record = interval(index, vec![]);
            let function = &mut record.functions[0];
            function.keys = keys
                .into_iter()
                .map(|(value, count)| crate::model::IntervalKey {
                    key: vec![value.to_string()],
                    count,
                    heat_buckets: vec![[256, 319, count]],
                })
                .collect();
            function.count = function.keys.iter().map(|k| k.count).sum();
            function.heat_buckets = vec![[256, 319, function.count]];
            record
        };
        let busy: Vec<(String, u64)> = (0..10).map(|i| (format!("t{i}"), 100 - i)).collect();
        let mut first = keyed(1, busy.iter().map(|(k, n)| (k.as_str(), *n)).collect());
        // 3 calls the record keeps under no key (values beyond its 20, or never keyed).
        first.functions[0].count += 3;
        first.functions[0].heat_buckets[0][2] += 3;
        let second = keyed(2, vec![("t9", 50), ("t0", 1)]);
        let options = HeatmapOptions {
            key_names: vec!["comm".into()],
            ..HeatmapOptions::default()
        };
        let svg = render(&[first, second], &options).unwrap();
        // t9 has 91 + 50 calls over the run: among the eight busiest, before t0 (100 + 1).
        assert!(svg.contains("vfs_read, comm=t9 <tspan font-weight=\"normal\">(141 calls"));
        assert!(svg.contains("vfs_read, comm=t0 <tspan font-weight=\"normal\">(101 calls"));
        // t7 and t8 (93 + 92 calls) and the 3 unkeyed calls share the last panel.
        assert!(
            svg.contains("vfs_read, other key values <tspan font-weight=\"normal\">(188 calls"),
            "{svg}"
        );
        assert_eq!(svg.matches("font-weight=\"bold\"").count(), 9);
    }

    #[test]
    fn the_log_scale_keeps_small_cells_visible() {
        // Ten calls beside a million are a sixth of the way up the scale (ln 11 / ln 1e6),
        // where a linear scale would leave them at 0.001 %: white.
        assert_eq!(colour(1_000_000, 1_000_000), "#bd0026");
        assert_eq!(colour(0, 1_000_000), "#ffeda0");
        assert_eq!(colour(10, 1_000_000), "#f4c48b");
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
    fn many_intervals_share_columns_and_keep_every_call() {
        // An hour of 100 ms columns: 36,000 intervals, drawn in at most 296 columns.
        let intervals: Vec<IntervalRecord> = (1..=36_000)
            .map(|i| interval(i, vec![[256, 319, 1 + i % 3]]))
            .collect();
        let svg = render(&intervals, &HeatmapOptions::default()).unwrap();
        let cells = svg.matches("calls</title></rect>").count();
        assert!(cells <= 296, "{cells} cells");
        assert!(svg.contains("in 36000 intervals, 122 a column)"));
        let drawn: u64 = svg
            .split(" calls</title>")
            .filter_map(|before| before.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        assert_eq!(
            drawn,
            intervals.iter().map(|i| i.functions[0].count).sum::<u64>()
        );
        // A corrupt end time far in the future neither hangs nor overflows the axis.
        let mut odd = interval(1, vec![[256, 319, 1]]);
        odd.elapsed_ns = u64::MAX;
        assert!(render(&[odd], &HeatmapOptions::default()).is_ok());
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
