//! One boot of the guest: qemu started on this run's initrd, the console and the command's
//! ports read as they come, the guest followed until it ends or must be stopped, and
//! everything reaped.

use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, ChildStdin};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::console::{Event, spawn_console_reader};
use super::init::{WATCHDOG_REQUEST, init_script, nonce};
use super::qemu::qemu_command;
use super::scratch::scratch_dir;
use super::spec::{Accel, VmRun};
use crate::initramfs;
use crate::kernels;
use crate::util::display_cmd;

/// A guest not at its command by then is stuck in boot (a TCG hiccup), and is booted again.
pub(super) const BOOT_TIMEOUT: Duration = Duration::from_secs(90);

/// How long qemu may take to exit after the guest reported everything.
const POWEROFF_GRACE: Duration = Duration::from_secs(15);

/// How long before the host's timeout the host asks the guest's watchdog to dump its
/// processes: enough for the dump to reach us under TCG. Timeouts under twice this get no
/// watchdog.
const WATCHDOG_MARGIN: Duration = Duration::from_secs(10);

/// How long a qemu that complained about KVM may take to end by itself before it is stopped.
const KVM_COMPLAINT_GRACE: Duration = Duration::from_secs(2);

/// Everything one boot left once qemu is gone and every reader has finished.
pub(super) struct Booted {
    pub(super) waited: Wait,
    pub(super) status: std::process::ExitStatus,
    pub(super) state: Progress,
    /// The command's output.
    pub(super) stdout: String,
    pub(super) stderr: String,
    pub(super) console: String,
    pub(super) qemu_stderr: String,
    /// The qemu command line, for error messages.
    pub(super) qemu_line: String,
    pub(super) total_time: Duration,
}

/// Starts qemu with this run's initrd, follows the guest until it ends (or must be stopped),
/// and reaps qemu and every reader.
pub(super) fn boot(
    run: &VmRun,
    kernel: &kernels::KernelImage,
    base: &Path,
    accel: Accel,
) -> Result<Booted> {
    let (scratch, _lock) = scratch_dir()?;
    let marker = format!("@@xtask-{}@@", nonce());
    let initrd = scratch.path().join("initrd.cpio");
    let watchdog = run.timeout >= 2 * WATCHDOG_MARGIN;
    let init = init_script(&marker, watchdog, run.arch, !kernel.modules.is_empty());
    initramfs::write_run_image(
        base,
        &run.extra_layers,
        (&init, &run.script),
        (&kernel.modules, &kernel.loadable),
        &initrd,
    )?;

    let stdout_sock = scratch.path().join("stdout.sock");
    let stderr_sock = scratch.path().join("stderr.sock");
    let stdout_listener = bind(&stdout_sock)?;
    let stderr_listener = bind(&stderr_sock)?;

    let mut qemu = qemu_command(
        run,
        &kernel.boot,
        &initrd,
        accel,
        [&stdout_sock, &stderr_sock],
    );
    let qemu_line = display_cmd(&qemu);
    let started = Instant::now();
    let mut child = qemu.spawn().with_context(|| {
        format!("could not start qemu (`cargo xtask setup` installs it): {qemu_line}")
    })?;

    let (events_tx, events) = mpsc::channel();
    let console = Arc::new(Mutex::new(String::new()));
    let qemu_stderr = Arc::new(Mutex::new(String::new()));
    let readers = [
        spawn_console_reader(
            &mut child,
            marker,
            console.clone(),
            events_tx,
            run.show_console,
        )?,
        spawn_text_reader(child.stderr.take(), qemu_stderr.clone()),
    ];
    let echo = |sink: Box<dyn Write + Send>| run.echo.then_some(sink);
    let stdout_copy = spawn_port_reader(stdout_listener, echo(Box::new(io::stdout())));
    let stderr_copy = spawn_port_reader(stderr_listener, echo(Box::new(io::stderr())));

    let mut state = Progress::default();
    let mut watchdog = Watchdog {
        input: child.stdin.take().filter(|_| watchdog),
        asked: false,
    };
    let waited = wait_for_guest(
        run,
        accel,
        (&mut child, &mut watchdog),
        &events,
        &qemu_stderr,
        started,
        &mut state,
    );
    // Whatever happened, qemu must be gone before the readers can finish.
    let _ = child.kill();
    let status = child.wait().context("could not reap qemu")?;
    for sock in [&stdout_sock, &stderr_sock] {
        // Wakes a reader still waiting in accept() because qemu died before connecting.
        let _ = UnixStream::connect(sock);
    }
    for reader in readers {
        let _ = reader.join();
    }
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    let stdout = text(join_port(stdout_copy));
    let stderr = text(join_port(stderr_copy));
    // Events sent while we were reaping.
    state.absorb(&events, started);
    Ok(Booted {
        waited,
        status,
        state,
        stdout,
        stderr,
        console: lock_text(&console),
        qemu_stderr: lock_text(&qemu_stderr),
        qemu_line,
        total_time: started.elapsed(),
    })
}

/// What the console has told us so far.
#[derive(Default)]
pub(super) struct Progress {
    pub(super) ready_at: Option<Duration>,
    pub(super) exit_code: Option<i32>,
    pub(super) out: Option<String>,
    pub(super) hang_dump: Option<String>,
}

impl Progress {
    fn apply(&mut self, event: Event, started: Instant) {
        match event {
            Event::Ready => self.ready_at = Some(started.elapsed()),
            Event::Exit(code) => self.exit_code = Some(code),
            Event::Out(b64) => self.out = Some(b64),
            Event::Hung(dump) => self.hang_dump = Some(dump),
        }
    }

    fn absorb(&mut self, events: &Receiver<Event>, started: Instant) {
        while let Ok(event) = events.try_recv() {
            self.apply(event, started);
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wait {
    /// The guest reported everything.
    Done,
    /// qemu exited or closed the console on its own.
    QemuExited,
    /// The run's deadline passed (or the guest's watchdog fired).
    TimedOut,
    /// The guest was not ready within [`BOOT_TIMEOUT`]; qemu was killed.
    BootTimedOut,
    /// Under KVM, qemu complained about KVM before the guest was ready; qemu was killed.
    KvmComplained,
}

/// Follows the console until the guest has reported everything, qemu exits, the deadline
/// passes, or KVM turns out not to work. Shortly before the deadline, asks the guest's
/// watchdog for its process dump.
fn wait_for_guest(
    run: &VmRun,
    accel: Accel,
    (child, watchdog): (&mut Child, &mut Watchdog),
    events: &Receiver<Event>,
    qemu_stderr: &Mutex<String>,
    started: Instant,
    state: &mut Progress,
) -> Wait {
    let deadline = started + run.timeout;
    loop {
        match events.recv_timeout(Duration::from_millis(100)) {
            Ok(event) => state.apply(event, started),
            Err(RecvTimeoutError::Timeout) => {}
            // The console closed: qemu is exiting.
            Err(RecvTimeoutError::Disconnected) => {
                let _ = wait_until(child, deadline);
                return Wait::QemuExited;
            }
        }
        if state.out.is_some() {
            // poweroff -f follows at once; give qemu a moment to exit on its own.
            let _ = wait_until(child, Instant::now() + POWEROFF_GRACE);
            return Wait::Done;
        }
        // qemu may complain and keep running (a vCPU stuck, no console): no need to wait
        // for the boot timeout.
        if accel == Accel::Kvm
            && state.ready_at.is_none()
            && lock_text(qemu_stderr).to_ascii_lowercase().contains("kvm")
        {
            // A qemu about to abort gets to end on its own, so its end is reported as it was.
            return if wait_until(child, Instant::now() + KVM_COMPLAINT_GRACE) {
                Wait::QemuExited
            } else {
                Wait::KvmComplained
            };
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            return Wait::QemuExited;
        }
        if state.ready_at.is_none() && started.elapsed() > BOOT_TIMEOUT.min(run.timeout) {
            return Wait::BootTimedOut;
        }
        if state.ready_at.is_some() && Instant::now() + WATCHDOG_MARGIN >= deadline {
            watchdog.ask();
        }
        // The dump comes a little before the deadline: no need to wait for it.
        if Instant::now() >= deadline || state.hang_dump.is_some() {
            return Wait::TimedOut;
        }
    }
}

/// The console's input (qemu's stdin), if the guest has a watchdog. Kept open until qemu is
/// gone: a closed input could read as a hang-up in the guest.
struct Watchdog {
    input: Option<ChildStdin>,
    asked: bool,
}

impl Watchdog {
    /// Asks the guest's watchdog for its process dump, once.
    fn ask(&mut self) {
        if let (Some(input), false) = (&mut self.input, self.asked) {
            // A guest that cannot take it any more gets no dump; the timeout still stands.
            let _ = writeln!(input, "{WATCHDOG_REQUEST}").and_then(|()| input.flush());
            self.asked = true;
        }
    }
}

/// Polls `child` until it exits or `deadline` passes; true if it exited.
fn wait_until(child: &mut Child, deadline: Instant) -> bool {
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return true;
        }
        thread::sleep(Duration::from_millis(50));
    }
    false
}

fn bind(path: &Path) -> Result<UnixListener> {
    UnixListener::bind(path).with_context(|| format!("could not listen on {}", path.display()))
}

/// Collects everything `source` writes (qemu's own stderr) as text.
fn spawn_text_reader(
    source: Option<impl Read + Send + 'static>,
    sink: Arc<Mutex<String>>,
) -> JoinHandle<()> {
    thread::spawn(move || {
        let Some(mut source) = source else { return };
        let mut chunk = [0u8; 4096];
        loop {
            match source.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Ok(mut sink) = sink.lock() {
                        sink.push_str(&String::from_utf8_lossy(&chunk[..n]));
                    }
                }
            }
        }
    })
}

/// Takes qemu's connection to one of the command's serial ports and keeps its bytes, copying
/// them to `echo` as they come.
fn spawn_port_reader(
    listener: UnixListener,
    mut echo: Option<Box<dyn Write + Send>>,
) -> JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut kept = Vec::new();
        let Ok((mut stream, _)) = listener.accept() else {
            return kept;
        };
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    kept.extend_from_slice(&chunk[..n]);
                    if let Some(echo) = &mut echo {
                        // Our own stdout going away must not stop the guest's run.
                        let _ = echo.write_all(&chunk[..n]).and_then(|()| echo.flush());
                    }
                }
            }
        }
        kept
    })
}

fn join_port(reader: JoinHandle<Vec<u8>>) -> Vec<u8> {
    reader.join().unwrap_or_default()
}

fn lock_text(text: &Mutex<String>) -> String {
    text.lock().map(|text| text.clone()).unwrap_or_default()
}
