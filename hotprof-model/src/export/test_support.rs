//! Builders shared by the export modules' unit tests.

use crate::model::{CallerRecord, KeyRecord};

/// A call site's row: `count` calls taking `sum_ns` in all, p50 1.5 µs, p99 40 µs.
pub fn caller(site: &str, count: u64, sum_ns: u64) -> CallerRecord {
    CallerRecord {
        site: site.into(),
        count,
        sum_ns,
        p50_ns: 1_500,
        p99_ns: 40_000,
    }
}

/// A `--by` key value's row, with the figures of [`caller`] (and max 90 µs, no buckets).
pub fn key(values: &[&str], count: u64, sum_ns: u64) -> KeyRecord {
    KeyRecord {
        key: values.iter().map(|v| (*v).to_string()).collect(),
        count,
        sum_ns,
        p50_ns: 1_500,
        p99_ns: 40_000,
        max_ns: 90_000,
        buckets: Vec::new(),
    }
}
