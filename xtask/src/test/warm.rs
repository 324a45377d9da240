//! Builds that later checks would otherwise start with, run in the background while the x86
//! guests run: the aarch64 guests' binaries, clippy, the host tests' builds. At nice 19 they
//! take only what the guests leave (a guest slot waiting on a scenario that runs alone, a
//! scenario's host-side work, boots), so the guests' timings stay theirs; the checks that
//! follow find cargo's work done (or wait on cargo's lock for the rest). Each command is the
//! very one its check runs (`--no-run` for tests), so cargo has nothing left to do for it.
//! A failure here is ignored: the check that runs the command reports it.

use std::fs::File;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::thread;

use super::JoinOnDrop;
use crate::arch::Arch;
use crate::build;
use crate::host;
use crate::util::{display_cmd, target_dir};

/// Starts the builds that later checks need: the guests' of `later_arches`, then those of
/// `host_checks` (the selected host checks' names), joined when the handle is dropped. Their
/// output goes to `target/warm.log`.
pub(super) fn start(later_arches: &[Arch], host_checks: &[&str]) -> JoinOnDrop {
    // The aarch64 guests' build first. Tried the other way (the host's builds first, beside
    // the x86 guest build): 122 s of the aarch64 build was left when the x86 guests ended,
    // run at once before the arm64 guests; this way 66 s of host builds were left.
    let mut commands: Vec<Command> = later_arches
        .iter()
        .map(|arch| build::guest_packages_build(*arch, &[]))
        .collect();
    let wants = |check: &str| host_checks.contains(&check);
    if wants("clippy") {
        commands.extend(super::clippy_commands());
    }
    if wants("unit") {
        commands.push(no_run(super::unit_tests()));
    }
    for (check, test) in [("ebpf_load", "ebpf_load"), ("host_doctor", "doctor")] {
        if wants(check) {
            commands.push(no_run(super::profiler_test(test)));
        }
    }
    if host_checks.iter().any(|check| check.starts_with("host_")) {
        commands.push(host::debug_build());
    }
    if commands.is_empty() {
        return JoinOnDrop(None);
    }
    let log = target_dir().join("warm.log");
    println!(
        "[warm] {} builds for later checks in the background (nice 19), log in {}",
        commands.len(),
        log.display()
    );
    JoinOnDrop(Some(thread::spawn(move || {
        let Ok(file) = File::create(&log) else {
            return;
        };
        for command in commands {
            run_niced(command, &file);
        }
    })))
}

fn no_run(mut test: Command) -> Command {
    test.arg("--no-run");
    test
}

/// Runs `command` under `nice -n 19`, its output appended to `log`.
fn run_niced(command: Command, log: &File) {
    let mut niced = Command::new("nice");
    niced.args(["-n", "19"]).arg(command.get_program());
    niced.args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => niced.env(key, value),
            None => niced.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        niced.current_dir(dir);
    }
    let (Ok(out), Ok(err)) = (log.try_clone(), log.try_clone()) else {
        return;
    };
    let _ = writeln!(&mut &*log, "[warm] {}", display_cmd(&command));
    let status = niced.stdin(Stdio::null()).stdout(out).stderr(err).status();
    let _ = writeln!(&mut &*log, "[warm] {status:?}");
}
