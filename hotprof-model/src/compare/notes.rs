//! What the reader must know about the inputs: mismatches that do not stop a comparison.

use super::breakdown::{Breakdown, KeyFields, part_notes};
use super::error::short_list;
use super::side::Side;
use super::{FunctionComparison, MIN_RUNS_FOR_RUN_TEST, SideInfo};

/// Warnings: differences that bias the latencies themselves.
pub(super) fn warnings(base: &SideInfo, new: &SideInfo) -> Vec<String> {
    let mut warnings = Vec::new();
    if base.modes != new.modes {
        warnings.push(format!(
            "probe mode differs (base {}, new {}): every latency includes the probe's own cost, which \
             differs by mechanism (kprobe+kretprobe costs tens of ns more per call than fentry+fexit)",
            base.modes.join("+"),
            new.modes.join("+")
        ));
    }
    for (label, side) in [("base", base), ("new", new)] {
        if side.modes.len() > 1 {
            warnings.push(format!(
                "{label} mixes probe modes ({}) across its files",
                side.modes.join(", ")
            ));
        }
        if side.dropped_calls > 0 {
            warnings.push(format!(
                "{label}: {} calls were dropped (see losses); its figures undercount",
                side.dropped_calls
            ));
        }
    }
    warnings
}

/// Notes: context for reading the table.
pub(super) fn notes(
    base: &Side,
    new: &Side,
    functions: &[FunctionComparison],
    key_fields: &KeyFields,
) -> Vec<String> {
    let (base_info, new_info) = (base.info(), new.info());
    let mut notes = Vec::new();
    notes.extend(kernel_note(&base_info, &new_info));
    notes.extend(overhead_note(&base_info, &new_info));
    notes.extend(unmatched_function_notes(base, new));
    if let KeyFields::Mismatched(note) = key_fields {
        notes.push(note.clone());
    }
    for function in functions {
        let (name, base_runs, new_runs) = (
            &function.name,
            base.function_runs(&function.name),
            new.function_runs(&function.name),
        );
        notes.extend(part_notes(
            Breakdown::CallSites,
            name,
            &base_runs,
            &new_runs,
        ));
        // Key values of differently keyed sides are not comparable: one note above says so.
        if matches!(key_fields, KeyFields::Same(_)) {
            notes.extend(part_notes(Breakdown::Keys, name, &base_runs, &new_runs));
        }
        if function.base_symbol != function.new_symbol {
            let (name, b, n) = (&function.name, &function.base_symbol, &function.new_symbol);
            notes.push(format!(
                "{name}: attached symbol differs (base {b}, new {n})"
            ));
        }
        for side in [base, new] {
            let present = side.function_runs(&function.name).len();
            if present < side.runs.len() {
                let (name, label, total) = (&function.name, side.label, side.runs.len());
                notes.push(format!(
                    "{name}: recorded in {present} of {total} {label} runs"
                ));
            }
        }
    }
    notes.extend(workload_notes(base, new));
    notes.extend(run_count_note(&base_info, &new_info));
    notes.extend(command_note(base, new));
    notes
}

fn kernel_note(base: &SideInfo, new: &SideInfo) -> Option<String> {
    (base.kernels != new.kernels).then(|| {
        format!(
            "kernel: base {}, new {}",
            base.kernels.join(", "),
            new.kernels.join(", ")
        )
    })
}

fn overhead_note(base: &SideInfo, new: &SideInfo) -> Option<String> {
    let (b, n) = (base.probe_overhead_ns?, new.probe_overhead_ns?);
    ((n - b).abs() > 0.1 * b.max(n)).then(|| {
        let inside = match (base.probe_bias_ns, new.probe_bias_ns) {
            (Some(b), Some(n)) => format!("the bias, base {b:.0} ns, new {n:.0} ns"),
            _ => "the bias".to_owned(),
        };
        format!(
            "calibrated probe overhead per call differs: base {b:.0} ns, new {n:.0} ns (what \
             each traced call pays; only part of it lies inside every latency: {inside})"
        )
    })
}

fn unmatched_function_notes(base: &Side, new: &Side) -> Vec<String> {
    let (base_names, new_names) = (base.function_names(), new.function_names());
    let only = |these: &[&str], others: &[&str]| -> Vec<String> {
        these
            .iter()
            .filter(|name| !others.contains(name))
            .map(|name| name.to_string())
            .collect()
    };
    let mut notes = Vec::new();
    for (label, names) in [
        ("base", only(&base_names, &new_names)),
        ("new", only(&new_names, &base_names)),
    ] {
        if !names.is_empty() {
            notes.push(format!(
                "only in {label}, not compared: {}",
                short_list(&names)
            ));
        }
    }
    notes
}

fn workload_notes(base: &Side, new: &Side) -> Vec<String> {
    let (base_keys, new_keys) = (base.workload_keys(), new.workload_keys());
    let mut notes = Vec::new();
    for (label, these, others) in [
        ("base", &base_keys, &new_keys),
        ("new", &new_keys, &base_keys),
    ] {
        let only: Vec<&str> = these.difference(others).copied().collect();
        if !only.is_empty() {
            notes.push(format!(
                "workload metrics only in {label}, not compared: {}",
                short_list(&only)
            ));
        }
    }
    notes
}

fn run_count_note(base: &SideInfo, new: &SideInfo) -> Option<String> {
    (base.runs < MIN_RUNS_FOR_RUN_TEST || new.runs < MIN_RUNS_FOR_RUN_TEST).then(|| {
        format!(
            "base has {} run(s), new {} (fewer than {MIN_RUNS_FOR_RUN_TEST} per side): avg, p50, p90 and p99 are \
             tested on the pooled calls as if every call were independent, which ignores run-to-run variation \
             (boot, cache layout, frequency); calls/run, max and workload metrics are not tested. Record each \
             side with --runs 5 or more",
            base.runs, new.runs
        )
    })
}

fn command_note(base: &Side, new: &Side) -> Option<String> {
    let command = |side: &Side| side.recordings[0].command.join(" ");
    let (b, n) = (command(base), command(new));
    (b != n).then(|| format!("workload command differs: base `{b}`, new `{n}`"))
}
