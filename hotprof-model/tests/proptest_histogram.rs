//! Property tests of the log-linear latency histogram shared by the eBPF programs and
//! userspace (`profiler_common::histogram`), of its userspace form (`hotprof_model::model::Histogram`)
//! and of the merging of per-CPU aggregates (`hotprof_model::model::merge_stats`).
//!
//! Run with `cargo test -p hotprof-model --test proptest_histogram`; more cases with
//! `PROPTEST_CASES=10000 cargo test -p hotprof-model --test proptest_histogram`.

use hotprof_model::model::Histogram;
use hotprof_model::model::merge_stats;
use profiler_common::histogram::add_square;
use profiler_common::{
    Call, FuncStats, NUM_BUCKETS, bucket_index, bucket_lower_bound, bucket_upper_bound,
};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// Any `u64`, weighted so every power of two is as likely as any other (a uniform `u64` is
/// almost always above 2^60), with the small exact values and the edges of the range and of
/// each power of two well represented.
fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => (0u32..64, any::<u64>()).prop_map(|(shift, bits)| bits >> shift),
        2 => 0u64..256,
        2 => (0u32..64, 0u64..3).prop_map(|(msb, offset)| (1u64 << msb).wrapping_add(offset).wrapping_sub(1)),
        1 => any::<u64>(),
        1 => Just(u64::MAX),
    ]
}

/// A latency in nanoseconds as the probes see them: 0 ns to ~18 minutes, log-uniform, so sums
/// of a few thousand never overflow a `u64`.
fn latency() -> impl Strategy<Value = u64> {
    (0u32..40, any::<u64>()).prop_map(|(bits, raw)| raw & ((1u64 << (bits + 1)) - 1))
}

/// Samples of one run: either spread out, or a few distinct values repeated (ties across
/// ranks, the case a rank-based quantile gets wrong first).
fn samples(max: usize) -> impl Strategy<Value = Vec<u64>> {
    prop_oneof![
        prop::collection::vec(value(), 1..max),
        (
            prop::collection::vec(value(), 1..6),
            prop::collection::vec(any::<prop::sample::Index>(), 1..max)
        )
            .prop_map(|(distinct, picks)| picks.iter().map(|i| *i.get(&distinct)).collect()),
    ]
}

fn histogram_of(values: &[u64]) -> Histogram {
    let mut histogram = Histogram::new();
    for &value in values {
        histogram.record(value);
    }
    histogram
}

/// Raw `(index, count)` pairs as read from the per-CPU `HIST` map, out-of-range indices and
/// zero counts included (both must be ignored).
fn raw_buckets() -> impl Strategy<Value = Vec<(u32, u64)>> {
    prop::collection::vec(
        (
            0..NUM_BUCKETS + 8,
            prop_oneof![Just(0u64), 1u64..4, 0u64..(1 << 40)],
        ),
        0..64,
    )
}

fn histogram_from_buckets(buckets: &[(u32, u64)]) -> Histogram {
    let mut histogram = Histogram::new();
    for &(index, count) in buckets {
        histogram.add_bucket(index, count);
    }
    histogram
}

fn merged(a: &Histogram, b: &Histogram) -> Histogram {
    let mut out = a.clone();
    out.merge(b);
    out
}

/// The exact sample quantile: the observation of rank ⌈q·n⌉ (at least 1) in sorted order.
/// `q = numerator / denominator`, computed in integers so no float rounding is involved.
fn exact_quantile(sorted: &[u64], numerator: u64, denominator: u64) -> u64 {
    let n = sorted.len() as u64;
    let rank = (n * numerator).div_ceil(denominator).clamp(1, n);
    sorted[rank as usize - 1]
}

/// `|estimate - exact| ≤ 1.6% · exact`, in integers (values go up to `u64::MAX`).
fn within_half_a_bucket(estimate: u64, exact: u64) -> bool {
    u128::from(estimate.abs_diff(exact)) * 1000 <= u128::from(exact) * 16
}

// ---------------------------------------------------------------------------------------------
// profiler_common: bucket layout and the 128-bit sum of squares
// ---------------------------------------------------------------------------------------------

proptest! {
    #[test]
    fn every_value_lies_within_its_buckets_bounds(v in value()) {
        let index = bucket_index(v);
        prop_assert!(index < NUM_BUCKETS, "{v} -> bucket {index}");
        let (lower, upper) = (bucket_lower_bound(index), bucket_upper_bound(index));
        prop_assert!(lower <= v && v <= upper, "{v} not in bucket {index} = [{lower}, {upper}]");
        // Buckets tile the range: the neighbours start and end right next to this one.
        if index > 0 {
            prop_assert_eq!(bucket_upper_bound(index - 1), lower - 1);
        }
        if index + 1 < NUM_BUCKETS {
            prop_assert_eq!(bucket_lower_bound(index + 1), upper + 1);
        }
    }

    #[test]
    fn small_values_have_exact_buckets(v in 0u64..64) {
        let index = bucket_index(v);
        prop_assert_eq!((bucket_lower_bound(index), bucket_upper_bound(index)), (v, v));
    }

    #[test]
    fn buckets_above_64_are_at_most_3_2_percent_wide(v in value().prop_filter("above 64", |&v| v >= 64)) {
        let index = bucket_index(v);
        let (lower, upper) = (bucket_lower_bound(index), bucket_upper_bound(index));
        let width = u128::from(upper - lower) + 1;
        // width / lower ≤ 3.2%, in integers.
        prop_assert!(width * 1000 <= u128::from(lower) * 32, "bucket {index} = [{lower}, {upper}] is {width} wide");
    }

    #[test]
    fn bucket_index_is_monotonic(a in value(), b in value()) {
        let (low, high) = (a.min(b), a.max(b));
        prop_assert!(bucket_index(low) <= bucket_index(high), "{low} -> {}, {high} -> {}", bucket_index(low), bucket_index(high));
    }

    #[test]
    fn add_square_equals_the_wrapping_u128_sum_of_squares(
        start in any::<(u64, u64)>(),
        values in prop::collection::vec(value(), 0..64),
    ) {
        let (mut lo, mut hi) = start;
        let mut reference = (u128::from(start.1) << 64) | u128::from(start.0);
        for &v in &values {
            add_square(&mut lo, &mut hi, v);
            reference = reference.wrapping_add(u128::from(v) * u128::from(v));
            prop_assert_eq!((u128::from(hi) << 64) | u128::from(lo), reference, "after adding {}²", v);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// hotprof_model::model::Histogram: record, add_bucket, merge, total
// ---------------------------------------------------------------------------------------------

proptest! {
    #[test]
    fn record_puts_each_value_in_its_bucket(values in prop::collection::vec(value(), 0..200)) {
        let histogram = histogram_of(&values);
        prop_assert_eq!(histogram.total(), values.len() as u64);
        let buckets: Vec<(u64, u64, u64)> = histogram.iter().collect();
        // Ascending, non-empty, and each count is exactly the values falling in those bounds.
        prop_assert!(buckets.windows(2).all(|w| w[0].1 < w[1].0), "{buckets:?}");
        for &(lower, upper, count) in &buckets {
            prop_assert!(count > 0);
            let inside = values.iter().filter(|&&v| lower <= v && v <= upper).count() as u64;
            prop_assert_eq!(count, inside, "bucket [{}, {}]", lower, upper);
        }
    }

    #[test]
    fn add_bucket_ignores_empty_and_out_of_range_buckets(buckets in raw_buckets()) {
        let histogram = histogram_from_buckets(&buckets);
        let expected: u64 = buckets.iter().filter(|(index, _)| *index < NUM_BUCKETS).map(|(_, count)| count).sum();
        prop_assert_eq!(histogram.total(), expected);
        prop_assert!(histogram.iter().all(|(_, _, count)| count > 0));
        prop_assert_eq!(histogram.iter().count(), {
            let mut used: Vec<u32> = buckets.iter().filter(|&&(i, c)| i < NUM_BUCKETS && c > 0).map(|&(i, _)| i).collect();
            used.sort_unstable();
            used.dedup();
            used.len()
        });
    }

    #[test]
    fn merge_is_commutative(a in raw_buckets(), b in raw_buckets()) {
        let (a, b) = (histogram_from_buckets(&a), histogram_from_buckets(&b));
        prop_assert_eq!(merged(&a, &b), merged(&b, &a));
    }

    #[test]
    fn merge_is_associative(a in raw_buckets(), b in raw_buckets(), c in raw_buckets()) {
        let (a, b, c) = (histogram_from_buckets(&a), histogram_from_buckets(&b), histogram_from_buckets(&c));
        prop_assert_eq!(merged(&merged(&a, &b), &c), merged(&a, &merged(&b, &c)));
    }

    #[test]
    fn merge_has_the_empty_histogram_as_identity(a in raw_buckets()) {
        let a = histogram_from_buckets(&a);
        prop_assert_eq!(merged(&a, &Histogram::new()), a.clone());
        prop_assert_eq!(merged(&Histogram::new(), &a), a);
    }

    #[test]
    fn total_is_additive(a in raw_buckets(), b in raw_buckets()) {
        let (a, b) = (histogram_from_buckets(&a), histogram_from_buckets(&b));
        prop_assert_eq!(merged(&a, &b).total(), a.total() + b.total());
    }

    #[test]
    fn merging_histograms_equals_recording_the_union(
        a in prop::collection::vec(value(), 0..100),
        b in prop::collection::vec(value(), 0..100),
    ) {
        let union: Vec<u64> = a.iter().chain(&b).copied().collect();
        prop_assert_eq!(merged(&histogram_of(&a), &histogram_of(&b)), histogram_of(&union));
    }
}

// ---------------------------------------------------------------------------------------------
// hotprof_model::model::Histogram::quantile
// ---------------------------------------------------------------------------------------------

/// Dyadic fractions `k / 2^20`, 0 and 1 included: exactly representable, and so is `q · n`,
/// so ⌈q·n⌉ has one unambiguous value.
const Q_DENOMINATOR: u64 = 1 << 20;

fn dyadic_q() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..=Q_DENOMINATOR,
        Just(0),
        Just(Q_DENOMINATOR),
        Just(Q_DENOMINATOR / 2)
    ]
}

proptest! {
    #[test]
    fn quantile_of_nothing_is_none(q in dyadic_q()) {
        prop_assert_eq!(Histogram::new().quantile(q as f64 / Q_DENOMINATOR as f64, None, None), None);
    }

    #[test]
    fn quantiles_are_monotonic_in_q(values in samples(300), mut qs in prop::collection::vec(dyadic_q(), 2..12)) {
        qs.sort_unstable();
        let histogram = histogram_of(&values);
        let (min, max) = (*values.iter().min().unwrap(), *values.iter().max().unwrap());
        for bounds in [(None, None), (Some(min), Some(max))] {
            let estimates: Vec<u64> =
                qs.iter().map(|&k| histogram.quantile(k as f64 / Q_DENOMINATOR as f64, bounds.0, bounds.1).unwrap()).collect();
            prop_assert!(estimates.windows(2).all(|w| w[0] <= w[1]), "q·2^20 = {qs:?} -> {estimates:?}");
        }
    }

    #[test]
    fn quantiles_lie_within_the_recorded_min_and_max(values in samples(300), k in dyadic_q()) {
        let histogram = histogram_of(&values);
        let (min, max) = (*values.iter().min().unwrap(), *values.iter().max().unwrap());
        let q = k as f64 / Q_DENOMINATOR as f64;
        let clamped = histogram.quantile(q, Some(min), Some(max)).unwrap();
        prop_assert!(min <= clamped && clamped <= max, "q={q}: {clamped} not in [{min}, {max}]");
        // Without the exact extremes it is still inside the extreme buckets.
        let free = histogram.quantile(q, None, None).unwrap();
        let (low, high) = (bucket_lower_bound(bucket_index(min)), bucket_upper_bound(bucket_index(max)));
        prop_assert!(low <= free && free <= high, "q={q}: {free} not in [{low}, {high}]");
    }

    #[test]
    fn quantiles_are_within_half_a_bucket_of_the_exact_sample_quantile(values in samples(1000), k in dyadic_q()) {
        let histogram = histogram_of(&values);
        let mut sorted = values.clone();
        sorted.sort_unstable();
        let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
        let exact = exact_quantile(&sorted, k, Q_DENOMINATOR);
        let q = k as f64 / Q_DENOMINATOR as f64;
        for bounds in [(None, None), (Some(min), Some(max))] {
            let estimate = histogram.quantile(q, bounds.0, bounds.1).unwrap();
            prop_assert!(
                within_half_a_bucket(estimate, exact),
                "q={q}, n={}, bounds {bounds:?}: estimate {estimate}, exact {exact}", sorted.len()
            );
        }
    }

    /// The quantiles every report prints, with `q` as the float literal the code passes.
    #[test]
    fn reported_percentiles_are_within_half_a_bucket(values in samples(1000)) {
        let histogram = histogram_of(&values);
        let mut sorted = values.clone();
        sorted.sort_unstable();
        let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
        for (q, per_mille) in [(0.5, 500), (0.9, 900), (0.99, 990), (0.999, 999), (1.0, 1000)] {
            let exact = exact_quantile(&sorted, per_mille, 1000);
            let estimate = histogram.quantile(q, Some(min), Some(max)).unwrap();
            prop_assert!(
                within_half_a_bucket(estimate, exact),
                "p{}, n={}: estimate {estimate}, exact {exact}", q * 100.0, sorted.len()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// hotprof_model::model::merge_stats: per-CPU aggregates
// ---------------------------------------------------------------------------------------------

fn call() -> impl Strategy<Value = Call> {
    (
        latency(),
        any::<prop::sample::Index>(),
        latency(),
        any::<bool>(),
    )
        .prop_map(|(duration, child_part, off_cpu, outermost)| Call {
            duration,
            child_ns: child_part.index(duration as usize + 1) as u64,
            off_cpu,
            outermost,
        })
}

/// What the eBPF side (`profiler-ebpf/src/frames.rs`, `record`) accumulates on one CPU, with
/// the same `FuncStats::add`. `fresh_min` is the slot's `min_ns` before the first call: 0 (a
/// zeroed map) or `u64::MAX`.
fn cpu_stats(calls: &[Call], min_latency: u64, fresh_min: u64) -> FuncStats {
    let mut stats = FuncStats {
        min_ns: fresh_min,
        ..Default::default()
    };
    for call in calls {
        if call.duration < min_latency {
            stats.below_min += 1;
        } else {
            stats.add(call, true);
        }
    }
    stats
}

proptest! {
    #[test]
    fn merging_per_cpu_stats_equals_computing_over_all_calls(
        per_cpu in prop::collection::vec(prop::collection::vec(call(), 0..40), 1..9),
        min_latency in prop_oneof![Just(0u64), latency()],
        fresh_min in prop_oneof![Just(0u64), Just(u64::MAX)],
    ) {
        let stats: Vec<FuncStats> = per_cpu.iter().map(|calls| cpu_stats(calls, min_latency, fresh_min)).collect();
        let totals = merge_stats(stats.iter());

        let all: Vec<&Call> = per_cpu.iter().flatten().collect();
        let timed: Vec<&Call> = all.iter().copied().filter(|c| c.duration >= min_latency).collect();
        let outer: Vec<&Call> = timed.iter().copied().filter(|c| c.outermost).collect();
        prop_assert_eq!(totals.count, timed.len() as u64);
        prop_assert_eq!(totals.sum_ns, timed.iter().map(|c| c.duration).sum::<u64>());
        prop_assert_eq!(totals.sum_sq_ns2, timed.iter().map(|c| u128::from(c.duration) * u128::from(c.duration)).sum::<u128>());
        prop_assert_eq!(totals.min_ns, timed.iter().map(|c| c.duration).min().unwrap_or(0));
        prop_assert_eq!(totals.max_ns, timed.iter().map(|c| c.duration).max().unwrap_or(0));
        prop_assert_eq!(totals.on_cpu_sum_ns, timed.iter().map(|c| c.duration.saturating_sub(c.off_cpu)).sum::<u64>());
        prop_assert_eq!(totals.below_min, (all.len() - timed.len()) as u64);
        prop_assert_eq!(totals.self_sum_ns, timed.iter().map(|c| c.duration - c.child_ns).sum::<u64>());
        prop_assert_eq!(totals.outer_count, outer.len() as u64);
        prop_assert_eq!(totals.outer_sum_ns, outer.iter().map(|c| c.duration).sum::<u64>());
        // merge_stats leaves the histogram to the caller (`totals_of_chunks` adds the buckets).
        prop_assert_eq!(totals.histogram.total(), 0);

        // The order of the CPUs does not matter.
        let reversed = merge_stats(stats.iter().rev());
        prop_assert_eq!(reversed, totals);
    }

    /// Per-CPU `HIST` slots summed bucket by bucket (what `collect::snapshot` does) give the
    /// histogram of all calls.
    #[test]
    fn summing_per_cpu_histograms_equals_the_histogram_of_all_calls(
        per_cpu in prop::collection::vec(prop::collection::vec(latency(), 0..60), 1..9),
    ) {
        // One HIST array per CPU, incremented as the eBPF side does, then summed per bucket.
        let hist: Vec<Vec<u64>> = per_cpu
            .iter()
            .map(|calls| {
                let mut slots = vec![0u64; NUM_BUCKETS as usize];
                for &duration in calls {
                    slots[bucket_index(duration) as usize] += 1;
                }
                slots
            })
            .collect();
        let mut summed = Histogram::new();
        for bucket in 0..NUM_BUCKETS {
            summed.add_bucket(bucket, hist.iter().map(|slots| slots[bucket as usize]).sum());
        }
        let all: Vec<u64> = per_cpu.iter().flatten().copied().collect();
        prop_assert_eq!(&summed, &histogram_of(&all));
        let mut merged_per_cpu = Histogram::new();
        for cpu in &per_cpu {
            merged_per_cpu.merge(&histogram_of(cpu));
        }
        prop_assert_eq!(merged_per_cpu, summed);
    }
}
