//! `hotprof top --fn` in a guest (issue #33): the host's `host_top` drives it in tmux on
//! syscall tracepoints; the guests have kprobes but no tmux, so `pty_run` (a workload) gives
//! it a pseudo-terminal, types its keys and prints its screens.

use anyhow::{Context, Result, ensure};

use super::harness::{Ctx, Fields, Guest};
use crate::top_screen::{histogram_calls, row_names, since_start_calls};

/// getpid calls the workload makes.
const CALLS: u64 = 300_000;
/// Both time every getpid: the syscall's wrapper and its body.
const FUNCTIONS: [&str; 2] = ["__do_sys_getpid", "__x64_sys_getpid"];

/// The table once the workload has exited and a refresh has followed (the first refresh
/// comes a second after start: keys before it find no rows), then `n` (sort by name: the
/// first row, selected, is `__do_sys_getpid`) and Enter: its histogram; Escape, q. Then a
/// second `top` on an endless workload, stopped by Ctrl-C.
const STEPS: &str = "until:exited with code 0;sleep:1500;screen;key:n;key:Enter;\
                     until:latency since start;sleep:300;screen;key:Escape;until:NAME;key:q";
const STOP_STEPS: &str = "until:NAME;sleep:2500;screen;key:C-c";

/// kprobe mode (kprobe.multi): on 7.x, whose kernel code is preemptible, fentry programs
/// preempted mid-run make the kernel skip calls (counted, but not the exact rows this checks).
pub(super) fn top_in_guest(ctx: &mut Ctx) -> Result<()> {
    let functions = FUNCTIONS.join(",");
    let guest = ctx.run(&format!(
        r#"export TERM=xterm-256color
pty_run 160x40 '{STEPS}' -- hotprof top --mode kprobe --fn {functions} -- syscall_lat {CALLS}
echo "top_rc=$?"
pty_run 160x40 '{STOP_STEPS}' -- hotprof top --mode kprobe --fn {functions} -- syscall_lat 100000000000 | sed 's/^pty_run: exit/stopped: exit/'
echo "workloads_left=$(pidof syscall_lat | wc -w)"
hotprof status > /dev/null; echo "status_after=$?"
"#
    ))?;
    guest.expect_exit(0)?;
    for line in ["top_rc=0", "workloads_left=0", "status_after=0"] {
        ensure!(
            guest
                .lines_containing(line)
                .iter()
                .any(|l| l.trim() == line),
            "want {line}, got {:?}",
            guest.lines_containing(line.split('=').next().unwrap_or(line))
        );
    }
    let screens = screens(&guest);
    ensure!(
        screens.len() >= 4,
        "want 4 screens printed (table, histogram, last, the stopped run's), got {}",
        screens.len()
    );
    let table = &screens[0];
    let rows = row_names(table);
    ensure!(
        rows.len() == 2 && FUNCTIONS.iter().all(|f| rows.iter().any(|r| r == f)),
        "rows {rows:?}, want {FUNCTIONS:?}:\n{table}"
    );
    for function in FUNCTIONS {
        let calls = since_start_calls(table, function);
        ensure!(
            calls == Some(CALLS),
            "{function}'s row counts {calls:?} calls since start, want {CALLS}:\n{table}"
        );
    }
    let histogram = &screens[1];
    let title = format!("{}: latency since start, {CALLS} calls", FUNCTIONS[0]);
    ensure!(
        histogram.contains(&title) && histogram_calls(histogram) == CALLS,
        "want {title:?} and rows adding up to {CALLS}:\n{histogram}"
    );
    ensure!(
        table.contains("hotprof's cost (BPF stats, "),
        "no measured cost line:\n{table}"
    );
    let quit = pty_result(&guest, "pty_run:")?;
    let stopped = pty_result(&guest, "stopped:")?;
    for (how, result, code) in [("q", &quit, 0), ("Ctrl-C", &stopped, 130)] {
        ensure!(
            result.u64("exit")? == code
                && result.u64("alternate")? == 0
                && result.u64("icanon")? == 1,
            "{how}: want exit={code} alternate=0 icanon=1 (terminal restored), got exit={} \
             alternate={} icanon={}",
            result.str("exit")?,
            result.str("alternate")?,
            result.str("icanon")?
        );
    }
    println!(
        "  rows {} and {} with {CALLS} calls since start each, the histogram's rows {CALLS}; \
         q and Ctrl-C: terminal restored, nothing left",
        FUNCTIONS[0], FUNCTIONS[1]
    );
    Ok(())
}

/// The screens `pty_run` printed, in order.
fn screens(guest: &Guest) -> Vec<String> {
    let mut screens = Vec::new();
    let mut current: Option<String> = None;
    for line in guest.outcome.stdout.lines() {
        match (&mut current, line) {
            (None, line) if line.starts_with("pty_run: screen ") && line.ends_with('{') => {
                current = Some(String::new());
            }
            (Some(_), "pty_run: }") => screens.extend(current.take()),
            (Some(screen), line) => {
                screen.push_str(line);
                screen.push('\n');
            }
            _ => {}
        }
    }
    screens
}

/// `pty_run`'s result line (`prefix exit=N alternate=A icanon=I`).
fn pty_result(guest: &Guest, prefix: &str) -> Result<Fields> {
    let line = guest
        .outcome
        .stdout
        .lines()
        .find(|line| line.starts_with(prefix) && line.contains("exit="))
        .with_context(|| format!("no `{prefix} exit=…` line"))?;
    Ok(Fields::parse(prefix, &line[prefix.len()..]))
}
