//! The workload's life in a run: spawned held at its gate, followed by the probes, released,
//! reaped; its mappings saved while it lives; the signals that end the run.

use std::time::Duration;

use anyhow::Context as _;
use aya::maps::HashMap;
use tokio::task::JoinHandle;

use crate::attach::AttachSignals;
use crate::flame::SavedMaps;
use crate::workload::{Workload, WorkloadOutput};

/// How long a workload told to stop may take before it is killed.
const WORKLOAD_STOP_GRACE: Duration = Duration::from_secs(5);

/// Saves the executable mappings of the traced processes while they live, so their user
/// frames are named even when they have exited by the time the report is made.
#[derive(Debug, Default)]
pub struct MapsWatcher {
    pub saved: SavedMaps,
}

impl MapsWatcher {
    /// How often the traced processes' mappings are read again (new libraries, new children).
    pub const PERIOD: Duration = Duration::from_millis(50);

    /// Waits (up to 200 ms) until `pid` has replaced hotprof's image with its own (the
    /// workload execs once released), then saves its mappings: a workload that exits within
    /// the first period is named too.
    pub async fn after_exec(&mut self, pid: u32) {
        let own = std::fs::read_link("/proc/self/exe").ok();
        for _ in 0..200 {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
            if exe.is_some() && exe != own {
                self.saved.save(pid);
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Saves the mappings of every process in the traced tree now.
    pub fn poll(&mut self, ebpf: &aya::Ebpf) {
        let Some(map) = ebpf.map(profiler_common::names::TGIDS) else {
            return;
        };
        let Ok(tgids) = HashMap::<_, u32, u8>::try_from(map) else {
            return;
        };
        for pid in tgids.keys().flatten() {
            self.saved.save(pid);
        }
    }
}

/// Tells the probes which processes to follow (the `TGIDS` map; their children are added by
/// the fork hook).
pub fn follow_processes(
    ebpf: &mut aya::Ebpf,
    pids: impl IntoIterator<Item = u32>,
) -> anyhow::Result<()> {
    let mut tgids: HashMap<_, u32, u8> = HashMap::try_from(
        ebpf.map_mut(profiler_common::names::TGIDS)
            .context("TGIDS map missing")?,
    )?;
    for pid in pids {
        tgids.insert(pid, 1, 0)?;
    }
    Ok(())
}

/// The workload of a run, from spawn (held at its gate) to reaping.
pub struct Followed {
    workload: Option<Workload>,
    exited: Option<JoinHandle<std::io::Result<i32>>>,
}

impl Followed {
    /// Spawns `command` (if any) held at its gate, its output going to `output`, and has the
    /// probes follow it, or the `pids` when there is no command.
    pub fn spawn(
        ebpf: &mut aya::Ebpf,
        command: &[String],
        output: WorkloadOutput,
        pids: &[u32],
    ) -> anyhow::Result<Self> {
        let workload = if command.is_empty() {
            None
        } else {
            Some(Workload::spawn(command, output)?)
        };
        let followed = match &workload {
            Some(w) => vec![w.pid],
            None => pids.to_vec(),
        };
        follow_processes(ebpf, followed)?;
        Ok(Self {
            workload,
            exited: None,
        })
    }

    /// Whether there is a workload.
    pub fn is_some(&self) -> bool {
        self.workload.is_some()
    }

    /// Lets the workload run and starts waiting for its exit.
    pub fn release(&mut self) -> anyhow::Result<()> {
        if let Some(w) = self.workload.as_mut() {
            w.release()?;
            let pid = w.pid;
            self.exited = Some(tokio::task::spawn_blocking(move || {
                crate::workload::wait_pid(pid)
            }));
        }
        Ok(())
    }

    /// Whether the workload runs and has not been seen to exit.
    pub fn running(&self) -> bool {
        self.exited.is_some()
    }

    /// The workload's exit code, once it exits (pends forever without a running workload:
    /// guard a `select!` branch with [`Followed::running`]).
    pub async fn exit(&mut self) -> anyhow::Result<i32> {
        let Some(waiting) = self.exited.as_mut() else {
            return std::future::pending().await;
        };
        let status = waiting.await;
        self.exited = None;
        status
            .context("waiting for the workload")?
            .context("waiting for the workload")
    }

    /// The workload's pid, if there is one.
    pub fn pid(&self) -> Option<u32> {
        self.workload.as_ref().map(|w| w.pid)
    }

    /// The last line the workload printed so far (none without a workload).
    pub fn last_line(&self) -> Option<String> {
        self.workload.as_ref().and_then(Workload::last_line)
    }

    /// Passes `signal` on to the workload.
    pub fn signal(&self, signal: i32) {
        if let Some(w) = &self.workload {
            w.signal(signal);
        }
    }

    /// A workload still running was told to stop: reaps it (its exit code, if it stops within
    /// the grace time) or kills it, so it never outlives hotprof.
    pub async fn reap(&mut self) -> Option<i32> {
        let waiting = self.exited.take()?;
        match tokio::time::timeout(WORKLOAD_STOP_GRACE, waiting).await {
            Ok(Ok(Ok(code))) => Some(code),
            _ => {
                self.signal(libc::SIGKILL);
                None
            }
        }
    }

    /// The workload's `name: key=value` figures.
    pub fn metrics(&mut self) -> std::collections::BTreeMap<String, f64> {
        self.workload
            .as_mut()
            .map(Workload::metrics)
            .unwrap_or_default()
    }
}

/// SIGINT and SIGTERM, caught for the whole run so neither ends hotprof before it detaches:
/// the attach steps' catching ([`AttachSignals`]), held from before anything is attached to
/// the report. A signal during attaching stops it there; one after ends the run's loop.
pub struct Signals {
    _caught: AttachSignals,
    /// How often the loop looks for a noted signal: the handler can only store it.
    poll: tokio::time::Interval,
}

impl Signals {
    /// How long a signal may wait before the run's loop sees it.
    const POLL: Duration = Duration::from_millis(20);

    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            _caught: AttachSignals::catch(),
            poll: tokio::time::interval(Self::POLL),
        })
    }

    /// The next SIGINT or SIGTERM: the signal's number.
    pub async fn recv(&mut self) -> i32 {
        loop {
            if let Some(signal) = AttachSignals::take() {
                return signal;
            }
            self.poll.tick().await;
        }
    }
}

impl Drop for Signals {
    /// A signal after the loop ended (while detaching, calibrating or reporting) is dropped,
    /// not raised again: the run ends as it was ending anyway.
    fn drop(&mut self) {
        let _ = AttachSignals::take();
    }
}
