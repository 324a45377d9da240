//! Host check of the latency heatmap: a workload with two known latency modes in two phases
//! (1 ms sleeps, then 20 ms sleeps), drawn by `--heatmap` from the syscall tracepoints.

use std::process::Command;

use anyhow::{Context, Result, ensure};

use crate::host::{binaries, output};

const SHORT_SLEEPS: u64 = 300;
const LONG_SLEEPS: u64 = 20;
/// The lower edge of the heatmap row holding 20 ms (a quarter of 2^24 ns each): every long
/// sleep lies at or above it, every short one (1 ms and the timer's slack) far below.
const LONG_ROW_NS: u64 = 1 << 24;

/// `hotprof --syscall clock_nanosleep --heatmap` over `sleeper 300 1000 && sleeper 20 20000`:
/// every interval's rows hold exactly its calls, the intervals lie end to end, the 20 ms row
/// and above hold exactly the 20 long sleeps, all of them in columns after the last short
/// one, the SVG's cells carry every call, `hotprof heatmap` redraws the same bytes from the
/// JSON, and a recording without intervals is one line saying how to get one. With
/// `--by comm` over a sleeper and a `sleep`, each comm has its panel with exactly its calls.
pub fn heatmap_modes() -> Result<()> {
    let (hotprof, _) = binaries()?;
    let sleeper = hotprof.with_file_name("sleeper");
    let dir = tempfile::tempdir()?;
    // `hotprof --syscall clock_nanosleep ARGS -- sh -c SCRIPT`, which must succeed.
    let record = |args: &[&std::ffi::OsStr], script: String| -> Result<()> {
        let out = output(
            Command::new(&hotprof)
                .args(["--syscall", "clock_nanosleep"])
                .args(args)
                .args(["--", "sh", "-c"])
                .arg(&script),
        )?;
        ensure!(
            out.status.success(),
            "hotprof {args:?} -- sh -c '{script}' failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    // `hotprof heatmap JSON -o SVG`.
    let redraw = |json: &std::path::Path, svg: &std::path::Path| {
        output(
            Command::new(&hotprof)
                .arg("heatmap")
                .arg(json)
                .arg("-o")
                .arg(svg),
        )
    };
    let (svg, json) = (
        dir.path().join("sleeps.svg"),
        dir.path().join("sleeps.json"),
    );
    record(
        &[
            "--heatmap".as_ref(),
            svg.as_ref(),
            "--json".as_ref(),
            json.as_ref(),
        ],
        format!(
            "{0} {SHORT_SLEEPS} 1000 && {0} {LONG_SLEEPS} 20000",
            sleeper.display()
        ),
    )?;
    let recording: serde_json::Value = serde_json::from_slice(&std::fs::read(&json)?)?;
    let total = recording["functions"][0]["count"].as_u64().unwrap_or(0);
    ensure!(
        total == SHORT_SLEEPS + LONG_SLEEPS,
        "hotprof counted {total} clock_nanosleep calls, the workload made {}",
        SHORT_SLEEPS + LONG_SLEEPS
    );
    let intervals = recording["intervals"]
        .as_array()
        .context("the recording has no intervals")?;
    // Per column: (calls in the short mode's rows, calls in the long mode's rows).
    let mut columns = Vec::new();
    let mut previous_end = 0;
    for interval in intervals {
        let function = &interval["functions"][0];
        let rows: Vec<[u64; 3]> =
            serde_json::from_value(function["heat_buckets"].clone()).unwrap_or_default();
        let count = function["count"].as_u64().unwrap_or(0);
        ensure!(
            rows.iter().map(|r| r[2]).sum::<u64>() == count,
            "interval {}: its rows hold {:?}, its count is {count}",
            interval["index"],
            rows
        );
        let (end, covered) = (
            interval["elapsed_ns"].as_u64().unwrap_or(0),
            interval["duration_ns"].as_u64().unwrap_or(0),
        );
        ensure!(
            end - covered == previous_end,
            "interval {} starts at {} ns, the previous ended at {previous_end} ns",
            interval["index"],
            end - covered
        );
        previous_end = end;
        let long: u64 = rows
            .iter()
            .filter(|r| r[0] >= LONG_ROW_NS)
            .map(|r| r[2])
            .sum();
        columns.push((count - long, long));
    }
    let (short, long): (u64, u64) = columns
        .iter()
        .fold((0, 0), |(s, l), &(cs, cl)| (s + cs, l + cl));
    ensure!(
        (short, long) == (SHORT_SLEEPS, LONG_SLEEPS),
        "the heatmap's rows hold {short} short and {long} long sleeps, want {SHORT_SLEEPS} and \
         {LONG_SLEEPS}: {columns:?}"
    );
    let last_short = columns.iter().rposition(|c| c.0 > 0);
    let first_long = columns.iter().position(|c| c.1 > 0);
    ensure!(
        last_short <= first_long,
        "a short sleep's column ({last_short:?}) comes after a long sleep's ({first_long:?}): \
         {columns:?}"
    );
    let picture = std::fs::read_to_string(&svg)?;
    let drawn: u64 = picture
        .split(" calls</title>")
        .filter_map(|before| before.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    ensure!(
        drawn == total,
        "the SVG's cells carry {drawn} calls, the recording {total}"
    );
    let redrawn = dir.path().join("again.svg");
    let again = redraw(&json, &redrawn)?;
    ensure!(
        again.status.success() && std::fs::read(&redrawn)? == picture.as_bytes(),
        "hotprof heatmap did not redraw the run's SVG from its JSON: {}",
        String::from_utf8_lossy(&again.stderr)
    );

    // A recording without intervals: one line, non-zero, saying how to make one.
    let plain = dir.path().join("plain.json");
    let mut without: serde_json::Value = recording.clone();
    without["intervals"] = serde_json::json!([]);
    std::fs::write(&plain, serde_json::to_vec(&without)?)?;
    let refused = redraw(&plain, &dir.path().join("none.svg"))?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    ensure!(
        !refused.status.success()
            && stderr.lines().count() == 1
            && stderr.contains("no interval records")
            && stderr.contains("--interval"),
        "hotprof heatmap of a recording without intervals: exit {:?}, {stderr:?}",
        refused.status.code()
    );
    // With --by: a panel per key value holding exactly its calls.
    let keyed = dir.path().join("keyed.svg");
    record(
        &[
            "--by".as_ref(),
            "comm".as_ref(),
            "--heatmap".as_ref(),
            keyed.as_ref(),
        ],
        format!(
            "{} {SHORT_SLEEPS} 1000 & sleep 0.3; wait",
            sleeper.display()
        ),
    )?;
    let picture = std::fs::read_to_string(&keyed)?;
    for (comm, calls) in [("sleeper", SHORT_SLEEPS), ("sleep", 1)] {
        let heading = format!(
            "clock_nanosleep, comm={comm} <tspan font-weight=\"normal\">({calls} calls in "
        );
        ensure!(
            picture.contains(&heading),
            "the --by comm heatmap has no panel `{heading}…`"
        );
    }
    println!(
        "  {} columns: {SHORT_SLEEPS} sleeps of 1 ms, then {LONG_SLEEPS} of 20 ms in the rows \
         from {} ms, every call in its column and the SVG; `hotprof heatmap` redraws it; \
         --by comm: a panel per comm, exact",
        columns.len(),
        LONG_ROW_NS as f64 / 1e6
    );
    Ok(())
}
