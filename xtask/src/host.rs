//! Host scenarios: what hotprof must do on this machine's own kernel, which has no kprobes
//! but has syscall tracepoints and perf events.

use std::path::PathBuf;
use std::process::{Command, Output};

use anyhow::{Context, Result, ensure};

use crate::util::{cargo, run, target_dir};

fn binaries() -> Result<(PathBuf, PathBuf)> {
    run(cargo().args(["build", "-p", "profiler", "-p", "workloads"]))?;
    let dir = target_dir().join("debug");
    Ok((dir.join("hotprof"), dir.join("syscall_lat")))
}

fn output(command: &mut Command) -> Result<Output> {
    command
        .output()
        .with_context(|| format!("cannot run {command:?}"))
}

/// `--syscall getpid` uses the syscall tracepoints, so it works here, and counts exactly the
/// workload's calls.
pub fn syscall_exact() -> Result<()> {
    const CALLS: u64 = 20_000;
    let (hotprof, syscall_lat) = binaries()?;
    let json = std::env::temp_dir().join(format!("hotprof-host-{}.json", std::process::id()));
    let out = output(
        Command::new(&hotprof)
            .args(["--syscall", "getpid", "--json"])
            .arg(&json)
            .arg("--")
            .arg(&syscall_lat)
            .arg(CALLS.to_string()),
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success(),
        "hotprof --syscall getpid failed: {stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json)?)?;
    let _ = std::fs::remove_file(&json);
    let count = report["functions"][0]["count"]
        .as_u64()
        .context("no count")?;
    ensure!(
        count == CALLS,
        "--syscall getpid counted {count} calls, want exactly {CALLS}"
    );
    Ok(())
}

/// `hotprof --fn` here: one line saying kprobes are missing and what still works.
pub fn no_kprobes_error() -> Result<()> {
    let (hotprof, _) = binaries()?;
    if std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        println!("  (this kernel has kprobes; nothing to check)");
        return Ok(());
    }
    let out = output(Command::new(&hotprof).args(["--fn", "vfs_read", "--duration", "1s"]))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success(),
        "hotprof --fn succeeded on a kernel without kprobes"
    );
    ensure!(stderr.lines().count() == 1, "want one line, got: {stderr}");
    ensure!(
        stderr.contains("has no kprobes") && stderr.contains("--syscall"),
        "unexpected error: {stderr}"
    );
    Ok(())
}

/// `hotprof sample` profiles getpid's kernel path on this kernel: it shows in the top table
/// and in the flamegraph.
pub fn sample_getpid_path() -> Result<()> {
    let (hotprof, syscall_lat) = binaries()?;
    let svg = std::env::temp_dir().join(format!("hotprof-sample-{}.svg", std::process::id()));
    let out = output(
        Command::new(&hotprof)
            .args(["sample", "--flamegraph"])
            .arg(&svg)
            .arg("--")
            .arg(&syscall_lat)
            .arg("5000000"),
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "hotprof sample failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let getpid_path = [
        "getpid",
        "x64_sys_call",
        "do_syscall_64",
        "__task_pid_nr_ns",
    ];
    let table: Vec<&str> = stdout.lines().filter(|l| l.contains("[k]")).collect();
    ensure!(
        table
            .iter()
            .any(|l| getpid_path.iter().any(|f| l.contains(f))),
        "the top table shows no getpid path frame:\n{stdout}"
    );
    let image = std::fs::read_to_string(&svg)?;
    let _ = std::fs::remove_file(&svg);
    roxmltree::Document::parse_with_options(
        &image,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .context("the sample flamegraph is not valid XML")?;
    ensure!(
        image.contains("do_syscall_64"),
        "the sample flamegraph has no do_syscall_64 frame"
    );
    Ok(())
}
