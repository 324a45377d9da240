//! A loadable module's functions (issue #34): probed exactly, unloaded under hotprof, and
//! loaded after it started.
//!
//! The module is Debian's `dummy` (kept by `kernels.rs`, loaded from
//! `/lib/xtask-loadable`): with `numdummies=1` it makes `dummy0`, and every datagram sent
//! through it is one call of `dummy_xmit` in the sender's context, so `udp_send N` makes
//! exactly N. `--comm udp_send` keeps out the kernel's own packets on the device sent by
//! other tasks, but not those a softirq sends on udp_send's time: IPv6 is off on `dummy0`,
//! whose timers (duplicate address detection, router solicitations) once made 5,001 calls
//! of 5,000.

use anyhow::{Context, Result, ensure};

use super::harness::{Ctx, Fields, Guest, Report};
use crate::kernels::Kernel;

/// Datagrams per exact-count run.
const SENT: u64 = 5_000;
/// Datagrams before and after the unload.
const BEFORE_UNLOAD: u64 = 3_000;
const AFTER_RELOAD: u64 = 700;

const UP: &str = "insmod /lib/xtask-loadable/dummy.ko numdummies=1 \
                  && echo 1 > /proc/sys/net/ipv6/conf/dummy0/disable_ipv6 \
                  && ip link set dummy0 up && ip addr add 10.9.0.1/24 dev dummy0";
const SEND: &str = "udp_send 10.9.0.2:9";

/// What each part checks; the kernel's answers were found by trying (6.12, 7.2):
/// - exact counts in every mode that takes a module's function: auto (kprobe.session where
///   the kernel has it, else kprobe.multi, else perf kprobes: fentry needs the module's own
///   BTF, which hotprof does not load, and auto mode says so and moves on), kprobe.multi and
///   perf kprobes; `--mode fentry` is one error line naming the module;
/// - unloaded under a perf kprobe: `rmmod` succeeds, hotprof keeps running, keeps the calls
///   made before, says once that the function went, counts none after the module is back
///   (the kernel's kprobe stays gone), exits 0 with nothing left;
/// - under a kprobe.multi or kprobe.session link `rmmod` is refused (the link holds the
///   module) and succeeds once hotprof has exited;
/// - a module loaded after start with functions a glob matches: one note naming them.
pub(super) fn module_functions(ctx: &mut Ctx) -> Result<()> {
    let links = ctx.kernel() != Kernel::V5_10;
    let modes: &[(&str, &str)] = if links {
        &[
            ("auto", ""),
            ("multi", "--mode kprobe --no-kprobe-session"),
            ("perf", "--mode kprobe --no-kprobe-multi"),
        ]
    } else {
        &[("auto", ""), ("perf", "--mode kprobe")]
    };
    let mut script = format!("{UP} || echo up_failed\n");
    for (name, flags) in modes {
        script += &format!(
            "hotprof --fn dummy_xmit {flags} --comm udp_send --no-calibrate --json /out/{name}.json \
             -- {SEND} {SENT} > /tmp/{name}.txt 2>&1; echo \"{name}_rc=$?\"\n\
             sed 's/^udp_send:/{name}:/' /tmp/{name}.txt\n"
        );
    }
    script += &format!(
        r#"hotprof --fn dummy_xmit --mode fentry --no-calibrate -- true; echo "fentry_rc=$?"
hotprof --fn dummy_xmit --mode kprobe --no-kprobe-multi --comm udp_send --duration 30s --no-calibrate --json /out/gone.json > /tmp/gone.txt 2>&1 &
hp=$!
for i in $(seq 1 120); do grep -q attached /tmp/gone.txt && break; sleep 0.5; done
{SEND} {BEFORE_UNLOAD} | sed 's/^udp_send:/before:/'
rmmod dummy; echo "gone_rmmod=$?"
for i in $(seq 1 20); do grep -q 'went with it' /tmp/gone.txt && break; sleep 0.5; done
{UP} || echo up_failed
{SEND} {AFTER_RELOAD} | sed 's/^udp_send:/after:/'
kill -INT $hp; wait $hp; echo "gone_rc=$?"
cat /tmp/gone.txt
hotprof status > /dev/null; echo "status_after=$?"
"#
    );
    if links {
        script += &format!(
            r#"hotprof --fn dummy_xmit --mode kprobe --comm udp_send --duration 30s --no-calibrate --json /out/held.json > /tmp/held.txt 2>&1 &
hp=$!
for i in $(seq 1 120); do grep -q attached /tmp/held.txt && break; sleep 0.5; done
{SEND} {BEFORE_UNLOAD} | sed 's/^udp_send:/held:/'
rmmod dummy; echo "held_rmmod=$?"
kill -INT $hp; wait $hp; echo "held_rc=$?"
cat /tmp/held.txt
rmmod dummy; echo "released_rmmod=$?"
{UP} || echo up_failed
"#
        );
    }
    // `top` watches modules as `record` does: the note on its screen.
    script += &format!(
        r#"export TERM=xterm-256color
(for i in $(seq 1 120); do hotprof status > /dev/null || break; sleep 0.5; done; sleep 1; rmmod dummy; echo "top_rmmod=$?") &
pty_run 200x30 'until:NAME;until:was unloaded;screen;key:q' -- hotprof top --mode kprobe --no-kprobe-multi --fn dummy_xmit | sed 's/^pty_run: exit/top: exit/'
wait
{UP} || echo up_failed
"#
    );
    // A glob over a name two functions share (Debian's vmlinux has two static
    // `dummy_handler`s): left out with a note, the rest probed, even by perf kprobes.
    script += r#"shared=$(grep -cE ' [tT] dummy_handler$' /proc/kallsyms)
hotprof --fn 'dummy_*' --mode kprobe --no-kprobe-multi --no-calibrate --duration 1s > /tmp/shared.txt 2>&1; echo "shared_rc=$? shared_names=$shared"
grep -h 'leaves out' /tmp/shared.txt
"#;
    script += &format!(
        r#"rmmod dummy
hotprof --fn '*_get_stats64' --no-calibrate --duration 30s > /tmp/late.txt 2>&1 &
hp=$!
for i in $(seq 1 120); do grep -q attached /tmp/late.txt && break; sleep 0.5; done
{UP} || echo up_failed
for i in $(seq 1 20); do grep -q 'was loaded' /tmp/late.txt && break; sleep 0.5; done
kill -INT $hp; wait $hp; echo "late_rc=$?"
cat /tmp/late.txt
hotprof status > /dev/null; echo "status_end=$?"
"#
    );
    let guest = ctx.run(&script)?;
    guest.expect_exit(0)?;
    ensure!(
        guest.lines_containing("up_failed").is_empty(),
        "the dummy module did not load or dummy0 did not come up"
    );
    for (name, _) in modes {
        expect(&guest, &format!("{name}_rc="), 0)?;
        exact(
            &guest.report(&format!("{name}.json"))?,
            name,
            sent(&guest, name)?,
        )?;
    }
    check_fentry_refusal(&guest)?;
    check_unload_under_perf_kprobe(&guest)?;
    if links {
        check_unload_refused_under_links(&guest)?;
    }
    check_note_in_top(&guest)?;
    check_shared_names(&guest)?;
    check_late_module(&guest)
}

/// `hotprof top` says on its screen that the module went, and still quits cleanly.
fn check_note_in_top(guest: &Guest) -> Result<()> {
    expect(guest, "top_rmmod=", 0)?;
    let notes = guest.lines_containing("note: module dummy was unloaded");
    ensure!(
        notes
            .iter()
            .any(|line| line.contains("dummy_xmit went with it")),
        "want top's screen to say dummy_xmit went with module dummy, got {notes:?}"
    );
    let exit = guest.lines_containing("top: exit=");
    ensure!(
        exit.iter()
            .any(|line| line.starts_with("top: exit=0 alternate=0 icanon=1")),
        "want top to quit with 0 and the terminal restored, got {exit:?}"
    );
    println!("  top: the note on its screen, q restored the terminal");
    Ok(())
}

/// `want` is the status that `key` (`name_rc=`) reports.
fn expect(guest: &Guest, key: &str, want: i32) -> Result<()> {
    let lines = guest.lines_containing(key);
    ensure!(
        lines
            .iter()
            .any(|line| line.trim() == format!("{key}{want}")),
        "want {key}{want}, got {lines:?}"
    );
    Ok(())
}

/// The result of the `udp_send` relabelled `label:` (each run's line gets its own label).
fn sent(guest: &Guest, label: &str) -> Result<u64> {
    let prefix = format!("{label}:");
    let line = guest
        .outcome
        .stdout
        .lines()
        .find(|line| line.starts_with(&prefix))
        .with_context(|| format!("no `{prefix} sent=…` line from udp_send"))?;
    Fields::parse(label, &line[prefix.len()..]).u64("sent")
}

/// Every datagram counted, nothing lost.
fn exact(report: &Report, name: &str, sent: u64) -> Result<()> {
    ensure!(sent > 0, "{name}: udp_send sent nothing");
    let count = report.function("dummy_xmit")?.u64("count")?;
    let mode = report.json["mode"].as_str().unwrap_or("?");
    ensure!(
        count == sent,
        "{name} ({mode}): dummy_xmit counted {count} calls, udp_send sent {sent}"
    );
    let losses = super::kprobe_session::nonzero_losses(report);
    ensure!(losses.is_empty(), "{name} ({mode}): losses {losses:?}");
    println!("  {name}: {mode}, {count} calls of {sent} sent");
    Ok(())
}

/// `--mode fentry` on a module's function: one line naming the module, exit 1.
fn check_fentry_refusal(guest: &Guest) -> Result<()> {
    expect(guest, "fentry_rc=", 1)?;
    let errors = guest.lines_containing("hotprof: error:");
    ensure!(
        errors.len() == 1 && errors[0].contains("it is in module dummy"),
        "want one error line, naming module dummy, got {errors:?}"
    );
    Ok(())
}

/// Unloaded under a perf kprobe: the calls before are kept, one note, none counted after.
fn check_unload_under_perf_kprobe(guest: &Guest) -> Result<()> {
    expect(guest, "gone_rmmod=", 0)?;
    expect(guest, "gone_rc=", 0)?;
    expect(guest, "status_after=", 0)?;
    let notes = record_notes(guest, "went with it");
    ensure!(
        notes.len() == 1
            && notes[0].starts_with("hotprof: note: module dummy was unloaded")
            && notes[0].contains("dummy_xmit"),
        "want one note that dummy_xmit went with module dummy, got {notes:?}"
    );
    let before = sent(guest, "before")?;
    let after = sent(guest, "after")?;
    ensure!(
        after == AFTER_RELOAD,
        "after the reload udp_send sent {after} of {AFTER_RELOAD}: the module did not come back"
    );
    exact(&guest.report("gone.json")?, "gone", before)?;
    println!(
        "  unloaded under a perf kprobe: {before} calls kept, the {after} after the reload not \
         counted: {}",
        notes[0]
    );
    Ok(())
}

/// Under a kprobe.multi/session link the kernel keeps the module until hotprof detaches.
fn check_unload_refused_under_links(guest: &Guest) -> Result<()> {
    expect(guest, "held_rmmod=", 1)?;
    expect(guest, "held_rc=", 0)?;
    expect(guest, "released_rmmod=", 0)?;
    exact(&guest.report("held.json")?, "held", sent(guest, "held")?)?;
    ensure!(
        record_notes(guest, "went with it").len() == 1,
        "a note said a function went while its module was held"
    );
    Ok(())
}

/// A glob matching a name two functions share runs, leaving that name out with a note.
fn check_shared_names(guest: &Guest) -> Result<()> {
    let line = guest
        .lines_containing("shared_rc=")
        .into_iter()
        .next()
        .context("no shared_rc= line")?;
    let fields = Fields::parse("shared", &line);
    ensure!(
        fields.u64("shared_rc")? == 0,
        "hotprof --fn 'dummy_*' in perf-kprobe mode failed: {line}"
    );
    let names = fields.u64("shared_names")?;
    let notes = record_notes(guest, "leaves out");
    if names < 2 {
        println!("  shared names: this kernel has {names} dummy_handler, nothing to leave out");
        return Ok(());
    }
    ensure!(
        notes.len() == 1 && notes[0].contains("dummy_handler"),
        "want one note that 'dummy_*' leaves out dummy_handler ({names} functions), got \
         {notes:?}"
    );
    println!("  shared names: {}", notes[0]);
    Ok(())
}

/// The lines `hotprof` (not `top`'s screen) printed as notes containing `text`.
fn record_notes(guest: &Guest, text: &str) -> Vec<String> {
    let mut notes = guest.lines_containing(text);
    notes.retain(|line| line.starts_with("hotprof: note:"));
    notes
}

/// A module loaded after start whose functions the glob matches: said, not probed.
fn check_late_module(guest: &Guest) -> Result<()> {
    expect(guest, "late_rc=", 0)?;
    expect(guest, "status_end=", 0)?;
    let notes = guest.lines_containing("was loaded");
    ensure!(
        notes.len() == 1
            && notes[0].starts_with("hotprof: note: module dummy was loaded")
            && notes[0].contains("dummy_get_stats64")
            && !notes[0].contains("__pfx_")
            && notes[0].contains("not probed"),
        "want one note that dummy's dummy_get_stats64 matches the glob, got {notes:?}"
    );
    println!("  loaded after start: {}", notes[0]);
    Ok(())
}
