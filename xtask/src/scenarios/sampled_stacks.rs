//! `--stacks-every N`: stacks walked for a random 1 in N calls, weighted ×N in the outputs.
//!
//! One function with two call paths in a known proportion: `shmem_get_folio_gfp` runs once
//! per 4 KiB page a tmpfs write fills (`shmem_write_begin`) and once per page a tmpfs read
//! copies (`shmem_file_read_iter`), so `tmpfs_write 48 MiB` and `file_read 16 MiB` in 4 KiB
//! chunks give 12288 and 4096 calls on the two paths: 3 to 1. (A few more calls come from
//! page faults and exec's reads of the binaries; they are other paths, or other tasks.)
//! `--by caller,comm` counts each path in the kernel, exactly, whatever the stacks do.

use std::fs;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use super::harness::{Ctx, Guest, Report};

/// MiB written and read, in 4 KiB chunks: one call per page and chunk.
const WRITE_MIB: u64 = 48;
const READ_MIB: u64 = 16;
const PAGE: u64 = 4096;
/// The N of the sampled run.
const EVERY: u64 = 8;
/// Standard deviations an estimate may stray: a false alarm once in ~1.7 million checks.
const SIGMAS: f64 = 5.0;
const FUNCTION: &str = "shmem_get_folio_gfp";

/// The two paths, as the folded stacks show them: the task (root frame) and a frame only
/// that path has.
const WRITE_PATH: (&str, &str) = ("tmpfs_write", "shmem_write_begin_[k]");
const READ_PATH: (&str, &str) = ("file_read", "vfs_read_[k]");

pub(super) fn sampled_stacks(ctx: &mut Ctx) -> Result<()> {
    let workload = format!(
        "tmpfs_write /tmp/w {WRITE_MIB} --chunk {PAGE} && file_read /tmp/r {READ_MIB} --chunk {PAGE}"
    );
    let hotprof = format!("hotprof --fn {FUNCTION} --by caller,comm --weight count --no-calibrate");
    let guest = ctx.run(&format!(
        r#"
file_read /tmp/r {READ_MIB} --chunk {PAGE} >/dev/null || exit 1
{hotprof} --stacks --folded /out/exact.folded --json /out/exact.json -- sh -c '{workload}' || exit 1
{hotprof} --stacks-every {EVERY} --folded /out/sampled.folded --json /out/sampled.json -- sh -c '{workload}' || exit 1
"#
    ))?;
    guest.expect_exit(0)?;
    let (writes, pages_read) = workload_calls(&guest)?;

    // Exact stacks: every call walked, each path's count the workload's.
    let exact = guest.report("exact.json")?;
    check_counted_exactly(&exact, "exact", writes, pages_read)?;
    let exact_stacks = stack_sampling(&exact)?;
    let exact_count = exact.function(FUNCTION)?.u64("count")?;
    ensure!(
        exact_stacks == (1, exact_count),
        "--stacks: the JSON says {exact_stacks:?} (sample_every, walked_calls), want every one \
         of the {exact_count} calls walked"
    );
    let folded = read_folded(&guest, "exact.folded")?;
    for ((comm, frame), want) in [(WRITE_PATH, writes), (READ_PATH, pages_read)] {
        let got = path_weight(&folded, comm, frame);
        ensure!(
            got == want,
            "--stacks: the {comm} path through {frame} weighs {got} calls, want exactly {want}"
        );
    }

    // Sampled stacks: the function still counted exactly, the stacks estimates.
    let sampled = guest.report("sampled.json")?;
    check_counted_exactly(&sampled, "sampled", writes, pages_read)?;
    let count = sampled.function(FUNCTION)?.u64("count")?;
    let (every, walked) = stack_sampling(&sampled)?;
    ensure!(
        every == EVERY,
        "--stacks-every {EVERY}: the JSON says sample_every {every}"
    );
    within(
        walked as f64,
        count as f64 / EVERY as f64,
        binomial_sd(count, EVERY),
        &format!("calls walked of {count}"),
    )?;
    let folded = read_folded(&guest, "sampled.folded")?;
    let total: u64 = folded.iter().map(|(_, weight)| weight).sum();
    ensure!(
        total == walked * EVERY,
        "the sampled folded stacks weigh {total} calls, want {walked} walked × {EVERY}"
    );
    if let Some((stack, weight)) = folded.iter().find(|(_, weight)| weight % EVERY != 0) {
        anyhow::bail!("a sampled stack weighs {weight} calls, not a multiple of {EVERY}: {stack}");
    }
    for ((comm, frame), truth) in [(WRITE_PATH, writes), (READ_PATH, pages_read)] {
        within(
            path_weight(&folded, comm, frame) as f64,
            truth as f64,
            weighted_sd(truth, EVERY),
            &format!("weighted calls of the {comm} path through {frame}"),
        )?;
    }
    let note = format!("stacks: 1 in {EVERY} calls walked at random ({walked} of {count})");
    ensure!(
        !guest.lines_containing(&note).is_empty(),
        "the report does not say `{note}`"
    );
    Ok(())
}

/// The calls each path makes, from the measured runs' result lines: tmpfs_write's writes
/// (one page each) and the pages file_read read (its last read returns 0 and makes none).
fn workload_calls(guest: &Guest) -> Result<(u64, u64)> {
    let written: Vec<String> = guest
        .lines_containing("tmpfs_write: ")
        .into_iter()
        .filter(|line| line.starts_with("tmpfs_write: "))
        .collect();
    let read: Vec<String> = guest
        .lines_containing("file_read: ")
        .into_iter()
        .filter(|line| line.starts_with("file_read: "))
        .collect();
    ensure!(
        written.len() == 2 && read.len() == 2,
        "want two result lines of each workload, got {written:?} and {read:?}"
    );
    let writes = guest.workload("tmpfs_write")?.u64("writes")?;
    let file_read = guest.workload("file_read")?;
    let bytes = file_read.u64("bytes")?;
    ensure!(
        writes == WRITE_MIB * 1024 * 1024 / PAGE && bytes == READ_MIB * 1024 * 1024,
        "tmpfs_write made {writes} writes and file_read read {bytes} bytes"
    );
    ensure!(
        file_read.u64("created")? == 0,
        "file_read wrote its file while measured"
    );
    Ok((writes, bytes / PAGE))
}

/// The kernel's own count of each path (`--by caller,comm`): exact however stacks are taken.
fn check_counted_exactly(report: &Report, run: &str, writes: u64, pages_read: u64) -> Result<()> {
    let function = function_json(report)?;
    let count = function["count"].as_u64().context("no count")?;
    let rows = function["keys"].as_array().context("no per-key rows")?;
    let calls_of = |caller: &str, comm: &str| -> u64 {
        rows.iter()
            .filter(|row| {
                row["key"][0]
                    .as_str()
                    .is_some_and(|site| site.starts_with(&format!("{caller}+0x")))
                    && row["key"][1] == comm
            })
            .filter_map(|row| row["count"].as_u64())
            .sum()
    };
    let write_calls = calls_of("shmem_write_begin", "tmpfs_write");
    let read_calls = calls_of("shmem_file_read_iter", "file_read");
    ensure!(
        (write_calls, read_calls) == (writes, pages_read),
        "{run}: {FUNCTION} counted {write_calls} calls from tmpfs_write's writes and {read_calls} \
         from file_read's reads, want exactly {writes} and {pages_read}"
    );
    let in_rows: u64 = rows.iter().filter_map(|row| row["count"].as_u64()).sum();
    ensure!(
        in_rows == count,
        "{run}: the per-key rows hold {in_rows} calls of {count}"
    );
    let losses = &report.json["losses"];
    for loss in ["stacks_lost", "stack_totals_full", "keys_full"] {
        ensure!(losses[loss] == 0, "{run}: {loss} is {}", losses[loss]);
    }
    Ok(())
}

fn function_json(report: &Report) -> Result<&Value> {
    report.json["functions"]
        .as_array()
        .and_then(|functions| functions.iter().find(|f| f["name"] == FUNCTION))
        .with_context(|| format!("the report has no {FUNCTION}"))
}

/// `functions[].stacks` of the probed function: (sample_every, walked_calls).
fn stack_sampling(report: &Report) -> Result<(u64, u64)> {
    let stacks = &function_json(report)?["stacks"];
    let field = |name: &str| {
        stacks[name]
            .as_u64()
            .with_context(|| format!("functions[].stacks has no {name}: {stacks}"))
    };
    Ok((field("sample_every")?, field("walked_calls")?))
}

fn read_folded(guest: &Guest, name: &str) -> Result<Vec<(String, u64)>> {
    let text = fs::read_to_string(guest.outcome.out_dir.join(name))
        .with_context(|| format!("the guest left no /out/{name}"))?;
    parse_folded(&text).with_context(|| format!("/out/{name}"))
}

/// `frame;frame;… WEIGHT` lines.
fn parse_folded(text: &str) -> Result<Vec<(String, u64)>> {
    text.lines()
        .map(|line| {
            let (stack, weight) = line
                .rsplit_once(' ')
                .with_context(|| format!("not a folded line: {line}"))?;
            let weight = weight
                .parse()
                .with_context(|| format!("not a weight: {line}"))?;
            Ok((stack.to_owned(), weight))
        })
        .collect()
}

/// The weight of the stacks of task `comm` (the root frame) that pass through `frame`.
fn path_weight(folded: &[(String, u64)], comm: &str, frame: &str) -> u64 {
    folded
        .iter()
        .filter(|(stack, _)| {
            let mut frames = stack.split(';');
            frames.next() == Some(comm) && frames.any(|f| f == frame)
        })
        .map(|(_, weight)| weight)
        .sum()
}

/// Standard deviation of how many of `calls` are walked, each with probability 1/`every`.
fn binomial_sd(calls: u64, every: u64) -> f64 {
    let p = 1.0 / every as f64;
    (calls as f64 * p * (1.0 - p)).sqrt()
}

/// Standard deviation of the weighted estimate of a path of `calls` calls: `every` times the
/// binomial one, √(calls·(every−1)).
fn weighted_sd(calls: u64, every: u64) -> f64 {
    every as f64 * binomial_sd(calls, every)
}

/// `got` within [`SIGMAS`] standard deviations `sd` of `want`.
fn within(got: f64, want: f64, sd: f64, what: &str) -> Result<()> {
    let bound = SIGMAS * sd;
    ensure!(
        (got - want).abs() <= bound,
        "{what}: {got}, want {want:.1} ± {bound:.1} ({SIGMAS} σ of {sd:.1})"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOLDED: &str = "\
tmpfs_write;entry_SYSCALL_64_after_hwframe_[k];ksys_write_[k];vfs_write_[k];generic_perform_write_[k];shmem_write_begin_[k];shmem_get_folio_gfp_[k] 6112
file_read;entry_SYSCALL_64_after_hwframe_[k];ksys_read_[k];vfs_read_[k];shmem_file_read_iter_[k];shmem_get_folio_gfp_[k] 2240
tmpfs_write;asm_exc_page_fault_[k];shmem_fault_[k];shmem_get_folio_gfp_[k] 16
hotprof;__x64_sys_execve_[k];__kernel_read_[k];shmem_file_read_iter_[k];shmem_get_folio_gfp_[k] 8
";

    #[test]
    fn paths_are_told_apart_by_task_and_frame() {
        let folded = parse_folded(FOLDED).unwrap();
        assert_eq!(path_weight(&folded, WRITE_PATH.0, WRITE_PATH.1), 6112);
        assert_eq!(path_weight(&folded, READ_PATH.0, READ_PATH.1), 2240);
        // exec's read of a binary is neither path, though it also reads tmpfs.
        assert_eq!(path_weight(&folded, "hotprof", READ_PATH.1), 0);
        // A frame must match whole, not as a prefix.
        assert_eq!(path_weight(&folded, "file_read", "vfs_read"), 0);
        assert!(parse_folded("no-weight").is_err());
        assert!(parse_folded("a;b x").is_err());
    }

    #[test]
    fn tolerances_are_the_binomial_ones() {
        // 16384 calls, 1 in 8: 2048 walked ± 42.3.
        assert!((binomial_sd(16_384, 8) - 42.33).abs() < 0.01);
        // A path of 12288 calls, weighted ×8: ± √(12288·7) = ± 293.3.
        assert!((weighted_sd(12_288, 8) - (12_288.0f64 * 7.0).sqrt()).abs() < 1e-9);
        assert!(within(12_288.0 + 1_466.0, 12_288.0, weighted_sd(12_288, 8), "x").is_ok());
        let far = within(12_288.0 + 1_468.0, 12_288.0, weighted_sd(12_288, 8), "path");
        assert!(
            far.unwrap_err()
                .to_string()
                .starts_with("path: 13756, want 12288.0 ± 1466")
        );
        // Unweighted counts read as the estimate would be far off: 1536 is not 12288.
        assert!(within(1_536.0, 12_288.0, weighted_sd(12_288, 8), "x").is_err());
    }
}
