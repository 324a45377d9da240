//! The titles a recording's flamegraph and heatmap carry.

use crate::flame::Weight;
use crate::model::Recording;
use crate::units::format_ns;

/// Title and subtitle of a recording's flamegraph: the functions, then mode, kernel, what a
/// frame's width means and each function's headline figures.
pub fn flamegraph_titles(recording: &Recording, weight: Weight) -> (String, String) {
    let title = format!("hotprof: {} by call path", function_names(recording));
    let summary: Vec<String> = recording
        .functions
        .iter()
        .map(|f| {
            format!(
                "{}: {} calls, total {}, p50 {}, p99 {}",
                f.name,
                f.count,
                format_ns(f.sum_ns as f64),
                format_ns(f.p50_ns as f64),
                format_ns(f.p99_ns as f64)
            )
        })
        .collect();
    let width = if weight == Weight::LatencyNs {
        "latency (ns)"
    } else {
        "calls"
    };
    let subtitle = format!(
        "{} mode, kernel {}; width = {width}; {}",
        recording.mode,
        recording.kernel,
        summary.join("; ")
    );
    (title, subtitle)
}

/// Title of a recording's latency heatmap: the functions, mode and kernel.
pub fn heatmap_title(recording: &Recording) -> String {
    format!(
        "hotprof: latency of {} over time ({} mode, kernel {})",
        function_names(recording),
        recording.mode,
        recording.kernel
    )
}

/// The recording's functions (or syscalls), `a, b, c`.
fn function_names(recording: &Recording) -> String {
    let names: Vec<&str> = recording
        .functions
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FunctionRecord, FunctionTotals, Losses, SCHEMA_VERSION};

    #[test]
    fn titles_name_every_function_and_the_width() {
        let function = FunctionRecord::from_aggregates(
            "vfs_read".into(),
            "vfs_read".into(),
            &FunctionTotals::from_durations(&[1000; 3]),
        );
        let recording = Recording {
            schema_version: SCHEMA_VERSION,
            by: Vec::new(),
            filter: None,
            tool: "hotprof".into(),
            kernel: "6.12.0".into(),
            mode: "kprobe".into(),
            task_store: None,
            duration_ns: 1_000_000_000,
            command: Vec::new(),
            functions: vec![function],
            losses: Losses::default(),
            probe_overhead_ns: None,
            probe_bias_ns: None,
            runs: Vec::new(),
            intervals: Vec::new(),
        };
        let (title, subtitle) = flamegraph_titles(&recording, Weight::Count);
        assert_eq!(title, "hotprof: vfs_read by call path");
        assert!(
            subtitle.starts_with(
                "kprobe mode, kernel 6.12.0; width = calls; vfs_read: 3 calls, total 3.00 µs, p50 "
            ),
            "{subtitle}"
        );
        let (_, latency) = flamegraph_titles(&recording, Weight::LatencyNs);
        assert!(latency.contains("width = latency (ns)"), "{latency}");
    }
}
