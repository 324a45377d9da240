//! Worker threads that start their measured work together.

use std::sync::{Condvar, Mutex, PoisonError};
use std::thread;

use crate::cli::Error;

/// Runs `work(index)` on `count` threads, all released at once after every
/// one of them exists, then calls `while_running` on the calling thread and
/// returns the workers' results in index order.
///
/// Why not a plain `Barrier`: if spawning thread k fails, threads 0..k would
/// wait at the barrier forever and the scope would never end. The gate can
/// instead be cancelled, so the error is reported and the program exits.
pub fn run_workers<T, W, R>(
    name: &str,
    count: usize,
    work: W,
    while_running: R,
) -> Result<Vec<T>, Error>
where
    T: Send,
    W: Fn(usize) -> T + Sync,
    R: FnOnce(),
{
    let gate = Gate::default();
    thread::scope(|scope| {
        let mut handles = Vec::with_capacity(count);
        for index in 0..count {
            let (gate, work) = (&gate, &work);
            let spawned = thread::Builder::new()
                .name(format!("{name}-{index}"))
                .spawn_scoped(scope, move || gate.wait_open().then(|| work(index)));
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(err) => {
                    gate.set(GateState::Cancelled);
                    return Err(Error::os(&format!("spawning thread {index}"), err));
                }
            }
        }
        gate.set(GateState::Open);
        while_running();
        handles
            .into_iter()
            .map(|handle| match handle.join() {
                Ok(Some(result)) => Ok(result),
                Ok(None) => Err(Error::failed("worker was cancelled")),
                Err(_) => Err(Error::failed("a worker thread panicked")),
            })
            .collect()
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GateState {
    Closed,
    Open,
    Cancelled,
}

/// A start line workers wait at until it is opened or cancelled.
struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            state: Mutex::new(GateState::Closed),
            changed: Condvar::new(),
        }
    }
}

impl Gate {
    fn set(&self, state: GateState) {
        // The guarded value is a plain enum, valid even after a panic.
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
        self.changed.notify_all();
    }

    /// Blocks until the gate leaves `Closed`; true when it was opened.
    fn wait_open(&self) -> bool {
        let guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let guard = self
            .changed
            .wait_while(guard, |state| *state == GateState::Closed)
            .unwrap_or_else(PoisonError::into_inner);
        *guard == GateState::Open
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn results_come_back_in_order() {
        let ran_between = AtomicBool::new(false);
        let results = run_workers(
            "t",
            4,
            |i| i * 10,
            || {
                ran_between.store(true, Ordering::Relaxed);
            },
        )
        .unwrap();
        assert_eq!(results, [0, 10, 20, 30]);
        assert!(ran_between.load(Ordering::Relaxed));
    }

    #[test]
    fn cancelled_gate_releases_waiters() {
        let gate = Gate::default();
        thread::scope(|scope| {
            let waiter = scope.spawn(|| gate.wait_open());
            gate.set(GateState::Cancelled);
            assert!(!waiter.join().unwrap());
        });
    }
}
