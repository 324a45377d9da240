//! Start-up: how long after being started each tool has its probes attached and the workload
//! running, on the host's real CPU. The workload is `date +%s%N`: the first thing it does is
//! read the clock, so its output minus the moment the tool was spawned is the start-up.
//! Tools: hotprof `--syscall getpid` (calibrating, which a recording now does after its
//! workload, and with `--no-calibrate`), and bpftrace with the same per-call histogram:
//! Debian sid's (0.27.1, the newest; run from the peers' layer through sid's loader, as in the
//! guests) and the host's (bookworm's 0.17, history). Each run's peak RSS too: the tool's
//! `VmHWM`, read by its workload from `/proc/$PPID/status` (a `wait4` `ru_maxrss` would hold
//! this process's own peak: exec records the forked image's high-water mark in the child's
//! rusage). libbpf-tools' funclatency times
//! kernel functions only, which this host does not let it attach to (no kprobes, fentry
//! blocked): the section says what it answered.
//! Goal (issues 16, 36): hotprof ≤ 0.5× the newest bpftrace's start-up.

use std::fmt::Write as _;
use std::fs;
use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use super::{Spread, Tools, in_round_order};
use crate::peers;
use crate::util::target_dir;

const GOAL_VS_BPFTRACE: f64 = 0.5;

/// The workload's script: the clock first, then the tool's (its parent's) peak RSS.
/// bpftrace's `-c` splits its command at spaces and wants an ELF file: `/bin/sh FILE`.
const WORKLOAD_SCRIPT: &str = "date +%s%N\ngrep VmHWM /proc/$PPID/status\n";

/// The same histogram as hotprof's, in bpftrace.
const BPFTRACE_PROGRAM: &str = "tracepoint:syscalls:sys_enter_getpid /pid == cpid/ \
    { @start[tid] = nsecs; } tracepoint:syscalls:sys_exit_getpid /@start[tid]/ \
    { @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }";

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Tool {
    Hotprof,
    HotprofNoCalibrate,
    SidBpftrace,
    Bpftrace,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Hotprof => "hotprof --syscall getpid",
            Tool::HotprofNoCalibrate => "hotprof --syscall getpid --no-calibrate",
            Tool::SidBpftrace => "bpftrace, sid's (sys_enter/exit_getpid, @start[tid] + hist())",
            Tool::Bpftrace => "bpftrace, the host's (history)",
        }
    }

    fn command(self, tools: &Tools, sid_bin: &Path, script: &Path) -> Command {
        let workload = ["/bin/sh".into(), script.display().to_string()];
        let hotprof = tools.bin_dir.join("hotprof");
        match self {
            Tool::Hotprof | Tool::HotprofNoCalibrate => {
                let mut command = Command::new(hotprof);
                command.args(["--syscall", "getpid"]);
                if self == Tool::HotprofNoCalibrate {
                    command.arg("--no-calibrate");
                }
                command.arg("--").args(&workload);
                command
            }
            Tool::SidBpftrace | Tool::Bpftrace => {
                let mut command = if self == Tool::Bpftrace {
                    Command::new(super::BPFTRACE)
                } else {
                    Command::new(sid_bin.join(peers::SID_BPFTRACE))
                };
                command.args(["-e", BPFTRACE_PROGRAM, "-c", &workload.join(" ")]);
                command
            }
        }
    }
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The first line of `output` that is a whole number: `date +%s%N`'s clock reading.
fn workload_clock_ns(output: &str) -> Option<u128> {
    output.lines().find_map(|line| line.trim().parse().ok())
}

/// `VmHWM:    12345 kB` in the workload's output.
fn peak_rss_kb(output: &str) -> Option<u64> {
    output.lines().find_map(|line| {
        let rest = line.strip_prefix("VmHWM:")?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// One run: milliseconds from spawning the tool to its workload reading the clock, and the
/// run's peak RSS in MB.
struct Run {
    startup_ms: f64,
    peak_rss_mb: f64,
}

fn run_once(tool: Tool, tools: &Tools, sid_bin: &Path, script: &Path) -> Result<Run> {
    let mut command = tool.command(tools, sid_bin, script);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let spawned = unix_ns();
    let mut child = command
        .spawn()
        .with_context(|| format!("could not run {}", tool.name()))?;
    let stderr = child.stderr.take();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stderr) = stderr {
            let _ = stderr.read_to_string(&mut text);
        }
        text
    });
    let mut text = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_string(&mut text)?;
    }
    let status = child.wait()?;
    let stderr = stderr.join().unwrap_or_default();
    if !status.success() {
        bail!("{} failed ({status}): {}", tool.name(), stderr.trim());
    }
    let started = workload_clock_ns(&text)
        .with_context(|| format!("{}: no clock reading in its output: {text}", tool.name()))?;
    let peak_kb = peak_rss_kb(&text)
        .with_context(|| format!("{}: no VmHWM line in its output: {text}", tool.name()))?;
    Ok(Run {
        startup_ms: started.saturating_sub(spawned) as f64 / 1e6,
        peak_rss_mb: peak_kb as f64 / 1024.0,
    })
}

/// What funclatency answers here, for the section's note: its last line of output.
fn funclatency_attempt(sid_bin: &Path) -> Result<String> {
    let output = Command::new(sid_bin.join(peers::SID_FUNCLATENCY))
        .args(["-d", "1", "__x64_sys_getpid"])
        .output()
        .context("could not run funclatency")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Ok(format!("{}: `{}`", output.status, last.trim()))
}

/// The section: start-up and peak RSS per tool, median (min–max) over `rounds` interleaved
/// rounds.
pub fn run(tools: &Tools, rounds: u32) -> Result<String> {
    let sid_bin = tools
        .sid_host_bin
        .clone()
        .context("the start-up section runs on an x86_64 host, with sid's peers")?;
    let script = target_dir().join("bench").join("startup-workload.sh");
    fs::write(&script, WORKLOAD_SCRIPT)
        .with_context(|| format!("could not write {}", script.display()))?;
    let all = [
        Tool::Hotprof,
        Tool::HotprofNoCalibrate,
        Tool::SidBpftrace,
        Tool::Bpftrace,
    ];
    let mut startup: std::collections::BTreeMap<Tool, Vec<f64>> = Default::default();
    let mut rss: std::collections::BTreeMap<Tool, Vec<f64>> = Default::default();
    for round in 0..rounds {
        for &tool in in_round_order(&all, round) {
            let run = run_once(tool, tools, &sid_bin, &script)?;
            eprintln!(
                "[bench] start-up round {} {}: {:.1} ms, peak RSS {:.1} MB",
                round + 1,
                tool.name(),
                run.startup_ms,
                run.peak_rss_mb
            );
            startup.entry(tool).or_default().push(run.startup_ms);
            rss.entry(tool).or_default().push(run.peak_rss_mb);
        }
    }
    let spread = |samples: &std::collections::BTreeMap<Tool, Vec<f64>>, tool: Tool| {
        samples.get(&tool).and_then(|values| Spread::of(values))
    };
    let mut out = format!(
        "## Start-up and memory (host, real CPU)\n\nFrom spawning the tool to its workload \
         (`date +%s%N`) reading the clock: probes loaded and attached, workload started; and \
         the tool's peak RSS by then (its `VmHWM`, read by the workload). \
         {rounds} rounds, interleaved; median (min–max). Peers: {}.\n\n\
         | tool | start-up ms | peak RSS MB (at the workload's start) |\n|---|---|---|\n",
        tools.bpftrace
    );
    for tool in all {
        let show = |samples| spread(samples, tool).map_or("—".into(), |s: Spread| s.show());
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            tool.name(),
            show(&startup),
            show(&rss)
        );
    }
    out.push('\n');
    for (label, samples) in [("start-up", &startup), ("peak RSS", &rss)] {
        if let (Some(hotprof), Some(bpftrace)) = (
            spread(samples, Tool::Hotprof),
            spread(samples, Tool::SidBpftrace),
        ) {
            let ratio = hotprof.median / bpftrace.median;
            let verdict = if label == "peak RSS" {
                String::new()
            } else if ratio <= GOAL_VS_BPFTRACE {
                format!(" (goal ≤ {GOAL_VS_BPFTRACE}×: met)")
            } else {
                format!(" (goal ≤ {GOAL_VS_BPFTRACE}×: not met)")
            };
            let _ = writeln!(
                out,
                "- hotprof / sid's bpftrace, {label}: **{ratio:.2}×**{verdict}"
            );
        }
    }
    let _ = writeln!(
        out,
        "- funclatency (sid's) times kernel functions only; asked for `__x64_sys_getpid` for \
         one second on this host it answered {}",
        funclatency_attempt(&sid_bin)?
    );
    out.push('\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_workloads_clock_among_the_tools_lines() {
        let output = "Attaching 2 probes...\n1764590000123456789\n\n@ns:\n";
        assert_eq!(workload_clock_ns(output), Some(1_764_590_000_123_456_789));
        assert_eq!(workload_clock_ns("hotprof: 1 syscall(s) attached\n"), None);
        assert_eq!(
            peak_rss_kb("1764590000123456789\nVmHWM:\t   18236 kB\n"),
            Some(18_236)
        );
    }
}
