//! Running the workload after `--`: forked and held at a gate before `exec`, so the probes
//! are attached before its first instruction, and measured only while it runs. The system
//! calls are in `sys::process`.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

pub use crate::sys::process::wait_pid;
use crate::sys::process::{self, Gate};

/// A child process held before `exec` until [`Workload::release`], at a [`Gate`]: a word in a
/// page shared across the fork, which the child spins on, making no system call. The probes
/// follow the child (its pid enters the traced set) only once it is parked there, so nothing
/// it does before `exec` is measured: it used to wait in `read(2)` on a pipe, and whenever
/// that read began after the pid was followed, a run probing the read path (`vfs_read`,
/// `--syscall read`) counted it as the workload's.
pub struct Workload {
    pub pid: u32,
    program: String,
    gate: Gate,
    exec_error: Option<OwnedFd>,
    /// Reads the workload's output (copied to ours when relayed), remembering its last
    /// `name: key=value` line.
    stdout: Option<std::thread::JoinHandle<Option<String>>>,
    /// The last line it printed, as it runs.
    last_line: Arc<Mutex<Option<String>>>,
}

/// Where the workload's output goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WorkloadOutput {
    /// Its stdout copied to hotprof's, its stderr hotprof's own.
    #[default]
    Relayed,
    /// Kept off the terminal, which `hotprof top` draws on and reads keys from: stdout and
    /// stderr read (only the last line is shown), stdin from `/dev/null`.
    Kept,
}

/// How long the child may take to park after the fork (a few hundred µs on a real CPU).
const PARK_TIMEOUT: Duration = Duration::from_secs(10);

impl Workload {
    /// Forks `command`. The child blocks reading a pipe until released, then execs. (std's
    /// `Command::spawn` cannot do this: it waits for the exec itself.)
    pub fn spawn(command: &[String], output: WorkloadOutput) -> anyhow::Result<Self> {
        let program = command.first().context("empty workload command")?.clone();
        let argv: Vec<CString> = command
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .context("workload arguments must not contain NUL bytes")?;
        let gate = Gate::new().context("mapping a shared page for the workload's gate")?;
        let (error_read, error_write) =
            process::pipe().context("creating a pipe for the workload")?;
        let (out_read, out_write) = process::pipe().context("creating a pipe for the workload")?;
        let off_terminal = match output {
            WorkloadOutput::Relayed => None,
            WorkloadOutput::Kept => Some(OwnedFd::from(
                std::fs::File::open("/dev/null").context("opening /dev/null for the workload")?,
            )),
        };
        let pid = process::fork_gated(
            &argv,
            &gate,
            &out_write,
            off_terminal.as_ref(),
            &error_write,
        )
        .context("fork")?;
        drop(error_write);
        drop(out_write);
        let last_line = Arc::new(Mutex::new(None));
        let stdout = {
            let last_line = last_line.clone();
            let echo = output == WorkloadOutput::Relayed;
            std::thread::spawn(move || {
                relay_stdout(std::fs::File::from(out_read), echo, &last_line)
            })
        };
        let workload = Self {
            pid,
            program,
            gate,
            exec_error: Some(error_read),
            stdout: Some(stdout),
            last_line,
        };
        workload.wait_parked()?;
        Ok(workload)
    }

    /// Waits until the child is parked at its gate (so that following it from now on
    /// measures nothing of its set-up), or fails if it exited instead.
    fn wait_parked(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + PARK_TIMEOUT;
        while self.gate.state().load(Ordering::Acquire) != Gate::PARKED {
            if let Some(status) = process::exited(self.pid) {
                bail!(
                    "cannot run workload '{}': it exited before exec (status {status:#x})",
                    self.program
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "cannot run workload '{}': its process did not start within {} s",
                    self.program,
                    PARK_TIMEOUT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(())
    }

    /// Lets the workload exec; fails with the reason if the exec did not happen.
    pub fn release(&mut self) -> anyhow::Result<()> {
        self.gate.state().store(Gate::GO, Ordering::Release);
        if let Some(errno) = self
            .exec_error
            .take()
            .and_then(|errors| process::exec_errno(&errors))
        {
            let _ = self.wait_blocking();
            bail!(
                "cannot run workload '{}': {}",
                self.program,
                std::io::Error::from_raw_os_error(errno)
            );
        }
        Ok(())
    }

    /// Waits for the workload to exit (blocking; call from `spawn_blocking`). Returns the
    /// shell-style exit code (128 + signal when killed).
    pub fn wait_blocking(&self) -> std::io::Result<i32> {
        wait_pid(self.pid)
    }

    /// The numeric figures of the workload's last `name: key=value ...` line, keyed
    /// `name.key` (waits for its stdout to close).
    pub fn metrics(&mut self) -> std::collections::BTreeMap<String, f64> {
        let line = self.stdout.take().and_then(|t| t.join().ok()).flatten();
        line.map(|l| parse_metrics(&l)).unwrap_or_default()
    }

    /// The last line the workload printed so far, if any.
    pub fn last_line(&self) -> Option<String> {
        self.last_line.lock().ok().and_then(|line| line.clone())
    }

    /// Forwards a terminating signal to the workload (hotprof itself is stopping).
    pub fn signal(&self, signal: i32) {
        process::kill(self.pid, signal);
    }
}

/// Fails early, before any probe is attached, if `program` cannot be executed.
pub fn check_runnable(program: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |path: &std::path::Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if program.contains('/') {
        executable(std::path::Path::new(program))
    } else {
        std::env::var_os("PATH").is_some_and(|paths| {
            std::env::split_paths(&paths).any(|dir| executable(&dir.join(program)))
        })
    };
    if !found {
        bail!("cannot run workload '{program}': no such executable (checked PATH)");
    }
    Ok(())
}

/// Reads the workload's output line by line, copying it to hotprof's stdout when `echo` and
/// keeping the latest line in `last_line`; returns the last line that looks like a result
/// line.
fn relay_stdout(
    from: std::fs::File,
    echo: bool,
    last_line: &Mutex<Option<String>>,
) -> Option<String> {
    use std::io::{BufRead as _, Write as _};
    let mut last = None;
    let mut stdout = std::io::stdout();
    for line in std::io::BufReader::new(from).lines() {
        let Ok(line) = line else { break };
        if echo {
            let _ = writeln!(stdout, "{line}");
        }
        if let Ok(mut kept) = last_line.lock() {
            *kept = Some(line.clone());
        }
        if !parse_metrics(&line).is_empty() {
            last = Some(line);
        }
    }
    last
}

/// `syscall_lat: calls=10000 avg_ns=123.4 pid=7` → `{"syscall_lat.calls": 10000,
/// "syscall_lat.avg_ns": 123.4, "syscall_lat.pid": 7}`; non-numeric values are skipped.
pub fn parse_metrics(line: &str) -> std::collections::BTreeMap<String, f64> {
    let mut metrics = std::collections::BTreeMap::new();
    let Some((name, rest)) = line.split_once(": ") else {
        return metrics;
    };
    if name.is_empty() || name.contains(char::is_whitespace) {
        return metrics;
    }
    for pair in rest.split_whitespace() {
        if let Some((key, value)) = pair.split_once('=')
            && key != "pid" // an identity, not a figure to compare
            && let Ok(number) = value.parse::<f64>()
            && number.is_finite()
        {
            metrics.insert(format!("{name}.{key}"), number);
        }
    }
    metrics
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_result_lines() {
        let metrics =
            parse_metrics("syscall_lat: calls=10000 threads=1 avg_ns=123.4 list=1,2 pid=7");
        assert_eq!(metrics.get("syscall_lat.calls"), Some(&10000.0));
        assert_eq!(metrics.get("syscall_lat.avg_ns"), Some(&123.4));
        assert_eq!(metrics.get("syscall_lat.list"), None);
        assert_eq!(metrics.get("syscall_lat.pid"), None);
        assert_eq!(metrics.len(), 3);
        assert!(parse_metrics("hello world").is_empty());
        assert!(parse_metrics("two words: a=1").is_empty());
        assert!(parse_metrics("x: a=NaN b=inf").is_empty());
    }

    fn command(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    #[test]
    fn a_workload_is_parked_before_exec_until_released() {
        let mut workload =
            Workload::spawn(&command("echo gate: ran=1"), WorkloadOutput::Relayed).unwrap();
        // Parked: still hotprof's image, spinning, not yet the command.
        assert_eq!(workload.gate.state().load(Ordering::Acquire), Gate::PARKED);
        let own = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = std::fs::read_link(format!("/proc/{}/exe", workload.pid)).unwrap();
        assert_eq!(exe, own);
        workload.release().unwrap();
        assert_eq!(workload.wait_blocking().unwrap(), 0);
        assert_eq!(workload.metrics().get("gate.ran"), Some(&1.0));
    }

    #[test]
    fn a_kept_workload_reads_dev_null_and_its_stderr_is_read_too() {
        // `wc -c` counts what stdin holds: nothing, from /dev/null, whatever hotprof's is.
        let mut workload =
            Workload::spawn(&command("echo out: n=1; wc -c >&2"), WorkloadOutput::Kept).unwrap();
        workload.release().unwrap();
        assert_eq!(workload.wait_blocking().unwrap(), 0);
        assert_eq!(workload.metrics().get("out.n"), Some(&1.0));
        assert_eq!(workload.last_line().as_deref(), Some("0"));
    }

    #[test]
    fn a_workload_never_released_never_runs() {
        let marker = std::env::temp_dir().join(format!("hotprof-gate-{}", std::process::id()));
        let workload = Workload::spawn(
            &command(&format!("touch {}", marker.display())),
            WorkloadOutput::Relayed,
        )
        .unwrap();
        let pid = workload.pid;
        drop(workload);
        assert_eq!(wait_pid(pid).unwrap(), 125);
        assert!(!marker.exists());
    }

    #[test]
    fn a_command_that_cannot_run_fails_at_release() {
        let mut workload = Workload::spawn(
            &["/nonexistent/hotprof-test".to_string()],
            WorkloadOutput::Relayed,
        )
        .unwrap();
        let error = workload.release().unwrap_err().to_string();
        assert!(error.starts_with("cannot run workload"), "{error}");
    }
}
