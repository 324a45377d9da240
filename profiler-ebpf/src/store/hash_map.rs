//! The per-task store of the compat object (`profiler-compat`), for kernels without
//! task-local storage (before 5.11, or built without BTF): each task's frame stack is an
//! entry of a hash map keyed by the address of the task's `task_struct`. Same interface as
//! `store/task_local.rs`.
//!
//! The address, not the thread id: it is what the raw `sched_switch` and
//! `sched_process_free` tracepoints hand over (no record layout to know), every CPU's idle
//! task has its own (they all have thread id 0), and it is reused only once the task is
//! freed, when its entry is deleted.
//!
//! The map is preallocated (a tracing program must not allocate: it may run inside the
//! allocator) with room for [`HASHED_TASKS_MAX`] tasks; an entry that does not fit is a
//! counted drop (`TaskMapFull`). An entry is deleted when its task exits, and again when the
//! task is freed: an exiting task still makes calls after `sched_process_exit` (closing its
//! files). The free hook is a raw tracepoint because it runs from an RCU callback, often
//! inside an interrupt of another BPF program, where the kernel skips classic tracepoint
//! programs (and entries of freed tasks would stay). Minimum kernel 4.17 (raw tracepoints).

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::generated::bpf_get_current_task,
    macros::{map, raw_tracepoint},
    maps::{Array, HashMap},
    programs::RawTracePointContext,
};
use profiler_common::{HASHED_TASKS_MAX, TaskFrames};

use crate::frames::{on_exit, on_switch};

/// Frame stacks per task, kept from the task's first probed call until it exits.
#[map]
static TASK_FRAMES_BY_TASK: HashMap<TaskId, TaskFrames> =
    HashMap::with_max_entries(HASHED_TASKS_MAX, 0);
/// A zero-filled frame stack to insert from: too large for the 512-byte BPF stack.
#[map]
static EMPTY_TASK_FRAMES: Array<TaskFrames> = Array::with_max_entries(1, 0);

/// How this store names a task: the address of its `task_struct`.
pub(crate) type TaskId = u64;

/// The running task.
#[inline(always)]
pub(crate) fn current_task() -> TaskId {
    // SAFETY: the helper takes no arguments and touches no memory; it returns the running
    // task's address, used only as a number (a map key), never dereferenced.
    unsafe { bpf_get_current_task() }
}

/// The current task's frame stack, if it has one.
#[inline(always)]
pub(crate) fn current() -> Option<*mut TaskFrames> {
    of(current_task())
}

/// The current task's frame stack, created zero-filled if it has none. None when the map is
/// full (or the kernel refused a nested update).
#[inline(always)]
pub(crate) fn current_or_create() -> Option<*mut TaskFrames> {
    let task = current_task();
    let empty = EMPTY_TASK_FRAMES.get_ptr(0)?;
    // SAFETY: EMPTY_TASK_FRAMES is never written, so it holds zeroes. By reference: the value
    // is too large to copy onto the BPF stack. NOEXIST: never overwrite a live frame stack;
    // the lookup below tells whether there is one now.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let _ = TASK_FRAMES_BY_TASK.insert(task, unsafe { &*empty }, u64::from(BPF_NOEXIST));
    TASK_FRAMES_BY_TASK.get_ptr_mut(task)
}

/// `task`'s frame stack, if it has one.
#[inline(always)]
pub(crate) fn of(task: TaskId) -> Option<*mut TaskFrames> {
    TASK_FRAMES_BY_TASK.get_ptr_mut(task)
}

/// `task` is exiting (or being freed): deletes its entry. True when there was one, so that
/// it stops counting as live exactly once.
#[inline(always)]
pub(crate) fn release(task: TaskId) -> bool {
    TASK_FRAMES_BY_TASK.remove(task).is_ok()
}

/// `sched_switch` as a raw tracepoint, for `--off-cpu`: its arguments are
/// `preempt, prev, next` (then `prev_state` since 5.18), the two tasks by address.
/// Minimum kernel 4.17.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch(ctx: RawTracePointContext) -> i32 {
    let (prev, next) = (ctx.arg::<TaskId>(1), ctx.arg::<TaskId>(2));
    on_switch(prev, next);
    0
}

/// `sched_process_free` as a raw tracepoint (argument: the task): the task is gone for good
/// (after its RCU grace period), so no call of it can come any more; deletes what its last
/// calls after `sched_process_exit` left. Minimum kernel 4.17.
#[raw_tracepoint(tracepoint = "sched_process_free")]
pub fn sched_process_free(ctx: RawTracePointContext) -> i32 {
    on_exit(ctx.arg::<TaskId>(0));
    0
}
