//! Several recordings of one side as one: `hotprof compare --html` draws each side as one
//! distribution, whether it came from one file with `--runs N` or from several files
//! recorded interleaved with the other side's.

use super::{FunctionRecord, FunctionTotals, Histogram, Losses, Recording, RunRecord};

impl FunctionRecord {
    /// The calls of several records of one function as one record: exact sums and extremes,
    /// histograms merged bucket by bucket, percentiles recomputed.
    pub fn merged(records: &[&FunctionRecord]) -> FunctionRecord {
        let mut histogram = Histogram::new();
        records.iter().for_each(|r| histogram.merge(&r.histogram()));
        let called = || records.iter().filter(|r| r.count > 0);
        let sum = |field: fn(&FunctionRecord) -> u64| records.iter().map(|r| field(r)).sum();
        let first = records.first();
        let totals = FunctionTotals {
            count: sum(|r| r.count),
            sum_ns: sum(|r| r.sum_ns),
            sum_sq_ns2: records.iter().map(|r| r.sum_sq_ns2 as u128).sum(),
            min_ns: called().map(|r| r.min_ns).min().unwrap_or(0),
            max_ns: called().map(|r| r.max_ns).max().unwrap_or(0),
            on_cpu_sum_ns: records.iter().filter_map(|r| r.on_cpu_sum_ns).sum(),
            below_min: sum(|r| r.below_min_latency),
            self_sum_ns: sum(|r| r.self_sum_ns),
            outer_count: sum(|r| r.outer_count),
            outer_sum_ns: sum(|r| r.outer_sum_ns),
            histogram,
        };
        let mut merged = FunctionRecord::from_aggregates(
            first.map(|r| r.name.clone()).unwrap_or_default(),
            first.map(|r| r.symbol.clone()).unwrap_or_default(),
            &totals,
        );
        // Known only if every record knows it (`--off-cpu` runs).
        merged.on_cpu_sum_ns = records.iter().map(|r| r.on_cpu_sum_ns).sum::<Option<u64>>();
        merged
    }
}

impl Losses {
    /// Adds every counter of `other` (destructured, so a new counter cannot be forgotten).
    pub fn add(&mut self, other: &Losses) {
        let Losses {
            depth_exceeded,
            task_map_full,
            unmatched_returns,
            orphaned_frames,
            open_at_stop,
            exited_in_call,
            slot_missing,
            kernel_missed,
            stacks_lost,
            stack_totals_full,
            untraced_children,
            keys_full,
        } = other;
        self.depth_exceeded += depth_exceeded;
        self.task_map_full += task_map_full;
        self.unmatched_returns += unmatched_returns;
        self.orphaned_frames += orphaned_frames;
        self.open_at_stop += open_at_stop;
        self.exited_in_call += exited_in_call;
        self.slot_missing += slot_missing;
        self.kernel_missed += kernel_missed;
        self.stacks_lost += stacks_lost;
        self.stack_totals_full += stack_totals_full;
        self.untraced_children += untraced_children;
        self.keys_full += keys_full;
    }
}

/// The distinct values of `field` over `recordings`, in first-seen order.
pub fn distinct_values(recordings: &[Recording], field: fn(&Recording) -> &str) -> Vec<&str> {
    let mut values: Vec<&str> = Vec::new();
    for recording in recordings {
        if !values.contains(&field(recording)) {
            values.push(field(recording));
        }
    }
    values
}

/// The mean of the recordings' calibrated probe overheads; `None` if none was calibrated.
pub fn mean_probe_overhead(recordings: &[Recording]) -> Option<f64> {
    mean_of(recordings, |r| r.probe_overhead_ns)
}

/// The mean of the recordings' calibrated biases; `None` if none was calibrated.
pub fn mean_probe_bias(recordings: &[Recording]) -> Option<f64> {
    mean_of(recordings, |r| r.probe_bias_ns)
}

fn mean_of(recordings: &[Recording], value: impl Fn(&Recording) -> Option<f64>) -> Option<f64> {
    let values: Vec<f64> = recordings.iter().filter_map(value).collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

impl Recording {
    /// One recording holding every run of `recordings` (a file without `--runs` counts as one
    /// run); functions are matched by name, in first-seen order. Kernel and mode list every
    /// distinct value; the task store is kept if all agree; the command and tool come from
    /// the first recording. `None` for an empty slice.
    pub fn merged(recordings: &[Recording]) -> Option<Recording> {
        let (first, _) = recordings.split_first()?;
        if recordings.len() == 1 {
            return Some(first.clone());
        }
        let mut names: Vec<&str> = Vec::new();
        for function in recordings.iter().flat_map(|r| &r.functions) {
            if !names.contains(&function.name.as_str()) {
                names.push(&function.name);
            }
        }
        let functions = names
            .iter()
            .map(|name| {
                let records: Vec<&FunctionRecord> = recordings
                    .iter()
                    .flat_map(|r| r.functions.iter().filter(|f| f.name == *name))
                    .collect();
                FunctionRecord::merged(&records)
            })
            .collect();
        let runs = recordings
            .iter()
            .flat_map(|r| {
                if r.runs.is_empty() {
                    vec![RunRecord {
                        duration_ns: r.duration_ns,
                        exit_code: 0,
                        workload_metrics: Default::default(),
                        functions: r.functions.clone(),
                    }]
                } else {
                    r.runs.clone()
                }
            })
            .collect();
        let mut losses = Losses::default();
        recordings.iter().for_each(|r| losses.add(&r.losses));
        Some(Recording {
            kernel: distinct_values(recordings, |r| &r.kernel).join(", "),
            mode: distinct_values(recordings, |r| &r.mode).join(", "),
            task_store: first
                .task_store
                .filter(|store| recordings.iter().all(|r| r.task_store == Some(*store))),
            duration_ns: recordings.iter().map(|r| r.duration_ns).sum(),
            functions,
            losses,
            probe_overhead_ns: mean_probe_overhead(recordings),
            probe_bias_ns: mean_probe_bias(recordings),
            runs,
            intervals: Vec::new(),
            ..first.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(name: &str, values: &[u64]) -> FunctionRecord {
        FunctionRecord::from_aggregates(
            name.into(),
            name.into(),
            &FunctionTotals::from_durations(values),
        )
    }

    fn recording(functions: Vec<FunctionRecord>, dropped: u64) -> Recording {
        Recording {
            schema_version: super::super::SCHEMA_VERSION,
            by: Vec::new(),
            filter: None,
            tool: "hotprof test".into(),
            kernel: "6.12.0".into(),
            mode: "kprobe".into(),
            task_store: None,
            duration_ns: 10,
            command: vec![],
            functions,
            losses: Losses {
                depth_exceeded: dropped,
                ..Losses::default()
            },
            probe_overhead_ns: None,
            probe_bias_ns: None,
            runs: vec![],
            intervals: vec![],
        }
    }

    #[test]
    fn merging_equals_recording_all_calls_at_once() {
        let (a, b) = ([100, 200, 300], [150, 10_000]);
        let merged = FunctionRecord::merged(&[&function("f", &a), &function("f", &b)]);
        let all: Vec<u64> = a.iter().chain(&b).copied().collect();
        let at_once = function("f", &all);
        assert_eq!(merged.count, at_once.count);
        assert_eq!(merged.buckets, at_once.buckets);
        assert_eq!(
            (merged.min_ns, merged.max_ns, merged.p50_ns, merged.p99_ns),
            (
                at_once.min_ns,
                at_once.max_ns,
                at_once.p50_ns,
                at_once.p99_ns
            )
        );
        assert!((merged.stddev_ns - at_once.stddev_ns).abs() < 1e-6);
    }

    #[test]
    fn merging_sums_self_and_outer_time_and_on_cpu_time_only_if_all_have_it() {
        let with =
            |values: &[u64], self_sum_ns, outer_count, below_min_latency, on_cpu| FunctionRecord {
                self_sum_ns,
                outer_count,
                outer_sum_ns: 2 * self_sum_ns,
                below_min_latency,
                on_cpu_sum_ns: on_cpu,
                ..function("f", values)
            };
        let a = with(&[100, 200], 250, 2, 5, Some(40));
        let b = with(&[300], 280, 1, 7, Some(60));
        let merged = FunctionRecord::merged(&[&a, &b]);
        assert_eq!(
            (
                merged.self_sum_ns,
                merged.outer_count,
                merged.outer_sum_ns,
                merged.below_min_latency
            ),
            (530, 3, 1_060, 12)
        );
        assert_eq!(merged.on_cpu_sum_ns, Some(100));
        let without = with(&[300], 280, 1, 7, None);
        assert_eq!(FunctionRecord::merged(&[&a, &without]).on_cpu_sum_ns, None);
        // Nothing to merge: an empty record.
        assert_eq!(FunctionRecord::merged(&[]).count, 0);
    }

    #[test]
    fn recordings_keep_every_run_function_and_loss() {
        let one = recording(vec![function("f", &[100, 200])], 1);
        let mut other_kernel = recording(vec![], 0);
        other_kernel.kernel = "6.1.0".into();
        let two = recording(vec![function("g", &[5]), function("f", &[300])], 2);
        let merged = Recording::merged(&[one, two, other_kernel]).unwrap();
        let names: Vec<&str> = merged.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["f", "g"]);
        assert_eq!(merged.functions[0].count, 3);
        assert_eq!(merged.runs.len(), 3);
        assert_eq!(merged.losses.depth_exceeded, 3);
        assert_eq!(merged.duration_ns, 30);
        assert_eq!(merged.kernel, "6.12.0, 6.1.0");
        assert_eq!(merged.mode, "kprobe");
        assert!(Recording::merged(&[]).is_none());
    }

    #[test]
    fn the_task_store_is_kept_only_where_every_recording_agrees() {
        use crate::model::TaskStore;
        let with = |store| Recording {
            task_store: store,
            ..recording(vec![], 0)
        };
        let hashed = Some(TaskStore::HashMap);
        let merged = |stores: &[Option<TaskStore>]| {
            let recordings: Vec<Recording> = stores.iter().map(|&s| with(s)).collect();
            Recording::merged(&recordings).unwrap().task_store
        };
        assert_eq!(merged(&[hashed, hashed]), hashed);
        assert_eq!(merged(&[hashed, Some(TaskStore::TaskStorage)]), None);
        // A file from before the field: unknown, so not known to agree.
        assert_eq!(merged(&[hashed, None]), None);
    }
}
