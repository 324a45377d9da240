//! The qemu side of a boot: which accelerator runs the guest, and qemu's command line.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use super::spec::{Accel, QemuSetup, VmRun};

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

/// `requested`, with `Accel::Auto` decided: KVM when its device opens read-write and no earlier
/// run found it unusable, else TCG.
pub(super) fn resolve_accel(requested: Accel, qemu: &QemuSetup) -> Accel {
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

/// The qemu command line: a minimal PC with the kernel console on the first serial port (our
/// stdout pipe) and the command's stdout/stderr on the next two (our Unix sockets).
pub(super) fn qemu_command(
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
