//! Layouts of the values stored in hotprof's BPF maps, and the names of those maps.

/// Most nested probed frames tracked per task. Deeper frames are counted as
/// [`Counter::DepthExceeded`] drops, never silently lost.
pub const MAX_DEPTH: usize = 16;

// The probes index frames with `depth & (MAX_DEPTH - 1)` so the verifier sees the bound.
const _: () = assert!(
    MAX_DEPTH.is_power_of_two(),
    "MAX_DEPTH must be a power of two"
);

/// Which stacks the probes capture at each call's entry (the eBPF `CAPTURE_STACKS` global).
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StackCapture {
    #[default]
    None = 0,
    Kernel = 1,
    KernelAndUser = 2,
}

impl StackCapture {
    /// Whether any stack is captured.
    pub const fn any(self) -> bool {
        !matches!(self, StackCapture::None)
    }
}

/// The stack id a frame holds when `--stacks-every N` did not draw its call for a walk: not
/// an error (those are negative errnos, -4095..=-1), so the call is neither added to the
/// per-stack totals nor counted as a lost stack.
pub const STACK_NOT_SAMPLED: i32 = i32::MIN;

/// Highest function id a single fentry/fexit program slot can carry (one program pair per
/// function, because fentry programs are bound to their target at load time).
pub const FENTRY_SLOTS: u32 = 64;

/// Functions that get a kprobe program of their own in kprobe mode (`kprobe_0` …); the rest
/// share `kprobe_entry`, which looks up the function id by address on every call.
pub const KPROBE_SLOTS: u32 = 64;

/// Syscalls one run can probe with `--syscall` (one tracepoint program pair per slot).
pub const SYSCALL_SLOTS: u32 = 16;

/// The programs made once per slot, `{prefix}{slot}` for slots `0..count` (224 in all): a
/// run with `n` probed functions or syscalls uses slots `0..n` only, so userspace leaves the
/// rest out of the load (relocating them was most of aya's load time).
pub const SLOT_PROGRAMS: [(&str, u32); 5] = [
    ("kprobe_", KPROBE_SLOTS),
    ("fentry_", FENTRY_SLOTS),
    ("fexit_", FENTRY_SLOTS),
    ("sys_enter_", SYSCALL_SLOTS),
    ("sys_exit_", SYSCALL_SLOTS),
];

/// Tasks the per-task hash map holds, on kernels without task-local storage (the
/// `profiler-compat` object): live tasks that have made a probed call. Preallocated, as a
/// tracing program must not allocate: about 14 MiB.
pub const HASHED_TASKS_MAX: u32 = 16384;

/// One open call of a probed function on a task.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// `bpf_ktime_get_ns()` at entry.
    pub entry_ns: u64,
    /// Where on the task's kernel stack the call was entered ([`frame_returned`]): the stack
    /// pointer (kprobes, call sites), which also pairs a kretprobe's return with its own entry
    /// when a return was missed in between; the BPF trampoline's context (fentry). Zero where
    /// unknown (a syscall's entry tracepoint).
    pub entry_sp: u64,
    /// The task's accumulated off-CPU time when the frame was entered (`--off-cpu`).
    pub off_cpu_at_entry: u64,
    /// Time spent in probed frames nested inside this one (for self time).
    pub child_ns: u64,
    /// Index of the probed function in hotprof's target table.
    pub func: u32,
    /// Stack ids in the `STACKS` map captured at entry (`--stacks`), or negative errno, or
    /// [`STACK_NOT_SAMPLED`].
    pub kernel_stack: i32,
    pub user_stack: i32,
    /// `FRAME_*` flags.
    pub flags: u32,
    /// `--by`: the key fields known at entry, in `BY_FIELDS` order (the rest are filled at
    /// return).
    pub key: [u64; crate::BY_FIELDS_MAX],
    /// `--counter`: each PMU event's count at entry, read on `pmu_cpu` (written only in
    /// runs that count some).
    pub pmu_at_entry: [u64; PMU_EVENTS_MAX],
    /// `--counter`: the time the events were enabled but not counting (multiplexed out),
    /// summed over the events, at entry: a return that sees it grown drops the call's counts.
    pub pmu_idle_at_entry: u64,
    /// `--counter`: the CPU whose events were read at entry.
    pub pmu_cpu: u32,
    pub _pad: u32,
}

/// Whether an open frame's call has certainly returned, seen from a later entry on the same
/// task: its return program never ran (the kernel skips a tracing program it finds already
/// running on the CPU, counted in its misses, which a preempted program causes on PREEMPT_RT),
/// and the frame would stay open for the task's life. `mark` is the frame's
/// [`Frame::entry_sp`]; `reach` the highest mark the new entry proves returned: a call still
/// running lies above the new entry on the stack (it grows down), so a frame entered at or
/// below `reach` is done. Only within one `stack_align`-aligned block: a probe in an interrupt
/// runs on the task's frames but another stack, whose addresses say nothing about this one.
#[inline(always)]
pub fn frame_returned(mark: u64, reach: u64, stack_align: u64) -> bool {
    mark != 0 && mark <= reach && reach <= (mark | (stack_align - 1))
}

/// PMU events one run can count per call (`--counter`): each is read at every entry and
/// return, a map and a frame field of its own.
pub const PMU_EVENTS_MAX: usize = 2;

/// The frame's call failed a `--filter` condition known at entry: it is closed at its
/// return but not recorded.
pub const FRAME_FILTERED_OUT: u32 = 1;

/// The frame is a `--children` function's called outside every parent frame: closed at its
/// return but not recorded.
pub const FRAME_OUTSIDE_PARENT: u32 = 2;

/// Per-task state, created zero-filled in task-local storage (or, on kernels without it, in a
/// hash map keyed by task): a stack of open frames, so nested and recursive calls are
/// each timed from their own entry (one start time per task would be overwritten by the
/// inner call). Userspace reads it only from the hash map, to count the calls in flight at a
/// run's stop.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TaskFrames {
    pub depth: u32,
    pub _pad: u32,
    /// Total time this task spent switched out while it had open frames (`--off-cpu`).
    pub off_cpu_ns: u64,
    /// When the task was last switched out with open frames, or 0.
    pub switched_out_ns: u64,
    pub frames: [Frame; MAX_DEPTH],
}

/// The aggregates of the calls in one [`HistChunk`]: a slot's (function's or `--by` key's) are
/// the merge of its chunks', over the CPUs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncStats {
    pub count: u64,
    pub sum_ns: u64,
    /// 128-bit sum of squared durations, for the standard deviation.
    pub sum_sq_lo: u64,
    pub sum_sq_hi: u64,
    /// Meaningless until the first call (`count` 0: the maps start zeroed).
    pub min_ns: u64,
    pub max_ns: u64,
    /// Sum of the on-CPU part of each call (`--off-cpu` only).
    pub on_cpu_sum_ns: u64,
    /// Calls ignored by `--min-latency`.
    pub below_min: u64,
    /// Sum of the time of probed frames nested inside each call: userspace derives self time
    /// as `sum_ns` minus this. Summing self time here cost every return a subtraction, and
    /// kprobe.session (no frames, no nested time) the whole update.
    pub child_sum_ns: u64,
    /// Calls inside a frame of the same function (recursion), and the sum of their
    /// durations. Userspace derives the outermost calls (recursion collapsed) as `count`
    /// and `sum_ns` minus these: kept the other way round, every call paid for updating two
    /// more fields (~8 instructions), where now only a recursive one does.
    pub nested_count: u64,
    pub nested_sum_ns: u64,
}

/// One element of the per-CPU `HIST` map: one power of two's buckets of one slot's histogram
/// (`hist_position`), and the aggregates of the calls it counts. One element per call is one
/// map lookup on the return path; a separate per-slot aggregate cost every call a second one
/// (~15 instructions, a TCG count: `cargo xtask bench --only insns`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistChunk {
    pub stats: FuncStats,
    pub buckets: [u64; crate::histogram::HIST_CHUNK_BUCKETS as usize],
}

/// One finished call of a probed function, as its return probe sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub duration: u64,
    /// The time of probed frames nested inside (0 without frames).
    pub child_ns: u64,
    /// Time switched out inside the call (`--off-cpu`; else 0).
    pub off_cpu: u64,
    /// No frame of the same function encloses it.
    pub outermost: bool,
}

impl FuncStats {
    /// Adds a timed call (the caller counts calls below `--min-latency` in `below_min`
    /// instead). The one definition of the per-call update: the eBPF return path runs it on
    /// its per-CPU slot, the host's property tests against a model of all calls.
    /// `on_cpu_sum_ns` is kept only when `off_cpu_tracked` (`--off-cpu`); else it is never
    /// read, and skipping it saves the return path its instructions.
    #[inline(always)]
    pub fn add(&mut self, call: &Call, off_cpu_tracked: bool) {
        let duration = call.duration;
        if self.count == 0 || duration < self.min_ns {
            self.min_ns = duration;
        }
        if duration > self.max_ns {
            self.max_ns = duration;
        }
        self.count += 1;
        self.sum_ns += duration;
        crate::histogram::add_square(&mut self.sum_sq_lo, &mut self.sum_sq_hi, duration);
        if off_cpu_tracked {
            self.on_cpu_sum_ns += duration.saturating_sub(call.off_cpu);
        }
        self.child_sum_ns += call.child_ns;
        if !call.outermost {
            self.nested_count += 1;
            self.nested_sum_ns += duration;
        }
    }
}

/// Indices into the per-CPU `COUNTERS` array: everything the probes lose or skip is counted.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// An entry found `MAX_DEPTH` frames already open on its task.
    DepthExceeded = 0,
    /// The kernel could not create the task's frame stack (task storage: out of memory, or
    /// refused a nested use; the hash map of older kernels: full); the entry could not be
    /// recorded.
    TaskMapFull = 1,
    /// A return with no matching open frame (call was in flight when hotprof attached).
    UnmatchedReturn = 2,
    /// Frames discarded because a return matched a frame below them: their own return was
    /// never seen (e.g. kretprobe maxactive exhausted).
    OrphanedFrames = 3,
    /// Histogram or stats slot lookup failed (should never happen; counted to prove it).
    SlotMissing = 4,
    /// Stacks that could not be stored (`STACKS` map full or a hash collision).
    StackLost = 5,
    /// Calls whose stack aggregate could not be stored (`STACK_TOTALS` full).
    StackTotalsFull = 6,
    /// Children of a traced process that could not be added to the traced process tree
    /// (`TGIDS` full): their calls are not timed.
    ProcessTreeFull = 7,
    /// Tasks that have a frame stack now: +1 at creation, -1 at exit or deletion (per-CPU
    /// parts, wrapping; only their sum means anything).
    LiveTasks = 8,
    /// Entries created in `STACK_TOTALS` (never deleted from, so its live entries).
    StackEntries = 9,
    /// `--by`: calls timed for their function but not for their key, because the CPU had no
    /// free key slot (`--max-keys`) or the key map was full.
    KeysFull = 10,
    /// `--filter`: calls that did not match (closed, not recorded; not a loss).
    FilteredOut = 11,
    /// `--children`: calls of a child function outside its parent (closed, not recorded).
    OutsideParent = 12,
    /// kprobe.session entries that passed the filters. Their returns are the slot's `count`
    /// plus `below_min`; the difference is the calls in flight, which have no frames for the
    /// stop-time count to find. (A gauge updated at both ends cost every return ~12
    /// instructions.)
    SessionEntries = 13,
    /// `--counter`: calls timed whose PMU counts were left out of the counter histograms:
    /// the call returned on another CPU than it entered on (the events are per CPU), or an
    /// event was multiplexed out during it, or a read failed.
    PmuSkipped = 14,
    /// Frames still open when their task exited (`sched_process_exit`): calls that never
    /// return, like `do_exit` or a thread's `exit`, in flight rather than lost. Frame modes
    /// only: in the session modes such a call stays an entry without a return.
    ExitedInCall = 15,
}

/// Words of the kprobe.session programs' bitmap of traced thread groups: one bit for every
/// pid up to `PID_MAX_LIMIT` on 64-bit kernels (4 Mi).
pub const TGID_BIT_WORDS: u32 = (4 * 1024 * 1024) / 64;

/// Number of [`Counter`] slots.
pub const NUM_COUNTERS: u32 = 16;

/// Most slowest calls kept per function (`--slowest N`, N up to this).
pub const SLOWEST_MAX: u32 = 16;

/// One of the slowest calls of a function on one CPU (`--slowest`): kept in the kernel, read
/// once at the end; an empty slot has `duration_ns == 0`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlowCall {
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) at entry.
    pub entry_ns: u64,
    pub duration_ns: u64,
    /// Time switched out inside the call (`--off-cpu`; else 0).
    pub off_cpu_ns: u64,
    /// `bpf_get_current_pid_tgid()`: tgid in the upper half, tid in the lower.
    pub pid_tgid: u64,
    /// CPU the call returned on.
    pub cpu: u32,
    /// Stack ids captured at entry (`--stacks`), or negative.
    pub kernel_stack: i32,
    pub user_stack: i32,
    pub _pad: u32,
    pub comm: [u8; 16],
    /// The `--by` key's values (args at entry, return value filled at return), in `BY_FIELDS`
    /// order; zero without `--by`.
    pub key: [u64; crate::BY_FIELDS_MAX],
}

/// Key of the per-stack latency aggregate (`--stacks`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StackKey {
    pub func: u32,
    pub tgid: u32,
    pub kernel_stack: i32,
    pub user_stack: i32,
}

/// Total latency and calls per distinct stack.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackTotals {
    pub total_ns: u64,
    pub count: u64,
    /// The task's comm when the stack was first seen.
    pub comm: [u8; 16],
}

/// Names of the maps and programs, shared so userspace never spells them differently.
pub mod names {
    // Task-local storage: hotprof's frame stacks and the bench's timing-floor start times.
    pub const TASK_FRAMES: &str = "TASK_FRAMES";
    pub const FLOOR_START: &str = "FLOOR_START";
    // The compat object's frame stacks (a hash map) and the zeroes a new one is copied from.
    pub const TASK_FRAMES_BY_TASK: &str = "TASK_FRAMES_BY_TASK";
    pub const EMPTY_TASK_FRAMES: &str = "EMPTY_TASK_FRAMES";
    pub const HIST: &str = "HIST";
    /// Per slot and CPU, the `HIST` chunks that hold a call (bit `c`: chunk `c`), so a
    /// snapshot reads only those.
    pub const OCCUPIED: &str = "OCCUPIED";
    /// The frames the `open_frames` iterator found open (main object only).
    pub const OPEN_FRAMES: &str = "OPEN_FRAMES";
    pub const COUNTERS: &str = "COUNTERS";
    pub const FUNC_IPS: &str = "FUNC_IPS";
    pub const TGIDS: &str = "TGIDS";
    pub const STACKS: &str = "STACKS";
    pub const STACK_TOTALS: &str = "STACK_TOTALS";
    pub const SAMPLES: &str = "SAMPLES";
    pub const KEY_SLOTS: &str = "KEY_SLOTS";
    pub const SLOWEST: &str = "SLOWEST";
    pub const SLOWEST_FLOOR: &str = "SLOWEST_FLOOR";
    pub const NEXT_KEY_SLOT: &str = "NEXT_KEY_SLOT";
    /// `--counter`: per PMU event, its perf event on each CPU (`PERF_EVENT_ARRAY`).
    pub const PMU_EVENTS: [&str; crate::PMU_EVENTS_MAX] = ["PMU_EVENTS_0", "PMU_EVENTS_1"];
}

/// The names of the eBPF objects' `.rodata` globals that userspace sets at load time (the
/// statics of `profiler-ebpf/src/config.rs`, whose identifiers are these names: a symbol name
/// cannot come from a constant there, and aya refuses a load that names a missing global).
pub mod globals {
    pub const FILTER_TGIDS: &str = "FILTER_TGIDS";
    pub const FILTER_TID: &str = "FILTER_TID";
    pub const EXCLUDE_TGID: &str = "EXCLUDE_TGID";
    pub const FILTER_CPU: &str = "FILTER_CPU";
    pub const FILTER_CGROUP: &str = "FILTER_CGROUP";
    pub const FILTER_COMM: &str = "FILTER_COMM";
    pub const MIN_LATENCY_NS: &str = "MIN_LATENCY_NS";
    pub const TRACK_OFF_CPU: &str = "TRACK_OFF_CPU";
    pub const CAPTURE_STACKS: &str = "CAPTURE_STACKS";
    pub const STACK_SAMPLE_EVERY: &str = "STACK_SAMPLE_EVERY";
    pub const FORK_CHILD_PID_OFFSET: &str = "FORK_CHILD_PID_OFFSET";
    pub const THREAD_INFO_STATUS_OFFSET: &str = "THREAD_INFO_STATUS_OFFSET";
    pub const BY_FIELDS: &str = "BY_FIELDS";
    pub const MAX_KEYS: &str = "MAX_KEYS";
    pub const KEY_SLOT_BASE: &str = "KEY_SLOT_BASE";
    pub const SLOWEST_N: &str = "SLOWEST_N";
    pub const FILTERS: &str = "FILTERS";
    pub const CHILD_SLOTS: &str = "CHILD_SLOTS";
    pub const SAMPLE_INSIDE: &str = "SAMPLE_INSIDE";
    pub const FILTER_COMM_VALUE: &str = "FILTER_COMM_VALUE";
    pub const PMU_EVENT_COUNT: &str = "PMU_EVENT_COUNT";
    pub const FUNCTION_SLOTS: &str = "FUNCTION_SLOTS";
    /// Every name above, in the order the loader sets them.
    pub const ALL: [&str; 22] = [
        FILTER_TGIDS,
        FILTER_TID,
        EXCLUDE_TGID,
        FILTER_CPU,
        FILTER_CGROUP,
        FILTER_COMM,
        MIN_LATENCY_NS,
        TRACK_OFF_CPU,
        CAPTURE_STACKS,
        STACK_SAMPLE_EVERY,
        FORK_CHILD_PID_OFFSET,
        THREAD_INFO_STATUS_OFFSET,
        BY_FIELDS,
        MAX_KEYS,
        KEY_SLOT_BASE,
        SLOWEST_N,
        FILTERS,
        CHILD_SLOTS,
        SAMPLE_INSIDE,
        FILTER_COMM_VALUE,
        PMU_EVENT_COUNT,
        FUNCTION_SLOTS,
    ];
}

#[cfg(feature = "user")]
mod pod {
    // aya copies these to and from map bytes, so every byte must be initialised and any bit
    // pattern a valid value.
    // SAFETY: repr(C) and Copy; eleven u64 fields, so no padding, and every bit pattern is a
    // valid u64.
    unsafe impl aya::Pod for super::FuncStats {}
    // SAFETY: repr(C) and Copy; a FuncStats (eleven u64) then 32 u64, so no padding, and every
    // bit pattern is a valid u64.
    unsafe impl aya::Pod for super::HistChunk {}
    // SAFETY: repr(C) and Copy; four 4-byte integers (u32, u32, i32, i32), so no padding, and
    // any bit pattern is a valid integer.
    unsafe impl aya::Pod for super::StackKey {}
    // SAFETY: repr(C) and Copy; two u64 then a [u8; 16] (32 bytes, 8-aligned), so no padding,
    // and any bit pattern is valid for integers and bytes.
    unsafe impl aya::Pod for super::StackTotals {}
    // SAFETY: repr(C) and Copy; u32, u32, three u64 and a [u8; 16] (48 bytes, 8-aligned, the
    // u64s at offset 8), so no padding, and any bit pattern is valid.
    unsafe impl aya::Pod for crate::ByKey {}
    // SAFETY: repr(C) and Copy; four u64, four 4-byte integers, a [u8; 16] and three u64
    // (88 bytes, every field at a multiple of its alignment), so no padding, and any bit
    // pattern is valid.
    unsafe impl aya::Pod for super::SlowCall {}
    // SAFETY: repr(C) and Copy; u32, u32, two u64 and an array of `Frame`s (four u64, four
    // 4-byte integers, two arrays of u64, a u64 and two u32: 8-aligned, every field at a
    // multiple of its alignment, the size a multiple of 8), so no padding, and any bit
    // pattern is valid.
    unsafe impl aya::Pod for super::TaskFrames {}
}

#[cfg(test)]
mod tests {
    use super::frame_returned;

    const ALIGN: u64 = 16 << 10;
    /// An address in the middle of a task's 16 KiB kernel stack.
    const STACK: u64 = 0xffff_c900_0012_2000;

    #[test]
    fn a_frame_entered_at_or_below_an_entry_has_returned() {
        // fentry: the same trampoline context again (the next call from the same place).
        assert!(frame_returned(STACK, STACK, ALIGN));
        // A call entered deeper than a new entry's point.
        assert!(frame_returned(STACK - 0x300, STACK, ALIGN));
    }

    #[test]
    fn a_frame_above_an_entry_is_still_running() {
        // The new entry is nested in the frame's call.
        assert!(!frame_returned(STACK, STACK - 0x80, ALIGN));
        // kprobes: a tail call enters at its caller's stack pointer, whose frame is open;
        // reach is one below the new entry's pointer.
        assert!(!frame_returned(STACK, STACK - 1, ALIGN));
    }

    #[test]
    fn another_stack_says_nothing() {
        // An interrupt's stack, in another block higher up.
        assert!(!frame_returned(STACK, STACK + ALIGN, ALIGN));
        assert!(!frame_returned(STACK, STACK + 0x4000, ALIGN));
        // Unknown marks are never closed.
        assert!(!frame_returned(0, STACK, ALIGN));
    }
}
