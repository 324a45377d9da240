//! The probe plan: which kernel functions a request names, each timed at its entry or at its
//! call sites, and in which slots. Pure over what the kernel answers ([`Kernel`]: its function
//! table, its BTF, whether it takes a kprobe at an entry, its code), so it is unit-tested
//! without a kernel; `start.rs` asks the real one.

use anyhow::bail;
use profiler_common::KPROBE_SLOTS;

use super::error::SpecError;
use super::spec::{ProbeSpec, Probed};
use crate::attach::{self, KprobeAnswer, LinkKind, Mode};
use crate::resolve::callsites::{CallSite, KernelCode};
use crate::resolve::{self, KernelFunctions, Target};

/// What planning asks the kernel.
pub(super) struct Kernel<'a> {
    pub functions: &'a KernelFunctions,
    /// Whether the kernel's BTF has a function (tells "inlined" from "misspelled").
    pub in_btf: &'a dyn Fn(&str) -> bool,
    /// The kernel's answer to a kprobe at a function's entry (auto mode's question).
    pub kprobe_at_entry: &'a dyn Fn(&str) -> KprobeAnswer,
    /// The kernel's code, read only when a function is timed at its call sites.
    pub code: &'a dyn Fn() -> anyhow::Result<KernelCode>,
}

/// The slots of a run, in order: the functions timed at their entry, then one slot per call
/// site (or group of sites) of the functions timed at their call sites.
#[derive(Debug, Default)]
pub(super) struct ProbePlan {
    pub probed: Vec<Probed>,
    /// Each slot's function (a call site's slot has the function it calls); none for syscalls.
    pub targets: Vec<Target>,
    /// Each call-site slot's sites, after the entry slots.
    pub sites: Vec<Vec<CallSite>>,
}

/// The plan for `requested` functions (names or globs), with `--children`, `--callers` and
/// `--max-functions` from `probe`. `notes` gets what the user should read (a GCC clone picked,
/// why a function moved to its call sites), in order, also when planning fails.
pub(super) fn functions(
    probe: &ProbeSpec,
    requested: &[String],
    kernel: &Kernel,
    notes: &mut Vec<String>,
) -> anyhow::Result<ProbePlan> {
    let mut requested = resolve_functions(kernel, requested, notes)?;
    check_function_count(requested.len(), probe)?;
    let mut children = std::collections::BTreeSet::new();
    if !probe.children.is_empty() {
        if requested.len() != 1 {
            let matched = requested.len();
            return Err(SpecError::ChildrenNeedOneParent { matched }.into());
        }
        for (name, target) in resolve_functions(kernel, &probe.children, notes)? {
            if requested
                .iter()
                .all(|(_, known)| known.symbol != target.symbol)
            {
                children.insert(target.symbol.clone());
                requested.push((name, target));
            }
        }
        if children.is_empty() {
            return Err(SpecError::ChildrenOnlyParent.into());
        }
    }
    let (at_sites, at_entry): (Vec<_>, Vec<_>) = requested.into_iter().partition(|(_, target)| {
        let (placement, note) = attach::place(probe.mode, &target.symbol, target.traceable, || {
            (kernel.kprobe_at_entry)(&target.symbol)
        });
        notes.extend(note);
        placement == attach::Placement::CallSites
    });
    if probe.callers.is_some() && at_sites.is_empty() {
        return Err(SpecError::CallersWithoutSites.into());
    }
    let mut plan = ProbePlan::default();
    for (name, target) in at_entry {
        plan.probed.push(Probed {
            name,
            symbol: target.symbol.clone(),
            site: None,
            child: children.contains(&target.symbol),
            // Until attached.
            link: LinkKind::Perf,
        });
        plan.targets.push(target);
    }
    if at_sites.is_empty() {
        return Ok(plan);
    }
    let code = (kernel.code)()?;
    let mut found = Vec::new();
    for (name, target) in at_sites {
        let covered = covered_sites(&code, &target, probe, notes)?;
        found.push((name, target, covered));
    }
    let budget = (KPROBE_SLOTS as usize).saturating_sub(plan.probed.len());
    let counts: Vec<usize> = found.iter().map(|(_, _, sites)| sites.len()).collect();
    let slots = attach::site_slots(&counts, budget)?;
    for ((name, target, covered), slots) in found.into_iter().zip(slots) {
        for group in attach::group_sites(covered, slots) {
            let site = match group.as_slice() {
                [one] => one.label(),
                more => format!("{} more call sites", more.len()),
            };
            plan.probed.push(Probed {
                name: name.clone(),
                symbol: target.symbol.clone(),
                site: Some(site),
                child: children.contains(&target.symbol),
                link: LinkKind::Perf,
            });
            // Each site's slot has the function as its target (the stacks' leaf).
            plan.targets.push(target.clone());
            plan.sites.push(group);
        }
    }
    Ok(plan)
}

/// The plan for syscalls: one slot each, at its tracepoints.
pub(super) fn syscalls(names: &[String]) -> ProbePlan {
    ProbePlan {
        probed: names
            .iter()
            .map(|s| Probed {
                name: s.clone(),
                symbol: format!("sys_enter_{s}"),
                site: None,
                child: false,
                link: LinkKind::Tracepoint,
            })
            .collect(),
        ..ProbePlan::default()
    }
}

/// Refuses more functions than `--max-functions` allows, before anything is attached: each
/// gets its own histograms in the kernel and its probes, which for thousands take long to
/// set up (and, as perf kprobes, minutes to attach and detach).
fn check_function_count(matched: usize, probe: &ProbeSpec) -> anyhow::Result<()> {
    if matched <= probe.max_functions {
        return Ok(());
    }
    Err(SpecError::TooManyFunctions {
        patterns: probe.targets.functions().to_vec(),
        matched,
        max: probe.max_functions,
    }
    .into())
}

/// Resolves every `--fn` argument: what the user called each target, and the target, each
/// symbol once.
fn resolve_functions(
    kernel: &Kernel,
    requested: &[String],
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<(String, Target)>> {
    let mut resolved: Vec<(String, Target)> = Vec::new();
    for request in requested {
        for target in kernel.functions.resolve(request, kernel.in_btf)? {
            if let Some(note) = &target.note {
                notes.push(note.clone());
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
    target: &Target,
    probe: &ProbeSpec,
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<CallSite>> {
    let function = &target.symbol;
    let sites = code.call_sites(target.address, probe.callers.as_deref());
    if sites.covered.is_empty() {
        let all = code.call_sites(target.address, None);
        match &probe.callers {
            Some(glob) if !all.covered.is_empty() => {
                return Err(SpecError::NoMatchingCaller {
                    glob: glob.clone(),
                    function: function.clone(),
                    sites: all.covered.len(),
                    callers: all.callers(),
                }
                .into());
            }
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
    notes.push(format!(
        "{function}{why} timing it at its call sites ({} in {} callers): {}",
        sites.covered.len(),
        sites.callers(),
        sites.summary()
    ));
    Ok(sites.covered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::spec::Targets;

    const KALLSYMS: &[u8] = b"ffffffff81000000 T _stext\n\
ffffffff81001000 T vfs_read\n\
ffffffff81002000 T vfs_write\n\
ffffffff81003000 T copy_page_from_iter_atomic\n\
ffffffff81004000 T shmem_write_end\n\
ffffffff81005000 T generic_perform_write\n\
ffffffff81006000 T _etext\n";
    /// ftrace lists every function but the notrace copy routine.
    const FILTER: &[u8] = b"vfs_read\nvfs_write\nshmem_write_end\ngeneric_perform_write\n";

    /// `generic_perform_write` calls the copy routine once (`call rel32` at +0x10), in code
    /// as `/proc/kcore` would give it.
    fn code(functions: &KernelFunctions) -> anyhow::Result<KernelCode> {
        let caller = 0xffff_ffff_8100_5000u64;
        let target = 0xffff_ffff_8100_3000u64;
        let mut text = vec![0x90u8; 0x6000];
        let at = (caller - 0xffff_ffff_8100_0000 + 0x10) as usize;
        let rel = (target as i64 - (caller as i64 + 0x10 + 5)) as i32;
        text[at] = 0xe8;
        text[at + 1..at + 5].copy_from_slice(&rel.to_le_bytes());
        Ok(KernelCode::from_text(
            functions,
            0xffff_ffff_8100_0000,
            text,
        ))
    }

    /// A request as the command line makes it: the default `--max-functions`.
    fn probe() -> ProbeSpec {
        ProbeSpec {
            max_functions: 1000,
            ..ProbeSpec::default()
        }
    }

    fn plan_of(probe: &ProbeSpec, requested: &[&str]) -> (anyhow::Result<ProbePlan>, Vec<String>) {
        let table = KernelFunctions::new(KALLSYMS, Some(FILTER), None);
        let kernel = Kernel {
            functions: &table,
            in_btf: &|_| true,
            // The kernel refuses a kprobe in a function without an ftrace location.
            kprobe_at_entry: &|symbol| {
                if symbol == "copy_page_from_iter_atomic" {
                    KprobeAnswer::Refused(std::io::Error::from_raw_os_error(libc::EINVAL))
                } else {
                    KprobeAnswer::Accepted
                }
            },
            code: &|| code(&table),
        };
        let requested: Vec<String> = requested.iter().map(|s| s.to_string()).collect();
        let mut notes = Vec::new();
        let plan = functions(probe, &requested, &kernel, &mut notes);
        (plan, notes)
    }

    #[test]
    fn entry_functions_come_first_then_one_slot_per_call_site() {
        let probe = probe();
        let (plan, notes) = plan_of(&probe, &["vfs_*", "copy_page_from_iter_atomic"]);
        let plan = plan.unwrap();
        let slots: Vec<(&str, Option<&str>)> = plan
            .probed
            .iter()
            .map(|p| (p.symbol.as_str(), p.site.as_deref()))
            .collect();
        assert_eq!(
            slots,
            [
                ("vfs_read", None),
                ("vfs_write", None),
                (
                    "copy_page_from_iter_atomic",
                    Some("generic_perform_write+0x10")
                ),
            ]
        );
        assert_eq!(plan.targets.len(), 3);
        assert_eq!(plan.sites.len(), 1);
        assert!(
            notes
                .iter()
                .any(|n| n.contains("timing it at its call sites (1 in 1 callers)")),
            "{notes:?}"
        );
    }

    #[test]
    fn callers_narrow_the_sites_and_must_match_one() {
        let narrowed = ProbeSpec {
            callers: Some("vfs_*,generic_*".into()),
            ..probe()
        };
        let (plan, _) = plan_of(&narrowed, &["copy_page_from_iter_atomic"]);
        assert_eq!(plan.unwrap().sites.len(), 1);
        let none = ProbeSpec {
            callers: Some("ext4_*".into()),
            ..probe()
        };
        let (plan, _) = plan_of(&none, &["copy_page_from_iter_atomic"]);
        let error = plan.unwrap_err().downcast::<SpecError>();
        assert!(
            matches!(&error, Ok(SpecError::NoMatchingCaller { sites: 1, .. })),
            "{error:?}"
        );
        // --callers with nothing timed at call sites is refused, not ignored.
        let (plan, _) = plan_of(&narrowed, &["vfs_read"]);
        let error = plan.unwrap_err().downcast::<SpecError>();
        assert!(
            matches!(&error, Ok(SpecError::CallersWithoutSites)),
            "{error:?}"
        );
    }

    #[test]
    fn children_need_one_parent_and_are_marked() {
        let probe = ProbeSpec {
            children: vec!["vfs_write".into()],
            ..probe()
        };
        let (plan, _) = plan_of(&probe, &["generic_perform_write"]);
        let plan = plan.unwrap();
        let children: Vec<(&str, bool)> = plan
            .probed
            .iter()
            .map(|p| (p.symbol.as_str(), p.child))
            .collect();
        assert_eq!(
            children,
            [("generic_perform_write", false), ("vfs_write", true)]
        );
        let (plan, _) = plan_of(&probe, &["vfs_*"]);
        let error = plan.unwrap_err().downcast::<SpecError>();
        assert!(
            matches!(&error, Ok(SpecError::ChildrenNeedOneParent { matched: 2 })),
            "{error:?}"
        );
    }

    #[test]
    fn syscalls_take_one_tracepoint_slot_each() {
        let plan = syscalls(&["getpid".into(), "read".into()]);
        let symbols: Vec<&str> = plan.probed.iter().map(|p| p.symbol.as_str()).collect();
        assert_eq!(symbols, ["sys_enter_getpid", "sys_enter_read"]);
        assert!(plan.probed.iter().all(|p| p.link == LinkKind::Tracepoint));
        assert!(plan.targets.is_empty() && plan.sites.is_empty());
    }

    #[test]
    fn a_glob_matching_more_than_max_functions_is_refused_naming_the_count() {
        let mut probe = ProbeSpec {
            targets: Targets::Functions(vec!["vfs_*".into()]),
            max_functions: 3,
            ..ProbeSpec::default()
        };
        assert!(check_function_count(3, &probe).is_ok());
        let refused = check_function_count(40, &probe).unwrap_err().downcast();
        assert!(
            matches!(
                &refused,
                Ok(SpecError::TooManyFunctions { patterns, matched: 40, max: 3 })
                    if patterns == &["vfs_*"]
            ),
            "{refused:?}"
        );
        probe.max_functions = 40;
        assert!(check_function_count(40, &probe).is_ok());
    }
}
