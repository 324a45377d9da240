//! The raw syscall pair as BTF tracepoints (`tp_btf`), for the task-storage object: the same
//! `raw_syscalls:sys_enter`/`sys_exit` hooks and number table as `raw_syscalls.rs`, but with
//! typed arguments the verifier lets the program read directly. So the syscall number at
//! exit (`arch::syscall_nr`, read by every syscall's exit) and the compat flag are plain loads
//! instead of `bpf_probe_read_kernel` calls. Minimum kernel 5.5 with BTF; this object needs
//! 5.11 (task storage) anyway, so `thread_info` has its 5.11+ layout here.

use aya_ebpf::{
    bindings::pt_regs, helpers::generated::bpf_get_current_task_btf, macros::btf_tracepoint,
    programs::BtfTracePointContext,
};

use crate::frames::{EntryAt, ReturnOf, enter, leave};
use crate::keys::{EntryContext, ExitContext};
use crate::arch;
use crate::raw_syscalls::{regs_arg, traced_slot};

/// Whether the running syscall is a native 64-bit one (see `raw_syscalls::native`).
#[inline(always)]
fn native() -> bool {
    // SAFETY: the helper returns the running task as a BTF pointer the verifier tracks; the
    // load below is checked against `task_struct`'s BTF (a u32 at this offset) and cannot
    // fault (the kernel turns a bad address into 0).
    let status = unsafe {
        let task = bpf_get_current_task_btf() as *const u8;
        core::ptr::read_volatile(task.add(arch::COMPAT_WORD_OFFSET).cast::<u32>())
    };
    status & arch::COMPAT_FLAG == 0
}

/// `sys_enter(struct pt_regs *regs, long id)` as a BTF tracepoint (see the raw one).
impl EntryContext for BtfTracePointContext {
    #[inline(always)]
    fn arg(&self, n: u8) -> u64 {
        regs_arg(BtfTracePointContext::arg::<*const pt_regs>(self, 0), n)
    }

    /// A syscall's caller is user space; userspace refuses `--by caller` with `--syscall`.
    #[inline(always)]
    fn caller(&self) -> u64 {
        0
    }
}

/// `sys_exit(struct pt_regs *regs, long ret)`.
impl ExitContext for BtfTracePointContext {
    #[inline(always)]
    fn ret(&self) -> u64 {
        BtfTracePointContext::arg(self, 1)
    }
}

#[btf_tracepoint(function = "sys_enter")]
pub fn btf_sys_enter(ctx: BtfTracePointContext) -> i32 {
    let nr: u64 = BtfTracePointContext::arg(&ctx, 1);
    if let Some(slot) = traced_slot(nr)
        && native()
    {
        enter(&ctx, slot, EntryAt::FromUser);
    }
    0
}

#[btf_tracepoint(function = "sys_exit")]
pub fn btf_sys_exit(ctx: BtfTracePointContext) -> i32 {
    let regs: *const pt_regs = BtfTracePointContext::arg(&ctx, 0);
    // SAFETY: `regs` is the tracepoint's typed argument: the verifier checks this load of
    // the saved syscall number against pt_regs' BTF, and a bad address reads as 0 instead
    // of faulting.
    let nr = unsafe { core::ptr::read_volatile(arch::syscall_nr(regs)) };
    let nr = arch::syscall_nr_u64(nr);
    if let Some(slot) = traced_slot(nr)
        && native()
    {
        leave(ReturnOf::Func(slot), &ctx);
    }
    0
}
