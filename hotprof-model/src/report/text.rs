//! The terminal report: summary, percentiles and a histogram with auto-scaled units.

use std::fmt::Write as _;

use crate::model::{FunctionRecord, Losses, Recording};
use crate::units::format_ns;

const BAR_WIDTH: usize = 40;

/// The whole report for a recording.
pub fn render_recording(recording: &Recording) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "hotprof: {} function{}, {} mode, kernel {}, {}",
        recording.functions.len(),
        if recording.functions.len() == 1 {
            ""
        } else {
            "s"
        },
        recording.mode,
        recording.kernel,
        format_ns(recording.duration_ns as f64),
    );
    if recording.mode == "kprobe.session" {
        // The object's store is loaded but unused: the link's program keeps no frames.
        let _ = writeln!(
            out,
            "per-task state: none (kprobe.session: each call's entry time in its own cookie; \
             nesting not tracked, --no-kprobe-session tracks it)"
        );
    } else if let Some(store) = recording.task_store {
        let _ = writeln!(out, "per-task state: {}", store.describe());
    }
    if let Some(filter) = &recording.filter {
        let _ = writeln!(
            out,
            "filter: {} ({} calls did not match: not recorded)",
            filter.expression, filter.not_matched
        );
    }
    for function in &recording.functions {
        out.push('\n');
        out.push_str(&render_function(function));
        out.push_str(&super::stacks::render_sampling(function));
        out.push_str(&render_keys(function, &recording.by));
        out.push_str(&render_slowest(function, &recording.by));
    }
    out.push_str(&render_children(recording));
    out.push('\n');
    out.push_str(&render_losses(&recording.losses));
    if let Some(overhead) = recording.probe_overhead_ns {
        let _ = write!(
            out,
            "probe overhead: ~{} added per probed call (entry + return)",
            format_ns(overhead)
        );
        match recording.probe_bias_ns {
            Some(bias) => {
                let _ = writeln!(
                    out,
                    "; ~{} of it inside each reported duration (bias)",
                    format_ns(bias)
                );
            }
            None => out.push('\n'),
        }
    }
    out
}

/// One function's block.
pub fn render_function(f: &FunctionRecord) -> String {
    let mut out = String::new();
    let title = if f.name == f.symbol {
        f.name.clone()
    } else {
        format!("{} ({})", f.name, f.symbol)
    };
    let _ = writeln!(out, "{title}");
    if f.count == 0 {
        let _ = writeln!(out, "  no calls recorded");
        if f.below_min_latency > 0 {
            let _ = writeln!(out, "  {} calls below --min-latency", f.below_min_latency);
        }
        return out;
    }
    let _ = writeln!(
        out,
        "  calls {}   total {}   min {}   avg {}   max {}   stddev {}",
        f.count,
        format_ns(f.sum_ns as f64),
        format_ns(f.min_ns as f64),
        format_ns(f.mean_ns),
        format_ns(f.max_ns as f64),
        format_ns(f.stddev_ns),
    );
    let _ = writeln!(
        out,
        "  p50 {}   p90 {}   p99 {}   p99.9 {}   max {}",
        format_ns(f.p50_ns as f64),
        format_ns(f.p90_ns as f64),
        format_ns(f.p99_ns as f64),
        format_ns(f.p999_ns as f64),
        format_ns(f.max_ns as f64),
    );
    out.push_str(&render_counters(f));
    if let Some(on_cpu) = f.on_cpu_sum_ns {
        let share = if f.sum_ns > 0 {
            100.0 * on_cpu as f64 / f.sum_ns as f64
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "  on-CPU avg {} of wall avg {} ({share:.1}% on CPU, the rest switched out)",
            format_ns(on_cpu as f64 / f.count as f64),
            format_ns(f.mean_ns),
        );
    }
    if f.outer_count != f.count {
        let _ = writeln!(
            out,
            "  nested: {} outermost calls totalling {}; self time {} (excludes probed frames inside)",
            f.outer_count,
            format_ns(f.outer_sum_ns as f64),
            format_ns(f.self_sum_ns as f64),
        );
    } else if f.self_sum_ns != f.sum_ns {
        let _ = writeln!(
            out,
            "  self time {} (excludes probed frames inside)",
            format_ns(f.self_sum_ns as f64)
        );
    }
    if f.below_min_latency > 0 {
        let _ = writeln!(
            out,
            "  {} faster calls ignored (--min-latency)",
            f.below_min_latency
        );
    }
    out.push_str(&render_histogram(f));
    out.push_str(&render_callers(f));
    out
}

/// `--counter`: a line per PMU event, its counts per call (events, not nanoseconds).
fn render_counters(f: &FunctionRecord) -> String {
    let mut out = String::new();
    for counter in &f.counters {
        if counter.count == 0 {
            let _ = writeln!(out, "  {} per call: no call counted", counter.event);
            continue;
        }
        let _ = write!(
            out,
            "  {} per call: avg {:.1}   p50 {}   p90 {}   p99 {}   min {}   max {}",
            counter.event,
            counter.mean,
            counter.p50,
            counter.p90,
            counter.p99,
            counter.min,
            counter.max,
        );
        if let Some(bias) = counter.bias {
            let _ = write!(out, "   (~{bias} of each is hotprof's own reading: bias)");
        }
        if counter.count < f.count {
            let _ = write!(
                out,
                "   ({} of {} calls: the rest returned on another CPU or the event was multiplexed out)",
                counter.count, f.count
            );
        }
        out.push('\n');
    }
    out
}

/// Rows most shown per breakdown: the rest are summed in one row so a function with hundreds
/// of callers or keys stays readable (the JSON keeps every row).
const BREAKDOWN_ROWS: usize = 20;

/// One row of a breakdown table: its label columns and its calls.
struct BreakdownRow<'a> {
    labels: Vec<&'a str>,
    count: u64,
    sum_ns: u64,
    p50_ns: u64,
    p99_ns: u64,
}

/// The per-call-site table (call-site mode, `--by caller`): calls, p50, p99 and share of the
/// total time.
fn render_callers(f: &FunctionRecord) -> String {
    let rows = f.callers.iter().map(|c| BreakdownRow {
        labels: vec![c.site.as_str()],
        count: c.count,
        sum_ns: c.sum_ns,
        p50_ns: c.p50_ns,
        p99_ns: c.p99_ns,
    });
    render_breakdown(f, &["call site"], rows.collect(), "sites")
}

/// The `--by` table: a column per key field, then calls, p50, p99 and share of the time.
fn render_keys(f: &FunctionRecord, by: &[String]) -> String {
    if f.keys.is_empty() {
        return String::new();
    }
    let header: Vec<&str> = by.iter().map(String::as_str).collect();
    let rows = f.keys.iter().map(|k| BreakdownRow {
        labels: k.key.iter().map(String::as_str).collect(),
        count: k.count,
        sum_ns: k.sum_ns,
        p50_ns: k.p50_ns,
        p99_ns: k.p99_ns,
    });
    let mut out = format!("  by {}:\n", by.join(", "));
    out.push_str(&render_breakdown(f, &header, rows.collect(), "keys"));
    out
}

/// `--children`: where the parent's time goes, by child. Shares are of self time (each
/// child's time minus the probed children inside it), so with the parent's own self time they
/// add up to 100 % of the parent's total.
fn render_children(recording: &Recording) -> String {
    let children: Vec<&FunctionRecord> = recording
        .functions
        .iter()
        .filter(|f| f.child_of.is_some())
        .collect();
    let Some(parent_name) = children.first().and_then(|c| c.child_of.as_deref()) else {
        return String::new();
    };
    let Some(parent) = recording.functions.iter().find(|f| f.name == parent_name) else {
        return String::new();
    };
    let share = |ns: u64| {
        if parent.sum_ns > 0 {
            100.0 * ns as f64 / parent.sum_ns as f64
        } else {
            0.0
        }
    };
    let per_call = |calls: u64| {
        if parent.count > 0 {
            calls as f64 / parent.count as f64
        } else {
            0.0
        }
    };
    let width = children
        .iter()
        .map(|c| c.name.len())
        .chain([parent_name.len() + " (self)".len(), "child".len()])
        .max()
        .unwrap_or(0);
    let mut out = format!(
        "\ninside {parent_name} ({} calls, {} in all):\n",
        parent.count,
        format_ns(parent.sum_ns as f64)
    );
    let _ = writeln!(
        out,
        "  {:<width$}  {:>10}  {:>7}  {:>9}  {:>9}",
        "child", "per call", "share", "p50", "p99"
    );
    for child in &children {
        let _ = writeln!(
            out,
            "  {:<width$}  {:>10.3}  {:>6.1}%  {:>9}  {:>9}",
            child.name,
            per_call(child.count),
            share(child.self_sum_ns),
            format_ns(child.p50_ns as f64),
            format_ns(child.p99_ns as f64),
        );
    }
    let _ = writeln!(
        out,
        "  {:<width$}  {:>10}  {:>6.1}%",
        format!("{parent_name} (self)"),
        "",
        share(parent.self_sum_ns),
    );
    out
}

/// Kernel frames shown per slowest call (the JSON keeps them all).
const SLOWEST_FRAMES: usize = 8;

/// `--slowest`: one line per call (duration, when, off-CPU part, CPU, task, key), then its
/// innermost kernel frames.
fn render_slowest(f: &FunctionRecord, by: &[String]) -> String {
    if f.slowest.is_empty() {
        return String::new();
    }
    let mut out = format!("  slowest {} calls:\n", f.slowest.len());
    for (rank, call) in f.slowest.iter().enumerate() {
        let mut line = format!(
            "  {:>3}. {:>9}  at {:>9}",
            rank + 1,
            format_ns(call.duration_ns as f64),
            format_ns(call.at_ns as f64)
        );
        if let Some(off_cpu) = call.off_cpu_ns {
            let _ = write!(line, "  off-CPU {}", format_ns(off_cpu as f64));
        }
        let _ = write!(
            line,
            "  cpu {}  pid {} tid {} {}",
            call.cpu, call.pid, call.tid, call.comm
        );
        for (name, value) in by.iter().zip(&call.key) {
            let _ = write!(line, "  {name}={value}");
        }
        let _ = writeln!(out, "{line}");
        if !call.stack.is_empty() {
            let mut frames: Vec<&str> = call
                .stack
                .iter()
                .take(SLOWEST_FRAMES)
                .map(String::as_str)
                .collect();
            if call.stack.len() > SLOWEST_FRAMES {
                frames.push("…");
            }
            let _ = writeln!(out, "       {}", frames.join(" <- "));
        }
    }
    out
}

fn render_breakdown(
    f: &FunctionRecord,
    header: &[&str],
    rows: Vec<BreakdownRow<'_>>,
    noun: &str,
) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let rest = &rows[rows.len().min(BREAKDOWN_ROWS)..];
    let more = format!("{} more {noun}", rest.len());
    let widths: Vec<usize> = header
        .iter()
        .enumerate()
        .map(|(column, title)| {
            let widest = rows
                .iter()
                .take(BREAKDOWN_ROWS)
                .map(|row| row.labels.get(column).map_or(0, |l| l.chars().count()))
                .max()
                .unwrap_or(0);
            let more = if column == 0 && !rest.is_empty() {
                more.len()
            } else {
                0
            };
            widest.max(title.len()).max(more)
        })
        .collect();
    let share = |sum_ns: u64| {
        if f.sum_ns > 0 {
            100.0 * sum_ns as f64 / f.sum_ns as f64
        } else {
            0.0
        }
    };
    let labels = |texts: &[&str]| -> String {
        widths
            .iter()
            .enumerate()
            .map(|(column, &width)| format!("{:<width$}", texts.get(column).copied().unwrap_or("")))
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {}  {:>10}  {:>9}  {:>9}  {:>6}",
        labels(header),
        "calls",
        "p50",
        "p99",
        "time"
    );
    for row in rows.iter().take(BREAKDOWN_ROWS) {
        let (p50, p99) = if row.count == 0 {
            ("-".to_string(), "-".to_string())
        } else {
            (format_ns(row.p50_ns as f64), format_ns(row.p99_ns as f64))
        };
        let _ = writeln!(
            out,
            "  {}  {:>10}  {:>9}  {:>9}  {:>5.1}%",
            labels(&row.labels),
            row.count,
            p50,
            p99,
            share(row.sum_ns),
        );
    }
    if !rest.is_empty() {
        let calls: u64 = rest.iter().map(|r| r.count).sum();
        let sum_ns: u64 = rest.iter().map(|r| r.sum_ns).sum();
        let _ = writeln!(
            out,
            "  {}  {:>10}  {:>9}  {:>9}  {:>5.1}%",
            labels(&[more.as_str()]),
            calls,
            "",
            "",
            share(sum_ns),
        );
    }
    out
}

/// Power-of-two rows (the fine buckets are in the JSON); empty rows inside the range are kept
/// so the shape is honest.
fn render_histogram(f: &FunctionRecord) -> String {
    let mut rows: Vec<(u64, u64)> = Vec::new(); // (power-of-two lower bound, count)
    for &[lower, _, count] in &f.buckets {
        let row = if lower == 0 {
            0
        } else {
            1u64 << (63 - lower.leading_zeros())
        };
        match rows.last_mut() {
            Some((last, total)) if *last == row => *total += count,
            _ => rows.push((row, count)),
        }
    }
    let mut filled = Vec::new();
    for (row, count) in rows {
        while let Some(&(previous, _)) = filled.last() {
            let next: u64 = if previous == 0 { 1 } else { previous * 2 };
            if next >= row {
                break;
            }
            filled.push((next, 0));
        }
        filled.push((row, count));
    }
    let peak = filled.iter().map(|r| r.1).max().unwrap_or(1).max(1);
    let mut out = String::new();
    let _ = writeln!(out, "  {:>21}  {:>10}  distribution", "range", "calls");
    for (lower, count) in filled {
        let upper = if lower == 0 {
            0
        } else {
            lower.saturating_mul(2) - 1
        };
        let stars = ((count as f64 / peak as f64) * BAR_WIDTH as f64).ceil() as usize;
        let _ = writeln!(
            out,
            "  {:>9} .. {:>8}  {:>10}  |{:<BAR_WIDTH$}|",
            format_ns(lower as f64),
            format_ns(upper as f64),
            count,
            "*".repeat(stars.min(BAR_WIDTH)),
        );
    }
    out
}

/// The map-occupancy line of an `--interval` report: how many tasks have a probed call open
/// (per-task frame map entries) and, with `--stacks`, how many distinct stacks are summed in
/// the kernel. A leak shows as a count that keeps climbing from one interval to the next.
pub fn render_map_entries(task_entries: u64, stack_entries: Option<u64>) -> String {
    let mut line =
        format!("maps: {task_entries} task entries (live tasks that made a probed call)");
    if let Some(stacks) = stack_entries {
        let _ = write!(line, ", {stacks} stack-totals entries");
    }
    line
}

/// The losses line(s): always printed, so "nothing lost" is a statement, not an omission.
pub fn render_losses(losses: &Losses) -> String {
    let items = [
        (
            losses.kernel_missed,
            "missed by the kernel (BPF recursion / fprobe)",
        ),
        (losses.orphaned_frames, "calls whose return was never seen"),
        (
            losses.depth_exceeded,
            "calls nested deeper than 16 probed frames",
        ),
        (
            losses.task_map_full,
            "calls dropped: no frame stack for the task (task storage refused, or hash map full)",
        ),
        (losses.slot_missing, "internal map lookups failed"),
        (
            losses.stacks_lost,
            "stacks not stored (raise --stack-map-size)",
        ),
        (
            losses.stack_totals_full,
            "calls missing from the per-stack totals (raise --stack-map-size)",
        ),
        (
            losses.untraced_children,
            "child processes not traced: process-tree map full",
        ),
        (
            losses.keys_full,
            "calls left out of the --by rows (raise --max-keys)",
        ),
        (
            losses.unmatched_returns,
            "returns whose entry was not seen (in flight at attach, or its entry missed: then also \
             missed by the kernel; not timed)",
        ),
        (
            losses.open_at_stop,
            "calls still in flight at stop (not timed)",
        ),
        (
            losses.exited_in_call,
            "calls open when their task exited (never returned, like do_exit, or their return was \
             missed: then also missed by the kernel; not timed)",
        ),
    ];
    let present: Vec<String> = items
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    if present.is_empty() {
        "losses: none\n".into()
    } else {
        format!("losses: {}\n", present.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FunctionTotals;

    #[test]
    fn map_entries_line_names_both_maps_only_with_stacks() {
        assert_eq!(
            render_map_entries(3, None),
            "maps: 3 task entries (live tasks that made a probed call)"
        );
        assert_eq!(
            render_map_entries(0, Some(1234)),
            "maps: 0 task entries (live tasks that made a probed call), 1234 stack-totals entries"
        );
    }

    fn function() -> FunctionRecord {
        let totals = FunctionTotals::from_durations(&[100, 110, 120, 130, 5_000, 2_000_000]);
        FunctionRecord::from_aggregates("f".into(), "f.isra.0".into(), &totals)
    }

    #[test]
    fn renders_summary_percentiles_and_rows() {
        let text = render_function(&function());
        assert!(text.starts_with("f (f.isra.0)\n"), "{text}");
        assert!(text.contains("calls 6"), "{text}");
        assert!(text.contains("p50 "), "{text}");
        assert!(text.contains("1.05 ms .. "), "{text}");
        assert!(
            text.contains("|****************************************|"),
            "{text}"
        );
    }

    #[test]
    fn each_counted_pmu_event_gets_a_line_saying_which_calls_it_holds() {
        use crate::model::{CounterRecord, PmuEvent};
        let mut f = function();
        assert!(!render_function(&f).contains("per call"));
        let all = FunctionTotals::from_durations(&[900, 900, 900, 910, 905, 1_200]);
        let some = FunctionTotals::from_durations(&[40, 41]);
        f.counters = vec![
            CounterRecord::of(PmuEvent::Instructions, &all),
            CounterRecord::of(PmuEvent::BranchMisses, &some),
        ];
        let text = render_function(&f);
        assert!(
            text.contains("  instructions per call: avg 952.5   p50 9"),
            "{text}"
        );
        assert!(text.contains("min 900   max 1200\n"), "{text}");
        assert!(
            text.contains("branch-misses per call: avg 40.5") && text.contains("(2 of 6 calls: "),
            "{text}"
        );
    }

    #[test]
    fn call_sites_get_a_row_each_and_the_rest_one_row() {
        use crate::model::CallerRecord;
        let mut f = function();
        assert!(!render_function(&f).contains("call site"));
        f.callers = (0..22)
            .map(|i| CallerRecord {
                site: format!("caller_{i}+0x{i:x}"),
                count: 10,
                sum_ns: f.sum_ns / 22,
                p50_ns: 120,
                p99_ns: 5_000,
            })
            .collect();
        let text = render_function(&f);
        let table: Vec<&str> = text
            .lines()
            .skip_while(|line| !line.contains("call site"))
            .collect();
        assert_eq!(table.len(), 1 + 20 + 1, "{text}");
        assert!(table[1].starts_with("  caller_0+0x0 "), "{text}");
        assert!(table[1].ends_with("  4.5%"), "{text}");
        assert!(table[21].starts_with("  2 more sites "), "{text}");
        assert!(table[21].contains(" 20 "), "{text}");
    }

    #[test]
    fn the_header_names_where_per_task_state_is_kept() {
        use crate::model::{Recording, TaskStore};
        let recording = |task_store| Recording {
            schema_version: crate::model::SCHEMA_VERSION,
            by: Vec::new(),
            filter: None,
            tool: "hotprof test".into(),
            kernel: "5.10.0-30-cloud-amd64".into(),
            mode: "kprobe".into(),
            task_store,
            duration_ns: 1_000_000,
            command: vec![],
            functions: vec![function()],
            losses: Losses::default(),
            probe_overhead_ns: None,
            probe_bias_ns: None,
            runs: vec![],
            intervals: vec![],
        };
        let second_line = |store| {
            render_recording(&recording(store))
                .lines()
                .nth(1)
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(
            second_line(Some(TaskStore::TaskStorage)),
            "per-task state: task-local storage"
        );
        let hashed = second_line(Some(TaskStore::HashMap));
        let limit = format!(
            "per-task state: hash map ({} tasks max; ",
            profiler_common::HASHED_TASKS_MAX
        );
        assert!(hashed.starts_with(&limit), "{hashed}");
        assert!(hashed.contains("no task-local storage"), "{hashed}");
        // Files from before the field: no line, the function block follows the header.
        assert_eq!(second_line(None), "");
    }

    #[test]
    fn losses_are_always_stated() {
        assert_eq!(render_losses(&Losses::default()), "losses: none\n");
        let losses = Losses {
            orphaned_frames: 2,
            open_at_stop: 1,
            ..Default::default()
        };
        let text = render_losses(&losses);
        assert!(text.contains("2 calls whose return was never seen"));
        assert!(text.contains("1 calls still in flight"));
    }
}
