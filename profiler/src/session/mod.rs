//! A run, what every long-running command shares (`hotprof` itself, `serve`, `sample`):
//! [`Run::start`] checks nothing but loads and attaches what a [`SessionSpec`] asks for (the
//! sampler too), [`Run::snapshot`] and [`Run::recording`] read it while it runs, and
//! [`Run::finish`] takes the last reads, detaches everything, then calibrates ([`Finished`]).
//! What happens in between (the schedule, the reports) is the command's. Built from plain
//! domain structs; the command layer turns its arguments into them and checks them first
//! ([`validate`]).
//!
//! Errors name no option ([`SpecError`]): the command layer words them as the user spells
//! its options. The signals that end a run ([`Signals`]) are the attach steps' own catching,
//! held from before [`Run::start`] to the report.
//!
//! One file per job, imports pointing one way: `spec.rs` (the domain structs: [`Targets`],
//! [`ProbeSpec`], [`SessionSpec`], [`Probed`]), `error.rs` and `keys.rs` (how `--by` keys read)
//! at the bottom; `validate.rs` checks a spec against the system; `start.rs` resolves, loads
//! and attaches; `workload.rs` spawns, follows and reaps the workload and holds the signals;
//! `modules.rs` watches the probed functions' modules come and go;
//! `assemble.rs` turns a snapshot into a recording from plain data ([`Layout`], no handle on
//! the kernel); `run.rs` ([`Run`]) uses them all.

mod assemble;
mod error;
mod keys;
mod modules;
mod plan;
mod run;
mod spec;
mod start;
mod validate;
mod workload;

pub use assemble::Layout;
pub use error::SpecError;
pub use keys::KeyNames;
pub use modules::ModuleWatcher;
pub use run::{Finished, ProgramsRunTime, Run};
pub use spec::{FilterSpec, Filters, ProbeSpec, Probed, SessionSpec, Targets};
pub use validate::{check_pid, check_processes, check_system, validate};
pub use workload::{Followed, MapsWatcher, Signals, follow_processes};
