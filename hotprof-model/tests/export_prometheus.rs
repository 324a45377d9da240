//! The Prometheus/OpenMetrics export, checked by the real consumers: `promtool check
//! metrics` (Prometheus's own parser and linter), the reference OpenMetrics parser of the
//! Python client, and a real Prometheus server that scrapes both formats over HTTP and
//! computes `histogram_quantile` from our buckets.
//!
//! Needs the Debian packages `prometheus` (promtool and the server) and
//! `python3-prometheus-client`; each test skips with a message when its tool is missing.

#[path = "fixtures/export/common.rs"]
mod common;

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hotprof_model::export::prometheus::{Format, LE_BOUNDARIES_NS, render};

/// How many fields `Losses` has (each is one `hotprof_losses_total` series).
fn loss_kinds() -> usize {
    serde_json::to_value(hotprof_model::model::Losses::default())
        .unwrap()
        .as_object()
        .unwrap()
        .len()
}

fn skip(tool: &str, package: &str) -> bool {
    if common::which(tool).is_none() {
        eprintln!("SKIPPED: `{tool}` is not installed (Debian package `{package}`)");
        return true;
    }
    false
}

/// Every sample of `family` as `(labels, value)`, parsed from exposition text.
fn samples(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .map(|line| {
            let (head, value) = line.rsplit_once(' ').unwrap();
            let mut labels = BTreeMap::new();
            if let Some(inner) = head
                .strip_prefix(name)
                .and_then(|h| h.strip_prefix('{'))
                .and_then(|h| h.strip_suffix('}'))
            {
                for pair in inner.split("\",") {
                    let (k, v) = pair.split_once("=\"").unwrap();
                    labels.insert(k.to_string(), v.trim_end_matches('"').to_string());
                }
            }
            let value = if value == "+Inf" {
                f64::INFINITY
            } else {
                value.parse().unwrap()
            };
            (labels, value)
        })
        .collect()
}

/// `promtool check metrics` on `text`: whether it passed, and what it said (its lint
/// findings; empty when clean).
fn promtool_check(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), report)
}

const PYTHON: &str = "/usr/bin/python3";

/// Runs `script` (which reads exposition text from stdin with the Python client's reference
/// OpenMetrics parser) on `text` and returns its output, or `None` (with a SKIPPED message)
/// when the client is not installed. Panics when the parser rejects the text.
fn openmetrics_parse(script: &str, text: &str) -> Option<String> {
    let probe = Command::new(PYTHON)
        .args(["-c", "import prometheus_client.openmetrics.parser"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!(
            "SKIPPED: {PYTHON} cannot import prometheus_client (Debian package `python3-prometheus-client`)"
        );
        return None;
    }
    let mut child = Command::new(PYTHON)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "parser rejected it: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[test]
fn promtool_accepts_the_text_format_without_lint_warnings() {
    if skip("promtool", "prometheus") {
        return;
    }
    let text = render(&common::recording(false), Format::Prometheus);
    let (passed, report) = promtool_check(&text);
    assert!(
        passed,
        "promtool rejected the metrics:\n{report}\n--- metrics ---\n{text}"
    );
    assert!(
        report.trim().is_empty(),
        "promtool lint findings:\n{report}"
    );
}

/// The exported cumulative buckets, `_count` and `_sum` equal a brute-force count over the
/// raw latencies the recording was built from: the collapsing loses nothing.
#[test]
fn histogram_buckets_are_exact_counts_of_the_raw_values() {
    let text = render(&common::recording(false), Format::Prometheus);
    for (name, _, values) in common::raw_values(false) {
        let buckets: Vec<(String, f64)> = samples(&text, "hotprof_function_latency_seconds_bucket")
            .into_iter()
            .filter(|(labels, _)| labels["function"] == name)
            .map(|(labels, value)| (labels["le"].clone(), value))
            .collect();
        assert_eq!(buckets.len(), LE_BOUNDARIES_NS.len() + 1, "{name}");
        for ((le, count), bound) in buckets.iter().zip(LE_BOUNDARIES_NS) {
            assert_eq!(le.parse::<f64>().unwrap(), bound as f64 / 1e9);
            let expected = values.iter().filter(|&&v| v <= bound).count() as f64;
            assert_eq!(*count, expected, "{name} le={le}");
        }
        assert_eq!(
            buckets.last().unwrap(),
            &("+Inf".to_string(), values.len() as f64)
        );
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{name}: buckets not monotonic"
        );
        let count = samples(&text, "hotprof_function_latency_seconds_count")
            .into_iter()
            .find(|(l, _)| l["function"] == name);
        assert_eq!(count.unwrap().1, values.len() as f64);
        let sum = samples(&text, "hotprof_function_latency_seconds_sum")
            .into_iter()
            .find(|(l, _)| l["function"] == name);
        assert_eq!(sum.unwrap().1, values.iter().sum::<u64>() as f64 / 1e9);
    }
}

/// The OpenMetrics text through the Python client's parser, which enforces the OpenMetrics
/// rules (family typing, `# EOF`, integer bucket counts, `le` ordering, `+Inf` bucket).
#[test]
fn openmetrics_text_passes_the_reference_parser() {
    let mut recording = common::recording(false);
    recording.kernel = "6.1.0 \"quoted\" \\ back\nslash".into();
    let text = render(&recording, Format::OpenMetrics);
    let script = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for f in text_string_to_metric_families(sys.stdin.read()):
    kernels = sorted({s.labels['kernel'] for s in f.samples if 'kernel' in s.labels})
    print(f.name, f.type, f.unit or '-', len(f.samples), repr(kernels))
"#;
    let Some(stdout) = openmetrics_parse(script, &text) else {
        return;
    };
    let families: Vec<&str> = stdout.lines().collect();
    let expected_kernel = r#"['6.1.0 "quoted" \\ back\nslash']"#;
    assert!(
        families.contains(&"hotprof_recording info - 1 ['6.1.0 \"quoted\" \\\\ back\\nslash']"),
        "{stdout}"
    );
    // Per function: one sample per finite `le`, `+Inf`, `_count` and `_sum`.
    let histogram_samples = recording.functions.len() * (LE_BOUNDARIES_NS.len() + 3);
    let histogram = format!(
        "hotprof_function_latency_seconds histogram seconds {histogram_samples} {expected_kernel}"
    );
    assert!(families.contains(&histogram.as_str()), "{stdout}");
    assert!(
        families.contains(&format!("hotprof_losses counter - {} []", loss_kinds()).as_str()),
        "{stdout}"
    );
    assert!(
        families
            .iter()
            .any(|f| f.starts_with("hotprof_probe_overhead_seconds gauge seconds 1")),
        "{stdout}"
    );
}

/// `recording` with call sites on every function: more than the 20 exported, with label
/// values that need escaping.
fn with_callers(mut recording: hotprof_model::model::Recording) -> hotprof_model::model::Recording {
    for function in &mut recording.functions {
        function.callers = (0..25u64)
            .map(|i| hotprof_model::model::CallerRecord {
                site: format!("caller_{i}\\\"q\\\"+0x{:x}", 0x10 + i),
                count: 3,
                sum_ns: 9_000 - 100 * i,
                p50_ns: 2_000,
                p99_ns: 5_000,
            })
            .collect();
    }
    recording
}

/// The call-site summaries (20 sites and `caller="other"` per function) pass promtool's
/// parser and linter, and the OpenMetrics text the reference parser.
#[test]
fn call_site_summaries_pass_promtool_and_the_openmetrics_parser() {
    let recording = with_callers(common::recording(false));
    let family = "hotprof_function_caller_latency_seconds";
    if !skip("promtool", "prometheus") {
        let text = render(&recording, Format::Prometheus);
        assert!(text.contains(&format!("# TYPE {family} summary")));
        let (passed, report) = promtool_check(&text);
        assert!(
            passed && report.trim().is_empty(),
            "promtool:\n{report}\n--- metrics ---\n{text}"
        );
    }
    let text = render(&recording, Format::OpenMetrics);
    let script = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for f in text_string_to_metric_families(sys.stdin.read()):
    callers = sorted({s.labels['caller'] for s in f.samples if 'caller' in s.labels})
    print(f.name, f.type, f.unit or '-', len(f.samples), len(callers), repr(callers[:2]))
"#;
    let Some(stdout) = openmetrics_parse(script, &text) else {
        return;
    };
    // Per function: 20 sites with two quantiles, `_count` and `_sum`; `other` with the last two.
    let samples = recording.functions.len() * (20 * 4 + 2);
    let expected = format!(
        "{family} summary seconds {samples} 21 ['caller_0\\\\\"q\\\\\"+0x10', 'caller_10\\\\\"q\\\\\"+0x1a']"
    );
    assert!(
        stdout.lines().any(|l| l == expected),
        "{stdout}\nwanted {expected}"
    );
}

/// The `--by` key summaries (a label per key field, 20 key values and one all-`other`
/// series per function, task names needing escaping) pass promtool's parser and linter, and
/// the OpenMetrics text the reference parser, which reads every label value back unescaped.
#[test]
fn key_summaries_pass_promtool_and_the_openmetrics_parser() {
    let recording = common::with_keys(common::recording(false));
    let family = "hotprof_function_key_latency_seconds";
    if !skip("promtool", "prometheus") {
        let text = render(&recording, Format::Prometheus);
        assert!(text.contains(&format!("# TYPE {family} summary")));
        let (passed, report) = promtool_check(&text);
        assert!(
            passed && report.trim().is_empty(),
            "promtool:\n{report}\n--- metrics ---\n{text}"
        );
    }
    let text = render(&recording, Format::OpenMetrics);
    let script = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for f in text_string_to_metric_families(sys.stdin.read()):
    if not f.name.endswith('_key_latency_seconds'):
        continue
    keys = {(s.labels['function'], s.labels['arg2_log2'], s.labels['errno'], s.labels['comm'])
            for s in f.samples}
    comms = sorted({k[3] for k in keys})
    print(f.name, f.type, f.unit or '-', len(f.samples), len(keys))
    print(repr(comms[:2]), repr(sorted({k[1] for k in keys})[:2]))
    print(sorted(k for k in keys if k[1] == 'other'))
"#;
    let Some(stdout) = openmetrics_parse(script, &text) else {
        return;
    };
    let functions = recording.functions.len();
    // Per function: 20 key values with two quantiles, `_count` and `_sum`; `other` with the
    // last two.
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "{family} summary seconds {} {}",
            functions * (20 * 4 + 2),
            functions * 21
        ),
        "{stdout}"
    );
    // The label values come back exactly as recorded.
    assert_eq!(
        lines[1], r#"['other', 'task 0 "<b>q</b>" \\\n'] ['[1, 2)', '[1024, 2048)']"#,
        "{stdout}"
    );
    let others: Vec<String> = recording
        .functions
        .iter()
        .map(|f| format!("('{}', 'other', 'other', 'other')", f.name))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(lines[2], format!("[{}]", others.join(", ")), "{stdout}");
}

/// A minimal HTTP server: `/text` serves the 0.0.4 format, `/openmetrics` the OpenMetrics
/// one, each with its content type, until `stop` is set.
fn serve_metrics(listener: TcpListener, stop: Arc<AtomicBool>) {
    let recording = common::with_keys(common::recording(false));
    listener.set_nonblocking(true).unwrap();
    while !stop.load(Ordering::Relaxed) {
        let Ok((mut stream, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        stream.set_nonblocking(false).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        let request = String::from_utf8_lossy(&request);
        let format = if request.starts_with("GET /openmetrics") {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        };
        let body = render(&recording, format);
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            format.content_type(),
            body.len()
        );
    }
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `/api/v1/query` result vector as `(labels, value)`.
fn query(port: u16, promql: &str) -> Vec<(serde_json::Value, f64)> {
    let Some(body) = http_get(port, &format!("/api/v1/query?query={}", url_encode(promql))) else {
        return Vec::new();
    };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(&body) else {
        return Vec::new();
    };
    json["data"]["result"]
        .as_array()
        .map(|results| {
            results
                .iter()
                .map(|r| {
                    (
                        r["metric"].clone(),
                        r["value"][1]
                            .as_str()
                            .unwrap_or("NaN")
                            .parse()
                            .unwrap_or(f64::NAN),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn real_prometheus_server_scrapes_both_formats_and_computes_quantiles() {
    if skip("prometheus", "prometheus") {
        return;
    }
    let dir = common::scratch_dir("export-prometheus-server");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let metrics_port = listener.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        std::thread::spawn(move || serve_metrics(listener, stop))
    };
    let web_port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let job = |name: &str| {
        format!(
            "  - job_name: {name}\n    metrics_path: /{name}\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        )
    };
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n{}{}",
        job("text"),
        job("openmetrics")
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let mut prometheus = KillOnDrop(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{web_port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("prometheus starts"),
    );

    // Wait until both jobs have been scraped successfully.
    let start = Instant::now();
    let up = loop {
        let up = query(web_port, "up");
        if up.len() == 2 && up.iter().all(|(_, v)| *v == 1.0) {
            break up;
        }
        let exited = prometheus.0.try_wait().unwrap().is_some();
        if exited || start.elapsed() > Duration::from_secs(90) {
            let targets = http_get(web_port, "/api/v1/targets").unwrap_or_default();
            let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
            panic!(
                "targets never came up (prometheus exited: {exited}): {up:?}\ntargets: {targets}\nlog:\n{log}"
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(up.len(), 2);

    let raw = common::raw_values(false);
    for job in ["text", "openmetrics"] {
        let counts = query(
            web_port,
            &format!("hotprof_function_latency_seconds_count{{job=\"{job}\"}}"),
        );
        assert_eq!(counts.len(), raw.len(), "{job}: {counts:?}");
        for (name, symbol, values) in &raw {
            let (labels, count) = counts
                .iter()
                .find(|(l, _)| l["function"] == *name)
                .expect("series per function");
            assert_eq!(*count, values.len() as f64, "{job} {name}");
            assert_eq!(labels["symbol"], *symbol);
            assert_eq!(labels["mode"], "fentry");

            // Prometheus interpolates inside the power-of-two bucket holding the median: its
            // estimate and the exact median must share that bucket.
            let promql = format!(
                "histogram_quantile(0.5, hotprof_function_latency_seconds_bucket{{job=\"{job}\",function=\"{name}\"}})"
            );
            let estimate = query(web_port, &promql)
                .first()
                .map(|(_, v)| *v)
                .expect("a quantile")
                * 1e9;
            let mut sorted = values.clone();
            sorted.sort_unstable();
            let exact = sorted[(sorted.len() - 1) / 2] as f64;
            let bucket = |v: f64| LE_BOUNDARIES_NS.iter().position(|&b| v <= b as f64);
            assert_eq!(
                bucket(estimate),
                bucket(exact),
                "{job} {name}: estimate {estimate} ns vs exact median {exact} ns"
            );

            let mean = query(
                web_port,
                &format!(
                    "hotprof_function_latency_seconds_sum{{job=\"{job}\",function=\"{name}\"}} / hotprof_function_latency_seconds_count{{job=\"{job}\",function=\"{name}\"}}"
                ),
            );
            let exact_mean = values.iter().sum::<u64>() as f64 / values.len() as f64;
            assert!(
                (mean[0].1 * 1e9 - exact_mean).abs() < 1e-6 * exact_mean,
                "{job} {name}: mean {mean:?} vs {exact_mean}"
            );
        }
        let losses = query(web_port, &format!("hotprof_losses_total{{job=\"{job}\"}}"));
        assert_eq!(
            losses.len(),
            loss_kinds(),
            "{job}: one series per Losses field: {losses:?}"
        );
        let orphaned = losses
            .iter()
            .find(|(l, _)| l["kind"] == "orphaned_frames")
            .unwrap();
        assert_eq!(orphaned.1, 2.0);
        // `--by` keys: 20 values and `other` per function, label values as recorded.
        let keys = query(
            web_port,
            &format!("hotprof_function_key_latency_seconds_count{{job=\"{job}\"}}"),
        );
        assert_eq!(keys.len(), raw.len() * 21, "{job}: {keys:?}");
        let task0 = query(
            web_port,
            &format!(
                r#"hotprof_function_key_latency_seconds_count{{job="{job}",function="vfs_read",arg2_log2="[1, 2)",errno="ok",comm="task 0 \"<b>q</b>\" \\\n"}}"#
            ),
        );
        assert_eq!(task0.len(), 1, "{job}: {task0:?}");
        assert_eq!(task0[0].1, (raw[0].2.len() / 40) as f64, "{job}");
        let overhead = query(
            web_port,
            &format!("hotprof_probe_overhead_seconds{{job=\"{job}\"}}"),
        );
        assert!(
            (overhead[0].1 - 95.5e-9).abs() < 1e-15,
            "{job}: {overhead:?}"
        );
    }

    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
