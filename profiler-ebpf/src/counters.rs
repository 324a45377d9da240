//! The loss and bookkeeping counters every program may bump.

use aya_ebpf::{macros::map, maps::PerCpuArray};
use profiler_common::{Counter, NUM_COUNTERS};

/// Loss and bookkeeping counters, indexed by [`Counter`].
#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(NUM_COUNTERS, 0);

#[inline(always)]
pub(crate) fn count(counter: Counter, n: u64) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: `slot` is the non-null result of a lookup: this CPU's u64 in the map, valid
        // and aligned while the program runs. No other CPU writes it, and the program cannot
        // move to another CPU meanwhile (BPF programs run with migration disabled).
        unsafe { *slot += n };
    }
}
