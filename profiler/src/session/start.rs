//! Starting the run: resolving the targets, loading the eBPF object and attaching its
//! programs.

use anyhow::{Context as _, bail};
use profiler_common::StackCapture;

use super::error::SpecError;
use super::keys::KeyNames;
use super::plan;
use super::spec::{Filters, Probed, SessionSpec, Targets};
use crate::attach::{self, AttachedMode, LinkKind, Mode, ProbeConfig, TracepointOffsets};
use crate::model::{FilterExpr, TaskStore};
use crate::progress::Progress;
use crate::resolve;
use crate::resolve::callsites::KernelCode;
use crate::resolve::kcore::Kcore;

/// The probes of one invocation, loaded and attached: what [`super::Run`] is made of.
pub(super) struct Attached {
    pub ebpf: aya::Ebpf,
    /// kprobe mode's links, owned apart from `ebpf` so they close in parallel.
    pub links: attach::RunLinks,
    pub probed: Vec<Probed>,
    pub targets: Vec<resolve::Target>,
    pub mode: AttachedMode,
    /// Where the loaded object keeps per-task state (what this kernel can create).
    pub task_store: TaskStore,
    /// What measuring the probe overhead needs, unless `--no-calibrate`.
    pub calibration: Option<crate::calibrate::Calibration>,
    /// How the `--by` keys read.
    pub keys: KeyNames,
}

/// Loads the eBPF object for `config`, the one error line saying why not.
fn load(config: &ProbeConfig) -> anyhow::Result<attach::Loaded> {
    attach::load(config).map_err(|e| anyhow::anyhow!("cannot load the eBPF programs: {e}"))
}

/// Resolves the targets, loads the programs with the spec's filters and attaches them; times
/// the calibration's baseline first (unless asked not to calibrate), so that the overhead
/// can be measured later ([`Attached::calibration`]).
pub(super) fn attach(spec: &SessionSpec, filter: &Filters) -> anyhow::Result<Attached> {
    // SIGINT/SIGTERM until the run's own handling takes over: noted, then reported at the
    // next attach step with what was done, everything attached so far detached.
    let _signals = attach::AttachSignals::catch();
    let probe = &spec.probe;
    let tracefs = resolve::tracefs_root();

    let mut notes = Vec::new();
    let planned = match &probe.targets {
        Targets::Functions(requested) => {
            let functions =
                crate::resolve::kernel_functions().context("cannot read /proc/kallsyms")?;
            let btf = attach::kernel_btf().ok();
            let kernel = plan::Kernel {
                functions: &functions,
                in_btf: &|name| btf.as_ref().is_some_and(|b| b.function(name).is_some()),
                kprobe_at_entry: &attach::ask_kernel,
                code: &|| Ok(KernelCode::read(&functions, &Kcore::open()?)?),
            };
            let planned = plan::functions(probe, requested, &kernel, &mut notes);
            for note in &notes {
                eprintln!("hotprof: note: {note}");
            }
            (planned?, Some(functions))
        }
        _ => {
            if tracefs.is_none() {
                return Err(SpecError::SyscallsNeedTracefs.into());
            }
            (plan::syscalls(probe.targets.syscalls()), None)
        }
    };
    let (
        plan::ProbePlan {
            mut probed,
            targets,
            sites,
        },
        kernel,
    ) = planned;

    let follow = !spec.command.is_empty();
    // Read whenever there is a tracefs (the hash-map object reads `sched_process_free`'s pid
    // in every run); unreadable is only an error where the offsets matter most.
    let offsets = match tracefs.as_deref().map(TracepointOffsets::read) {
        Some(Ok(offsets)) => Some(offsets),
        Some(Err(error)) if follow || spec.off_cpu => bail!(error),
        _ => None,
    };
    let config = ProbeConfig {
        functions: probed.len() as u32,
        filter_tgids: follow || !probe.filter.pids.is_empty(),
        exclude_tgid: Some(std::process::id()),
        tid: probe.filter.tid,
        cpu: probe.filter.cpu,
        cgroup_id: filter.cgroup_id,
        comm: filter.comm,
        min_latency_ns: probe.min_latency.map_or(0, |d| d.as_nanos() as u64),
        off_cpu: spec.off_cpu,
        capture_stacks: spec.stacks,
        stack_sample_every: spec.stack_sample_every,
        stack_map_size: spec.stack_map_size,
        offsets,
        by: probe.by.codes(),
        max_keys: probe.max_keys,
        slowest: spec.slowest,
        conditions: probe
            .condition
            .as_ref()
            .map(FilterExpr::conditions)
            .unwrap_or_default(),
        condition_comm: probe
            .condition
            .as_ref()
            .map(FilterExpr::comm)
            .unwrap_or_default(),
        child_slots: child_slots(&probed)?,
        sampling: spec.sample_inside,
        sample_inside: spec.sample_inside,
        pmu_events: spec.pmu_events.clone(),
        main_object: false,
    };
    // Before loading: a machine whose PMU lacks an event says so before anything is attached.
    let pmu = attach::PmuCounters::open(&spec.pmu_events)?;
    let keys = KeyNames::new(probe.by.clone())?;
    // Timed before anything is attached: the run's own probes must not be in the baseline.
    let calibration_baseline = probe.calibrate.then(|| {
        let symbols: Vec<&str> = targets.iter().map(|t| t.symbol.as_str()).collect();
        // Call-site mode when no function is timed at its entry.
        let at_call_sites = !sites.is_empty() && targets.len() == sites.len();
        crate::calibrate::baseline(&symbols, probe.targets.syscalls(), at_call_sites)
    });
    let attach::Loaded {
        mut ebpf,
        task_store,
    } = load(&config)?;
    pmu.install(&ebpf)?;
    drop(pmu);
    let mut links = attach::RunLinks::default();
    let entries = targets.len() - sites.len();
    attach::AttachSignals::check("probes", 0, probed.len())?;
    // Before the probes: a task that opens a frame must find its exit hook in place (with the
    // hash-map store, a task gone in between left its entry, counted in flight, forever).
    attach::attach_tracking(&mut ebpf, task_store, spec.off_cpu, follow)?;
    let mode = if targets.is_empty() {
        let (mode, note) = attach::attach_syscalls_in(
            &mut ebpf,
            probe.targets.syscalls(),
            tracefs.as_deref().unwrap_or(std::path::Path::new("")),
            probe.syscall_mode,
            follow || !probe.filter.pids.is_empty(),
        )?;
        if let Some(note) = note {
            eprintln!("hotprof: note: {note}");
        }
        mode
    } else {
        if probe.mode == Mode::Kprobe && !attach::kprobes_available() {
            return Err(attach::AttachError::NoKprobes {
                release: crate::kernel_release(),
                fentry: None,
            }
            .into());
        }
        let site_count: usize = sites.iter().map(Vec::len).sum();
        if let Err(err) = attach::raise_fd_limit(entries + 2 * site_count) {
            eprintln!("hotprof: note: could not raise the open-file limit: {err}");
        }
        let mut progress = Progress::stderr();
        let mut mode = AttachedMode::Callsite;
        if entries > 0 {
            let attached = attach::attach_functions_with(
                &mut ebpf,
                &targets[..entries],
                probe.mode,
                mechanisms(spec, entries, sites.len()),
                &mut progress,
            )?;
            for note in attached.notes {
                eprintln!("hotprof: note: {note}");
            }
            for (probed, kind) in probed.iter_mut().zip(attached.kinds) {
                probed.link = kind;
            }
            links = attached.links;
            mode = attached.mode;
        }
        if !sites.is_empty() {
            let at_sites = attach::attach_call_sites(&mut ebpf, &sites, entries, &mut progress)?;
            progress.clear();
            for refused in &at_sites.refused {
                eprintln!("hotprof: note: {refused}; its calls are not counted");
            }
            links.extend(at_sites.links);
        }
        progress.clear();
        mode
    };
    // Calibrated through the link or program the run's functions went through.
    let linked = |kind| probed.iter().any(|p| p.link == kind);
    let mechanisms = attach::Mechanisms {
        kprobe: if linked(LinkKind::Session) {
            attach::KprobeAttach::Session
        } else if linked(LinkKind::Multi) {
            attach::KprobeAttach::Multi
        } else {
            attach::KprobeAttach::Single
        },
        fentry: if linked(LinkKind::Fsession) {
            attach::FentryAttach::Fsession
        } else if linked(LinkKind::TracingMulti) {
            attach::FentryAttach::Multi
        } else {
            attach::FentryAttach::Pairs
        },
    };
    let calibration = calibration_baseline.map(|baseline| crate::calibrate::Calibration {
        baseline,
        mode,
        mechanisms,
        store: task_store,
        kernel,
        run: config.clone(),
    });
    attach::AttachSignals::check_at(|| {
        format!("all {} probes (then calibrating or starting)", probed.len())
    })?;
    Ok(Attached {
        ebpf,
        links,
        probed,
        targets,
        mode,
        task_store,
        calibration,
        keys,
    })
}

/// Loads the object for sampling alone (`hotprof sample` without `--inside`): no function
/// or syscall, only the hooks that follow the workload's tree.
pub(super) fn sampler_only(spec: &SessionSpec) -> anyhow::Result<Attached> {
    let follow = !spec.command.is_empty();
    let offsets = if follow {
        let tracefs =
            resolve::tracefs_root().context("following the workload's children needs tracefs")?;
        Some(TracepointOffsets::read(&tracefs)?)
    } else {
        None
    };
    let config = ProbeConfig {
        functions: 1,
        filter_tgids: follow || !spec.probe.filter.pids.is_empty(),
        exclude_tgid: Some(std::process::id()),
        sampling: true,
        stack_map_size: spec.stack_map_size,
        offsets,
        ..Default::default()
    };
    let attach::Loaded {
        mut ebpf,
        task_store,
    } = load(&config)?;
    attach::attach_tracking(&mut ebpf, task_store, false, follow)?;
    Ok(Attached {
        ebpf,
        links: attach::RunLinks::default(),
        probed: Vec::new(),
        targets: Vec::new(),
        mode: AttachedMode::Sampling,
        task_store,
        calibration: None,
        keys: KeyNames::default(),
    })
}

/// How this run's `entries` functions (and `sites` call sites) are attached: through a
/// session (kprobe mode's kprobe.session link, fentry mode's fsession program), unless the
/// user said otherwise (`--no-kprobe-session`, `--no-kprobe-multi`, `--no-fsession`), only
/// when no call needs a frame — one function timed at its entry, no nesting to see, nothing
/// kept per call but its entry time; else the kprobe.multi link and fentry/fexit pairs.
fn mechanisms(spec: &SessionSpec, entries: usize, sites: usize) -> attach::Mechanisms {
    let probe = &spec.probe;
    let frameless = entries == 1
        && sites == 0
        && probe.children.is_empty()
        && probe.by.is_empty()
        && probe.condition.is_none()
        && !spec.off_cpu
        && spec.stacks == StackCapture::None
        && spec.slowest == 0
        && spec.pmu_events.is_empty()
        && !spec.sample_inside;
    let chosen = probe.mechanisms;
    attach::Mechanisms {
        kprobe: match chosen.kprobe {
            attach::KprobeAttach::Session if !frameless => attach::KprobeAttach::Multi,
            kprobe => kprobe,
        },
        fentry: match chosen.fentry {
            attach::FentryAttach::Multi => attach::FentryAttach::Multi,
            fentry if frameless => fentry,
            _ => attach::FentryAttach::Pairs,
        },
    }
}

/// The `CHILD_SLOTS` bitmap of `--children`; the probes check it for the first 64 slots.
fn child_slots(probed: &[Probed]) -> anyhow::Result<u64> {
    let mut bits = 0u64;
    for (slot, _) in probed.iter().enumerate().filter(|(_, p)| p.child) {
        if slot >= 64 {
            return Err(SpecError::TooManyChildren.into());
        }
        bits |= 1 << slot;
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_runs_that_need_no_frames_use_a_session() {
        use attach::{FentryAttach, KprobeAttach, Mechanisms};
        let sessions = Mechanisms::default();
        assert_eq!(
            sessions,
            Mechanisms {
                kprobe: KprobeAttach::Session,
                fentry: FentryAttach::Fsession
            }
        );
        let one = SessionSpec::default();
        assert_eq!(mechanisms(&one, 1, 0), sessions);
        // Nesting to see, or a call site (its frames are matched by stack pointer).
        assert_eq!(mechanisms(&one, 2, 0), Mechanisms::WITH_FRAMES);
        assert_eq!(mechanisms(&one, 1, 1), Mechanisms::WITH_FRAMES);
        // Each option that keeps something in a frame.
        let with = |change: fn(&mut SessionSpec)| {
            let mut spec = SessionSpec::default();
            change(&mut spec);
            mechanisms(&spec, 1, 0)
        };
        assert_eq!(with(|s| s.off_cpu = true), Mechanisms::WITH_FRAMES);
        assert_eq!(
            with(|s| s.stacks = StackCapture::Kernel),
            Mechanisms::WITH_FRAMES
        );
        assert_eq!(with(|s| s.slowest = 3), Mechanisms::WITH_FRAMES);
        assert_eq!(with(|s| s.sample_inside = true), Mechanisms::WITH_FRAMES);
        assert_eq!(
            with(|s| s.probe.children = vec!["f".into()]),
            Mechanisms::WITH_FRAMES
        );
        // What the user chose stays: perf kprobes, the kprobe.multi link, fentry pairs.
        assert_eq!(
            with(|s| s.probe.mechanisms.kprobe = KprobeAttach::Single).kprobe,
            KprobeAttach::Single
        );
        let multi = with(|s| s.probe.mechanisms.kprobe = KprobeAttach::Multi);
        assert_eq!(
            (multi.kprobe, multi.fentry),
            (KprobeAttach::Multi, FentryAttach::Fsession)
        );
        let pairs = with(|s| s.probe.mechanisms.fentry = FentryAttach::Pairs);
        assert_eq!(
            (pairs.kprobe, pairs.fentry),
            (KprobeAttach::Session, FentryAttach::Pairs)
        );
    }
}
