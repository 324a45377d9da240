//! Call-site mode: notrace functions timed at their callers' call instructions.

use anyhow::{Context, Result, ensure};

use super::harness::{Ctx, caller_rows, write_copy_function};

/// Call-site mode times the seeds' notrace functions exactly: the page-cache write copy (auto
/// mode picks call sites for it, beside fentry for its caller `generic_perform_write`) once
/// per write, inside its caller's time; `_copy_to_user` once per fstat from `cp_new_stat`
/// (`--callers` narrows its hundreds of sites to that one). Bad inputs are one line each, and
/// SIGKILL leaves no kprobe behind.
pub(super) fn callsite_exact(ctx: &mut Ctx) -> Result<()> {
    const STATS: u64 = 5_000;
    let copy = write_copy_function(ctx.kernel());
    let guest = ctx.run(&format!(
        r#"
hotprof --fn generic_perform_write --fn {copy} --json /out/w.json -- tmpfs_write /tmp/w 4 || exit 1
hotprof --fn _copy_to_user --callers 'cp_new_stat*' --json /out/u.json -- stat_loop {STATS} /tmp || exit 1
bad() {{ "$@" 2>/out/bad_err.txt >/dev/null; echo "bad_rc=$? lines=$(wc -l </out/bad_err.txt) $(cat /out/bad_err.txt)"; }}
bad hotprof --fn {copy} --callers 'no_such_caller*' -- true
bad hotprof --mode callsite --fn shmem_file_read_iter -- true
bad hotprof --fn vfs_read --callers 'ksys_*' -- true
hotprof --fn {copy} --no-calibrate -- sleeper 100000 10000 > /out/run.txt 2>&1 &
pid=$!
for i in $(seq 1 60); do grep -q attached /out/run.txt && break; sleep 1; done
hotprof status > /dev/null; echo "during=$?"
kill -9 $pid; wait $pid
for i in $(seq 1 10); do hotprof status > /dev/null && break; sleep 1; done
hotprof status > /dev/null; echo "after=$?"
if pidof sleeper > /dev/null; then echo orphan; kill -9 $(pidof sleeper); fi
true
"#
    ))?;
    guest.expect_exit(0)?;
    let writes = guest.workload("tmpfs_write")?.u64("writes")?;
    let report = guest.report("w.json")?;
    let mode = report.json["mode"].as_str().unwrap_or_default();
    ensure!(
        mode.ends_with("+callsite"),
        "mode is {mode}, want ENTRY+callsite"
    );
    let outer = report.function("generic_perform_write")?;
    let inner = report.function(copy)?;
    for (function, fields) in [("generic_perform_write", &outer), (copy, &inner)] {
        let count = fields.u64("count")?;
        ensure!(
            count == writes,
            "{function} counted {count} calls for {writes} writes"
        );
    }
    ensure!(
        inner.u64("p50_ns")? < outer.u64("p50_ns")?,
        "{copy}'s p50 is not below its caller's"
    );
    ensure!(
        inner.u64("sum_ns")? <= outer.u64("sum_ns")?,
        "{copy}'s total time exceeds its caller's"
    );
    let callers = caller_rows(&report, copy)?;
    let busiest = callers.first().context("no per-caller rows")?;
    ensure!(
        busiest.0.starts_with("generic_perform_write+0x") && busiest.1 == writes,
        "the busiest call site of {copy} is {busiest:?}, want generic_perform_write+0x… with          {writes} calls"
    );
    ensure!(
        callers.iter().skip(1).all(|(_, calls)| *calls == 0),
        "other call sites of {copy} counted calls: {callers:?}"
    );

    let stats = guest.workload("stat_loop")?.u64("calls")?;
    let report = guest.report("u.json")?;
    let count = report.function("_copy_to_user")?.u64("count")?;
    // stat_loop's fstats, and the one its C runtime makes at start-up (its usage says so).
    ensure!(
        count == stats + 1,
        "_copy_to_user counted {count} calls for {stats} fstats (+1 at start-up)"
    );
    let callers = caller_rows(&report, "_copy_to_user")?;
    ensure!(
        callers.len() == 1 && callers[0].0.starts_with("cp_new_stat+0x"),
        "--callers 'cp_new_stat*' kept these sites: {callers:?}"
    );
    ensure!(
        report.json["probe_overhead_ns"]
            .as_f64()
            .is_some_and(|ns| ns > 0.0),
        "call-site mode's overhead was not calibrated: {}",
        report.json["probe_overhead_ns"]
    );

    for (what, expected) in [
        ("no_such_caller", "matches no caller of"),
        ("shmem_file_read_iter", "has no direct callers"),
        (
            "ksys_",
            "--callers applies to functions timed at their call sites",
        ),
    ] {
        let lines = guest.lines_containing(expected);
        ensure!(
            lines.len() == 1 && lines[0].starts_with("bad_rc=1 lines=1 "),
            "{what}: want one line saying {expected:?} and exit 1, got {lines:?}"
        );
    }
    for (line, what) in [
        (
            "during=1",
            "hotprof status did not see the call-site probes",
        ),
        ("after=0", "call-site probes left behind after SIGKILL"),
    ] {
        ensure!(guest.lines_containing(line).len() == 1, "{what}");
    }
    Ok(())
}
