//! The progress line for real: hotprof under `script` (a pseudo-terminal, as in an
//! interactive shell) redraws it in place; with stderr piped, as every other test runs it, or
//! on a dumb terminal, not one byte of it appears. Needs root and syscall tracepoints (this
//! machine's kernel has them); `script` is util-linux's.

use std::process::Command;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

const RECORD: &str = "--syscall getpid --duration 1500ms --no-calibrate";

/// Runs hotprof with `RECORD` on a pseudo-terminal with `TERM=term`; returns what the
/// terminal received (stdout and stderr together, as on a screen).
fn on_a_terminal(term: &str) -> String {
    let output = Command::new("script")
        .args(["--quiet", "--return", "--command"])
        .arg(format!("{} {RECORD}", env!("CARGO_BIN_EXE_hotprof")))
        .arg("/dev/null")
        .env("TERM", term)
        .output()
        .expect("script (util-linux) runs");
    assert!(
        output.status.success(),
        "hotprof under script failed: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn progress_is_drawn_on_a_terminal_and_only_there() {
    if !is_root() {
        eprintln!("SKIPPED: needs root to attach tracepoints");
        return;
    }
    let screen = on_a_terminal("xterm");
    let redraws = screen.matches("\rhotprof: recording ").count();
    // 1.5 s at one redraw per 250 ms.
    assert!(
        (4..=8).contains(&redraws),
        "{redraws} redraws on the terminal: {screen:?}"
    );
    assert!(
        screen.contains(" / 1.50 s [") && screen.contains(" left\x1b[K"),
        "{screen:?}"
    );
    // Erased before the report, which starts on a clean line.
    assert!(
        screen.contains("\r\x1b[Khotprof: 1 function, syscall mode"),
        "{screen:?}"
    );
    assert!(screen.contains("getpid (sys_enter_getpid)"), "{screen:?}");

    let dumb = on_a_terminal("dumb");
    assert!(
        !dumb.contains("recording") && !dumb.contains('\x1b'),
        "{dumb:?}"
    );

    let piped = Command::new(env!("CARGO_BIN_EXE_hotprof"))
        .args(RECORD.split(' '))
        .env("TERM", "xterm")
        .output()
        .expect("hotprof runs");
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(piped.status.success(), "{stderr}");
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        ["hotprof: 1 syscall(s) attached (syscall mode), for 1.50 s"],
        "piped stderr changed: {stderr:?}"
    );
}
