//! sigaction(2) and raise(3): a signal handler installed for a while, then the previous one back.

/// A signal's action before [`catch`] replaced it.
pub struct Previous {
    signal: libc::c_int,
    action: libc::sigaction,
}

/// Installs `handler` for `signal`; the action it replaces, or None if the kernel refused.
/// `handler` runs in signal context: it may only do async-signal-safe work (an atomic store).
pub fn catch(signal: libc::c_int, handler: extern "C" fn(libc::c_int)) -> Option<Previous> {
    // SAFETY: an all-zero sigaction is a valid value (empty mask, no flags), filled in below
    // before use.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as usize;
    // SAFETY: as above; overwritten by the kernel with the previous action.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live sigaction values; `handler` is async-signal-safe (the
    // caller's contract above).
    if unsafe { libc::sigaction(signal, &action, &mut old) } == 0 {
        Some(Previous {
            signal,
            action: old,
        })
    } else {
        None
    }
}

/// Puts back the action [`catch`] replaced.
pub fn restore(previous: Previous) {
    // SAFETY: `previous.action` is the action the kernel returned for this signal in `catch`.
    unsafe { libc::sigaction(previous.signal, &previous.action, std::ptr::null_mut()) };
}

/// Gives SIGPIPE its default action back (Rust's runtime ignores it, so a write to a closed
/// pipe panics instead): `hotprof list | head` then ends quietly when `head` has read enough,
/// as `grep` does. Whatever hotprof attached is held by descriptors, which the kernel closes
/// as the process ends.
pub fn default_sigpipe() {
    // SAFETY: SIG_DFL is a valid disposition for SIGPIPE; no handler runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Sends `signal` to the calling thread; whether it was sent.
pub fn raise(signal: libc::c_int) -> bool {
    // SAFETY: raise only delivers a signal to this thread, whose handler (or default action)
    // then runs as for any signal.
    unsafe { libc::raise(signal) == 0 }
}

/// `SIGINT`, `SIGTERM` (the two hotprof catches); another is "a signal".
pub fn name(signal: libc::c_int) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}
