//! Each run's scratch directory (initrd, sockets): created and locked by its run, and removed
//! by a later run once its own run is gone.

use std::fs;
use std::time::Duration;

use anyhow::{Context, Result};

/// Per-run scratch directories (initrd, sockets) are `$TMPDIR/hotprof-vm-*`: Unix socket paths
/// must stay short, which a deep checkout's target dir might not.
const SCRATCH_PREFIX: &str = "hotprof-vm-";

/// A scratch directory is locked (flock) by its run; one older than this and unlocked belongs
/// to a run that was killed. The age covers the moment between creating and locking it.
const SCRATCH_GRACE: Duration = Duration::from_secs(60);

/// A run killed by a signal (Ctrl-C, a CI time limit) leaves its scratch directory and its
/// tens of MB of initrd behind; the next run removes those no live run holds locked.
pub(super) fn remove_stale_scratch() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let ours = entry
            .file_name()
            .to_string_lossy()
            .starts_with(SCRATCH_PREFIX);
        let old = entry
            .metadata()
            .and_then(|meta| meta.modified())
            .ok()
            .and_then(|modified| modified.elapsed().ok())
            .is_some_and(|age| age > SCRATCH_GRACE);
        // Taking the lock proves no run holds it; it is released when `dir` is dropped.
        let abandoned = || fs::File::open(entry.path()).is_ok_and(|dir| dir.try_lock().is_ok());
        if ours && old && abandoned() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Creates this run's scratch directory and locks it for as long as the returned handle lives.
pub(super) fn scratch_dir() -> Result<(tempfile::TempDir, fs::File)> {
    let scratch = tempfile::Builder::new()
        .prefix(SCRATCH_PREFIX)
        .tempdir()
        .context("could not create a scratch directory for the VM")?;
    let lock = fs::File::open(scratch.path())
        .and_then(|dir| dir.lock().map(|()| dir))
        .with_context(|| format!("could not lock {}", scratch.path().display()))?;
    Ok((scratch, lock))
}
