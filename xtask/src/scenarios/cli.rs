//! The command line on a real kernel: globs and `hotprof list`, and bad inputs.

use std::fs;

use anyhow::{Context, Result, ensure};

use super::harness::{Ctx, Guest};
use super::kprobe_session::has_fsession;

/// A glob attaches to every ftrace-listed match (≥ 50 here) and reports each one; with more
/// functions than kprobe slots, the ones beyond them (sharing `kprobe_entry`) count exactly;
/// `hotprof list` lists exactly the function symbols kallsyms has for the pattern, and its
/// columns say what doctor found (fsession: from 7.0).
pub(super) fn glob_and_list(ctx: &mut Ctx) -> Result<()> {
    const GETPIDS: u64 = 5_000;
    let guest = ctx.run(&format!(
        "hotprof --fn 'vfs_*' --mode kprobe --json /out/r.json -- file_read /tmp/f 4; echo glob_rc=$?; \
         hotprof --fn 'vfs_*,security_inode_*' --fn __x64_sys_getpid --mode kprobe --no-calibrate \
           --json /out/shared.json -- syscall_lat {GETPIDS} >/dev/null; echo shared_rc=$?; \
         hotprof list 'vfs_*' 2>/dev/null | tail -n +2 | awk '{{print $1}}' | sort > /out/list.txt; \
         hotprof list vfs_read > /out/list_one.txt 2>/dev/null; hotprof doctor > /out/doctor.txt 2>&1; \
         awk '($2==\"t\"||$2==\"T\"||$2==\"w\"||$2==\"W\") && $3 ~ /^vfs_/ {{print $3}}' /proc/kallsyms | sort -u > /out/kallsyms.txt",
    ))?;
    ensure!(
        guest.lines_containing("glob_rc=0").len() == 1,
        "the glob run failed"
    );
    let report = guest.report("r.json")?;
    let functions = report.json["functions"]
        .as_array()
        .context("no functions")?;
    ensure!(
        functions.len() >= 50,
        "the glob matched {} functions, want at least 50",
        functions.len()
    );
    // file_read's own read(2) calls, plus the one read of /proc/self/maps Rust's runtime makes
    // at start-up (its usage text says so); exec reads the binary with kernel_read, not
    // vfs_read.
    let read = report.function("vfs_read")?.u64("count")?;
    let reads = guest.workload("file_read")?.u64("reads")?;
    ensure!(
        read == reads + 1,
        "vfs_read counted {read} calls, file_read made {reads} reads (+1 at start-up)"
    );
    // Functions beyond the first KPROBE_SLOTS share one kprobe program that finds each
    // call's function by address: getpid, listed last, must be one of them and exact.
    ensure!(
        guest.lines_containing("shared_rc=0").len() == 1,
        "the run with more functions than kprobe slots failed"
    );
    let shared = guest.report("shared.json")?;
    let index = shared.json["functions"]
        .as_array()
        .and_then(|f| f.iter().position(|f| f["name"] == "__x64_sys_getpid"))
        .context("__x64_sys_getpid missing")?;
    ensure!(
        index >= profiler_common::KPROBE_SLOTS as usize,
        "__x64_sys_getpid is function {index}, inside the kprobe slots: widen the globs"
    );
    let getpids = shared.function("__x64_sys_getpid")?.u64("count")?;
    ensure!(
        getpids == GETPIDS,
        "the shared kprobe program counted {getpids} getpid calls for {GETPIDS}"
    );
    let list = fs::read_to_string(guest.outcome.out_dir.join("list.txt"))?;
    let kallsyms = fs::read_to_string(guest.outcome.out_dir.join("kallsyms.txt"))?;
    ensure!(!list.trim().is_empty(), "hotprof list printed nothing");
    ensure!(
        list == kallsyms,
        "hotprof list differs from kallsyms:\nlist:\n{list}\nkallsyms:\n{kallsyms}"
    );
    // list's columns say what doctor's tries found (here both work): `yes`, not a guess.
    let doctor = fs::read_to_string(guest.outcome.out_dir.join("doctor.txt"))?;
    let works = |row: &str| {
        doctor.lines().any(|line| {
            let mut words = line.split_whitespace();
            words.next() == Some(row) && words.next() == Some("yes")
        })
    };
    ensure!(
        works("fentry") && works("kprobes"),
        "doctor says fentry or kprobes do not work here:\n{doctor}"
    );
    let one = fs::read_to_string(guest.outcome.out_dir.join("list_one.txt"))?;
    let row = one
        .lines()
        .find(|line| line.starts_with("vfs_read "))
        .with_context(|| format!("hotprof list vfs_read printed no row:\n{one}"))?;
    let columns: Vec<&str> = row.split_whitespace().collect();
    ensure!(
        columns.get(1..3) == Some(&["yes", "yes"][..]),
        "hotprof list vfs_read says `{row}` where doctor says kprobes and fentry work"
    );
    // fsession takes what fentry takes, from 7.0 on (doctor's fsession row says so too).
    let fsession_ok = if has_fsession(ctx.kernel()) {
        works("fsession") && columns.get(3) == Some(&"yes")
    } else {
        row.contains(" no (needs Linux 7.0) ")
    };
    ensure!(
        fsession_ok,
        "hotprof list vfs_read's fsession column on {} is wrong: `{row}`",
        ctx.kernel()
    );
    Ok(())
}

/// Bad input on a real kernel: each a single line on stderr and a non-zero exit. Under TCG
/// (no PMU: qemu emulates none for x86) `--counter instructions` is one too; under KVM the
/// guest may have a virtual PMU, and that case is not checked.
pub(super) fn bad_inputs(ctx: &mut Ctx) -> Result<()> {
    let cases: Vec<(&str, &str)> = BAD_INPUTS
        .iter()
        .copied()
        .chain([(
            "hotprof --fn do_nanosleep --counter instructions --duration 1s",
            "--counter instructions: this machine's PMU does not count it",
        )])
        .collect();
    let guest = ctx.run(&bad_inputs_script(&cases))?;
    let checked = if guest.outcome.accel == crate::vm::Accel::Tcg {
        &cases[..]
    } else {
        &cases[..cases.len() - 1]
    };
    check_bad_inputs(&guest, checked)
}

/// Bad inputs every kernel answers alike: the command, and what its one line must say.
pub(super) const BAD_INPUTS: &[(&str, &str)] = &[
    ("hotprof --fn no_such_function_xyz", "not found"),
    ("hotprof --fn do_nanosleep.cold", ".cold fragment"),
    (
        "hotprof --fn 'zzz_no_match_*'",
        "no kernel function matches",
    ),
    ("hotprof --fn do_nanosleep --duration 2", "missing unit"),
    ("hotprof --syscall no_such_syscall", "unknown syscall"),
];

/// A script running each of `cases`, its stderr and exit code left in `/out/errN.txt` and
/// `/out/rcN.txt` for [`check_bad_inputs`].
pub(super) fn bad_inputs_script(cases: &[(&str, &str)]) -> String {
    cases
        .iter()
        .enumerate()
        .map(|(i, (command, _))| format!("{command} 2>/out/err{i}.txt; echo $? > /out/rc{i}.txt\n"))
        .collect()
}

/// Each of `cases` exited non-zero with one line on stderr saying what it must, no panic.
pub(super) fn check_bad_inputs(guest: &Guest, cases: &[(&str, &str)]) -> Result<()> {
    for (i, (command, expected)) in cases.iter().enumerate() {
        let stderr = fs::read_to_string(guest.outcome.out_dir.join(format!("err{i}.txt")))?;
        let rc = fs::read_to_string(guest.outcome.out_dir.join(format!("rc{i}.txt")))?;
        ensure!(rc.trim() != "0", "`{command}` exited 0");
        ensure!(
            stderr.lines().count() == 1,
            "`{command}` printed {} lines: {stderr}",
            stderr.lines().count()
        );
        ensure!(
            stderr.contains(expected),
            "`{command}`: want '{expected}' in: {stderr}"
        );
        ensure!(
            !stderr.contains("panicked"),
            "`{command}` panicked: {stderr}"
        );
    }
    Ok(())
}
