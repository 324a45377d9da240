//! Running a shell command in a qemu guest booted from a Debian kernel and our initramfs.
//!
//! The guest has three serial ports, so nothing needs framing or escaping:
//! - `ttyS0` is the kernel console. `/init` writes its markers there (booted, exit code, and the
//!   contents of `/out` as a base64 tar between two markers); everything else on it is kernel
//!   and init noise, kept only for error messages and `--console`.
//! - `ttyS1` / `ttyS2` (raw mode) carry the command's stdout / stderr byte for byte. qemu
//!   connects each to a Unix socket we listen on, and we copy them to our stdout / stderr live.
//!
//! Markers carry a per-run nonce, so output that merely looks like one cannot confuse us.
//!
//! A hang is reported, not just killed: shortly before the timeout a watchdog in the guest
//! prints every process with its kernel stack, and the error carries that dump.

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;

use crate::build;
use crate::initramfs;
use crate::kernels::{self, Kernel};
use crate::util::{display_cmd, target_dir};

/// Always on the kernel command line: the console on the first serial port, only serious
/// kernel messages, reboot (which `-no-reboot` turns into qemu exiting) at once on a panic and
/// on any oops, and audit on so the audit workloads can add rules.
// cryptomgr.notests: the crypto self-tests at boot are pure CPU work that, on a loaded host
// under TCG, has been seen to soft-lock a guest CPU for minutes before any test ran.
// tsc=reliable: under load the clocksource watchdog finds TCG's TSC "unstable" and the kernel
// switches clocksource at run time, patching its own text while other vCPUs run it; on 7.2
// that crashed the guest (a vCPU executing from inside a just-patched `jmp` in
// `ktime_get_mono_fast_ns`) in 3 of ~10 kprobe-heavy runs. With it, no switch happens.
const BASE_CMDLINE: &str =
    "console=ttyS0 quiet panic=-1 oops=panic audit=1 cryptomgr.notests tsc=reliable";

/// A guest not at its command by then is stuck in boot (a TCG hiccup), and is booted again.
const BOOT_TIMEOUT: Duration = Duration::from_secs(90);

/// How long qemu may take to exit after the guest reported everything.
const POWEROFF_GRACE: Duration = Duration::from_secs(15);

/// How long before the host's timeout the guest's watchdog dumps its processes: enough for
/// the dump to reach us under TCG. Timeouts under twice this get no watchdog.
const WATCHDOG_MARGIN: Duration = Duration::from_secs(10);

/// How long a qemu that complained about KVM may take to end by itself before it is stopped.
const KVM_COMPLAINT_GRACE: Duration = Duration::from_secs(2);

/// Console lines kept in error messages.
const CONSOLE_TAIL: usize = 60;

/// Per-run scratch directories (initrd, sockets) are `$TMPDIR/hotprof-vm-*`: Unix socket paths
/// must stay short, which a deep checkout's target dir might not.
const SCRATCH_PREFIX: &str = "hotprof-vm-";

/// A scratch directory is locked (flock) by its run; one older than this and unlocked belongs
/// to a run that was killed. The age covers the moment between creating and locking it.
const SCRATCH_GRACE: Duration = Duration::from_secs(60);

/// How qemu runs the guest's CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Accel {
    /// KVM when `/dev/kvm` opens read-write and has not failed before, otherwise TCG.
    Auto,
    /// KVM, failing if it does not work.
    Kvm,
    /// Pure emulation: slow but works everywhere.
    Tcg,
}

/// Which qemu runs the guest, which KVM device `Accel::Auto` tries, and where a KVM failure
/// is remembered. The defaults are the real ones; a test swaps in a stand-in qemu.
#[derive(Clone, Debug)]
pub struct QemuSetup {
    pub binary: PathBuf,
    pub kvm_device: PathBuf,
    pub kvm_marker: PathBuf,
}

impl Default for QemuSetup {
    fn default() -> Self {
        Self {
            binary: PathBuf::from("qemu-system-x86_64"),
            kvm_device: PathBuf::from("/dev/kvm"),
            // Records that KVM failed on this machine, so later runs go straight to TCG:
            // `/dev/kvm` can open fine and still be unable to run a guest (nested
            // virtualization, an MSR the host refuses).
            kvm_marker: target_dir().join("vm").join("kvm-unusable"),
        }
    }
}

/// One command to run in a fresh guest.
#[derive(Clone, Debug)]
pub struct VmRun {
    pub kernel: Kernel,
    /// Shell script run by the guest's busybox `sh` in `/out`, stdin from /dev/null.
    pub script: String,
    /// For the whole run, boot included.
    pub timeout: Duration,
    /// Receives every file the script left under the guest's `/out`.
    pub out_dir: PathBuf,
    /// Appended to the kernel command line.
    pub cmdline_extra: Option<String>,
    /// Copy the command's stdout/stderr to ours as it arrives.
    pub echo: bool,
    /// Copy the kernel console to our stderr as it arrives (for debugging boots).
    pub show_console: bool,
    pub accel: Accel,
    /// Extra `newc` cpio archives unpacked over the base image, in order (e.g. the bench's
    /// bpftrace layer), so a large optional userland never enters the shared base image.
    pub extra_layers: Vec<PathBuf>,
    /// Guest memory in MiB.
    pub memory_mb: u32,
    pub qemu: QemuSetup,
    /// Appended to the qemu command line as they are (e.g. the bench's `-plugin …`).
    pub extra_qemu_args: Vec<String>,
}

impl VmRun {
    /// A run with the defaults: 300 s timeout, no echo, `Accel::Auto`, 1 GiB, no extra layers.
    pub fn new(kernel: Kernel, script: impl Into<String>, out_dir: impl Into<PathBuf>) -> Self {
        Self {
            kernel,
            script: script.into(),
            timeout: Duration::from_secs(300),
            out_dir: out_dir.into(),
            cmdline_extra: None,
            echo: false,
            show_console: false,
            accel: Accel::Auto,
            extra_layers: Vec::new(),
            memory_mb: 1024,
            qemu: QemuSetup::default(),
            extra_qemu_args: Vec::new(),
        }
    }
}

/// What a finished guest run produced.
#[derive(Clone, Debug)]
pub struct VmOutcome {
    /// The script's exit status as the guest shell saw it (128+N for signal N).
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    /// Kernel console: boot messages, kernel warnings, init's complaints.
    pub console: String,
    /// Where `/out`'s files were unpacked.
    pub out_dir: PathBuf,
    /// The kernel package that ran.
    pub kernel_package: String,
    pub accel: Accel,
    /// From starting qemu to `/init` being about to run the script.
    pub boot_time: Duration,
    /// From starting qemu to qemu exiting.
    pub total_time: Duration,
    /// Boots started again because the guest died while booting (TCG's cross-modifying-code
    /// race; said on stderr as "booting it again").
    pub reboots: u32,
}

impl VmOutcome {
    /// The guest's output for error messages: stdout, stderr and the end of the console.
    pub fn transcript(&self) -> String {
        transcript(&self.stdout, &self.stderr, &self.console)
    }
}

/// Boots `run.kernel` with the guest binaries built so far, runs the script and brings `/out`
/// back. An `Err` means the harness failed (no kernel, qemu died, timeout); the script failing
/// is a normal outcome with a non-zero `exit_code`.
pub fn run(run: &VmRun) -> Result<VmOutcome> {
    let kernel = kernels::ensure(run.kernel)
        .with_context(|| format!("could not get the {} kernel", run.kernel))?;
    let binaries = build::guest_binaries()?;
    let base = initramfs::base_image(&binaries)?;
    fs::create_dir_all(&run.out_dir)
        .with_context(|| format!("could not create {}", run.out_dir.display()))?;

    remove_stale_scratch();
    let mut accel = resolve_accel(run.accel, &run.qemu);
    let mut boots_left = 2;
    let mut reboots = 0;
    loop {
        match attempt(run, &kernel, &base, accel)? {
            Verdict::Finished(outcome) => {
                return Ok(VmOutcome {
                    reboots,
                    ..*outcome
                });
            }
            Verdict::RetryBoot(why) if boots_left > 1 => {
                boots_left -= 1;
                reboots += 1;
                eprintln!("note: {why}; booting it again");
            }
            Verdict::RetryBoot(why) => bail!("{why}, twice"),
            Verdict::KvmUnusable(why) if run.accel == Accel::Kvm => {
                bail!("KVM was asked for but does not work here: {why}")
            }
            Verdict::KvmUnusable(why) => {
                let marker = &run.qemu.kvm_marker;
                eprintln!(
                    "note: KVM does not work here ({why}); using TCG from now on \
                     (delete {} to try KVM again)",
                    marker.display()
                );
                let written = marker
                    .parent()
                    .map_or(Ok(()), fs::create_dir_all)
                    .and_then(|()| fs::write(marker, format!("{why}\n")));
                if let Err(err) = written {
                    eprintln!("warning: could not write {}: {err}", marker.display());
                }
                accel = Accel::Tcg;
            }
        }
    }
}

/// A run killed by a signal (Ctrl-C, a CI time limit) leaves its scratch directory and its
/// tens of MB of initrd behind; the next run removes those no live run holds locked.
fn remove_stale_scratch() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let ours = entry
            .file_name()
            .to_string_lossy()
            .starts_with(SCRATCH_PREFIX);
        let old = entry
            .metadata()
            .and_then(|meta| meta.modified())
            .ok()
            .and_then(|modified| modified.elapsed().ok())
            .is_some_and(|age| age > SCRATCH_GRACE);
        // Taking the lock proves no run holds it; it is released when `dir` is dropped.
        let abandoned = || fs::File::open(entry.path()).is_ok_and(|dir| dir.try_lock().is_ok());
        if ours && old && abandoned() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Creates this run's scratch directory and locks it for as long as the returned handle lives.
fn scratch_dir() -> Result<(tempfile::TempDir, fs::File)> {
    let scratch = tempfile::Builder::new()
        .prefix(SCRATCH_PREFIX)
        .tempdir()
        .context("could not create a scratch directory for the VM")?;
    let lock = fs::File::open(scratch.path())
        .and_then(|dir| dir.lock().map(|()| dir))
        .with_context(|| format!("could not lock {}", scratch.path().display()))?;
    Ok((scratch, lock))
}

fn resolve_accel(requested: Accel, qemu: &QemuSetup) -> Accel {
    match requested {
        Accel::Auto => {
            let opens = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&qemu.kvm_device)
                .is_ok();
            if opens && !qemu.kvm_marker.exists() {
                Accel::Kvm
            } else {
                Accel::Tcg
            }
        }
        other => other,
    }
}

/// What to do after one boot of the guest.
#[derive(Debug)]
enum Verdict {
    Finished(Box<VmOutcome>),
    /// The guest never reached the command under TCG (a TCG hiccup, an oops while the kernel
    /// patched its own text); worth one more boot. Says what happened.
    RetryBoot(String),
    /// Under KVM, qemu ended or hung before the guest was ready; worth retrying with TCG.
    KvmUnusable(String),
}

/// Things the console reader reports to the main loop.
#[derive(Debug, PartialEq)]
enum Event {
    /// `/init` is about to run the script.
    Ready,
    Exit(i32),
    /// The base64 tar of `/out`, complete.
    Out(String),
    /// The guest's watchdog fired: every process and its kernel stack.
    Hung(String),
}

/// One boot: runs the guest to its end, then sorts that end into a verdict.
fn attempt(
    run: &VmRun,
    kernel: &kernels::KernelImage,
    base: &Path,
    accel: Accel,
) -> Result<Verdict> {
    let Booted {
        waited,
        status,
        mut state,
        stdout,
        stderr,
        console,
        qemu_stderr,
        qemu_line,
        total_time,
    } = boot(run, kernel, base, accel)?;
    let context = || {
        let guest = transcript(&stdout, &stderr, &console);
        format!(
            "{guest}{}qemu: {qemu_line}",
            section("qemu stderr", &qemu_stderr)
        )
    };
    let end = AttemptEnd {
        accel,
        waited,
        ready: state.ready_at.is_some(),
        exit_code: state.exit_code,
        out_complete: state.out.is_some(),
        qemu: QemuEnd::from_status(status),
        qemu_stderr_tail: tail(&qemu_stderr, QEMU_STDERR_TAIL),
        console_tail: tail(&console, 3),
    };
    let exit_code = match classify(&end) {
        Ending::Finished(exit_code) => exit_code,
        Ending::RetryBoot(why) => return Ok(Verdict::RetryBoot(why)),
        Ending::KvmUnusable(why) => return Ok(Verdict::KvmUnusable(why)),
        Ending::TimedOut => {
            let dump = state.hang_dump.as_deref().map_or_else(String::new, |dump| {
                section(
                    "guest processes and their kernel stacks at the timeout",
                    dump,
                )
            });
            bail!(
                "guest timed out after {} s running: {}\n{dump}{}",
                run.timeout.as_secs(),
                run.script,
                context()
            )
        }
        Ending::DiedRunning(why) => {
            return Err(anyhow::Error::new(GuestDied(format!(
                "{why}\n{}",
                context()
            ))));
        }
        Ending::Failed(why) => bail!("{why}\n{}", context()),
    };
    // `classify` finishes only runs whose /out arrived whole.
    let out_b64 = state.out.take().unwrap_or_default();
    unpack_out(&out_b64, &run.out_dir)
        .with_context(|| format!("could not bring back the guest's /out\n{}", context()))?;
    Ok(Verdict::Finished(Box::new(VmOutcome {
        exit_code,
        stdout,
        stderr,
        console,
        out_dir: run.out_dir.clone(),
        kernel_package: kernel.package.clone(),
        accel,
        boot_time: state.ready_at.unwrap_or(total_time),
        total_time,
        reboots: 0,
    })))
}

/// Everything one boot left once qemu is gone and every reader has finished.
struct Booted {
    waited: Wait,
    status: std::process::ExitStatus,
    state: Progress,
    /// The command's output.
    stdout: String,
    stderr: String,
    console: String,
    qemu_stderr: String,
    /// The qemu command line, for error messages.
    qemu_line: String,
    total_time: Duration,
}

/// Starts qemu with this run's initrd, follows the guest until it ends (or must be stopped),
/// and reaps qemu and every reader.
fn boot(run: &VmRun, kernel: &kernels::KernelImage, base: &Path, accel: Accel) -> Result<Booted> {
    let (scratch, _lock) = scratch_dir()?;
    let marker = format!("@@xtask-{}@@", nonce());
    let initrd = scratch.path().join("initrd.cpio");
    let watchdog_at = run
        .timeout
        .as_secs()
        .checked_sub(WATCHDOG_MARGIN.as_secs())
        .filter(|at| *at >= WATCHDOG_MARGIN.as_secs());
    let init = init_script(&marker, watchdog_at);
    initramfs::write_run_image(base, &run.extra_layers, &init, &run.script, &initrd)?;

    let stdout_sock = scratch.path().join("stdout.sock");
    let stderr_sock = scratch.path().join("stderr.sock");
    let stdout_listener = bind(&stdout_sock)?;
    let stderr_listener = bind(&stderr_sock)?;

    let mut qemu = qemu_command(
        run,
        &kernel.vmlinuz,
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
    let waited = wait_for_guest(
        run,
        accel,
        &mut child,
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

/// The guest's kernel died (panic or oops) while the command ran. Under TCG this has been seen
/// without any fault of the code under test: a CPU executing from the middle of an instruction
/// the kernel had just patched (7.2, `ktime_get_mono_fast_ns+0x2c` inside a `jmp`, while
/// kprobes were being registered) — the emulator's cross-modifying-code race also seen at
/// boot. The test runner runs such a scenario once more, and says so.
#[derive(Debug)]
pub struct GuestDied(pub String);

impl std::fmt::Display for GuestDied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GuestDied {}

/// qemu's own stderr lines kept in a verdict's one-line reason.
const QEMU_STDERR_TAIL: usize = 3;

/// How qemu's process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QemuEnd {
    Exited(i32),
    Signal(i32),
}

impl QemuEnd {
    fn from_status(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt as _;
        match (status.code(), status.signal()) {
            (Some(code), _) => QemuEnd::Exited(code),
            (None, Some(signal)) => QemuEnd::Signal(signal),
            (None, None) => QemuEnd::Exited(-1),
        }
    }
}

impl std::fmt::Display for QemuEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            QemuEnd::Exited(code) => write!(f, "qemu exited with status {code}"),
            QemuEnd::Signal(signal) => {
                let name = match signal {
                    libc::SIGABRT => " (SIGABRT)",
                    libc::SIGKILL => " (SIGKILL)",
                    libc::SIGSEGV => " (SIGSEGV)",
                    libc::SIGTERM => " (SIGTERM)",
                    _ => "",
                };
                write!(f, "qemu was killed by signal {signal}{name}")
            }
        }
    }
}

/// Everything known about one boot once qemu is gone and every reader has finished.
#[derive(Clone, Debug)]
struct AttemptEnd {
    accel: Accel,
    waited: Wait,
    /// `/init` reached the command.
    ready: bool,
    exit_code: Option<i32>,
    /// The `/out` archive arrived whole.
    out_complete: bool,
    qemu: QemuEnd,
    qemu_stderr_tail: String,
    console_tail: String,
}

impl AttemptEnd {
    /// What happened, in one line: how qemu ended and the last lines it and the console said.
    fn story(&self) -> String {
        let said = |what: &str, text: &str| {
            if text.trim().is_empty() {
                format!("{what}: (nothing)")
            } else {
                format!("{what}: {}", text.lines().collect::<Vec<_>>().join(" | "))
            }
        };
        let how = match self.waited {
            // Our own kill after a hang: its signal says nothing about the guest.
            Wait::BootTimedOut => format!(
                "the guest did not boot within {} s and was killed",
                BOOT_TIMEOUT.as_secs()
            ),
            Wait::KvmComplained => "qemu complained about KVM and was stopped".to_owned(),
            _ => self.qemu.to_string(),
        };
        format!(
            "{how}; {}; {}",
            said("qemu's stderr", &self.qemu_stderr_tail),
            said("console", &self.console_tail)
        )
    }
}

/// How one boot ended.
#[derive(Debug, PartialEq)]
enum Ending {
    /// The command ran and `/out` came back: its exit code.
    Finished(i32),
    RetryBoot(String),
    KvmUnusable(String),
    /// The command ran past the timeout (the watchdog's dump, if any, is in the state).
    TimedOut,
    /// The guest's kernel died (panic, oops) while the command ran.
    DiedRunning(String),
    /// The harness cannot go on: the reason, without the transcript.
    Failed(String),
}

/// Sorts every way a boot can end. Under KVM, *any* end before the guest is ready — an exit,
/// an abort, a signal, a closed console, a boot that hangs — means KVM does not work here
/// (seen: qemu aborting on `failed to set MSR 0x10a` while `/dev/kvm` opens fine). Under
/// TCG the same is a boot that is worth one more try.
fn classify(end: &AttemptEnd) -> Ending {
    if !end.ready {
        if matches!(end.waited, Wait::TimedOut) {
            return Ending::TimedOut;
        }
        let story = end.story();
        return match end.accel {
            Accel::Kvm => Ending::KvmUnusable(story),
            Accel::Auto | Accel::Tcg => {
                Ending::RetryBoot(format!("the guest died while booting ({story})"))
            }
        };
    }
    match (end.exit_code, end.out_complete, &end.waited) {
        (Some(code), true, _) => Ending::Finished(code),
        (_, _, Wait::TimedOut) => Ending::TimedOut,
        (None, _, _) => Ending::DiedRunning(format!(
            "the guest died while running the command (kernel panic or oops?): {}",
            end.story()
        )),
        (Some(code), false, _) => Ending::Failed(format!(
            "the guest reported exit code {code} but /out did not arrive complete: {}",
            end.story()
        )),
    }
}

/// The qemu command line: a minimal PC with the kernel console on the first serial port (our
/// stdout pipe) and the command's stdout/stderr on the next two (our Unix sockets).
fn qemu_command(
    run: &VmRun,
    vmlinuz: &Path,
    initrd: &Path,
    accel: Accel,
    [stdout_sock, stderr_sock]: [&Path; 2],
) -> Command {
    let mut cmdline = BASE_CMDLINE.to_owned();
    if let Some(extra) = run
        .cmdline_extra
        .as_deref()
        .filter(|extra| !extra.is_empty())
    {
        cmdline.push(' ');
        cmdline.push_str(extra);
    }
    let mut qemu = Command::new(&run.qemu.binary);
    qemu.args(["-nodefaults", "-display", "none", "-no-reboot"])
        .args([
            "-m",
            &format!("{}M", run.memory_mb),
            "-smp",
            "2",
            "-cpu",
            "max",
        ])
        .args(["-accel", if accel == Accel::Kvm { "kvm" } else { "tcg" }])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &cmdline])
        .args(["-serial", "stdio"]);
    for (id, sock) in [("gout", stdout_sock), ("gerr", stderr_sock)] {
        qemu.arg("-chardev")
            .arg(format!("socket,id={id},path={}", sock.display()))
            .args(["-serial", &format!("chardev:{id}")]);
    }
    qemu.args(&run.extra_qemu_args);
    qemu.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    qemu
}

/// What the console has told us so far.
#[derive(Default)]
struct Progress {
    ready_at: Option<Duration>,
    exit_code: Option<i32>,
    out: Option<String>,
    hang_dump: Option<String>,
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
enum Wait {
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
/// passes, or KVM turns out not to work.
fn wait_for_guest(
    run: &VmRun,
    accel: Accel,
    child: &mut Child,
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
        // The watchdog fires a little before the deadline: no need to wait for it.
        if Instant::now() >= deadline || state.hang_dump.is_some() {
            return Wait::TimedOut;
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

/// Reads the console line by line, passing markers on as events and keeping the rest.
fn spawn_console_reader(
    child: &mut Child,
    marker: String,
    console: Arc<Mutex<String>>,
    events: Sender<Event>,
    show: bool,
) -> Result<JoinHandle<()>> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("qemu's stdout is not piped"))?;
    Ok(thread::spawn(move || {
        let mut parser = ConsoleParser::new(marker);
        let mut reader = BufReader::new(stdout);
        let mut raw = Vec::new();
        loop {
            raw.clear();
            match reader.read_until(b'\n', &mut raw) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let line = String::from_utf8_lossy(&raw);
            let line = line.trim_end_matches(['\r', '\n']);
            match parser.feed(line) {
                Parsed::Event(event) => {
                    if events.send(event).is_err() {
                        break;
                    }
                }
                Parsed::Payload => {}
                Parsed::Noise => {
                    if show {
                        eprintln!("[console] {line}");
                    }
                    if let Ok(mut console) = console.lock() {
                        console.push_str(line);
                        console.push('\n');
                    }
                }
            }
        }
    }))
}

/// What one console line was.
#[derive(Debug, PartialEq)]
enum Parsed {
    Event(Event),
    /// Part of the `/out` transfer.
    Payload,
    /// Anything else: kernel messages, init's complaints.
    Noise,
}

/// Recognizes `/init`'s marker lines: `<marker> ready`, `<marker> exit=N`, and the sections
/// `<marker> out-begin` … `<marker> out-end` (base64 tar of `/out`) and `<marker> hang-begin` …
/// `<marker> hang-end` (the watchdog's process dump).
struct ConsoleParser {
    marker: String,
    section: Option<(Section, String)>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Section {
    Out,
    Hang,
}

impl ConsoleParser {
    fn new(marker: String) -> Self {
        Self {
            marker,
            section: None,
        }
    }

    fn feed(&mut self, line: &str) -> Parsed {
        let Some(at) = line.find(&self.marker) else {
            return match &mut self.section {
                Some((Section::Out, text)) => {
                    text.push_str(line.trim());
                    Parsed::Payload
                }
                Some((Section::Hang, text)) => {
                    text.push_str(line);
                    text.push('\n');
                    Parsed::Payload
                }
                None => Parsed::Noise,
            };
        };
        match line[at + self.marker.len()..].trim() {
            "ready" => Parsed::Event(Event::Ready),
            "out-begin" => self.begin(Section::Out),
            "hang-begin" => self.begin(Section::Hang),
            "out-end" => self.end(Section::Out, Event::Out),
            "hang-end" => self.end(Section::Hang, Event::Hung),
            rest => match rest
                .strip_prefix("exit=")
                .and_then(|code| code.parse().ok())
            {
                Some(code) => Parsed::Event(Event::Exit(code)),
                None => Parsed::Noise,
            },
        }
    }

    fn begin(&mut self, section: Section) -> Parsed {
        self.section = Some((section, String::new()));
        Parsed::Payload
    }

    /// Closes `section` into its event; an end without its begin is noise.
    fn end(&mut self, section: Section, event: fn(String) -> Event) -> Parsed {
        match self.section.take() {
            Some((open, text)) if open == section => Parsed::Event(event(text)),
            other => {
                self.section = other;
                Parsed::Noise
            }
        }
    }
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

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all = text.lines().collect::<Vec<_>>();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The guest's output as one block for error messages.
fn transcript(stdout: &str, stderr: &str, console: &str) -> String {
    format!(
        "{}{}{}",
        section("guest stdout", stdout),
        section("guest stderr", stderr),
        section(
            &format!("kernel console, last {CONSOLE_TAIL} lines"),
            &tail(console, CONSOLE_TAIL)
        ),
    )
}

/// `--- title ---` and the text, ending in a newline; `(empty)` when there is none.
fn section(title: &str, text: &str) -> String {
    let text = text.trim_end_matches('\n');
    let text = if text.is_empty() { "(empty)" } else { text };
    format!("--- {title} ---\n{text}\n")
}

/// Unique enough per run: our pid and the clock.
fn nonce() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    format!("{:x}{:x}", std::process::id(), nanos)
}

/// Decodes the base64 tar of the guest's `/out` into `dir`.
fn unpack_out(b64: &str, dir: &Path) -> Result<()> {
    let tar = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .context("the /out archive is not valid base64")?;
    tar::Archive::new(tar.as_slice())
        .unpack(dir)
        .with_context(|| format!("could not unpack the /out archive into {}", dir.display()))
}

/// The guest's `/init`: mounts what hotprof needs, runs `/run/cmd.sh` with its stdout and
/// stderr on their own serial ports, then reports on the console and powers off.
///
/// With `watchdog_at` (seconds of guest uptime), a background watchdog dumps every process's
/// kernel stack shortly before the host's timeout, so a hang says where it hangs. The command
/// itself runs in the foreground, where it keeps the default signal dispositions (a shell's
/// background jobs ignore SIGINT).
///
/// It must never exit (the kernel would panic), so it carries on past failed mounts, which
/// show up on the console.
fn init_script(marker: &str, watchdog_at: Option<u64>) -> String {
    let watchdog = match watchdog_at {
        Some(at) => format!(
            r#"watchdog() {{
    read up rest </proc/uptime
    left=$(( {at} - ${{up%.*}} ))
    [ "$left" -gt 0 ] && sleep "$left"
    echo "{marker} hang-begin"
    for d in /proc/[0-9]*; do
        args=$(tr '\0' ' ' <$d/cmdline 2>/dev/null)
        [ -n "$args" ] || continue
        echo "pid ${{d#/proc/}} $(sed -n 's/^State:\t//p' $d/status 2>/dev/null): $args"
        sed 's/^/    /' $d/stack 2>/dev/null
    done
    echo "{marker} hang-end"
}}
watchdog &
watchdog=$!
"#
        ),
        None => "watchdog=\n".to_owned(),
    };
    format!(
        r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin HOME=/root TERM=dumb
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /out
ulimit -l unlimited
# Raw: no newline translation or echo, so the host gets the command's bytes as written.
stty -F /dev/ttyS1 raw -echo
stty -F /dev/ttyS2 raw -echo
{watchdog}echo "{marker} ready"
cd /out
sh /run/cmd.sh </dev/null >/dev/ttyS1 2>/dev/ttyS2
rc=$?
cd /
[ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
# Nothing but our lines on the console from here on.
echo 1 >/proc/sys/kernel/printk
echo "{marker} exit=$rc"
echo "{marker} out-begin"
tar -cf - -C /out . | base64
echo "{marker} out-end"
poweroff -f
sleep 1000
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_finds_markers_and_payload_amid_noise() {
        let mut parser = ConsoleParser::new("@@m@@".into());
        assert_eq!(
            parser.feed("[    1.0] random: crng init done"),
            Parsed::Noise
        );
        assert_eq!(parser.feed("@@m@@ ready"), Parsed::Event(Event::Ready));
        assert_eq!(parser.feed("@@m@@ exit=3"), Parsed::Event(Event::Exit(3)));
        assert_eq!(parser.feed("@@m@@ out-begin"), Parsed::Payload);
        assert_eq!(parser.feed("QUJD"), Parsed::Payload);
        assert_eq!(parser.feed("REVG "), Parsed::Payload);
        assert_eq!(
            parser.feed("@@m@@ out-end"),
            Parsed::Event(Event::Out("QUJDREVG".into()))
        );
        assert_eq!(parser.feed("reboot: Power down"), Parsed::Noise);
    }

    #[test]
    fn parser_collects_the_hang_dump_verbatim() {
        let mut parser = ConsoleParser::new("@@m@@".into());
        assert_eq!(parser.feed("@@m@@ hang-begin"), Parsed::Payload);
        assert_eq!(
            parser.feed("pid 1 S (sleeping): /bin/sh /init"),
            Parsed::Payload
        );
        assert_eq!(parser.feed("    [<0>] do_wait+0x5c/0x100"), Parsed::Payload);
        assert_eq!(
            parser.feed("@@m@@ hang-end"),
            Parsed::Event(Event::Hung(
                "pid 1 S (sleeping): /bin/sh /init\n    [<0>] do_wait+0x5c/0x100\n".into()
            ))
        );
        assert_eq!(parser.feed("@@m@@ out-end"), Parsed::Noise);
    }

    #[test]
    fn parser_ignores_other_markers_and_bad_codes() {
        let mut parser = ConsoleParser::new("@@m@@".into());
        assert_eq!(parser.feed("@@other@@ exit=1"), Parsed::Noise);
        assert_eq!(parser.feed("@@m@@ exit=x"), Parsed::Noise);
        assert_eq!(parser.feed("@@m@@ out-end"), Parsed::Noise);
    }

    #[test]
    fn out_archive_round_trips() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(2);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, "./r.json", &b"{}"[..])
            .expect("append");
        let tar = builder.into_inner().expect("finish");
        let b64 = base64::engine::general_purpose::STANDARD.encode(tar);
        let dir = tempfile::tempdir().expect("tempdir");
        unpack_out(&b64, dir.path()).expect("unpacks");
        assert_eq!(
            fs::read_to_string(dir.path().join("r.json")).expect("file"),
            "{}"
        );
    }

    /// A boot that ended before the guest was ready, qemu's stderr as seen in the field.
    fn early_end(accel: Accel, waited: Wait, qemu: QemuEnd) -> AttemptEnd {
        AttemptEnd {
            accel,
            waited,
            ready: false,
            exit_code: None,
            out_complete: false,
            qemu,
            qemu_stderr_tail: "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\n\
                kvm_buf_set_msrs: Assertion `ret == cpu->kvm_msr_buf->nmsrs' failed."
                .into(),
            console_tail: String::new(),
        }
    }

    fn ran(exit_code: Option<i32>, out_complete: bool, waited: Wait) -> AttemptEnd {
        AttemptEnd {
            ready: true,
            exit_code,
            out_complete,
            ..early_end(Accel::Kvm, waited, QemuEnd::Exited(0))
        }
    }

    #[test]
    fn under_kvm_any_end_before_ready_is_a_kvm_failure() {
        let abort = QemuEnd::Signal(libc::SIGABRT);
        for (waited, qemu) in [
            (Wait::QemuExited, abort),
            (Wait::QemuExited, QemuEnd::Exited(1)),
            (Wait::QemuExited, QemuEnd::Exited(0)),
            (Wait::BootTimedOut, QemuEnd::Signal(libc::SIGKILL)),
            (Wait::KvmComplained, QemuEnd::Signal(libc::SIGKILL)),
        ] {
            let ending = classify(&early_end(Accel::Kvm, waited, qemu));
            let Ending::KvmUnusable(why) = ending else {
                panic!("{waited:?}/{qemu:?}: {ending:?}");
            };
            assert!(why.contains("failed to set MSR 0x10a"), "{why}");
            assert!(!why.contains('\n'), "{why}");
        }
    }

    #[test]
    fn the_reason_says_how_qemu_ended() {
        let abort = early_end(Accel::Kvm, Wait::QemuExited, QemuEnd::Signal(libc::SIGABRT));
        assert!(
            abort
                .story()
                .starts_with("qemu was killed by signal 6 (SIGABRT);")
        );
        let exit = early_end(Accel::Kvm, Wait::QemuExited, QemuEnd::Exited(1));
        assert!(exit.story().starts_with("qemu exited with status 1;"));
        let hung = early_end(
            Accel::Tcg,
            Wait::BootTimedOut,
            QemuEnd::Signal(libc::SIGKILL),
        );
        assert!(
            hung.story()
                .starts_with("the guest did not boot within 90 s")
        );
        let silent = AttemptEnd {
            qemu_stderr_tail: String::new(),
            ..exit
        };
        assert!(silent.story().contains("qemu's stderr: (nothing)"));
    }

    #[test]
    fn under_tcg_an_end_before_ready_is_worth_one_more_boot() {
        for waited in [Wait::QemuExited, Wait::BootTimedOut] {
            let ending = classify(&early_end(Accel::Tcg, waited, QemuEnd::Exited(0)));
            assert!(
                matches!(&ending, Ending::RetryBoot(why) if why.starts_with("the guest died while booting (")),
                "{ending:?}"
            );
        }
    }

    #[test]
    fn once_ready_the_ending_is_the_guests() {
        assert_eq!(
            classify(&ran(Some(3), true, Wait::Done)),
            Ending::Finished(3)
        );
        // qemu exiting right after sending everything is the normal poweroff.
        assert_eq!(
            classify(&ran(Some(0), true, Wait::QemuExited)),
            Ending::Finished(0)
        );
        assert_eq!(
            classify(&ran(None, false, Wait::TimedOut)),
            Ending::TimedOut
        );
        assert_eq!(
            classify(&ran(Some(0), false, Wait::TimedOut)),
            Ending::TimedOut
        );
        let died = classify(&ran(None, false, Wait::QemuExited));
        assert!(
            matches!(&died, Ending::DiedRunning(why) if why.starts_with("the guest died while running")),
            "{died:?}"
        );
        let partial = classify(&ran(Some(0), false, Wait::QemuExited));
        assert!(
            matches!(&partial, Ending::Failed(why) if why.contains("did not arrive complete")),
            "{partial:?}"
        );
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
