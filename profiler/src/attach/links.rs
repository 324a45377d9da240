//! The links a run owns apart from its programs: kprobe links, closed in parallel when
//! dropped, and fentry mode's tracing-multi links (plain descriptors).

use std::os::fd::OwnedFd;

use aya::programs::kprobe::KProbeLink;

/// The links of a run that its programs do not hold: kprobe/kretprobe links (perf kprobes,
/// kprobe.multi and kprobe.session links, call sites) and fentry mode's tracing-multi links.
/// Owned apart from their programs so that dropping them closes the kprobe links in
/// parallel: each close unregisters one kprobe and waits out an RCU grace period; one after
/// another, 2000 of them took 2.5 minutes in a TCG guest, while closes on several threads
/// share their grace periods. Keep it alive as long as the probes should be.
#[derive(Default)]
pub struct RunLinks {
    pub(super) kprobes: Vec<KProbeLink>,
    /// Two descriptors (`tracing_multi.rs`), each closing every function of its side.
    pub(super) tracing_multi: Vec<OwnedFd>,
}

impl RunLinks {
    /// Takes `other`'s links into these.
    pub fn extend(&mut self, mut other: RunLinks) {
        self.kprobes.append(&mut other.kprobes);
        self.tracing_multi.append(&mut other.tracing_multi);
    }
}

impl Drop for RunLinks {
    fn drop(&mut self) {
        const THREADS: usize = 16;
        let mut links = std::mem::take(&mut self.kprobes);
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
