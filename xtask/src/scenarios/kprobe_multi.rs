//! kprobe mode through the kprobe.multi link (5.18+): exact counts with the link, beside perf
//! kprobes for what ftrace cannot trace, with a thousand functions at once, with the
//! per-call features (`--by caller`, `--filter`, `--slowest`, `--stacks`, recursion); a
//! signal during a long attach; and the fallback to perf kprobes on a kernel without the link.

use anyhow::{Context, Result, ensure};

use super::harness::{Ctx, Guest};
use crate::kernels::Kernel;

const CALLS: u64 = 5_000;

/// Writes `traceable_F=0|1` for getpid's two kernel functions: which ones ftrace lists (the
/// link takes only those; `__x64_sys_getpid` is not listed on 6.12).
pub(super) const TRACEABLE: &str = r#"T=/sys/kernel/tracing
for f in __x64_sys_getpid __do_sys_getpid; do echo "traceable_$f=$(grep -c "^$f\$" $T/available_filter_functions)"; done
"#;

/// Whether the guest's ftrace lists `function`.
fn traceable(guest: &Guest, function: &str) -> Result<bool> {
    let lines = guest.lines_containing(&format!("traceable_{function}="));
    let line = lines.first().context("no traceable_ line")?;
    Ok(line.trim().ends_with("=1"))
}

/// The `mode` of a report, and its count of `function`.
fn mode_and_count(guest: &Guest, file: &str, function: &str) -> Result<(String, u64)> {
    let report = guest.report(file)?;
    let mode = report.json["mode"].as_str().context("no mode")?.to_owned();
    Ok((mode, report.function(function)?.u64("count")?))
}

/// 6.12, 7.x: getpid's two functions counted exactly, `__do_sys_getpid` through the
/// link and `__x64_sys_getpid` as a perf kprobe where ftrace does not list it (the report's
/// mode says `kprobe.multi+kprobe`, a note says why), and both through perf kprobes with
/// `--no-kprobe-multi`; 1000 functions attach through the link and still count getpid
/// exactly; `--filter` on the return value (rax at the return) keeps or drops every call;
/// `--slowest` keeps 2; `--stacks` folds every call under `__do_sys_getpid` with no probe frame (fprobe's
/// handlers) in it; `--by caller` names the same return address for every call as perf
/// kprobes and fentry do (read at `*(regs->sp)`, which holds under fprobe's saved registers
/// too); the recursive `__ep_eventpoll_poll` (nested epoll; alone, so `--no-kprobe-session`
/// keeps it on the frames) times each frame, as fexit's innermost-frame rule must; and no
/// ftrace-enabled function is left afterwards.
pub(super) fn kprobe_multi_exact(ctx: &mut Ctx) -> Result<()> {
    const ITERS: u64 = 200;
    // Eleven runs, one of 1000 functions: longer than the default timeout under TCG.
    let guest = ctx.run_with_timeout(
        &format!(
        r#"{TRACEABLE}
hotprof --fn __do_sys_getpid --fn __x64_sys_getpid --mode kprobe --no-calibrate --json /out/mixed.json -- syscall_lat {CALLS} > /out/mixed.txt 2>&1 || exit 1
hotprof --fn __do_sys_getpid --fn __x64_sys_getpid --mode kprobe --no-kprobe-multi --no-calibrate --json /out/single.json -- syscall_lat {CALLS} > /out/single.txt 2>&1 || exit 1
awk '{{print $1}}' $T/available_filter_functions | grep -v '\.' | sort | uniq -u > /tmp/traceable
awk '{{print $2}}' /sys/kernel/debug/kprobes/blacklist | sort -u > /tmp/blacklist
grep -E '^(acpi|pci|input|rtc|dmi|efi|thermal|cpufreq)_' /tmp/traceable | grep -vxF -f /tmp/blacklist | head -n 999 > /tmp/cold
echo "cold=$(grep -c . /tmp/cold)"
hotprof --fn __do_sys_getpid $(sed 's/^/--fn /' /tmp/cold) --mode kprobe --no-calibrate --json /out/glob.json -- syscall_lat {CALLS} > /out/glob.txt 2>&1 || exit 1
hotprof --fn __do_sys_getpid --mode kprobe --filter 'ret>0' --slowest 2 --stacks --folded /out/getpid.folded --weight count --no-calibrate --json /out/features.json -- syscall_lat {CALLS} || exit 1
hotprof --fn __do_sys_getpid --mode kprobe --filter 'ret==0' --no-calibrate --json /out/none.json -- syscall_lat {CALLS} || exit 1
hotprof --fn __do_sys_getpid --mode kprobe --by caller --no-calibrate --json /out/caller.json -- syscall_lat {CALLS} || exit 1
hotprof --fn __do_sys_getpid --mode kprobe --no-kprobe-multi --by caller --no-calibrate --json /out/caller_perf.json -- syscall_lat {CALLS} || exit 1
hotprof --fn __do_sys_getpid --mode fentry --by caller --no-calibrate --json /out/caller_fentry.json -- syscall_lat {CALLS} || exit 1
hotprof --fn __ep_eventpoll_poll --mode kprobe --no-kprobe-session --no-calibrate --json /out/nested.json -- epoll_nest 3 {ITERS} || exit 1
echo "enabled_after=$(grep -c . $T/enabled_functions)"
"#
        ),
        std::time::Duration::from_secs(600),
    )?;
    guest.expect_exit(0)?;
    let x64_traceable = traceable(&guest, "__x64_sys_getpid")?;
    ensure!(
        traceable(&guest, "__do_sys_getpid")?,
        "ftrace does not list __do_sys_getpid: nothing to attach the link to"
    );

    // Two functions, one run: each exactly once per getpid, whichever way it was attached.
    let report = guest.report("mixed.json")?;
    let want_mode = if x64_traceable {
        "kprobe.multi"
    } else {
        "kprobe.multi+kprobe"
    };
    ensure!(
        report.json["mode"] == want_mode,
        "mixed run: mode {}, want {want_mode}",
        report.json["mode"]
    );
    for function in ["__do_sys_getpid", "__x64_sys_getpid"] {
        let count = report.function(function)?.u64("count")?;
        ensure!(
            count == CALLS,
            "mixed run: {function} counted {count}, want {CALLS}"
        );
    }
    let mixed = std::fs::read_to_string(guest.outcome.out_dir.join("mixed.txt"))?;
    let notes: Vec<&str> = mixed
        .lines()
        .filter(|l| l.contains("not in available_filter_functions, which kprobe.multi"))
        .collect();
    ensure!(
        notes.len() == usize::from(!x64_traceable),
        "want {} note(s) about functions left to perf kprobes, got {notes:?}",
        usize::from(!x64_traceable)
    );

    // The old path on request, exactly as before.
    let report = guest.report("single.json")?;
    ensure!(
        report.json["mode"] == "kprobe",
        "--no-kprobe-multi: mode {}, want kprobe",
        report.json["mode"]
    );
    for function in ["__do_sys_getpid", "__x64_sys_getpid"] {
        let count = report.function(function)?.u64("count")?;
        ensure!(
            count == CALLS,
            "--no-kprobe-multi: {function} counted {count}, want {CALLS}"
        );
    }

    // A thousand functions (getpid's and 999 ftrace lists that the guest hardly runs) through
    // the link, getpid among them counted exactly.
    let cold = guest.lines_containing("cold=");
    ensure!(
        cold.iter().any(|l| l.trim() == "cold=999"),
        "want 999 rarely-run traceable functions, got {cold:?}"
    );
    let report = guest.report("glob.json")?;
    let attached = report.json["functions"].as_array().map_or(0, Vec::len);
    ensure!(
        attached == 1000 && report.json["mode"] == "kprobe.multi",
        "want 1000 functions through the link, got {attached} in mode {}",
        report.json["mode"]
    );
    let count = report.function("__do_sys_getpid")?.u64("count")?;
    ensure!(
        count == CALLS,
        "with {attached} functions attached, __do_sys_getpid counted {count}, want {CALLS}"
    );

    // --filter, --slowest, --stacks through the link.
    let (mode, count) = mode_and_count(&guest, "features.json", "__do_sys_getpid")?;
    ensure!(
        mode == "kprobe.multi" && count == CALLS,
        "--filter ret>0: {mode} counted {count}, want kprobe.multi and {CALLS}"
    );
    let features = guest.report("features.json")?;
    let slowest = features.json["functions"]
        .as_array()
        .and_then(|f| f.first())
        .and_then(|f| f["slowest"].as_array())
        .map_or(0, Vec::len);
    ensure!(slowest == 2, "--slowest 2 kept {slowest} calls");
    let folded = std::fs::read_to_string(guest.outcome.out_dir.join("getpid.folded"))
        .context("no folded stacks")?;
    let mut folded_calls = 0;
    for line in folded.lines() {
        let (stack, calls) = line
            .rsplit_once(' ')
            .context("a folded line without a count")?;
        folded_calls += calls.parse::<u64>().context("a folded count")?;
        let leaf = stack.rsplit(';').next().unwrap_or_default();
        ensure!(
            leaf.starts_with("__do_sys_getpid"),
            "a stack ends in {leaf}, not at the probed function: {line}"
        );
        ensure!(
            !["fprobe", "kprobe_multi", "bpf_prog", "rethook", "ftrace"]
                .iter()
                .any(|probe| stack.contains(probe)),
            "a stack holds the probe's own frames: {line}"
        );
    }
    ensure!(
        folded_calls == CALLS,
        "the folded stacks hold {folded_calls} calls, want {CALLS}"
    );
    let none = guest.report("none.json")?;
    let count = none.function("__do_sys_getpid")?.u64("count")?;
    let not_matched = none.json["filter"]["not_matched"].as_u64().unwrap_or(0);
    ensure!(
        count == 0 && not_matched >= CALLS,
        "--filter ret==0: counted {count} and {not_matched} not matched, want 0 and at least \
         {CALLS}"
    );

    // The caller, read from the entry's stack pointer under fprobe: the same return address
    // as a perf kprobe's and fentry's, for every call.
    let mut sites = Vec::new();
    for file in ["caller.json", "caller_perf.json", "caller_fentry.json"] {
        let report = guest.report(file)?;
        let rows = report.json["functions"][0]["callers"]
            .as_array()
            .with_context(|| format!("{file}: no per-caller rows"))?;
        let busiest = rows
            .first()
            .with_context(|| format!("{file}: no per-caller rows"))?;
        let site = busiest["site"].as_str().unwrap_or_default().to_owned();
        let calls = busiest["count"].as_u64().unwrap_or(0);
        ensure!(
            calls == CALLS && site.contains("+0x"),
            "{file}: the caller of __do_sys_getpid is {site} with {calls} calls, want one \
             return address with all {CALLS}"
        );
        sites.push(site);
    }
    ensure!(
        sites.iter().all(|site| *site == sites[0]),
        "kprobe.multi, perf kprobes and fentry name different callers: {sites:?}"
    );

    // Recursion: nested epoll, each frame timed and closed by its own return.
    let nested = guest.report("nested.json")?;
    let function = nested.function("__ep_eventpoll_poll")?;
    let (count, outer) = (function.u64("count")?, function.u64("outer_count")?);
    ensure!(
        count == 3 * ITERS + 3 && outer == ITERS + 2,
        "nested epoll: {count} frames, {outer} outermost, want {} and {}",
        3 * ITERS + 3,
        ITERS + 2
    );
    ensure!(
        function.u64("self_sum_ns")? == function.u64("outer_sum_ns")?,
        "nested epoll: self times do not add up to the outermost frames' time"
    );
    let losses = &nested.json["losses"];
    ensure!(
        losses["unmatched_returns"] == 0 && losses["orphaned_frames"] == 0,
        "nested epoll lost frames: {losses}"
    );

    let after = guest.lines_containing("enabled_after=");
    ensure!(
        after.iter().any(|l| l.trim().ends_with("=0")),
        "ftrace functions still enabled after every run: {after:?}"
    );
    Ok(())
}

/// A signal while hotprof attaches: SIGTERM during a long perf-kprobe attach stops it with one
/// line saying how far it got (some but not all kretprobes), a non-zero exit, and no kprobe
/// left; SIGTERM during start-up says nothing was attached yet; SIGTERM once the link is
/// attached gives the usual report; and afterwards no kprobe, no ftrace-enabled function and
/// no hotprof program is left.
pub(super) fn kprobe_multi_signals(ctx: &mut Ctx) -> Result<()> {
    let guest = ctx.run(
        r#"T=/sys/kernel/tracing
K=/sys/kernel/debug/kprobes/list
hotprof --fn 'acpi_*' --fn 'pci_*' --max-functions 5000 --mode kprobe --no-kprobe-multi --no-calibrate -- sleep 600 > /out/long.txt 2>&1 &
pid=$!
for i in $(seq 1 3000); do [ "$(grep -c . $K)" -gt 20 ] && break; sleep 0.1; done
echo "kprobes_during=$(grep -c . $K)"
kill -TERM $pid; wait $pid; echo "long_rc=$?"
echo "kprobes_after_long=$(grep -c . $K)"
hotprof --fn 'vfs_*' --mode kprobe --no-calibrate -- sleep 600 > /out/early.txt 2>&1 &
pid=$!
sleep 1; kill -TERM $pid; wait $pid; echo "early_rc=$?"
hotprof --fn 'vfs_*' --mode kprobe --no-calibrate -- sleep 600 > /out/late.txt 2>&1 &
pid=$!
for i in $(seq 1 600); do grep -q attached /out/late.txt && break; sleep 0.1; done
echo "enabled_during=$(grep -c . $T/enabled_functions)"
kill -TERM $pid; wait $pid; echo "late_rc=$?"
echo "kprobes_after=$(grep -c . $K) enabled_after=$(grep -c . $T/enabled_functions)"
# Programs are freed after an RCU grace period: give them the time the other scenarios do.
for i in $(seq 1 10); do hotprof status > /dev/null && break; sleep 1; done
hotprof status > /dev/null; echo "status_after=$?"
"#,
    )?;
    guest.expect_exit(0)?;
    let field = |name: &str| -> Result<u64> {
        let lines = guest.lines_containing(&format!("{name}="));
        let line = lines.first().with_context(|| format!("no {name}= line"))?;
        let value = line
            .split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .with_context(|| format!("no {name}= in {line}"))?;
        value.parse().with_context(|| format!("{name}={value}"))
    };
    let read = |file: &str| std::fs::read_to_string(guest.outcome.out_dir.join(file));

    // The long attach, cut short.
    ensure!(
        field("kprobes_during")? > 20,
        "the long attach never got going"
    );
    ensure!(
        field("long_rc")? != 0,
        "interrupted, hotprof still exited 0"
    );
    let long = read("long.txt")?;
    let line = long
        .lines()
        .find(|l| l.contains("interrupted by SIGTERM while attaching, after "))
        .with_context(|| format!("no line saying the attach was interrupted:\n{long}"))?;
    let progress = line
        .split("after ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_default();
    let numbers: Vec<u64> = progress
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    ensure!(
        matches!(numbers.as_slice(), [done, total] if *done > 0 && done < total)
            && progress.ends_with("kretprobes"),
        "want 'after N of M kretprobes' with 0 < N < M, got '{progress}'"
    );
    ensure!(
        line.contains("every probe attached so far was detached") && long.lines().count() <= 2,
        "the interruption is not one line saying everything was detached:\n{long}"
    );
    ensure!(
        field("kprobes_after_long")? == 0,
        "kprobes left after the interrupted attach"
    );

    // Start-up, cut short: nothing attached yet, said so.
    let early = read("early.txt")?;
    ensure!(
        field("early_rc")? != 0 && early.contains("interrupted by SIGTERM while attaching"),
        "SIGTERM during start-up:\n{early}"
    );

    // Attached through the link: SIGTERM is the usual end of a run, with its report.
    ensure!(
        field("enabled_during")? > 0,
        "no ftrace-enabled function while the link was attached"
    );
    let late = read("late.txt")?;
    // 128 + SIGTERM: the workload's exit, ended by the signal hotprof passed on.
    ensure!(
        field("late_rc")? == 143
            && late.contains("kprobe.multi")
            && late.lines().any(|l| l.starts_with("losses:")),
        "SIGTERM after attaching through the link: want exit 143 and the report:\n{late}"
    );
    ensure!(
        field("kprobes_after")? == 0 && field("enabled_after")? == 0,
        "probes left behind: {:?}",
        guest.lines_containing("kprobes_after=")
    );
    ensure!(
        field("status_after")? == 0,
        "hotprof status still sees hotprof programs"
    );
    Ok(())
}

/// Kernels without kprobe.multi links: 5.10 (before 5.18: its verifier does not even know
/// `bpf_get_attach_cookie`) and Debian 12's 6.1 (built without `CONFIG_FPROBE`: the link is
/// refused with EOPNOTSUPP). kprobe mode falls back to a perf kprobe per function, says why
/// in one note, labels the mode `kprobe`, and counts exactly. A lone function (which would
/// go through a kprobe.session link from 6.10 on) falls back the same way: no kprobe.session
/// there, and nothing said about it.
pub(super) fn kprobe_multi_fallback(ctx: &mut Ctx) -> Result<()> {
    let why = match ctx.kernel() {
        Kernel::V5_10 => "this kernel has no bpf_get_attach_cookie (Linux 5.15)",
        Kernel::V6_1 => {
            "the kernel refused a kprobe.multi link: `bpf_link_create` failed: \
                         Operation not supported (os error 95)"
        }
        other => anyhow::bail!("no fallback expected on {}", other.name()),
    };
    let guest = ctx.run(&format!(
        "hotprof --fn __x64_sys_getpid --fn __do_sys_getpid --mode kprobe --no-calibrate \
         --json /out/r.json -- syscall_lat {CALLS} || exit 1
         hotprof --fn __do_sys_getpid --mode kprobe --no-calibrate --json /out/lone.json \
         -- syscall_lat {CALLS}"
    ))?;
    guest.expect_exit(0)?;
    let notes = guest.lines_containing("using a perf kprobe/kretprobe per function instead");
    ensure!(
        notes.len() == 2 && notes.iter().all(|note| note.contains(why)),
        "want one note per run saying '{why}', got {notes:?}"
    );
    let session = guest.lines_containing("kprobe.session");
    ensure!(
        session.is_empty(),
        "kprobe.session named on a kernel without it: {session:?}"
    );
    for (file, functions) in [
        ("r.json", &["__x64_sys_getpid", "__do_sys_getpid"][..]),
        ("lone.json", &["__do_sys_getpid"][..]),
    ] {
        let report = guest.report(file)?;
        ensure!(
            report.json["mode"] == "kprobe",
            "{file}: mode {}, want kprobe",
            report.json["mode"]
        );
        for function in functions {
            let count = report.function(function)?.u64("count")?;
            ensure!(
                count == CALLS,
                "{file}: {function} counted {count}, want {CALLS}"
            );
        }
    }
    Ok(())
}
