//! Probe cost: `syscall_lat` under no probe, an empty probe pair of the same mechanism, the
//! timing floor (the least work any per-call latency histogram does, same mechanism), hotprof,
//! and bpftrace keeping the same histogram (a per-tid start map and `hist()`, like
//! funclatency), interleaved round by round in a counterbalanced order ([`in_round_order`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};

use super::{
    GUEST_UPTIME, Spread, Tools, empty_probe, first_calls_line, in_round_order, order_cycle,
    run_secs, syscall_lat_avg_ns, vm_run,
};
use crate::peer_output::bpftrace_hist_total;
use crate::peers::SID_BPFTRACE;
use crate::util::step;

/// getpid calls per host run: about a second each on a ~1 µs syscall.
const HOST_CALLS: u64 = 1_000_000;
/// getpid calls per guest run: TCG runs getpid about 5–10× slower than the host.
const VM_CALLS: u64 = 100_000;

/// One probe mechanism and how each variant uses it.
struct Mechanism {
    key: &'static str,
    title: &'static str,
    /// `empty_probe` mode and target.
    empty_mode: &'static str,
    empty_target: &'static str,
    empty_name: &'static str,
    hotprof_args: &'static str,
    /// bpftrace's entry and return probes.
    bpftrace_entry: String,
    bpftrace_return: String,
    /// hotprof's goal for its overhead over the empty pair's (issue #4; host: #16).
    goal_vs_empty: Option<f64>,
    /// Syscall tracepoints: also the raw-tracepoint variants (`raw_syscalls:sys_enter`/
    /// `sys_exit`, which hotprof's auto mode picks) and hotprof forced onto the perf ones.
    raw_syscalls: bool,
    calls: u64,
    emulated: bool,
}

impl Mechanism {
    fn host_tracepoint() -> Self {
        Self {
            key: "tracepoint",
            title: "syscall tracepoints, host (real CPU)",
            empty_mode: "tracepoint",
            empty_target: "getpid",
            empty_name: "empty sys_enter+sys_exit pair",
            hotprof_args: "--syscall getpid",
            bpftrace_entry: "tracepoint:syscalls:sys_enter_getpid".into(),
            bpftrace_return: "tracepoint:syscalls:sys_exit_getpid".into(),
            // Issue #16: hotprof (on whichever mechanism it picks) within the empty perf pair.
            goal_vs_empty: Some(1.0),
            raw_syscalls: true,
            calls: HOST_CALLS,
            emulated: false,
        }
    }

    /// kprobe on getpid's syscall entry point, as hotprof's own getpid scenarios use.
    fn vm_kprobe() -> Self {
        let function = "__x64_sys_getpid";
        Self {
            key: "kprobe",
            title: "kprobe + kretprobe on `__x64_sys_getpid`, 6.12 guest (TCG: ratios only)",
            empty_mode: "kprobe",
            empty_target: function,
            empty_name: "empty kprobe+kretprobe pair",
            hotprof_args: "--fn __x64_sys_getpid --mode kprobe",
            bpftrace_entry: format!("kprobe:{function}"),
            bpftrace_return: format!("kretprobe:{function}"),
            goal_vs_empty: Some(1.5),
            raw_syscalls: false,
            calls: VM_CALLS,
            emulated: true,
        }
    }

    /// fentry cannot attach to `__x64_sys_getpid` on Debian kernels (not in ftrace's list);
    /// `__do_sys_getpid`, which every getpid calls once, it can.
    fn vm_fentry() -> Self {
        let function = "__do_sys_getpid";
        Self {
            key: "fentry",
            title: "fentry + fexit on `__do_sys_getpid`, 6.12 guest (TCG: ratios only)",
            empty_mode: "fentry",
            empty_target: function,
            empty_name: "empty fentry+fexit pair",
            hotprof_args: "--fn __do_sys_getpid --mode fentry",
            bpftrace_entry: format!("kfunc:{function}"),
            bpftrace_return: format!("kretfunc:{function}"),
            goal_vs_empty: Some(2.5),
            raw_syscalls: false,
            calls: VM_CALLS,
            emulated: true,
        }
    }

    /// The shell command of one variant (PATH holds syscall_lat, hotprof, empty_probe).
    fn command(&self, variant: Variant) -> String {
        let workload = format!("syscall_lat {}", self.calls);
        match variant {
            Variant::None => workload,
            Variant::Empty | Variant::Floor => empty_probe(
                variant == Variant::Floor,
                self.empty_mode,
                self.empty_target,
                &workload,
            ),
            Variant::EmptyRaw => format!("empty_probe raw {GETPID_NR} -- {workload}"),
            Variant::FloorRaw => format!("empty_probe --timed raw {GETPID_NR} -- {workload}"),
            Variant::HotprofTracepoint => format!(
                "hotprof {} --syscall-mode tracepoint --no-calibrate -- {workload}",
                self.hotprof_args
            ),
            // --no-calibrate: the calibration runs before the workload and only costs time.
            Variant::Hotprof => {
                format!("hotprof {} --no-calibrate -- {workload}", self.hotprof_args)
            }
            Variant::HotprofBaseline => format!(
                "hotprof_baseline {} --no-calibrate -- {workload}",
                self.hotprof_args
            ),
            Variant::Bpftrace | Variant::SidBpftrace => format!(
                "{} -e '{} /pid == cpid/ {{ @start[tid] = nsecs; }} \
                 {} /@start[tid]/ {{ @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }}' \
                 -c \"$(command -v syscall_lat) {}\"",
                if variant == Variant::Bpftrace {
                    "bpftrace"
                } else {
                    SID_BPFTRACE
                },
                self.bpftrace_entry,
                self.bpftrace_return,
                self.calls
            ),
        }
    }

    /// ns/call of one run, after checking the probe really counted every call.
    fn sample(&self, variant: Variant, output: &str) -> Result<f64, String> {
        let avg = syscall_lat_avg_ns(output).ok_or("no syscall_lat line")?;
        let counted = match variant {
            Variant::None | Variant::Empty | Variant::EmptyRaw => return Ok(avg),
            // The floor prints `calls N` like hotprof's report line.
            Variant::Hotprof
            | Variant::HotprofTracepoint
            | Variant::HotprofBaseline
            | Variant::Floor
            | Variant::FloorRaw => first_calls_line(output),
            Variant::Bpftrace | Variant::SidBpftrace => bpftrace_hist_total(output),
        };
        match counted {
            Some(count) if count == self.calls => Ok(avg),
            // The floor has no filter: it also times other tasks' calls (the host's daemons).
            Some(count)
                if matches!(variant, Variant::Floor | Variant::FloorRaw) && count > self.calls =>
            {
                Ok(avg)
            }
            Some(count) => Err(format!("counted {count} calls, not {}", self.calls)),
            None => Err(format!(
                "no call count in its output: {}",
                last_line(output)
            )),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Variant {
    None,
    Empty,
    /// The timing floor: per-task start time + one histogram bucket (`empty_probe --timed`).
    Floor,
    Hotprof,
    /// The host's bpftrace (bookworm's 0.17 on the development machines): history.
    Bpftrace,
    /// Debian sid's bpftrace (0.27), the same program: the newest peer.
    SidBpftrace,
    /// The empty pair on the raw tracepoints `raw_syscalls:sys_enter`/`sys_exit` (every
    /// syscall runs it).
    EmptyRaw,
    /// The timing floor on the raw tracepoints: the getpid number check first.
    FloorRaw,
    /// hotprof forced onto the perf tracepoints (`--syscall-mode tracepoint`).
    HotprofTracepoint,
    /// Another hotprof build (`--baseline-hotprof`), e.g. before an optimization.
    HotprofBaseline,
}

/// getpid's x86-64 syscall number, which the raw variants look for.
const GETPID_NR: u32 = 39;

/// The variants, in the order of the report's rows (each round runs them in its own order).
fn variants(baseline: bool, raw_syscalls: bool) -> Vec<Variant> {
    let mut variants = vec![
        Variant::None,
        Variant::Empty,
        Variant::Floor,
        Variant::Hotprof,
        Variant::SidBpftrace,
        Variant::Bpftrace,
    ];
    if raw_syscalls {
        variants.extend([
            Variant::EmptyRaw,
            Variant::FloorRaw,
            Variant::HotprofTracepoint,
        ]);
    }
    if baseline {
        variants.push(Variant::HotprofBaseline);
    }
    variants
}

impl Variant {
    fn key(self) -> &'static str {
        match self {
            Variant::None => "none",
            Variant::Empty => "empty",
            Variant::Floor => "floor",
            Variant::Hotprof => "hotprof",
            Variant::Bpftrace => "bpftrace",
            Variant::SidBpftrace => "sidbpftrace",
            Variant::HotprofBaseline => "hotprof-baseline",
            Variant::EmptyRaw => "empty-raw",
            Variant::FloorRaw => "floor-raw",
            Variant::HotprofTracepoint => "hotprof-tracepoint",
        }
    }
}

/// Per variant, one result per round.
type Samples = BTreeMap<Variant, Vec<Result<f64, String>>>;

/// Host: syscall tracepoints, the only kernel probes the host kernel allows.
pub fn host(tools: &Tools, rounds: u32) -> Result<String> {
    let mechanism = Mechanism::host_tracepoint();
    let variants = variants(tools.baseline_hotprof.is_some(), mechanism.raw_syscalls);
    let sid_bin = tools
        .sid_host_bin
        .as_ref()
        .context("the host section runs on an x86_64 host, with sid's peers")?;
    let path = format!(
        "{}:{}:{}:{}:{}",
        tools.bin_dir.display(),
        tools.bin_dir.join("examples").display(),
        Tools::baseline_dir().display(),
        sid_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut samples = Samples::new();
    for round in 1..=rounds {
        for &variant in in_round_order(&variants, round - 1) {
            let command = mechanism.command(variant);
            let output = Command::new("sh")
                .args(["-c", &command])
                .env("PATH", &path)
                .output()
                .with_context(|| format!("could not run {command}"))?;
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            let sample = if output.status.success() {
                mechanism.sample(variant, &text)
            } else {
                Err(format!(
                    "exited with {}: {}",
                    output.status,
                    last_line(&text)
                ))
            };
            eprintln!("[bench] host round {round} {}: {sample:?}", variant.key());
            samples.entry(variant).or_default().push(sample);
        }
    }
    let mut markdown = render(&mechanism, rounds, &samples, &variants);
    markdown.push_str(&host_tax(&path, rounds)?);
    Ok(markdown)
}

/// fstat calls per run of the other-syscall tax.
const TAX_CALLS: u64 = 1_000_000;

/// What every *other* syscall pays while getpid is traced: `stat_loop` (fstat, never
/// traced) under no probe, each mechanism's empty pair, and hotprof in each mode. The raw
/// tracepoints run for every syscall; the perf ones send every syscall through the kernel's
/// syscall-tracing slow path once any syscall tracepoint is enabled.
fn host_tax(path: &str, rounds: u32) -> Result<String> {
    let workload = format!("stat_loop {TAX_CALLS} /");
    let variants: [(&str, String); 5] = [
        ("no probe", workload.clone()),
        (
            "empty sys_enter_getpid+sys_exit_getpid pair",
            format!("empty_probe tracepoint getpid -- {workload}"),
        ),
        (
            "empty raw_syscalls sys_enter+sys_exit pair",
            format!("empty_probe raw {GETPID_NR} -- {workload}"),
        ),
        (
            "hotprof --syscall getpid (auto)",
            format!("hotprof --syscall getpid --no-calibrate -- {workload}"),
        ),
        (
            "hotprof --syscall getpid --syscall-mode tracepoint",
            format!(
                "hotprof --syscall getpid --syscall-mode tracepoint --no-calibrate -- {workload}"
            ),
        ),
    ];
    let mut samples: Vec<Vec<Option<f64>>> = vec![Vec::new(); variants.len()];
    let indices: Vec<usize> = (0..variants.len()).collect();
    for round in 1..=rounds {
        for &index in in_round_order(&indices, round - 1) {
            let command = &variants[index].1;
            let output = Command::new("sh")
                .args(["-c", command])
                .env("PATH", path)
                .output()
                .with_context(|| format!("could not run {command}"))?;
            let text = String::from_utf8_lossy(&output.stdout);
            let avg = output
                .status
                .success()
                .then(|| stat_loop_avg_ns(&text))
                .flatten();
            eprintln!(
                "[bench] host tax round {round} {}: {avg:?}",
                variants[index].0
            );
            samples[index].push(avg);
        }
    }
    let mut out = format!(
        "### The tax on every other syscall\n\n`{workload}` (fstat, never traced) while getpid \
         is traced; {rounds} rounds interleaved as above; median (min–max); tax = ns/fstat − \
         no probe's, paired per round. The raw pair runs for every syscall of the system; the \
         perf pair sends every syscall through the kernel's syscall-tracing slow path.\n\n\
         | variant | ns/fstat | tax ns/call |\n|---|---|---|\n"
    );
    for (index, (name, _)) in variants.iter().enumerate() {
        let values: Vec<f64> = samples[index].iter().flatten().copied().collect();
        let tax: Vec<f64> = samples[index]
            .iter()
            .zip(&samples[0])
            .filter_map(|(probed, base)| Some((*probed)? - (*base)?))
            .collect();
        let ns = Spread::of(&values).map_or("—".into(), |s| s.show());
        let tax = if index == 0 {
            "—".into()
        } else {
            Spread::of(&tax).map_or("—".into(), |s| s.show())
        };
        let _ = writeln!(out, "| {name} | {ns} | {tax} |");
    }
    out.push('\n');
    Ok(out)
}

/// `avg_ns` of `stat_loop`'s result line.
fn stat_loop_avg_ns(output: &str) -> Option<f64> {
    output
        .lines()
        .filter_map(|line| line.strip_prefix("stat_loop: "))
        .flat_map(str::split_whitespace)
        .find_map(|field| field.strip_prefix("avg_ns="))
        .and_then(|value| value.parse().ok())
}

/// 6.12 guest: kprobe and fentry, each variant interleaved with the others.
pub fn vm(tools: &Tools, rounds: u32) -> Result<String> {
    let variants = variants(tools.baseline_hotprof.is_some(), false);
    let mechanisms = [Mechanism::vm_kprobe(), Mechanism::vm_fentry()];
    let mut script = format!("set +e\nup() {{ {GUEST_UPTIME}; }}\n");
    for round in 1..=rounds {
        // The two mechanisms alternate which goes first too (ABBA).
        for mechanism in in_round_order(&mechanisms, round - 1) {
            for &variant in in_round_order(&variants, round - 1) {
                let file = format!("/out/{}-{}-{round}.txt", mechanism.key, variant.key());
                // Each run's wall time too (tool start-up included), for the section's time line.
                let _ = writeln!(
                    script,
                    "t=$(up); {} > {file} 2>&1; echo \"bench-exit=$?\" >> {file}; \
                     echo \"bench-secs=$t $(up)\" >> {file}",
                    mechanism.command(variant)
                );
            }
        }
    }
    let per_round = Duration::from_secs(120);
    let outcome = vm_run(
        tools,
        "probe-cost",
        &script,
        per_round * rounds + Duration::from_secs(120),
    )?;
    let mut markdown = String::new();
    let mut wall_by_variant: BTreeMap<&str, f64> = BTreeMap::new();
    for mechanism in &mechanisms {
        let mut samples = Samples::new();
        for round in 1..=rounds {
            for &variant in &variants {
                let path = outcome.out_dir.join(format!(
                    "{}-{}-{round}.txt",
                    mechanism.key,
                    variant.key()
                ));
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                *wall_by_variant.entry(variant.key()).or_default() += run_secs(&text);
                let sample = match text
                    .lines()
                    .rev()
                    .find_map(|l| l.strip_prefix("bench-exit="))
                {
                    Some("0") => mechanism.sample(variant, &text),
                    Some(code) => Err(format!("exited {code}: {}", last_line(&text))),
                    None => Err(format!("no output file {}", path.display())),
                };
                samples.entry(variant).or_default().push(sample);
            }
        }
        markdown.push_str(&render(mechanism, rounds, &samples, &variants));
    }
    let spent: Vec<String> = wall_by_variant
        .iter()
        .map(|(variant, secs)| format!("{variant} {secs:.0} s"))
        .collect();
    step(
        "bench",
        &format!(
            "probe-cost runs' wall time in the guest, by variant: {}",
            spent.join(", ")
        ),
    );
    Ok(markdown)
}

/// The section's markdown: ns/call and overhead per variant, then hotprof's ratios.
fn render(mechanism: &Mechanism, rounds: u32, samples: &Samples, variants: &[Variant]) -> String {
    let baseline = &samples[&Variant::None];
    // Overheads are paired per round (the runs of one round ran back to back).
    let overheads = |variant: Variant| -> Vec<f64> {
        samples[&variant]
            .iter()
            .zip(baseline)
            .filter_map(|(probed, base)| Some(probed.as_ref().ok()? - base.as_ref().ok()?))
            .collect()
    };
    let mut out = format!(
        "## Probe cost: {}\n\n`syscall_lat {}` per run; {rounds} rounds, variants interleaved \
         in an order that changes every round (balanced over every {} rounds); median (min–max) \
         over rounds; overhead = ns/call − no probe's, paired per round.\n\n\
         | variant | ns/call | overhead ns/call | failed runs |\n|---|---|---|---|\n",
        mechanism.title,
        mechanism.calls,
        order_cycle(variants.len())
    );
    for &variant in variants {
        let name = match variant {
            Variant::None => "no probe".to_owned(),
            Variant::Empty => mechanism.empty_name.to_owned(),
            Variant::Floor => {
                "timing floor (task-storage start + 1 bucket, same mechanism)".to_owned()
            }
            Variant::Hotprof => format!("hotprof {}", mechanism.hotprof_args),
            Variant::Bpftrace => "bpftrace, the host's (history)".to_owned(),
            Variant::SidBpftrace => "bpftrace, sid's (@start[tid] + hist())".to_owned(),
            Variant::HotprofBaseline => {
                format!("baseline hotprof build {}", mechanism.hotprof_args)
            }
            Variant::EmptyRaw => {
                "empty raw_syscalls sys_enter+sys_exit pair (every syscall)".into()
            }
            Variant::FloorRaw => {
                "timing floor, raw tracepoints (getpid's number checked first)".to_owned()
            }
            Variant::HotprofTracepoint => format!(
                "hotprof {} --syscall-mode tracepoint",
                mechanism.hotprof_args
            ),
        };
        let values: Vec<f64> = samples[&variant]
            .iter()
            .filter_map(|s| s.as_ref().ok().copied())
            .collect();
        let failures: Vec<&String> = samples[&variant]
            .iter()
            .filter_map(|s| s.as_ref().err())
            .collect();
        let ns = Spread::of(&values).map_or("—".into(), |s| s.show());
        let overhead = if variant == Variant::None {
            "—".into()
        } else {
            Spread::of(&overheads(variant)).map_or("—".into(), |s| s.show())
        };
        let failed = match failures.first() {
            None => "0".to_owned(),
            Some(first) => format!("{}: {first}", failures.len()),
        };
        let _ = writeln!(out, "| {name} | {ns} | {overhead} | {failed} |");
    }
    let median = |variant| Spread::of(&overheads(variant)).map(|s| s.median);
    let ratio_of = |of: Variant, other: Option<f64>, goal: Option<f64>, what: &str| -> String {
        let who = match of {
            Variant::Hotprof => "hotprof",
            Variant::HotprofTracepoint => "hotprof --syscall-mode tracepoint",
            Variant::FloorRaw => "raw timing floor",
            Variant::EmptyRaw => "empty raw pair",
            _ => "timing floor",
        };
        match (median(of), other) {
            (Some(h), Some(o)) if o > 0.0 => {
                let value = h / o;
                let verdict = goal.map_or(String::new(), |goal| {
                    format!(
                        " (goal ≤ {goal}×: {})",
                        if value <= goal { "met" } else { "not met" }
                    )
                });
                format!("- {who} / {what}: **{value:.2}×**{verdict}\n")
            }
            _ => format!("- {who} / {what}: not measured\n"),
        }
    };
    let ratio = |other, goal, what: &str| ratio_of(Variant::Hotprof, other, goal, what);
    out.push('\n');
    out.push_str(&ratio(
        median(Variant::Empty),
        mechanism.goal_vs_empty,
        mechanism.empty_name,
    ));
    out.push_str(&ratio(
        median(Variant::SidBpftrace),
        Some(0.5),
        "sid's bpftrace",
    ));
    out.push_str(&ratio(
        median(Variant::Bpftrace),
        None,
        "the host's bpftrace (history)",
    ));
    out.push_str(&ratio(median(Variant::Floor), None, "timing floor"));
    // What any tool that times each call pays over the empty pair: if this alone exceeds the
    // goal, the goal cannot hold for hotprof on this machine either.
    out.push_str(&ratio_of(
        Variant::Floor,
        median(Variant::Empty),
        mechanism.goal_vs_empty,
        mechanism.empty_name,
    ));
    if mechanism.raw_syscalls {
        // The same goal for hotprof held to the perf tracepoints, and the raw floor's share.
        let forced =
            |other, goal, what: &str| ratio_of(Variant::HotprofTracepoint, other, goal, what);
        out.push_str(&forced(
            median(Variant::Empty),
            mechanism.goal_vs_empty,
            mechanism.empty_name,
        ));
        out.push_str(&forced(
            median(Variant::SidBpftrace),
            Some(0.5),
            "sid's bpftrace",
        ));
        out.push_str(&ratio_of(
            Variant::FloorRaw,
            median(Variant::Empty),
            mechanism.goal_vs_empty,
            mechanism.empty_name,
        ));
        out.push_str(&ratio_of(
            Variant::EmptyRaw,
            median(Variant::Empty),
            None,
            mechanism.empty_name,
        ));
        out.push_str(
            "\nFor a run limited to a command (as here) hotprof's `--syscall` picks the raw \
             tracepoints (its report's `mode`: `raw_syscall`; system-wide it picks the perf ones, \
             whose tax on every other syscall is lower: below); `--syscall-mode tracepoint|raw` \
             forces either.\n",
        );
    }
    if variants.contains(&Variant::HotprofBaseline) {
        out.push_str(&ratio(
            median(Variant::HotprofBaseline),
            None,
            "baseline hotprof build",
        ));
    }
    if mechanism.emulated {
        out.push_str(
            "\nTCG emulation: absolute ns are emulation time; only the ratios mean anything.\n",
        );
    }
    out.push('\n');
    out
}

fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|line| !line.trim().is_empty() && !line.starts_with("bench-exit="))
        .unwrap_or("(no output)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tax_reads_stat_loop_s_average_and_raw_variants_only_run_on_the_host() {
        let output = "stat_loop: calls=1000000 avg_ns=431.7 total_ns=431700000 pid=7\n";
        assert_eq!(stat_loop_avg_ns(output), Some(431.7));
        assert_eq!(stat_loop_avg_ns("syscall_lat: calls=1 avg_ns=2.0"), None);
        let host = Mechanism::host_tracepoint();
        assert!(variants(false, host.raw_syscalls).contains(&Variant::FloorRaw));
        assert!(!variants(false, Mechanism::vm_kprobe().raw_syscalls).contains(&Variant::EmptyRaw));
        assert_eq!(
            host.command(Variant::FloorRaw),
            "empty_probe --timed raw 39 -- syscall_lat 1000000"
        );
        assert_eq!(
            host.command(Variant::HotprofTracepoint),
            "hotprof --syscall getpid --syscall-mode tracepoint --no-calibrate -- syscall_lat 1000000"
        );
    }
}
