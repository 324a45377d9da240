//! The run's configuration as the programs read it: the `.rodata` globals userspace writes
//! before load (`attach/loader.rs`), and how a program reads one ([`config`], [`per_call`]),
//! plus the clock.

use aya_ebpf::helpers::bpf_ktime_get_ns;
use profiler_common::StackCapture;

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

#[inline(always)]
pub(crate) fn config<T: Copy>(value: &T) -> T {
    // SAFETY: `value` is a reference, so it is valid, aligned and initialised for a read of
    // `T`. Volatile only so that the compiler keeps the read instead of folding in the
    // default: userspace rewrites these .rodata globals before load.
    unsafe { core::ptr::read_volatile(value) }
}

/// A per-call option: one that entries or returns read on every call (`--cpu`, `--cgroup`,
/// `--comm`, `--children`, `--min-latency`, `--off-cpu`, `--stacks`, `--by`, `--slowest`,
/// `--filter`). Each such `.rodata` load costs every call its instructions even when the
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
