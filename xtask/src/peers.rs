//! Peers from Debian sid in the busybox guests, with their own libraries: a package's
//! dependency closure, resolved and downloaded through the project's apt state
//! (`apt_state::closure`), unpacked under `/opt/sid` in a guest layer, and a wrapper in `/bin`
//! per program that runs it through sid's own dynamic loader with sid's library directories,
//! so that nothing else in the guest sees those libraries (the bench layer's x86-64 bpftrace
//! keeps the host's).
//!
//! Cached under `target/peers/<arch>/`: the .debs by name and version, the layer by the exact
//! list of packages it holds (sid moves daily; a new version rebuilds it).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::apt_state;
use crate::arch::Arch;
use crate::initramfs::Cpio;
use crate::util::{self, fresh_dir, step, target_dir};

/// Where the packages' files are unpacked in the guest.
const PREFIX: &str = "/opt/sid";

/// A program from a sid package, and the name its wrapper has in the guest's `/bin`.
pub struct Peer {
    pub package: &'static str,
    /// The wrapper's name in `/bin`.
    pub command: &'static str,
    /// The program inside the package's tree.
    pub path: &'static str,
    pub closure: Closure,
}

/// Which of a package's dependencies the layer holds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Closure {
    /// Everything `apt-get install` would install.
    Whole,
    /// The package and the shared-library packages (`lib*`) of its closure: for a program that
    /// depends on interpreters it only runs for features the bench does not use (perf's perl
    /// and python scripts: 112 MB unpacked instead of ~250).
    Libraries,
}

/// sid's bpftrace, beside the host's (`bpftrace`) in the x86-64 bench guests.
pub const SID_BPFTRACE: &str = "bpftrace-sid";
/// sid's libbpf-tools `funclatency`.
pub const SID_FUNCLATENCY: &str = "funclatency";
/// sid's linux-perf.
pub const SID_PERF: &str = "perf";

pub const BPFTRACE: Peer = Peer {
    package: "bpftrace",
    command: SID_BPFTRACE,
    path: "usr/bin/bpftrace",
    closure: Closure::Whole,
};

pub const FUNCLATENCY: Peer = Peer {
    package: "libbpf-tools",
    command: SID_FUNCLATENCY,
    path: "usr/sbin/funclatency-libbpf",
    closure: Closure::Whole,
};

/// Debian builds it without BPF skeletons (`perf version --build-options`: `bpf_skeletons:
/// OFF`), so `perf ftrace latency` has no `--use-bpf` there: it times through ftrace's
/// function_graph tracer.
pub const PERF: Peer = Peer {
    package: "linux-perf",
    command: SID_PERF,
    path: "usr/bin/perf",
    closure: Closure::Libraries,
};

/// Every peer, for a guest that runs them all (`cargo xtask vm --peers`, the peers scenario).
pub const ALL: [Peer; 3] = [BPFTRACE, FUNCLATENCY, PERF];

/// A built layer and what is in it.
pub struct PeerLayer {
    pub cpio: PathBuf,
    /// `package version` of each peer's own package, e.g. `bpftrace 0.27.1-1`.
    pub versions: Vec<String>,
    /// The packages unpacked, as the layer holds them under [`PREFIX`].
    root: PathBuf,
    arch: Arch,
}

impl PeerLayer {
    /// A directory of wrappers that run each peer of `peers` on this machine from the
    /// unpacked packages, through sid's loader and libraries as in the guest, by the name it
    /// has there (`bpftrace-sid`, `funclatency`, `perf`): for a layer of the host's
    /// architecture, put first in a `PATH`.
    pub fn host_bin_dir(&self, peers: &[Peer]) -> Result<PathBuf> {
        let bin = self.root.with_file_name("host-bin");
        fs::create_dir_all(&bin).with_context(|| format!("could not create {}", bin.display()))?;
        let root = self.root.to_string_lossy();
        let loader = find_loader(&self.root, self.arch)?;
        for peer in peers {
            let wrapper = bin.join(peer.command);
            let script = format!(
                "#!/bin/sh\nexec {root}/{loader} --library-path {} {root}/{} \"$@\"\n",
                library_path(&root, self.arch),
                peer.path
            );
            fs::write(&wrapper, script)
                .and_then(|()| fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)))
                .with_context(|| format!("could not write {}", wrapper.display()))?;
        }
        Ok(bin)
    }
}

/// The library directories of a tree unpacked at `prefix`, for the loader's `--library-path`.
fn library_path(prefix: &str, arch: Arch) -> String {
    [
        format!("{prefix}/usr/lib/{}", arch.triplet()),
        format!("{prefix}/lib/{}", arch.triplet()),
        format!("{prefix}/usr/lib"),
    ]
    .join(":")
}

/// The layer holding `peers` for `arch` guests, built unless the cached one holds exactly the
/// packages sid resolves to today.
pub fn layer(arch: Arch, peers: &[Peer]) -> Result<PeerLayer> {
    let dir = target_dir().join("peers").join(arch.name());
    let debs = dir.join("debs");
    fs::create_dir_all(&debs).with_context(|| format!("could not create {}", debs.display()))?;
    // Scenarios on two kernels at once ask for the layer together: one builds, the other waits
    // and then finds it built. Released when `_lock` is dropped.
    let lock_path = dir.join("layer.lock");
    let _lock = fs::File::create(&lock_path)
        .and_then(|file| file.lock().map(|()| file))
        .with_context(|| format!("could not lock {}", lock_path.display()))?;
    let mut packages = BTreeSet::new();
    let mut versions = Vec::new();
    for peer in peers {
        let closure = apt_state::closure(&format!("{}/sid", peer.package), arch)?;
        let own = closure
            .iter()
            .find_map(|spec| spec.strip_prefix(&format!("{}=", peer.package)))
            .with_context(|| format!("{} is not in its own closure", peer.package))?;
        versions.push(format!("{} {own}", peer.package));
        let own_package = format!("{}=", peer.package);
        packages.extend(closure.into_iter().filter(|spec| {
            peer.closure == Closure::Whole
                || spec.starts_with("lib")
                || spec.starts_with(&own_package)
        }));
    }
    let mut stamp = format!("{PREFIX}\n");
    for peer in peers {
        let whole = peer.closure == Closure::Whole;
        let _ = writeln!(
            stamp,
            "{} {} {} {whole}",
            peer.package, peer.command, peer.path
        );
    }
    for package in &packages {
        let _ = writeln!(stamp, "{package}");
    }
    let cpio_path = dir.join("layer.cpio");
    let stamp_path = dir.join("layer.stamp");
    let root = dir.join("root");
    if cpio_path.is_file()
        && root.is_dir()
        && fs::read_to_string(&stamp_path).is_ok_and(|old| old == stamp)
    {
        return Ok(PeerLayer {
            cpio: cpio_path,
            versions,
            root,
            arch,
        });
    }
    fresh_dir(&root)?;
    let mut missing = Vec::new();
    for package in &packages {
        if find_deb(&debs, package)?.is_none() {
            missing.push(package.as_str());
        }
    }
    apt_state::download_all(&missing, arch, &debs)?;
    for package in &packages {
        let deb = find_deb(&debs, package)?
            .with_context(|| format!("apt-get download {package} wrote no .deb"))?;
        util::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
    }
    let loader = find_loader(&root, arch)?;
    let mut cpio = Cpio::new();
    for dir in ["opt", PREFIX.trim_start_matches('/')] {
        cpio.dir(dir, 0o755);
    }
    let files = pack_tree(&mut cpio, &root, &root)?;
    let library_path = library_path(PREFIX, arch);
    for peer in peers {
        if !root.join(peer.path).is_file() {
            bail!("{} has no {}", peer.package, peer.path);
        }
        let wrapper = format!(
            "#!/bin/sh\nexec {PREFIX}/{loader} --library-path {library_path} {PREFIX}/{} \"$@\"\n",
            peer.path
        );
        cpio.file(&format!("bin/{}", peer.command), 0o755, wrapper.as_bytes());
    }
    let bytes = cpio.finish();
    fs::write(&cpio_path, &bytes)
        .with_context(|| format!("could not write {}", cpio_path.display()))?;
    fs::write(&stamp_path, &stamp)
        .with_context(|| format!("could not write {}", stamp_path.display()))?;
    step(
        "peers",
        &format!(
            "{} layer: {} ({} packages, {files} files, {:.0} MB)",
            arch.name(),
            versions.join(", "),
            packages.len(),
            bytes.len() as f64 / 1e6
        ),
    );
    Ok(PeerLayer {
        cpio: cpio_path,
        versions,
        root,
        arch,
    })
}

/// The downloaded .deb of `name=version`: apt names it `name_version_arch.deb`, the epoch's
/// colon written `%3a`.
fn find_deb(debs: &Path, spec: &str) -> Result<Option<PathBuf>> {
    let (name, version) = spec.split_once('=').unwrap_or((spec, ""));
    let prefix = format!("{name}_{}_", version.replace(':', "%3a"));
    for entry in fs::read_dir(debs).with_context(|| format!("could not read {}", debs.display()))? {
        let path = entry?.path();
        let file = path
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        if file.starts_with(&prefix) && file.ends_with(".deb") {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// glibc's loader in the unpacked tree, relative to it (sid ships it under `usr/lib`).
fn find_loader(root: &Path, arch: Arch) -> Result<String> {
    let name = arch.dynamic_loader();
    let candidates = [
        format!("usr/lib/{name}"),
        format!("usr/lib64/{name}"),
        format!("usr/lib/{}/{name}", arch.triplet()),
        format!("lib/{name}"),
        format!("lib64/{name}"),
    ];
    candidates
        .into_iter()
        .find(|path| root.join(path).exists())
        .with_context(|| format!("libc6 from sid has no {name} where it was looked for"))
}

/// Adds `dir`'s tree under [`PREFIX`]: directories, files with their permissions, symbolic
/// links with absolute targets moved under the prefix too. Returns the number of files.
fn pack_tree(cpio: &mut Cpio, root: &Path, dir: &Path) -> Result<usize> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .with_context(|| format!("could not read {}", dir.display()))?
        .collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|entry| entry.file_name());
    let mut files = 0;
    for entry in entries {
        let path = entry.path();
        let relative = path.strip_prefix(root).unwrap_or(&path).to_string_lossy();
        let inside = format!("{PREFIX}/{relative}");
        let meta = fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&path)?;
            let target = target.to_string_lossy();
            let target = match target.strip_prefix('/') {
                Some(absolute) => format!("{PREFIX}/{absolute}"),
                None => target.into_owned(),
            };
            cpio.symlink(&inside, &target);
        } else if meta.is_dir() {
            cpio.dir(&inside, 0o755);
            files += pack_tree(cpio, root, &path)?;
        } else {
            use std::os::unix::fs::PermissionsExt;
            let contents =
                fs::read(&path).with_context(|| format!("could not read {}", path.display()))?;
            cpio.file(&inside, meta.permissions().mode() & 0o777, &contents);
            files += 1;
        }
    }
    Ok(files)
}
