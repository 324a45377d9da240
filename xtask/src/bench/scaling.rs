//! Scaling: getpid's per-call cost with 1, 10, 100 and 1000 kprobe'd functions attached
//! (getpid's `__do_sys_getpid` plus rarely-run functions), and how long attaching and
//! detaching them takes, measured from outside hotprof, in the 6.12 and 7.x guests: through
//! the kprobe.multi link (hotprof's default where the kernel has it), and at 1000 functions
//! also through a perf kprobe per function (`--no-kprobe-multi`, the path before), for the
//! comparison, and on 7.x through tracing-multi links (`--mode fentry --tracing-multi`).
//! Goals: 1000 functions attach in < 3 s and detach in < 3 s through the kprobe.multi link
//! (issue 16), in < 1 s each through tracing-multi links (issue 32).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{GUEST_UPTIME, Spread, Tools, syscall_lat_avg_ns, vm_run_with};
use crate::kernels::Kernel;

/// Functions attached per step; the first is always `__do_sys_getpid`.
const COUNTS: [usize; 4] = [1, 10, 100, 1000];
const CALLS: u64 = 100_000;
/// Baseline runs (no probe) interleaved with the steps.
const BASELINES: usize = 3;
/// The goals for attaching, and for detaching, 1000 functions through the kprobe.multi link
/// and through tracing-multi links.
const GOAL_SECONDS: f64 = 3.0;
const TRACING_MULTI_GOAL_SECONDS: f64 = 1.0;
/// The kernels the goal is checked on.
const KERNELS: [Kernel; 2] = [Kernel::V6_12, Kernel::V7];

/// Cold code in a qemu guest with no devices: ACPI, PCI, ATA/SCSI, USB, input, thermal, DRM.
/// Names must be traceable (in ftrace's list, so the kprobe.multi link takes them), unique (no
/// same-named statics), not GCC clones, and not on the kprobe blacklist; for tracing-multi
/// links also ones fentry takes (`/tmp/cold-btf`: hotprof is asked, and a function it
/// refuses, not in the BTF or variadic, is dropped for the next candidate, at most 30 times).
const PICK_COLD_FUNCTIONS: &str = r#"
T=/sys/kernel/tracing
awk '{print $1}' $T/available_filter_functions | grep -v '\.' | sort | uniq -u > /tmp/traceable
awk '{print $2}' /sys/kernel/debug/kprobes/blacklist | sort -u > /tmp/blacklist
grep -E '^(acpi|pci|ata|scsi|usb|thermal|cpufreq|dmi|rtc|input|hid|serio|i8042|drm|efi|nvme|virtio_gpu)_' /tmp/traceable \
  | grep -vxF -f /tmp/blacklist > /tmp/cold-all
head -n 999 /tmp/cold-all > /tmp/cold
wc -l < /tmp/cold > /out/cold-count
cp /tmp/cold-all /tmp/fentry-all
if [ -f /sys/kernel/btf/vmlinux ] && grep -q BPF_TRACE_FENTRY_MULTI /sys/kernel/btf/vmlinux; then
  for i in $(seq 1 30); do
    bad=$(hotprof --mode fentry --tracing-multi --no-calibrate --max-functions 1000 \
            $(head -n 999 /tmp/fentry-all | sed 's/^/--fn /') --duration 100ms 2>&1 \
          | sed -n 's/.*fentry cannot attach to \([^:]*\): .*/\1/p')
    [ -z "$bad" ] && break
    grep -vxF "$bad" /tmp/fentry-all > /tmp/fentry-next; mv /tmp/fentry-next /tmp/fentry-all
  done
fi
head -n 999 /tmp/fentry-all > /tmp/cold-btf
"#;

/// How a step attaches its functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attach {
    /// kprobe mode's kprobe.multi link (its default where the kernel has one).
    KprobeMulti,
    /// `--no-kprobe-multi`: a perf kprobe per function.
    PerfKprobes,
    /// fentry mode's tracing-multi links (7.x, x86-64).
    TracingMulti,
}

impl Attach {
    fn name(self) -> &'static str {
        match self {
            Attach::KprobeMulti => "kprobe.multi",
            Attach::PerfKprobes => "perf kprobes",
            Attach::TracingMulti => "tracing-multi",
        }
    }

    fn args(self) -> &'static str {
        match self {
            Attach::KprobeMulti => "--mode kprobe",
            Attach::PerfKprobes => "--mode kprobe --no-kprobe-multi",
            Attach::TracingMulti => "--mode fentry --tracing-multi",
        }
    }

    /// The goal for 1000 functions' attach and detach, each, where the path has one.
    fn goal_seconds(self) -> Option<f64> {
        match self {
            Attach::KprobeMulti => Some(GOAL_SECONDS),
            Attach::PerfKprobes => None,
            Attach::TracingMulti => Some(TRACING_MULTI_GOAL_SECONDS),
        }
    }
}

/// One measured step: how many functions, attached how.
#[derive(Clone, Copy)]
struct Step {
    count: usize,
    path: Attach,
}

impl Step {
    fn tag(self) -> String {
        let path = match self.path {
            Attach::KprobeMulti => "m",
            Attach::PerfKprobes => "p",
            Attach::TracingMulti => "t",
        };
        format!("{path}{}", self.count)
    }
}

/// The steps of one guest: every count through the link, then 1000 as perf kprobes, and on
/// a kernel with tracing-multi links 1000 through them.
fn steps(kernel: Kernel) -> Vec<Step> {
    let mut steps: Vec<Step> = COUNTS
        .iter()
        .map(|&count| Step {
            count,
            path: Attach::KprobeMulti,
        })
        .collect();
    steps.push(Step {
        count: 1000,
        path: Attach::PerfKprobes,
    });
    if kernel == Kernel::V7 {
        steps.push(Step {
            count: 1000,
            path: Attach::TracingMulti,
        });
    }
    steps
}

/// hotprof's syscalls traced by the guest's ftrace (its own clock, `/proc/uptime`'s): program
/// loads and link creations (`bpf` commands 0 map create, 5 prog load, 28 link create, and the
/// calls returning a file descriptor), perf_event_open, and close. Map reads are left out:
/// reading 1000 functions' histograms is millions of lookups.
const TRACE_SYSCALLS: &str = r#"
T=/sys/kernel/tracing
echo 65536 > $T/buffer_size_kb
for e in sys_enter_bpf sys_exit_bpf sys_enter_perf_event_open sys_enter_close sys_exit_close; do
  echo 1 > $T/events/syscalls/$e/enable
done
echo 'comm == "hotprof" && (cmd == 0 || cmd == 5 || cmd == 28)' > $T/events/syscalls/sys_enter_bpf/filter
echo 'comm == "hotprof" && ret > 2' > $T/events/syscalls/sys_exit_bpf/filter
for e in sys_enter_perf_event_open sys_enter_close sys_exit_close; do echo 'comm == "hotprof"' > $T/events/syscalls/$e/filter; done
"#;

/// The guest script: the baselines, then each step. A step's times, from the guest's
/// `/proc/uptime`: hotprof started, the workload started (attach done), SIGINT sent, the
/// report's last line written, hotprof exited; and its syscalls ([`TRACE_SYSCALLS`]).
fn script(kernel: Kernel) -> String {
    let mut script = String::from("set +e\n");
    script.push_str(PICK_COLD_FUNCTIONS);
    script.push_str(TRACE_SYSCALLS);
    // Seconds since boot; spelled out because the workload's own `sh -c` runs it too.
    let up = GUEST_UPTIME;
    for (index, step) in steps(kernel).into_iter().enumerate() {
        if index < BASELINES {
            let _ = writeln!(script, "syscall_lat {CALLS} > /out/base-{index}.txt 2>&1");
        }
        let tag = step.tag();
        let args = step.path.args();
        let cold = match step.path {
            Attach::TracingMulti => "/tmp/cold-btf",
            Attach::KprobeMulti | Attach::PerfKprobes => "/tmp/cold",
        };
        let _ = writeln!(
            script,
            r#"
fns="--fn __do_sys_getpid $(head -n {others} {cold} | sed 's/^/--fn /')"
t0=$({up})
hotprof {args} --no-calibrate --max-functions 1000 $fns -- sh -c "{up} > /out/{tag}-started; syscall_lat {CALLS} > /out/{tag}-lat.txt 2>&1; {up} > /out/{tag}-done; exec sleep 600" > /out/{tag}-hotprof.txt 2>&1 &
hp=$!
waited=0
while [ ! -s /out/{tag}-done ] && kill -0 $hp 2>/dev/null && [ $waited -lt 3000 ]; do sleep 0.1; waited=$((waited + 1)); done
t_int=$({up})
echo hotprof_sigint > $T/trace_marker
kill -INT $hp
while kill -0 $hp 2>/dev/null && ! grep -q '^losses:' /out/{tag}-hotprof.txt; do sleep 0.02; done
t_report=$({up})
wait $hp; code=$?
echo "$t0 $t_int $t_report $({up}) $code" > /out/{tag}-times
cat $T/trace > /out/{tag}-trace.txt; echo > $T/trace
"#,
            others = step.count - 1,
        );
    }
    script
}

pub fn run(tools: &Tools) -> Result<String> {
    let mut out = String::new();
    for kernel in KERNELS {
        let script = script(kernel);
        let name = format!("scaling-{}", kernel.name());
        let outcome = vm_run_with(tools, &name, &script, Duration::from_secs(1200), |run| {
            run.kernel = kernel;
        })?;
        out.push_str(&section(kernel, &outcome.out_dir)?);
    }
    Ok(out)
}

/// One guest's table and verdicts.
fn section(kernel: Kernel, dir: &Path) -> Result<String> {
    let cold = read(dir, "cold-count")?
        .trim()
        .parse::<usize>()
        .unwrap_or(0);
    let baseline: Vec<f64> = (0..BASELINES)
        .filter_map(|i| read(dir, &format!("base-{i}.txt")).ok())
        .filter_map(|text| syscall_lat_avg_ns(&text))
        .collect();
    let Some(base) = Spread::of(&baseline) else {
        bail!("no baseline syscall_lat figure in {}", dir.display());
    };
    let mut out = format!(
        "## Scaling: kprobe'd functions attached ({} guest, TCG: ratios only)\n\n\
         `hotprof --mode kprobe --fn __do_sys_getpid --fn …` with rarely-run functions \
         ({cold} candidates: ACPI, PCI, input, … in a guest without those devices) while \
         `syscall_lat {CALLS}` runs; through hotprof's kprobe.multi link, and with \
         `--no-kprobe-multi` (a perf kprobe per function, the path before); on 7.x also \
         `--mode fentry --tracing-multi` (two tracing-multi links). From outside: \
         start = starting hotprof → the workload running; stop = SIGINT → hotprof's exit \
         (reading the maps, detaching, unloading, the report). From hotprof's syscalls as the \
         guest's ftrace saw them: attach = its first program load after the maps → the end of \
         its last link creation (the tracking hooks' included); detach = its first close after \
         SIGINT (marked in the trace) → the end of its last close (links, programs, maps). \
         No-probe baseline: {} ns/call.\n\n\
         | functions | path | attached | ns/call | overhead ns/call | start s | stop s | attach s | detach s |\n\
         |---|---|---|---|---|---|---|---|---|\n",
        kernel.name(),
        base.show()
    );
    let mut at_1000: Vec<(Attach, Option<(f64, f64)>)> = Vec::new();
    for step in steps(kernel) {
        let tag = step.tag();
        let hotprof = read(dir, &format!("{tag}-hotprof.txt")).unwrap_or_default();
        let attached = attached_line(&hotprof);
        let lat = read(dir, &format!("{tag}-lat.txt")).unwrap_or_default();
        let times = parse_times(&read(dir, &format!("{tag}-times")).unwrap_or_default());
        let started = read(dir, &format!("{tag}-started"))
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok());
        let Some(ns) = syscall_lat_avg_ns(&lat) else {
            let why = hotprof
                .lines()
                .find(|l| l.contains("error") || l.starts_with("hotprof:"));
            let _ = writeln!(
                out,
                "| {} | {} | {} | failed: {} | | | | | |",
                step.count,
                step.path.name(),
                attached.as_deref().unwrap_or("—"),
                why.unwrap_or("no output")
            );
            if step.count == 1000 {
                at_1000.push((step.path, None));
            }
            continue;
        };
        let start = times.zip(started).map(|(t, started)| started - t.started);
        let stop = times.map(|t| t.exited - t.interrupted);
        let trace = read(dir, &format!("{tag}-trace.txt")).unwrap_or_default();
        let events = parse_trace(&trace);
        let attach = attach_window(&events);
        let detach = sigint_at(&trace).and_then(|at| detach_window(&events, at));
        if step.count == 1000 {
            at_1000.push((step.path, attach.zip(detach)));
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {ns:.1} | {:.1} | {} | {} | {} | {} |",
            step.count,
            step.path.name(),
            attached.as_deref().unwrap_or("—"),
            ns - base.median,
            seconds(start),
            seconds(stop),
            seconds(attach),
            seconds(detach),
        );
    }
    out.push_str(
        "\nTimes come from the guest's clock under TCG (/proc/uptime: 10 ms; ftrace: µs).\n\n",
    );
    for (path, figures) in at_1000 {
        let name = path.name();
        let line = match (figures, path.goal_seconds()) {
            (Some((attach, detach)), Some(goal)) => format!(
                "- 1000 functions, {name}: attach {attach:.2} s, detach {detach:.2} s — goal < \
                 {goal} s each: {}",
                verdict(attach, detach, goal)
            ),
            (Some((attach, detach)), None) => {
                format!("- 1000 functions, {name}: attach {attach:.2} s, detach {detach:.2} s")
            }
            (None, Some(goal)) => {
                format!("- 1000 functions, {name}: no figure — goal < {goal} s each: NOT MET")
            }
            (None, None) => format!("- 1000 functions, {name}: no figure"),
        };
        let _ = writeln!(out, "{line}");
    }
    out.push('\n');
    Ok(out)
}

/// One of hotprof's syscalls in the guest's ftrace: when, and what (`bpf(cmd: 1c, …`,
/// `bpf -> 0x1d`, `close(fd: 7)`, …).
#[derive(Debug, PartialEq)]
struct Event<'a> {
    at: f64,
    what: &'a str,
}

/// The events of an ftrace `trace` file (`  hotprof-147 [000] ..... 10.278792: sys_bpf(…`).
fn parse_trace(trace: &str) -> Vec<Event<'_>> {
    trace
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (head, what) = line.split_once(": sys_")?;
            let at = head.split_whitespace().last()?.parse().ok()?;
            Some(Event { at, what })
        })
        .collect()
}

/// `bpf` commands: map create, program load, link create.
const MAP_CREATE: u32 = 0;
const PROG_LOAD: u32 = 5;
const LINK_CREATE: u32 = 28;

/// The command of a `bpf(cmd: 1c, …` event (hex, `0x1c` on newer kernels).
fn bpf_cmd(event: &Event) -> Option<u32> {
    let cmd = event.what.strip_prefix("bpf(cmd: ")?.split(',').next()?;
    u32::from_str_radix(cmd.trim_start_matches("0x"), 16).ok()
}

/// From the first program load after the last map creation to the return of the last link
/// creation.
fn attach_window(events: &[Event]) -> Option<f64> {
    let maps_done = events
        .iter()
        .rposition(|e| bpf_cmd(e) == Some(MAP_CREATE))?;
    let first = events[maps_done..]
        .iter()
        .find(|e| bpf_cmd(e) == Some(PROG_LOAD))?;
    let last_link = events
        .iter()
        .rposition(|e| bpf_cmd(e) == Some(LINK_CREATE))?;
    let end = events[last_link..]
        .iter()
        .find(|e| e.what.starts_with("bpf -> "))?;
    Some(end.at - first.at)
}

/// When the script sent SIGINT, on the trace's clock (its `trace_marker` line; the trace's
/// clock and /proc/uptime differ by up to a second).
fn sigint_at(trace: &str) -> Option<f64> {
    let line = trace
        .lines()
        .find(|l| l.ends_with("tracing_mark_write: hotprof_sigint"))?;
    let head = line.split(": tracing_mark_write").next()?;
    head.split_whitespace()
        .last()?
        .trim_end_matches(':')
        .parse()
        .ok()
}

/// From the first close after SIGINT (at `interrupted`) to the return of the last close.
fn detach_window(events: &[Event], interrupted: f64) -> Option<f64> {
    let first = events
        .iter()
        .find(|e| e.at >= interrupted && e.what.starts_with("close("))?;
    let last = events
        .iter()
        .rev()
        .find(|e| e.what.starts_with("close -> "))?;
    (last.at >= first.at).then_some(last.at - first.at)
}

/// The verdict on a goal of `goal` seconds each.
fn verdict(attach: f64, detach: f64, goal: f64) -> &'static str {
    if attach < goal && detach < goal {
        "met"
    } else {
        "NOT MET"
    }
}

/// A step's guest timestamps.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Times {
    started: f64,
    interrupted: f64,
    exited: f64,
}

/// `t0 t_int t_report t_exit code` as the script writes it.
fn parse_times(line: &str) -> Option<Times> {
    let fields: Vec<f64> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    match fields.as_slice() {
        [started, interrupted, _reported, exited, ..] => Some(Times {
            started: *started,
            interrupted: *interrupted,
            exited: *exited,
        }),
        _ => None,
    }
}

fn seconds(value: Option<f64>) -> String {
    value.map_or("—".into(), |v| format!("{v:.2}"))
}

fn read(dir: &Path, name: &str) -> Result<String> {
    let path = dir.join(name);
    std::fs::read_to_string(&path).with_context(|| format!("could not read {}", path.display()))
}

/// `N (MODE)` from hotprof's `hotprof: N function(s) attached (MODE mode)` line.
fn attached_line(stderr: &str) -> Option<String> {
    stderr.lines().find_map(|line| {
        let rest = line.strip_prefix("hotprof: ")?;
        let (count, rest) = rest.split_once(' ')?;
        let count: usize = count.parse().ok()?;
        let mode = rest.split_once("attached (")?.1.split_once(" mode")?.0;
        Some(format!("{count} ({mode})"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attached_line_gives_the_count_and_the_mode() {
        let stderr = "hotprof: note: x\nhotprof: 1000 function(s) attached (kprobe.multi mode), \
                      running: sh -c x\n";
        assert_eq!(
            attached_line(stderr).as_deref(),
            Some("1000 (kprobe.multi)")
        );
        assert_eq!(attached_line("hotprof: error: no\n"), None);
    }

    #[test]
    fn times_and_verdicts() {
        assert_eq!(
            parse_times("10.00 20.00 20.50 21.25 0\n"),
            Some(Times {
                started: 10.0,
                interrupted: 20.0,
                exited: 21.25
            })
        );
        assert_eq!(parse_times("10.00 20.00"), None);
        assert_eq!(verdict(2.9, 0.1, GOAL_SECONDS), "met");
        assert_eq!(verdict(3.0, 0.1, GOAL_SECONDS), "NOT MET");
        assert_eq!(verdict(0.1, 4.0, GOAL_SECONDS), "NOT MET");
        assert_eq!(verdict(0.9, 0.9, TRACING_MULTI_GOAL_SECONDS), "met");
        assert_eq!(verdict(1.2, 0.5, TRACING_MULTI_GOAL_SECONDS), "NOT MET");
        // The kernel's view, from a trace like the guest's: aya's feature probes (loads before
        // the maps) are not attaching; the window ends when the last link creation returns.
        let trace = "# tracer: nop\n\
            hotprof-1 [000] ..... 10.000000: sys_bpf(cmd: 5, uattr: 1, size: 2)\n\
            hotprof-1 [000] ..... 10.100000: sys_bpf(cmd: 0, uattr: 1, size: 2)\n\
            hotprof-1 [000] ..... 10.200000: sys_bpf -> 0x9\n\
            hotprof-1 [000] ..... 11.000000: sys_bpf(cmd: 5, uattr: 1, size: 2)\n\
            hotprof-1 [000] ..... 11.200000: sys_bpf(cmd: 1c, uattr: 1, size: 2)\n\
            hotprof-1 [000] ..... 11.210000: sys_bpf -> 0xa\n\
            hotprof-1 [000] ..... 11.250000: sys_bpf(cmd: 0x1c, uattr: 1, size: 2)\n\
            hotprof-1 [000] ..... 11.500000: sys_bpf -> 0xa\n\
            sh-2 [000] ..... 29.500000: tracing_mark_write: hotprof_sigint\n\
            hotprof-1 [001] ..... 30.000000: sys_close(fd: 9)\n\
            hotprof-1 [001] ..... 30.750000: sys_close -> 0x0\n";
        let events = parse_trace(trace);
        assert_eq!(events.len(), 10);
        assert_eq!(attach_window(&events), Some(0.5));
        assert_eq!(sigint_at(trace), Some(29.5));
        assert_eq!(detach_window(&events, 29.5), Some(0.75));
        assert_eq!(detach_window(&events, 31.0), None);
        assert_eq!(attach_window(&[]), None);
        // Every count through the link, then the perf path at 1000 only, and on 7.x
        // tracing-multi links at 1000.
        let tags = |kernel| -> Vec<String> { steps(kernel).into_iter().map(Step::tag).collect() };
        assert_eq!(tags(Kernel::V6_12), ["m1", "m10", "m100", "m1000", "p1000"]);
        assert_eq!(
            tags(Kernel::V7),
            ["m1", "m10", "m100", "m1000", "p1000", "t1000"]
        );
    }
}
