//! SIGINT and SIGTERM while probes are being attached. Attaching thousands of perf kprobes
//! takes minutes (and hotprof's start-up seconds under emulation); a signal then used to end
//! hotprof without a word. While an [`AttachSignals`] lives, a signal is only noted, and the
//! attach loops stop at their next step with [`AttachError::Interrupted`], which says how far
//! they got; whatever was attached is detached as the error returns (its links are dropped on
//! the way), before it is printed.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use super::error::AttachError;

/// The signal received while attaching, 0 for none.
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// Live [`AttachSignals`]: the outermost one installs the handlers and resets [`RECEIVED`],
/// so a signal noted early in a run is still seen by the attach steps nested in it.
static DEPTH: AtomicUsize = AtomicUsize::new(0);

/// The signals caught while attaching.
const CAUGHT: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

extern "C" fn note_signal(signal: libc::c_int) {
    // An atomic store: async-signal-safe.
    RECEIVED.store(signal, Ordering::SeqCst);
}

/// SIGINT and SIGTERM noted instead of ending the process, until dropped (which restores
/// the previous handlers, and raises again a signal no step has reported, so none is lost).
pub struct AttachSignals {
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

impl AttachSignals {
    /// Starts catching (best effort: a handler that cannot be installed leaves the signal's
    /// default, which ends hotprof, the kernel then closing every probe it held). Nested in
    /// another, changes nothing.
    pub fn catch() -> Self {
        let mut previous = Vec::new();
        if DEPTH.fetch_add(1, Ordering::SeqCst) > 0 {
            return Self { previous };
        }
        RECEIVED.store(0, Ordering::SeqCst);
        for signal in CAUGHT {
            // SAFETY: an all-zero sigaction is a valid value (empty mask, no flags), filled in
            // below before use.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = note_signal as extern "C" fn(libc::c_int) as usize;
            // SAFETY: as above; overwritten by the kernel with the previous action.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: both pointers are to live sigaction values; the handler only does an
            // atomic store, which is async-signal-safe.
            if unsafe { libc::sigaction(signal, &action, &mut old) } == 0 {
                previous.push((signal, old));
            }
        }
        Self { previous }
    }

    /// After `done` of `total` `what` ("kprobes") are attached: the error to stop with if a
    /// signal came.
    pub fn check(what: &str, done: usize, total: usize) -> Result<(), AttachError> {
        Self::check_at(|| format!("{done} of {total} {what}"))
    }

    /// At a stage of the run (`progress` words it: "reading the kernel's symbols"): the
    /// error to stop with if a signal came. The signal counts as reported.
    pub fn check_at(progress: impl FnOnce() -> String) -> Result<(), AttachError> {
        match RECEIVED.swap(0, Ordering::SeqCst) {
            0 => Ok(()),
            signal => Err(AttachError::Interrupted {
                signal: signal_name(signal),
                progress: progress(),
            }),
        }
    }
}

impl Drop for AttachSignals {
    fn drop(&mut self) {
        if DEPTH.fetch_sub(1, Ordering::SeqCst) > 1 {
            return;
        }
        for (signal, old) in self.previous.drain(..).rev() {
            // SAFETY: `old` is the action the kernel returned for this signal in `catch`.
            unsafe { libc::sigaction(signal, &old, std::ptr::null_mut()) };
        }
        let unreported = RECEIVED.swap(0, Ordering::SeqCst);
        if unreported != 0 {
            // SAFETY: raise sends a signal to this thread; the previous handler (restored
            // above) deals with it as it would have without hotprof's catching.
            unsafe { libc::raise(unreported) };
        }
    }
}

/// `SIGINT`, `SIGTERM`.
fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_while_attaching_stops_at_the_next_step_saying_how_far_it_got() {
        let caught = AttachSignals::catch();
        assert!(AttachSignals::check("kprobes", 3, 10).is_ok());
        // SAFETY: raise only delivers SIGTERM to this thread, whose handler is note_signal.
        assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        // Nested (an attach step inside the run's own catching): the signal is still seen.
        let nested = AttachSignals::catch();
        let error = AttachSignals::check("kprobes", 4, 10).unwrap_err();
        assert_eq!(
            error.to_string(),
            "interrupted by SIGTERM while attaching, after 4 of 10 kprobes; every probe \
             attached so far was detached"
        );
        // Reported once.
        assert!(AttachSignals::check_at(|| "later".into()).is_ok());
        drop(nested);
        drop(caught);
        let _caught = AttachSignals::catch();
        assert!(AttachSignals::check("kprobes", 1, 10).is_ok());
    }
}
