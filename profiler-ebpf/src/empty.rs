//! Reference probe pairs for `cargo xtask bench`; only `profiler/examples/empty_probe.rs`
//! attaches them, never hotprof.
//!
//! - *Empty* pairs return at once: what each mechanism costs before any work is done.
//! - *Timing floor* pairs do the least any per-call latency histogram must: a start time kept
//!   per task (in task-local storage: one lookup at entry, one at return, no hash), two clock
//!   reads and one histogram bucket, with no filter, no nesting, no per-function aggregates.
//!   What hotprof (or bpftrace) costs above the floor is its own; what the floor costs above
//!   the empty pair, every tool that times each call pays.
//!
//! The raw syscall tracepoints (`raw_syscalls:sys_enter`/`sys_exit`) run for every syscall:
//! their empty pair is the mechanism alone; their floor also finds the traced syscall by
//! number (`RAW_SYSCALL_SLOTS`, as hotprof's raw programs do), which any tool using them must.
//! Both are BTF tracepoints, as hotprof's own pair in this object (the number at exit is a
//! direct load of the saved syscall number).
//!
//! kprobe.session and fsession have one program for both sides: their floor keeps the start
//! time in the call's session cookie instead of a per-task store.
//!
//! Minimum kernels: the empty pairs as their mechanism (kprobe 4.1, fentry/fexit 5.5 with
//! BTF, syscall tracepoints 4.7, raw tracepoints 4.17, kprobe.session 6.10, fsession 7.0); the
//! floor pairs 5.11 with BTF (task storage), the session floors as their mechanism.

use aya_ebpf::{
    EbpfContext,
    bindings::pt_regs,
    macros::{btf_map, btf_tracepoint, fentry, fexit, kprobe, kretprobe, map, tracepoint},
    maps::PerCpuArray,
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext,
        TracePointContext,
    },
};
use profiler_common::{NUM_BUCKETS, bucket_index};

use crate::config::now_ns;
use crate::frames::elapsed;
use crate::kfunc::{session_cookie, session_is_return};
use crate::raw_syscalls::traced_slot;
use crate::task_storage::TaskStorage;

#[kprobe]
pub fn empty_kprobe(_ctx: ProbeContext) -> u32 {
    0
}

#[kretprobe]
pub fn empty_kretprobe(_ctx: RetProbeContext) -> u32 {
    0
}

#[fentry]
pub fn empty_fentry(_ctx: FEntryContext) -> u32 {
    0
}

#[fexit]
pub fn empty_fexit(_ctx: FExitContext) -> u32 {
    0
}

#[tracepoint]
pub fn empty_sys_enter(_ctx: TracePointContext) -> u32 {
    0
}

#[tracepoint]
pub fn empty_sys_exit(_ctx: TracePointContext) -> u32 {
    0
}

#[btf_tracepoint(function = "sys_enter")]
pub fn empty_raw_sys_enter(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "sys_exit")]
pub fn empty_raw_sys_exit(_ctx: BtfTracePointContext) -> i32 {
    0
}

/// Start time of the task's open call; 0 when none is open. Task-local storage, as hotprof's
/// frame stacks: the cheapest per-task store there is (no hash; created once per task).
#[btf_map]
static FLOOR_START: TaskStorage<u64> = TaskStorage::new();
/// The timing floor's histogram (hotprof's bucket layout); userspace sums it for the count.
#[map]
static FLOOR_HIST: PerCpuArray<u64> = PerCpuArray::with_max_entries(NUM_BUCKETS, 0);

#[inline(always)]
fn floor_enter() {
    let now = now_ns();
    if let Some(start) = FLOOR_START.current_or_create() {
        // SAFETY: `start` is the non-null pointer task storage returned for the current task:
        // a u64, valid and aligned while the task lives. Only this task's floor probes touch
        // it, one at a time.
        unsafe { *start = now };
    }
}

#[inline(always)]
fn floor_leave() {
    let now = now_ns();
    let Some(start) = FLOOR_START.current() else {
        return;
    };
    // SAFETY: as in `floor_enter`: the current task's own u64, from a non-null lookup.
    let started = unsafe { core::ptr::replace(start, 0) };
    if started == 0 {
        return;
    }
    floor_bucket(elapsed(now, started));
}

/// One call of `duration` ns into the floor's histogram.
#[inline(always)]
fn floor_bucket(duration: u64) {
    if let Some(slot) = FLOOR_HIST.get_ptr_mut(bucket_index(duration)) {
        // SAFETY: `slot` is the non-null result of a lookup: this CPU's u64 in FLOOR_HIST,
        // valid and aligned while the program runs, written by no other CPU (the program
        // runs with migration disabled).
        unsafe { *slot += 1 };
    }
}

/// The kprobe.session empty program: 0 at the entry, so it runs again at the return.
#[kprobe]
pub fn empty_session(_ctx: ProbeContext) -> u32 {
    0
}

/// The kprobe.session timing floor: the start time in the call's session cookie (no per-task
/// store at all), one bucket at the return.
#[kprobe]
pub fn floor_session(ctx: ProbeContext) -> u32 {
    // SAFETY: loaded for a kprobe.session link only (`empty_probe session`), `ctx` its context.
    unsafe { session_floor(ctx.as_ptr()) };
    0
}

/// The fsession empty program (7.0+): 0 at both sides.
#[fentry]
pub fn empty_fsession(_ctx: FEntryContext) -> u32 {
    0
}

/// The fsession timing floor: as kprobe.session's, on a trampoline.
#[fentry]
pub fn floor_fsession(ctx: FEntryContext) -> u32 {
    // SAFETY: loaded as an fsession program only (`empty_probe fsession`), `ctx` its context.
    unsafe { session_floor(ctx.as_ptr()) };
    0
}

/// A session floor's run at an entry (the start into the cookie) or a return (one bucket).
///
/// # Safety
/// `raw` is the context of a program loaded for a kprobe.session link or as an fsession one.
#[inline(always)]
unsafe fn session_floor(raw: *mut core::ffi::c_void) {
    // SAFETY: the caller's contract.
    if unsafe { session_is_return(raw) } {
        let now = now_ns();
        // SAFETY: as above; the call's own cookie, written at its entry.
        let started = unsafe { *session_cookie(raw) };
        floor_bucket(elapsed(now, started));
        return;
    }
    // SAFETY: as above.
    unsafe { *session_cookie(raw) = now_ns() };
}

#[kprobe]
pub fn floor_kprobe(_ctx: ProbeContext) -> u32 {
    floor_enter();
    0
}

#[kretprobe]
pub fn floor_kretprobe(_ctx: RetProbeContext) -> u32 {
    floor_leave();
    0
}

#[fentry]
pub fn floor_fentry(_ctx: FEntryContext) -> u32 {
    floor_enter();
    0
}

#[fexit]
pub fn floor_fexit(_ctx: FExitContext) -> u32 {
    floor_leave();
    0
}

#[tracepoint]
pub fn floor_sys_enter(_ctx: TracePointContext) -> u32 {
    floor_enter();
    0
}

#[tracepoint]
pub fn floor_sys_exit(_ctx: TracePointContext) -> u32 {
    floor_leave();
    0
}

#[btf_tracepoint(function = "sys_enter")]
pub fn floor_raw_sys_enter(ctx: BtfTracePointContext) -> i32 {
    if traced_slot(ctx.arg(1)).is_some() {
        floor_enter();
    }
    0
}

#[btf_tracepoint(function = "sys_exit")]
pub fn floor_raw_sys_exit(ctx: BtfTracePointContext) -> i32 {
    let regs: *const pt_regs = ctx.arg(0);
    // SAFETY: as in `raw_syscalls_btf::btf_sys_exit`: a typed argument, the load checked
    // against pt_regs' BTF by the verifier.
    let nr = crate::arch::syscall_nr_u64(unsafe {
        core::ptr::read_volatile(crate::arch::syscall_nr(regs))
    });
    if traced_slot(nr).is_some() {
        floor_leave();
    }
    0
}
