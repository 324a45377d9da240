//! The HTTP side of `hotprof serve`: a listener, content negotiation and three routes, on
//! axum (hyper 1.x, tokio). Independent of eBPF: the metrics come from a
//! [`RecordingSource`], so the layer is tested with real loopback requests and a fixed
//! recording.
//!
//! - `GET /metrics`: the recording in the protobuf exposition with native histograms
//!   ([`crate::export::prometheus::protobuf`]) when the scraper's `Accept` prefers it
//!   (Prometheus with `--enable-feature=native-histograms` does), else rendered by
//!   [`crate::export::prometheus::render`], in OpenMetrics 1.0.0 when `Accept` prefers it
//!   (Prometheus ≥ 2.5 does by default), else in the text format 0.0.4.
//! - `GET /`: a short plain-text index.
//! - anything else: 404 (405 for a method other than GET/HEAD on `/metrics`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::export::prometheus::{Format, protobuf, render};
use crate::model::Recording;

/// Produces the current, cumulative recording for one scrape. Runs on tokio's blocking pool,
/// so it may read kernel maps synchronously. An `Err` becomes a 503 with its text.
pub type RecordingSource = Arc<dyn Fn() -> Result<Recording, String> + Send + Sync>;

/// Why the exporter cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address is taken, not local, or needs privileges (the OS error is the source).
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Binds the listening socket (before any probe is loaded, so a busy port costs nothing).
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, ServeError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// What the handlers share.
struct Exporter {
    source: RecordingSource,
    index: String,
    scrapes: Arc<AtomicU64>,
}

/// The routes. `index` is the text served at `/`; `scrapes` counts successful `/metrics`
/// answers.
pub fn router(source: RecordingSource, index: String, scrapes: Arc<AtomicU64>) -> Router {
    let state = Arc::new(Exporter {
        source,
        index,
        scrapes,
    });
    Router::new()
        .route("/", get(index_page))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(state)
}

async fn index_page(State(exporter): State<Arc<Exporter>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        exporter.index.clone(),
    )
        .into_response()
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "not found: the metrics are at /metrics\n",
    )
        .into_response()
}

async fn metrics(State(exporter): State<Arc<Exporter>>, headers: HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok());
    let exposition = negotiate(accept);
    let source = exporter.source.clone();
    let recording = match tokio::task::spawn_blocking(move || source()).await {
        Ok(Ok(recording)) => recording,
        Ok(Err(reason)) => return unavailable(reason),
        Err(panicked) => return unavailable(format!("reading the maps failed: {panicked}")),
    };
    exporter.scrapes.fetch_add(1, Ordering::Relaxed);
    let (content_type, body) = match exposition {
        Exposition::Text(format) => (
            format.content_type(),
            render(&recording, format).into_bytes(),
        ),
        Exposition::Protobuf => (protobuf::CONTENT_TYPE, protobuf::encode(&recording)),
    };
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

fn unavailable(reason: String) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{reason}\n"),
    )
        .into_response()
}

/// What a `/metrics` answer is encoded in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    /// Text, with classic histogram buckets.
    Text(Format),
    /// Length-delimited `io.prometheus.client.MetricFamily` messages, with native
    /// histograms.
    Protobuf,
}

/// The exposition for a request's `Accept` header: the protobuf one when the client accepts
/// `application/vnd.google.protobuf` with `proto=io.prometheus.client.MetricFamily` and
/// `encoding=delimited` at least as much as any text; else OpenMetrics when it accepts
/// `application/openmetrics-text` (version 1.0.0 or unversioned) at least as much as the
/// 0.0.4 text (`text/plain`, `text/*` or `*/*`); else the 0.0.4 text, which every scraper
/// reads. Prometheus 2.x sends `application/openmetrics-text;version=1.0.0,…,
/// text/plain;version=0.0.4;q=0.5,*/*;q=0.1`, so it gets OpenMetrics, and with native
/// histograms enabled puts the protobuf type first; curl (`*/*`) gets text.
pub fn negotiate(accept: Option<&str>) -> Exposition {
    let Some(accept) = accept else {
        return Exposition::Text(Format::Prometheus);
    };
    let mut protobuf_q = 0.0f32;
    let mut openmetrics_q = 0.0f32;
    let mut text_q = 0.0f32;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut q = 1.0f32;
        let mut version = None;
        let (mut proto, mut encoding) = (None, None);
        for param in parts {
            let Some((key, value)) = param.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            match key.trim().to_ascii_lowercase().as_str() {
                "q" => q = value.parse().unwrap_or(0.0),
                "version" => version = Some(value.to_string()),
                "proto" => proto = Some(value.to_string()),
                "encoding" => encoding = Some(value.to_string()),
                _ => {}
            }
        }
        match media.as_str() {
            "application/vnd.google.protobuf"
                if proto.as_deref() == Some("io.prometheus.client.MetricFamily")
                    && encoding.as_deref() == Some("delimited") =>
            {
                protobuf_q = protobuf_q.max(q);
            }
            "application/openmetrics-text" if version.as_deref().is_none_or(|v| v == "1.0.0") => {
                openmetrics_q = openmetrics_q.max(q);
            }
            "text/plain" if version.as_deref().is_none_or(|v| v == "0.0.4") => {
                text_q = text_q.max(q);
            }
            "text/*" | "*/*" => text_q = text_q.max(q),
            _ => {}
        }
    }
    if protobuf_q > 0.0 && protobuf_q >= openmetrics_q.max(text_q) {
        Exposition::Protobuf
    } else if openmetrics_q > 0.0 && openmetrics_q >= text_q {
        Exposition::Text(Format::OpenMetrics)
    } else {
        Exposition::Text(Format::Prometheus)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use super::*;
    use crate::model::{FunctionRecord, FunctionTotals, Losses, SCHEMA_VERSION};

    const PROMETHEUS_2_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    /// What Prometheus 2.42 sends with `--enable-feature=native-histograms`.
    const PROMETHEUS_2_NATIVE_HISTOGRAMS_ACCEPT: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    const TEXT: Exposition = Exposition::Text(Format::Prometheus);
    const OPENMETRICS: Exposition = Exposition::Text(Format::OpenMetrics);

    #[test]
    fn negotiation_follows_the_accept_header() {
        assert_eq!(negotiate(None), TEXT);
        assert_eq!(negotiate(Some("*/*")), TEXT);
        assert_eq!(negotiate(Some("text/plain")), TEXT);
        assert_eq!(negotiate(Some(PROMETHEUS_2_ACCEPT)), OPENMETRICS);
        assert_eq!(negotiate(Some("application/openmetrics-text")), OPENMETRICS);
        // Only a version we do not write: fall back to the 0.0.4 text.
        assert_eq!(
            negotiate(Some("application/openmetrics-text;version=0.0.1")),
            TEXT
        );
        // Preferred less than text.
        assert_eq!(
            negotiate(Some(
                "application/openmetrics-text;q=0.2, text/plain;version=0.0.4"
            )),
            TEXT
        );
        assert_eq!(
            negotiate(Some(
                "Application/OpenMetrics-Text; Version=\"1.0.0\"; q=0.9"
            )),
            OPENMETRICS
        );
        assert_eq!(negotiate(Some("application/openmetrics-text;q=0")), TEXT);
        assert_eq!(negotiate(Some("garbage;;;=,")), TEXT);
        assert_eq!(
            negotiate(Some(PROMETHEUS_2_NATIVE_HISTOGRAMS_ACCEPT)),
            Exposition::Protobuf
        );
        // Another message, or not delimited: not ours.
        assert_eq!(
            negotiate(Some(
                "application/vnd.google.protobuf;proto=io.prometheus.client.Metric;encoding=delimited,text/plain;q=0.5"
            )),
            TEXT
        );
        assert_eq!(
            negotiate(Some(
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text"
            )),
            TEXT
        );
        // Preferred less than OpenMetrics.
        assert_eq!(
            negotiate(Some(
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5,application/openmetrics-text"
            )),
            OPENMETRICS
        );
    }

    fn recording(count: u64) -> Recording {
        let durations: Vec<u64> = (100..100 + count).collect();
        let totals = FunctionTotals {
            sum_sq_ns2: 0,
            ..FunctionTotals::from_durations(&durations)
        };
        let function =
            FunctionRecord::from_aggregates("getpid".into(), "sys_enter_getpid".into(), &totals);
        Recording {
            schema_version: SCHEMA_VERSION,
            by: Vec::new(),
            filter: None,
            tool: "hotprof test".into(),
            kernel: "6.18.0".into(),
            mode: "syscall".into(),
            task_store: None,
            duration_ns: 1_000_000_000,
            command: vec![],
            functions: vec![function],
            losses: Losses::default(),
            probe_overhead_ns: None,
            probe_bias_ns: None,
            runs: vec![],
            intervals: vec![],
        }
    }

    /// One raw HTTP/1.1 request; returns (status, headers, body).
    fn request(addr: SocketAddr, head: &str) -> (u16, String, String) {
        let (status, headers, body) = request_bytes(addr, head);
        (status, headers, String::from_utf8(body).unwrap())
    }

    /// [`request`] with the body as bytes.
    fn request_bytes(addr: SocketAddr, head: &str) -> (u16, String, Vec<u8>) {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "{head}\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).unwrap();
        let split = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let headers = String::from_utf8(response[..split].to_vec()).unwrap();
        let status = headers.split(' ').nth(1).unwrap().parse().unwrap();
        (
            status,
            headers.to_ascii_lowercase(),
            response[split + 4..].to_vec(),
        )
    }

    /// A real server on a loopback port: every route, both formats, fresh data per scrape.
    #[test]
    fn serves_metrics_index_and_404_over_loopback() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let calls = Arc::new(AtomicU64::new(0));
        let source: RecordingSource = {
            let calls = calls.clone();
            // Each scrape sees more calls, as the live maps would.
            Arc::new(move || Ok(recording(calls.fetch_add(1, Ordering::SeqCst) + 1)))
        };
        let scrapes = Arc::new(AtomicU64::new(0));
        let listener = runtime
            .block_on(bind("127.0.0.1:0".parse().unwrap()))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = router(source, "hotprof index\n".into(), scrapes.clone());
        runtime.spawn(async move { axum::serve(listener, app).await });

        let (status, headers, body) = request(addr, "GET /metrics HTTP/1.1");
        assert_eq!(status, 200);
        assert!(
            headers.contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
            "{headers}"
        );
        assert_eq!(body, render(&recording(1), Format::Prometheus));
        assert!(body.contains("hotprof_function_latency_seconds_count{function=\"getpid\",symbol=\"sys_enter_getpid\",mode=\"syscall\",kernel=\"6.18.0\"} 1\n"));

        let (status, headers, body) = request(
            addr,
            &format!("GET /metrics HTTP/1.1\r\nAccept: {PROMETHEUS_2_ACCEPT}"),
        );
        assert_eq!(status, 200);
        assert!(
            headers.contains("content-type: application/openmetrics-text; version=1.0.0"),
            "{headers}"
        );
        assert_eq!(body, render(&recording(2), Format::OpenMetrics));
        assert!(body.ends_with("# EOF\n"));

        let (status, headers, body) = request_bytes(
            addr,
            &format!("GET /metrics HTTP/1.1\r\nAccept: {PROMETHEUS_2_NATIVE_HISTOGRAMS_ACCEPT}"),
        );
        assert_eq!(status, 200);
        assert!(
            headers.contains(&format!(
                "content-type: {}",
                protobuf::CONTENT_TYPE.to_ascii_lowercase()
            )),
            "{headers}"
        );
        assert_eq!(body, protobuf::encode(&recording(3)));

        let (status, _, body) = request(addr, "GET / HTTP/1.1");
        assert_eq!((status, body.as_str()), (200, "hotprof index\n"));
        let (status, _, body) = request(addr, "GET /metricsx HTTP/1.1");
        assert_eq!(status, 404, "{body}");
        let (status, _, _) = request(addr, "POST /metrics HTTP/1.1\r\nContent-Length: 0");
        assert_eq!(status, 405);
        let (status, _, body) = request(addr, "HEAD /metrics HTTP/1.1");
        assert_eq!((status, body.as_str()), (200, ""));

        assert_eq!(scrapes.load(Ordering::SeqCst), 4);
        runtime.shutdown_background();
    }

    #[test]
    fn a_failing_source_is_a_503_with_the_reason() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let source: RecordingSource = Arc::new(|| Err("the probes are detached".into()));
        let listener = runtime
            .block_on(bind("127.0.0.1:0".parse().unwrap()))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = router(source, String::new(), Arc::default());
        runtime.spawn(async move { axum::serve(listener, app).await });
        let (status, _, body) = request(addr, "GET /metrics HTTP/1.1");
        assert_eq!((status, body.as_str()), (503, "the probes are detached\n"));
        runtime.shutdown_background();
    }

    #[test]
    fn a_busy_port_is_one_line_naming_the_address() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let error = anyhow::Error::new(runtime.block_on(bind(addr)).unwrap_err());
        assert_eq!(
            format!("{error:#}"),
            format!("cannot listen on {addr}: Address already in use (os error 98)")
        );
    }
}
