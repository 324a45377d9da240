//! `--slowest N`: each CPU keeps the N slowest calls of each function, with what a reader
//! needs to explain them (when, how long, off-CPU part, which task, the `--by` fields, the
//! stacks). A call slower than the CPU's current floor for the function (the fastest of its
//! N, or 0 until N are kept) replaces that fastest one; every other call costs one compare.
//! Userspace merges the CPUs: the N slowest overall are among the CPUs' N slowest.

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_smp_processor_id},
    macros::map,
    maps::PerCpuArray,
};
use profiler_common::{SLOWEST_MAX, SlowCall};

use crate::config::{SLOWEST_N, config, per_call};

/// The kept calls, `func * SLOWEST_MAX + i`; sized by userspace.
#[map]
static SLOWEST: PerCpuArray<SlowCall> = PerCpuArray::with_max_entries(1, 0);
/// Per function: the fastest kept duration once N are kept, else 0.
#[map]
static SLOWEST_FLOOR: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Whether `--slowest` is in use.
#[inline(always)]
pub(crate) fn enabled() -> bool {
    per_call(&SLOWEST_N) != 0
}

/// A finished call, as `--slowest` keeps it: its frame's fields, read before the frame's
/// slot could be reused.
#[derive(Clone, Copy)]
pub(crate) struct SlowFrame {
    pub func: u32,
    pub entry_ns: u64,
    /// Kernel and user stack ids (-1 when the run captures none).
    pub stacks: (i32, i32),
    pub duration: u64,
    pub off_cpu: u64,
}

/// Keeps `call` if it is among this CPU's N slowest of its function.
#[inline(always)]
pub(crate) fn offer(call: &SlowFrame, key: [u64; profiler_common::BY_FIELDS_MAX]) {
    let SlowFrame {
        func,
        entry_ns,
        stacks: (kernel_stack, user_stack),
        duration,
        off_cpu,
    } = *call;
    let Some(floor) = SLOWEST_FLOOR.get_ptr_mut(func) else {
        return;
    };
    // SAFETY: `floor` is the non-null result of a lookup: this CPU's u64, valid while the
    // program runs and written only from this CPU (migration is disabled).
    let floor = unsafe { &mut *floor };
    if duration <= *floor {
        return;
    }
    let n = config(&SLOWEST_N).min(SLOWEST_MAX);
    let base = func * SLOWEST_MAX;
    // The fastest kept call (an empty slot counts as 0): the one to replace.
    let mut victim = 0;
    let mut victim_ns = u64::MAX;
    for index in 0..SLOWEST_MAX {
        if index < n
            && let Some(kept) = SLOWEST.get(base + index)
            && kept.duration_ns < victim_ns
        {
            victim = index;
            victim_ns = kept.duration_ns;
        }
    }
    let Some(slot) = SLOWEST.get_ptr_mut(base + victim) else {
        return;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: `slot` is the non-null result of a lookup: this CPU's SlowCall, written only
    // from this CPU.
    unsafe {
        *slot = SlowCall {
            entry_ns,
            duration_ns: duration,
            off_cpu_ns: off_cpu,
            pid_tgid,
            // SAFETY: the helper takes no arguments and touches no memory.
            cpu: bpf_get_smp_processor_id(),
            kernel_stack,
            user_stack,
            _pad: 0,
            comm: bpf_get_current_comm().unwrap_or([0; 16]),
            key,
        };
    }
    // The new floor: the fastest of the N now kept (0 while a slot is still empty).
    let mut fastest = u64::MAX;
    for index in 0..SLOWEST_MAX {
        if index < n
            && let Some(kept) = SLOWEST.get(base + index)
            && kept.duration_ns < fastest
        {
            fastest = kept.duration_ns;
        }
    }
    *floor = if fastest == u64::MAX { 0 } else { fastest };
}
