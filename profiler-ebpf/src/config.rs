//! The run's configuration as the programs read it: every `.rodata` global userspace writes
//! before load (`attach/loader.rs`, by the names in `profiler_common::globals`), and how a
//! program reads one ([`config`], [`per_call`]), plus the clock.

use aya_ebpf::helpers::bpf_ktime_get_ns;
use profiler_common::keys::{field, op};
use profiler_common::{BY_FIELDS_MAX, FILTER_CONDITIONS_MAX, FilterCond, StackCapture};

/// 1: only tasks whose tgid is in `TGIDS` (a workload's process tree or `--pid`).
#[unsafe(no_mangle)]
pub(crate) static FILTER_TGIDS: u8 = 0;
/// Never trace this thread group: hotprof itself.
#[unsafe(no_mangle)]
pub(crate) static EXCLUDE_TGID: u32 = 0;
/// Non-zero: only this thread id (`--tid`).
#[unsafe(no_mangle)]
pub(crate) static FILTER_TID: u32 = 0;
/// `u32::MAX`: any CPU; else only calls entered on this CPU (`--cpu`).
#[unsafe(no_mangle)]
pub(crate) static FILTER_CPU: u32 = u32::MAX;
/// Non-zero: only tasks in this cgroup v2 id (`--cgroup`).
#[unsafe(no_mangle)]
pub(crate) static FILTER_CGROUP: u64 = 0;
/// Non-empty (first byte non-zero): only tasks with this exact comm (`--comm`).
#[unsafe(no_mangle)]
pub(crate) static FILTER_COMM: [u8; 16] = [0; 16];
/// `--children`: bit `f` set for each function slot `f` (< 64) timed only inside a parent:
/// inside an open frame of a slot whose bit is clear.
#[unsafe(no_mangle)]
pub(crate) static CHILD_SLOTS: u64 = 0;
/// Calls faster than this are counted in `below_min` only (`--min-latency`).
#[unsafe(no_mangle)]
pub(crate) static MIN_LATENCY_NS: u64 = 0;
/// 1: account off-CPU time inside open frames (`--off-cpu`).
#[unsafe(no_mangle)]
pub(crate) static TRACK_OFF_CPU: u8 = 0;

/// A [`StackCapture`] (`--stacks`, `--user-stacks`), as its `u8`.
#[unsafe(no_mangle)]
pub(crate) static CAPTURE_STACKS: u8 = StackCapture::None as u8;
/// `--stacks-every N`: the stacks of a random 1 in N calls are walked (1: every call).
#[unsafe(no_mangle)]
pub(crate) static STACK_SAMPLE_EVERY: u32 = 1;

// Tracepoint field offset, read by userspace from the event's `format` file: the layout
// changed across kernels (`sched_process_fork` comms became `__data_loc` in 6.x).
#[unsafe(no_mangle)]
pub(crate) static FORK_CHILD_PID_OFFSET: u32 = 44;

/// Offset of `thread_info.status` in `task_struct` (x86-64: `thread_info` comes first; 8
/// before 5.11, 16 since `syscall_work` was added); userspace writes the running kernel's.
#[unsafe(no_mangle)]
pub(crate) static THREAD_INFO_STATUS_OFFSET: u32 = 16;

/// Field codes of the key (`--by`), in order; all zero without `--by`.
#[unsafe(no_mangle)]
pub(crate) static BY_FIELDS: [u8; BY_FIELDS_MAX] = [0; BY_FIELDS_MAX];
/// Key slots each CPU may use (`--max-keys`).
#[unsafe(no_mangle)]
pub(crate) static MAX_KEYS: u32 = 0;
/// The first key slot in `HIST`/`OCCUPIED`: the number of function slots.
#[unsafe(no_mangle)]
pub(crate) static KEY_SLOT_BASE: u32 = 0;

/// Calls kept per function and CPU (0: `--slowest` is off).
#[unsafe(no_mangle)]
pub(crate) static SLOWEST_N: u32 = 0;

const NO_CONDITION: FilterCond = FilterCond {
    field: field::NONE,
    op: op::NONE,
    _pad: [0; 6],
    value: 0,
};

/// The conditions, joined by `&&`; unused ones have `op::NONE`.
#[unsafe(no_mangle)]
pub(crate) static FILTERS: [FilterCond; FILTER_CONDITIONS_MAX] =
    [NO_CONDITION; FILTER_CONDITIONS_MAX];
/// The value of a `comm` condition (NUL-padded).
#[unsafe(no_mangle)]
pub(crate) static FILTER_COMM_VALUE: [u8; 16] = [0; 16];

/// `--counter`: the PMU events counted per call (0: none; at most `PMU_EVENTS_MAX`).
#[unsafe(no_mangle)]
pub(crate) static PMU_EVENT_COUNT: u8 = 0;
/// The number of function slots: event `e`'s histogram of function slot `f` is slot
/// `FUNCTION_SLOTS * (1 + e) + f`, after the functions' own.
#[unsafe(no_mangle)]
pub(crate) static FUNCTION_SLOTS: u32 = 1;

/// 1: only samples of tasks with a probed frame open (`hotprof sample --inside F`, F being
/// the one probed function).
#[unsafe(no_mangle)]
pub(crate) static SAMPLE_INSIDE: u8 = 0;

#[inline(always)]
pub(crate) fn config<T: Copy>(value: &T) -> T {
    // SAFETY: `value` is a reference, so it is valid, aligned and initialised for a read of
    // `T`. Volatile only so that the compiler keeps the read instead of folding in the
    // default: userspace rewrites these .rodata globals before load.
    unsafe { core::ptr::read_volatile(value) }
}

/// A per-call option: one that entries or returns read on every call (`--cpu`, `--cgroup`,
/// `--comm`, `--children`, `--min-latency`, `--off-cpu`, `--stacks`, `--by`, `--slowest`,
/// `--filter`, `--counter`). Each such `.rodata` load costs every call its instructions even when the
/// option is off (~90 per call in all, a TCG count: `cargo xtask bench --only insns`), so the
/// `profiler-plain` object ([`crate::PLAIN`]), loaded for runs that set none of them, reads
/// the static's initializer (the option's default) instead: LLVM folds it, and the option's
/// code with it. Userspace loads that object only for runs that leave all of them at their
/// defaults (`ProbeConfig::sets_per_call_options`).
#[inline(always)]
pub(crate) fn per_call<T: Copy>(value: &T) -> T {
    if crate::PLAIN { *value } else { config(value) }
}

/// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC in nanoseconds. Inlined, so each call site compiles
/// to the helper call it replaces.
#[inline(always)]
pub(crate) fn now_ns() -> u64 {
    // SAFETY: the helper takes no arguments and touches no memory (it only returns the
    // clock), and every program type here may call it.
    unsafe { bpf_ktime_get_ns() }
}
