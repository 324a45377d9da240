//! `hotprof compare` with several files per side, as an interleaved A/B session writes them
//! (base, new, base, new, …): every file's runs count, on both sides, in the table, the JSON
//! and the HTML page.

use std::path::{Path, PathBuf};
use std::process::Command;

use profiler::model::{FunctionRecord, FunctionTotals, Losses, Recording, SCHEMA_VERSION};

fn recording(values: &[u64]) -> Recording {
    Recording {
        schema_version: SCHEMA_VERSION,
        by: Vec::new(),
        filter: None,
        tool: "hotprof test".into(),
        kernel: "6.12.0".into(),
        mode: "fentry".into(),
        task_store: None,
        duration_ns: 1_000,
        command: vec![],
        functions: vec![FunctionRecord::from_aggregates(
            "__audit_filter_op".into(),
            "__audit_filter_op".into(),
            &FunctionTotals::from_durations(values),
        )],
        losses: Losses::default(),
        probe_overhead_ns: None,
        probe_bias_ns: None,
        runs: vec![],
        intervals: vec![],
    }
}

fn write(dir: &Path, name: &str, recording: &Recording) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec(recording).unwrap()).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn several_files_per_side_are_more_runs_of_that_side() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("hotprof-compare-sides-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Base: three files of 100 calls each; new: three files of 50 slower calls each.
    let base: Vec<String> = (0..3)
        .map(|i| write(&dir, &format!("a{i}.json"), &recording(&[170 + i; 100])))
        .collect();
    let new: Vec<String> = (0..3)
        .map(|i| write(&dir, &format!("b{i}.json"), &recording(&[400 + 5 * i; 50])))
        .collect();
    let json = dir.join("cmp.json");
    let html = dir.join("cmp.html");
    let output = Command::new(env!("CARGO_BIN_EXE_hotprof"))
        .arg("compare")
        .arg(base.join(","))
        // The new side both ways: a comma list and a further argument.
        .arg(new[..2].join(","))
        .arg(&new[2])
        .arg("--json")
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("base 3 run(s) (3 files;") && stdout.contains("new 3 run(s) (3 files;"),
        "{stdout}"
    );
    let comparison: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(comparison["base"]["files"], 3);
    assert_eq!(comparison["new"]["runs"], 3);
    let p50 = comparison["functions"][0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["metric"] == "p50")
        .unwrap();
    assert_eq!(p50["significant"], true, "{p50}");
    // The page draws each side with all its calls: 300 base, 150 new.
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("300 → 150"), "merged call counts missing");
    assert!(page.contains("base: 300 calls") && page.contains("new: 150 calls"));
    std::fs::remove_dir_all(&dir).unwrap();
}
