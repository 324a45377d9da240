//! Whether the kernel creates kprobe.multi (5.18+) and kprobe.session (6.10+) links, asked
//! through the code a run creates them with ([`KprobeAttach::try_link`]: hotprof's own link
//! programs, loaded and linked to one function by the patched aya), so that doctor's answer is
//! what a run gets. The links are dropped at once; the programs stay with the object until
//! doctor drops it.

use crate::attach::KprobeAttach;
use crate::resolve::Target;

use super::facts::{Tried, tidy_reason};

/// A `kind` link (kprobe.multi or kprobe.session) on `target`, created and dropped. A refused
/// link is worded as the kernel's error alone (the row says what its errno means); a program
/// that did not load, or a kernel without what the program needs, as the run words it.
pub fn kprobe_link(ebpf: &mut aya::Ebpf, kind: KprobeAttach, target: Option<&Target>) -> Tried {
    let Some(target) = target else {
        return Tried::NotTried("no getpid function found in /proc/kallsyms".into());
    };
    match kind.try_link(ebpf, target) {
        Ok(()) => Tried::Works(format!("link created on {}", target.symbol)),
        Err(refused) => Tried::Fails(match refused.kernel_refusal() {
            Some(error) => error.to_string(),
            None => tidy_reason(&refused.to_string()),
        }),
    }
}
