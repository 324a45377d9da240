//! `hotprof flamegraph FOLDED -o OUT.svg`: draw any folded-stacks file (hotprof's `--folded`,
//! `perf script | stackcollapse-perf.pl`, bpftrace's or another profiler's output) as a flame
//! graph, with the same renderer, validation and deterministic colors `--flamegraph` uses.
//! Pure userspace: no kernel, no privileges.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

#[derive(Debug, Args)]
pub struct FlamegraphArgs {
    /// Folded stacks (`frame;frame;frame WEIGHT` per line), or `-` for stdin.
    pub folded: PathBuf,
    /// Output SVG.
    #[arg(short = 'o', long = "output", value_name = "FILE.svg")]
    pub output: PathBuf,
    /// Title at the top of the graph (default: the input's file name).
    #[arg(long)]
    pub title: Option<String>,
    /// Unit of the weights, shown in tooltips (`ns` for hotprof's latency-weighted stacks,
    /// `calls`, `samples`).
    #[arg(long, default_value = "ns")]
    pub unit: String,
}

pub fn run(args: &FlamegraphArgs) -> anyhow::Result<i32> {
    let from_stdin = args.folded.as_os_str() == "-";
    let data = if from_stdin {
        let mut data = Vec::new();
        std::io::stdin()
            .read_to_end(&mut data)
            .context("cannot read folded stacks from stdin")?;
        data
    } else {
        std::fs::read(&args.folded)
            .with_context(|| format!("cannot read {}", args.folded.display()))?
    };
    let shown = if from_stdin {
        "stdin".to_string()
    } else {
        args.folded.display().to_string()
    };
    // The lines borrow from `data`: the stacks are held once, not copied.
    let lines = crate::flame::parse_folded_lines(&data).with_context(|| shown.clone())?;
    let title = args
        .title
        .clone()
        .unwrap_or_else(|| format!("hotprof: {shown}"));
    let svg = crate::flame::render_folded_lines(lines, &title, None, &args.unit)
        .with_context(|| shown.clone())?;
    std::fs::write(&args.output, svg)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    eprintln!("hotprof: wrote {}", args.output.display());
    Ok(0)
}
