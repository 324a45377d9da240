//! The in-kernel aggregates as read at one instant, merged over CPUs: what the collector
//! reads from the maps and a recording is assembled from. Plain data: the collector fills it.

use std::collections::HashMap;

use profiler_common::{ByKey, Counter, FuncStats, HistChunk, NUM_COUNTERS, first_bucket_of_chunk};

use super::{FunctionTotals, Histogram, Losses};

/// Everything readable from the maps at one instant.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub functions: Vec<FunctionTotals>,
    pub counters: [u64; NUM_COUNTERS as usize],
    /// Frames open (calls in flight) when the run stopped: not read by the collector's
    /// `snapshot` but counted once at the stop (its `open_frames`), so that no call pays for it.
    pub open_frames: u64,
    /// Live tasks that have a frame stack (made a probed call), from the `LiveTasks` gauge.
    pub task_entries: u64,
    /// `--by`: every key met so far, with its calls (all CPUs merged).
    pub keys: Vec<KeyTotals>,
    /// `--counter`: per PMU event, in the order asked for, each function slot's counts per
    /// call (same order as `functions`).
    pub pmu: Vec<Vec<FunctionTotals>>,
}

/// One `--by` key's calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyTotals {
    pub key: ByKey,
    pub totals: FunctionTotals,
}

/// Merges the per-CPU copies of one function's stats.
pub fn merge_stats<'a>(per_cpu: impl IntoIterator<Item = &'a FuncStats>) -> FunctionTotals {
    let mut totals = FunctionTotals {
        min_ns: u64::MAX,
        ..Default::default()
    };
    for stats in per_cpu {
        if stats.count > 0 {
            totals.min_ns = totals.min_ns.min(stats.min_ns);
            totals.max_ns = totals.max_ns.max(stats.max_ns);
        }
        totals.count += stats.count;
        totals.sum_ns += stats.sum_ns;
        totals.sum_sq_ns2 += (u128::from(stats.sum_sq_hi) << 64) | u128::from(stats.sum_sq_lo);
        totals.on_cpu_sum_ns += stats.on_cpu_sum_ns;
        totals.below_min += stats.below_min;
        // Wrapping: Σ duration − Σ nested time is exact modulo 2^64, even where a clock step
        // made one call's nested time exceed its duration.
        totals.self_sum_ns = totals
            .self_sum_ns
            .wrapping_add(stats.sum_ns.wrapping_sub(stats.child_sum_ns));
        // Every call less the nested ones: per CPU, where both were counted.
        totals.outer_count += stats.count - stats.nested_count.min(stats.count);
        // Saturating: a copy taken while this CPU's probe updates the element can hold a
        // nested call whose count and sum it does not hold yet.
        totals.outer_sum_ns += stats.sum_ns.saturating_sub(stats.nested_sum_ns);
    }
    if totals.count == 0 {
        totals.min_ns = 0;
    }
    totals
}

/// A slot's calls from `HIST` elements of any CPU: `(chunk, element)` pairs, each element
/// holding its chunk's buckets and the aggregates of the calls in them.
pub fn totals_of_chunks<'a>(
    elements: impl IntoIterator<Item = (u32, &'a HistChunk)> + Clone,
) -> FunctionTotals {
    let mut totals = merge_stats(elements.clone().into_iter().map(|(_, e)| &e.stats));
    for (chunk, element) in elements {
        for (index, &count) in element.buckets.iter().enumerate() {
            totals
                .histogram
                .add_bucket(first_bucket_of_chunk(chunk) + index as u32, count);
        }
    }
    totals
}

/// A gauge's wrapped sum as a count. The per-CPU parts are read one after another, so a frame
/// that opens on one CPU and closes on another between two reads can make it dip below zero.
pub fn gauge(sum: u64) -> u64 {
    if (sum as i64) < 0 { 0 } else { sum }
}

impl Snapshot {
    pub fn counter(&self, counter: Counter) -> u64 {
        self.counters[counter as usize]
    }

    /// Session-program calls (kprobe.session, fsession) entered and not yet returned (0 in
    /// other modes): they have no frames for the collector's `open_frames` to find. Entries
    /// less returns (the one slot's timed calls and those below `--min-latency`); a call whose
    /// return run the kernel skipped (BPF recursion, also in the kernel-missed count) stays
    /// in it, as nothing tells it from one still running.
    pub fn session_calls(&self) -> u64 {
        let returned = self
            .functions
            .first()
            .map_or(0, |function| function.count + function.below_min);
        gauge(self.counter(Counter::SessionEntries).wrapping_sub(returned))
    }

    /// What the probes could not time, as of this snapshot.
    pub fn losses(&self) -> Losses {
        Losses {
            depth_exceeded: self.counter(Counter::DepthExceeded),
            task_map_full: self.counter(Counter::TaskMapFull),
            unmatched_returns: self.counter(Counter::UnmatchedReturn),
            orphaned_frames: self.counter(Counter::OrphanedFrames),
            open_at_stop: self.open_frames,
            exited_in_call: self.counter(Counter::ExitedInCall),
            slot_missing: self.counter(Counter::SlotMissing),
            kernel_missed: 0,
            stacks_lost: self.counter(Counter::StackLost),
            stack_totals_full: self.counter(Counter::StackTotalsFull),
            untraced_children: self.counter(Counter::ProcessTreeFull),
            keys_full: self.counter(Counter::KeysFull),
        }
    }

    /// The activity between `earlier` and `self` (cumulative maps are never reset, so an
    /// interval report loses nothing to a read-then-clear race).
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let functions = self
            .functions
            .iter()
            .enumerate()
            .map(|(i, now)| match earlier.functions.get(i) {
                Some(before) => now.since(before),
                None => now.clone(),
            })
            .collect();
        let mut counters = self.counters;
        for (slot, before) in counters.iter_mut().zip(earlier.counters) {
            *slot = slot.saturating_sub(before);
        }
        let earlier_keys: HashMap<ByKey, &FunctionTotals> =
            earlier.keys.iter().map(|k| (k.key, &k.totals)).collect();
        let keys = self
            .keys
            .iter()
            .map(|now| KeyTotals {
                key: now.key,
                totals: match earlier_keys.get(&now.key) {
                    Some(before) => now.totals.since(before),
                    None => now.totals.clone(),
                },
            })
            .filter(|k| k.totals.count > 0)
            .collect();
        let pmu = self
            .pmu
            .iter()
            .enumerate()
            .map(|(event, slots)| {
                slots
                    .iter()
                    .enumerate()
                    .map(
                        |(i, now)| match earlier.pmu.get(event).and_then(|e| e.get(i)) {
                            Some(before) => now.since(before),
                            None => now.clone(),
                        },
                    )
                    .collect()
            })
            .collect();
        Snapshot {
            functions,
            counters,
            open_frames: self.open_frames,
            task_entries: self.task_entries,
            keys,
            pmu,
        }
    }
}

impl FunctionTotals {
    /// The calls between `before` and `self` (cumulative aggregates of one slot).
    fn since(&self, before: &FunctionTotals) -> FunctionTotals {
        let mut histogram = Histogram::new();
        let earlier: std::collections::BTreeMap<u64, u64> = before
            .histogram
            .iter()
            .map(|(lower, _, count)| (lower, count))
            .collect();
        for (lower, _, count) in self.histogram.iter() {
            let delta = count - earlier.get(&lower).copied().unwrap_or(0);
            histogram.add_bucket(profiler_common::bucket_index(lower), delta);
        }
        let bounds: Vec<(u64, u64, u64)> = histogram.iter().collect();
        FunctionTotals {
            count: self.count - before.count,
            sum_ns: self.sum_ns - before.sum_ns,
            sum_sq_ns2: self.sum_sq_ns2 - before.sum_sq_ns2,
            min_ns: bounds.first().map_or(0, |b| b.0.max(self.min_ns)),
            max_ns: bounds.last().map_or(0, |b| b.1.min(self.max_ns)),
            on_cpu_sum_ns: self.on_cpu_sum_ns - before.on_cpu_sum_ns,
            below_min: self.below_min - before.below_min,
            // Derived or wrapping sums: a copy torn by a running probe can make them dip.
            self_sum_ns: self.self_sum_ns.saturating_sub(before.self_sum_ns),
            outer_count: self.outer_count.saturating_sub(before.outer_count),
            outer_sum_ns: self.outer_sum_ns.saturating_sub(before.outer_sum_ns),
            histogram,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_merge_into_one_function_whatever_their_cpu() {
        // Two CPUs' copies of chunk 2 (values 64..128) and one of chunk 3 (128..256), filled
        // as the probes fill them.
        let mut elements = [
            (2, HistChunk::default()),
            (2, HistChunk::default()),
            (3, HistChunk::default()),
        ];
        let calls = [(0, 100u64), (0, 127), (1, 96), (2, 200), (2, 130)];
        for &(element, duration) in &calls {
            let (chunk, entry) = &mut elements[element];
            let position = profiler_common::hist_position(0, duration);
            assert_eq!(position.chunk, *chunk);
            entry.buckets[position.index] += 1;
            entry.stats.add(
                &profiler_common::Call {
                    duration,
                    child_ns: 0,
                    off_cpu: 0,
                    outermost: true,
                },
                false,
            );
        }
        let totals = totals_of_chunks(elements.iter().map(|(chunk, e)| (*chunk, e)));
        let mut want = crate::model::Histogram::new();
        calls.iter().for_each(|&(_, d)| want.record(d));
        assert_eq!(totals.histogram, want);
        assert_eq!(totals.count, 5);
        assert_eq!(totals.sum_ns, 653);
        assert_eq!((totals.min_ns, totals.max_ns), (96, 200));
        assert_eq!(totals.outer_count, 5);
    }

    fn stats(count: u64, sum: u64, min: u64, max: u64) -> FuncStats {
        FuncStats {
            count,
            sum_ns: sum,
            sum_sq_lo: sum * sum,
            min_ns: min,
            max_ns: max,
            ..Default::default()
        }
    }

    #[test]
    fn merging_ignores_idle_cpus_for_min() {
        let idle = FuncStats {
            min_ns: 0,
            ..Default::default()
        };
        let merged = merge_stats([&stats(2, 30, 10, 20), &idle, &stats(1, 5, 5, 5)]);
        assert_eq!(
            (merged.count, merged.sum_ns, merged.min_ns, merged.max_ns),
            (3, 35, 5, 20)
        );
        assert_eq!(merge_stats([&idle]).min_ns, 0);
    }

    #[test]
    fn outermost_calls_are_all_calls_less_the_nested_ones() {
        let cpu = |count, sum_ns, nested_count, nested_sum_ns| FuncStats {
            count,
            sum_ns,
            nested_count,
            nested_sum_ns,
            ..Default::default()
        };
        let merged = merge_stats([&cpu(5, 500, 2, 150), &cpu(3, 90, 0, 0)]);
        assert_eq!((merged.outer_count, merged.outer_sum_ns), (6, 440));
    }

    #[test]
    fn session_calls_in_flight_are_entries_less_returns() {
        let snapshot = |entries, count, below_min| {
            let mut counters = [0; NUM_COUNTERS as usize];
            counters[Counter::SessionEntries as usize] = entries;
            Snapshot {
                functions: vec![FunctionTotals {
                    count,
                    below_min,
                    ..Default::default()
                }],
                counters,
                open_frames: 0,
                task_entries: 0,
                keys: Vec::new(),
                pmu: Vec::new(),
            }
        };
        assert_eq!(snapshot(7, 4, 1).session_calls(), 2);
        // Other modes count no entries; a read racing a return never goes below zero.
        assert_eq!(snapshot(0, 4, 0).session_calls(), 0);
        assert_eq!(snapshot(4, 5, 0).session_calls(), 0);
    }

    #[test]
    fn merging_carries_the_128_bit_sum_of_squares() {
        let high = FuncStats {
            count: 1,
            sum_sq_lo: 1,
            sum_sq_hi: 2,
            ..Default::default()
        };
        assert_eq!(merge_stats([&high, &high]).sum_sq_ns2, (4u128 << 64) + 2);
    }

    #[test]
    fn interval_deltas_are_exact() {
        let mut before = FunctionTotals {
            count: 1,
            sum_ns: 100,
            sum_sq_ns2: 10_000,
            min_ns: 100,
            max_ns: 100,
            ..Default::default()
        };
        before.histogram.record(100);
        let mut now = FunctionTotals {
            count: 3,
            sum_ns: 2_100,
            sum_sq_ns2: 2_010_000,
            min_ns: 100,
            max_ns: 1_000,
            ..Default::default()
        };
        now.histogram.record(100);
        now.histogram.record(1_000);
        now.histogram.record(1_000);
        let delta = now.since(&before);
        assert_eq!(
            (delta.count, delta.sum_ns, delta.sum_sq_ns2),
            (2, 2_000, 2_000_000)
        );
        assert_eq!(delta.histogram.total(), 2);
        assert!(delta.min_ns >= 992 && delta.max_ns <= 1_000, "{delta:?}");
    }
}
