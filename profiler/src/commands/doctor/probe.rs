//! The part of `hotprof doctor` that touches the system: reads the kernel's files and tries
//! what can be tried, with hotprof's own object and attach functions, detaching at once. Every
//! outcome becomes a plain value in [`Facts`]; nothing here decides what it means.
//!
//! Side effects, each undone or what every hotprof run does anyway: tracefs is mounted at
//! `/sys/kernel/tracing` if it was not ([`resolve::tracefs_root`]); securityfs is mounted for
//! the moment it takes to read the lockdown mode, then unmounted.

use std::ffi::CString;
use std::path::Path;

use aya::maps::MapType;
use aya::programs::PerfEvent;
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};

use super::facts::{
    Facts, Kallsyms, Lockdown, Privileges, Tracefs, Tried, parse_cap_eff, parse_lockdown,
    parse_mounts, tidy_reason,
};
use super::multi::kprobe_link;
use crate::attach::{self, KprobeAttach, Mode, ProbeConfig, one_line};
use crate::model::TaskStore;
use crate::progress::Progress;
use crate::resolve::kcore::{Kcore, KcoreError};
use crate::resolve::{self, KernelFunctions, Target};

/// Functions to probe, harmless and called on demand: the first that resolves is tried (and
/// only it: its outcome is the answer). fentry prefers `__do_sys_getpid`, which fentry attaches
/// to on every kernel of the test matrix (the `__x64_` wrapper refuses it).
const KPROBE_TARGETS: &[&str] = &["__x64_sys_getpid", "__arm64_sys_getpid", "__do_sys_getpid"];
const FENTRY_TARGETS: &[&str] = &["__do_sys_getpid", "__x64_sys_getpid", "__arm64_sys_getpid"];

/// Checks this machine.
pub fn gather() -> Facts {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    // Before anything mounts it.
    let tracefs_mounted = parse_mounts(&mounts, "tracefs");
    let privileges = privileges();
    let lockdown = lockdown(&mounts);
    let tracefs = Tracefs {
        mounted: tracefs_mounted,
        usable: resolve::tracefs_root(),
    };
    let kernel = crate::resolve::kernel_functions().ok();
    let kallsyms = match &kernel {
        None => Kallsyms::Unreadable,
        Some(k) if k.addresses_visible() => Kallsyms::Visible,
        Some(_) => Kallsyms::Hidden,
    };
    let kprobe_target = first(kernel.as_ref(), KPROBE_TARGETS);
    let fentry_target = first(kernel.as_ref(), FENTRY_TARGETS);
    let unprivileged = || Tried::NotTried("needs root, or CAP_BPF and CAP_PERFMON".into());
    let programs = if privileges.sufficient {
        try_programs(
            kprobe_target.as_ref(),
            fentry_target.as_ref(),
            tracefs.usable.as_deref(),
        )
    } else {
        Programs::untried(unprivileged())
    };
    let task_storage = if privileges.sufficient {
        task_storage()
    } else {
        unprivileged()
    };
    let pmu = if privileges.sufficient {
        pmu_events()
    } else {
        unprivileged()
    };
    Facts {
        release: crate::kernel_release(),
        btf: btf(),
        programs: programs.programs,
        store: programs.store,
        kprobe: programs.kprobe,
        fentry: programs.fentry,
        fsession: programs.fsession,
        tracing_multi: programs.tracing_multi,
        syscalls: programs.syscalls,
        sampling: programs.sampling,
        kprobe_multi: programs.kprobe_multi,
        kprobe_session: programs.kprobe_session,
        task_storage,
        pmu,
        kcore: kcore(kernel.as_ref()),
        lockdown,
        perf_event_paranoid: read_number("/proc/sys/kernel/perf_event_paranoid"),
        kptr_restrict: read_number("/proc/sys/kernel/kptr_restrict"),
        kallsyms,
        tracefs,
        privileges,
    }
}

/// What a run would get for a kprobe, fentry and fsession, as doctor finds it (the same tries,
/// once): `hotprof list` says this instead of what the files alone suggest.
pub struct AttachTries {
    pub kprobe: Tried,
    pub fentry: Tried,
    pub fsession: Tried,
}

/// Doctor's kprobe, fentry and fsession tries alone, on getpid's functions as `kernel` lists them; not
/// tried without the privileges a run needs.
pub fn attach_tries(kernel: &KernelFunctions) -> AttachTries {
    if !privileges().sufficient {
        let why = || Tried::NotTried("needs root, or CAP_BPF and CAP_PERFMON".into());
        return AttachTries {
            kprobe: why(),
            fentry: why(),
            fsession: why(),
        };
    }
    let mut loaded = match load_for_tries() {
        Ok(loaded) => loaded,
        Err(_) => {
            let not_loaded = || Tried::NotTried("hotprof's eBPF object did not load".into());
            return AttachTries {
                kprobe: not_loaded(),
                fentry: not_loaded(),
                fsession: not_loaded(),
            };
        }
    };
    // Only the tries `list` reports: not the hooks, sampler and links doctor also tries.
    let fentry_target = first(Some(kernel), FENTRY_TARGETS);
    AttachTries {
        kprobe: try_kprobe(
            &mut loaded.ebpf,
            first(Some(kernel), KPROBE_TARGETS).as_ref(),
        ),
        fentry: try_fentry(&mut loaded.ebpf, fentry_target.as_ref()),
        fsession: try_fsession(&mut loaded.ebpf, fentry_target.as_ref()),
    }
}

/// The first of `names` that resolves to a kernel function.
fn first(kernel: Option<&KernelFunctions>, names: &[&str]) -> Option<Target> {
    names
        .iter()
        .find_map(|name| kernel?.resolve(name, &|_| false).ok()?.into_iter().next())
}

fn privileges() -> Privileges {
    let euid = crate::sys::ids::effective_uid();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    Privileges {
        euid,
        effective: parse_cap_eff(&status),
        sufficient: attach::check_privileges().is_ok(),
    }
}

fn btf() -> Tried {
    const PATH: &str = "/sys/kernel/btf/vmlinux";
    // The index every run uses, so the row says what the runs will find.
    match attach::kernel_btf() {
        Ok(_) => {
            let size = std::fs::metadata(PATH).map_or(0, |m| m.len());
            Tried::Works(format!("{PATH} parses ({} KiB)", size / 1024))
        }
        Err(error) => Tried::Fails(one_line(&error)),
    }
}

fn read_number(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The lockdown mode; with securityfs unmounted, mounted for the read and unmounted again.
fn lockdown(mounts: &str) -> Lockdown {
    const DIR: &str = "/sys/kernel/security";
    let read = || match std::fs::read_to_string(format!("{DIR}/lockdown")) {
        Ok(text) => parse_lockdown(&text).map_or_else(
            || Lockdown::Unknown(format!("unexpected {DIR}/lockdown: {}", text.trim())),
            Lockdown::Mode,
        ),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Lockdown::NoLsm,
        Err(error) => Lockdown::Unknown(format!("cannot read {DIR}/lockdown: {error}")),
    };
    if !parse_mounts(mounts, "securityfs").is_empty() {
        return read();
    }
    let (Ok(fstype), Ok(target)) = (CString::new("securityfs"), CString::new(DIR)) else {
        return Lockdown::Unknown("securityfs is not mounted".into());
    };
    use crate::sys::mount::{self, MS_NODEV, MS_NOEXEC, MS_NOSUID};
    if let Err(error) = mount::mount(&fstype, &target, &fstype, MS_NOSUID | MS_NODEV | MS_NOEXEC) {
        return Lockdown::Unknown(format!(
            "securityfs is not mounted at {DIR}, and mounting it failed: {error}"
        ));
    }
    let lockdown = read();
    // A failure leaves it mounted, harmless.
    let _ = mount::unmount(&target);
    lockdown
}

/// `/proc/kcore` opened, and the first bytes of kernel text read through it.
fn kcore(kernel: Option<&KernelFunctions>) -> Tried {
    let kcore = match Kcore::open() {
        Ok(kcore) => kcore,
        Err(KcoreError::Open(error)) if error.kind() == std::io::ErrorKind::NotFound => {
            return Tried::Fails(
                "/proc/kcore does not exist (the kernel is built without CONFIG_PROC_KCORE)".into(),
            );
        }
        Err(KcoreError::Open(error)) => return Tried::Fails(format!("cannot open it: {error}")),
        Err(error) => return Tried::Fails(error.to_string()),
    };
    let stext = kernel.and_then(|k| {
        k.symbols()
            .iter()
            .find(|s| s.name == "_stext" && s.address != 0)
    });
    let Some(stext) = stext else {
        return Tried::NotTried(
            "opened, but kernel text not read: /proc/kallsyms shows no address for _stext".into(),
        );
    };
    match kcore.read(stext.address, 16) {
        Ok(_) => Tried::Works("readable (kernel text read at _stext)".into()),
        Err(error) => Tried::Fails(error.to_string()),
    }
}

/// What loading hotprof's object and attaching its programs showed.
struct Programs {
    programs: Tried,
    store: Option<TaskStore>,
    kprobe: Tried,
    fentry: Tried,
    fsession: Tried,
    tracing_multi: Tried,
    syscalls: Tried,
    sampling: Tried,
    kprobe_multi: Tried,
    kprobe_session: Tried,
}

impl Programs {
    fn untried(why: Tried) -> Self {
        Self {
            programs: why.clone(),
            store: None,
            kprobe: why.clone(),
            fentry: why.clone(),
            fsession: why.clone(),
            tracing_multi: why.clone(),
            syscalls: why.clone(),
            sampling: why.clone(),
            kprobe_multi: why.clone(),
            kprobe_session: why,
        }
    }
}

/// Loads hotprof's object as a run without per-call options does (task storage, so the plain
/// object, else the hash map) with its task-exit hooks, then attaches each kind of probe once
/// and creates each kind of kprobe link (on `fentry_target`, which ftrace traces wherever
/// fentry attaches). Everything is detached, and unloaded, when this returns.
fn try_programs(
    kprobe_target: Option<&Target>,
    fentry_target: Option<&Target>,
    tracefs: Option<&Path>,
) -> Programs {
    let mut loaded = match load_for_tries() {
        Ok(loaded) => loaded,
        Err(error) => {
            let not_loaded = Tried::NotTried("hotprof's eBPF object did not load".into());
            return Programs {
                programs: Tried::Fails(error.to_string()),
                ..Programs::untried(not_loaded)
            };
        }
    };
    let store = loaded.task_store;
    let ebpf = &mut loaded.ebpf;
    let programs = match attach::attach_tracking(ebpf, store, false, false) {
        Ok(()) => Tried::Works(format!(
            "the {} object loaded, its task-exit hooks attached",
            match store {
                TaskStore::TaskStorage => "task-storage",
                TaskStore::HashMap => "hash-map",
            }
        )),
        Err(error) => Tried::Fails(tidy_reason(&error.message())),
    };
    let kprobe = try_kprobe(ebpf, kprobe_target);
    let fentry = try_fentry(ebpf, fentry_target);
    let fsession = try_fsession(ebpf, fentry_target);
    let tracing_multi = try_tracing_multi(ebpf, fentry_target);
    let syscalls = match tracefs {
        None => Tried::NotTried("no tracefs".into()),
        Some(root) => match attach::attach_syscalls(ebpf, &["getpid".to_owned()], root) {
            Ok(()) => Tried::Works("syscalls/sys_enter_getpid and sys_exit_getpid attached".into()),
            Err(error) => Tried::Fails(tidy_reason(&error.message())),
        },
    };
    let sampling = sampling(ebpf);
    Programs {
        programs,
        store: Some(store),
        kprobe,
        fentry,
        fsession,
        tracing_multi,
        syscalls,
        sampling,
        kprobe_multi: kprobe_link(ebpf, KprobeAttach::Multi, fentry_target),
        kprobe_session: kprobe_link(ebpf, KprobeAttach::Session, fentry_target),
    }
}

/// The PMU events `--counter` can count: each opened on CPU 0 as a run opens it, the kernel
/// saying which exist (a VM may have no PMU, qemu's arm64 one counts instructions only on
/// its instruction clock).
fn pmu_events() -> Tried {
    let mut counted = Vec::new();
    // The events refused, grouped by the kernel's reason (a machine without a PMU refuses
    // them all alike).
    let mut refused: Vec<(String, Vec<&str>)> = Vec::new();
    for event in crate::model::PmuEvent::ALL {
        match attach::try_event(event, 0) {
            Ok(_) => counted.push(event.name()),
            Err(attach::PmuError::NotCounted { error, .. }) => {
                let reason = tidy_reason(&error.to_string());
                match refused.iter_mut().find(|(known, _)| *known == reason) {
                    Some((_, events)) => events.push(event.name()),
                    None => refused.push((reason, vec![event.name()])),
                }
            }
            Err(error) => return Tried::Fails(error.to_string()),
        }
    }
    let refused = refused
        .iter()
        .map(|(reason, events)| format!("{} ({reason})", events.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    match (counted.is_empty(), refused.is_empty()) {
        (true, _) => Tried::Fails(format!("none counts: {refused}")),
        (false, true) => Tried::Works(format!("{} count", counted.join(", "))),
        (false, false) => Tried::Works(format!("{} count; not {refused}", counted.join(", "))),
    }
}

/// hotprof's object as a run without per-call options loads it, its probes counting nothing.
fn load_for_tries() -> Result<attach::Loaded, attach::EbpfLoadError> {
    attach::load(&ProbeConfig {
        functions: 1,
        // An empty pid set: the probes count nothing while they are attached.
        filter_tgids: true,
        exclude_tgid: Some(std::process::id()),
        sampling: true,
        stack_map_size: 16,
        ..Default::default()
    })
}

/// A kprobe/kretprobe pair on `target`, or why not.
fn try_kprobe(ebpf: &mut aya::Ebpf, target: Option<&Target>) -> Tried {
    if !attach::kprobes_available() {
        return Tried::Fails(
            "no kprobe PMU in /sys/bus/event_source/devices: the kernel is built without kprobe \
             events (CONFIG_KPROBES, CONFIG_KPROBE_EVENTS)"
                .into(),
        );
    }
    attach_one(
        ebpf,
        target,
        Mode::Kprobe,
        WITH_FRAMES,
        "kprobe and kretprobe",
    )
}

/// An fentry/fexit pair on `target`, or why not.
fn try_fentry(ebpf: &mut aya::Ebpf, target: Option<&Target>) -> Tried {
    attach_one(ebpf, target, Mode::Fentry, WITH_FRAMES, "fentry and fexit")
}

/// The fsession program on `target` (as a lone frameless function would get it), or why not.
fn try_fsession(ebpf: &mut aya::Ebpf, target: Option<&Target>) -> Tried {
    let session = attach::Mechanisms::default();
    attach_one(
        ebpf,
        target,
        Mode::Fsession,
        session,
        "the fsession program",
    )
}

/// An fentry.multi and fexit.multi link on `target` (as fentry mode past 64 functions gets
/// them), or why not: a kernel whose BTF has no such attach types is not asked.
fn try_tracing_multi(ebpf: &mut aya::Ebpf, target: Option<&Target>) -> Tried {
    if let Err(why) = attach::tracing_multi_attach_types() {
        return Tried::Fails(why.into());
    }
    let multi = attach::Mechanisms {
        fentry: attach::FentryAttach::Multi,
        ..WITH_FRAMES
    };
    attach_one(
        ebpf,
        target,
        Mode::Fentry,
        multi,
        "fentry.multi and fexit.multi links",
    )
}

/// As a run with frames attaches: what the kprobes and fentry rows are about (as before
/// fsession, whose row is its own).
const WITH_FRAMES: attach::Mechanisms = attach::Mechanisms::WITH_FRAMES;

/// Attaches one function in `mode`, as `how` says; `what` names what attached in the outcome.
fn attach_one(
    ebpf: &mut aya::Ebpf,
    target: Option<&Target>,
    mode: Mode,
    how: attach::Mechanisms,
    what: &str,
) -> Tried {
    let Some(target) = target else {
        return Tried::NotTried("no getpid function found in /proc/kallsyms".into());
    };
    match attach::attach_functions_with(
        ebpf,
        std::slice::from_ref(target),
        mode,
        how,
        &mut Progress::quiet(),
    ) {
        // The kprobe links detach here; fentry's stay with the object until it is dropped.
        Ok(_attached) => Tried::Works(format!("{what} attached to {}", target.symbol)),
        Err(error) => Tried::Fails(tidy_reason(&error.message())),
    }
}

/// The sampling program on a cpu-clock perf event of this CPU.
fn sampling(ebpf: &mut aya::Ebpf) -> Tried {
    let program: &mut PerfEvent = match ebpf.program_mut("on_cpu_sample").map(|p| p.try_into()) {
        Some(Ok(program)) => program,
        _ => return Tried::Fails("internal: on_cpu_sample missing from the eBPF object".into()),
    };
    if let Err(error) = program.load() {
        return Tried::Fails(tidy_reason(&one_line(&error)));
    }
    let cpu = crate::sys::ids::current_cpu();
    match program.attach(
        PerfEventConfig::Software(SoftwareEvent::CpuClock),
        PerfEventScope::AllProcessesOneCpu { cpu },
        SamplePolicy::Frequency(99),
        false,
    ) {
        Ok(_) => Tried::Works(format!("cpu-clock sampling attached on CPU {cpu}")),
        Err(error) => Tried::Fails(tidy_reason(&one_line(&error))),
    }
}

fn task_storage() -> Tried {
    match aya::sys::is_map_supported(MapType::TaskStorage) {
        Ok(true) => Tried::Works("a task-storage map can be created".into()),
        Ok(false) => Tried::Fails(
            "the kernel refuses BPF_MAP_TYPE_TASK_STORAGE (it needs Linux 5.11+)".into(),
        ),
        Err(error) => Tried::Fails(one_line(&error)),
    }
}
