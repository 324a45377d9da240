//! The peers side by side on workloads whose truth is known (issue #36): a function called an
//! exact number of times, one with a known bimodal latency, a recursive function, and a
//! notrace one, each timed by hotprof and
//! by Debian sid's bpftrace (its fentry pair and its kprobe pair, the `@start[tid]` + `hist()`
//! program), libbpf-tools' funclatency and `perf ftrace latency`, in one guest with the peers'
//! layer ([`crate::peers`]). What each counted, or what it answered when it would not attach,
//! becomes a table: the bench report's (`cargo xtask bench --only exactness`) and the
//! `peers_side_by_side` scenario's, which checks hotprof's counts and that every peer still
//! runs.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};

use crate::peer_output::{
    Bucket, bpftrace_hist_buckets, calls_between, log2_hist_buckets, perf_latency_buckets,
    perf_latency_count, total,
};

/// A workload with a known truth, and the function timed in it.
pub struct Case {
    pub key: &'static str,
    pub title: &'static str,
    pub function: &'static str,
    /// The workload: a program and its arguments (bpftrace's `-c` splits at spaces, no shell).
    workload: &'static str,
    /// hotprof's options beyond `--fn FUNCTION`.
    hotprof_extra: &'static str,
    /// The calls a complete tool counts, where the workload's own output does not say.
    pub truth: Truth,
    /// The latency ranges the calls fall into, `[from_ns, to_ns)`, and how many in each, where
    /// the case knows.
    pub modes: Option<[Mode; 2]>,
}

/// A range of latencies and the calls a complete tool puts in it.
#[derive(Clone, Copy)]
pub struct Mode {
    pub from_ns: u64,
    pub to_ns: u64,
    pub calls: u64,
}

impl Mode {
    /// `0.5–4 ms`.
    fn range(self) -> String {
        format!(
            "{}–{} ms",
            self.from_ns as f64 / 1e6,
            self.to_ns as f64 / 1e6
        )
    }
}

/// Where a case's true call count comes from.
#[derive(Clone, Copy)]
pub enum Truth {
    /// `syscall_lat`'s `calls=` (every getpid of the workload).
    WorkloadCalls,
    /// `stat_loop`'s `calls=`, and the one fstat its C runtime makes at start-up.
    WorkloadCallsPlusOne,
    /// A fixed count: `epoll_nest 3` enters `ep_loop_check_proc` 3 times, 2 of them outermost.
    Fixed(u64),
}

pub const CASES: [Case; 4] = [
    Case {
        key: "exact",
        title: "exact count: `__do_sys_getpid`, 100,000 getpid calls",
        function: "__do_sys_getpid",
        workload: "/bin/syscall_lat 100000",
        hotprof_extra: "",
        truth: Truth::WorkloadCalls,
        modes: None,
    },
    Case {
        key: "bimodal",
        title: "bimodal: `do_nanosleep`, 20 sleeps of 1 ms and 20 of 20 ms, alternating",
        function: "do_nanosleep",
        workload: "/bin/sleeper 40 1000 --alternate 20000",
        hotprof_extra: "",
        truth: Truth::Fixed(40),
        // A sleep lasts its length plus a timer's slack and, under TCG on a loaded host, a
        // vCPU's wait for a host core (a 1 ms sleep took over 4 ms once in CI). The ranges
        // meet at 16 ms, an edge of every tool's buckets (2^24 ns, 16,384 µs) below the long
        // sleep's bucket: a short sleep must be 15 ms late to land in the wrong mode.
        modes: Some([
            Mode {
                from_ns: 500_000,
                to_ns: 16_000_000,
                calls: 20,
            },
            Mode {
                from_ns: 16_000_000,
                to_ns: 160_000_000,
                calls: 20,
            },
        ]),
    },
    Case {
        key: "recursive",
        title: "recursive: `ep_loop_check_proc` (`epoll_nest 3`: 3 calls, one inside another)",
        function: "ep_loop_check_proc",
        workload: "/bin/epoll_nest 3 200",
        hotprof_extra: "",
        truth: Truth::Fixed(3),
        modes: None,
    },
    Case {
        key: "notrace",
        title: "notrace: `_copy_to_user` (lib/, no ftrace hook), one per fstat from `cp_new_stat`",
        function: "_copy_to_user",
        workload: "/bin/stat_loop 2000 /tmp",
        hotprof_extra: " --callers 'cp_new_stat*'",
        truth: Truth::WorkloadCallsPlusOne,
        modes: None,
    },
];

/// A tool in the table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Tool {
    Hotprof,
    BpftraceFentry,
    BpftraceKprobe,
    Funclatency,
    PerfFtrace,
}

pub const TOOLS: [Tool; 5] = [
    Tool::Hotprof,
    Tool::BpftraceFentry,
    Tool::BpftraceKprobe,
    Tool::Funclatency,
    Tool::PerfFtrace,
];

impl Tool {
    fn key(self) -> &'static str {
        match self {
            Tool::Hotprof => "hotprof",
            Tool::BpftraceFentry => "bpftrace-fentry",
            Tool::BpftraceKprobe => "bpftrace-kprobe",
            Tool::Funclatency => "funclatency",
            Tool::PerfFtrace => "perf",
        }
    }

    /// The column's title; the versions are the layer's, named beside the table (sid moves).
    pub fn title(self) -> &'static str {
        match self {
            Tool::Hotprof => "hotprof (auto mode)",
            Tool::BpftraceFentry => "bpftrace `kfunc`/`kretfunc`",
            Tool::BpftraceKprobe => "bpftrace `kprobe`/`kretprobe`",
            Tool::Funclatency => "funclatency",
            Tool::PerfFtrace => "perf `ftrace latency -a`",
        }
    }

    /// Whether the tool counts every task's calls, not only the workload's: funclatency runs
    /// no command, and perf's pid filter would miss the workload's threads.
    pub fn system_wide(self) -> bool {
        matches!(self, Tool::Funclatency | Tool::PerfFtrace)
    }

    /// The guest command for `case`, its output (stdout and stderr) in `/out/CASE-TOOL.txt`.
    fn command(self, case: &Case) -> String {
        let f = case.function;
        let w = case.workload;
        let bpftrace = |entry: &str, exit: &str| {
            format!(
                "bpftrace-sid -e '{entry}:{f} /pid == cpid/ {{ @start[tid] = nsecs; }} \
                 {exit}:{f} /@start[tid]/ {{ @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }}' \
                 -c \"{w}\""
            )
        };
        match self {
            Tool::Hotprof => format!(
                "hotprof --fn {f}{} --no-calibrate --json /out/{}-hotprof.json -- {w}",
                case.hotprof_extra, case.key
            ),
            Tool::BpftraceFentry => bpftrace("kfunc", "kretfunc"),
            Tool::BpftraceKprobe => bpftrace("kprobe", "kretprobe"),
            // It runs no command: started in the background, the workload once its programs
            // are in kallsyms (or it has given up), then Ctrl-C, which prints its histogram.
            Tool::Funclatency => format!(
                "( funclatency {f} & fl=$!; \
                 until grep -q '_dummy_' /proc/kallsyms || ! kill -0 $fl 2>/dev/null; do sleep 0.2; done; \
                 sleep 1; {w}; kill -INT $fl 2>/dev/null; wait $fl )"
            ),
            // Microsecond buckets (its default): with `-n` every call of 1 ms or more shares
            // its last bucket.
            Tool::PerfFtrace => format!("perf ftrace latency -a -T {f} -- {w}"),
        }
    }

    /// The tool's count of the calls it timed, from its output.
    fn count(self, output: &str, json: Option<&serde_json::Value>) -> Option<u64> {
        match self {
            Tool::Hotprof => json?["functions"][0]["count"].as_u64(),
            Tool::PerfFtrace => perf_latency_count(output),
            _ => total(&self.buckets(output, json)),
        }
    }

    /// The tool's histogram.
    fn buckets(self, output: &str, json: Option<&serde_json::Value>) -> Vec<Bucket> {
        match self {
            Tool::Hotprof => json
                .and_then(|json| json["functions"][0]["buckets"].as_array())
                .map(|buckets| {
                    buckets
                        .iter()
                        .filter_map(|b| Some((b[0].as_u64()?, b[2].as_u64()?)))
                        .collect()
                })
                .unwrap_or_default(),
            Tool::BpftraceFentry | Tool::BpftraceKprobe => bpftrace_hist_buckets(output),
            Tool::Funclatency => log2_hist_buckets(output),
            Tool::PerfFtrace => perf_latency_buckets(output),
        }
    }
}

/// The guest script: every tool on every case, each one's output into a file (with its stdout
/// a pipe, bpftrace 0.27.1 printed some `hist()`s without their buckets here, which its JSON
/// output held: not understood, and not met with files).
pub fn script() -> String {
    let mut script = String::new();
    for case in &CASES {
        for tool in TOOLS {
            let name = format!("{}-{}", case.key, tool.key());
            let _ = writeln!(
                script,
                "{} > /out/{name}.txt 2>&1; echo \"{name} rc=$?\"",
                tool.command(case)
            );
        }
    }
    script
}

/// What one tool did with one case.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// It timed this many calls; with the case's modes, this many in each.
    Counted(u64, Option<[u64; 2]>),
    /// It printed no count: its last line of output says why.
    Refused(String),
}

/// One case's row: its truth and every tool's outcome.
pub struct Row {
    pub case: &'static Case,
    pub truth: u64,
    pub outcomes: Vec<(Tool, Outcome)>,
}

impl Row {
    pub fn outcome(&self, tool: Tool) -> &Outcome {
        &self
            .outcomes
            .iter()
            .find(|(t, _)| *t == tool)
            .expect("every row holds every tool")
            .1
    }
}

/// Reads the guest's outputs in `out_dir` into rows.
pub fn read(out_dir: &Path) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for case in &CASES {
        let hotprof_output = read_output(out_dir, case, Tool::Hotprof)?;
        let truth = match case.truth {
            Truth::Fixed(calls) => calls,
            Truth::WorkloadCalls | Truth::WorkloadCallsPlusOne => {
                let calls = workload_calls(&hotprof_output).with_context(|| {
                    format!(
                        "{}: no `calls=` from the workload in hotprof's run",
                        case.key
                    )
                })?;
                calls + u64::from(matches!(case.truth, Truth::WorkloadCallsPlusOne))
            }
        };
        let json_path = out_dir.join(format!("{}-hotprof.json", case.key));
        let json: Option<serde_json::Value> = fs::read_to_string(&json_path)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok());
        let mut outcomes = Vec::new();
        for tool in TOOLS {
            let output = read_output(out_dir, case, tool)?;
            let outcome = match tool.count(&output, json.as_ref()) {
                Some(count) => Outcome::Counted(
                    count,
                    case.modes.map(|modes| {
                        let buckets = tool.buckets(&output, json.as_ref());
                        modes.map(|mode| calls_between(&buckets, mode.from_ns, mode.to_ns))
                    }),
                ),
                None => Outcome::Refused(why(&output)),
            };
            outcomes.push((tool, outcome));
        }
        rows.push(Row {
            case,
            truth,
            outcomes,
        });
    }
    Ok(rows)
}

fn read_output(out_dir: &Path, case: &Case, tool: Tool) -> Result<String> {
    let path = out_dir.join(format!("{}-{}.txt", case.key, tool.key()));
    fs::read_to_string(&path).with_context(|| format!("the guest wrote no {}", path.display()))
}

/// `calls=N` in a workload's summary line.
fn workload_calls(output: &str) -> Option<u64> {
    output
        .split_whitespace()
        .find_map(|word| word.strip_prefix("calls=")?.parse().ok())
}

/// The line that says why a tool timed nothing: its first error, else its last line.
fn why(output: &str) -> String {
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .find(|l| l.contains("ERROR") || l.contains("failed") || l.contains("error"))
        .or(lines.last())
        .map_or("no output".into(), |l| l.replace('|', "/"))
}

/// The rows as a markdown table: counts against the truth, refusals with their line.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from("| case | truth |");
    for tool in TOOLS {
        let _ = write!(out, " {} |", tool.title());
    }
    out.push_str("\n|---|---|");
    out.push_str(&"---|".repeat(TOOLS.len()));
    out.push('\n');
    for row in rows {
        let _ = write!(out, "| {} | {} |", row.case.title, row.truth);
        for (tool, outcome) in &row.outcomes {
            let cell = match outcome {
                Outcome::Counted(n, modes) => {
                    let count = if *n == row.truth {
                        format!("{n} exact")
                    } else if tool.system_wide() && *n > row.truth {
                        format!("{n} (system-wide: +{} from other tasks)", n - row.truth)
                    } else {
                        format!("**{n}** ({:+})", *n as i64 - row.truth as i64)
                    };
                    match (modes, row.case.modes) {
                        (Some(seen), Some(want)) => format!(
                            "{count}; {} in {}, {} in {}{}",
                            seen[0],
                            want[0].range(),
                            seen[1],
                            want[1].range(),
                            if *seen == want.map(|mode| mode.calls) {
                                " (both modes)"
                            } else {
                                ""
                            }
                        ),
                        _ => count,
                    }
                }
                Outcome::Refused(why) => format!("refused: `{why}`"),
            };
            let _ = write!(out, " {cell} |");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_runs_every_tool_on_every_case() {
        let script = script();
        for case in &CASES {
            for tool in TOOLS {
                let name = format!("{}-{}", case.key, tool.key());
                assert!(script.contains(&format!("> /out/{name}.txt")), "{name}");
            }
        }
        assert!(script.contains(
            "bpftrace-sid -e 'kprobe:_copy_to_user /pid == cpid/ { @start[tid] = nsecs; } \
             kretprobe:_copy_to_user /@start[tid]/"
        ));
        assert!(script.contains("hotprof --fn _copy_to_user --callers 'cp_new_stat*'"));
    }

    #[test]
    fn a_refusal_is_its_error_line() {
        let bpftrace = "stdin:1:60-82: ERROR: No matches for fexit _copy_to_user.\nkfunc:… | …\n";
        assert_eq!(
            why(bpftrace),
            "stdin:1:60-82: ERROR: No matches for fexit _copy_to_user."
        );
        assert_eq!(
            why("failed to set tracing filters\n"),
            "failed to set tracing filters"
        );
        assert_eq!(why(""), "no output");
        assert_eq!(
            workload_calls("stat_loop: calls=2000 avg_ns=4334.0 pid=216"),
            Some(2000)
        );
    }
}
