//! Per-call detail: `--by` keys, `--slowest`, `--filter`, `--children` and `sample --inside`.

use std::collections::BTreeMap;
use std::fs;

use anyhow::{Context, Result, ensure};

use super::harness::{
    Ctx, Fields, Guest, Report, caller_rows, key_rows, log2_class_label, slowest_calls,
};

/// `--by`: latency per key value, counted exactly. The caller of an entry-probed function
/// is the same site in fentry and kprobe mode and takes every call; `--by arg2:log2` on
/// `vfs_write` splits writes of two known sizes into their power-of-two classes exactly (the
/// split derived from each workload's bytes and chunk); `--by errno` splits a known mix of
/// found and missing opens exactly, at the syscall tracepoints and on `do_sys_openat2`
/// (whose `int` return leaves the register's upper half zero on 7.x); `--max-keys` too small
/// loses keyed calls only into the counted `keys_full`; bad keys are one line each.
pub(super) fn by_keys_exact(ctx: &mut Ctx) -> Result<()> {
    const FOUND: u64 = 200;
    const MISSING: u64 = 70;
    let guest = ctx.run(&format!(
        r#"
hotprof --fn generic_perform_write --by caller --json /out/caller_auto.json -- tmpfs_write /tmp/w 1 || exit 1
hotprof --fn generic_perform_write --mode kprobe --by caller --no-calibrate --json /out/caller_kprobe.json -- tmpfs_write /tmp/w 1 || exit 1
hotprof --fn vfs_write --by arg2:log2 --no-calibrate --json /out/size.json -- sh -c 'tmpfs_write /tmp/a 1 && tmpfs_write /tmp/b 1 --chunk 1000' || exit 1
hotprof --fn vfs_write --by arg2 --max-keys 2 --no-calibrate --json /out/few.json -- sh -c 'tmpfs_write /tmp/a 1 && tmpfs_write /tmp/b 1 --chunk 1000' || exit 1
hotprof --syscall openat --by errno --no-calibrate --json /out/errno_sys.json -- open_loop {FOUND} {MISSING} /tmp || exit 1
hotprof --fn do_sys_openat2 --by errno,comm --no-calibrate --json /out/errno_fn.json -- open_loop {FOUND} {MISSING} /tmp || exit 1
hotprof compare /out/errno_fn.json /out/errno_fn.json
bad() {{ "$@" 2>/out/bad_err.txt >/dev/null; echo "bad_rc=$? lines=$(wc -l </out/bad_err.txt) $(cat /out/bad_err.txt)"; }}
bad hotprof --fn vfs_write --by size -- true
bad hotprof --fn vfs_write --by arg7 -- true
bad hotprof --syscall getpid --by caller -- true
true
"#
    ))?;
    guest.expect_exit(0)?;

    check_one_caller(
        &guest,
        [
            ("caller_auto.json", "fentry"),
            ("caller_kprobe.json", "kprobe.multi"),
        ],
        "shmem_file_write_iter",
    )?;

    // Write sizes: each workload's full chunks, and its last short write, in their classes.
    // Results in script order: the two caller runs', then this run's two.
    let runs = tmpfs_write_results(&guest);
    ensure!(
        runs.len() == 6,
        "want six tmpfs_write results, got {runs:?}"
    );
    check_size_classes(&guest.report("size.json")?, "vfs_write", &runs[2..4])?;

    // Too few key slots: the rest of the calls are a counted loss, never silently missing.
    let report = guest.report("few.json")?;
    let count = report.function("vfs_write")?.u64("count")?;
    let keyed: u64 = key_rows(&report, "vfs_write")?
        .iter()
        .map(|row| row.1)
        .sum();
    let lost = report.json["losses"]["keys_full"].as_u64().unwrap_or(0);
    ensure!(
        lost > 0 && keyed + lost == count,
        "--max-keys 2: {keyed} keyed + {lost} keys_full, want {count} in all with some lost"
    );

    // Found and missing opens; plus the C runtime's own open of /proc/self/maps at start-up.
    let opened = guest.workload("open_loop")?;
    let (found, missing) = (opened.u64("found")?, opened.u64("missing")?);
    for (file, function, comm) in [
        ("errno_sys.json", "openat", None),
        ("errno_fn.json", "do_sys_openat2", Some("open_loop")),
    ] {
        let rows = key_rows(&guest.report(file)?, function)?;
        let calls = |errno: &str| {
            let mut key = vec![errno.to_owned()];
            key.extend(comm.map(str::to_owned));
            rows.iter().find(|(k, _)| *k == key).map_or(0, |row| row.1)
        };
        ensure!(
            (calls("ok"), calls("ENOENT")) == (found + 1, missing),
            "{file}: {} ok and {} ENOENT, want {} and {missing} (rows {rows:?})",
            calls("ok"),
            calls("ENOENT"),
            found + 1
        );
    }

    // compare shows the key values as rows of their own.
    ensure!(
        guest
            .lines_containing("by errno, comm")
            .iter()
            .any(|line| line.trim() == "by errno, comm")
            && guest
                .lines_containing("ENOENT open_loop")
                .iter()
                .any(|line| line.trim() == "ENOENT open_loop"),
        "compare of two keyed recordings shows no per-key rows"
    );

    for expected in [
        "unknown --by key `size`",
        "--by arg7: functions take their arguments in registers 0..5",
        "--by caller needs --fn",
    ] {
        let lines = guest.lines_containing(expected);
        ensure!(
            lines.len() == 1
                && lines[0].starts_with("bad_rc=")
                && !lines[0].starts_with("bad_rc=0 ")
                && lines[0].contains(" lines=1 "),
            "want one line saying {expected:?} and a failing exit, got {lines:?}"
        );
    }
    Ok(())
}

/// `--by arg2:log2` on `function` (a write) against the `tmpfs_write:` result `lines` of the
/// runs it recorded: each workload's full chunks, and its last short write, in their
/// power-of-two classes exactly, and every call in some key row.
/// `--by caller` of `generic_perform_write` in the two runs `(file, mode)`: each ran in its
/// mode and names `caller+0x…` for every call, and both name the same return address.
pub(super) fn check_one_caller(guest: &Guest, runs: [(&str, &str); 2], caller: &str) -> Result<()> {
    let mut sites = Vec::new();
    for (file, mode) in runs {
        let report = guest.report(file)?;
        ensure!(
            report.json["mode"] == mode,
            "{file}: mode {}, want {mode}",
            report.json["mode"]
        );
        let calls = report.function("generic_perform_write")?.u64("count")?;
        let callers = caller_rows(&report, "generic_perform_write")?;
        let busiest = callers.first().context("no per-caller rows")?;
        ensure!(
            busiest.0.starts_with(&format!("{caller}+0x")) && busiest.1 == calls && calls > 0,
            "{mode}: the caller of generic_perform_write is {busiest:?} of {calls} calls, want \
             {caller}+0x… with all of them"
        );
        sites.push(busiest.0.clone());
    }
    ensure!(
        sites[0] == sites[1],
        "{} and {} name different return addresses: {sites:?}",
        runs[0].1,
        runs[1].1
    );
    Ok(())
}

/// The `tmpfs_write:` result lines, in the script's order.
pub(super) fn tmpfs_write_results(guest: &Guest) -> Vec<String> {
    guest
        .lines_containing("tmpfs_write: ")
        .into_iter()
        .filter(|line| line.starts_with("tmpfs_write: "))
        .collect()
}

pub(super) fn check_size_classes(report: &Report, function: &str, lines: &[String]) -> Result<()> {
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for line in lines {
        let fields = Fields::parse("tmpfs_write", line.trim_start_matches("tmpfs_write:"));
        let (bytes, chunk, writes) = (
            fields.u64("bytes")?,
            fields.u64("chunk")?,
            fields.u64("writes")?,
        );
        let (full, rest) = (bytes / chunk, bytes % chunk);
        ensure!(
            writes == full + u64::from(rest > 0),
            "{line}: not the writes its sizes make"
        );
        *expected.entry(log2_class_label(chunk)).or_default() += full;
        if rest > 0 {
            *expected.entry(log2_class_label(rest)).or_default() += 1;
        }
    }
    ensure!(
        report.json["by"] == serde_json::json!(["arg2:log2"]),
        "by is {}",
        report.json["by"]
    );
    let rows = key_rows(report, function)?;
    for (class, want) in &expected {
        let got = rows
            .iter()
            .find(|(key, _)| key.as_slice() == std::slice::from_ref(class))
            .map_or(0, |row| row.1);
        ensure!(
            got == *want,
            "arg2:log2 {class}: {got} calls, want {want} (rows {rows:?})"
        );
    }
    let count = report.function(function)?.u64("count")?;
    let keyed: u64 = rows.iter().map(|row| row.1).sum();
    ensure!(keyed == count, "the key rows hold {keyed} of {count} calls");
    Ok(())
}

/// `--slowest` keeps the calls that explain a tail: one long sleep among short ones is the
/// first exemplar, its duration within 10 % of the workload's own clock for it, with its
/// process, comm and off-CPU part. `--filter` records exactly the calls that match, in the
/// kernel, and counts the rest: writes of at least 4 KiB among smaller ones, failed opens
/// of one command. A bad expression is one line naming the bad token.
pub(super) fn slowest_and_filter(ctx: &mut Ctx) -> Result<()> {
    const FOUND: u64 = 150;
    const MISSING: u64 = 60;
    let guest = ctx.run(&format!(
        r#"
hotprof --fn do_nanosleep --slowest 3 --off-cpu --json /out/slow.json -- sh -c 'sleeper 20 2000 && sleeper 1 300000 && sleeper 20 2000' || exit 1
hotprof --fn vfs_write --filter 'arg2>=4096' --no-calibrate --json /out/big.json -- sh -c 'tmpfs_write /tmp/a 1 && tmpfs_write /tmp/b 1 --chunk 1000' || exit 1
hotprof --fn do_sys_openat2 --filter 'errno==ENOENT && comm==open_loop' --no-calibrate --json /out/failed.json -- open_loop {FOUND} {MISSING} /tmp || exit 1
hotprof --syscall getpid --stacks --user-stacks --folded /out/user.folded --no-calibrate -- syscall_lat 3000 > /dev/null || exit 1
hotprof --fn vfs_write --stacks --folded /out/kernel.folded --no-calibrate -- tmpfs_write /tmp/k 1 > /dev/null || exit 1
bad() {{ "$@" 2>/out/bad_err.txt >/dev/null; echo "bad_rc=$? lines=$(wc -l </out/bad_err.txt) $(cat /out/bad_err.txt)"; }}
bad hotprof --fn vfs_write --filter 'arg2>=4x' -- true
true
"#
    ))?;
    guest.expect_exit(0)?;

    let long: Vec<String> = guest
        .lines_containing("sleeper: count=1 ")
        .into_iter()
        .filter(|line| line.starts_with("sleeper: "))
        .collect();
    ensure!(
        long.len() == 1,
        "want one result of the long sleep, got {long:?}"
    );
    let long = Fields::parse("sleeper", long[0].trim_start_matches("sleeper:"));
    let (slept, pid) = (long.u64("max_ns")?, long.u64("pid")?);
    let report = guest.report("slow.json")?;
    let slowest = slowest_calls(&report, 3)?;
    let first = &slowest[0];
    let duration = first["duration_ns"].as_u64().unwrap_or(0);
    ensure!(
        duration.abs_diff(slept) * 10 <= slept,
        "the slowest call took {duration} ns; the workload's long sleep {slept} ns"
    );
    ensure!(
        first["pid"].as_u64() == Some(pid) && first["comm"] == "sleeper",
        "the slowest call is not the long sleeper's (pid {pid}): {first}"
    );
    let off_cpu = first["off_cpu_ns"].as_u64().unwrap_or(0);
    ensure!(
        off_cpu * 10 >= duration * 9 && off_cpu <= duration,
        "a sleep is off the CPU: {off_cpu} of {duration} ns"
    );
    let durations: Vec<u64> = slowest
        .iter()
        .filter_map(|c| c["duration_ns"].as_u64())
        .collect();
    ensure!(
        durations.windows(2).all(|pair| pair[0] >= pair[1]),
        "the slowest calls are not slowest first: {durations:?}"
    );

    let writes: Vec<Fields> = guest
        .lines_containing("tmpfs_write: ")
        .into_iter()
        .filter(|line| line.starts_with("tmpfs_write: "))
        .map(|line| Fields::parse("tmpfs_write", line.trim_start_matches("tmpfs_write:")))
        .collect();
    ensure!(writes.len() == 2, "want two tmpfs_write results");
    let mut big = 0;
    let mut small = 0;
    for fields in &writes {
        let (bytes, chunk) = (fields.u64("bytes")?, fields.u64("chunk")?);
        let (full, rest) = (bytes / chunk, bytes % chunk);
        let (full_big, rest_big) = (chunk >= 4096, rest >= 4096);
        big += if full_big { full } else { 0 } + u64::from(rest > 0 && rest_big);
        small += if full_big { 0 } else { full } + u64::from(rest > 0 && !rest_big);
    }
    let report = guest.report("big.json")?;
    let count = report.function("vfs_write")?.u64("count")?;
    let not_matched = report.json["filter"]["not_matched"].as_u64().unwrap_or(0);
    // Besides the small writes, the workloads' two result lines did not match.
    ensure!(
        count == big && not_matched == small + 2,
        "--filter arg2>=4096: {count} recorded, {not_matched} not matched; want {big} and {} ",
        small + 2
    );

    let report = guest.report("failed.json")?;
    let count = report.function("do_sys_openat2")?.u64("count")?;
    let not_matched = report.json["filter"]["not_matched"].as_u64().unwrap_or(0);
    ensure!(
        (count, not_matched) == (MISSING, FOUND + 1),
        "--filter errno==ENOENT: {count} recorded and {not_matched} not matched, want \
         {MISSING} and {} (the found opens and the runtime's one)",
        FOUND + 1
    );

    // Stacks start at what was probed: no BPF, trampoline or tracepoint-path frame; and the
    // workload's user frames are named although it exited before the report was made.
    let probe_frame = |frame: &str| {
        [
            "0x",
            "bpf_",
            "perf_syscall",
            "syscall_trace_enter",
            "perf_trace",
        ]
        .iter()
        .any(|p| frame.starts_with(p))
    };
    for file in ["user.folded", "kernel.folded"] {
        let text = fs::read_to_string(guest.outcome.out_dir.join(file))
            .with_context(|| format!("no /out/{file}"))?;
        ensure!(!text.trim().is_empty(), "{file} is empty");
        for line in text.lines() {
            let (stack, _) = line
                .rsplit_once(' ')
                .context("a folded line without a count")?;
            ensure!(
                !stack.split(';').any(probe_frame),
                "{file}: a stack holds a probe frame: {line}"
            );
            if file == "kernel.folded" {
                ensure!(
                    stack.ends_with(";vfs_write_[k]"),
                    "{file}: a stack does not end at the probed function: {line}"
                );
            }
        }
    }
    let user = fs::read_to_string(guest.outcome.out_dir.join("user.folded"))?;
    let (mut named, mut all) = (0u64, 0u64);
    for line in user.lines().filter(|l| l.starts_with("syscall_lat")) {
        let (stack, count) = line
            .rsplit_once(' ')
            .context("a folded line without a count")?;
        let count: u64 = count.parse()?;
        all += count;
        if stack
            .split(';')
            .skip(1)
            .any(|f| !f.ends_with("_[k]") && f != "[unknown]" && !f.contains("+0x"))
        {
            named += count;
        }
    }
    ensure!(
        all > 0 && named * 10 >= all * 9,
        "only {named} of syscall_lat's {all} getpid calls have a named user frame after it exited"
    );

    let lines = guest.lines_containing("bad value `4x`");
    ensure!(
        lines.len() == 1 && lines[0].contains(" lines=1 ") && !lines[0].starts_with("bad_rc=0 "),
        "a bad --filter is not one line and a failing exit: {lines:?}"
    );
    Ok(())
}

/// `--children`: the page-cache write loop begins and ends exactly one page per page-sized,
/// page-aligned write, so each child is called exactly once per parent call; the children's
/// self times and the parent's own add up to the parent's total, to the nanosecond. A child
/// called outside the parent is not timed: `shmem_write_begin` alone with a parent that
/// never runs records nothing. `sample --inside` keeps only samples taken while the task is
/// inside the function: every sampled stack holds it, and samples outside were taken and left
/// out (counted).
pub(super) fn children_inside(ctx: &mut Ctx) -> Result<()> {
    let guest = ctx.run(
        r#"
hotprof --fn generic_perform_write --children 'shmem_write_*' --json /out/kids.json -- tmpfs_write /tmp/w 1 || exit 1
hotprof --fn vfs_fsync --children shmem_write_begin --no-calibrate --json /out/outside.json -- tmpfs_write /tmp/v 1 || exit 1
hotprof sample --inside generic_perform_write --folded /out/inside.folded -- tmpfs_write /tmp/s 32 > /out/inside.txt || exit 1
cat /out/inside.txt
bad() { "$@" 2>/out/bad_err.txt >/dev/null; echo "bad_rc=$? lines=$(wc -l </out/bad_err.txt) $(cat /out/bad_err.txt)"; }
bad hotprof --fn 'vfs_read*' --children shmem_write_begin -- true
bad hotprof --fn 'vfs_*' --max-functions 3 -- true
true
"#,
    )?;
    guest.expect_exit(0)?;
    let writes: Vec<u64> = guest
        .lines_containing("tmpfs_write: ")
        .iter()
        .filter(|line| line.starts_with("tmpfs_write: "))
        .map(|line| Fields::parse("tmpfs_write", line.trim_start_matches("tmpfs_write:")))
        .map(|fields| fields.u64("writes"))
        .collect::<Result<_>>()?;
    ensure!(
        writes.len() == 3,
        "want three tmpfs_write results, got {writes:?}"
    );
    let report = guest.report("kids.json")?;
    let parent = report.function("generic_perform_write")?;
    ensure!(
        parent.u64("count")? == writes[0],
        "the parent's calls are not the writes"
    );
    let mut self_sum = parent.u64("self_sum_ns")?;
    for child in ["shmem_write_begin", "shmem_write_end"] {
        let fields = report.function(child)?;
        ensure!(
            fields.u64("count")? == writes[0] && fields.str("child_of")? == "generic_perform_write",
            "{child}: {} calls for {} parent calls (want one each), child of {:?}",
            fields.u64("count")?,
            writes[0],
            fields.str("child_of").ok()
        );
        self_sum += fields.u64("self_sum_ns")?;
    }
    let total = parent.u64("sum_ns")?;
    ensure!(
        self_sum == total,
        "the children's and the parent's self times add up to {self_sum} ns, the parent's total is {total} ns"
    );
    let outside = guest.report("outside.json")?;
    let begun = outside.function("shmem_write_begin")?.u64("count")?;
    ensure!(
        begun == 0,
        "shmem_write_begin outside any vfs_fsync was timed {begun} times"
    );
    let folded = fs::read_to_string(guest.outcome.out_dir.join("inside.folded"))
        .context("sample --inside wrote no folded file")?;
    let stacks: Vec<&str> = folded.lines().collect();
    ensure!(!stacks.is_empty(), "sample --inside took no samples");
    let outside: Vec<&&str> = stacks
        .iter()
        .filter(|line| {
            !line
                .split(';')
                .any(|frame| frame.starts_with("generic_perform_write"))
        })
        .collect();
    ensure!(
        outside.is_empty(),
        "{} of {} sampled stacks are not inside generic_perform_write, e.g. {:?}",
        outside.len(),
        stacks.len(),
        outside.first()
    );
    let left_out: u64 = guest
        .lines_containing("only inside generic_perform_write: ")
        .first()
        .and_then(|line| line.split_whitespace().nth(3).map(str::to_owned))
        .and_then(|n| n.parse().ok())
        .context("sample --inside did not say how many samples it left out")?;
    ensure!(
        left_out > 0,
        "no sample of the workload fell outside the function: the filter went untested"
    );
    let lines = guest.lines_containing("more than --max-functions 3");
    ensure!(
        lines.len() == 1 && lines[0].contains(" lines=1 ") && !lines[0].starts_with("bad_rc=0 "),
        "a glob past --max-functions is not one line and a failing exit: {lines:?}"
    );
    let lines = guest.lines_containing("--children times functions inside one parent");
    ensure!(
        lines.len() == 1 && lines[0].contains(" lines=1 ") && !lines[0].starts_with("bad_rc=0 "),
        "--children with a glob parent is not one line and a failing exit: {lines:?}"
    );
    Ok(())
}
