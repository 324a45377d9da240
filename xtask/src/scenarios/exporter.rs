//! A busy exporter (issue #34): `hotprof serve` with 200 functions, scraped 20 times a second
//! by a bounded load loop on loopback (`scrape`, in the guest) while a workload of known calls
//! runs. One minute in the suite; ten minutes opt-in ([`EXPORTER_SOAK`], `--soak`).

use std::time::Duration;

use anyhow::{Context, Result, ensure};

use super::Scenario;
use super::harness::{Ctx, Fields, Guest, every_call_counted_or_missed};
use super::kprobe_multi::TRACEABLE;
use crate::arch::Arch;
use crate::kernels::Kernel;

/// Scrapes started per second.
const RATE: u64 = 20;
/// getpid calls per `syscall_lat` the loop runs while the scrapes go on.
const CALLS: u64 = 20_000;
/// How long the exporter is scraped, how long its memory may settle before its RSS counts,
/// and how far (percent) the RSS may then move.
struct Load {
    length: Duration,
    warm_up: Duration,
    rss_drift_percent: u64,
}

/// The suite's minute: the RSS after 20 s may move 10 %, a gross leak only. The first
/// minute is settling, not steady: after 20 s one run stayed within 8 kB (241 scrapes), a
/// faster one grew 43.5 → 46.5 MB (+6.8 %, 368 scrapes; a host exporter on 3 syscalls stays
/// flat to the kB over 5,947 scrapes). Whether that settles is the ten minutes' question.
const MINUTE: Load = Load {
    length: Duration::from_secs(60),
    warm_up: Duration::from_secs(20),
    rss_drift_percent: 10,
};

/// The issue's ten minutes: flat within 5 % after two.
const TEN_MINUTES: Load = Load {
    length: Duration::from_secs(600),
    warm_up: Duration::from_secs(120),
    rss_drift_percent: 5,
};

/// The ten-minute run, opt-in with the soak.
pub const EXPORTER_SOAK: Scenario = Scenario {
    name: "exporter_soak",
    arch: Arch::X86_64,
    kernels: &[Kernel::V6_12],
    run: exporter_soak,
};

/// 6.12, 7.x: [`busy_exporter_for`] one minute.
pub(super) fn busy_exporter(ctx: &mut Ctx) -> Result<()> {
    busy_exporter_for(ctx, &MINUTE)
}

fn exporter_soak(ctx: &mut Ctx) -> Result<()> {
    busy_exporter_for(ctx, &TEN_MINUTES)
}

/// `hotprof serve` on `__do_sys_getpid` and 199 cold functions (kprobe.multi), `--comm
/// syscall_lat-0` (the workload's calling thread), scraped [`RATE`] times a second for `length` while `syscall_lat` loops: no
/// scrape fails; the getpid count never goes down from one scrape to the next; a final scrape
/// and the exit `--json` both hold exactly the calls the loop made, but for those the kernel
/// counts as missed (as in `process_storm_exact`); the exporter's RSS moves no
/// more than the load's drift after its warm-up; the scrape latency is printed. Then
/// SIGTERM while a scrape is in flight: exit 0, its `--json` written, nothing left; and
/// SIGHUP, on a second exporter: killed, nothing left.
fn busy_exporter_for(ctx: &mut Ctx, load: &Load) -> Result<()> {
    let length = load.length;
    let seconds = length.as_secs();
    let warm_up = load.warm_up.as_secs();
    let series = r#"hotprof_function_latency_seconds_count{function="__do_sys_getpid""#;
    let serve = "hotprof serve --listen 127.0.0.1:9435 --fn __do_sys_getpid \
                 $(sed 's/^/--fn /' /tmp/cold) --mode kprobe --comm syscall_lat-0 --no-calibrate";
    let guest = ctx.run_with_timeout(
        &format!(
            r#"{TRACEABLE}
ip link set lo up
awk '{{print $1}}' $T/available_filter_functions | grep -v '\.' | sort | uniq -u > /tmp/traceable
awk '{{print $2}}' /sys/kernel/debug/kprobes/blacklist | sort -u > /tmp/blacklist
grep -E '^(acpi|pci|input|rtc|dmi|efi|thermal|cpufreq)_' /tmp/traceable | grep -vxF -f /tmp/blacklist | head -n 199 > /tmp/cold
echo "functions=$(( $(grep -c . /tmp/cold) + 1 ))"
ready() {{ for i in $(seq 1 120); do grep -q attached $1 && return; sleep 1; done; }}
{serve} --json /out/serve.json > /out/serve.txt 2>&1 &
hp=$!
ready /out/serve.txt
scrape http://127.0.0.1:9435/metrics {RATE} {seconds} --series '{series}' --watch $hp --warm-up {warm_up} > /out/scrape.txt 2>&1 &
sc=$!
loops=0
while kill -0 $sc 2> /dev/null; do syscall_lat {CALLS} > /dev/null; loops=$((loops + 1)); done
echo "loops=$loops"
cat /out/scrape.txt
wget -qO /out/final.txt http://127.0.0.1:9435/metrics; echo "final_rc=$?"
grep -F '{series}' /out/final.txt | head -n 1
grep -F '{MISSED_SERIES}' /out/final.txt | head -n 1
wget -qO /dev/null http://127.0.0.1:9435/metrics & sleep 0.2; kill -TERM $hp; wait $hp; echo "term_rc=$?"
hotprof status > /dev/null; echo "after_term=$?"
{serve} > /out/serve2.txt 2>&1 &
hp=$!
ready /out/serve2.txt
wget -qO /dev/null http://127.0.0.1:9435/metrics & sleep 0.2; kill -HUP $hp; wait $hp; echo "hup_rc=$?"
hotprof status > /dev/null; echo "after_hup=$?"
"#
        ),
        length + Duration::from_secs(300),
    )?;
    guest.expect_exit(0)?;
    for line in [
        "functions=200",
        "final_rc=0",
        // SIGHUP's default action: killed (128 + 1), its fds and so its probes closed.
        "hup_rc=129",
        "after_hup=0",
        "term_rc=0",
        "after_term=0",
    ] {
        ensure!(
            !guest.lines_containing(line).is_empty(),
            "want {line}: {:?}",
            guest.lines_containing(line.split('=').next().unwrap_or(line))
        );
    }
    let scrape = guest.workload("scrape")?;
    let made = CALLS * loops(&guest)?;
    let (scrapes, errors, decreases) = (
        scrape.u64("scrapes")?,
        scrape.u64("errors")?,
        scrape.u64("decreases")?,
    );
    println!(
        "  {scrapes} scrapes in {seconds} s: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; RSS \
         {}–{} kB after the warm-up; {made} getpid calls",
        ms(&scrape, "p50_ns")?,
        ms(&scrape, "p99_ns")?,
        ms(&scrape, "max_ns")?,
        scrape.u64("rss_min_kb")?,
        scrape.u64("rss_max_kb")?,
    );
    ensure!(
        errors == 0 && decreases == 0,
        "{errors} scrapes failed and the getpid count went down {decreases} times"
    );
    // The loop asks RATE a second; a scrape of 200 functions takes ~0.6 s in a TCG guest
    // (printed above), so only a stuck exporter answers fewer than one a second.
    ensure!(
        scrapes >= seconds,
        "{scrapes} scrapes in {seconds} s: the exporter stalled"
    );
    let (low, high) = (scrape.u64("rss_min_kb")?, scrape.u64("rss_max_kb")?);
    ensure!(
        low > 0 && (high - low) * 100 <= low * load.rss_drift_percent,
        "the exporter's RSS moved from {low} to {high} kB after the warm-up (more than {} %)",
        load.rss_drift_percent
    );
    let last_value = |series: &str| {
        guest
            .lines_containing(series)
            .iter()
            .find_map(|line| line.trim().rsplit(' ').next()?.parse::<u64>().ok())
    };
    let final_count = last_value(series).context("the final scrape has no getpid count")?;
    let final_missed =
        last_value(MISSED_SERIES).context("the final scrape has no kernel_missed")?;
    every_call_counted_or_missed("the final scrape", final_count, final_missed, made)?;
    let report = guest.report("serve.json")?;
    let recorded = report.function("__do_sys_getpid")?.u64("count")?;
    let missed = report.json["losses"]["kernel_missed"].as_u64().unwrap_or(0);
    every_call_counted_or_missed("the exit --json", recorded, missed, made)
}

/// The kernel's count of program runs it skipped, in the exporter's metrics.
const MISSED_SERIES: &str = r#"hotprof_losses_total{kind="kernel_missed"}"#;

fn loops(guest: &Guest) -> Result<u64> {
    let lines = guest.lines_containing("loops=");
    let line = lines.first().map(|l| l.trim()).unwrap_or_default();
    Ok(line.trim_start_matches("loops=").parse()?)
}

fn ms(fields: &Fields, key: &str) -> Result<f64> {
    Ok(fields.u64(key)? as f64 / 1e6)
}
