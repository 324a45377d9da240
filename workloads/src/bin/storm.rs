//! `storm PROCESSES THREADS CALLS [--exec-every K]`: a storm of short-lived processes and
//! threads, each making a known number of getpid calls before it exits.
//!
//! Gives the profiler tasks that come and go faster than anything it may keep per task can
//! be forgotten by accident: every task's frame stack (task storage, or the hash map of older
//! kernels) must be released at its exit, and every call of every task counted.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::process::ExitCode;

use workloads::cli::parse_int;
use workloads::clock::Stopwatch;
use workloads::{Args, Error, Report, getpid_syscall, run_main};

const NAME: &str = "storm";
const USAGE: &str = "\
storm - start PROCESSES short-lived processes and THREADS short-lived threads,
each making CALLS getpid calls

Usage: storm PROCESSES THREADS CALLS [--exec-every K]

  PROCESSES       child processes to fork (0..=1000000), one after another with
                  at most 16 alive at once; each makes CALLS getpid calls and exits
  THREADS         threads to start (0..=1000000) once the processes are done,
                  at most 16 alive at once; each makes CALLS calls and exits
  CALLS           getpid calls per process and thread (0..=1000000), each a
                  real system call
  --exec-every K  every K-th child (K >= 1) execs this program to make its calls
                  (fork, exec, exit) instead of making them in the forked image

This process itself makes no getpid call.

Output (last line):
  storm: processes=P threads=T execs=E calls=C elapsed_ns=N pid=P
    execs  children that exec'd
    calls  getpid calls made by all of them: (PROCESSES + THREADS) * CALLS
";

/// Children and threads alive at once.
const IN_FLIGHT: usize = 16;
/// argv[1] of an exec'd child: `storm --child CALLS`.
const CHILD_FLAG: &str = "--child";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(CHILD_FLAG) {
        let calls = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
        make_calls(calls);
        return ExitCode::SUCCESS;
    }
    run_main(
        NAME,
        USAGE,
        &[workloads::cli::Opt::Value("exec-every")],
        run,
    )
}

fn run(args: &Args) -> Result<Report, Error> {
    let [processes, threads, calls] = args.positionals(["PROCESSES", "THREADS", "CALLS"])?;
    let processes = parse_int("PROCESSES", processes, 0, 1_000_000)?;
    let threads = parse_int("THREADS", threads, 0, 1_000_000)?;
    let calls = parse_int("CALLS", calls, 0, 1_000_000)?;
    let exec_every = match args.value("exec-every") {
        Some(text) => Some(parse_int("--exec-every", text, 1, 1_000_000)?),
        None => None,
    };
    let child = ExecChild::new(calls)?;
    let watch = Stopwatch::start();
    let mut execs = 0;
    let mut alive = 0;
    for index in 1..=processes {
        if alive == IN_FLIGHT {
            reap_one()?;
            alive -= 1;
        }
        let exec = exec_every.is_some_and(|every| index % every == 0);
        execs += u64::from(exec);
        // SAFETY: this process has one thread while it forks (the threads start after), so
        // the child may run ordinary code; it only makes system calls and exits.
        match unsafe { libc::fork() } {
            -1 => return Err(Error::last_os("fork")),
            0 => {
                if exec {
                    child.exec();
                }
                make_calls(calls);
                // SAFETY: the child leaves without running the parent's exit handlers.
                unsafe { libc::_exit(0) }
            }
            _ => alive += 1,
        }
    }
    for _ in 0..alive {
        reap_one()?;
    }
    let mut started = 0;
    while started < threads {
        let batch = (threads - started).min(IN_FLIGHT as u64);
        let handles = (0..batch)
            .map(|_| std::thread::Builder::new().spawn(move || make_calls(calls)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| Error::os("spawning a thread", err))?;
        for handle in handles {
            handle
                .join()
                .map_err(|_| Error::failed("a thread panicked"))?;
        }
        started += batch;
    }
    Ok(Report::new(NAME)
        .field("processes", processes)
        .field("threads", threads)
        .field("execs", execs)
        .field("calls", (processes + threads) * calls)
        .field("elapsed_ns", watch.elapsed_ns())
        .field("pid", workloads::own_pid()))
}

fn make_calls(calls: u64) {
    for _ in 0..calls {
        std::hint::black_box(getpid_syscall());
    }
}

/// Waits for one child; an unsuccessful one is an error.
fn reap_one() -> Result<(), Error> {
    let mut status = 0;
    // SAFETY: `status` is a live int the kernel writes the child's status into.
    if unsafe { libc::wait(&mut status) } == -1 {
        return Err(Error::last_os("wait"));
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(Error::failed(format!(
            "a child ended with status {status:#x}"
        )));
    }
    Ok(())
}

/// `storm --child CALLS`, built before any fork: a forked child must not allocate.
struct ExecChild {
    path: CString,
    args: [CString; 3],
}

impl ExecChild {
    fn new(calls: u64) -> Result<Self, Error> {
        let exe = std::env::current_exe().map_err(|err| Error::os("finding this program", err))?;
        let cstring = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| Error::failed("this program's path holds a NUL byte"))
        };
        Ok(Self {
            path: cstring(exe.as_os_str().as_bytes())?,
            args: [
                cstring(NAME.as_bytes())?,
                cstring(CHILD_FLAG.as_bytes())?,
                cstring(calls.to_string().as_bytes())?,
            ],
        })
    }

    /// Replaces the (forked) process; exits 127 if it cannot.
    fn exec(&self) -> ! {
        let argv = [
            self.args[0].as_ptr(),
            self.args[1].as_ptr(),
            self.args[2].as_ptr(),
            std::ptr::null(),
        ];
        // SAFETY: `path` and every argument are NUL-terminated strings that outlive the call,
        // and `argv` ends with a null pointer.
        unsafe { libc::execv(self.path.as_ptr(), argv.as_ptr()) };
        // SAFETY: as in the forked child: leave without the parent's exit handlers.
        unsafe { libc::_exit(127) }
    }
}
