//! Latency distributions as inline SVG on a logarithmic time axis, for the HTML report.
//!
//! The raw log-linear buckets (32 per power of two) are regrouped into display bins of an
//! eighth of a power of two (four raw buckets each, so regrouping is exact; below 64 ns, where
//! raw buckets are single nanoseconds, one bin per power of two). On a log axis those bins
//! are not all equally wide, so a bar's height is the share of calls *per eighth of a power
//! of two*: the bar's area, not its height, is its share of calls, and two recordings with
//! different call counts are directly comparable.

use std::fmt::Write as _;

use super::escape::escape;

/// A display bin: calls with latency in `[lo, hi)` ns (real-valued edges).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bin {
    pub lo: f64,
    pub hi: f64,
    pub count: u64,
}

/// Regroups raw `[lower_ns, upper_ns, count]` buckets into display bins, ascending. A 0 ns
/// call (possible only in theory) is drawn in the `[1, 2)` bin: a log axis has no zero.
pub fn display_bins(buckets: &[[u64; 3]]) -> Vec<Bin> {
    let mut bins: std::collections::BTreeMap<u64, Bin> = std::collections::BTreeMap::new();
    for &[lower, _, count] in buckets {
        if count == 0 {
            continue;
        }
        let v = lower.max(1);
        let msb = 63 - v.leading_zeros();
        let (lo, width) = if v < 64 {
            (1u64 << msb, 1u64 << msb)
        } else {
            let eighth = 1u64 << (msb - 3);
            ((v >> (msb - 3)) << (msb - 3), eighth)
        };
        let bin = bins.entry(lo).or_insert(Bin {
            lo: lo as f64,
            hi: lo as f64 + width as f64,
            count: 0,
        });
        // Counts come from recordings on disk: a corrupt one must not overflow.
        bin.count = bin.count.saturating_add(count);
    }
    bins.into_values().collect()
}

/// Share of all calls per eighth of a power of two in `bin`, given `total` calls.
pub fn density(bin: &Bin, total: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    let eighths = (bin.hi / bin.lo).log2() * 8.0;
    bin.count as f64 / total as f64 / eighths
}

/// One distribution to draw.
pub struct Series<'a> {
    pub label: &'a str,
    pub color: &'a str,
    pub buckets: &'a [[u64; 3]],
    /// Vertical dashed lines with a short label, e.g. `("p50", 1234)` (ns).
    pub markers: Vec<(&'a str, u64)>,
}

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 40.0;
/// Room above the plot for the legend.
const TOP: f64 = 34.0;
const BOTTOM: f64 = 44.0;

/// The x-axis range in ns: the 1-2-5 steps just outside the data, at least one step wide.
fn x_range(bins: &[Bin]) -> (f64, f64) {
    let lo = bins.iter().map(|b| b.lo).fold(f64::INFINITY, f64::min);
    let hi = bins.iter().map(|b| b.hi).fold(0.0, f64::max);
    let steps = |decade: f64| [decade, 2.0 * decade, 5.0 * decade];
    let floor = {
        let decade = 10f64.powf(lo.log10().floor());
        steps(decade)
            .into_iter()
            .rev()
            .find(|s| *s <= lo * (1.0 + 1e-9))
            .unwrap_or(decade)
    };
    let ceil = {
        let decade = 10f64.powf(hi.log10().floor());
        steps(decade)
            .into_iter()
            .chain([10.0 * decade])
            .find(|s| *s >= hi * (1.0 - 1e-9))
            .unwrap_or(10.0 * decade)
    };
    (floor, if ceil > floor { ceil } else { floor * 2.0 })
}

/// Short tick label for a round number of nanoseconds: `500 ns`, `2 µs`, `10 ms`, `1 s`.
pub fn tick_label(ns: f64) -> String {
    let (value, unit) = crate::units::scale_ns(ns);
    let value = (value * 1000.0).round() / 1000.0;
    format!("{value} {unit}")
}

/// A "nice" axis maximum (1, 2, 2.5 or 5 × 10^k) at or above `max`.
fn nice_max(max: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let decade = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * decade)
        .find(|v| *v >= max * (1.0 - 1e-9))
        .unwrap_or(10.0 * decade)
}

/// Renders the series overlaid on one chart (log-scaled x axis, share of calls on y) as an
/// `<svg>` element with a legend. `title` is the accessible name.
pub fn histogram_svg(title: &str, series: &[Series<'_>]) -> String {
    let binned: Vec<(Vec<Bin>, u64)> = series
        .iter()
        .map(|s| {
            let bins = display_bins(s.buckets);
            let total = bins.iter().fold(0u64, |sum, b| sum.saturating_add(b.count));
            (bins, total)
        })
        .collect();
    let all: Vec<Bin> = binned
        .iter()
        .flat_map(|(bins, _)| bins.iter().copied())
        .collect();
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{0}"><title>{0}</title>"#,
        escape(title)
    );
    if all.is_empty() {
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle" class="empty">no timed calls</text></svg>"#,
            WIDTH / 2.0,
            HEIGHT / 2.0
        );
        return svg;
    }
    let (x_lo, x_hi) = x_range(&all);
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |ns: f64| {
        LEFT + (ns.max(x_lo).log10() - x_lo.log10()) / (x_hi.log10() - x_lo.log10()) * plot_w
    };
    let y_max = nice_max(
        binned
            .iter()
            .flat_map(|(bins, total)| bins.iter().map(move |b| density(b, *total)))
            .fold(0.0, f64::max),
    );
    let y = |d: f64| TOP + plot_h - d / y_max * plot_h;
    let base = TOP + plot_h;

    // Grid and x ticks: labelled at 1-2-5 steps when the range is narrow, at powers of ten
    // otherwise; unlabelled minor lines at every integer multiple of the decade.
    let decades = (x_hi / x_lo).log10();
    let mut decade = 10f64.powf(x_lo.log10().floor());
    svg.push_str(r#"<g class="grid">"#);
    let mut ticks = String::new();
    while decade <= x_hi * (1.0 + 1e-9) {
        for m in 1..10 {
            let v = decade * m as f64;
            if v < x_lo * (1.0 - 1e-9) || v > x_hi * (1.0 + 1e-9) {
                continue;
            }
            let labelled = m == 1 || (decades <= 4.5 && (m == 2 || m == 5));
            let class = if m == 1 { "major" } else { "minor" };
            let _ = write!(
                svg,
                r#"<line class="{class}" x1="{0:.1}" x2="{0:.1}" y1="{TOP}" y2="{base}"/>"#,
                x(v)
            );
            if labelled {
                let _ = write!(
                    ticks,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                    x(v),
                    base + 16.0,
                    escape(&tick_label(v))
                );
            }
        }
        decade *= 10.0;
    }
    for i in 0..=4 {
        let d = y_max * i as f64 / 4.0;
        let _ = write!(
            svg,
            r#"<line class="minor" x1="{LEFT}" x2="{}" y1="{1:.1}" y2="{1:.1}"/>"#,
            WIDTH - RIGHT,
            y(d)
        );
        let _ = write!(
            ticks,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{}%</text>"#,
            LEFT - 6.0,
            y(d) + 4.0,
            (d * 1000.0).round() / 10.0
        );
    }
    svg.push_str("</g>");
    let _ = write!(
        svg,
        r#"<g class="axis"><line x1="{LEFT}" x2="{}" y1="{base}" y2="{base}"/><line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{base}"/>{ticks}<text x="{}" y="{}" text-anchor="middle">latency (log scale)</text><text transform="translate(14 {}) rotate(-90)" text-anchor="middle">% of calls per ⅛ octave</text></g>"#,
        WIDTH - RIGHT,
        LEFT + plot_w / 2.0,
        HEIGHT - 6.0,
        TOP + plot_h / 2.0
    );

    // Each series as filled step areas, one per run of adjacent bins.
    for (s, (bins, total)) in series.iter().zip(&binned) {
        let mut path = String::new();
        let mut previous_hi: Option<f64> = None;
        for bin in bins {
            let top = y(density(bin, *total));
            if previous_hi != Some(bin.lo) {
                if let Some(hi) = previous_hi {
                    let _ = write!(path, "L{:.1},{base:.1}Z", x(hi));
                }
                let _ = write!(path, "M{:.1},{base:.1}", x(bin.lo));
            }
            let _ = write!(path, "L{:.1},{top:.1}L{:.1},{top:.1}", x(bin.lo), x(bin.hi));
            previous_hi = Some(bin.hi);
        }
        if let Some(hi) = previous_hi {
            let _ = write!(path, "L{:.1},{base:.1}Z", x(hi));
        }
        let _ = write!(
            svg,
            r#"<path class="series" d="{path}" fill="{0}" stroke="{0}"><title>{1}</title></path>"#,
            escape(s.color),
            escape(s.label)
        );
    }

    // Markers, staggered so labels of close values do not overlap completely; labels near
    // the right edge go on the left of their line.
    let mut row = 0;
    for s in series {
        for (label, ns) in &s.markers {
            let mx = x((*ns as f64).max(1.0));
            let (lx, anchor) = if mx > WIDTH - RIGHT - 90.0 {
                (mx - 3.0, "end")
            } else {
                (mx + 3.0, "start")
            };
            let _ = write!(
                svg,
                r#"<line class="marker" x1="{mx:.1}" x2="{mx:.1}" y1="{TOP}" y2="{base}" stroke="{0}"/><text class="marker-label" x="{lx:.1}" y="{1:.1}" text-anchor="{anchor}" fill="{0}">{2}</text>"#,
                escape(s.color),
                TOP + 12.0 + 13.0 * (row % 4) as f64,
                escape(label)
            );
            row += 1;
        }
    }

    // Legend, in one row above the plot.
    let mut legend_x = LEFT;
    for s in series {
        let _ = write!(
            svg,
            r#"<g class="legend"><rect x="{legend_x}" y="8" width="12" height="12" fill="{0}" stroke="{0}"/><text x="{1}" y="18.5">{2}</text></g>"#,
            escape(s.color),
            legend_x + 18.0,
            escape(s.label)
        );
        legend_x += 18.0 + 7.0 * s.label.chars().count() as f64 + 28.0;
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Histogram;

    fn buckets(values: &[u64]) -> Vec<[u64; 3]> {
        let mut histogram = Histogram::new();
        for &v in values {
            histogram.record(v);
        }
        histogram.iter().map(|(l, u, c)| [l, u, c]).collect()
    }

    #[test]
    fn bins_hold_their_raw_buckets_exactly() {
        let values: Vec<u64> = (0..20_000u64).map(|i| i * 37 % 5_000_000).collect();
        let raw = buckets(&values);
        let bins = display_bins(&raw);
        assert_eq!(
            bins.iter().map(|b| b.count).sum::<u64>(),
            values.len() as u64
        );
        for &[lower, upper, _] in &raw {
            let v = lower.max(1) as f64;
            let bin = bins
                .iter()
                .find(|b| b.lo <= v && v < b.hi)
                .expect("a bin holds every bucket");
            assert!(
                (upper + 1) as f64 <= bin.hi,
                "bucket [{lower}, {upper}] overflows bin {bin:?}"
            );
        }
        assert!(bins.windows(2).all(|w| w[0].hi <= w[1].lo));
    }

    #[test]
    fn bins_are_eighths_of_an_octave_above_64_ns() {
        let bins = display_bins(&buckets(&[1, 3, 63, 64, 71, 72, 1_000]));
        let edges: Vec<(f64, f64, u64)> = bins.iter().map(|b| (b.lo, b.hi, b.count)).collect();
        assert_eq!(
            edges,
            [
                (1.0, 2.0, 1),
                (2.0, 4.0, 1),
                (32.0, 64.0, 1),
                (64.0, 72.0, 2),
                (72.0, 80.0, 1),
                (960.0, 1024.0, 1)
            ]
        );
    }

    #[test]
    fn counts_that_would_overflow_draw_instead_of_panicking() {
        // A corrupt recording (found by fuzzing): counts summing past u64::MAX.
        let raw = [[100, 103, u64::MAX], [104, 107, u64::MAX], [2048, 2111, 7]];
        let series = [Series {
            label: "corrupt",
            color: "#000",
            buckets: &raw,
            markers: vec![],
        }];
        assert!(histogram_svg("corrupt", &series).starts_with("<svg"));
    }

    #[test]
    fn densities_integrate_to_one() {
        let raw = buckets(&(1..10_000u64).map(|i| i * i).collect::<Vec<_>>());
        let bins = display_bins(&raw);
        let total = bins.iter().map(|b| b.count).sum();
        let area: f64 = bins
            .iter()
            .map(|b| density(b, total) * (b.hi / b.lo).log2() * 8.0)
            .sum();
        assert!((area - 1.0).abs() < 1e-9);
    }

    #[test]
    fn axis_range_and_labels_are_round() {
        let bins = [
            Bin {
                lo: 1_200.0,
                hi: 1_300.0,
                count: 1,
            },
            Bin {
                lo: 30_000.0,
                hi: 32_000.0,
                count: 1,
            },
        ];
        assert_eq!(x_range(&bins), (1_000.0, 50_000.0));
        assert_eq!(tick_label(500.0), "500 ns");
        assert_eq!(tick_label(2_000.0), "2 µs");
        assert_eq!(tick_label(1e9), "1 s");
        assert_eq!(nice_max(0.037), 0.05);
        assert_eq!(nice_max(0.2), 0.2);
    }

    #[test]
    fn svg_escapes_labels_and_handles_no_data() {
        let raw = buckets(&[100, 200]);
        let svg = histogram_svg(
            "a<b>",
            &[Series {
                label: "x&\"y\"",
                color: "#123456",
                buckets: &raw,
                markers: vec![("p50", 150)],
            }],
        );
        assert!(svg.contains("a&lt;b&gt;") && svg.contains("x&amp;&quot;y&quot;"));
        assert!(!svg.contains("a<b>"));
        assert!(
            histogram_svg(
                "t",
                &[Series {
                    label: "l",
                    color: "#000",
                    buckets: &[],
                    markers: vec![]
                }]
            )
            .contains("no timed calls")
        );
    }
}
