//! The qemu side of a boot: which accelerator runs the guest, and qemu's command line.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use super::spec::{Accel, QemuSetup, VmRun};
use crate::arch::Arch;

/// Always on the kernel command line after `console=` (the architecture's first serial port)
/// and before the architecture's own ([`Arch::cmdline_extra`]: x86_64's `tsc=reliable`): only
/// serious kernel messages, reboot (which `-no-reboot` turns into qemu exiting) at once on a
/// panic and on any oops, and audit on so the audit workloads can add rules.
// cryptomgr.notests: the crypto self-tests at boot are pure CPU work that, on a loaded host
// under TCG, has been seen to soft-lock a guest CPU for minutes before any test ran.
const BASE_CMDLINE: &str = "quiet panic=-1 oops=panic audit=1 cryptomgr.notests";

/// `requested`, with `Accel::Auto` decided: KVM when `arch` can use it, its device opens
/// read-write and no earlier run found it unusable, else TCG.
pub(super) fn resolve_accel(requested: Accel, qemu: &QemuSetup, arch: Arch) -> Accel {
    match requested {
        Accel::Auto if !arch.kvm_capable() => Accel::Tcg,
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

/// The qemu command line: a minimal machine with the kernel console on the first serial port
/// (our stdout pipe) and the command's stdout/stderr on two more ports (our Unix sockets): a
/// PC's next two serial ports, or two virtio consoles on arm64's `virt` board.
pub(super) fn qemu_command(
    run: &VmRun,
    vmlinuz: &Path,
    initrd: &Path,
    accel: Accel,
    [stdout_sock, stderr_sock]: [&Path; 2],
) -> Command {
    let arch = run.arch;
    let mut cmdline = format!("console={} {BASE_CMDLINE}", arch.console());
    for extra in [Some(arch.cmdline_extra()), run.cmdline_extra.as_deref()]
        .into_iter()
        .flatten()
        .filter(|extra| !extra.is_empty())
    {
        cmdline.push(' ');
        cmdline.push_str(extra);
    }
    let mut qemu = Command::new(&run.qemu.binary);
    qemu.args(["-nodefaults", "-display", "none", "-no-reboot"])
        .args(["-m", &format!("{}M", run.memory_mb)])
        .args(["-smp", &run.cpus.to_string()])
        .args(arch.machine_args())
        .args(["-accel", if accel == Accel::Kvm { "kvm" } else { "tcg" }])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &cmdline])
        .args(["-serial", "stdio"]);
    qemu.args(arch.command_ports_bus());
    for (id, sock) in [("gout", stdout_sock), ("gerr", stderr_sock)] {
        qemu.arg("-chardev")
            .arg(format!("socket,id={id},path={}", sock.display()))
            .args(arch.command_port(id));
    }
    qemu.args(&run.extra_qemu_args);
    // The console's input: the host's request for the guest's process dump (see `init.rs`).
    qemu.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    qemu
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Kernel;

    fn args(run: &VmRun) -> Vec<String> {
        let socks = [Path::new("/s/out"), Path::new("/s/err")];
        let qemu = qemu_command(run, Path::new("/k"), Path::new("/i"), Accel::Tcg, socks);
        qemu.get_args()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_pc_command_line_is_what_it_always_was() {
        let run = VmRun::new(Kernel::V6_12, "true", "/out");
        assert_eq!(
            args(&run).join(" "),
            "-nodefaults -display none -no-reboot -m 1024M -smp 2 -cpu max -accel tcg \
             -kernel /k -initrd /i -append console=ttyS0 quiet panic=-1 oops=panic audit=1 \
             cryptomgr.notests tsc=reliable -serial stdio \
             -chardev socket,id=gout,path=/s/out -serial chardev:gout \
             -chardev socket,id=gerr,path=/s/err -serial chardev:gerr"
        );
    }

    #[test]
    fn arm64_runs_on_virt_with_its_console_and_virtio_ports() {
        let run = VmRun::new(Kernel::V6_12, "true", "/out").on(Arch::Aarch64);
        assert_eq!(run.qemu.binary, Path::new("qemu-system-aarch64"));
        let line = args(&run).join(" ");
        assert!(line.contains("-M virt -cpu max,pauth-impdef=on -accel tcg"));
        assert!(line.contains("-append console=ttyAMA0 quiet "));
        assert!(!line.contains("tsc=reliable"));
        assert!(line.contains(
            "-device virtio-serial-pci -chardev socket,id=gout,path=/s/out \
             -device virtconsole,chardev=gout"
        ));
    }
}
