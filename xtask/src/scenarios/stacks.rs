//! `--stacks`: latency-weighted flamegraphs and folded stacks.

use std::fs;

use anyhow::{Context, Result, ensure};

use super::harness::Ctx;
use crate::kernels::Kernel;

/// Latency by call path: tmpfs writes through `generic_perform_write` (the caller of
/// `copy_page_from_iter_atomic`, which Debian's 6.1 and 6.12 kernels refuse to kprobe and
/// do not list for ftrace), captured at entry and weighted by latency. The SVG is valid XML,
/// shows the shmem write path, and its total equals the histogram's total latency.
pub(super) fn stacks_flamegraph(ctx: &mut Ctx) -> Result<()> {
    let guest = ctx.run(
        "hotprof --fn generic_perform_write --stacks --flamegraph /out/f.svg --folded /out/f.folded \
         --json /out/r.json -- tmpfs_write /tmp/w 8",
    )?;
    guest.expect_exit(0)?;
    let report = guest.report("r.json")?;
    let function = report.function("generic_perform_write")?;
    let count = function.u64("count")?;
    // One generic_perform_write per write(2): the workload is the only process counted.
    let writes = guest.workload("tmpfs_write")?.u64("writes")?;
    ensure!(
        count == writes,
        "generic_perform_write counted {count} calls for {writes} writes"
    );
    let sum_ns = function.u64("sum_ns")?;
    let losses = &report.json["losses"];
    ensure!(
        losses["stacks_lost"] == 0 && losses["stack_totals_full"] == 0,
        "stacks were lost: {losses}"
    );
    let svg = fs::read_to_string(guest.outcome.out_dir.join("f.svg")).context("no flamegraph")?;
    let document = roxmltree::Document::parse_with_options(
        &svg,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .context("the flamegraph is not valid XML")?;
    let titles: Vec<String> = document
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text().map(str::to_owned))
        .collect();
    // tmpfs writes go through shmem_file_write_iter on 6.12; 6.1 still used
    // generic_file_write_iter for shmem.
    let write_path = match ctx.kernel() {
        Kernel::V6_1 | Kernel::V5_10 => "generic_file_write_iter",
        Kernel::V6_12 | Kernel::V7 | Kernel::V7Rt => "shmem_file_write_iter",
    };
    for frame in ["vfs_write", write_path] {
        ensure!(
            titles.iter().any(|t| t.starts_with(&format!("{frame} ("))),
            "the flamegraph has no {frame} frame"
        );
    }
    let root = titles
        .iter()
        .find(|t| t.starts_with("all ("))
        .context("no root frame")?;
    let root_total: u64 = root["all (".len()..]
        .split(' ')
        .next()
        .unwrap_or_default()
        .replace(',', "")
        .parse()
        .with_context(|| format!("cannot read the root total from {root:?}"))?;
    ensure!(
        root_total == sum_ns,
        "the flamegraph totals {root_total} ns, the histogram {sum_ns} ns"
    );
    let folded = fs::read_to_string(guest.outcome.out_dir.join("f.folded"))?;
    let folded_total: u64 = folded
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    ensure!(
        folded_total == sum_ns,
        "the folded stacks total {folded_total} ns, the histogram {sum_ns} ns"
    );
    Ok(())
}

/// Every stack of a probed function holds that function exactly once, as its leaf, in each
/// mechanism that takes stacks: fentry/fexit pairs, perf kprobes and the kprobe.multi link.
/// Since 6.19 fexit trampolines are entered by `jmp`, so a stack taken at the return would
/// miss the function's own frame; hotprof takes it at the entry, and this keeps it so. (The
/// sessions, kprobe.session and fsession, keep no frames and take no stacks: a `--stacks` run
/// of a lone function goes through the pairs or the kprobe.multi link instead.)
pub(super) fn leaf_frame_every_mechanism(ctx: &mut Ctx) -> Result<()> {
    let runs = [
        ("fentry", "--mode fentry"),
        ("kprobe", "--mode kprobe --no-kprobe-multi"),
        ("kprobe.multi", "--mode kprobe"),
    ];
    let script: Vec<String> = runs
        .iter()
        .enumerate()
        .map(|(i, (_, flags))| {
            format!(
                "hotprof --fn vfs_read {flags} --stacks --folded /out/{i}.folded \
                 --json /out/{i}.json -- file_read /tmp/f 4"
            )
        })
        .collect();
    let guest = ctx.run(&script.join(" && "))?;
    guest.expect_exit(0)?;
    const LEAF: &str = "vfs_read_[k]";
    for (i, (mode, _)) in runs.iter().enumerate() {
        let report = guest.report(&format!("{i}.json"))?;
        ensure!(
            report.json["mode"] == *mode,
            "mode {}, want {mode}",
            report.json["mode"]
        );
        let sum_ns = report.function("vfs_read")?.u64("sum_ns")?;
        let folded = fs::read_to_string(guest.outcome.out_dir.join(format!("{i}.folded")))?;
        let mut total = 0;
        for line in folded.lines() {
            let (stack, weight) = line
                .rsplit_once(' ')
                .with_context(|| format!("{mode}: not a folded line: {line:?}"))?;
            let frames: Vec<&str> = stack.split(';').collect();
            ensure!(
                frames.last() == Some(&LEAF) && frames.iter().filter(|f| **f == LEAF).count() == 1,
                "{mode}: a stack without vfs_read exactly once at its leaf: {line:?}"
            );
            total += weight.parse::<u64>().with_context(|| format!("{line:?}"))?;
        }
        ensure!(
            total == sum_ns && total > 0,
            "{mode}: the stacks total {total} ns, the histogram {sum_ns} ns"
        );
    }
    Ok(())
}
