//! Bench section: the peers on workloads of known truth ([`peer_exactness`]), in one 7.x
//! guest with the bench's layers: what each counted against the truth, and what it answered
//! where it would not attach.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::{Tools, vm_run_with};
use crate::kernels::Kernel;
use crate::peer_exactness;
use crate::util::secs;

/// Boot, every tool on every case (bpftrace compiles its program in ~10 s of TCG), margin.
const TIMEOUT: Duration = Duration::from_secs(600);

pub fn run(tools: &Tools) -> Result<String> {
    let started = Instant::now();
    let outcome = vm_run_with(
        tools,
        "exactness",
        &peer_exactness::script(),
        TIMEOUT,
        |run| run.kernel = Kernel::V7,
    )?;
    let rows = peer_exactness::read(&outcome.out_dir)?;
    Ok(format!(
        "## Exactness and reach, side by side ({})\n\n\
         Each tool on workloads whose call count is known, in one guest; a peer that would not \
         attach says why in its own words. Peers: {}. funclatency runs no \
         command and perf's pid filter misses a command's threads: both count system-wide, so \
         another task's call adds to theirs.\n\n{}\nSection time: {}.\n",
        outcome.kernel_package,
        tools.bpftrace,
        peer_exactness::table(&rows),
        secs(started.elapsed())
    ))
}
