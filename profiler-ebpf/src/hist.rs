//! The per-slot histograms and aggregates (`HIST`, `OCCUPIED`): where a finished call is
//! added.

use aya_ebpf::{macros::map, maps::PerCpuArray};
use profiler_common::{
    Call, Counter, HIST_CHUNKS, HistChunk, hist_position, histogram::HIST_CHUNK_BUCKETS,
};

use crate::config::{MIN_LATENCY_NS, TRACK_OFF_CPU, per_call};
use crate::counters::count;

/// Per slot (function or `--by` key), its histogram in chunks of a power of two's buckets,
/// each with the aggregates of the calls it counts (`hist_position`); resized by userspace.
#[map]
static HIST: PerCpuArray<HistChunk> = PerCpuArray::with_max_entries(HIST_CHUNKS, 0);
/// Per slot, this CPU's `HIST` chunks that hold a call, as bits (chunk `c`: bit `c`), so a
/// snapshot reads only those; resized by userspace to the number of slots.
#[map]
static OCCUPIED: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Adds a finished call to its function's aggregates (or a `--by` key's, whose slots follow
/// the functions'); false when it was not recorded (below `--min-latency` or no slot).
/// A BPF-to-BPF call, for the `--by` key slots: inlined there, the 5.10 verifier lost
/// track of a map value pointer. The function's own slot is recorded inline
/// ([`record_into`]): as a call it cost a call, spills and a `Call` on the stack each time.
#[inline(never)]
pub(crate) fn record(slot: u32, call: &Call) -> bool {
    record_into(slot, call, per_call(&TRACK_OFF_CPU) != 0)
}

/// [`record`], inlined: one lookup, of the `HIST` element holding the call's bucket and the
/// aggregates of the calls in it. A missing slot is counted.
#[inline(always)]
pub(crate) fn record_into(slot: u32, call: &Call, track_off_cpu: bool) -> bool {
    let position = hist_position(slot, call.duration);
    let Some(element) = HIST.get_ptr_mut(position.element) else {
        core::hint::cold_path();
        count(Counter::SlotMissing, 1);
        return false;
    };
    // SAFETY: `element` is the non-null result of a lookup: this CPU's HistChunk in HIST,
    // valid and aligned while the program runs, written only from this CPU (the program runs
    // with migration disabled); the reference lives for this call alone.
    let element = unsafe { &mut *element };
    let stats = &mut element.stats;
    if call.duration < per_call(&MIN_LATENCY_NS) {
        if stats.below_min == 0 {
            mark_occupied(slot, position.chunk);
        }
        stats.below_min += 1;
        return false;
    }
    // The mask is for the verifier: the index is below the length.
    element.buckets[position.index & (HIST_CHUNK_BUCKETS as usize - 1)] += 1;
    stats.add(call, track_off_cpu);
    // The chunk's first timed call. Last, and its chunk found again from the one call's
    // duration: a lookup in the middle, or the chunk kept until here, made the call's
    // values spill to the stack on every call.
    // SAFETY: `stats.count` is a valid, aligned u64 of this CPU's element, written above.
    // Volatile, a load from the element: LLVM otherwise kept the count from before the
    // update, spilled to the stack across the update.
    if unsafe { core::ptr::read_volatile(&stats.count) } == 1 {
        core::hint::cold_path();
        mark_occupied(slot, hist_position(slot, stats.max_ns).chunk);
    }
    true
}

/// Adds a value that is not a duration (a call's PMU count, `--counter`) to slot `slot`: its
/// histogram and aggregates, whatever `--min-latency` says. A BPF-to-BPF call, like
/// [`record`]'s: only runs that count PMU events pay for it.
#[inline(never)]
pub(crate) fn record_value(slot: u32, value: u64) {
    let position = hist_position(slot, value);
    let Some(element) = HIST.get_ptr_mut(position.element) else {
        count(Counter::SlotMissing, 1);
        return;
    };
    // SAFETY: as in `record_into`: this CPU's HistChunk, written only from this CPU.
    let element = unsafe { &mut *element };
    element.buckets[position.index & (HIST_CHUNK_BUCKETS as usize - 1)] += 1;
    let call = Call {
        duration: value,
        child_ns: 0,
        off_cpu: 0,
        outermost: true,
    };
    element.stats.add(&call, false);
    // SAFETY: as in `record_into`.
    if unsafe { core::ptr::read_volatile(&element.stats.count) } == 1 {
        mark_occupied(slot, hist_position(slot, element.stats.max_ns).chunk);
    }
}

/// Sets chunk `chunk`'s bit in slot `slot`'s `OCCUPIED` mask, at the chunk's first call on
/// this CPU: a second lookup only then.
#[inline(always)]
fn mark_occupied(slot: u32, chunk: u32) {
    let Some(mask) = OCCUPIED.get_ptr_mut(slot) else {
        count(Counter::SlotMissing, 1);
        return;
    };
    // SAFETY: `mask` is the non-null result of a lookup: this CPU's u64 in OCCUPIED, valid
    // and aligned while the program runs, written only from this CPU.
    unsafe { *mask |= 1 << (chunk & 63) };
}
