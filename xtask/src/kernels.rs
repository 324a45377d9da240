//! The guest kernels: Debian's cloud kernels, fetched with `apt-get download` and cached under
//! `target/kernels/<version>/`.
//!
//! They are used because they have everything hotprof needs built in (kprobes, BTF, tracefs,
//! audit, the 8250 serial driver), so the guest needs no modules. Their package names change
//! with each security update, so the newest package matching a pattern is resolved every time
//! (a local `apt-cache` query) and the cache is refreshed when a newer one appears.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::setup::apt_update_once;
use crate::util::{self, is_root, step, target_dir};

/// A kernel series the VM tests run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Kernel {
    /// Debian 12's backported 6.12: has `__audit_filter_op`, fentry works.
    #[value(name = "6.12")]
    V6_12,
    /// Debian 12's own 6.1: the older kernel, without `__audit_filter_op`.
    #[value(name = "6.1")]
    V6_1,
}

impl Kernel {
    pub const ALL: [Kernel; 2] = [Kernel::V6_12, Kernel::V6_1];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::V6_12 => "6.12",
            Kernel::V6_1 => "6.1",
        }
    }

    /// `apt-cache search --names-only` pattern for this series' cloud kernel packages.
    fn package_pattern(self) -> &'static str {
        match self {
            Kernel::V6_12 => r"^linux-image-6\.12\.[0-9]+\+deb12-cloud-amd64-unsigned$",
            Kernel::V6_1 => r"^linux-image-6\.1\.0-[0-9]+-cloud-amd64(-unsigned)?$",
        }
    }

    fn cache_dir(self) -> PathBuf {
        target_dir().join("kernels").join(self.name())
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A kernel image ready to boot.
#[derive(Clone, Debug)]
pub struct KernelImage {
    /// The Debian package it came from, e.g. `linux-image-6.12.117+deb12-cloud-amd64-unsigned`.
    pub package: String,
    pub vmlinuz: PathBuf,
}

/// Returns the newest kernel of the series, downloading it if the cache does not hold it.
/// When apt cannot tell or fetch anything newer but an older download is cached, that one is
/// used with a warning, so a flaky mirror does not stop offline work.
pub fn ensure(kernel: Kernel) -> Result<KernelImage> {
    let cached = cached(kernel);
    let newest = match newest_package(kernel) {
        Ok(newest) => newest,
        Err(err) => match cached {
            Some(image) => {
                eprintln!(
                    "warning: {err:#}\n  using the cached {} instead",
                    image.package
                );
                return Ok(image);
            }
            None => return Err(err),
        },
    };
    if let Some(image) = &cached
        && image.package == newest
    {
        return Ok(image.clone());
    }
    // A stale package list names a version the mirror already dropped: refresh the lists
    // once, look again and retry.
    let fetched = download(kernel, &newest).or_else(|first| {
        apt_update_once().context(first)?;
        let newest = newest_package(kernel)?;
        match &cached {
            Some(image) if image.package == newest => Ok(image.clone()),
            _ => download(kernel, &newest),
        }
    });
    match fetched {
        Ok(image) => Ok(image),
        Err(err) => match cached {
            Some(image) => {
                eprintln!(
                    "warning: could not fetch the newest {kernel} kernel: {err:#}\n  using the cached {} instead",
                    image.package
                );
                Ok(image)
            }
            None => Err(err),
        },
    }
}

fn cached(kernel: Kernel) -> Option<KernelImage> {
    let dir = kernel.cache_dir();
    let package = fs::read_to_string(dir.join("package")).ok()?;
    let vmlinuz = dir.join("vmlinuz");
    vmlinuz.is_file().then(|| KernelImage {
        package: package.trim().to_owned(),
        vmlinuz,
    })
}

/// The newest package matching the series' pattern, refreshing apt's lists once if they know
/// none (a bare machine may never have run `apt-get update`).
fn newest_package(kernel: Kernel) -> Result<String> {
    if let Some(newest) = pick_newest(&apt_search(kernel)?) {
        return Ok(newest);
    }
    apt_update_once()?;
    pick_newest(&apt_search(kernel)?).with_context(|| {
        format!(
            "apt knows no package matching {} (the {kernel} cloud kernel)",
            kernel.package_pattern()
        )
    })
}

fn apt_search(kernel: Kernel) -> Result<String> {
    let mut search = Command::new("apt-cache");
    search.args(["search", "--names-only", kernel.package_pattern()]);
    util::stdout_of(&mut search).context("could not search apt's package lists")
}

/// Picks the newest package name from `apt-cache search` output (`name - description` lines):
/// the highest version numbers win, and the unsigned image wins a tie with the signed one
/// (both boot the same under qemu, the unsigned one has no shim dependencies).
fn pick_newest(search_output: &str) -> Option<String> {
    search_output
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .max_by_key(|name| (version_key(name), name.ends_with("-unsigned")))
        .map(str::to_owned)
}

/// The numbers in a package name, in order: `linux-image-6.1.0-57-cloud-amd64` → 6,1,0,57,64.
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter(|part| !part.is_empty())
        .filter_map(|part| part.parse().ok())
        .collect()
}

fn download(kernel: Kernel, package: &str) -> Result<KernelImage> {
    step(
        "kernel",
        &format!("{kernel}: fetching {package} (about 35 MB)"),
    );
    let dir = kernel.cache_dir();
    fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let work = tempfile::tempdir_in(&dir)
        .with_context(|| format!("could not create a scratch directory in {}", dir.display()))?;
    apt_download(package, work.path())?;
    let deb = find_file(work.path(), |name| name.ends_with(".deb"))?
        .with_context(|| format!("apt-get download {package} left no .deb file"))?;
    let root = work.path().join("root");
    let mut extract = Command::new("dpkg-deb");
    extract.arg("-x").arg(&deb).arg(&root);
    util::stdout_of(&mut extract).with_context(|| format!("could not unpack {}", deb.display()))?;
    let boot = root.join("boot");
    let vmlinuz = find_file(&boot, |name| name.starts_with("vmlinuz-"))?
        .with_context(|| format!("{package} has no boot/vmlinuz-*"))?;
    let image = KernelImage {
        package: package.to_owned(),
        vmlinuz: dir.join("vmlinuz"),
    };
    // Kept for reference (`grep CONFIG_KPROBES target/kernels/6.12/config`).
    if let Some(config) = find_file(&boot, |name| name.starts_with("config-"))? {
        fs::copy(&config, dir.join("config"))
            .with_context(|| format!("could not copy {}", config.display()))?;
    }
    fs::copy(&vmlinuz, &image.vmlinuz)
        .with_context(|| format!("could not copy {}", vmlinuz.display()))?;
    // Written last: its presence is what marks the cache complete.
    fs::write(dir.join("package"), format!("{package}\n"))
        .with_context(|| format!("could not write {}", dir.join("package").display()))?;
    println!("  ok ({})", image.vmlinuz.display());
    Ok(image)
}

fn apt_download(package: &str, dir: &Path) -> Result<()> {
    let mut cmd = Command::new("apt-get");
    cmd.args(["download", "-q", package]).current_dir(dir);
    if is_root() {
        // apt drops to the `_apt` user, who cannot write into our directory; it falls back
        // to root anyway, this just skips the warning.
        cmd.args(["-o", "APT::Sandbox::User=root"]);
    }
    util::stdout_of(&mut cmd)
        .map(drop)
        .with_context(|| format!("apt-get download {package} failed"))
}

/// The first file in `dir` whose name satisfies `matches` (sorted, so the choice is stable).
fn find_file(dir: &Path, matches: impl Fn(&str) -> bool) -> Result<Option<PathBuf>> {
    let mut found = fs::read_dir(dir)
        .with_context(|| format!("could not list {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(&matches)
        })
        .collect::<Vec<_>>();
    found.sort();
    Ok(found.into_iter().next())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_newest_6_1_abi_and_prefers_unsigned() {
        let search = "\
linux-image-6.1.0-9-cloud-amd64 - Linux 6.1 for x86-64 cloud (signed)
linux-image-6.1.0-57-cloud-amd64 - Linux 6.1 for x86-64 cloud (signed)
linux-image-6.1.0-57-cloud-amd64-unsigned - Linux 6.1 for x86-64 cloud
linux-image-6.1.0-56-cloud-amd64-unsigned - Linux 6.1 for x86-64 cloud
";
        assert_eq!(
            pick_newest(search).as_deref(),
            Some("linux-image-6.1.0-57-cloud-amd64-unsigned")
        );
    }

    #[test]
    fn picks_the_newest_6_12_point_release() {
        let search = "\
linux-image-6.12.99+deb12-cloud-amd64-unsigned - Linux 6.12 for x86-64 cloud
linux-image-6.12.117+deb12-cloud-amd64-unsigned - Linux 6.12 for x86-64 cloud
linux-image-6.12.107+deb12-cloud-amd64-unsigned - Linux 6.12 for x86-64 cloud
";
        assert_eq!(
            pick_newest(search).as_deref(),
            Some("linux-image-6.12.117+deb12-cloud-amd64-unsigned")
        );
    }

    #[test]
    fn nothing_found_is_none() {
        assert_eq!(pick_newest(""), None);
    }
}
