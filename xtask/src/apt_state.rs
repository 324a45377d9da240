//! An apt state of our own under `target/apt/`: its own sources list, package lists and cache,
//! so the guest kernels of other Debian releases (bullseye's 5.10, sid's 7.x) can be found and
//! downloaded with the ordinary `apt-get`, without ever touching the machine's sources.
//!
//! Each guest architecture has its own state (`target/apt/` for x86_64, `target/apt/aarch64/`
//! for arm64): its lists hold only that architecture's packages (`APT::Architecture`).
//!
//! The mirror is the machine's own: read from its apt sources (one-line `.list` or deb822
//! `.sources`), or `XTASK_DEBIAN_MIRROR` when set.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::arch::Arch;
use crate::util::{self, is_root, target_dir};

/// The suites the guest kernels come from: bookworm (6.1, 6.12), bullseye (5.10), sid (7.x).
const SUITES: &[(&str, Archive)] = &[
    ("bookworm", Archive::Main),
    ("bookworm-security", Archive::Security),
    ("bullseye", Archive::Main),
    ("bullseye-security", Archive::Security),
    ("sid", Archive::Main),
];

/// Debian's archive key ring, from the `debian-archive-keyring` package every Debian has.
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// Lists older than this are refreshed before a search: sid changes daily.
const LISTS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// Overrides the mirror read from the machine's sources (the main archive's URI; the security
/// archive is that URI with `-security` appended).
const MIRROR_VAR: &str = "XTASK_DEBIAN_MIRROR";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Archive {
    Main,
    Security,
}

/// The two archive URIs our sources list points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirrors {
    pub main: String,
    pub security: String,
}

/// Serializes updates: the test runner fetches kernels one after another, but a refresh must
/// never run twice at once over the same lists. Holds the architectures updated so far.
static UPDATE: Mutex<Vec<Arch>> = Mutex::new(Vec::new());

/// Held while an apt command runs: `cargo xtask test` builds the peers' layer beside the guest
/// build and the kernel downloads, and two apt commands on one state would race on its lists
/// and its package cache.
static APT: Mutex<()> = Mutex::new(());

/// Runs an apt command on our state, one at a time, and returns its stdout.
fn run_apt(cmd: &mut Command) -> Result<String> {
    let _one_at_a_time = APT.lock().unwrap_or_else(|poison| poison.into_inner());
    util::stdout_of(cmd)
}

fn root(arch: Arch) -> PathBuf {
    let root = target_dir().join("apt");
    match arch.subdir() {
        Some(subdir) => root.join(subdir),
        None => root,
    }
}

fn sources_list(arch: Arch) -> PathBuf {
    root(arch).join("sources.list")
}

fn lists_dir(arch: Arch) -> PathBuf {
    root(arch).join("lists")
}

/// `-o` options that make apt use only our state, for `arch`'s packages.
fn options(arch: Arch) -> Vec<String> {
    let mut options = vec![
        format!("Dir::Etc::sourcelist={}", sources_list(arch).display()),
        "Dir::Etc::sourceparts=-".to_owned(),
        format!("Dir::State::Lists={}", lists_dir(arch).display()),
        format!("Dir::Cache={}", root(arch).join("cache").display()),
        // Only package lists: no translations or appstream metadata.
        "Acquire::Languages=none".to_owned(),
        // The sources list names only this architecture, so apt looks for nothing else.
        format!("APT::Architecture={}", arch.debian()),
    ];
    if is_root() {
        // apt drops to `_apt`, who cannot write into our directories; it would fall back to
        // root anyway, this only skips the warning.
        options.push("APT::Sandbox::User=root".to_owned());
    }
    options
}

fn apt(program: &str, arch: Arch) -> Command {
    let mut cmd = Command::new(program);
    for option in options(arch) {
        cmd.args(["-o", &option]);
    }
    cmd
}

/// Writes our sources list and creates the directories apt expects.
fn prepare(arch: Arch) -> Result<()> {
    let mirrors = mirrors()?;
    for dir in [
        lists_dir(arch).join("partial"),
        root(arch).join("cache").join("archives").join("partial"),
    ] {
        fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    }
    let text = sources_text(&mirrors, arch);
    let path = sources_list(arch);
    if fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
        fs::write(&path, text).with_context(|| format!("could not write {}", path.display()))?;
    }
    Ok(())
}

fn sources_text(mirrors: &Mirrors, arch: Arch) -> String {
    SUITES
        .iter()
        .map(|(suite, archive)| {
            let uri = match archive {
                Archive::Main => &mirrors.main,
                Archive::Security => &mirrors.security,
            };
            let arch = arch.debian();
            format!("deb [arch={arch} signed-by={KEYRING}] {uri} {suite} main\n")
        })
        .collect()
}

/// The mirror: `XTASK_DEBIAN_MIRROR`, else the machine's own Debian archive.
fn mirrors() -> Result<Mirrors> {
    if let Some(main) = std::env::var_os(MIRROR_VAR) {
        let main = main.to_string_lossy().trim_end_matches('/').to_owned();
        return Ok(Mirrors {
            security: format!("{main}-security"),
            main,
        });
    }
    let mut texts = Vec::new();
    for path in machine_source_files() {
        if let Ok(text) = fs::read_to_string(&path) {
            texts.push(text);
        }
    }
    find_mirrors(&texts).with_context(|| {
        format!(
            "found no Debian archive in this machine's apt sources (/etc/apt/sources.list, \
             /etc/apt/sources.list.d); set {MIRROR_VAR} to a Debian mirror's URI"
        )
    })
}

fn machine_source_files() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(entries) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut more = entries
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| {
                path.extension()
                    .is_some_and(|ext| ext == "list" || ext == "sources")
            })
            .collect::<Vec<_>>();
        more.sort();
        files.extend(more);
    }
    files
}

/// Finds the main Debian archive (a URI ending in `/debian`) among the URIs of apt source
/// files, one-line or deb822; the security archive is the one ending in `/debian-security`,
/// or the main one's URI with `-security` appended.
pub fn find_mirrors(texts: &[String]) -> Option<Mirrors> {
    let uris = texts
        .iter()
        .flat_map(|text| source_uris(text))
        .collect::<Vec<_>>();
    let main = uris.iter().find(|uri| uri.ends_with("/debian"))?.to_owned();
    let security = uris
        .iter()
        .find(|uri| uri.ends_with("/debian-security"))
        .cloned()
        .unwrap_or_else(|| format!("{main}-security"));
    Some(Mirrors { main, security })
}

/// Every repository URI in one apt source file, with any trailing `/` removed.
fn source_uris(text: &str) -> Vec<String> {
    let mut uris = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(rest) = line.strip_prefix("URIs:") {
            // deb822: `URIs: a b`.
            uris.extend(rest.split_whitespace().map(str::to_owned));
        } else if let Some(rest) = line.strip_prefix("deb ") {
            // One-line: `deb [options] uri suite components`.
            let rest = rest.trim_start();
            let rest = match rest.strip_prefix('[') {
                Some(options) => options.split_once(']').map_or("", |(_, after)| after),
                None => rest,
            };
            uris.extend(rest.split_whitespace().next().map(str::to_owned));
        }
    }
    uris.into_iter()
        .map(|uri| uri.trim_end_matches('/').to_owned())
        .collect()
}

/// Refreshes `arch`'s package lists: always when `force`, else when they are missing or older
/// than a day.
pub fn update(force: bool, arch: Arch) -> Result<()> {
    let mut updated = UPDATE.lock().unwrap_or_else(|poison| poison.into_inner());
    prepare(arch)?;
    if updated.contains(&arch) && !force {
        return Ok(());
    }
    if !force && lists_fresh(arch) {
        updated.push(arch);
        return Ok(());
    }
    let shown = root(arch);
    let shown = shown.strip_prefix(target_dir()).unwrap_or(&shown);
    println!(
        "  apt-get update (target/{}: {}, {})",
        shown.display(),
        suite_names(),
        arch.debian()
    );
    let mut cmd = apt("apt-get", arch);
    cmd.args(["update", "-q"]);
    run_apt(&mut cmd).context("could not refresh target/apt's package lists")?;
    // The stamp holds the sources it was made for, so a changed mirror refreshes the lists.
    fs::copy(sources_list(arch), stamp(arch))
        .with_context(|| format!("could not write {}", stamp(arch).display()))?;
    updated.push(arch);
    Ok(())
}

fn suite_names() -> String {
    SUITES
        .iter()
        .map(|(suite, _)| *suite)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Written after each successful update: apt dates the list files by the archive's own
/// release time, not by when they were fetched.
fn stamp(arch: Arch) -> PathBuf {
    root(arch).join("updated")
}

/// Whether the last update wrote the current sources list's lists less than
/// [`LISTS_MAX_AGE`] ago.
fn lists_fresh(arch: Arch) -> bool {
    let stamped = fs::read_to_string(stamp(arch)).ok();
    let sources = fs::read_to_string(sources_list(arch)).ok();
    let age = fs::metadata(stamp(arch))
        .and_then(|meta| meta.modified())
        .ok()
        .and_then(|modified| modified.elapsed().ok());
    stamped.is_some() && stamped == sources && age.is_some_and(|age| age < LISTS_MAX_AGE)
}

/// `apt-cache search --names-only PATTERN` over `arch`'s lists (refreshed first if stale).
pub fn search(pattern: &str, arch: Arch) -> Result<String> {
    update(false, arch)?;
    let mut cmd = apt("apt-cache", arch);
    cmd.args(["search", "--names-only", pattern]);
    run_apt(&mut cmd).context("could not search target/apt's package lists")
}

/// `apt-get download PACKAGE` (of `arch`) into `dir`, `arch`'s lists made or refreshed first
/// if missing or stale (a clean clone has none yet).
pub fn download(package: &str, arch: Arch, dir: &Path) -> Result<()> {
    download_all(&[package], arch, dir)
}

/// [`download`] of several packages in one apt run: each run loads apt's cache, about 2.5 s
/// of CPU here, which 78 runs for the peers' layer paid one by one.
pub fn download_all(packages: &[&str], arch: Arch, dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    if packages.is_empty() {
        return Ok(());
    }
    update(false, arch)?;
    let mut cmd = apt("apt-get", arch);
    cmd.args(["download", "-q"]).args(packages).current_dir(dir);
    run_apt(&mut cmd).map(drop).with_context(|| {
        format!(
            "apt-get download failed ({} packages: {})",
            packages.len(),
            packages.join(" ")
        )
    })
}

/// The packages `apt-get install PACKAGE` would install on a machine with nothing installed
/// (`spec` may pin a suite: `bpftrace/sid`), as `name=version`, dependencies first, from
/// `arch`'s lists (refreshed first if stale). Recommends are left out.
pub fn closure(spec: &str, arch: Arch) -> Result<Vec<String>> {
    update(false, arch)?;
    // An empty dpkg status: nothing counts as installed, so every dependency is listed.
    let status = root(arch).join("empty-status");
    fs::write(&status, "").with_context(|| format!("could not write {}", status.display()))?;
    let mut cmd = apt("apt-get", arch);
    cmd.args(["-o", &format!("Dir::State::status={}", status.display())])
        .args(["-s", "-q", "install", "--no-install-recommends", spec]);
    let plan = run_apt(&mut cmd)
        .with_context(|| format!("apt-get could not resolve {spec}'s dependencies"))?;
    let packages = installs(&plan);
    if packages.is_empty() {
        bail!("apt-get would install nothing for {spec}:\n{plan}");
    }
    Ok(packages)
}

/// `name=version` of each `Inst name (version suite [arch])` line of `apt-get -s`.
fn installs(plan: &str) -> Vec<String> {
    plan.lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("Inst ")?.split_whitespace();
            let name = words.next()?;
            let version = words.next()?.strip_prefix('(')?;
            Some(format!("{name}={version}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_installs_of_a_simulated_install() {
        let plan = "NOTE: This is only a simulation!\n\
                    Inst libc6 (2.43-7 Debian:unstable [arm64])\n\
                    Inst libgcc-s1 (16.2.0-4 Debian:unstable [arm64]) []\n\
                    Conf libc6 (2.43-7 Debian:unstable [arm64])\n\
                    Inst bpftrace (0.27.1-1 Debian:unstable [arm64])\n";
        assert_eq!(
            installs(plan),
            ["libc6=2.43-7", "libgcc-s1=16.2.0-4", "bpftrace=0.27.1-1"]
        );
    }

    #[test]
    fn finds_the_archives_in_deb822_sources() {
        let text = "\
Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://mirror.example/debian-security/
Suites: bookworm-security
";
        assert_eq!(
            find_mirrors(&[text.to_owned()]),
            Some(Mirrors {
                main: "http://mirror.example/debian".into(),
                security: "http://mirror.example/debian-security".into(),
            })
        );
    }

    #[test]
    fn finds_the_archive_in_one_line_sources_with_options() {
        let texts = [
            "deb https://packages.example/apt cloud-sdk main\n".to_owned(),
            "# deb http://old.example/debian buster main\n\
             deb [arch=amd64 signed-by=/k.gpg] http://m.example/debian/ bookworm main\n"
                .to_owned(),
        ];
        assert_eq!(
            find_mirrors(&texts),
            Some(Mirrors {
                main: "http://m.example/debian".into(),
                security: "http://m.example/debian-security".into(),
            })
        );
    }

    #[test]
    fn no_debian_archive_is_none() {
        let texts = ["URIs: https://deb.nodesource.example/node_20.x\n".to_owned()];
        assert_eq!(find_mirrors(&texts), None);
    }

    #[test]
    fn our_sources_list_names_every_suite_once() {
        let text = sources_text(
            &Mirrors {
                main: "http://m/debian".into(),
                security: "http://m/debian-security".into(),
            },
            Arch::X86_64,
        );
        assert_eq!(text.lines().count(), SUITES.len());
        assert!(text.contains("http://m/debian sid main"));
        assert!(text.contains("http://m/debian-security bullseye-security main"));
    }
}
