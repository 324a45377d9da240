//! The `host_deb` checks of what `cargo xtask dist` builds: the amd64 .deb installs, works and
//! removes cleanly on this machine (as root; the package is removed again whatever happens);
//! the arm64 one, which dpkg here refuses (wrong architecture), is unpacked with `dpkg-deb -x`
//! and its binary run under qemu-user.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow, bail, ensure};

use crate::arch::Arch;
use crate::build;
use crate::dist;
use crate::host;
use crate::util::{self, fresh_dir, is_root, output, run, target_dir};

const PACKAGE: &str = "hotprof";
/// As in host.rs's `syscall_exact`.
const CALLS: u64 = 20_000;
/// What every package holds, as installed paths.
const PACKAGE_FILES: &[&str] = &[
    "/usr/bin/hotprof",
    "/usr/share/man/man1/hotprof.1.gz",
    "/usr/share/bash-completion/completions/hotprof",
    "/usr/share/zsh/vendor-completions/_hotprof",
    "/usr/share/fish/vendor_completions.d/hotprof.fish",
    "/usr/lib/systemd/system/hotprof-exporter.service",
    "/usr/share/doc/hotprof/copyright",
    "/usr/share/doc/hotprof/changelog.gz",
];

/// `dist` once per xtask run: both checks read its artifacts, and a second run would only
/// repeat the packing and lintian.
fn dist_once() -> Result<&'static dist::Dist> {
    static DIST: OnceLock<Result<dist::Dist, String>> = OnceLock::new();
    DIST.get_or_init(|| dist::dist().map_err(|error| format!("{error:#}")))
        .as_ref()
        .map_err(|error| anyhow!("cargo xtask dist failed: {error}"))
}

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
    let artifacts = dist_once()?;
    tarball_holds_everything(artifacts, Arch::X86_64)?;
    let deb = &artifacts.package(Arch::X86_64)?.deb;

    // The package's directories that exist before it is installed: those may stay after.
    let contents = util::stdout_of(Command::new("dpkg-deb").arg("-c").arg(deb))?;
    let existed_before: BTreeSet<PathBuf> = contents
        .lines()
        .filter_map(|line| line.split_whitespace().last())
        .map(|entry| PathBuf::from(entry.trim_start_matches('.')))
        .filter(|path| path.exists())
        .collect();

    let mut guard = RemoveOnDrop { armed: true };
    run(Command::new("dpkg").arg("-i").arg(deb))?;
    let listed = util::stdout_of(Command::new("dpkg").args(["-L", PACKAGE]))?;
    let paths: Vec<PathBuf> = listed
        .lines()
        .filter(|line| line.starts_with('/') && *line != "/.")
        .map(PathBuf::from)
        .collect();
    let files: Vec<&PathBuf> = paths.iter().filter(|path| !path.is_dir()).collect();
    println!("  installed {}: {} files", deb.display(), files.len());
    for expected in PACKAGE_FILES {
        ensure!(
            files
                .iter()
                .any(|file| file.as_path() == Path::new(*expected)),
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

/// `arch`'s tarball holds the binary, the main man page, the three completions, the unit, a
/// license and the README, under one top directory.
fn tarball_holds_everything(artifacts: &dist::Dist, arch: Arch) -> Result<()> {
    let tarball = &artifacts.package(arch)?.tarball;
    let listing = util::stdout_of(Command::new("tar").arg("-tzf").arg(tarball))?;
    let top = format!("{}/", dist::tarball_top(&artifacts.version, arch));
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
            tarball.display()
        );
    }
    ensure!(
        listing.lines().all(|line| line.starts_with(&top)),
        "{} has entries outside {top}:\n{listing}",
        tarball.display()
    );
    ensure!(
        listing
            .lines()
            .any(|line| line.starts_with(&format!("{top}LICENSE"))),
        "{} has no LICENSE",
        tarball.display()
    );
    println!(
        "  {}: {} entries",
        tarball.display(),
        listing.lines().count()
    );
    Ok(())
}

/// Files the arm64 package has in other bytes than the amd64 one: the binary, the copyright
/// file (another C library, another crate set) and the lintian overrides (static, not
/// static-pie).
const ARCH_SPECIFIC: &[&str] = &[
    "usr/bin/hotprof",
    "usr/share/doc/hotprof/copyright",
    "usr/share/lintian/overrides/hotprof",
];

/// Bad input the arm64 binary refuses before it loads anything into the kernel (qemu-user
/// has no `bpf()`): each one line on stderr and a failing exit.
const ARM64_BAD_INPUTS: &[(&[&str], &str)] = &[
    (&["--fn", "do_nanosleep", "--duration", "2"], "missing unit"),
    (&["--fn", "vfs_read", "--by", "nope"], "unknown --by key"),
];

/// `host_deb_arm64`: dpkg on this amd64 machine cannot install the arm64 package, so its
/// contents are unpacked (`dpkg-deb -x`) into `target/dist-check/arm64` and checked there: the
/// files of the amd64 package, the same bytes but for [`ARCH_SPECIFIC`] and the man pages'
/// version line; the binary is the very one the arm64 guests run, static, for aarch64, and under qemu-user says
/// its version and commit, prints its help and doctor's table, and refuses bad input in one
/// line; its man page renders and its bash completion registers.
pub fn arm64_contents() -> Result<()> {
    let arch = Arch::Aarch64;
    let artifacts = dist_once()?;
    tarball_holds_everything(artifacts, arch)?;
    let deb = &artifacts.package(arch)?.deb;
    let field = util::stdout_of(
        Command::new("dpkg-deb")
            .arg("--field")
            .arg(deb)
            .arg("Architecture"),
    )?;
    ensure!(
        field.trim() == arch.debian(),
        "{} says Architecture: {}",
        deb.display(),
        field.trim()
    );

    let check = target_dir().join("dist-check");
    let root = check.join(arch.debian());
    let reference = check.join(Arch::X86_64.debian());
    for (dir, deb) in [
        (&root, deb),
        (&reference, &artifacts.package(Arch::X86_64)?.deb),
    ] {
        fresh_dir(dir)?;
        run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(dir))?;
    }
    let hotprof = root.join("usr/bin/hotprof");
    let runner = arch
        .user_runner()
        .context("aarch64 has a user-mode runner")?;
    let version = util::stdout_of(arch.command(&hotprof).arg("--version")).with_context(|| {
        format!("could not run the arm64 binary under {runner} (qemu-user-static)")
    })?;
    let amd64_version =
        util::stdout_of(Command::new(reference.join("usr/bin/hotprof")).arg("--version"))?;
    same_files_as_amd64(&root, &reference, [&amd64_version, &version])?;

    let guest = build::guest_bin_dir(arch).join("hotprof");
    ensure!(
        fs::read(&hotprof)? == fs::read(&guest)?,
        "the arm64 package's /usr/bin/hotprof differs from {}, which the arm64 guests run",
        guest.display()
    );
    dist::ensure_static(arch, &hotprof)?;
    ensure!(
        version.contains(&format!("hotprof {} ", artifacts.version)),
        "arm64 hotprof --version says `{}`, want {}",
        version.trim(),
        artifacts.version
    );
    println!("  {runner} hotprof --version: {}", version.trim());
    let help = util::stdout_of(arch.command(&hotprof).arg("--help"))?;
    ensure!(
        help.contains("--fn") && help.contains("--syscall"),
        "arm64 hotprof --help names no --fn or --syscall:\n{help}"
    );
    // doctor reads the host's kernel through qemu-user (which has no `bpf()`, so its eBPF rows
    // say no and it exits 1): its table, no crash.
    let doctor = output(arch.command(&hotprof).arg("doctor"))?;
    let table = String::from_utf8_lossy(&doctor.stdout);
    let release = util::stdout_of(Command::new("uname").arg("-r"))?;
    ensure!(
        matches!(doctor.status.code(), Some(0 | 1))
            && table.lines().any(|line| {
                line.split_whitespace().collect::<Vec<_>>() == ["kernel", "yes", release.trim()]
            }),
        "arm64 hotprof doctor under {runner} ({}) printed no `kernel yes {}` row:\n{table}{}",
        doctor.status,
        release.trim(),
        String::from_utf8_lossy(&doctor.stderr)
    );
    println!(
        "  {runner} hotprof doctor: `kernel yes {}`, {}",
        release.trim(),
        doctor.status
    );
    for (args, expected) in ARM64_BAD_INPUTS {
        let out = output(arch.command(&hotprof).args(*args))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let command = format!("hotprof {}", args.join(" "));
        ensure!(!out.status.success(), "arm64 `{command}` exited 0");
        ensure!(
            stderr.lines().count() == 1 && stderr.contains(expected),
            "arm64 `{command}`: want one line saying '{expected}', got: {stderr}"
        );
        println!("  {runner} {command}: {}", stderr.trim());
    }

    let page = root.join("usr/share/man/man1/hotprof.1.gz");
    let rendered = output(
        Command::new("man")
            .arg("-l")
            .arg(&page)
            .env("MANPAGER", "cat"),
    )?;
    ensure!(
        rendered.status.success() && String::from_utf8_lossy(&rendered.stdout).contains("hotprof"),
        "man -l {} failed ({}): {}",
        page.display(),
        rendered.status,
        String::from_utf8_lossy(&rendered.stderr)
    );
    let completion = root.join("usr/share/bash-completion/completions/hotprof");
    let complete = util::stdout_of(
        Command::new("bash")
            .arg("-c")
            .arg("source \"$1\" && complete -p hotprof")
            .arg("bash")
            .arg(&completion),
    )?;
    ensure!(
        complete.contains("hotprof"),
        "the arm64 package's bash completion registers nothing for hotprof: {complete}"
    );
    println!("  man -l hotprof.1.gz renders; bash: {}", complete.trim());
    Ok(())
}

/// The arm64 package (unpacked in `root`) has exactly the amd64 one's files (in `reference`)
/// and, but for [`ARCH_SPECIFIC`], the same bytes: one set of man pages, completions, unit.
/// The man pages name the binary's `--version` (`versions`: amd64's, arm64's), whose eBPF
/// object differs: in them that is the one difference allowed.
fn same_files_as_amd64(root: &Path, reference: &Path, versions: [&str; 2]) -> Result<()> {
    let [amd64_object, arm64_object] = versions.map(|version| {
        version
            .split("eBPF object ")
            .nth(1)
            .and_then(|rest| rest.split([',', ')']).next())
            .unwrap_or_default()
            .to_owned()
    });
    ensure!(
        !amd64_object.is_empty() && amd64_object != arm64_object,
        "want two different eBPF objects named in `hotprof --version`: {versions:?}"
    );
    let listing = |dir: &Path| -> Result<BTreeSet<PathBuf>> {
        Ok(dist::walk(dir)?
            .into_iter()
            .filter(|path| path.is_file())
            .map(|path| path.strip_prefix(dir).map(Path::to_path_buf))
            .collect::<Result<_, _>>()?)
    };
    let (arm64, amd64) = (listing(root)?, listing(reference)?);
    ensure!(
        arm64 == amd64,
        "the arm64 and amd64 packages hold different files: only arm64 {:?}, only amd64 {:?}",
        arm64.difference(&amd64).collect::<Vec<_>>(),
        amd64.difference(&arm64).collect::<Vec<_>>()
    );
    for expected in PACKAGE_FILES {
        ensure!(
            arm64.contains(Path::new(expected.trim_start_matches('/'))),
            "the arm64 package has no {expected}"
        );
    }
    for file in &amd64 {
        if ARCH_SPECIFIC.iter().any(|path| file == Path::new(path)) {
            continue;
        }
        let (ours, theirs) = (root.join(file), reference.join(file));
        let same = if file.starts_with("usr/share/man") {
            let text = |page: &Path| util::stdout_of(Command::new("gzip").arg("-dc").arg(page));
            text(&ours)? == text(&theirs)?.replace(&amd64_object, &arm64_object)
        } else {
            fs::read(&ours)? == fs::read(&theirs)?
        };
        ensure!(
            same,
            "the arm64 package's /{} differs from the amd64 one's",
            file.display()
        );
    }
    println!(
        "  arm64 .deb unpacked in {}: {} files, the amd64 package's, the same but for {}",
        root.display(),
        arm64.len(),
        ARCH_SPECIFIC.join(", ")
    );
    Ok(())
}
