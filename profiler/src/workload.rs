//! Running the workload after `--`: forked and held at a gate before `exec`, so the probes
//! are attached before its first instruction, and measured only while it runs.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{Context as _, bail};

/// A child process held before `exec` until [`Workload::release`].
pub struct Workload {
    pub pid: u32,
    program: String,
    gate: Option<OwnedFd>,
    exec_error: Option<OwnedFd>,
    /// Copies the workload's stdout to ours, remembering its last `name: key=value` line.
    stdout: Option<std::thread::JoinHandle<Option<String>>>,
}

fn pipe() -> anyhow::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array; failure is checked.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("creating a pipe for the workload");
    }
    // SAFETY: both fds were just created and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Workload {
    /// Forks `command`. The child blocks reading a pipe until released, then execs. (std's
    /// `Command::spawn` cannot do this: it waits for the exec itself.)
    pub fn spawn(command: &[String]) -> anyhow::Result<Self> {
        let program = command.first().context("empty workload command")?.clone();
        let argv: Vec<CString> = command
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .context("workload arguments must not contain NUL bytes")?;
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let (gate_read, gate_write) = pipe()?;
        let (error_read, error_write) = pipe()?;
        let (out_read, out_write) = pipe()?;
        // SAFETY: after fork the child only calls async-signal-safe functions (read, execvp,
        // write, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error()).context("fork");
        }
        if pid == 0 {
            // SAFETY: see the fork: only async-signal-safe calls, on fds and argv set up before it.
            unsafe {
                // If hotprof dies, even by SIGKILL, the workload must not run on unmeasured.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                let mut byte = 0u8;
                if libc::read(gate_read.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) != 1 {
                    // hotprof went away before releasing us: do not run unmeasured.
                    libc::_exit(125);
                }
                if libc::dup2(out_write.as_raw_fd(), 1) != 1 {
                    libc::_exit(126);
                }
                libc::execvp(argv_ptrs[0], argv_ptrs.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(error_write.as_raw_fd(), (&errno as *const i32).cast(), 4);
                libc::_exit(127);
            }
        }
        drop(gate_read);
        drop(error_write);
        drop(out_write);
        let stdout = std::thread::spawn(move || relay_stdout(std::fs::File::from(out_read)));
        Ok(Self {
            pid: pid as u32,
            program,
            gate: Some(gate_write),
            exec_error: Some(error_read),
            stdout: Some(stdout),
        })
    }

    /// Lets the workload exec; fails with the reason if the exec did not happen.
    pub fn release(&mut self) -> anyhow::Result<()> {
        if let Some(gate) = self.gate.take() {
            // SAFETY: writing one byte to the pipe we own.
            if unsafe { libc::write(gate.as_raw_fd(), [1u8].as_ptr().cast(), 1) } != 1 {
                return Err(std::io::Error::last_os_error()).context("releasing the workload");
            }
        }
        if let Some(errors) = self.exec_error.take() {
            let mut errno = 0i32;
            // SAFETY: reading 4 bytes into an i32; EOF (0) means the exec succeeded (CLOEXEC).
            let n = unsafe { libc::read(errors.as_raw_fd(), (&mut errno as *mut i32).cast(), 4) };
            if n == 4 {
                let _ = self.wait_blocking();
                bail!(
                    "cannot run workload '{}': {}",
                    self.program,
                    std::io::Error::from_raw_os_error(errno)
                );
            }
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

    /// Forwards a terminating signal to the workload (hotprof itself is stopping).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.pid as i32, signal) };
    }
}

/// `waitpid` returning a shell-style exit code.
pub fn wait_pid(pid: u32) -> std::io::Result<i32> {
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let rc = unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        if rc == pid as i32 {
            break;
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
    Ok(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    })
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

/// Copies the workload's output to hotprof's stdout line by line; returns the last line that
/// looks like a result line.
fn relay_stdout(from: std::fs::File) -> Option<String> {
    use std::io::{BufRead as _, Write as _};
    let mut last = None;
    let mut stdout = std::io::stdout();
    for line in std::io::BufReader::new(from).lines() {
        let Ok(line) = line else { break };
        let _ = writeln!(stdout, "{line}");
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
}
