//! `hotprof compare`: the thin command layer over [`crate::compare`].

use std::path::PathBuf;

use anyhow::Context as _;

use crate::model::{Recording, load_recording};

const EXAMPLES: &str = "\
Examples:
  # Base kernel, then the patched one (same command), then the verdict
  sudo hotprof --fn __audit_filter_op --runs 5 --json base.json -- syscall_lat 100000
  sudo hotprof --fn __audit_filter_op --runs 5 --json new.json -- syscall_lat 100000
  hotprof compare base.json new.json
  # CI gate: exit 3 if a significant slowdown exceeds 5 %, plus an HTML overlay
  hotprof compare base.json new.json --fail-if-slower 5 --html cmp.html
  # Sides recorded interleaved (a1 b1 a2 b2 ...) so drift hits both alike
  hotprof compare a1.json,a2.json,a3.json b1.json,b2.json,b3.json";

/// Options of `hotprof compare`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
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

pub fn run(args: &CompareArgs) -> anyhow::Result<i32> {
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
