//! How hotprof ends: nothing left in the kernel after any signal, and `hotprof serve` ended by
//! SIGTERM.

use std::fs;

use anyhow::{Context, Result, ensure};

use super::harness::{Ctx, Guest};

/// Whatever ends hotprof — SIGINT, SIGTERM, SIGKILL, or its workload being killed — no
/// hotprof program and no kprobe stays in the kernel, and the workload does not outlive it.
/// `hotprof status` (which exits 1 while anything is loaded) is checked to see the probes
/// while hotprof runs, so the "after" check cannot pass vacuously.
pub(super) fn cleanup_on_signals(ctx: &mut Ctx) -> Result<()> {
    let cases = ["INT", "TERM", "KILL", "WORKLOAD"];
    let guest = ctx.run(&signals_script("--fn vfs_read --mode kprobe", &cases))?;
    check_signals(&guest, &cases)?;
    ensure!(
        guest.lines_containing("exit_WORKLOAD=137").len() == 1,
        "a killed workload's status must be passed on (137)"
    );
    Ok(())
}

/// A script that starts `hotprof ARGS -- sleeper …` once per case and ends it: `INT`, `TERM`
/// or `KILL` sends hotprof that signal, `WORKLOAD` kills its workload. Each case prints
/// `during_CASE=`, `exit_CASE=`, `after_CASE=` and, if the workload outlived hotprof,
/// `orphan_CASE` (see [`check_signals`]).
pub(super) fn signals_script(args: &str, cases: &[&str]) -> String {
    let mut script = format!(
        r#"
start() {{
  # The last case's output goes first: the background job truncates it only once it runs,
  # and a look before that found the last case's `attached` (seen in a rehearsal: TERM's
  # status ran before its hotprof had attached).
  rm -f /out/run.txt
  hotprof {args} --no-calibrate -- sleeper 100000 10000 > /out/run.txt 2>&1 &
  pid=$!
  for i in $(seq 1 60); do grep -q attached /out/run.txt 2> /dev/null && break; sleep 1; done
  hotprof status > /dev/null; echo "during_$1=$?"
}}
after() {{
  for i in $(seq 1 10); do hotprof status > /out/after_$1.txt && break; sleep 1; done
  hotprof status > /dev/null; echo "after_$1=$?"
  if pidof sleeper > /dev/null; then echo "orphan_$1"; kill -9 $(pidof sleeper); fi
}}
"#
    );
    for case in cases {
        let end = if *case == "WORKLOAD" {
            "kill -9 $(pidof sleeper)".to_owned()
        } else {
            format!("kill -{case} $pid")
        };
        script.push_str(&format!(
            "start {case}; {end}; wait $pid; echo \"exit_{case}=$?\"; after {case}\n"
        ));
    }
    script
}

/// Each case of [`signals_script`]: hotprof status saw the probes while hotprof ran (so the
/// "after" check cannot pass vacuously), nothing was left once it ended, and the workload
/// did not outlive it.
pub(super) fn check_signals(guest: &Guest, cases: &[&str]) -> Result<()> {
    for case in cases {
        ensure!(
            guest.lines_containing(&format!("during_{case}=1")).len() == 1,
            "{case}: hotprof status did not see the probes while hotprof ran"
        );
        ensure!(
            guest.lines_containing(&format!("after_{case}=0")).len() == 1,
            "{case}: probes or programs left behind after hotprof ended"
        );
        ensure!(
            guest.lines_containing(&format!("orphan_{case}")).is_empty(),
            "{case}: the workload outlived hotprof"
        );
    }
    Ok(())
}

/// `hotprof serve` with a kprobe (what the host cannot do): a scrape after the workload's end
/// shows its exact count, `hotprof status` sees the probes while serving, and SIGTERM (what
/// systemd sends) ends it with exit 0, the `--json` written and nothing left in the kernel.
pub(super) fn serve_kprobe(ctx: &mut Ctx) -> Result<()> {
    const CALLS: u64 = 20_000;
    let script = format!(
        r#"
ip link set lo up
hotprof serve --listen 127.0.0.1:9435 --fn __x64_sys_getpid --mode kprobe --no-calibrate \
  --json /out/serve.json -- syscall_lat {CALLS} > /out/serve.txt 2>&1 &
pid=$!
for i in $(seq 1 90); do
  wget -qO /out/metrics.txt http://127.0.0.1:9435/metrics 2>/dev/null \
    && grep -q '_count{{.*}} {CALLS}$' /out/metrics.txt && break
  sleep 1
done
hotprof status > /dev/null; echo "during=$?"
kill -TERM $pid; wait $pid; echo "serve_exit=$?"
for i in $(seq 1 10); do hotprof status > /dev/null && break; sleep 1; done
hotprof status > /dev/null; echo "after=$?"
"#
    );
    let guest = ctx.run(&script)?;
    let metrics = fs::read_to_string(guest.outcome.out_dir.join("metrics.txt"))
        .context("no scrape answered")?;
    let series = "hotprof_function_latency_seconds_count{function=\"__x64_sys_getpid\",symbol=\"__x64_sys_getpid\",mode=\"kprobe\",kernel=\"";
    ensure!(
        metrics
            .lines()
            .any(|l| l.starts_with(series) && l.ends_with(&format!("}} {CALLS}"))),
        "no scrape showed {CALLS} calls:\n{metrics}"
    );
    for (line, what) in [
        (
            "during=1",
            "hotprof status did not see the probes while serving",
        ),
        ("serve_exit=0", "hotprof serve did not exit 0 on SIGTERM"),
        ("after=0", "probes or programs left behind after SIGTERM"),
    ] {
        ensure!(guest.lines_containing(line).len() == 1, "{what}");
    }
    let count = guest
        .report("serve.json")?
        .function("__x64_sys_getpid")?
        .u64("count")?;
    ensure!(
        count == CALLS,
        "the exit --json counted {count} calls, want exactly {CALLS}"
    );
    Ok(())
}
