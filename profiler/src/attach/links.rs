//! The kprobe links a run owns, closed in parallel when dropped.

use aya::programs::kprobe::KProbeLink;

/// The kprobe/kretprobe links of a run, owned apart from their programs so that dropping
/// them closes them in parallel. Each close unregisters one kprobe and waits out an RCU grace
/// period; one after another, 2000 of them took 2.5 minutes in a TCG guest, while closes on
/// several threads share their grace periods. Keep it alive as long as the probes should be.
#[derive(Default)]
pub struct KprobeLinks(pub(super) Vec<KProbeLink>);

impl KprobeLinks {
    /// Takes `other`'s links into these.
    pub fn extend(&mut self, mut other: KprobeLinks) {
        self.0.append(&mut other.0);
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
