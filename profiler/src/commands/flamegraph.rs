//! `hotprof flamegraph FOLDED -o OUT.svg`: draw any folded-stacks file (hotprof's `--folded`,
//! `perf script | stackcollapse-perf.pl`, bpftrace's or another profiler's output) as a flame
//! graph, with the same renderer, validation and deterministic colors `--flamegraph` uses.
//! Pure userspace: no kernel, no privileges.

use std::borrow::Cow;
use std::io::Read as _;
use std::path::{Path, PathBuf};

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
    let data: Cow<'static, [u8]> = if from_stdin {
        let mut data = Vec::new();
        std::io::stdin()
            .read_to_end(&mut data)
            .context("cannot read folded stacks from stdin")?;
        Cow::Owned(data)
    } else {
        read_file(&args.folded).with_context(|| format!("cannot read {}", args.folded.display()))?
    };
    let shown = if from_stdin {
        "stdin".to_string()
    } else {
        args.folded.display().to_string()
    };
    // The lines borrow from `data`: the stacks are held once, not copied.
    let text = crate::flame::parse_folded_text(&data).with_context(|| shown.clone())?;
    let title = args
        .title
        .clone()
        .unwrap_or_else(|| format!("hotprof: {shown}"));
    let svg = crate::flame::render_folded_text(text, &title, None, &args.unit)
        .with_context(|| shown.clone())?;
    std::fs::write(&args.output, svg)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    eprintln!("hotprof: wrote {}", args.output.display());
    Ok(0)
}

/// The file mapped rather than read: no copy of it from the page cache into fresh, zeroed
/// memory (a tenth of the time of a million-line file), and the same pages counted in the peak
/// memory. A file that cannot be mapped (a pipe, an empty file, some pseudo-files) is read.
/// Like ripgrep's, the mapping shows the file as it is: one rewritten while hotprof draws it
/// can draw wrong frames, or end hotprof with SIGBUS if truncated.
fn read_file(path: &Path) -> std::io::Result<Cow<'static, [u8]>> {
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if let Ok(len) = usize::try_from(len)
        && len > 0
        && let Some(mapped) = crate::sys::mmap::map_for_good(&file, len)
    {
        return Ok(Cow::Borrowed(mapped));
    }
    std::fs::read(path).map(Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_mapped_and_empty_ones_read() {
        let dir = std::env::temp_dir().join(format!("hotprof-flame-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let folded = dir.join("stacks.folded");
        std::fs::write(&folded, b"a;b 1\n").unwrap();
        let data = read_file(&folded).unwrap();
        assert!(matches!(data, Cow::Borrowed(_)));
        assert_eq!(&*data, b"a;b 1\n");
        let empty = dir.join("empty.folded");
        std::fs::write(&empty, b"").unwrap();
        assert!(matches!(read_file(&empty).unwrap(), Cow::Owned(v) if v.is_empty()));
        assert!(read_file(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
