//! Choosing and attaching a probe mode: fentry/fexit, kprobe/kretprobe or syscall
//! tracepoints.

use std::path::Path;

use aya::{
    Btf, Ebpf,
    maps::HashMap,
    programs::{
        BtfTracePoint, FEntry, FExit, KProbe, ProgramError, RawTracePoint, TracePoint,
        kprobe::KProbeLink,
    },
};
use aya_obj::generated::bpf_func_id;
use profiler_common::{FENTRY_SLOTS, KPROBE_SLOTS, SYSCALL_SLOTS, names};

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
}

/// The mechanism actually in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachedMode {
    Fentry,
    Kprobe,
    Syscall,
}

impl AttachedMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fentry => "fentry",
            Self::Kprobe => "kprobe",
            Self::Syscall => "syscall",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error(
        "this kernel ({release}) has no kprobes (no kprobe PMU in /sys/bus/event_source/devices){}: \
         kernel functions cannot be probed here; `hotprof --syscall NAME` and `hotprof sample` still \
         work, or run inside a VM with a kprobe-enabled kernel: `cargo xtask vm -- hotprof --fn ...`",
        .fentry.as_ref().map(|f| format!(" and fentry is refused ({f})")).unwrap_or_default()
    )]
    NoKprobes {
        release: String,
        fentry: Option<String>,
    },
    #[error("fentry cannot attach to {function}: {reason}")]
    Fentry { function: String, reason: String },
    #[error(
        "fentry mode handles at most {FENTRY_SLOTS} functions per run ({requested} requested): use --mode kprobe"
    )]
    TooManyForFentry { requested: usize },
    #[error("kprobe cannot attach to {function}: {reason}")]
    Kprobe { function: String, reason: String },
    #[error(
        "more than {KPROBE_SLOTS} functions in kprobe mode needs Linux 5.15+ (bpf_get_func_ip), \
         which this kernel ({release}) lacks: probe at most {KPROBE_SLOTS} functions per run \
         ({requested} requested)"
    )]
    TooManyForKprobe { release: String, requested: usize },
    #[error("at most {SYSCALL_SLOTS} syscalls per run ({requested} requested)")]
    TooManySyscalls { requested: usize },
    #[error("unknown syscall '{name}': no tracepoint syscalls/sys_enter_{name}{}", crate::resolve::did_you_mean(.suggestions))]
    UnknownSyscall {
        name: String,
        suggestions: Vec<String>,
    },
    #[error("cannot attach tracepoint {tracepoint}: {reason}")]
    Tracepoint { tracepoint: String, reason: String },
    #[error("internal: {0}")]
    Internal(String),
}

/// Whether this kernel can create kprobes through perf (how aya attaches them).
pub fn kprobes_available() -> bool {
    Path::new("/sys/bus/event_source/devices/kprobe/type").exists()
}

/// The kprobe/kretprobe links of a run, owned apart from their programs so that dropping
/// them closes them in parallel. Each close unregisters one kprobe and waits out an RCU grace
/// period; one after another, 2000 of them took 2.5 minutes in a TCG guest, while closes on
/// several threads share their grace periods. Keep it alive as long as the probes should be.
#[derive(Default)]
pub struct KprobeLinks(Vec<KProbeLink>);

impl Drop for KprobeLinks {
    fn drop(&mut self) {
        const THREADS: usize = 16;
        let mut links = std::mem::take(&mut self.0);
        if links.len() < 2 * THREADS {
            return; // dropped here, one by one: not worth the threads
        }
        let chunk = links.len().div_ceil(THREADS);
        std::thread::scope(|scope| {
            while !links.is_empty() {
                let tail = links.split_off(links.len().saturating_sub(chunk));
                scope.spawn(move || drop(tail));
            }
        });
    }
}

/// Attached function probes: the mode used, notes for the user (fallbacks), and the kprobe
/// links (empty in fentry mode, whose links stay in their programs).
pub struct AttachedFunctions {
    pub mode: AttachedMode,
    pub notes: Vec<String>,
    pub links: KprobeLinks,
}

/// Attaches the function probes. `progress` shows how far attaching has got (a 1000-function
/// glob takes a while).
pub fn attach_functions(
    ebpf: &mut Ebpf,
    targets: &[Target],
    mode: Mode,
    progress: &mut Progress,
) -> Result<AttachedFunctions, AttachError> {
    let mut notes = Vec::new();
    let fentry = |notes| AttachedFunctions {
        mode: AttachedMode::Fentry,
        notes,
        links: KprobeLinks::default(),
    };
    let kprobe = |notes, links| AttachedFunctions {
        mode: AttachedMode::Kprobe,
        notes,
        links,
    };
    match mode {
        Mode::Fentry => {
            attach_fentry(ebpf, targets, progress)?;
            Ok(fentry(notes))
        }
        Mode::Kprobe => {
            let links = attach_kprobes(ebpf, targets, progress)?;
            Ok(kprobe(notes, links))
        }
        Mode::Auto => match attach_fentry(ebpf, targets, progress) {
            Ok(()) => Ok(fentry(notes)),
            Err(error) => {
                detach_fentry(ebpf, targets.len());
                if !kprobes_available() {
                    // Neither mechanism: one error that names both reasons.
                    let fentry = match error {
                        AttachError::Fentry { reason, .. } => reason,
                        other => other.to_string(),
                    };
                    return Err(AttachError::NoKprobes {
                        release: crate::kernel_release(),
                        fentry: Some(fentry),
                    });
                }
                notes.push(format!("{error}; using kprobe/kretprobe instead"));
                let links = attach_kprobes(ebpf, targets, progress)?;
                Ok(kprobe(notes, links))
            }
        },
    }
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
    let btf = Btf::from_sys_fs().map_err(|e| AttachError::Fentry {
        function: first,
        reason: format!("no kernel BTF (/sys/kernel/btf/vmlinux): {e}"),
    })?;
    for (slot, target) in targets.iter().enumerate() {
        let fail = |reason: String| AttachError::Fentry {
            function: target.symbol.clone(),
            reason,
        };
        if target.traceable == Some(false) {
            return Err(fail(
                "not in available_filter_functions (notrace or inlined)".into(),
            ));
        }
        let entry: &mut FEntry = program(ebpf, &format!("fentry_{slot}"))?;
        entry
            .load(&target.symbol, &btf)
            .map_err(|e| fail(one_line(&e)))?;
        entry.attach().map_err(|e| fail(one_line(&e)))?;
        let exit: &mut FExit = program(ebpf, &format!("fexit_{slot}"))?;
        exit.load(&target.symbol, &btf)
            .map_err(|e| fail(one_line(&e)))?;
        exit.attach().map_err(|e| fail(one_line(&e)))?;
        progress.attaching("fentry/fexit pairs", slot + 1, targets.len());
    }
    Ok(())
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

fn attach_kprobes(
    ebpf: &mut Ebpf,
    targets: &[Target],
    progress: &mut Progress,
) -> Result<KprobeLinks, AttachError> {
    if !kprobes_available() {
        return Err(AttachError::NoKprobes {
            release: crate::kernel_release(),
            fentry: None,
        });
    }
    for target in targets {
        if target.address == 0 {
            return Err(AttachError::Kprobe {
                function: target.symbol.clone(),
                reason: "its address is hidden in /proc/kallsyms (kptr_restrict): run as root"
                    .into(),
            });
        }
    }
    // The first KPROBE_SLOTS functions get a program each, whose id is a constant; the rest
    // share `kprobe_entry`, which finds its id by address in FUNC_IPS on every call.
    let (slotted, shared) = targets.split_at(targets.len().min(KPROBE_SLOTS as usize));
    if !shared.is_empty() {
        // Loaded first: before 5.15 the verifier refuses it, and nothing is attached yet.
        load_shared_kprobe(ebpf, targets.len())?;
    }
    let mut links = KprobeLinks::default();
    let attach = |entry: &mut KProbe, target: &Target, links: &mut KprobeLinks| {
        let id = entry
            .attach(&target.symbol, 0)
            .map_err(|e| AttachError::Kprobe {
                function: target.symbol.clone(),
                reason: kprobe_refusal(&e),
            })?;
        links.0.push(take(entry.take_link(id))?);
        Ok::<_, AttachError>(())
    };
    for (id, target) in slotted.iter().enumerate() {
        let entry = load_kprobe(ebpf, &format!("kprobe_{id}"))?;
        attach(entry, target, &mut links)?;
        progress.attaching("kprobes", id + 1, targets.len());
    }
    if !shared.is_empty() {
        let mut func_ips: HashMap<_, u64, u32> = HashMap::try_from(
            ebpf.map_mut(names::FUNC_IPS)
                .ok_or_else(|| AttachError::Internal("FUNC_IPS map missing".into()))?,
        )
        .map_err(|e| AttachError::Internal(e.to_string()))?;
        for (id, target) in targets.iter().enumerate().skip(slotted.len()) {
            func_ips
                .insert(target.address, id as u32, 0)
                .map_err(|e| AttachError::Internal(e.to_string()))?;
        }
        let entry: &mut KProbe = program(ebpf, "kprobe_entry")?;
        for (done, target) in shared.iter().enumerate() {
            attach(entry, target, &mut links)?;
            progress.attaching("kprobes", slotted.len() + done + 1, targets.len());
        }
    }
    let exit = load_kprobe(ebpf, "kretprobe_exit")?;
    for (done, target) in targets.iter().enumerate() {
        attach(exit, target, &mut links)?;
        progress.attaching("kretprobes", done + 1, targets.len());
    }
    Ok(links)
}

/// Loads `kprobe_entry`, the kprobe program shared by the functions beyond the slots. It needs
/// `bpf_get_func_ip` (5.15); an older verifier refusing that helper is one clear line, not
/// its log.
fn load_shared_kprobe(ebpf: &mut Ebpf, requested: usize) -> Result<(), AttachError> {
    const NAME: &str = "kprobe_entry";
    let program: &mut KProbe = program(ebpf, NAME)?;
    match program.load() {
        Ok(()) => Ok(()),
        Err(ProgramError::LoadError { verifier_log, .. })
            if refuses_func_ip(&verifier_log.to_string()) =>
        {
            Err(AttachError::TooManyForKprobe {
                release: crate::kernel_release(),
                requested,
            })
        }
        Err(e) => Err(AttachError::Internal(format!(
            "loading {NAME}: {}",
            one_line(&e)
        ))),
    }
}

/// Whether a verifier log says the kernel does not know `bpf_get_func_ip` (helper 173): before
/// 5.15 it is past the kernel's last helper (`invalid func unknown#173`), and a kernel that
/// knows it but not for this program type says `unknown func bpf_get_func_ip#173`.
fn refuses_func_ip(verifier_log: &str) -> bool {
    let helper = format!("#{}", bpf_func_id::BPF_FUNC_get_func_ip as u32);
    verifier_log.lines().any(|line| {
        let line = line.trim();
        (line.starts_with("invalid func ") || line.starts_with("unknown func "))
            && line.ends_with(&helper)
    })
}

/// Loads the kprobe (or kretprobe) program `name` of hotprof's object into the kernel.
fn load_kprobe<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut KProbe, AttachError> {
    let program: &mut KProbe = program(ebpf, name)?;
    program
        .load()
        .map_err(|e| AttachError::Internal(format!("loading {name}: {}", one_line(&e))))?;
    Ok(program)
}

/// A link just attached, taken out of its program (only fails on an unknown id: a bug).
fn take(link: Result<KProbeLink, aya::programs::ProgramError>) -> Result<KProbeLink, AttachError> {
    link.map_err(|e| AttachError::Internal(format!("taking a kprobe link: {}", one_line(&e))))
}

/// Why the kernel refused a kprobe, with what EINVAL means there.
fn kprobe_refusal(error: &dyn std::error::Error) -> String {
    let text = one_line(error);
    if text.contains("os error 22") {
        format!(
            "{text}: the kernel does not allow a kprobe at this function's entry \
             (noinstr code, a jump label or BUG site there); probe a caller instead"
        )
    } else {
        text
    }
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
    let events = tracefs.join("events/syscalls");
    for (slot, name) in syscalls.iter().enumerate() {
        if !events.join(format!("sys_enter_{name}")).is_dir() {
            return Err(AttachError::UnknownSyscall {
                name: name.clone(),
                suggestions: similar_syscalls(&events, name),
            });
        }
        for (side, program_name) in [
            ("enter", format!("sys_enter_{slot}")),
            ("exit", format!("sys_exit_{slot}")),
        ] {
            let tracepoint = format!("sys_{side}_{name}");
            let fail = |e: &dyn std::error::Error| AttachError::Tracepoint {
                tracepoint: format!("syscalls/{tracepoint}"),
                reason: one_line(e),
            };
            let prog: &mut TracePoint = program(ebpf, &program_name)?;
            prog.load().map_err(|e| fail(&e))?;
            prog.attach("syscalls", &tracepoint).map_err(|e| fail(&e))?;
        }
    }
    Ok(())
}

fn similar_syscalls(events: &Path, name: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(events) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_prefix("sys_enter_")
                .map(str::to_string)
        })
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
    let hashed = store == TaskStore::HashMap;
    if off_cpu && !hashed {
        let fail = |reason: String| AttachError::Tracepoint {
            tracepoint: "tp_btf/sched_switch".into(),
            reason,
        };
        let btf = Btf::from_sys_fs()
            .map_err(|e| fail(format!("--off-cpu needs kernel BTF: {}", one_line(&e))))?;
        let prog: &mut BtfTracePoint = program(ebpf, "sched_switch")?;
        prog.load("sched_switch", &btf)
            .map_err(|e| fail(one_line(&e)))?;
        prog.attach().map_err(|e| fail(one_line(&e)))?;
    }
    for (wanted, name) in [
        (off_cpu && hashed, "sched_switch"),
        // Deletes what the task's calls after its exit left in the hash map.
        (hashed, "sched_process_free"),
    ] {
        if !wanted {
            continue;
        }
        let fail = |e: &dyn std::error::Error| AttachError::Tracepoint {
            tracepoint: format!("raw_tp/{name}"),
            reason: one_line(e),
        };
        let prog: &mut RawTracePoint = program(ebpf, name)?;
        prog.load().map_err(|e| fail(&e))?;
        prog.attach(name).map_err(|e| fail(&e))?;
    }
    for (wanted, name) in [
        (follow_forks, "sched_process_fork"),
        // Always: counts an exiting task's open frames (their returns will never come) and
        // deletes its hash-map entry.
        (true, "sched_process_exit"),
    ] {
        if !wanted {
            continue;
        }
        let fail = |e: &dyn std::error::Error| AttachError::Tracepoint {
            tracepoint: format!("sched/{name}"),
            reason: one_line(e),
        };
        let prog: &mut TracePoint = program(ebpf, name)?;
        prog.load().map_err(|e| fail(&e))?;
        prog.attach("sched", name).map_err(|e| fail(&e))?;
    }
    Ok(())
}

fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T, AttachError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let program = ebpf.program_mut(name).ok_or_else(|| {
        AttachError::Internal(format!("program {name} missing from the eBPF object"))
    })?;
    program
        .try_into()
        .map_err(|e| AttachError::Internal(format!("program {name}: {e}")))
}

/// An error and its causes on one line (aya nests the useful part, e.g. the errno).
pub fn one_line(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    let text = text.replace('\n', " ");
    // A verifier log can be megabytes; its end says why the program was rejected.
    const KEEP: usize = 400;
    if text.len() > 2 * KEEP {
        let head_end = text.floor_char_boundary(KEEP);
        let tail_start = text.ceil_char_boundary(text.len() - KEEP);
        format!("{} [...] {}", &text[..head_end], &text[tail_start..])
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
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
}
