//! A check run in a process of its own (`cargo xtask scenario NAME@KERNEL`, `cargo xtask
//! host-check NAME`, both hidden), its output kept in a log that is printed whole when it
//! ends, so that checks running at once never interleave their lines.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, anyhow};

use super::Results;
use crate::util::target_dir;

/// Where each child's log and error go (and each scenario's output, beside them).
pub(super) fn out_root() -> PathBuf {
    target_dir().join("vm-out").join("test")
}

/// A check's child process.
pub(super) struct CheckProcess {
    name: String,
    /// Whether nothing may run beside it.
    pub alone: bool,
    child: Child,
    started: Instant,
    log: PathBuf,
    error_file: PathBuf,
}

impl CheckProcess {
    /// Starts `xtask ARGS --error-file FILE`, the check `name`; with `live` its output goes
    /// straight to ours, else to its log.
    pub fn start(name: &str, args: &[&str], alone: bool, live: bool) -> Result<Self> {
        let root = out_root();
        fs::create_dir_all(&root)
            .with_context(|| format!("could not create {}", root.display()))?;
        let log = root.join(format!("{name}.log"));
        let error_file = root.join(format!("{name}.error"));
        let _ = fs::remove_file(&error_file);
        let me = std::env::current_exe().context("cannot find xtask's own path")?;
        let mut command = Command::new(me);
        command
            .args(args)
            .arg("--error-file")
            .arg(&error_file)
            .stdin(Stdio::null());
        if live {
            println!("\n=== {name}");
        } else {
            let out = fs::File::create(&log)
                .with_context(|| format!("could not create {}", log.display()))?;
            command
                .stdout(out.try_clone().context("could not share the log's file")?)
                .stderr(out);
        }
        let child = command
            .spawn()
            .with_context(|| format!("could not start the check {name}"))?;
        Ok(Self {
            name: name.to_owned(),
            alone,
            child,
            started: Instant::now(),
            log,
            error_file,
        })
    }

    /// Its exit status, if it has ended.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Waits for it to end, then [`CheckProcess::finish`]es it.
    pub fn wait(mut self, results: &mut Results) {
        let status = self.child.wait().map_err(anyhow::Error::from);
        self.finish(status, false, results);
    }

    /// Prints the child's log (unless it was live) and records its row.
    pub fn finish(self, status: Result<ExitStatus>, live: bool, results: &mut Results) {
        let time = self.started.elapsed();
        if !live {
            println!("\n=== {}", self.name);
            print!("{}", fs::read_to_string(&self.log).unwrap_or_default());
        }
        let outcome = status.and_then(|status| {
            if status.success() {
                return Ok(());
            }
            Err(match fs::read_to_string(&self.error_file) {
                Ok(error) => anyhow!("{}", error.trim_end()),
                Err(_) => anyhow!("the check's process ended with {status} and said nothing"),
            })
        });
        results.record(&self.name, time, outcome);
    }
}

/// The child's side: how a check run as a child ends. With `--error-file` a failure is
/// written there (the runner prints it, its first line the summary's note), not returned.
pub(super) fn exit_with(result: Result<()>, error_file: Option<&Path>) -> Result<ExitCode> {
    match (result, error_file) {
        (Ok(()), _) => Ok(ExitCode::SUCCESS),
        (Err(err), Some(path)) => {
            fs::write(path, format!("{err:#}"))
                .with_context(|| format!("could not write {}", path.display()))?;
            Ok(ExitCode::FAILURE)
        }
        (Err(err), None) => Err(err),
    }
}
