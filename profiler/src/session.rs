//! What every long-running command shares (`hotprof` itself, `serve`, `sample`): checking the
//! request against the system, loading and attaching the probes, starting, following and
//! reaping the workload, and the signals that end a run. Built from plain domain structs
//! ([`SessionSpec`]); the command layer turns its arguments into them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use aya::maps::HashMap;
use profiler_common::{KPROBE_SLOTS, StackCapture};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::task::JoinHandle;

use crate::attach::{self, AttachedMode, Mode, ProbeConfig, TracepointOffsets};
use crate::collect::Snapshot;
use crate::flame::{KernelSymbolizer, SavedMaps};
use crate::model::{
    ByField, CallerRecord, FilterExpr, FilterRecord, FunctionRecord, FunctionTotals, KeyRecord,
    KeySpec, Recording, SCHEMA_VERSION, SlowCallRecord, TaskStore,
};
use crate::progress::Progress;
use crate::resolve::callsites::{CallSite, KernelCode};
use crate::resolve::kcore::Kcore;
use crate::resolve::{self, KernelFunctions};
use crate::workload::Workload;

/// How long a workload told to stop may take before it is killed.
const WORKLOAD_STOP_GRACE: Duration = Duration::from_secs(5);

/// What to probe and whose calls count.
#[derive(Clone, Debug, Default)]
pub struct ProbeSpec {
    /// Kernel functions or globs (`--fn`).
    pub functions: Vec<String>,
    /// Syscalls, timed at their tracepoints (`--syscall`).
    pub syscalls: Vec<String>,
    /// Which tracepoints time them (`--syscall-mode`).
    pub syscall_mode: attach::SyscallMode,
    pub mode: Mode,
    /// How kprobe mode attaches (`--no-kprobe-session`: the kprobe.multi link's frames;
    /// `--no-kprobe-multi`: a perf kprobe per function).
    pub kprobe_attach: attach::KprobeAttach,
    /// Calls faster than this are only counted.
    pub min_latency: Option<Duration>,
    /// Measure the probes' own cost per call at start-up.
    pub calibrate: bool,
    /// Only call sites in callers matching this glob (call-site mode).
    pub callers: Option<String>,
    /// `--children`: functions (or globs) timed only inside the one `--fn` parent.
    pub children: Vec<String>,
    /// Most functions `--fn` may match.
    pub max_functions: usize,
    /// `--by`: the fields each call is also keyed by (empty: none).
    pub by: KeySpec,
    /// `--by`: distinct keys each CPU keeps.
    pub max_keys: u32,
    /// `--filter`: only calls that satisfy it are recorded.
    pub condition: Option<FilterExpr>,
    pub filter: FilterSpec,
}

/// Whose calls count, as the user named them.
#[derive(Clone, Debug, Default)]
pub struct FilterSpec {
    pub pids: Vec<u32>,
    pub tid: Option<u32>,
    /// A command name, as in `/proc/PID/comm`.
    pub comm: Option<String>,
    /// A cgroup v2 directory.
    pub cgroup: Option<PathBuf>,
    pub cpu: Option<u32>,
}

/// Everything a long-running command attaches for.
#[derive(Clone, Debug, Default)]
pub struct SessionSpec {
    pub probe: ProbeSpec,
    /// Account time switched out inside each call.
    pub off_cpu: bool,
    pub stacks: StackCapture,
    /// `--stacks-every N`: walk the stacks of a random 1 in N calls (0 or 1: every call).
    pub stack_sample_every: u32,
    /// Distinct stacks the kernel maps hold.
    pub stack_map_size: u32,
    /// The workload to run and follow (empty: none).
    pub command: Vec<String>,
    /// `--slowest N`: the slowest calls kept per function (0: none).
    pub slowest: u32,
    /// `hotprof sample --inside F`: load for sampling too, only inside the probed frames.
    pub sample_inside: bool,
}

/// The filters as the probes compare them.
pub struct Filters {
    cgroup_id: Option<u64>,
    comm: Option<[u8; 16]>,
}

/// One probed function or syscall, or one call site of a function: what the user asked for
/// and what was attached. Each is one slot of the per-function maps.
pub struct Probed {
    pub name: String,
    pub symbol: String,
    /// The call site (`caller+0xoff`) this slot times, in call-site mode. A function's
    /// sites are consecutive slots.
    pub site: Option<String>,
    /// `--children`: timed only inside the parent's frames.
    pub child: bool,
    /// Attached through kprobe mode's kprobe.multi or kprobe.session link (an fprobe, not a
    /// perf kprobe).
    pub multi_link: bool,
    /// Attached through kprobe mode's kprobe.session link (no frames).
    pub session_link: bool,
}

/// The probes of one invocation, loaded and attached. Dropping `links` and `ebpf` detaches and
/// unloads everything.
pub struct Attached {
    pub ebpf: aya::Ebpf,
    /// kprobe mode's links, owned apart from `ebpf` so they close in parallel.
    pub links: attach::KprobeLinks,
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

/// How `--by` keys read in a report: the fields, and the kernel's symbols to name callers.
#[derive(Debug, Default)]
pub struct KeyNames {
    pub spec: KeySpec,
    symbols: Option<KernelSymbolizer>,
}

impl KeyNames {
    /// Reads the kernel's symbols when callers are to be named.
    pub fn new(spec: KeySpec) -> anyhow::Result<Self> {
        let symbols = if spec.fields().contains(&ByField::Caller) {
            Some(KernelSymbolizer::from_system().context("--by caller names callers")?)
        } else {
            None
        };
        Ok(Self { spec, symbols })
    }

    /// The printed values of `key`. A call-site slot's caller is its site (its kprobe sits
    /// on the `call`, where the stack holds no return address of this call).
    fn values(&self, key: &profiler_common::ByKey, site: Option<&str>) -> Vec<String> {
        self.spec
            .fields()
            .iter()
            .zip(key.values)
            .map(|(&field, raw)| match field {
                ByField::Caller => match (site, &self.symbols) {
                    (Some(site), _) => site.to_owned(),
                    (None, Some(symbols)) => match symbols.symbolize(raw) {
                        Some((name, offset, None)) => format!("{name}+{offset:#x}"),
                        Some((name, offset, Some(module))) => {
                            format!("{name}+{offset:#x} [{module}]")
                        }
                        None => format!("{raw:#x}"),
                    },
                    (None, None) => format!("{raw:#x}"),
                },
                ByField::Comm => {
                    let end = key.comm.iter().position(|&b| b == 0).unwrap_or(16);
                    String::from_utf8_lossy(&key.comm[..end]).into_owned()
                }
                other => other.describe(raw),
            })
            .collect()
    }
}

/// Fails unless the run names either processes (`-p`) or a command, not both.
pub fn check_processes(pids: &[u32], command: &[String]) -> anyhow::Result<()> {
    if !command.is_empty() && !pids.is_empty() {
        bail!("give either -p/--pid or a command after --, not both");
    }
    Ok(())
}

/// Checks the request against the system before anything is loaded, so a typo costs nothing;
/// returns the filters as the probes compare them.
pub fn validate(spec: &SessionSpec) -> anyhow::Result<Filters> {
    let probe = &spec.probe;
    if probe.functions.is_empty() && probe.syscalls.is_empty() {
        bail!("nothing to measure: give --fn FUNC or --syscall NAME (see hotprof --help)");
    }
    if !probe.functions.is_empty() && !probe.syscalls.is_empty() {
        bail!("--fn and --syscall cannot be combined in one run");
    }
    check_processes(&probe.filter.pids, &spec.command)?;
    if !probe.syscalls.is_empty() && probe.by.fields().contains(&ByField::Caller) {
        bail!("--by caller needs --fn: a syscall's caller is user space");
    }
    if !probe.syscalls.is_empty()
        && probe
            .condition
            .as_ref()
            .is_some_and(FilterExpr::reads_caller)
    {
        bail!("--filter on caller needs --fn: a syscall's caller is user space");
    }
    if !probe.by.is_empty() && probe.max_keys == 0 {
        bail!("--max-keys must be at least 1");
    }
    validate_filters(&probe.filter)
}

/// Checks what must hold once the command's own options are checked: the workload can be run
/// and hotprof may load BPF programs.
pub fn check_system(command: &[String]) -> anyhow::Result<()> {
    if let Some(program) = command.first() {
        crate::workload::check_runnable(program)?;
    }
    attach::check_privileges()?;
    Ok(())
}

/// Fails unless `pid` (`-p`) is a running process other than this hotprof.
pub fn check_pid(pid: u32) -> anyhow::Result<()> {
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        bail!("no process with pid {pid}");
    }
    // The probes never see hotprof's own calls: they take a traced process tree not to hold
    // it (`wanted_task` in the eBPF programs).
    if pid == std::process::id() {
        bail!("-p {pid} is this hotprof itself, whose own calls are never traced");
    }
    Ok(())
}

/// Checks filter arguments against the system, turning them into what the probes compare.
fn validate_filters(filter: &FilterSpec) -> anyhow::Result<Filters> {
    for &pid in &filter.pids {
        check_pid(pid)?;
    }
    if let Some(cpu) = filter.cpu {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        if cpu >= cpus {
            bail!("--cpu {cpu}: this machine has CPUs 0..{}", cpus - 1);
        }
    }
    let comm = match &filter.comm {
        None => None,
        Some(comm) => Some(comm_bytes(comm)?),
    };
    let cgroup_id = match &filter.cgroup {
        None => None,
        Some(path) => {
            use std::os::unix::fs::MetadataExt as _;
            let meta =
                std::fs::metadata(path).with_context(|| format!("--cgroup {}", path.display()))?;
            if !meta.is_dir() {
                bail!("--cgroup {}: not a cgroup directory", path.display());
            }
            Some(meta.ino())
        }
    };
    Ok(Filters { cgroup_id, comm })
}

/// A command name as the kernel keeps it: 1 to 15 bytes, NUL-padded to 16.
fn comm_bytes(comm: &str) -> anyhow::Result<[u8; 16]> {
    if comm.is_empty() || comm.len() > 15 {
        bail!("--comm '{comm}': a command name has 1 to 15 bytes");
    }
    let mut bytes = [0u8; 16];
    bytes[..comm.len()].copy_from_slice(comm.as_bytes());
    Ok(bytes)
}

/// Loads the eBPF object for `config`, the one error line saying why not.
pub fn load(config: &ProbeConfig) -> anyhow::Result<attach::Loaded> {
    attach::load(config).map_err(|e| anyhow::anyhow!("cannot load the eBPF programs: {e}"))
}

/// Resolves the targets, loads the programs with the spec's filters and attaches them; times
/// the calibration's baseline first (unless asked not to calibrate), so that the overhead
/// can be measured later ([`Attached::calibration`]).
pub fn attach(spec: &SessionSpec, filter: Filters) -> anyhow::Result<Attached> {
    // SIGINT/SIGTERM until the run's own handling takes over: noted, then reported at the
    // next attach step with what was done, everything attached so far detached.
    let _signals = attach::AttachSignals::catch();
    let probe = &spec.probe;
    let tracefs = resolve::tracefs_root();

    let mut kernel = None;
    let mut targets = Vec::new();
    let mut sites = Vec::new();
    let mut probed: Vec<Probed> = if !probe.functions.is_empty() {
        let functions =
            kernel.insert(KernelFunctions::from_system().context("cannot read /proc/kallsyms")?);
        let mut requested = resolve_functions(functions, &probe.functions)?;
        check_function_count(requested.len(), probe)?;
        let mut children = std::collections::BTreeSet::new();
        if !probe.children.is_empty() {
            if requested.len() != 1 {
                bail!(
                    "--children times functions inside one parent: give one --fn (it matched {} \
                     functions)",
                    requested.len()
                );
            }
            for (name, target) in resolve_functions(functions, &probe.children)? {
                if requested
                    .iter()
                    .all(|(_, known)| known.symbol != target.symbol)
                {
                    children.insert(target.symbol.clone());
                    requested.push((name, target));
                }
            }
            if children.is_empty() {
                bail!("--children matched only the parent itself");
            }
        }
        let (at_sites, at_entry): (Vec<_>, Vec<_>) =
            requested.into_iter().partition(|(_, target)| {
                let (placement, note) =
                    attach::place(probe.mode, &target.symbol, target.traceable, || {
                        attach::ask_kernel(&target.symbol)
                    });
                if let Some(note) = note {
                    eprintln!("hotprof: note: {note}");
                }
                placement == attach::Placement::CallSites
            });
        if probe.callers.is_some() && at_sites.is_empty() {
            bail!(
                "--callers applies to functions timed at their call sites (--mode callsite, or \
                 a notrace function in auto mode)"
            );
        }
        let mut probed = Vec::new();
        for (name, target) in at_entry {
            probed.push(Probed {
                name,
                symbol: target.symbol.clone(),
                site: None,
                child: children.contains(&target.symbol),
                multi_link: false,
                session_link: false,
            });
            targets.push(target);
        }
        if !at_sites.is_empty() {
            let code = KernelCode::read(functions, &Kcore::open()?)?;
            let mut found = Vec::new();
            for (name, target) in at_sites {
                let covered = covered_sites(&code, &target, probe)?;
                found.push((name, target, covered));
            }
            let budget = (KPROBE_SLOTS as usize).saturating_sub(probed.len());
            let counts: Vec<usize> = found.iter().map(|(_, _, sites)| sites.len()).collect();
            let slots = attach::site_slots(&counts, budget)?;
            for ((name, target, covered), slots) in found.into_iter().zip(slots) {
                for group in attach::group_sites(covered, slots) {
                    let site = match group.as_slice() {
                        [one] => one.label(),
                        more => format!("{} more call sites", more.len()),
                    };
                    probed.push(Probed {
                        name: name.clone(),
                        symbol: target.symbol.clone(),
                        site: Some(site),
                        child: children.contains(&target.symbol),
                        multi_link: false,
                        session_link: false,
                    });
                    // Each site's slot has the function as its target (the stacks' leaf).
                    targets.push(target.clone());
                    sites.push(group);
                }
            }
        }
        probed
    } else {
        if tracefs.is_none() {
            bail!("--syscall needs tracefs (mount -t tracefs tracefs /sys/kernel/tracing)");
        }
        probe
            .syscalls
            .iter()
            .map(|s| Probed {
                name: s.clone(),
                symbol: format!("sys_enter_{s}"),
                site: None,
                child: false,
                multi_link: false,
                session_link: false,
            })
            .collect()
    };

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
        main_object: false,
    };
    let keys = KeyNames::new(probe.by.clone())?;
    // Timed before anything is attached: the run's own probes must not be in the baseline.
    let calibration_baseline = probe.calibrate.then(|| {
        let symbols: Vec<&str> = targets.iter().map(|t| t.symbol.as_str()).collect();
        // Call-site mode when no function is timed at its entry.
        let at_call_sites = !sites.is_empty() && targets.len() == sites.len();
        crate::calibrate::baseline(&symbols, &probe.syscalls, at_call_sites)
    });
    let attach::Loaded {
        mut ebpf,
        task_store,
    } = load(&config)?;
    let mut links = attach::KprobeLinks::default();
    let entries = targets.len() - sites.len();
    attach::AttachSignals::check("probes", 0, probed.len())?;
    // Before the probes: a task that opens a frame must find its exit hook in place (with the
    // hash-map store, a task gone in between left its entry, counted in flight, forever).
    attach::attach_tracking(&mut ebpf, task_store, spec.off_cpu, follow)?;
    let mode = if targets.is_empty() {
        attach::attach_syscalls_in(
            &mut ebpf,
            &probe.syscalls,
            tracefs.as_deref().unwrap_or(std::path::Path::new("")),
            probe.syscall_mode,
            follow || !probe.filter.pids.is_empty(),
        )?
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
                kprobe_attach(spec, entries, sites.len()),
                &mut progress,
            )?;
            for note in attached.notes {
                eprintln!("hotprof: note: {note}");
            }
            for (probed, multi) in probed.iter_mut().zip(attached.multi_linked) {
                probed.multi_link = multi;
                probed.session_link = attached.session;
            }
            links = attached.links;
            mode = attached.mode;
        }
        if !sites.is_empty() {
            let at_sites = attach::attach_call_sites(&mut ebpf, &sites, entries, &mut progress)?;
            links.extend(at_sites);
        }
        progress.clear();
        mode
    };
    // Calibrated through the link when the run's functions went through it.
    let kprobe_attach = if probed.iter().any(|p| p.session_link) {
        attach::KprobeAttach::Session
    } else if probed.iter().any(|p| p.multi_link) {
        attach::KprobeAttach::Multi
    } else {
        attach::KprobeAttach::Single
    };
    let calibration = calibration_baseline.map(|baseline| crate::calibrate::Calibration {
        baseline,
        mode,
        kprobe_attach,
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

/// How kprobe mode attaches this run's `entries` functions (and `sites` call sites): through
/// a kprobe.session link, unless the user said otherwise (`--no-kprobe-session`,
/// `--no-kprobe-multi`), only when no call needs a frame — one function timed at its entry,
/// no nesting to see, nothing kept per call but its entry time; else the kprobe.multi link.
fn kprobe_attach(spec: &SessionSpec, entries: usize, sites: usize) -> attach::KprobeAttach {
    let probe = &spec.probe;
    let frameless = entries == 1
        && sites == 0
        && probe.children.is_empty()
        && probe.by.is_empty()
        && probe.condition.is_none()
        && !spec.off_cpu
        && spec.stacks == StackCapture::None
        && spec.slowest == 0
        && !spec.sample_inside;
    match probe.kprobe_attach {
        attach::KprobeAttach::Session if !frameless => attach::KprobeAttach::Multi,
        chosen => chosen,
    }
}

/// Refuses more functions than `--max-functions` allows, before anything is attached: each
/// gets its own histograms in the kernel and its probes, which for thousands take long to
/// set up (and, as perf kprobes, minutes to attach and detach).
fn check_function_count(matched: usize, probe: &ProbeSpec) -> anyhow::Result<()> {
    if matched <= probe.max_functions {
        return Ok(());
    }
    let what = probe
        .functions
        .iter()
        .map(|f| format!("'{f}'"))
        .collect::<Vec<_>>()
        .join(" ");
    bail!(
        "--fn {what} matches {matched} functions, more than --max-functions {} allows: each \
         gets its own in-kernel histograms and probes (in a 6.12 test guest 1000 functions took \
         14 s to start through the kprobe.multi link, 11 s of it creating the histograms; \
         through a perf kprobe each, as before Linux 5.18, 31 s to attach and 83 s to detach); \
         narrow the glob or pass --max-functions {matched}",
        probe.max_functions
    )
}

/// The `CHILD_SLOTS` bitmap of `--children`; the probes check it for the first 64 slots.
fn child_slots(probed: &[Probed]) -> anyhow::Result<u64> {
    let mut bits = 0u64;
    for (slot, _) in probed.iter().enumerate().filter(|(_, p)| p.child) {
        if slot >= 64 {
            bail!(
                "--children: at most 63 child functions and call sites per run (narrow the glob)"
            );
        }
        bits |= 1 << slot;
    }
    Ok(bits)
}

/// kprobe mode's label for the functions timed at their entry, by how they were attached.
fn kprobe_label<'a>(entries: impl Iterator<Item = &'a Probed>) -> &'static str {
    let (mut multi, mut single) = (false, false);
    for probed in entries {
        if probed.session_link {
            return "kprobe.session";
        }
        if probed.multi_link {
            multi = true;
        } else {
            single = true;
        }
    }
    match (multi, single) {
        (true, true) => "kprobe.multi+kprobe",
        (true, false) => "kprobe.multi",
        (false, _) => "kprobe",
    }
}

/// Resolves every `--fn` argument: what the user called each target, and the target, each
/// symbol once.
fn resolve_functions(
    functions: &KernelFunctions,
    requested: &[String],
) -> anyhow::Result<Vec<(String, resolve::Target)>> {
    let btf = attach::kernel_btf().ok();
    let in_btf = |name: &str| btf.is_some_and(|b| b.function(name).is_some());
    let mut resolved: Vec<(String, resolve::Target)> = Vec::new();
    for request in requested {
        for target in functions.resolve(request, &in_btf)? {
            if let Some(note) = &target.note {
                eprintln!("hotprof: note: {note}");
            }
            if resolved.iter().any(|(_, t)| t.symbol == target.symbol) {
                continue;
            }
            let name = if resolve::is_glob(request) {
                target.symbol.clone()
            } else {
                request.clone()
            };
            resolved.push((name, target));
        }
    }
    Ok(resolved)
}

/// The sites of `target` that can be timed (a note says how many of all), or one line saying
/// why there are none.
fn covered_sites(
    code: &KernelCode,
    target: &resolve::Target,
    probe: &ProbeSpec,
) -> anyhow::Result<Vec<CallSite>> {
    let function = &target.symbol;
    let sites = code.call_sites(target.address, probe.callers.as_deref());
    if sites.covered.is_empty() {
        let all = code.call_sites(target.address, None);
        match &probe.callers {
            Some(glob) if !all.covered.is_empty() => bail!(
                "--callers '{glob}' matches no caller of {function} (it has {} call sites in {} \
                 callers; `hotprof list {function}` counts them)",
                all.covered.len(),
                all.callers()
            ),
            _ if all.covered.is_empty() && all.skipped.is_empty() => bail!(
                "{function} has no direct callers in the kernel's code: nothing to time at call \
                 sites (it is called through function pointers only, or not at all)"
            ),
            _ => bail!("no call site of {function} can be timed: {}", all.summary()),
        }
    }
    let why = if probe.mode == Mode::Callsite {
        String::new()
    } else {
        " has no ftrace location (notrace): the kernel refuses a kprobe at its entry, and \
         fentry too;"
            .into()
    };
    eprintln!(
        "hotprof: note: {function}{why} timing it at its call sites ({} in {} callers): {}",
        sites.covered.len(),
        sites.callers(),
        sites.summary()
    );
    Ok(sites.covered)
}

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
    /// Spawns `command` (if any) held at its gate, and has the probes follow it, or the `pids`
    /// when there is no command.
    pub fn spawn(ebpf: &mut aya::Ebpf, command: &[String], pids: &[u32]) -> anyhow::Result<Self> {
        let workload = if command.is_empty() {
            None
        } else {
            Some(Workload::spawn(command)?)
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

/// SIGINT and SIGTERM, held for the whole run so neither ends hotprof before it detaches.
pub struct Signals {
    int: Signal,
    term: Signal,
}

impl Signals {
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// The next SIGINT or SIGTERM: the signal's number.
    pub async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
        }
    }
}

/// What stays the same across the runs and reports of one invocation.
pub struct Session<'a> {
    pub probed: &'a [Probed],
    pub mode: AttachedMode,
    pub task_store: TaskStore,
    pub overhead: Option<crate::calibrate::Overhead>,
    pub off_cpu: bool,
    pub command: &'a [String],
    pub keys: &'a KeyNames,
    /// `--filter`, if any.
    pub condition: Option<&'a FilterExpr>,
}

impl Session<'_> {
    /// A recording of `snapshot` (cumulative or one run's delta) over `elapsed`.
    pub fn recording(&self, snapshot: &Snapshot, elapsed: Duration) -> Recording {
        let mut functions = Vec::new();
        for slots in self.function_slots() {
            let end = slots.end.min(snapshot.functions.len());
            if slots.start >= end {
                break;
            }
            let slots = slots.start..end;
            let probed = &self.probed[slots.start];
            let totals = &snapshot.functions[slots.clone()];
            if probed.site.is_none() {
                let mut record = self.function(probed, &totals[0]);
                self.add_keys(&mut record, snapshot, slots);
                functions.push(record);
                continue;
            }
            // A function's call sites: one record for all, one row each.
            let mut all = totals[0].clone();
            totals[1..].iter().for_each(|more| all.absorb(more));
            let mut record = self.function(probed, &all);
            self.add_keys(&mut record, snapshot, slots.clone());
            record.callers = self.probed[slots]
                .iter()
                .zip(totals)
                .filter_map(|(slot, totals)| {
                    let site = slot.site.clone()?;
                    Some(CallerRecord::of(site, &self.function(probed, totals)))
                })
                .collect();
            record
                .callers
                .sort_by(|a, b| b.sum_ns.cmp(&a.sum_ns).then_with(|| a.site.cmp(&b.site)));
            functions.push(record);
        }
        Recording {
            schema_version: SCHEMA_VERSION,
            tool: format!("hotprof {}", env!("CARGO_PKG_VERSION")),
            kernel: crate::kernel_release(),
            mode: self.mode_label(),
            task_store: Some(self.task_store),
            duration_ns: elapsed.as_nanos() as u64,
            by: self.keys.spec.names(),
            filter: self.condition.map(|condition| FilterRecord {
                expression: condition.text().to_owned(),
                not_matched: snapshot.counter(profiler_common::Counter::FilteredOut),
            }),
            command: self.command.to_vec(),
            functions,
            losses: snapshot.losses(),
            probe_overhead_ns: self.overhead.map(|o| o.per_call_ns),
            probe_bias_ns: self.overhead.map(|o| o.in_window_ns),
            runs: Vec::new(),
            intervals: Vec::new(),
        }
    }

    /// What is attached, for the line saying the run has started:
    /// `2 function(s) attached (fentry+callsite mode, 3 call sites)`.
    pub fn attached(&self) -> String {
        let mut symbols: Vec<&str> = self.probed.iter().map(|p| p.symbol.as_str()).collect();
        symbols.dedup();
        let what = if matches!(self.mode, AttachedMode::Syscall | AttachedMode::RawSyscall) {
            "syscall(s)"
        } else {
            "function(s)"
        };
        let sites = match self.probed.iter().filter(|p| p.site.is_some()).count() {
            0 => String::new(),
            sites => format!(", {sites} call sites"),
        };
        format!(
            "{} {what} attached ({} mode{sites})",
            symbols.len(),
            self.mode_label()
        )
    }

    /// The mode as the report names it: `fentry+callsite` when some functions are timed at
    /// their entry and others at their call sites; in kprobe mode `kprobe.multi` for the
    /// functions attached through the kprobe.multi link, `kprobe` for perf kprobes, and
    /// `kprobe.multi+kprobe` when some are each.
    pub fn mode_label(&self) -> String {
        let sites = self.probed.iter().any(|p| p.site.is_some());
        let mechanism = if self.mode == AttachedMode::Kprobe {
            kprobe_label(self.probed.iter().filter(|p| p.site.is_none()))
        } else {
            self.mode.as_str()
        };
        if sites && self.mode != AttachedMode::Callsite {
            format!("{mechanism}+callsite")
        } else {
            mechanism.to_owned()
        }
    }

    /// The `--by` rows of the function whose slots are `slots`, busiest first: equal keys
    /// of its call sites merged. `--by caller` alone fills the per-caller table instead
    /// (call-site functions have theirs already).
    fn add_keys(
        &self,
        record: &mut FunctionRecord,
        snapshot: &Snapshot,
        slots: std::ops::Range<usize>,
    ) {
        if self.keys.spec.is_empty() {
            return;
        }
        let mut merged: Vec<(Vec<String>, FunctionTotals)> = Vec::new();
        for keyed in &snapshot.keys {
            let slot = keyed.key.func as usize;
            if !slots.contains(&slot) {
                continue;
            }
            let site = self.probed[slot].site.as_deref();
            let values = self.keys.values(&keyed.key, site);
            match merged.iter_mut().find(|(known, _)| *known == values) {
                Some((_, totals)) => totals.absorb(&keyed.totals),
                None => merged.push((values, keyed.totals.clone())),
            }
        }
        let probed = &self.probed[slots.start];
        let mut rows: Vec<KeyRecord> = merged
            .into_iter()
            .map(|(values, totals)| KeyRecord::of(values, &self.function(probed, &totals)))
            .collect();
        rows.sort_by(|a, b| b.sum_ns.cmp(&a.sum_ns).then_with(|| a.key.cmp(&b.key)));
        if !self.keys.spec.is_caller_only() {
            record.keys = rows;
        } else if record.callers.is_empty() {
            record.callers = rows
                .into_iter()
                .map(|row| CallerRecord {
                    site: row.label(),
                    count: row.count,
                    sum_ns: row.sum_ns,
                    p50_ns: row.p50_ns,
                    p99_ns: row.p99_ns,
                })
                .collect();
        }
    }

    /// Adds the slowest calls (`--slowest`, `calls` slowest first, as read from the kernel)
    /// to their functions in `recording`, `n` per function. `started_ns` is CLOCK_MONOTONIC
    /// when measuring started; `stack` names the frames of a slot's kernel stack id.
    pub fn add_slowest(
        &self,
        recording: &mut Recording,
        calls: &[(u32, profiler_common::SlowCall)],
        n: usize,
        started_ns: u64,
        stack: impl Fn(u32, i32) -> Vec<String>,
    ) {
        let function_of = self.function_of_slots();
        for (slot, call) in calls {
            let Some(&index) = function_of.get(*slot as usize) else {
                continue;
            };
            let Some(function) = recording.functions.get_mut(index) else {
                continue;
            };
            if function.slowest.len() >= n {
                continue;
            }
            let key = profiler_common::ByKey {
                values: call.key,
                comm: call.comm,
                ..Default::default()
            };
            let site = self.probed[*slot as usize].site.as_deref();
            let end = call.comm.iter().position(|&b| b == 0).unwrap_or(16);
            function.slowest.push(SlowCallRecord {
                at_ns: call.entry_ns.saturating_sub(started_ns),
                duration_ns: call.duration_ns,
                off_cpu_ns: self.off_cpu.then_some(call.off_cpu_ns),
                cpu: call.cpu,
                pid: (call.pid_tgid >> 32) as u32,
                tid: call.pid_tgid as u32,
                comm: String::from_utf8_lossy(&call.comm[..end]).into_owned(),
                key: self.keys.values(&key, site),
                stack: stack(*slot, call.kernel_stack),
            });
        }
    }

    /// Notes on each function of `recording` how its stacks were taken (`--stacks`): a random
    /// 1 in `every` calls walked, `walked` of them per slot.
    pub fn add_stack_sampling(&self, recording: &mut Recording, walked: &[u64], every: u32) {
        let function_of = self.function_of_slots();
        crate::report::stacks::note_sampling(recording, &function_of, walked, every);
    }

    /// The slots of each function of a recording, in order: one slot, or a function's
    /// consecutive call sites (one record for all of them).
    fn function_slots(&self) -> Vec<std::ops::Range<usize>> {
        let mut functions: Vec<std::ops::Range<usize>> = Vec::new();
        for (slot, probed) in self.probed.iter().enumerate() {
            let joins_previous = slot > 0
                && probed.site.is_some()
                && self.probed[slot - 1].site.is_some()
                && self.probed[slot - 1].symbol == probed.symbol;
            match functions.last_mut() {
                Some(last) if joins_previous => last.end = slot + 1,
                _ => functions.push(slot..slot + 1),
            }
        }
        functions
    }

    /// The index in `recording.functions` of each slot's function.
    fn function_of_slots(&self) -> Vec<usize> {
        self.function_slots()
            .into_iter()
            .enumerate()
            .flat_map(|(index, slots)| slots.map(move |_| index))
            .collect()
    }

    fn function(&self, probed: &Probed, totals: &FunctionTotals) -> FunctionRecord {
        let mut record =
            FunctionRecord::from_aggregates(probed.name.clone(), probed.symbol.clone(), totals);
        if probed.child {
            record.child_of = self
                .probed
                .iter()
                .find(|p| !p.child)
                .map(|parent| parent.name.clone());
        }
        record.on_cpu_sum_ns = self.off_cpu.then_some(totals.on_cpu_sum_ns);
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(functions: &[&str], syscalls: &[&str]) -> SessionSpec {
        SessionSpec {
            probe: ProbeSpec {
                functions: functions.iter().map(|s| s.to_string()).collect(),
                syscalls: syscalls.iter().map(|s| s.to_string()).collect(),
                ..ProbeSpec::default()
            },
            ..SessionSpec::default()
        }
    }

    #[test]
    fn a_glob_matching_more_than_max_functions_is_refused_naming_the_count() {
        let mut probe = ProbeSpec {
            functions: vec!["vfs_*".into()],
            max_functions: 3,
            ..ProbeSpec::default()
        };
        assert!(check_function_count(3, &probe).is_ok());
        let refused = check_function_count(40, &probe).unwrap_err().to_string();
        assert!(
            refused.starts_with("--fn 'vfs_*' matches 40 functions, more than --max-functions 3"),
            "{refused}"
        );
        assert!(refused.ends_with("pass --max-functions 40"), "{refused}");
        probe.max_functions = 40;
        assert!(check_function_count(40, &probe).is_ok());
    }

    fn error(result: anyhow::Result<Filters>) -> String {
        match result {
            Ok(_) => panic!("accepted"),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn something_to_measure_and_only_one_kind() {
        assert!(error(validate(&spec(&[], &[]))).starts_with("nothing to measure"));
        assert!(error(validate(&spec(&["vfs_read"], &["getpid"]))).contains("cannot be combined"));
        assert!(validate(&spec(&["vfs_read"], &[])).is_ok());
    }

    #[test]
    fn pids_or_a_command_not_both() {
        let mut both = spec(&["vfs_read"], &[]);
        both.probe.filter.pids = vec![1];
        both.command = vec!["true".into()];
        assert!(error(validate(&both)).contains("either -p/--pid or a command"));
        assert!(check_processes(&[1], &[]).is_ok());
        assert!(check_processes(&[], &["true".into()]).is_ok());
    }

    #[test]
    fn filters_are_checked_against_the_system() {
        let mut no_pid = spec(&["vfs_read"], &[]);
        no_pid.probe.filter.pids = vec![u32::MAX];
        assert!(error(validate(&no_pid)).contains("no process with pid"));
        // The probes take hotprof never to be in the traced process tree.
        let mut itself = spec(&["vfs_read"], &[]);
        itself.probe.filter.pids = vec![std::process::id()];
        assert!(error(validate(&itself)).contains("is this hotprof itself"));
        let mut cpu = spec(&["vfs_read"], &[]);
        cpu.probe.filter.cpu = Some(100_000);
        assert!(error(validate(&cpu)).starts_with("--cpu 100000: this machine has CPUs 0.."));
        let mut cgroup = spec(&["vfs_read"], &[]);
        cgroup.probe.filter.cgroup = Some("/proc/self/status".into());
        assert!(error(validate(&cgroup)).contains("not a cgroup directory"));
        let mut missing = spec(&["vfs_read"], &[]);
        missing.probe.filter.cgroup = Some("/no/such/cgroup".into());
        assert!(error(validate(&missing)).starts_with("--cgroup /no/such/cgroup"));
    }

    #[test]
    fn a_recording_holds_every_total_and_on_cpu_time_only_with_off_cpu() {
        use crate::model::FunctionTotals;
        let probed = [
            Probed {
                name: "vfs_read".into(),
                symbol: "vfs_read".into(),
                site: None,
                child: false,
                multi_link: false,
                session_link: false,
            },
            Probed {
                name: "__ep_eventpoll_poll".into(),
                symbol: "__ep_eventpoll_poll.isra.0".into(),
                site: None,
                child: false,
                multi_link: false,
                session_link: false,
            },
        ];
        let totals = FunctionTotals {
            on_cpu_sum_ns: 500,
            below_min: 4,
            self_sum_ns: 550,
            outer_count: 2,
            outer_sum_ns: 600,
            ..FunctionTotals::from_durations(&[100, 200, 300])
        };
        let mut counters = [0; profiler_common::NUM_COUNTERS as usize];
        counters[profiler_common::Counter::DepthExceeded as usize] = 3;
        let snapshot = Snapshot {
            functions: vec![totals.clone(), FunctionTotals::default()],
            counters,
            ..Snapshot::default()
        };
        let command = ["true".to_string()];
        let mut session = Session {
            probed: &probed,
            mode: AttachedMode::Kprobe,
            task_store: TaskStore::HashMap,
            overhead: Some(crate::calibrate::Overhead {
                per_call_ns: 12.5,
                in_window_ns: 4.0,
            }),
            off_cpu: false,
            command: &command,
            keys: &KeyNames::default(),
            condition: None,
        };
        let recording = session.recording(&snapshot, Duration::from_millis(2));
        assert_eq!(
            (recording.mode.as_str(), recording.task_store),
            ("kprobe", Some(TaskStore::HashMap))
        );
        assert_eq!(recording.duration_ns, 2_000_000);
        assert_eq!(recording.command, command);
        assert_eq!(recording.probe_overhead_ns, Some(12.5));
        assert_eq!(recording.probe_bias_ns, Some(4.0));
        assert_eq!(recording.losses.depth_exceeded, 3);
        let expected =
            FunctionRecord::from_aggregates("vfs_read".into(), "vfs_read".into(), &totals);
        assert_eq!(recording.functions[0], expected);
        assert_eq!(
            (
                expected.below_min_latency,
                expected.self_sum_ns,
                expected.outer_count,
                expected.outer_sum_ns
            ),
            (4, 550, 2, 600)
        );
        assert_eq!(recording.functions[1].symbol, "__ep_eventpoll_poll.isra.0");
        assert_eq!(recording.functions[1].count, 0);

        session.off_cpu = true;
        let recording = session.recording(&snapshot, Duration::from_millis(2));
        assert_eq!(recording.functions[0].on_cpu_sum_ns, Some(500));
        assert_eq!(recording.functions[1].on_cpu_sum_ns, Some(0));
    }

    #[test]
    fn kprobe_mode_is_labelled_by_how_its_functions_were_attached() {
        let probed = |name: &str, site: Option<&str>, multi_link| Probed {
            name: name.into(),
            symbol: name.into(),
            site: site.map(str::to_owned),
            child: false,
            multi_link,
            session_link: false,
        };
        let label = |probed: &[Probed], mode| {
            Session {
                probed,
                mode,
                task_store: TaskStore::TaskStorage,
                overhead: None,
                off_cpu: false,
                command: &[],
                keys: &KeyNames::default(),
                condition: None,
            }
            .mode_label()
        };
        let multi = || probed("vfs_read", None, true);
        let single = || probed("memcpy_orig", None, false);
        let site = || probed("copy_page_from_iter_atomic", Some("f+0x1"), false);
        let kprobe = AttachedMode::Kprobe;
        assert_eq!(label(&[], kprobe), "kprobe");
        assert_eq!(label(&[single()], kprobe), "kprobe");
        assert_eq!(label(&[multi()], kprobe), "kprobe.multi");
        assert_eq!(label(&[multi(), single()], kprobe), "kprobe.multi+kprobe");
        // Call sites are always perf kprobes, labelled as such.
        assert_eq!(label(&[multi(), site()], kprobe), "kprobe.multi+callsite");
        assert_eq!(label(&[single(), site()], kprobe), "kprobe+callsite");
        assert_eq!(label(&[site()], AttachedMode::Callsite), "callsite");
        assert_eq!(label(&[multi()], AttachedMode::Fentry), "fentry");
        let session = Probed {
            session_link: true,
            ..multi()
        };
        assert_eq!(label(&[session], kprobe), "kprobe.session");
    }

    #[test]
    fn only_runs_that_need_no_frames_use_the_session_link() {
        let one = SessionSpec::default();
        assert_eq!(kprobe_attach(&one, 1, 0), attach::KprobeAttach::Session);
        // Nesting to see, or a call site (its frames are matched by stack pointer).
        assert_eq!(kprobe_attach(&one, 2, 0), attach::KprobeAttach::Multi);
        assert_eq!(kprobe_attach(&one, 1, 1), attach::KprobeAttach::Multi);
        // Each option that keeps something in a frame.
        let with = |change: fn(&mut SessionSpec)| {
            let mut spec = SessionSpec::default();
            change(&mut spec);
            kprobe_attach(&spec, 1, 0)
        };
        assert_eq!(with(|s| s.off_cpu = true), attach::KprobeAttach::Multi);
        assert_eq!(
            with(|s| s.stacks = StackCapture::Kernel),
            attach::KprobeAttach::Multi
        );
        assert_eq!(with(|s| s.slowest = 3), attach::KprobeAttach::Multi);
        assert_eq!(
            with(|s| s.sample_inside = true),
            attach::KprobeAttach::Multi
        );
        assert_eq!(
            with(|s| s.probe.children = vec!["f".into()]),
            attach::KprobeAttach::Multi
        );
        // What the user chose stays.
        assert_eq!(
            with(|s| s.probe.kprobe_attach = attach::KprobeAttach::Single),
            attach::KprobeAttach::Single
        );
        assert_eq!(
            with(|s| s.probe.kprobe_attach = attach::KprobeAttach::Multi),
            attach::KprobeAttach::Multi
        );
    }

    #[test]
    fn call_sites_of_a_function_make_one_record_with_a_row_each() {
        let site = |name: &str, site: Option<&str>| Probed {
            name: name.into(),
            symbol: name.into(),
            site: site.map(str::to_owned),
            child: false,
            multi_link: false,
            session_link: false,
        };
        let probed = [
            site("generic_perform_write", None),
            site(
                "copy_page_from_iter_atomic",
                Some("generic_perform_write+0x14e"),
            ),
            site(
                "copy_page_from_iter_atomic",
                Some("iter_file_splice_write+0x2a0"),
            ),
        ];
        let snapshot = Snapshot {
            functions: vec![
                FunctionTotals::from_durations(&[5_000, 6_000]),
                FunctionTotals::from_durations(&[100, 200]),
                FunctionTotals::from_durations(&[900]),
            ],
            ..Snapshot::default()
        };
        let session = Session {
            probed: &probed,
            mode: AttachedMode::Kprobe,
            task_store: TaskStore::TaskStorage,
            overhead: None,
            off_cpu: false,
            command: &[],
            keys: &KeyNames::default(),
            condition: None,
        };
        let recording = session.recording(&snapshot, Duration::from_secs(1));
        assert_eq!(recording.functions.len(), 2);
        assert!(recording.functions[0].callers.is_empty());
        let copy = &recording.functions[1];
        assert_eq!(
            (copy.count, copy.sum_ns, copy.min_ns, copy.max_ns),
            (3, 1200, 100, 900)
        );
        let rows: Vec<(&str, u64, u64)> = copy
            .callers
            .iter()
            .map(|c| (c.site.as_str(), c.count, c.sum_ns))
            .collect();
        // Busiest (by time) first.
        assert_eq!(
            rows,
            [
                ("iter_file_splice_write+0x2a0", 1, 900),
                ("generic_perform_write+0x14e", 2, 300)
            ]
        );
    }

    #[test]
    fn a_comm_is_one_to_fifteen_bytes_nul_padded() {
        assert_eq!(&comm_bytes("dd").unwrap()[..3], b"dd\0");
        assert!(comm_bytes("").is_err());
        assert!(comm_bytes("sixteen_bytes_xx").is_err());
        assert_eq!(comm_bytes("fifteen_bytes_x").unwrap()[15], 0);
    }
}
