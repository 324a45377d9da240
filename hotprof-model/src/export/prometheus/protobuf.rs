//! The Prometheus protobuf exposition (`application/vnd.google.protobuf;
//! proto=io.prometheus.client.MetricFamily; encoding=delimited`): the families of the text
//! formats, each a length-delimited `MetricFamily`, with the latency histogram also carried
//! as a native histogram, which only this format can express. Prometheus ≥ 2.40 asks for
//! it when started with `--enable-feature=native-histograms`.
//!
//! The messages are prost structs mirroring the field numbers of
//! <https://github.com/prometheus/client_model/blob/master/io/prometheus/client/metrics.proto>
//! (only the fields hotprof writes; no protoc). That file is proto2 and Prometheus reads it
//! as proto3, where an absent field is its zero: prost leaves zero scalars out, which reads
//! back the same in both.
//!
//! # Native buckets
//!
//! hotprof's buckets are log-linear: each power of two `[2^m, 2^(m+1))` ns is cut into 32
//! equal-width buckets, and below 64 ns each value has its own. Native buckets are
//! exponential: schema `s`'s bucket `i` is `(2^((i−1)/2^s), 2^(i/2^s)]` seconds. Their
//! edges coincide only at powers of two, and then only in nanoseconds (1 ns is
//! 2^−29.9 s), so no schema reproduces hotprof's buckets edge for edge. Schema 5 (32 per
//! power of two, like hotprof) matches them one to one but puts the k-th edge at 2^(k/32)
//! instead of 1 + k/32, up to 6% low; placed by value instead, one schema-5 bucket (up to
//! 4.3% wide) takes two hotprof buckets (3.1%) near the top of a power of two.
//!
//! So the native histogram uses schema [`NATIVE_SCHEMA`] = 8, in seconds like every other
//! family, and puts each hotprof bucket's count in the native bucket holding that bucket's
//! inclusive upper edge ([`native_index`]). Two hotprof upper edges are at least a factor
//! 65/64 apart and a schema-8 bucket spans 2^(1/256) = 1.0027, so:
//! - lossless: every hotprof bucket has a native bucket of its own, with its exact count
//!   (`histogram_count` is the exact call count, `histogram_sum` the exact sum);
//! - the native bucket's upper bound is at most 0.27% above the hotprof upper edge, so
//!   Prometheus's cumulative count at it is hotprof's exact count of calls `≤` that edge,
//!   and `histogram_quantile` lands at the top of hotprof's bucket (within 0.27%), so
//!   within one hotprof bucket of hotprof's own quantiles (the bucket's midpoint);
//! - exact: the 0 ns bucket goes to the zero bucket (threshold 2^−128 s, client_golang's
//!   default, which also marks a histogram without calls as native for Prometheus 2.x);
//! - not kept (by hotprof either): where in its bucket a call lay.

use std::collections::BTreeMap;

use prost::Message as _;

use super::{
    BELOW_MIN_LATENCY, Breakdown, CALLER_LATENCY, DURATION, Family, KEY_LATENCY, Kind, LATENCY,
    LE_BOUNDARIES_NS, LOSSES, PROBE_OVERHEAD, RECORDING, SELF_TIME, Series, caller_latency_help,
    key_label_names, key_latency_help, loss_fields, series,
};
use crate::export::key_fields;
use crate::model::Recording;

/// The HTTP `Content-Type` of [`encode`]'s bytes.
pub const CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// The native histogram's schema: 256 buckets per power of two (see the module
/// documentation for why not 5).
pub const NATIVE_SCHEMA: i32 = 8;

/// The zero bucket's half-width in seconds, 2^−128: it holds the 0 ns calls only.
pub const ZERO_THRESHOLD_SECONDS: f64 = 2.938_735_877_055_719e-39;

/// `io.prometheus.client.MetricFamily`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricFamily {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub help: String,
    #[prost(enumeration = "MetricType", tag = "3")]
    pub r#type: i32,
    #[prost(message, repeated, tag = "4")]
    pub metric: Vec<Metric>,
}

/// `io.prometheus.client.MetricType` (the types hotprof writes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    Counter = 0,
    Gauge = 1,
    Summary = 2,
    Histogram = 4,
}

/// `io.prometheus.client.Metric`: labels and the one value message its family's type names.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    #[prost(message, optional, tag = "2")]
    pub gauge: Option<Value>,
    #[prost(message, optional, tag = "3")]
    pub counter: Option<Value>,
    #[prost(message, optional, tag = "4")]
    pub summary: Option<Summary>,
    #[prost(message, optional, tag = "7")]
    pub histogram: Option<Histogram>,
}

/// `io.prometheus.client.LabelPair`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelPair {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `io.prometheus.client.Gauge` and `Counter` (both `double value = 1`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Value {
    #[prost(double, tag = "1")]
    pub value: f64,
}

/// `io.prometheus.client.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(uint64, tag = "1")]
    pub sample_count: u64,
    #[prost(double, tag = "2")]
    pub sample_sum: f64,
    #[prost(message, repeated, tag = "3")]
    pub quantile: Vec<Quantile>,
}

/// `io.prometheus.client.Quantile`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Quantile {
    #[prost(double, tag = "1")]
    pub quantile: f64,
    #[prost(double, tag = "2")]
    pub value: f64,
}

/// `io.prometheus.client.Histogram`: classic buckets and the native (integer) ones.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    #[prost(uint64, tag = "1")]
    pub sample_count: u64,
    #[prost(double, tag = "2")]
    pub sample_sum: f64,
    #[prost(message, repeated, tag = "3")]
    pub bucket: Vec<Bucket>,
    #[prost(sint32, tag = "5")]
    pub schema: i32,
    #[prost(double, tag = "6")]
    pub zero_threshold: f64,
    #[prost(uint64, tag = "7")]
    pub zero_count: u64,
    #[prost(message, repeated, tag = "12")]
    pub positive_span: Vec<BucketSpan>,
    /// Each bucket's count minus the previous bucket's (the first's minus 0).
    #[prost(sint64, repeated, tag = "13")]
    pub positive_delta: Vec<i64>,
}

/// `io.prometheus.client.Bucket` (classic, cumulative).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Bucket {
    #[prost(uint64, tag = "1")]
    pub cumulative_count: u64,
    #[prost(double, tag = "2")]
    pub upper_bound: f64,
}

/// `io.prometheus.client.BucketSpan`: `length` consecutive native buckets, starting
/// `offset` buckets after the previous span's end (the first: at bucket index `offset`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketSpan {
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

/// `recording` as the protobuf exposition: [`families`], each length-delimited.
pub fn encode(recording: &Recording) -> Vec<u8> {
    families(recording)
        .iter()
        .flat_map(|family| family.encode_length_delimited_to_vec())
        .collect()
}

/// The families of [`super::render`], in its order, under the names a protobuf scrape
/// gives them (a counter's with `_total`, as client_golang writes them; the info family a
/// gauge `hotprof_recording_info`).
pub fn families(recording: &Recording) -> Vec<MetricFamily> {
    let (mode, kernel) = (recording.mode.as_str(), recording.kernel.as_str());
    let key_fields = key_fields(recording);
    let all = series(&recording.functions, key_fields.len());
    let per_function = |make: &dyn Fn(&Series<'_>) -> Metric| {
        all.iter()
            .map(|s| Metric {
                label: label_pairs(&s.base_labels(mode, kernel)),
                ..make(s)
            })
            .collect()
    };

    let mut families = vec![
        metric_family(
            &RECORDING,
            vec![Metric {
                label: label_pairs(&[
                    ("tool", &recording.tool),
                    ("kernel", kernel),
                    ("mode", mode),
                ]),
                ..gauge(1.0)
            }],
        ),
        metric_family(&DURATION, vec![gauge(seconds(recording.duration_ns))]),
        metric_family(&LATENCY, per_function(&latency)),
        metric_family(
            &SELF_TIME,
            per_function(&|s| counter(seconds(s.self_sum_ns))),
        ),
        metric_family(
            &BELOW_MIN_LATENCY,
            per_function(&|s| counter(s.below_min_latency as f64)),
        ),
    ];
    if all.iter().any(|s| !s.callers.is_empty()) {
        families.push(breakdown(
            CALLER_LATENCY,
            caller_latency_help(),
            &all,
            (mode, kernel),
            &["caller".to_string()],
            |s| &s.callers,
        ));
    }
    if all.iter().any(|s| !s.keys.is_empty()) {
        families.push(breakdown(
            KEY_LATENCY,
            key_latency_help(&key_fields),
            &all,
            (mode, kernel),
            &key_label_names(&key_fields),
            |s| &s.keys,
        ));
    }
    families.push(metric_family(
        &LOSSES,
        loss_fields(recording)
            .into_iter()
            .map(|(kind, value)| Metric {
                label: label_pairs(&[("kind", &kind)]),
                ..counter(value as f64)
            })
            .collect(),
    ));
    if let Some(overhead) = recording
        .probe_overhead_ns
        .filter(|v| v.is_finite() && *v >= 0.0)
    {
        families.push(metric_family(&PROBE_OVERHEAD, vec![gauge(overhead / 1e9)]));
    }
    families
}

/// The schema-[`NATIVE_SCHEMA`] bucket holding `ns` nanoseconds as seconds: the `i` with
/// `2^((i−1)/256) < ns·10^−9 ≤ 2^(i/256)`. `ns` > 0 (0 is the zero bucket's).
pub fn native_index(ns: u64) -> i32 {
    let value = ns as f64 / 1e9;
    let mut index = (value.log2() * f64::from(1 << NATIVE_SCHEMA)).ceil() as i32;
    // log2 may round across a boundary: settle on the bounds themselves.
    while native_upper_bound(index - 1) >= value {
        index -= 1;
    }
    while native_upper_bound(index) < value {
        index += 1;
    }
    index
}

/// The inclusive upper bound in seconds of native bucket `index`: `2^(index/256)`.
pub fn native_upper_bound(index: i32) -> f64 {
    (f64::from(index) / f64::from(1 << NATIVE_SCHEMA)).exp2()
}

/// The native histogram of `[lower_ns, upper_ns, count]` buckets (any order; duplicates and
/// foreign layouts are fine): the zero bucket's count, spans and deltas.
pub fn native_buckets(buckets: &[[u64; 3]]) -> (u64, Vec<BucketSpan>, Vec<i64>) {
    let mut zero_count = 0;
    let mut by_index: BTreeMap<i32, u64> = BTreeMap::new();
    for &[_, upper, count] in buckets.iter().filter(|b| b[2] > 0) {
        if upper == 0 {
            zero_count += count;
        } else {
            *by_index.entry(native_index(upper)).or_default() += count;
        }
    }
    let mut spans: Vec<BucketSpan> = Vec::new();
    let mut deltas = Vec::with_capacity(by_index.len());
    let (mut previous_index, mut previous_count) = (None, 0i64);
    for (index, count) in by_index {
        let count = count as i64;
        match previous_index {
            Some(previous) if index == previous + 1 => {
                spans.last_mut().expect("a span is open").length += 1;
            }
            Some(previous) => spans.push(BucketSpan {
                offset: index - previous - 1,
                length: 1,
            }),
            None => spans.push(BucketSpan {
                offset: index,
                length: 1,
            }),
        }
        deltas.push(count - previous_count);
        (previous_index, previous_count) = (Some(index), count);
    }
    (zero_count, spans, deltas)
}

/// A function's latency histogram: the classic `le` buckets of the text (without `+Inf`,
/// which is `sample_count`) and the native buckets.
fn latency(s: &Series<'_>) -> Metric {
    let (zero_count, positive_span, positive_delta) = native_buckets(&s.buckets);
    let histogram = Histogram {
        sample_count: s.cumulative[LE_BOUNDARIES_NS.len()],
        sample_sum: seconds(s.sum_ns),
        bucket: LE_BOUNDARIES_NS
            .iter()
            .zip(s.cumulative)
            .map(|(&bound, cumulative_count)| Bucket {
                cumulative_count,
                upper_bound: seconds(bound),
            })
            .collect(),
        schema: NATIVE_SCHEMA,
        zero_threshold: ZERO_THRESHOLD_SECONDS,
        zero_count,
        positive_span,
        positive_delta,
    };
    Metric {
        histogram: Some(histogram),
        ..Metric::default()
    }
}

/// A breakdown family (see [`super::Context::breakdown`]): per function, a summary per
/// exported row of the [`Breakdown`] `pick` selects.
fn breakdown<'r, 'a>(
    name: &str,
    help: String,
    all: &'r [Series<'a>],
    (mode, kernel): (&str, &str),
    label_names: &[String],
    pick: impl Fn(&'r Series<'a>) -> &'r Breakdown<'a>,
) -> MetricFamily {
    let mut metric = Vec::new();
    for s in all {
        let base = s.base_labels(mode, kernel);
        for row in pick(s).exported(label_names.len()) {
            let mut pairs = base.to_vec();
            pairs.extend(
                label_names
                    .iter()
                    .map(String::as_str)
                    .zip(row.labels.iter().copied()),
            );
            let quantile = row
                .quantiles
                .map(|(p50, p99)| {
                    [(0.5, p50), (0.99, p99)]
                        .into_iter()
                        .map(|(quantile, ns)| Quantile {
                            quantile,
                            value: seconds(ns),
                        })
                        .collect()
                })
                .unwrap_or_default();
            metric.push(Metric {
                label: label_pairs(&pairs),
                summary: Some(Summary {
                    sample_count: row.count,
                    sample_sum: seconds(row.sum_ns),
                    quantile,
                }),
                ..Metric::default()
            });
        }
    }
    MetricFamily {
        name: name.to_string(),
        help,
        r#type: MetricType::Summary.into(),
        metric,
    }
}

/// A family with `family`'s name as a protobuf scrape reads it, type and help.
fn metric_family(family: &Family, metric: Vec<Metric>) -> MetricFamily {
    let (name, r#type) = match family.kind {
        Kind::Counter => (format!("{}_total", family.name), MetricType::Counter),
        Kind::Gauge => (family.name.to_string(), MetricType::Gauge),
        Kind::Histogram => (family.name.to_string(), MetricType::Histogram),
        Kind::Summary => (family.name.to_string(), MetricType::Summary),
        Kind::Info => (format!("{}_info", family.name), MetricType::Gauge),
    };
    MetricFamily {
        name,
        help: family.help.to_string(),
        r#type: r#type.into(),
        metric,
    }
}

fn gauge(value: f64) -> Metric {
    Metric {
        gauge: Some(Value { value }),
        ..Metric::default()
    }
}

fn counter(value: f64) -> Metric {
    Metric {
        counter: Some(Value { value }),
        ..Metric::default()
    }
}

fn label_pairs(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(name, value)| LabelPair {
            name: name.to_string(),
            value: value.to_string(),
        })
        .collect()
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use profiler_common::{NUM_BUCKETS, bucket_upper_bound};

    use super::*;
    use crate::export::prometheus::{Format, render};
    use crate::export::test_support::{caller, key};
    use crate::model::{FunctionRecord, FunctionTotals, Histogram as Kernel, Losses};

    /// The `MetricFamily` messages of a length-delimited stream, decoded with prost.
    fn decode(mut bytes: &[u8]) -> Vec<MetricFamily> {
        let mut families = Vec::new();
        while !bytes.is_empty() {
            families.push(MetricFamily::decode_length_delimited(&mut bytes).unwrap());
        }
        families
    }

    /// Native bucket index → count, rebuilt from spans and deltas as Prometheus does.
    fn absolute(spans: &[BucketSpan], deltas: &[i64]) -> BTreeMap<i32, u64> {
        let mut out = BTreeMap::new();
        let (mut index, mut count, mut deltas) = (0i32, 0i64, deltas.iter());
        for (i, span) in spans.iter().enumerate() {
            index += span.offset;
            if i > 0 {
                assert!(span.offset > 0, "adjacent spans are one: {spans:?}");
            }
            for _ in 0..span.length {
                count += deltas.next().expect("a delta per bucket");
                assert!(count > 0, "no empty bucket is listed");
                out.insert(index, count as u64);
                index += 1;
            }
        }
        assert!(deltas.next().is_none(), "a bucket per delta");
        out
    }

    fn kernel_buckets(values: &[u64]) -> Vec<[u64; 3]> {
        let mut histogram = Kernel::new();
        for &v in values {
            histogram.record(v);
        }
        histogram.iter().map(|(l, u, c)| [l, u, c]).collect()
    }

    fn recording(values: &[u64]) -> Recording {
        let totals = FunctionTotals {
            sum_sq_ns2: 0,
            ..FunctionTotals::from_durations(values)
        };
        let function = FunctionRecord::from_aggregates("f".into(), "f.isra.0".into(), &totals);
        Recording {
            schema_version: crate::model::SCHEMA_VERSION,
            by: vec!["comm".into()],
            filter: None,
            tool: "hotprof 0.1.0".into(),
            kernel: "6.18".into(),
            mode: "syscall".into(),
            task_store: None,
            duration_ns: 2_500_000_000,
            command: vec![],
            functions: vec![function],
            losses: Losses {
                depth_exceeded: 3,
                ..Losses::default()
            },
            probe_overhead_ns: Some(412.5),
            probe_bias_ns: None,
            runs: vec![],
            intervals: vec![],
        }
    }

    /// Every hotprof bucket has a native bucket of its own, whose upper bound is its upper
    /// edge or less than a native bucket above it; 0 ns is the zero bucket's.
    #[test]
    fn every_kernel_bucket_has_its_own_native_bucket_at_its_upper_edge() {
        let growth = native_upper_bound(1) / native_upper_bound(0);
        let mut previous = i32::MIN;
        for index in 1..NUM_BUCKETS {
            let upper = bucket_upper_bound(index);
            let native = native_index(upper);
            assert!(native > previous, "bucket {index} shares native {native}");
            let seconds = upper as f64 / 1e9;
            assert!(native_upper_bound(native - 1) < seconds, "{upper} ns");
            assert!(native_upper_bound(native) >= seconds, "{upper} ns");
            assert!(native_upper_bound(native) < seconds * growth, "{upper} ns");
            previous = native;
        }
        let (zero, spans, deltas) = native_buckets(&[[0, 0, 7]]);
        assert_eq!((zero, spans, deltas), (7, vec![], vec![]));
    }

    /// Spans and deltas of a known histogram: gaps, runs of neighbours, the zero bucket and
    /// the largest bucket (u64::MAX ns), against the buckets hotprof recorded.
    #[test]
    fn spans_and_deltas_carry_every_bucket_count() {
        let mut values = vec![0, 0, 1, 2, 2, 3, 63, 64, 1_000, 1_000, 1_031, u64::MAX];
        values.extend(std::iter::repeat_n(5_000, 5));
        // A run of neighbouring hotprof buckets (1 ns each).
        values.extend(1..=5);
        let buckets = kernel_buckets(&values);
        let (zero, spans, deltas) = native_buckets(&buckets);
        assert_eq!(zero, 2);
        let native = absolute(&spans, &deltas);
        let expected: BTreeMap<i32, u64> = buckets
            .iter()
            .filter(|b| b[1] > 0)
            .map(|&[_, upper, count]| (native_index(upper), count))
            .collect();
        assert_eq!(native, expected);
        assert_eq!(native.len(), buckets.len() - 1, "one native bucket each");
        assert_eq!(native.values().sum::<u64>() + zero, values.len() as u64);
        // 1 ns is 2^-29.897 s: native bucket ⌈−29.897·256⌉ = −7653, the first span's start.
        // Every hotprof bucket here is at least 1/64 from the next, 4 native buckets: no
        // two are neighbours, so each is a span of its own.
        assert_eq!(native_index(1), -7653);
        assert_eq!(spans[0].offset, -7653);
        assert!(spans.iter().all(|s| s.length == 1), "{spans:?}");
        assert_eq!(spans.len(), native.len());
        // The largest bucket: u64::MAX ns is 1.8e10 s.
        let last = *native.keys().last().unwrap();
        assert_eq!(last, native_index(u64::MAX));
        assert_eq!(native[&last], 1);
        assert!(native_upper_bound(last) >= u64::MAX as f64 / 1e9);
        // Neighbouring native buckets join one span: two hotprof-foreign buckets 1 apart.
        let (_, spans, deltas) =
            native_buckets(&[[0, 1_000_000, 4], [0, 1_002_000, 6], [0, 1_004_500, 1]]);
        assert_eq!(spans.len(), 1, "{spans:?}");
        assert_eq!(spans[0].length, 3);
        assert_eq!(deltas, [4, 2, -5]);
    }

    /// Prometheus's cumulative count at each classic boundary (2^k − 1 ns), read off the
    /// native buckets, is the exact count of values at or below it, as the text's is.
    #[test]
    fn native_cumulative_counts_agree_with_the_classic_buckets() {
        let mut values = vec![0u64, 63, 64, 127, 128, 65_535, 65_536];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x >> (24 + x % 40));
        }
        let (zero, spans, deltas) = native_buckets(&kernel_buckets(&values));
        let native = absolute(&spans, &deltas);
        for bound in LE_BOUNDARIES_NS {
            let at = native_index(bound);
            let cumulative = zero + native.range(..=at).map(|(_, c)| c).sum::<u64>();
            let exact = values.iter().filter(|&&v| v <= bound).count() as u64;
            assert_eq!(cumulative, exact, "le {bound} ns");
        }
    }

    #[test]
    fn an_empty_histogram_is_still_native() {
        let (zero, spans, deltas) = native_buckets(&[]);
        assert_eq!((zero, spans.len(), deltas.len()), (0, 0, 0));
        let families = decode(&encode(&recording(&[])));
        let latency = families.iter().find(|f| f.name == LATENCY.name).unwrap();
        let histogram = latency.metric[0].histogram.as_ref().unwrap();
        assert_eq!(histogram.sample_count, 0);
        assert_eq!(histogram.schema, NATIVE_SCHEMA);
        // What Prometheus 2.x tells a native histogram by when it has no buckets.
        assert!(histogram.zero_threshold > 0.0);
    }

    /// The stream decodes with prost into the text's families, same names (as each format
    /// names its samples), types and help, and the latency histogram's numbers.
    #[test]
    fn decodes_into_the_families_of_the_text() {
        let values = [50, 63, 64, 100, 5_000, 5_000, 1_000_000];
        let mut recording = recording(&values);
        recording.functions[0].callers = vec![caller("a+0x1", 1, 100), caller("b+0x2", 2, 150)];
        recording.functions[0].keys = vec![key(&["dd"], 3, 500)];
        let families = decode(&encode(&recording));
        let text = render(&recording, Format::Prometheus);
        let typed: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split_once(' ').unwrap())
            .collect();
        let decoded: Vec<(&str, &str)> = families
            .iter()
            .map(|f| {
                let kind = match MetricType::try_from(f.r#type).unwrap() {
                    MetricType::Counter => "counter",
                    MetricType::Gauge => "gauge",
                    MetricType::Summary => "summary",
                    MetricType::Histogram => "histogram",
                };
                (f.name.as_str(), kind)
            })
            .collect();
        assert_eq!(decoded, typed);
        for f in &families {
            let help = format!("# HELP {} {}\n", f.name, f.help);
            assert!(text.contains(&help), "{help}");
        }

        let latency = families.iter().find(|f| f.name == LATENCY.name).unwrap();
        let labels: Vec<(&str, &str)> = latency.metric[0]
            .label
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                ("function", "f"),
                ("symbol", "f.isra.0"),
                ("mode", "syscall"),
                ("kernel", "6.18")
            ]
        );
        let histogram = latency.metric[0].histogram.as_ref().unwrap();
        assert_eq!(histogram.sample_count, values.len() as u64);
        assert_eq!(histogram.sample_sum, 1_010_277.0 / 1e9);
        assert_eq!(histogram.bucket.len(), LE_BOUNDARIES_NS.len());
        assert_eq!(
            (
                histogram.bucket[0].upper_bound,
                histogram.bucket[0].cumulative_count
            ),
            (63e-9, 2)
        );
        let native = absolute(&histogram.positive_span, &histogram.positive_delta);
        let expected: Vec<(i32, u64)> = kernel_buckets(&values)
            .iter()
            .map(|&[_, upper, count]| (native_index(upper), count))
            .collect();
        assert_eq!(native.into_iter().collect::<Vec<_>>(), expected);

        let callers = families.iter().find(|f| f.name == CALLER_LATENCY).unwrap();
        let b = &callers.metric[0];
        assert_eq!(b.label.last().unwrap().value, "b+0x2");
        let summary = b.summary.as_ref().unwrap();
        assert_eq!((summary.sample_count, summary.sample_sum), (2, 150e-9));
        assert_eq!(
            (summary.quantile[1].quantile, summary.quantile[1].value),
            (0.99, 40e-6)
        );
        let keys = families.iter().find(|f| f.name == KEY_LATENCY).unwrap();
        assert_eq!(keys.metric[0].label.last().unwrap().name, "comm");
        let losses = families
            .iter()
            .find(|f| f.name == "hotprof_losses_total")
            .unwrap();
        let depth = losses
            .metric
            .iter()
            .find(|m| m.label[0].value == "depth_exceeded")
            .unwrap();
        assert_eq!(depth.counter.as_ref().unwrap().value, 3.0);
        let info = &families[0];
        assert_eq!(info.name, "hotprof_recording_info");
        assert_eq!(info.metric[0].gauge.as_ref().unwrap().value, 1.0);
    }
}
