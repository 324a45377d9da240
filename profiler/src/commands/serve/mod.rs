//! `hotprof serve`: the probes of a recording, exposed as a Prometheus scrape endpoint.
//!
//! Attaches exactly as the default (record) command does ([`crate::session::validate`],
//! [`crate::session::Run::start`]), then answers `GET /metrics` ([`http`]) with the
//! recording read fresh from the kernel maps on every scrape. The maps are cumulative and
//! never cleared, which is what Prometheus counters and histograms must be: `rate()` and
//! `histogram_quantile()` over any window work on the scraper's side. On SIGINT/SIGTERM the
//! server stops, the probes are detached (dropping the fd-backed links: nothing is pinned)
//! and the usual text report of the whole run is printed, plus `--json` if asked.
//!
//! Kernel requirements are those of the probes: `--syscall` needs the syscall tracepoints
//! (any kernel hotprof supports, ≥ 5.10), `--fn` kprobes or fentry (BTF).

pub mod http;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::args::{DEFAULT_STACK_MAP_SIZE, ProbeArgs, worded};
use crate::model::Recording;
use crate::session::{self, ModuleWatcher, Run, SessionSpec, Signals};

const EXAMPLES: &str = "\
Examples:
  # getpid latency for every process, scraped by Prometheus at 127.0.0.1:9435/metrics
  sudo hotprof serve --listen 127.0.0.1:9435 --syscall getpid
  # The audit filter's latency, on all interfaces (mind the firewall)
  sudo hotprof serve --listen 0.0.0.0:9435 --fn __audit_filter_op
  # Only one workload's calls; keeps serving after it exits, until Ctrl-C
  sudo hotprof serve --syscall getpid --json run.json -- syscall_lat 100000
  # See what a scrape returns
  curl -s http://127.0.0.1:9435/metrics";

/// Options of `hotprof serve`: where to listen, and the probe options of the default command.
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct ServeArgs {
    /// Address and port to serve on (`127.0.0.1:9435`, `[::1]:9435`, `0.0.0.0:9435`; port 0
    /// picks a free one, printed at start).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9435")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub probe: ProbeArgs,

    /// On exit, write the whole run's recording (raw buckets included) as versioned JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Workload to run and measure (only its process tree); the endpoint stays up after it
    /// exits, until SIGINT/SIGTERM.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl ServeArgs {
    /// The session this command runs: the default command's, without stacks or off-CPU time.
    fn session_spec(&self) -> anyhow::Result<SessionSpec> {
        Ok(SessionSpec {
            probe: self.probe.to_spec()?,
            command: self.command.clone(),
            // No stacks are captured; the size the maps are created with.
            stack_map_size: DEFAULT_STACK_MAP_SIZE,
            ..SessionSpec::default()
        })
    }
}

/// The live run as the scrape handler reads it. Taken (`None`) at shutdown, which detaches
/// everything even if a connection still holds the router.
struct Live {
    run: Mutex<Option<Run>>,
    started: Instant,
}

impl Live {
    /// The cumulative recording since attach, read from the maps now.
    fn recording(&self) -> Result<Recording, String> {
        let mut guard = self.run.lock().map_err(|_| "map reader panicked")?;
        let run = guard.as_mut().ok_or("hotprof is shutting down")?;
        let (snapshot, kernel_missed) = run.snapshot_in_flight().map_err(|e| format!("{e:#}"))?;
        let mut recording = run.recording(&snapshot, self.started.elapsed());
        recording.losses.kernel_missed = kernel_missed;
        Ok(recording)
    }
}

/// Runs the exporter until SIGINT/SIGTERM; returns the exit code (the workload's, when there
/// is one, else 0).
pub async fn run(args: ServeArgs) -> anyhow::Result<i32> {
    let spec = args.session_spec()?;
    let filter = session::validate(&spec).map_err(worded)?;
    session::check_system(&args.command)?;
    let listener = http::bind(args.listen).await?;
    let address = listener.local_addr().context("listening socket")?;
    let mut signals = Signals::new()?;
    let mut run = Run::start(&spec, &filter).map_err(worded)?;
    // While the probes run: the overhead is exported from the start.
    run.calibrate_now();
    let mut workload = run.follow(&args.command, &args.probe.filter.pids)?;
    let started = Instant::now();
    workload.release()?;
    let what = run.layout().attached();
    let mut modules = run.module_watcher(&spec.probe);
    let mut modules_ticker = tokio::time::interval(ModuleWatcher::PERIOD);
    let index = format!(
        "hotprof {} exporter: {what}: {}\n\n/metrics  Prometheus metrics (OpenMetrics, or protobuf with native histograms, if the Accept header asks for it)\n",
        env!("CARGO_PKG_VERSION"),
        run.layout().probed_names()
    );
    let live = Arc::new(Live {
        run: Mutex::new(Some(run)),
        started,
    });
    let source: http::RecordingSource = {
        let live = live.clone();
        Arc::new(move || live.recording())
    };
    let scrapes = Arc::new(AtomicU64::new(0));
    let app = http::router(source, index, scrapes.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    eprintln!(
        "hotprof: serving http://{address}/metrics: {what}{}",
        if workload.is_some() {
            format!(", running: {}", args.command.join(" "))
        } else {
            ", SIGINT/SIGTERM to stop".into()
        }
    );

    let mut exit_code = 0;
    let mut server_error = None;
    loop {
        tokio::select! {
            signal = signals.recv() => {
                workload.signal(signal);
                break;
            }
            status = workload.exit(), if workload.running() => {
                exit_code = status?;
                eprintln!("hotprof: workload exited with code {exit_code}; still serving, SIGINT/SIGTERM to stop");
            }
            _ = modules_ticker.tick(), if modules.is_some() => {
                for note in modules.as_mut().map(|m| m.poll(started.elapsed())).unwrap_or_default() {
                    eprintln!("hotprof: note: {note}");
                }
            }
            result = &mut server => {
                server_error = Some(match result {
                    Ok(Ok(())) => anyhow::anyhow!("the HTTP server stopped"),
                    Ok(Err(e)) => anyhow::Error::new(e).context("the HTTP server failed"),
                    Err(e) => anyhow::Error::new(e).context("the HTTP server failed"),
                });
                break;
            }
        }
    }

    // Stop answering, then detach. A scrape in flight gets a few seconds to finish; the
    // probes go away regardless, since the handler only borrows them through `live`.
    let _ = stop.send(());
    if server_error.is_none() {
        let _ = tokio::time::timeout(Duration::from_secs(3), &mut server).await;
    }
    server.abort();
    let run = live
        .run
        .lock()
        .map_err(|_| anyhow::anyhow!("map reader panicked"))?
        .take()
        .context("probes already detached")?;
    // Detach every probe before printing.
    let finished = run.finish()?;
    // Stopped by a signal while the workload ran: it was told to stop; reap it.
    if let Some(code) = workload.reap().await {
        exit_code = code;
    }
    let mut recording = finished
        .layout
        .recording(&finished.snapshot, started.elapsed());
    recording.losses.kernel_missed = finished.kernel_missed;
    eprintln!(
        "hotprof: stopped serving after {} scrape(s)",
        scrapes.load(Ordering::Relaxed)
    );
    print!("{}", crate::report::render_recording(&recording));
    if let Some(path) = &args.json {
        crate::report::write_json(&recording, path)?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    match server_error {
        Some(error) => Err(error),
        None => Ok(exit_code),
    }
}
