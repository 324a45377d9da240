//! Who and where this process is: its effective user id, the CPU it runs on.

/// The effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// The CPU the calling thread runs on now (0 if the kernel does not say).
pub fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu takes no arguments and only returns a number.
    u32::try_from(unsafe { libc::sched_getcpu() }).unwrap_or(0)
}
