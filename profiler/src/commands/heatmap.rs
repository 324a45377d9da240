//! `hotprof heatmap RECORDING.json -o OUT.svg`: the latency heatmap of a recording made with
//! `--interval` or `--heatmap` (a column per interval, a row per quarter of a power of two of
//! latency, one panel per function or syscall). Pure userspace: no kernel, no privileges.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;

use crate::export::heatmap::{HeatmapError, HeatmapOptions, render};
use crate::model::{Recording, load_recording};

#[derive(Debug, Args)]
pub struct HeatmapArgs {
    /// A JSON recording (`--json`) of a run with `--interval` or `--heatmap`.
    pub recording: PathBuf,
    /// Output SVG.
    #[arg(short = 'o', long = "output", value_name = "FILE.svg")]
    pub output: PathBuf,
    /// Title at the top (default: the functions, mode and kernel of the recording).
    #[arg(long)]
    pub title: Option<String>,
}

pub fn run(args: &HeatmapArgs) -> anyhow::Result<i32> {
    let recording = load_recording(&args.recording)?;
    let title = args
        .title
        .clone()
        .unwrap_or_else(|| crate::report::heatmap_title(&recording));
    write(&recording, &title, &args.output)
        .with_context(|| args.recording.display().to_string())?;
    // An `--interval` run's calls after its last report are in its total only.
    for (i, function) in recording.functions.iter().enumerate() {
        let drawn: u64 = recording
            .intervals
            .iter()
            .filter_map(|interval| interval.functions.get(i))
            .map(|f| f.count)
            .sum();
        if function.count > drawn {
            eprintln!(
                "hotprof: note: {}: {} of its {} calls came after the last interval report and \
                 are not drawn (a run with --heatmap draws them in a last column)",
                function.name,
                function.count - drawn,
                function.count
            );
        }
    }
    Ok(0)
}

/// Draws `recording`'s intervals to `output` (also `--heatmap` at the end of a run), saying
/// how to get a recording that has what a heatmap needs.
pub fn write(recording: &Recording, title: &str, output: &Path) -> anyhow::Result<()> {
    let options = HeatmapOptions {
        title: title.to_string(),
        key_names: recording.by.clone(),
        ..HeatmapOptions::default()
    };
    let svg = render(&recording.intervals, &options).map_err(|error| match error {
        HeatmapError::NoIntervals => anyhow::anyhow!(
            "{error}: record with --interval (e.g. --interval 100ms --json FILE), or pass \
             --heatmap to that run"
        ),
        HeatmapError::NoRows => anyhow::anyhow!("{error}: record it again with this hotprof"),
    })?;
    std::fs::write(output, svg).with_context(|| format!("cannot write {}", output.display()))?;
    eprintln!("hotprof: wrote {}", output.display());
    Ok(())
}
