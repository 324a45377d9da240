//! The per-task store of the main object (`profiler`): each task's frame stack lives in
//! task-local storage, in the `task_struct` itself, so finding it costs no hash and the kernel
//! frees it with the task. Minimum kernel 5.11 with kernel BTF (task storage and
//! `bpf_get_current_task_btf` in tracing programs).
//!
//! `store/hash_map.rs` has the same interface for older kernels; the bin's root file picks one.

use aya_ebpf::{
    helpers::generated::bpf_get_current_task_btf,
    macros::{btf_map, btf_tracepoint, map},
    maps::Array,
    programs::BtfTracePointContext,
};
use profiler_common::TaskFrames;

use crate::frames::on_switch;
use crate::task_storage::{TaskStorage, task_struct};

/// Frame stacks per task, in the task itself (task-local storage): found without a hash,
/// created at the task's first probed call, freed by the kernel with the task.
#[btf_map]
static TASK_FRAMES: TaskStorage<TaskFrames> = TaskStorage::new();

/// How this store names a task: the task itself, as a pointer the verifier trusts.
pub(crate) type TaskId = *mut task_struct;

/// The running task.
#[inline(always)]
pub(crate) fn current_task() -> TaskId {
    // SAFETY: the helper takes no arguments and touches no memory; it returns the running
    // task, a pointer the verifier trusts.
    unsafe { bpf_get_current_task_btf() }
}

/// The current task's frame stack, if it has one.
#[inline(always)]
pub(crate) fn current() -> Option<*mut TaskFrames> {
    TASK_FRAMES.current()
}

/// The current task's frame stack, created zero-filled if it has none. None when the kernel
/// could not allocate it or refused a nested use (a probe firing inside task storage code).
#[inline(always)]
pub(crate) fn current_or_create() -> Option<*mut TaskFrames> {
    TASK_FRAMES.current_or_create()
}

/// `task`'s frame stack, if it has one.
#[inline(always)]
pub(crate) fn of(task: TaskId) -> Option<*mut TaskFrames> {
    TASK_FRAMES.of(task)
}

/// `task` is exiting: nothing to free here (the kernel frees its storage with the task).
/// True: the task no longer counts as live.
#[inline(always)]
pub(crate) fn release(_task: TaskId) -> bool {
    true
}

/// `sched_switch` as a BTF tracepoint, for `--off-cpu`: its arguments are the two tasks
/// themselves, whose frame stacks live in task storage. Arguments: `preempt, prev, next`
/// (then `prev_state` since 5.18). Minimum kernel 5.11 (task storage), BTF required.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    // Argument slots of sched_switch, stable since 4.x.
    let (prev, next) = (ctx.arg(1), ctx.arg(2));
    on_switch(prev, next);
    0
}

/// What [`open_frames`] found: the frames open on all tasks (element 0).
#[map]
static OPEN_FRAMES: Array<u64> = Array::with_max_entries(1, 0);

/// A task iterator (`iter/task`), run once when a run stops: adds up the open frames of every
/// task, the calls in flight. Counting them there instead of in a gauge that every entry and
/// return updated saved each call ~20 instructions. Minimum kernel 5.11 (task storage; task
/// iterators 5.8), BTF required.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub extern "C" fn open_frames(ctx: *mut core::ffi::c_void) -> i32 {
    // SAFETY: an `iter/task` program's context is `struct bpf_iter__task { meta, task }`,
    // two pointers; the verifier checks this read against the context's BTF.
    let task = unsafe { *ctx.cast::<TaskId>().add(1) };
    // The last call has no task: the end of the iteration.
    if task.is_null() {
        return 0;
    }
    if let (Some(frames), Some(sum)) = (TASK_FRAMES.of(task), OPEN_FRAMES.get_ptr_mut(0)) {
        // SAFETY: both are non-null lookup results: the task's frame stack and the map's one
        // u64, valid while the program runs; an iterator runs one task at a time.
        unsafe { *sum += u64::from((*frames).depth) };
    }
    0
}
