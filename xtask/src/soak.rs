//! The soak tests (`cargo xtask test --soak`, or `--only soak` / `--only soak_hour`): hotprof
//! running for ten minutes (6.12) or an hour (7.x-rt, PREEMPT_RT: the soak of record) with
//! `--interval 1s --stacks` under a continuous workload that keeps starting and ending
//! processes, checked for the ways a long-running profiler rots — memory growth, kernel map
//! entries that are never freed, interval reports that fall behind or go missing, and losses
//! nothing explains.
//!
//! Not part of the default `cargo xtask test` (~12 minutes and ~65 minutes of wall time);
//! opt-in only.
//!
//! What the guest runs:
//! - `hotprof --fn vfs_write --fn do_nanosleep --stacks --interval 1s --duration 600s --json`
//!   (3600s for the hour),
//!   system-wide (no `-- cmd`, so every process counts, including the short-lived ones);
//! - a long-lived `sleeper` (1 ms sleeps: do_nanosleep frames open at most snapshots);
//! - a loop of short-lived `tmpfs_write` + `sleep` processes, and one of `hammer` (2 threads,
//!   5 s) and `syscall_lat`: tasks come and go all the time, each with new stacks;
//! - every ~10 s, hotprof's VmRSS from /proc/PID/status into /out/rss.txt;
//! - every ~0.7 s, the latest `--- interval N` header in hotprof's output, between two reads
//!   of /proc/uptime, into /out/progress.txt: the guest's clock, which hotprof does not write.
//!
//! What is asserted, with the figures printed so they can be quoted:
//! - RSS flat: after a 30 s warm-up, no sample (the last included) is more than
//!   [`RSS_GROWTH_LIMIT_KB`] above the first (the interval records hotprof keeps for `--json` are ~100 bytes each: 600 of
//!   them are well under that);
//! - live tasks with a frame stack (the `LiveTasks` gauge: +1 when a task's task-local storage
//!   is created, -1 at its `sched_process_exit`) never above [`MAX_TASK_ENTRIES`]: only the
//!   guest's live processes hold one; a miscounted exit would climb with the ~2000 processes
//!   the loops start;
//! - stack-totals entries: keyed by (function, process, stack), so they grow with every new
//!   process by design, until `--stack-map-size`; asserted at most
//!   [`STACK_ENTRIES_PER_PROCESS`] per process started plus the long-lived ones, and none lost
//!   to a full map;
//! - no missed intervals: 600 reports (±1: the 600th slot races the deadline), the n-th at or
//!   after n s (one report per slot), their `duration_ns` laid end to end keeping step with the
//!   guest's clock (no time uncovered, none counted twice: see [`ClockCheck`]), the last
//!   before slot count + 1 (no slot skipped), the median time
//!   between reports 1 s ± 50 ms, and hotprof's own CPU per report not growing (last minute's
//!   median ≤ 1.5 × the first minute's after warm-up). How late
//!   reports came (gap quantiles, furthest behind its slot) is printed, not asserted: in a TCG
//!   guest on a shared host the guest itself stalls for seconds at times;
//! - no unexplained loss ([`SoakLosses`]): only the kernel's own counted misses and what
//!   they cause (a return without its entry, an entry without its return), calls in flight
//!   at attach and at the stop; every other loss kind zero.

use std::fs;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::arch::Arch;
use crate::scenarios::{Ctx, Scenario};

/// The ten-minute soak, as a scenario the test runner can schedule on 6.12.
pub const SOAK: Scenario = Scenario {
    name: "soak",
    arch: Arch::X86_64,
    kernels: &[crate::kernels::Kernel::V6_12],
    run: |ctx| soak(ctx, &TEN_MINUTES),
};

/// The soak of record: an hour on PREEMPT_RT, where hotprof's programs can be preempted
/// (and skipped by the kernel, counted in `kernel_missed`).
pub const RT_SOAK: Scenario = Scenario {
    name: "soak_hour",
    arch: Arch::X86_64,
    kernels: &[crate::kernels::Kernel::V7Rt],
    run: |ctx| soak(ctx, &ONE_HOUR),
};

/// How long one soak runs and what its stacks need.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SoakLength {
    /// How long hotprof runs (`--duration`), and so how many interval reports it owes.
    pub seconds: u64,
    /// `--stack-map-size`: the stack totals grow with every process started (1,682 entries
    /// for 1,284 processes in a ten-minute run), so an hour (~10,000) wants room above the
    /// default 16,384. The stack-trace map takes the same size, preallocated at ~1 KiB an
    /// entry: 32 MiB of the guest's memory.
    stack_map_size: u32,
}

const TEN_MINUTES: SoakLength = SoakLength {
    seconds: 600,
    stack_map_size: 16_384,
};

const ONE_HOUR: SoakLength = SoakLength {
    seconds: 3600,
    stack_map_size: 32_768,
};

impl SoakLength {
    /// Boot (up to two under TCG), attach, the run, writing the flamegraph data and the
    /// workloads' ends, a sixth more for a loaded host (an hour's run with builds beside it
    /// for its first half hour timed out at +300 s, its report written): the default 180 s
    /// guest timeout is for short scenarios.
    fn vm_timeout(&self) -> Duration {
        Duration::from_secs(self.seconds + 300 + self.seconds / 6)
    }
}
/// RSS samples taken before this much time has passed are warm-up (symbol tables, first
/// stacks, tokio's worker threads) and not compared.
const WARM_UP_SECONDS: f64 = 30.0;
/// Allowed growth of hotprof's RSS from the first post-warm-up sample to the last.
const RSS_GROWTH_LIMIT_KB: u64 = 1024;
/// Live tasks that have made a probed call (an entry is freed when its task exits): the
/// guest's few processes; a leak (entries of the ~1000 exited processes) would be hundreds.
const MAX_TASK_ENTRIES: u64 = 32;
/// Distinct (function, stack) pairs one short-lived process adds: vfs_write and
/// do_nanosleep reached through one or two syscall paths each.
const STACK_ENTRIES_PER_PROCESS: u64 = 6;
/// Stack-totals entries of the long-lived processes (sleeper, the shell loops, init).
const STACK_ENTRIES_BASE: u64 = 256;
/// A report this much after the previous one counts as late in the printed figures. Late
/// reports are normal in a busy TCG guest on a shared host (runs here saw gaps up to 3.9 s
/// with the next reports back-to-back to catch up: tokio's interval keeps the 1 s grid and
/// each report covers the time since the previous one), so lateness is printed, not asserted;
/// what is asserted is that no slot lacks a report and no time goes uncovered.
const LATE_GAP: Duration = Duration::from_millis(1100);
/// Reports are timestamped after reading the maps, so never before their slot; this allows
/// for the start instant being taken a little before the ticker's.
const SLOT_TOLERANCE: Duration = Duration::from_millis(50);
/// The median time between reports: 1 s within this.
const MEDIAN_GAP_TOLERANCE: Duration = Duration::from_millis(50);
/// /proc/uptime's resolution (it prints hundredths, truncated): the only allowance the guest
/// clock check makes besides each report's own time.
const GUEST_CLOCK_RESOLUTION: f64 = 0.01;
/// The guest looks every ~0.7 s (~850 looks, fewer when TCG stalls it): fewer than one look
/// per this many reports means the looking loop broke, and the clock check would prove little.
const MAX_REPORTS_PER_LOOK: u64 = 4;
/// hotprof's own CPU time per report must not grow: the median over the last minute at most
/// this many times the median over the first minute after warm-up. (Its absolute size is
/// emulation time under TCG — ~0.24 s median in the third run, mostly one map lookup per
/// histogram bucket — so only this ratio is asserted; the quantiles are printed.)
const MAX_REPORT_CPU_GROWTH: f64 = 1.5;

/// The guest script. Every workload loop iteration starts two processes and appends a line
/// to /tmp/started, and every look of the clock loop starts three (tail, awk, sleep) and
/// appends a line to /out/progress.txt, so the stack-totals bound can be computed from what
/// really ran.
///
/// The clock loop reads /proc/uptime before and after finding the latest report header in
/// the end of hotprof's output (a report is a few kB); 0.7 s apart plus the look's own time,
/// out of step with the 1 s reports, so its looks fall at every phase of them.
fn script(length: &SoakLength) -> String {
    let SoakLength {
        seconds,
        stack_map_size,
    } = length;
    format!(
        r#"
hotprof --fn vfs_write --fn do_nanosleep --stacks --stack-map-size {stack_map_size} \
  --interval 1s --duration {seconds}s --no-calibrate --json /out/soak.json > /tmp/soak.txt 2>&1 &
hp=$!
(while kill -0 $hp 2> /dev/null; do
  read before _ < /proc/uptime
  latest=$(tail -c 32768 /tmp/soak.txt | awk '/^--- interval /{{ n = $3 }} END {{ print n }}')
  read after _ < /proc/uptime
  echo "$before $after $latest" >> /out/progress.txt
  sleep 0.7
done) &
clock=$!
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
wait $clock
touch /tmp/stop
kill $long
wait $writers $hammers
echo "started=$(( $(wc -l < /tmp/started) * 2 + $(wc -l < /out/progress.txt) * 3 ))"
grep -E '^(--- interval|maps:)' /tmp/soak.txt > /out/maps.txt
tail -n 40 /tmp/soak.txt
"#
    )
}

fn soak(ctx: &mut Ctx, length: &SoakLength) -> Result<()> {
    let guest = ctx.run_with_timeout(&script(length), length.vm_timeout())?;
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
    let progress = fs::read_to_string(guest.outcome.out_dir.join("progress.txt"))
        .context("the guest left no /out/progress.txt")?;
    let figures = SoakFigures::measure(&recording, &rss, &progress, started)?;
    println!("{}", figures.summary(length));
    ensure!(
        maps.lines().filter(|l| l.starts_with("maps: ")).count() as u64 == figures.intervals,
        "the text report has not one `maps:` line per interval"
    );
    figures.check(length)
}

/// What the soak measured.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakFigures {
    pub intervals: u64,
    /// Time between consecutive reports: quantiles and extremes.
    pub gap: Quantiles,
    /// Reports more than [`LATE_GAP`] after the previous one.
    pub late_reports: usize,
    /// The furthest any report was behind its 1 s slot.
    pub max_lateness: Duration,
    /// Reports made before their slot (must be none: one report per slot).
    pub early_reports: usize,
    /// The intervals' `duration_ns`, laid end to end, against the guest's clock.
    pub clock: ClockCheck,
    pub last_elapsed: Duration,
    /// hotprof's own CPU time per report.
    pub report_cpu: Quantiles,
    /// Median CPU per report over reports 31–90 (first minute after warm-up) and over the
    /// last 60.
    pub report_cpu_first_minute: Duration,
    pub report_cpu_last_minute: Duration,
    /// Wall time per report (CPU plus waiting for one).
    pub report_wall: Quantiles,
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
    pub losses: SoakLosses,
}

/// The recording's `losses`: the kinds a soak can explain, and any other that is not zero.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SoakLosses {
    /// Calls the kernel skipped and counted (on PREEMPT_RT: a program preempted on a CPU
    /// makes the kernel skip it for every other task there).
    pub kernel_missed: u64,
    /// Returns whose entry was not seen: calls in flight at attach, or a skipped entry.
    pub unmatched_returns: u64,
    /// Entries whose return was never seen: a skipped return.
    pub orphaned_frames: u64,
    /// Calls open when their task exited: a skipped return (no soak workload exits inside
    /// `vfs_write` or `do_nanosleep` while hotprof runs).
    pub exited_in_call: u64,
    /// Calls running when hotprof stopped.
    pub open_at_stop: u64,
    /// Every other non-zero loss, `name=value`.
    pub unexplained: Vec<String>,
}

impl SoakLosses {
    fn of(losses: &Value) -> Result<Self> {
        let losses = losses
            .as_object()
            .context("the recording has no losses object")?;
        let mut found = Self::default();
        for (name, value) in losses {
            let value = value
                .as_u64()
                .with_context(|| format!("losses.{name} is not a count"))?;
            match name.as_str() {
                "kernel_missed" => found.kernel_missed = value,
                "unmatched_returns" => found.unmatched_returns = value,
                "orphaned_frames" => found.orphaned_frames = value,
                "exited_in_call" => found.exited_in_call = value,
                "open_at_stop" => found.open_at_stop = value,
                _ if value != 0 => found.unexplained.push(format!("{name}={value}")),
                _ => {}
            }
        }
        Ok(found)
    }

    /// Each explained kind within what explains it.
    fn check(&self) -> Result<()> {
        ensure!(
            self.unexplained.is_empty(),
            "unexplained losses: {}",
            self.unexplained.join(", ")
        );
        ensure!(
            self.orphaned_frames + self.exited_in_call <= self.kernel_missed,
            "{} returns never seen ({} orphaned, {} exited in a call) but the kernel missed only {}",
            self.orphaned_frames + self.exited_in_call,
            self.orphaned_frames,
            self.exited_in_call,
            self.kernel_missed
        );
        ensure!(
            self.unmatched_returns <= self.kernel_missed + MAX_TASK_ENTRIES,
            "{} returns without their entry: more than the calls in flight at attach (at most \
             {MAX_TASK_ENTRIES}) and the kernel's {} misses",
            self.unmatched_returns,
            self.kernel_missed
        );
        ensure!(
            self.open_at_stop <= MAX_TASK_ENTRIES,
            "{} calls open at the stop: more than the guest's tasks (at most {MAX_TASK_ENTRIES})",
            self.open_at_stop
        );
        Ok(())
    }
}

/// p50, p99 and max of some durations.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Quantiles {
    pub min: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Quantiles {
    fn of(mut values: Vec<Duration>) -> Self {
        values.sort();
        let at = |q: usize| {
            values
                .get((values.len() * q).div_ceil(100).saturating_sub(1))
                .copied()
                .unwrap_or_default()
        };
        Self {
            min: values.first().copied().unwrap_or_default(),
            p50: at(50),
            p99: at(99),
            max: values.last().copied().unwrap_or_default(),
        }
    }

    fn show(&self) -> String {
        format!(
            "min {:.3} s p50 {:.3} s p99 {:.3} s max {:.3} s",
            self.min.as_secs_f64(),
            self.p50.as_secs_f64(),
            self.p99.as_secs_f64(),
            self.max.as_secs_f64()
        )
    }
}

/// What the guest's clock says of the intervals' coverage.
///
/// hotprof computes each `duration_ns` as the difference of its own timestamps, so comparing
/// the two proves nothing; the guest script's looks at hotprof's output do not come from
/// hotprof. A look at uptime `before`..`after` that found report n as the latest says: report
/// n's header was in the file by `after`, report n + 1's not yet by `before`. With `c(n)` the
/// sum of the first n `duration_ns` (the time the reports claim to cover, from hotprof's
/// start at an unknown uptime S), report n's header is written at uptime S + c(n) + at most
/// `report_ns(n)` (the header goes out after the timestamp, before the report's end), so
/// every look bounds S: `before − c(n+1) − report_ns(n+1) < S ≤ after − c(n)`. All the looks
/// must agree on some S. Pairs that cannot are measured two ways, each allowed only
/// /proc/uptime's truncation ([`GUEST_CLOCK_RESOLUTION`]):
/// - `ahead`: an earlier look's lower bound above a later one's upper bound: the reports
///   between them claim more time than the guest clock saw pass (time counted twice);
/// - `behind`: a later look's lower bound above an earlier one's upper bound: the guest clock
///   saw more time pass than the reports between them cover (time no report covered).
///
/// Both are the largest such excess in seconds; negative is the margin left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockCheck {
    pub looks: usize,
    pub ahead: f64,
    pub behind: f64,
}

impl ClockCheck {
    /// `duration_ns` and `report_ns` of each report in order; `progress`: the guest's lines
    /// `BEFORE AFTER LATEST` (`LATEST` missing before the first report).
    fn measure(durations_ns: &[u64], report_ns: &[u64], progress: &str) -> Result<Self> {
        let mut covered_until = vec![0.0];
        for &ns in durations_ns {
            covered_until.push(covered_until[covered_until.len() - 1] + ns as f64 / 1e9);
        }
        let mut ahead = f64::NEG_INFINITY;
        let mut behind = f64::NEG_INFINITY;
        let mut highest_lower = f64::NEG_INFINITY;
        let mut lowest_upper = f64::INFINITY;
        let mut looks = 0;
        for line in progress.lines().filter(|line| !line.trim().is_empty()) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [before, after, latest] = fields[..] else {
                // `BEFORE AFTER`: no report header in sight yet, which proves little.
                if fields.len() == 2 {
                    continue;
                }
                bail!("bad progress line {line:?}");
            };
            let (Ok(before), Ok(after), Ok(latest)) = (
                before.parse::<f64>(),
                after.parse::<f64>(),
                latest.parse::<usize>(),
            ) else {
                bail!("bad progress line {line:?}");
            };
            ensure!(
                latest < covered_until.len(),
                "the guest saw report {latest}, the recording has {}",
                durations_ns.len()
            );
            looks += 1;
            let upper = after - covered_until[latest];
            // After the last report nothing bounds S from below.
            let lower = (latest < durations_ns.len())
                .then(|| before - covered_until[latest + 1] - report_ns[latest] as f64 / 1e9);
            if let Some(lower) = lower {
                behind = behind.max(lower - lowest_upper);
                highest_lower = highest_lower.max(lower);
            }
            ahead = ahead.max(highest_lower - upper);
            lowest_upper = lowest_upper.min(upper);
        }
        Ok(Self {
            looks,
            ahead,
            behind,
        })
    }
}

impl SoakFigures {
    /// `recording`: hotprof's `--json`; `rss`: lines `UPTIME_S RSS_KB`; `progress`: the
    /// guest's looks at hotprof's output (see [`ClockCheck`]); `started`: processes the
    /// workload loops started.
    pub fn measure(recording: &Value, rss: &str, progress: &str, started: u64) -> Result<Self> {
        let intervals = recording["intervals"]
            .as_array()
            .context("the recording has no intervals array")?;
        let nanos = |value: &Value, key: &str| -> Result<u64> {
            value[key]
                .as_u64()
                .with_context(|| format!("an interval has no {key}"))
        };
        let mut gaps = Vec::new();
        let mut report_cpu = Vec::new();
        let mut report_wall = Vec::new();
        let mut durations = Vec::new();
        let (mut late_reports, mut early_reports) = (0, 0);
        let mut max_lateness = Duration::ZERO;
        let mut previous_end = 0;
        let mut max_task_entries = 0;
        let mut max_stack_entries = 0;
        let mut last_stack_entries = 0;
        let mut calls = 0;
        for (slot, interval) in (1u64..).zip(intervals) {
            let elapsed = nanos(interval, "elapsed_ns")?;
            durations.push(nanos(interval, "duration_ns")?);
            let gap = Duration::from_nanos(elapsed.saturating_sub(previous_end));
            previous_end = elapsed;
            gaps.push(gap);
            late_reports += usize::from(gap > LATE_GAP);
            let due = Duration::from_secs(slot);
            let at = Duration::from_nanos(elapsed);
            if at + SLOT_TOLERANCE < due {
                early_reports += 1;
            }
            max_lateness = max_lateness.max(at.saturating_sub(due));
            report_cpu.push(Duration::from_nanos(nanos(interval, "report_cpu_ns")?));
            report_wall.push(Duration::from_nanos(nanos(interval, "report_ns")?));
            max_task_entries = max_task_entries.max(nanos(interval, "task_entries")?);
            last_stack_entries = nanos(interval, "stack_entries")?;
            max_stack_entries = max_stack_entries.max(last_stack_entries);
            for function in interval["functions"].as_array().into_iter().flatten() {
                calls += function["count"].as_u64().unwrap_or(0);
            }
        }
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
        let report_ns: Vec<u64> = report_wall.iter().map(|d| d.as_nanos() as u64).collect();
        let clock = ClockCheck::measure(&durations, &report_ns, progress)?;
        Ok(Self {
            intervals: intervals.len() as u64,
            gap: Quantiles::of(gaps),
            late_reports,
            max_lateness,
            early_reports,
            clock,
            last_elapsed: Duration::from_nanos(previous_end),
            report_cpu_first_minute: Quantiles::of(
                report_cpu.iter().skip(30).take(60).copied().collect(),
            )
            .p50,
            report_cpu_last_minute: Quantiles::of(
                report_cpu
                    .iter()
                    .skip(report_cpu.len().saturating_sub(60))
                    .copied()
                    .collect(),
            )
            .p50,
            report_cpu: Quantiles::of(report_cpu),
            report_wall: Quantiles::of(report_wall),
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
            losses: SoakLosses::of(&recording["losses"])?,
        })
    }

    /// The figures, one line each, for the test output.
    pub fn summary(&self, length: &SoakLength) -> String {
        let SoakLosses {
            kernel_missed,
            unmatched_returns,
            orphaned_frames,
            exited_in_call,
            open_at_stop,
            unexplained,
        } = &self.losses;
        format!(
            "  intervals {} (want {} ±1), last at {:.2} s; none early: {}\n  \
             durations laid end to end vs the guest clock ({} looks): at most {:+.0} ms ahead, \
             {:+.0} ms behind (limit +{:.0} ms each; negative = margin)\n  \
             gap between reports {}; {} later than {:.1} s; furthest behind its slot {:.2} s\n  \
             hotprof's own CPU per report {}; median first minute after warm-up {:.3} s, last minute {:.3} s \
             (limit ×{MAX_REPORT_CPU_GROWTH}); wall per report {}\n  \
             RSS ({} samples): first after warm-up {} kB, last {} kB ({:+} kB), max after warm-up {} kB \
             (limit first +{RSS_GROWTH_LIMIT_KB}), max overall {} kB\n  \
             task entries max {} (limit {MAX_TASK_ENTRIES})\n  \
             stack-totals entries max {}, last {} for {} processes started (limit {}), calls missing from stack totals {}\n  \
             calls timed in intervals {}\n  \
             losses: kernel missed {kernel_missed}, returns without entry {unmatched_returns}, \
             orphaned {orphaned_frames}, exited in a call {exited_in_call}, open at stop \
             {open_at_stop}; unexplained: {}",
            self.intervals,
            length.seconds,
            self.last_elapsed.as_secs_f64(),
            self.early_reports,
            self.clock.looks,
            self.clock.ahead * 1e3,
            self.clock.behind * 1e3,
            GUEST_CLOCK_RESOLUTION * 1e3,
            self.gap.show(),
            self.late_reports,
            LATE_GAP.as_secs_f64(),
            self.max_lateness.as_secs_f64(),
            self.report_cpu.show(),
            self.report_cpu_first_minute.as_secs_f64(),
            self.report_cpu_last_minute.as_secs_f64(),
            self.report_wall.show(),
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
            if unexplained.is_empty() {
                "none".to_owned()
            } else {
                unexplained.join(", ")
            },
        )
    }

    fn stack_entry_limit(&self) -> u64 {
        STACK_ENTRIES_BASE + STACK_ENTRIES_PER_PROCESS * self.processes_started
    }

    /// Every soak assertion; the first failure is returned.
    pub fn check(&self, length: &SoakLength) -> Result<()> {
        let seconds = length.seconds;
        ensure!(
            self.intervals.abs_diff(seconds) <= 1,
            "{} interval reports in {seconds} s, want {seconds} ±1",
            self.intervals
        );
        ensure!(
            self.clock.looks as u64 * MAX_REPORTS_PER_LOOK >= self.intervals,
            "the guest looked at hotprof's progress only {} times in {} reports",
            self.clock.looks,
            self.intervals
        );
        ensure!(
            self.clock.behind <= GUEST_CLOCK_RESOLUTION,
            "the guest clock saw {:.3} s pass that no report covered",
            self.clock.behind
        );
        ensure!(
            self.clock.ahead <= GUEST_CLOCK_RESOLUTION,
            "the reports covered {:.3} s more than the guest clock saw pass",
            self.clock.ahead
        );
        ensure!(
            self.early_reports == 0,
            "{} reports came before their 1 s slot: not one report per slot",
            self.early_reports
        );
        ensure!(
            self.last_elapsed < Duration::from_secs(self.intervals + 1),
            "the last of {} reports came at {:.2} s: a slot had no report (or the reports drifted)",
            self.intervals,
            self.last_elapsed.as_secs_f64()
        );
        ensure!(
            self.gap.p50.abs_diff(Duration::from_secs(1)) <= MEDIAN_GAP_TOLERANCE,
            "the median time between reports is {:.3} s, want 1 s ±{} ms",
            self.gap.p50.as_secs_f64(),
            MEDIAN_GAP_TOLERANCE.as_millis()
        );
        ensure!(
            self.report_cpu_last_minute.as_secs_f64()
                <= self.report_cpu_first_minute.as_secs_f64() * MAX_REPORT_CPU_GROWTH,
            "hotprof's CPU per report grew from {:.3} s (median, first minute) to {:.3} s (last minute)",
            self.report_cpu_first_minute.as_secs_f64(),
            self.report_cpu_last_minute.as_secs_f64()
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
        self.losses.check()
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
                    "stack_entries": stacks, "report_ns": 30_000_000u64,
                    "report_cpu_ns": 20_000_000u64,
                    "functions": [{"name": "vfs_write", "count": 10}]
                })
            })
            .collect();
        serde_json::json!({"intervals": intervals, "losses": {"stack_totals_full": 0}})
    }

    /// What the guest's clock loop writes for `recording` if its reports really came at their
    /// `elapsed_ns` (each header 5 ms after it) from an uptime of 12.34 s: a look every 0.73 s
    /// (the script sleeps 0.7 s, plus the look's own time), 20 ms each, uptime truncated to
    /// hundredths, `BEFORE AFTER` alone before the first header.
    fn looks(recording: &Value) -> String {
        let start = 12.34;
        let printed: Vec<f64> = recording["intervals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| start + i["elapsed_ns"].as_u64().unwrap() as f64 / 1e9 + 0.005)
            .collect();
        let uptime = |at: f64| (at * 100.0).floor() / 100.0;
        let mut out = String::new();
        let mut at = start + 0.2;
        while at < printed.last().unwrap_or(&start) + 1.0 {
            let (before, after) = (uptime(at), uptime(at + 0.02));
            match printed.iter().filter(|&&p| p <= at + 0.01).count() {
                0 => out += &format!("{before:.2} {after:.2} \n"),
                latest => out += &format!("{before:.2} {after:.2} {latest}\n"),
            }
            at += 0.73;
        }
        out
    }

    fn rss(first: u64, last: u64) -> String {
        (0..60)
            .map(|i| format!("{}.5 {}\n", 100 + i * 10, if i < 59 { first } else { last }))
            .collect()
    }

    #[test]
    fn a_healthy_soak_passes() {
        let healthy = recording(600, 1000, 3, 2000);
        let figures = SoakFigures::measure(&healthy, &rss(9000, 9100), &looks(&healthy), 1000)
            .expect("parses");
        assert_eq!(figures.intervals, 600);
        assert_eq!(figures.rss_first_kb, 9000);
        assert_eq!(figures.calls, 6000);
        figures.check(&TEN_MINUTES).expect("healthy");
        assert!(figures.summary(&TEN_MINUTES).contains("intervals 600"));
        assert!(figures.clock.looks > 800, "{:?}", figures.clock);
        // The margins are about the looks' 20 ms and the 25 ms between a header and its
        // report's end: the check is tight, not vacuous.
        assert!(
            figures.clock.ahead < 0.0 && figures.clock.ahead > -0.1,
            "{:?}",
            figures.clock
        );
        assert!(figures.clock.behind < 0.0 && figures.clock.behind > -0.1);
    }

    #[test]
    fn each_kind_of_rot_fails() {
        let check = |rec: Value, rss: String| {
            SoakFigures::measure(&rec, &rss, &looks(&rec), 100)
                .and_then(|f| f.check(&TEN_MINUTES))
                .expect_err("must fail")
                .to_string()
        };
        assert!(check(recording(590, 1000, 3, 10), rss(9000, 9000)).contains("590 interval"));
        // Losses: any kind the soak cannot explain, and explained kinds beyond their cause.
        let with_losses = |losses: Value| {
            let mut rec = recording(600, 1000, 3, 10);
            rec["losses"] = losses;
            rec
        };
        let lost = |losses: Value| check(with_losses(losses), rss(9000, 9000));
        assert!(lost(serde_json::json!({"depth_exceeded": 2})).contains("depth_exceeded=2"));
        assert!(
            lost(serde_json::json!({"orphaned_frames": 3, "kernel_missed": 2}))
                .contains("returns never seen")
        );
        assert!(lost(serde_json::json!({"unmatched_returns": 33})).contains("without their entry"));
        assert!(lost(serde_json::json!({"open_at_stop": 40})).contains("open at the stop"));
        let explained = with_losses(serde_json::json!({
            "kernel_missed": 300, "orphaned_frames": 100, "exited_in_call": 1,
            "unmatched_returns": 150, "open_at_stop": 4, "slot_missing": 0
        }));
        SoakFigures::measure(&explained, &rss(9000, 9000), &looks(&explained), 100)
            .and_then(|f| f.check(&TEN_MINUTES))
            .expect("every loss explained by the kernel's misses");
        // One slot without a report: the later reports all carry the index before theirs.
        let mut skipped = recording(601, 1000, 3, 10);
        let list = skipped["intervals"].as_array_mut().unwrap();
        list.remove(300);
        for (index, interval) in list.iter_mut().enumerate() {
            interval["index"] = (index as u64 + 1).into();
        }
        list[300]["duration_ns"] = 2_000_000_000u64.into();
        assert!(check(skipped, rss(9000, 9000)).contains("a slot had no report"));
        // Time between two reports that neither covers: a second by the guest's clock, half of
        // it claimed. Its timestamps (elapsed_ns) are left alone: the clock check does not
        // read them, so it catches what a timestamp-difference check could not.
        let mut hole = recording(600, 1000, 3, 10);
        hole["intervals"][10]["duration_ns"] = 500_000_000u64.into();
        assert!(check(hole, rss(9000, 9000)).contains("that no report covered"));
        // A report claiming time that had not passed (1.5 s of a 1 s interval).
        let mut twice = recording(600, 1000, 3, 10);
        twice["intervals"][300]["duration_ns"] = 1_500_000_000u64.into();
        assert!(check(twice, rss(9000, 9000)).contains("more than the guest clock"));
        // Smaller than what one look can resolve is not flagged (20 ms looks, 0.7 s apart).
        let mut within = recording(600, 1000, 3, 10);
        within["intervals"][300]["duration_ns"] = 999_000_000u64.into();
        let figures =
            SoakFigures::measure(&within, &rss(9000, 9000), &looks(&within), 100).expect("parses");
        figures
            .check(&TEN_MINUTES)
            .expect("1 ms is below the looks' resolution");
        // Reports ahead of the grid.
        assert!(check(recording(600, 990, 3, 10), rss(9000, 9000)).contains("before their"));
        let mut slower = recording(600, 1000, 3, 10);
        for interval in slower["intervals"].as_array_mut().unwrap()[540..].iter_mut() {
            interval["report_cpu_ns"] = 40_000_000u64.into();
        }
        assert!(check(slower, rss(9000, 9000)).contains("CPU per report grew"));
        assert!(check(recording(600, 1000, 3, 10), rss(9000, 12000)).contains("RSS grew"));
        // Growth that falls back before the last sample (hotprof freeing its maps at stop)
        // still counts.
        let mut rising = rss(9000, 9000);
        rising = rising.replacen("400.5 9000", "400.5 15000", 1);
        assert!(check(recording(600, 1000, 3, 10), rising).contains("RSS grew"));
        assert!(check(recording(600, 1000, 500, 10), rss(9000, 9000)).contains("per-task"));
        assert!(check(recording(600, 1000, 3, 5000), rss(9000, 9000)).contains("stack-totals"));
        assert!(check(recording(600, 1100, 3, 10), rss(9000, 9000)).contains("drifted"));
        // Late reports that catch up are fine: a 3 s stall, then two reports back-to-back.
        let mut stalled = recording(600, 1000, 3, 10);
        stalled["intervals"][99]["elapsed_ns"] = 102_000_000_000u64.into();
        stalled["intervals"][99]["duration_ns"] = 3_000_000_000u64.into();
        stalled["intervals"][100]["elapsed_ns"] = 102_010_000_000u64.into();
        stalled["intervals"][100]["duration_ns"] = 10_000_000u64.into();
        stalled["intervals"][101]["elapsed_ns"] = 102_020_000_000u64.into();
        stalled["intervals"][101]["duration_ns"] = 10_000_000u64.into();
        stalled["intervals"][102]["duration_ns"] = 980_000_000u64.into();
        let figures = SoakFigures::measure(&stalled, &rss(9000, 9000), &looks(&stalled), 100)
            .expect("parses");
        figures.check(&TEN_MINUTES).expect("late but caught up");
        assert_eq!(figures.late_reports, 1);
        assert_eq!(figures.max_lateness, Duration::from_secs(2));
    }

    #[test]
    fn warm_up_samples_are_not_compared_and_bad_lines_are_refused() {
        let text = "10.0 5000\n20.0 8000\n45.0 9000\n700.0 9200\n";
        let long = recording(600, 1000, 1, 1);
        let figures = SoakFigures::measure(&long, text, &looks(&long), 0).expect("ok");
        assert_eq!((figures.rss_first_kb, figures.rss_last_kb), (9000, 9200));
        assert_eq!(figures.rss_max_kb, 9200);
        let short = recording(1, 1000, 1, 1);
        assert!(SoakFigures::measure(&short, "x y\n", "", 0).is_err());
        assert!(SoakFigures::measure(&short, "10.0 1\n", "", 0).is_err());
        let rss = "10.0 1\n50.0 1\n60.0 1\n";
        assert!(SoakFigures::measure(&short, rss, "1.0 x 1\n", 0).is_err());
        assert!(SoakFigures::measure(&short, rss, "1.0 1.02 1 1\n", 0).is_err());
        let before_any_report = SoakFigures::measure(&short, rss, "1.0 1.02\n", 0).unwrap();
        assert_eq!(before_any_report.clock.looks, 0);
        let beyond = SoakFigures::measure(&short, rss, "1.0 1.02 2\n", 0).unwrap_err();
        assert!(beyond.to_string().contains("saw report 2"), "{beyond}");
    }

    #[test]
    fn the_guest_clock_check_needs_the_guest_to_have_looked() {
        let run = recording(600, 1000, 3, 10);
        let sparse: String = looks(&run)
            .lines()
            .step_by(8)
            .map(|l| l.to_owned() + "\n")
            .collect();
        let figures = SoakFigures::measure(&run, &rss(9000, 9000), &sparse, 100).expect("parses");
        let error = figures
            .check(&TEN_MINUTES)
            .expect_err("too few looks")
            .to_string();
        assert!(
            error.contains("looked at hotprof's progress only"),
            "{error}"
        );
        let figures = SoakFigures::measure(&run, &rss(9000, 9000), "", 100).expect("parses");
        assert!(figures.check(&TEN_MINUTES).is_err());
    }
}
