//! `udp_send ADDR:PORT N`: send N one-byte UDP datagrams to ADDR:PORT.
//!
//! Routed through a `dummy` network device, each datagram is one call of the module's
//! transmit function (`dummy_xmit`), made in the sender's context (the device has no queue):
//! the exact count a module-function probe must see.

use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;

use workloads::cli::parse_int;
use workloads::clock::Stopwatch;
use workloads::{Args, Error, Report, run_main};

const NAME: &str = "udp_send";
const USAGE: &str = "\
udp_send - send N one-byte UDP datagrams to ADDR:PORT

Usage: udp_send ADDR:PORT N

  ADDR:PORT  where to send (e.g. 10.9.0.2:9; nothing needs to listen)
  N          datagrams to send (1..=100000000)

Output (last line):
  udp_send: sent=S failed=F elapsed_ns=E pid=P
    sent    sendto(2) calls that succeeded (each one datagram handed to the device)
    failed  calls that failed (e.g. ENOBUFS, ECONNREFUSED from an earlier ICMP error)
";

fn main() -> ExitCode {
    run_main(NAME, USAGE, &[], run)
}

fn run(args: &Args) -> Result<Report, Error> {
    let [addr, count] = args.positionals(["ADDR:PORT", "N"])?;
    let to: SocketAddr = addr
        .parse()
        .map_err(|_| Error::usage(format!("ADDR:PORT {addr:?} is not an address and port")))?;
    let count = parse_int("N", count, 1, 100_000_000)?;
    let bind: SocketAddr = match to {
        SocketAddr::V4(_) => "0.0.0.0:0",
        SocketAddr::V6(_) => "[::]:0",
    }
    .parse()
    .expect("a literal address");
    let socket = UdpSocket::bind(bind).map_err(|err| Error::os("binding a UDP socket", err))?;
    let watch = Stopwatch::start();
    let (mut sent, mut failed) = (0u64, 0u64);
    for _ in 0..count {
        match socket.send_to(&[0], to) {
            Ok(_) => sent += 1,
            Err(_) => failed += 1,
        }
    }
    Ok(Report::new(NAME)
        .field("sent", sent)
        .field("failed", failed)
        .field("elapsed_ns", watch.elapsed_ns())
        .field("pid", workloads::own_pid()))
}
