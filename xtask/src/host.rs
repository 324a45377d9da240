//! Host scenarios: what hotprof must do on this machine's own kernel, which has no kprobes
//! but has syscall tracepoints and perf events.

use std::path::PathBuf;
use std::process::{Command, Output};

use anyhow::{Context, Result, ensure};

use crate::util::{cargo, run, target_dir};

/// The debug build of hotprof and the workloads the host checks run.
pub(crate) fn debug_build() -> Command {
    let mut build = cargo();
    build.args(["build", "-p", "profiler", "-p", "workloads"]);
    build
}

pub(crate) fn binaries() -> Result<(PathBuf, PathBuf)> {
    run(&mut debug_build())?;
    let dir = target_dir().join("debug");
    Ok((dir.join("hotprof"), dir.join("syscall_lat")))
}

pub(crate) fn output(command: &mut Command) -> Result<Output> {
    command
        .output()
        .with_context(|| format!("cannot run {command:?}"))
}

/// `--syscall getpid` uses the syscall tracepoints, so it works here, and counts exactly the
/// workload's calls.
pub fn syscall_exact() -> Result<()> {
    let (hotprof, syscall_lat) = binaries()?;
    getpid_count_is_exact(&hotprof, &syscall_lat, 20_000)
}

/// `HOTPROF --syscall getpid -- SYSCALL_LAT CALLS` counts exactly `CALLS`.
pub fn getpid_count_is_exact(
    hotprof: &std::path::Path,
    syscall_lat: &std::path::Path,
    calls: u64,
) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let json = dir.path().join("getpid.json");
    let out = output(
        Command::new(hotprof)
            .args(["--syscall", "getpid", "--json"])
            .arg(&json)
            .arg("--")
            .arg(syscall_lat)
            .arg(calls.to_string()),
    )?;
    ensure!(
        out.status.success(),
        "{} --syscall getpid failed: {}",
        hotprof.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&json).context("hotprof --syscall getpid wrote no JSON")?,
    )?;
    let count = report["functions"][0]["count"]
        .as_u64()
        .context("no count")?;
    ensure!(
        count == calls,
        "--syscall getpid counted {count} calls, want exactly {calls}"
    );
    Ok(())
}

/// The probe overhead hotprof prints (`probe_overhead_ns`) is what the traced program pays:
/// `syscall_lat`'s own ns/call with the probes minus without. Like the calibration, each side
/// is the best of several short runs (10 × 20,000 getpid), so that other load on the machine
/// inflates neither; 5 rounds, the median ratio (with 3, one clean-clone rehearsal's rounds
/// read 2.38×, 1.71× and 0.78×: the calibration itself swings on this 2-core machine). Before calibration timed its baseline with
/// nothing attached, it printed 0.44× what the workload paid (179 ns against +440 ns).
pub fn printed_overhead_matches_workload() -> Result<()> {
    const ROUNDS: usize = 5;
    let (hotprof, syscall_lat) = binaries()?;
    let dir = tempfile::tempdir()?;
    let json = dir.path().join("overhead.json");
    let loop_script = format!(
        "for i in 1 2 3 4 5 6 7 8 9 10; do {} 20000 || exit 1; done",
        syscall_lat.display()
    );
    let best_avg_ns = |out: &Output| -> Result<f64> {
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .filter_map(|line| line.strip_prefix("syscall_lat: "))
            .flat_map(str::split_whitespace)
            .filter_map(|field| field.strip_prefix("avg_ns=")?.parse::<f64>().ok())
            .min_by(f64::total_cmp)
            .with_context(|| format!("no syscall_lat avg_ns line in: {text}"))
    };
    let mut ratios = Vec::new();
    for _ in 0..ROUNDS {
        let bare = best_avg_ns(&output(Command::new("sh").args(["-c", &loop_script]))?)?;
        let probed = output(
            Command::new(&hotprof)
                .args(["--syscall", "getpid", "--json"])
                .arg(&json)
                .args(["--", "sh", "-c", &loop_script]),
        )?;
        ensure!(
            probed.status.success(),
            "hotprof --syscall getpid failed: {}",
            String::from_utf8_lossy(&probed.stderr)
        );
        let paid = best_avg_ns(&probed)? - bare;
        let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json)?)?;
        let printed = report["probe_overhead_ns"]
            .as_f64()
            .context("hotprof printed no calibrated overhead")?;
        println!("  printed {printed:.0} ns, the workload paid {paid:.0} ns more per call");
        ensure!(
            paid > 0.0,
            "the probes cost the workload nothing ({paid:.0} ns)?"
        );
        ratios.push(printed / paid);
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ROUNDS / 2];
    // Both sides are timings on a shared machine; a 0.6–1.6× band still fails a calibration
    // that measures the wrong thing (0.44× before).
    ensure!(
        (0.6..=1.6).contains(&median),
        "printed overhead is {median:.2}× what the workload paid (rounds: {ratios:.2?})"
    );
    Ok(())
}

/// `hotprof --fn` here: one line saying kprobes are missing and what still works.
pub fn no_kprobes_error() -> Result<()> {
    let (hotprof, _) = binaries()?;
    if std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        println!("  (this kernel has kprobes; nothing to check)");
        return Ok(());
    }
    let out = output(Command::new(&hotprof).args(["--fn", "vfs_read", "--duration", "1s"]))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success(),
        "hotprof --fn succeeded on a kernel without kprobes"
    );
    ensure!(stderr.lines().count() == 1, "want one line, got: {stderr}");
    ensure!(
        stderr.contains("has no kprobes") && stderr.contains("--syscall"),
        "unexpected error: {stderr}"
    );
    Ok(())
}

/// A two-syscall `--stacks` run (`--syscall getpid,getppid`): each syscall is a leaf frame of
/// its own (`getpid [syscall]`), with exactly the workload's calls under it in the folded
/// file, and both in the SVG.
pub fn syscall_flamegraph_leaves() -> Result<()> {
    const GETPIDS: u64 = 3_000;
    const GETPPIDS: u64 = 1_000;
    let (hotprof, syscall_lat) = binaries()?;
    let dir = std::env::temp_dir().join(format!("hotprof-leaves-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (folded, svg) = (dir.join("two.folded"), dir.join("two.svg"));
    let lat = syscall_lat.display();
    let out = output(
        Command::new(&hotprof)
            // A comma list, as `--help` says a repeatable option takes.
            .args(["--syscall", "getpid,getppid", "--weight", "count"])
            .arg("--folded")
            .arg(&folded)
            .arg("--flamegraph")
            .arg(&svg)
            .args(["--", "sh", "-c"])
            .arg(format!(
                "{lat} {GETPIDS} && {lat} {GETPPIDS} --call getppid"
            )),
    )?;
    ensure!(
        out.status.success(),
        "hotprof failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&folded)?;
    let calls = |leaf: &str| -> u64 {
        text.lines()
            .filter(|line| line.starts_with("syscall_lat"))
            .filter_map(|line| line.rsplit_once(' '))
            .filter(|(stack, _)| stack.ends_with(&format!(";{leaf}_[k]")))
            .filter_map(|(_, weight)| weight.parse::<u64>().ok())
            .sum()
    };
    let counted = (calls("getpid [syscall]"), calls("getppid [syscall]"));
    ensure!(
        counted == (GETPIDS, GETPPIDS),
        "the folded file has {counted:?} calls under the two syscall leaves, want \
         ({GETPIDS}, {GETPPIDS}):\n{text}"
    );
    let picture = std::fs::read_to_string(&svg)?;
    ensure!(
        picture.contains("getpid [syscall]") && picture.contains("getppid [syscall]"),
        "the flamegraph does not name both syscalls"
    );
    std::fs::remove_dir_all(&dir)?;
    println!("  getpid [syscall] {GETPIDS} calls, getppid [syscall] {GETPPIDS}: exact");
    Ok(())
}

/// `hotprof list` says what a run would get, as `hotprof doctor` does: on a host whose kernel
/// refuses fentry (doctor's fentry row "no"), every function's fentry column is "no", and it
/// is "no" only then.
pub fn list_agrees_with_doctor() -> Result<()> {
    let (hotprof, _) = binaries()?;
    let doctor = output(Command::new(&hotprof).arg("doctor"))?;
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    let fentry_row = doctor
        .lines()
        .find(|line| line.split_whitespace().next() == Some("fentry"))
        .context("doctor printed no fentry row")?;
    let fentry_works = fentry_row.split_whitespace().nth(1) == Some("yes");
    let list = output(Command::new(&hotprof).args(["list", "vfs_rea*"]))?;
    let stdout = String::from_utf8_lossy(&list.stdout);
    ensure!(
        list.status.success(),
        "hotprof list failed: {}",
        String::from_utf8_lossy(&list.stderr)
    );
    let rows: Vec<&str> = stdout.lines().skip(1).collect();
    ensure!(rows.len() >= 2, "hotprof list printed no rows: {stdout}");
    for row in rows {
        let refused = row.contains("no (refused; see doctor)");
        ensure!(
            refused != fentry_works,
            "doctor's fentry row is `{}` but list says: {row}",
            fentry_row.trim()
        );
    }
    println!(
        "  fentry {}: list and doctor agree",
        if fentry_works { "works" } else { "refused" }
    );
    Ok(())
}

/// `hotprof sample` profiles getpid's kernel path on this kernel: it shows in the top table
/// and in the flamegraph.
pub fn sample_getpid_path() -> Result<()> {
    let (hotprof, syscall_lat) = binaries()?;
    let svg = std::env::temp_dir().join(format!("hotprof-sample-{}.svg", std::process::id()));
    let folded = std::env::temp_dir().join(format!("hotprof-sample-{}.folded", std::process::id()));
    let out = output(
        Command::new(&hotprof)
            .args(["sample", "--flamegraph"])
            .arg(&svg)
            .arg("--folded")
            .arg(&folded)
            .arg("--")
            .arg(&syscall_lat)
            .arg("5000000"),
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "hotprof sample failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let getpid_path = [
        "getpid",
        "x64_sys_call",
        "do_syscall_64",
        "__task_pid_nr_ns",
    ];
    let table: Vec<&str> = stdout.lines().filter(|l| l.contains("[k]")).collect();
    ensure!(
        table
            .iter()
            .any(|l| getpid_path.iter().any(|f| l.contains(f))),
        "the top table shows no getpid path frame:\n{stdout}"
    );
    let image = std::fs::read_to_string(&svg)?;
    let _ = std::fs::remove_file(&svg);
    roxmltree::Document::parse_with_options(
        &image,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .context("the sample flamegraph is not valid XML")?;
    ensure!(
        image.contains("do_syscall_64"),
        "the sample flamegraph has no do_syscall_64 frame"
    );
    // The workload exited before its stacks were symbolized: its user frames are still
    // named, from the mappings saved while it ran (before, a quarter were `[unknown]`).
    let text = std::fs::read_to_string(&folded)?;
    let _ = std::fs::remove_file(&folded);
    let (mut named, mut all) = (0u64, 0u64);
    for line in text.lines().filter(|l| l.starts_with("syscall_lat")) {
        let (stack, count) = line
            .rsplit_once(' ')
            .context("a folded line without a count")?;
        let count: u64 = count.parse()?;
        all += count;
        let user_named = stack
            .split(';')
            .skip(1)
            .filter(|frame| !frame.ends_with("_[k]"))
            .any(|frame| frame != "[unknown]" && !frame.contains("+0x"));
        if user_named {
            named += count;
        }
    }
    ensure!(
        all > 0 && named * 10 >= all * 9,
        "only {named} of the workload's {all} samples have a named user frame after it exited"
    );
    Ok(())
}

/// A child process killed (SIGKILL) and reaped when dropped, so no exit path of a check
/// leaves it running.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port that was free a moment ago (the kernel's pick for port 0).
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("no free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// `GET path` on 127.0.0.1:port; the status code and body, or `None` if nothing answers.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// The `data.result` array of a PromQL query (empty when there is no result yet).
fn prometheus_results(port: u16, promql: &str) -> Vec<serde_json::Value> {
    let encoded: String = promql
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let Some((200, body)) = http_get(port, &format!("/api/v1/query?query={encoded}")) else {
        return Vec::new();
    };
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    json["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The values of an instant PromQL query, one per series.
fn prometheus_query(port: u16, promql: &str) -> Vec<f64> {
    prometheus_results(port, promql)
        .iter()
        .filter_map(|r| r["value"][1].as_str()?.parse().ok())
        .collect()
}

/// Every stored sample of a range-vector query (`metric[2m]`) of one series, oldest first.
fn prometheus_samples(port: u16, promql: &str) -> Vec<f64> {
    prometheus_results(port, promql)
        .first()
        .and_then(|r| r["values"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v[1].as_str()?.parse().ok())
        .collect()
}

/// Every stored native histogram of a range-vector query (`metric[2m]`) of one series,
/// oldest first: `{"count", "sum", "buckets": [[rule, left, right, count], …]}` (strings).
fn prometheus_histograms(port: u16, promql: &str) -> Vec<serde_json::Value> {
    prometheus_results(port, promql)
        .first()
        .and_then(|r| r["histograms"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|h| h[1].clone())
        .collect()
}

/// Checks a native histogram as Prometheus's API returns it against hotprof's
/// `[lower_ns, upper_ns, count]` buckets: each non-empty stored bucket (`left` to `right`)
/// holds exactly one hotprof bucket, the one whose upper edge lies in it, with its count,
/// and there are as many as hotprof has. Returns that number.
fn native_buckets_match(histogram: &serde_json::Value, buckets: &[[u64; 3]]) -> Result<usize> {
    let stored = histogram["buckets"]
        .as_array()
        .context("Prometheus's histogram has no buckets")?;
    let mut matched = 0;
    for bucket in stored {
        let field = |i: usize| -> Result<f64> {
            bucket[i]
                .as_str()
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("unreadable bucket {bucket}"))
        };
        let (left, right, count) = (field(1)?, field(2)?, field(3)?);
        if count == 0.0 {
            continue;
        }
        let inside: Vec<&[u64; 3]> = buckets
            .iter()
            .filter(|b| {
                let upper = b[1] as f64 / 1e9;
                left < upper && upper <= right
            })
            .collect();
        ensure!(
            inside.len() == 1 && inside[0][2] as f64 == count,
            "Prometheus's bucket ({left}, {right}] holds {count} calls; the hotprof buckets with their upper edge in it: {inside:?}"
        );
        matched += 1;
    }
    ensure!(
        matched == buckets.len(),
        "Prometheus stored {matched} native buckets, hotprof has {}",
        buckets.len()
    );
    Ok(matched)
}

/// Index of the exported `le` bucket holding `ns`: the first boundary `2^k − 1 ≥ ns`
/// (k ≥ 6), as in hotprof-model/src/export/prometheus.rs.
fn le_slot(ns: f64) -> u32 {
    (6..=36)
        .position(|k| ns <= ((1u64 << k) - 1) as f64)
        .map_or(31, |i| i as u32)
}

/// `hotprof serve --syscall getpid -- syscall_lat N`, scraped every second by a real
/// Prometheus server (Debian's package, on loopback, its own temporary TSDB) while the
/// workload runs: every stored `_count` grows (fresh cumulative reads, some mid-run when the
/// run lasts seconds) and ends at exactly N, its `histogram_quantile(0.5, …)` lies
/// within one exported bucket of hotprof's own p50 (from the `--json` written on exit), and
/// after SIGINT hotprof exits 0 with its text report and none of its programs stays loaded.
pub fn prometheus_serve() -> Result<()> {
    scraped_by_prometheus(Scrape::Classic)
}

/// [`prometheus_serve`] with Prometheus started with `--enable-feature=native-histograms`,
/// so it asks for the protobuf exposition and stores native histograms: every stored
/// `histogram_count` grows and ends at exactly N, `histogram_sum` is hotprof's sum, the
/// last stored histogram has exactly hotprof's buckets (each hotprof bucket's count, from
/// the `--json`, alone in the native bucket holding its upper edge: nothing merged, lost or
/// moved), and `histogram_quantile(0.99, …)` is within one hotprof bucket's width of
/// hotprof's own p99.
pub fn prometheus_native_histograms() -> Result<()> {
    scraped_by_prometheus(Scrape::Native)
}

/// What a Prometheus scrape of `hotprof serve` exercises.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scrape {
    /// Prometheus's defaults: the OpenMetrics text, classic `le` buckets.
    Classic,
    /// `--enable-feature=native-histograms`: the protobuf exposition, native buckets.
    Native,
}

fn scraped_by_prometheus(scrape: Scrape) -> Result<()> {
    use std::time::{Duration, Instant};
    // About 5 s of getpid under the tracepoint pair on a 2-core host: several scrapes mid-run.
    const CALLS: u64 = 4_000_000;
    let (hotprof, syscall_lat) = binaries()?;
    let dir = tempfile::tempdir()?;
    let (web_port, metrics_port) = (free_port()?, free_port()?);
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: hotprof\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
    );
    std::fs::write(dir.path().join("prometheus.yml"), config)?;
    let prometheus_log = dir.path().join("prometheus.log");
    let log = std::fs::File::create(&prometheus_log)?;
    let mut prometheus = KillOnDrop(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{web_port}"))
            .args(match scrape {
                Scrape::Classic => &[][..],
                Scrape::Native => &["--enable-feature=native-histograms"],
            })
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start prometheus (Debian package `prometheus`)")?,
    );
    let prometheus_tail = || {
        let log = std::fs::read_to_string(&prometheus_log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    };
    let started = Instant::now();
    while http_get(web_port, "/-/ready").map(|(status, _)| status) != Some(200) {
        ensure!(
            prometheus.0.try_wait()?.is_none(),
            "prometheus exited:\n{}",
            prometheus_tail()
        );
        ensure!(
            started.elapsed() < Duration::from_secs(30),
            "prometheus not ready after 30 s:\n{}",
            prometheus_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "  prometheus ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Prometheus hands new targets to its scrape loops at most every 5 s: wait until ours is
    // being scraped (and failing: nothing listens yet), so the workload's seconds are scraped.
    let scraping = |body: &str| {
        serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["data"]["activeTargets"].as_array().cloned())
            .is_some_and(|targets| targets.iter().any(|t| t["health"] == "down"))
    };
    while !http_get(web_port, "/api/v1/targets").is_some_and(|(_, body)| scraping(&body)) {
        ensure!(
            started.elapsed() < Duration::from_secs(30),
            "prometheus did not start scraping its target within 30 s:\n{}",
            prometheus_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "  prometheus scraping after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let json = dir.path().join("serve.json");
    let (stdout_path, stderr_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut serve = KillOnDrop(
        Command::new(&hotprof)
            .arg("serve")
            .arg(format!("--listen=127.0.0.1:{metrics_port}"))
            .args(["--syscall", "getpid", "--json"])
            .arg(&json)
            .arg("--")
            .arg(&syscall_lat)
            .arg(CALLS.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&stdout_path)?)
            .stderr(std::fs::File::create(&stderr_path)?)
            .spawn()
            .context("cannot start hotprof serve")?,
    );
    let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    while !stderr().contains("serving http://") {
        ensure!(
            serve.0.try_wait()?.is_none(),
            "hotprof serve exited: {}",
            stderr()
        );
        ensure!(
            started.elapsed() < Duration::from_secs(40),
            "hotprof serve did not start: {}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let program_ids = bpf_program_ids(serve.0.id())?;
    ensure!(
        !program_ids.is_empty(),
        "hotprof serve holds no BPF program"
    );

    // Until a scrape after the workload's end.
    let series = "hotprof_function_latency_seconds{job=\"hotprof\",function=\"getpid\"}";
    let count_query = match scrape {
        Scrape::Classic => series.replace('{', "_count{"),
        Scrape::Native => format!("histogram_count({series})"),
    };
    let mut last_count = None;
    loop {
        last_count = prometheus_query(web_port, &count_query)
            .first()
            .copied()
            .or(last_count);
        if last_count.is_some_and(|count| count >= CALLS as f64) {
            break;
        }
        ensure!(
            serve.0.try_wait()?.is_none(),
            "hotprof serve exited early: {}",
            stderr()
        );
        ensure!(
            started.elapsed() < Duration::from_secs(50),
            "Prometheus never stored the final count (last {last_count:?}); targets: {}\nhotprof: {}\nprometheus:\n{}",
            http_get(web_port, "/api/v1/targets")
                .map(|(_, b)| b)
                .unwrap_or_default(),
            stderr(),
            prometheus_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let quantile = prometheus_query(
        web_port,
        &match scrape {
            Scrape::Classic => format!(
                "histogram_quantile(0.5, {})",
                series.replace('{', "_bucket{")
            ),
            Scrape::Native => format!("histogram_quantile(0.99, {series})"),
        },
    );
    let (counts_seen, last_histogram, native_sum) = match scrape {
        Scrape::Classic => (
            prometheus_samples(web_port, &format!("{count_query}[5m]")),
            None,
            None,
        ),
        Scrape::Native => {
            let stored = prometheus_histograms(web_port, &format!("{series}[5m]"));
            let counts = stored
                .iter()
                .filter_map(|h| h["count"].as_str()?.parse().ok())
                .collect();
            let sum = prometheus_query(web_port, &format!("histogram_sum({series})"));
            (counts, stored.last().cloned(), sum.first().copied())
        }
    };

    Command::new("kill")
        .args(["-INT", &serve.0.id().to_string()])
        .status()?;
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = serve.0.try_wait()? {
            break status;
        }
        ensure!(
            Instant::now() < deadline,
            "hotprof serve did not exit within 15 s of SIGINT: {}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(prometheus);
    let stdout = std::fs::read_to_string(&stdout_path)?;
    ensure!(
        status.success(),
        "hotprof serve exited with {status}: {}",
        stderr()
    );
    ensure!(
        stdout.contains("getpid") && stdout.contains("p50") && stdout.contains("losses:"),
        "no text report on exit:\n{stdout}"
    );
    let recording: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).context("no --json written on exit")?)?;
    let function = &recording["functions"][0];
    let count = function["count"].as_u64().context("no count in the JSON")?;
    ensure!(
        count == CALLS,
        "hotprof counted {count} getpid calls, want exactly {CALLS}"
    );
    let stored = match scrape {
        Scrape::Classic => "_count",
        Scrape::Native => "histogram_count",
    };
    ensure!(
        counts_seen.last() == Some(&(CALLS as f64)) && counts_seen.is_sorted(),
        "Prometheus's stored {stored}: {counts_seen:?}, want it growing to exactly {CALLS}"
    );
    let mid_run = counts_seen
        .iter()
        .filter(|&&c| c > 0.0 && c < CALLS as f64)
        .count();
    let wall_ns: f64 = stdout
        .split_whitespace()
        .find_map(|field| field.strip_prefix("wall_ns="))
        .and_then(|w| w.parse().ok())
        .context("no wall_ns= in syscall_lat's output")?;
    ensure!(
        mid_run > 0 || wall_ns < 3e9,
        "the workload ran {:.1} s but Prometheus stored no count mid-run: {counts_seen:?}",
        wall_ns / 1e9
    );
    let estimate_ns = quantile
        .first()
        .copied()
        .filter(|q| q.is_finite())
        .context("histogram_quantile(…) is empty")?
        * 1e9;
    match scrape {
        Scrape::Classic => {
            let p50_ns = function["p50_ns"]
                .as_f64()
                .context("no p50_ns in the JSON")?;
            let (slot, own_slot) = (le_slot(estimate_ns), le_slot(p50_ns));
            println!(
                "  workload {:.1} s; Prometheus stored _count {counts_seen:?} ({mid_run} mid-run); histogram_quantile(0.5) {estimate_ns:.0} ns; hotprof p50 {p50_ns} ns (le slots {slot} vs {own_slot})",
                wall_ns / 1e9
            );
            ensure!(
                slot.abs_diff(own_slot) <= 1,
                "Prometheus's median {estimate_ns:.0} ns is more than one bucket from hotprof's p50 {p50_ns} ns"
            );
        }
        Scrape::Native => {
            let buckets: Vec<[u64; 3]> = serde_json::from_value(function["buckets"].clone())
                .context("no buckets in the JSON")?;
            let histogram = last_histogram.context("Prometheus stored no native histogram")?;
            let matched = native_buckets_match(&histogram, &buckets)?;
            let p99_ns = function["p99_ns"]
                .as_u64()
                .context("no p99_ns in the JSON")?;
            let [lower, upper, _] = *buckets
                .iter()
                .find(|[lower, upper, _]| (*lower..=*upper).contains(&p99_ns))
                .context("hotprof's p99 is in none of its buckets")?;
            let width = (upper - lower + 1) as f64;
            let sum_ns = function["sum_ns"]
                .as_f64()
                .context("no sum_ns in the JSON")?;
            let stored_sum_ns = native_sum.context("histogram_sum(…) is empty")? * 1e9;
            ensure!(
                (stored_sum_ns - sum_ns).abs() <= sum_ns * 1e-12,
                "Prometheus's histogram_sum is {stored_sum_ns} ns, hotprof's sum {sum_ns} ns"
            );
            println!(
                "  workload {:.1} s; Prometheus stored histogram_count {counts_seen:?} ({mid_run} mid-run) and the {matched} native buckets of hotprof's {} buckets; histogram_quantile(0.99) {estimate_ns:.1} ns; hotprof p99 {p99_ns} ns (its bucket [{lower}, {upper}], {width} ns wide)",
                wall_ns / 1e9,
                buckets.len()
            );
            ensure!(
                (estimate_ns - p99_ns as f64).abs() <= width,
                "Prometheus's p99 {estimate_ns:.1} ns is more than one bucket ({width} ns) from hotprof's p99 {p99_ns} ns"
            );
        }
    }

    let (left, listed) = programs_left(&hotprof, &program_ids)?;
    ensure!(
        left.is_empty(),
        "programs {left:?} of hotprof serve are still loaded after it exited:\n{listed}"
    );
    println!(
        "  {} programs loaded while serving, none left after SIGINT",
        program_ids.len()
    );
    Ok(())
}

/// Which of `program_ids` (a hotprof's, which has exited) `hotprof status` still lists, and
/// its listing. The kernel frees a detached tracepoint program after an RCU grace period, so
/// one can still be listed just after the exit: leftovers are those still there 3 s later.
pub(crate) fn programs_left(
    hotprof: &std::path::Path,
    program_ids: &[u32],
) -> Result<(Vec<u32>, String)> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let status_out = output(Command::new(hotprof).arg("status"))?;
        let listed = String::from_utf8_lossy(&status_out.stdout).into_owned();
        let left: Vec<u32> = program_ids
            .iter()
            .copied()
            .filter(|id| listed.contains(&format!("id {id} ")))
            .collect();
        if left.is_empty() || std::time::Instant::now() > deadline {
            return Ok((left, listed));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The ids of the BPF programs a process holds open (`prog_id:` in its fds' fdinfo).
pub(crate) fn bpf_program_ids(pid: u32) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))? {
        let Ok(info) = std::fs::read_to_string(entry?.path()) else {
            continue;
        };
        ids.extend(
            info.lines()
                .filter_map(|l| l.strip_prefix("prog_id:"))
                .filter_map(|id| id.trim().parse::<u32>().ok()),
        );
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// `contrib/hotprof-exporter.service` is a valid unit (`systemd-analyze verify`, with
/// ExecStart pointing at the hotprof just built) and its capability bounding set is enough:
/// its ExecStart, run as root under exactly that bounding set with no_new_privs (`setpriv`,
/// what systemd does for the unit), serves a scrape with a series per probed syscall and
/// exits 0 on the unit's SIGTERM.
pub fn systemd_unit() -> Result<()> {
    use std::time::{Duration, Instant};
    let (hotprof, _) = binaries()?;
    let unit_path = crate::util::workspace_root().join("contrib/hotprof-exporter.service");
    let unit = std::fs::read_to_string(&unit_path)
        .with_context(|| format!("cannot read {}", unit_path.display()))?;
    let setting = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(str::trim)
            .with_context(|| format!("{key}= missing in the unit"))
    };
    let exec_start = setting("ExecStart")?;
    let mut argv: Vec<String> = exec_start.split_whitespace().map(String::from).collect();
    ensure!(
        argv.first().map(String::as_str) == Some("/usr/local/bin/hotprof")
            && argv.get(1).map(String::as_str) == Some("serve"),
        "ExecStart must run /usr/local/bin/hotprof serve: {exec_start}"
    );
    argv[0] = hotprof.display().to_string();
    let listen = argv
        .iter()
        .position(|a| a == "--listen")
        .context("ExecStart has no --listen")?;
    let port = free_port()?;
    argv[listen + 1] = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir()?;
    let copy = dir.path().join("hotprof-exporter.service");
    std::fs::write(&copy, unit.replace(exec_start, &argv.join(" ")))?;
    let verify = output(Command::new("systemd-analyze").arg("verify").arg(&copy))?;
    ensure!(
        verify.status.success() && verify.stderr.is_empty(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );

    let caps: Vec<String> = setting("CapabilityBoundingSet")?
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase()))
        .collect();
    let stderr_path = dir.path().join("stderr");
    let mut serve = KillOnDrop(
        Command::new("setpriv")
            .arg(format!("--bounding-set=-all,{}", caps.join(",")))
            .arg("--no-new-privs")
            .args(&argv)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr_path)?)
            .spawn()
            .context("cannot run setpriv (util-linux)")?,
    );
    let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let started = Instant::now();
    while !stderr().contains("serving http://") {
        ensure!(
            serve.0.try_wait()?.is_none(),
            "the unit's ExecStart under CapabilityBoundingSet={} failed: {}",
            caps.join(","),
            stderr()
        );
        ensure!(
            started.elapsed() < Duration::from_secs(30),
            "hotprof serve did not start: {}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, body) = http_get(port, "/metrics").context("no answer on /metrics")?;
    ensure!(status == 200, "/metrics answered {status}: {body}");
    for pair in argv.windows(2).filter(|w| w[0] == "--syscall") {
        let series = format!(
            "hotprof_function_latency_seconds_count{{function=\"{}\"",
            pair[1]
        );
        ensure!(body.contains(&series), "no {series} in the scrape:\n{body}");
    }
    Command::new("kill")
        .args(["-TERM", &serve.0.id().to_string()])
        .status()?;
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(exit) = serve.0.try_wait()? {
            break exit;
        }
        ensure!(
            Instant::now() < deadline,
            "hotprof serve ignored SIGTERM: {}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    ensure!(
        exit.success(),
        "hotprof serve exited with {exit} on SIGTERM: {}",
        stderr()
    );
    println!(
        "  unit verified; served under CapabilityBoundingSet={} and stopped cleanly",
        caps.join(",")
    );
    Ok(())
}
