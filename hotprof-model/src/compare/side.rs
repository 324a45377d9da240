//! One side of a comparison: its recordings flattened into runs, and a function's calls pooled
//! across those runs.

use std::collections::{BTreeMap, BTreeSet};

use super::SideInfo;
use super::binned::BinnedSample;
use super::error::CompareError;
use super::hypothesis::Moments;
use crate::model::{
    FunctionRecord, Histogram, Recording, distinct_values, mean_probe_bias, mean_probe_overhead,
};

/// One run: a `runs[]` entry of a `--runs N` recording, or a whole single-run recording.
pub(super) struct Run<'a> {
    pub functions: &'a [FunctionRecord],
    pub workload_metrics: Option<&'a BTreeMap<String, f64>>,
}

pub(super) struct Side<'a> {
    pub label: &'static str,
    pub recordings: &'a [Recording],
    pub runs: Vec<Run<'a>>,
}

impl<'a> Side<'a> {
    /// Every run of every recording: several files on a side are simply more runs.
    pub fn new(label: &'static str, recordings: &'a [Recording]) -> Result<Self, CompareError> {
        if recordings.is_empty() {
            return Err(CompareError::NoRecordings { side: label });
        }
        let runs = recordings.iter().flat_map(runs_of).collect();
        Ok(Self {
            label,
            recordings,
            runs,
        })
    }

    /// Function names in order of first appearance.
    pub fn function_names(&self) -> Vec<&'a str> {
        let mut seen = BTreeSet::new();
        let all = self.runs.iter().flat_map(|run| run.functions.iter());
        all.map(|function| function.name.as_str())
            .filter(|name| seen.insert(*name))
            .collect()
    }

    /// The function's record in every run that has it (the first, if a run lists it twice).
    pub fn function_runs(&self, name: &str) -> Vec<&'a FunctionRecord> {
        self.runs
            .iter()
            .filter_map(|run| run.functions.iter().find(|f| f.name == name))
            .collect()
    }

    /// Whether any run recorded `--by` key values for any function.
    pub fn has_keys(&self) -> bool {
        self.runs
            .iter()
            .flat_map(|run| run.functions.iter())
            .any(|function| !function.keys.is_empty())
    }

    /// The distinct `--by` fields of the side's files, in order of appearance.
    pub fn key_fields(&self) -> Vec<&'a [String]> {
        let mut fields: Vec<&'a [String]> = Vec::new();
        for recording in self.recordings {
            if !fields.contains(&recording.by.as_slice()) {
                fields.push(&recording.by);
            }
        }
        fields
    }

    pub fn workload_keys(&self) -> BTreeSet<&'a str> {
        self.runs
            .iter()
            .filter_map(|run| run.workload_metrics)
            .flat_map(|m| m.keys().map(String::as_str))
            .collect()
    }

    /// The metric in every run that reported it.
    pub fn workload_values(&self, key: &str) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|run| run.workload_metrics?.get(key).copied())
            .filter(|v| v.is_finite())
            .collect()
    }

    pub fn info(&self) -> SideInfo {
        let distinct = |field: fn(&Recording) -> &str| {
            distinct_values(self.recordings, field)
                .into_iter()
                .map(String::from)
                .collect()
        };
        SideInfo {
            files: self.recordings.len(),
            runs: self.runs.len(),
            kernels: distinct(|r| &r.kernel),
            modes: distinct(|r| &r.mode),
            probe_overhead_ns: mean_probe_overhead(self.recordings),
            probe_bias_ns: mean_probe_bias(self.recordings),
            dropped_calls: self
                .recordings
                .iter()
                .map(|r| r.losses.total_dropped())
                .sum(),
        }
    }
}

fn runs_of(recording: &Recording) -> Vec<Run<'_>> {
    if recording.runs.is_empty() {
        return vec![Run {
            functions: &recording.functions,
            workload_metrics: None,
        }];
    }
    recording
        .runs
        .iter()
        .map(|r| Run {
            functions: &r.functions,
            workload_metrics: Some(&r.workload_metrics),
        })
        .collect()
}

/// All calls of one function on one side, its runs merged.
pub(super) struct Pooled {
    pub sample: BinnedSample,
    /// Exact count, mean and sample variance of every call (from the in-kernel sums).
    pub calls: Moments,
}

pub(super) fn pool(records: &[&FunctionRecord]) -> Pooled {
    let mut histogram = Histogram::new();
    records
        .iter()
        .for_each(|record| histogram.merge(&record.histogram()));
    let called: Vec<&&FunctionRecord> = records.iter().filter(|r| r.count > 0).collect();
    let min = called.iter().map(|r| r.min_ns).min().unwrap_or(0);
    let max = called.iter().map(|r| r.max_ns).max().unwrap_or(0);
    Pooled {
        sample: BinnedSample::new(&histogram, min, max),
        calls: pooled_moments(&called),
    }
}

/// Combines per-run means and population stddevs (Chan et al.): more robust than subtracting
/// squared means from the rounded f64 sum of squares when the spread is small.
fn pooled_moments(records: &[&&FunctionRecord]) -> Moments {
    let n: f64 = records.iter().map(|r| r.count as f64).sum();
    if n == 0.0 {
        return Moments {
            n: 0.0,
            mean: 0.0,
            variance: 0.0,
        };
    }
    let mean = records.iter().map(|r| r.sum_ns as f64).sum::<f64>() / n;
    let squares: f64 = records
        .iter()
        .map(|r| {
            r.count as f64 * (r.stddev_ns * r.stddev_ns + (r.mean_ns - mean) * (r.mean_ns - mean))
        })
        .sum();
    let variance = if n > 1.0 { squares / (n - 1.0) } else { 0.0 };
    Moments { n, mean, variance }
}
