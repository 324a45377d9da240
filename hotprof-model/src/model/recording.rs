//! A recording: what one hotprof run measured, in the versioned schema `--json` writes.
//!
//! Schema (version 2), documented in `docs/json-schema.md`:
//! - `schema_version`: 2; version 1 files (before `--by`) are read too, other versions
//!   refused.
//! - `functions[].buckets`: the raw log-linear histogram as `[lower_ns, upper_ns, count]`
//!   triples, so recordings can be merged and compared without loss.
//! - Derived fields (`p50_ns`, `stddev_ns`, …) are for convenience; the buckets and sums are
//!   the truth.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{FunctionTotals, Histogram};

pub const SCHEMA_VERSION: u32 = 2;
/// Older versions this hotprof still reads: 1 has no `by`/`functions[].keys`.
pub const READABLE_SCHEMA_VERSIONS: [u32; 2] = [1, SCHEMA_VERSION];

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Recording {
    pub schema_version: u32,
    /// `hotprof <version>`.
    pub tool: String,
    /// `uname -r` of the measured kernel.
    pub kernel: String,
    /// `kprobe`, `fentry` or `syscall`.
    pub mode: String,
    /// Where the probes kept each task's open frames; `None` in files written before hotprof
    /// recorded it.
    #[serde(default)]
    pub task_store: Option<TaskStore>,
    /// Wall time the probes were attached.
    pub duration_ns: u64,
    /// `--by`: the key's fields, as spelled (`arg2:log2`, `errno`); empty without `--by`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by: Vec<String>,
    /// `--filter`: the expression, and the calls that did not match it (closed, not
    /// recorded: not a loss).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<FilterRecord>,
    /// The workload command, when hotprof ran one.
    #[serde(default)]
    pub command: Vec<String>,
    pub functions: Vec<FunctionRecord>,
    pub losses: Losses,
    /// hotprof's own measured cost per probed call (entry + return), when calibrated.
    #[serde(default)]
    pub probe_overhead_ns: Option<f64>,
    /// The part of that overhead inside every reported duration (the bias), when calibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_bias_ns: Option<f64>,
    /// With `--runs N`: each run's own figures (the top-level `functions` are all runs
    /// merged). Empty for a single run.
    #[serde(default)]
    pub runs: Vec<RunRecord>,
    /// With `--interval`: one compact record per interval report, in order. Kept small
    /// (quarter-power-of-two heatmap rows, not the histogram's buckets) because a long
    /// `--interval` run holds them all in memory until it writes the file: about 200 bytes
    /// per interval and function.
    #[serde(default)]
    pub intervals: Vec<IntervalRecord>,
}

/// Where the probes keep each task's stack of open frames: the kernel decides, by what it can
/// create.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStore {
    /// Task-local storage, in the task itself (Linux 5.11+ with kernel BTF): no capacity limit.
    TaskStorage,
    /// A preallocated hash map keyed by task, on kernels without task-local storage:
    /// [`HASHED_TASKS_MAX`] tasks at most.
    ///
    /// [`HASHED_TASKS_MAX`]: profiler_common::HASHED_TASKS_MAX
    HashMap,
}

impl TaskStore {
    /// The name in the JSON recording.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TaskStorage => "task_storage",
            Self::HashMap => "hash_map",
        }
    }

    /// What the text report says about it: the hash map's limit, and why it is in use.
    pub fn describe(self) -> String {
        match self {
            Self::TaskStorage => "task-local storage".into(),
            Self::HashMap => format!(
                "hash map ({} tasks max; this kernel has no task-local storage, which needs \
                 Linux 5.11+ with BTF)",
                profiler_common::HASHED_TASKS_MAX
            ),
        }
    }
}

/// One `--interval` report: when it was taken, what each function did in it, and how full
/// the kernel maps were at that instant (the soak test watches these for leaks).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct IntervalRecord {
    /// 1, 2, … in the order printed.
    pub index: u64,
    /// Time from the start of measuring to this report's snapshot of the maps.
    pub elapsed_ns: u64,
    /// Time since the previous report's snapshot (or the start): the interval actually
    /// covered, which is the nominal `--interval` unless the process was delayed.
    pub duration_ns: u64,
    /// Live entries of the per-task frame map: tasks with a probed call open at the snapshot.
    pub task_entries: u64,
    /// Live entries of the per-stack totals map (`--stacks` only; null otherwise).
    #[serde(default)]
    pub stack_entries: Option<u64>,
    /// Time hotprof took to make this report: reading the maps, counting their entries and
    /// printing. If reports fall behind the interval, this tells hotprof's own cost apart
    /// from the machine not giving it the CPU.
    #[serde(default)]
    pub report_ns: Option<u64>,
    /// CPU time hotprof's thread used for this report (the same work as `report_ns`, without
    /// the time it waited for a CPU).
    #[serde(default)]
    pub report_cpu_ns: Option<u64>,
    /// Per probed function, in the order of the top-level `functions`.
    pub functions: Vec<IntervalFunction>,
}

/// One function's figures within one interval.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct IntervalFunction {
    pub name: String,
    pub count: u64,
    pub sum_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// This interval's calls by latency, a row per quarter of a power of two
    /// (`[lower_ns, upper_ns, count]`, upper inclusive, non-empty rows ascending): a latency
    /// heatmap's column. Empty in recordings written before heatmaps existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub heat_buckets: Vec<[u64; 3]>,
    /// With `--by`: the interval's busiest key values with their heatmap rows (at most
    /// [`INTERVAL_KEYS`](crate::model::INTERVAL_KEYS)); the function's own rows hold the
    /// calls of the rest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<IntervalKey>,
}

/// One `--by` key value's calls within one interval.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct IntervalKey {
    /// The value of each field, in `Recording::by` order, as in [`KeyRecord::key`].
    pub key: Vec<String>,
    pub count: u64,
    /// Its calls by latency, as [`IntervalFunction::heat_buckets`].
    pub heat_buckets: Vec<[u64; 3]>,
}

/// One of several runs of the same workload (`--runs N`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RunRecord {
    pub duration_ns: u64,
    /// Exit code of the workload in this run.
    pub exit_code: i32,
    /// Numeric `key=value` pairs of the workload's last output line of the form
    /// `name: key=value ...` (e.g. `avg_ns` of syscall_lat), keyed `name.key`.
    #[serde(default)]
    pub workload_metrics: std::collections::BTreeMap<String, f64>,
    /// Per-function figures of this run alone, same order as the top-level `functions`.
    pub functions: Vec<FunctionRecord>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FunctionRecord {
    /// What the user asked for (`__ep_eventpoll_poll`).
    pub name: String,
    /// What was attached (`__ep_eventpoll_poll.isra.0`).
    pub symbol: String,
    pub count: u64,
    pub sum_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    /// Population standard deviation, from the exact in-kernel sum of squares.
    pub stddev_ns: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    /// Sum of squared durations (ns²), as f64 (exact in the kernel; rounded here).
    pub sum_sq_ns2: f64,
    /// Sum of the on-CPU part of each call (`--off-cpu` only).
    #[serde(default)]
    pub on_cpu_sum_ns: Option<u64>,
    /// Sum of self time (duration minus probed frames nested inside).
    #[serde(default)]
    pub self_sum_ns: u64,
    /// Calls not nested in a call of the same function, and their total: recursion
    /// collapsed. For a recursive function probed alone, `self_sum_ns == outer_sum_ns`.
    #[serde(default)]
    pub outer_count: u64,
    #[serde(default)]
    pub outer_sum_ns: u64,
    /// Calls faster than `--min-latency`, counted but not in the histogram.
    #[serde(default)]
    pub below_min_latency: u64,
    /// `[lower_ns, upper_ns, count]` for every non-empty bucket.
    pub buckets: Vec<[u64; 3]>,
    /// Per call site, busiest first (call-site mode): which caller pays for the calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<CallerRecord>,
    /// Per `--by` key value, by total time: which arguments, returns or tasks pay.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<KeyRecord>,
    /// `--children`: the parent this function was timed inside (only calls made while it
    /// was open on the same task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_of: Option<String>,
    /// `--slowest N`: the N slowest calls, slowest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slowest: Vec<SlowCallRecord>,
    /// `--stacks`: how many of the calls had their stack walked, and the weight each stands
    /// for in the stack outputs (absent without stacks, and in files written before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacks: Option<StackSampling>,
    /// `--counter`: each PMU event's counts per call, in the order asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counters: Vec<super::CounterRecord>,
}

/// Which calls' stacks were walked (`--stacks`, `--stacks-every N`). The stack outputs
/// (flamegraph, folded, pprof, HTML) hold each walked call's figures times `sample_every`,
/// so their totals estimate all calls; the function's own figures count every call.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct StackSampling {
    /// N: a random 1 in N calls was walked (1: every call, the stack figures are exact).
    pub sample_every: u32,
    /// Calls whose stack was walked and added to the per-stack totals (not weighted).
    pub walked_calls: u64,
}

/// One of a function's slowest calls (`--slowest`), with what explains it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SlowCallRecord {
    /// When the call was entered, from the start of measuring.
    pub at_ns: u64,
    pub duration_ns: u64,
    /// The part spent switched out (`--off-cpu` only).
    #[serde(default)]
    pub off_cpu_ns: Option<u64>,
    /// The CPU it returned on.
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// The `--by` fields' values, as in `keys[].key` (empty without `--by`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
    /// Kernel frames at entry, innermost first (`--stacks` only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stack: Vec<String>,
}

/// `--filter` and what it left out.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FilterRecord {
    pub expression: String,
    /// Calls of the probed functions that did not satisfy it.
    pub not_matched: u64,
}

/// One `--by` key value's part of a function's calls.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct KeyRecord {
    /// The value of each field, in `Recording::by` order, as printed (`[4096, 8192)`,
    /// `ENOENT`, `dd`, `vfs_write+0x8e`).
    pub key: Vec<String>,
    pub count: u64,
    pub sum_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// `[lower_ns, upper_ns, count]` for every non-empty bucket, as for the function.
    pub buckets: Vec<[u64; 3]>,
}

impl KeyRecord {
    /// The key's values, one string: `[4096, 8192) ENOENT`.
    pub fn label(&self) -> String {
        self.key.join(" ")
    }

    /// The key value's figures, from its own record.
    pub fn of(key: Vec<String>, record: &FunctionRecord) -> Self {
        Self {
            key,
            count: record.count,
            sum_ns: record.sum_ns,
            p50_ns: record.p50_ns,
            p99_ns: record.p99_ns,
            max_ns: record.max_ns,
            buckets: record.buckets.clone(),
        }
    }
}

/// One call site's part of a function's calls.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CallerRecord {
    /// The call instruction, `caller+0xoff`.
    pub site: String,
    pub count: u64,
    pub sum_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
}

impl CallerRecord {
    /// The site's figures, from its own record.
    pub fn of(site: String, record: &FunctionRecord) -> Self {
        Self {
            site,
            count: record.count,
            sum_ns: record.sum_ns,
            p50_ns: record.p50_ns,
            p99_ns: record.p99_ns,
        }
    }
}

/// Everything the probes could not time, so nothing is lost silently.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Losses {
    /// Entries dropped because `MAX_DEPTH` frames were already open on the task.
    pub depth_exceeded: u64,
    /// Entries dropped because the task's frame stack could not be created (task storage: out
    /// of memory, or a nested use the kernel refused; the hash map of older kernels: full).
    pub task_map_full: u64,
    /// Returns whose entry was not seen: in flight when hotprof attached, or an entry program
    /// the kernel skipped (a recursion miss, which `kernel_missed` counts as the loss).
    pub unmatched_returns: u64,
    /// Frames whose return was never seen (e.g. kretprobe maxactive exhausted).
    pub orphaned_frames: u64,
    /// Calls still open when hotprof stopped.
    pub open_at_stop: u64,
    /// Calls still open when their task exited: calls that never return (`do_exit`, a
    /// thread's `exit`), in flight, not lost; or calls whose return the kernel missed (a
    /// kretprobe without a free instance, a skipped fexit), which `kernel_missed` counts as
    /// the loss. Frame modes; the session modes count them in `open_at_stop`.
    #[serde(default)]
    pub exited_in_call: u64,
    /// Internal map slot lookups that failed (should be 0).
    pub slot_missing: u64,
    /// Kernel-reported misses: kretprobe `nmissed` and BPF recursion misses, where readable.
    #[serde(default)]
    pub kernel_missed: u64,
    /// `--stacks`: stacks that could not be stored (stack map full or hash collision); the
    /// call is still timed, under an `[unknown]` stack.
    #[serde(default)]
    pub stacks_lost: u64,
    /// `--stacks`: calls timed but missing from the per-stack totals (map full).
    #[serde(default)]
    pub stack_totals_full: u64,
    /// Children of the traced workload left out of the traced process tree (its map full);
    /// their calls were not timed.
    #[serde(default)]
    pub untraced_children: u64,
    /// `--by`: calls timed for their function but left out of the per-key rows (no free key
    /// slot: raise `--max-keys`).
    #[serde(default)]
    pub keys_full: u64,
}

impl Losses {
    pub fn total_dropped(&self) -> u64 {
        self.depth_exceeded
            + self.task_map_full
            + self.orphaned_frames
            + self.slot_missing
            + self.kernel_missed
    }
}

impl FunctionRecord {
    /// Records that `walked_calls` of this function's calls had their stack walked, a random
    /// 1 in `sample_every` (1: all).
    pub fn note_stacks(&mut self, sample_every: u32, walked_calls: u64) {
        self.stacks = Some(StackSampling {
            sample_every: sample_every.max(1),
            walked_calls,
        });
    }

    /// The histogram held in `buckets`.
    pub fn histogram(&self) -> Histogram {
        let mut histogram = Histogram::new();
        for &[lower, _, count] in &self.buckets {
            histogram.add_bucket(profiler_common::bucket_index(lower), count);
        }
        histogram
    }

    /// A record of `totals`: every figure they hold, and every derived field computed from
    /// the exact aggregates and the histogram. `on_cpu_sum_ns` is left `None`: only
    /// `--off-cpu` runs report it, so the caller decides.
    pub fn from_aggregates(name: String, symbol: String, totals: &FunctionTotals) -> Self {
        let FunctionTotals {
            count,
            sum_ns,
            sum_sq_ns2,
            min_ns,
            max_ns,
            on_cpu_sum_ns: _,
            below_min,
            self_sum_ns,
            outer_count,
            outer_sum_ns,
            ref histogram,
        } = *totals;
        let mean = if count > 0 {
            sum_ns as f64 / count as f64
        } else {
            0.0
        };
        let variance = if count > 0 {
            (sum_sq_ns2 as f64 / count as f64 - mean * mean).max(0.0)
        } else {
            0.0
        };
        let (min, max) = if count > 0 {
            (Some(min_ns), Some(max_ns))
        } else {
            (None, None)
        };
        let quantile = |q| histogram.quantile(q, min, max).unwrap_or(0);
        Self {
            name,
            symbol,
            count,
            sum_ns,
            min_ns: if count > 0 { min_ns } else { 0 },
            max_ns,
            mean_ns: mean,
            stddev_ns: variance.sqrt(),
            p50_ns: quantile(0.5),
            p90_ns: quantile(0.9),
            p99_ns: quantile(0.99),
            p999_ns: quantile(0.999),
            sum_sq_ns2: sum_sq_ns2 as f64,
            on_cpu_sum_ns: None,
            self_sum_ns,
            outer_count,
            outer_sum_ns,
            below_min_latency: below_min,
            buckets: histogram
                .iter()
                .map(|(lower, upper, count)| [lower, upper, count])
                .collect(),
            callers: Vec::new(),
            keys: Vec::new(),
            child_of: None,
            slowest: Vec::new(),
            stacks: None,
            counters: Vec::new(),
        }
    }
}

/// Why a recording file cannot be used; each a one-line message.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The io error is in the message and not a `source()`, which a one-line error would
    /// print a second time.
    #[error("cannot read {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path} is empty")]
    Empty { path: String },
    #[error("{path} is not a hotprof recording: {reason}")]
    Corrupt { path: String, reason: String },
    #[error("{path} has schema version {found}; this hotprof reads versions 1 to {SCHEMA_VERSION}")]
    Version { path: String, found: u64 },
    #[error("{path} is inconsistent: {reason}")]
    Inconsistent { path: String, reason: String },
}

/// Largest recording accepted (a real one is a few hundred KiB).
const MAX_RECORDING_BYTES: u64 = 256 << 20;

/// Reads and validates a recording written by `--json`.
pub fn load_recording(path: &Path) -> Result<Recording, LoadError> {
    let shown = path.display().to_string();
    let io = |error| LoadError::Io {
        path: shown.clone(),
        error,
    };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > MAX_RECORDING_BYTES {
        return Err(LoadError::Corrupt {
            path: shown,
            reason: format!("{size} bytes is larger than any recording"),
        });
    }
    let data = std::fs::read(path).map_err(io)?;
    parse_recording(&data, &shown)
}

/// Pure part of [`load_recording`].
pub fn parse_recording(data: &[u8], shown: &str) -> Result<Recording, LoadError> {
    if data.iter().all(u8::is_ascii_whitespace) {
        return Err(LoadError::Empty { path: shown.into() });
    }
    let value: serde_json::Value =
        serde_json::from_slice(data).map_err(|e| LoadError::Corrupt {
            path: shown.into(),
            reason: e.to_string(),
        })?;
    match value
        .get("schema_version")
        .and_then(serde_json::Value::as_u64)
    {
        Some(v)
            if READABLE_SCHEMA_VERSIONS
                .iter()
                .any(|&known| u64::from(known) == v) => {}
        Some(found) => {
            return Err(LoadError::Version {
                path: shown.into(),
                found,
            });
        }
        None => {
            return Err(LoadError::Corrupt {
                path: shown.into(),
                reason: "no schema_version field".into(),
            });
        }
    }
    let recording: Recording = serde_json::from_value(value).map_err(|e| LoadError::Corrupt {
        path: shown.into(),
        reason: e.to_string(),
    })?;
    // Every function, top level and per run: the buckets must add up to the count, without
    // overflow (fuzzing found a file whose bucket counts wrapped around to match).
    let all_functions = recording
        .functions
        .iter()
        .chain(recording.runs.iter().flat_map(|run| run.functions.iter()));
    for function in all_functions {
        let in_buckets = function
            .buckets
            .iter()
            .try_fold(0u64, |total, bucket| total.checked_add(bucket[2]));
        if in_buckets != Some(function.count) {
            let held = in_buckets.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string());
            return Err(LoadError::Inconsistent {
                path: shown.into(),
                reason: format!(
                    "{}: buckets hold {held} calls but count is {}",
                    function.name, function.count
                ),
            });
        }
    }
    Ok(recording)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Recording {
        Recording {
            schema_version: SCHEMA_VERSION,
            by: Vec::new(),
            filter: None,
            tool: "hotprof test".into(),
            kernel: "6.12.0".into(),
            mode: "kprobe".into(),
            task_store: Some(TaskStore::HashMap),
            duration_ns: 1,
            command: vec![],
            functions: vec![FunctionRecord::from_aggregates(
                "f".into(),
                "f".into(),
                &FunctionTotals::from_durations(&[100, 200, 300, 10_000]),
            )],
            losses: Losses::default(),
            probe_overhead_ns: None,
            probe_bias_ns: None,
            runs: vec![],
            intervals: vec![],
        }
    }

    #[test]
    fn round_trips_and_buckets_reproduce_percentiles() {
        let recording = sample();
        let json = serde_json::to_vec(&recording).unwrap();
        let back = parse_recording(&json, "x").unwrap();
        assert_eq!(back, recording);
        let function = &back.functions[0];
        let histogram = function.histogram();
        assert_eq!(
            histogram.quantile(0.5, Some(function.min_ns), Some(function.max_ns)),
            Some(function.p50_ns)
        );
        assert_eq!(
            histogram.quantile(0.99, Some(function.min_ns), Some(function.max_ns)),
            Some(function.p99_ns)
        );
    }

    #[test]
    fn stack_sampling_round_trips_and_older_files_read_without_it() {
        let mut recording = sample();
        recording.functions[0].note_stacks(16, 1_234);
        let json = serde_json::to_string(&recording).unwrap();
        assert!(
            json.contains("\"stacks\":{\"sample_every\":16,\"walked_calls\":1234}"),
            "{json}"
        );
        let back = parse_recording(json.as_bytes(), "x").unwrap();
        assert_eq!(back, recording);
        assert_eq!(
            back.functions[0].stacks,
            Some(StackSampling {
                sample_every: 16,
                walked_calls: 1_234
            })
        );
        // A file from before the field (or a run without stacks) has none, and writes none.
        let plain = serde_json::to_string(&sample()).unwrap();
        assert!(!plain.contains("\"stacks\""), "{plain}");
        assert_eq!(
            parse_recording(plain.as_bytes(), "x").unwrap().functions[0].stacks,
            None
        );
        // N = 0 means every call, as N = 1.
        let mut function = sample().functions[0].clone();
        function.note_stacks(0, 4);
        assert_eq!(function.stacks.map(|s| s.sample_every), Some(1));
    }

    #[test]
    fn a_record_carries_every_figure_of_its_totals_but_on_cpu_time() {
        let totals = FunctionTotals {
            on_cpu_sum_ns: 7_000,
            below_min: 9,
            self_sum_ns: 6_000,
            outer_count: 3,
            outer_sum_ns: 10_000,
            ..FunctionTotals::from_durations(&[100, 200, 300, 10_000])
        };
        let record = FunctionRecord::from_aggregates("f".into(), "f.cold".into(), &totals);
        assert_eq!(
            (record.name.as_str(), record.symbol.as_str()),
            ("f", "f.cold")
        );
        assert_eq!(
            (record.count, record.sum_ns, record.min_ns, record.max_ns),
            (4, 10_600, 100, 10_000)
        );
        assert_eq!(record.sum_sq_ns2, 100_140_000.0);
        assert_eq!(record.mean_ns, 2_650.0);
        assert_eq!(
            (
                record.below_min_latency,
                record.self_sum_ns,
                record.outer_count,
                record.outer_sum_ns
            ),
            (9, 6_000, 3, 10_000)
        );
        assert_eq!(record.on_cpu_sum_ns, None);
        assert_eq!(record.histogram(), totals.histogram);
    }

    #[test]
    fn no_calls_make_a_record_of_zeros() {
        let record =
            FunctionRecord::from_aggregates("f".into(), "f".into(), &FunctionTotals::default());
        assert_eq!(
            record,
            FunctionRecord {
                name: "f".into(),
                symbol: "f".into(),
                ..FunctionRecord::default()
            }
        );
    }

    #[test]
    fn stddev_is_the_population_stddev() {
        let function = &sample().functions[0];
        let mean = 10_600.0 / 4.0;
        let var = [100.0f64, 200.0, 300.0, 10_000.0]
            .iter()
            .map(|v| (v - mean) * (v - mean))
            .sum::<f64>()
            / 4.0;
        assert!((function.stddev_ns - var.sqrt()).abs() < 1e-6);
    }

    #[test]
    fn bad_files_get_one_line_errors() {
        let good = serde_json::to_string(&sample()).unwrap();
        let miscounted = good.replace("\"count\":4", "\"count\":5");
        let cases: [(&[u8], &str); 5] = [
            (b"", "is empty"),
            (b"{\"schema_version\": 1", "not a hotprof recording"),
            (b"{\"schema_version\": 99}", "schema version 99"),
            (b"[1,2,3]", "no schema_version"),
            (miscounted.as_bytes(), "inconsistent"),
        ];
        for (data, expected) in cases {
            let message = parse_recording(data, "r.json").unwrap_err().to_string();
            assert!(message.contains(expected), "{message}");
            assert!(!message.contains('\n'), "{message}");
        }
        // Bucket counts that wrap around to the function's count (found by fuzzing), in a run.
        let mut value: serde_json::Value = serde_json::from_str(&good).unwrap();
        let mut function = value["functions"][0].clone();
        let count = function["count"].as_u64().unwrap();
        function["buckets"] = serde_json::json!([[1, 1, u64::MAX], [2, 2, count + 1]]);
        value["runs"] =
            serde_json::json!([{"duration_ns": 1, "exit_code": 0, "functions": [function]}]);
        let overflowing = value.to_string();
        let message = parse_recording(overflowing.as_bytes(), "r.json")
            .unwrap_err()
            .to_string();
        assert!(message.contains("more than 2^64"), "{message}");
        let truncated = &good.as_bytes()[..good.len() / 2];
        assert!(parse_recording(truncated, "r.json").is_err());
    }
}
