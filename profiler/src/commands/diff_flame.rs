//! `hotprof diff-flame`: a differential flamegraph of two folded-stack files, over
//! [`crate::flame::render_diff`].

use std::path::PathBuf;

use anyhow::Context as _;

const EXAMPLES: &str = "\
Examples:
  sudo hotprof --fn generic_perform_write --folded base.folded -- tmpfs_write /dev/shm/x 64
  sudo hotprof --fn generic_perform_write --folded new.folded -- tmpfs_write /dev/shm/x 64
  hotprof diff-flame base.folded new.folded -o diff.svg";

/// Options of `hotprof diff-flame`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
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

pub fn run(args: &DiffFlameArgs) -> anyhow::Result<i32> {
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
