//! `cargo xtask test --fuzz SECS`: each cargo-fuzz target in `fuzz/` for SECS seconds,
//! starting from its committed corpus, failing on any crash. Opt-in (not in the default run):
//! fuzzing needs nightly and a sanitizer build, and is only worth it for minutes per target.
//!
//! New inputs libFuzzer finds go to `target/fuzz-corpus/<target>/`, not into the committed
//! `fuzz/corpus/<target>/` (which stays the minimised, reviewed set: grow it on purpose with
//! `cargo fuzz cmin`, see fuzz/README.md). A crash's reproducer lands in
//! `fuzz/artifacts/<target>/`, which is kept in git.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util::{display_cmd, output, target_dir, workspace_root};

/// The fuzz targets: one per `fuzz/fuzz_targets/<name>.rs` (cargo-fuzz's layout), sorted.
pub fn targets() -> Result<Vec<String>> {
    let dir = fuzz_dir().join("fuzz_targets");
    let mut names = Vec::new();
    for entry in fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "rs")
            && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
        {
            names.push(stem.to_owned());
        }
    }
    names.sort();
    if names.is_empty() {
        bail!("{} has no fuzz targets", dir.display());
    }
    Ok(names)
}

fn fuzz_dir() -> PathBuf {
    workspace_root().join("fuzz")
}

/// Builds every target (nightly, sanitizer instrumentation), with the build's output on the
/// terminal: the first build takes minutes, and `run_target` captures its output.
pub fn build_all() -> Result<()> {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(fuzz_dir())
        .args(["+nightly", "fuzz", "build"]);
    crate::util::run(&mut cmd)
}

/// Runs one target for `seconds` and prints libFuzzer's final line (runs, coverage, corpus).
pub fn run_target(target: &str, seconds: u64) -> Result<()> {
    let scratch = target_dir().join("fuzz-corpus").join(target);
    fs::create_dir_all(&scratch).with_context(|| format!("cannot create {}", scratch.display()))?;
    let kept = fuzz_dir().join("corpus").join(target);
    let mut cmd = Command::new("cargo");
    cmd.current_dir(fuzz_dir())
        .args(["+nightly", "fuzz", "run", target])
        // libFuzzer writes new inputs to the first corpus directory and reads all of them.
        .arg(&scratch)
        .arg(&kept)
        .args([
            "--",
            &format!("-max_total_time={seconds}"),
            "-print_final_stats=1",
        ]);
    let line = display_cmd(&cmd);
    println!("  {line}");
    let out = output(&mut cmd)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // libFuzzer's last status line: `#RUNS DONE cov: N ft: N corp: N/SIZE ...`.
    let done = stderr.lines().rev().find(|l| l.contains(" DONE "));
    let execs = stderr
        .lines()
        .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
        .map(str::trim);
    if !out.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "fuzz target {target} failed ({}): a crash or a build error; reproducer (if any) in \
             fuzz/artifacts/{target}/\n{}",
            out.status,
            tail.join("\n")
        );
    }
    let done = done.context("libFuzzer printed no final line: did it run at all?")?;
    println!(
        "  {target}: {} ({} executions in {seconds} s)",
        done.trim(),
        execs.unwrap_or("?")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fuzz_target_file_is_a_declared_bin() {
        let manifest = fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
        for target in targets().expect("targets") {
            assert!(
                manifest.contains(&format!("name = \"{target}\"")),
                "{target} is not a [[bin]] of fuzz/Cargo.toml"
            );
        }
    }
}
