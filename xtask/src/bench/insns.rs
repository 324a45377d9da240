//! Instructions per getpid call, counted by a QEMU TCG plugin, and where they go.
//!
//! TCG time swings by tens of percent from run to run; the number of guest instructions a call
//! executes does not. `xtask/qemu-plugin/insn_count.c` (built here with the system `cc`)
//! counts the instructions the guest executes between two marker instructions, which
//! `syscall_lat --marker` executes right before and after its loop, on the vCPU that executed
//! the first marker (the workload is pinned to CPU 1, the tool to CPU 0). It also counts them
//! per translated block start address; with the guest's kallsyms saved while the probes were
//! attached (BPF JIT images are `bpf_prog_<tag>_<name>`, trampolines `bpf_trampoline_<id>`),
//! those become instructions per kernel symbol, and the difference from the unprobed run says
//! where a probe's instructions go.
//!
//! All runs of a guest share one boot (one KASLR layout, so one kallsyms for the kernel's
//! text); the i-th window of the plugin's report belongs to the i-th run whose `syscall_lat`
//! finished. Two guests (`mechanisms.rs`' suites): 6.12 for every mechanism it has, 7.x for
//! fsession against the fentry/fexit pairs.

mod mechanisms;
mod parse;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use self::mechanisms::{Mechanism, SUITES, Suite, Variant};
use self::parse::{
    Added, Category, SymbolTable, Window, added_per_call, bpf_program_entries, by_category,
    insns_by_symbol, parse_plugin_report,
};
use super::{GUEST_UPTIME, Tools, run_secs, vm_run_with};
use crate::arch::Arch;
use crate::util::{secs, step, target_dir, workspace_root};
use crate::vm::Accel;

/// getpid calls per run. The count is exact, so more calls would not sharpen it; the
/// per-call figure only has to drown the few instructions around the markers and the
/// occasional timer interrupt (a few thousand instructions, < 0.1 per call at this size).
const CALLS: u64 = 100_000;

/// `--stacks-every N` in its variant: the sampled stacks' cost against the goal of ≤ 2× plain.
const STACKS_EVERY: u32 = 8;

/// hotprof against funclatency, a hand-written C tool doing the same histogram (issue #36).
const FUNCLATENCY_GOAL: f64 = 1.0;
/// hotprof against the cheapest of the newest peers that timed every call (issue #36).
const BEST_PEER_GOAL: f64 = 0.5;
/// The peers the goals are against: Debian sid's, run in the same guest.
const NEWEST_PEERS: [Variant; 3] = [
    Variant::SidBpftrace,
    Variant::Funclatency,
    Variant::PerfFtrace,
];

/// Rows of each attribution table.
const TOP_SYMBOLS: usize = 15;

/// The workload, as every variant runs it: save the probes' kallsyms lines while they are
/// attached, then (same pid, for bpftrace's `cpid`) syscall_lat on CPU 1 with the markers.
/// The tools themselves run on CPU 0 (`taskset 1`), so their own work stays out of the count.
const MARKED_WORKLOAD: &str = "/tmp/marked";

/// What call-site mode would time on getpid's path; the guest says whether it can.
const CALLSITE_ATTEMPT: &str = "hotprof --fn __x64_sys_getpid --mode callsite --no-calibrate";

/// One run of the guest script.
#[derive(Clone)]
struct Run {
    /// File stem under /out.
    key: String,
    /// None: the unprobed run.
    probe: Option<(usize, Variant)>,
}

fn runs(mechanisms: &[Mechanism]) -> Vec<Run> {
    let mut runs = vec![Run {
        key: "bare".into(),
        probe: None,
    }];
    for (index, mechanism) in mechanisms.iter().enumerate() {
        for &variant in mechanism.variants {
            runs.push(Run {
                key: format!("{}-{}", mechanism.key, variant.key()),
                probe: Some((index, variant)),
            });
        }
    }
    // Determinism, checked once: the first mechanism's hotprof again, last, after every
    // other run has changed the guest's state.
    runs.push(Run {
        key: format!("{}-{}-again", mechanisms[0].key, Variant::Hotprof.key()),
        probe: Some((0, Variant::Hotprof)),
    });
    runs
}

/// What one run produced.
struct Measured {
    output: String,
    window: Option<Window>,
    /// Its instructions by symbol (kernel text + its own probes' symbols).
    by_symbol: BTreeMap<String, u64>,
    program_entries: u64,
    guest_secs: f64,
}

impl Measured {
    fn per_call(&self) -> Option<f64> {
        self.window.as_ref().map(|w| w.insns as f64 / CALLS as f64)
    }
}

/// The suites of the bench's architecture, each in a TCG boot of its own.
pub fn run(tools: &Tools) -> Result<String> {
    let plugin = build_plugin()?;
    let mut markdown = String::new();
    let suites = SUITES.iter().filter(|suite| suite.arch == tools.arch);
    for (index, suite) in suites.enumerate() {
        markdown.push_str(&run_suite(tools, &plugin, suite, index == 0)?);
    }
    Ok(markdown)
}

/// One guest's runs and their tables; `first` carries the section's introduction.
fn run_suite(tools: &Tools, plugin: &Path, suite: &Suite, first: bool) -> Result<String> {
    let started = Instant::now();
    let mechanisms = suite.mechanisms;
    let kernel = suite.kernel.name();
    let dir = target_dir().join("bench");
    let report_path = match suite.arch.subdir() {
        Some(arch) => dir.join(format!("insn-count-{arch}-{kernel}.txt")),
        None => dir.join(format!("insn-count-{kernel}.txt")),
    };
    let report_arg = report_path.to_string_lossy().into_owned();
    if report_arg.contains(',') || plugin.to_string_lossy().contains(',') {
        bail!("qemu's -plugin option cannot take a path with a comma: {report_arg}");
    }
    let _ = fs::remove_file(&report_path);
    let runs = runs(mechanisms);
    let script = guest_script(&runs, mechanisms, suite.arch);
    // Start-up of bpftrace and hotprof dominates under TCG (~10 s each); 40 s per run leaves
    // room for a slow one, and the boot.
    let timeout = Duration::from_secs(120 + 40 * runs.len() as u64);
    let plugin_arg = format!("{},out={report_arg}", plugin.display());
    let name = match (first, suite.arch.subdir()) {
        (true, None) => "insns".to_owned(),
        (false, None) => format!("insns-{kernel}"),
        (_, Some(arch)) => format!("insns-{arch}-{kernel}"),
    };
    let outcome = vm_run_with(tools, &name, &script, timeout, |run| {
        run.kernel = suite.kernel;
        // A plugin only sees TCG: under KVM it would count nothing.
        run.accel = Accel::Tcg;

        run.extra_qemu_args = vec!["-plugin".into(), plugin_arg];
    })?;
    let report_text = fs::read_to_string(&report_path).with_context(|| {
        format!(
            "the plugin wrote no report to {} (did qemu load it?)",
            report_path.display()
        )
    })?;
    let windows = parse_plugin_report(&report_text)?;
    let out = &outcome.out_dir;
    let kernel_symbols = gunzip(&out.join("kallsyms.gz"))?;
    let mut base_table = SymbolTable::default();
    base_table.add_kallsyms(&kernel_symbols)?;

    // Windows in order, one per run whose syscall_lat finished.
    let finished: Vec<bool> = runs
        .iter()
        .map(|run| {
            let output = read_or_empty(&out.join(format!("{}.txt", run.key)));
            output.lines().any(|line| line.starts_with("syscall_lat: "))
        })
        .collect();
    let expected = finished.iter().filter(|f| **f).count();
    if windows.len() != expected {
        bail!(
            "the plugin saw {} marker windows, but {expected} runs finished their loop: \
             markers missed (KVM instead of TCG? the workload migrated between CPUs?)",
            windows.len()
        );
    }
    if windows.is_empty() {
        bail!("no run finished its loop, and the plugin saw no markers");
    }
    let mut windows = windows.into_iter();
    let mut measured: BTreeMap<String, Measured> = BTreeMap::new();
    for (run, finished) in runs.iter().zip(&finished) {
        let output = read_or_empty(&out.join(format!("{}.txt", run.key)));
        let window = finished.then(|| windows.next()).flatten();
        let mut table = base_table.clone();
        let syms = read_or_empty(&out.join(format!("{}.syms", run.key)));
        table.add_kallsyms(&syms)?;
        let (by_symbol, program_entries) = match &window {
            Some(window) => (
                insns_by_symbol(window, &table),
                bpf_program_entries(window, &table),
            ),
            None => (BTreeMap::new(), 0),
        };
        measured.insert(
            run.key.clone(),
            Measured {
                guest_secs: run_secs(&output),
                output,
                window,
                by_symbol,
                program_entries,
            },
        );
    }
    let callsite = read_or_empty(&out.join("callsite.txt"));
    let notes = Notes {
        callsite: &callsite,
        bpftrace: &tools.bpftrace,
    };
    let markdown = render(
        suite,
        first,
        &runs,
        &measured,
        &notes,
        started.elapsed(),
        base_table.len(),
    );
    let slowest: Vec<String> = {
        let mut by_time: Vec<(&String, f64)> =
            measured.iter().map(|(k, m)| (k, m.guest_secs)).collect();
        by_time.sort_by(|a, b| b.1.total_cmp(&a.1));
        by_time
            .iter()
            .take(5)
            .map(|(k, s)| format!("{k} {s:.0} s"))
            .collect()
    };
    step(
        "bench",
        &format!(
            "insns ({kernel}): {} in all; slowest runs in the guest: {}",
            secs(started.elapsed()),
            slowest.join(", ")
        ),
    );
    Ok(markdown)
}

/// Compiles the plugin into `target/bench/insn_count.so` unless the copy of the source beside
/// it shows it was built from this very source.
fn build_plugin() -> Result<PathBuf> {
    let source = workspace_root()
        .join("xtask")
        .join("qemu-plugin")
        .join("insn_count.c");
    let dir = target_dir().join("bench");
    fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let plugin = dir.join("insn_count.so");
    let built_from = dir.join("insn_count.built-from.c");
    let text = fs::read(&source).with_context(|| format!("could not read {}", source.display()))?;
    if plugin.is_file() && fs::read(&built_from).is_ok_and(|old| old == text) {
        return Ok(plugin);
    }
    let output = Command::new("cc")
        .args([
            "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o",
        ])
        .arg(&plugin)
        .arg(&source)
        .output()
        .context("could not run cc (the system C compiler builds the QEMU plugin)")?;
    if !output.status.success() {
        bail!(
            "cc could not build {}:\n{}",
            source.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    fs::write(&built_from, &text)
        .with_context(|| format!("could not write {}", built_from.display()))?;
    step("bench", &format!("built {}", plugin.display()));
    Ok(plugin)
}

/// The guest script: the kernel's text symbols once, the call-site attempt (x86-64: its
/// getpid has no call site; arm64's is a mechanism of its own), then every run.
fn guest_script(runs: &[Run], mechanisms: &[Mechanism], arch: Arch) -> String {
    let callsite_attempt = match arch {
        Arch::X86_64 => format!(
            "{CALLSITE_ATTEMPT} -- true > /out/callsite.txt 2>&1; \
             echo \"bench-exit=$?\" >> /out/callsite.txt\n"
        ),
        Arch::Aarch64 => String::new(),
    };
    let mut script = format!(
        "set +e\nup() {{ {GUEST_UPTIME}; }}\nmkdir -p /tmp\n\
         cat > {MARKED_WORKLOAD} <<'EOF'\n#!/bin/sh\n\
         grep -F -e '[bpf]' -e '[__builtin__' /proc/kallsyms > \"$1\"\n\
         exec taskset 2 syscall_lat --marker {CALLS}\nEOF\n\
         chmod +x {MARKED_WORKLOAD}\n\
         grep ' [tT] ' /proc/kallsyms | gzip > /out/kallsyms.gz\n\
         {callsite_attempt}"
    );
    for run in runs {
        let syms = format!("/out/{}.syms", run.key);
        let command = match run.probe {
            None => format!("taskset 1 {MARKED_WORKLOAD} {syms}"),
            Some((mechanism, variant)) => variant.command(&mechanisms[mechanism], &syms),
        };
        let file = format!("/out/{}.txt", run.key);
        let _ = writeln!(
            script,
            "t=$(up); {command} > {file} 2>&1; echo \"bench-exit=$?\" >> {file}; \
             echo \"bench-secs=$t $(up)\" >> {file}"
        );
    }
    script
}

fn gunzip(path: &Path) -> Result<String> {
    let output = Command::new("gzip")
        .arg("-dc")
        .arg(path)
        .output()
        .with_context(|| format!("could not run gzip -dc {}", path.display()))?;
    if !output.status.success() {
        bail!(
            "gzip -dc {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    String::from_utf8(output.stdout).with_context(|| format!("{} is not text", path.display()))
}

fn read_or_empty(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

/// The markdown: per mechanism the instruction table and goals, the determinism check, then
/// where each variant's instructions go.
/// What the guest and the tools said beside the runs.
struct Notes<'a> {
    /// The x86-64 call-site attempt's output.
    callsite: &'a str,
    /// Which bpftrace ran.
    bpftrace: &'a str,
}

fn render(
    suite: &Suite,
    first: bool,
    runs: &[Run],
    measured: &BTreeMap<String, Measured>,
    notes: &Notes,
    took: Duration,
    kernel_symbols: usize,
) -> String {
    let bare = &measured["bare"];
    let bpftrace = notes.bpftrace;
    let mechanisms = suite.mechanisms;
    let kernel = suite.kernel.name();
    let mut out = if suite.arch == Arch::Aarch64 {
        format!(
            "## Instructions per call on arm64 {kernel} (QEMU TCG plugin)\n\n\
             Counted as in the x86-64 section (`cargo xtask bench --arch aarch64 --only insns`; \
             the marker is `hint #0x7e`), in one TCG boot of Debian's arm64 {kernel} on qemu's \
             `virt` board (`-cpu max`), workload on CPU 1, tools on CPU 0. bpftrace: {}. No \
             kprobe.session: Debian's arm64 {kernel} has no `CONFIG_FPROBE`.\n\n",
            bpftrace
        )
    } else if first {
        format!(
            "## Instructions per call (QEMU TCG plugin)\n\n\
         Guest instructions executed per getpid call on the workload's vCPU, counted by \
         `xtask/qemu-plugin/insn_count.c` between the marker instructions of \
         `syscall_lat --marker {CALLS}` ({kernel} guest, TCG, workload on CPU 1, tools on CPU 0), \
         user space and interrupts included. The guest boots with `audit=1` like every other \
         guest (for the audit workloads), so every syscall also runs audit's entry and exit \
         hooks (`syscall_trace_enter`, `__audit_syscall_entry`/`_exit`, \
         `audit_reset_context`: about 170 instructions, in the unprobed run too); the syscall \
         tracepoints' added figures are smaller by the part of `syscall_trace_enter` that \
         audit already pays. The count is deterministic, so one round \
         suffices (checked below by running one variant twice). Added = instructions per call \
         − the unprobed run's. \"program entries\" are the plugin's count of BPF program \
         and subprogram starts per call (at least 2 required), and the check also compares \
         the tool's own call count (hotprof, floor, bpftrace) with the calls made: both show \
         the probe really ran on every call. bpftrace: {bpftrace}.\n\n"
        )
    } else {
        format!(
            "## Instructions per call on {kernel}: {}\n\n\
             Counted as above, in one TCG boot of the {kernel} guest.\n\n",
            mechanisms
                .iter()
                .map(|m| m.key)
                .collect::<Vec<_>>()
                .join(" and ")
        )
    };
    let check = |key: &str, variant: Option<Variant>| -> String {
        let Some(run) = measured.get(key) else {
            return "not run".into();
        };
        let exit = run
            .output
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("bench-exit="));
        if exit != Some("0") {
            return format!(
                "failed (exit {}): {}",
                exit.unwrap_or("?"),
                why_failed(&run.output)
            );
        }
        if run.window.is_none() {
            return "no marker window".into();
        }
        let Some(variant) = variant else {
            return "ok".into();
        };
        let mechanism_key = key.split('-').next().unwrap_or_default();
        if let Some(want) = expected_mode(mechanism_key, variant)
            && hotprof_mode(&run.output) != Some(want)
        {
            return format!(
                "ran in {} mode, not {want}",
                hotprof_mode(&run.output).unwrap_or("no")
            );
        }
        // Two programs per call at least (entry + return), counted by the plugin.
        if variant.runs_programs() && run.program_entries < 2 * CALLS {
            return format!(
                "probe did not run: {} program entries for {CALLS} calls",
                run.program_entries
            );
        }
        let other_calls = mechanisms
            .iter()
            .find(|m| m.key == mechanism_key)
            .map_or(0, |m| m.other_calls);
        match variant.tool_count(&run.output) {
            None => "ok".into(),
            Some(None) => format!("no call count in its output: {}", last_line(&run.output)),
            // The floor, funclatency and perf ftrace have no pid filter and also time any
            // other task's getpid.
            Some(Some(count))
                if count >= CALLS && (count <= CALLS + other_calls || variant.system_wide()) =>
            {
                "ok".into()
            }
            Some(Some(count)) => format!("counted {count} calls, not {CALLS}"),
        }
    };
    let added = |key: &str| -> Option<f64> {
        let run = measured.get(key)?;
        if !check(key, None).starts_with("ok") {
            return None;
        }
        Some(run.per_call()? - bare.per_call()?)
    };
    let valid = |key: &str, variant: Variant| check(key, Some(variant)) == "ok";
    let _ = writeln!(
        out,
        "Unprobed: **{}** instructions per call ({}).\n",
        bare.per_call().map_or("—".into(), |v| format!("{v:.1}")),
        check("bare", None)
    );
    for mechanism in mechanisms {
        let _ = writeln!(
            out,
            "### {}\n\n| variant | insns/call | added/call | program entries/call | check |\n\
             |---|---|---|---|---|",
            mechanism.title
        );
        for &variant in mechanism.variants {
            let key = format!("{}-{}", mechanism.key, variant.key());
            let run = &measured[&key];
            // Which mechanism hotprof chose (`--syscall` has more than one).
            let title = match hotprof_mode(&run.output) {
                Some(mode) => format!("{} ({mode} mode)", variant.title(mechanism)),
                None => variant.title(mechanism),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.2} | {} |",
                title,
                run.per_call().map_or("—".into(), |v| format!("{v:.1}")),
                added(&key).map_or("—".into(), |v| format!("+{v:.1}")),
                run.program_entries as f64 / CALLS as f64,
                check(&key, Some(variant)),
            );
        }
        let of_in = |mechanism: &Mechanism, variant: Variant| {
            let key = format!("{}-{}", mechanism.key, variant.key());
            added(&key).filter(|_| valid(&key, variant))
        };
        let of = |variant: Variant| of_in(mechanism, variant);
        let has = |variant: Variant| mechanism.variants.contains(&variant);
        out.push('\n');
        if has(Variant::Floor) {
            out.push_str(&ratio_line(
                "hotprof / timing floor",
                of(Variant::Hotprof),
                of(Variant::Floor),
                1.10,
            ));
        }
        // The goals are against the newest peers (sid's); the host's bpftrace is history.
        if has(Variant::Bpftrace) {
            out.push_str(&ratio_line(
                "hotprof / the host's bpftrace (history)",
                of(Variant::Hotprof),
                of(Variant::Bpftrace),
                f64::NAN,
            ));
        }
        for (peer, goal, name) in [
            (
                Variant::SidBpftrace,
                mechanism.bpftrace_goal,
                "sid's bpftrace",
            ),
            (Variant::Funclatency, FUNCLATENCY_GOAL, "sid's funclatency"),
            (Variant::PerfFtrace, f64::NAN, "sid's perf ftrace latency"),
        ] {
            if has(peer) {
                out.push_str(&ratio_line(
                    &format!("hotprof / {name}"),
                    of(Variant::Hotprof),
                    of(peer),
                    goal,
                ));
                if !goal.is_nan() {
                    out.push_str(&reachable_line(of(Variant::Floor), of(peer), goal, name));
                }
            }
        }
        // The goal the peers share: below half of the cheapest one that timed every call.
        let best_peer = NEWEST_PEERS
            .into_iter()
            .filter(|&peer| has(peer))
            .filter_map(|peer| Some((of(peer)?, peer)))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((best, peer)) = best_peer {
            out.push_str(&ratio_line(
                &format!(
                    "hotprof / the cheapest newest peer ({})",
                    peer.title(mechanism)
                ),
                of(Variant::Hotprof),
                Some(best),
                BEST_PEER_GOAL,
            ));
            out.push_str(&reachable_line(
                of(Variant::Floor),
                Some(best),
                BEST_PEER_GOAL,
                "the cheapest peer's",
            ));
        }
        if has(Variant::HotprofStacks) {
            out.push_str(&ratio_line(
                "hotprof --stacks / hotprof",
                of(Variant::HotprofStacks),
                of(Variant::Hotprof),
                2.0,
            ));
        }
        if has(Variant::HotprofStacksEvery) {
            out.push_str(&ratio_line(
                &format!("hotprof --stacks-every {STACKS_EVERY} / hotprof"),
                of(Variant::HotprofStacksEvery),
                of(Variant::Hotprof),
                2.0,
            ));
        }
        if has(Variant::HotprofOffCpu) {
            out.push_str(&ratio_line(
                "hotprof --off-cpu / hotprof",
                of(Variant::HotprofOffCpu),
                of(Variant::Hotprof),
                f64::NAN,
            ));
        }
        if has(Variant::HotprofFrames) {
            out.push_str(&ratio_line(
                &format!("{} / hotprof", Variant::HotprofFrames.title(mechanism)),
                of(Variant::HotprofFrames),
                of(Variant::Hotprof),
                f64::NAN,
            ));
        }
        if let Some(other) = mechanism.against_hotprof_of {
            let other_hotprof = mechanisms
                .iter()
                .find(|m| m.key == other)
                .and_then(|other| of_in(other, Variant::Hotprof));
            out.push_str(&ratio_line(
                &format!("hotprof / hotprof in the {other} section (the same function)"),
                of(Variant::Hotprof),
                other_hotprof,
                f64::NAN,
            ));
        }
        if let Some((other, goal)) = mechanism.below_floor_of {
            let other_floor = mechanisms
                .iter()
                .find(|m| m.key == other)
                .and_then(|other| of_in(other, Variant::Floor));
            out.push_str(&ratio_line(
                &format!("hotprof / the {other} section's timing floor"),
                of(Variant::Hotprof),
                other_floor,
                goal,
            ));
            out.push_str(&reachable_line(
                of(Variant::Floor),
                other_floor,
                goal,
                &format!("the {other} section's"),
            ));
        }
        out.push('\n');
    }
    let callsite_line = last_line(notes.callsite);
    if first && suite.arch == Arch::X86_64 {
        let _ = writeln!(
            out,
            "### Call-site kprobes\n\nNot measurable on getpid's path: `{CALLSITE_ATTEMPT}` in the \
         guest says: `{callsite_line}` (`x64_sys_call` reaches `__x64_sys_getpid` by a tail \
         call, and its own caller `do_syscall_64` is notrace).\n"
        );
    }
    let twice = format!("{}-{}", mechanisms[0].key, Variant::Hotprof.key());
    let again = format!("{twice}-again");
    match (
        measured.get(&twice).and_then(|m| m.window.as_ref()),
        measured.get(&again).and_then(|m| m.window.as_ref()),
    ) {
        (Some(a), Some(b)) => {
            let diff = b.insns as f64 - a.insns as f64;
            let _ = writeln!(
                out,
                "Determinism: `{twice}` ran twice in the same boot, first and last: {} and {} \
                 instructions, a difference of {diff:+.0} ({:+.4} %, {:+.2} per call).\n",
                a.insns,
                b.insns,
                100.0 * diff / a.insns as f64,
                diff / CALLS as f64
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "Determinism: not checked (`{again}` did not finish).\n"
            );
        }
    }
    out.push_str(&attribution(mechanisms, runs, measured, kernel_symbols));
    out.push_str(&bare_table(bare));
    let _ = writeln!(
        out,
        "Section time: {} (one TCG boot with the plugin, {} runs).\n",
        secs(took),
        runs.len()
    );
    out
}

/// The mode a variant's hotprof must have run in for its row to mean what its title says.
fn expected_mode(mechanism_key: &str, variant: Variant) -> Option<&'static str> {
    match (mechanism_key, variant) {
        ("fentry" | "neighbour", Variant::Hotprof) => Some("fentry"),
        ("callsite", Variant::Hotprof) => Some("callsite"),
        ("fsession", Variant::Hotprof) => Some("fsession"),
        ("multi", Variant::Hotprof) => Some("fentry.multi"),
        ("session", Variant::Hotprof) => Some("kprobe.session"),
        ("session", Variant::HotprofFrames) => Some("kprobe.multi"),
        _ => None,
    }
}

/// `- what: **1.23×** (goal ≤ G×: met)`; a NaN goal prints the ratio alone.
fn ratio_line(what: &str, numerator: Option<f64>, denominator: Option<f64>, goal: f64) -> String {
    match (numerator, denominator) {
        (Some(n), Some(d)) if d > 0.0 => {
            let value = n / d;
            let verdict = if goal.is_nan() {
                String::new()
            } else {
                format!(
                    " (goal ≤ {goal:.2}×: {})",
                    if value <= goal { "met" } else { "not met" }
                )
            };
            format!("- {what}: **{value:.2}×** ({n:+.0} / {d:+.0}){verdict}\n")
        }
        _ => format!("- {what}: not measured\n"),
    }
}

/// Whether a goal relative to `other` (bpftrace, or another mechanism's floor) can be met at
/// all: not when the timing floor, the least any per-call histogram costs with this
/// mechanism, is already above it. Empty when it can.
fn reachable_line(floor: Option<f64>, other: Option<f64>, goal: f64, other_name: &str) -> String {
    match (floor, other) {
        (Some(floor), Some(other)) if other > 0.0 && floor / other > goal => format!(
            "  - not reachable with this mechanism: the timing floor alone is **{:.2}×** \
             {other_name} ({floor:+.0} / {other:+.0})\n",
            floor / other
        ),
        _ => String::new(),
    }
}

/// Per probed run: added instructions per call by category and the top symbols.
fn attribution(
    mechanisms: &[Mechanism],
    runs: &[Run],
    measured: &BTreeMap<String, Measured>,
    kernel_symbols: usize,
) -> String {
    let bare = &measured["bare"].by_symbol;
    let mut out = format!(
        "### Where the instructions go\n\n\
         Added instructions per call relative to the unprobed run, by kernel symbol: the \
         plugin counts per translated block, attributed to the symbol at or below the block's \
         start address ({kernel_symbols} kernel text symbols plus each run's `[bpf]` and \
         `[__builtin__*]` lines of kallsyms, saved while its probes were attached). Categories: \
         {}.\n\n",
        [
            Category::Programs,
            Category::Helpers,
            Category::StackWalk,
            Category::Dispatch,
            Category::Kprobe,
            Category::Trampoline,
            Category::Tracepoint,
            Category::OtherKernel,
            Category::User,
        ]
        .map(Category::label)
        .join(", ")
    );
    // First what the goals are about: hotprof's instructions above the floor's.
    for mechanism in mechanisms {
        let key = |variant: Variant| format!("{}-{}", mechanism.key, variant.key());
        let (Some(hotprof), Some(floor)) = (
            measured
                .get(&key(Variant::Hotprof))
                .filter(|m| m.window.is_some()),
            measured
                .get(&key(Variant::Floor))
                .filter(|m| m.window.is_some()),
        ) else {
            continue;
        };
        let rows = added_per_call(&hotprof.by_symbol, &floor.by_symbol, CALLS);
        let total: f64 = rows.iter().map(|r| r.per_call).sum();
        let _ = writeln!(
            out,
            "#### {}: hotprof above the timing floor ({total:+.1}/call)\n\n\
             hotprof's run minus the floor's, by symbol (the floor's own programs show as \
             negative rows).\n",
            mechanism.key
        );
        out.push_str(&category_table(&rows));
        out.push_str(&top_table(&rows));
    }
    for run in runs.iter().filter(|run| run.probe.is_some()) {
        let Some((mechanism, variant)) = run.probe else {
            continue;
        };
        if run.key.ends_with("-again") {
            continue;
        }
        let Some(measured_run) = measured.get(&run.key).filter(|m| m.window.is_some()) else {
            let _ = writeln!(out, "#### {}\n\nno window.\n", run.key);
            continue;
        };
        let rows = added_per_call(&measured_run.by_symbol, bare, CALLS);
        let total: f64 = rows.iter().map(|r| r.per_call).sum();
        let _ = writeln!(
            out,
            "#### {}: {} ({total:+.1}/call)\n",
            mechanisms[mechanism].key,
            variant.title(&mechanisms[mechanism])
        );
        out.push_str(&category_table(&rows));
        out.push_str(&top_table(&rows));
    }
    out
}

/// Where the unprobed call's own instructions go: the syscall path every variant shares.
fn bare_table(bare: &Measured) -> String {
    let rows = added_per_call(&bare.by_symbol, &BTreeMap::new(), CALLS);
    let mut out = String::from("#### The unprobed call itself\n\n");
    out.push_str(&top_table(&rows).replace("added/call", "insns/call"));
    out
}

fn category_table(rows: &[Added]) -> String {
    let mut out = String::from("| category | added/call |\n|---|---|\n");
    // Categories whose rows cancel out (±0.0) say nothing.
    for (category, per_call) in by_category(rows)
        .into_iter()
        .filter(|(_, v)| v.abs() >= 0.05)
    {
        let _ = writeln!(out, "| {} | {per_call:+.1} |", category.label());
    }
    out.push('\n');
    out
}

fn top_table(rows: &[Added]) -> String {
    let mut out = String::from("| symbol | category | added/call |\n|---|---|---|\n");
    for row in rows.iter().take(TOP_SYMBOLS) {
        let _ = writeln!(
            out,
            "| `{}` | {} | {:+.1} |",
            row.symbol,
            row.category.label(),
            row.per_call
        );
    }
    if rows.len() > TOP_SYMBOLS {
        let rest: f64 = rows[TOP_SYMBOLS..].iter().map(|r| r.per_call).sum();
        let _ = writeln!(
            out,
            "| {} more symbols | | {rest:+.1} |",
            rows.len() - TOP_SYMBOLS
        );
    }
    out.push('\n');
    out
}

/// The mode hotprof's report names: `hotprof: 1 function, raw_syscall mode, kernel …`.
fn hotprof_mode(output: &str) -> Option<&str> {
    output.lines().find_map(|line| {
        let rest = line.strip_prefix("hotprof: ")?;
        rest.split(", ")
            .find_map(|part| part.strip_suffix(" mode"))
            .filter(|mode| !mode.contains(' '))
    })
}

/// A failed run's reason: its first `ERROR:` line (bpftrace ends with the source it
/// underlines), else its last line.
fn why_failed(text: &str) -> &str {
    text.lines()
        .find(|line| line.contains("ERROR:"))
        .map_or_else(|| last_line(text), str::trim)
}

fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|line| {
            !line.trim().is_empty()
                && !line.starts_with("bench-exit=")
                && !line.starts_with("bench-secs=")
        })
        .unwrap_or("(no output)")
}

#[cfg(test)]
mod tests {
    use super::mechanisms::{FSESSION_MECHANISMS, MECHANISMS};
    use super::*;

    #[test]
    fn every_variant_runs_the_marked_workload_pinned() {
        for mechanism in SUITES.iter().flat_map(|suite| suite.mechanisms) {
            for &variant in mechanism.variants {
                let command = variant.command(mechanism, "/out/x.syms");
                // funclatency runs no command: it is started (pinned) before the workload.
                let tool = match variant {
                    Variant::Funclatency => "( taskset 1 funclatency ",
                    _ => "taskset 1 ",
                };
                assert!(command.starts_with(tool), "{command}");
                assert!(command.contains("/tmp/marked /out/x.syms"), "{command}");
            }
        }
        let bpftrace = Variant::Bpftrace.command(&MECHANISMS[0], "/out/k.syms");
        assert!(
            bpftrace.contains("kprobe:__x64_sys_getpid /pid == cpid/")
                && bpftrace.ends_with("-c \"/bin/sh /tmp/marked /out/k.syms\""),
            "{bpftrace}"
        );
        assert_eq!(
            Variant::HotprofStacks.command(&MECHANISMS[2], "s"),
            "taskset 1 hotprof --syscall getpid --stacks --no-calibrate -- /tmp/marked s"
        );
    }

    #[test]
    fn the_script_runs_bare_first_and_the_repeat_last() {
        let runs = runs(&MECHANISMS);
        let variants: usize = MECHANISMS.iter().map(|m| m.variants.len()).sum();
        assert_eq!(runs.len(), 2 + variants);
        let script = guest_script(&runs, &MECHANISMS, Arch::X86_64);
        let bare = script.find("> /out/bare.txt").expect("bare run");
        let again = script
            .find("> /out/kprobe-hotprof-again.txt")
            .expect("repeat");
        let other = script
            .find("> /out/fentry-bpftrace.txt")
            .expect("fentry run");
        assert!(bare < other && other < again);
        assert!(script.contains("exec taskset 2 syscall_lat --marker 100000"));
    }

    #[test]
    fn the_arm64_suite_times_call_sites_against_fentry_on_the_same_function() {
        use super::mechanisms::ARM64_MECHANISMS;
        let suites: Vec<&Suite> = SUITES
            .iter()
            .filter(|suite| suite.arch == Arch::Aarch64)
            .collect();
        assert_eq!(suites.len(), 1);
        let runs = runs(&ARM64_MECHANISMS);
        let script = guest_script(&runs, &ARM64_MECHANISMS, Arch::Aarch64);
        // No x86 call-site attempt; bpftrace on arm64's own probes.
        assert!(!script.contains("__x64_sys_getpid"));
        assert!(script.contains("bpftrace-sid -e 'fentry:__arm64_sys_getpid /pid == cpid/"));
        assert!(script.contains("funclatency __arm64_sys_getpid > /tmp/fl.txt"));
        assert!(script.contains("hotprof --fn __task_pid_nr_ns --mode callsite --no-calibrate"));
        let callsite = ARM64_MECHANISMS
            .iter()
            .find(|m| m.key == "callsite")
            .unwrap();
        let neighbour = callsite.against_hotprof_of.unwrap();
        let reference = ARM64_MECHANISMS
            .iter()
            .find(|m| m.key == neighbour)
            .unwrap();
        let function = |m: &Mechanism| {
            Variant::Hotprof
                .command(m, "s")
                .split(' ')
                .nth(4)
                .map(str::to_owned)
        };
        assert_eq!(function(reference), function(callsite));
        assert_eq!(function(callsite).as_deref(), Some("__task_pid_nr_ns"));
        assert_eq!(
            expected_mode("callsite", Variant::Hotprof),
            Some("callsite")
        );
        assert_eq!(expected_mode("neighbour", Variant::Hotprof), Some("fentry"));
    }

    #[test]
    fn a_failed_run_says_why() {
        let bpftrace = "stdin:1:1-24: ERROR: Probe has no valid attach points.\n\
                        kprobe:__x64_sys_getpid {}\n~~~~~~\nbench-exit=1\n";
        assert_eq!(
            why_failed(bpftrace),
            "stdin:1:1-24: ERROR: Probe has no valid attach points."
        );
        assert_eq!(why_failed("oops\nbench-exit=1\n"), "oops");
    }

    #[test]
    fn funclatency_counts_its_log2_histogram() {
        let output = "Tracing __do_sys_getpid.  Hit Ctrl-C to exit\n\
                      \n     nsec                : count    distribution\n\
                      \x20        0 -> 1          : 0        |                    |\n\
                      \x20      256 -> 511        : 99990    |********************|\n\
                      \x20      512 -> 1023       : 14       |                    |\n\
                      \navg = 300 nsecs, total: 30000000 nsecs, count: 100004\n\
                      Exiting trace of __do_sys_getpid\n";
        assert_eq!(Variant::Funclatency.tool_count(output), Some(Some(100_004)));
        assert_eq!(Variant::Funclatency.tool_count("no histogram"), Some(None));
    }

    #[test]
    fn perf_ftrace_counts_its_statistics_line() {
        // `perf ftrace latency -n` 7.2's tail, as the 6.12 guest printed it.
        let output = "   256 -  512 ns |      99990 | ############## |
                           1 - ...  s  |          0 |                |

                      # statistics  (in nsec)
                        total time:                  956
                             count:               100003
";
        assert_eq!(Variant::PerfFtrace.tool_count(output), Some(Some(100_003)));
        assert_eq!(Variant::PerfFtrace.tool_count("No data found"), Some(None));
    }

    #[test]
    fn session_rows_must_have_run_in_their_mode() {
        assert_eq!(
            expected_mode("session", Variant::Hotprof),
            Some("kprobe.session")
        );
        assert_eq!(
            expected_mode("session", Variant::HotprofFrames),
            Some("kprobe.multi")
        );
        assert_eq!(expected_mode("kprobe", Variant::Hotprof), None);
        assert!(MECHANISMS.iter().any(|m| m.key == "session"));
        // 7.x: fsession against the pairs, each run checked to be what its row says.
        assert_eq!(
            expected_mode("fsession", Variant::Hotprof),
            Some("fsession")
        );
        assert_eq!(expected_mode("fentry", Variant::Hotprof), Some("fentry"));
        let fsession = &FSESSION_MECHANISMS[1];
        assert!(fsession.variants.contains(&Variant::Floor));
        assert!(
            Variant::Hotprof
                .command(fsession, "s")
                .contains("--mode fsession")
                && Variant::Hotprof
                    .command(&FSESSION_MECHANISMS[0], "s")
                    .contains("--no-fsession")
        );
        assert_eq!(fsession.below_floor_of, Some(("fentry", 0.80)));
    }

    #[test]
    fn a_goal_below_the_floor_is_called_unreachable() {
        assert_eq!(
            reachable_line(Some(1338.0), Some(2561.0), 0.5, "bpftrace"),
            "  - not reachable with this mechanism: the timing floor alone is **0.52×** \
             bpftrace (+1338 / +2561)\n"
        );
        assert_eq!(
            reachable_line(Some(748.0), Some(1974.0), 0.5, "bpftrace"),
            ""
        );
        assert_eq!(reachable_line(None, Some(1974.0), 0.5, "bpftrace"), "");
        // fsession on 7.x: its own floor is 0.95× the pairs' floor, above a 0.80× goal.
        assert_eq!(
            reachable_line(Some(465.0), Some(487.0), 0.80, "the fentry section's"),
            "  - not reachable with this mechanism: the timing floor alone is **0.95×** the \
             fentry section's (+465 / +487)\n"
        );
    }

    #[test]
    fn ratios_and_goals() {
        assert_eq!(
            ratio_line("h / f", Some(110.0), Some(100.0), 1.10),
            "- h / f: **1.10×** (+110 / +100) (goal ≤ 1.10×: met)\n"
        );
        assert!(ratio_line("h / f", Some(111.0), Some(100.0), 1.10).ends_with("not met)\n"));
        assert_eq!(ratio_line("x", None, Some(1.0), 2.0), "- x: not measured\n");
        assert_eq!(
            ratio_line("x", Some(3.0), Some(2.0), f64::NAN),
            "- x: **1.50×** (+3 / +2)\n"
        );
    }

    #[test]
    fn attribution_tables() {
        let row = |symbol: &str, per_call| Added {
            symbol: symbol.into(),
            category: Category::of(symbol),
            per_call,
        };
        let mut rows = vec![
            row("bpf_prog_aa_kprobe_0", 121.0),
            row("trace_call_bpf", 0.04),
            row("migrate_enable", -0.04),
        ];
        assert_eq!(
            category_table(&rows),
            "| category | added/call |\n|---|---|\n| BPF programs (bpf_prog_*) | +121.0 |\n\n",
            "categories that cancel out are left out"
        );
        rows.extend((0..TOP_SYMBOLS).map(|i| row(&format!("f{i}"), 0.5)));
        let table = top_table(&rows);
        assert!(
            table.starts_with(
                "| symbol | category | added/call |\n|---|---|---|\n\
                 | `bpf_prog_aa_kprobe_0` | BPF programs (bpf_prog_*) | +121.0 |\n"
            ),
            "{table}"
        );
        assert_eq!(
            table.lines().count(),
            2 + TOP_SYMBOLS + 1 + 1,
            "and a blank line"
        );
        assert!(
            table.ends_with("| 3 more symbols | | +1.5 |\n\n"),
            "{table}"
        );
    }

    #[test]
    fn tool_counts() {
        let hotprof = "getpid\n  calls 100001   total 184 ms\n";
        assert_eq!(Variant::Hotprof.tool_count(hotprof), Some(Some(100_001)));
        let bpftrace = "@ns:\n[256, 512)   99990 |@@@@@|\n[512, 1K)   10 |  |\n";
        assert_eq!(Variant::Bpftrace.tool_count(bpftrace), Some(Some(100_000)));
        assert_eq!(Variant::Empty.tool_count(""), None);
        let report = "hotprof: 1 syscall(s) attached (raw_syscall mode), running: x\n\
                      hotprof: 1 function, raw_syscall mode, kernel 6.12.117, 1.84 s\n";
        assert_eq!(hotprof_mode(report), Some("raw_syscall"));
        assert_eq!(hotprof_mode("syscall_lat: calls=1\n"), None);
        assert_eq!(run_secs("x\nbench-secs=10.5 22.75\n"), 12.25);
    }
}
