//! SIGINT and SIGTERM while probes are attached: hotprof's one way of catching signals.
//! Attaching thousands of perf kprobes takes minutes (and hotprof's start-up seconds under
//! emulation); a signal then used to end hotprof without a word. While an [`AttachSignals`]
//! lives, a signal is only noted, and the attach loops stop at their next step with
//! [`AttachError::Interrupted`], which says how far they got; whatever was attached is
//! detached as the error returns (its links are dropped on the way), before it is printed.
//! Once attached, the run's loop takes the noted signal ([`AttachSignals::take`]) and ends the
//! run, detaching everything before it reports.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use super::error::AttachError;
use crate::sys::signal;

/// The signal received while attaching, 0 for none.
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// Live [`AttachSignals`]: the outermost one installs the handlers and resets [`RECEIVED`],
/// so a signal noted early in a run is still seen by the attach steps nested in it.
static DEPTH: AtomicUsize = AtomicUsize::new(0);

/// The signals caught while attaching. Not SIGHUP: it kills hotprof, and the kernel detaches
/// everything with its fds (caught, `top` whose terminal was gone hung waiting for its key
/// reader, holding its probes).
const CAUGHT: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

extern "C" fn note_signal(signal: libc::c_int) {
    // An atomic store: async-signal-safe.
    RECEIVED.store(signal, Ordering::SeqCst);
}

/// SIGINT and SIGTERM noted instead of ending the process, until dropped (which restores
/// the previous handlers, and raises again a signal no step has reported, so none is lost).
pub struct AttachSignals {
    previous: Vec<signal::Previous>,
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
        // The handler only does an atomic store, which is async-signal-safe.
        previous.extend(
            CAUGHT
                .map(|caught| signal::catch(caught, note_signal))
                .into_iter()
                .flatten(),
        );
        Self { previous }
    }

    /// After `done` of `total` `what` ("kprobes") are attached: the error to stop with if a
    /// signal came.
    pub fn check(what: &str, done: usize, total: usize) -> Result<(), AttachError> {
        Self::check_at(|| format!("{done} of {total} {what}"))
    }

    /// The signal noted since the last check, if any; it counts as reported. The run's loop
    /// asks this, holding an [`AttachSignals`] for the whole run.
    pub fn take() -> Option<libc::c_int> {
        match RECEIVED.swap(0, Ordering::SeqCst) {
            0 => None,
            signal => Some(signal),
        }
    }

    /// Notes `signal` again: a step reported it but gave up only its own part (calibrating
    /// while `serve` starts), so the run's loop must still see it and stop. With no
    /// [`AttachSignals`] alive it is raised, for the handler in place.
    pub fn renote(signal: libc::c_int) {
        if DEPTH.load(Ordering::SeqCst) > 0 {
            RECEIVED.store(signal, Ordering::SeqCst);
        } else {
            signal::raise(signal);
        }
    }

    /// At a stage of the run (`progress` words it: "reading the kernel's symbols"): the
    /// error to stop with if a signal came. The signal counts as reported.
    pub fn check_at(progress: impl FnOnce() -> String) -> Result<(), AttachError> {
        match RECEIVED.swap(0, Ordering::SeqCst) {
            0 => Ok(()),
            signal => Err(AttachError::Interrupted {
                signal,
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
        for previous in self.previous.drain(..).rev() {
            signal::restore(previous);
        }
        let unreported = RECEIVED.swap(0, Ordering::SeqCst);
        if unreported != 0 {
            // The previous handler (restored above) deals with it as it would have without
            // hotprof's catching.
            signal::raise(unreported);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_while_attaching_stops_at_the_next_step_saying_how_far_it_got() {
        let caught = AttachSignals::catch();
        assert!(AttachSignals::check("kprobes", 3, 10).is_ok());
        // Delivered to this thread, whose handler is note_signal.
        assert!(signal::raise(libc::SIGTERM));
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
        // Once attached, the run's loop takes it, once.
        assert!(signal::raise(libc::SIGINT));
        assert_eq!(AttachSignals::take(), Some(libc::SIGINT));
        assert_eq!(AttachSignals::take(), None);
        // A step that reported it but only gave up its own part puts it back for the loop.
        assert!(signal::raise(libc::SIGTERM));
        let Err(AttachError::Interrupted { signal, .. }) = AttachSignals::check("x", 0, 1) else {
            panic!("the signal was not reported");
        };
        AttachSignals::renote(signal);
        assert_eq!(AttachSignals::take(), Some(libc::SIGTERM));
        drop(nested);
        drop(caught);
        let _caught = AttachSignals::catch();
        assert!(AttachSignals::check("kprobes", 1, 10).is_ok());
    }
}
