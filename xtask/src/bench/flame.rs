//! Bench section: time and peak memory to draw a flame graph from 1M folded lines, hotprof's
//! `hotprof flamegraph` (inferno as a library, after hotprof's own validation and merge)
//! against inferno's own `inferno-flamegraph` binary, same inferno version, same input.
//!
//! The input is generated deterministically ([`generate`]): kernel-like stacks (a process
//! name, a syscall or interrupt entry path, then frames drawn from a tree of ~6000
//! kernel-style function names so that stacks share prefixes the way real ones do), depth
//! 5–40 with most between 8 and 20, weights spread over six orders of magnitude, nearly every
//! line a distinct stack. It is cached in `target/bench/flame/` and regenerated only when the
//! generator changes ([`INPUT_NAME`]).
//!
//! Each tool runs 3 times, interleaved and taking turns to go first (hotprof inferno, inferno
//! hotprof, hotprof inferno: [`super::round_order`]) so load from other jobs and whatever the
//! previous run left in the caches hit both alike; wall time is the median, peak memory the
//! largest `ru_maxrss` of the child (from `wait4`, per process, not the cumulative
//! `RUSAGE_CHILDREN`). Exec records the forked image's high-water mark (ours) in the child's
//! `ru_maxrss`, so ours is reset to our current RSS before each spawn (`clear_refs`), a few MB
//! against the hundreds a row shows. One-time costs (`cargo install` of inferno, generating the input:
//! [`prepare`], run beside the guest build) are outside the timed part and skipped when
//! already done.

use std::fs;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use crate::util::{step, target_dir, workspace_root};

/// Lines in the generated input.
const LINES: usize = 1_000_000;
/// Runs per tool; the table shows the median.
const ROUNDS: usize = 3;
/// Changing the generator must change this name, so a stale cached input is not reused.
const INPUT_NAME: &str = "kernel-stacks-1m-v1.folded";

/// What the section needs before it can measure: made once, then reused.
pub struct FlameInputs {
    version: String,
    inferno: PathBuf,
    input: PathBuf,
    stats: InputStats,
}

/// The one-time work, safe to run beside the guest build: inferno's binary (installed at the
/// version hotprof links) and the generated input.
pub fn prepare() -> Result<FlameInputs> {
    let dir = flame_dir();
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let version = inferno_version_in_lock()?;
    let inferno = install_inferno(&version)?;
    let input = dir.join(INPUT_NAME);
    let stats_file = input.with_extension("stats");
    let cached = fs::read_to_string(&stats_file)
        .ok()
        .and_then(|text| InputStats::parse(&text));
    let stats = match cached {
        Some(stats) if input.exists() => {
            step("bench", &format!("flame: reusing {}", input.display()));
            stats
        }
        _ => {
            step("bench", &format!("flame: generating {}", input.display()));
            let stats = generate(&input, LINES)?;
            fs::write(&stats_file, stats.to_text())
                .with_context(|| format!("cannot write {}", stats_file.display()))?;
            stats
        }
    };
    Ok(FlameInputs {
        version,
        inferno,
        input,
        stats,
    })
}

fn flame_dir() -> PathBuf {
    target_dir().join("bench").join("flame")
}

/// Runs the comparison and returns its markdown section. hotprof is the static release build
/// the guests run (the same code as a host release build, linked statically).
pub fn run(inputs: &FlameInputs, tools: &super::Tools) -> Result<String> {
    let FlameInputs {
        version,
        inferno,
        input,
        stats,
    } = inputs;
    let dir = flame_dir();
    let hotprof = tools.bin_dir.join("hotprof");
    ensure!(hotprof.is_file(), "{} is missing", hotprof.display());
    let hotprof_svg = dir.join("hotprof.svg");
    let tools = [
        Tool {
            label: format!("`hotprof flamegraph` (inferno {version} as a library)"),
            program: hotprof,
            args: vec![
                "flamegraph".into(),
                input.clone().into(),
                "-o".into(),
                hotprof_svg.clone().into(),
            ],
            svg: hotprof_svg,
            svg_on_stdout: false,
        },
        Tool {
            label: format!("`inferno-flamegraph` {version}"),
            program: inferno.clone(),
            args: vec![input.clone().into()],
            svg: dir.join("inferno.svg"),
            svg_on_stdout: true,
        },
    ];
    let mut measured: Vec<Vec<Measurement>> = vec![Vec::new(); tools.len()];
    let started = Instant::now();
    for round in 1..=ROUNDS {
        for index in super::round_order(round as u32 - 1, tools.len()) {
            let tool = &tools[index];
            let m = measure(tool)?;
            println!(
                "  round {round}: {}: {:.2} s, peak RSS {}",
                tool.label,
                m.wall.as_secs_f64(),
                mib(m.max_rss_kb)
            );
            measured[index].push(m);
        }
    }
    println!(
        "  flame: {} runs in {:.1} s",
        ROUNDS * tools.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(section(stats, &tools, &measured))
}

struct Tool {
    label: String,
    program: PathBuf,
    args: Vec<std::ffi::OsString>,
    /// Where the SVG ends up (checked after every run, so a failure is not timed as fast).
    svg: PathBuf,
    /// inferno-flamegraph writes the SVG to stdout.
    svg_on_stdout: bool,
}

#[derive(Clone, Copy, Debug)]
struct Measurement {
    wall: Duration,
    max_rss_kb: u64,
}

/// Runs `tool` once: wall time from spawn to exit, and its own peak RSS.
fn measure(tool: &Tool) -> Result<Measurement> {
    let _ = fs::remove_file(&tool.svg);
    let mut cmd = Command::new(&tool.program);
    cmd.args(&tool.args);
    if tool.svg_on_stdout {
        cmd.stdout(fs::File::create(&tool.svg)?);
    } else {
        cmd.stdout(Stdio::null());
    }
    cmd.stderr(Stdio::piped());
    // Linux 4.0+: `5` resets this process's peak RSS to its current RSS (proc(5)).
    fs::write("/proc/self/clear_refs", "5").context("could not reset our peak RSS")?;
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", tool.label))?;
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stderr) = stderr {
            let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        }
        text
    });
    let (status, usage) = super::wait4(child.id())?;
    let wall = started.elapsed();
    let stderr = reader.join().unwrap_or_default();
    ensure!(
        status == 0,
        "{} failed (wait status {status}): {}",
        tool.label,
        stderr.trim()
    );
    let svg = fs::read(&tool.svg).with_context(|| format!("{} wrote no SVG", tool.label))?;
    ensure!(
        svg.len() > 1000 && svg.windows(6).rev().take(64).any(|w| w == b"</svg>"),
        "{} wrote an incomplete SVG ({} bytes)",
        tool.label,
        svg.len()
    );
    Ok(Measurement {
        wall,
        // Linux reports ru_maxrss in KiB.
        max_rss_kb: usage.ru_maxrss as u64,
    })
}

/// The inferno version hotprof links (from Cargo.lock), so both sides render alike.
fn inferno_version_in_lock() -> Result<String> {
    let lock = fs::read_to_string(workspace_root().join("Cargo.lock")).context("Cargo.lock")?;
    version_in_lock(&lock, "inferno").context("Cargo.lock has no inferno package")
}

fn version_in_lock(lock: &str, package: &str) -> Option<String> {
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == format!("name = \"{package}\"") {
            let version = lines.next()?.trim().strip_prefix("version = \"")?;
            return Some(version.trim_end_matches('"').to_owned());
        }
    }
    None
}

/// `cargo install inferno` at `version` into target/bench/tools, unless it is already there.
fn install_inferno(version: &str) -> Result<PathBuf> {
    let root = target_dir().join("bench").join("tools");
    let binary = root.join("bin").join("inferno-flamegraph");
    // inferno-flamegraph has no --version; cargo install records what it installed.
    let record = fs::read_to_string(root.join(".crates.toml")).unwrap_or_default();
    if binary.exists() && record.contains(&format!("\"inferno {version} ")) {
        return Ok(binary);
    }
    fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
    // Its output goes to a log: it runs beside the guest build, whose output is the one to see.
    let log_path = root.join("install.log");
    step(
        "bench",
        &format!(
            "flame: installing inferno {version} into {} (log: {})",
            root.display(),
            log_path.display()
        ),
    );
    let log = fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let status = Command::new("cargo")
        .args(["install", "--locked", "--version", &format!("={version}")])
        .arg("inferno")
        .arg("--root")
        .arg(&root)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .status()
        .context("could not start cargo install")?;
    ensure!(
        status.success(),
        "cargo install inferno {version} failed ({status}); see {}",
        log_path.display()
    );
    ensure!(
        binary.exists(),
        "{} missing after install",
        binary.display()
    );
    Ok(binary)
}

/// What the generated input holds.
#[derive(Debug, Clone, PartialEq)]
pub struct InputStats {
    pub lines: usize,
    pub distinct: usize,
    pub bytes: u64,
    pub min_depth: usize,
    pub max_depth: usize,
    pub mean_depth: f64,
}

impl InputStats {
    /// `key=value` lines, cached next to the input so a rerun does not read 300 MB again.
    fn to_text(&self) -> String {
        format!(
            "lines={}\ndistinct={}\nbytes={}\nmin_depth={}\nmax_depth={}\nmean_depth={}\n",
            self.lines, self.distinct, self.bytes, self.min_depth, self.max_depth, self.mean_depth
        )
    }

    fn parse(text: &str) -> Option<Self> {
        let get = |key: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
        };
        Some(Self {
            lines: get("lines")?.parse().ok()?,
            distinct: get("distinct")?.parse().ok()?,
            bytes: get("bytes")?.parse().ok()?,
            min_depth: get("min_depth")?.parse().ok()?,
            max_depth: get("max_depth")?.parse().ok()?,
            mean_depth: get("mean_depth")?.parse().ok()?,
        })
    }

    fn of(path: &Path) -> Result<Self> {
        let data = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        Ok(Self::from_bytes(&data))
    }

    fn from_bytes(data: &[u8]) -> Self {
        let mut stacks = std::collections::HashSet::new();
        let (mut min_depth, mut max_depth, mut depth_sum) = (usize::MAX, 0, 0);
        let mut lines = 0;
        for line in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let stack = line.rsplitn(2, |&b| b == b' ').nth(1).unwrap_or(line);
            // Frames after the process name.
            let depth = stack.iter().filter(|&&b| b == b';').count();
            min_depth = min_depth.min(depth);
            max_depth = max_depth.max(depth);
            depth_sum += depth;
            lines += 1;
            stacks.insert(stack);
        }
        Self {
            lines,
            distinct: stacks.len(),
            bytes: data.len() as u64,
            min_depth: if lines == 0 { 0 } else { min_depth },
            max_depth,
            mean_depth: depth_sum as f64 / lines.max(1) as f64,
        }
    }
}

/// SplitMix64: a tiny deterministic generator (the input must be the same on every machine).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const COMMS: &[&str] = &[
    "postgres",
    "nginx",
    "java",
    "python3",
    "node",
    "redis-server",
    "mysqld",
    "sshd",
    "systemd",
    "journald",
    "containerd",
    "dockerd",
    "kubelet",
    "etcd",
    "envoy",
    "haproxy",
    "memcached",
    "rsyslogd",
    "chronyd",
    "dd",
    "fio",
    "tar",
    "gzip",
    "rsync",
    "git",
    "cc1",
    "ld",
    "rustc",
    "cargo",
    "make",
    "bash",
    "sh",
    "grep",
    "find",
    "du",
    "cat",
    "kworker/0:1",
    "kworker/1:2",
    "kworker/u8:3",
    "ksoftirqd/0",
    "ksoftirqd/1",
    "jbd2/vda1-8",
    "kswapd0",
    "rcu_preempt",
    "migration/0",
    "swapper/0",
    "swapper/1",
    "irq/24-virtio0",
    "khugepaged",
    "kcompactd0",
];

const SYSCALLS: &[&str] = &[
    "read",
    "write",
    "pread64",
    "pwrite64",
    "readv",
    "writev",
    "openat",
    "close",
    "newfstatat",
    "statx",
    "getdents64",
    "lseek",
    "mmap",
    "munmap",
    "mprotect",
    "brk",
    "futex",
    "epoll_wait",
    "epoll_ctl",
    "poll",
    "ppoll",
    "select",
    "sendto",
    "recvfrom",
    "sendmsg",
    "recvmsg",
    "accept4",
    "connect",
    "fsync",
    "fdatasync",
    "io_uring_enter",
    "clone3",
    "execve",
    "exit_group",
    "wait4",
    "nanosleep",
    "clock_nanosleep",
    "ioctl",
    "fcntl",
    "getpid",
];

const SUBSYSTEMS: &[&str] = &[
    "ext4", "btrfs", "xfs", "tcp", "udp", "ip", "sock", "vfs", "mm", "page", "filemap", "shmem",
    "sched", "irq", "blk", "nvme", "scsi", "futex", "ep", "pipe", "seq", "kmem", "slab", "rcu",
    "audit", "security", "selinux", "bpf", "perf", "hrtimer", "tick", "wq", "kthread", "dma",
    "virtio", "net", "napi", "skb", "iomap", "wb", "folio", "lru",
];

const VERBS: &[&str] = &[
    "read", "write", "alloc", "free", "lookup", "get", "put", "submit", "complete", "wait", "wake",
    "queue", "flush", "map", "unmap", "copy", "init", "update", "handle", "process", "rcv", "xmit",
    "charge", "account", "insert", "remove", "find", "fault", "release",
];

const SUFFIXES: &[&str] = &[
    "",
    "",
    "",
    "",
    "_iter",
    "_pages",
    "_folio",
    "_locked",
    "_one",
    "_slowpath",
    ".isra.0",
    ".constprop.0",
    "_common",
    "_range",
];

/// ~6000 kernel-style names: `[__|do_]subsystem_verb[suffix]`.
fn vocabulary() -> Vec<String> {
    let mut names = Vec::new();
    for (s, subsystem) in SUBSYSTEMS.iter().enumerate() {
        for (v, verb) in VERBS.iter().enumerate() {
            for prefix in ["", "__", "do_"] {
                let suffix = SUFFIXES[(s * 7 + v * 3 + prefix.len()) % SUFFIXES.len()];
                names.push(format!("{prefix}{subsystem}_{verb}{suffix}"));
            }
            // A second spelling for some, as real subsystems have (`..._fast`, `..._nolock`).
            if (s + v) % 3 == 0 {
                names.push(format!("{subsystem}_{verb}_nolock"));
            }
        }
    }
    names
}

/// Writes `lines` folded stacks to `path`; returns what it wrote.
pub fn generate(path: &Path, lines: usize) -> Result<InputStats> {
    let tmp = path.with_extension("tmp");
    let file =
        fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut stats = InputStats {
        lines: 0,
        distinct: 0,
        bytes: 0,
        min_depth: usize::MAX,
        max_depth: 0,
        mean_depth: 0.0,
    };
    let mut depth_sum = 0;
    let mut line = Vec::with_capacity(2048);
    let mut rng = SplitMix(0x5eed_f1a3_e000_0001);
    let words = vocabulary();
    for _ in 0..lines {
        line.clear();
        let depth = generate_stack(&mut rng, &words, &mut line);
        let weight = 1 + rng.next() % 1000 * (1 + rng.next() % 1000);
        line.push(b' ');
        line.extend_from_slice(weight.to_string().as_bytes());
        line.push(b'\n');
        out.write_all(&line)?;
        stats.lines += 1;
        stats.bytes += line.len() as u64;
        stats.min_depth = stats.min_depth.min(depth);
        stats.max_depth = stats.max_depth.max(depth);
        depth_sum += depth;
    }
    out.flush()?;
    drop(out);
    fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    stats.mean_depth = depth_sum as f64 / lines.max(1) as f64;
    // Distinct stacks need the whole file; count them once (also a check of the file).
    stats.distinct = InputStats::of(path)?.distinct;
    Ok(stats)
}

/// One stack, root first: `comm;entry…;frames…`, kernel frames with perf's `_[k]`. Returns
/// its depth in frames (the process name not counted).
fn generate_stack(rng: &mut SplitMix, words: &[String], line: &mut Vec<u8>) -> usize {
    // Depth 5..=40, skewed low like real kernel stacks: 5 + 35·x·y for x, y uniform in [0, 1].
    let depth = 5 + rng.below(36) * rng.below(36) / 35;
    line.extend_from_slice(COMMS[rng.below(COMMS.len())].as_bytes());
    let mut frames = 0;
    let push = |line: &mut Vec<u8>, frames: &mut usize, name: &str| {
        line.push(b';');
        line.extend_from_slice(name.as_bytes());
        line.extend_from_slice(b"_[k]");
        *frames += 1;
    };
    let mut node = if rng.below(8) == 0 {
        for frame in [
            "asm_common_interrupt",
            "common_interrupt",
            "__common_interrupt",
        ] {
            push(line, &mut frames, frame);
        }
        rng.below(words.len())
    } else {
        let syscall = rng.below(SYSCALLS.len());
        push(line, &mut frames, "entry_SYSCALL_64_after_hwframe");
        push(line, &mut frames, "do_syscall_64");
        push(
            line,
            &mut frames,
            &format!("__x64_sys_{}", SYSCALLS[syscall]),
        );
        syscall * 131
    };
    // Walk a fixed random tree: each node has 3 children, picked by a hash of the node, so
    // the same path prefix recurs across lines and the graph has real towers.
    while frames < depth {
        let child = rng.below(3) as u64;
        let hashed = (node as u64 ^ (child << 32))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(17);
        node = (hashed % words.len() as u64) as usize;
        push(line, &mut frames, &words[node]);
    }
    frames
}

fn mib(kb: u64) -> String {
    format!("{:.0} MiB", kb as f64 / 1024.0)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn section(stats: &InputStats, tools: &[Tool], measured: &[Vec<Measurement>]) -> String {
    let mut out = String::new();
    out.push_str("## Flamegraph rendering: 1M folded lines\n\n");
    out.push_str(&format!(
        "Input: {} lines, {} distinct stacks, depth {}–{} frames (mean {:.1}), {:.0} MB; \
         generated deterministically by `xtask/src/bench/flame.rs` (kernel-style frames).\n\n",
        stats.lines,
        stats.distinct,
        stats.min_depth,
        stats.max_depth,
        stats.mean_depth,
        stats.bytes as f64 / 1e6
    ));
    out.push_str(&format!(
        "| tool | wall time (median of {ROUNDS}) | range | peak RSS |\n|---|---|---|---|\n"
    ));
    for (tool, results) in tools.iter().zip(measured) {
        let walls: Vec<Duration> = results.iter().map(|m| m.wall).collect();
        let (lo, hi) = (
            walls.iter().min().copied().unwrap_or_default(),
            walls.iter().max().copied().unwrap_or_default(),
        );
        let rss = results.iter().map(|m| m.max_rss_kb).max().unwrap_or(0);
        out.push_str(&format!(
            "| {} | {:.2} s | {:.2}–{:.2} s | {} |\n",
            tool.label,
            median(walls).as_secs_f64(),
            lo.as_secs_f64(),
            hi.as_secs_f64(),
            mib(rss)
        ));
    }
    if let [hotprof, inferno] = measured {
        out.push('\n');
        out.push_str(&verdict(hotprof, inferno));
    }
    out.push_str(&format!("\n{}\n", machine_note()));
    out
}

/// hotprof's time and peak memory against inferno's own binary (issue #33: at least as fast,
/// no more memory).
const GOAL_VS_INFERNO: f64 = 1.0;

/// The verdict line: median wall time and largest peak RSS, hotprof over inferno.
fn verdict(hotprof: &[Measurement], inferno: &[Measurement]) -> String {
    let wall = |runs: &[Measurement]| median(runs.iter().map(|m| m.wall).collect()).as_secs_f64();
    let rss = |runs: &[Measurement]| runs.iter().map(|m| m.max_rss_kb).max().unwrap_or(0) as f64;
    let judge = |ratio: f64| {
        format!(
            "**{ratio:.3}×** (goal ≤ {GOAL_VS_INFERNO}×: {})",
            if ratio <= GOAL_VS_INFERNO {
                "met"
            } else {
                "not met"
            }
        )
    };
    format!(
        "- hotprof / inferno-flamegraph: wall time {}, peak RSS {}\n",
        judge(wall(hotprof) / wall(inferno)),
        judge(rss(hotprof) / rss(inferno))
    )
}

/// One line on where this ran: cores, kernel, and that the machine may be shared.
fn machine_note() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into());
    let load = fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into());
    format!(
        "Machine: {cores} cores, kernel {kernel}, load average {load} at the end (other jobs \
         share the machine); release builds; runs interleaved, each tool first in turn, peak \
         RSS is each process's own `ru_maxrss` (wait4)."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_deterministic_and_kernel_like() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let stats = generate(&a, 20_000).expect("generate");
        generate(&b, 20_000).expect("generate");
        assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap());
        assert_eq!(stats.lines, 20_000);
        assert!(stats.min_depth >= 5 && stats.max_depth <= 40, "{stats:?}");
        assert!(stats.max_depth >= 35, "deep stacks too: {stats:?}");
        assert!(
            stats.distinct > 19_000,
            "nearly every line distinct: {stats:?}"
        );
        assert!((8.0..20.0).contains(&stats.mean_depth), "{stats:?}");
        let text = fs::read_to_string(&a).unwrap();
        // Valid for hotprof's own parser, frames kernel-suffixed.
        let first = text.lines().next().unwrap();
        assert!(first.contains("_[k];"), "{first}");
        assert!(first.rsplit_once(' ').unwrap().1.parse::<u64>().is_ok());
        assert_eq!(InputStats::parse(&stats.to_text()), Some(stats));
        assert_eq!(InputStats::parse("lines=1\n"), None);
    }

    #[test]
    fn versions_are_read_from_the_lock_file() {
        let lock = "[[package]]\nname = \"inferno\"\nversion = \"0.12.8\"\n";
        assert_eq!(version_in_lock(lock, "inferno").as_deref(), Some("0.12.8"));
        assert_eq!(version_in_lock(lock, "other"), None);
    }

    #[test]
    fn the_verdict_compares_medians_and_peaks() {
        let run = |ms, kb| Measurement {
            wall: Duration::from_millis(ms),
            max_rss_kb: kb,
        };
        let hotprof = [run(900, 100), run(3000, 99), run(950, 98)];
        let inferno = [run(1000, 100), run(1000, 100), run(1000, 100)];
        assert_eq!(
            verdict(&hotprof, &inferno),
            "- hotprof / inferno-flamegraph: wall time **0.950×** (goal ≤ 1×: met), peak RSS \
             **1.000×** (goal ≤ 1×: met)\n"
        );
        let inferno = [run(900, 99), run(900, 99), run(900, 99)];
        assert!(
            verdict(&hotprof, &inferno).matches("not met").count() == 2,
            "{}",
            verdict(&hotprof, &inferno)
        );
    }

    #[test]
    fn the_median_is_the_middle_run() {
        let s = Duration::from_secs;
        assert_eq!(median(vec![s(3), s(1), s(2)]), s(2));
    }
}
