//! Call-site mode: a function without an ftrace location is timed from each `call F` to the
//! instruction after it, by a kprobe on each (allowed, since they are inside an ftrace-able
//! caller). Each site is a slot of its own, so every site has its own histogram; the returns
//! share one program that finds the frame its call opened by the stack pointer.
//! Minimum kernel 4.17 (kprobes at an offset, BPF kprobe programs).

use aya::Ebpf;
use profiler_common::KPROBE_SLOTS;

use super::kprobes_available;
use super::mode::{AttachError, KprobeLinks, Reason, kprobe_refusal, load_kprobe, take};
use crate::progress::Progress;
use crate::resolve::callsites::CallSite;

/// The program on the instruction after each call.
const RETURN_PROGRAM: &str = "callsite_return";

/// Attaches `kprobe_{first_slot + i}` on the `call` of `sites[i]` and the shared return
/// program after it. The slots before `first_slot` belong to functions timed at their entry.
pub fn attach_call_sites(
    ebpf: &mut Ebpf,
    sites: &[CallSite],
    first_slot: usize,
    progress: &mut Progress,
) -> Result<KprobeLinks, AttachError> {
    check_slots(first_slot, sites.len())?;
    if !kprobes_available() {
        return Err(AttachError::NoKprobes {
            release: crate::kernel_release(),
            fentry: None,
        });
    }
    let mut links = KprobeLinks::default();
    let attach = |program: &mut aya::programs::KProbe,
                  site: &CallSite,
                  offset: u64,
                  links: &mut KprobeLinks| {
        let id = program
            .attach(&site.caller, offset)
            .map_err(|e| AttachError::CallSite {
                site: format!("{}+{offset:#x}", site.caller),
                reason: Reason::of(e, |e| kprobe_refusal(e)),
            })?;
        links.0.push(take(program.take_link(id))?);
        Ok::<_, AttachError>(())
    };
    for (index, site) in sites.iter().enumerate() {
        let entry = load_kprobe(ebpf, &format!("kprobe_{}", first_slot + index))?;
        attach(entry, site, site.offset, &mut links)?;
        progress.attaching("call sites", index + 1, sites.len());
    }
    let exit = load_kprobe(ebpf, RETURN_PROGRAM)?;
    for (index, site) in sites.iter().enumerate() {
        attach(exit, site, site.return_offset, &mut links)?;
        progress.attaching("call-site returns", index + 1, sites.len());
    }
    Ok(links)
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

    #[test]
    fn sites_and_entry_functions_share_the_kprobe_slots() {
        assert!(check_slots(0, KPROBE_SLOTS as usize).is_ok());
        assert!(check_slots(2, KPROBE_SLOTS as usize - 2).is_ok());
        let error = check_slots(1, 510).unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "call-site mode times at most {KPROBE_SLOTS} call sites and functions per run \
                 (511 requested): narrow the sites with --callers GLOB"
            )
        );
    }
}
