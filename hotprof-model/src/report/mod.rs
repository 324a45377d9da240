//! Stage 5: reports — the terminal text and the versioned JSON file.

pub mod stacks;
mod text;
mod titles;

pub use text::{render_function, render_losses, render_map_entries, render_recording};
pub use titles::{flamegraph_titles, heatmap_title};

use std::path::Path;

use anyhow::Context as _;

use crate::model::Recording;

/// Writes `recording` as pretty JSON (schema in `docs/json-schema.md`), atomically: a reader
/// never sees a half-written file.
pub fn write_json(recording: &Recording, path: &Path) -> anyhow::Result<()> {
    let json = serde_json::to_vec_pretty(recording)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, &json).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
