//! `--counter`: a counting perf event per CPU and PMU event, put in the object's
//! `PMU_EVENTS_N` maps for the probes to read at each call's entry and return
//! (`bpf_perf_event_read_value`: Linux 4.15). Opened before the object is loaded, so that a
//! machine without the event says so before anything is attached.

use std::io;
use std::os::fd::{AsFd as _, OwnedFd};

use aya::Ebpf;
use aya_obj::generated::perf_hw_id;
use profiler_common::{PMU_EVENTS_MAX, names};

use super::perf_event::online_cpus;
use crate::model::PmuEvent;
use crate::sys::{bpf, perf};

/// The events of a run, open on every online CPU.
pub struct PmuCounters {
    /// Per event, in the order asked for: each CPU and its event.
    events: Vec<(PmuEvent, Vec<(u32, OwnedFd)>)>,
}

/// Why `--counter` cannot count here.
#[derive(Debug, thiserror::Error)]
pub enum PmuError {
    #[error(
        "--counter {event}: this machine's PMU does not count it (perf_event_open on CPU {cpu}: {error}); \
         a VM may have no PMU, or an emulated one without this event: `hotprof doctor` lists the events that count here"
    )]
    NotCounted {
        event: PmuEvent,
        cpu: u32,
        error: io::Error,
    },
    #[error("--counter {event}: cannot open the event on CPU {cpu}: {error}")]
    Open {
        event: PmuEvent,
        cpu: u32,
        error: io::Error,
    },
    #[error("--counter: at most {PMU_EVENTS_MAX} events per run, {0} asked for")]
    TooMany(usize),
    #[error("--counter: cannot hand the events to the probes: {0}")]
    Install(String),
}

/// perf's generic hardware event number for `event` (`PERF_COUNT_HW_*`).
fn hardware_config(event: PmuEvent) -> u64 {
    let id = match event {
        PmuEvent::Instructions => perf_hw_id::PERF_COUNT_HW_INSTRUCTIONS,
        PmuEvent::Cycles => perf_hw_id::PERF_COUNT_HW_CPU_CYCLES,
        PmuEvent::Branches => perf_hw_id::PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
        PmuEvent::BranchMisses => perf_hw_id::PERF_COUNT_HW_BRANCH_MISSES,
        PmuEvent::CacheReferences => perf_hw_id::PERF_COUNT_HW_CACHE_REFERENCES,
        PmuEvent::CacheMisses => perf_hw_id::PERF_COUNT_HW_CACHE_MISSES,
    };
    id as u64
}

/// Whether perf_event_open's `error` means the event does not exist here (no PMU, or one
/// that lacks the event), not that opening it failed.
fn not_counted(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV | libc::EINVAL)
    )
}

/// Opens `event` on CPU `cpu`: the kernel's answer to whether it counts there.
pub fn try_event(event: PmuEvent, cpu: u32) -> Result<OwnedFd, PmuError> {
    perf::open_hardware_counter(hardware_config(event), cpu).map_err(|error| {
        if not_counted(&error) {
            PmuError::NotCounted { event, cpu, error }
        } else {
            PmuError::Open { event, cpu, error }
        }
    })
}

impl PmuCounters {
    /// Opens each of `events` on every online CPU.
    pub fn open(events: &[PmuEvent]) -> Result<Self, PmuError> {
        if events.len() > PMU_EVENTS_MAX {
            return Err(PmuError::TooMany(events.len()));
        }
        let cpus = online_cpus();
        let events = events
            .iter()
            .map(|&event| {
                let per_cpu = cpus
                    .iter()
                    .map(|&cpu| Ok((cpu, try_event(event, cpu)?)))
                    .collect::<Result<Vec<_>, PmuError>>()?;
                Ok((event, per_cpu))
            })
            .collect::<Result<Vec<_>, PmuError>>()?;
        Ok(PmuCounters { events })
    }

    /// Puts the events in the loaded object's maps (each CPU's at its index), which keep
    /// them open as long as the object: the descriptors here can be dropped after.
    pub fn install(&self, ebpf: &Ebpf) -> Result<(), PmuError> {
        for ((_, per_cpu), name) in self.events.iter().zip(names::PMU_EVENTS) {
            let map = ebpf
                .map(name)
                .ok_or_else(|| PmuError::Install(format!("the {name} map is missing")))?;
            let aya::maps::Map::PerfEventArray(data) = map else {
                return Err(PmuError::Install(format!(
                    "{name} is not a perf event array"
                )));
            };
            for (cpu, event) in per_cpu {
                bpf::set_perf_event(data.fd().as_fd(), *cpu, event.as_fd())
                    .map_err(|e| PmuError::Install(format!("{name}[{cpu}]: {e}")))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_event_is_told_apart_from_a_refused_open() {
        assert!(not_counted(&io::Error::from_raw_os_error(libc::ENOENT)));
        assert!(!not_counted(&io::Error::from_raw_os_error(libc::EACCES)));
        let error = PmuError::NotCounted {
            event: PmuEvent::Instructions,
            cpu: 0,
            error: io::Error::from_raw_os_error(libc::ENOENT),
        };
        let text = error.to_string();
        assert!(
            text.starts_with("--counter instructions: this machine's PMU does not count it"),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
    }
}
