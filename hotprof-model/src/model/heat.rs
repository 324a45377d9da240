//! What an interval record keeps for its heatmap column: latency rows, each power of two
//! split in four, so it holds its calls' latency distribution in a few entries (about 100
//! bytes for a function whose calls span two powers of two) instead of the in-kernel
//! histogram's 32 buckets per power; with `--by`, the rows of its busiest key values.
//!
//! Every in-kernel bucket lies inside one row (its width, at most 1/32 of its power of two,
//! divides the row's 1/4, and both start at the power), so coarsening counts every call in
//! exactly the row its duration falls in.

use crate::model::{IntervalKey, KeyRecord};

/// The row holding `ns`: `(lower, upper)`, both inclusive. Values below 4 get a row each.
pub fn heat_row(ns: u64) -> (u64, u64) {
    if ns < 4 {
        return (ns, ns);
    }
    let power = 63 - ns.leading_zeros();
    let width = 1u64 << (power - 2);
    let lower = ns & !(width - 1);
    (lower, lower + (width - 1))
}

/// In-kernel buckets (`[lower_ns, upper_ns, count]`, upper inclusive, any order) summed into
/// heatmap rows, non-empty rows ascending, in the same form.
pub fn heat_buckets(buckets: &[[u64; 3]]) -> Vec<[u64; 3]> {
    let mut rows = std::collections::BTreeMap::<(u64, u64), u64>::new();
    for &[lower, _, count] in buckets {
        if count > 0 {
            *rows.entry(heat_row(lower)).or_default() += count;
        }
    }
    rows.into_iter()
        .map(|((lower, upper), count)| [lower, upper, count])
        .collect()
}

/// Key values an interval record keeps per function (`--by`): its busiest.
pub const INTERVAL_KEYS: usize = 20;

/// An interval's `--by` key values as its record keeps them: the [`INTERVAL_KEYS`] busiest
/// (by calls, ties by value), each with its heatmap rows. The rest are not kept: a heatmap
/// draws them as the function's calls that no kept value holds.
pub fn interval_keys(keys: &[KeyRecord]) -> Vec<IntervalKey> {
    let mut busiest: Vec<&KeyRecord> = keys.iter().collect();
    busiest.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    busiest
        .into_iter()
        .take(INTERVAL_KEYS)
        .map(|key| IntervalKey {
            key: key.key.clone(),
            count: key.count,
            heat_buckets: heat_buckets(&key.buckets),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use profiler_common::{bucket_index, bucket_lower_bound, bucket_upper_bound};

    use super::*;

    #[test]
    fn interval_keys_keep_the_busiest() {
        let keys: Vec<KeyRecord> = (0..25)
            .map(|i| KeyRecord {
                key: vec![format!("k{i:02}")],
                count: 100 + i,
                sum_ns: 0,
                p50_ns: 0,
                p99_ns: 0,
                max_ns: 0,
                buckets: vec![[300, 300, 100 + i]],
            })
            .collect();
        let kept = interval_keys(&keys);
        assert_eq!(kept.len(), INTERVAL_KEYS);
        assert_eq!(kept[0].key, ["k24"]);
        assert_eq!(kept[INTERVAL_KEYS - 1].key, ["k05"]);
        assert_eq!(kept[0].heat_buckets, [[256, 319, 124]]);
    }

    #[test]
    fn rows_are_quarters_of_a_power_of_two() {
        assert_eq!(heat_row(0), (0, 0));
        assert_eq!(heat_row(3), (3, 3));
        assert_eq!(heat_row(4), (4, 4));
        assert_eq!(heat_row(7), (7, 7));
        assert_eq!(heat_row(8), (8, 9));
        assert_eq!(heat_row(256), (256, 319));
        assert_eq!(heat_row(319), (256, 319));
        assert_eq!(heat_row(320), (320, 383));
        assert_eq!(heat_row(511), (448, 511));
        assert_eq!(heat_row(u64::MAX).1, u64::MAX);
    }

    #[test]
    fn every_kernel_bucket_lies_in_one_row() {
        for index in 0..profiler_common::NUM_BUCKETS {
            let (lower, upper) = (bucket_lower_bound(index), bucket_upper_bound(index));
            assert_eq!(
                heat_row(lower),
                heat_row(upper),
                "bucket {index} ({lower}..={upper}) straddles a row"
            );
        }
    }

    #[test]
    fn coarsening_keeps_every_call() {
        let values = [5u64, 9, 300, 301, 340, 1_000, 1_000_000];
        let mut buckets = std::collections::BTreeMap::<u32, u64>::new();
        for v in values {
            *buckets.entry(bucket_index(v)).or_default() += 1;
        }
        let raw: Vec<[u64; 3]> = buckets
            .iter()
            .map(|(&i, &c)| [bucket_lower_bound(i), bucket_upper_bound(i), c])
            .collect();
        let rows = heat_buckets(&raw);
        assert_eq!(rows.iter().map(|r| r[2]).sum::<u64>(), values.len() as u64);
        assert_eq!(rows[2], [256, 319, 2]);
        assert_eq!(rows[3], [320, 383, 1]);
        for v in values {
            assert!(rows.iter().any(|r| r[0] <= v && v <= r[1]), "{v} in no row");
        }
    }
}
