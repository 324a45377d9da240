//! `cargo xtask dist`: release artifacts in `target/dist/`, for each architecture hotprof
//! builds for ([`Arch::ALL`]: x86_64, and aarch64 as Debian's arm64):
//!
//! - `hotprof-VERSION-ARCH-linux.tar.gz`: the static hotprof binary, its man pages, bash/zsh/
//!   fish completions, the exporter's systemd unit, the license and a short README.
//! - `hotprof_VERSION_DEBARCH.deb` (`amd64`, `arm64`): the same files in Debian's places (the
//!   unit installed, not enabled: the package has no maintainer scripts), built with `dpkg-deb`
//!   and checked with `lintian` (errors and warnings fail the task; `deb.rs`).
//! - `SHA256SUMS` of all of them.
//!
//! Each binary is its guest build's (`build::build_guest`: static, that architecture's eBPF
//! objects inside), stripped as Debian's `dh_strip` would, so the guests run the very bytes
//! the packages ship. What the binary writes about itself (man pages, completions, its commit)
//! comes from running it: the aarch64 one through qemu-user ([`Arch::command`]). Every archive
//! is reproducible from the same binary: every file's mtime is `SOURCE_DATE_EPOCH` (the last
//! commit's time unless set in the environment), owners are root, tar sorts names and gzip
//! stores no name or time.

mod deb;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::arch::Arch;
use crate::build;
use crate::util::{self, cargo, fresh_dir, run, step, target_dir, workspace_root};

/// The package's maintainer: the identity the project's commits are made under.
const MAINTAINER: &str = "hotprof maintainers <maintainers@users.noreply.a-seed-d3dcec1a.example>";
/// The exporter unit, shipped in every archive.
const UNIT: &str = "contrib/hotprof-exporter.service";
/// The license the copyright file spells out; a different `license` in Cargo.toml stops
/// `dist` rather than ship a wrong copyright file.
const LICENSE_EXPRESSION: &str = "MIT OR Apache-2.0";
/// Where the Apache-2.0 text is on every Debian system (base-files).
const APACHE_TEXT: &str = "/usr/share/common-licenses/Apache-2.0";
const SHELLS: &[&str] = &["bash", "zsh", "fish"];

/// What `dist` produced.
pub struct Dist {
    pub version: String,
    /// One per architecture, in [`Arch::ALL`]'s order.
    pub packages: Vec<Package>,
}

/// One architecture's artifacts.
pub struct Package {
    pub arch: Arch,
    pub deb: PathBuf,
    pub tarball: PathBuf,
}

impl Dist {
    pub fn package(&self, arch: Arch) -> Result<&Package> {
        self.packages
            .iter()
            .find(|package| package.arch == arch)
            .with_context(|| format!("dist built nothing for {arch}"))
    }
}

/// The release facts every artifact is built from.
struct Release {
    version: String,
    /// Seconds since 1970: every file's mtime, the changelog's date.
    epoch: u64,
    /// `abc1234` or `abc1234-dirty` (uncommitted changes to tracked files), or `unknown`.
    commit: String,
    /// `repository` (or `homepage`) of the profiler package, if Cargo.toml names one.
    homepage: Option<String>,
}

/// What goes into one architecture's tarball and .deb.
struct Contents {
    arch: Arch,
    /// Stripped, mode 0755.
    binary: PathBuf,
    /// ELF type DYN rather than EXEC ([`ensure_static`]).
    static_pie: bool,
    man_pages: Vec<PathBuf>,
    completions: BTreeMap<&'static str, String>,
    unit: String,
    licenses: Vec<(String, Vec<u8>)>,
}

/// The C library linked statically into the binary ([`Arch::build_env`]).
struct Libc {
    /// As the copyright file and LICENSE name it.
    name: &'static str,
    license: &'static str,
    /// Where the copy linked in comes from, for the copyright file.
    provenance: &'static str,
    /// The Debian package whose static library is linked in (for `Built-Using:`), if any.
    debian_package: Option<&'static str>,
}

fn libc(arch: Arch) -> Libc {
    match arch {
        Arch::X86_64 => Libc {
            name: "the GNU C Library",
            license: "LGPL-2.1-or-later",
            provenance: "see Built-Using in the package's control data",
            debian_package: Some("libc6-dev"),
        },
        Arch::Aarch64 => Libc {
            name: "musl libc",
            license: "MIT",
            provenance: "the copy Rust's aarch64-unknown-linux-musl target ships",
            debian_package: None,
        },
    }
}

/// `cargo xtask dist`: builds the binaries and writes the artifacts into `target/dist/`.
pub fn dist() -> Result<Dist> {
    let root = workspace_root();
    let metadata = profiler_metadata()?;
    let license = metadata["license"].as_str().unwrap_or_default();
    ensure!(
        license == LICENSE_EXPRESSION,
        "profiler's license is `{license}`, but dist's copyright file is written for \
         `{LICENSE_EXPRESSION}`: update xtask/src/dist.rs"
    );
    for arch in Arch::ALL {
        build::build_guest(arch)?;
    }
    let stage = target_dir().join("dist-stage");
    fresh_dir(&stage)?;
    let out = target_dir().join("dist");
    fresh_dir(&out)?;

    // Each binary, stripped as dh_strip does, and the commit each says it was built from.
    let mut binaries = Vec::new();
    for arch in Arch::ALL {
        let binary = stage.join(arch.name()).join("files/hotprof");
        fs::create_dir_all(binary.parent().context("no parent")?)?;
        build::strip_like_dh_strip(arch, &build::guest_bin_dir(arch).join("hotprof"), &binary)?;
        set_mode(&binary, 0o755)?;
        let static_pie = ensure_static(arch, &binary)?;
        let commit = binary_commit(arch, &binary)?;
        binaries.push((arch, binary, static_pie, commit));
    }
    let commit = binaries[0].3.clone();
    if let Some((arch, _, _, other)) = binaries.iter().find(|(.., c)| *c != commit) {
        bail!(
            "the {} binary says commit {commit} but the {arch} one says {other}",
            binaries[0].0
        );
    }
    let release = Release {
        version: metadata["version"]
            .as_str()
            .context("cargo metadata: profiler has no version")?
            .to_owned(),
        epoch: source_date_epoch(),
        commit,
        homepage: ["repository", "homepage"]
            .iter()
            .find_map(|key| metadata[key].as_str().map(str::to_owned)),
    };
    step(
        "dist",
        &format!(
            "hotprof {} (commit {}), SOURCE_DATE_EPOCH={}",
            release.version, release.commit, release.epoch
        ),
    );
    if release.commit.ends_with("-dirty") {
        println!(
            "  note: built from a tree with uncommitted changes: the binary says `-dirty` and \
             the artifacts are not those of the last commit"
        );
    }
    let unit =
        fs::read_to_string(root.join(UNIT)).with_context(|| format!("could not read {UNIT}"))?;

    let mut packages = Vec::new();
    for (arch, binary, static_pie, _) in binaries {
        let contents = contents(arch, binary, static_pie, &unit, &root)?;
        let arch_stage = stage.join(arch.name());
        packages.push(Package {
            arch,
            tarball: tarball(&release, &arch_stage, &out, &contents)?,
            deb: deb::deb(&release, &arch_stage, &out, &contents)?,
        });
    }

    let mut sums = Command::new("sha256sum");
    sums.current_dir(&out);
    for package in &packages {
        sums.arg(file_name(&package.tarball))
            .arg(file_name(&package.deb));
    }
    let sums = util::stdout_of(&mut sums)?;
    fs::write(out.join("SHA256SUMS"), &sums)?;
    set_mode(&out.join("SHA256SUMS"), 0o644)?;
    for package in &packages {
        for path in [&package.tarball, &package.deb] {
            println!("  {} ({} bytes)", path.display(), fs::metadata(path)?.len());
        }
    }
    print!("  SHA256SUMS:\n{sums}");

    for package in &packages {
        deb::lintian(&package.deb)?;
    }
    Ok(Dist {
        version: release.version,
        packages,
    })
}

/// Runs `arch`'s `binary` for what it writes about itself: its man pages and completions.
fn contents(
    arch: Arch,
    binary: PathBuf,
    static_pie: bool,
    unit: &str,
    root: &Path,
) -> Result<Contents> {
    let man_dir = binary.with_file_name("man");
    util::stdout_of(arch.command(&binary).arg("man").arg("--out").arg(&man_dir))?;
    let man_pages = sorted_files(&man_dir)?;
    ensure!(
        man_pages.iter().any(|page| page.ends_with("hotprof.1")),
        "`hotprof man` ({arch}) wrote no hotprof.1"
    );
    let mut completions = BTreeMap::new();
    for shell in SHELLS {
        let script = util::stdout_of(arch.command(&binary).args(["completions", shell]))?;
        completions.insert(*shell, script);
    }
    Ok(Contents {
        arch,
        binary,
        static_pie,
        man_pages,
        completions,
        unit: unit.to_owned(),
        licenses: license_files(root, arch)?,
    })
}

/// The binary is `arch`'s and needs nothing at run time: no program interpreter, no shared
/// library (`readelf`, binutils, reads any architecture's ELF). Whether it is static-pie (ELF
/// type DYN: x86_64's glibc build) or a plain static executable (EXEC: Rust's aarch64 musl
/// target links no static-pie), which lintian tells apart.
pub(crate) fn ensure_static(arch: Arch, binary: &Path) -> Result<bool> {
    let header = util::stdout_of(Command::new("readelf").arg("-h").arg(binary))?;
    let field = |name: &str| {
        header
            .lines()
            .find_map(|line| line.trim().strip_prefix(name))
            .map(str::trim)
    };
    let machine = field("Machine:");
    ensure!(
        machine == Some(arch.readelf_machine()),
        "{} is not an {arch} binary (readelf: machine {machine:?})",
        binary.display()
    );
    let program = util::stdout_of(Command::new("readelf").args(["-l", "-d"]).arg(binary))?;
    ensure!(
        !program.contains("INTERP") && !program.contains("(NEEDED)"),
        "{} ({arch}) is not static: it names a program interpreter or shared libraries:\n{program}",
        binary.display()
    );
    let kind = field("Type:").unwrap_or_default();
    match kind.split_whitespace().next() {
        Some("DYN") => Ok(true),
        Some("EXEC") => Ok(false),
        _ => bail!(
            "{} ({arch}) is no executable: ELF type {kind}",
            binary.display()
        ),
    }
}

/// The profiler package's entry in `cargo metadata` (it builds the hotprof binary).
fn profiler_metadata() -> Result<Value> {
    let json = util::stdout_of(cargo().args(["metadata", "--no-deps", "--format-version", "1"]))
        .context("could not read the workspace metadata")?;
    let metadata: Value = serde_json::from_str(&json).context("cargo metadata: invalid JSON")?;
    metadata["packages"]
        .as_array()
        .and_then(|packages| packages.iter().find(|p| p["name"] == "profiler"))
        .cloned()
        .context("cargo metadata lists no profiler package")
}

/// `$SOURCE_DATE_EPOCH` if set, else the last commit's time, else 0 (with a note).
fn source_date_epoch() -> u64 {
    if let Some(epoch) = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|value| value.parse().ok())
    {
        return epoch;
    }
    match git(&["log", "-1", "--format=%ct"]).and_then(|time| time.parse().ok()) {
        Some(epoch) => epoch,
        None => {
            println!("  note: no git commit to take SOURCE_DATE_EPOCH from; using 0 (1970-01-01)");
            0
        }
    }
}

/// The commit the binary was built from, as its `--version` says (profiler/build.rs:
/// `abc1234`, `abc1234-dirty` or `unknown`), so the changelog names what is inside.
fn binary_commit(arch: Arch, binary: &Path) -> Result<String> {
    let version = util::stdout_of(arch.command(binary).arg("--version"))?;
    commit_in(&version)
        .map(str::to_owned)
        .with_context(|| format!("`hotprof --version` names no commit: {}", version.trim()))
}

/// `abc1234-dirty` in `hotprof 0.1.0 (commit abc1234-dirty, aya 0.14.0, …)`.
fn commit_in(version: &str) -> Option<&str> {
    let rest = version.split("(commit ").nth(1)?;
    rest.split([',', ')'])
        .next()
        .filter(|commit| !commit.is_empty())
}

fn git(args: &[&str]) -> Option<String> {
    let mut git = Command::new("git");
    git.arg("--no-optional-locks")
        .arg("-C")
        .arg(workspace_root())
        .args(args);
    util::stdout_of(&mut git)
        .ok()
        .map(|out| out.trim().to_owned())
}

/// `LICENSE*` and `COPYING*` at the repository root, or, when there are none, one generated
/// `LICENSE`: the license expression, what `arch`'s binary links in, the MIT terms and the
/// Apache-2.0 text from Debian.
fn license_files(root: &Path, arch: Arch) -> Result<Vec<(String, Vec<u8>)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(root)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let upper = name.to_ascii_uppercase();
        if (upper.starts_with("LICENSE") || upper.starts_with("COPYING"))
            && entry.file_type()?.is_file()
        {
            found.push((name, fs::read(entry.path())?));
        }
    }
    found.sort();
    if !found.is_empty() {
        return Ok(found);
    }
    println!(
        "  note: no LICENSE file at the repository root; the {arch} tarball gets a LICENSE \
         generated from Cargo.toml's `{LICENSE_EXPRESSION}`"
    );
    let libc = libc(arch);
    let apache = fs::read_to_string(APACHE_TEXT)
        .with_context(|| format!("could not read {APACHE_TEXT} (base-files)"))?;
    let text = format!(
        "hotprof is licensed under the MIT license or the Apache License, Version 2.0, at your \
         option (SPDX: {LICENSE_EXPRESSION}).\n\nThe binary also contains, statically linked, \
         the Rust crates it depends on (each under its own license, mostly MIT or \
         Apache-2.0) and {} ({}).\n\n\
         ==== MIT ====\n\n{MIT_TERMS}\n\n==== Apache-2.0 ====\n\n{apache}",
        libc.name, libc.license
    );
    Ok(vec![("LICENSE".into(), text.into_bytes())])
}

/// The MIT license's terms (the copyright line is in the copyright file / LICENSE header).
const MIT_TERMS: &str = "\
Permission is hereby granted, free of charge, to any person obtaining a copy of this software
and associated documentation files (the \"Software\"), to deal in the Software without
restriction, including without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.";

/// The tarball's README.
fn tarball_readme(release: &Release, arch: Arch) -> String {
    let docs = release.homepage.as_deref().map_or_else(
        || "README.md in the hotprof source tree".to_owned(),
        |url| format!("{url} (README.md)"),
    );
    format!(
        "hotprof {version}: per-call latency of any kernel function, measured in the kernel with \
         eBPF.\nA static {arch} ({debian}) Linux binary (Linux >= 5.10; root, or CAP_BPF + \
         CAP_PERFMON).\n\n\
         \x20 sudo ./hotprof doctor                            # what this kernel lets it do\n\
         \x20 sudo ./hotprof --syscall getpid --duration 5s    # a first measurement\n\
         \x20 sudo ./hotprof --fn vfs_read --duration 5s       # any kernel function\n\n\
         Also here: man/man1 (man -l man/man1/hotprof.1), completions/ (bash, zsh, fish),\n\
         systemd/hotprof-exporter.service (the Prometheus exporter; its header says how to \
         install it).\nDocumentation: {docs}.\n",
        version = release.version,
        debian = arch.debian(),
    )
}

/// The tarball's one top directory (and its name without `.tar.gz`).
pub fn tarball_top(version: &str, arch: Arch) -> String {
    format!("hotprof-{version}-{arch}-linux")
}

fn tarball(release: &Release, stage: &Path, out: &Path, contents: &Contents) -> Result<PathBuf> {
    let name = tarball_top(&release.version, contents.arch);
    step("dist", &format!("{name}.tar.gz"));
    let tree = stage.join("tar");
    let top = tree.join(&name);
    copy(&contents.binary, &top.join("hotprof"), 0o755)?;
    for page in &contents.man_pages {
        copy(page, &top.join("man/man1").join(file_name(page)), 0o644)?;
    }
    for (shell, script) in &contents.completions {
        let file = match *shell {
            "bash" => "hotprof.bash",
            "zsh" => "_hotprof",
            _ => "hotprof.fish",
        };
        write(&top.join("completions").join(file), script, 0o644)?;
    }
    write(
        &top.join("systemd/hotprof-exporter.service"),
        &contents.unit,
        0o644,
    )?;
    for (file, text) in &contents.licenses {
        write(&top.join(file), text, 0o644)?;
    }
    write(
        &top.join("README"),
        tarball_readme(release, contents.arch),
        0o644,
    )?;
    normalize(&tree, release.epoch)?;

    let tar = out.join(format!("{name}.tar"));
    run(Command::new("tar")
        .env("LC_ALL", "C")
        .args(["--format=gnu", "--sort=name"])
        .arg(format!("--mtime=@{}", release.epoch))
        .args(["--owner=0", "--group=0", "--numeric-owner"])
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(&tree)
        .arg(&name))?;
    run(Command::new("gzip").args(["-9n"]).arg(&tar))?;
    let tarball = out.join(format!("{name}.tar.gz"));
    set_mode(&tarball, 0o644)?;
    Ok(tarball)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The regular files directly in `dir`, sorted.
fn sorted_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = fs::read_dir(dir)
        .with_context(|| format!("could not list {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()?;
    files.retain(|path| path.is_file());
    files.sort();
    Ok(files)
}

/// `dir` and everything under it, parents before children, sorted.
pub(crate) fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut all = vec![dir.to_path_buf()];
    let mut entries = fs::read_dir(dir)
        .with_context(|| format!("could not list {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()?;
    entries.sort();
    for path in entries {
        if fs::symlink_metadata(&path)?.is_dir() {
            all.extend(walk(&path)?);
        } else {
            all.push(path);
        }
    }
    Ok(all)
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("could not chmod {}", path.display()))
}

/// Writes `contents` to `path` (parents created) with `mode`.
fn write(path: &Path, contents: impl AsRef<[u8]>, mode: u32) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)
            .with_context(|| format!("could not create {}", parent.display()))?;
    }
    fs::write(path, contents).with_context(|| format!("could not write {}", path.display()))?;
    set_mode(path, mode)
}

fn copy(from: &Path, to: &Path, mode: u32) -> Result<()> {
    let contents = fs::read(from).with_context(|| format!("could not read {}", from.display()))?;
    write(to, contents, mode)
}

/// `gzip -9n FILE` (no name, no time in the header) → `FILE.gz`, mode 0644.
fn gzip(path: &Path) -> Result<()> {
    run(Command::new("gzip").arg("-9n").arg(path))?;
    let mut gz = path.as_os_str().to_owned();
    gz.push(".gz");
    set_mode(Path::new(&gz), 0o644)
}

/// Directories 0755, and every mtime (directories last, after their contents) the epoch.
fn normalize(root: &Path, epoch: u64) -> Result<()> {
    let time = SystemTime::UNIX_EPOCH + Duration::from_secs(epoch);
    let times = fs::FileTimes::new().set_modified(time).set_accessed(time);
    for path in walk(root)?.iter().rev() {
        if path.is_dir() {
            set_mode(path, 0o755)?;
        }
        fs::File::open(path)
            .and_then(|file| file.set_times(times))
            .with_context(|| format!("could not set the mtime of {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_comes_from_the_long_version() {
        let version =
            "hotprof 0.1.0 (commit 682de6c-dirty, aya 0.14.0, eBPF object a4b016cb862f)\n";
        assert_eq!(commit_in(version), Some("682de6c-dirty"));
        assert_eq!(commit_in("hotprof 0.1.0\n"), None);
    }
}
