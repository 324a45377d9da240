//! The workload's process: a word shared across fork(2) to hold the child at a gate, pipes,
//! fork and exec, waitpid(2), kill(2).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Where a forked child waits to exec: a word in a page shared across the fork, which the
/// child spins on, making no system call. 0 (the zero-filled page): the child is still
/// setting up.
pub struct Gate {
    word: std::ptr::NonNull<AtomicU32>,
}

impl Gate {
    /// The child spins, with nothing left to do before `exec`.
    pub const PARKED: u32 = 1;
    pub const GO: u32 = 2;
    /// The parent gave up before releasing it: the child exits without running the command.
    pub const ABORT: u32 = 3;
    const SIZE: usize = 4096;

    pub fn new() -> io::Result<Self> {
        // SAFETY: a fresh anonymous mapping, checked below; it is zero-filled (the child is
        // still setting up).
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let word = std::ptr::NonNull::new(page.cast::<AtomicU32>())
            .ok_or_else(|| io::Error::other("mmap returned a null page"))?;
        Ok(Self { word })
    }

    pub fn state(&self) -> &AtomicU32 {
        // SAFETY: the page is mapped, page-aligned and zero-initialised for as long as `self`
        // lives, and an AtomicU32 may be accessed from both processes.
        unsafe { self.word.as_ref() }
    }

    /// In the child: announces that it is parked and spins until told to go (true) or to
    /// give up (false). No system call: nothing here can reach a probe. Gives up at once if
    /// the parent already did (it stopped waiting for the child to park).
    fn park(&self) -> bool {
        if self
            .state()
            .compare_exchange(0, Self::PARKED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        loop {
            match self.state().load(Ordering::Acquire) {
                Self::GO => return true,
                Self::ABORT => return false,
                _ => std::hint::spin_loop(),
            }
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        // A child still waiting must not run unmeasured. (A child that has exec'd no longer
        // has the page; its copy in a child that has not stays mapped there.)
        if self.state().load(Ordering::Acquire) != Self::GO {
            self.state().store(Self::ABORT, Ordering::Release);
        }
        // SAFETY: the mapping made in `new`, unmapped once; nothing refers to it after this.
        unsafe { libc::munmap(self.word.as_ptr().cast(), Self::SIZE) };
    }
}

/// A pipe, both ends close-on-exec: (read, write).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array; failure is checked.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Forks a child that parks at `gate` and, once released, execs `argv` (looked up in PATH)
/// with its stdout on `stdout` and, given `off_terminal` (an open `/dev/null`), its stdin on
/// that and its stderr on `stdout` too, keeping it off hotprof's terminal; if the exec fails,
/// it writes its errno (4 bytes) to `exec_errors` and exits 127. It exits 125 without running
/// anything if the parent died or gave up at the gate, and 126 if its stdio could not be set.
/// If the parent dies, even by SIGKILL, the child gets SIGTERM. Returns the child's pid.
pub fn fork_gated(
    argv: &[CString],
    gate: &Gate,
    stdout: &OwnedFd,
    off_terminal: Option<&OwnedFd>,
    exec_errors: &OwnedFd,
) -> io::Result<u32> {
    if argv.is_empty() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: after fork the child only calls async-signal-safe functions (prctl, getppid,
    // dup2, signal, execvp, write, _exit) and atomics, on memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see the fork: only async-signal-safe calls, on fds and argv set up before it.
        unsafe {
            // If the parent dies, even by SIGKILL, the workload must not run on unmeasured
            // (and if it died before this call, the parent is no longer hotprof).
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() != parent {
                libc::_exit(125);
            }
            if libc::dup2(stdout.as_raw_fd(), 1) != 1 {
                libc::_exit(126);
            }
            if let Some(null) = off_terminal
                && (libc::dup2(null.as_raw_fd(), 0) != 0 || libc::dup2(stdout.as_raw_fd(), 2) != 2)
            {
                libc::_exit(126);
            }
            // hotprof's own handlers (tokio's) would catch the death signal above and
            // leave the child spinning; exec resets them anyway.
            for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
                libc::signal(signal, libc::SIG_DFL);
            }
            if !gate.park() {
                libc::_exit(125);
            }
            libc::execvp(argv_ptrs[0], argv_ptrs.as_ptr());
            let errno = *libc::__errno_location();
            libc::write(exec_errors.as_raw_fd(), (&errno as *const i32).cast(), 4);
            libc::_exit(127);
        }
    }
    Ok(pid as u32)
}

/// The errno a child forked by [`fork_gated`] wrote to its exec-error pipe, or None if the
/// pipe closed without one (the exec succeeded: the write end is close-on-exec).
pub fn exec_errno(exec_errors: &OwnedFd) -> Option<i32> {
    let mut errno = 0i32;
    // SAFETY: reading 4 bytes into an i32; EOF (0) means the exec succeeded (CLOEXEC).
    let n = unsafe { libc::read(exec_errors.as_raw_fd(), (&mut errno as *mut i32).cast(), 4) };
    (n == 4).then_some(errno)
}

/// The raw wait status of our child `pid` if it has exited, without blocking.
pub fn exited(pid: u32) -> Option<i32> {
    let mut status = 0;
    // SAFETY: polling our own child without blocking.
    (unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) } > 0).then_some(status)
}

/// Waits for our child `pid`; its shell-style exit code (128 + signal when killed).
pub fn wait_pid(pid: u32) -> io::Result<i32> {
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let rc = unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        if rc == pid as i32 {
            break;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
    Ok(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    })
}

/// Sends `signal` to our child `pid`.
pub fn kill(pid: u32, signal: i32) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as i32, signal) };
}
