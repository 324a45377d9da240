//! The guest's root filesystem: an initramfs in the kernel's `newc` cpio format, written here
//! directly (no cpio or gzip run, no root needed for device nodes).
//!
//! It comes in two parts because the kernel unpacks concatenated cpio archives in order:
//! - the *base* image (busybox and the guest binaries, tens of MB) is cached in
//!   `target/vm/initramfs-base.cpio` and rebuilt only when one of its inputs changes;
//! - the *run* image (`/init` and the command to run, a few hundred bytes) is made per run and
//!   appended, so a new command never rebuilds the base.
//!
//! Each guest architecture has its own base image (`target/vm/aarch64/` for arm64) with its
//! own busybox: the host's busybox-static for x86_64, Debian's arm64 busybox-static fetched
//! through our apt state (`apt_state.rs`) into `target/busybox/aarch64/` for arm64.
//!
//! Archives are left uncompressed: the kernel unpacks plain cpio faster than it inflates gzip
//! under TCG, and the file is only read from local disk by qemu.

use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::apt_state;
use crate::arch::Arch;
use crate::build::GuestBinaries;
use crate::util::{self, secs, step, target_dir};

/// Where busybox-static installs its binary: the x86_64 guest's whole userland.
const BUSYBOX: &str = "/bin/busybox";

/// The busybox of `arch`'s guests: the host's own for x86_64; Debian's busybox-static for the
/// others, fetched through our apt state once and kept under `target/busybox/<arch>/`.
pub fn busybox(arch: Arch) -> Result<PathBuf> {
    let Some(subdir) = arch.subdir() else {
        let busybox = PathBuf::from(BUSYBOX);
        if !busybox.is_file() {
            bail!("{BUSYBOX} not found: install busybox-static (`cargo xtask setup` does)");
        }
        return Ok(busybox);
    };
    let dir = target_dir().join("busybox").join(subdir);
    let busybox = dir.join("bin").join("busybox");
    if busybox.is_file() {
        return Ok(busybox);
    }
    step(
        "busybox",
        &format!("fetching busybox-static for {}", arch.debian()),
    );
    fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let work = tempfile::tempdir_in(&dir)
        .with_context(|| format!("could not create a scratch directory in {}", dir.display()))?;
    apt_state::download("busybox-static", arch, work.path())?;
    let deb = fs::read_dir(work.path())
        .with_context(|| format!("could not list {}", work.path().display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .find(|path| path.extension().is_some_and(|ext| ext == "deb"))
        .context("apt-get download busybox-static left no .deb file")?;
    let root = work.path().join("root");
    util::stdout_of(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))
        .with_context(|| format!("could not unpack {}", deb.display()))?;
    // bookworm's package has it in bin/, later ones (merged /usr) in usr/bin/.
    let unpacked = ["bin/busybox", "usr/bin/busybox"]
        .map(|path| root.join(path))
        .into_iter()
        .find(|path| path.is_file())
        .with_context(|| format!("{} holds no busybox", deb.display()))?;
    fs::create_dir_all(dir.join("bin"))
        .with_context(|| format!("could not create {}", dir.join("bin").display()))?;
    // Copied aside and renamed, so a half-copied busybox never counts as fetched.
    let partial = dir.join("bin").join("busybox.partial");
    fs::copy(&unpacked, &partial)
        .and_then(|_| fs::rename(&partial, &busybox))
        .with_context(|| format!("could not copy {}", unpacked.display()))?;
    Ok(busybox)
}

/// Bumped whenever the base image's layout changes, to invalidate caches built by older code.
const BASE_FORMAT: u32 = 1;

const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFCHR: u32 = 0o020_000;
const S_IFLNK: u32 = 0o120_000;

/// An in-memory `newc` cpio archive.
#[derive(Default)]
pub struct Cpio {
    data: Vec<u8>,
    next_inode: u32,
}

impl Cpio {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn dir(&mut self, path: &str, perm: u32) {
        self.entry(path, S_IFDIR | perm, (0, 0), &[]);
    }

    pub fn file(&mut self, path: &str, perm: u32, contents: &[u8]) {
        self.entry(path, S_IFREG | perm, (0, 0), contents);
    }

    /// A symbolic link at `path` to `target` (the link's contents).
    pub fn symlink(&mut self, path: &str, target: &str) {
        self.entry(path, S_IFLNK | 0o777, (0, 0), target.as_bytes());
    }

    pub fn char_device(&mut self, path: &str, perm: u32, major: u32, minor: u32) {
        self.entry(path, S_IFCHR | perm, (major, minor), &[]);
    }

    /// Ends the archive with the `TRAILER!!!` entry and returns its bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.data
    }

    /// One entry: a 110-byte ASCII header of 8-digit hex fields, the NUL-terminated name and
    /// the contents, the last two each padded to a multiple of 4 bytes.
    fn entry(&mut self, path: &str, mode: u32, (rdev_major, rdev_minor): (u32, u32), body: &[u8]) {
        self.next_inode += 1;
        let name = path.trim_start_matches('/');
        let nlink = if mode & S_IFDIR != 0 { 2 } else { 1 };
        let fields = [
            self.next_inode,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime: fixed, so identical inputs give identical archives
            u32::try_from(body.len()).unwrap_or(u32::MAX),
            0, // dev major
            0, // dev minor
            rdev_major,
            rdev_minor,
            u32::try_from(name.len() + 1).unwrap_or(u32::MAX),
            0, // check
        ];
        self.data.extend_from_slice(b"070701");
        for field in fields {
            self.data
                .extend_from_slice(format!("{field:08X}").as_bytes());
        }
        self.data.extend_from_slice(name.as_bytes());
        self.data.push(0);
        self.pad();
        self.data.extend_from_slice(body);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.data.len().is_multiple_of(4) {
            self.data.push(0);
        }
    }
}

/// Returns `arch`'s cached base image, rebuilding it when busybox or a guest binary changed.
pub fn base_image(binaries: &GuestBinaries, arch: Arch) -> Result<PathBuf> {
    let mut inputs = vec![busybox(arch)?];
    inputs.extend(binaries.paths.iter().cloned());
    for path in &binaries.paths {
        if path.file_name().is_some_and(|name| name == "busybox") {
            bail!(
                "a guest binary may not be called busybox: {}",
                path.display()
            );
        }
    }

    let mut dir = target_dir().join("vm");
    if let Some(subdir) = arch.subdir() {
        dir.push(subdir);
    }
    fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let image = dir.join("initramfs-base.cpio");
    let stamp_path = dir.join("initramfs-base.stamp");
    let stamp = fingerprint(&inputs)?;
    if image.is_file() && fs::read_to_string(&stamp_path).is_ok_and(|old| old == stamp) {
        return Ok(image);
    }

    let started = Instant::now();
    let mut cpio = Cpio::new();
    for (dir, perm) in [
        ("bin", 0o755),
        ("dev", 0o755),
        ("etc", 0o755),
        ("out", 0o755),
        ("proc", 0o555),
        ("root", 0o700),
        ("run", 0o755),
        ("sys", 0o555),
        ("tmp", 0o1777),
    ] {
        cpio.dir(dir, perm);
    }
    // The kernel opens /dev/console for init's stdio before init can mount devtmpfs.
    cpio.char_device("dev/console", 0o600, 5, 1);
    for path in &inputs {
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .with_context(|| format!("{} has no usable file name", path.display()))?;
        let contents =
            fs::read(path).with_context(|| format!("could not read {}", path.display()))?;
        cpio.file(&format!("bin/{name}"), 0o755, &contents);
    }
    let bytes = cpio.finish();
    // Written aside and renamed into place, so a concurrent run never reads half an image.
    let mut partial = tempfile::NamedTempFile::new_in(&dir)
        .with_context(|| format!("could not create a file in {}", dir.display()))?;
    partial
        .write_all(&bytes)
        .with_context(|| format!("could not write {}", partial.path().display()))?;
    partial
        .persist(&image)
        .with_context(|| format!("could not write {}", image.display()))?;
    fs::write(&stamp_path, stamp)
        .with_context(|| format!("could not write {}", stamp_path.display()))?;
    let names = inputs
        .iter()
        .filter_map(|path| path.file_name().map(|name| name.to_string_lossy()))
        .collect::<Vec<_>>();
    step(
        "initramfs",
        &format!(
            "base image: {} ({:.1} MB) in {}",
            names.join(" "),
            bytes.len() as f64 / 1e6,
            secs(started.elapsed())
        ),
    );
    Ok(image)
}

/// Identifies the base image's inputs by path, size and modification time: cheap to compute on
/// every run, and cargo rewrites a binary whenever it relinks it.
pub fn fingerprint(inputs: &[PathBuf]) -> Result<String> {
    let mut hasher = DefaultHasher::new();
    BASE_FORMAT.hash(&mut hasher);
    for path in inputs {
        let meta =
            fs::metadata(path).with_context(|| format!("could not stat {}", path.display()))?;
        (path, meta.len(), meta.mtime(), meta.mtime_nsec()).hash(&mut hasher);
    }
    Ok(format!("{:016x}\n", hasher.finish()))
}

/// Where the run image puts the kernel's modules for the guest's `/init` to load.
pub const MODULES_DIR: &str = "lib/xtask-modules";

/// Where the run image puts the modules a scenario may load itself (not loaded at boot).
pub const LOADABLE_DIR: &str = "lib/xtask-loadable";

/// Writes the initrd for one run: the base image, the extra layers, then an archive holding
/// `/init`, `/run/cmd.sh`, and the kernel's modules by file name: `boot_modules` under
/// [`MODULES_DIR`], `loadable` under [`LOADABLE_DIR`].
pub fn write_run_image(
    base: &Path,
    extra_layers: &[PathBuf],
    (init, script): (&str, &str),
    (boot_modules, loadable): (&[PathBuf], &[PathBuf]),
    dest: &Path,
) -> Result<()> {
    let mut cpio = Cpio::new();
    cpio.file("init", 0o755, init.as_bytes());
    cpio.file("run/cmd.sh", 0o644, script.as_bytes());
    if !boot_modules.is_empty() || !loadable.is_empty() {
        cpio.dir("lib", 0o755);
    }
    for (dir, modules) in [(MODULES_DIR, boot_modules), (LOADABLE_DIR, loadable)] {
        if !modules.is_empty() {
            cpio.dir(dir, 0o755);
        }
        for module in modules {
            let name = module
                .file_name()
                .and_then(|name| name.to_str())
                .with_context(|| format!("{} has no usable file name", module.display()))?;
            let contents =
                fs::read(module).with_context(|| format!("could not read {}", module.display()))?;
            cpio.file(&format!("{dir}/{name}"), 0o644, &contents);
        }
    }
    let run = cpio.finish();
    fs::copy(base, dest)
        .with_context(|| format!("could not copy {} to {}", base.display(), dest.display()))?;
    for layer in extra_layers {
        let mut reader = fs::File::open(layer)
            .with_context(|| format!("could not open the initramfs layer {}", layer.display()))?;
        fs::OpenOptions::new()
            .append(true)
            .open(dest)
            .and_then(|mut file| std::io::copy(&mut reader, &mut file))
            .with_context(|| {
                format!("could not append {} to {}", layer.display(), dest.display())
            })?;
    }
    fs::OpenOptions::new()
        .append(true)
        .open(dest)
        .and_then(|mut file| file.write_all(&run))
        .with_context(|| format!("could not append the run archive to {}", dest.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_newc_and_aligned() {
        let mut cpio = Cpio::new();
        cpio.file("/init", 0o755, b"#!/bin/sh\n");
        let bytes = cpio.finish();
        assert!(bytes.starts_with(b"070701"));
        assert_eq!(bytes.len() % 4, 0);
        let header = std::str::from_utf8(&bytes[..110]).expect("ASCII header");
        // mode, then file size, then name size (with its NUL), as 8 hex digits each.
        assert_eq!(&header[14..22], "000081ED");
        assert_eq!(&header[54..62], "0000000A");
        assert_eq!(&header[94..102], "00000005");
        assert_eq!(&bytes[110..115], b"init\0");
        let trailer = bytes.windows(10).position(|window| window == b"TRAILER!!!");
        assert!(trailer.is_some());
    }

    #[test]
    fn host_cpio_lists_what_we_wrote() {
        // The authoritative reader is the kernel; GNU cpio (from setup) is the next best.
        let cpio_bin = Path::new("/usr/bin/cpio");
        if !cpio_bin.is_file() {
            return;
        }
        let mut cpio = Cpio::new();
        cpio.dir("bin", 0o755);
        cpio.file("bin/hello", 0o755, b"hi");
        cpio.char_device("dev/console", 0o600, 5, 1);
        let bytes = cpio.finish();
        let mut child = std::process::Command::new(cpio_bin)
            .args(["-t", "--quiet"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("cpio starts");
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(&bytes)
            .expect("cpio reads the archive");
        let out = child.wait_with_output().expect("cpio finishes");
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "bin\nbin/hello\ndev/console\n"
        );
    }
}
