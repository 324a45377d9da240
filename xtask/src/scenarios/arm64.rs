//! VM scenarios on arm64 guests: Debian's arm64 cloud kernels on qemu's `virt` board (TCG),
//! with hotprof, its arm64 eBPF objects and the workloads cross-built for aarch64. Each packs
//! its checks into one boot per kernel (a TCG boot and run cost tens of seconds).
//!
//! What Debian's arm64 kernels support, as these scenarios check it:
//!
//! | kernel | fentry | kprobe.multi / kprobe.session |
//! |---|---|---|
//! | 6.1 | refused, ENOTSUPP (524): no `CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS` (arm64 has it from 6.4) | no: no `CONFIG_FPROBE` (EOPNOTSUPP); no kprobe.session before 6.10 |
//! | 6.12 | yes | no: no `CONFIG_FPROBE` (EOPNOTSUPP) |
//! | 7.x | yes | yes |
//!
//! Perf kprobes, the syscall tracepoints, raw syscall tracepoints and call-site mode work on all.

use std::fs;

use anyhow::{Context, Result, ensure};

use super::cli::{BAD_INPUTS, bad_inputs_script, check_bad_inputs};
use super::doctor::{check_rows, expected_rows, row};
use super::harness::{Ctx, Guest, caller_rows, write_copy_function};
use super::keys_and_filters::{check_one_caller, check_size_classes, tmpfs_write_results};
use super::kprobe_session::has_fsession;
use super::lifecycle::{check_signals, signals_script};
use super::raw_syscalls::raw_runs_preemptible;
use crate::kernels::Kernel;

/// Calls syscall_lat makes: few, as every one is emulated.
const CALLS: u64 = 5_000;
/// dd's 4 KiB writes to tmpfs: one write copy each.
const WRITES: u64 = 200;

/// What Debian's arm64 `kernel` can attach, as [`arm64_exact_counts`] expects it.
struct Supports {
    /// fentry/fexit on kernel functions (BPF trampolines through ftrace direct calls).
    fentry: bool,
    /// kprobe.multi and kprobe.session links (fprobe).
    links: bool,
}

fn supports(kernel: Kernel) -> Supports {
    match kernel {
        Kernel::V6_1 => Supports {
            fentry: false,
            links: false,
        },
        Kernel::V6_12 => Supports {
            fentry: true,
            links: false,
        },
        _ => Supports {
            fentry: true,
            links: true,
        },
    }
}

/// One arm64 boot per kernel (6.1, 6.12, 7.x): `hotprof doctor`'s rows say what the kernel
/// supports (see the module's table) and its verdict; `vfs_read` under `--mode fentry` counts
/// exactly file_read's reads (a musl binary: no start-up read of `/proc/self/maps`), or, on
/// 6.1, is refused in one line naming ENOTSUPP while auto mode says why and counts it exactly
/// with kprobes; getpid's arm64 wrapper `__arm64_sys_getpid` exact under a perf kprobe, and
/// in kprobe mode's default: through the kprobe.session link (alone) and kprobe.multi
/// (`--no-kprobe-session`) on 7.x, through perf kprobes with a note where the links are
/// refused; `--syscall getpid` on its syscall tracepoints and on the raw tracepoints (found
/// by arm64's own syscall numbers; on 7.x a call lost there must be one the kernel counted
/// as missed, as its raw runs are preemptible); and the notrace write copy at its
/// call sites (`bl` found in the kernel's code), exactly dd's writes to tmpfs, all at
/// `generic_perform_write`'s site; `__task_pid_nr_ns` at its ~120 call sites, those the
/// kernel refuses to probe left out with a note each, counting what a kprobe at its entry
/// counts. The calibrated runs print their probe overhead
/// (calibrated on arm64's own symbols: `__arm64_sys_arm64_personality`, getpid's wrapper).
pub fn arm64_exact_counts(ctx: &mut Ctx) -> Result<()> {
    let kernel = ctx.kernel();
    let can = supports(kernel);
    let copy = write_copy_function(kernel);
    let guest = ctx.run(&format!(
        r#"uname -m; hotprof doctor; echo doctor_exit=$?
hotprof --fn vfs_read --mode fentry --no-calibrate --json /out/read.json -- file_read /tmp/f 4 2>/out/fentry_err.txt
echo fentry_rc=$?
hotprof --fn vfs_read --json /out/auto.json -- file_read /tmp/f 4 || echo auto_failed=$?
hotprof --fn __arm64_sys_getpid --mode kprobe --no-kprobe-multi --json /out/getpid.json -- syscall_lat {CALLS} || echo kprobe_failed=$?
hotprof --fn __arm64_sys_getpid --mode kprobe --no-calibrate --json /out/lone.json -- syscall_lat {CALLS} || echo lone_failed=$?
hotprof --fn __arm64_sys_getpid --mode kprobe --no-kprobe-session --no-calibrate --json /out/multi.json -- syscall_lat {CALLS} || echo multi_failed=$?
hotprof --syscall getpid --syscall-mode tracepoint --json /out/syscall.json -- syscall_lat {CALLS} || echo syscall_failed=$?
hotprof --syscall getpid --syscall-mode raw --json /out/raw.json -- syscall_lat {CALLS} || echo raw_failed=$?
hotprof --fn {copy} --json /out/sites.json -- dd if=/dev/zero of=/tmp/w bs=4k count={WRITES} || echo callsite_failed=$?
hotprof --fn __task_pid_nr_ns --mode callsite --no-calibrate --json /out/pid_sites.json -- syscall_lat {CALLS} || echo pid_sites_failed=$?
hotprof --fn __task_pid_nr_ns --mode kprobe --no-kprobe-multi --no-kprobe-session --no-calibrate --json /out/pid_entry.json -- syscall_lat {CALLS} || echo pid_entry_failed=$?
"#
    ))?;
    guest.expect_exit(0)?;
    ensure!(
        guest.outcome.stdout.starts_with("aarch64\n"),
        "the guest is not an aarch64 machine (uname -m first)"
    );
    doctor_rows(&guest, kernel, &can)?;
    for failed in [
        "auto_failed=",
        "kprobe_failed=",
        "lone_failed=",
        "multi_failed=",
        "syscall_failed=",
        "raw_failed=",
        "callsite_failed=",
        "pid_sites_failed=",
        "pid_entry_failed=",
    ] {
        let lines = guest.lines_containing(failed);
        ensure!(lines.is_empty(), "a hotprof run failed: {lines:?}");
    }

    // vfs_read: fentry where the kernel attaches trampolines; else a one-line refusal, and
    // auto mode on kprobes saying why.
    let reads = guest.workload("file_read")?.u64("reads")?;
    ensure!(reads > 0, "file_read made no reads");
    let fentry_err = fs::read_to_string(guest.outcome.out_dir.join("fentry_err.txt"))?;
    if can.fentry {
        ensure!(
            guest.lines_containing("fentry_rc=0").len() == 1,
            "--mode fentry failed: {fentry_err}"
        );
        // A lone function without frames: the fsession program where the kernel has it
        // (7.0+; arm64's JIT too), else the fentry/fexit pair.
        let trampoline = if has_fsession(kernel) {
            "fsession"
        } else {
            "fentry"
        };
        check_count(&guest, "read.json", "vfs_read", trampoline, reads)?;
        check_count(&guest, "auto.json", "vfs_read", trampoline, reads)?;
    } else {
        ensure!(
            guest.lines_containing("fentry_rc=1").len() == 1
                && fentry_err.lines().count() == 1
                && fentry_err.contains("fentry cannot attach to vfs_read: ")
                && fentry_err.contains("(os error 524) (ENOTSUPP: this kernel cannot attach"),
            "--mode fentry on {}: want exit 1 and one line saying ENOTSUPP (524), got \
             {fentry_err:?}",
            kernel.name()
        );
        check_count(&guest, "auto.json", "vfs_read", "kprobe", reads)?;
        let fallback = "hotprof: note: fentry cannot attach to vfs_read: ";
        let notes = guest.lines_containing(fallback);
        ensure!(
            notes.len() == 1
                && notes[0].ends_with(
                    "(os error 524) (ENOTSUPP: this kernel cannot attach BPF trampolines to \
                     kernel functions; it needs CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS); using \
                     kprobe/kretprobe instead"
                ),
            "auto mode's note on falling back from fentry: {notes:?}"
        );
    }

    // getpid: a perf kprobe; kprobe mode's links where fprobe exists, else perf kprobes with
    // a note saying the kernel refused the link (auto mode never reaches them: fentry first).
    check_count(&guest, "getpid.json", "__arm64_sys_getpid", "kprobe", CALLS)?;
    let (lone, multi) = if can.links {
        ("kprobe.session", "kprobe.multi")
    } else {
        ("kprobe", "kprobe")
    };
    check_count(&guest, "lone.json", "__arm64_sys_getpid", lone, CALLS)?;
    check_count(&guest, "multi.json", "__arm64_sys_getpid", multi, CALLS)?;
    let refused = guest.lines_containing("the kernel refused a kprobe.multi link");
    // The two kprobe-mode runs, and on 6.1 auto mode's after fentry.
    let runs_refused = match (can.links, can.fentry) {
        (true, _) => 0,
        (false, true) => 2,
        (false, false) => 3,
    };
    ensure!(
        refused.len() == runs_refused
            && refused.iter().all(|line| {
                line.contains("(os error 95)")
                    && line.ends_with("using a perf kprobe/kretprobe per function instead")
            }),
        "want {runs_refused} notes of a refused kprobe.multi link (EOPNOTSUPP), got {refused:?}"
    );

    check_count(&guest, "syscall.json", "getpid", "syscall", CALLS)?;
    let raw = guest.report("raw.json")?;
    let count = raw.function("getpid")?.u64("count")?;
    let missed = if raw_runs_preemptible(kernel) {
        raw.json["losses"]["kernel_missed"].as_u64().unwrap_or(0)
    } else {
        0
    };
    ensure!(
        raw.json["mode"] == "raw_syscall" && count <= CALLS && count + missed >= CALLS,
        "raw.json: {count} getpid calls in mode {}, want exactly {CALLS} in raw_syscall (less \
         at most the kernel's {missed} missed runs)",
        raw.json["mode"]
    );

    // The write copy at its call sites: every write at generic_perform_write's.
    check_count(&guest, "sites.json", copy, "callsite", WRITES)?;
    let callers = caller_rows(&guest.report("sites.json")?, copy)?;
    let busiest = callers.first().context("no per-caller rows")?;
    ensure!(
        busiest.0.starts_with("generic_perform_write+0x") && busiest.1 == WRITES,
        "the busiest call site of {copy} is {busiest:?}, want generic_perform_write+0x… with \
         {WRITES} calls"
    );
    ensure!(
        callers.iter().skip(1).all(|(_, calls)| *calls == 0),
        "other call sites of {copy} counted calls: {callers:?}"
    );

    // A function with ~120 call sites, some of which the kernel refuses to probe (on 6.12 the
    // instructions after `bl` in schedule_tail and do_coredump): the run goes on without
    // them, each named in a note, and counts exactly what a kprobe at the entry counts (the
    // same workload, so the same calls outside getpid's loop), all of getpid's at its site.
    let at_entry = guest
        .report("pid_entry.json")?
        .function("__task_pid_nr_ns")?
        .u64("count")?;
    check_count(
        &guest,
        "pid_sites.json",
        "__task_pid_nr_ns",
        "callsite",
        at_entry,
    )?;
    ensure!(
        at_entry >= CALLS,
        "__task_pid_nr_ns ran {at_entry} times under {CALLS} getpid calls"
    );
    let pid_callers = caller_rows(&guest.report("pid_sites.json")?, "__task_pid_nr_ns")?;
    let getpid_site = pid_callers.first().context("no per-caller rows")?;
    ensure!(
        getpid_site.0.starts_with("__arm64_sys_getpid+0x") && getpid_site.1 >= CALLS,
        "the busiest call site of __task_pid_nr_ns is {getpid_site:?}, want \
         __arm64_sys_getpid+0x… with at least {CALLS} calls"
    );
    for note in guest.lines_containing("is not timed: the kernel refuses a kprobe at ") {
        ensure!(
            note.starts_with("hotprof: note: a call site in ")
                && note.ends_with("; its calls are not counted"),
            "a refused call site's note is not one line naming it: {note}"
        );
    }

    // Calibrated in every run that does not opt out: on arm64's own symbols.
    let overheads = guest.lines_containing("probe overhead: ~");
    ensure!(
        overheads.len() == 5,
        "want a probe overhead line from each of the 5 calibrated runs, got {overheads:?}; \
         notes: {:?}",
        guest.lines_containing("not calibrated")
    );
    Ok(())
}

/// The report `file` ran in `mode` and counted `function` exactly `calls` times.
fn check_count(guest: &Guest, file: &str, function: &str, mode: &str, calls: u64) -> Result<()> {
    let report = guest.report(file)?;
    let count = report.function(function)?.u64("count")?;
    ensure!(
        report.json["mode"] == mode && count == calls,
        "{file}: {count} {function} calls in mode {}, want exactly {calls} in {mode}",
        report.json["mode"]
    );
    Ok(())
}

/// The doctor's rows on Debian's arm64 `kernel`, the reasons of its "no"s, and its verdict,
/// exit 0.
fn doctor_rows(guest: &Guest, kernel: Kernel, can: &Supports) -> Result<()> {
    ensure!(
        guest.lines_containing("doctor_exit=0").len() == 1,
        "hotprof doctor must exit 0 on arm64"
    );
    let mut rows = expected_rows(can.links, true);
    if !can.fentry {
        for (name, status) in &mut rows {
            if *name == "fentry" {
                *status = "no";
            }
        }
    }
    check_rows(guest, &rows)?;
    if !can.fentry {
        let fix = guest.lines_containing("fix: the kernel cannot attach BPF trampolines here");
        let (_, found) = row(guest, "fentry")?;
        ensure!(
            found.contains("(os error 524)")
                && fix.len() == 1
                && fix[0].contains("CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS")
                && fix[0].ends_with("auto mode uses kprobes instead"),
            "the fentry row must give ENOTSUPP, the missing direct calls and the kprobe \
             fallback: {found:?}, {fix:?}"
        );
    }
    if !can.links {
        let (_, found) = row(guest, "kprobe.multi/session")?;
        let session = if kernel == Kernel::V6_1 {
            "kprobe.session no (this kernel has no kprobe.session (Linux 6.10)"
        } else {
            "kprobe.session no (Not supported (os error 95): built without CONFIG_FPROBE)"
        };
        ensure!(
            found.starts_with(
                "kprobe.multi no (Not supported (os error 95): built without CONFIG_FPROBE); "
            ) && found.contains(session),
            "the kprobe.multi/session row must say fprobe is missing: {found:?}"
        );
    }
    // Tracing-multi links are x86-64's: arm64's 7.x has the attach types and refuses the link.
    let (status, found) = row(guest, "tracing-multi")?;
    let why = if has_fsession(kernel) {
        "the kernel refused tracing-multi links for 1 function(s): creating the tracing-multi \
         link: Not supported (os error 95)"
    } else {
        "this kernel has no tracing-multi links (Linux 7.x): no BPF_TRACE_FENTRY_MULTI in its BTF"
    };
    ensure!(
        status == "no" && found.starts_with(why),
        "the tracing-multi row: {status} {found:?}, want no {why}…"
    );
    let verdict = if can.fentry {
        "hotprof works here: kernel functions with fentry and kprobes, syscalls with tracepoints"
    } else {
        "hotprof works here: kernel functions with kprobes, syscalls with tracepoints"
    };
    ensure!(
        guest
            .outcome
            .stdout
            .contains(&format!("\n{verdict}\ndoctor_exit=0")),
        "want the verdict {verdict:?} as the doctor's last line"
    );
    Ok(())
}

/// Per-call detail and how runs end, one arm64 boot: `--by caller` on `generic_perform_write`
/// names its caller in the tmpfs write path with every call, the same return address in
/// auto mode (fentry, or kprobes where fentry is refused) and kprobe mode (kprobe.multi on
/// 7.x); `--by arg2:log2` on
/// `vfs_write` splits two workloads' writes into their size classes exactly; `--stacks`
/// folds every call with `generic_perform_write` at the leaf under `vfs_write` and the write
/// path, totalling the histogram's time; SIGINT and SIGTERM leave no program and no probe
/// (`hotprof status`) and no workload; bad inputs, arm64's missing `open` among them, are one
/// line and a non-zero exit each (a PMU event qemu does not emulate among them).
pub fn arm64_keys_stacks_signals(ctx: &mut Ctx) -> Result<()> {
    let kernel = ctx.kernel();
    let signals = ["INT", "TERM"];
    let bad: Vec<(&str, &str)> = BAD_INPUTS
        .iter()
        .copied()
        .chain([
            (
                "hotprof --syscall open",
                "unknown syscall 'open': x86_64 has it, aarch64 does not",
            ),
            (
                "hotprof --fn vfs_write --by arg7",
                "--by arg7: functions take their arguments in registers",
            ),
            // qemu's arm64 PMU has no branch event (it counts cycles, and instructions on
            // the instruction clock): the kernel refuses the event, in one line.
            (
                "hotprof --fn vfs_read --counter branches --duration 1s",
                "--counter branches: this machine's PMU does not count it",
            ),
        ])
        .collect();
    let guest = ctx.run(&format!(
        r#"
hotprof --fn generic_perform_write --by caller --no-calibrate --json /out/caller_auto.json -- tmpfs_write /tmp/w 1 || exit 1
hotprof --fn generic_perform_write --mode kprobe --by caller --no-calibrate --json /out/caller_kprobe.json -- tmpfs_write /tmp/w 1 || exit 1
hotprof --fn vfs_write --by arg2:log2 --no-calibrate --json /out/size.json -- sh -c 'tmpfs_write /tmp/a 1 && tmpfs_write /tmp/b 1 --chunk 1000' || exit 1
hotprof --fn generic_perform_write --stacks --folded /out/f.folded --no-calibrate --json /out/stacks.json -- tmpfs_write /tmp/w 2 || exit 1
{}
{}
true
"#,
        signals_script("--fn vfs_read", &signals),
        bad_inputs_script(&bad)
    ))?;
    guest.expect_exit(0)?;
    // generic_perform_write's caller, and a function of the write path below it in every
    // stack: 6.1's tmpfs writes go through generic_file_write_iter. (6.1 records stacks from
    // kprobes, whose unwind starts at the caller's frame record: the direct caller
    // `__generic_file_write_iter`, still in the link register, is not in them; kprobe mode
    // on 6.12 and 7.x misses `shmem_file_write_iter` alike, so auto mode's fentry is used.)
    let (caller, write_path) = match kernel {
        Kernel::V6_1 => ("__generic_file_write_iter", "generic_file_write_iter"),
        _ => ("shmem_file_write_iter", "shmem_file_write_iter"),
    };
    let can = supports(kernel);
    let auto_mode = if can.fentry { "fentry" } else { "kprobe" };
    // `--by caller` needs each call's frame: kprobe.multi where fprobe exists, not session.
    let kprobe_mode = if can.links { "kprobe.multi" } else { "kprobe" };

    // The caller, in both modes: the same return address, every call.
    check_one_caller(
        &guest,
        [
            ("caller_auto.json", auto_mode),
            ("caller_kprobe.json", kprobe_mode),
        ],
        caller,
    )?;

    let results = tmpfs_write_results(&guest);
    ensure!(
        results.len() == 5,
        "want five tmpfs_write results, got {results:?}"
    );
    check_size_classes(&guest.report("size.json")?, "vfs_write", &results[2..4])?;

    // Stacks: one per write, each with the function at the leaf and its callers below.
    let writes = guest.workload("tmpfs_write")?.u64("writes")?;
    let report = guest.report("stacks.json")?;
    let function = report.function("generic_perform_write")?;
    let (count, sum_ns) = (function.u64("count")?, function.u64("sum_ns")?);
    ensure!(
        count == writes,
        "--stacks: generic_perform_write counted {count} calls for {writes} writes"
    );
    let losses = &report.json["losses"];
    ensure!(
        losses["stacks_lost"] == 0 && losses["stack_totals_full"] == 0,
        "stacks were lost: {losses}"
    );
    let folded = fs::read_to_string(guest.outcome.out_dir.join("f.folded"))?;
    let path_frame = format!("{write_path}_[k]");
    let mut total = 0;
    for line in folded.lines() {
        let (stack, ns) = line
            .rsplit_once(' ')
            .context("a folded line without a value")?;
        total += ns.parse::<u64>().context("a folded value")?;
        let frames: Vec<&str> = stack.split(';').collect();
        ensure!(
            frames.last() == Some(&"generic_perform_write_[k]")
                && frames.contains(&"vfs_write_[k]")
                && frames.contains(&path_frame.as_str()),
            "a stack without generic_perform_write at the leaf under vfs_write and \
             {write_path}: {line}"
        );
    }
    ensure!(
        total == sum_ns,
        "the folded stacks total {total} ns, the histogram {sum_ns} ns"
    );

    check_signals(&guest, &signals)?;
    check_bad_inputs(&guest, &bad)
}

/// `--counter` on arm64 (qemu's emulated PMU, on the instruction clock, where it counts
/// instructions: `INST_RETIRED` from qemu's instruction count, `CPU_CYCLES` from its virtual
/// clock, one cycle per instruction there), doctor's row saying so: `__task_pid_nr_ns` under getpid in fentry mode
/// with `--counter instructions --counter cycles`. On one CPU every call's counts are kept
/// (none migrates); each count encloses the call's timed window, and by the same amount as
/// in the calibration's near-empty function: the PMU's instructions and the guest clock's
/// (which counts instructions too, in 16 ns ticks of arm64's timer) agree on what lies
/// between them. Cycles count what instructions count, within a few per call (the second
/// event is read after the first).
pub fn arm64_pmu_counter(ctx: &mut Ctx) -> Result<()> {
    let guest = ctx.run_on_instruction_clock(&format!(
        "hotprof doctor; hotprof --fn __task_pid_nr_ns --mode fentry --counter instructions \
         --counter cycles --json /out/pmu.json -- syscall_lat {CALLS} 2>/out/pmu_err.txt; \
         echo pmu_rc=$?"
    ))?;
    let (status, found) = row(&guest, "PMU events")?;
    ensure!(
        status == "yes" && found.starts_with("instructions, cycles count"),
        "doctor's PMU row: {status} ({found}), want instructions and cycles counted"
    );
    let out = &guest.outcome.out_dir;
    let stderr = fs::read_to_string(out.join("pmu_err.txt")).unwrap_or_default();
    ensure!(
        guest.outcome.stdout.contains("pmu_rc=0"),
        "the --counter run failed: {stderr}"
    );
    let recording: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(out.join("pmu.json")).context("reading pmu.json")?,
    )?;
    let function = &recording["functions"][0];
    let number = |value: &serde_json::Value, what: &str| -> Result<f64> {
        value
            .as_f64()
            .with_context(|| format!("{what} missing in pmu.json: {function}"))
    };
    let calls = number(&function["count"], "count")?;
    ensure!(
        calls >= CALLS as f64,
        "{calls} calls timed, want at least the {CALLS} getpids"
    );
    let latency_min = number(&function["min_ns"], "min_ns")?;
    let latency_bias = number(&recording["probe_bias_ns"], "probe_bias_ns")?;
    let counter = |index: usize, event: &str| -> Result<(f64, f64, f64)> {
        let counter = &function["counters"][index];
        ensure!(
            counter["event"] == event,
            "counter {index} is {}, want {event}",
            counter["event"]
        );
        let counted = number(&counter["count"], "a counter's count")?;
        ensure!(
            counted == calls,
            "{event}: {counted} of {calls} calls counted on one CPU"
        );
        Ok((
            number(&counter["min"], "a counter's min")?,
            number(&counter["mean"], "a counter's mean")?,
            number(&counter["bias"], "a counter's bias")?,
        ))
    };
    let (instructions_min, instructions_mean, instructions_bias) = counter(0, "instructions")?;
    let (cycles_min, cycles_mean, _) = counter(1, "cycles")?;
    // What the count spans beyond the timed window, in the run and in the calibration.
    let outside_run = instructions_min - latency_min;
    let outside_calibration = instructions_bias - latency_bias;
    eprintln!(
        "    instructions per call: min {instructions_min}, mean {instructions_mean:.1}; \
         latency min {latency_min} ns; outside the timed window {outside_run} (calibration \
         {outside_calibration}); cycles min {cycles_min}, mean {cycles_mean:.1}"
    );
    ensure!(
        outside_run > 0.0,
        "the fewest instructions counted ({instructions_min}) are not above the shortest \
         call ({latency_min} ns = instructions on this clock): the count does not enclose the call"
    );
    // Two of arm64's 16 ns timer ticks: the clock's granularity at each of two reads.
    ensure!(
        (outside_run - outside_calibration).abs() <= 32.0,
        "the count spans {outside_run} instructions beyond the call's timed window here, \
         {outside_calibration} in the calibration: the PMU and the clock disagree"
    );
    ensure!(
        (cycles_mean - instructions_mean).abs() <= 0.02 * instructions_mean,
        "cycles per call {cycles_mean:.1} vs instructions {instructions_mean:.1}: one cycle \
         per instruction on this clock"
    );
    Ok(())
}
