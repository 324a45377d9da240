//! Scaling: getpid's per-call cost with 1, 10, 100 and 1000 kprobe'd functions attached
//! (getpid's entry point plus rarely-run functions), and how long attaching and detaching
//! them takes, measured from outside hotprof in a 6.12 guest.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{GUEST_UPTIME, Spread, Tools, syscall_lat_avg_ns, vm_run};

/// Functions attached per step; the first is always `__x64_sys_getpid`.
const COUNTS: [usize; 4] = [1, 10, 100, 1000];
const CALLS: u64 = 100_000;
/// Baseline runs (no probe) interleaved with the steps.
const BASELINES: usize = 3;

/// Cold code in a qemu guest with no devices: ACPI, PCI, ATA/SCSI, USB, input, thermal, DRM.
/// Names must be traceable (in ftrace's list), unique (no same-named statics), not GCC clones,
/// and not on the kprobe blacklist.
const PICK_COLD_FUNCTIONS: &str = r#"
T=/sys/kernel/tracing
awk '{print $1}' $T/available_filter_functions | grep -v '\.' | sort | uniq -u > /tmp/traceable
awk '{print $2}' /sys/kernel/debug/kprobes/blacklist | sort -u > /tmp/blacklist
grep -E '^(acpi|pci|ata|scsi|usb|thermal|cpufreq|dmi|rtc|input|hid|serio|i8042|drm|efi|nvme|virtio_gpu)_' /tmp/traceable \
  | grep -vxF -f /tmp/blacklist | head -n 999 > /tmp/cold
wc -l < /tmp/cold > /out/cold-count
"#;

pub fn run(tools: &Tools) -> Result<String> {
    let mut script = String::from("set +e\n");
    script.push_str(PICK_COLD_FUNCTIONS);
    // Seconds since boot; spelled out because the workload's own `sh -c` runs it too.
    let up = GUEST_UPTIME;
    for (index, count) in COUNTS.iter().enumerate() {
        if index < BASELINES {
            let _ = writeln!(script, "syscall_lat {CALLS} > /out/base-{index}.txt 2>&1");
        }
        let _ = writeln!(
            script,
            r#"
fns="--fn __x64_sys_getpid $(head -n {others} /tmp/cold | sed 's/^/--fn /')"
t0=$({up})
hotprof --mode kprobe --no-calibrate $fns -- sh -c "{up} > /out/s{count}-started; syscall_lat {CALLS} > /out/s{count}-lat.txt 2>&1; {up} > /out/s{count}-done; exec sleep 600" > /out/s{count}-hotprof.txt 2>&1 &
hp=$!
waited=0
while [ ! -s /out/s{count}-done ] && kill -0 $hp 2>/dev/null && [ $waited -lt 1500 ]; do sleep 0.2; waited=$((waited + 1)); done
t_int=$({up})
kill -INT $hp; wait $hp; code=$?
echo "$t0 $t_int $({up}) $code" > /out/s{count}-times
"#,
            others = count - 1,
        );
    }
    let outcome = vm_run(tools, "scaling", &script, Duration::from_secs(900))?;
    let dir = &outcome.out_dir;
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
        "## Scaling: functions attached (kprobe mode, 6.12 guest, TCG: ratios only)\n\n\
         `hotprof --mode kprobe --fn __x64_sys_getpid --fn …` with rarely-run functions \
         ({cold} candidates: ACPI, PCI, ATA, USB, input, DRM, … in a guest without those \
         devices) while `syscall_lat {CALLS}` runs. Attach = from starting hotprof to the \
         workload running; detach = from SIGINT to hotprof's exit (reads the maps, prints the \
         report, closes every link). No-probe baseline: {} ns/call.\n\n\
         | functions | attached | ns/call | overhead ns/call | × 1 function's | attach s | detach s |\n\
         |---|---|---|---|---|---|---|\n",
        base.show()
    );
    let mut first_overhead = None;
    for count in COUNTS {
        let hotprof = read(dir, &format!("s{count}-hotprof.txt")).unwrap_or_default();
        let attached = attached_count(&hotprof);
        let lat = read(dir, &format!("s{count}-lat.txt")).unwrap_or_default();
        let times = read(dir, &format!("s{count}-times")).unwrap_or_default();
        let started = read(dir, &format!("s{count}-started")).ok();
        let Some(ns) = syscall_lat_avg_ns(&lat) else {
            let why = hotprof
                .lines()
                .find(|l| l.contains("error") || l.starts_with("hotprof:"));
            let _ = writeln!(
                out,
                "| {count} | {} | failed: {} | | | | |",
                attached.map_or("—".into(), |n| n.to_string()),
                why.unwrap_or("no output")
            );
            continue;
        };
        let overhead = ns - base.median;
        let first = *first_overhead.get_or_insert(overhead);
        let fields: Vec<f64> = times
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        let attach = match (
            fields.first(),
            started.and_then(|s| s.trim().parse::<f64>().ok()),
        ) {
            (Some(t0), Some(started)) => format!("{:.2}", started - t0),
            _ => "—".into(),
        };
        let detach = match fields.as_slice() {
            [_, interrupted, exited, ..] => format!("{:.2}", exited - interrupted),
            _ => "—".into(),
        };
        let _ = writeln!(
            out,
            "| {count} | {} | {ns:.1} | {overhead:.1} | {:.2} | {attach} | {detach} |",
            attached.map_or("—".into(), |n| n.to_string()),
            overhead / first
        );
    }
    out.push_str("\nTimes come from the guest's /proc/uptime (10 ms resolution) under TCG.\n\n");
    Ok(out)
}

fn read(dir: &Path, name: &str) -> Result<String> {
    let path = dir.join(name);
    std::fs::read_to_string(&path).with_context(|| format!("could not read {}", path.display()))
}

/// N from hotprof's `hotprof: N function(s) attached (kprobe mode)` line.
fn attached_count(stderr: &str) -> Option<usize> {
    stderr.lines().find_map(|line| {
        let rest = line.strip_prefix("hotprof: ")?;
        let (count, rest) = rest.split_once(' ')?;
        rest.contains("attached").then(|| count.parse().ok())?
    })
}
