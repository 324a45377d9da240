//! Building hotprof and the workloads for the VM guest.
//!
//! The guest is a bare busybox initramfs with no libc, so every binary is linked statically:
//! x86_64 with glibc and `+crt-static`, aarch64 with musl and `rust-lld` ([`Arch::build_env`]).
//! The setting is passed as a *target-specific* variable so it reaches only the guest's
//! artifacts: profiler's build script runs a nested cargo for the eBPF object, which inherits
//! our environment and must not see it (that object is built for the target's architecture).
//! A separate target dir keeps these static builds from invalidating the host's ordinary ones;
//! in it each architecture has its own directory (cargo's `<target>/release`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::arch::Arch;
use crate::util::{self, cargo, run, step, target_dir};

/// The packages whose binaries go into the guest's `/bin`.
pub const GUEST_PACKAGES: &[&str] = &["profiler", "workloads"];

/// The guest binaries that exist on disk.
#[derive(Debug, Clone)]
pub struct GuestBinaries {
    pub paths: Vec<PathBuf>,
}

/// `target/guest`, the guest builds' own target dir.
fn guest_target_dir() -> PathBuf {
    target_dir().join("guest")
}

/// Where cargo puts the guest's release binaries for `arch`.
pub fn guest_bin_dir(arch: Arch) -> PathBuf {
    guest_target_dir().join(arch.rust_target()).join("release")
}

/// `cargo build` for the guest: release, static (no libraries to copy into the initramfs), in
/// the guest target dir; the caller names what to build.
fn static_guest_build(arch: Arch) -> Command {
    let mut build = cargo();
    let (variable, value) = arch.build_env();
    build
        .args([
            "build",
            "--release",
            "--target",
            arch.rust_target(),
            "--target-dir",
        ])
        .arg(guest_target_dir())
        .env(variable, value);
    build
}

/// The cargo command [`build_guest_with_examples`] runs (its binaries are not stripped yet).
pub fn guest_packages_build(arch: Arch, examples: &[&str]) -> Command {
    let mut build = static_guest_build(arch);
    for package in GUEST_PACKAGES {
        build.args(["-p", package]);
    }
    if !examples.is_empty() {
        build.arg("--bins");
        for example in examples {
            build.args(["--example", example]);
        }
    }
    build
}

/// Builds every guest package for `arch` in release mode and returns their binaries.
pub fn build_guest(arch: Arch) -> Result<GuestBinaries> {
    build_guest_with_examples(arch, &[])
}

/// [`build_guest`], plus these examples (of the guest packages) in the same cargo run: a
/// second run for an example would rebuild much of the first, as examples bring in the
/// dev-dependencies and their features. Examples land in `guest_bin_dir()/examples`.
pub fn build_guest_with_examples(arch: Arch, examples: &[&str]) -> Result<GuestBinaries> {
    let mut what = format!("guest binaries ({})", GUEST_PACKAGES.join(", "));
    if !examples.is_empty() {
        what += &format!(" and examples {}", examples.join(", "));
    }
    let suffix = arch
        .subdir()
        .map_or(String::new(), |name| format!(" for {name}"));
    step("build", &format!("{what}, static{suffix}"));
    let bin_dir = guest_bin_dir(arch);
    run(&mut guest_packages_build(arch, examples)).context("could not build the guest binaries")?;
    // The guests run what users get: the binary `cargo xtask dist` packages, stripped.
    let hotprof = bin_dir.join("hotprof");
    strip_like_dh_strip(arch, &hotprof, &hotprof)?;
    for example in examples {
        let path = bin_dir.join("examples").join(example);
        if !path.is_file() {
            bail!("cargo built {example} but {} is missing", path.display());
        }
    }
    let binaries = guest_binaries(arch)?;
    let missing = binary_names()?
        .into_iter()
        .filter(|name| !binaries.paths.iter().any(|path| path.ends_with(name)))
        .collect::<Vec<_>>();
    if !missing.is_empty() {
        bail!(
            "cargo built the guest packages but these binaries are missing from {}: {}",
            bin_dir.display(),
            missing.join(", ")
        );
    }
    Ok(binaries)
}

/// The guest binaries already built for `arch` (for `--no-build`); those not built yet are
/// left out.
pub fn guest_binaries(arch: Arch) -> Result<GuestBinaries> {
    let dir = guest_bin_dir(arch);
    let paths = binary_names()?
        .into_iter()
        .map(|name| dir.join(name))
        .filter(|path| path.is_file())
        .collect();
    Ok(GuestBinaries { paths })
}

/// The names of the guest packages' binary targets, from `cargo metadata`, so a new workload
/// needs no change here.
fn binary_names() -> Result<BTreeSet<String>> {
    let mut metadata = cargo();
    metadata.args(["metadata", "--no-deps", "--format-version", "1"]);
    let json = util::stdout_of(&mut metadata).context("could not read the workspace metadata")?;
    let metadata: Value =
        serde_json::from_str(&json).context("cargo metadata printed invalid JSON")?;
    binary_names_in(&metadata)
}

fn binary_names_in(metadata: &Value) -> Result<BTreeSet<String>> {
    let packages = metadata["packages"]
        .as_array()
        .context("cargo metadata has no package list")?;
    let names = packages
        .iter()
        .filter(|package| {
            package["name"]
                .as_str()
                .is_some_and(|name| GUEST_PACKAGES.contains(&name))
        })
        .filter_map(|package| package["targets"].as_array())
        .flatten()
        .filter(|target| {
            target["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|kind| kind == "bin"))
        })
        .filter_map(|target| target["name"].as_str().map(str::to_owned))
        .collect();
    Ok(names)
}

/// Writes `input` (an `arch` binary) stripped as Debian's `dh_strip` would to `output` (which
/// may be `input`: stripping a stripped binary again changes nothing, so the guests run the
/// very bytes the packages ship).
pub fn strip_like_dh_strip(arch: Arch, input: &Path, output: &Path) -> Result<()> {
    run(Command::new(arch.strip())
        .args(["--remove-section=.comment", "--remove-section=.note"])
        .arg("--strip-unneeded")
        .arg("-o")
        .arg(output)
        .arg(input))
    .with_context(|| format!("could not strip hotprof ({}, binutils)", arch.strip()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_bin_targets_of_guest_packages_only() {
        let metadata = serde_json::json!({"packages": [
            {"name": "profiler", "targets": [
                {"name": "hotprof", "kind": ["bin"]},
                {"name": "profiler", "kind": ["lib"]},
                {"name": "build-script-build", "kind": ["custom-build"]},
            ]},
            {"name": "workloads", "targets": [
                {"name": "syscall_lat", "kind": ["bin"]},
                {"name": "workloads", "kind": ["lib"]},
            ]},
            {"name": "xtask", "targets": [{"name": "xtask", "kind": ["bin"]}]},
        ]});
        let names = binary_names_in(&metadata).expect("metadata parses");
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            ["hotprof", "syscall_lat"]
        );
    }
}
