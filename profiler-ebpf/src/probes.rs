//! The attachable programs. Each one only finds out *which* function and *which* frame, then
//! hands over to [`crate::frames`].

use aya_ebpf::{
    EbpfContext,
    helpers::{
        bpf_get_current_pid_tgid, bpf_probe_read_kernel,
        generated::{
            bpf_get_attach_cookie, bpf_get_func_arg, bpf_get_func_arg_cnt, bpf_get_func_ip,
            bpf_get_func_ret, bpf_probe_read_kernel as bpf_probe_read_kernel_raw,
        },
    },
    macros::{fentry, fexit, kprobe, kretprobe, map, tracepoint},
    maps::HashMap,
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext, TracePointContext},
};

use profiler_common::Counter;

use crate::arch;
use crate::config::{FORK_CHILD_PID_OFFSET, config};
use crate::counters::count;
use crate::frames::{EntryAt, ReturnOf, TGIDS, enter, leave, on_exit};
use crate::keys::{EntryContext, ExitContext};
use crate::store;

/// A kprobe at a function's entry (or at a `call`: the same registers hold the arguments).
impl EntryContext for ProbeContext {
    #[inline(always)]
    fn arg(&self, n: u8) -> u64 {
        // SAFETY: as in `kprobe_enter`: the pt_regs the kernel passed to this kprobe.
        let regs = unsafe { &*self.regs };
        // Copied with a helper: LLVM turns the register choice into one load from a computed
        // address, and the verifier refuses any context read at a non-constant offset.
        let Some(register) = arch::call_arg(regs, n) else {
            return 0;
        };
        // SAFETY: bpf_probe_read_kernel returns an error instead of faulting, and any 8
        // bytes are a valid u64; `register` is a field of the valid pt_regs above.
        unsafe { bpf_probe_read_kernel(register as *const u64) }.unwrap_or(0)
    }

    /// At a function's entry: the return address into the caller. (At a call site it is
    /// not; userspace names call-site slots' callers by their site instead.)
    #[inline(always)]
    fn caller(&self) -> u64 {
        // SAFETY: as in `kprobe_enter`.
        arch::return_address(unsafe { &*self.regs })
    }
}

/// kretprobe and the call-site return kprobe: the return value's register.
impl ExitContext for RetProbeContext {
    #[inline(always)]
    fn ret(&self) -> u64 {
        // SAFETY: as in `kprobe_enter`: the pt_regs the kernel passed to this probe.
        arch::return_value(unsafe { &*self.regs })
    }
}

impl ExitContext for ProbeContext {
    #[inline(always)]
    fn ret(&self) -> u64 {
        // SAFETY: as in `kprobe_enter`: the pt_regs the kernel passed to this probe.
        arch::return_value(unsafe { &*self.regs })
    }
}

/// fentry: arguments through `bpf_get_func_arg` (5.17+; fentry programs that use it fail to
/// load before, and `--mode auto` falls back to kprobes).
impl EntryContext for FEntryContext {
    #[inline(always)]
    fn arg(&self, n: u8) -> u64 {
        let mut value = 0;
        // SAFETY: the helper reads the trampoline's saved argument n of this program's own
        // context into `value`, a valid u64, or fails (n beyond the arguments) leaving it 0.
        unsafe { bpf_get_func_arg(self.as_ptr(), u32::from(n), &mut value) };
        value
    }

    /// The BPF trampoline's frame, read upwards from this context (the saved argument
    /// registers): where the caller's return address lies in it is the architecture's
    /// ([`arch::fentry_caller`]). Needs `bpf_get_func_arg_cnt` and `bpf_get_func_ip` (5.17).
    #[inline(always)]
    fn caller(&self) -> u64 {
        // SAFETY: the helpers read the argument count and the traced function's address
        // from this program's own context.
        let (registers, func) = unsafe {
            (
                bpf_get_func_arg_cnt(self.as_ptr()) as usize,
                bpf_get_func_ip(self.as_ptr()),
            )
        };
        let mut words = [0u64; arch::FENTRY_WORDS];
        // SAFETY: bpf_probe_read_kernel copies at most `size_of_val(&words)` bytes into
        // `words`, or fails without faulting (and `words` stays zero).
        let read = unsafe {
            bpf_probe_read_kernel_raw(
                words.as_mut_ptr().cast(),
                core::mem::size_of_val(&words) as u32,
                self.as_ptr(),
            )
        };
        if read != 0 {
            return 0;
        }
        arch::fentry_caller(&words, registers, func)
    }
}

/// fexit: the return value through `bpf_get_func_ret` (5.17+, as for the arguments).
impl ExitContext for FExitContext {
    #[inline(always)]
    fn ret(&self) -> u64 {
        let mut value = 0;
        // SAFETY: the helper writes the traced function's return value into `value`.
        unsafe { bpf_get_func_ret(self.as_ptr(), &mut value) };
        value
    }
}

/// `syscalls:sys_enter_*`: after the common fields (8 bytes) and `__syscall_nr` (padded to
/// 8), the arguments as six 8-byte fields from offset 16; `sys_exit_*` has `ret` at 16.
const SYSCALL_FIELDS_OFFSET: usize = 16;

impl EntryContext for TracePointContext {
    #[inline(always)]
    fn arg(&self, n: u8) -> u64 {
        // SAFETY: `read_at` copies with bpf_probe_read, which fails instead of faulting,
        // and any 8 bytes are a valid u64.
        unsafe { self.read_at::<u64>(SYSCALL_FIELDS_OFFSET + 8 * usize::from(n & 7)) }.unwrap_or(0)
    }

    /// A syscall's caller is user space; userspace refuses `--by caller` with `--syscall`.
    #[inline(always)]
    fn caller(&self) -> u64 {
        0
    }
}

impl ExitContext for TracePointContext {
    #[inline(always)]
    fn ret(&self) -> u64 {
        // SAFETY: as for the arguments.
        unsafe { self.read_at::<u64>(SYSCALL_FIELDS_OFFSET) }.unwrap_or(0)
    }
}

/// Function id for each probed kernel address beyond the first [`KPROBE_SLOTS`], which share
/// [`kprobe_entry`] and look their id up from `bpf_get_func_ip`.
///
/// [`KPROBE_SLOTS`]: profiler_common::KPROBE_SLOTS
#[map]
static FUNC_IPS: HashMap<u64, u32> = HashMap::with_max_entries(1, 0);

/// kprobe at function entry, shared by the functions beyond the slots: one hash lookup per
/// call to find the function id. Minimum kernel 5.15 (`bpf_get_func_ip` for kprobes).
#[kprobe]
pub fn kprobe_entry(ctx: ProbeContext) -> u32 {
    // SAFETY: the helper's argument is this program's own context, as it requires; it only
    // reads the probed function's address from it.
    let ip = unsafe { bpf_get_func_ip(ctx.as_ptr()) };
    // SAFETY: the u32 is copied out at once, and userspace fills FUNC_IPS before attaching
    // this program and never writes it after, so nothing changes it under the reference.
    let Some(&func) = (unsafe { FUNC_IPS.get(ip) }) else {
        return 0;
    };
    kprobe_enter(&ctx, func);
    0
}

#[inline(always)]
fn kprobe_enter(ctx: &ProbeContext, func: u32) {
    // SAFETY: `ctx.regs` is the pt_regs the kernel passed to this kprobe, valid for reads for
    // the whole run; the verifier checks the read is within the context.
    let sp = arch::stack_pointer(unsafe { &*ctx.regs });
    enter(ctx, func, EntryAt::StackPointer(sp));
}

/// One kprobe program per function slot, like the fentry slots: the slot number is the
/// function id, so the first [`KPROBE_SLOTS`] functions of a run skip `kprobe_entry`'s
/// address lookup. Minimum kernel 4.17 (the perf kprobe PMU userspace attaches through).
///
/// [`KPROBE_SLOTS`]: profiler_common::KPROBE_SLOTS
macro_rules! kprobe_slots {
    ($($entry:ident $id:literal),* $(,)?) => {$(
        #[kprobe]
        pub fn $entry(ctx: ProbeContext) -> u32 {
            kprobe_enter(&ctx, $id);
            0
        }
    )*};
}

kprobe_slots!(
    kprobe_0 0, kprobe_1 1, kprobe_2 2, kprobe_3 3, kprobe_4 4, kprobe_5 5, kprobe_6 6,
    kprobe_7 7, kprobe_8 8, kprobe_9 9, kprobe_10 10, kprobe_11 11, kprobe_12 12,
    kprobe_13 13, kprobe_14 14, kprobe_15 15, kprobe_16 16, kprobe_17 17, kprobe_18 18,
    kprobe_19 19, kprobe_20 20, kprobe_21 21, kprobe_22 22, kprobe_23 23, kprobe_24 24,
    kprobe_25 25, kprobe_26 26, kprobe_27 27, kprobe_28 28, kprobe_29 29, kprobe_30 30,
    kprobe_31 31, kprobe_32 32, kprobe_33 33, kprobe_34 34, kprobe_35 35, kprobe_36 36,
    kprobe_37 37, kprobe_38 38, kprobe_39 39, kprobe_40 40, kprobe_41 41, kprobe_42 42,
    kprobe_43 43, kprobe_44 44, kprobe_45 45, kprobe_46 46, kprobe_47 47, kprobe_48 48,
    kprobe_49 49, kprobe_50 50, kprobe_51 51, kprobe_52 52, kprobe_53 53, kprobe_54 54,
    kprobe_55 55, kprobe_56 56, kprobe_57 57, kprobe_58 58, kprobe_59 59, kprobe_60 60,
    kprobe_61 61, kprobe_62 62, kprobe_63 63,
);

/// kretprobe: the return pairs with the frame whose entry stack pointer the architecture
/// derives from the one at the return (x86-64: one word below, the return address popped).
#[kretprobe]
pub fn kretprobe_exit(ctx: RetProbeContext) -> u32 {
    // SAFETY: as in `kprobe_enter`: the pt_regs the kernel passed to this kretprobe.
    let sp = arch::stack_pointer(unsafe { &*ctx.regs });
    leave(ReturnOf::EntrySp(arch::entry_sp_at_return(sp)), &ctx);
    0
}

/// kprobe.multi entry: one program for every function of the run's kprobe.multi link, which
/// gives each function its id as the link's cookie (no address lookup). The stack pointer
/// points at the return address here as in a kprobe (fprobe's saved registers: full pt_regs
/// before 6.14, fgraph's partial ones after, whose `sp` ftrace_caller still fills), so
/// [`EntryContext::caller`] reads the same word.
///
/// Loaded with `expected_attach_type = BPF_TRACE_KPROBE_MULTI` (userspace's patched aya), so
/// it cannot be a perf kprobe. Minimum kernel 5.18 (kprobe.multi links and
/// `bpf_get_attach_cookie` in them) with `CONFIG_FPROBE`; only functions ftrace can trace
/// (`available_filter_functions`); userspace attaches the rest with `kprobe_N`/`kprobe_entry`.
#[kprobe]
pub fn kprobe_multi_entry(ctx: ProbeContext) -> u32 {
    kprobe_enter(&ctx, attach_cookie(&ctx));
    0
}

/// kprobe.multi return (`BPF_F_KPROBE_MULTI_RETURN`): the return pairs with the innermost open
/// frame of its function, as fexit's do. Not by stack pointer like `kretprobe_exit`: from
/// 6.14 fprobe runs on the function-graph tracer, whose return handler leaves `sp` unset in
/// the partial pt_regs. A recursive function's returns come innermost first, so each still
/// closes its own frame. Minimum kernel 5.18, as [`kprobe_multi_entry`].
#[kretprobe]
pub fn kretprobe_multi_exit(ctx: RetProbeContext) -> u32 {
    leave(ReturnOf::Func(attach_cookie(&ctx)), &ctx);
    0
}

/// The function id userspace set as this function's cookie in the kprobe.multi link.
#[inline(always)]
fn attach_cookie<C: EbpfContext>(ctx: &C) -> u32 {
    // SAFETY: the helper's argument is this program's own context, as it requires; it only
    // reads the cookie of the address the program runs for.
    unsafe { bpf_get_attach_cookie(ctx.as_ptr()) as u32 }
}

/// kprobe on the instruction after a `call F` (call-site mode; the `call` itself has a
/// `kprobe_N` of the site's slot): the return of the frame its own call opened, which had the
/// same stack pointer. One program for every site. Minimum kernel 4.17.
#[kprobe]
pub fn callsite_return(ctx: ProbeContext) -> u32 {
    // SAFETY: as in `kprobe_enter`: the pt_regs the kernel passed to this kprobe.
    let sp = arch::stack_pointer(unsafe { &*ctx.regs });
    leave(ReturnOf::CallSite(sp), &ctx);
    0
}

/// One fentry/fexit pair per function slot: fentry programs are bound to one target at load
/// time, so the slot number *is* the function id. Minimum kernel 5.5, BTF required.
macro_rules! fentry_slots {
    ($($entry:ident $exit:ident $id:literal),* $(,)?) => {$(
        #[fentry]
        pub fn $entry(ctx: FEntryContext) -> u32 {
            enter(&ctx, $id, EntryAt::Trampoline(ctx.as_ptr() as u64));
            0
        }

        #[fexit]
        pub fn $exit(ctx: FExitContext) -> u32 {
            leave(ReturnOf::Func($id), &ctx);
            0
        }
    )*};
}

fentry_slots!(
    fentry_0 fexit_0 0, fentry_1 fexit_1 1, fentry_2 fexit_2 2, fentry_3 fexit_3 3,
    fentry_4 fexit_4 4, fentry_5 fexit_5 5, fentry_6 fexit_6 6, fentry_7 fexit_7 7,
    fentry_8 fexit_8 8, fentry_9 fexit_9 9, fentry_10 fexit_10 10, fentry_11 fexit_11 11,
    fentry_12 fexit_12 12, fentry_13 fexit_13 13, fentry_14 fexit_14 14, fentry_15 fexit_15 15,
    fentry_16 fexit_16 16, fentry_17 fexit_17 17, fentry_18 fexit_18 18, fentry_19 fexit_19 19,
    fentry_20 fexit_20 20, fentry_21 fexit_21 21, fentry_22 fexit_22 22, fentry_23 fexit_23 23,
    fentry_24 fexit_24 24, fentry_25 fexit_25 25, fentry_26 fexit_26 26, fentry_27 fexit_27 27,
    fentry_28 fexit_28 28, fentry_29 fexit_29 29, fentry_30 fexit_30 30, fentry_31 fexit_31 31,
    fentry_32 fexit_32 32, fentry_33 fexit_33 33, fentry_34 fexit_34 34, fentry_35 fexit_35 35,
    fentry_36 fexit_36 36, fentry_37 fexit_37 37, fentry_38 fexit_38 38, fentry_39 fexit_39 39,
    fentry_40 fexit_40 40, fentry_41 fexit_41 41, fentry_42 fexit_42 42, fentry_43 fexit_43 43,
    fentry_44 fexit_44 44, fentry_45 fexit_45 45, fentry_46 fexit_46 46, fentry_47 fexit_47 47,
    fentry_48 fexit_48 48, fentry_49 fexit_49 49, fentry_50 fexit_50 50, fentry_51 fexit_51 51,
    fentry_52 fexit_52 52, fentry_53 fexit_53 53, fentry_54 fexit_54 54, fentry_55 fexit_55 55,
    fentry_56 fexit_56 56, fentry_57 fexit_57 57, fentry_58 fexit_58 58, fentry_59 fexit_59 59,
    fentry_60 fexit_60 60, fentry_61 fexit_61 61, fentry_62 fexit_62 62, fentry_63 fexit_63 63,
);

/// fentry.multi and fexit.multi: one program per side for every function of the run's
/// tracing-multi link, each function's id its cookie (as kprobe.multi's): the functions past
/// the [`FENTRY_SLOTS`] pairs, which each need a program of their own. Loaded with
/// `BPF_TRACE_FENTRY_MULTI`/`FEXIT_MULTI` (userspace's patched aya). Minimum kernel 7.x
/// (tracing-multi links; x86-64 only), BTF required.
///
/// [`FENTRY_SLOTS`]: profiler_common::FENTRY_SLOTS
#[fentry]
pub fn fentry_multi_entry(ctx: FEntryContext) -> u32 {
    enter(
        &ctx,
        attach_cookie(&ctx),
        EntryAt::Trampoline(ctx.as_ptr() as u64),
    );
    0
}

/// The return side of [`fentry_multi_entry`]: the innermost open frame of its function.
#[fexit]
pub fn fexit_multi_exit(ctx: FExitContext) -> u32 {
    leave(ReturnOf::Func(attach_cookie(&ctx)), &ctx);
    0
}

/// One `sys_enter_*`/`sys_exit_*` tracepoint pair per syscall slot; the slot is the function
/// id, so no syscall-number table is needed. Minimum kernel 4.7.
macro_rules! syscall_slots {
    ($($enter:ident $exit:ident $id:literal),* $(,)?) => {$(
        #[tracepoint]
        pub fn $enter(ctx: TracePointContext) -> u32 {
            enter(&ctx, $id, EntryAt::FromUser);
            0
        }

        #[tracepoint]
        pub fn $exit(ctx: TracePointContext) -> u32 {
            leave(ReturnOf::Func($id), &ctx);
            0
        }
    )*};
}

syscall_slots!(
    sys_enter_0 sys_exit_0 0, sys_enter_1 sys_exit_1 1, sys_enter_2 sys_exit_2 2,
    sys_enter_3 sys_exit_3 3, sys_enter_4 sys_exit_4 4, sys_enter_5 sys_exit_5 5,
    sys_enter_6 sys_exit_6 6, sys_enter_7 sys_exit_7 7, sys_enter_8 sys_exit_8 8,
    sys_enter_9 sys_exit_9 9, sys_enter_10 sys_exit_10 10, sys_enter_11 sys_exit_11 11,
    sys_enter_12 sys_exit_12 12, sys_enter_13 sys_exit_13 13, sys_enter_14 sys_exit_14 14,
    sys_enter_15 sys_exit_15 15,
);

/// `sched/sched_process_exit`: fires for every exiting thread; counts its open frames and
/// releases its frame stack. Minimum kernel 4.7. (`sched_switch`, whose arguments depend on
/// how the store names a task, is in the store's module.)
#[tracepoint]
pub fn sched_process_exit(_ctx: TracePointContext) -> u32 {
    on_exit(store::current_task());
    0
}

/// `sched/sched_process_fork`: children of a traced process are traced too, so `-- cmd`
/// covers the command's whole process tree.
#[tracepoint]
pub fn sched_process_fork(ctx: TracePointContext) -> u32 {
    let parent_tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: only whether there is an entry is used; the value behind the reference is never
    // read.
    if unsafe { TGIDS.get(parent_tgid) }.is_none() {
        return 0;
    }
    // SAFETY: `read_at` copies with bpf_probe_read, which returns an error instead of faulting
    // when the address is bad, and any four bytes are a valid i32. The offset is the field's,
    // from the tracepoint's format file.
    if let Ok(child) = unsafe { ctx.read_at::<i32>(config(&FORK_CHILD_PID_OFFSET) as usize) }
        && TGIDS.insert(child as u32, 1, 0).is_err()
    {
        count(Counter::ProcessTreeFull, 1);
    }
    0
}
