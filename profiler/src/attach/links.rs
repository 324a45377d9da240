//! The links a run owns apart from its programs: kprobe links, closed in parallel when
//! dropped, and fentry mode's tracing-multi links (plain descriptors).

use std::os::fd::OwnedFd;

use aya::programs::kprobe::KProbeLink;

/// The kprobe/kretprobe links of a run, owned apart from their programs so that dropping
/// them closes them in parallel. Each close unregisters one kprobe and waits out an RCU grace
/// period; one after another, 2000 of them took 2.5 minutes in a TCG guest, while closes on
/// several threads share their grace periods. The second field holds tracing-multi links
/// (`tracing_multi.rs`): two descriptors, each closing every function of its side. Keep it
/// alive as long as the probes should be.
#[derive(Default)]
pub struct KprobeLinks(pub(super) Vec<KProbeLink>, pub(super) Vec<OwnedFd>);

impl KprobeLinks {
    /// Takes `other`'s links into these.
    pub fn extend(&mut self, mut other: KprobeLinks) {
        self.0.append(&mut other.0);
        self.1.append(&mut other.1);
    }
}

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
