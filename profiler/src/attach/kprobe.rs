//! kprobe/kretprobe: a perf kprobe and kretprobe per function (Linux 4.17+), or one
//! kprobe.multi or kprobe.session link for the functions ftrace lists (`multi.rs`,
//! `session_link.rs`). A perf kprobe's function whose id is below [`KPROBE_SLOTS`] gets a
//! slot program of its own; the rest share `kprobe_entry`, which needs `bpf_get_func_ip`
//! (Linux 5.15+).

use aya::{
    Ebpf,
    maps::{HashMap, MapError},
    programs::{KProbe, ProgramError},
};
use aya_obj::generated::bpf_func_id;
use profiler_common::{KPROBE_SLOTS, names};

use super::error::{AttachError, Reason, kprobe_refusal, one_line};
use super::interrupt::AttachSignals;
use super::links::RunLinks;
use super::modes::LinkKind;
use super::multi::{self, KprobeAttach};
use super::program::{kprobes_available, load_kprobe, program, refuses_helper, take};
use super::session_link;
use crate::progress::Progress;
use crate::resolve::Target;

/// What [`attach_kprobes`] attached.
pub(super) struct AttachedKprobes {
    pub(super) links: RunLinks,
    /// Per target: a perf kprobe, or through the kprobe.multi (or kprobe.session) link.
    pub(super) kinds: Vec<LinkKind>,
    pub(super) notes: Vec<String>,
}

/// Attaches `targets` in kprobe mode: through a kprobe.multi link where `how` allows and the
/// kernel has one ([`super::multi`]), as perf kprobes otherwise, and always for the functions
/// ftrace cannot trace. A target's id is its index either way.
pub(super) fn attach_kprobes(
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
    let mut kinds = vec![LinkKind::Perf; targets.len()];
    let mut links = RunLinks::default();
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
                    kinds: vec![LinkKind::Session; targets.len()],
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
                    kinds[id] = LinkKind::Multi;
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
        kinds,
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
) -> Result<RunLinks, AttachError> {
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
    let mut links = RunLinks::default();
    let total = ids.len();
    let attach = |entry: &mut KProbe, target: &Target, links: &mut RunLinks| {
        let id = entry
            .attach(&target.symbol, 0)
            .map_err(|e| AttachError::Kprobe {
                function: target.symbol.clone(),
                reason: Reason::of(e, |e| kprobe_refusal(e)),
            })?;
        links.kprobes.push(take(entry.take_link(id))?);
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

#[cfg(test)]
mod tests {
    use super::super::error::testing::load_error;
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

    fn no_release() -> String {
        panic!("the kernel release is only looked up for an error that names it")
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
}
