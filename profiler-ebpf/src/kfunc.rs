//! Calls of kernel functions (kfuncs) that aya 0.14 cannot relocate.
//!
//! A kfunc call is a `call` instruction with `src_reg = BPF_PSEUDO_KFUNC_CALL` (2) and the
//! kfunc's BTF id in vmlinux as `imm`. libbpf writes those from extern declarations; aya-obj
//! 0.3 knows no extern functions. So the instruction is written here as data, with a
//! placeholder `imm` per kfunc, and userspace's patched aya (`KProbe::load_for_session_link`,
//! `third_party/aya/HOTPROF-PATCH.md`) replaces each placeholder with the kfunc's id in the
//! running kernel's BTF before loading. A program with an unpatched placeholder is refused by
//! the verifier (no such BTF id), never run wrongly.

use core::{arch::asm, ffi::c_void};

use profiler_common::kfunc::{SESSION_COOKIE, SESSION_IS_RETURN};

/// `call` (`BPF_JMP | BPF_CALL`, 0x85) with `src_reg` 2, no offset and `imm` = `placeholder`,
/// as the little-endian instruction word.
const fn kfunc_call(placeholder: i32) -> u64 {
    0x85 | (2 << 12) | ((placeholder as u32 as u64) << 32)
}

const CALL_SESSION_IS_RETURN: u64 = kfunc_call(SESSION_IS_RETURN);
const CALL_SESSION_COOKIE: u64 = kfunc_call(SESSION_COOKIE);

/// `bpf_session_is_return()`: whether this kprobe.session program runs at the function's
/// return (else at its entry). 6.10+; from 7.0 it takes the program's context, which earlier
/// kernels ignore (their prototype has no argument, and r1 holds the context anyway).
///
/// # Safety
/// Only in a program loaded for a kprobe.session link, with `ctx` its context.
#[inline(always)]
pub unsafe fn session_is_return(ctx: *mut c_void) -> bool {
    // SAFETY: the caller's contract; the kfunc reads only the current session's run context.
    unsafe { call_with_context::<CALL_SESSION_IS_RETURN>(ctx) as u8 != 0 }
}

/// `bpf_session_cookie()`: this call's own 8 bytes, the same at its entry and its return (one
/// per call: a recursive function's calls each have theirs). Never null. 6.10+; the context
/// argument as for [`session_is_return`].
///
/// # Safety
/// Only in a program loaded for a kprobe.session link, with `ctx` its context.
#[inline(always)]
pub unsafe fn session_cookie(ctx: *mut c_void) -> *mut u64 {
    // SAFETY: as in `session_is_return`.
    unsafe { call_with_context::<CALL_SESSION_COOKIE>(ctx) as *mut u64 }
}

/// Runs the kfunc call instruction `CALL` with `ctx` as its argument; its return value.
///
/// # Safety
/// As the kfunc requires.
#[inline(always)]
unsafe fn call_with_context<const CALL: u64>(ctx: *mut c_void) -> u64 {
    let ret: u64;
    // SAFETY: the caller's contract. Like every call it clobbers r1-r5 and returns in r0.
    unsafe {
        asm!(
            ".quad {call}",
            call = const CALL,
            inout("r1") ctx => _,
            lateout("r0") ret,
            lateout("r2") _, lateout("r3") _, lateout("r4") _, lateout("r5") _,
            options(nostack),
        );
    }
    ret
}
