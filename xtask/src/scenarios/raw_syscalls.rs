//! `--syscall` on the raw tracepoints `raw_syscalls:sys_enter`/`sys_exit` (`raw_syscall`
//! mode): every syscall of the system runs the program pair, which must count exactly the
//! traced ones, and agree with the perf tracepoints (`syscall` mode) call for call.

use anyhow::{Context, Result, ensure};

use super::harness::{Ctx, Report, key_rows};
use crate::kernels::Kernel;

/// Exact counts in raw mode: `syscall_lat N` is exactly N getpids (its ~70 other syscalls,
/// which pass through the same programs, are not counted), in the mode auto picks for a
/// command's run and when forced, while tracepoint mode is still there when asked for (and
/// is auto's pick system-wide); two syscalls at once keyed
/// by `--by errno,arg2` (an error return and a syscall argument read from pt_regs) give
/// the same rows as the perf tracepoints, the found and missing opens exactly; `--filter`
/// keeps exactly the failed opens and counts the rest; `--comm` that matches nothing counts
/// nothing; `--off-cpu` splits sleeps into on- and off-CPU time; `--slowest` keeps its calls;
/// `--stacks` stacks carry none of the raw tracepoint's own frames.
pub(super) fn raw_syscalls_exact(ctx: &mut Ctx) -> Result<()> {
    const CALLS: u64 = 20_000;
    const FOUND: u64 = 120;
    const MISSING: u64 = 45;
    const SLEEPS: u64 = 10;
    let guest = ctx.run(&format!(
        r#"
hotprof --syscall getpid --no-calibrate --json /out/auto.json -- syscall_lat {CALLS} || exit 1
hotprof --syscall getpid --syscall-mode raw --slowest 3 --json /out/raw.json -- syscall_lat {CALLS} || exit 1
hotprof --syscall getpid --syscall-mode tracepoint --no-calibrate --json /out/tp.json -- syscall_lat {CALLS} || exit 1
for mode in raw tracepoint; do
  hotprof --syscall getpid --syscall openat --syscall-mode $mode --by errno,arg2 --no-calibrate \
    --json /out/open_$mode.json -- open_loop {FOUND} {MISSING} /tmp || exit 1
done
hotprof --syscall openat --syscall-mode raw --filter errno==ENOENT --no-calibrate --json /out/filter.json -- open_loop {FOUND} {MISSING} /tmp || exit 1
hotprof --syscall getpid --syscall-mode raw --comm no_such_comm --no-calibrate --json /out/comm.json -- syscall_lat 1000 || exit 1
hotprof --syscall clock_nanosleep --syscall-mode raw --off-cpu --no-calibrate --json /out/sleep.json -- sleeper {SLEEPS} 2000 || exit 1
hotprof --syscall getpid --duration 1s --no-calibrate --json /out/wide.json > /dev/null || exit 1
hotprof --syscall getpid --syscall-mode raw --stacks --folded /out/raw.folded --no-calibrate -- syscall_lat 2000 || exit 1
true
"#
    ))?;
    guest.expect_exit(0)?;
    let store = match ctx.kernel() {
        Kernel::V5_10 => "hash_map",
        _ => "task_storage",
    };
    // Auto mode: raw for a run limited to a command, the perf tracepoints system-wide.
    let wide = guest.report("wide.json")?;
    ensure!(
        wide.json["mode"] == "syscall",
        "a system-wide run is in mode {}, want syscall",
        wide.json["mode"]
    );
    for (file, mode) in [
        ("auto.json", "raw_syscall"),
        ("raw.json", "raw_syscall"),
        ("tp.json", "syscall"),
    ] {
        let report = guest.report(file)?;
        ensure!(
            report.json["mode"] == mode && report.json["task_store"] == store,
            "{file}: mode {} with {}, want {mode} with {store}",
            report.json["mode"],
            report.json["task_store"]
        );
        let count = report.function("getpid")?.u64("count")?;
        ensure!(
            count == CALLS,
            "{file}: {count} getpid calls, want exactly {CALLS}"
        );
        ensure!(
            report.json["losses"]
                .as_object()
                .is_none_or(|losses| losses.values().all(|v| v.as_u64() == Some(0))),
            "{file}: losses {}",
            report.json["losses"]
        );
    }
    let raw = guest.report("raw.json")?;
    let slowest = slowest_calls(&raw)?;
    ensure!(slowest == 3, "--slowest 3 kept {slowest} getpid calls");
    ensure!(
        raw.json["probe_overhead_ns"].as_f64().is_some(),
        "raw mode was not calibrated"
    );

    // Two syscalls in one run, keyed by errno and flags: raw mode's rows are the
    // tracepoints', and the opens are exact (the C runtime's own open of /proc/self/maps
    // at start-up is the extra successful one).
    let mut keyed = Vec::new();
    for file in ["open_raw.json", "open_tracepoint.json"] {
        let report = guest.report(file)?;
        let mut rows = key_rows(&report, "openat")?;
        rows.sort();
        let calls = |errno: &str| -> u64 {
            rows.iter()
                .filter(|(key, _)| key.first().map(String::as_str) == Some(errno))
                .map(|row| row.1)
                .sum()
        };
        ensure!(
            (calls("ok"), calls("ENOENT")) == (FOUND + 1, MISSING),
            "{file}: {} ok and {} ENOENT opens, want {} and {MISSING} (rows {rows:?})",
            calls("ok"),
            calls("ENOENT"),
            FOUND + 1
        );
        let getpids = report.function("getpid")?.u64("count")?;
        ensure!(
            getpids == 0,
            "{file}: open_loop made {getpids} getpid calls"
        );
        keyed.push(rows);
    }
    ensure!(
        keyed[0] == keyed[1],
        "raw and tracepoint modes key the opens differently: raw {:?}, tracepoint {:?}",
        keyed[0],
        keyed[1]
    );

    let filtered = guest.report("filter.json")?;
    let kept = filtered.function("openat")?.u64("count")?;
    let not_matched = filtered.json["filter"]["not_matched"].as_u64();
    ensure!(
        kept == MISSING && not_matched == Some(FOUND + 1),
        "--filter errno==ENOENT kept {kept} opens and left {not_matched:?}, want {MISSING} and {}",
        FOUND + 1
    );

    let comm = guest
        .report("comm.json")?
        .function("getpid")?
        .u64("count")?;
    ensure!(comm == 0, "--comm no_such_comm counted {comm} getpid calls");

    let sleep = guest.report("sleep.json")?.function("clock_nanosleep")?;
    let sleeps = sleep.u64("count")?;
    ensure!(
        sleeps == SLEEPS,
        "counted {sleeps} clock_nanosleep calls, want exactly {SLEEPS}"
    );
    let (wall, on_cpu) = (sleep.f64("sum_ns")?, sleep.f64("on_cpu_sum_ns")?);
    // Off CPU at least for the time the sleeps asked for (TCG's timers add on-CPU time to
    // each sleep, up to a third of the wall time on 7.x, so the on-CPU share is not bounded).
    let asked = SLEEPS as f64 * 2e6;
    ensure!(
        on_cpu > 0.0 && wall - on_cpu >= asked,
        "--off-cpu: on-CPU {on_cpu} ns of wall {wall} ns, want at least {asked} ns off CPU"
    );

    let folded = std::fs::read_to_string(guest.outcome.out_dir.join("raw.folded"))
        .context("no /out/raw.folded")?;
    let mut stacked = 0;
    for line in folded.lines() {
        let (stack, weight) = line
            .rsplit_once(' ')
            .context("a folded line without weight")?;
        ensure!(
            !stack.contains("bpf_trace_run") && !stack.contains("__bpf_trace"),
            "a stack keeps the raw tracepoint's own frames: {line}"
        );
        stacked += weight.parse::<u64>().is_ok() as u64;
    }
    ensure!(stacked > 0, "--stacks folded no stack: {folded}");
    Ok(())
}

/// How many slowest calls the report's getpid entry keeps.
fn slowest_calls(report: &Report) -> Result<usize> {
    let entry = report.json["functions"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == "getpid"))
        .context("no getpid entry")?;
    Ok(entry["slowest"].as_array().map_or(0, Vec::len))
}
