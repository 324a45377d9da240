//! Builds the eBPF object (`profiler-ebpf`) for `bpfel-unknown-none` with the nightly toolchain
//! and bpf-linker; `src/attach/loader.rs` embeds it with `include_bytes_aligned!`.
//!
//! aya-build passes the eBPF cargo build's whole output on as `cargo:warning=` lines, which
//! cargo prints as warnings on every build, even when nothing is rebuilt ("Compiling …" times
//! sixty). So the build runs in a second process of this script, and its output is filtered
//! here: cargo's progress lines are dropped and everything else, real warnings included, is
//! kept. When the eBPF build fails, or with `HOTPROF_EBPF_VERBOSE=1`, all of it is shown.
//!
//! It also sets what `hotprof --version` prints: `HOTPROF_GIT_COMMIT` (the source tree's
//! commit, `-dirty` with uncommitted changes to tracked files, `unknown` without git),
//! `HOTPROF_AYA_VERSION` (from Cargo.lock) and `HOTPROF_EBPF_ID` (a hash of the three eBPF
//! objects just built). None of them can fail the build.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// Set in the second process: it does the build.
const CHILD: &str = "HOTPROF_EBPF_BUILD_CHILD";
/// `1`: show the eBPF build's whole output.
const VERBOSE: &str = "HOTPROF_EBPF_VERBOSE";

fn main() -> anyhow::Result<()> {
    if env::var_os(CHILD).is_some() {
        return build();
    }
    println!("cargo:rerun-if-env-changed={VERBOSE}");
    let me = env::current_exe().context("cannot find the build script's own path")?;
    let output = Command::new(&me)
        .env(CHILD, "1")
        .output()
        .with_context(|| format!("cannot run {}", me.display()))?;
    let show_all = !output.status.success() || env::var_os(VERBOSE).is_some_and(|v| v == "1");
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let progress = line
            .strip_prefix("cargo:warning=")
            .is_some_and(is_cargo_progress);
        if show_all || !progress {
            println!("{line}");
        }
    }
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    if !output.status.success() {
        bail!(
            "the eBPF build failed ({}); its output is above",
            output.status
        );
    }
    version_env();
    Ok(())
}

/// The `cargo:rustc-env` lines for `hotprof --version`.
fn version_env() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    println!(
        "cargo:rustc-env=HOTPROF_GIT_COMMIT={}",
        git_commit(&manifest)
    );
    let lock = manifest.join("../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let aya = std::fs::read_to_string(&lock)
        .ok()
        .and_then(|text| locked_version(&text, "aya"))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=HOTPROF_AYA_VERSION={aya}");
    let out_dir = env::var_os("OUT_DIR").map(PathBuf::from);
    let objects = out_dir.and_then(|dir| {
        OBJECTS
            .iter()
            .map(|object| std::fs::read(dir.join(object)).ok())
            .collect::<Option<Vec<_>>>()
    });
    let id = objects.map_or_else(|| "unknown".into(), |objects| object_id(&objects));
    println!("cargo:rustc-env=HOTPROF_EBPF_ID={id}");
}

/// `git` in the source tree, its stdout trimmed; `None` without git or outside a checkout.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    // No optional locks: `status` must not rewrite the index it is watched through.
    let output = Command::new("git")
        .arg("--no-optional-locks")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The short commit of the source tree, `-dirty` when tracked files differ from it, or
/// `unknown`. Cargo reruns this when HEAD, the branch it names or the index changes (a commit,
/// a checkout, `git add`); an edit alone does not, so `-dirty` is as of the last of those.
fn git_commit(dir: &Path) -> String {
    let Some(commit) = git(dir, &["rev-parse", "--short=7", "HEAD"]) else {
        return "unknown".into();
    };
    let watched = ["HEAD", "index", "packed-refs"]
        .into_iter()
        .map(str::to_owned)
        .chain(git(dir, &["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        let Some(path) = git(dir, &["rev-parse", "--git-path", &name]) else {
            continue;
        };
        // Relative to `dir` (git -C). Cargo counts a missing file as changed, on every build:
        // a branch whose ref is only in packed-refs is watched through its directory, where a
        // commit writes it.
        let path = dir.join(path);
        let target = if path.exists() {
            Some(path.as_path())
        } else if name.starts_with("refs/") {
            path.parent().filter(|parent| parent.exists())
        } else {
            None
        };
        if let Some(target) = target {
            println!("cargo:rerun-if-changed={}", target.display());
        }
    }
    let dirty = git(dir, &["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|status| !status.is_empty());
    if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    }
}

/// The version Cargo.lock pins for `package`: its `[[package]]` entry's `version` line.
fn locked_version(lock: &str, package: &str) -> Option<String> {
    let name = format!("name = \"{package}\"");
    let mut lines = lock.lines().map(str::trim);
    lines.find(|line| *line == name)?;
    let version = lines
        .next()?
        .strip_prefix("version = \"")?
        .strip_suffix('"')?;
    Some(version.to_owned())
}

/// The eBPF object build id: FNV-1a (64-bit) over the objects, 12 hex digits.
fn object_id(objects: &[Vec<u8>]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in objects.iter().flatten() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{:012x}", hash >> 16)
}

/// The objects the eBPF build makes, as `loader.rs` embeds them.
const OBJECTS: [&str; 3] = ["profiler", "profiler-plain", "profiler-compat"];

fn build() -> anyhow::Result<()> {
    let root_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../profiler-ebpf");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR is not set")?);
    // Built once per source state: clippy, the unit tests and the guest build each have their
    // own OUT_DIR, and each built the same three objects again (three full eBPF builds in a
    // clean `cargo xtask test`).
    let cached = object_key().map(|key| cache_root().join(key));
    if let Some(dir) = &cached
        && OBJECTS.iter().all(|object| dir.join(object).is_file())
    {
        // What aya-build would have said: rebuild when the eBPF sources change.
        println!("cargo:rerun-if-changed={root_dir}");
        for object in OBJECTS {
            std::fs::copy(dir.join(object), out_dir.join(object))
                .with_context(|| format!("cannot copy {object} from {}", dir.display()))?;
        }
        return check_arch(&out_dir);
    }
    let package = aya_build::Package {
        name: "profiler-ebpf",
        root_dir,
        ..Default::default()
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::default())?;
    for object in OBJECTS {
        slim_object(&out_dir.join(object))?;
    }
    check_arch(&out_dir)?;
    if let Some(dir) = cached {
        // A cache only: a failure to fill it costs the next build its time, nothing else.
        let _ = store_objects(&out_dir, &dir);
    }
    Ok(())
}

/// Refuses objects whose programs read another architecture's registers: each object names
/// its architecture in its `hotprof_arch` section (`profiler-ebpf/src/arch/`), and it must be
/// the one this build targets (aya-build takes it from the target, but a stale cache or an
/// override could hand over another's).
fn check_arch(out_dir: &Path) -> anyhow::Result<()> {
    let target = env::var("CARGO_CFG_TARGET_ARCH").context("CARGO_CFG_TARGET_ARCH is not set")?;
    for object in OBJECTS {
        let path = out_dir.join(object);
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let arch = elf_section(&bytes, b"hotprof_arch")
            .with_context(|| format!("{}: no hotprof_arch section", path.display()))?;
        if arch != target.as_bytes() {
            bail!(
                "the eBPF object {object} reads {} registers, but this build targets {target}: \
                 remove target/ebpf-objects and build again",
                String::from_utf8_lossy(arch)
            );
        }
    }
    Ok(())
}

/// The contents of section `name` of a little-endian ELF64 file (what bpf-linker writes).
fn elf_section<'a>(elf: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?));
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let sections = usize::try_from(u64_at(0x28)?).ok()?;
    let entry = usize::from(u16_at(0x3a)?);
    let count = usize::from(u16_at(0x3c)?);
    let names = usize::from(u16_at(0x3e)?);
    let header = |index: usize| sections + index * entry;
    let range = |index: usize| -> Option<&'a [u8]> {
        let offset = usize::try_from(u64_at(header(index) + 0x18)?).ok()?;
        let size = usize::try_from(u64_at(header(index) + 0x20)?).ok()?;
        elf.get(offset..offset.checked_add(size)?)
    };
    let strings = range(names)?;
    (0..count).find_map(|index| {
        let at = usize::try_from(u32_at(header(index))?).ok()?;
        let rest = strings.get(at..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        (&rest[..end] == name).then(|| range(index)).flatten()
    })
}

/// Where built objects are kept, one directory per [`object_key`].
fn cache_root() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")))
        .join("ebpf-objects")
}

/// A key for everything the objects are made from: the eBPF and shared crates' sources,
/// Cargo.lock, this script (which slims them), the nightly compiler and bpf-linker, and the
/// target they are built for. `None` when a part cannot be read: then nothing is cached.
fn object_key() -> Option<String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut parts: Vec<Vec<u8>> = Vec::new();
    for dir in ["../profiler-ebpf", "../profiler-common"] {
        let mut files = Vec::new();
        list_files(&manifest.join(dir), &mut files).ok()?;
        files.sort();
        for file in files {
            parts.push(file.to_string_lossy().into_owned().into_bytes());
            parts.push(std::fs::read(&file).ok()?);
        }
    }
    for file in ["../Cargo.lock", "build.rs"] {
        parts.push(std::fs::read(manifest.join(file)).ok()?);
    }
    let tool = |program: &str, args: &[&str]| -> Option<Vec<u8>> {
        let output = Command::new(program).args(args).output().ok()?;
        output.status.success().then_some(output.stdout)
    };
    parts.push(tool("rustup", &["run", "nightly", "rustc", "-vV"])?);
    parts.push(tool("bpf-linker", &["--version"])?);
    for var in [
        "CARGO_CFG_TARGET_ARCH",
        "CARGO_CFG_TARGET_ENDIAN",
        "RUSTC_BOOTSTRAP",
    ] {
        parts.push(env::var(var).unwrap_or_default().into_bytes());
    }
    Some(object_id(&parts))
}

/// Every file under `dir`.
fn list_files(dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            list_files(&path, files)?;
        } else {
            files.push(path);
        }
    }
    Ok(())
}

/// Copies the objects into `dir` through a directory of this process's own, renamed into
/// place, so that two builds at once never see half a cache entry.
fn store_objects(out_dir: &Path, dir: &Path) -> std::io::Result<()> {
    let staging = dir.with_extension(format!("tmp{}", std::process::id()));
    std::fs::create_dir_all(&staging)?;
    for object in OBJECTS {
        std::fs::copy(out_dir.join(object), staging.join(object))?;
    }
    let renamed = std::fs::rename(&staging, dir);
    if renamed.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    renamed
}

/// Drops what the loader never needs from an eBPF object: the DWARF bpf-linker made the BTF
/// from (15 of its 23 MB) and the BTF line info (2 MB of `.BTF.ext`, with as much again in
/// relocations), which only annotates verifier logs with source lines. aya 0.14 copies a
/// section's whole line info once per program in it, so with 64 programs per section that
/// copying was 40 % of hotprof's start-up. The BTF types and function info stay.
fn slim_object(path: &Path) -> anyhow::Result<()> {
    let objcopy = llvm_objcopy()?;
    let ext = path.with_extension("btf-ext");
    let run = |args: &[&std::ffi::OsStr]| -> anyhow::Result<()> {
        let status = Command::new(&objcopy)
            .args(args)
            .status()
            .with_context(|| format!("cannot run {}", objcopy.display()))?;
        if !status.success() {
            bail!("{} {args:?} failed: {status}", objcopy.display());
        }
        Ok(())
    };
    let mut dump = std::ffi::OsString::from(".BTF.ext=");
    dump.push(&ext);
    run(&[
        "--strip-debug".as_ref(),
        "--remove-section=.rel.BTF.ext".as_ref(),
        "--dump-section".as_ref(),
        &dump,
        path.as_os_str(),
    ])?;
    let section = std::fs::read(&ext).with_context(|| format!("cannot read {}", ext.display()))?;
    std::fs::write(&ext, without_line_info(&section)?)
        .with_context(|| format!("cannot write {}", ext.display()))?;
    let mut update = std::ffi::OsString::from(".BTF.ext=");
    update.push(&ext);
    run(&["--update-section".as_ref(), &update, path.as_os_str()])?;
    std::fs::remove_file(&ext).with_context(|| format!("cannot remove {}", ext.display()))
}

/// The `llvm-objcopy` of the LLVM bpf-linker links against (any recent one reads BPF ELF).
fn llvm_objcopy() -> anyhow::Result<PathBuf> {
    let candidates = [
        "/usr/lib/llvm-22/bin/llvm-objcopy",
        "/usr/bin/llvm-objcopy-22",
        "/usr/bin/llvm-objcopy",
    ];
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .with_context(|| {
            format!(
                "no llvm-objcopy (looked for {candidates:?}): `cargo xtask setup` installs llvm-22"
            )
        })
}

/// A `.BTF.ext` section (header, function info, line info, CO-RE relocations) without its
/// line info. The header's offsets count from its end; the function info stays where it is.
fn without_line_info(section: &[u8]) -> anyhow::Result<Vec<u8>> {
    let word = |at: usize| -> anyhow::Result<u32> {
        let bytes = section.get(at..at + 4).context(".BTF.ext is truncated")?;
        Ok(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
    };
    if section.get(..2) != Some(&0xeb9f_u16.to_le_bytes()[..]) {
        bail!(".BTF.ext has no BTF magic");
    }
    let header_len = word(4)? as usize;
    let (func_off, func_len) = (word(8)? as usize, word(12)? as usize);
    let core_relo_len = if header_len >= 32 { word(28)? } else { 0 };
    if core_relo_len != 0 {
        // Not produced by our programs; keeping it would need moving it too.
        bail!(".BTF.ext has CO-RE relocations");
    }
    let func_end = header_len + func_off + func_len;
    let mut out = section
        .get(..func_end)
        .context(".BTF.ext function info is truncated")?
        .to_vec();
    let after_funcs = (func_off + func_len) as u32;
    out[16..20].copy_from_slice(&after_funcs.to_le_bytes()); // line_info_off
    out[20..24].copy_from_slice(&0u32.to_le_bytes()); // line_info_len
    if header_len >= 32 {
        out[24..28].copy_from_slice(&after_funcs.to_le_bytes()); // core_relo_off
    }
    Ok(out)
}

/// A cargo status line ("   Compiling aya-ebpf v0.2.1", "    Finished `release` …"): the
/// verb is capitalized and right-aligned in cargo's 12-column gutter.
fn is_cargo_progress(line: &str) -> bool {
    const VERBS: &[&str] = &[
        "Adding",
        "Blocking",
        "Building",
        "Checking",
        "Compiling",
        "Downloaded",
        "Downloading",
        "Finished",
        "Fresh",
        "Locking",
        "Updating",
    ];
    let trimmed = line.trim_start();
    let indented = line.len() - trimmed.len() <= 12;
    indented
        && trimmed
            .split_whitespace()
            .next()
            .is_some_and(|verb| VERBS.contains(&verb))
}
