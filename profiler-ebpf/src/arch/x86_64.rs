//! x86-64: the System V calling convention and the `syscall` ABI.

use core::ptr::addr_of;

use aya_ebpf::{bindings::pt_regs, helpers::bpf_probe_read_kernel};

/// The architecture this object is built for, as userspace names it (`std::env::consts::ARCH`).
pub(crate) const NAME: &[u8] = NAME_BYTES;
pub(crate) const NAME_BYTES: &[u8; 6] = b"x86_64";

/// Function argument `n` (0..=5) at a kprobe on a function's entry or on a `call`.
#[inline(always)]
pub(crate) fn call_arg(regs: &pt_regs, n: u8) -> Option<&u64> {
    Some(match n {
        0 => &regs.rdi,
        1 => &regs.rsi,
        2 => &regs.rdx,
        3 => &regs.rcx,
        4 => &regs.r8,
        5 => &regs.r9,
        _ => return None,
    })
}

/// The return value at a return probe.
#[inline(always)]
pub(crate) fn return_value(regs: &pt_regs) -> u64 {
    regs.rax
}

/// The alignment of a task's kernel stack (`THREAD_SIZE`: 16 KiB, 32 KiB under KASAN, where
/// this is only stricter): two addresses in one such block are on the same stack.
pub(crate) const STACK_ALIGN: u64 = 16 << 10;

#[inline(always)]
pub(crate) fn stack_pointer(regs: &pt_regs) -> u64 {
    regs.rsp
}

/// The caller's return address at a function's entry: the word the stack pointer points at.
#[inline(always)]
pub(crate) fn return_address(regs: &pt_regs) -> u64 {
    // SAFETY: bpf_probe_read_kernel returns an error instead of faulting on a bad address,
    // and any 8 bytes are a valid u64.
    unsafe { bpf_probe_read_kernel(regs.rsp as *const u64) }.unwrap_or(0)
}

/// How many words of the BPF trampoline's frame [`fentry_caller`] reads (a power of two).
pub(crate) const FENTRY_WORDS: usize = 16;

/// The caller's return address in the BPF trampoline's frame (`words`, from the first saved
/// argument register up): the `registers` saved arguments, one slot for the traced function's
/// return value (there is an fexit), the saved rbp, then the trampoline's return address. The
/// traced function reaches the trampoline from its first instruction (its `__fentry__`
/// site): by `call` on most kernels, so that return address is back into the function (at
/// `func`) and the caller's comes next; by `jmp` on 7.x (x86 ftrace's jmp-based direct
/// calls), so it is the caller's.
#[inline(always)]
pub(crate) fn fentry_caller(words: &[u64; FENTRY_WORDS], registers: usize, func: u64) -> u64 {
    let returns_to = words[(registers + 2) & (FENTRY_WORDS - 1)];
    // Back into the function (within 16 bytes: after `call`, or `endbr64; call`)?
    if returns_to.wrapping_sub(func) < 16 {
        words[(registers + 3) & (FENTRY_WORDS - 1)]
    } else {
        returns_to
    }
}

/// The entry stack pointer of the call a kretprobe sees return: one word above, the return
/// address having been popped.
#[inline(always)]
pub(crate) fn entry_sp_at_return(sp: u64) -> u64 {
    sp.wrapping_sub(8)
}

/// Where syscall argument `n` (0..=5) is saved: r10, not rcx (`syscall` clobbers rcx).
///
/// # Safety
/// Only computes a field address of `*regs`; nothing is read through it.
#[inline(always)]
pub(crate) unsafe fn syscall_arg(regs: *const pt_regs, n: u8) -> Option<*const u64> {
    // SAFETY: addr_of! computes a field's address without reading through `regs`.
    unsafe {
        Some(match n {
            0 => addr_of!((*regs).rdi),
            1 => addr_of!((*regs).rsi),
            2 => addr_of!((*regs).rdx),
            3 => addr_of!((*regs).r10),
            4 => addr_of!((*regs).r8),
            5 => addr_of!((*regs).r9),
            _ => return None,
        })
    }
}

/// The syscall number of the running syscall, as saved at its entry (`orig_ax`).
pub(crate) type SyscallNr = u64;

/// A saved syscall number as the tables take it.
#[inline(always)]
pub(crate) fn syscall_nr_u64(nr: SyscallNr) -> u64 {
    nr
}

/// Where [`SyscallNr`] is saved in the syscall's registers.
///
/// # Safety
/// Only computes a field address of `*regs`; nothing is read through it.
#[inline(always)]
pub(crate) unsafe fn syscall_nr(regs: *const pt_regs) -> *const SyscallNr {
    // SAFETY: addr_of! computes a field's address without reading through `regs`.
    unsafe { addr_of!((*regs).orig_rax) }
}

/// `TS_COMPAT` in `thread_info.status`: a 32-bit syscall (int 0x80, sysenter, or a 32-bit
/// process's syscall) is running, whose numbers are the i386 table's, not x86-64's.
pub(crate) const COMPAT_FLAG: u32 = 0x0002;

/// Offset of `thread_info.status` in `task_struct` since 5.11 (after `flags` and
/// `syscall_work`; `thread_info` is the first member). Userspace reads the offset of the
/// running kernel from its BTF for the objects that cannot rely on this one.
#[allow(
    dead_code,
    reason = "read only by the BTF tracepoints, which profiler-compat has not"
)]
pub(crate) const COMPAT_WORD_OFFSET: usize = 16;
