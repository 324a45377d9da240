//! The `host_deb` check: the .deb `cargo xtask dist` builds installs, works and removes
//! cleanly on this machine (as root; the package is removed again whatever happens).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail, ensure};

use crate::arch::Arch;
use crate::build;
use crate::dist;
use crate::host;
use crate::util::{self, is_root, output, run};

const PACKAGE: &str = "hotprof";
/// As in host.rs's `syscall_exact`.
const CALLS: u64 = 20_000;

/// Runs `dpkg -r hotprof` when dropped, so a check that fails midway leaves nothing installed.
struct RemoveOnDrop {
    armed: bool,
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if self.armed {
            println!("  removing the package after a failure");
            let _ = output(Command::new("dpkg").args(["-r", PACKAGE]));
        }
    }
}

/// dpkg's status of the package: `installed`, `not-installed`, `config-files`, …; `None`
/// when dpkg has never heard of it.
fn dpkg_status() -> Option<String> {
    let mut query = Command::new("dpkg-query");
    query.args(["-W", "-f=${db:Status-Status}", PACKAGE]);
    util::stdout_of(&mut query).ok()
}

/// `dpkg -i` the freshly built .deb; `hotprof --version`, `man -w hotprof`, the bash
/// completion and `hotprof --syscall getpid` (an exact count, as `host_syscall_exact`) from
/// the installed files; the unit installed but not enabled; then `dpkg -r` leaves none of
/// the package's files and dpkg calls it not installed.
pub fn install_use_remove() -> Result<()> {
    ensure!(
        is_root(),
        "host_deb installs a package: it must run as root"
    );
    if dpkg_status().as_deref() == Some("installed") {
        bail!(
            "a hotprof package is already installed; this check would remove it \
             (`dpkg -r hotprof` first if it is a leftover)"
        );
    }
    let artifacts = dist::dist()?;
    tarball_holds_everything(&artifacts)?;

    // The package's directories that exist before it is installed: those may stay after.
    let contents = util::stdout_of(Command::new("dpkg-deb").arg("-c").arg(&artifacts.deb))?;
    let existed_before: BTreeSet<PathBuf> = contents
        .lines()
        .filter_map(|line| line.split_whitespace().last())
        .map(|entry| PathBuf::from(entry.trim_start_matches('.')))
        .filter(|path| path.exists())
        .collect();

    let mut guard = RemoveOnDrop { armed: true };
    run(Command::new("dpkg").arg("-i").arg(&artifacts.deb))?;
    let listed = util::stdout_of(Command::new("dpkg").args(["-L", PACKAGE]))?;
    let paths: Vec<PathBuf> = listed
        .lines()
        .filter(|line| line.starts_with('/') && *line != "/.")
        .map(PathBuf::from)
        .collect();
    let files: Vec<&PathBuf> = paths.iter().filter(|path| !path.is_dir()).collect();
    println!(
        "  installed {}: {} files",
        artifacts.deb.display(),
        files.len()
    );
    for expected in [
        "/usr/bin/hotprof",
        "/usr/share/man/man1/hotprof.1.gz",
        "/usr/share/bash-completion/completions/hotprof",
        "/usr/share/zsh/vendor-completions/_hotprof",
        "/usr/share/fish/vendor_completions.d/hotprof.fish",
        "/usr/lib/systemd/system/hotprof-exporter.service",
        "/usr/share/doc/hotprof/copyright",
        "/usr/share/doc/hotprof/changelog.gz",
    ] {
        ensure!(
            files
                .iter()
                .any(|file| file.as_path() == Path::new(expected)),
            "the package has no {expected}:\n{listed}"
        );
    }

    let version = util::stdout_of(Command::new("/usr/bin/hotprof").arg("--version"))?;
    ensure!(
        version.contains(&artifacts.version),
        "hotprof --version says `{}`, want {}",
        version.trim(),
        artifacts.version
    );
    println!("  hotprof --version: {}", version.trim());

    let page = util::stdout_of(Command::new("man").args(["-w", PACKAGE]))?;
    ensure!(
        page.trim() == "/usr/share/man/man1/hotprof.1.gz",
        "man -w hotprof finds {}, not the package's page",
        page.trim()
    );
    let rendered = output(Command::new("man").arg(PACKAGE).env("MANPAGER", "cat"))?;
    ensure!(
        rendered.status.success() && String::from_utf8_lossy(&rendered.stdout).contains("hotprof"),
        "man hotprof failed ({}): {}",
        rendered.status,
        String::from_utf8_lossy(&rendered.stderr)
    );

    let complete = util::stdout_of(Command::new("bash").args([
        "-c",
        "source /usr/share/bash-completion/completions/hotprof && complete -p hotprof",
    ]))?;
    ensure!(
        complete.contains("hotprof"),
        "the bash completion registers nothing for hotprof: {complete}"
    );
    println!("  man -w: {}; bash: {}", page.trim(), complete.trim());

    let unit = "/usr/lib/systemd/system/hotprof-exporter.service";
    let verify = output(Command::new("systemd-analyze").arg("verify").arg(unit))?;
    ensure!(
        verify.status.success() && verify.stderr.is_empty(),
        "systemd-analyze verify {unit}: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    let enabled = Path::new("/etc/systemd/system/multi-user.target.wants/hotprof-exporter.service");
    ensure!(
        !enabled.exists(),
        "the package enabled the unit ({} exists)",
        enabled.display()
    );

    syscall_exact()?;

    guard.armed = false;
    run(Command::new("dpkg").args(["-r", PACKAGE]))?;
    // Every file goes; a directory stays only if it was there before (another package's).
    let left: Vec<String> = paths
        .iter()
        .filter(|path| path.symlink_metadata().is_ok())
        .filter(|path| !(path.is_dir() && existed_before.contains(*path)))
        .map(|path| path.display().to_string())
        .collect();
    ensure!(
        left.is_empty(),
        "dpkg -r left the package's files or directories: {}",
        left.join(" ")
    );
    let status = output(Command::new("dpkg").args(["-s", PACKAGE]))?;
    let said = String::from_utf8_lossy(&status.stderr).into_owned()
        + &String::from_utf8_lossy(&status.stdout);
    ensure!(
        !status.status.success() && said.contains("not installed"),
        "after dpkg -r, dpkg -s hotprof says: {said}"
    );
    println!("  removed: none of the {} files left", files.len());
    Ok(())
}

/// `/usr/bin/hotprof --syscall getpid -- syscall_lat N` counts exactly N, as host.rs's
/// `syscall_exact` checks the development build. The workload is the static one `dist` just
/// built with hotprof (the guest build).
fn syscall_exact() -> Result<()> {
    let syscall_lat = build::guest_bin_dir(Arch::X86_64).join("syscall_lat");
    host::getpid_count_is_exact(Path::new("/usr/bin/hotprof"), &syscall_lat, CALLS)?;
    println!("  /usr/bin/hotprof --syscall getpid -- syscall_lat {CALLS}: exactly {CALLS} calls");
    Ok(())
}

/// The tarball holds the binary, the main man page, the three completions, the unit, a
/// license and the README, under one top directory.
fn tarball_holds_everything(artifacts: &dist::Dist) -> Result<()> {
    let listing = util::stdout_of(Command::new("tar").arg("-tzf").arg(&artifacts.tarball))?;
    let top = format!("hotprof-{}-x86_64-linux/", artifacts.version);
    for entry in [
        "hotprof",
        "man/man1/hotprof.1",
        "completions/hotprof.bash",
        "completions/_hotprof",
        "completions/hotprof.fish",
        "systemd/hotprof-exporter.service",
        "README",
    ] {
        ensure!(
            listing.lines().any(|line| line == format!("{top}{entry}")),
            "{} has no {top}{entry}:\n{listing}",
            artifacts.tarball.display()
        );
    }
    ensure!(
        listing.lines().all(|line| line.starts_with(&top)),
        "{} has entries outside {top}:\n{listing}",
        artifacts.tarball.display()
    );
    ensure!(
        listing
            .lines()
            .any(|line| line.starts_with(&format!("{top}LICENSE"))),
        "{} has no LICENSE",
        artifacts.tarball.display()
    );
    println!(
        "  {}: {} entries",
        artifacts.tarball.display(),
        listing.lines().count()
    );
    Ok(())
}
