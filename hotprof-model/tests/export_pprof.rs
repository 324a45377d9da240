//! The pprof export, read back by the real `go tool pprof` (Debian package `golang-go`):
//! frames, flat/cumulative totals for both sample types, the exact per-stack values and the
//! comments. Skips with a message when `go` is not installed.

#[path = "fixtures/export/common.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hotprof_model::export::pprof::{ProfileMeta, encode};

fn pprof(args: &[&str], file: &Path) -> String {
    let output = common::run_with_timeout(
        Command::new("go")
            .args(["tool", "pprof"])
            .args(args)
            .arg(file),
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "go tool pprof {args:?} failed:\n{stderr}"
    );
    assert!(
        !stderr.contains("Main binary filename not available"),
        "{stderr}"
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

/// `frame → (flat, cum)` from `-top` output lines `flat flat% sum% cum cum% name`.
fn top_table(text: &str, unit: &str) -> BTreeMap<String, (u64, u64)> {
    let number = |s: &str| -> u64 {
        if s == "0" {
            0
        } else {
            s.trim_end_matches(unit).parse().expect(s)
        }
    };
    text.lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() != 6 || !cols[1].ends_with('%') || !cols[4].ends_with('%') {
                return None;
            }
            Some((cols[5].to_string(), (number(cols[0]), number(cols[3]))))
        })
        .collect()
}

/// The expected `frame → (flat, cum)` for value `which` (0: latency, 1: calls), computed
/// directly from the fixture: flat counts the leaf, cum each stack containing the frame once.
fn expected_top(stacks: &[(Vec<String>, u64, u64)], which: usize) -> BTreeMap<String, (u64, u64)> {
    let mut table: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (frames, latency, count) in stacks {
        let value = [*latency, *count][which];
        table.entry(frames.last().unwrap().clone()).or_default().0 += value;
        for frame in frames.iter().collect::<BTreeSet<_>>() {
            table.entry(frame.clone()).or_default().1 += value;
        }
    }
    table
}

#[test]
fn go_tool_pprof_reads_frames_totals_and_exact_values() {
    if common::which("go").is_none() {
        eprintln!(
            "SKIPPED: `go` is not installed (Debian package `golang-go`); cannot run `go tool pprof`"
        );
        return;
    }
    let stacks = common::fixture_stacks();
    assert!(stacks.len() >= 8, "fixture has the stacks");
    let meta = ProfileMeta {
        time_nanos: 1_700_000_000_000_000_000,
        duration_nanos: 5_000_000_000,
        comments: vec!["kernel 6.1.0-28-amd64".into(), "mode fentry".into()],
    };
    let dir = common::scratch_dir("export-pprof");
    let file = dir.join("latency.pb.gz");
    let bytes = encode(&stacks, &meta);
    assert_eq!(bytes[..2], [0x1f, 0x8b], "gzip magic");
    std::fs::write(&file, bytes).unwrap();

    let total_latency: u64 = stacks.iter().map(|s| s.1).sum();
    let total_calls: u64 = stacks.iter().map(|s| s.2).sum();
    assert_eq!(
        (total_latency, total_calls),
        (16_928_000, 7_715),
        "fixture totals"
    );

    // Latency, the default sample type, in exact nanoseconds.
    let top = pprof(
        &["-top", "-nodefraction=0", "-nodecount=1000", "-unit=ns"],
        &file,
    );
    assert!(top.contains("Type: latency"), "{top}");
    assert!(
        top.contains(&format!("100% of {total_latency}ns total")),
        "{top}"
    );
    let table = top_table(&top, "ns");
    assert_eq!(table, expected_top(&stacks, 0), "{top}");
    assert_eq!(table["page_cache_sync_ra"], (9_650_000, 9_650_000));
    assert_eq!(
        table["vfs_read"],
        (340_000, 12_943_000),
        "duplicate stacks merged, cum includes callees"
    );
    assert_eq!(table["[unknown]"].0, 45_000);

    // Calls, the second sample type.
    let top = pprof(
        &[
            "-top",
            "-nodefraction=0",
            "-nodecount=1000",
            "-sample_index=calls",
        ],
        &file,
    );
    assert!(top.contains("Type: calls"), "{top}");
    assert!(
        top.contains(&format!("100% of {total_calls} total")),
        "{top}"
    );
    assert_eq!(top_table(&top, ""), expected_top(&stacks, 1), "{top}");

    // -raw: one sample per distinct stack with both values, locations resolved by name.
    let raw = pprof(&["-raw"], &file);
    assert!(
        raw.contains("latency/nanoseconds[dflt] calls/count"),
        "{raw}"
    );
    let names: BTreeMap<u64, String> = raw
        .lines()
        .skip_while(|l| *l != "Locations")
        .skip(1)
        .take_while(|l| *l != "Mappings")
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (
                cols[0].trim_end_matches(':').parse().unwrap(),
                cols[3].to_string(),
            )
        })
        .collect();
    let mut samples: BTreeMap<Vec<String>, (u64, u64)> = BTreeMap::new();
    for line in raw
        .lines()
        .skip_while(|l| !l.starts_with("latency/"))
        .skip(1)
        .take_while(|l| l.contains(':'))
    {
        let (values, ids) = line.split_once(':').unwrap();
        let values: Vec<u64> = values
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        let frames: Vec<String> = ids
            .split_whitespace()
            .rev()
            .map(|id| names[&id.parse::<u64>().unwrap()].clone())
            .collect();
        assert!(
            samples.insert(frames, (values[0], values[1])).is_none(),
            "identical stacks are merged"
        );
    }
    let mut expected: BTreeMap<Vec<String>, (u64, u64)> = BTreeMap::new();
    for (frames, latency, count) in &stacks {
        let entry = expected.entry(frames.clone()).or_default();
        entry.0 += latency;
        entry.1 += count;
    }
    assert_eq!(samples, expected, "{raw}");
    assert_eq!(
        names.len(),
        stacks
            .iter()
            .flat_map(|s| s.0.iter())
            .collect::<BTreeSet<_>>()
            .len(),
        "one location per frame"
    );

    let comments = pprof(&["-comments"], &file);
    assert_eq!(
        comments.lines().collect::<Vec<_>>(),
        ["kernel 6.1.0-28-amd64", "mode fentry"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Symbolized frames can be anything a symbolizer produces; they must reach pprof verbatim
/// (pprof displays `Vec<T>::push` shortened to `Vec::push`, with the full name beside it).
#[test]
fn unusual_frame_names_survive() {
    if common::which("go").is_none() {
        eprintln!("SKIPPED: `go` is not installed (Debian package `golang-go`)");
        return;
    }
    let stacks = vec![
        (
            vec![
                "µ-task".to_string(),
                "std::vec::Vec<T>::push".into(),
                "[vdso]".into(),
            ],
            10,
            1,
        ),
        (vec![], 5, 2),
    ];
    let dir = common::scratch_dir("export-pprof-names");
    let file = dir.join("names.pb.gz");
    std::fs::write(&file, encode(&stacks, &ProfileMeta::default())).unwrap();
    let raw = pprof(&["-raw"], &file);
    for name in ["µ-task", "std::vec::Vec<T>::push", "[vdso]", "[unknown]"] {
        assert!(raw.contains(name), "{name} missing:\n{raw}");
    }
    assert!(raw.contains("         10          1: 1 2 3 \n"), "{raw}");
    let _ = std::fs::remove_dir_all(&dir);
}
