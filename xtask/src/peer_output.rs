//! What the peers print, read: each one's histogram as buckets (lower bound in ns, count), from
//! its own format (bpftrace's `hist()`, libbpf-tools' log2 histogram, `perf ftrace latency`'s
//! table), and the count of the calls it timed.

/// One histogram bucket: its lower bound in nanoseconds and its count.
pub type Bucket = (u64, u64);

/// A libbpf-tools log2 histogram in nanoseconds (`funclatency`'s default unit): lines
/// `       256 -> 511        : 99998    |****|`. Empty when there is none.
pub fn log2_hist_buckets(output: &str) -> Vec<Bucket> {
    output
        .lines()
        .filter_map(|line| {
            let (range, rest) = line.split_once(':')?;
            let (lower, _) = range.split_once("->")?;
            Some((
                lower.trim().parse().ok()?,
                rest.split_whitespace().next()?.parse().ok()?,
            ))
        })
        .collect()
}

/// Sum of a libbpf-tools log2 histogram's counts.
pub fn log2_hist_total(output: &str) -> Option<u64> {
    total(&log2_hist_buckets(output))
}

/// `perf ftrace latency`'s table: lines `   512 - 1024 us |          1 | ###   |`, the last
/// one open-ended (`     1 - ...  ms |`); units ns, us, ms or s.
pub fn perf_latency_buckets(output: &str) -> Vec<Bucket> {
    output
        .lines()
        .filter_map(|line| {
            let mut cells = line.split('|');
            let range = cells.next()?;
            let count = cells.next()?.trim().parse().ok()?;
            let (lower, upper) = range.split_once(" - ")?;
            let unit = match upper.split_whitespace().last()? {
                "ns" => 1,
                "us" => 1_000,
                "ms" => 1_000_000,
                "s" => 1_000_000_000,
                _ => return None,
            };
            Some((lower.trim().parse::<u64>().ok()? * unit, count))
        })
        .collect()
}

/// The call count of `perf ftrace latency`'s statistics: the line `       count:    1000`.
pub fn perf_latency_count(output: &str) -> Option<u64> {
    output.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix("count:")?;
        rest.trim().parse().ok()
    })
}

/// A bpftrace `hist()`: lines `[lo, hi)   count |@@@|` or `[lo]   count |@|`, the bounds
/// with bpftrace's binary suffixes (`1K` = 1024, `M`, `G`).
pub fn bpftrace_hist_buckets(output: &str) -> Vec<Bucket> {
    output
        .lines()
        .filter(|line| line.starts_with('[') && line.ends_with('|'))
        .filter_map(|line| {
            let (bounds, rest) = line[1..].split_once([')', ']'])?;
            let lower = bounds.split(',').next()?.trim();
            let (digits, scale) = match lower.chars().last()? {
                'K' => (&lower[..lower.len() - 1], 1 << 10),
                'M' => (&lower[..lower.len() - 1], 1 << 20),
                'G' => (&lower[..lower.len() - 1], 1 << 30),
                _ => (lower, 1),
            };
            Some((
                digits.parse::<u64>().ok()? * scale,
                rest.split_whitespace().next()?.parse().ok()?,
            ))
        })
        .collect()
}

/// Sum of a bpftrace `hist()`'s bucket counts.
pub fn bpftrace_hist_total(output: &str) -> Option<u64> {
    total(&bpftrace_hist_buckets(output))
}

/// The calls of a histogram; `None` for none at all (the tool printed no histogram).
pub fn total(buckets: &[Bucket]) -> Option<u64> {
    (!buckets.is_empty()).then(|| buckets.iter().map(|&(_, count)| count).sum())
}

/// The calls of `buckets` whose bucket starts in `[from_ns, to_ns)`.
pub fn calls_between(buckets: &[Bucket], from_ns: u64, to_ns: u64) -> u64 {
    buckets
        .iter()
        .filter(|&&(lower, _)| (from_ns..to_ns).contains(&lower))
        .map(|&(_, count)| count)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_bpftrace() {
        let bpftrace = "@ns:\n[256, 512)        194376 |@@@@@|\n[512, 1K)            319 |   |\n[1M, ...)     5 |  |\n";
        assert_eq!(bpftrace_hist_total(bpftrace), Some(194_700));
        assert_eq!(bpftrace_hist_total("Attaching 2 probes...\n"), None);
        assert_eq!(
            bpftrace_hist_buckets(bpftrace),
            [(256, 194_376), (512, 319), (1 << 20, 5)]
        );
        assert_eq!(bpftrace_hist_buckets("[0]   3 |@|\n"), [(0, 3)]);
    }

    #[test]
    fn buckets_from_funclatency_and_perf() {
        let funclatency = "     nsec : count distribution\n\
                           \x20  1048576 -> 2097151    : 20       |****|\n\
                           \x20 16777216 -> 33554431   : 19       |***|\n\
                           avg = 1 nsecs, total: 2 nsecs, count: 39\n";
        assert_eq!(
            log2_hist_buckets(funclatency),
            [(1_048_576, 20), (16_777_216, 19)]
        );
        assert_eq!(log2_hist_total(funclatency), Some(39));
        let perf = "#   DURATION     |      COUNT | GRAPH |\n\
                    \x20  512 - 1024 us |          1 | ### |\n\
                    \x20    1 -    2 ms |         20 | ### |\n\
                    \x20    1 - ...  s  |          2 |     |\n\
                    \x20      count:                   23\n";
        let buckets = perf_latency_buckets(perf);
        assert_eq!(buckets, [(512_000, 1), (1_000_000, 20), (1_000_000_000, 2)]);
        assert_eq!(calls_between(&buckets, 500_000, 4_000_000), 21);
        assert_eq!(perf_latency_count(perf), Some(23));
    }
}
