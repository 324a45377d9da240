//! The newest peers, once per kernel, so their layer cannot rot: Debian sid's bpftrace,
//! funclatency and perf on the workloads of known truth in [`peer_exactness`], beside hotprof.

use std::fs;

use anyhow::{Context, Result, ensure};

use super::harness::Ctx;
use crate::peer_exactness::{self, Outcome, Tool};

/// The one scenario that boots with the peers' layer ([`Ctx::run_with_peers`]).
pub(super) const NAME: &str = "peers_side_by_side";

/// 6.12, 7.x: hotprof counts every case exactly (the notrace function at its call site), and
/// each of the bimodal case's sleeps in its mode;
/// every peer runs and counts the getpid loop; none of them attaches to the notrace function.
/// The table of what each did is written to the run's `peers.md` and printed.
pub(super) fn peers_side_by_side(ctx: &mut Ctx) -> Result<()> {
    let guest = ctx.run_with_peers(&peer_exactness::script())?;
    guest.expect_exit(0)?;
    let rows = peer_exactness::read(&guest.outcome.out_dir)?;
    let table = peer_exactness::table(&rows);
    let path = guest.outcome.out_dir.join("peers.md");
    fs::write(&path, &table).with_context(|| format!("could not write {}", path.display()))?;
    eprintln!("{table}");
    for row in &rows {
        ensure!(
            *row.outcome(Tool::Hotprof)
                == Outcome::Counted(
                    row.truth,
                    row.case.modes.map(|modes| modes.map(|mode| mode.calls))
                ),
            "{}: hotprof {:?}, want {} calls (and the modes' counts)",
            row.case.key,
            row.outcome(Tool::Hotprof),
            row.truth
        );
        for tool in peer_exactness::TOOLS.into_iter().skip(1) {
            let outcome = row.outcome(tool);
            match row.case.key {
                // A peer's count, whatever it is: the peer ran. (perf's function_graph
                // events overflow its trace buffer: it loses about half of 100,000 calls.)
                "exact" => ensure!(
                    matches!(outcome, Outcome::Counted(..)),
                    "{} counted nothing: {outcome:?}",
                    tool.title()
                ),
                "notrace" => ensure!(
                    matches!(outcome, Outcome::Refused(_)),
                    "{} timed the notrace function ({outcome:?}): the docs say it cannot",
                    tool.title()
                ),
                _ => {}
            }
        }
    }
    Ok(())
}
