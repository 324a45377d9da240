//! The Debian package of one architecture: `hotprof_VERSION_DEBARCH.deb`, built with
//! `dpkg-deb` from the same files as the tarball, in Debian's places, and checked by `lintian`
//! (which reads a foreign architecture's package too).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::{
    APACHE_TEXT, Contents, MAINTAINER, MIT_TERMS, Release, UNIT, copy, file_name, gzip, libc,
    normalize, set_mode, walk, write,
};
use crate::arch::Arch;
use crate::util::{self, cargo, run, step};

/// Builds the package of `contents.arch` in `stage/deb` and writes it into `out`.
pub(super) fn deb(
    release: &Release,
    stage: &Path,
    out: &Path,
    contents: &Contents,
) -> Result<PathBuf> {
    let arch = contents.arch;
    let file = format!("hotprof_{}_{}.deb", release.version, arch.debian());
    step("dist", &file);
    let root = stage.join("deb");
    copy(&contents.binary, &root.join("usr/bin/hotprof"), 0o755)?;
    let man1 = root.join("usr/share/man/man1");
    for page in &contents.man_pages {
        let dest = man1.join(file_name(page));
        copy(page, &dest, 0o644)?;
        gzip(&dest)?;
    }
    for (shell, script) in &contents.completions {
        let path = match *shell {
            "bash" => "usr/share/bash-completion/completions/hotprof",
            "zsh" => "usr/share/zsh/vendor-completions/_hotprof",
            _ => "usr/share/fish/vendor_completions.d/hotprof.fish",
        };
        write(&root.join(path), script, 0o644)?;
    }
    write(
        &root.join("usr/lib/systemd/system/hotprof-exporter.service"),
        deb_unit(&contents.unit)?,
        0o644,
    )?;
    let doc = root.join("usr/share/doc/hotprof");
    write(&doc.join("copyright"), copyright(release, arch)?, 0o644)?;
    // A native package (the version has no Debian revision: hotprof is its own upstream), so
    // the changelog is changelog.gz, not changelog.Debian.gz (lintian:
    // wrong-name-for-changelog-of-native-package).
    let changelog = doc.join("changelog");
    write(&changelog, debian_changelog(release)?, 0o644)?;
    gzip(&changelog)?;
    write(
        &root.join("usr/share/lintian/overrides/hotprof"),
        lintian_overrides(contents),
        0o644,
    )?;

    let installed_kib = installed_size(&root)?;
    let control = control(release, arch, installed_kib)?;
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
fn lintian_overrides(contents: &Contents) -> String {
    let binary = if contents.static_pie {
        format!(
            "\
# hotprof is a static-pie executable: ELF type DYN (for ASLR) with no DT_NEEDED at all, by
# design, so it runs on any {} Linux. It is a program, not a shared library.
hotprof: shared-library-lacks-prerequisites [usr/bin/hotprof]
",
            contents.arch
        )
    } else {
        format!(
            "\
# hotprof is statically linked by design ({} inside), so it runs on any {} Linux
# whatever its C library. It is not static-pie: Rust's {} target links none.
hotprof: statically-linked-binary [usr/bin/hotprof]
",
            libc(contents.arch).name,
            contents.arch,
            contents.arch.rust_target()
        )
    };
    format!(
        "{binary}\
# The unit is the optional Prometheus exporter and relies on systemd's sandboxing and
# capability bounding (CapabilityBoundingSet, ProtectSystem, ...); hotprof itself is a command
# line tool that needs no init script.
hotprof: package-supports-alternative-init-but-no-init.d-script \
[usr/lib/systemd/system/hotprof-exporter.service]
"
    )
}

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

fn control(release: &Release, arch: Arch, installed_kib: u64) -> Result<String> {
    let homepage = release
        .homepage
        .as_deref()
        .map(|url| format!("Homepage: {url}\n"))
        .unwrap_or_default();
    Ok(format!(
        "Package: hotprof\n\
         Version: {version}\n\
         Architecture: {debian_arch}\n\
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
        debian_arch = arch.debian(),
        built_using = built_using(arch)?,
    ))
}

/// `Built-Using:` naming the glibc source whose libc.a is linked into the binary, for the
/// LGPL (as Debian's busybox-static does; lintian 2.116 does not know the newer
/// Static-Built-Using). None where the C library is not a Debian package's (musl from Rust's
/// target, MIT: nothing to name).
fn built_using(arch: Arch) -> Result<String> {
    let Some(package) = libc(arch).debian_package else {
        return Ok(String::new());
    };
    let mut query = Command::new("dpkg-query");
    query.args(["-W", "-f=${source:Package} (= ${source:Version})", package]);
    let source =
        util::stdout_of(&mut query).with_context(|| format!("which {package} is installed"))?;
    Ok(format!("Built-Using: {source}\n"))
}

/// `/usr/share/doc/hotprof/copyright` in the machine-readable format (DEP-5).
fn copyright(release: &Release, arch: Arch) -> Result<String> {
    let year = date(release.epoch, "+%Y")?;
    let source = release.homepage.clone().unwrap_or_else(|| {
        format!(
            "the hotprof source tree, commit {} (built with `cargo xtask dist`)",
            release.commit
        )
    });
    let libc = libc(arch);
    let comment = wrap(&format!(
        "/usr/bin/hotprof is statically linked. Besides hotprof's own code it contains {} \
         ({}; {}) and these Rust crates, each under the license its Cargo.toml declares:",
        libc.name, libc.license, libc.provenance
    ));
    let crates = bundled_crates(arch)?
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
         Comment: {comment}\n \
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

/// `text` as a field's value in a DEP-5 file: lines of at most 80 columns after the field's
/// name, continuation lines indented by one space.
fn wrap(text: &str) -> String {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("one line at least");
        if !line.is_empty() && line.len() + 1 + word.len() > 70 {
            lines.push(word.to_owned());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines.join("\n ")
}

/// `name version: license` of every crate linked into hotprof (normal dependencies of
/// profiler and of profiler-ebpf, whose object it embeds; proc-macros and build scripts run
/// at build time only), from `cargo metadata`.
fn bundled_crates(arch: Arch) -> Result<Vec<String>> {
    let json = util::stdout_of(cargo().args([
        "metadata",
        "--format-version",
        "1",
        "--filter-platform",
        arch.rust_target(),
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
pub(super) fn lintian(deb: &Path) -> Result<()> {
    step("dist", &format!("lintian {}", file_name(deb)));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::workspace_root;

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
    fn the_repository_unit_can_be_packaged() {
        let unit = fs::read_to_string(workspace_root().join(UNIT)).expect("unit");
        deb_unit(&unit).expect("dist can rewrite the repository's unit");
    }

    #[test]
    fn a_long_field_wraps_with_one_space_indents() {
        let text = "word ".repeat(40);
        let wrapped = wrap(&text);
        assert!(wrapped.lines().count() > 1);
        assert!(wrapped.lines().skip(1).all(|line| line.starts_with(' ')));
        assert!(wrapped.lines().all(|line| line.len() <= 71));
        assert_eq!(wrapped.split_whitespace().count(), 40);
    }
}
