//! `scrape URL RATE SECONDS [--series PREFIX] [--watch PID]`: a bounded scrape load on an HTTP
//! metrics endpoint, the way a busy Prometheus (or several) would hit `hotprof serve`.
//!
//! Reports the scrapes' latency quantiles, the errors, whether one series' value ever went
//! down (a counter must not), and, with `--watch`, how the exporter's resident memory moved.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use workloads::cli::{Opt, parse_duration, parse_int};
use workloads::{Args, Error, Report, run_main};

const NAME: &str = "scrape";
const USAGE: &str = "\
scrape - scrape an HTTP metrics endpoint RATE times a second for SECONDS

Usage: scrape URL RATE SECONDS [--series PREFIX] [--watch PID] [--warm-up SECS]

  URL              http://IPV4:PORT/PATH (plain HTTP/1.1, a new connection per
                   scrape, like a scraper that does not keep connections alive)
  RATE             scrapes started per second (1..=1000); a slow scrape delays
                   the next one and the loop never catches up in a burst, so the
                   load is bounded
  SECONDS          how long: seconds, optionally fractional, or with a unit
  --series PREFIX  the start of one sample line (e.g. `name{labels} `): its value
                   is read from every answer, and must never go down
  --watch PID      read PID's VmRSS once a second
  --warm-up SECS   how long before the VmRSS readings count (default: the
                   first tenth of the run)

Output (last line):
  scrape: scrapes=N errors=E p50_ns=A p99_ns=B max_ns=C first=F last=L
          decreases=D rss_min_kb=R0 rss_max_kb=R1 rss_last_kb=R2
    errors     scrapes that failed to connect, or answered other than 200
    first/last the series' value in the first and the last answer (-1: not
               found or no --series)
    decreases  answers whose value was below the previous answer's
    rss_*      PID's VmRSS after the warm-up (0: no --watch)

The first error is printed to stderr; the run goes on.
";

fn main() -> ExitCode {
    run_main(
        NAME,
        USAGE,
        &[
            Opt::Value("series"),
            Opt::Value("watch"),
            Opt::Value("warm-up"),
        ],
        run,
    )
}

fn run(args: &Args) -> Result<Report, Error> {
    let [url, rate, seconds] = args.positionals(["URL", "RATE", "SECONDS"])?;
    let (address, path) = parse_url(url)?;
    let rate = parse_int("RATE", rate, 1, 1000)?;
    let length = parse_duration(
        "SECONDS",
        seconds,
        Duration::from_millis(1),
        Duration::from_secs(24 * 3600),
    )?;
    let series = args.value("series");
    let watch = match args.value("watch") {
        Some(pid) => Some(parse_int("--watch", pid, 1, u64::from(u32::MAX))?),
        None => None,
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    let period = Duration::from_secs(1) / rate as u32;
    let start = Instant::now();
    let warm_up = start
        + match args.value("warm-up") {
            Some(text) => parse_duration("--warm-up", text, Duration::ZERO, length)?,
            None => length / 10,
        };
    let mut next = start;
    let mut next_rss = start;
    let mut latencies = Vec::new();
    let (mut errors, mut decreases) = (0u64, 0u64);
    let (mut first, mut last) = (None, None::<f64>);
    let mut rss = Vec::new();
    while start.elapsed() < length {
        let now = Instant::now();
        if now < next {
            std::thread::sleep(next - now);
        }
        // Bounded: the next scrape is due a period after this one starts, or now if late.
        next = Instant::now().max(next) + period;
        let began = Instant::now();
        match scrape_once(address, &request) {
            Ok(body) => {
                latencies.push(began.elapsed().as_nanos() as u64);
                if let Some(value) = series.and_then(|prefix| value_of(&body, prefix)) {
                    if last.is_some_and(|previous| value < previous) {
                        decreases += 1;
                    }
                    first.get_or_insert(value);
                    last = Some(value);
                }
            }
            Err(err) => {
                if errors == 0 {
                    eprintln!("scrape: {err}");
                }
                errors += 1;
            }
        }
        if let Some(pid) = watch
            && Instant::now() >= next_rss
        {
            next_rss += Duration::from_secs(1);
            if Instant::now() >= warm_up {
                rss.push(vm_rss_kb(pid)?);
            }
        }
    }
    latencies.sort_unstable();
    let quantile = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0)
    };
    let shown = |value: Option<f64>| value.map_or("-1".to_owned(), |v| v.to_string());
    Ok(Report::new(NAME)
        .field("scrapes", latencies.len() as u64 + errors)
        .field("errors", errors)
        .field("p50_ns", quantile(0.5))
        .field("p99_ns", quantile(0.99))
        .field("max_ns", latencies.last().copied().unwrap_or(0))
        .field("first", shown(first))
        .field("last", shown(last))
        .field("decreases", decreases)
        .field("rss_min_kb", rss.iter().min().copied().unwrap_or(0))
        .field("rss_max_kb", rss.iter().max().copied().unwrap_or(0))
        .field("rss_last_kb", rss.last().copied().unwrap_or(0)))
}

/// `http://HOST:PORT/PATH` into (`HOST:PORT`, `/PATH`).
fn parse_url(url: &str) -> Result<(&str, &str), Error> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| Error::usage(format!("URL must start with http://, got '{url}'")))?;
    Ok(match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    })
}

/// One GET on a new connection; the body of a 200 answer.
fn scrape_once(address: &str, request: &str) -> Result<String, Error> {
    let mut stream =
        TcpStream::connect(address).map_err(|err| Error::os(&format!("connect {address}"), err))?;
    stream
        .write_all(request.as_bytes())
        .map_err(|err| Error::os("sending the request", err))?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|err| Error::os("reading the answer", err))?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| Error::failed("an answer without a header"))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(Error::failed(format!("answered {status}")));
    }
    Ok(body.to_owned())
}

/// The value of the first sample line starting with `prefix`.
fn value_of(body: &str, prefix: &str) -> Option<f64> {
    body.lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

/// `VmRSS` of `pid`, in kB.
fn vm_rss_kb(pid: u64) -> Result<u64, Error> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|err| Error::os(&format!("reading /proc/{pid}/status"), err))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| Error::failed(format!("/proc/{pid}/status has no VmRSS")))
}
