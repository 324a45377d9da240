//! Small helpers shared by every task: where the workspace is, running commands with errors
//! that name the command, and uniform progress output.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{Context, Result, bail};

/// The workspace root. xtask is always built from this workspace, so its manifest directory's
/// parent is the root no matter where `cargo xtask` was started from.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map_or_else(|| manifest_dir.to_path_buf(), Path::to_path_buf)
}

/// `<root>/target`: kernels, guest builds, initramfs images and VM outputs all live there, so
/// `cargo clean` or a fresh clone starts from nothing.
pub fn target_dir() -> PathBuf {
    workspace_root().join("target")
}

/// The cargo that runs us (so the same toolchain builds everything), or `cargo` from PATH,
/// started in the workspace root with cargo's bin directory on PATH: profiler's build script
/// needs the `bpf-linker` that `setup` put there, and a fresh shell may not list it yet.
pub fn cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root());
    if let Some(path) = path_with_cargo_bin() {
        cmd.env("PATH", path);
    }
    cmd
}

/// Cargo's bin directory (`$CARGO_HOME/bin`, by default `~/.cargo/bin`).
pub fn cargo_bin_dir() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo"))
        .join("bin")
}

/// PATH with cargo's bin directory appended, or `None` when it is already there.
fn path_with_cargo_bin() -> Option<std::ffi::OsString> {
    let bin = cargo_bin_dir();
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|dir| dir == bin) {
        return None;
    }
    let dirs = std::env::split_paths(&path).chain(std::iter::once(bin));
    std::env::join_paths(dirs).ok()
}

/// Whether we run with root rights (apt-get needs them). The owner of `/proc/self` is the
/// effective uid, which avoids an `unsafe` libc call.
pub fn is_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

/// The command line as a shell would show it, for progress and error messages.
pub fn display_cmd(cmd: &Command) -> String {
    let mut line = String::new();
    for (key, value) in cmd.get_envs() {
        // PATH is only ever widened here; printing it would drown the command.
        if let (Some(value), false) = (value, key == "PATH") {
            let _ = write!(line, "{}={} ", key.to_string_lossy(), quote(value));
        }
    }
    // `cargo`, not `/root/.rustup/toolchains/…/bin/cargo`: the name is what a reader needs.
    let program = Path::new(cmd.get_program());
    line.push_str(&quote(program.file_name().unwrap_or(program.as_os_str())));
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    line
}

fn quote(word: &OsStr) -> String {
    let word = word.to_string_lossy();
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+~@%^".contains(c));
    if plain {
        word.into_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Runs `cmd` with the terminal attached (its output streams live) and fails unless it exits 0.
pub fn run(cmd: &mut Command) -> Result<()> {
    let line = display_cmd(cmd);
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    Ok(())
}

/// Runs `cmd` with its output captured; returns it whatever the exit status.
pub fn output(cmd: &mut Command) -> Result<Output> {
    let line = display_cmd(cmd);
    cmd.stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not start `{line}`"))
}

/// Runs `cmd` with its output captured and returns its stdout; on failure the error carries
/// the command's stderr, which is where tools explain themselves.
pub fn stdout_of(cmd: &mut Command) -> Result<String> {
    let line = display_cmd(cmd);
    let out = output(cmd)?;
    if !out.status.success() {
        bail!(
            "`{line}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{line}` printed non-UTF-8 output"))
}

/// Prints a progress heading for one step of a task.
pub fn step(task: &str, what: &str) {
    println!("[{task}] {what}");
}

/// Empties `dir` (creating it if needed), so a result directory never shows stale files.
pub fn fresh_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("could not clear {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))
}

/// Formats a duration as seconds with one decimal, the precision every report here uses.
pub fn secs(duration: std::time::Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_cmd_quotes_only_what_needs_it() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo it's"]).env("A", "b c");
        assert_eq!(display_cmd(&cmd), r"A='b c' sh -c 'echo it'\''s'");
    }

    #[test]
    fn workspace_root_holds_the_workspace_manifest() {
        assert!(workspace_root().join("Cargo.toml").is_file());
        assert!(workspace_root().join("xtask").is_dir());
    }
}
