//! fsession (Linux 7.0+, x86-64 and arm64 JITs): one trampoline-attached program at both the
//! entry and the exit of a function, the entry time in the call's own 8-byte session cookie on
//! the trampoline's stack. The same body as kprobe.session (`session.rs`: no per-task state, no
//! frames, so userspace uses it only for runs of one function that need none), at fentry's
//! cost rather than an fprobe's. aya knows no fsession: userspace loads it through the
//! patched aya's `FEntry::load_for_fsession` with the kernel's `BPF_TRACE_FSESSION` value.
//! In the task-storage objects (`profiler`, `profiler-plain`) only.

use core::ffi::c_void;

use crate::session::session_at;

/// The program: an `fentry` section (a tracing program; the attach type given at load makes
/// it an fsession one). Always 0, which is all the verifier allows a tracing program.
#[unsafe(no_mangle)]
#[unsafe(link_section = "fentry")]
pub fn fsession(ctx: *mut c_void) -> i32 {
    // SAFETY: this program is loaded as an fsession program only (userspace's
    // `load_for_fsession`), and `ctx` is its context.
    unsafe { session_at::<false>(ctx) };
    0
}
