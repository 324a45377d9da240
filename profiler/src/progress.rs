//! Progress on stderr while hotprof attaches many probes (a 1000-function glob takes seconds,
//! minutes under emulation) or waits out `--duration`: one line, redrawn in place with `\r`.
//!
//! Only when stderr is a terminal that can erase a line: piped or redirected stderr (scripts,
//! CI, every test) gets not one byte more, so its output stays exactly as before. `TERM=dumb`
//! or no `TERM` also means quiet: such a terminal cannot redraw in place, and the test VM's
//! serial ports are ttys with `TERM=dumb` whose bytes end up in the tests' logs.

use std::io::{IsTerminal as _, Write};
use std::time::{Duration, Instant};

use crate::units::format_ns;

/// Redraws closer together than this are skipped (the last step is always drawn).
const MIN_REDRAW: Duration = Duration::from_millis(100);
/// Width of the `[####....]` bar.
const BAR_WIDTH: usize = 20;
/// Erase from the cursor to the end of the line (VT100; every terminal emulator has it).
const CLEAR_TO_EOL: &str = "\x1b[K";

/// A one-line progress display; does nothing at all when disabled.
pub struct Progress {
    out: Option<Box<dyn Write>>,
    last_draw: Option<Instant>,
    drawn: bool,
}

impl Progress {
    /// Draws on stderr if stderr is a terminal that can redraw a line, else a no-op.
    pub fn stderr() -> Self {
        let term = std::env::var("TERM").ok();
        let out: Option<Box<dyn Write>> = (std::io::stderr().is_terminal()
            && can_redraw(term.as_deref()))
        .then(|| Box::new(std::io::stderr()) as Box<dyn Write>);
        Self::to(out)
    }

    /// Draws into `out` (`None`: disabled).
    pub fn to(out: Option<Box<dyn Write>>) -> Self {
        Self {
            out,
            last_draw: None,
            drawn: false,
        }
    }

    /// Never draws (hotprof's own internal attaches, e.g. calibration).
    pub fn quiet() -> Self {
        Self::to(None)
    }

    pub fn is_enabled(&self) -> bool {
        self.out.is_some()
    }

    /// Step `done` of `total` in attaching `what` ("kprobes").
    pub fn attaching(&mut self, what: &str, done: usize, total: usize) {
        if self.out.is_some() && (done >= total || self.due()) {
            self.draw(&attach_line(what, done, total));
        }
    }

    /// `elapsed` of a `total`-long recording.
    pub fn waiting(&mut self, elapsed: Duration, total: Duration) {
        if self.out.is_some() {
            self.draw(&wait_line(elapsed, total));
        }
    }

    /// Erases the line, so what is printed next starts on a clean line.
    pub fn clear(&mut self) {
        if self.drawn {
            if let Some(out) = self.out.as_mut() {
                // Progress is best effort: a failed write to the terminal is not an error.
                let _ = write!(out, "\r{CLEAR_TO_EOL}").and_then(|()| out.flush());
            }
            self.drawn = false;
        }
    }

    fn due(&self) -> bool {
        self.last_draw.is_none_or(|at| at.elapsed() >= MIN_REDRAW)
    }

    fn draw(&mut self, line: &str) {
        if let Some(out) = self.out.as_mut() {
            let _ = write!(out, "\r{line}{CLEAR_TO_EOL}").and_then(|()| out.flush());
            self.drawn = true;
            self.last_draw = Some(Instant::now());
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Whether a terminal of type `term` understands `\r` + erase-to-end-of-line.
pub fn can_redraw(term: Option<&str>) -> bool {
    !matches!(term.map(str::trim), None | Some("") | Some("dumb"))
}

/// `hotprof: attaching kprobes  312/1000 [######..............]`
pub fn attach_line(what: &str, done: usize, total: usize) -> String {
    let width = total.to_string().len();
    format!(
        "hotprof: attaching {what} {done:>width$}/{total} {}",
        bar(fraction(done as f64, total as f64))
    )
}

/// `hotprof: recording 3.00 s / 10.0 s [######..............] 7.00 s left`
pub fn wait_line(elapsed: Duration, total: Duration) -> String {
    let elapsed = elapsed.min(total);
    format!(
        "hotprof: recording {} / {} {} {} left",
        format_ns(elapsed.as_nanos() as f64),
        format_ns(total.as_nanos() as f64),
        bar(fraction(elapsed.as_secs_f64(), total.as_secs_f64())),
        format_ns((total - elapsed).as_nanos() as f64),
    )
}

/// `done / total` clamped to 0..=1 (an empty total counts as finished).
fn fraction(done: f64, total: f64) -> f64 {
    if total <= 0.0 {
        1.0
    } else {
        (done / total).clamp(0.0, 1.0)
    }
}

fn bar(fraction: f64) -> String {
    let filled = ((fraction * BAR_WIDTH as f64).floor() as usize).min(BAR_WIDTH);
    format!("[{}{}]", "#".repeat(filled), ".".repeat(BAR_WIDTH - filled))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn attach_line_counts_and_fills_the_bar() {
        assert_eq!(
            attach_line("entry probes", 312, 1000),
            "hotprof: attaching entry probes  312/1000 [######..............]"
        );
        assert_eq!(
            attach_line("return probes", 1000, 1000),
            "hotprof: attaching return probes 1000/1000 [####################]"
        );
        assert_eq!(
            attach_line("fentry programs", 0, 0),
            "hotprof: attaching fentry programs 0/0 [####################]"
        );
    }

    #[test]
    fn wait_line_shows_elapsed_total_and_remaining() {
        let line = wait_line(Duration::from_secs(3), Duration::from_secs(10));
        assert!(line.starts_with("hotprof: recording 3"), "{line}");
        assert!(line.contains("/ 10"), "{line}");
        assert!(line.contains("[######..............]"), "{line}");
        assert!(line.ends_with(" left") && line.contains("] 7"), "{line}");
        // Past the deadline (a late timer tick): full bar, nothing negative left.
        let late = wait_line(Duration::from_secs(11), Duration::from_secs(10));
        assert!(late.contains("[####################] 0"), "{late}");
    }

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn redraws_in_place_throttles_and_clears() {
        let sink = Shared::default();
        let mut progress = Progress::to(Some(Box::new(sink.clone())));
        for done in 1..=500 {
            progress.attaching("entry probes", done, 500);
        }
        progress.clear();
        drop(progress);
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let draws = text.matches("attaching").count();
        // The first step, then at most one per 100 ms, and always the last one.
        assert!((2..=10).contains(&draws), "{draws} draws: {text:?}");
        assert!(text.starts_with("\rhotprof: attaching entry probes   1/500 "));
        assert!(text.contains("500/500"), "{text:?}");
        assert!(
            !text.contains('\n'),
            "a progress line never scrolls: {text:?}"
        );
        // clear() erased it once; Drop had nothing left to erase.
        assert!(
            text.ends_with(&format!("]{CLEAR_TO_EOL}\r{CLEAR_TO_EOL}")),
            "{text:?}"
        );
    }

    #[test]
    fn dumb_or_unknown_terminals_get_no_redraws() {
        assert!(can_redraw(Some("xterm-256color")));
        assert!(can_redraw(Some("screen")));
        assert!(!can_redraw(Some("dumb")));
        assert!(!can_redraw(Some("")));
        assert!(!can_redraw(None));
    }

    #[test]
    fn disabled_writes_nothing() {
        let mut progress = Progress::quiet();
        progress.attaching("entry probes", 1, 1);
        progress.waiting(Duration::from_secs(1), Duration::from_secs(2));
        progress.clear();
        assert!(!progress.is_enabled());
    }
}
