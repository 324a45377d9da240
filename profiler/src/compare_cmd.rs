//! `hotprof compare` and `hotprof diff-flame`: the thin command layer over [`crate::compare`]
//! and [`crate::flame::render_diff`].

use std::path::PathBuf;

use anyhow::Context as _;

use crate::model::{Recording, load_recording};

/// Options of `hotprof compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The base recording (`--json` output; with `--runs N` it holds N runs). Several files,
    /// comma-separated, are more runs of the same side: recordings taken interleaved
    /// (base, new, base, new, ...) so that drift of the machine hits both sides alike.
    #[arg(value_name = "BASE[,BASE...]", value_parser = parse_file_list)]
    pub base: FileList,
    /// The patched recording(s); several files (comma-separated or as more arguments) are
    /// more runs of the same side.
    #[arg(value_name = "NEW", value_parser = parse_file_list, required = true)]
    pub new: Vec<FileList>,
    /// Exit with code 3 if any significant slowdown exceeds this percentage (CI gate).
    #[arg(long, value_name = "PCT", value_parser = parse_percent)]
    pub fail_if_slower: Option<f64>,
    /// Also write the comparison as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a self-contained HTML page with both distributions overlaid.
    #[arg(long, value_name = "FILE.html")]
    pub html: Option<PathBuf>,
}

/// One command-line argument naming one or more recordings: `a.json,b.json`.
#[derive(Clone, Debug)]
pub struct FileList(pub Vec<PathBuf>);

fn parse_file_list(text: &str) -> Result<FileList, String> {
    if text.split(',').any(str::is_empty) {
        return Err(format!(
            "'{text}' has an empty file name in its comma-separated list"
        ));
    }
    Ok(FileList(text.split(',').map(PathBuf::from).collect()))
}

fn parse_percent(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{text}' is not a percentage"))?;
    if !(0.0..=10_000.0).contains(&value) {
        return Err(format!("'{text}' must be between 0 and 10000"));
    }
    Ok(value)
}

/// Exit code of `compare` when `--fail-if-slower` trips.
pub const REGRESSION_EXIT: i32 = 3;

pub fn run_compare(args: &CompareArgs) -> anyhow::Result<i32> {
    let load_side = |paths: &[PathBuf]| {
        paths
            .iter()
            .map(|p| load_recording(p))
            .collect::<Result<Vec<_>, _>>()
    };
    let base_paths = &args.base.0;
    let new_paths: Vec<PathBuf> = args.new.iter().flat_map(|list| list.0.clone()).collect();
    let (base, new) = (load_side(base_paths)?, load_side(&new_paths)?);
    let comparison = crate::compare::compare(&base, &new)?;
    print!("{}", crate::compare::render_table(&comparison));
    if let Some(path) = &args.json {
        let json = serde_json::to_vec_pretty(&comparison)?;
        std::fs::write(path, json).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    if let Some(path) = &args.html {
        let names = |paths: &[PathBuf]| {
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let title = format!("{} vs {}", names(base_paths), names(&new_paths));
        // Each side drawn as one distribution: all its files' runs merged.
        let merged =
            |side: &[Recording]| Recording::merged(side).context("a side has no recording");
        let (base_side, new_side) = (merged(&base)?, merged(&new)?);
        let page = crate::export::html::render_comparison(&base_side, &new_side, &title);
        std::fs::write(path, page).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    if let Some(threshold) = args.fail_if_slower {
        let slower = crate::compare::regression(&comparison, threshold);
        if !slower.is_empty() {
            for row in &slower {
                eprintln!("hotprof: regression: {row}");
            }
            return Ok(REGRESSION_EXIT);
        }
    }
    Ok(0)
}

/// Options of `hotprof diff-flame`.
#[derive(Debug, clap::Args)]
pub struct DiffFlameArgs {
    /// Folded stacks of the base run (`--folded`).
    pub base: PathBuf,
    /// Folded stacks of the new run.
    pub new: PathBuf,
    /// Output SVG.
    #[arg(short = 'o', long = "output", value_name = "FILE.svg")]
    pub output: PathBuf,
    /// Unit of the folded weights.
    #[arg(long, default_value = "ns")]
    pub unit: String,
}

pub fn run_diff_flame(args: &DiffFlameArgs) -> anyhow::Result<i32> {
    let read = |path: &PathBuf| -> anyhow::Result<Vec<(String, u64)>> {
        let data =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        crate::flame::parse_folded(&data).with_context(|| format!("{}", path.display()))
    };
    let (base, new) = (read(&args.base)?, read(&args.new)?);
    let title = format!(
        "hotprof diff: {} → {} (red grew, blue shrank; normalized)",
        args.base.display(),
        args.new.display()
    );
    let svg = crate::flame::render_diff(&base, &new, &title, &args.unit)?;
    std::fs::write(&args.output, svg)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    eprintln!("hotprof: wrote {}", args.output.display());
    Ok(0)
}
