//! The guest's architecture: everything that differs between an x86_64 guest (a PC under KVM
//! or TCG) and an arm64 one (qemu's `virt` board, TCG only on an x86 host) is a method here,
//! so the kernel set, the qemu command line, busybox and the guest build take an [`Arch`]
//! instead of testing for one.

use std::fmt;
use std::path::Path;
use std::process::Command;

/// A guest architecture.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Arch {
    /// A PC: KVM when the host has it, else TCG.
    #[default]
    #[value(name = "x86_64")]
    X86_64,
    /// qemu's `virt` board with `-cpu max`: TCG only (this host is x86_64).
    #[value(name = "aarch64", alias = "arm64")]
    Aarch64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// Debian's name for it, in package names (`-cloud-amd64`) and `APT::Architecture`.
    pub fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }

    /// The Rust target the guest binaries are built for (static: no libc in the guest).
    pub fn rust_target(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Aarch64 => "aarch64-unknown-linux-musl",
        }
    }

    /// Environment for the guest's `cargo build`, target-specific so that it never reaches
    /// the host artifacts nor the nested cargo that builds the eBPF object: x86_64 links
    /// glibc statically; aarch64 is musl (static by default) linked by the toolchain's own
    /// `rust-lld`, as the host has no aarch64 linker.
    pub fn build_env(self) -> (&'static str, &'static str) {
        match self {
            Arch::X86_64 => (
                "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
                "-C target-feature=+crt-static",
            ),
            Arch::Aarch64 => ("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER", "rust-lld"),
        }
    }

    /// The binutils `strip` that reads its binaries (the host's own knows x86 only).
    pub fn strip(self) -> &'static str {
        match self {
            Arch::X86_64 => "strip",
            Arch::Aarch64 => "aarch64-linux-gnu-strip",
        }
    }

    /// What runs its user-space binaries on this (x86_64) host: nothing for x86_64, qemu's
    /// user-mode emulator for aarch64 (qemu-user-static, no binfmt registration needed).
    pub fn user_runner(self) -> Option<&'static str> {
        match self {
            Arch::X86_64 => None,
            Arch::Aarch64 => Some("qemu-aarch64-static"),
        }
    }

    /// A command that runs `program`, a binary of this architecture, on this host.
    pub fn command(self, program: &Path) -> Command {
        match self.user_runner() {
            None => Command::new(program),
            Some(runner) => {
                let mut command = Command::new(runner);
                command.arg(program);
                command
            }
        }
    }

    /// Debian's multiarch triplet: its libraries' directory under `/usr/lib`.
    pub fn triplet(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-gnu",
            Arch::Aarch64 => "aarch64-linux-gnu",
        }
    }

    /// The file name of glibc's dynamic loader.
    pub fn dynamic_loader(self) -> &'static str {
        match self {
            Arch::X86_64 => "ld-linux-x86-64.so.2",
            Arch::Aarch64 => "ld-linux-aarch64.so.1",
        }
    }

    /// `Machine:` in `readelf -h`'s header dump of its binaries.
    pub fn readelf_machine(self) -> &'static str {
        match self {
            Arch::X86_64 => "Advanced Micro Devices X86-64",
            Arch::Aarch64 => "AArch64",
        }
    }

    /// The qemu that runs it.
    pub fn qemu_binary(self) -> &'static str {
        match self {
            Arch::X86_64 => "qemu-system-x86_64",
            Arch::Aarch64 => "qemu-system-aarch64",
        }
    }

    /// Whether KVM can run it on this (x86_64) host.
    pub fn kvm_capable(self) -> bool {
        self == Arch::X86_64
    }

    /// Whether qemu boots the `vmlinux` unpacked from the package's image (x86's bzImage,
    /// entered at its PVH note: no decompressor under TCG) rather than the image itself
    /// (arm64's is a plain, uncompressed `Image`).
    pub fn boots_unpacked_kernel(self) -> bool {
        self == Arch::X86_64
    }

    /// The machine and CPU on qemu's command line.
    pub fn machine_args(self) -> &'static [&'static str] {
        match self {
            Arch::X86_64 => &["-cpu", "max"],
            // pauth-impdef: QARMA pointer authentication costs TCG dearly; the
            // implementation-defined algorithm is the cheap one.
            Arch::Aarch64 => &["-M", "virt", "-cpu", "max,pauth-impdef=on"],
        }
    }

    /// The kernel console device (qemu's first serial port).
    pub fn console(self) -> &'static str {
        match self {
            Arch::X86_64 => "ttyS0",
            Arch::Aarch64 => "ttyAMA0",
        }
    }

    /// Kernel command-line arguments for this architecture only.
    pub fn cmdline_extra(self) -> &'static str {
        match self {
            // Under load the clocksource watchdog finds TCG's TSC "unstable" and the kernel
            // switches clocksource at run time, patching its own text while other vCPUs run
            // it; on 7.2 that crashed the guest in 3 of ~10 kprobe-heavy runs.
            Arch::X86_64 => "tsc=reliable",
            Arch::Aarch64 => "",
        }
    }

    /// The guest devices that carry the command's stdout and stderr: the PC's second and
    /// third 8250 ports; on `virt` (one PL011 only in qemu 7.2) two virtio consoles.
    pub fn command_ports(self) -> [&'static str; 2] {
        match self {
            Arch::X86_64 => ["/dev/ttyS1", "/dev/ttyS2"],
            Arch::Aarch64 => ["/dev/hvc0", "/dev/hvc1"],
        }
    }

    /// The modules the command's ports need where a kernel builds them as modules (Debian's
    /// arm64 6.1 does: virtio-pci and virtio-console), in load order. The guest loads those
    /// its kernel package has (`kernels.rs` keeps them); 6.12 and 7.x build them in.
    pub fn port_modules(self) -> &'static [&'static str] {
        match self {
            Arch::X86_64 => &[],
            Arch::Aarch64 => &[
                "virtio_ring",
                "virtio",
                "virtio_pci_legacy_dev",
                "virtio_pci_modern_dev",
                "virtio_pci",
                "virtio_console",
            ],
        }
    }

    /// qemu arguments for the bus the command's ports sit on (none for the PC's serial ports).
    pub fn command_ports_bus(self) -> &'static [&'static str] {
        match self {
            Arch::X86_64 => &[],
            // PCI: Debian's arm64 kernels have virtio-pci built in, virtio-mmio only as a
            // module (the guest loads none).
            Arch::Aarch64 => &["-device", "virtio-serial-pci"],
        }
    }

    /// qemu arguments for one of the command's ports, fed by the chardev `id`; in the order
    /// of [`Arch::command_ports`].
    pub fn command_port(self, id: &str) -> [String; 2] {
        match self {
            Arch::X86_64 => ["-serial".into(), format!("chardev:{id}")],
            Arch::Aarch64 => ["-device".into(), format!("virtconsole,chardev={id}")],
        }
    }

    /// Where this architecture's files go under a shared directory of `target/`: x86_64 keeps
    /// the places it always had (`None`), the others a subdirectory of their name.
    pub fn subdir(self) -> Option<&'static str> {
        match self {
            Arch::X86_64 => None,
            Arch::Aarch64 => Some(self.name()),
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
