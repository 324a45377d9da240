//! `--syscall` on the raw tracepoints `raw_syscalls:sys_enter` and `sys_exit`: one program
//! pair for every syscall of the system, which looks the syscall number up and hands the
//! traced ones to [`crate::frames`]. Unlike the `syscalls:sys_enter_NAME` perf tracepoints
//! (`probes.rs`), no perf record is built before the program runs; in exchange every syscall
//! pays the number lookup. Userspace picks between the two (`profiler/src/attach/syscalls.rs`).
//!
//! Arguments: `sys_enter(struct pt_regs *regs, long id)` and `sys_exit(struct pt_regs *regs,
//! long ret)`. The syscall's number at exit, and the arguments, are read from `regs` where the
//! architecture saves them (`arch`: x86-64's `orig_ax` and rdi, rsi, rdx, r10, r8, r9).
//! Minimum kernel 4.17 (raw tracepoints).

use aya_ebpf::{
    bindings::pt_regs,
    helpers::{bpf_probe_read_kernel, generated::bpf_get_current_task},
    macros::{map, raw_tracepoint},
    maps::Array,
    programs::RawTracePointContext,
};

use crate::arch;
use crate::config::{THREAD_INFO_STATUS_OFFSET, config};
use crate::frames::{EntryAt, ReturnOf, enter, leave};
use crate::keys::{EntryContext, ExitContext};

/// Syscall numbers the table covers: x86-64's and arm64's numbers stay below 512 (about 470
/// in 6.x). x32 syscalls (bit 30 set) and -1 (no syscall: a tracer or seccomp skipped it) are
/// beyond it.
pub(crate) const RAW_SYSCALL_NUMBERS: u32 = 512;

/// Per syscall number: the traced syscall's slot plus one, 0 for untraced syscalls. An array
/// map: the verifier inlines its lookup, so an untraced syscall costs a few instructions.
#[map]
pub(crate) static RAW_SYSCALL_SLOTS: Array<u32> = Array::with_max_entries(RAW_SYSCALL_NUMBERS, 0);

/// The slot of syscall `nr` if it is traced. `nr` as the kernel dispatches it: the low 32
/// bits, sign-extended (negative: no syscall).
#[inline(always)]
pub(crate) fn traced_slot(nr: u64) -> Option<u32> {
    let nr = nr as i32;
    if nr < 0 {
        return None;
    }
    let slot = *RAW_SYSCALL_SLOTS.get(nr as u32)?;
    slot.checked_sub(1)
}

/// The syscall number at `sys_exit`, sign-extended (`u64::MAX` if unreadable).
#[inline(always)]
fn exit_number(ctx: &RawTracePointContext) -> u64 {
    let regs: *const pt_regs = ctx.arg(0);
    // SAFETY: `syscall_nr` only computes the field's address; the helper returns an error
    // instead of faulting on a bad address.
    let nr = unsafe { bpf_probe_read_kernel(arch::syscall_nr(regs)) };
    nr.map_or(u64::MAX, arch::syscall_nr_u64)
}

/// Whether the running syscall is a native 64-bit one (not a compat syscall, whose number
/// means another syscall). Read only for traced numbers, so untraced syscalls skip it.
#[inline(always)]
fn native() -> bool {
    // SAFETY: the helper takes no arguments; the task's address is only offset and read
    // through bpf_probe_read_kernel, which fails instead of faulting.
    let task = unsafe { bpf_get_current_task() };
    let status = task.wrapping_add(u64::from(config(&THREAD_INFO_STATUS_OFFSET)));
    // SAFETY: as above; any 4 bytes are a valid u32. Unreadable counts as compat: skipped.
    let status =
        unsafe { bpf_probe_read_kernel(status as *const u32) }.unwrap_or(arch::COMPAT_FLAG);
    status & arch::COMPAT_FLAG == 0
}

/// Syscall argument `n` (0..=5) from the syscall's saved registers, 0 where unreadable.
#[inline(always)]
pub(crate) fn regs_arg(regs: *const pt_regs, n: u8) -> u64 {
    // SAFETY: `syscall_arg` only computes a field address; nothing is read through `regs`.
    let Some(register) = (unsafe { arch::syscall_arg(regs, n) }) else {
        return 0;
    };
    // SAFETY: bpf_probe_read_kernel fails instead of faulting; any 8 bytes are a u64. (A
    // helper copy even where a direct load is allowed: LLVM turns the register choice into
    // one load at a computed offset, which the verifier refuses on context and BTF pointers.)
    unsafe { bpf_probe_read_kernel(register) }.unwrap_or(0)
}

/// The raw `sys_enter` tracepoint: this type is only ever attached there in this crate's
/// probes (`store/hash_map.rs` attaches it to scheduler tracepoints, which read no keys).
impl EntryContext for RawTracePointContext {
    #[inline(always)]
    fn arg(&self, n: u8) -> u64 {
        regs_arg(RawTracePointContext::arg(self, 0), n)
    }

    /// A syscall's caller is user space; userspace refuses `--by caller` with `--syscall`.
    #[inline(always)]
    fn caller(&self) -> u64 {
        0
    }
}

/// The raw `sys_exit` tracepoint: the return value is its second argument.
impl ExitContext for RawTracePointContext {
    #[inline(always)]
    fn ret(&self) -> u64 {
        RawTracePointContext::arg(self, 1)
    }
}

/// Every syscall's entry: a traced native syscall opens a frame of its slot.
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn raw_sys_enter(ctx: RawTracePointContext) -> i32 {
    let nr: u64 = RawTracePointContext::arg(&ctx, 1);
    if let Some(slot) = traced_slot(nr)
        && native()
    {
        enter(&ctx, slot, EntryAt::FromUser);
    }
    0
}

/// Every syscall's exit: a traced native syscall closes its slot's frame.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn raw_sys_exit(ctx: RawTracePointContext) -> i32 {
    if let Some(slot) = traced_slot(exit_number(&ctx))
        && native()
    {
        leave(ReturnOf::Func(slot), &ctx);
    }
    0
}
