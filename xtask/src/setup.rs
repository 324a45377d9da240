//! `cargo xtask setup`: installs everything a bare Debian 12 machine lacks to build hotprof
//! (nightly rust-src and bpf-linker for the eBPF object, LLVM 22 for bpf-linker) and to run its
//! VM tests (qemu, busybox), for the x86_64 guests and the arm64 ones (qemu-system-arm, the
//! aarch64 musl target, Debian's arm64 busybox-static). Every step checks first, so running it
//! again costs about a second.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};

use crate::arch::Arch;
use crate::initramfs;
use crate::util::{self, cargo_bin_dir, is_root, output, run, step, workspace_root};

/// Debian packages: qemu boots the guest kernels (qemu-system-arm has `qemu-system-aarch64`); LLVM 22 (+ polly, zstd, zlib, which its
/// cmake/llvm-config link line names) is what bpf-linker links against; busybox-static is the
/// guest's whole userland; bpftool and bpftrace are for poking at probes by hand. The export
/// tests check hotprof's outputs with the real consumers: Prometheus (promtool, a server and
/// the Python client's OpenMetrics parser), `go tool pprof`, and headless Chromium. The
/// completion and man page tests run bash, fish and zsh and render with man-db/groff;
/// rt-tests is the real `hackbench` the README's syscall-latency recipe runs;
/// `systemd-analyze` (systemd) and `setpriv` (util-linux) check the exporter's unit file;
/// `dist` strips the release binaries (binutils; the arm64 one, which is also the arm64 guests',
/// with binutils-aarch64-linux-gnu), runs the arm64 one for its man pages and completions under
/// qemu-user-static (`qemu-aarch64-static`, as `host_deb_arm64` does) and checks both .debs
/// with lintian; xz unpacks the guest kernels' compressed modules (`kernels.rs`).
pub const APT_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "qemu-system-arm",
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
    "busybox-static",
    "cpio",
    "bpftool",
    "bpftrace",
    "prometheus",
    "python3-prometheus-client",
    "golang-go",
    "chromium",
    "zsh",
    "fish",
    "man-db",
    "groff",
    "rt-tests",
    "systemd",
    "util-linux",
    "binutils",
    "binutils-aarch64-linux-gnu",
    "qemu-user-static",
    "lintian",
    "xz-utils",
    // Unpack x86's kernel images (zstd from 6.12, lz4 before) to boot them without their
    // decompressor (`kernels/pvh.rs`).
    "zstd",
    "lz4",
];

/// bpf-linker releases that build against LLVM 22.
const BPF_LINKER_VERSION: &str = "~0.13";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

/// Runs every setup step, stopping at the first one that fails.
pub fn run_all() -> Result<()> {
    apt_packages().context("setup: apt packages")?;
    rust_src().context("setup: nightly rust-src")?;
    bpf_linker().context("setup: bpf-linker")?;
    guest_targets().context("setup: the guests' Rust targets")?;
    arm64_busybox().context("setup: arm64 busybox")?;
    step("setup", "done");
    Ok(())
}

fn apt_packages() -> Result<()> {
    step(
        "setup",
        &format!("apt packages: {}", APT_PACKAGES.join(" ")),
    );
    let missing = APT_PACKAGES
        .iter()
        .copied()
        .filter(|pkg| !dpkg_installed(pkg))
        .collect::<Vec<_>>();
    if missing.is_empty() {
        println!("  ok (already present)");
        return Ok(());
    }
    let list = missing.join(" ");
    if !is_root() {
        bail!(
            "missing Debian packages: {list}\n  installing them needs root: run \
             `sudo apt-get install -y {list}` (or `sudo cargo xtask setup`), then try again"
        );
    }
    println!("  installing: {list}");
    apt_update_once()?;
    let mut install = Command::new("apt-get");
    install
        .args(["install", "-y", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive");
    run(&mut install).with_context(|| format!("could not install the Debian packages {list}"))?;
    let still_missing = missing
        .iter()
        .filter(|pkg| !dpkg_installed(pkg))
        .copied()
        .collect::<Vec<_>>();
    if !still_missing.is_empty() {
        bail!(
            "apt-get succeeded but these packages are still not installed: {}",
            still_missing.join(" ")
        );
    }
    println!("  ok (installed {list})");
    Ok(())
}

/// `dpkg -s` exits 0 for packages that are known, so the status line must say "installed".
fn dpkg_installed(pkg: &str) -> bool {
    let mut cmd = Command::new("dpkg-query");
    cmd.args(["-W", "-f=${db:Status-Status}", pkg]);
    output(&mut cmd).is_ok_and(|out| out.status.success() && out.stdout == b"installed")
}

static APT_UPDATED: AtomicBool = AtomicBool::new(false);

/// Refreshes apt's package lists at most once per xtask run: a bare machine may have none,
/// and the kernel packages' names change with every security update.
pub fn apt_update_once() -> Result<()> {
    if APT_UPDATED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    if !is_root() {
        bail!("apt-get update needs root: run `sudo apt-get update`, then try again");
    }
    println!("  apt-get update");
    let mut update = Command::new("apt-get");
    update.args(["update", "-q"]);
    run(&mut update).context("could not refresh apt's package lists")
}

fn rust_src() -> Result<()> {
    step(
        "setup",
        "rust-src for the nightly toolchain (eBPF build-std)",
    );
    let mut list = Command::new("rustup");
    list.args(["component", "list", "--toolchain", "nightly", "--installed"]);
    let installed = util::stdout_of(&mut list)
        .context("could not list the nightly toolchain's components (is rustup's nightly toolchain installed?)")?;
    if installed.lines().any(|line| line.trim() == "rust-src") {
        println!("  ok (already present)");
        return Ok(());
    }
    let mut add = Command::new("rustup");
    add.args(["component", "add", "rust-src", "--toolchain", "nightly"]);
    run(&mut add).context("could not add rust-src to the nightly toolchain")?;
    println!("  ok (installed)");
    Ok(())
}

/// The Rust targets of the guest builds other than the host's own ([`Arch::rust_target`]),
/// added to the toolchain the workspace builds with.
fn guest_targets() -> Result<()> {
    let wanted = Arch::ALL
        .iter()
        .filter(|arch| arch.subdir().is_some())
        .map(|arch| arch.rust_target())
        .collect::<Vec<_>>();
    step(
        "setup",
        &format!("Rust targets of the guests: {}", wanted.join(" ")),
    );
    let mut list = Command::new("rustup");
    list.args(["target", "list", "--installed"])
        .current_dir(workspace_root());
    let installed = util::stdout_of(&mut list).context("could not list rustup's targets")?;
    let missing = wanted
        .into_iter()
        .filter(|target| !installed.lines().any(|line| line.trim() == *target))
        .collect::<Vec<_>>();
    if missing.is_empty() {
        println!("  ok (already present)");
        return Ok(());
    }
    let mut add = Command::new("rustup");
    add.args(["target", "add"])
        .args(&missing)
        .current_dir(workspace_root());
    run(&mut add).with_context(|| format!("could not add the targets {}", missing.join(" ")))?;
    println!("  ok (installed {})", missing.join(" "));
    Ok(())
}

/// Debian's arm64 busybox-static, the arm64 guests' userland, through our own apt state.
fn arm64_busybox() -> Result<()> {
    step(
        "setup",
        "busybox-static for the arm64 guests (target/busybox)",
    );
    let busybox = initramfs::busybox(Arch::Aarch64)?;
    println!("  ok ({})", busybox.display());
    Ok(())
}

fn bpf_linker() -> Result<()> {
    step("setup", "bpf-linker (links the eBPF object)");
    if let Some(version) = bpf_linker_version() {
        println!("  ok (already present: {version})");
        return Ok(());
    }
    println!(
        "  building bpf-linker {BPF_LINKER_VERSION} against {LLVM_PREFIX} (takes several minutes)"
    );
    let mut install = Command::new("cargo");
    install
        .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION])
        .args(["--no-default-features", "--features", "llvm-22", "--locked"])
        .env("LLVM_SYS_221_PREFIX", LLVM_PREFIX)
        // bpf-linker's own build script looks for LLVM here, not via llvm-sys.
        .env("LLVM_PREFIX", LLVM_PREFIX);
    run(&mut install).context("could not build bpf-linker (`cargo install bpf-linker`)")?;
    match bpf_linker_version() {
        Some(version) => {
            println!("  ok (installed {version})");
            Ok(())
        }
        None => bail!(
            "bpf-linker was installed but `bpf-linker --version` does not run; is {} on PATH?",
            cargo_bin_dir().display()
        ),
    }
}

/// cargo-fuzz, the libFuzzer driver `cargo xtask test --fuzz` runs the targets in `fuzz/`
/// with. Installed only when fuzzing is asked for (it is not needed to build or test hotprof);
/// skipped when any cargo-fuzz is already installed.
const CARGO_FUZZ_VERSION: &str = "=0.13.2";

pub fn cargo_fuzz() -> Result<()> {
    step("setup", "cargo-fuzz (runs the fuzz targets)");
    if let Some(version) = installed_version("cargo-fuzz") {
        println!("  ok (already present: {version})");
        return Ok(());
    }
    let mut install = Command::new("cargo");
    install.args([
        "install",
        "cargo-fuzz",
        "--locked",
        "--version",
        CARGO_FUZZ_VERSION,
    ]);
    run(&mut install).context("could not install cargo-fuzz (`cargo install cargo-fuzz`)")?;
    match installed_version("cargo-fuzz") {
        Some(version) => {
            println!("  ok (installed {version})");
            Ok(())
        }
        None => bail!(
            "cargo-fuzz was installed but `cargo-fuzz --version` does not run; is {} on PATH?",
            cargo_bin_dir().display()
        ),
    }
}

/// The version line of a cargo-installed tool, looking on PATH and then in cargo's bin dir.
fn installed_version(tool: &str) -> Option<String> {
    [PathBuf::from(tool), cargo_bin_dir().join(tool)]
        .into_iter()
        .find_map(|program| {
            let out = output(Command::new(program).arg("--version")).ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        })
}

/// The installed bpf-linker's version line, looking on PATH and then in cargo's bin dir
/// (which a fresh shell may not have on PATH yet).
fn bpf_linker_version() -> Option<String> {
    installed_version("bpf-linker")
}
