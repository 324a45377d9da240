//! What every long-running command shares (`hotprof` itself, `serve`, `sample`): checking the
//! request against the system, loading and attaching the probes, starting, following and
//! reaping the workload, and the signals that end a run. Built from plain domain structs
//! ([`SessionSpec`]); the command layer turns its arguments into them.
//!
//! One file per job, imports pointing one way: `spec.rs` (the domain structs) and `keys.rs`
//! (how `--by` keys read) at the bottom; `validate.rs` checks a spec against the system;
//! `start.rs` resolves, loads and attaches; `workload.rs` spawns, follows and reaps the
//! workload and holds the signals; `assemble.rs` turns a snapshot into a recording.

mod assemble;
mod keys;
mod spec;
mod start;
mod validate;
mod workload;

pub use assemble::Session;
pub use keys::KeyNames;
pub use spec::{FilterSpec, Filters, ProbeSpec, Probed, SessionSpec};
pub use start::{Attached, attach, load};
pub use validate::{check_pid, check_processes, check_system, validate};
pub use workload::{Followed, MapsWatcher, Signals, follow_processes};
