//! Running a shell command in a qemu guest booted from a Debian kernel and our initramfs.
//!
//! The guest has three serial ports, so nothing needs framing or escaping:
//! - `ttyS0` (arm64: `ttyAMA0`) is the kernel console. `/init` writes its markers there
//!   (booted, exit code, and the contents of `/out` as a base64 tar between two markers);
//!   everything else on it is kernel and init noise, kept only for errors and `--console`.
//! - `ttyS1` / `ttyS2` (arm64: the virtio consoles `hvc0` / `hvc1`; raw mode) carry the
//!   command's stdout / stderr byte for byte. qemu connects each to a Unix socket we listen
//!   on, and we copy them to our stdout / stderr live.
//!
//! Markers carry a per-run nonce, so output that merely looks like one cannot confuse us.
//!
//! A hang is reported, not just killed: shortly before the timeout (by the host's clock; the
//! guest's can run ahead) the host asks a watchdog in the guest, on the console's input, to
//! print every process with its kernel stack, and the error carries that dump.
//!
//! The files below: `spec.rs` (what a run asks for and gives back), `qemu.rs` (accelerator and
//! command line), `init.rs` (the guest's `/init` and its markers), `console.rs` (reading those
//! markers and the `/out` archive), `scratch.rs` (per-run scratch directories), `boot.rs` (one
//! boot, followed and reaped), `ending.rs` (how it ended) and `text.rs` (error-message text);
//! the guest's architecture ([`crate::arch::Arch`]) picks the kernel, busybox, binaries and
//! qemu; this file retries boots and falls back from KVM to TCG. Imports go from here down.

mod boot;
mod console;
mod ending;
mod init;
mod qemu;
mod scratch;
mod spec;
mod text;

use std::fs;
use std::path::Path;

use anyhow::{Context, Result, bail};

use self::boot::{Booted, boot};
use self::console::unpack_out;
pub use self::ending::GuestDied;
use self::ending::{AttemptEnd, Ending, QEMU_STDERR_TAIL, QemuEnd, classify};
use self::qemu::resolve_accel;
use self::scratch::remove_stale_scratch;
pub use self::spec::{Accel, QemuSetup, VmOutcome, VmRun};
use self::text::{section, tail, transcript};
use crate::build;
use crate::initramfs;
use crate::kernels;

/// How many times one scenario's guest may be booted before a boot failure fails it.
const BOOT_ATTEMPTS: u32 = 3;

/// Boots `run.kernel` with the guest binaries built so far, runs the script and brings `/out`
/// back. An `Err` means the harness failed (no kernel, qemu died, timeout); the script failing
/// is a normal outcome with a non-zero `exit_code`.
pub fn run(run: &VmRun) -> Result<VmOutcome> {
    let kernel = kernels::ensure(run.kernel, run.arch)
        .with_context(|| format!("could not get the {} kernel ({})", run.kernel, run.arch))?;
    let binaries = build::guest_binaries(run.arch)?;
    let base = initramfs::base_image(&binaries, run.arch)?;
    fs::create_dir_all(&run.out_dir)
        .with_context(|| format!("could not create {}", run.out_dir.display()))?;

    remove_stale_scratch();
    if run.accel == Accel::Kvm && !run.arch.kvm_capable() {
        bail!(
            "KVM cannot run an {} guest on this host: use --accel tcg",
            run.arch
        );
    }
    let mut accel = resolve_accel(run.accel, &run.qemu, run.arch);
    // TCG occasionally panics early in boot ("Fatal exception in interrupt" at ~1.5 s, about one
    // boot in a hundred in a full suite); a CI run once met it twice in a row on one scenario.
    let mut boots_left = BOOT_ATTEMPTS;
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
            Verdict::RetryBoot(why) => bail!("{why}, {BOOT_ATTEMPTS} boots in a row"),
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
