//! The guest kernels: Debian's kernels, fetched with `apt-get download` through an apt state of
//! our own (`apt_state.rs`) and cached under `target/kernels/<name>/`.
//!
//! They are used because they have everything hotprof needs built in (kprobes, BTF, tracefs,
//! audit, the 8250 serial driver), so the guest needs no modules to boot (arm64's 6.1 aside:
//! [`Arch::port_modules`]); a few are kept for scenarios that probe a module's functions
//! ([`LOADABLE_MODULES`]). Their package names change
//! with each security update, so the newest package matching a pattern is resolved every time
//! (a local `apt-cache` query) and the cache is refreshed when a newer one appears.
//!
//! Each series exists for each guest [`Arch`]: x86_64's cache is `target/kernels/<name>/`,
//! arm64's `target/kernels/aarch64/<name>/` (Debian's arm64 `vmlinuz` is a plain `Image`,
//! which qemu's `-kernel` boots as it is; x86's bzImage is booted unpacked: [`pvh`]).

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context, Result};

use crate::apt_state;
use crate::arch::Arch;
use crate::util::{self, step, target_dir};

mod pvh;

/// A kernel series the VM tests run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Kernel {
    /// Debian 12's backported 6.12: has `__audit_filter_op`, fentry works.
    #[value(name = "6.12")]
    V6_12,
    /// sid's newest 7.x cloud kernel (7.2 when this was written).
    #[value(name = "7.x", alias = "7.2")]
    V7,
    /// Debian 12's own 6.1: without `__audit_filter_op`.
    #[value(name = "6.1")]
    V6_1,
    /// Debian 11's 5.10: no task-local storage (5.11), no `bpf_get_func_ip` (5.15).
    #[value(name = "5.10")]
    V5_10,
    /// sid's newest 7.x with PREEMPT_RT.
    #[value(name = "7.x-rt", alias = "7.2-rt")]
    V7Rt,
}

impl Kernel {
    /// In the order the test suite runs them: the two that get every scenario first.
    pub const ALL: [Kernel; 5] = [
        Kernel::V6_12,
        Kernel::V7,
        Kernel::V6_1,
        Kernel::V5_10,
        Kernel::V7Rt,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::V6_12 => "6.12",
            Kernel::V7 => "7.x",
            Kernel::V6_1 => "6.1",
            Kernel::V5_10 => "5.10",
            Kernel::V7Rt => "7.x-rt",
        }
    }

    /// `apt-cache search --names-only` pattern for this series' packages of `arch`. sid
    /// ships the image alone in `linux-binary-unsigned-*` (arm64's may be signed:
    /// `linux-binary-*`); the older suites in `linux-image-*`.
    fn package_pattern(self, arch: Arch) -> String {
        let debian = arch.debian();
        let binary = match arch {
            Arch::X86_64 => "linux-binary-unsigned-",
            Arch::Aarch64 => "linux-binary-(unsigned-)?",
        };
        match self {
            Kernel::V6_12 => {
                format!(r"^linux-image-6\.12\.[0-9]+\+deb12-cloud-{debian}-unsigned$")
            }
            Kernel::V7 => format!(r"^{binary}7\.[0-9]+\.[0-9]+\+deb[0-9]+-cloud-{debian}$"),
            Kernel::V6_1 => format!(r"^linux-image-6\.1\.0-[0-9]+-cloud-{debian}(-unsigned)?$"),
            Kernel::V5_10 => {
                format!(r"^linux-image-5\.10\.0-[0-9]+-cloud-{debian}(-unsigned)?$")
            }
            Kernel::V7Rt => format!(r"^{binary}7\.[0-9]+\.[0-9]+\+deb[0-9]+-rt-{debian}$"),
        }
    }

    fn cache_dir(self, arch: Arch) -> PathBuf {
        let kernels = target_dir().join("kernels");
        match arch.subdir() {
            Some(subdir) => kernels.join(subdir).join(self.name()),
            None => kernels.join(self.name()),
        }
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
    /// What qemu's `-kernel` loads: `vmlinuz`, or on x86 the `vmlinux` unpacked from it.
    pub boot: PathBuf,
    /// The modules of [`Arch::port_modules`] the package ships (none where they are built
    /// in), in load order.
    pub modules: Vec<PathBuf>,
    /// The modules of [`LOADABLE_MODULES`] the package ships, uncompressed: in the guest,
    /// not loaded, for scenarios to load and unload.
    pub loadable: Vec<PathBuf>,
}

/// Modules a scenario may load and unload in the guest (`insmod
/// /lib/xtask-loadable/dummy.ko`): `dummy`'s transmit function runs once per packet sent
/// through its device, in the sender's context, which makes its calls countable.
pub const LOADABLE_MODULES: &[&str] = &["dummy"];

/// How many packages, newest first, are tried before giving up: a mirror can list a package
/// it does not serve (seen: bullseye-security's newest `-unsigned` 5.10 image, 404).
const CANDIDATES_TRIED: usize = 4;

/// Returns the newest kernel of the series that the mirror serves, downloading it if the cache
/// does not hold it. When apt cannot tell or fetch anything newer but an older download is
/// cached, that one is used with a warning, so a flaky mirror does not stop offline work.
/// One at a time in this process (the suite fetches in the background too).
pub fn ensure(kernel: Kernel, arch: Arch) -> Result<KernelImage> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one_at_a_time = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    let cached = cached(kernel, arch);
    // A stale package list names versions the mirror already dropped: on failure, refresh
    // the lists once and look again.
    let fetched = fetch_newest(kernel, arch, cached.as_ref()).or_else(|first| {
        apt_state::update(true, arch).context(format!("{first:#}"))?;
        fetch_newest(kernel, arch, cached.as_ref())
    });
    let mut image = match (fetched, cached) {
        (Ok(image), _) => image,
        (Err(err), Some(image)) => {
            eprintln!(
                "warning: could not fetch the newest {kernel} kernel: {err:#}\n  using the cached {} instead",
                image.package
            );
            image
        }
        (Err(err), None) => return Err(err),
    };
    image.boot = bootable(&image.vmlinuz, arch)?;
    Ok(image)
}

/// The newest candidate the cache holds or the mirror serves.
fn fetch_newest(kernel: Kernel, arch: Arch, cached: Option<&KernelImage>) -> Result<KernelImage> {
    let candidates = candidates(kernel, arch)?;
    let mut failures = Vec::new();
    for package in candidates.iter().take(CANDIDATES_TRIED) {
        // The signed and unsigned images of one version boot the same under qemu.
        if let Some(image) = cached.filter(|image| same_version(&image.package, package)) {
            return Ok(image.clone());
        }
        match download(kernel, arch, package) {
            Ok(image) => return Ok(image),
            Err(err) => {
                eprintln!("note: {err:#}");
                failures.push(package.as_str());
            }
        }
    }
    anyhow::bail!(
        "the mirror served none of the newest {kernel} kernels: {}",
        failures.join(", ")
    )
}

/// Packages matching the series' pattern, newest first, refreshing our lists once if they
/// know none (the suite may have moved on since they were fetched).
fn candidates(kernel: Kernel, arch: Arch) -> Result<Vec<String>> {
    let pattern = kernel.package_pattern(arch);
    let mut found = newest_first(&apt_state::search(&pattern, arch)?);
    if found.is_empty() {
        apt_state::update(true, arch)?;
        found = newest_first(&apt_state::search(&pattern, arch)?);
    }
    if found.is_empty() {
        anyhow::bail!("apt knows no package matching {pattern} (the {kernel} kernel, {arch})");
    }
    Ok(found)
}

fn cached(kernel: Kernel, arch: Arch) -> Option<KernelImage> {
    let dir = kernel.cache_dir(arch);
    let package = fs::read_to_string(dir.join("package")).ok()?;
    let vmlinuz = dir.join("vmlinuz");
    // A cache made before modules were kept has no modules directory: fetched again.
    let modules = if arch.port_modules().is_empty() {
        Vec::new()
    } else {
        cached_modules(&dir.join("modules")).ok()?
    };
    let loadable = cached_modules(&dir.join("loadable")).ok()?;
    vmlinuz.is_file().then(|| KernelImage {
        package: package.trim().to_owned(),
        boot: vmlinuz.clone(),
        vmlinuz,
        modules,
        loadable,
    })
}

/// The file qemu boots for `vmlinuz`: on x86 the `vmlinux` unpacked from it beside it (made
/// on first use, [`pvh`]), else `vmlinuz` itself.
fn bootable(vmlinuz: &Path, arch: Arch) -> Result<PathBuf> {
    if !arch.boots_unpacked_kernel() {
        return Ok(vmlinuz.to_owned());
    }
    let vmlinux = vmlinuz.with_file_name("vmlinux");
    let modified = |path: &Path| fs::metadata(path).and_then(|meta| meta.modified()).ok();
    if modified(&vmlinux).is_some_and(|unpacked| Some(unpacked) >= modified(vmlinuz)) {
        return Ok(vmlinux);
    }
    pvh::unpack(vmlinuz, &vmlinux)
        .with_context(|| format!("could not unpack {} to boot it", vmlinuz.display()))?;
    Ok(vmlinux)
}

/// The kept modules, in load order (their names start with their place in it).
fn cached_modules(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut modules = fs::read_dir(dir)
        .with_context(|| format!("could not list {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .collect::<Vec<_>>();
    modules.sort();
    Ok(modules)
}

/// Copies the modules `names` that the unpacked package under `root` has into `dest`,
/// uncompressed (busybox's `insmod` reads plain ELF; Debian compresses modules with xz since
/// 6.x), named `NN-name.ko` in load order when `numbered`, `name.ko` otherwise. Empties `dest`
/// first.
fn keep_modules(root: &Path, names: &[&str], dest: &Path, numbered: bool) -> Result<()> {
    if dest.exists() {
        fs::remove_dir_all(dest).with_context(|| format!("could not empty {}", dest.display()))?;
    }
    fs::create_dir_all(dest).with_context(|| format!("could not create {}", dest.display()))?;
    let mut found = Vec::new();
    for base in ["lib/modules", "usr/lib/modules"] {
        collect_files(&root.join(base), &mut found)?;
    }
    for (index, name) in names.iter().enumerate() {
        let file = format!("{name}.ko");
        let kept = match numbered {
            true => dest.join(format!("{index:02}-{file}")),
            false => dest.join(&file),
        };
        if let Some(module) = found.iter().find(|path| path.ends_with(&file)) {
            fs::copy(module, &kept)
                .with_context(|| format!("could not copy {}", module.display()))?;
        } else if let Some(module) = found
            .iter()
            .find(|path| path.ends_with(format!("{file}.xz")))
        {
            let compressed = dest.join(format!("{file}.xz"));
            fs::copy(module, &compressed)
                .with_context(|| format!("could not copy {}", module.display()))?;
            util::run(Command::new("xz").arg("--decompress").arg(&compressed))?;
        }
    }
    Ok(())
}

/// Every file under `dir` (none if it does not exist).
fn collect_files(dir: &Path, found: &mut Vec<PathBuf>) -> Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    for entry in fs::read_dir(dir).with_context(|| format!("could not list {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(&path, found)?;
        } else {
            found.push(path);
        }
    }
    Ok(())
}

/// Package names from `apt-cache search` output (`name - description` lines), newest first:
/// the highest version numbers win, and the unsigned image goes before the signed one of the
/// same version (both boot the same under qemu, the unsigned one has no shim dependencies).
fn newest_first(search_output: &str) -> Vec<String> {
    let mut names = search_output
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect::<Vec<_>>();
    names.sort_by_key(|name| (version_key(name), name.ends_with("-unsigned")));
    names.reverse();
    names
}

/// Whether two package names are the same kernel version (signed or not).
fn same_version(a: &str, b: &str) -> bool {
    version_key(a) == version_key(b)
}

/// The numbers in a package name, in order: `linux-image-6.1.0-57-cloud-amd64` → 6,1,0,57,64.
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter(|part| !part.is_empty())
        .filter_map(|part| part.parse().ok())
        .collect()
}

fn download(kernel: Kernel, arch: Arch, package: &str) -> Result<KernelImage> {
    let modules_package = modules_package(package, arch);
    let also = modules_package
        .as_ref()
        .map_or(String::new(), |modules| format!(" and {modules}"));
    step("kernel", &format!("{kernel}: fetching {package}{also}"));
    let dir = kernel.cache_dir(arch);
    fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let work = tempfile::tempdir_in(&dir)
        .with_context(|| format!("could not create a scratch directory in {}", dir.display()))?;
    let packages: Vec<&str> = [Some(package), modules_package.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    apt_state::download_all(&packages, arch, work.path())?;
    let root = work.path().join("root");
    for deb in fs::read_dir(work.path())
        .with_context(|| format!("could not list {}", work.path().display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "deb"))
    {
        let mut extract = Command::new("dpkg-deb");
        extract.arg("-x").arg(&deb).arg(&root);
        util::stdout_of(&mut extract)
            .with_context(|| format!("could not unpack {}", deb.display()))?;
    }
    let boot = root.join("boot");
    let in_boot = if boot.is_dir() {
        find_file(&boot, |name| name.starts_with("vmlinuz-"))?
    } else {
        None
    };
    let vmlinuz = match in_boot {
        Some(vmlinuz) => vmlinuz,
        // sid's linux-binary-unsigned-*: usr/lib/modules/VERSION/vmlinuz.unsigned.
        None => modules_image(&root.join("usr/lib/modules"))?
            .with_context(|| format!("{package} has no boot/vmlinuz-* nor a modules image"))?,
    };
    let modules_dir = dir.join("modules");
    if !arch.port_modules().is_empty() {
        keep_modules(&root, arch.port_modules(), &modules_dir, true)?;
    }
    let loadable_dir = dir.join("loadable");
    keep_modules(&root, LOADABLE_MODULES, &loadable_dir, false)?;
    let mut image = KernelImage {
        package: package.to_owned(),
        vmlinuz: dir.join("vmlinuz"),
        boot: dir.join("vmlinuz"),
        modules: Vec::new(),
        loadable: cached_modules(&loadable_dir)?,
    };
    if !arch.port_modules().is_empty() {
        image.modules = cached_modules(&modules_dir)?;
    }
    // Kept for reference (`grep CONFIG_KPROBES target/kernels/6.12/config`); sid's image
    // package carries none.
    if boot.is_dir()
        && let Some(config) = find_file(&boot, |name| name.starts_with("config-"))?
    {
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

/// The package holding the [`LOADABLE_MODULES`] of sid's split kernel packages
/// (`linux-binary-unsigned-7.2.13+deb14-cloud-amd64` → `linux-modules-7.2.13+deb14-cloud-amd64`,
/// 23 MB); Debian 11 and 12's images carry their modules themselves. Only where a scenario
/// loads them (x86-64's cloud kernels): the rt flavour's modules are every driver's (108 MB).
fn modules_package(image: &str, arch: Arch) -> Option<String> {
    if arch != Arch::X86_64 || !image.contains("-cloud-") {
        return None;
    }
    ["linux-binary-unsigned-", "linux-binary-"]
        .iter()
        .find_map(|prefix| image.strip_prefix(prefix))
        .map(|rest| format!("linux-modules-{rest}"))
}

/// The image in `usr/lib/modules/VERSION/` (`vmlinuz` or `vmlinuz.unsigned`), if any.
fn modules_image(modules: &Path) -> Result<Option<PathBuf>> {
    if !modules.is_dir() {
        return Ok(None);
    }
    let Some(version) = find_file(modules, |_| true)? else {
        return Ok(None);
    };
    find_file(&version, |name| name.starts_with("vmlinuz"))
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
            newest_first(search).first().map(String::as_str),
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
            newest_first(search).first().map(String::as_str),
            Some("linux-image-6.12.117+deb12-cloud-amd64-unsigned")
        );
    }

    #[test]
    fn picks_the_newest_sid_7_x_image() {
        let search = "\
linux-binary-unsigned-7.2.9+deb14-cloud-amd64 - Linux 7.2.9 for x86-64 cloud (unsigned kernel image)
linux-binary-unsigned-7.2.13+deb14-cloud-amd64 - Linux 7.2.13 for x86-64 cloud (unsigned kernel image)
linux-binary-unsigned-7.10.1+deb14-cloud-amd64 - Linux 7.10.1 for x86-64 cloud (unsigned kernel image)
";
        assert_eq!(
            newest_first(search).first().map(String::as_str),
            Some("linux-binary-unsigned-7.10.1+deb14-cloud-amd64")
        );
    }

    #[test]
    fn sid_cloud_images_on_x86_have_their_modules_fetched_from_their_own_package() {
        assert_eq!(
            modules_package(
                "linux-binary-unsigned-7.2.13+deb14-cloud-amd64",
                Arch::X86_64
            )
            .as_deref(),
            Some("linux-modules-7.2.13+deb14-cloud-amd64")
        );
        for (image, arch) in [
            (
                "linux-image-6.12.117+deb12-cloud-amd64-unsigned",
                Arch::X86_64,
            ),
            ("linux-binary-unsigned-7.2.13+deb14-rt-amd64", Arch::X86_64),
            (
                "linux-binary-unsigned-7.2.13+deb14-cloud-arm64",
                Arch::Aarch64,
            ),
        ] {
            assert_eq!(modules_package(image, arch), None, "{image}");
        }
    }

    #[test]
    fn every_kernel_has_its_own_name_and_cache() {
        let mut names = Kernel::ALL.map(Kernel::name).to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Kernel::ALL.len());
    }

    #[test]
    fn each_architecture_has_its_own_packages_and_cache() {
        for kernel in Kernel::ALL {
            assert!(kernel.package_pattern(Arch::X86_64).contains("-amd64"));
            assert!(kernel.package_pattern(Arch::Aarch64).contains("-arm64"));
            assert_eq!(
                kernel.cache_dir(Arch::X86_64),
                target_dir().join("kernels").join(kernel.name())
            );
            assert_ne!(
                kernel.cache_dir(Arch::X86_64),
                kernel.cache_dir(Arch::Aarch64)
            );
        }
        assert_eq!(
            Kernel::V6_12.package_pattern(Arch::Aarch64),
            r"^linux-image-6\.12\.[0-9]+\+deb12-cloud-arm64-unsigned$"
        );
    }

    #[test]
    fn nothing_found_is_empty() {
        assert!(newest_first("").is_empty());
    }

    #[test]
    fn the_signed_image_follows_the_unsigned_one_of_its_version() {
        let search = "\
linux-image-5.10.0-45-cloud-amd64-unsigned - Linux 5.10 for x86-64 cloud
linux-image-5.10.0-46-cloud-amd64 - Linux 5.10 for x86-64 cloud (signed)
linux-image-5.10.0-46-cloud-amd64-unsigned - Linux 5.10 for x86-64 cloud
";
        assert_eq!(
            newest_first(search),
            [
                "linux-image-5.10.0-46-cloud-amd64-unsigned",
                "linux-image-5.10.0-46-cloud-amd64",
                "linux-image-5.10.0-45-cloud-amd64-unsigned",
            ]
        );
        assert!(same_version(
            "linux-image-5.10.0-46-cloud-amd64",
            "linux-image-5.10.0-46-cloud-amd64-unsigned"
        ));
    }
}
