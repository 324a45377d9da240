//! A run: what one invocation attached, from [`Run::start`] to [`Run::finish`]. `record`,
//! `serve` and `sample` all hold one; what they do in between (the schedule, the reports) is
//! theirs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use aya::maps::{MapData, PerCpuHashMap};
use profiler_common::{SlowCall, StackCapture, StackKey, StackTotals, names};

use super::assemble::Layout;
use super::modules::ModuleWatcher;
use super::spec::{Filters, ProbeSpec, SessionSpec, Targets};
use super::start;
use super::workload::{Followed, MapsWatcher};
use crate::attach::{self, RunLinks};
use crate::calibrate::{Calibration, Overhead};
use crate::collect::{self, CollectedStack, Snapshot};
use crate::model::Recording;
use crate::resolve::Target;
use crate::workload::WorkloadOutput;

/// The probes of one invocation, loaded and attached, and how their slots read. Dropping it
/// detaches and unloads everything; [`Run::finish`] does so after the last reads.
pub struct Run {
    ebpf: aya::Ebpf,
    /// kprobe mode's links, owned apart from `ebpf` so they close in parallel.
    links: RunLinks,
    layout: Layout,
    /// The resolved function of each slot (empty for syscalls).
    targets: Vec<Target>,
    /// What measuring the probe overhead needs, unless `--no-calibrate` (or measured already).
    calibration: Option<Calibration>,
    /// What [`Run::finish`] reads besides the totals.
    stacks: bool,
    slowest: bool,
    /// The CPUs the sampler runs on (`hotprof sample`; else 0).
    sampled_cpus: usize,
}

/// What a run left once detached (and calibrated).
pub struct Finished {
    pub layout: Layout,
    pub targets: Vec<Target>,
    /// The last snapshot, calls in flight included (the sampler's counters alone when only
    /// sampling).
    pub snapshot: Snapshot,
    /// Calls the kernel missed (recursion, the kprobe links' own counts).
    pub kernel_missed: u64,
    /// When everything was detached (before calibrating).
    pub detached: Instant,
    /// Measured after detaching; `None` if not asked for, measured before, or not measurable
    /// (the note says why).
    pub overhead: Option<Overhead>,
    /// The captured stacks, when the spec asked for them.
    pub stacks: Option<Vec<CollectedStack>>,
    /// The slowest calls, when asked for.
    pub slowest: Option<SlowestCalls>,
    /// The sampler's stacks (`hotprof sample`).
    pub samples: Option<Vec<CollectedStack>>,
}

/// The run time and runs of a run's programs, summed (the kernel counts them only while its
/// run-time statistics are on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgramsRunTime {
    pub programs: usize,
    pub run_time: Duration,
    pub run_count: u64,
}

impl ProgramsRunTime {
    /// What ran between `earlier` and `self`.
    pub fn since(&self, earlier: &ProgramsRunTime) -> ProgramsRunTime {
        ProgramsRunTime {
            programs: self.programs,
            run_time: self.run_time.saturating_sub(earlier.run_time),
            run_count: self.run_count.saturating_sub(earlier.run_count),
        }
    }
}

/// The slowest calls kept (`--slowest`), each with its slot, slowest first.
pub struct SlowestCalls {
    pub calls: Vec<(u32, SlowCall)>,
    /// The frames of the calls' kernel stacks only, by stack id (the map may hold thousands).
    pub frames: BTreeMap<i32, Vec<u64>>,
}

impl Run {
    /// Resolves, loads and attaches what `spec` asks for (checked into `filters` before),
    /// the sampler too when it asks for one.
    pub fn start(spec: &SessionSpec, filters: &Filters) -> anyhow::Result<Run> {
        let attached = if let Targets::Nothing = spec.probe.targets {
            start::sampler_only(spec)?
        } else {
            start::attach(spec, filters)?
        };
        let mut run = Run {
            ebpf: attached.ebpf,
            links: attached.links,
            layout: Layout {
                probed: attached.probed,
                mode: attached.mode,
                task_store: attached.task_store,
                overhead: None,
                off_cpu: spec.off_cpu,
                command: spec.command.clone(),
                keys: attached.keys,
                condition: spec.probe.condition.clone(),
                kernel: crate::kernel_release(),
                pmu_events: spec.pmu_events.clone(),
            },
            targets: attached.targets,
            calibration: attached.calibration,
            stacks: spec.stacks != StackCapture::None,
            slowest: spec.slowest > 0,
            sampled_cpus: 0,
        };
        if let Some(frequency) = spec.sample_frequency {
            run.sampled_cpus = attach::attach_sampler(&mut run.ebpf, frequency)?;
        }
        Ok(run)
    }

    /// How the run's slots read.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The resolved function of each slot (empty for syscalls).
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// The CPUs the sampler runs on.
    pub fn sampled_cpus(&self) -> usize {
        self.sampled_cpus
    }

    /// Measures the probe overhead now, the probes attached (`serve` exports it from the
    /// start); [`Run::finish`] then has nothing left to calibrate.
    pub fn calibrate_now(&mut self) -> Option<Overhead> {
        let overhead = self.calibration.take().and_then(|c| c.measure_or_note());
        self.layout.overhead = overhead;
        overhead
    }

    /// Spawns `command` (if any) held at its gate and has the probes follow it, or `pids`.
    pub fn follow(&mut self, command: &[String], pids: &[u32]) -> anyhow::Result<Followed> {
        Followed::spawn(&mut self.ebpf, command, WorkloadOutput::Relayed, pids)
    }

    /// [`Run::follow`], the workload's output going to `output`.
    pub fn follow_with_output(
        &mut self,
        command: &[String],
        output: WorkloadOutput,
        pids: &[u32],
    ) -> anyhow::Result<Followed> {
        Followed::spawn(&mut self.ebpf, command, output, pids)
    }

    /// What the kernel's run-time statistics say the run's programs have cost so far: zero
    /// unless they are on (`BPF_ENABLE_STATS`, which `hotprof top` holds while it runs).
    pub fn programs_run_time(&self) -> anyhow::Result<ProgramsRunTime> {
        let mut total = ProgramsRunTime::default();
        for (name, program) in self.ebpf.programs() {
            let info = match program.info() {
                // The object's programs this run did not need.
                Err(aya::programs::ProgramError::NotLoaded) => continue,
                info => info
                    .with_context(|| format!("cannot read the kernel's info on program {name}"))?,
            };
            total.programs += 1;
            total.run_time += info.run_time();
            total.run_count += info.run_count();
        }
        Ok(total)
    }

    /// A watcher of the probed functions' modules, and of modules loaded later that the
    /// globs of `probe` would match; `None` for syscalls, or without loadable modules.
    pub fn module_watcher(&self, probe: &ProbeSpec) -> Option<ModuleWatcher> {
        if self.targets.is_empty() {
            return None;
        }
        let asked = probe.targets.functions().iter().chain(&probe.children);
        ModuleWatcher::new(&self.targets, asked.map(String::as_str))
    }

    /// Saves the mappings of the traced processes now.
    pub fn poll_maps(&self, maps: &mut MapsWatcher) {
        maps.poll(&self.ebpf);
    }

    /// The cumulative totals now.
    pub fn snapshot(&self) -> anyhow::Result<Snapshot> {
        collect::snapshot(
            &self.ebpf,
            self.layout.probed.len(),
            self.layout.pmu_events.len(),
        )
    }

    /// [`Run::snapshot`] with the calls in flight counted, and the calls the kernel missed.
    pub fn snapshot_in_flight(&mut self) -> anyhow::Result<(Snapshot, u64)> {
        let mut snapshot = self.snapshot().context("cannot read the maps")?;
        snapshot.open_frames = collect::open_frames(&mut self.ebpf, self.layout.task_store)
            .context("cannot count the calls in flight")?
            + snapshot.session_calls();
        Ok((snapshot, self.kernel_missed()))
    }

    /// A recording of `snapshot` (cumulative or one part's delta) over `elapsed`.
    pub fn recording(&self, snapshot: &Snapshot, elapsed: Duration) -> Recording {
        self.layout.recording(snapshot, elapsed)
    }

    fn kernel_missed(&self) -> u64 {
        attach::recursion_misses(&self.ebpf) + attach::link_misses(&self.links)
    }

    /// Takes the last reads, detaches every probe, then calibrates: the run's probes must not
    /// be in the calibration's figures.
    pub fn finish(mut self) -> anyhow::Result<Finished> {
        let (snapshot, samples) = if self.sampled_cpus > 0 {
            (collect::snapshot(&self.ebpf, 0, 0)?, Some(self.samples()?))
        } else {
            let snapshot = collect::final_snapshot(
                &mut self.ebpf,
                self.layout.probed.len(),
                self.layout.pmu_events.len(),
                self.layout.task_store,
            )?;
            (snapshot, None)
        };
        let kernel_missed = self.kernel_missed();
        let stacks = if self.stacks && self.sampled_cpus == 0 {
            Some(collect::stacks(&self.ebpf)?)
        } else {
            None
        };
        let slowest = if self.slowest {
            Some(self.slowest_calls()?)
        } else {
            None
        };
        let Run {
            ebpf,
            links,
            layout,
            targets,
            calibration,
            ..
        } = self;
        drop(links);
        drop(ebpf);
        let detached = Instant::now();
        let overhead = calibration.and_then(|c| c.measure_or_note());
        Ok(Finished {
            layout,
            targets,
            snapshot,
            kernel_missed,
            detached,
            overhead,
            stacks,
            slowest,
            samples,
        })
    }

    fn slowest_calls(&self) -> anyhow::Result<SlowestCalls> {
        let calls = collect::slowest(&self.ebpf, self.layout.probed.len())?;
        let ids: BTreeSet<i32> = calls.iter().map(|(_, call)| call.kernel_stack).collect();
        let frames = ids
            .into_iter()
            .map(|id| (id, collect::stack_frames(&self.ebpf, id)))
            .collect();
        Ok(SlowestCalls { calls, frames })
    }

    fn samples(&self) -> anyhow::Result<Vec<CollectedStack>> {
        let samples: PerCpuHashMap<&MapData, StackKey, StackTotals> = PerCpuHashMap::try_from(
            self.ebpf
                .map(names::SAMPLES)
                .context("SAMPLES map missing")?,
        )?;
        collect::resolve_stacks(&self.ebpf, samples.iter())
    }
}
