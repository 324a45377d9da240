//! The per-task frame stack and the per-function aggregates: the core every probe shares.

use aya_ebpf::{
    bindings::{BPF_F_USER_STACK, BPF_NOEXIST},
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_prandom_u32, bpf_get_smp_processor_id,
    },
    macros::map,
    maps::{HashMap, PerCpuHashMap, StackTrace},
    programs::tracing::StackIdContext,
};
use profiler_common::{
    Call, Counter, FRAME_FILTERED_OUT, FRAME_OUTSIDE_PARENT, Frame, MAX_DEPTH, STACK_NOT_SAMPLED,
    StackCapture, StackKey, StackTotals, TaskFrames, frame_returned,
};

use crate::arch;
use crate::config::{
    CAPTURE_STACKS, CHILD_SLOTS, EXCLUDE_TGID, FILTER_CGROUP, FILTER_COMM, FILTER_CPU,
    FILTER_TGIDS, FILTER_TID, STACK_SAMPLE_EVERY, TRACK_OFF_CPU, config, now_ns, per_call,
};
use crate::counters::count;
use crate::filter;
use crate::hist::record_into;
use crate::keys::{self, EntryContext, ExitContext};
use crate::pmu;
use crate::slowest;
use crate::store::{self, TaskId};

/// Stacks captured at entry (`--stacks`); sized by userspace.
#[map]
pub(crate) static STACKS: StackTrace = StackTrace::with_max_entries(1, 0);
/// Total latency and count per (function, process, kernel stack, user stack).
#[map]
static STACK_TOTALS: PerCpuHashMap<StackKey, StackTotals> = PerCpuHashMap::with_max_entries(1, 0);

/// Thread-group ids to trace when `FILTER_TGIDS` is set.
#[map]
pub(crate) static TGIDS: HashMap<u32, u8> = HashMap::with_max_entries(65536, 0);

/// Does the current task pass the user's filters? The process-level ones (hotprof itself,
/// `--tid`, the traced process tree) hold for a task's whole life, so they are checked once per
/// task ([`wanted_task`]); the rest can change between calls ([`wanted_now`]). A filter that is
/// not set costs only its load and test: the globals live in frozen `.rodata`, so the verifier
/// knows their values and drops the dead branches; in the plain object ([`per_call`]) the
/// per-call ones cost nothing.
#[inline(always)]
pub(crate) fn wanted(pid_tgid: u64) -> bool {
    wanted_with(pid_tgid, traced_tgid)
}

/// [`wanted`], with `traced` saying whether a thread group is in the traced process tree
/// (asked only when the run filters by it).
#[inline(always)]
pub(crate) fn wanted_with(pid_tgid: u64, traced: impl FnOnce(u32) -> bool) -> bool {
    wanted_task(pid_tgid, traced) && wanted_now()
}

/// Whether thread group `tgid` is in `TGIDS`.
#[inline(always)]
pub(crate) fn traced_tgid(tgid: u32) -> bool {
    // SAFETY: only whether there is an entry is used; the value behind the reference, which
    // userspace or another CPU may change meanwhile, is never read.
    unsafe { TGIDS.get(tgid) }.is_some()
}

#[inline(always)]
fn wanted_task(pid_tgid: u64, traced: impl FnOnce(u32) -> bool) -> bool {
    let tid = pid_tgid as u32;
    let tgid = (pid_tgid >> 32) as u32;
    if config(&FILTER_TGIDS) != 0 {
        // hotprof is never in the traced process tree (it refuses `--pid` of itself, and its
        // workload is its child, not its parent), so the tree alone excludes it: kprobe.session,
        // which checks on every call, saves the exclusion's load and compare.
        if !traced(tgid) {
            return false;
        }
    } else if tgid == config(&EXCLUDE_TGID) {
        return false;
    }
    let only_tid = config(&FILTER_TID);
    only_tid == 0 || only_tid == tid
}

/// The filters a task can leave between calls: CPU (migration), cgroup (moved), comm (exec).
#[inline(always)]
fn wanted_now() -> bool {
    let only_cpu = per_call(&FILTER_CPU);
    // SAFETY: the helper takes no arguments and touches no memory; it returns the CPU id.
    if only_cpu != u32::MAX && only_cpu != unsafe { bpf_get_smp_processor_id() } {
        return false;
    }
    let only_cgroup = per_call(&FILTER_CGROUP);
    // SAFETY: the helper takes no arguments and touches no memory; it returns the current
    // task's cgroup v2 id.
    if only_cgroup != 0 && only_cgroup != unsafe { bpf_get_current_cgroup_id() } {
        return false;
    }
    // The first byte alone says whether the filter is set: reading all 16 (volatile) bytes
    // first cost every call ~30 instructions.
    if per_call(&FILTER_COMM[0]) != 0 {
        match bpf_get_current_comm() {
            Ok(comm) if comm == config(&FILTER_COMM) => {}
            _ => return false,
        }
    }
    true
}

/// Where a call is entered, which tells which open frames of the task have returned unseen
/// ([`close_returned`]).
#[derive(Clone, Copy)]
pub(crate) enum EntryAt {
    /// A kprobe at a function's entry or at a `call`: the stack pointer there, which a
    /// kretprobe's or call site's return also finds its frame by. A frame entered at the same
    /// pointer may still be running (the caller of a tail call; an earlier call site of the
    /// same caller), so only the frames entered deeper have returned.
    StackPointer(u64),
    /// fentry: the address of the BPF trampoline's context, whose frame stays on the stack
    /// for the whole call, below the caller's and above the function's own: a frame entered
    /// at the same address or deeper has returned.
    Trampoline(u64),
    /// A syscall's entry from user space: no kernel call of the task is running.
    FromUser,
}

impl EntryAt {
    /// What a frame entered here keeps to be found by later entries (0: from user space).
    #[inline(always)]
    fn mark(self) -> u64 {
        match self {
            Self::StackPointer(address) | Self::Trampoline(address) => address,
            Self::FromUser => 0,
        }
    }

    /// The deepest mark an open frame may have and still be running, for
    /// [`frame_returned`]; `None` from user space, where every open frame has returned.
    #[inline(always)]
    fn reach(self) -> Option<u64> {
        match self {
            // Strictly deeper: see `StackPointer`.
            Self::StackPointer(sp) => Some(sp.saturating_sub(1)),
            Self::Trampoline(address) => Some(address),
            Self::FromUser => None,
        }
    }
}

/// Closes the innermost open frames whose calls have returned without their return program
/// running: the kernel skips a program it finds already running on the CPU (a preempted one,
/// on PREEMPT_RT: its misses), and a frame left open stays for the task's life, until
/// `MAX_DEPTH` of them drop every entry (an hour's soak on 7.x-rt: 213). Counted as orphans,
/// as frames a found return skips are. Not only the innermost: each syscall starts its frames
/// at a random depth (`randomize_kstack_offset`, on in Debian's kernels), so a frame left by
/// an earlier call on the same path lies above the new entry about half the time; while the
/// kernel skips a return program for a while, every call leaves a frame, and popping one at
/// most per entry still let them pile up (the next hour: 36). Returns the depth left.
#[inline(always)]
fn close_returned(task: &mut TaskFrames, at: EntryAt) -> usize {
    let depth = task.depth as usize;
    if depth == 0 {
        return 0;
    }
    let Some(reach) = at.reach() else {
        core::hint::cold_path();
        count(Counter::OrphanedFrames, depth as u64);
        task.depth = 0;
        return 0;
    };
    let innermost = task.frames[(depth - 1) & (MAX_DEPTH - 1)].entry_sp;
    // The common case: the innermost frame is still running, one comparison.
    if !frame_returned(innermost, reach, arch::STACK_ALIGN) {
        return depth;
    }
    core::hint::cold_path();
    // Keep the frames up to the innermost one still running. A fixed-trip scan with no early
    // exit, as in `own_frame` (older verifiers reject the loop a `break` makes).
    let mut keep = 0;
    for index in 0..MAX_DEPTH {
        if index < depth && !frame_returned(task.frames[index].entry_sp, reach, arch::STACK_ALIGN) {
            keep = index + 1;
        }
    }
    count(Counter::OrphanedFrames, (depth - keep) as u64);
    task.depth = keep as u32;
    // Read back, as in `leave`: out of the unrolled scan `keep` is a constant on each path,
    // and the verifier would check the rest of the entry once per value.
    // SAFETY: `task.depth` is a valid, aligned u32 of this task's frame stack, written above.
    unsafe { core::ptr::read_volatile(&task.depth) as usize }
}

/// Records the entry of function `func` on the current task, entered `at`. The hot path (a
/// task that made a probed call before) is one lookup in the per-task store; a task's first
/// call also checks the process-level filters and creates its frame stack.
#[inline(always)]
pub(crate) fn enter<C: StackIdContext + EntryContext>(ctx: &C, func: u32, at: EntryAt) {
    let task = match store::current() {
        Some(task) => {
            if !wanted_now() {
                return;
            }
            task
        }
        None => {
            core::hint::cold_path();
            if !wanted(bpf_get_current_pid_tgid()) {
                return;
            }
            let Some(task) = store::current_or_create() else {
                count(Counter::TaskMapFull, 1);
                return;
            };
            count(Counter::LiveTasks, 1);
            task
        }
    };
    // SAFETY: `task` is the store's non-null pointer to the current task's own frame stack,
    // a whole TaskFrames that stays allocated while the task runs. Only this task's probes
    // (and the scheduler's switch hooks, while it is not running) touch it.
    let task = unsafe { &mut *task };
    let depth = close_returned(task, at);
    if depth >= MAX_DEPTH {
        // Cold: laid out of line, the common path falls through instead of jumping twice.
        core::hint::cold_path();
        count(Counter::DepthExceeded, 1);
        return;
    }
    let mut flags = if filter::active() && !filter::passes_at_entry(ctx) {
        FRAME_FILTERED_OUT
    } else {
        0
    };
    let children = per_call(&CHILD_SLOTS);
    if children != 0 && is_child(children, func) {
        // A child counts only inside an open parent frame (any frame of a parent slot).
        let mut inside = false;
        for index in 0..MAX_DEPTH {
            inside |= index < depth && !is_child(children, task.frames[index].func);
        }
        if !inside {
            flags |= FRAME_OUTSIDE_PARENT;
        }
    }
    let off_cpu_ns = task.off_cpu_ns;
    // LLVM drops the mask as redundant after the check above, and may use a copy of `depth`
    // spilled before the check, which a verifier before 5.11 takes as unbounded: there the
    // mask is kept, hidden from LLVM (one instruction, and a worse layout of the check).
    let index = if crate::PRE_5_11_VERIFIER {
        profiler_common::opaque(depth as u64) as usize
    } else {
        depth
    };
    let frame = &mut task.frames[index & (MAX_DEPTH - 1)];
    // Only the fields this run reads at the return are written: the others keep whatever
    // an earlier frame left there, unread.
    if flags_used() {
        frame.flags = flags;
    }
    frame.child_ns = 0;
    frame.func = func;
    frame.entry_sp = at.mark();
    if per_call(&TRACK_OFF_CPU) != 0 {
        frame.off_cpu_at_entry = off_cpu_ns;
    }
    if per_call(&CAPTURE_STACKS) != StackCapture::None as u8 {
        let (kernel_stack, user_stack) = capture_stacks(ctx);
        frame.kernel_stack = kernel_stack;
        frame.user_stack = user_stack;
    }
    if keys::keyed() {
        frame.key = keys::at_entry(ctx);
    }
    task.depth = depth as u32 + 1;
    if pmu::events() != 0 {
        pmu::keep_at_entry(frame);
    }
    // Last, so the bookkeeping above is not part of the measured time.
    frame.entry_ns = now_ns();
}

/// Whether a frame's `FRAME_*` flags can be set in this run: only `--filter` and
/// `--children` set them.
#[inline(always)]
fn flags_used() -> bool {
    filter::active() || per_call(&CHILD_SLOTS) != 0
}

/// Whether slot `func` is a `--children` function.
#[inline(always)]
fn is_child(children: u64, func: u32) -> bool {
    func < 64 && children & (1 << (func & 63)) != 0
}

/// Stack ids for the current call, per `CAPTURE_STACKS`; -1 where not captured,
/// [`STACK_NOT_SAMPLED`] for a call `STACK_SAMPLE_EVERY` left out.
#[inline(always)]
fn capture_stacks<C: StackIdContext>(ctx: &C) -> (i32, i32) {
    let mode = per_call(&CAPTURE_STACKS);
    if mode == StackCapture::None as u8 {
        return (-1, -1);
    }
    let every = config(&STACK_SAMPLE_EVERY);
    // A random draw per call, not a counter: a counter aliases with periodic call patterns
    // (paths A, B, A, B with N = 2 would walk only A). The generator's state is per CPU.
    // SAFETY: the helper takes no arguments and touches no memory; it returns a number.
    if every > 1 && unsafe { bpf_get_prandom_u32() } % every != 0 {
        return (STACK_NOT_SAMPLED, STACK_NOT_SAMPLED);
    }
    let kernel = ctx
        .get_stackid(&STACKS, 0)
        .map_or_else(stack_error, |id| id as i32);
    let user = if mode == StackCapture::KernelAndUser as u8 {
        // Kernel threads have no user stack (-EFAULT): not a loss.
        ctx.get_stackid(&STACKS, u64::from(BPF_F_USER_STACK))
            .map_or_else(stack_error, |id| id as i32)
    } else {
        -1
    };
    (kernel, user)
}

/// Counts a stack that could not be stored; a missing stack (-EFAULT: no user stack for a
/// kernel thread, no kernel stack for a sample in user mode) is not a loss.
#[inline(always)]
pub(crate) fn stack_error(error: i32) -> i32 {
    const EFAULT: i32 = 14;
    if error != -EFAULT {
        count(Counter::StackLost, 1);
    }
    error
}

/// How a return finds its own frame among the open ones.
#[derive(Clone, Copy)]
pub(crate) enum ReturnOf {
    /// The innermost open frame of this function (fexit, syscall exit).
    Func(u32),
    /// The frame whose entry stack pointer is this (kretprobe: one exact frame, even when
    /// the returns of frames above it were missed).
    EntrySp(u64),
    /// The frame a call site opened with this stack pointer (call-site mode: the pointer is
    /// the same at the `call` and at the instruction after it). That instruction can also be
    /// reached by a jump, without the call: finding no frame is then not a loss.
    CallSite(u64),
}

impl ReturnOf {
    /// Whether a return that finds no frame of its own is a loss to count.
    #[inline(always)]
    fn unmatched_is_loss(self) -> bool {
        !matches!(self, ReturnOf::CallSite(_))
    }
}

/// Closes the frame matched by `which` on the current task and records its duration; `exit`
/// tells the return value (`--by ret`/`errno`).
#[inline(always)]
pub(crate) fn leave<X: ExitContext>(which: ReturnOf, exit: &X) {
    let now = now_ns();
    // Right after the clock, so that what the counts span encloses the timed window.
    // Plain values, not an `Option`: LLVM spilled a `None`'s undefined payload, which the
    // verifier refuses to read.
    let pmu_now = if pmu::events() != 0 {
        pmu::read()
    } else {
        pmu::Reading::NONE
    };
    let Some(task) = store::current() else {
        // Filtered-out tasks never have frames; only a wanted task's return is "unmatched".
        if which.unmatched_is_loss() && wanted(bpf_get_current_pid_tgid()) {
            count(Counter::UnmatchedReturn, 1);
        }
        return;
    };
    // SAFETY: as in `enter`: the current task's own frame stack, referenced only here.
    let task = unsafe { &mut *task };
    let depth = task.depth as usize;
    // The frame's index, and what the rest reads of it, read in each case: read where the
    // cases meet, the innermost frame's address was computed a second time on every return
    // (~4 instructions, a TCG count: `cargo xtask bench --only insns`).
    let track_off_cpu = per_call(&TRACK_OFF_CPU) != 0;
    let (found, closed) = match own_frame(task, depth, which) {
        Some(OwnFrame::Innermost(frame)) => {
            (depth - 1, ClosedFrame::read(frame, which, track_off_cpu))
        }
        Some(OwnFrame::Below(found)) => {
            core::hint::cold_path();
            // The frames above it are orphans: their returns were missed.
            count(Counter::OrphanedFrames, (depth - 1 - found) as u64);
            task.depth = found as u32;
            // Read back from the frame stack's memory, whose contents the verifier does not
            // track: out of `own_frame`'s unrolled scan `found` is a different constant on
            // each path, and as a constant it had the verifier check everything below once
            // per value (a `--syscall` run's start-up). Only here: the innermost frame's
            // index is no constant, and the common case skips the load and the orphan count.
            // SAFETY: `task.depth` is a valid, aligned u32 of this task's frame stack, written
            // above.
            let found = unsafe { core::ptr::read_volatile(&task.depth) as usize };
            let frame = &task.frames[found & (MAX_DEPTH - 1)];
            (found, ClosedFrame::read(frame, which, track_off_cpu))
        }
        None => {
            core::hint::cold_path();
            if which.unmatched_is_loss() {
                count(Counter::UnmatchedReturn, 1);
            }
            return;
        }
    };
    let ClosedFrame {
        child_ns,
        entry_ns,
        func,
        stacks,
        flags,
        off_cpu_at_entry,
        pmu_at_entry,
    } = closed;
    let duration = elapsed(now, entry_ns);
    let off_cpu = if track_off_cpu {
        task.off_cpu_ns - off_cpu_at_entry
    } else {
        0
    };
    // Closed: its slot is free again, its values read above (a probe nested in a helper call
    // below could open a frame in it).
    task.depth = found as u32;
    // Non-zero when a frame of the same function encloses the call (recursion). A u64, not a
    // bool: a bool merged from the paths cost a mask before its test.
    let mut enclosing_same = 0u64;
    if found > 0 {
        let parent = &mut task.frames[(found - 1) & (MAX_DEPTH - 1)];
        parent.child_ns += duration;
        for index in 0..MAX_DEPTH {
            enclosing_same |= u64::from(index < found && task.frames[index].func == func);
        }
    }
    if flags & FRAME_OUTSIDE_PARENT != 0 {
        count(Counter::OutsideParent, 1);
        return;
    }
    if flags & FRAME_FILTERED_OUT != 0 || (filter::active() && !filter::passes_at_return(exit)) {
        count(Counter::FilteredOut, 1);
        return;
    }
    let call = Call {
        duration,
        child_ns,
        off_cpu,
        outermost: enclosing_same == 0,
    };
    if !record_into(func, &call, track_off_cpu) {
        return;
    }
    if pmu::events() != 0 {
        pmu::record(func, &pmu_at_entry, &pmu_now);
    }
    let slow = slowest::SlowFrame {
        func,
        entry_ns,
        stacks,
        duration,
        off_cpu,
    };
    // The key's values exist only where something uses them: an unkeyed run zeroing a key
    // array here paid a byte-by-byte `memset` call, 155 instructions per call (a TCG
    // instruction count, `cargo xtask bench --only insns`).
    if keys::keyed() {
        // The key was read at entry into the frame; the frame's slot only changes when a
        // probe runs in a helper call of this return, which only a keyed run makes before
        // this read (`record_into`'s lookups are inlined or plain array lookups).
        let key = keys::key_of(exit, func, task.frames[found & (MAX_DEPTH - 1)].key);
        keys::record_keyed(&key, &call);
        if slowest::enabled() {
            slowest::offer(&slow, key.values);
        }
    } else if slowest::enabled() {
        slowest::offer(&slow, [0; profiler_common::BY_FIELDS_MAX]);
    }
    // Only the calls whose stack was walked: userspace weights their totals by N.
    let (kernel_stack, user_stack) = stacks;
    if per_call(&CAPTURE_STACKS) != StackCapture::None as u8 && kernel_stack != STACK_NOT_SAMPLED {
        let key = StackKey {
            func,
            tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
            kernel_stack,
            user_stack,
        };
        add_to_stack(&key, duration);
    }
}

/// What a return reads of the frame it closes: fields, not a copy of the whole frame (its
/// `--by` key array made the copy ~30 instructions on every call), and only those this run
/// wrote at the entry.
#[derive(Clone, Copy)]
struct ClosedFrame {
    child_ns: u64,
    entry_ns: u64,
    func: u32,
    stacks: (i32, i32),
    flags: u32,
    off_cpu_at_entry: u64,
    /// `--counter`: the PMU events' reading at entry (zeros without).
    pmu_at_entry: pmu::AtEntry,
}

impl ClosedFrame {
    #[inline(always)]
    fn read(frame: &Frame, which: ReturnOf, track_off_cpu: bool) -> Self {
        ClosedFrame {
            child_ns: frame.child_ns,
            entry_ns: frame.entry_ns,
            // A constant where the return names its function: one load less, a constant slot.
            func: match which {
                ReturnOf::Func(func) => func,
                ReturnOf::EntrySp(_) | ReturnOf::CallSite(_) => frame.func,
            },
            stacks: stacks_of(frame),
            flags: if flags_used() { frame.flags } else { 0 },
            off_cpu_at_entry: if track_off_cpu {
                frame.off_cpu_at_entry
            } else {
                0
            },
            pmu_at_entry: if pmu::events() != 0 {
                pmu::AtEntry::of(frame)
            } else {
                pmu::AtEntry::NONE
            },
        }
    }
}

/// The stack ids a frame holds: (-1, -1) when the run captures none (the frame's fields are
/// then never written).
#[inline(always)]
fn stacks_of(frame: &Frame) -> (i32, i32) {
    if per_call(&CAPTURE_STACKS) == StackCapture::None as u8 {
        return (-1, -1);
    }
    (frame.kernel_stack, frame.user_stack)
}

/// The time from `entry_ns` to `now`; 0 if the clock read earlier at the entry is later (the
/// monotonic clock's fast accessor can step back by a little across an update). A sign test,
/// not `saturating_sub`: that compiled to a branchless select, twice the instructions on
/// every return.
#[inline(always)]
pub(crate) fn elapsed(now: u64, entry_ns: u64) -> u64 {
    let elapsed = now.wrapping_sub(entry_ns);
    if (elapsed as i64) < 0 { 0 } else { elapsed }
}

/// The index of the open frame a return closes, if any. The innermost frame first: it is the
/// one in all but missed-return cases, and checking it alone is ~90 instructions cheaper per
/// call than the scan (a TCG count, `cargo xtask bench --only insns`).
#[inline(always)]
fn own_frame(task: &TaskFrames, depth: usize, which: ReturnOf) -> Option<OwnFrame<'_>> {
    if depth == 0 {
        return None;
    }
    let matches = |frame: &Frame| match which {
        ReturnOf::Func(func) => frame.func == func,
        ReturnOf::EntrySp(sp) | ReturnOf::CallSite(sp) => frame.entry_sp == sp,
    };
    let innermost = &task.frames[(depth - 1) & (MAX_DEPTH - 1)];
    if matches(innermost) {
        return Some(OwnFrame::Innermost(innermost));
    }
    // A fixed-trip scan with no early exit: LLVM unrolls it, and older verifiers (6.1, 6.12)
    // reject the data-dependent loop a `break` turns it into. Ascending, so the last match
    // is the innermost frame.
    let mut found = MAX_DEPTH;
    for index in 0..MAX_DEPTH {
        if index < depth && matches(&task.frames[index]) {
            found = index;
        }
    }
    (found < MAX_DEPTH).then_some(OwnFrame::Below(found))
}

/// Where [`own_frame`] found a return's frame.
#[derive(Clone, Copy)]
enum OwnFrame<'a> {
    /// The innermost open frame (index `depth - 1`), as `own_frame` found it: all but
    /// missed-return cases.
    Innermost(&'a Frame),
    /// This frame, below the innermost; the frames above it are orphans.
    Below(usize),
}

#[inline(always)]
fn add_to_stack(key: &StackKey, duration: u64) {
    if add_to_existing_stack(key, duration) {
        return;
    }
    let totals = StackTotals {
        total_ns: duration,
        count: 1,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
    };
    const EEXIST: i32 = 17;
    // NOEXIST, so that each new entry is counted once (userspace reads the count instead of
    // walking the map for every interval report).
    match STACK_TOTALS.insert(key, totals, u64::from(BPF_NOEXIST)) {
        Ok(()) => count(Counter::StackEntries, 1),
        // Another CPU created the entry since our lookup: this CPU's copy exists, zeroed.
        Err(error) if error == -EEXIST && add_to_existing_stack(key, duration) => {}
        Err(_) => count(Counter::StackTotalsFull, 1),
    }
}

/// Adds one call to this CPU's copy of the entry for `key`; false when there is no entry.
#[inline(always)]
fn add_to_existing_stack(key: &StackKey, duration: u64) -> bool {
    // Per-CPU values: no atomics needed (BPF has no portable fetch-add here); userspace sums.
    let Some(totals) = STACK_TOTALS.get_ptr_mut(key) else {
        return false;
    };
    // SAFETY: `totals` is the non-null result of a lookup: this CPU's copy of the value,
    // valid and aligned while the program runs, which no other CPU writes (the program runs
    // with migration disabled).
    let totals = unsafe { &mut *totals };
    totals.total_ns += duration;
    totals.count += 1;
    true
}

/// `sched_switch` bookkeeping for `--off-cpu`: time a task with open frames spends switched
/// out is added to its `off_cpu_ns`. `prev` and `next` are the switch's tasks, as the store
/// names them.
#[inline(always)]
pub(crate) fn on_switch(prev: TaskId, next: TaskId) {
    let now = now_ns();
    if let Some(prev) = store::of(prev) {
        // SAFETY: `prev` is the store's non-null pointer to that task's frame stack. The
        // scheduler serialises switch-out and switch-in of a task, and a task's probes do not
        // run while it is being switched, so nothing else accesses it now. Only inside open
        // frames.
        unsafe {
            if (*prev).depth > 0 {
                (*prev).switched_out_ns = now;
            }
        }
    }
    if let Some(next) = store::of(next) {
        // SAFETY: as above, for the task being switched in: its probes run only once the
        // switch is done.
        let next = unsafe { &mut *next };
        if next.switched_out_ns != 0 {
            next.off_cpu_ns += now.saturating_sub(next.switched_out_ns);
            next.switched_out_ns = 0;
        }
    }
}

/// `task` is exiting (`sched_process_exit`, per thread): its open frames will never close
/// (calls like `do_exit` never return), so they are counted as exited in their call; then the
/// store releases its frame stack.
#[inline(always)]
pub(crate) fn on_exit(task: TaskId) {
    let Some(frames) = store::of(task) else {
        return;
    };
    // SAFETY: `frames` is the store's non-null pointer to the task's frame stack, valid and
    // aligned while the program runs; only its depth is read and cleared.
    let depth = u64::from(unsafe { (*frames).depth });
    if depth > 0 {
        count(Counter::ExitedInCall, depth);
        // Counted once: task storage lives until the task is reaped, and the stop-time
        // iterator still visits it meanwhile (a zombie).
        // SAFETY: as above.
        unsafe { (*frames).depth = 0 };
    }
    if store::release(task) {
        count(Counter::LiveTasks, 1u64.wrapping_neg());
    }
}
