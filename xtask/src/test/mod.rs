//! `cargo xtask test`: every check the project has, in one command that works on a bare
//! machine (it runs `setup` first), ending with a summary table and `N passed, N failed`.
//!
//! Checks run in order of cost: formatting, clippy, host unit tests, the host eBPF load test,
//! then the VM scenarios on each kernel. A failing check does not stop the others, so one run
//! shows everything that is wrong.

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Args;

use child::CheckProcess;
pub use guests::{ScenarioArgs, run_one};

use crate::arch::Arch;
use crate::build;
use crate::fuzz;
use crate::host;
use crate::host_deb;
use crate::kernels::{self, Kernel};
use crate::peers;
use crate::scenarios::{EXPORTER_SOAK, SCENARIOS, Scenario};
use crate::setup;
use crate::soak::{RT_SOAK, SOAK};
use crate::util::{cargo, is_root, run, secs};
use crate::vm;

mod child;
mod guests;
mod warm;

/// The long scenarios, run only when asked for (`--soak`, or by name in `--only`).
const SOAKS: [&Scenario; 3] = [&SOAK, &EXPORTER_SOAK, &RT_SOAK];

#[derive(Args)]
pub struct TestArgs {
    /// Skip the VM scenarios (and the guest build and kernel downloads they need).
    #[arg(long)]
    skip_vm: bool,
    /// Run the VM scenarios on this kernel only (default: every kernel).
    #[arg(long)]
    kernel: Option<Kernel>,
    /// Run only these checks (comma-separated or repeated): a scenario (getpid_exact), a
    /// scenario on one kernel (getpid_exact@6.1) or a host check (fmt, clippy, unit,
    /// ebpf_load). See --list.
    #[arg(long, value_delimiter = ',', value_name = "CHECK")]
    only: Vec<String>,
    /// List the checks and exit.
    #[arg(long)]
    list: bool,
    /// Stream every guest's output live (by default it is shown only for failures).
    #[arg(long)]
    verbose: bool,
    /// Seconds one guest run may take, boot included (a boot takes 5-10 s under TCG; a
    /// scenario's command a few more).
    #[arg(long, default_value_t = 180)]
    vm_timeout: u64,
    /// Guests run at once, each scenario in its own process (1: one after another, each
    /// one's output live). Scenarios that load more than one host core run alone.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=8))]
    jobs: u64,
    /// Also run the soaks: ten minutes on 6.12 (`hotprof --interval 1s --stacks` under a
    /// workload that keeps starting processes: RSS, map entries, missed intervals, losses), the
    /// same for an hour on 7.x-rt (soak_hour), and the exporter's ten minutes. Not in the
    /// default run; `--only soak` (or soak_hour, exporter_soak) runs one alone.
    #[arg(long)]
    soak: bool,
    /// Also run each cargo-fuzz target in fuzz/ for SECS seconds from its committed corpus,
    /// failing on any crash (installs cargo-fuzz first). Not in the default run; `--only fuzz`
    /// (or `fuzz_TARGET`) with `--fuzz SECS` runs only that.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    fuzz: Option<u64>,
}

/// A check that runs on the host.
struct HostCheck {
    name: &'static str,
    about: &'static str,
    run: fn() -> Result<()>,
    place: Place,
}

/// When a host check runs, after the guests (`fmt` runs before them).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// First, with nothing beside it: it times something or counts samples.
    Alone,
    /// After those, one at a time.
    InTurn,
    /// In a process of its own beside the `InTurn` checks: long, timing nothing, sharing no
    /// state with them (the host checks left a core idle half the time, all in turn).
    /// `host_deb` is not: it shares `cargo xtask dist`'s run with `host_deb_arm64`.
    Beside,
}

const HOST_CHECKS: &[HostCheck] = &[
    HostCheck {
        name: "fmt",
        about: "cargo fmt --all --check",
        run: fmt,
        place: Place::InTurn,
    },
    HostCheck {
        name: "clippy",
        about: "cargo clippy, all targets, warnings denied",
        run: clippy,
        place: Place::InTurn,
    },
    HostCheck {
        name: "unit",
        about: "cargo test (host unit tests)",
        run: unit,
        place: Place::InTurn,
    },
    HostCheck {
        name: "ebpf_load",
        about: "profiler's ebpf_load test, as root on the host",
        run: ebpf_load,
        place: Place::InTurn,
    },
    HostCheck {
        name: "host_doctor",
        about: "hotprof doctor's rows on the host match what the host can do (root test)",
        run: host_doctor,
        place: Place::InTurn,
    },
    HostCheck {
        name: "host_syscall_exact",
        about: "hotprof --syscall getpid on the host kernel counts exactly",
        run: host::syscall_exact,
        place: Place::InTurn,
    },
    HostCheck {
        name: "host_overhead_honest",
        about: "the probe overhead hotprof prints matches the workload's clock (0.6–1.6×)",
        run: host::printed_overhead_matches_workload,
        place: Place::Alone,
    },
    HostCheck {
        name: "host_no_kprobes_error",
        about: "hotprof --fn on a kernel without kprobes: one clear line",
        run: host::no_kprobes_error,
        place: Place::InTurn,
    },
    HostCheck {
        name: "host_syscall_leaves",
        about: "a two-syscall --stacks run: each syscall its own leaf frame, exact calls under it",
        run: host::syscall_flamegraph_leaves,
        place: Place::InTurn,
    },
    HostCheck {
        name: "host_heatmap",
        about: "--heatmap of 1 ms then 20 ms sleeps: each mode's calls exactly in its rows and \
                columns, the SVG carries every call, `hotprof heatmap` redraws it from the JSON",
        run: crate::host_heatmap::heatmap_modes,
        place: Place::Alone,
    },
    HostCheck {
        name: "host_list_agrees",
        about: "hotprof list's fentry column says what doctor's fentry try found",
        run: host::list_agrees_with_doctor,
        place: Place::InTurn,
    },
    HostCheck {
        name: "host_sample",
        about: "hotprof sample shows the getpid path (top table + SVG)",
        run: host::sample_getpid_path,
        place: Place::Alone,
    },
    HostCheck {
        name: "prometheus_serve",
        about: "hotprof serve scraped by a real Prometheus: exact _count, p50 within a bucket",
        run: host::prometheus_serve,
        place: Place::Alone,
    },
    HostCheck {
        name: "prometheus_native_histograms",
        about: "hotprof serve scraped by Prometheus with native histograms (protobuf): exact histogram_count and buckets, p99 within a bucket",
        run: host::prometheus_native_histograms,
        place: Place::Alone,
    },
    HostCheck {
        name: "host_top",
        about: "hotprof top under tmux: exact since-start calls per row, the histogram view; \
                q, Ctrl-C and SIGTERM restore the terminal and leave nothing in the kernel",
        run: crate::host_top::top_in_tmux,
        place: Place::Alone,
    },
    HostCheck {
        name: "systemd_unit",
        about: "contrib/hotprof-exporter.service: systemd-analyze verify; serves under its caps",
        run: host::systemd_unit,
        place: Place::InTurn,
    },
    HostCheck {
        name: "host_examples",
        about: "every example of --help, the man pages and the docs that needs no kprobes runs \
                as written (the rest: doc_examples)",
        run: crate::examples::host_examples,
        place: Place::Beside,
    },
    HostCheck {
        name: "host_deb",
        about: "cargo xtask dist's .deb: installs, works (exact getpid count), removes cleanly",
        run: host_deb::install_use_remove,
        place: Place::InTurn,
    },
    HostCheck {
        name: "host_deb_arm64",
        about: "cargo xtask dist's arm64 .deb: unpacked, its binary (the arm64 guests') run \
                under qemu-user, man page and completion checked",
        run: host_deb::arm64_contents,
        place: Place::InTurn,
    },
];

/// profiler-ebpf only builds for the BPF target (profiler's build script does that).
const HOST_EXCLUDE: &[&str] = &["--exclude", "profiler-ebpf"];

fn fmt() -> Result<()> {
    run(cargo().args(["fmt", "--all", "--check"]))
}

fn clippy() -> Result<()> {
    for mut command in clippy_commands() {
        run(&mut command)?;
    }
    Ok(())
}

/// `clippy`'s cargo runs, warnings denied: the host crates, then the eBPF crate, which only
/// builds for the BPF target, with nightly and build-std; once per architecture whose
/// registers it reads (`profiler-ebpf/src/arch/`).
fn clippy_commands() -> Vec<Command> {
    let mut host = cargo();
    host.args(["clippy", "--workspace", "--all-targets"])
        .args(HOST_EXCLUDE)
        .args(["--", "-D", "warnings"]);
    let ebpf = ["x86_64", "aarch64"].map(|arch| {
        let mut ebpf = Command::new("cargo");
        ebpf.env("AYA_BPF_TARGET_ARCH", arch)
            .args(["+nightly", "clippy", "-p", "profiler-ebpf", "--release"])
            .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
            .args(["--", "-D", "warnings"]);
        ebpf
    });
    [host].into_iter().chain(ebpf).collect()
}

fn unit() -> Result<()> {
    run(&mut unit_tests())
}

/// `cargo test` of the host crates (`--no-run` builds them).
fn unit_tests() -> Command {
    let mut test = cargo();
    test.args(["test", "--workspace"]).args(HOST_EXCLUDE);
    test
}

fn host_doctor() -> Result<()> {
    if !is_root() {
        bail!("the doctor test must run as root");
    }
    run(profiler_test("doctor").args(["--", "--ignored"]))
}

fn ebpf_load() -> Result<()> {
    if !is_root() {
        bail!("the eBPF load test must run as root");
    }
    run(profiler_test("ebpf_load").args(["--", "--ignored"]))
}

/// `cargo test` of one of profiler's integration tests.
fn profiler_test(test: &str) -> Command {
    let mut command = cargo();
    command.args(["test", "-p", "profiler", "--test", test]);
    command
}

pub fn run_tests(args: &TestArgs) -> Result<ExitCode> {
    if let Some(unknown) = args.only.iter().find(|only| !known_check(only)) {
        bail!("--only {unknown}: no such check (see `cargo xtask test --list`)");
    }
    if args.fuzz.is_none() && args.only.iter().any(|only| is_fuzz_check(only)) {
        bail!("--only fuzz needs --fuzz SECS (how long to run each target)");
    }
    if args.list {
        print_checks();
        return Ok(ExitCode::SUCCESS);
    }
    let mut results = Results::new();
    if !results.check("setup", setup::run_all) {
        return Ok(results.finish());
    }
    // fmt, then the guests: they are most of the suite's time and what a change to the probes
    // breaks, so they start within minutes of a clean clone instead of after clippy, the unit
    // tests and the .deb build (about 14 minutes on a 2-core machine); the rest follows.
    let host = |first: bool| {
        HOST_CHECKS
            .iter()
            .filter(move |check| (check.name == "fmt") == first)
            .filter(|check| args.wants(check.name, check.name))
    };
    for check in host(true) {
        results.check(check.name, check.run);
    }
    let vm_checks = args.vm_checks();
    if !vm_checks.is_empty() {
        // What the x86 guests leave of the CPU builds what comes after them.
        let later_arches: Vec<Arch> = Arch::ALL[1..]
            .iter()
            .copied()
            .filter(|arch| vm_checks.iter().any(|(scenario, _)| scenario.arch == *arch))
            .collect();
        let host_checks: Vec<&str> = host(false).map(|check| check.name).collect();
        let _warm = warm::start(&later_arches, &host_checks);
        run_vm_checks(args, &vm_checks, &mut results);
    }
    run_host_checks(host(false).collect(), &mut results);
    if let Some(seconds) = args.fuzz {
        run_fuzz_checks(args, seconds, &mut results);
    }
    Ok(results.finish())
}

/// The host checks after the guests: those that time something alone, then the long ones
/// that time nothing in processes of their own while the rest run in turn.
fn run_host_checks(checks: Vec<&HostCheck>, results: &mut Results) {
    let placed = |place: Place| checks.iter().filter(move |check| check.place == place);
    for check in placed(Place::Alone) {
        results.check(check.name, check.run);
    }
    let beside: Vec<CheckProcess> = placed(Place::Beside)
        .filter_map(|check| {
            match CheckProcess::start(check.name, &["host-check", check.name], false, false) {
                Ok(process) => Some(process),
                Err(err) => {
                    results.record(check.name, Duration::ZERO, Err(err));
                    None
                }
            }
        })
        .collect();
    for check in placed(Place::InTurn) {
        results.check(check.name, check.run);
    }
    for process in beside {
        process.wait(results);
    }
}

/// `cargo xtask host-check NAME`: one host check in this process, how `test` runs those that
/// run beside others. With `--error-file` a failure is written there, not returned.
#[derive(Args)]
pub struct HostCheckArgs {
    /// The check's name, as `cargo xtask test --list` shows it.
    pub name: String,
    /// Where to write the error of a failed run (its first line is the summary's note).
    #[arg(long)]
    pub error_file: Option<std::path::PathBuf>,
}

pub fn run_host_check(args: &HostCheckArgs) -> Result<ExitCode> {
    let check = HOST_CHECKS
        .iter()
        .find(|check| check.name == args.name)
        .with_context(|| {
            format!(
                "no host check {} (see `cargo xtask test --list`)",
                args.name
            )
        })?;
    child::exit_with((check.run)(), args.error_file.as_deref())
}

impl TestArgs {
    /// Whether `--only` selects the check `name` (of group `group`, a scenario's name).
    fn wants(&self, name: &str, group: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|only| only == name || only == group)
    }

    /// Whether the opt-in `soak` runs: asked for with `--soak`, or named in `--only`.
    fn wants_soak(&self, soak: &Scenario) -> bool {
        self.soak
            || self
                .only
                .iter()
                .any(|only| only.split('@').next() == Some(soak.name))
    }

    /// The selected scenarios, each with a kernel it runs on.
    fn vm_checks(&self) -> Vec<(&'static Scenario, Kernel)> {
        if self.skip_vm {
            return Vec::new();
        }
        let soaks = SOAKS.into_iter().filter(|soak| self.wants_soak(soak));
        SCENARIOS
            .iter()
            .chain(soaks)
            .flat_map(|scenario| {
                scenario
                    .kernels
                    .iter()
                    .map(move |&kernel| (scenario, kernel))
            })
            .filter(|(_, kernel)| self.kernel.is_none_or(|only| only == *kernel))
            .filter(|(scenario, kernel)| self.wants(&instance(scenario, *kernel), scenario.name))
            .collect()
    }
}

fn print_checks() {
    for check in HOST_CHECKS {
        println!("{:<28} {}", check.name, check.about);
    }
    for target in fuzz::targets().unwrap_or_default() {
        println!(
            "{:<28} cargo fuzz run {target} (opt-in: --fuzz SECS)",
            format!("fuzz_{target}")
        );
    }
    for scenario in SCENARIOS {
        for kernel in scenario.kernels {
            println!("{:<28} VM scenario", instance(scenario, *kernel));
        }
    }
    for soak in SOAKS {
        for kernel in soak.kernels {
            let length = if soak.name == RT_SOAK.name {
                "1 hour"
            } else {
                "10 minutes"
            };
            println!(
                "{:<28} VM scenario, {length} (opt-in: --soak)",
                instance(soak, *kernel)
            );
        }
    }
}

/// `fuzz` (every target) or `fuzz_<target>`.
fn is_fuzz_check(name: &str) -> bool {
    name == "fuzz"
        || name.strip_prefix("fuzz_").is_some_and(|target| {
            fuzz::targets().is_ok_and(|targets| targets.iter().any(|t| t == target))
        })
}

/// Installs cargo-fuzz if needed, then runs every selected fuzz target for `seconds`.
fn run_fuzz_checks(args: &TestArgs, seconds: u64, results: &mut Results) {
    let selected = |name: &str| {
        args.only.is_empty() || args.only.iter().any(|only| only == name || only == "fuzz")
    };
    if !results.check("setup_cargo_fuzz", setup::cargo_fuzz) {
        return;
    }
    if !results.check("fuzz_build", fuzz::build_all) {
        return;
    }
    let targets = match fuzz::targets() {
        Ok(targets) => targets,
        Err(err) => {
            results.check("fuzz", || Err(err));
            return;
        }
    };
    for target in targets {
        let name = format!("fuzz_{target}");
        if selected(&name) {
            results.check(&name, || fuzz::run_target(&target, seconds));
        }
    }
}

/// For each guest architecture with a selected scenario: builds its guest binaries, fetches
/// each needed kernel and runs the scenarios; a failed build or download fails its row and
/// skips what depends on it. x86_64's rows are `guest_build` and `kernel@K`; another
/// architecture's carry its name (`guest_build@aarch64`, `kernel@K/aarch64`).
fn run_vm_checks(args: &TestArgs, checks: &[(&'static Scenario, Kernel)], results: &mut Results) {
    for arch in Arch::ALL {
        let mine = checks
            .iter()
            .filter(|(scenario, _)| scenario.arch == arch)
            .copied()
            .collect::<Vec<_>>();
        if !mine.is_empty() {
            run_arch_checks(args, arch, &mine, results);
        }
    }
}

fn run_arch_checks(
    args: &TestArgs,
    arch: Arch,
    checks: &[(&'static Scenario, Kernel)],
    results: &mut Results,
) {
    let suffix = |sep: &str| {
        arch.subdir()
            .map_or(String::new(), |name| format!("{sep}{name}"))
    };
    let _peers = checks
        .iter()
        .any(|(scenario, _)| scenario.needs_peers())
        .then(|| prepare_peers(arch));
    let _kernels = prefetch_kernels(arch, checks);
    if !results.check(&format!("guest_build{}", suffix("@")), || {
        build::build_guest(arch).map(drop)
    }) {
        return;
    }
    let mut runnable = Vec::new();
    for kernel in Kernel::ALL {
        let mine = checks
            .iter()
            .filter(|(_, k)| *k == kernel)
            .collect::<Vec<_>>();
        if mine.is_empty() {
            continue;
        }
        let fetched = results.check(&format!("kernel@{kernel}{}", suffix("/")), || {
            kernels::ensure(kernel, arch).map(|image| println!("  {}", image.package))
        });
        if fetched {
            runnable.extend(mine);
        }
    }
    guests::run_scenarios(
        &runnable,
        args.jobs as usize,
        args.vm_timeout,
        args.verbose,
        results,
    );
}

/// Builds the peers' layer in the background, beside the guest build and the first scenarios:
/// mostly downloads and unpacking (about 190 s from a clean clone, in the way of nothing
/// else). The scenario that needs it waits for it on the layer's lock, and builds it itself
/// if this failed. Joined when the handle is dropped.
fn prepare_peers(arch: Arch) -> JoinOnDrop {
    println!(
        "[peers] building the {} layer in the background",
        arch.name()
    );
    JoinOnDrop(Some(std::thread::spawn(move || {
        if let Err(err) = peers::layer(arch, &peers::ALL) {
            println!(
                "  note: building the peers' layer in the background failed (the scenario \
                 that needs it tries again): {err:#}"
            );
        }
    })))
}

/// Fetches the kernels `checks` boot in the background, beside the guest build (downloads and
/// unpacking: ~60 s of `kernel@K` rows from a clean clone); each `kernel@K` row then finds its
/// kernel cached, or fetches it itself if this failed. Joined when the handle is dropped.
fn prefetch_kernels(arch: Arch, checks: &[(&'static Scenario, Kernel)]) -> JoinOnDrop {
    let kernels: Vec<Kernel> = Kernel::ALL
        .into_iter()
        .filter(|kernel| checks.iter().any(|(_, k)| k == kernel))
        .collect();
    JoinOnDrop(Some(std::thread::spawn(move || {
        for kernel in kernels {
            // The row reports a failure.
            let _ = kernels::ensure(kernel, arch);
        }
    })))
}

/// A thread joined when this is dropped.
struct JoinOnDrop(Option<std::thread::JoinHandle<()>>);

impl Drop for JoinOnDrop {
    fn drop(&mut self) {
        if let Some(thread) = self.0.take() {
            let _ = thread.join();
        }
    }
}

/// The guest kernel's death behind `error`, if that is what ended the scenario (see
/// [`vm::GuestDied`]: seen under TCG with no fault of the code under test).
fn guest_died(error: &anyhow::Error) -> Option<&vm::GuestDied> {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<vm::GuestDied>())
}

/// `scenario@kernel`, the name one scenario run has in the table and in `--only`.
fn instance(scenario: &Scenario, kernel: Kernel) -> String {
    format!("{}@{kernel}", scenario.name)
}

fn known_check(name: &str) -> bool {
    HOST_CHECKS.iter().any(|check| check.name == name)
        || is_fuzz_check(name)
        || SCENARIOS.iter().chain(SOAKS).any(|scenario| {
            scenario.name == name
                || scenario
                    .kernels
                    .iter()
                    .any(|kernel| instance(scenario, *kernel) == name)
        })
}

struct Row {
    name: String,
    passed: bool,
    time: Duration,
    /// When it ended, from the suite's start: with `time`, where it stood in the run.
    ended: Duration,
    error: Option<String>,
}

/// Collects check results and prints them as they come and as a table at the end.
struct Results {
    rows: Vec<Row>,
    started: Instant,
}

impl Results {
    fn new() -> Self {
        Self {
            rows: Vec::new(),
            started: Instant::now(),
        }
    }

    /// Runs one check, prints its result and records it; returns whether it passed.
    fn check(&mut self, name: &str, check: impl FnOnce() -> Result<()>) -> bool {
        println!("\n=== {name}");
        let started = Instant::now();
        let result = check();
        self.record(name, started.elapsed(), result)
    }

    /// Prints and records the result of a check that ran elsewhere (a scenario's process);
    /// returns whether it passed.
    fn record(&mut self, name: &str, time: Duration, result: Result<()>) -> bool {
        let passed = result.is_ok();
        let error = result.err().map(|err| format!("{err:#}"));
        match &error {
            None => println!("--- {name}: ok ({})", secs(time)),
            Some(error) => println!("--- {name}: FAILED ({})\n{error}", secs(time)),
        }
        self.rows.push(Row {
            name: name.to_owned(),
            passed,
            time,
            ended: self.started.elapsed(),
            error,
        });
        passed
    }

    /// Prints the summary and returns the process exit code.
    fn finish(self) -> ExitCode {
        let width = self
            .rows
            .iter()
            .map(|row| row.name.len())
            .max()
            .unwrap_or(5)
            .max(5);
        println!(
            "\n{:<width$}  {:<6}  {:>8}  {:>8}  note",
            "check", "result", "time", "ended"
        );
        for row in &self.rows {
            let note = row
                .error
                .as_deref()
                .and_then(|error| error.lines().next())
                .unwrap_or("");
            println!(
                "{:<width$}  {:<6}  {:>8}  {:>8}  {}",
                row.name,
                if row.passed { "ok" } else { "FAILED" },
                secs(row.time),
                secs(row.ended),
                truncate(note, 100)
            );
        }
        let passed = self.rows.iter().filter(|row| row.passed).count();
        let failed = self.rows.len() - passed;
        println!("total time {}", secs(self.started.elapsed()));
        println!("{passed} passed, {failed} failed");
        if failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut = text.chars().take(max - 1).collect::<String>();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use anyhow::Context as _;

    use super::*;

    #[test]
    fn a_guest_death_is_recognised_through_the_scenarios_context() {
        let died: anyhow::Error = vm::GuestDied("the guest died while running".into()).into();
        let wrapped = Err::<(), _>(died)
            .context("running the scenario")
            .unwrap_err();
        assert_eq!(
            guest_died(&wrapped).map(|d| d.0.as_str()),
            Some("the guest died while running")
        );
        assert!(guest_died(&anyhow::anyhow!("the guest command exited 1, want 0")).is_none());
    }
}
