//! The stacks a `--stacks` run collected, as addresses: what the collector reads from the
//! kernel and the flame graphs and stack tables are drawn from.

/// One distinct stack of a probed function, with the latency spent under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectedStack {
    pub func: u32,
    pub tgid: u32,
    pub comm: String,
    /// Kernel frames, leaf first; empty when the stack was lost (see `kernel_error`).
    pub kernel: Vec<u64>,
    /// User frames, leaf first; empty for kernel threads or when not captured.
    pub user: Vec<u64>,
    pub total_ns: u64,
    pub count: u64,
}

/// Makes stacks of calls walked a random 1 in `every` (`--stacks-every N`) stand for all
/// calls: each walked call counts `every` times, in its count and in its latency. Unbiased:
/// a path of n calls has about n/N walked, so N times that estimates n, within ±√(n·(N−1))
/// (one standard deviation of the binomial count). `every` ≤ 1 leaves them as they are.
pub fn weight_sampled(stacks: &mut [CollectedStack], every: u32) {
    let weight = u64::from(every.max(1));
    for stack in stacks {
        stack.total_ns = stack.total_ns.saturating_mul(weight);
        stack.count = stack.count.saturating_mul(weight);
    }
}

/// Calls whose stack was walked, per function slot (`--stacks`): the per-stack counts as read
/// from the kernel, before [`weight_sampled`]. Slots with no stack are 0.
pub fn walked_calls(stacks: &[CollectedStack], slots: usize) -> Vec<u64> {
    let mut walked = vec![0u64; slots];
    for stack in stacks {
        if let Some(slot) = walked.get_mut(stack.func as usize) {
            *slot += stack.count;
        }
    }
    walked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collected(func: u32, total_ns: u64, count: u64) -> CollectedStack {
        CollectedStack {
            func,
            tgid: 7,
            comm: "w".into(),
            kernel: vec![0xffff_ffff_8100_0000],
            user: Vec::new(),
            total_ns,
            count,
        }
    }

    #[test]
    fn sampled_stacks_count_each_walked_call_n_times() {
        let mut stacks = vec![collected(0, 1_000, 3), collected(1, 50, 1)];
        let walked = walked_calls(&stacks, 3);
        weight_sampled(&mut stacks, 8);
        assert_eq!(
            stacks
                .iter()
                .map(|s| (s.total_ns, s.count))
                .collect::<Vec<_>>(),
            [(8_000, 24), (400, 8)]
        );
        // Walked calls are the kernel's counts, not the weighted ones; slot 2 had none.
        assert_eq!(walked, [3, 1, 0]);
        // Every call walked (N = 1, or 0 from a default): the figures are exact.
        let mut exact = vec![collected(0, 1_000, 3)];
        weight_sampled(&mut exact, 1);
        weight_sampled(&mut exact, 0);
        assert_eq!((exact[0].total_ns, exact[0].count), (1_000, 3));
        // A slot beyond the ones asked for is left out, not a panic.
        assert_eq!(walked_calls(&[collected(9, 1, 1)], 2), [0, 0]);
    }

    #[test]
    fn weighting_saturates_instead_of_wrapping() {
        let mut stacks = vec![collected(0, u64::MAX / 2, u64::MAX / 4)];
        weight_sampled(&mut stacks, 8);
        assert_eq!((stacks[0].total_ns, stacks[0].count), (u64::MAX, u64::MAX));
    }

    /// The estimate is unbiased and its spread is the binomial one the report prints: walk a
    /// random 1 in N calls of two paths (a deterministic generator) many times over.
    #[test]
    fn weighted_counts_estimate_each_path_within_the_binomial_spread() {
        let every = 8u32;
        let paths = [30_000u64, 10_000];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            // xorshift64*: enough for a sampling test, and the same numbers every run.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
        };
        let trials = 200;
        for (func, &calls) in paths.iter().enumerate() {
            let mut estimates = Vec::new();
            for _ in 0..trials {
                let walked = (0..calls).filter(|_| next() % every == 0).count() as u64;
                let mut stacks = vec![collected(func as u32, walked * 100, walked)];
                weight_sampled(&mut stacks, every);
                estimates.push(stacks[0].count as f64);
            }
            let mean = estimates.iter().sum::<f64>() / trials as f64;
            let sd = (estimates.iter().map(|e| (e - mean).powi(2)).sum::<f64>()
                / (trials - 1) as f64)
                .sqrt();
            let predicted = (calls as f64 * f64::from(every - 1)).sqrt();
            // The mean of 200 estimates is within 5 of its standard errors of the truth.
            assert!(
                (mean - calls as f64).abs() < 5.0 * predicted / (trials as f64).sqrt(),
                "path of {calls}: mean estimate {mean}"
            );
            // The sample spread matches √(n·(N−1)) within 20 % (its own error is ~5 %).
            assert!(
                (sd / predicted - 1.0).abs() < 0.2,
                "path of {calls}: spread {sd}, predicted {predicted}"
            );
        }
    }
}
