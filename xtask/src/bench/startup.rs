//! Start-up: how long after being started each tool has its probes attached and the workload
//! running, on the host's real CPU. The workload is `date +%s%N`: the first thing it does is
//! read the clock, so its output minus the moment the tool was spawned is the start-up.
//! Tools: hotprof `--syscall getpid` (calibrating, which a recording now does after its
//! workload, and with `--no-calibrate`), and bpftrace with the same per-call histogram.
//! Goal (issue 16): hotprof ≤ 0.5× bpftrace's start-up.

use std::fmt::Write as _;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use super::{Spread, Tools, in_round_order};

const GOAL_VS_BPFTRACE: f64 = 0.5;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Tool {
    Hotprof,
    HotprofNoCalibrate,
    Bpftrace,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Hotprof => "hotprof --syscall getpid",
            Tool::HotprofNoCalibrate => "hotprof --syscall getpid --no-calibrate",
            Tool::Bpftrace => "bpftrace (sys_enter/exit_getpid, @start[tid] + hist())",
        }
    }

    fn command(self, tools: &Tools) -> Command {
        let hotprof = tools.bin_dir.join("hotprof");
        match self {
            Tool::Hotprof | Tool::HotprofNoCalibrate => {
                let mut command = Command::new(hotprof);
                command.args(["--syscall", "getpid"]);
                if self == Tool::HotprofNoCalibrate {
                    command.arg("--no-calibrate");
                }
                command.args(["--", "date", "+%s%N"]);
                command
            }
            Tool::Bpftrace => {
                let mut command = Command::new(super::BPFTRACE);
                command.args([
                    "-e",
                    "tracepoint:syscalls:sys_enter_getpid /pid == cpid/ { @start[tid] = nsecs; } \
                     tracepoint:syscalls:sys_exit_getpid /@start[tid]/ \
                     { @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }",
                    "-c",
                    "/usr/bin/date +%s%N",
                ]);
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

/// Milliseconds from spawning `tool` to its workload reading the clock.
fn startup_ms(tool: Tool, tools: &Tools) -> Result<f64> {
    let mut command = tool.command(tools);
    let spawned = unix_ns();
    let output = command
        .output()
        .with_context(|| format!("could not run {}", tool.name()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "{} failed ({}): {}",
            tool.name(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let started = workload_clock_ns(&text)
        .with_context(|| format!("{}: no clock reading in its output: {text}", tool.name()))?;
    Ok(started.saturating_sub(spawned) as f64 / 1e6)
}

/// The section: start-up per tool, median (min–max) over `rounds` interleaved rounds.
pub fn run(tools: &Tools, rounds: u32) -> Result<String> {
    let all = [Tool::Hotprof, Tool::HotprofNoCalibrate, Tool::Bpftrace];
    let mut samples: std::collections::BTreeMap<Tool, Vec<f64>> = Default::default();
    for round in 0..rounds {
        for &tool in in_round_order(&all, round) {
            let ms = startup_ms(tool, tools)?;
            eprintln!(
                "[bench] start-up round {} {}: {ms:.1} ms",
                round + 1,
                tool.name()
            );
            samples.entry(tool).or_default().push(ms);
        }
    }
    let spread = |tool: Tool| Spread::of(&samples[&tool]);
    let mut out = format!(
        "## Start-up (host, real CPU)\n\nFrom spawning the tool to its workload (`date +%s%N`) \
         reading the clock: probes loaded and attached, workload started. {rounds} rounds, \
         interleaved; median (min–max), ms.\n\n| tool | start-up ms |\n|---|---|\n"
    );
    for tool in all {
        let shown = spread(tool).map_or("—".into(), |s| s.show());
        let _ = writeln!(out, "| {} | {shown} |", tool.name());
    }
    if let (Some(hotprof), Some(bpftrace)) = (spread(Tool::Hotprof), spread(Tool::Bpftrace)) {
        let ratio = hotprof.median / bpftrace.median;
        let verdict = if ratio <= GOAL_VS_BPFTRACE {
            "met"
        } else {
            "not met"
        };
        let _ = writeln!(
            out,
            "\n- hotprof / bpftrace: **{ratio:.2}×** (goal ≤ {GOAL_VS_BPFTRACE}×: {verdict})"
        );
    }
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
    }
}
