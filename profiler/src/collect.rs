//! Stage 3: read the in-kernel aggregates back and merge the per-CPU copies.

use aya::{
    Ebpf,
    maps::{Array, MapData, PerCpuArray, PerCpuHashMap, StackTraceMap},
    programs::Iter,
};
use std::collections::HashMap;

use profiler_common::{
    ByKey, Counter, FuncStats, HIST_CHUNKS, HistChunk, NUM_COUNTERS, SLOWEST_MAX, SlowCall,
    StackKey, StackTotals, TaskFrames, first_bucket_of_chunk, names,
};

use crate::model::{FunctionTotals, Histogram, Losses, TaskStore};

/// Everything readable from the maps at one instant.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub functions: Vec<FunctionTotals>,
    pub counters: [u64; NUM_COUNTERS as usize],
    /// Frames open (calls in flight) when the run stopped: not read by [`snapshot`] but
    /// counted once at the stop ([`open_frames`]), so that no call pays for it.
    pub open_frames: u64,
    /// Live tasks that have a frame stack (made a probed call), from the `LiveTasks` gauge.
    pub task_entries: u64,
    /// `--by`: every key met so far, with its calls (all CPUs merged).
    pub keys: Vec<KeyTotals>,
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

/// The chunks set in any of `masks` (a slot's `OCCUPIED` bits, per CPU).
fn occupied_chunks(masks: impl IntoIterator<Item = u64>) -> impl Iterator<Item = u32> {
    let mask = masks.into_iter().fold(0, |all, mask| all | mask);
    (0..HIST_CHUNKS).filter(move |chunk| mask & (1 << chunk) != 0)
}

/// Reads every map. `functions` is the number of probed functions.
pub fn snapshot(ebpf: &Ebpf, functions: usize) -> anyhow::Result<Snapshot> {
    use anyhow::Context as _;
    let slots = SlotReader::open(ebpf)?;
    let counters_map: PerCpuArray<&MapData, u64> =
        PerCpuArray::try_from(ebpf.map(names::COUNTERS).context("COUNTERS map missing")?)?;

    let mut snapshot = Snapshot::default();
    // The counters first, then the stats: kprobe.session's calls in flight are its entries
    // less its returns, and returns read later can only make that fall (to 0 at worst),
    // never count calls that entered and returned between the two reads.
    for (index, slot) in snapshot.counters.iter_mut().enumerate() {
        // Wrapping: a gauge's per-CPU parts are +1s and -ns that only make sense summed.
        *slot = counters_map
            .get(&(index as u32), 0)
            .context("reading COUNTERS")?
            .iter()
            .fold(0, |sum: u64, part| sum.wrapping_add(*part));
    }
    for func in 0..functions as u32 {
        let chunks = slots.read(func)?;
        let every_cpu = chunks
            .iter()
            .flat_map(|(chunk, per_cpu)| per_cpu.iter().map(|element| (*chunk, element)));
        snapshot.functions.push(totals_of_chunks(every_cpu));
    }
    snapshot.keys = keys(ebpf, &slots, (functions as u32).max(1))?;
    snapshot.task_entries = gauge(snapshot.counter(Counter::LiveTasks));
    Ok(snapshot)
}

/// One slot's occupied `HIST` chunks, each with every CPU's copy of its element.
type SlotChunks = Vec<(u32, Vec<HistChunk>)>;

/// The `HIST` and `OCCUPIED` maps.
struct SlotReader<'a> {
    hist: PerCpuArray<&'a MapData, HistChunk>,
    occupied: PerCpuArray<&'a MapData, u64>,
}

impl<'a> SlotReader<'a> {
    fn open(ebpf: &'a Ebpf) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        Ok(SlotReader {
            hist: PerCpuArray::try_from(ebpf.map(names::HIST).context("HIST map missing")?)?,
            occupied: PerCpuArray::try_from(
                ebpf.map(names::OCCUPIED).context("OCCUPIED map missing")?,
            )?,
        })
    }

    /// Slot `slot`'s chunks that hold a call on some CPU: one `bpf()` read for the mask and
    /// one per such chunk. A chunk whose first call lands after the mask's read is counted by
    /// the next snapshot, never lost; its calls and their aggregates share one element, so a
    /// snapshot never holds one without the other.
    fn read(&self, slot: u32) -> anyhow::Result<SlotChunks> {
        use anyhow::Context as _;
        let masks = self.occupied.get(&slot, 0).context("reading OCCUPIED")?;
        occupied_chunks(masks.iter().copied())
            .map(|chunk| {
                let per_cpu = self
                    .hist
                    .get(&profiler_common::hist_element(slot, chunk), 0)
                    .context("reading HIST")?;
                Ok((chunk, per_cpu.iter().copied().collect()))
            })
            .collect()
    }
}

/// The run's last snapshot, at its stop (probes still attached): every map, and the calls in
/// flight ([`open_frames_or_note`]).
pub fn final_snapshot(
    ebpf: &mut Ebpf,
    functions: usize,
    store: TaskStore,
) -> anyhow::Result<Snapshot> {
    let mut last = snapshot(ebpf, functions)?;
    last.open_frames = open_frames_or_note(ebpf, store) + last.session_calls();
    Ok(last)
}

/// [`open_frames`] for a report: an error becomes a printed note and 0, not a failed run.
fn open_frames_or_note(ebpf: &mut Ebpf, store: TaskStore) -> u64 {
    open_frames(ebpf, store).unwrap_or_else(|error| {
        eprintln!("hotprof: note: calls in flight at the stop not counted: {error:#}");
        0
    })
}

/// The frames open on every task now: the calls in flight when a run stops. Each call pays
/// nothing for this: the main object's `open_frames` task iterator adds up every task's
/// depth (loaded here, on first use: 5.11+ with BTF, like its task storage; it sees the tasks
/// of hotprof's own PID namespace, so run inside a container's it undercounts); the hash-map
/// store of older kernels is walked from userspace. kprobe.session calls have no frames:
/// [`Snapshot::session_calls`] has theirs.
pub fn open_frames(ebpf: &mut Ebpf, store: TaskStore) -> anyhow::Result<u64> {
    use anyhow::Context as _;
    use std::io::Read as _;
    match store {
        TaskStore::HashMap => {
            let map = ebpf
                .map(names::TASK_FRAMES_BY_TASK)
                .context("TASK_FRAMES_BY_TASK map missing")?;
            let tasks: aya::maps::HashMap<&MapData, u64, TaskFrames> =
                aya::maps::HashMap::try_from(map)?;
            // By key: a task deleted during the walk makes the kernel restart it from the
            // first key, so entries can come twice.
            let mut depths: HashMap<u64, u32> = HashMap::new();
            for (task, frames) in tasks.iter().flatten() {
                depths.insert(task, frames.depth);
            }
            Ok(depths.values().map(|&depth| u64::from(depth)).sum())
        }
        TaskStore::TaskStorage => {
            let mut sum: Array<&mut MapData, u64> = Array::try_from(
                ebpf.map_mut(names::OPEN_FRAMES)
                    .context("OPEN_FRAMES map missing")?,
            )?;
            sum.set(0, 0, 0).context("clearing OPEN_FRAMES")?;
            let program: &mut Iter = ebpf
                .program_mut("open_frames")
                .context("open_frames program missing")?
                .try_into()?;
            if program.fd().is_err() {
                let btf = crate::attach::kernel_btf().context("reading the kernel's BTF")?;
                let btf_id = btf
                    .function("bpf_iter_task")
                    .context("the kernel's BTF has no task iterator (bpf_iter_task)")?;
                program
                    .load_by_btf_id(btf_id)
                    .context("loading open_frames")?;
            }
            let link = program.attach().context("attaching open_frames")?;
            let mut output = program
                .take_link(link)?
                .into_file()
                .context("creating the task iterator")?;
            // The iterator prints nothing; reading runs it over every task.
            output
                .read_to_end(&mut Vec::new())
                .context("running the task iterator")?;
            let sum: Array<&MapData, u64> = Array::try_from(
                ebpf.map(names::OPEN_FRAMES)
                    .context("OPEN_FRAMES map missing")?,
            )?;
            Ok(sum.get(&0, 0).context("reading OPEN_FRAMES")?)
        }
    }
}

/// Reads the `--by` keys: each CPU keeps a key's calls in its own slot (`KEY_SLOTS` holds
/// slot + 1 per CPU, 0 where that CPU never met the key), slot `s` being function slot
/// `base + s` of `HIST` and `OCCUPIED` on that CPU only.
fn keys(ebpf: &Ebpf, slots: &SlotReader, base: u32) -> anyhow::Result<Vec<KeyTotals>> {
    use anyhow::Context as _;
    let Some(map) = ebpf.map(names::KEY_SLOTS) else {
        return Ok(Vec::new());
    };
    let key_slots: PerCpuHashMap<&MapData, ByKey, u32> = PerCpuHashMap::try_from(map)?;
    // A slot's chunks, read once however many keys use that slot number on their CPUs.
    let mut chunks_of: HashMap<u32, SlotChunks> = HashMap::new();
    let mut keys = Vec::new();
    for entry in key_slots.iter() {
        let (key, per_cpu) = entry.context("reading KEY_SLOTS")?;
        let mut parts: Vec<(u32, HistChunk)> = Vec::new();
        for (cpu, &slot) in per_cpu.iter().enumerate() {
            if slot == 0 {
                continue;
            }
            let index = base + slot - 1;
            let chunks = match chunks_of.entry(index) {
                std::collections::hash_map::Entry::Occupied(known) => known.into_mut(),
                std::collections::hash_map::Entry::Vacant(entry) => {
                    entry.insert(slots.read(index)?)
                }
            };
            // This CPU's copy of the slot is this key's alone.
            parts.extend(
                chunks
                    .iter()
                    .filter_map(|(chunk, per_cpu)| Some((*chunk, *per_cpu.get(cpu)?))),
            );
        }
        let totals = totals_of_chunks(parts.iter().map(|(chunk, element)| (*chunk, element)));
        if totals.count > 0 {
            keys.push(KeyTotals { key, totals });
        }
    }
    keys.sort_by_key(|k| k.key);
    Ok(keys)
}

/// A gauge's wrapped sum as a count. The per-CPU parts are read one after another, so a frame
/// that opens on one CPU and closes on another between two reads can make it dip below zero.
fn gauge(sum: u64) -> u64 {
    if (sum as i64) < 0 { 0 } else { sum }
}

impl Snapshot {
    pub fn counter(&self, counter: Counter) -> u64 {
        self.counters[counter as usize]
    }

    /// kprobe.session calls entered and not yet returned (0 in other modes): they have no
    /// frames for [`open_frames`] to find. Entries less returns (the one slot's timed calls
    /// and those below `--min-latency`).
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
        Snapshot {
            functions,
            counters,
            open_frames: self.open_frames,
            task_entries: self.task_entries,
            keys,
        }
    }
}

impl FunctionTotals {
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
    fn occupied_chunks_are_the_bits_set_on_any_cpu() {
        let chunks: Vec<u32> = occupied_chunks([0b101, 1 << 40, 0]).collect();
        assert_eq!(chunks, [0, 2, 40]);
        assert_eq!(occupied_chunks([]).count(), 0);
        // The highest chunk is a bit too (HIST_CHUNKS <= 64).
        let last: Vec<u32> = occupied_chunks([1 << (HIST_CHUNKS - 1)]).collect();
        assert_eq!(last, [HIST_CHUNKS - 1]);
    }

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

    fn collected(func: u32, total_ns: u64, count: u64) -> CollectedStack {
        CollectedStack {
            func,
            tgid: 7,
            comm: "w".into(),
            kernel: vec![0xffff_ffff_8100_0000],
            user: Vec::new(),
            total_ns,
            count,
        }
    }

    #[test]
    fn sampled_stacks_count_each_walked_call_n_times() {
        let mut stacks = vec![collected(0, 1_000, 3), collected(1, 50, 1)];
        let walked = walked_calls(&stacks, 3);
        weight_sampled(&mut stacks, 8);
        assert_eq!(
            stacks
                .iter()
                .map(|s| (s.total_ns, s.count))
                .collect::<Vec<_>>(),
            [(8_000, 24), (400, 8)]
        );
        // Walked calls are the kernel's counts, not the weighted ones; slot 2 had none.
        assert_eq!(walked, [3, 1, 0]);
        // Every call walked (N = 1, or 0 from a default): the figures are exact.
        let mut exact = vec![collected(0, 1_000, 3)];
        weight_sampled(&mut exact, 1);
        weight_sampled(&mut exact, 0);
        assert_eq!((exact[0].total_ns, exact[0].count), (1_000, 3));
        // A slot beyond the ones asked for is left out, not a panic.
        assert_eq!(walked_calls(&[collected(9, 1, 1)], 2), [0, 0]);
    }

    #[test]
    fn weighting_saturates_instead_of_wrapping() {
        let mut stacks = vec![collected(0, u64::MAX / 2, u64::MAX / 4)];
        weight_sampled(&mut stacks, 8);
        assert_eq!((stacks[0].total_ns, stacks[0].count), (u64::MAX, u64::MAX));
    }

    /// The estimate is unbiased and its spread is the binomial one the report prints: walk a
    /// random 1 in N calls of two paths (a deterministic generator) many times over.
    #[test]
    fn weighted_counts_estimate_each_path_within_the_binomial_spread() {
        let every = 8u32;
        let paths = [30_000u64, 10_000];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            // xorshift64*: enough for a sampling test, and the same numbers every run.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
        };
        let trials = 200;
        for (func, &calls) in paths.iter().enumerate() {
            let mut estimates = Vec::new();
            for _ in 0..trials {
                let walked = (0..calls).filter(|_| next() % every == 0).count() as u64;
                let mut stacks = vec![collected(func as u32, walked * 100, walked)];
                weight_sampled(&mut stacks, every);
                estimates.push(stacks[0].count as f64);
            }
            let mean = estimates.iter().sum::<f64>() / trials as f64;
            let sd = (estimates.iter().map(|e| (e - mean).powi(2)).sum::<f64>()
                / (trials - 1) as f64)
                .sqrt();
            let predicted = (calls as f64 * f64::from(every - 1)).sqrt();
            // The mean of 200 estimates is within 5 of its standard errors of the truth.
            assert!(
                (mean - calls as f64).abs() < 5.0 * predicted / (trials as f64).sqrt(),
                "path of {calls}: mean estimate {mean}"
            );
            // The sample spread matches √(n·(N−1)) within 20 % (its own error is ~5 %).
            assert!(
                (sd / predicted - 1.0).abs() < 0.2,
                "path of {calls}: spread {sd}, predicted {predicted}"
            );
        }
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

/// The kept slowest calls (`--slowest`) of every function slot on every CPU, with their
/// slot, slowest first. Empty slots are left out.
pub fn slowest(ebpf: &Ebpf, functions: usize) -> anyhow::Result<Vec<(u32, SlowCall)>> {
    use anyhow::Context as _;
    let kept: PerCpuArray<&MapData, SlowCall> =
        PerCpuArray::try_from(ebpf.map(names::SLOWEST).context("SLOWEST map missing")?)?;
    let mut calls = Vec::new();
    for func in 0..functions as u32 {
        for index in 0..SLOWEST_MAX {
            let Ok(per_cpu) = kept.get(&(func * SLOWEST_MAX + index), 0) else {
                // Past the map's end: --slowest is off.
                return Ok(calls);
            };
            calls.extend(
                per_cpu
                    .iter()
                    .filter(|call| call.duration_ns > 0)
                    .map(|call| (func, *call)),
            );
        }
    }
    calls.sort_by(|a, b| {
        b.1.duration_ns
            .cmp(&a.1.duration_ns)
            .then(a.1.entry_ns.cmp(&b.1.entry_ns))
    });
    Ok(calls)
}

/// The frames of a stack id in the `STACKS` map, innermost first; empty when not stored.
pub fn stack_frames(ebpf: &Ebpf, id: i32) -> Vec<u64> {
    let Some(map) = ebpf.map(names::STACKS) else {
        return Vec::new();
    };
    match StackTraceMap::try_from(map) {
        Ok(traces) => frames_of(&traces, id),
        Err(_) => Vec::new(),
    }
}

/// The frames of stack `id` (negative: not captured), innermost first.
fn frames_of(traces: &StackTraceMap<&MapData>, id: i32) -> Vec<u64> {
    if id < 0 {
        return Vec::new();
    }
    traces
        .get(&(id as u32), 0)
        .map(|trace| trace.frames().iter().map(|f| f.ip).collect())
        .unwrap_or_default()
}

/// One distinct stack of a probed function, with the latency spent under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectedStack {
    pub func: u32,
    pub tgid: u32,
    pub comm: String,
    /// Kernel frames, leaf first; empty when the stack was lost (see `kernel_error`).
    pub kernel: Vec<u64>,
    /// User frames, leaf first; empty for kernel threads or when not captured.
    pub user: Vec<u64>,
    pub total_ns: u64,
    pub count: u64,
}

/// Makes stacks of calls walked a random 1 in `every` (`--stacks-every N`) stand for all
/// calls: each walked call counts `every` times, in its count and in its latency. Unbiased:
/// a path of n calls has about n/N walked, so N times that estimates n, within ±√(n·(N−1))
/// (one standard deviation of the binomial count). `every` ≤ 1 leaves them as they are.
pub fn weight_sampled(stacks: &mut [CollectedStack], every: u32) {
    let weight = u64::from(every.max(1));
    for stack in stacks {
        stack.total_ns = stack.total_ns.saturating_mul(weight);
        stack.count = stack.count.saturating_mul(weight);
    }
}

/// Calls whose stack was walked, per function slot (`--stacks`): the per-stack counts as read
/// from the kernel, before [`weight_sampled`]. Slots with no stack are 0.
pub fn walked_calls(stacks: &[CollectedStack], slots: usize) -> Vec<u64> {
    let mut walked = vec![0u64; slots];
    for stack in stacks {
        if let Some(slot) = walked.get_mut(stack.func as usize) {
            *slot += stack.count;
        }
    }
    walked
}

/// Reads the per-stack latency aggregates (`--stacks`) with their frames.
pub fn stacks(ebpf: &Ebpf) -> anyhow::Result<Vec<CollectedStack>> {
    use anyhow::Context as _;
    let totals: PerCpuHashMap<&MapData, StackKey, StackTotals> = PerCpuHashMap::try_from(
        ebpf.map(names::STACK_TOTALS)
            .context("STACK_TOTALS map missing")?,
    )?;
    resolve_stacks(ebpf, totals.iter())
}

/// Merges per-CPU stack aggregates and resolves their stack ids to addresses.
pub fn resolve_stacks(
    ebpf: &Ebpf,
    entries: impl Iterator<
        Item = Result<(StackKey, aya::maps::PerCpuValues<StackTotals>), aya::maps::MapError>,
    >,
) -> anyhow::Result<Vec<CollectedStack>> {
    use anyhow::Context as _;
    let traces: StackTraceMap<&MapData> =
        StackTraceMap::try_from(ebpf.map(names::STACKS).context("STACKS map missing")?)?;
    let frames = |id: i32| frames_of(&traces, id);
    let mut stacks = Vec::new();
    for entry in entries {
        let (key, per_cpu) = entry.context("reading stack aggregates")?;
        let mut total = CollectedStack {
            func: key.func,
            tgid: key.tgid,
            comm: String::new(),
            kernel: frames(key.kernel_stack),
            user: frames(key.user_stack),
            total_ns: 0,
            count: 0,
        };
        for value in per_cpu.iter() {
            total.total_ns += value.total_ns;
            total.count += value.count;
            if total.comm.is_empty() && value.count > 0 {
                let end = value
                    .comm
                    .iter()
                    .position(|&b| b == 0)
                    .unwrap_or(value.comm.len());
                total.comm = String::from_utf8_lossy(&value.comm[..end]).into_owned();
            }
        }
        stacks.push(total);
    }
    stacks.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.kernel.cmp(&b.kernel)));
    Ok(stacks)
}
