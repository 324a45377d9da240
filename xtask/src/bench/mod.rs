//! `cargo xtask bench`: what hotprof's probes cost, measured against the floor (an empty probe
//! pair of the same mechanism) and against bpftrace doing the same histogram, plus how the cost
//! and the attach/detach time scale with the number of probed functions.
//!
//! Every figure comes from `syscall_lat`, which times its own loop of real getpid calls, so the
//! probe's cost is `ns/call with probe − ns/call without`. Variants run interleaved, one run
//! each per round, so that load from other processes spreads over all of them, and in a
//! different order every round ([`round_order`]) so that order effects cancel; each figure is
//! the median over the rounds with the min–max spread, and overheads are paired per round.
//!
//! Sections (each returns markdown; the report is `target/bench/report.md`):
//! - probe cost on the host (syscall tracepoints, real CPU) and in a 6.12 guest (kprobe and
//!   fentry; TCG, so ratios only) — [`probe_cost`];
//! - scaling with 1/10/100/1000 kprobe'd functions, attach and detach time — [`scaling`];
//! - flamegraph rendering time and memory vs inferno — `flame`;
//! - guest instructions per getpid call under each probe, counted by a QEMU TCG plugin, and
//!   the kernel symbols they are spent in — [`insns`].
//!
//! The guest gets an extra initramfs layer (cached in `target/bench/`) with the empty-probe
//! loader and the host's bpftrace with every library it links, so bpftrace runs in the busybox
//! guest without a Debian root filesystem.

mod exactness;
mod flame;
mod insns;
mod probe_cost;
mod scaling;
mod startup;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};

use crate::arch::Arch;
use crate::build;
use crate::initramfs::{Cpio, fingerprint};
use crate::kernels::Kernel;
use crate::peers;
use crate::setup;
use crate::util::{fresh_dir, secs, stdout_of, step, target_dir};
use crate::vm::{self, VmOutcome, VmRun};

/// The guest gets this much memory: the host's bpftrace layer unpacks to about 210 MB, sid's
/// peers to about 310 MB more.
const GUEST_MEMORY_MB: u32 = 3072;

#[derive(Args)]
pub struct BenchArgs {
    /// Interleaved rounds per variant (median and min–max over them). The order changes every
    /// round: positions balance over every 5 rounds (6 with a baseline), neighbours over
    /// twice that.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(3..=50))]
    pub rounds: u32,
    /// Only these sections (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Section>,
    /// Do not rebuild the guest binaries; use whatever target/guest holds.
    #[arg(long)]
    pub no_build: bool,
    /// Another static hotprof build to run as one more variant (before/after an
    /// optimization), e.g. `target/guest/x86_64-unknown-linux-gnu/release/hotprof` of main.
    #[arg(long, value_name = "HOTPROF")]
    pub baseline_hotprof: Option<PathBuf>,
    /// The guests' architecture. aarch64 (Debian's arm64 6.12 on qemu's `virt` board, TCG)
    /// runs the insns section only: the others time the host or compare with its bpftrace.
    #[arg(long, value_enum, default_value = "x86_64")]
    pub arch: Arch,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Section {
    /// Probe cost on the host: syscall tracepoints.
    Host,
    /// Probe cost in the 6.12 guest: kprobe and fentry.
    Vm,
    /// Cost and attach/detach time with 1..1000 functions (guest, kprobe).
    Scaling,
    /// Flamegraph rendering vs inferno.
    Flame,
    /// Guest instructions per getpid call under each probe (QEMU TCG plugin), and where.
    Insns,
    /// Start-up to the workload running and peak memory, hotprof vs bpftrace (host).
    Startup,
    /// What each peer counts on workloads of known truth, and what it cannot attach to (7.x
    /// guest).
    Exactness,
}

pub fn run(args: &BenchArgs) -> Result<ExitCode> {
    let started = Instant::now();
    if args.arch != Arch::X86_64 && args.only != [Section::Insns] {
        bail!(
            "--arch {} runs only the instruction counts: add --only insns",
            args.arch
        );
    }
    let wants = |section| args.only.is_empty() || args.only.contains(&section);
    if !args.no_build {
        setup::run_all()?;
    }
    // The flame section's one-time work (installing inferno, generating its input) overlaps
    // the guest build; it is waited for before anything is measured.
    let flame_inputs = wants(Section::Flame).then(|| std::thread::spawn(flame::prepare));
    if !args.no_build {
        build::build_guest_with_examples(args.arch, &["empty_probe"])?;
    }
    let flame_inputs = match flame_inputs {
        Some(handle) => Some(
            handle
                .join()
                .map_err(|_| anyhow::anyhow!("preparing the flame section panicked"))?
                .context("preparing the flame section failed")?,
        ),
        None => None,
    };
    let tools = Tools::build(args.arch, args.baseline_hotprof.as_deref())?;
    let dir = target_dir().join("bench");
    fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;

    let mut report = header(args)?;
    let mut section = |name: &str, body: Result<String>| -> Result<()> {
        let body = body.with_context(|| format!("the {name} section failed"))?;
        println!("{body}");
        report.push_str(&body);
        report.push('\n');
        Ok(())
    };
    if wants(Section::Host) {
        section("host probe cost", probe_cost::host(&tools, args.rounds))?;
    }
    if wants(Section::Startup) {
        section("start-up", startup::run(&tools, args.rounds))?;
    }
    if wants(Section::Vm) {
        section("VM probe cost", probe_cost::vm(&tools, args.rounds))?;
    }
    if wants(Section::Scaling) {
        section("scaling", scaling::run(&tools))?;
    }
    if let Some(inputs) = &flame_inputs {
        section("flamegraph", flame::run(inputs, &tools))?;
    }
    if wants(Section::Insns) {
        section("instructions per call", insns::run(&tools))?;
    }
    if wants(Section::Exactness) {
        section("exactness", exactness::run(&tools))?;
    }
    let _ = writeln!(report, "Whole bench: {}.", secs(started.elapsed()));
    let path = dir.join("report.md");
    fs::write(&path, &report).with_context(|| format!("could not write {}", path.display()))?;
    step(
        "bench",
        &format!(
            "done in {}; report in {}",
            secs(started.elapsed()),
            path.display()
        ),
    );
    Ok(ExitCode::SUCCESS)
}

/// The report's title and the machine it ran on.
fn header(args: &BenchArgs) -> Result<String> {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let kernel = stdout_of(Command::new("uname").arg("-r"))?
        .trim()
        .to_owned();
    let date = stdout_of(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]))?;
    Ok(format!(
        "# hotprof bench\n\n`cargo xtask bench --rounds {}`, {}: {cpu}, {cores} cores, host kernel \
         {kernel}. Guests: qemu, 2 vCPUs.\n\n",
        args.rounds,
        date.trim()
    ))
}

/// The programs the bench runs and the guest layer that carries the extra ones.
pub struct Tools {
    /// The guests' architecture (the host runs x86_64 builds only).
    pub arch: Arch,
    /// Static guest builds (they run on the host too): hotprof, syscall_lat, empty_probe.
    pub bin_dir: PathBuf,
    /// cpio layers for the guest: empty_probe and (x86_64) the host's bpftrace with its
    /// libraries; on aarch64 sid's bpftrace with its own ([`peers`](crate::peers)).
    pub guest_layers: Vec<PathBuf>,
    /// The guests' peers (bpftrace, funclatency, perf): their versions and where they come from.
    pub bpftrace: String,
    /// On an x86_64 bench, wrappers that run sid's peers on the host by their guest names
    /// (`bpftrace-sid`, …), for a `PATH`.
    pub sid_host_bin: Option<PathBuf>,
    /// `--baseline-hotprof`, copied to `target/bench/baseline/hotprof_baseline`.
    pub baseline_hotprof: Option<PathBuf>,
}

const BPFTRACE: &str = "/usr/bin/bpftrace";

impl Tools {
    fn build(arch: Arch, baseline_hotprof: Option<&Path>) -> Result<Self> {
        let empty_probe = build::guest_bin_dir(arch)
            .join("examples")
            .join("empty_probe");
        if !empty_probe.is_file() {
            bail!(
                "{} is missing: run without --no-build",
                empty_probe.display()
            );
        }
        let baseline = match baseline_hotprof {
            Some(source) => {
                let dir = Self::baseline_dir();
                fs::create_dir_all(&dir)
                    .with_context(|| format!("could not create {}", dir.display()))?;
                let copy = dir.join("hotprof_baseline");
                fs::copy(source, &copy)
                    .with_context(|| format!("could not copy {}", source.display()))?;
                Some(copy)
            }
            None => None,
        };
        let mut guest_layers = vec![guest_layer(arch, &empty_probe, baseline.as_deref())?];
        let sid = peers::layer(arch, &peers::ALL)?;
        let sid_host_bin = match arch {
            Arch::X86_64 => Some(sid.host_bin_dir(&peers::ALL)?),
            Arch::Aarch64 => None,
        };
        guest_layers.push(sid.cpio);
        let sid = format!(
            "Debian sid's {} for {arch}, with their own libraries",
            sid.versions.join(" and ")
        );
        let bpftrace = match arch {
            Arch::X86_64 => format!("the host's {}; {sid}", host_bpftrace_version()?),
            Arch::Aarch64 => sid,
        };
        Ok(Self {
            arch,
            bin_dir: build::guest_bin_dir(arch),
            guest_layers,
            bpftrace,
            sid_host_bin,
            baseline_hotprof: baseline,
        })
    }

    /// Where the baseline hotprof is put, under a name of its own, for the host's PATH.
    pub fn baseline_dir() -> PathBuf {
        target_dir().join("bench").join("baseline")
    }
}

/// Builds (or reuses) `target/bench/guest-layer.cpio`: `/bin/empty_probe`, `/bin/bpftrace`,
/// and every shared library `ldd` lists for bpftrace at its host path (the dynamic loader at
/// `/lib64`), so the host's bpftrace runs unchanged in the busybox guest. An aarch64 layer
/// (`guest-layer-aarch64.cpio`) has no bpftrace: the host's is an x86-64 build (the arm64
/// guests get sid's from [`peers`]).
fn guest_layer(arch: Arch, empty_probe: &Path, baseline_hotprof: Option<&Path>) -> Result<PathBuf> {
    let bpftrace = (arch == Arch::X86_64).then_some(Path::new(BPFTRACE));
    let libraries = match bpftrace {
        Some(bpftrace) => {
            if !bpftrace.is_file() {
                bail!("{BPFTRACE} not found: `cargo xtask setup` installs bpftrace");
            }
            let ldd = stdout_of(Command::new("ldd").arg(bpftrace))
                .context("could not list bpftrace's libraries with ldd")?;
            ldd_paths(&ldd)
        }
        None => Vec::new(),
    };
    let mut inputs = vec![empty_probe.to_path_buf()];
    inputs.extend(bpftrace.map(Path::to_path_buf));
    inputs.extend(libraries.iter().cloned());
    inputs.extend(baseline_hotprof.map(Path::to_path_buf));
    let dir = target_dir().join("bench");
    fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let name = match arch.subdir() {
        Some(arch) => format!("guest-layer-{arch}"),
        None => "guest-layer".to_owned(),
    };
    let layer = dir.join(format!("{name}.cpio"));
    let stamp_path = dir.join(format!("{name}.stamp"));
    let stamp = fingerprint(&inputs)?;
    if layer.is_file() && fs::read_to_string(&stamp_path).is_ok_and(|old| old == stamp) {
        return Ok(layer);
    }
    let mut cpio = Cpio::new();
    let mut dirs = std::collections::BTreeSet::new();
    for library in &libraries {
        let mut parent = library.parent();
        while let Some(path) = parent.filter(|path| *path != Path::new("/")) {
            dirs.insert(path.to_path_buf());
            parent = path.parent();
        }
    }
    for dir in &dirs {
        cpio.dir(&dir.to_string_lossy(), 0o755);
    }
    let read =
        |path: &Path| fs::read(path).with_context(|| format!("could not read {}", path.display()));
    cpio.file("bin/empty_probe", 0o755, &read(empty_probe)?);
    if let Some(bpftrace) = bpftrace {
        cpio.file("bin/bpftrace", 0o755, &read(bpftrace)?);
    }
    if let Some(baseline) = baseline_hotprof {
        cpio.file("bin/hotprof_baseline", 0o755, &read(baseline)?);
    }
    for library in &libraries {
        // fs::read follows the symlink: the guest gets the file under the name ld.so looks for.
        cpio.file(&library.to_string_lossy(), 0o755, &read(library)?);
    }
    let bytes = cpio.finish();
    fs::write(&layer, &bytes).with_context(|| format!("could not write {}", layer.display()))?;
    fs::write(&stamp_path, stamp)
        .with_context(|| format!("could not write {}", stamp_path.display()))?;
    step(
        "bench",
        &format!(
            "guest layer: empty_probe, bpftrace and {} libraries ({:.0} MB)",
            libraries.len(),
            bytes.len() as f64 / 1e6
        ),
    );
    Ok(layer)
}

/// `bpftrace VERSION` of the host's bpftrace (`bpftrace --version`: `bpftrace v0.17.0`).
fn host_bpftrace_version() -> Result<String> {
    let text = stdout_of(Command::new(BPFTRACE).arg("--version"))
        .context("could not run bpftrace --version")?;
    Ok(text.trim().replace(" v", " "))
}

/// The absolute paths in `ldd` output: `libx.so => /path (addr)` and the loader's `/path (addr)`.
fn ldd_paths(ldd: &str) -> Vec<PathBuf> {
    ldd.lines()
        .filter_map(|line| {
            let target = line.split("=>").last()?.split_whitespace().next()?;
            target.starts_with('/').then(|| PathBuf::from(target))
        })
        .collect()
}

/// Runs a bench script in a guest with the bench layer; the script's `/out` comes back to
/// `target/bench/vm-<name>`.
pub fn vm_run(tools: &Tools, name: &str, script: &str, timeout: Duration) -> Result<VmOutcome> {
    vm_run_with(tools, name, script, timeout, |_| {})
}

/// `empty_probe`'s command line: the mechanism's empty pair on `target`, or with `timed` its
/// timing floor, around `workload`.
fn empty_probe(timed: bool, mode: &str, target: &str, workload: &str) -> String {
    let timed = if timed { "--timed " } else { "" };
    format!("empty_probe {timed}{mode} {target} -- {workload}")
}

/// [`vm_run`], with `adjust` changing the run's settings (accelerator, qemu arguments) first.
pub fn vm_run_with(
    tools: &Tools,
    name: &str,
    script: &str,
    timeout: Duration,
    adjust: impl FnOnce(&mut VmRun),
) -> Result<VmOutcome> {
    let out_dir = target_dir().join("bench").join(format!("vm-{name}"));
    fresh_dir(&out_dir)?;
    let mut run = VmRun {
        timeout,
        extra_layers: tools.guest_layers.clone(),
        memory_mb: GUEST_MEMORY_MB,
        ..VmRun::new(Kernel::V6_12, script, out_dir).on(tools.arch)
    };
    adjust(&mut run);
    step("bench", &format!("{} guest: {name}", run.kernel.name()));
    let outcome = vm::run(&run).with_context(|| format!("the {name} guest failed"))?;
    if outcome.exit_code != 0 {
        bail!(
            "the {name} guest script exited {}:\n{}",
            outcome.exit_code,
            outcome.transcript()
        );
    }
    step(
        "bench",
        &format!(
            "{name}: {} (boot {})",
            secs(outcome.total_time),
            secs(outcome.boot_time)
        ),
    );
    Ok(outcome)
}

/// A guest shell command printing seconds since boot (10 ms resolution), for timing runs from
/// inside the guest.
pub const GUEST_UPTIME: &str = "cut -d' ' -f1 /proc/uptime";

/// `avg_ns` from syscall_lat's report line.
pub fn syscall_lat_avg_ns(output: &str) -> Option<f64> {
    output
        .lines()
        .filter_map(|line| line.strip_prefix("syscall_lat: "))
        .flat_map(str::split_whitespace)
        .find_map(|field| field.strip_prefix("avg_ns="))
        .and_then(|value| value.parse().ok())
}

/// A run's wall time in the guest, from its `bench-secs=START END` line (uptime seconds).
pub fn run_secs(output: &str) -> f64 {
    output
        .lines()
        .rev()
        .find_map(|line| {
            let mut times = line.strip_prefix("bench-secs=")?.split(' ');
            let start: f64 = times.next()?.parse().ok()?;
            let end: f64 = times.next()?.parse().ok()?;
            Some(end - start)
        })
        .unwrap_or(0.0)
}

/// The first `calls N` line: hotprof's (single function) and the timing floor's call count.
pub fn first_calls_line(output: &str) -> Option<u64> {
    output.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        (fields.next()? == "calls").then_some(())?;
        fields.next()?.parse().ok()
    })
}

/// The order in which round `round_index` (from 0) runs `count` variants, as indices: row
/// `round_index` of a Williams design (a Latin square balanced for neighbours). Over
/// [`order_cycle`] rounds every variant runs in every position, and right after every other
/// variant, equally often, so neither going first (cold caches) nor following a costly variant
/// (bpftrace's exit) favours one; a fixed order (A B C, A B C, …) gives the same variant the
/// same neighbour and position every round, an order effect the median cannot remove.
pub fn round_order(round_index: u32, count: usize) -> Vec<usize> {
    if count == 0 {
        return Vec::new();
    }
    // 0, 1, n−1, 2, n−2, …: for an even n the steps between neighbours are all distinct
    // mod n, so its n shifts put every variant right after every other exactly once.
    let zigzag = (0..count).map(|j| {
        if j % 2 == 1 {
            j.div_ceil(2)
        } else {
            (count - j / 2) % count
        }
    });
    let round = round_index as usize % order_cycle(count);
    let shift = round % count;
    let row: Vec<usize> = zigzag.map(|v| (v + shift) % count).collect();
    // For an odd n each step appears twice and its opposite never: the n mirrored rows
    // that follow supply the opposites.
    if round >= count {
        row.into_iter().rev().collect()
    } else {
        row
    }
}

/// Rounds after which [`round_order`] repeats: every position and every ordered pair of
/// neighbours equally often.
pub fn order_cycle(count: usize) -> usize {
    if count.is_multiple_of(2) {
        count
    } else {
        2 * count
    }
}

/// `items` in the order of round `round_index` (from 0): see [`round_order`].
pub fn in_round_order<T>(items: &[T], round_index: u32) -> impl Iterator<Item = &T> {
    round_order(round_index, items.len())
        .into_iter()
        .map(move |index| &items[index])
}

/// Median and range of some measurements.
/// Waits for `pid` and returns its wait status and its resource usage: the peak RSS of that
/// process (and of the children it waited for), unlike `getrusage(RUSAGE_CHILDREN)`, which is
/// the maximum over every child ever waited for.
pub fn wait4(pid: u32) -> Result<(i32, libc::rusage)> {
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for a child of ours.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers to locals; pid is our child, not yet reaped.
        let rc = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) };
        if rc == pid as i32 {
            return Ok((status, usage));
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err).context("wait4");
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Option<Self> {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        if n == 0 {
            return None;
        }
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some(Self {
            median,
            min: sorted[0],
            max: sorted[n - 1],
        })
    }

    /// `123.4 (120.1–130.0)`.
    pub fn show(&self) -> String {
        format!("{:.1} ({:.1}–{:.1})", self.median, self.min, self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_runs_every_variant_once() {
        for count in 0..=8 {
            for round in 0..3 * order_cycle(count) as u32 {
                let mut order = round_order(round, count);
                order.sort_unstable();
                assert_eq!(order, (0..count).collect::<Vec<_>>(), "{count} variants");
            }
        }
    }

    #[test]
    fn a_full_cycle_balances_positions_and_neighbours() {
        for count in 1..=8 {
            let cycle = order_cycle(count);
            let orders: Vec<Vec<usize>> =
                (0..cycle as u32).map(|r| round_order(r, count)).collect();
            // Positions: already over every `count` rounds, so the default 5 rounds of 5
            // variants are balanced too.
            for window in [&orders[..count], &orders[..]] {
                let mut at = vec![vec![0; count]; count];
                for order in window {
                    for (position, &variant) in order.iter().enumerate() {
                        at[variant][position] += 1;
                    }
                }
                let each = window.len() / count;
                assert!(at.iter().flatten().all(|&n| n == each), "{count}: {at:?}");
            }
            // Neighbours: every variant right after every other equally often.
            let mut after = vec![vec![0; count]; count];
            for order in &orders {
                for pair in order.windows(2) {
                    after[pair[0]][pair[1]] += 1;
                }
            }
            for (first, row) in after.iter().enumerate() {
                for (second, &n) in row.iter().enumerate() {
                    let want = if first == second { 0 } else { cycle / count };
                    assert_eq!(n, want, "{count}: {second} after {first}");
                }
            }
        }
    }

    #[test]
    fn two_variants_alternate_which_goes_first() {
        let runs: String = (0..4)
            .flat_map(|round| in_round_order(&['a', 'b'], round))
            .collect();
        assert_eq!(runs, "abbaabba");
        assert_eq!(
            round_order(5, 4),
            round_order(1, 4),
            "repeats after a cycle"
        );
    }

    #[test]
    fn median_and_range() {
        let spread = Spread::of(&[5.0, 1.0, 3.0, 4.0]).expect("non-empty");
        assert_eq!(
            spread,
            Spread {
                median: 3.5,
                min: 1.0,
                max: 5.0
            }
        );
        assert_eq!(Spread::of(&[2.0, 9.0, 1.0]).map(|s| s.median), Some(2.0));
        assert!(Spread::of(&[]).is_none());
    }

    #[test]
    fn counts_from_hotprof() {
        let hotprof = "getpid\n  calls 100000   total 184 ms   min 1.39 µs\n";
        assert_eq!(first_calls_line(hotprof), Some(100_000));
    }

    #[test]
    fn reads_syscall_lat_avg() {
        let text =
            "noise\nsyscall_lat: calls=10 threads=1 avg_ns=981.6 total_ns=9816 wall_ns=1 pid=3\n";
        assert_eq!(syscall_lat_avg_ns(text), Some(981.6));
        assert_eq!(syscall_lat_avg_ns("syscall_lat: calls=10"), None);
    }

    #[test]
    fn ldd_lines_give_paths() {
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x1)\n\t/lib64/ld-linux-x86-64.so.2 (0x2)\n";
        assert_eq!(
            ldd_paths(ldd),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libz.so.1"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }
}
