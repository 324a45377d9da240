//! `--subtract-bias`: the reported figures without the part of the probes' own work that lies
//! inside every measured duration (calibrated at start-up, `probe_bias_ns`).
//!
//! Every call's duration holds the bias once, so a function's figures move by exactly that:
//! minimum, maximum, mean and every percentile by `bias`, sums by `count × bias`, the
//! histogram's buckets by `bias` (a shift keeps their shape). Spreads (standard deviation)
//! do not change. A function whose fastest call is not longer than the bias is left as
//! measured (its calls show the bias cannot all lie inside them: subtracting it would make
//! durations zero or negative), and [`not_subtracted`] names it for a note.
//! Only what is displayed is corrected; the JSON keeps the raw durations and the bias
//! beside them, so a reader can apply it — or not — itself.

use super::{CallerRecord, FunctionRecord, KeyRecord, Recording, SlowCallRecord};

/// `recording` with its calibrated bias taken off every duration it reports; `None` when it
/// has no calibrated bias (`--no-calibrate`, or calibration failed).
pub fn without_bias(recording: &Recording) -> Option<Recording> {
    let bias = recording.probe_bias_ns?.round().max(0.0) as u64;
    let mut out = recording.clone();
    let runs = out.runs.iter_mut().flat_map(|run| run.functions.iter_mut());
    for function in out.functions.iter_mut().chain(runs) {
        if !too_fast(function, bias) {
            subtract_from_function(function, bias);
        }
    }
    Some(out)
}

/// The functions [`without_bias`] leaves as measured, with their fastest call: none of their
/// calls may be shorter than the bias, which lies inside each of them.
pub fn not_subtracted(recording: &Recording) -> Vec<(&str, u64)> {
    let Some(bias) = recording.probe_bias_ns else {
        return Vec::new();
    };
    let bias = bias.round().max(0.0) as u64;
    recording
        .functions
        .iter()
        .filter(|f| too_fast(f, bias))
        .map(|f| (f.name.as_str(), f.min_ns))
        .collect()
}

/// A function with calls no longer than the bias.
fn too_fast(function: &FunctionRecord, bias: u64) -> bool {
    function.count > 0 && function.min_ns <= bias
}

fn subtract_from_function(f: &mut FunctionRecord, bias: u64) {
    let sub = |ns: u64| ns.saturating_sub(bias);
    let total_bias = f.count.saturating_mul(bias);
    f.min_ns = sub(f.min_ns);
    f.max_ns = sub(f.max_ns);
    f.mean_ns = (f.mean_ns - bias as f64).max(0.0);
    f.p50_ns = sub(f.p50_ns);
    f.p90_ns = sub(f.p90_ns);
    f.p99_ns = sub(f.p99_ns);
    f.p999_ns = sub(f.p999_ns);
    f.sum_ns = f.sum_ns.saturating_sub(total_bias);
    f.self_sum_ns = f.self_sum_ns.saturating_sub(total_bias);
    f.outer_sum_ns = f
        .outer_sum_ns
        .saturating_sub(f.outer_count.saturating_mul(bias));
    if let Some(on_cpu) = &mut f.on_cpu_sum_ns {
        *on_cpu = on_cpu.saturating_sub(total_bias);
    }
    shift_buckets(&mut f.buckets, bias);
    f.callers
        .iter_mut()
        .for_each(|c| subtract_from_caller(c, bias));
    f.keys.iter_mut().for_each(|k| subtract_from_key(k, bias));
    f.slowest
        .iter_mut()
        .for_each(|s| subtract_from_slow_call(s, bias));
}

fn subtract_from_caller(c: &mut CallerRecord, bias: u64) {
    c.sum_ns = c.sum_ns.saturating_sub(c.count.saturating_mul(bias));
    c.p50_ns = c.p50_ns.saturating_sub(bias);
    c.p99_ns = c.p99_ns.saturating_sub(bias);
}

fn subtract_from_key(k: &mut KeyRecord, bias: u64) {
    k.sum_ns = k.sum_ns.saturating_sub(k.count.saturating_mul(bias));
    k.p50_ns = k.p50_ns.saturating_sub(bias);
    k.p99_ns = k.p99_ns.saturating_sub(bias);
    k.max_ns = k.max_ns.saturating_sub(bias);
    shift_buckets(&mut k.buckets, bias);
}

fn subtract_from_slow_call(s: &mut SlowCallRecord, bias: u64) {
    s.duration_ns = s.duration_ns.saturating_sub(bias);
}

/// Shifts `[lower, upper, count]` buckets down by `bias`; buckets that land on the same
/// range at 0 are merged, so the counts still add up to the calls.
fn shift_buckets(buckets: &mut Vec<[u64; 3]>, bias: u64) {
    let mut shifted: Vec<[u64; 3]> = Vec::with_capacity(buckets.len());
    for &[lower, upper, count] in buckets.iter() {
        let bucket = [
            lower.saturating_sub(bias),
            upper.saturating_sub(bias),
            count,
        ];
        match shifted.last_mut() {
            Some(last) if last[0] == bucket[0] && last[1] == bucket[1] => last[2] += count,
            _ => shifted.push(bucket),
        }
    }
    *buckets = shifted;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FunctionTotals;

    fn recording(durations: &[u64], bias: Option<f64>) -> Recording {
        let losses = serde_json::to_string(&crate::model::Losses::default()).expect("losses");
        let mut recording: Recording = serde_json::from_str(&format!(
            r#"{{"schema_version":2,"tool":"t","kernel":"k","mode":"kprobe","duration_ns":1,
                "functions":[],"losses":{losses}}}"#
        ))
        .expect("minimal recording");
        recording.functions = vec![FunctionRecord::from_aggregates(
            "f".into(),
            "f".into(),
            &FunctionTotals::from_durations(durations),
        )];
        recording.probe_bias_ns = bias;
        recording
    }

    #[test]
    fn every_duration_moves_by_the_bias_and_spreads_do_not() {
        let raw = recording(&[300, 400, 500, 10_000], Some(199.6));
        let corrected = without_bias(&raw).expect("calibrated");
        let (before, after) = (&raw.functions[0], &corrected.functions[0]);
        assert_eq!(after.min_ns, before.min_ns - 200);
        assert_eq!(after.max_ns, before.max_ns - 200);
        assert_eq!(after.p50_ns, before.p50_ns - 200);
        assert_eq!(after.p999_ns, before.p999_ns - 200);
        assert_eq!(after.sum_ns, before.sum_ns - 4 * 200);
        assert!((after.mean_ns - (before.mean_ns - 200.0)).abs() < 1e-9);
        assert_eq!(after.stddev_ns, before.stddev_ns);
        assert_eq!(after.count, before.count);
        let calls: u64 = after.buckets.iter().map(|b| b[2]).sum();
        assert_eq!(calls, 4, "buckets keep every call");
        assert_eq!(after.buckets[0][0], before.buckets[0][0] - 200);
        // The JSON's source stays raw.
        assert_eq!(raw.functions[0].min_ns, 300);
    }

    #[test]
    fn a_function_faster_than_the_bias_is_left_as_measured_and_named() {
        let raw = recording(&[10, 20, 30, 1_000], Some(100.0));
        let corrected = without_bias(&raw).expect("calibrated");
        assert_eq!(corrected.functions[0], raw.functions[0]);
        assert_eq!(not_subtracted(&raw), [("f", 10)]);
        // Equal to the bias is too fast as well: subtracting would leave a zero.
        let equal = recording(&[100, 200], Some(100.0));
        assert_eq!(without_bias(&equal).unwrap().functions[0].min_ns, 100);
        assert_eq!(not_subtracted(&equal), [("f", 100)]);
        // Every percentile of a function whose fastest call is above the bias stays positive.
        let slower = without_bias(&recording(&[101, 150, 400], Some(100.0))).unwrap();
        let f = &slower.functions[0];
        assert!(f.min_ns > 0 && f.p50_ns > 0 && f.p90_ns > 0, "{f:?}");
        assert!(not_subtracted(&recording(&[101], Some(100.0))).is_empty());
    }

    #[test]
    fn nothing_to_subtract_without_calibration() {
        assert!(without_bias(&recording(&[5], None)).is_none());
    }
}
