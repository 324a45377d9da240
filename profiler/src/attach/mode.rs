//! Choosing and attaching a probe mode: fentry/fexit, kprobe/kretprobe or syscall
//! tracepoints.

use std::path::Path;

use aya::{
    Ebpf,
    maps::{HashMap, MapError},
    programs::{BtfTracePoint, FEntry, FExit, KProbe, ProgramError, RawTracePoint, TracePoint},
};
use aya_obj::generated::bpf_func_id;
use profiler_common::{FENTRY_SLOTS, KPROBE_SLOTS, SYSCALL_SLOTS, names};

use super::error::{AttachError, Reason, kprobe_refusal, one_line};
use super::interrupt::AttachSignals;
use super::links::KprobeLinks;
use super::multi::{self, KprobeAttach};
use super::program::{kprobes_available, load_kprobe, program, refuses_helper, take};
use super::session_link;
use crate::model::TaskStore;
use crate::progress::Progress;
use crate::resolve::Target;

/// Which mechanism to attach `--fn` targets with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// fentry/fexit when BTF and trampolines work (decided by trying), else kprobe.
    #[default]
    Auto,
    /// fentry/fexit only (5.5+, BTF).
    Fentry,
    /// kprobe/kretprobe only (4.17+; more than 64 functions: 5.15+).
    Kprobe,
    /// kprobes on each `call F` and the instruction after it (4.17+): for functions without
    /// an ftrace location, which refuse kprobes inside themselves.
    Callsite,
}

/// The mechanism actually in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachedMode {
    Fentry,
    Kprobe,
    /// `syscalls:sys_enter_NAME`/`sys_exit_NAME` perf tracepoints.
    Syscall,
    /// `raw_syscalls:sys_enter`/`sys_exit` raw tracepoints (see `syscalls.rs`).
    RawSyscall,
    /// Every function at its call sites.
    Callsite,
}

impl AttachedMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fentry => "fentry",
            Self::Kprobe => "kprobe",
            Self::Syscall => "syscall",
            Self::RawSyscall => "raw_syscall",
            Self::Callsite => "callsite",
        }
    }
}

/// Attached function probes: the mode used, notes for the user (fallbacks), and the kprobe
/// links (empty in fentry mode, whose links stay in their programs).
pub struct AttachedFunctions {
    pub mode: AttachedMode,
    pub notes: Vec<String>,
    pub links: KprobeLinks,
    /// Per target: attached through the kprobe.multi (or kprobe.session) link (kprobe mode;
    /// else all false).
    pub multi_linked: Vec<bool>,
    /// Attached through one kprobe.session link.
    pub session: bool,
}

/// Attaches the function probes, kprobe mode through a kprobe.multi link where the kernel
/// has one. `progress` shows how far attaching has got (a 1000-function glob takes a while).
pub fn attach_functions(
    ebpf: &mut Ebpf,
    targets: &[Target],
    mode: Mode,
    progress: &mut Progress,
) -> Result<AttachedFunctions, AttachError> {
    attach_functions_with(ebpf, targets, mode, KprobeAttach::Multi, progress)
}

/// [`attach_functions`], with kprobe mode attaching as `kprobe_attach` says. SIGINT and
/// SIGTERM are caught meanwhile: one ends the attaching with [`AttachError::Interrupted`],
/// once whatever was attached is detached again.
pub fn attach_functions_with(
    ebpf: &mut Ebpf,
    targets: &[Target],
    mode: Mode,
    kprobe_attach: KprobeAttach,
    progress: &mut Progress,
) -> Result<AttachedFunctions, AttachError> {
    let _signals = AttachSignals::catch();
    let mut notes = Vec::new();
    let fentry = |notes| AttachedFunctions {
        mode: AttachedMode::Fentry,
        notes,
        links: KprobeLinks::default(),
        multi_linked: vec![false; targets.len()],
        session: false,
    };
    let kprobe = |mut notes: Vec<String>, attached: AttachedKprobes| {
        notes.extend(attached.notes);
        AttachedFunctions {
            mode: AttachedMode::Kprobe,
            notes,
            links: attached.links,
            multi_linked: attached.multi_linked,
            session: attached.session,
        }
    };
    match mode {
        Mode::Fentry => {
            attach_fentry(ebpf, targets, progress)?;
            Ok(fentry(notes))
        }
        // Call sites are attached on their own (`attach_call_sites`); a function given here
        // is timed at its entry.
        Mode::Kprobe | Mode::Callsite => {
            let attached = attach_kprobes(ebpf, targets, kprobe_attach, progress)?;
            Ok(kprobe(notes, attached))
        }
        Mode::Auto => match attach_fentry(ebpf, targets, progress) {
            Ok(()) => Ok(fentry(notes)),
            Err(error @ AttachError::Interrupted { .. }) => {
                detach_fentry(ebpf, targets.len());
                Err(error)
            }
            Err(error) => {
                detach_fentry(ebpf, targets.len());
                notes.push(fall_back_from_fentry(
                    error,
                    kprobes_available(),
                    crate::kernel_release,
                )?);
                let attached = attach_kprobes(ebpf, targets, kprobe_attach, progress)?;
                Ok(kprobe(notes, attached))
            }
        },
    }
}

/// Auto mode, once fentry/fexit could not be attached (`fentry` says why): the note saying
/// that kprobe/kretprobe is used instead, or, where this kernel has no kprobes either
/// (`kprobes` false), one error naming both reasons. `release` is asked for only then.
fn fall_back_from_fentry(
    fentry: AttachError,
    kprobes: bool,
    release: impl FnOnce() -> String,
) -> Result<String, AttachError> {
    if kprobes {
        return Ok(format!(
            "{}; using kprobe/kretprobe instead",
            fentry.message()
        ));
    }
    let fentry = match fentry {
        AttachError::Fentry { reason, .. } => reason,
        other => {
            let text = other.message();
            Reason::of(other, |_| text)
        }
    };
    Err(AttachError::NoKprobes {
        release: release(),
        fentry: Some(fentry),
    })
}

fn attach_fentry(
    ebpf: &mut Ebpf,
    targets: &[Target],
    progress: &mut Progress,
) -> Result<(), AttachError> {
    if targets.len() > FENTRY_SLOTS as usize {
        return Err(AttachError::TooManyForFentry {
            requested: targets.len(),
        });
    }
    let first = targets
        .first()
        .map(|t| t.symbol.clone())
        .unwrap_or_default();
    let btf = super::kernel_btf().map_err(|e| AttachError::Fentry {
        function: first,
        reason: Reason::of(e, |e| {
            format!("no kernel BTF (/sys/kernel/btf/vmlinux): {e}")
        }),
    })?;
    for (slot, target) in targets.iter().enumerate() {
        let fail = |reason: Reason| AttachError::Fentry {
            function: target.symbol.clone(),
            reason,
        };
        let refused = |e: ProgramError| fail(unlisted_hint(target, fentry_load_reason(e)));
        let btf_id = btf.function(&target.symbol).ok_or_else(|| {
            fail(Reason::new(
                "not a function in the kernel's BTF (/sys/kernel/btf/vmlinux)",
            ))
        })?;
        let entry: &mut FEntry = program(ebpf, &format!("fentry_{slot}"))?;
        entry.load_by_btf_id(btf_id).map_err(refused)?;
        entry.attach().map_err(refused)?;
        let exit: &mut FExit = program(ebpf, &format!("fexit_{slot}"))?;
        exit.load_by_btf_id(btf_id).map_err(refused)?;
        exit.attach().map_err(refused)?;
        progress.attaching("fentry/fexit pairs", slot + 1, targets.len());
        AttachSignals::check("fentry/fexit pairs", slot + 1, targets.len())?;
    }
    Ok(())
}

/// Why an fentry/fexit program did not load or attach, in one line: a verifier that does not
/// know the helpers `--by` reads arguments, returns and callers with (before 5.17) says so
/// rather than dumping its log.
fn fentry_load_reason(error: ProgramError) -> Reason {
    let lacks_by_helpers = match &error {
        ProgramError::LoadError { verifier_log, .. } => {
            let log = verifier_log.to_string();
            [
                bpf_func_id::BPF_FUNC_get_func_arg,
                bpf_func_id::BPF_FUNC_get_func_ret,
                bpf_func_id::BPF_FUNC_get_func_arg_cnt,
                bpf_func_id::BPF_FUNC_get_func_ip,
            ]
            .into_iter()
            .any(|helper| refuses_helper(&log, helper))
        }
        _ => false,
    };
    if lacks_by_helpers {
        Reason::of(error, |_| {
            "this kernel's fentry programs cannot read arguments, returns or callers \
             (bpf_get_func_arg/_ret, Linux 5.17), which this --by or --filter needs"
                .into()
        })
    } else {
        Reason::of(error, |e| one_line(e))
    }
}

/// `reason`, with a hint where ftrace does not list `target`: the kernel was asked all the
/// same (a syscall wrapper such as `__x64_sys_getpid` is an alias of a function ftrace lists
/// under another name, and attaches), and when it refuses, the missing ftrace location is the
/// likely why.
fn unlisted_hint(target: &Target, reason: Reason) -> Reason {
    if target.traceable != Some(false) {
        return reason;
    }
    reason.with_hint("it is not in available_filter_functions: notrace, inlined or an alias")
}

/// Unloads whatever fentry/fexit slots an unsuccessful attempt left behind.
fn detach_fentry(ebpf: &mut Ebpf, slots: usize) {
    for slot in 0..slots.min(FENTRY_SLOTS as usize) {
        if let Ok(entry) = program::<FEntry>(ebpf, &format!("fentry_{slot}")) {
            let _ = entry.unload();
        }
        if let Ok(exit) = program::<FExit>(ebpf, &format!("fexit_{slot}")) {
            let _ = exit.unload();
        }
    }
}

/// What [`attach_kprobes`] attached.
struct AttachedKprobes {
    links: KprobeLinks,
    /// Per target: through the kprobe.multi (or kprobe.session) link.
    multi_linked: Vec<bool>,
    /// Through one kprobe.session link, all of them.
    session: bool,
    notes: Vec<String>,
}

/// Attaches `targets` in kprobe mode: through a kprobe.multi link where `how` allows and the
/// kernel has one ([`super::multi`]), as perf kprobes otherwise, and always for the functions
/// ftrace cannot trace. A target's id is its index either way.
fn attach_kprobes(
    ebpf: &mut Ebpf,
    targets: &[Target],
    how: KprobeAttach,
    progress: &mut Progress,
) -> Result<AttachedKprobes, AttachError> {
    if let Some(hidden) = targets.iter().find(|t| t.address == 0) {
        return Err(AttachError::Kprobe {
            function: hidden.symbol.clone(),
            reason: Reason::new(
                "its address is hidden in /proc/kallsyms (kptr_restrict): run as root",
            ),
        });
    }
    let mut notes = Vec::new();
    let mut multi_linked = vec![false; targets.len()];
    let mut links = KprobeLinks::default();
    let (linkable, untraceable) = match how {
        KprobeAttach::Session | KprobeAttach::Multi => multi::split_for_multi(targets),
        KprobeAttach::Single => (Vec::new(), (0..targets.len()).collect()),
    };
    // One function, which ftrace lists (the link records into slot 0 only).
    if let (KprobeAttach::Session, [target], [0]) = (how, targets, linkable.as_slice()) {
        match session_link::attach_session(ebpf, target) {
            Ok(links) => {
                progress.attaching("kprobe.session functions", 1, 1);
                AttachSignals::check("functions (one kprobe.session link)", 1, 1)?;
                return Ok(AttachedKprobes {
                    links,
                    multi_linked: vec![true; targets.len()],
                    session: true,
                    notes,
                });
            }
            Err(refused) if refused.is_expected() => {}
            Err(refused) => notes.push(format!(
                "{}; using the kprobe.multi link instead",
                one_line(&refused)
            )),
        }
    }
    let mut single = untraceable;
    if !linkable.is_empty() {
        match multi::attach_multi(ebpf, targets, &linkable) {
            Ok(attached) => {
                links.extend(attached);
                progress.attaching("kprobe.multi functions", linkable.len(), targets.len());
                AttachSignals::check(
                    "functions (one kprobe.multi link)",
                    linkable.len(),
                    targets.len(),
                )?;
                for &id in &linkable {
                    multi_linked[id] = true;
                }
                if !single.is_empty() {
                    notes.push(multi::single_note(single.len(), None));
                }
            }
            Err(refused) => {
                notes.push(multi::single_note(targets.len(), Some(&refused)));
                single = (0..targets.len()).collect();
            }
        }
    }
    if !single.is_empty() {
        links.extend(attach_single_kprobes(ebpf, targets, &single, progress)?);
    }
    Ok(AttachedKprobes {
        links,
        multi_linked,
        session: false,
        notes,
    })
}

/// Attaches the targets `ids` (indexes into `targets`, each its function id) with a perf
/// kprobe and kretprobe each.
fn attach_single_kprobes(
    ebpf: &mut Ebpf,
    targets: &[Target],
    ids: &[usize],
    progress: &mut Progress,
) -> Result<KprobeLinks, AttachError> {
    if !kprobes_available() {
        return Err(AttachError::NoKprobes {
            release: crate::kernel_release(),
            fentry: None,
        });
    }
    let (slotted, shared) = kprobe_slots(ids);
    if !shared.is_empty() {
        // Loaded first: before 5.15 the verifier refuses it, and nothing is attached yet.
        load_shared_kprobe(ebpf, targets.len())?;
    }
    let mut links = KprobeLinks::default();
    let total = ids.len();
    let attach = |entry: &mut KProbe, target: &Target, links: &mut KprobeLinks| {
        let id = entry
            .attach(&target.symbol, 0)
            .map_err(|e| AttachError::Kprobe {
                function: target.symbol.clone(),
                reason: Reason::of(e, |e| kprobe_refusal(e)),
            })?;
        links.0.push(take(entry.take_link(id))?);
        Ok::<_, AttachError>(())
    };
    // Returns first: the kernel runs the handlers of probes on one address newest first, so
    // each entry kprobe, registered after its kretprobe, sees the return address before the
    // kretprobe swaps it for its trampoline (`--by caller` reads it). A call entered in
    // between has its return counted as unmatched, like any call in flight at attach.
    let exit = load_kprobe(ebpf, "kretprobe_exit")?;
    for (done, &id) in ids.iter().enumerate() {
        attach(exit, &targets[id], &mut links)?;
        progress.attaching("kretprobes", done + 1, total);
        AttachSignals::check("kretprobes", done + 1, total)?;
    }
    for (done, &id) in slotted.iter().enumerate() {
        let entry = load_kprobe(ebpf, &format!("kprobe_{id}"))?;
        attach(entry, &targets[id], &mut links)?;
        progress.attaching("kprobes", done + 1, total);
        AttachSignals::check("kprobes", done + 1, total)?;
    }
    if !shared.is_empty() {
        let map_error = |e: MapError| AttachError::Internal(Reason::of(e, |e| e.to_string()));
        let mut func_ips: HashMap<_, u64, u32> = HashMap::try_from(
            ebpf.map_mut(names::FUNC_IPS)
                .ok_or_else(|| AttachError::Internal(Reason::new("FUNC_IPS map missing")))?,
        )
        .map_err(map_error)?;
        for &id in &shared {
            func_ips
                .insert(targets[id].address, id as u32, 0)
                .map_err(map_error)?;
        }
        let entry: &mut KProbe = program(ebpf, SHARED_KPROBE)?;
        for (done, &id) in shared.iter().enumerate() {
            attach(entry, &targets[id], &mut links)?;
            let done = slotted.len() + done + 1;
            progress.attaching("kprobes", done, total);
            AttachSignals::check("kprobes", done, total)?;
        }
    }
    Ok(links)
}

/// The functions (`ids`) below [`KPROBE_SLOTS`] get a kprobe program each, whose function id
/// is a constant; the rest share `kprobe_entry`, which finds its id by address in FUNC_IPS
/// on every call (and needs Linux 5.15).
fn kprobe_slots(ids: &[usize]) -> (Vec<usize>, Vec<usize>) {
    ids.iter().partition(|&&id| id < KPROBE_SLOTS as usize)
}

/// The kprobe program shared by the functions beyond the slots.
const SHARED_KPROBE: &str = "kprobe_entry";

/// Loads `kprobe_entry`, the kprobe program shared by the functions beyond the slots. It needs
/// `bpf_get_func_ip` (5.15); an older verifier refusing that helper is one clear line, not
/// its log.
fn load_shared_kprobe(ebpf: &mut Ebpf, requested: usize) -> Result<(), AttachError> {
    let program: &mut KProbe = program(ebpf, SHARED_KPROBE)?;
    program
        .load()
        .map_err(|e| shared_kprobe_error(e, requested, crate::kernel_release))
}

/// Why `kprobe_entry` did not load: a kernel before 5.15, whose verifier does not know
/// `bpf_get_func_ip`, can probe only [`KPROBE_SLOTS`] functions (one line, `release` asked
/// for only then); anything else is not the user's to fix.
fn shared_kprobe_error(
    error: ProgramError,
    requested: usize,
    release: impl FnOnce() -> String,
) -> AttachError {
    match &error {
        ProgramError::LoadError { verifier_log, .. }
            if refuses_func_ip(&verifier_log.to_string()) =>
        {
            AttachError::TooManyForKprobe {
                release: release(),
                requested,
            }
        }
        _ => AttachError::Internal(Reason::of(error, |e| {
            format!("loading {SHARED_KPROBE}: {}", one_line(e))
        })),
    }
}

/// Whether a verifier log says the kernel does not know `bpf_get_func_ip` (helper 173): before
/// 5.15 it is past the kernel's last helper (`invalid func unknown#173`), and a kernel that
/// knows it but not for this program type says `unknown func bpf_get_func_ip#173`.
fn refuses_func_ip(verifier_log: &str) -> bool {
    refuses_helper(verifier_log, bpf_func_id::BPF_FUNC_get_func_ip)
}

/// Attaches `syscalls/sys_enter_NAME` and `sys_exit_NAME` for each syscall.
pub fn attach_syscalls(
    ebpf: &mut Ebpf,
    syscalls: &[String],
    tracefs: &Path,
) -> Result<(), AttachError> {
    if syscalls.len() > SYSCALL_SLOTS as usize {
        return Err(AttachError::TooManySyscalls {
            requested: syscalls.len(),
        });
    }
    check_syscall_names(syscalls, tracefs)?;
    for (slot, name) in syscalls.iter().enumerate() {
        for (side, program_name) in [
            ("enter", format!("sys_enter_{slot}")),
            ("exit", format!("sys_exit_{slot}")),
        ] {
            let tracepoint = format!("sys_{side}_{name}");
            let fail = |e: ProgramError| AttachError::Tracepoint {
                tracepoint: format!("syscalls/{tracepoint}"),
                reason: Reason::of(e, |e| one_line(e)),
            };
            let prog: &mut TracePoint = program(ebpf, &program_name)?;
            prog.load().map_err(fail)?;
            prog.attach("syscalls", &tracepoint).map_err(fail)?;
        }
    }
    Ok(())
}

/// Fails on the first of `syscalls` that has no `syscalls/sys_enter_NAME` tracepoint, with
/// the closest known names.
pub(super) fn check_syscall_names(syscalls: &[String], tracefs: &Path) -> Result<(), AttachError> {
    let events = tracefs.join("events/syscalls");
    match syscalls
        .iter()
        .find(|name| !events.join(format!("sys_enter_{name}")).is_dir())
    {
        Some(name) => Err(AttachError::UnknownSyscall {
            name: name.clone(),
            suggestions: similar_syscalls(&events, name),
        }),
        None => Ok(()),
    }
}

fn similar_syscalls(events: &Path, name: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(events) else {
        return Vec::new();
    };
    let known = entries.filter_map(|e| {
        e.ok()?
            .file_name()
            .to_str()?
            .strip_prefix("sys_enter_")
            .map(str::to_string)
    });
    closest_syscalls(known, name)
}

/// The syscalls (of `known`) to suggest for an unknown `name`: those containing it or
/// contained in it, closest in length first, at most three.
fn closest_syscalls(known: impl Iterator<Item = String>, name: &str) -> Vec<String> {
    let mut names: Vec<String> = known
        .filter(|candidate| candidate.contains(name) || name.contains(candidate.as_str()))
        .collect();
    names.sort_by_key(|c| c.len().abs_diff(name.len()));
    names.truncate(3);
    names
}

/// Attaches the scheduler hooks a run needs: `sched_switch` for `--off-cpu`,
/// `sched_process_fork` to follow a traced process tree, `sched_process_exit` always, and
/// with the hash-map store `sched_process_free`. `sched_switch` is a BTF tracepoint where the
/// frame stacks are in task storage (it reads the two tasks' storage), a raw tracepoint where
/// they are in the hash map (keyed by the tasks' addresses, its arguments); so is
/// `sched_process_free`.
pub fn attach_tracking(
    ebpf: &mut Ebpf,
    store: TaskStore,
    off_cpu: bool,
    follow_forks: bool,
) -> Result<(), AttachError> {
    for hook in tracking_hooks(store, off_cpu, follow_forks) {
        match hook {
            Hook::BtfTracepoint(name) => {
                let fail = |reason: Reason| AttachError::Tracepoint {
                    tracepoint: format!("tp_btf/{name}"),
                    reason,
                };
                let refused = |e: ProgramError| fail(Reason::of(e, |e| one_line(e)));
                let btf = super::kernel_btf().map_err(|e| {
                    fail(Reason::of(e, |e| {
                        format!("--off-cpu needs kernel BTF: {}", one_line(e))
                    }))
                })?;
                let btf_id = btf
                    .tracepoint(name)
                    .ok_or_else(|| fail(Reason::new("no such BTF tracepoint in this kernel")))?;
                let prog: &mut BtfTracePoint = program(ebpf, name)?;
                prog.load_by_btf_id(btf_id).map_err(refused)?;
                prog.attach().map_err(refused)?;
            }
            Hook::RawTracepoint(name) => {
                let fail = |e: ProgramError| AttachError::Tracepoint {
                    tracepoint: format!("raw_tp/{name}"),
                    reason: Reason::of(e, |e| one_line(e)),
                };
                let prog: &mut RawTracePoint = program(ebpf, name)?;
                prog.load().map_err(fail)?;
                prog.attach(name).map_err(fail)?;
            }
            Hook::Tracepoint(name) => {
                let fail = |e: ProgramError| AttachError::Tracepoint {
                    tracepoint: format!("sched/{name}"),
                    reason: Reason::of(e, |e| one_line(e)),
                };
                let prog: &mut TracePoint = program(ebpf, name)?;
                prog.load().map_err(fail)?;
                prog.attach("sched", name).map_err(fail)?;
            }
        }
    }
    Ok(())
}

/// A scheduler hook: its program (named after the event) and how it is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hook {
    /// `tp_btf/NAME`: arguments are BTF-typed kernel pointers.
    BtfTracepoint(&'static str),
    /// `raw_tp/NAME`: arguments are raw values.
    RawTracepoint(&'static str),
    /// The classic tracepoint `sched/NAME`.
    Tracepoint(&'static str),
}

/// The hooks [`attach_tracking`] attaches, in order.
fn tracking_hooks(store: TaskStore, off_cpu: bool, follow_forks: bool) -> Vec<Hook> {
    let hashed = store == TaskStore::HashMap;
    let mut hooks = Vec::new();
    if off_cpu {
        hooks.push(if hashed {
            Hook::RawTracepoint("sched_switch")
        } else {
            Hook::BtfTracepoint("sched_switch")
        });
    }
    if hashed {
        // Deletes what the task's calls after its exit left in the hash map.
        hooks.push(Hook::RawTracepoint("sched_process_free"));
    }
    if follow_forks {
        hooks.push(Hook::Tracepoint("sched_process_fork"));
    }
    // Always: counts an exiting task's open frames (their returns will never come) and
    // deletes its hash-map entry.
    hooks.push(Hook::Tracepoint("sched_process_exit"));
    hooks
}

#[cfg(test)]
mod tests {
    use super::super::error::testing::{io_error, load_error, printed};
    use super::*;

    #[test]
    fn a_verifier_without_bpf_get_func_ip_is_recognised() {
        // 5.10's log for kprobe_entry, shortened.
        let log_5_10 = "0: R1=ctx(id=0,off=0,imm=0) R10=fp0\n; let ip = ...\n\
                        0: (85) call unknown#173\ninvalid func unknown#173\n\
                        processed 0 insns (limit 1000000)\n";
        assert!(refuses_func_ip(log_5_10));
        assert!(refuses_func_ip("unknown func bpf_get_func_ip#173\n"));
        // Another helper, or another reason altogether.
        assert!(!refuses_func_ip("invalid func unknown#174\n"));
        // 5.10's fentry program with `--by arg2`: bpf_get_func_arg is helper 183.
        let by_5_10 = "1216: (85) call unknown#183\ninvalid func unknown#183\n";
        assert!(refuses_helper(by_5_10, bpf_func_id::BPF_FUNC_get_func_arg));
        assert!(!refuses_helper(by_5_10, bpf_func_id::BPF_FUNC_get_func_ret));
        assert!(!refuses_func_ip("invalid func unknown#1730\n"));
        assert!(!refuses_func_ip("R1 invalid mem access 'scalar'\n"));
        assert!(!refuses_func_ip(""));
    }

    #[test]
    fn too_many_kprobes_for_the_kernel_is_one_line_naming_what_is_missing() {
        let text = AttachError::TooManyForKprobe {
            release: "5.10.0-30-cloud-amd64".into(),
            requested: 65,
        }
        .to_string();
        assert!(
            text.starts_with(
                "more than 64 functions in kprobe mode needs Linux 5.15+ (bpf_get_func_ip)"
            ),
            "{text}"
        );
        assert!(text.contains("5.10.0-30-cloud-amd64"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }

    fn target(symbol: &str, address: u64, traceable: Option<bool>) -> Target {
        Target {
            symbol: symbol.into(),
            address,
            traceable,
            note: None,
        }
    }

    fn no_release() -> String {
        panic!("the kernel release is only looked up for an error that names it")
    }

    #[test]
    fn auto_mode_falls_back_to_kprobes_with_a_note_saying_why_not_fentry() {
        let refused = AttachError::Fentry {
            function: "vfs_read".into(),
            reason: Reason::of(io_error(libc::EOPNOTSUPP), |e| one_line(e)),
        };
        assert_eq!(
            fall_back_from_fentry(refused, true, no_release).unwrap(),
            "fentry cannot attach to vfs_read: Operation not supported (os error 95); \
             using kprobe/kretprobe instead"
        );
        let too_many = AttachError::TooManyForFentry { requested: 65 };
        assert_eq!(
            fall_back_from_fentry(too_many, true, no_release).unwrap(),
            "fentry mode handles at most 64 functions per run (65 requested): use --mode \
             kprobe; using kprobe/kretprobe instead"
        );
    }

    #[test]
    fn without_kprobes_auto_mode_fails_with_one_error_naming_both_reasons() {
        let refused = AttachError::Fentry {
            function: "vfs_read".into(),
            reason: Reason::of(io_error(libc::EOPNOTSUPP), |e| one_line(e)),
        };
        let error = fall_back_from_fentry(refused, false, || "6.8.0-test".into()).unwrap_err();
        let AttachError::NoKprobes {
            release,
            fentry: Some(fentry),
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!(release, "6.8.0-test");
        // The fentry reason, with the error under it kept; the function is named by the run.
        assert_eq!(fentry.to_string(), "Operation not supported (os error 95)");
        assert!(fentry.error().unwrap().is::<std::io::Error>());
        let text = printed(error);
        assert!(
            text.starts_with("this kernel (6.8.0-test) has no kprobes (no kprobe PMU in "),
            "{text}"
        );
        assert!(
            text.contains(" and fentry is refused (Operation not supported (os error 95)): "),
            "{text}"
        );
        assert!(!text.contains("fentry cannot attach"), "{text}");
        assert!(text.contains("`hotprof --syscall NAME`"), "{text}");

        // Refused for another reason than a function: that whole message is the reason.
        let error = fall_back_from_fentry(
            AttachError::TooManyForFentry { requested: 65 },
            false,
            || "6.8.0-test".into(),
        )
        .unwrap_err();
        let AttachError::NoKprobes {
            fentry: Some(fentry),
            ..
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!(
            fentry.to_string(),
            "fentry mode handles at most 64 functions per run (65 requested): use --mode kprobe"
        );
        assert!(fentry.error().unwrap().is::<AttachError>());
    }

    #[test]
    fn a_refusal_of_an_unlisted_function_says_it_is_unlisted() {
        let refused = || Reason::new("Invalid argument (os error 22)");
        assert_eq!(
            unlisted_hint(&target("vfs_read.cold", 1, Some(false)), refused()).to_string(),
            "Invalid argument (os error 22) (it is not in available_filter_functions: notrace, \
             inlined or an alias)"
        );
        assert_eq!(
            unlisted_hint(&target("vfs_read", 1, Some(true)), refused()).to_string(),
            "Invalid argument (os error 22)"
        );
        // No tracefs to tell: nothing to hint.
        assert_eq!(
            unlisted_hint(&target("vfs_read", 1, None), refused()).to_string(),
            "Invalid argument (os error 22)"
        );
    }

    #[test]
    fn functions_beyond_the_kprobe_slots_share_kprobe_entry() {
        for (count, slotted, shared) in [
            (0, 0, 0),
            (1, 1, 0),
            (64, 64, 0),
            (65, 64, 1),
            (200, 64, 136),
        ] {
            let ids: Vec<usize> = (0..count).collect();
            let (own, rest) = kprobe_slots(&ids);
            assert_eq!(
                (own.len(), rest.len()),
                (slotted, shared),
                "{count} functions"
            );
            // In order: a function's id is its index in the run's targets.
            assert_eq!(own, &ids[..slotted]);
            assert_eq!(rest, &ids[slotted..count]);
        }
        // The functions left to perf kprobes beside a kprobe.multi link keep their ids: a
        // slot program for those below 64, the shared one above.
        assert_eq!(
            kprobe_slots(&[3, 63, 64, 900]),
            (vec![3, 63], vec![64, 900])
        );
    }

    #[test]
    fn a_verifier_without_bpf_get_func_ip_means_too_many_functions_for_this_kernel() {
        let log_5_10 = "0: (85) call unknown#173\ninvalid func unknown#173\n";
        let error = shared_kprobe_error(load_error(log_5_10), 65, || "5.10.0-30".into());
        assert!(
            matches!(&error, AttachError::TooManyForKprobe { release, requested: 65 }
                if release == "5.10.0-30"),
            "{error:?}"
        );
        // Any other refusal is hotprof's problem, with aya's error kept under it.
        let error = shared_kprobe_error(load_error("R1 invalid mem access\n"), 65, no_release);
        let AttachError::Internal(reason) = &error else {
            panic!("{error:?}");
        };
        assert!(reason.error().unwrap().is::<ProgramError>());
        assert!(
            error
                .message()
                .starts_with("internal: loading kprobe_entry: the BPF_PROG_LOAD syscall"),
            "{}",
            error.message()
        );
    }

    #[test]
    fn scheduler_hooks_follow_the_task_store_and_the_options() {
        use Hook::{BtfTracepoint as Btf, RawTracepoint as Raw, Tracepoint as Tp};
        let storage = TaskStore::TaskStorage;
        let hashed = TaskStore::HashMap;
        // The exit hook always; the fork hook when following a workload.
        assert_eq!(
            tracking_hooks(storage, false, false),
            [Tp("sched_process_exit")]
        );
        assert_eq!(
            tracking_hooks(storage, false, true),
            [Tp("sched_process_fork"), Tp("sched_process_exit")]
        );
        // --off-cpu: sched_switch reads task storage through BTF-typed task pointers...
        assert_eq!(
            tracking_hooks(storage, true, true),
            [
                Btf("sched_switch"),
                Tp("sched_process_fork"),
                Tp("sched_process_exit")
            ]
        );
        // ...and the hash map by the tasks' addresses, a raw tracepoint's arguments; the hash
        // map also needs its entries of freed tasks deleted.
        assert_eq!(
            tracking_hooks(hashed, false, false),
            [Raw("sched_process_free"), Tp("sched_process_exit")]
        );
        assert_eq!(
            tracking_hooks(hashed, true, true),
            [
                Raw("sched_switch"),
                Raw("sched_process_free"),
                Tp("sched_process_fork"),
                Tp("sched_process_exit")
            ]
        );
    }

    #[test]
    fn unknown_syscalls_get_the_closest_known_names() {
        let known = [
            "read",
            "pread64",
            "readv",
            "preadv2",
            "write",
            "readahead",
            "getpid",
        ];
        let closest = |name| closest_syscalls(known.iter().map(|s| s.to_string()), name);
        // Containing it or contained in it, closest in length first, three at most.
        assert_eq!(closest("read"), ["read", "readv", "pread64"]);
        assert_eq!(closest("readx"), ["read"]);
        assert_eq!(closest("getpidd"), ["getpid"]);
        assert!(closest("nosuch").is_empty());
    }
}
