//! `epoll_nest DEPTH ITERS`: poll the outermost of DEPTH nested epolls.
//!
//! Polling an epoll instance that watches another epoll instance makes the
//! kernel's `__ep_eventpoll_poll` (static and recursive; the symbol is
//! `__ep_eventpoll_poll.isra.0` in Debian's 6.12) call itself once per
//! nesting level on the same task. That gives a profiler a known pattern of
//! nested entries and exits of one function to check its frame timing on.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::ExitCode;

use workloads::cli::parse_int;
use workloads::clock::Stopwatch;
use workloads::{Args, Error, Report, run_main};

const NAME: &str = "epoll_nest";
const USAGE: &str = "\
epoll_nest - poll() a chain of DEPTH nested epoll instances ITERS times

Usage: epoll_nest DEPTH ITERS

  DEPTH  number of epoll instances, 1..=4: epoll 1 watches a signalled
         eventfd (EPOLLIN), epoll k watches epoll k-1. The kernel bounds
         epoll-in-epoll nesting by EP_MAX_NESTS = 4 (fs/eventpoll.c) and
         fails EPOLL_CTL_ADD with ELOOP beyond it; 4 stays within that
         limit however a kernel version counts it (6.1 and 6.12 accept a
         5th instance and refuse a 6th).
  ITERS  number of poll() calls (1..=100000000)

Each iteration is one poll() with timeout 0 on the outermost epoll fd and
must report it readable (POLLIN); anything else is an error. In the kernel
each poll() enters __ep_eventpoll_poll once per level, recursively, so the
timed loop makes DEPTH * ITERS entries (setting up the chain adds
0 + 1 + ... + (DEPTH-1) more, before the loop).

Output (last line):
  epoll_nest: depth=D iters=I nested_polls=N elapsed_ns=E avg_ns=A pid=P
    nested_polls  D * I, the __ep_eventpoll_poll entries the loop causes
    elapsed_ns    the whole poll() loop, CLOCK_MONOTONIC
    avg_ns        elapsed_ns / iters
";

fn main() -> ExitCode {
    run_main(NAME, USAGE, &[], run)
}

fn run(args: &Args) -> Result<Report, Error> {
    let [depth, iters] = args.positionals(["DEPTH", "ITERS"])?;
    let depth = parse_int("DEPTH", depth, 1, 4)?;
    let iters = parse_int("ITERS", iters, 1, 100_000_000)?;
    let chain = EpollChain::build(depth as usize)?;
    let elapsed_ns = poll_repeatedly(chain.outermost(), iters)?;
    Ok(Report::new(NAME)
        .field("depth", depth)
        .field("iters", iters)
        .field("nested_polls", depth * iters)
        .field("elapsed_ns", elapsed_ns)
        .float("avg_ns", elapsed_ns as f64 / iters as f64, 1)
        .field("pid", workloads::own_pid()))
}

/// A signalled eventfd and the epoll instances stacked on top of it.
/// Dropping it closes them all.
struct EpollChain {
    _eventfd: OwnedFd,
    epolls: Vec<OwnedFd>,
}

impl EpollChain {
    fn build(depth: usize) -> Result<Self, Error> {
        // Counter 1 makes the eventfd readable for good: nothing reads it.
        // SAFETY: eventfd(2) takes only integers and touches no memory; the result is checked.
        let eventfd = owned(unsafe { libc::eventfd(1, libc::EFD_CLOEXEC) }, "eventfd")?;
        let mut epolls: Vec<OwnedFd> = Vec::with_capacity(depth);
        for level in 1..=depth {
            // SAFETY: epoll_create1(2) takes only flags and touches no memory; the result is
            // checked.
            let epoll = owned(
                unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) },
                "epoll_create1",
            )?;
            let watched = epolls.last().map_or(eventfd.as_raw_fd(), |e| e.as_raw_fd());
            watch_readable(&epoll, watched)
                .map_err(|err| Error::os(&format!("epoll_ctl(ADD) at level {level}"), err))?;
            epolls.push(epoll);
        }
        Ok(Self {
            _eventfd: eventfd,
            epolls,
        })
    }

    fn outermost(&self) -> RawFd {
        // `build` is only called with depth >= 1.
        self.epolls.last().map_or(-1, |e| e.as_raw_fd())
    }
}

/// Takes ownership of a descriptor a libc call returned, or its errno.
fn owned(fd: RawFd, what: &str) -> Result<OwnedFd, Error> {
    if fd < 0 {
        return Err(Error::last_os(what));
    }
    // SAFETY: `fd` was just returned to us and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Level-triggered EPOLLIN watch of `fd` by `epoll`.
fn watch_readable(epoll: &OwnedFd, fd: RawFd) -> std::io::Result<()> {
    let mut event = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: fd as u64,
    };
    // SAFETY: both descriptors are open and `event` is a valid epoll_event.
    let rc = unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Polls `fd` (timeout 0) `iters` times, requiring POLLIN every time;
/// returns the loop's duration.
fn poll_repeatedly(fd: RawFd, iters: u64) -> Result<u64, Error> {
    let watch = Stopwatch::start();
    for iter in 0..iters {
        let mut pollfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pollfd` is one valid pollfd.
        let ready = unsafe { libc::poll(&mut pollfd, 1, 0) };
        if ready < 0 {
            return Err(Error::last_os(&format!("poll (iteration {iter})")));
        }
        if ready != 1 || pollfd.revents & libc::POLLIN == 0 {
            return Err(Error::failed(format!(
                "iteration {iter}: outermost epoll not readable (poll returned {ready}, revents {:#x})",
                pollfd.revents
            )));
        }
    }
    Ok(watch.elapsed_ns())
}
