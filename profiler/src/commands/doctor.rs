//! `hotprof doctor`: one table for this machine, a row per kernel feature, privilege and
//! setting hotprof depends on, each saying what it enables and what to do when it is missing;
//! exit 0 when hotprof's core works here (its programs load and at least one of kprobes,
//! fentry or the syscall tracepoints attaches), else 1 with a last line saying why.
//!
//! Capabilities are tried rather than inferred from version numbers: the eBPF object is loaded
//! with [`crate::attach::load`] and its programs attached to getpid, then dropped at once.
//! [`gather`] is the only part that touches the system; it fills [`Facts`] with plain
//! values, which [`rows()`], [`verdict()`] and [`render()`] turn into the table (pure, tested
//! with made-up machines).

mod facts;
mod multi;
mod probe;
mod render;
mod rows;

pub use facts::{Facts, Kallsyms, Lockdown, Privileges, Tracefs, Tried};
pub use probe::{AttachTries, attach_tries, gather};
pub use render::render;
pub use rows::{Row, Status, Verdict, rows, verdict};

const EXAMPLES: &str = "\
Examples:
  sudo hotprof doctor
  # In a script: only whether hotprof can work here
  sudo hotprof doctor > /dev/null && echo usable";

/// Options of `hotprof doctor` (none yet).
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct DoctorArgs {}

/// Checks this machine, prints the table; 0 when hotprof's core works here, else 1.
pub fn run(_args: &DoctorArgs) -> anyhow::Result<i32> {
    let facts = gather();
    // Every program doctor tried is closed by now; leave only once the kernel has freed them.
    super::status::wait_until_freed();
    let verdict = verdict(&facts);
    let header = format!("hotprof {} on Linux {}", super::LONG_VERSION, facts.release);
    let text = render(&header, &rows(&facts), &verdict);
    super::write_stdout(text.as_bytes())?;
    Ok(if verdict.works { 0 } else { 1 })
}
