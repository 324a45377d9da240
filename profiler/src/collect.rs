//! Stage 3: read the in-kernel aggregates back and merge the per-CPU copies.

use aya::{
    Ebpf,
    maps::{Array, MapData, PerCpuArray, PerCpuHashMap, StackTraceMap},
    programs::Iter,
};
use std::collections::HashMap;

use profiler_common::{
    ByKey, Counter, HIST_CHUNKS, HistChunk, SLOWEST_MAX, SlowCall, StackKey, StackTotals,
    TaskFrames, names,
};

pub use crate::model::{
    CollectedStack, KeyTotals, Snapshot, merge_stats, totals_of_chunks, walked_calls,
    weight_sampled,
};
use crate::model::{TaskStore, gauge};

/// The chunks set in any of `masks` (a slot's `OCCUPIED` bits, per CPU).
fn occupied_chunks(masks: impl IntoIterator<Item = u64>) -> impl Iterator<Item = u32> {
    let mask = masks.into_iter().fold(0, |all, mask| all | mask);
    (0..HIST_CHUNKS).filter(move |chunk| mask & (1 << chunk) != 0)
}

/// Reads every map. `functions` is the number of probed functions (function slots),
/// `pmu_events` the number of PMU events counted per call (`--counter`).
pub fn snapshot(ebpf: &Ebpf, functions: usize, pmu_events: usize) -> anyhow::Result<Snapshot> {
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
        snapshot.functions.push(slots.totals(func)?);
    }
    // As the loader lays them out: each event's slots after the functions', then the keys'.
    let stride = (functions as u32).max(1);
    for event in 1..=pmu_events as u32 {
        let per_function = (0..functions as u32)
            .map(|func| slots.totals(stride * event + func))
            .collect::<anyhow::Result<Vec<_>>>()?;
        snapshot.pmu.push(per_function);
    }
    snapshot.keys = keys(ebpf, &slots, stride * (1 + pmu_events as u32))?;
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

    /// Slot `slot`'s calls, every CPU's merged.
    fn totals(&self, slot: u32) -> anyhow::Result<crate::model::FunctionTotals> {
        let chunks = self.read(slot)?;
        let every_cpu = chunks
            .iter()
            .flat_map(|(chunk, per_cpu)| per_cpu.iter().map(|element| (*chunk, element)));
        Ok(totals_of_chunks(every_cpu))
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
    pmu_events: usize,
    store: TaskStore,
) -> anyhow::Result<Snapshot> {
    let mut last = snapshot(ebpf, functions, pmu_events)?;
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
}
