//! The command layer: one module per subcommand, each with its argument struct, its help
//! examples and its `run`. Arguments become domain types ([`crate::session::SessionSpec`] and
//! the like) here; nothing below this layer knows clap.

pub mod args;
pub mod compare;
pub mod completions;
pub mod diff_flame;
pub mod doctor;
pub mod flamegraph;
pub mod heatmap;
pub mod list;
pub mod man;
pub mod record;
pub mod sample;
pub mod serve;
pub mod status;
pub mod top;

use std::io::Write as _;

/// What `hotprof --version` prints after the name: the version, the commit it was built from,
/// the aya version and the id of the embedded eBPF objects (all set by `build.rs`).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("HOTPROF_GIT_COMMIT"),
    ", aya ",
    env!("HOTPROF_AYA_VERSION"),
    ", eBPF object ",
    env!("HOTPROF_EBPF_ID"),
    ")"
);

/// Writing a command's output to stdout failed (a closed pipe, say).
#[derive(Debug, thiserror::Error)]
#[error("cannot write to stdout: {0}")]
pub struct StdoutError(#[from] std::io::Error);

/// All of `bytes` to stdout, flushed.
fn write_stdout(bytes: &[u8]) -> Result<(), StdoutError> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(bytes)?;
    stdout.flush()?;
    Ok(())
}
