//! Builds the eBPF object (`profiler-ebpf`) for `bpfel-unknown-none` with the nightly toolchain
//! and bpf-linker; `src/attach/loader.rs` embeds it with `include_bytes_aligned!`.
//!
//! aya-build passes the eBPF cargo build's whole output on as `cargo:warning=` lines, which
//! cargo prints as warnings on every build, even when nothing is rebuilt ("Compiling …" times
//! sixty). So the build runs in a second process of this script, and its output is filtered
//! here: cargo's progress lines are dropped and everything else, real warnings included, is
//! kept. When the eBPF build fails, or with `HOTPROF_EBPF_VERBOSE=1`, all of it is shown.
use std::env;
use std::process::Command;

use anyhow::{Context, bail};

/// Set in the second process: it does the build.
const CHILD: &str = "HOTPROF_EBPF_BUILD_CHILD";
/// `1`: show the eBPF build's whole output.
const VERBOSE: &str = "HOTPROF_EBPF_VERBOSE";

fn main() -> anyhow::Result<()> {
    if env::var_os(CHILD).is_some() {
        return build();
    }
    println!("cargo:rerun-if-env-changed={VERBOSE}");
    let me = env::current_exe().context("cannot find the build script's own path")?;
    let output = Command::new(&me)
        .env(CHILD, "1")
        .output()
        .with_context(|| format!("cannot run {}", me.display()))?;
    let show_all = !output.status.success() || env::var_os(VERBOSE).is_some_and(|v| v == "1");
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let progress = line
            .strip_prefix("cargo:warning=")
            .is_some_and(is_cargo_progress);
        if show_all || !progress {
            println!("{line}");
        }
    }
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    if !output.status.success() {
        bail!(
            "the eBPF build failed ({}); its output is above",
            output.status
        );
    }
    Ok(())
}

fn build() -> anyhow::Result<()> {
    let root_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../profiler-ebpf");
    let package = aya_build::Package {
        name: "profiler-ebpf",
        root_dir,
        ..Default::default()
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::default())
}

/// A cargo status line ("   Compiling aya-ebpf v0.2.1", "    Finished `release` …"): the
/// verb is capitalized and right-aligned in cargo's 12-column gutter.
fn is_cargo_progress(line: &str) -> bool {
    const VERBS: &[&str] = &[
        "Adding",
        "Blocking",
        "Building",
        "Checking",
        "Compiling",
        "Downloaded",
        "Downloading",
        "Finished",
        "Fresh",
        "Locking",
        "Updating",
    ];
    let trimmed = line.trim_start();
    let indented = line.len() - trimmed.len() <= 12;
    indented
        && trimmed
            .split_whitespace()
            .next()
            .is_some_and(|verb| VERBS.contains(&verb))
}
