//! The soak test (`cargo xtask test --soak`, or `--only soak`): hotprof running for ten
//! minutes with `--interval 1s --stacks` in a 6.12 guest under a continuous workload that
//! keeps starting and ending processes, checked for the three ways a long-running profiler
//! rots — memory growth, kernel map entries that are never freed, and interval reports that
//! fall behind or go missing.
//!
//! Not part of the default `cargo xtask test` (it takes ~12 minutes of wall time); opt-in only.
//!
//! What the guest runs:
//! - `hotprof --fn vfs_write --fn do_nanosleep --stacks --interval 1s --duration 600s --json`,
//!   system-wide (no `-- cmd`, so every process counts, including the short-lived ones);
//! - a long-lived `sleeper` (1 ms sleeps: do_nanosleep frames open at most snapshots);
//! - a loop of short-lived `tmpfs_write` + `sleep` processes, and one of `hammer` (2 threads,
//!   5 s) and `syscall_lat`: tasks come and go all the time, each with new stacks;
//! - every ~10 s, hotprof's VmRSS from /proc/PID/status into /out/rss.txt.
//!
//! What is asserted, with the figures printed so they can be quoted:
//! - RSS flat: after a 30 s warm-up, no sample (the last included) is more than
//!   [`RSS_GROWTH_LIMIT_KB`] above the first (the interval records hotprof keeps for `--json` are ~100 bytes each: 600 of
//!   them are well under that);
//! - per-task frame map (TASKS) entries never above [`MAX_TASK_ENTRIES`]: a task's entry is
//!   deleted when its last probed frame closes, so only tasks inside a probed call hold one
//!   (here: a few sleepers); a leak of exited tasks' entries would climb with the ~2000
//!   processes the loops start;
//! - stack-totals entries: keyed by (function, process, stack), so they grow with every new
//!   process by design, until `--stack-map-size`; asserted at most
//!   [`STACK_ENTRIES_PER_PROCESS`] per process started plus the long-lived ones, and none lost
//!   to a full map;
//! - 600 intervals (±1), none [`MAX_INTERVAL_GAP`] or more after the previous one (a missed
//!   report would show as a 2 s gap), and the last one within 2 s of 600 s (no drift).

use std::fs;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use crate::scenarios::{Ctx, Scenario};

/// The soak, as a scenario the test runner can schedule on 6.12.
pub const SOAK: Scenario = Scenario {
    name: "soak",
    kernels: &[crate::kernels::Kernel::V6_12],
    run: soak,
};

/// How long hotprof runs.
const SOAK_SECONDS: u64 = 600;
/// Boot (up to two under TCG), attach, the 600 s and writing the flamegraph data: the
/// default 180 s guest timeout is for short scenarios.
const SOAK_VM_TIMEOUT: Duration = Duration::from_secs(SOAK_SECONDS + 300);
/// RSS samples taken before this much time has passed are warm-up (symbol tables, first
/// stacks, tokio's worker threads) and not compared.
const WARM_UP_SECONDS: f64 = 30.0;
/// Allowed growth of hotprof's RSS from the first post-warm-up sample to the last.
const RSS_GROWTH_LIMIT_KB: u64 = 1024;
/// Tasks with a probed call open at one instant: the sleepers and writers of the workload,
/// a handful; a leak would be hundreds.
const MAX_TASK_ENTRIES: u64 = 32;
/// Distinct (function, stack) pairs one short-lived process adds: vfs_write and
/// do_nanosleep reached through one or two syscall paths each.
const STACK_ENTRIES_PER_PROCESS: u64 = 6;
/// Stack-totals entries of the long-lived processes (sleeper, the shell loops, init).
const STACK_ENTRIES_BASE: u64 = 256;
/// The interval is 1 s; a report that was skipped would leave a gap of 2 s or more. Late
/// reports are normal in a busy TCG guest (the first run saw 1.61 s at most, with the next
/// report early to catch up: tokio's interval keeps the 1 s grid), so the limit is just
/// under two intervals rather than a jitter bound; jitter is printed instead.
const MAX_INTERVAL_GAP: Duration = Duration::from_millis(1950);
/// A report this much later than the 1 s grid counts as late in the printed figures.
const LATE_GAP: Duration = Duration::from_millis(1100);

/// The guest script. Every loop iteration starts two processes and appends a line to
/// /tmp/started, so the stack-totals bound can be computed from what really ran.
fn script() -> String {
    format!(
        r#"
hotprof --fn vfs_write --fn do_nanosleep --stacks --interval 1s --duration {SOAK_SECONDS}s \
  --no-calibrate --json /out/soak.json > /tmp/soak.txt 2>&1 &
hp=$!
for i in $(seq 1 120); do grep -q attached /tmp/soak.txt && break; sleep 1; done
sleeper 10000000 1000 > /dev/null &
long=$!
(while [ ! -e /tmp/stop ]; do tmpfs_write /tmp/soak_w 1 > /dev/null; sleep 1; echo >> /tmp/started; done) &
writers=$!
(while [ ! -e /tmp/stop ]; do hammer 2 5 > /dev/null; syscall_lat 20000 > /dev/null; echo >> /tmp/started; done) &
hammers=$!
while kill -0 $hp 2> /dev/null; do
  rss=$(grep VmRSS /proc/$hp/status 2> /dev/null | tr -s ' ' | cut -d' ' -f2)
  [ -n "$rss" ] && echo "$(cut -d' ' -f1 /proc/uptime) $rss" >> /out/rss.txt
  sleep 10
done
wait $hp
echo "hotprof_exit=$?"
touch /tmp/stop
kill $long
wait $writers $hammers
echo "started=$(( $(wc -l < /tmp/started) * 2 ))"
grep -E '^(--- interval|maps:)' /tmp/soak.txt > /out/maps.txt
tail -n 40 /tmp/soak.txt
"#
    )
}

fn soak(ctx: &mut Ctx) -> Result<()> {
    let guest = ctx.run_with_timeout(&script(), SOAK_VM_TIMEOUT)?;
    ensure!(
        guest.lines_containing("hotprof_exit=0").len() == 1,
        "hotprof did not exit 0"
    );
    let started = guest
        .lines_containing("started=")
        .first()
        .and_then(|line| line.trim().strip_prefix("started=")?.parse::<u64>().ok())
        .context("the guest did not report how many processes it started")?;
    let recording = guest.json("soak.json")?;
    let rss_path = guest.outcome.out_dir.join("rss.txt");
    let rss = fs::read_to_string(&rss_path).context("the guest left no /out/rss.txt")?;
    let maps = fs::read_to_string(guest.outcome.out_dir.join("maps.txt"))
        .context("the guest left no /out/maps.txt")?;
    let figures = SoakFigures::measure(&recording, &rss, started)?;
    println!("{}", figures.summary());
    ensure!(
        maps.lines().filter(|l| l.starts_with("maps: ")).count() as u64 == figures.intervals,
        "the text report has not one `maps:` line per interval"
    );
    figures.check()
}

/// What the soak measured.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakFigures {
    pub intervals: u64,
    pub max_gap: Duration,
    pub min_gap: Duration,
    pub p99_gap: Duration,
    pub late_reports: usize,
    pub last_elapsed: Duration,
    pub rss_samples: usize,
    pub rss_first_kb: u64,
    pub rss_last_kb: u64,
    pub rss_max_kb: u64,
    /// The largest sample after warm-up.
    pub rss_max_after_warm_up_kb: u64,
    pub max_task_entries: u64,
    pub max_stack_entries: u64,
    pub last_stack_entries: u64,
    pub stack_totals_full: u64,
    pub processes_started: u64,
    pub calls: u64,
}

impl SoakFigures {
    /// `recording`: hotprof's `--json`; `rss`: lines `UPTIME_S RSS_KB`; `started`: processes
    /// the workload loops started.
    pub fn measure(recording: &Value, rss: &str, started: u64) -> Result<Self> {
        let intervals = recording["intervals"]
            .as_array()
            .context("the recording has no intervals array")?;
        let nanos = |value: &Value, key: &str| -> Result<u64> {
            value[key]
                .as_u64()
                .with_context(|| format!("an interval has no {key}"))
        };
        let mut gaps = Vec::new();
        let mut max_task_entries = 0;
        let mut max_stack_entries = 0;
        let mut last_stack_entries = 0;
        let mut calls = 0;
        for interval in intervals {
            gaps.push(Duration::from_nanos(nanos(interval, "duration_ns")?));
            max_task_entries = max_task_entries.max(nanos(interval, "task_entries")?);
            last_stack_entries = nanos(interval, "stack_entries")?;
            max_stack_entries = max_stack_entries.max(last_stack_entries);
            for function in interval["functions"].as_array().into_iter().flatten() {
                calls += function["count"].as_u64().unwrap_or(0);
            }
        }
        let last_elapsed = intervals
            .last()
            .map(|last| nanos(last, "elapsed_ns"))
            .transpose()?
            .map_or(Duration::ZERO, Duration::from_nanos);
        let samples = parse_rss(rss)?;
        let start = samples.first().map_or(0.0, |s| s.0);
        let after_warm_up: Vec<u64> = samples
            .iter()
            .filter(|(at, _)| at - start >= WARM_UP_SECONDS)
            .map(|s| s.1)
            .collect();
        ensure!(
            after_warm_up.len() >= 2,
            "only {} RSS samples after the {WARM_UP_SECONDS} s warm-up",
            after_warm_up.len()
        );
        Ok(Self {
            intervals: intervals.len() as u64,
            max_gap: gaps.iter().copied().max().unwrap_or_default(),
            min_gap: gaps.iter().copied().min().unwrap_or_default(),
            p99_gap: {
                let mut sorted = gaps.clone();
                sorted.sort();
                sorted
                    .get((sorted.len() * 99).div_ceil(100).saturating_sub(1))
                    .copied()
                    .unwrap_or_default()
            },
            late_reports: gaps.iter().filter(|gap| **gap > LATE_GAP).count(),
            last_elapsed,
            rss_samples: samples.len(),
            rss_first_kb: after_warm_up[0],
            rss_last_kb: after_warm_up[after_warm_up.len() - 1],
            rss_max_kb: samples.iter().map(|s| s.1).max().unwrap_or(0),
            rss_max_after_warm_up_kb: after_warm_up.iter().copied().max().unwrap_or(0),
            max_task_entries,
            max_stack_entries,
            last_stack_entries,
            stack_totals_full: recording["losses"]["stack_totals_full"]
                .as_u64()
                .unwrap_or(0),
            processes_started: started,
            calls,
        })
    }

    /// The figures, one line each, for the test output.
    pub fn summary(&self) -> String {
        format!(
            "  intervals {} (want {SOAK_SECONDS} ±1), gap between reports min {:.3} s p99 {:.3} s max {:.3} s \
             (limit {:.2} s), {} later than {:.1} s, last at {:.1} s\n  \
             RSS ({} samples): first after warm-up {} kB, last {} kB ({:+} kB), max after warm-up {} kB \
             (limit first +{RSS_GROWTH_LIMIT_KB}), max overall {} kB\n  \
             task entries max {} (limit {MAX_TASK_ENTRIES})\n  \
             stack-totals entries max {}, last {} for {} processes started (limit {}), calls missing from stack totals {}\n  \
             calls timed in intervals {}",
            self.intervals,
            self.min_gap.as_secs_f64(),
            self.p99_gap.as_secs_f64(),
            self.max_gap.as_secs_f64(),
            MAX_INTERVAL_GAP.as_secs_f64(),
            self.late_reports,
            LATE_GAP.as_secs_f64(),
            self.last_elapsed.as_secs_f64(),
            self.rss_samples,
            self.rss_first_kb,
            self.rss_last_kb,
            self.rss_last_kb as i64 - self.rss_first_kb as i64,
            self.rss_max_after_warm_up_kb,
            self.rss_max_kb,
            self.max_task_entries,
            self.max_stack_entries,
            self.last_stack_entries,
            self.processes_started,
            self.stack_entry_limit(),
            self.stack_totals_full,
            self.calls,
        )
    }

    fn stack_entry_limit(&self) -> u64 {
        STACK_ENTRIES_BASE + STACK_ENTRIES_PER_PROCESS * self.processes_started
    }

    /// Every soak assertion; the first failure is returned.
    pub fn check(&self) -> Result<()> {
        ensure!(
            self.intervals.abs_diff(SOAK_SECONDS) <= 1,
            "{} interval reports in {SOAK_SECONDS} s, want {SOAK_SECONDS} ±1",
            self.intervals
        );
        ensure!(
            self.max_gap < MAX_INTERVAL_GAP,
            "an interval report came {:.3} s after the previous one (limit {:.2} s): one was missed",
            self.max_gap.as_secs_f64(),
            MAX_INTERVAL_GAP.as_secs_f64()
        );
        ensure!(
            self.last_elapsed.as_secs_f64() >= self.intervals as f64 - 2.0
                && self.last_elapsed.as_secs_f64() <= self.intervals as f64 + 2.0,
            "the last of {} interval reports came at {:.1} s: the reports drifted",
            self.intervals,
            self.last_elapsed.as_secs_f64()
        );
        ensure!(
            self.rss_max_after_warm_up_kb <= self.rss_first_kb + RSS_GROWTH_LIMIT_KB,
            "hotprof's RSS grew from {} kB to {} kB after warm-up (limit +{RSS_GROWTH_LIMIT_KB} kB)",
            self.rss_first_kb,
            self.rss_max_after_warm_up_kb
        );
        ensure!(
            self.max_task_entries <= MAX_TASK_ENTRIES,
            "the per-task frame map held {} entries at once (limit {MAX_TASK_ENTRIES}): entries leak",
            self.max_task_entries
        );
        ensure!(
            self.max_stack_entries <= self.stack_entry_limit(),
            "the stack-totals map held {} entries for {} processes (limit {})",
            self.max_stack_entries,
            self.processes_started,
            self.stack_entry_limit()
        );
        ensure!(
            self.stack_totals_full == 0,
            "{} calls did not fit the stack-totals map",
            self.stack_totals_full
        );
        ensure!(self.calls > 0, "no calls were timed during the soak");
        Ok(())
    }
}

/// `UPTIME_S RSS_KB` lines, as the guest script writes them.
fn parse_rss(text: &str) -> Result<Vec<(f64, u64)>> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let mut fields = line.split_whitespace();
            let at = fields.next().and_then(|f| f.parse::<f64>().ok());
            let rss = fields.next().and_then(|f| f.parse::<u64>().ok());
            at.zip(rss)
                .with_context(|| format!("bad RSS sample line {line:?}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recording of `n` 1-second intervals, with `tasks` and `stacks` entries each.
    fn recording(n: u64, gap_ms: u64, tasks: u64, stacks: u64) -> Value {
        let intervals: Vec<Value> = (1..=n)
            .map(|i| {
                serde_json::json!({
                    "index": i, "elapsed_ns": i * gap_ms * 1_000_000,
                    "duration_ns": gap_ms * 1_000_000, "task_entries": tasks,
                    "stack_entries": stacks,
                    "functions": [{"name": "vfs_write", "count": 10}]
                })
            })
            .collect();
        serde_json::json!({"intervals": intervals, "losses": {"stack_totals_full": 0}})
    }

    fn rss(first: u64, last: u64) -> String {
        (0..60)
            .map(|i| format!("{}.5 {}\n", 100 + i * 10, if i < 59 { first } else { last }))
            .collect()
    }

    #[test]
    fn a_healthy_soak_passes() {
        let figures = SoakFigures::measure(&recording(600, 1000, 3, 2000), &rss(9000, 9100), 1000)
            .expect("parses");
        assert_eq!(figures.intervals, 600);
        assert_eq!(figures.rss_first_kb, 9000);
        assert_eq!(figures.calls, 6000);
        figures.check().expect("healthy");
        assert!(figures.summary().contains("intervals 600"));
    }

    #[test]
    fn each_kind_of_rot_fails() {
        let check = |rec: Value, rss: String| {
            SoakFigures::measure(&rec, &rss, 100)
                .and_then(|f| f.check())
                .expect_err("must fail")
                .to_string()
        };
        assert!(check(recording(590, 1000, 3, 10), rss(9000, 9000)).contains("590 interval"));
        let mut late = recording(600, 1000, 3, 10);
        late["intervals"][300]["duration_ns"] = 2_000_000_000u64.into();
        assert!(check(late, rss(9000, 9000)).contains("missed"));
        assert!(check(recording(600, 1000, 3, 10), rss(9000, 12000)).contains("RSS grew"));
        // Growth that falls back before the last sample (hotprof freeing its maps at stop)
        // still counts.
        let mut rising = rss(9000, 9000);
        rising = rising.replacen("400.5 9000", "400.5 15000", 1);
        assert!(check(recording(600, 1000, 3, 10), rising).contains("RSS grew"));
        assert!(check(recording(600, 1000, 500, 10), rss(9000, 9000)).contains("per-task"));
        assert!(check(recording(600, 1000, 3, 5000), rss(9000, 9000)).contains("stack-totals"));
        assert!(check(recording(600, 1100, 3, 10), rss(9000, 9000)).contains("drifted"));
    }

    #[test]
    fn warm_up_samples_are_not_compared_and_bad_lines_are_refused() {
        let text = "10.0 5000\n20.0 8000\n45.0 9000\n700.0 9200\n";
        let figures = SoakFigures::measure(&recording(600, 1000, 1, 1), text, 0).expect("ok");
        assert_eq!((figures.rss_first_kb, figures.rss_last_kb), (9000, 9200));
        assert_eq!(figures.rss_max_kb, 9200);
        assert!(SoakFigures::measure(&recording(1, 1000, 1, 1), "x y\n", 0).is_err());
        assert!(SoakFigures::measure(&recording(1, 1000, 1, 1), "10.0 1\n", 0).is_err());
    }
}
