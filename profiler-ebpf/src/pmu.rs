//! `--counter`: PMU events read at each probed call's entry and return, so a call's
//! instructions (or cycles, branch misses, …) go into a histogram of their own beside its
//! latency. Userspace opens one counting perf event per CPU and event and puts them in
//! `PMU_EVENTS_N`; the programs read the current CPU's with `bpf_perf_event_read_value`
//! (4.15). The events count whatever their CPU runs, so a call whose task migrated or was
//! switched out counts other work too: a migrated one is dropped (its entry and return read
//! different CPUs' events), and so is one during which an event was multiplexed out.

use aya_ebpf::{
    bindings::{BPF_F_CURRENT_CPU, bpf_perf_event_value},
    helpers::{bpf_get_smp_processor_id, generated::bpf_perf_event_read_value},
    macros::map,
    maps::PerfEventArray,
};
use profiler_common::{Counter, Frame, PMU_EVENTS_MAX};

use crate::config::{FUNCTION_SLOTS, PMU_EVENT_COUNT, config, per_call};
use crate::counters::count;
use crate::hist;

/// Event 0's perf event on each CPU (max entries: aya sets the number of CPUs).
#[map]
static PMU_EVENTS_0: PerfEventArray<u32> = PerfEventArray::new(0);
/// Event 1's, likewise.
#[map]
static PMU_EVENTS_1: PerfEventArray<u32> = PerfEventArray::new(0);

/// The events counted in this run (0: `--counter` is off, and nothing here runs).
#[inline(always)]
pub(crate) fn events() -> usize {
    per_call(&PMU_EVENT_COUNT) as usize
}

/// The events' counts on this CPU now, with the time they were enabled but not counting.
#[derive(Clone, Copy)]
pub(crate) struct Reading {
    counts: [u64; PMU_EVENTS_MAX],
    idle: u64,
    cpu: u32,
    /// A read failed: the call's counts are unknown.
    failed: bool,
}

impl Reading {
    /// No reading (a run without `--counter`).
    pub(crate) const NONE: Reading = Reading {
        counts: [0; PMU_EVENTS_MAX],
        idle: 0,
        cpu: 0,
        failed: true,
    };
}

/// Reads this run's events on the current CPU.
#[inline(always)]
pub(crate) fn read() -> Reading {
    let mut reading = Reading {
        counts: [0; PMU_EVENTS_MAX],
        idle: 0,
        // SAFETY: the helper takes no arguments and touches no memory; it returns the CPU id.
        cpu: unsafe { bpf_get_smp_processor_id() },
        failed: false,
    };
    let events = events();
    for index in 0..PMU_EVENTS_MAX {
        if index >= events {
            continue;
        }
        let map: *const core::ffi::c_void = if index == 0 {
            (&raw const PMU_EVENTS_0).cast()
        } else {
            (&raw const PMU_EVENTS_1).cast()
        };
        let mut value = bpf_perf_event_value {
            counter: 0,
            enabled: 0,
            running: 0,
        };
        // SAFETY: `map` is a perf event array map of this object (the loader relocates the
        // static's address to the map); the helper writes at most `size_of` bytes into
        // `value`, which lives across the call, and fails (non-zero) instead of faulting.
        let failed = unsafe {
            bpf_perf_event_read_value(
                map.cast_mut(),
                BPF_F_CURRENT_CPU,
                &mut value,
                core::mem::size_of::<bpf_perf_event_value>() as u32,
            )
        } != 0;
        reading.failed |= failed;
        reading.counts[index] = value.counter;
        reading.idle = reading
            .idle
            .wrapping_add(value.enabled.wrapping_sub(value.running));
    }
    reading
}

/// Keeps the entry's reading in its frame. Last before the entry's clock read, so that what
/// the counts span encloses the timed window.
#[inline(always)]
pub(crate) fn keep_at_entry(frame: &mut Frame) {
    let reading = read();
    frame.pmu_at_entry = reading.counts;
    // A failed read makes the frame's idle time impossible (all ones): the return drops it.
    frame.pmu_idle_at_entry = if reading.failed {
        u64::MAX
    } else {
        reading.idle
    };
    frame.pmu_cpu = reading.cpu;
}

/// What the entry kept of its reading, read back at the return.
#[derive(Clone, Copy)]
pub(crate) struct AtEntry {
    counts: [u64; PMU_EVENTS_MAX],
    idle: u64,
    cpu: u32,
}

impl AtEntry {
    /// No reading (a run without `--counter`).
    pub(crate) const NONE: AtEntry = AtEntry {
        counts: [0; PMU_EVENTS_MAX],
        idle: 0,
        cpu: 0,
    };

    #[inline(always)]
    pub(crate) fn of(frame: &Frame) -> Self {
        AtEntry {
            counts: frame.pmu_at_entry,
            idle: frame.pmu_idle_at_entry,
            cpu: frame.pmu_cpu,
        }
    }
}

/// Adds function slot `func`'s call, which ran from `at_entry` to `now`, to each event's
/// histogram (slot `FUNCTION_SLOTS * (1 + event) + func`); a call read on two CPUs, or
/// during which an event stopped counting, is counted as skipped instead.
#[inline(always)]
pub(crate) fn record(func: u32, at_entry: &AtEntry, now: &Reading) {
    if now.failed || now.cpu != at_entry.cpu || now.idle != at_entry.idle {
        count(Counter::PmuSkipped, 1);
        return;
    }
    let functions = config(&FUNCTION_SLOTS);
    let events = events();
    for index in 0..PMU_EVENTS_MAX {
        if index >= events {
            continue;
        }
        let delta = now.counts[index].wrapping_sub(at_entry.counts[index]);
        hist::record_value(functions * (1 + index as u32) + func, delta);
    }
}
