//! What the peers print, read: each one's count of the calls it timed, from its own
//! histogram's format (bpftrace's `hist()`, libbpf-tools' log2 histogram, `perf ftrace
//! latency`'s statistics).

/// Sum of a libbpf-tools log2 histogram's counts (`funclatency`): lines
/// `       256 -> 511        : 99998    |****|`.
pub fn log2_hist_total(output: &str) -> Option<u64> {
    let counts: Vec<u64> = output
        .lines()
        .filter(|line| line.contains("->"))
        .filter_map(|line| {
            let (_, rest) = line.split_once(':')?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

/// The call count of `perf ftrace latency`'s statistics: the line `       count:    1000`.
pub fn perf_latency_count(output: &str) -> Option<u64> {
    output.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix("count:")?;
        rest.trim().parse().ok()
    })
}

/// Sum of a bpftrace `hist()`'s bucket counts: lines `[lo, hi)   count |@@@|`.
pub fn bpftrace_hist_total(output: &str) -> Option<u64> {
    let counts: Vec<u64> = output
        .lines()
        .filter(|line| line.starts_with('[') && line.ends_with('|'))
        .filter_map(|line| {
            let (_, rest) = line.split_once([')', ']'])?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_bpftrace() {
        let bpftrace = "@ns:\n[256, 512)        194376 |@@@@@|\n[512, 1K)            319 |   |\n[1M, ...)     5 |  |\n";
        assert_eq!(bpftrace_hist_total(bpftrace), Some(194_700));
        assert_eq!(bpftrace_hist_total("Attaching 2 probes...\n"), None);
    }
}
