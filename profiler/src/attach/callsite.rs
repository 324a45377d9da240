//! Call-site mode: a function without an ftrace location is timed from each `call F` to the
//! instruction after it, by a kprobe on each (allowed, since they are inside an ftrace-able
//! caller). Each site is a slot of its own, so every site has its own histogram, while the
//! slots last; a function with more sites than slots left (`_copy_to_user` has 510 on 6.12)
//! gets a slot each for its first sites and one more that all the others share. The returns
//! share one program that finds the frame its call opened by the stack pointer.
//! Minimum kernel 4.17 (kprobes at an offset, BPF kprobe programs).

use aya::Ebpf;
use aya::programs::KProbe;
use aya::programs::kprobe::KProbeLink;
use profiler_common::KPROBE_SLOTS;

use super::error::{AttachError, Reason, callsite_refusal};
use super::links::RunLinks;
use super::program::{kprobes_available, load_kprobe, take};
use crate::progress::Progress;
use crate::resolve::callsites::CallSite;

/// The program on the instruction after each call.
const RETURN_PROGRAM: &str = "callsite_return";

/// The call sites a run times, and those the kernel refused.
pub struct AttachedSites {
    pub links: RunLinks,
    /// Sites left out: the kernel refused a kprobe at the call or at the instruction after it
    /// (arm64 refuses instructions it cannot single-step there). Their calls are not counted.
    pub refused: Vec<RefusedSite>,
}

/// A call site the kernel would not let hotprof time.
pub struct RefusedSite {
    /// `caller+0xOFFSET` of the refused instruction.
    pub at: String,
    pub reason: Reason,
}

impl std::fmt::Display for RefusedSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a call site in {} is not timed: the kernel refuses a kprobe at {}: {}",
            self.at.split('+').next().unwrap_or(&self.at),
            self.at,
            self.reason
        )
    }
}

/// Attaches `kprobe_{first_slot + i}` on the `call` of every site of `slots[i]`, and the
/// shared return program after each. The slots before `first_slot` belong to functions timed
/// at their entry. A site is timed only if both of its kprobes attach: the return's first
/// (an entry without its return would leave every call open), then the call's, whose refusal
/// closes the return's again. Refused sites are returned beside the links; an error only when
/// the kernel refuses every site.
pub fn attach_call_sites(
    ebpf: &mut Ebpf,
    slots: &[Vec<CallSite>],
    first_slot: usize,
    progress: &mut Progress,
) -> Result<AttachedSites, AttachError> {
    check_slots(first_slot, slots.len())?;
    if !kprobes_available() {
        return Err(AttachError::NoKprobes {
            release: crate::kernel_release(),
            fentry: None,
        });
    }
    let total: usize = slots.iter().map(Vec::len).sum();
    let mut refused = Vec::new();
    let exit = load_kprobe(ebpf, RETURN_PROGRAM)?;
    let mut returns = Vec::with_capacity(total);
    for (index, site) in slots.iter().flatten().enumerate() {
        match attach_at(exit, site, site.return_offset)? {
            Ok(link) => returns.push(Some(link)),
            Err(refusal) => {
                refused.push(refusal);
                returns.push(None);
            }
        }
        progress.attaching("call-site returns", index + 1, total);
    }
    let mut links = RunLinks::default();
    let mut returns = returns.into_iter();
    let mut done = 0;
    for (index, sites) in slots.iter().enumerate() {
        let entry = load_kprobe(ebpf, &format!("kprobe_{}", first_slot + index))?;
        for site in sites {
            done += 1;
            progress.attaching("call sites", done, total);
            let Some(return_link) = returns.next().flatten() else {
                continue;
            };
            match attach_at(entry, site, site.offset)? {
                Ok(link) => links.kprobes.extend([return_link, link]),
                // Dropping the return's link detaches it.
                Err(refusal) => refused.push(refusal),
            }
        }
    }
    if links.kprobes.is_empty() && !refused.is_empty() {
        let first = refused.swap_remove(0);
        return Err(AttachError::CallSite {
            site: first.at,
            reason: first.reason,
        });
    }
    Ok(AttachedSites { links, refused })
}

/// One kprobe of a site: its link, or why the kernel refused it (an error only when hotprof
/// cannot keep the link).
fn attach_at(
    program: &mut KProbe,
    site: &CallSite,
    offset: u64,
) -> Result<Result<KProbeLink, RefusedSite>, AttachError> {
    match program.attach(&site.caller, offset) {
        Ok(id) => Ok(Ok(take(program.take_link(id))?)),
        Err(e) => Ok(Err(RefusedSite {
            at: format!("{}+{offset:#x}", site.caller),
            reason: Reason::of(e, |e| callsite_refusal(e)),
        })),
    }
}

/// How many slots each of the functions with `sites[i]` call sites gets, when `budget` slots
/// are left: as many as it has sites, while they fit; else the functions with fewest sites
/// first, each taking no more than an even share of what is left, so that every function
/// gets at least one. An error when there are more functions than slots.
pub fn site_slots(sites: &[usize], budget: usize) -> Result<Vec<usize>, AttachError> {
    if sites.len() > budget {
        return Err(AttachError::TooManyCallSites {
            requested: KPROBE_SLOTS as usize - budget + sites.len(),
        });
    }
    let mut order: Vec<usize> = (0..sites.len()).collect();
    order.sort_by_key(|&i| sites[i]);
    let mut slots = vec![0; sites.len()];
    let mut left = budget;
    for (done, &i) in order.iter().enumerate() {
        let share = left / (sites.len() - done);
        slots[i] = sites[i].min(share).max(1);
        left -= slots[i];
    }
    Ok(slots)
}

/// `sites` in `slots` groups: one site each while they fit, the last group holding the rest.
pub fn group_sites(mut sites: Vec<CallSite>, slots: usize) -> Vec<Vec<CallSite>> {
    if sites.len() <= slots {
        return sites.into_iter().map(|site| vec![site]).collect();
    }
    let rest = sites.split_off(slots.saturating_sub(1));
    let mut groups: Vec<Vec<CallSite>> = sites.into_iter().map(|site| vec![site]).collect();
    groups.push(rest);
    groups
}

/// Every site needs a kprobe program whose slot is a constant: there are [`KPROBE_SLOTS`],
/// shared with the functions timed at their entry. (The shared `kprobe_entry` finds its slot
/// by the probed function's address, which the kernel gives only for a kprobe at an entry.)
fn check_slots(first_slot: usize, sites: usize) -> Result<(), AttachError> {
    let requested = first_slot + sites;
    if requested > KPROBE_SLOTS as usize {
        return Err(AttachError::TooManyCallSites { requested });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(offset: u64) -> CallSite {
        CallSite {
            caller: "caller".into(),
            offset,
            return_offset: offset + 5,
        }
    }

    #[test]
    fn functions_share_the_slots_left_fewest_sites_first() {
        // copy_page_from_iter_atomic's 3 sites and _copy_to_user's 510, 62 slots left.
        assert_eq!(site_slots(&[510, 3], 62).unwrap(), [59, 3]);
        assert_eq!(site_slots(&[2, 3], 62).unwrap(), [2, 3]);
        assert_eq!(site_slots(&[100, 100, 100], 64).unwrap(), [21, 21, 22]);
        let total: usize = site_slots(&[100, 100, 100], 64).unwrap().iter().sum();
        assert_eq!(total, 64);
        assert!(
            site_slots(&[1, 1, 1], 2).is_err(),
            "more functions than slots"
        );
    }

    #[test]
    fn the_last_slot_takes_the_sites_that_do_not_fit() {
        let sites: Vec<CallSite> = (0..10).map(site).collect();
        let groups = group_sites(sites.clone(), 4);
        assert_eq!(groups.len(), 4);
        assert_eq!(groups[..3], [vec![site(0)], vec![site(1)], vec![site(2)]]);
        assert_eq!(groups[3], sites[3..]);
        assert_eq!(group_sites(sites.clone(), 10).len(), 10);
        assert_eq!(group_sites(sites.clone(), 1), [sites]);
    }

    #[test]
    fn sites_and_entry_functions_share_the_kprobe_slots() {
        assert!(check_slots(0, KPROBE_SLOTS as usize).is_ok());
        assert!(check_slots(2, KPROBE_SLOTS as usize - 2).is_ok());
        let error = check_slots(1, 510).unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "call-site mode has {KPROBE_SLOTS} kprobe slots per run, one for each function \
                 timed at its entry and at least one for each timed at its call sites (511 \
                 needed): narrow the --fn globs"
            )
        );
    }
}
