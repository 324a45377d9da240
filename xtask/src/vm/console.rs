//! The host's side of the console protocol: `/init`'s marker lines read into [`Event`]s amid
//! kernel noise, and the `/out` archive they carry unpacked.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Child;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use anyhow::{Context, Result, anyhow};
use base64::Engine as _;

/// Things the console reader reports to the main loop.
#[derive(Debug, PartialEq)]
pub(super) enum Event {
    /// `/init` is about to run the script.
    Ready,
    Exit(i32),
    /// The base64 tar of `/out`, complete.
    Out(String),
    /// The guest's watchdog fired: every process and its kernel stack.
    Hung(String),
}

/// Reads the console line by line, passing markers on as events and keeping the rest.
pub(super) fn spawn_console_reader(
    child: &mut Child,
    marker: String,
    console: Arc<Mutex<String>>,
    events: Sender<Event>,
    show: bool,
) -> Result<JoinHandle<()>> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("qemu's stdout is not piped"))?;
    Ok(thread::spawn(move || {
        let mut parser = ConsoleParser::new(marker);
        let mut reader = BufReader::new(stdout);
        let mut raw = Vec::new();
        loop {
            raw.clear();
            match reader.read_until(b'\n', &mut raw) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let line = String::from_utf8_lossy(&raw);
            let line = line.trim_end_matches(['\r', '\n']);
            match parser.feed(line) {
                Parsed::Event(event) => {
                    if events.send(event).is_err() {
                        break;
                    }
                }
                Parsed::Payload => {}
                Parsed::Noise => {
                    if show {
                        eprintln!("[console] {line}");
                    }
                    if let Ok(mut console) = console.lock() {
                        console.push_str(line);
                        console.push('\n');
                    }
                }
            }
        }
    }))
}

/// What one console line was.
#[derive(Debug, PartialEq)]
enum Parsed {
    Event(Event),
    /// Part of the `/out` transfer.
    Payload,
    /// Anything else: kernel messages, init's complaints.
    Noise,
}

/// Recognizes `/init`'s marker lines: `<marker> ready`, `<marker> exit=N`, and the sections
/// `<marker> out-begin` … `<marker> out-end` (base64 tar of `/out`) and `<marker> hang-begin` …
/// `<marker> hang-end` (the watchdog's process dump).
struct ConsoleParser {
    marker: String,
    section: Option<(Section, String)>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Section {
    Out,
    Hang,
}

impl ConsoleParser {
    fn new(marker: String) -> Self {
        Self {
            marker,
            section: None,
        }
    }

    fn feed(&mut self, line: &str) -> Parsed {
        let Some(at) = line.find(&self.marker) else {
            return match &mut self.section {
                Some((Section::Out, text)) => {
                    text.push_str(without_kernel_record(line).trim());
                    Parsed::Payload
                }
                Some((Section::Hang, text)) => {
                    text.push_str(line);
                    text.push('\n');
                    Parsed::Payload
                }
                None => Parsed::Noise,
            };
        };
        match line[at + self.marker.len()..].trim() {
            "ready" => Parsed::Event(Event::Ready),
            "out-begin" => self.begin(Section::Out),
            "hang-begin" => self.begin(Section::Hang),
            "out-end" => self.end(Section::Out, Event::Out),
            "hang-end" => self.end(Section::Hang, Event::Hung),
            rest => match rest
                .strip_prefix("exit=")
                .and_then(|code| code.parse().ok())
            {
                Some(code) => Parsed::Event(Event::Exit(code)),
                None => Parsed::Noise,
            },
        }
    }

    fn begin(&mut self, section: Section) -> Parsed {
        self.section = Some((section, String::new()));
        Parsed::Payload
    }

    /// Closes `section` into its event; an end without its begin is noise.
    fn end(&mut self, section: Section, event: fn(String) -> Event) -> Parsed {
        match self.section.take() {
            Some((open, text)) if open == section => Parsed::Event(event(text)),
            other => {
                self.section = other;
                Parsed::Noise
            }
        }
    }
}

/// `line` up to a kernel message printed into it. The console is shared: a message the kernel
/// had queued before `/init` silenced it can still come out amid the archive (seen at the end
/// of an hour on PREEMPT_RT, whose printing thread lags: `[ 3632.300904] audit: kauditd hold
/// queue overflow`). The kernel prints a message whole, from its `[seconds.micros] ` stamp to
/// the end of the line, and base64 has no `[`; the archive's line goes on after it.
fn without_kernel_record(line: &str) -> &str {
    let mut from = 0;
    while let Some(at) = line[from..].find('[').map(|at| from + at) {
        let stamp = line[at + 1..].trim_start_matches(' ');
        let seconds = stamp.trim_start_matches(|c: char| c.is_ascii_digit());
        let micros = seconds
            .strip_prefix('.')
            .map(|rest| rest.trim_start_matches(|c: char| c.is_ascii_digit()));
        if seconds.len() < stamp.len() && micros.is_some_and(|rest| rest.starts_with(']')) {
            return &line[..at];
        }
        from = at + 1;
    }
    line
}

/// Decodes the base64 gzipped tar of the guest's `/out` into `dir`.
pub(super) fn unpack_out(b64: &str, dir: &Path) -> Result<()> {
    let gzipped = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .context("the /out archive is not valid base64")?;
    tar::Archive::new(flate2::read::GzDecoder::new(gzipped.as_slice()))
        .unpack(dir)
        .with_context(|| format!("could not unpack the /out archive into {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn parser_finds_markers_and_payload_amid_noise() {
        let mut parser = ConsoleParser::new("@@m@@".into());
        assert_eq!(
            parser.feed("[    1.0] random: crng init done"),
            Parsed::Noise
        );
        assert_eq!(parser.feed("@@m@@ ready"), Parsed::Event(Event::Ready));
        assert_eq!(parser.feed("@@m@@ exit=3"), Parsed::Event(Event::Exit(3)));
        assert_eq!(parser.feed("@@m@@ out-begin"), Parsed::Payload);
        assert_eq!(parser.feed("QUJD"), Parsed::Payload);
        assert_eq!(parser.feed("REVG "), Parsed::Payload);
        assert_eq!(
            parser.feed("@@m@@ out-end"),
            Parsed::Event(Event::Out("QUJDREVG".into()))
        );
        assert_eq!(parser.feed("reboot: Power down"), Parsed::Noise);
    }

    #[test]
    fn kernel_messages_amid_the_archive_are_left_out() {
        let mut parser = ConsoleParser::new("@@m@@".into());
        parser.feed("@@m@@ out-begin");
        // The hour's soak on 7.x-rt: a message inside a line of the archive, another between two.
        parser.feed("QUJD[ 3632.300524] audit: kauditd hold queue overflow\r");
        parser.feed("REVG\r");
        parser.feed("[ 3632.300904] audit: kauditd hold queue overflow\r");
        parser.feed("R0hJ\r");
        assert_eq!(
            parser.feed("@@m@@ out-end"),
            Parsed::Event(Event::Out("QUJDREVGR0hJ".into()))
        );
        // A `[` that starts no stamp stays, so the archive fails to decode rather than lose it.
        assert_eq!(without_kernel_record("QU[JD"), "QU[JD");
        assert_eq!(without_kernel_record("QU[1.x] no"), "QU[1.x] no");
        assert_eq!(without_kernel_record("QU[   12.5]"), "QU");
    }

    #[test]
    fn parser_collects_the_hang_dump_verbatim() {
        let mut parser = ConsoleParser::new("@@m@@".into());
        assert_eq!(parser.feed("@@m@@ hang-begin"), Parsed::Payload);
        assert_eq!(
            parser.feed("pid 1 S (sleeping): /bin/sh /init"),
            Parsed::Payload
        );
        assert_eq!(parser.feed("    [<0>] do_wait+0x5c/0x100"), Parsed::Payload);
        assert_eq!(
            parser.feed("@@m@@ hang-end"),
            Parsed::Event(Event::Hung(
                "pid 1 S (sleeping): /bin/sh /init\n    [<0>] do_wait+0x5c/0x100\n".into()
            ))
        );
        assert_eq!(parser.feed("@@m@@ out-end"), Parsed::Noise);
    }

    #[test]
    fn parser_ignores_other_markers_and_bad_codes() {
        let mut parser = ConsoleParser::new("@@m@@".into());
        assert_eq!(parser.feed("@@other@@ exit=1"), Parsed::Noise);
        assert_eq!(parser.feed("@@m@@ exit=x"), Parsed::Noise);
        assert_eq!(parser.feed("@@m@@ out-end"), Parsed::Noise);
    }

    #[test]
    fn out_archive_round_trips() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(2);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, "./r.json", &b"{}"[..])
            .expect("append");
        let tar = builder.into_inner().expect("finish");
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gzip, &tar).expect("gzip");
        let b64 = base64::engine::general_purpose::STANDARD.encode(gzip.finish().expect("gzip"));
        let dir = tempfile::tempdir().expect("tempdir");
        unpack_out(&b64, dir.path()).expect("unpacks");
        assert_eq!(
            fs::read_to_string(dir.path().join("r.json")).expect("file"),
            "{}"
        );
    }
}
