//! `hotprof top` in a real terminal: tmux, on this host's syscall tracepoints.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use crate::host::{binaries, bpf_program_ids, output, programs_left};
use crate::top_screen::{histogram_calls, row_names, since_start_calls};

/// getpid calls the workload makes: a second or so under the probes.
const CALLS: u64 = 300_000;

/// `hotprof top --syscall getpid,read -- syscall_lat N` in a 160×40 tmux pane: once the
/// workload has exited, the table has exactly a getpid and a read row, whose since-start
/// calls are exactly N and the read count of the same workload under `hotprof --json`;
/// Enter opens getpid's histogram, whose rows add up to N. The kernel's BPF run-time
/// statistics are on while it runs (`bpftool` sees its programs' run counts, the cost line is
/// measured) and off again after (a plain hotprof run's programs count no run). q, Ctrl-C
/// and SIGTERM each end it with the alternate screen left, the terminal back in canonical
/// mode, its programs gone and its workload stopped.
pub fn top_in_tmux() -> Result<()> {
    let (hotprof, syscall_lat) = binaries()?;
    let expected_read = read_calls(&hotprof, &syscall_lat)?;
    ensure!(
        std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")?.trim() == "0",
        "kernel.bpf_stats_enabled is 1: the statistics are on for everything, so this check \
         cannot see hotprof top turn them on and off (sysctl kernel.bpf_stats_enabled=0)"
    );

    let command = format!(
        "{} top --syscall getpid,read -- {} {CALLS}",
        hotprof.display(),
        syscall_lat.display()
    );
    let pane = Pane::start(&hotprof, &command)?;
    // Until the refresh after the workload's exit.
    let screen = pane.wait_for("after the workload's exit and a refresh", |screen| {
        screen.contains("exited with code 0") && since_start_calls(screen, "getpid") == Some(CALLS)
    })?;
    let rows = row_names(&screen);
    ensure!(
        rows == ["getpid", "read"] || rows == ["read", "getpid"],
        "rows {rows:?}, want getpid and read:\n{screen}"
    );
    let read = since_start_calls(&screen, "read");
    ensure!(
        read == Some(expected_read),
        "the read row counts {read:?} calls, want {expected_read} (hotprof --json's):\n{screen}"
    );
    ensure!(
        screen.contains("hotprof's cost (BPF stats, ") && screen.contains(" runs"),
        "no measured cost line:\n{screen}"
    );
    let runs: u64 = pane
        .programs
        .iter()
        .map(|&id| run_count(id))
        .sum::<Result<u64>>()?;
    ensure!(
        runs >= CALLS,
        "bpftool counts {runs} runs of hotprof top's programs, want at least {CALLS}: are the \
         statistics on?"
    );
    println!(
        "  rows getpid {CALLS} and read {expected_read} calls since start, as hotprof --json \
         counts; bpftool: {runs} runs of its programs"
    );

    // Sorted by name, getpid is the first row, selected: Enter opens its histogram.
    pane.keys(&["n"])?;
    pane.keys(&["Enter"])?;
    let title = format!("getpid: latency since start, {CALLS} calls");
    let screen = pane.wait_for("getpid's histogram", |screen| screen.contains(&title))?;
    let binned = histogram_calls(&screen);
    ensure!(
        binned == CALLS,
        "getpid's histogram rows hold {binned} calls, want {CALLS}:\n{screen}"
    );
    pane.keys(&["Escape"])?;
    pane.wait_for("the table again", |screen| screen.contains("NAME"))?;
    pane.keys(&["q"])?;
    pane.exited_cleanly(&hotprof, 0)?;
    let runs = runs_counted_after(&hotprof, &syscall_lat)?;
    ensure!(
        runs == 0,
        "a hotprof run after hotprof top exited has its programs' runs counted ({runs}): the \
         kernel's BPF statistics were left on"
    );
    println!("  q: terminal restored, programs gone, BPF statistics off again");

    // Ctrl-C (a key in raw mode) and SIGTERM, while a workload still runs.
    let long = format!(
        "{} top --syscall getpid -- {} 100000000000",
        hotprof.display(),
        syscall_lat.display()
    );
    for stop in ["Ctrl-C", "SIGTERM"] {
        let pane = Pane::start(&hotprof, &long)?;
        pane.wait_for("calls counted", |screen| {
            since_start_calls(screen, "getpid").is_some_and(|calls| calls > 0)
        })?;
        let workload = pane.workload_pid()?;
        match stop {
            "Ctrl-C" => pane.keys(&["C-c"])?,
            _ => crate::util::run(Command::new("kill").args(["-TERM", &pane.hotprof.to_string()]))?,
        }
        // The workload was killed by the signal hotprof passed on: SIGINT for Ctrl-C.
        pane.exited_cleanly(&hotprof, if stop == "Ctrl-C" { 130 } else { 143 })?;
        ensure!(
            !Path::new(&format!("/proc/{workload}")).exists(),
            "the workload (pid {workload}) outlived hotprof top stopped by {stop}"
        );
        println!("  {stop}: terminal restored, programs gone, workload stopped");
    }
    Ok(())
}

/// The kernel's run count of program `id` (`bpftool` leaves it out when it is 0).
fn run_count(id: u32) -> Result<u64> {
    let out =
        output(Command::new("bpftool").args(["prog", "show", "id", &id.to_string(), "--json"]))
            .context("bpftool (Debian package `bpftool`)")?;
    ensure!(
        out.status.success(),
        "bpftool prog show id {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let program: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok(program["run_cnt"].as_u64().unwrap_or(0))
}

/// The runs the kernel counts of a plain `hotprof --syscall getpid` run's programs, its
/// workload making calls for half a second: 0 unless something left the statistics on.
fn runs_counted_after(hotprof: &Path, syscall_lat: &Path) -> Result<u64> {
    let mut plain = Command::new(hotprof)
        .args(["--syscall", "getpid", "--no-calibrate", "--"])
        .arg(syscall_lat)
        .arg("100000000000")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("cannot run hotprof")?;
    let started = Instant::now();
    let programs = loop {
        let programs = bpf_program_ids(plain.id()).unwrap_or_default();
        if !programs.is_empty() || started.elapsed() > PATIENCE {
            break programs;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(500));
    let runs = programs
        .iter()
        .map(|&id| run_count(id))
        .sum::<Result<u64>>();
    crate::util::run(Command::new("kill").args(["-INT", &plain.id().to_string()]))?;
    let status = plain.wait()?;
    ensure!(
        !programs.is_empty(),
        "hotprof --syscall getpid loaded no program"
    );
    ensure!(
        status.code() == Some(130),
        "hotprof --syscall getpid stopped by SIGINT exited with {status}"
    );
    runs
}

/// What `hotprof --syscall getpid,read --json` counts of the workload's reads (its loader's:
/// the same every run) after checking its getpid count.
fn read_calls(hotprof: &Path, syscall_lat: &Path) -> Result<u64> {
    let dir = tempfile::tempdir()?;
    let json = dir.path().join("reference.json");
    let out = output(
        Command::new(hotprof)
            .args(["--syscall", "getpid,read", "--json"])
            .arg(&json)
            .arg("--")
            .arg(syscall_lat)
            .arg(CALLS.to_string()),
    )?;
    ensure!(
        out.status.success(),
        "hotprof --syscall getpid,read failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recording: serde_json::Value = serde_json::from_slice(&std::fs::read(&json)?)?;
    let count = |name: &str| {
        recording["functions"]
            .as_array()
            .and_then(|functions| functions.iter().find(|f| f["name"] == name))
            .and_then(|f| f["count"].as_u64())
    };
    ensure!(
        count("getpid") == Some(CALLS),
        "hotprof --json counted {:?} getpid calls, want {CALLS}",
        count("getpid")
    );
    let read = count("read").context("no read in hotprof --json's recording")?;
    ensure!(read > 0, "the workload made no read call to count");
    Ok(read)
}

/// A tmux session running one `hotprof top` command, then a shell line that prints its exit
/// code and whether the terminal is in canonical mode, then waits to be read.
struct Pane {
    session: String,
    /// The hotprof process.
    hotprof: u32,
    /// The BPF programs it holds once its table is up.
    programs: Vec<u32>,
}

/// How long the screen may take to show what a step waits for.
const PATIENCE: Duration = Duration::from_secs(60);

impl Pane {
    fn start(hotprof: &Path, command: &str) -> Result<Self> {
        let session = format!("hotprof-top-{}", std::process::id());
        let _ = output(Command::new("tmux").args(["kill-session", "-t", &session]));
        let script = format!(
            "{command}; echo \"top exited $?\"; stty -a | tr ' ;' '\\n\\n' | grep -x -- '-*icanon'; sleep 600"
        );
        crate::util::run(Command::new("tmux").args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "160",
            "-y",
            "40",
            &script,
        ]))
        .context("cannot start tmux (Debian package `tmux`)")?;
        let mut pane = Pane {
            session,
            hotprof: 0,
            programs: Vec::new(),
        };
        let shell: u32 = pane.display("#{pane_pid}")?.parse()?;
        let started = Instant::now();
        pane.hotprof = loop {
            if let Some(pid) = child_named(shell, &hotprof.file_name().unwrap().to_string_lossy()) {
                break pid;
            }
            ensure!(
                started.elapsed() < PATIENCE,
                "hotprof top did not start:\n{}",
                pane.capture()?
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        pane.wait_for("the table", |screen| screen.contains("NAME"))?;
        pane.programs = bpf_program_ids(pane.hotprof)?;
        ensure!(
            !pane.programs.is_empty(),
            "hotprof top holds no BPF program"
        );
        Ok(pane)
    }

    fn display(&self, format: &str) -> Result<String> {
        let out =
            output(Command::new("tmux").args(["display", "-p", "-t", &self.session, format]))?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    fn capture(&self) -> Result<String> {
        let out = output(Command::new("tmux").args(["capture-pane", "-p", "-t", &self.session]))?;
        ensure!(out.status.success(), "tmux capture-pane failed");
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Sends tmux key names, one at a time (Escape then a key at once reads as Alt+key).
    fn keys(&self, keys: &[&str]) -> Result<()> {
        for key in keys {
            crate::util::run(Command::new("tmux").args(["send-keys", "-t", &self.session, key]))?;
            std::thread::sleep(Duration::from_millis(300));
        }
        Ok(())
    }

    /// The screen once `done` says so.
    fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> Result<String> {
        let started = Instant::now();
        loop {
            let screen = self.capture()?;
            if done(&screen) {
                return Ok(screen);
            }
            if started.elapsed() > PATIENCE {
                bail!(
                    "no {what} on the screen after {} s:\n{screen}",
                    PATIENCE.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The workload hotprof runs.
    fn workload_pid(&self) -> Result<u32> {
        child_named(self.hotprof, "syscall_lat").context("hotprof top runs no syscall_lat")
    }

    /// hotprof exited with `code`, off the alternate screen, the terminal in canonical mode
    /// again, none of its programs left in the kernel.
    fn exited_cleanly(&self, hotprof: &Path, code: i32) -> Result<()> {
        let line = format!("top exited {code}");
        // The shell line prints the exit code, then what stty says.
        let screen = self.wait_for(&line, |screen| {
            screen.lines().any(|l| l == "icanon" || l == "-icanon")
        })?;
        ensure!(
            screen.lines().any(|l| l == line),
            "want `{line}`:\n{screen}"
        );
        ensure!(
            screen.lines().any(|l| l == "icanon"),
            "the terminal is not back in canonical mode (stty says otherwise):\n{screen}"
        );
        ensure!(
            self.display("#{alternate_on}")? == "0",
            "the pane is still on the alternate screen"
        );
        let (left, listed) = programs_left(hotprof, &self.programs)?;
        ensure!(
            left.is_empty(),
            "programs {left:?} of hotprof top are still loaded after it exited:\n{listed}"
        );
        Ok(())
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.session])
            .output();
    }
}

/// The first child of `parent` whose command name is `name`.
fn child_named(parent: u32, name: &str) -> Option<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|pid| pid.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == name)
        })
}
