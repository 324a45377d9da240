//! A heatmap's latency rows: each power of two split in four, so an `--interval` record keeps
//! its calls' latency distribution in a few entries (about 100 bytes for a function whose
//! calls span two powers of two) instead of the in-kernel histogram's 32 buckets per power.
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

/// Key values an interval record keeps per function (`--by`); the rest are summed in one.
pub const INTERVAL_KEYS: usize = 20;

/// The value every field of the key summing the rest holds.
pub const OTHER_KEY: &str = "other";

/// An interval's `--by` key values as its record keeps them: the [`INTERVAL_KEYS`] busiest
/// (by calls, ties by value), then one key of [`OTHER_KEY`]s summing the rest (a recorded
/// `other` value included), so no call of the interval is dropped.
pub fn interval_keys(keys: &[KeyRecord]) -> Vec<IntervalKey> {
    let is_other = |key: &KeyRecord| key.key.iter().all(|v| v == OTHER_KEY);
    let mut busiest: Vec<&KeyRecord> = keys.iter().filter(|k| !is_other(k)).collect();
    busiest.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    let rest: Vec<&KeyRecord> = keys
        .iter()
        .filter(|k| is_other(k))
        .chain(busiest.iter().skip(INTERVAL_KEYS).copied())
        .collect();
    busiest.truncate(INTERVAL_KEYS);
    let mut out: Vec<IntervalKey> = busiest
        .into_iter()
        .map(|key| IntervalKey {
            key: key.key.clone(),
            count: key.count,
            heat_buckets: heat_buckets(&key.buckets),
        })
        .collect();
    if !rest.is_empty() {
        let width = keys.iter().map(|k| k.key.len()).max().unwrap_or(1).max(1);
        let buckets: Vec<[u64; 3]> = rest
            .iter()
            .flat_map(|k| k.buckets.iter().copied())
            .collect();
        out.push(IntervalKey {
            key: vec![OTHER_KEY.to_string(); width],
            count: rest.iter().map(|k| k.count).sum(),
            heat_buckets: heat_buckets(&buckets),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use profiler_common::{bucket_index, bucket_lower_bound, bucket_upper_bound};

    use super::*;

    fn key(value: &str, count: u64) -> KeyRecord {
        KeyRecord {
            key: vec![value.to_string()],
            count,
            sum_ns: 0,
            p50_ns: 0,
            p99_ns: 0,
            max_ns: 0,
            buckets: vec![[300, 300, count]],
        }
    }

    #[test]
    fn interval_keys_keep_the_busiest_and_sum_the_rest() {
        let mut keys: Vec<KeyRecord> = (0..25).map(|i| key(&format!("k{i:02}"), 100 + i)).collect();
        keys.push(key(OTHER_KEY, 7));
        let kept = interval_keys(&keys);
        assert_eq!(kept.len(), INTERVAL_KEYS + 1);
        assert_eq!(kept[0].key, ["k24"]);
        assert_eq!(kept[INTERVAL_KEYS - 1].key, ["k05"]);
        let other = &kept[INTERVAL_KEYS];
        assert_eq!(other.key, [OTHER_KEY]);
        // k00..k04 and the recorded `other`.
        assert_eq!(other.count, 100 + 101 + 102 + 103 + 104 + 7);
        assert_eq!(other.heat_buckets, [[256, 319, other.count]]);
        let all: u64 = keys.iter().map(|k| k.count).sum();
        assert_eq!(kept.iter().map(|k| k.count).sum::<u64>(), all);
        assert!(
            interval_keys(&keys[..3])
                .iter()
                .all(|k| k.key != [OTHER_KEY])
        );
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
