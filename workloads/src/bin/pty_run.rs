//! `pty_run COLSxROWS STEPS -- CMD [ARGS...]`: run a full-screen program on a pseudo-terminal,
//! read its screen, type keys at it.
//!
//! The guests have no tmux; this is what a test needs of one to drive `hotprof top` there.
//! The screen is kept by `workloads::screen` (enough of a terminal for ratatui).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use workloads::screen::Screen;
use workloads::{Args, Error, Report, run_main};

const NAME: &str = "pty_run";
const USAGE: &str = "\
pty_run - run a full-screen program on a pseudo-terminal, read its screen, type at it

Usage: pty_run COLSxROWS STEPS -- CMD [ARGS...]

  COLSxROWS  the terminal's size (e.g. 160x40)
  STEPS      what to do, in order, separated by ';':
               until:TEXT   wait until the screen shows TEXT (60 s at most, else fail)
               sleep:MS     wait MS milliseconds, reading the screen
               screen       print the screen between `pty_run: screen {` and `pty_run: }`
               key:KEY      type KEY: one character, or Enter, Escape, C-c
  CMD        the program, run in a new session with the terminal as its controlling one

After the steps it waits for CMD to exit (60 s at most, then kills it) and prints the
last screen.

Output (last line):
  pty_run: exit=N alternate=A icanon=I
    exit       CMD's exit status (128 + N when killed by signal N)
    alternate  1 if the alternate screen was still on at the end
    icanon     1 if the terminal was back in canonical mode (as a shell leaves it)
";

/// How long `until:` and the final wait may take.
const PATIENCE: Duration = Duration::from_secs(60);

#[derive(Debug)]
enum Step {
    Until(String),
    Sleep(Duration),
    Show,
    Key(Vec<u8>),
}

fn main() -> ExitCode {
    run_main(NAME, USAGE, &[], run)
}

fn run(args: &Args) -> Result<Report, Error> {
    let [size, steps, command @ ..] = args.all_positionals() else {
        return Err(Error::usage("expected COLSxROWS STEPS -- CMD"));
    };
    let (cols, rows) = size
        .split_once('x')
        .and_then(|(c, r)| Some((c.parse::<u16>().ok()?, r.parse::<u16>().ok()?)))
        .filter(|&(c, r)| (10..=1000).contains(&c) && (3..=1000).contains(&r))
        .ok_or_else(|| Error::usage(format!("COLSxROWS must be like 160x40, got '{size}'")))?;
    let steps = parse_steps(steps)?;
    if command.is_empty() {
        return Err(Error::usage("no command after --"));
    }
    let (master, slave, child) = spawn(command, cols, rows)?;
    let mut term = Terminal {
        master,
        _slave: slave,
        screen: Screen::new(cols.into(), rows.into()),
        shown: 0,
    };
    for step in &steps {
        match step {
            Step::Until(text) => {
                let started = Instant::now();
                while !term.screen.text().contains(text.as_str()) {
                    if started.elapsed() > PATIENCE {
                        term.show();
                        stop(child);
                        return Err(Error::Failed(format!(
                            "the screen never showed {text:?} (the screen above)"
                        )));
                    }
                    term.read_for(Duration::from_millis(100));
                }
            }
            Step::Sleep(time) => {
                let until = Instant::now() + *time;
                while let Some(left) = until.checked_duration_since(Instant::now()) {
                    term.read_for(left);
                }
            }
            Step::Show => term.show(),
            Step::Key(bytes) => term.type_keys(bytes).inspect_err(|_| stop(child))?,
        }
    }
    let status = term.wait(child)?;
    term.show();
    let icanon = canonical(&term.master);
    Ok(Report::new(NAME)
        .field("exit", status)
        .field("alternate", u8::from(term.screen.alternate()))
        .field("icanon", u8::from(icanon)))
}

fn parse_steps(text: &str) -> Result<Vec<Step>, Error> {
    text.split(';')
        .filter(|step| !step.is_empty())
        .map(|step| match step.split_once(':') {
            Some(("until", text)) if !text.is_empty() => Ok(Step::Until(text.to_owned())),
            Some(("sleep", ms)) => workloads::cli::parse_int("sleep:MS", ms, 0, 600_000)
                .map(|ms| Step::Sleep(Duration::from_millis(ms))),
            Some(("key", key)) => match key {
                "Enter" => Ok(Step::Key(b"\r".to_vec())),
                "Escape" => Ok(Step::Key(b"\x1b".to_vec())),
                "C-c" => Ok(Step::Key(b"\x03".to_vec())),
                _ if key.chars().count() == 1 => Ok(Step::Key(key.as_bytes().to_vec())),
                _ => Err(Error::usage(format!("unknown key '{key}'"))),
            },
            None if step == "screen" => Ok(Step::Show),
            _ => Err(Error::usage(format!("unknown step '{step}'"))),
        })
        .collect()
}

/// The terminal's master side and the screen drawn on it.
struct Terminal {
    master: OwnedFd,
    /// Kept open so the terminal and its modes outlive the program: what it left them in is
    /// what the last line reports.
    _slave: OwnedFd,
    screen: Screen,
    /// Screens printed so far.
    shown: u32,
}

impl Terminal {
    /// Reads what the program wrote within `time`: whether it wrote anything.
    fn read_for(&mut self, time: Duration) -> bool {
        let mut poll = libc::pollfd {
            fd: self.master.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = time.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd, its count 1.
        let ready = unsafe { libc::poll(&mut poll, 1, ms) };
        if ready <= 0 {
            return false;
        }
        let mut buf = [0u8; 16384];
        // SAFETY: reads into a buffer of its stated length from an fd we own.
        let n = unsafe { libc::read(poll.fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            // Not with the other side held open here; were it closed: EIO.
            return false;
        }
        self.screen.feed(&buf[..n as usize]);
        true
    }

    fn type_keys(&mut self, bytes: &[u8]) -> Result<(), Error> {
        // SAFETY: writes from a slice of its stated length to an fd we own.
        let n = unsafe { libc::write(self.master.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        if n != bytes.len() as isize {
            return Err(Error::os(
                "typing at the terminal",
                io::Error::last_os_error(),
            ));
        }
        // Keys read one at a time: a key typed right after Escape would read as Alt+key.
        self.read_for(Duration::from_millis(300));
        Ok(())
    }

    fn show(&mut self) {
        self.shown += 1;
        println!("pty_run: screen {} {{", self.shown);
        print!("{}", self.screen.text());
        println!("pty_run: }}");
    }

    /// Waits for `child` to exit (killing it after [`PATIENCE`]), reading its last output.
    fn wait(&mut self, child: libc::pid_t) -> Result<i32, Error> {
        let started = Instant::now();
        loop {
            let mut status = 0;
            // SAFETY: waits for our own child, writing its status to a local.
            let done = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
            if done == child {
                while self.read_for(Duration::from_millis(50)) {}
                return Ok(if libc::WIFSIGNALED(status) {
                    128 + libc::WTERMSIG(status)
                } else {
                    libc::WEXITSTATUS(status)
                });
            }
            if done < 0 {
                return Err(Error::os(
                    "waiting for the command",
                    io::Error::last_os_error(),
                ));
            }
            if started.elapsed() > PATIENCE {
                // SAFETY: signals our own child, reaped by the next waitpid.
                unsafe { libc::kill(child, libc::SIGKILL) };
            }
            self.read_for(Duration::from_millis(50));
        }
    }
}

/// Kills the program (a failed step must not leave it running).
fn stop(child: libc::pid_t) {
    // SAFETY: signals and reaps our own child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
}

/// Whether the terminal is in canonical mode.
fn canonical(master: &OwnedFd) -> bool {
    // SAFETY: a zeroed termios is a valid out-parameter; tcgetattr fills it.
    let mut termios: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a valid termios pointer.
    let ok = unsafe { libc::tcgetattr(master.as_raw_fd(), &mut termios) } == 0;
    ok && termios.c_lflag & libc::ICANON != 0
}

/// Starts `command` on a new pseudo-terminal of `cols`×`rows`; returns its two sides and the
/// child's pid.
fn spawn(
    command: &[String],
    cols: u16,
    rows: u16,
) -> Result<(OwnedFd, OwnedFd, libc::pid_t), Error> {
    let argv: Vec<CString> = command
        .iter()
        .map(|arg| CString::new(arg.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| Error::usage("the command has a NUL byte"))?;
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let (mut master, mut slave): (RawFd, RawFd) = (-1, -1);
    // SAFETY: valid out-pointers for both fds, no name buffer, default termios, our size.
    let opened = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    if opened != 0 {
        return Err(Error::os(
            "opening a pseudo-terminal",
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: openpty returned two fresh fds that nothing else owns.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    // SAFETY: the child only calls async-signal-safe functions (setsid, ioctl, dup2, execvp,
    // _exit) before exec.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(Error::os("fork", io::Error::last_os_error())),
        0 => {
            let slave = slave.as_raw_fd();
            // SAFETY: see the fork above; argv_ptrs is NUL-terminated and outlives the call.
            unsafe {
                libc::close(master.as_raw_fd());
                libc::setsid();
                libc::ioctl(slave, libc::TIOCSCTTY, 0);
                for fd in 0..3 {
                    libc::dup2(slave, fd);
                }
                libc::execvp(argv_ptrs[0], argv_ptrs.as_ptr());
                libc::_exit(127)
            }
        }
        child => Ok((master, slave, child)),
    }
}
