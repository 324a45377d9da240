//! kprobe.session: one program at both the entry and the return of each function of a
//! kprobe.session link, the entry time kept in the call's own session cookie. No per-task
//! state at all: no frame stack to find or push, and a call the filters reject at its entry
//! (returning 1) costs nothing at its return, which the kernel then skips.
//!
//! Without frames nothing nests: a call's self time is its whole duration and recursion is not
//! collapsed, and there is nothing to keep `--off-cpu`, `--by`, `--slowest`, `--stacks`,
//! `--children` or `--filter` in; userspace uses this program only for runs of one function
//! with none of those (else the frame-stack programs of the kprobe.multi link).
//!
//! Minimum kernel 6.10 with `CONFIG_FPROBE` (kprobe.session links and their kfuncs), kernel
//! BTF (the kfuncs are found by BTF id); functions ftrace lists only. In the task-storage
//! objects (`profiler`, `profiler-plain`) only.

use core::{arch::asm, ffi::c_void};

use aya_ebpf::{EbpfContext, helpers::bpf_get_current_pid_tgid, programs::ProbeContext};
use profiler_common::{Call, Counter, TGID_BIT_WORDS};

use crate::config::now_ns;
use crate::counters::count;
use crate::frames::{elapsed, traced_tgid, wanted_with};
use crate::hist::record_into;
use crate::kfunc::{session_cookie, session_is_return};

/// The link's one function's slot. Not its attach cookie: `bpf_get_attach_cookie` searches the
/// link's addresses (a bsearch) at every call, ~70 instructions per call on 6.12 (a TCG count,
/// `cargo xtask bench --only insns`), and userspace links exactly one function, slot 0.
const SLOT: u32 = 0;

/// Thread groups found in `TGIDS`, one bit each (word `tgid / 64`, bit `tgid % 64`): the
/// process-tree filter's hash lookup cost every call ~140 instructions (a TCG count); the
/// frame-stack programs pay it once per task, these programs have no per-task state. Only a
/// cache: a clear bit means "ask `TGIDS`", so nothing depends on userspace writing it. Bits
/// are never cleared, as `TGIDS` entries are never deleted.
///
/// A global (`.bss`, 512 KiB in each run of this object), not an array map: its address is a
/// constant in the program, so a check is a load, where a map lookup cost every call ~10
/// instructions more (a TCG count, `cargo xtask bench --only insns`).
static mut TGID_BITS: [u64; TGID_BIT_WORDS as usize] = [0; TGID_BIT_WORDS as usize];

/// Whether thread group `tgid` is traced: its bit, else `TGIDS` (setting the bit on a hit).
#[inline(always)]
fn traced_tgid_cached(tgid: u32) -> bool {
    // The mask keeps the index inside the array for the verifier; it changes nothing for
    // a real tgid, which is below PID_MAX_LIMIT (4 Mi, the array's bits).
    let index = (tgid / 64) as usize & (TGID_BIT_WORDS as usize - 1);
    // SAFETY: `index` is below the array's length, so the pointer is to one of its u64s.
    let word = unsafe { (&raw mut TGID_BITS).cast::<u64>().add(index) };
    let bit = 1u64 << (tgid % 64);
    // SAFETY: `word` is a valid, aligned u64 of the global. Other CPUs set bits in it too:
    // a plain load sees each bit set or not, and the update is atomic.
    if unsafe { core::ptr::read_volatile(word) } & bit != 0 {
        return true;
    }
    if !traced_tgid(tgid) {
        return false;
    }
    // An atomic OR (BPF atomics: 5.12+; this program 6.10+). Rust's `fetch_or` needs
    // compare-and-swap loops the BPF target does not offer, hence the instruction itself.
    // SAFETY: as above; the instruction writes only that u64.
    unsafe {
        asm!(
            "lock *(u64 *)({word} + 0) |= {bit}",
            word = in(reg) word,
            bit = in(reg) bit,
            options(nostack),
        );
    }
    true
}

/// The program, written out rather than with `#[kprobe]`: aya-ebpf's macro returns 0 whatever
/// the body returns, and a session entry's return value is what skips the return (1) or not.
#[unsafe(no_mangle)]
#[unsafe(link_section = "kprobe")]
pub fn kprobe_session(ctx: *mut c_void) -> u32 {
    // SAFETY: this program is loaded for a kprobe.session link only (userspace's
    // `load_for_session_link`), and `ctx` is its context.
    unsafe { session_at::<true>(ProbeContext::new(ctx).as_ptr()) }
}

/// One run of a session program (kprobe.session, fsession), at a call's entry or its return:
/// 0, or 1 at an entry whose call is not timed where `SKIP_BY_RETURN` (kprobe.session: the
/// kernel then skips the return). fsession programs must return 0 (the verifier's range for
/// tracing programs, 7.2), so there an untimed call's cookie is zeroed and its return skips it.
///
/// # Safety
/// `raw` is the context of a program loaded for a kprobe.session link or as an fsession
/// program, whose session kfuncs it calls.
#[inline(always)]
pub(crate) unsafe fn session_at<const SKIP_BY_RETURN: bool>(raw: *mut c_void) -> u32 {
    // SAFETY: the caller's contract.
    if unsafe { session_is_return(raw) } {
        let now = now_ns();
        // SAFETY: as above; the cookie is this call's own u64, never null.
        let cookie = unsafe { &mut *session_cookie(raw) };
        let started = core::mem::replace(cookie, 0);
        // Written at the entry, unless the entry did not run: before 6.14 (Jiri Olsa's "bpf:
        // Return error for missed kprobe multi bpf program execution") an entry skipped for
        // BPF recursion still got its return. That call is already a loss, in the program's
        // recursion misses (the report's kernel-missed line). Zeroed here, so a stale start
        // is never reused; zero also at an untimed fsession entry.
        if started == 0 {
            return 0;
        }
        record_session(SLOT, elapsed(now, started));
        return 0;
    }
    if !wanted_with(bpf_get_current_pid_tgid(), traced_tgid_cached) {
        if SKIP_BY_RETURN {
            return 1;
        }
        // SAFETY: as above.
        unsafe { *session_cookie(raw) = 0 };
        return 0;
    }
    count(Counter::SessionEntries, 1);
    // SAFETY: as above. Last, so the bookkeeping is not part of the measured time.
    unsafe { *session_cookie(raw) = now_ns() };
    0
}

/// Records a call of function `func`: without frames nothing nests (no nested time, every call
/// is outermost) and nothing is off-CPU-tracked.
#[inline(always)]
fn record_session(func: u32, duration: u64) {
    let call = Call {
        duration,
        child_ns: 0,
        off_cpu: 0,
        outermost: true,
    };
    record_into(func, &call, false);
}
