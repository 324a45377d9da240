//! `cargo xtask`: hotprof's developer tasks.
//!
//! hotprof's probes need kprobes/fentry, which the host kernel may lack, so everything that
//! touches the kernel runs in a qemu guest booting a real Debian kernel. This crate installs
//! what that needs (`setup`), builds the guest binaries (`build`) and the release artifacts
//! (`dist`), fetches kernels (`kernels`), runs commands in a guest (`vm`), runs the whole test
//! suite (`test`), benchmarks the probes' cost (`bench`) and shows hotprof off (`demo`).

mod apt_state;
mod arch;
mod bench;
mod build;
mod dist;
mod examples;
mod fuzz;
mod host;
mod host_deb;
mod host_heatmap;
mod host_top;
mod initramfs;
mod kernels;
mod peer_exactness;
mod peer_output;
mod peers;
mod scenarios;
mod setup;
mod soak;
mod test;
mod top_screen;
mod util;
mod vm;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::arch::Arch;
use crate::kernels::Kernel;
use crate::util::{fresh_dir, secs, step, target_dir};
use crate::vm::{Accel, VmRun};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "hotprof's developer tasks"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install everything building and testing needs (apt packages, nightly rust-src,
    /// bpf-linker). Safe to repeat: present pieces are skipped.
    Setup,
    /// Build hotprof and the workloads as static binaries for the VM guest.
    Build,
    /// Release artifacts in target/dist, for x86_64 and aarch64: a tarball each (static binary,
    /// man pages, completions, systemd unit, license, README), a .deb each checked with
    /// lintian, and one SHA256SUMS.
    /// Reproducible: every timestamp is SOURCE_DATE_EPOCH (default: the last commit's time).
    Dist,
    /// Fetch the newest guest kernels into target/kernels (done on demand by `vm` and `test`).
    Kernels {
        /// Only this kernel (default: all).
        #[arg(long)]
        kernel: Option<Kernel>,
    },
    /// Boot a kernel in qemu and run a shell command in it; /out comes back to --out.
    Vm(VmArgs),
    /// Run every check: fmt, clippy, unit tests, the eBPF load test, VM scenarios.
    Test(test::TestArgs),
    /// Run one VM scenario (`NAME@KERNEL`) in this process: how `test` runs each, two at a
    /// time. Assumes the guest binaries built and the kernel fetched.
    #[command(hide = true)]
    Scenario(test::ScenarioArgs),
    /// Run one host check in this process: how `test` runs those that run beside others.
    #[command(hide = true)]
    HostCheck(test::HostCheckArgs),
    /// Probe cost vs empty probes and bpftrace, scaling to 1000 functions; writes
    /// target/bench/report.md.
    Bench(bench::BenchArgs),
    /// Boot 6.12 and profile __audit_filter_op under syscall_lat with audit rules loaded.
    Demo(DemoArgs),
}

#[derive(Args)]
struct DemoArgs {
    /// The guest's architecture (aarch64: Debian's arm64 6.12 on qemu's `virt` board, TCG).
    #[arg(long, value_enum, default_value = "x86_64")]
    arch: Arch,
}

#[derive(Args)]
struct VmArgs {
    /// Kernel to boot.
    #[arg(long, default_value = "6.12")]
    kernel: Kernel,
    /// The guest's architecture: aarch64 boots Debian's arm64 kernel on qemu's `virt` board
    /// (TCG) with hotprof and the workloads built for it.
    #[arg(long, value_enum, default_value = "x86_64")]
    arch: Arch,
    /// Seconds before a hung guest is killed, boot included, by this host's clock. 10 s
    /// before that the guest prints every process's kernel stack.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Where the files the command writes under /out land (default: target/vm-out/<kernel>,
    /// for aarch64 target/vm-out/aarch64/<kernel>, emptied first).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Do not rebuild the guest binaries; use whatever target/guest holds.
    #[arg(long)]
    no_build: bool,
    /// Extra kernel command-line arguments.
    #[arg(long, value_name = "EXTRA", allow_hyphen_values = true)]
    cmdline: Option<String>,
    /// Show the kernel console (boot log) on stderr.
    #[arg(long)]
    console: bool,
    /// CPU emulation: auto uses KVM when it works, else TCG.
    #[arg(long, value_enum, default_value = "auto")]
    accel: Accel,
    /// Run on qemu's instruction clock (TCG, one CPU, `-icount shift=0`): every duration is
    /// an instruction count, and an arm64 guest's PMU counts instructions (`--counter
    /// instructions`), which it does on no other clock.
    #[arg(long, conflicts_with = "accel")]
    instruction_clock: bool,
    /// Lay Debian sid's bpftrace, funclatency (libbpf-tools) and perf into the guest, each with
    /// its own libraries (`bpftrace-sid`, `funclatency`, `perf` in its PATH), and give it the
    /// memory they unpack into.
    #[arg(long)]
    peers: bool,
    /// The command, run by the guest's busybox sh (as `sh -c`) in /out, with PATH holding
    /// hotprof and the workloads: `-- 'a && b'` or `-- prog args`. Its exit code is ours.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup::run_all().map(|()| ExitCode::SUCCESS),
        Task::Build => setup::run_all()
            .and_then(|()| build::build_guest(Arch::X86_64))
            .map(|_| ExitCode::SUCCESS),
        Task::Dist => setup::run_all()
            .and_then(|()| dist::dist())
            .map(|_| ExitCode::SUCCESS),
        Task::Kernels { kernel } => fetch_kernels(kernel).map(|()| ExitCode::SUCCESS),
        Task::Vm(args) => vm_command(args),
        Task::Test(args) => test::run_tests(&args),
        Task::Scenario(args) => test::run_one(&args),
        Task::HostCheck(args) => test::run_host_check(&args),
        Task::Bench(args) => bench::run(&args),
        Task::Demo(args) => demo(args.arch),
    };
    result.unwrap_or_else(|err| {
        eprintln!("error: {err:#}");
        ExitCode::FAILURE
    })
}

fn fetch_kernels(only: Option<Kernel>) -> Result<()> {
    for kernel in only.map_or(Kernel::ALL.to_vec(), |kernel| vec![kernel]) {
        let image = kernels::ensure(kernel, Arch::X86_64)?;
        step(
            "kernel",
            &format!("{kernel}: {} at {}", image.package, image.boot.display()),
        );
    }
    Ok(())
}

fn vm_command(args: VmArgs) -> Result<ExitCode> {
    if !args.no_build {
        setup::run_all()?;
        build::build_guest(args.arch)?;
    }
    let out_dir = match args.out {
        Some(dir) => dir,
        None => {
            let mut dir = target_dir().join("vm-out");
            if let Some(subdir) = args.arch.subdir() {
                dir.push(subdir);
            }
            dir.push(args.kernel.name());
            fresh_dir(&dir)?;
            dir
        }
    };
    let mut run = VmRun {
        timeout: Duration::from_secs(args.timeout),
        cmdline_extra: args.cmdline,
        echo: true,
        show_console: args.console,
        accel: args.accel,
        ..VmRun::new(args.kernel, args.command.join(" "), out_dir).on(args.arch)
    };
    if args.instruction_clock {
        run = run.on_instruction_clock();
    }
    if args.peers {
        run = run.with_peers()?;
    }
    let outcome = vm::run(&run)?;
    eprintln!(
        "[vm] {} ({:?}): exit {} after {} (boot {}); /out is in {}",
        outcome.kernel_package,
        outcome.accel,
        outcome.exit_code,
        secs(outcome.total_time),
        secs(outcome.boot_time),
        outcome.out_dir.display()
    );
    Ok(exit_code(outcome.exit_code))
}

/// The guest's exit status as ours (0..=255; anything else shows as failure).
fn exit_code(code: i32) -> ExitCode {
    u8::try_from(code).map_or(ExitCode::FAILURE, ExitCode::from)
}

/// Enough getpid calls to show a clear profile while staying well under a minute in TCG
/// (syscall_lat makes 100000 calls with three audit rules in about 0.4 s there, unprobed).
const DEMO_CALLS: u32 = 100_000;
/// The arm64 guest boots in ~10 s, but emulating it is several times slower than x86_64.
const DEMO_TIMEOUT: Duration = Duration::from_secs(240);

fn demo(arch: Arch) -> Result<ExitCode> {
    setup::run_all()?;
    build::build_guest(arch)?;
    let script = format!(
        "audit_rules enable && audit_rules add 3 && hotprof --fn __audit_filter_op -- syscall_lat {DEMO_CALLS}"
    );
    step("demo", &format!("6.12 {arch} guest: {script}"));
    let mut out_dir = target_dir().join("vm-out").join("demo");
    if let Some(subdir) = arch.subdir() {
        out_dir.push(subdir);
    }
    fresh_dir(&out_dir)?;
    let run = VmRun {
        echo: true,
        timeout: DEMO_TIMEOUT,
        ..VmRun::new(Kernel::V6_12, script, out_dir).on(arch)
    };
    let outcome = vm::run(&run).context("the demo run failed")?;
    step(
        "demo",
        &format!(
            "exit {} after {} (boot {})",
            outcome.exit_code,
            secs(outcome.total_time),
            secs(outcome.boot_time)
        ),
    );
    Ok(exit_code(outcome.exit_code))
}
