//! On-CPU sampling (`hotprof sample`): a perf_event program counting samples per distinct
//! (process, kernel stack, user stack). Minimum kernel 4.9.

use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid},
    macros::{map, perf_event},
    maps::PerCpuHashMap,
    programs::{PerfEventContext, tracing::StackIdContext},
};
use profiler_common::{Counter, StackKey, StackTotals};

use crate::config::{SAMPLE_INSIDE, config};
use crate::counters::count;
use crate::frames::{STACKS, stack_error, wanted};
use crate::store;

/// Samples per stack; `total_ns` is unused (0), `count` is the number of samples.
#[map]
static SAMPLES: PerCpuHashMap<StackKey, StackTotals> = PerCpuHashMap::with_max_entries(1, 0);

#[perf_event]
pub fn on_cpu_sample(ctx: PerfEventContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !wanted(pid_tgid) {
        return 0;
    }
    if config(&SAMPLE_INSIDE) != 0 && !inside_probed_frame() {
        count(Counter::OutsideParent, 1);
        return 0;
    }
    let kernel_stack = ctx
        .get_stackid(&STACKS, 0)
        .map_or_else(stack_error, |id| id as i32);
    let user_stack = ctx
        .get_stackid(&STACKS, u64::from(BPF_F_USER_STACK))
        .map_or_else(stack_error, |id| id as i32);
    let key = StackKey {
        func: 0,
        tgid: (pid_tgid >> 32) as u32,
        kernel_stack,
        user_stack,
    };
    if let Some(totals) = SAMPLES.get_ptr_mut(key) {
        // SAFETY: `totals` is the non-null result of a lookup: this CPU's copy of the value,
        // valid and aligned while the program runs; no other CPU writes it, and a perf_event
        // program runs with preemption disabled.
        unsafe { (*totals).count += 1 };
        return 0;
    }
    let totals = StackTotals {
        total_ns: 0,
        count: 1,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
    };
    if SAMPLES.insert(key, totals, 0).is_err() {
        count(Counter::StackTotalsFull, 1);
    }
    0
}

/// Whether the current task has a probed frame open.
#[inline(always)]
fn inside_probed_frame() -> bool {
    match store::current() {
        // SAFETY: the store's non-null pointer to the current task's frame stack; only its
        // depth is read (the task is interrupted here, not running its probes).
        Some(frames) => unsafe { (*frames).depth > 0 },
        None => false,
    }
}
