//! arm64: AAPCS64 (arguments in x0–x7, the return value in x0, the return address in the
//! link register x30) and the generic syscall ABI (arguments x0–x5, the number in
//! `pt_regs.syscallno`).

use core::ptr::addr_of;

use aya_ebpf::bindings::pt_regs;

/// The architecture this object is built for, as userspace names it (`std::env::consts::ARCH`).
pub(crate) const NAME: &[u8] = NAME_BYTES;
pub(crate) const NAME_BYTES: &[u8; 7] = b"aarch64";

/// Function argument `n` (0..=7) at a kprobe on a function's entry or on a `bl`.
#[inline(always)]
pub(crate) fn call_arg(regs: &pt_regs, n: u8) -> Option<&u64> {
    match n {
        0..=7 => Some(&regs.regs[usize::from(n)]),
        _ => None,
    }
}

/// The return value at a return probe.
#[inline(always)]
pub(crate) fn return_value(regs: &pt_regs) -> u64 {
    regs.regs[0]
}

/// The alignment of a task's kernel stack (`THREAD_SIZE` 16 KiB with 4 KiB pages, aligned to
/// twice that with vmapped stacks; larger pages only make this stricter): two addresses in
/// one such block are on the same stack.
pub(crate) const STACK_ALIGN: u64 = 16 << 10;

#[inline(always)]
pub(crate) fn stack_pointer(regs: &pt_regs) -> u64 {
    regs.sp
}

/// The caller's return address at a function's entry: the link register (`bl` put it there;
/// nothing is pushed).
#[inline(always)]
pub(crate) fn return_address(regs: &pt_regs) -> u64 {
    regs.regs[30]
}

/// How many words of the BPF trampoline's frame [`fentry_caller`] reads (a power of two).
pub(crate) const FENTRY_WORDS: usize = 16;

/// The caller's return address in the BPF trampoline's frame (`words`, from the first saved
/// argument register up). arm64's trampoline keeps, above the arguments, the return-value
/// slot and its saved x19/x20 (and padding to 16 bytes), two frame records: the traced
/// function's `[fp, lr]`, its lr back into the function (its patched `mov x9, x30; bl`
/// within its first 16 bytes), then the caller's `[fp, x9]`: x9 is the return address into
/// the caller, saved before the function could sign it. So: the first word back into the
/// function, and the one two words above it.
#[inline(always)]
pub(crate) fn fentry_caller(words: &[u64; FENTRY_WORDS], registers: usize, func: u64) -> u64 {
    // Constant indexes only (the loop unrolls): the verifier refuses a stack offset computed
    // from the argument count.
    for i in 1..FENTRY_WORDS - 2 {
        if i > registers && words[i].wrapping_sub(func) < 16 {
            return words[i + 2];
        }
    }
    0
}

/// The entry stack pointer of the call a kretprobe sees return: the same (`bl`/`ret` leave
/// the stack pointer alone, and the function restores its own).
#[inline(always)]
pub(crate) fn entry_sp_at_return(sp: u64) -> u64 {
    sp
}

/// Where syscall argument `n` (0..=5) is saved: x0–x5 (x0 holds it until the syscall
/// returns into it).
///
/// # Safety
/// Only computes a field address of `*regs`; nothing is read through it.
#[inline(always)]
pub(crate) unsafe fn syscall_arg(regs: *const pt_regs, n: u8) -> Option<*const u64> {
    if n > 5 {
        return None;
    }
    // SAFETY: addr_of! computes the array's address without reading through `regs`; the
    // index is below 6 of its 31 elements.
    Some(unsafe { addr_of!((*regs).regs).cast::<u64>().add(usize::from(n)) })
}

/// The syscall number of the running syscall: `pt_regs.syscallno`, an `s32` (-1: none).
pub(crate) type SyscallNr = i32;

/// The kernel's `struct pt_regs` up to `syscallno` (`arch/arm64/include/asm/ptrace.h`): the
/// user-visible registers, then `orig_x0`, then `syscallno`. aya's `pt_regs` is only the first
/// part (`user_pt_regs`).
#[repr(C)]
struct KernelRegs {
    user: pt_regs,
    orig_x0: u64,
    syscallno: i32,
}

/// A saved syscall number as the tables take it.
#[inline(always)]
pub(crate) fn syscall_nr_u64(nr: SyscallNr) -> u64 {
    // Sign-extended: -1 (no syscall) stays negative in the low 32 bits `traced_slot` reads.
    nr as u64
}

/// Where [`SyscallNr`] is saved in the syscall's registers.
///
/// # Safety
/// Only computes a field address of `*regs`; nothing is read through it.
#[inline(always)]
pub(crate) unsafe fn syscall_nr(regs: *const pt_regs) -> *const SyscallNr {
    // SAFETY: addr_of! computes a field's address without reading through `regs`, which
    // points at a whole kernel pt_regs.
    unsafe { addr_of!((*regs.cast::<KernelRegs>()).syscallno) }
}

/// `_TIF_32BIT` in `thread_info.flags`: the task is an AArch32 process, whose syscall numbers
/// are the compat table's.
pub(crate) const COMPAT_FLAG: u32 = 1 << 22;

/// Offset of `thread_info.flags` in `task_struct` (`thread_info` is the first member, `flags`
/// its first field; the flag is in its low 32 bits).
#[allow(
    dead_code,
    reason = "read only by the BTF tracepoints, which profiler-compat has not"
)]
pub(crate) const COMPAT_WORD_OFFSET: usize = 0;
