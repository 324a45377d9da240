//! Faults while attached (issue #34): the machine changes under hotprof and its promises
//! (exact counts, counted losses, nothing left in the kernel) still hold.

use anyhow::{Context, Result, ensure};

use super::harness::{Ctx, Report};

/// getpid calls per phase.
const CALLS: u64 = 5_000;
// `--comm syscall_lat-0`: the workload's calling thread (syscall_lat names its threads), not
// the shell between the phases, which calls getpid too.

/// CPU hotplug: the 2-vCPU guest's CPU 1 taken offline mid-run and brought back. getpid is
/// called `CALLS` times on CPU 1 (pinned), then on CPU 0 with CPU 1 offline, then on CPU 1
/// again, under fentry (fsession on 7.x) and the syscall tracepoints. Every call is counted
/// (those on CPU 1 before it went stay in its per-CPU slots, read after it is back, or while it
/// is away: hotprof reads every possible CPU's), `--by cpu` puts each phase on its CPU, the
/// probes fire after CPU 1 returns, hotprof exits 0 with no loss, and nothing is left.
pub(super) fn cpu_hotplug_exact(ctx: &mut Ctx) -> Result<()> {
    let phases = format!(
        "taskset 2 syscall_lat {CALLS}; echo 0 > /sys/devices/system/cpu/cpu1/online; \
         syscall_lat {CALLS}; cat /sys/devices/system/cpu/online; \
         echo 1 > /sys/devices/system/cpu/cpu1/online; taskset 2 syscall_lat {CALLS}"
    );
    let guest = ctx.run(&format!(
        r#"hotprof --fn __do_sys_getpid --comm syscall_lat-0 --by cpu --no-calibrate --json /out/fn.json -- sh -c '{phases}' > /out/fn.txt 2>&1
echo "fn_rc=$?"
cat /out/fn.txt
hotprof --syscall getpid --comm syscall_lat-0 --by cpu --no-calibrate --json /out/sys.json -- sh -c '{phases}' > /out/sys.txt 2>&1
echo "sys_rc=$?"
cat /out/sys.txt
hotprof status > /dev/null; echo "status_after=$?"
"#
    ))?;
    guest.expect_exit(0)?;
    for line in ["fn_rc=0", "sys_rc=0", "status_after=0"] {
        ensure!(
            !guest.lines_containing(line).is_empty(),
            "want {line}: {:?}",
            guest.lines_containing(line.split('=').next().unwrap_or(line))
        );
    }
    let offline = guest
        .outcome
        .stdout
        .lines()
        .filter(|line| line.trim() == "0")
        .count();
    ensure!(
        offline == 2,
        "/sys/devices/system/cpu/online read `0` (CPU 1 offline) {offline} times, want 2"
    );
    for (file, name) in [("fn.json", "__do_sys_getpid"), ("sys.json", "getpid")] {
        let report = guest.report(file)?;
        check_phases(&report, file, name)?;
    }
    Ok(())
}

/// Every phase's calls, each on its CPU, and no loss.
fn check_phases(report: &Report, file: &str, name: &str) -> Result<()> {
    let count = report.function(name)?.u64("count")?;
    ensure!(
        count == 3 * CALLS,
        "{file}: {count} {name} calls, want {} (3 phases of {CALLS})",
        3 * CALLS
    );
    let losses = super::kprobe_session::nonzero_losses(report);
    ensure!(losses.is_empty(), "{file}: losses {losses:?}");
    let functions = report.json["functions"]
        .as_array()
        .context("no functions array")?;
    let keys = functions
        .iter()
        .find(|f| f["name"] == name)
        .and_then(|f| f["keys"].as_array())
        .with_context(|| format!("{file}: {name} has no keys"))?;
    let on = |cpu: &str| {
        keys.iter()
            .find(|k| k["key"][0] == cpu)
            .and_then(|k| k["count"].as_u64())
            .unwrap_or(0)
    };
    ensure!(
        on("1") == 2 * CALLS && on("0") == CALLS,
        "{file}: {} calls on CPU 1 and {} on CPU 0, want {} (before and after it was offline) \
         and {CALLS}: keys {keys:?}",
        on("1"),
        on("0"),
        2 * CALLS
    );
    Ok(())
}
