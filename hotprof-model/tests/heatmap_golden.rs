//! Golden file for the latency heatmap: `tests/fixtures/heatmap/two_modes.json` (a real
//! `--interval 100ms` recording of `clock_nanosleep` and `getpid`: 1 ms sleeps, a burst of
//! getpids, then 20 ms sleeps) is drawn and compared byte for byte with `two_modes.svg`.
//! After an intended change, rewrite it with
//!
//! ```text
//! HOTPROF_BLESS=1 cargo test -p hotprof-model --test heatmap_golden
//! ```
//!
//! and look at the SVG in a browser before committing. Beyond the bytes, the SVG must be
//! well-formed XML whose cells carry every call of every interval.

use std::path::{Path, PathBuf};

use hotprof_model::export::heatmap::{HeatmapOptions, render};
use hotprof_model::model::parse_recording;
use hotprof_model::report::heatmap_title;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/heatmap")
}

#[test]
fn two_modes_heatmap_matches_its_golden_file() {
    let data = std::fs::read(fixtures().join("two_modes.json")).unwrap();
    let recording = parse_recording(&data, "two_modes.json").unwrap();
    let options = HeatmapOptions {
        title: heatmap_title(&recording),
        key_names: recording.by.clone(),
        ..HeatmapOptions::default()
    };
    let svg = render(&recording.intervals, &options).unwrap();

    roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("not well-formed XML: {e}"));
    let per_panel: Vec<u64> = recording
        .functions
        .iter()
        .enumerate()
        .map(|(i, _)| {
            recording
                .intervals
                .iter()
                .map(|interval| interval.functions[i].count)
                .sum()
        })
        .collect();
    assert!(per_panel.iter().all(|&calls| calls > 0), "{per_panel:?}");
    let drawn: u64 = svg
        .split(" calls</title>")
        .filter_map(|before| before.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(drawn, per_panel.iter().sum::<u64>());

    let path = fixtures().join("two_modes.svg");
    if std::env::var_os("HOTPROF_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &svg).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (create it with HOTPROF_BLESS=1)", path.display()));
    if expected != svg {
        let actual = std::env::temp_dir().join("hotprof-two_modes.svg.actual");
        std::fs::write(&actual, &svg).unwrap();
        panic!(
            "two_modes.svg differs from the golden file; wrote {}. If the change is intended, \
             rerun with HOTPROF_BLESS=1 and look at the SVG.",
            actual.display()
        );
    }
}
