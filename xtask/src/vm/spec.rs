//! What a guest run asks for ([`VmRun`], with its [`Accel`] and [`QemuSetup`]) and what it
//! gives back ([`VmOutcome`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use super::text::transcript;
use crate::arch::Arch;
use crate::kernels::Kernel;
use crate::peers;
use crate::util::target_dir;

/// Guest memory with sid's peers: their layer unpacks to about 450 MB in the guest's RAM.
const PEERS_MEMORY_MB: u32 = 2048;

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
        Self::for_arch(Arch::X86_64)
    }
}

impl QemuSetup {
    /// The real qemu for `arch`'s guests.
    pub fn for_arch(arch: Arch) -> Self {
        Self {
            binary: PathBuf::from(arch.qemu_binary()),
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
    /// The guest's architecture: which kernel, busybox, binaries and qemu.
    pub arch: Arch,
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
    /// Virtual CPUs (`-smp`).
    pub cpus: u32,
    pub qemu: QemuSetup,
    /// Appended to the qemu command line as they are (e.g. the bench's `-plugin …`).
    pub extra_qemu_args: Vec<String>,
}

impl VmRun {
    /// A run with the defaults: an x86_64 guest, 300 s timeout, no echo, `Accel::Auto`, 1 GiB,
    /// 2 CPUs, no extra layers.
    pub fn new(kernel: Kernel, script: impl Into<String>, out_dir: impl Into<PathBuf>) -> Self {
        Self {
            kernel,
            arch: Arch::X86_64,
            script: script.into(),
            timeout: Duration::from_secs(300),
            out_dir: out_dir.into(),
            cmdline_extra: None,
            echo: false,
            show_console: false,
            accel: Accel::Auto,
            extra_layers: Vec::new(),
            memory_mb: 1024,
            cpus: 2,
            qemu: QemuSetup::default(),
            extra_qemu_args: Vec::new(),
        }
    }

    /// This run on qemu's instruction clock: TCG, `-icount shift=0,sleep=off`, one CPU (5.10
    /// and 6.1 hang bringing up a second on this clock). The guest's clock advances 1 ns per
    /// instruction it executes, so a duration the probes take is an instruction count, the
    /// same in every run; and qemu's arm64 PMU counts instructions (`INST_RETIRED`) only on
    /// this clock.
    pub fn on_instruction_clock(self) -> Self {
        Self {
            accel: Accel::Tcg,
            cpus: 1,
            extra_qemu_args: ["-icount", "shift=0,sleep=off"].map(String::from).to_vec(),
            ..self
        }
    }

    /// This run with sid's peers in the guest ([`peers::ALL`]), and the memory they unpack into.
    pub fn with_peers(mut self) -> Result<Self> {
        let layer = peers::layer(self.arch, &peers::ALL)?;
        self.extra_layers.push(layer.cpio);
        self.memory_mb = self.memory_mb.max(PEERS_MEMORY_MB);
        Ok(self)
    }

    /// This run on an `arch` guest, with that architecture's qemu.
    pub fn on(self, arch: Arch) -> Self {
        Self {
            arch,
            qemu: QemuSetup::for_arch(arch),
            ..self
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
