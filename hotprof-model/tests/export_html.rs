//! The HTML report, rendered by a real browser: headless Chromium (Debian package
//! `chromium`) takes screenshots with every host name unresolvable, and the PNGs are decoded
//! to check that the tables, the charts (blue base, orange new) and the embedded flamegraph
//! (inferno's red-yellow palette) actually painted. The page source itself must not refer
//! to anything outside it. Skips the browser part with a message when Chromium is missing.

#[path = "fixtures/export/common.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hotprof_model::export::html::{render_comparison, render_recording};

/// A real flamegraph of the fixture stacks, as the `flame` module will produce it.
fn flamegraph_svg() -> Vec<u8> {
    let folded: Vec<String> = common::fixture_stacks()
        .iter()
        .map(|(frames, latency, _)| format!("{} {latency}", frames.join(";")))
        .collect();
    let mut options = inferno::flamegraph::Options::default();
    options.title = "vfs_read latency".into();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut options, folded.iter().map(String::as_str), &mut svg)
        .expect("inferno renders");
    svg
}

/// Asserts the page fetches nothing: no absolute or scheme-relative URLs, no imports, no
/// external scripts/styles, and a CSP that forbids fetching anyway.
fn assert_self_contained(html: &str) {
    for needle in [
        "http://",
        "https://",
        "src=\"//",
        "href=\"//",
        "@import",
        "<link",
        "<script src",
        "url(http",
    ] {
        assert!(!html.contains(needle), "page contains {needle:?}");
    }
    assert!(
        html.contains("content=\"default-src 'none';"),
        "CSP forbids fetches"
    );
    for src in html.split("src=\"").skip(1) {
        assert!(
            src.starts_with("data:"),
            "only data: URLs are loaded: {}",
            &src[..src.len().min(40)]
        );
    }
}

#[test]
fn pages_are_self_contained() {
    let recording = common::recording(false);
    assert_self_contained(&render_recording(&recording, Some(&flamegraph_svg())));
    assert_self_contained(&render_recording(&recording, None));
    assert_self_contained(&render_comparison(
        &recording,
        &common::recording(true),
        "fio: before and after",
    ));
}

/// With `--by`, each function gets a table with a column per key field (20 rows and one
/// "5 more keys" row spanning the fields), every task name escaped.
#[test]
fn key_tables_are_escaped_and_bounded() {
    let recording = common::with_keys(common::recording(false));
    let html = render_recording(&recording, None);
    assert_self_contained(&html);
    assert!(!html.contains("<b>q"), "unescaped task name");
    let tables: Vec<&str> = html
        .split("<table class=\"keys\">")
        .skip(1)
        .map(|t| &t[..t.find("</table>").unwrap()])
        .collect();
    assert_eq!(tables.len(), recording.functions.len());
    for table in tables {
        assert!(
            table.starts_with(
                "<tr><th>arg2:log2</th><th>errno</th><th>comm</th><th class=\"num\">calls</th>"
            ),
            "{table}"
        );
        assert_eq!(table.matches("<tr>").count(), 1 + 20 + 1, "{table}");
        assert!(
            table.contains("<td class=\"code\">[1, 2)</td><td class=\"code\">ok</td><td class=\"code\">task 0 &quot;&lt;b&gt;q&lt;/b&gt;&quot; \\\n</td>"),
            "{table}"
        );
        assert!(
            table.contains("<td colspan=\"3\">5 more keys</td>"),
            "{table}"
        );
    }
}

fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find_map(common::which);
    if found.is_none() {
        eprintln!(
            "SKIPPED: Chromium is not installed (Debian package `chromium`); cannot render the page"
        );
    }
    found
}

/// Headless Chromium now and then hangs on a page it renders in a second at other times (once
/// in a clean-clone CI run, its other pages done): one more try, from a fresh profile, tells
/// a hung browser from a page that cannot render (which fails both).
const CHROMIUM_ATTEMPTS: u32 = 2;

/// The command that screenshots `page` into `png` in a `height`-pixel window.
fn chromium_command(browser: &Path, dir: &Path, png: &Path, page: &Path, height: u32) -> Command {
    let mut command = Command::new(browser);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            // Without these the screenshot can race rasterization (half-painted charts)
            // and the flamegraph frame's script.
            "--run-all-compositor-stages-before-draw",
            "--virtual-time-budget=5000",
            "--host-resolver-rules=MAP * ~NOTFOUND",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(format!(
            "--log-net-log={}",
            dir.join("netlog.json").display()
        ))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("--window-size=1200,{height}"))
        .arg(format!("file://{}", page.display()));
    command
}

/// Screenshots `html` in headless Chromium with all name resolution failing (so a page
/// needing the network would render visibly broken), and returns the decoded pixels and the
/// URLs the page requested, from Chromium's NetLog.
fn screenshot(browser: &Path, name: &str, html: &str, height: u32) -> Screenshot {
    let dir = common::scratch_dir(&format!("export-html-{name}"));
    let page = dir.join(format!("{name}.html"));
    std::fs::write(&page, html).unwrap();
    let png = dir.join(format!("{name}.png"));
    let mut attempt = 0;
    let output = loop {
        attempt += 1;
        // A fresh profile each time: a hung run may have left its own half-written.
        let _ = std::fs::remove_dir_all(dir.join("profile"));
        match common::try_run_with_timeout(
            &mut chromium_command(browser, &dir, &png, &page, height),
            Duration::from_secs(120),
        ) {
            Ok(output) => break output,
            Err(hung) if attempt < CHROMIUM_ATTEMPTS => {
                eprintln!(
                    "chromium hung (attempt {attempt} of {CHROMIUM_ATTEMPTS}), again: {hung}"
                );
            }
            Err(hung) => panic!("{hung}"),
        }
    };
    assert!(
        output.status.success() && png.is_file(),
        "chromium failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let mut shot = Screenshot::decode(&png);
    assert_eq!((shot.width, shot.height), (1200, height));
    shot.page_requests = page_requests(&dir.join("netlog.json"));
    // Keep the page and the screenshot (small, worth a look); drop the browser profile.
    let _ = std::fs::remove_dir_all(dir.join("profile"));
    let _ = std::fs::remove_file(dir.join("netlog.json"));
    shot
}

/// URLs the page (not the browser itself) asked the network stack for: every
/// `URL_REQUEST_START_JOB` in the NetLog whose initiator is a document. Chromium's own
/// background requests (update checks, accounts), which the flags do not fully silence,
/// have the initiator "not an origin"; a request from the `file://` page or its `data:`
/// frame has `null`.
fn page_requests(netlog: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(netlog).expect("chromium wrote its NetLog");
    // A NetLog cut short (browser killed at exit) lacks its closing brackets.
    let json: serde_json::Value = serde_json::from_str(&text)
        .or_else(|_| serde_json::from_str(&format!("{}]}}", text.trim_end().trim_end_matches(','))))
        .expect("NetLog is JSON");
    let start_job = json["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
        .as_u64()
        .expect("event type id");
    json["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["type"].as_u64() == Some(start_job))
        .filter(|e| e["params"]["initiator"].as_str() != Some("not an origin"))
        .filter_map(|e| e["params"]["url"].as_str().map(String::from))
        .collect()
}

struct Screenshot {
    width: u32,
    height: u32,
    /// RGB triples.
    pixels: Vec<[u8; 3]>,
    /// What the page fetched from the network (must be nothing).
    page_requests: Vec<String>,
}

impl Screenshot {
    fn decode(path: &Path) -> Self {
        let mut decoder = png::Decoder::new(std::fs::File::open(path).unwrap());
        decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let channels = info.color_type.samples();
        assert!(
            channels >= 3,
            "colour screenshot, got {:?}",
            info.color_type
        );
        let pixels = buf[..info.buffer_size()]
            .chunks(channels)
            .map(|p| [p[0], p[1], p[2]])
            .collect();
        Self {
            width: info.width,
            height: info.height,
            pixels,
            page_requests: Vec::new(),
        }
    }

    fn count(&self, predicate: impl Fn(i32, i32, i32) -> bool) -> usize {
        self.pixels
            .iter()
            .filter(|[r, g, b]| predicate(i32::from(*r), i32::from(*g), i32::from(*b)))
            .count()
    }

    fn distinct_colors(&self) -> usize {
        self.pixels
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len()
    }

    fn non_white_fraction(&self) -> f64 {
        self.count(|r, g, b| r < 245 || g < 245 || b < 245) as f64 / self.pixels.len() as f64
    }
}

/// The chart's blue (base series, `#4c78a8`, filled at 35 % opacity and stroked).
fn bluish(r: i32, _g: i32, b: i32) -> bool {
    b > r + 25
}

/// The comparison's orange (new series, `#f58518`).
fn orangish(r: i32, g: i32, b: i32) -> bool {
    r > 200 && g > 100 && g < 225 && r - b > 60
}

/// inferno's "hot" frames: saturated reds, oranges and yellows.
fn flame_colored(r: i32, _g: i32, b: i32) -> bool {
    r > 200 && b < 80
}

#[test]
fn chromium_renders_the_recording_page_with_charts_and_flamegraph() {
    let Some(browser) = chromium() else { return };
    let recording = common::recording(false);

    // The first screen: title, run table, percentile table and the first chart.
    let shot = screenshot(
        &browser,
        "recording-top",
        &render_recording(&recording, None),
        900,
    );
    assert!(
        shot.distinct_colors() > 100,
        "only {} colours: blank page?",
        shot.distinct_colors()
    );
    let ink = shot.non_white_fraction();
    eprintln!(
        "first screen: {} colours, {ink:.3} non-white, {} blue pixels",
        shot.distinct_colors(),
        shot.count(bluish)
    );
    assert!(ink > 0.05 && ink < 0.6, "non-white fraction {ink}");
    assert!(
        shot.count(bluish) > 3_000,
        "histogram bars missing: {} blue pixels",
        shot.count(bluish)
    );

    // The whole page with and without the flamegraph: only the former paints flame colours.
    let with = screenshot(
        &browser,
        "recording-flame",
        &render_recording(&recording, Some(&flamegraph_svg())),
        2_800,
    );
    let without = screenshot(
        &browser,
        "recording-noflame",
        &render_recording(&recording, None),
        2_800,
    );
    let (flame, none) = (with.count(flame_colored), without.count(flame_colored));
    eprintln!("flame-coloured pixels: {flame} with the flamegraph, {none} without");
    assert!(
        flame > 20_000,
        "flamegraph not painted: {flame} flame-coloured pixels"
    );
    assert!(none < 2_000, "flame colours without a flamegraph: {none}");
}

#[test]
fn chromium_renders_the_comparison_with_both_distributions() {
    let Some(browser) = chromium() else { return };
    let html = render_comparison(
        &common::recording(false),
        &common::recording(true),
        "fio: before and after",
    );
    let shot = screenshot(&browser, "comparison", &html, 1_400);
    assert!(
        shot.distinct_colors() > 100,
        "only {} colours: blank page?",
        shot.distinct_colors()
    );
    let (blue, orange) = (shot.count(bluish), shot.count(orangish));
    eprintln!(
        "comparison: {blue} blue, {orange} orange pixels, {} colours",
        shot.distinct_colors()
    );
    assert!(blue > 3_000, "base series missing: {blue} blue pixels");
    assert!(orange > 3_000, "new series missing: {orange} orange pixels");
    assert!(
        shot.page_requests.is_empty(),
        "the page fetched {:?}",
        shot.page_requests
    );
}

/// The network check itself works: a page with a remote image is caught, whether it asks
/// from the page or from a `data:` frame (as a flamegraph with a remote reference would).
#[test]
fn chromium_netlog_catches_a_page_that_fetches() {
    let Some(browser) = chromium() else { return };
    let frame = "<svg xmlns='http://www.w3.org/2000/svg'><image href='https://frame.example/y.png' width='9' height='9'/></svg>";
    let html = format!(
        "<!DOCTYPE html><p>fetching</p><img src=\"https://page.example/x.png\">\
         <iframe src=\"data:image/svg+xml,{}\"></iframe>",
        frame
            .replace('<', "%3C")
            .replace('>', "%3E")
            .replace('#', "%23")
    );
    let shot = screenshot(&browser, "control", &html, 300);
    assert!(
        shot.page_requests
            .iter()
            .any(|u| u.starts_with("https://page.example/")),
        "{:?}",
        shot.page_requests
    );
    assert!(
        shot.page_requests
            .iter()
            .any(|u| u.starts_with("https://frame.example/")),
        "{:?}",
        shot.page_requests
    );
}

/// The heatmap's palette (`export::heatmap`: light yellow to dark red): red well above blue.
fn heat_colored(r: i32, g: i32, b: i32) -> bool {
    r > 170 && r - b > 70 && g < 245
}

/// The heatmap's busiest cells, `#bd0026` and its neighbours on the scale.
fn hottest(r: i32, g: i32, b: i32) -> bool {
    (170..=215).contains(&r) && g < 50 && b < 70
}

#[test]
fn chromium_renders_the_heatmap_panel() {
    let Some(browser) = chromium() else { return };
    // A real `--interval 100ms` recording: 1 ms sleeps, a burst of getpids, 20 ms sleeps.
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/heatmap/two_modes.json");
    let recording =
        hotprof_model::model::parse_recording(&std::fs::read(&fixture).unwrap(), "two_modes.json")
            .unwrap();
    let mut without = recording.clone();
    without.intervals.clear();
    let page = render_recording(&recording, None);
    assert_self_contained(&page);
    assert!(page.contains("<h2>Latency over time</h2>"));
    assert!(!render_recording(&without, None).contains("Latency over time"));

    let with = screenshot(&browser, "recording-heatmap", &page, 3_200);
    let plain = screenshot(
        &browser,
        "recording-noheatmap",
        &render_recording(&without, None),
        3_200,
    );
    let (heat, none) = (with.count(heat_colored), plain.count(heat_colored));
    let hot = with.count(hottest);
    eprintln!("heat-coloured pixels: {heat} with intervals, {none} without; {hot} of the hottest");
    assert!(
        heat > 10_000,
        "heatmap not painted: {heat} heat-coloured pixels"
    );
    assert!(none < 1_000, "heat colours without intervals: {none}");
    // The getpid burst's busiest cells are drawn in the top of the scale.
    assert!(hot > 200, "the busiest cells are missing: {hot} pixels");
}
