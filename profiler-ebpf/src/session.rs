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
//! BTF (the kfuncs are found by BTF id); functions ftrace lists only. Main object only.

use aya_ebpf::{
    EbpfContext, helpers::bpf_get_current_pid_tgid, macros::kprobe, programs::ProbeContext,
};
use profiler_common::{Call, Counter};

use crate::frames::{count, now_ns, record_into, stats_slot, wanted};
use crate::kfunc::{session_cookie, session_is_return};
use crate::probes::attach_cookie;

/// Entry: 0 to be run again at the return, 1 for a call not to time.
#[kprobe]
pub fn kprobe_session(ctx: ProbeContext) -> u32 {
    let raw = ctx.as_ptr();
    // SAFETY: this program is loaded for a kprobe.session link only (userspace's
    // `load_for_session_link`), and `raw` is its context.
    if unsafe { session_is_return(raw) } {
        let now = now_ns();
        // SAFETY: as above; the cookie is this call's own u64, never null, written at its
        // entry (a return runs only after an entry that returned 0, which wrote it).
        let started = unsafe { *session_cookie(raw) };
        record_session(attach_cookie(&ctx), now.saturating_sub(started));
        count(Counter::SessionCalls, 1u64.wrapping_neg());
        return 0;
    }
    if !wanted(bpf_get_current_pid_tgid()) {
        return 1;
    }
    count(Counter::SessionCalls, 1);
    // SAFETY: as above. Last, so the bookkeeping is not part of the measured time.
    unsafe { *session_cookie(raw) = now_ns() };
    0
}

/// Records a call of function `func`: without frames nothing nests (self time is the whole
/// duration, every call is outermost) and nothing is off-CPU-tracked.
#[inline(always)]
fn record_session(func: u32, duration: u64) {
    let call = Call {
        duration,
        self_time: duration,
        off_cpu: 0,
        outermost: true,
    };
    if let Some(stats) = stats_slot(func) {
        record_into(stats, func, &call, false);
    }
}
