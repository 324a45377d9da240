//! `cargo xtask dist`: release artifacts in `target/dist/`.
//!
//! - `hotprof-VERSION-x86_64-linux.tar.gz`: the static hotprof binary, its man pages, bash/zsh/
//!   fish completions, the exporter's systemd unit, the license and a short README.
//! - `hotprof_VERSION_amd64.deb`: the same files in Debian's places (the unit installed, not
//!   enabled: the package has no maintainer scripts), built with `dpkg-deb` and checked with
//!   `lintian` (errors and warnings fail the task).
//! - `SHA256SUMS` of both.
//!
//! The binary is the guest build's (`build::build_guest`: static-pie, the eBPF object inside),
//! stripped as Debian's `dh_strip` would. Both archives are reproducible from the same binary:
//! every file's mtime is `SOURCE_DATE_EPOCH` (the last commit's time unless set in the
//! environment), owners are root, tar sorts names and gzip stores no name or time.

use std::collections::{BTreeMap, BTreeSet};
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
/// The exporter unit, shipped in both archives.
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
    pub deb: PathBuf,
    pub tarball: PathBuf,
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

/// `cargo xtask dist`: builds the binary and writes the artifacts into `target/dist/`.
pub fn dist() -> Result<Dist> {
    let root = workspace_root();
    let metadata = profiler_metadata()?;
    let license = metadata["license"].as_str().unwrap_or_default();
    ensure!(
        license == LICENSE_EXPRESSION,
        "profiler's license is `{license}`, but dist's copyright file is written for \
         `{LICENSE_EXPRESSION}`: update xtask/src/dist.rs"
    );
    build::build_guest(Arch::X86_64)?;
    let stage = target_dir().join("dist-stage");
    fresh_dir(&stage)?;
    let out = target_dir().join("dist");
    fresh_dir(&out)?;

    // The binary, stripped as dh_strip does, then everything it generates about itself.
    let files = stage.join("files");
    let binary = files.join("hotprof");
    fs::create_dir_all(&files)?;
    build::strip_like_dh_strip(
        Arch::X86_64,
        &build::guest_bin_dir(Arch::X86_64).join("hotprof"),
        &binary,
    )?;
    set_mode(&binary, 0o755)?;
    let release = Release {
        version: metadata["version"]
            .as_str()
            .context("cargo metadata: profiler has no version")?
            .to_owned(),
        epoch: source_date_epoch(),
        commit: binary_commit(&binary)?,
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
    let man_dir = files.join("man");
    util::stdout_of(Command::new(&binary).arg("man").arg("--out").arg(&man_dir))?;
    let man_pages = sorted_files(&man_dir)?;
    ensure!(
        man_pages.iter().any(|page| page.ends_with("hotprof.1")),
        "`hotprof man` wrote no hotprof.1"
    );
    let mut completions = BTreeMap::new();
    for shell in SHELLS {
        let script = util::stdout_of(Command::new(&binary).args(["completions", shell]))?;
        completions.insert(*shell, script);
    }
    let unit =
        fs::read_to_string(root.join(UNIT)).with_context(|| format!("could not read {UNIT}"))?;
    let licenses = license_files(&root)?;

    let tarball = tarball(
        &release,
        &stage,
        &out,
        &binary,
        &man_pages,
        &completions,
        &unit,
        &licenses,
    )?;
    let deb = deb(
        &release,
        &stage,
        &out,
        &binary,
        &man_pages,
        &completions,
        &unit,
    )?;

    let mut sums = Command::new("sha256sum");
    sums.current_dir(&out)
        .arg(file_name(&tarball))
        .arg(file_name(&deb));
    let sums = util::stdout_of(&mut sums)?;
    fs::write(out.join("SHA256SUMS"), &sums)?;
    set_mode(&out.join("SHA256SUMS"), 0o644)?;
    for path in [&tarball, &deb] {
        println!("  {} ({} bytes)", path.display(), fs::metadata(path)?.len());
    }
    print!("  SHA256SUMS:\n{sums}");

    lintian(&deb)?;
    Ok(Dist {
        version: release.version,
        deb,
        tarball,
    })
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
fn binary_commit(binary: &Path) -> Result<String> {
    let version = util::stdout_of(Command::new(binary).arg("--version"))?;
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
/// `LICENSE`: the license expression, the MIT terms and the Apache-2.0 text from Debian.
fn license_files(root: &Path) -> Result<Vec<(String, Vec<u8>)>> {
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
        "  note: no LICENSE file at the repository root; the tarball gets a LICENSE generated \
         from Cargo.toml's `{LICENSE_EXPRESSION}`"
    );
    let apache = fs::read_to_string(APACHE_TEXT)
        .with_context(|| format!("could not read {APACHE_TEXT} (base-files)"))?;
    let text = format!(
        "hotprof is licensed under the MIT license or the Apache License, Version 2.0, at your \
         option (SPDX: {LICENSE_EXPRESSION}).\n\nThe binary also contains, statically linked, \
         the Rust crates it depends on (each under its own license, mostly MIT or \
         Apache-2.0) and the GNU C Library (LGPL-2.1-or-later).\n\n\
         ==== MIT ====\n\n{MIT_TERMS}\n\n==== Apache-2.0 ====\n\n{apache}"
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
fn tarball_readme(release: &Release) -> String {
    let docs = release.homepage.as_deref().map_or_else(
        || "README.md in the hotprof source tree".to_owned(),
        |url| format!("{url} (README.md)"),
    );
    format!(
        "hotprof {version}: per-call latency of any kernel function, measured in the kernel with \
         eBPF.\nA static x86_64 Linux binary (Linux >= 5.10; root, or CAP_BPF + CAP_PERFMON).\n\n\
         \x20 sudo ./hotprof doctor                            # what this kernel lets it do\n\
         \x20 sudo ./hotprof --syscall getpid --duration 5s    # a first measurement\n\
         \x20 sudo ./hotprof --fn vfs_read --duration 5s       # any kernel function\n\n\
         Also here: man/man1 (man -l man/man1/hotprof.1), completions/ (bash, zsh, fish),\n\
         systemd/hotprof-exporter.service (the Prometheus exporter; its header says how to \
         install it).\nDocumentation: {docs}.\n",
        version = release.version
    )
}

#[allow(clippy::too_many_arguments)]
fn tarball(
    release: &Release,
    stage: &Path,
    out: &Path,
    binary: &Path,
    man_pages: &[PathBuf],
    completions: &BTreeMap<&str, String>,
    unit: &str,
    licenses: &[(String, Vec<u8>)],
) -> Result<PathBuf> {
    let name = format!("hotprof-{}-x86_64-linux", release.version);
    step("dist", &format!("{name}.tar.gz"));
    let tree = stage.join("tar");
    let top = tree.join(&name);
    copy(binary, &top.join("hotprof"), 0o755)?;
    for page in man_pages {
        copy(page, &top.join("man/man1").join(file_name(page)), 0o644)?;
    }
    for (shell, script) in completions {
        let file = match *shell {
            "bash" => "hotprof.bash",
            "zsh" => "_hotprof",
            _ => "hotprof.fish",
        };
        write(&top.join("completions").join(file), script, 0o644)?;
    }
    write(&top.join("systemd/hotprof-exporter.service"), unit, 0o644)?;
    for (file, text) in licenses {
        write(&top.join(file), text, 0o644)?;
    }
    write(&top.join("README"), tarball_readme(release), 0o644)?;
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

fn deb(
    release: &Release,
    stage: &Path,
    out: &Path,
    binary: &Path,
    man_pages: &[PathBuf],
    completions: &BTreeMap<&str, String>,
    unit: &str,
) -> Result<PathBuf> {
    let file = format!("hotprof_{}_amd64.deb", release.version);
    step("dist", &file);
    let root = stage.join("deb");
    copy(binary, &root.join("usr/bin/hotprof"), 0o755)?;
    let man1 = root.join("usr/share/man/man1");
    for page in man_pages {
        let dest = man1.join(file_name(page));
        copy(page, &dest, 0o644)?;
        gzip(&dest)?;
    }
    for (shell, script) in completions {
        let path = match *shell {
            "bash" => "usr/share/bash-completion/completions/hotprof",
            "zsh" => "usr/share/zsh/vendor-completions/_hotprof",
            _ => "usr/share/fish/vendor_completions.d/hotprof.fish",
        };
        write(&root.join(path), script, 0o644)?;
    }
    write(
        &root.join("usr/lib/systemd/system/hotprof-exporter.service"),
        deb_unit(unit)?,
        0o644,
    )?;
    let doc = root.join("usr/share/doc/hotprof");
    write(&doc.join("copyright"), copyright(release)?, 0o644)?;
    // A native package (the version has no Debian revision: hotprof is its own upstream), so
    // the changelog is changelog.gz, not changelog.Debian.gz (lintian:
    // wrong-name-for-changelog-of-native-package).
    let changelog = doc.join("changelog");
    write(&changelog, debian_changelog(release)?, 0o644)?;
    gzip(&changelog)?;
    if !LINTIAN_OVERRIDES.is_empty() {
        write(
            &root.join("usr/share/lintian/overrides/hotprof"),
            LINTIAN_OVERRIDES,
            0o644,
        )?;
    }

    let installed_kib = installed_size(&root)?;
    let control = control(release, installed_kib)?;
    write(&root.join("DEBIAN/control"), control, 0o644)?;
    let mut md5sums = Command::new("md5sum");
    md5sums.current_dir(&root);
    for path in walk(&root)? {
        let relative = path.strip_prefix(&root)?;
        if path.is_file() && !relative.starts_with("DEBIAN") {
            md5sums.arg(relative);
        }
    }
    write(
        &root.join("DEBIAN/md5sums"),
        util::stdout_of(&mut md5sums)?,
        0o644,
    )?;
    normalize(&root, release.epoch)?;

    let deb = out.join(&file);
    run(Command::new("dpkg-deb")
        .env("SOURCE_DATE_EPOCH", release.epoch.to_string())
        .args(["--build", "--root-owner-group", "-Zxz"])
        .arg(&root)
        .arg(&deb))?;
    set_mode(&deb, 0o644)?;
    Ok(deb)
}

/// Lintian overrides, each with its reason (the comment above an override is its
/// justification, shown by `lintian --show-overrides`).
const LINTIAN_OVERRIDES: &str = "\
# hotprof is a static-pie executable: ELF type DYN (for ASLR) with no DT_NEEDED at all, by
# design, so it runs on any x86_64 Linux. It is a program, not a shared library.
hotprof: shared-library-lacks-prerequisites [usr/bin/hotprof]
# The unit is the optional Prometheus exporter and relies on systemd's sandboxing and
# capability bounding (CapabilityBoundingSet, ProtectSystem, ...); hotprof itself is a command
# line tool that needs no init script.
hotprof: package-supports-alternative-init-but-no-init.d-script [usr/lib/systemd/system/hotprof-exporter.service]
";

/// The exporter unit as the package installs it: the binary is /usr/bin/hotprof, the
/// header's hand-install steps become the one step left (the package does not enable it), and
/// `Documentation=` names the man page the package installs (lintian:
/// systemd-service-file-missing-documentation-key).
fn deb_unit(unit: &str) -> Result<String> {
    let mut lines: Vec<&str> = unit.lines().collect();
    let start = lines.iter().position(|l| l.starts_with("# Install"));
    let end = lines.iter().position(|l| l.contains("systemctl enable"));
    if let (Some(start), Some(end)) = (start, end)
        && start <= end
    {
        lines.splice(
            start..=end,
            [
                "# Installed by the hotprof package, not enabled. To start it now and at boot:",
                "#   systemctl enable --now hotprof-exporter",
                "# This file belongs to the package: change what it measures (ExecStart, below)",
                "# with `systemctl edit --full hotprof-exporter`, which keeps a copy in /etc.",
            ],
        );
    }
    if !lines.iter().any(|l| l.starts_with("Documentation=")) {
        let description = lines
            .iter()
            .position(|l| l.starts_with("Description="))
            .with_context(|| format!("{UNIT} has no Description="))?;
        lines.insert(description + 1, "Documentation=man:hotprof-serve(1)");
    }
    let text = lines
        .join("\n")
        .replace("/usr/local/bin/hotprof", "/usr/bin/hotprof")
        + "\n";
    ensure!(
        text.lines()
            .any(|l| l.starts_with("ExecStart=/usr/bin/hotprof ")),
        "{UNIT}: no `ExecStart=/usr/local/bin/hotprof …` to point at /usr/bin/hotprof"
    );
    ensure!(
        !text.contains("/usr/local"),
        "{UNIT} names /usr/local beyond ExecStart and the install steps dist rewrites; update \
         deb_unit in xtask/src/dist.rs"
    );
    Ok(text)
}

fn control(release: &Release, installed_kib: u64) -> Result<String> {
    let homepage = release
        .homepage
        .as_deref()
        .map(|url| format!("Homepage: {url}\n"))
        .unwrap_or_default();
    Ok(format!(
        "Package: hotprof\n\
         Version: {version}\n\
         Architecture: amd64\n\
         Maintainer: {MAINTAINER}\n\
         Installed-Size: {installed_kib}\n\
         {built_using}\
         Section: devel\n\
         Priority: optional\n\
         {homepage}\
         Description: per-call latency of kernel functions, measured with eBPF\n \
         hotprof attaches eBPF programs (fentry/fexit, kprobes or syscall tracepoints)\n \
         to kernel functions and reports, per function, the call count, min, average,\n \
         maximum, standard deviation and percentiles from a fine histogram, the call\n \
         paths that pay for the latency as a flamegraph, and a statistical comparison\n \
         of two recordings (base versus patched kernel).\n \
         .\n \
         It also samples on-CPU stacks, writes JSON, pprof and HTML reports, and serves\n \
         its histograms to Prometheus (a systemd unit for that is installed, not\n \
         enabled). The binary is statically linked; it needs root, or CAP_BPF and\n \
         CAP_PERFMON.\n",
        version = release.version,
        built_using = built_using()?,
    ))
}

/// `Built-Using:` naming the glibc source whose libc.a is linked into the binary, for the
/// LGPL (as Debian's busybox-static does; lintian 2.116 does not know the newer
/// Static-Built-Using).
fn built_using() -> Result<String> {
    let mut query = Command::new("dpkg-query");
    query.args([
        "-W",
        "-f=${source:Package} (= ${source:Version})",
        "libc6-dev",
    ]);
    let glibc = util::stdout_of(&mut query).context("which libc6-dev is installed")?;
    Ok(format!("Built-Using: {glibc}\n"))
}

/// `/usr/share/doc/hotprof/copyright` in the machine-readable format (DEP-5).
fn copyright(release: &Release) -> Result<String> {
    let year = date(release.epoch, "+%Y")?;
    let source = release.homepage.clone().unwrap_or_else(|| {
        format!(
            "the hotprof source tree, commit {} (built with `cargo xtask dist`)",
            release.commit
        )
    });
    let crates = bundled_crates()?
        .iter()
        .map(|line| format!(" {line}"))
        .collect::<Vec<_>>()
        .join("\n");
    let mit = MIT_TERMS
        .lines()
        .map(|line| {
            if line.is_empty() {
                " .".to_owned()
            } else {
                format!(" {line}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: hotprof\n\
         Upstream-Contact: {MAINTAINER}\n\
         Source: {source}\n\
         Comment: /usr/bin/hotprof is statically linked. Besides hotprof's own code it\n \
         contains the GNU C Library (LGPL-2.1-or-later; see Built-Using in the package's\n \
         control data) and these Rust crates, each under the license its\n \
         Cargo.toml declares:\n \
         .\n\
         {crates}\n\
         \n\
         Files: *\n\
         Copyright: {year} hotprof maintainers\n\
         License: MIT or Apache-2.0\n\
         \n\
         License: MIT\n\
         {mit}\n\
         \n\
         License: Apache-2.0\n \
         Licensed under the Apache License, Version 2.0 (the \"License\"); you may not\n \
         use this file except in compliance with the License.\n \
         .\n \
         On Debian systems, the complete text of the Apache License, Version 2.0 can be\n \
         found in \"{APACHE_TEXT}\".\n"
    ))
}

/// `name version: license` of every crate linked into hotprof (normal dependencies of
/// profiler and of profiler-ebpf, whose object it embeds; proc-macros and build scripts run
/// at build time only), from `cargo metadata`.
fn bundled_crates() -> Result<Vec<String>> {
    let json = util::stdout_of(cargo().args([
        "metadata",
        "--format-version",
        "1",
        "--filter-platform",
        "x86_64-unknown-linux-gnu",
    ]))
    .context("could not read the dependency graph")?;
    let metadata: Value = serde_json::from_str(&json)?;
    let packages: BTreeMap<&str, &Value> = metadata["packages"]
        .as_array()
        .context("cargo metadata: no packages")?
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let nodes: BTreeMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .context("cargo metadata: no resolve graph")?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let is_proc_macro = |package: &Value| {
        package["targets"].as_array().is_some_and(|targets| {
            targets.iter().any(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|k| k == "proc-macro"))
            })
        })
    };
    let mut todo: Vec<&str> = packages
        .iter()
        .filter(|(_, p)| p["name"] == "profiler" || p["name"] == "profiler-ebpf")
        .map(|(id, _)| *id)
        .collect();
    let mut seen = BTreeSet::new();
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        let Some(node) = nodes.get(id) else { continue };
        for dep in node["deps"].as_array().into_iter().flatten() {
            let normal = dep["dep_kinds"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k["kind"].is_null()));
            let Some(dep_id) = dep["pkg"].as_str() else {
                continue;
            };
            if normal && packages.get(dep_id).is_some_and(|p| !is_proc_macro(p)) {
                todo.push(dep_id);
            }
        }
    }
    let mut lines: Vec<String> = seen
        .iter()
        .filter_map(|id| packages.get(id))
        // Registry crates, and vendored ones (a path under `third_party/`, e.g. the patched
        // aya); not the workspace's own.
        .filter(|p| p["source"].is_string() || is_vendored(p))
        .map(|p| {
            format!(
                "{} {}: {}{}",
                p["name"].as_str().unwrap_or("?"),
                p["version"].as_str().unwrap_or("?"),
                p["license"].as_str().unwrap_or("(no license field)"),
                if is_vendored(p) {
                    " (vendored with a patch: third_party/)"
                } else {
                    ""
                }
            )
        })
        .collect();
    lines.sort();
    Ok(lines)
}

/// A crate the workspace carries a copy of under `third_party/` (`[patch.crates-io]`).
fn is_vendored(package: &serde_json::Value) -> bool {
    package["manifest_path"]
        .as_str()
        .is_some_and(|path| path.contains("/third_party/"))
}

/// `changelog.Debian`: one entry for this build.
fn debian_changelog(release: &Release) -> Result<String> {
    Ok(format!(
        "hotprof ({version}) unstable; urgency=medium\n\n  \
         * Built with `cargo xtask dist` from commit {commit}.\n\n \
         -- {MAINTAINER}  {date}\n",
        version = release.version,
        commit = release.commit,
        date = date(release.epoch, "-R")?,
    ))
}

/// `date -u -d @EPOCH FORMAT` in the C locale.
fn date(epoch: u64, format: &str) -> Result<String> {
    let mut date = Command::new("date");
    date.env("LC_ALL", "C")
        .arg("-u")
        .arg("-d")
        .arg(format!("@{epoch}"))
        .arg(format);
    Ok(util::stdout_of(&mut date)?.trim().to_owned())
}

/// Installed-Size as dpkg-gencontrol counts it: KiB per file, rounded up, and 1 per directory.
fn installed_size(root: &Path) -> Result<u64> {
    let mut kib = 0;
    for path in walk(root)? {
        if path.strip_prefix(root)?.starts_with("DEBIAN") {
            continue;
        }
        let meta = fs::symlink_metadata(&path)?;
        kib += if meta.is_file() {
            meta.len().div_ceil(1024)
        } else {
            1
        };
    }
    Ok(kib)
}

/// `lintian` on the .deb: its whole opinion is printed; errors and warnings fail `dist`.
fn lintian(deb: &Path) -> Result<()> {
    step("dist", "lintian");
    let mut lintian = Command::new("lintian");
    lintian
        .args(["--display-info", "--fail-on", "error,warning"])
        .arg(deb);
    let out = util::output(&mut lintian).context("could not run lintian (`cargo xtask setup`)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if text.trim().is_empty() {
        println!("  ok (no tags)");
    } else {
        print!("{text}");
    }
    if !out.status.success() {
        bail!(
            "lintian found errors or warnings in {}: {text}{stderr}",
            deb.display()
        );
    }
    Ok(())
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
fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
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

    const UNIT_HEAD: &str = "\
# hotprof as a Prometheus exporter.
#
# Install (see README.md):
#   install -m 0755 target/release/hotprof /usr/local/bin/hotprof
#   systemctl daemon-reload && systemctl enable --now hotprof-exporter
#
[Unit]
Description=hotprof exporter

[Service]
ExecStart=/usr/local/bin/hotprof serve --listen 127.0.0.1:9435 --syscall openat
";

    #[test]
    fn the_packaged_unit_runs_usr_bin_hotprof() {
        let unit = deb_unit(UNIT_HEAD).expect("rewritten");
        assert!(unit.contains("\nExecStart=/usr/bin/hotprof serve --listen"));
        assert!(unit.contains("# Installed by the hotprof package, not enabled."));
        assert!(
            unit.contains("Description=hotprof exporter\nDocumentation=man:hotprof-serve(1)\n")
        );
        assert!(!unit.contains("/usr/local"), "{unit}");
    }

    #[test]
    fn the_commit_comes_from_the_long_version() {
        let version =
            "hotprof 0.1.0 (commit 682de6c-dirty, aya 0.14.0, eBPF object a4b016cb862f)\n";
        assert_eq!(commit_in(version), Some("682de6c-dirty"));
        assert_eq!(commit_in("hotprof 0.1.0\n"), None);
    }

    #[test]
    fn the_repository_unit_can_be_packaged() {
        let unit = fs::read_to_string(workspace_root().join(UNIT)).expect("unit");
        deb_unit(&unit).expect("dist can rewrite the repository's unit");
    }
}
