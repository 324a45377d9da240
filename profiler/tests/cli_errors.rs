//! Every bad input is one line on stderr and a non-zero exit: no panic, no backtrace, no
//! usage dump. Runs the real binary on this machine's kernel (root for the cases that get
//! past the privilege check; CI runs as root).

use std::process::Command;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs hotprof with `args`; asserts a single-line error containing `expected`.
fn assert_one_line_error(args: &[&str], expected: &str) {
    let output = Command::new(env!("CARGO_BIN_EXE_hotprof"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("hotprof runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!output.status.success(), "{args:?} succeeded:\n{stderr}");
    assert_eq!(
        lines.len(),
        1,
        "{args:?} printed {} lines:\n{stderr}",
        lines.len()
    );
    assert!(lines[0].starts_with("hotprof: "), "{args:?}: {stderr}");
    assert!(
        lines[0].contains(expected),
        "{args:?}: expected '{expected}' in: {stderr}"
    );
    assert!(
        lines[0].matches("(os error").count() <= 1,
        "{args:?}: the reason twice in: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert!(
        !stderr.contains("  "),
        "{args:?}: a run of spaces in: {stderr}"
    );
    assert!(output.stdout.is_empty(), "{args:?} printed to stdout");
}

#[test]
fn argument_errors_need_no_privileges() {
    let cases: &[(&[&str], &str)] = &[
        (&[], "nothing to measure"),
        (&["--fn", "vfs_read", "--duration", "5"], "missing unit"),
        (
            &["--fn", "vfs_read", "--duration", "0s"],
            "greater than zero",
        ),
        (
            &["--fn", "vfs_read", "--duration", "abc"],
            "invalid duration",
        ),
        (
            &["--fn", "vfs_read", "--interval", "-1s"],
            "a duration cannot be negative",
        ),
        (
            &["--fn", "vfs_read", "--duration", "-5s"],
            "a duration cannot be negative",
        ),
        (
            &["sample", "--duration", "-1s"],
            "a duration cannot be negative",
        ),
        (
            &["--fn", "vfs_read", "--min-latency", "10 parsecs"],
            "invalid duration",
        ),
        (&["--fn", "vfs_read", "--mode", "bogus"], "bogus"),
        (
            &["--fn", "vfs_read", "--stack-map-size", "0"],
            "--stack-map-size",
        ),
        (&["--fn", "vfs_read", "--bogus-flag"], "--bogus-flag"),
        (&["compare", "a.json,", "b.json"], "empty file name"),
        (
            &["--fn", "vfs_read", "--syscall", "getpid"],
            "cannot be combined",
        ),
        (
            &[
                "--syscall",
                "getpid",
                "--heatmap",
                "h.svg",
                "--runs",
                "2",
                "--",
                "true",
            ],
            "--heatmap draws one measurement over time",
        ),
        (
            &["heatmap", "/nonexistent/r.json", "-o", "h.svg"],
            "cannot read /nonexistent/r.json",
        ),
        (&["--fn", "vfs_read", "-p", "0"], "--pid"),
        (&["--fn", "vfs_read", "-p", "4000000000"], "no process"),
        (
            &["--fn", "vfs_read", "--comm", "a-command-name-too-long"],
            "1 to 15 bytes",
        ),
        (&["--fn", "vfs_read", "--cpu", "4096"], "--cpu 4096"),
        (
            &["--fn", "vfs_read", "--cgroup", "/nonexistent/cgroup"],
            "--cgroup",
        ),
        (
            &["--fn", "vfs_read", "--json", "/nonexistent/dir/out.json"],
            "does not exist",
        ),
        (&["--fn", "vfs_read", "-p", "1", "--", "true"], "not both"),
        (&["list"], "PATTERN"),
        // The reason once, not repeated by the error chain.
        (
            &["compare", "/nonexistent/a.json", "/nonexistent/b.json"],
            "cannot read /nonexistent/a.json: No such file or directory (os error 2)",
        ),
        (&["--fn", "vfs_read", "--by", "size"], "cpu, pid, tid, comm"),
        (
            &["--fn", "vfs_read", "--mode", "fsession", "--no-fsession"],
            "contradict",
        ),
        (
            &["--fn", "vfs_read", "--mode", "kprobe", "--tracing-multi"],
            "--tracing-multi is fentry mode's",
        ),
    ];
    for (args, expected) in cases {
        assert_one_line_error(args, expected);
    }
}

/// Each output option's unusable path is refused before the privilege check (so before any
/// probe), and the error names that option, not another: a run may write several files.
#[test]
fn unwritable_outputs_name_their_own_option() {
    let a_directory = std::env::temp_dir();
    let a_directory = a_directory.to_str().expect("a UTF-8 temp dir");
    for (option, file) in [
        ("--json", "x.json"),
        ("--flamegraph", "x.svg"),
        ("--folded", "x.folded"),
        ("--pprof", "x.pb.gz"),
        ("--html", "x.html"),
    ] {
        let missing = format!("/nonexistent/dir/{file}");
        assert_one_line_error(
            &["--fn", "vfs_read", option, &missing],
            &format!("{option} {missing}: directory /nonexistent/dir does not exist"),
        );
        assert_one_line_error(
            &["--fn", "vfs_read", option, a_directory],
            &format!("{option} {a_directory}: is a directory"),
        );
    }
}

/// `hotprof serve`: a malformed, busy or foreign address fails before anything is loaded.
#[test]
fn serve_errors_are_one_line() {
    assert_one_line_error(
        &["serve", "--listen", "localhost", "--syscall", "getpid"],
        "invalid socket address",
    );
    assert_one_line_error(&["serve", "--listen", "127.0.0.1:0"], "nothing to measure");
    if !is_root() {
        eprintln!("skipped the bind cases: needs root to get past the privilege check");
        return;
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    assert_one_line_error(
        &["serve", "--listen", &busy, "--syscall", "getpid"],
        &format!("cannot listen on {busy}: Address already in use"),
    );
    // TEST-NET-1 (RFC 5737): never an address of this machine. Binding sends nothing.
    assert_one_line_error(
        &["serve", "--listen", "192.0.2.1:9435", "--syscall", "getpid"],
        "cannot listen on 192.0.2.1:9435: Cannot assign requested address",
    );
    assert_one_line_error(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--syscall",
            "definitely_not_a_syscall",
        ],
        "unknown syscall",
    );
}

#[test]
fn kernel_side_errors_are_one_line() {
    if !is_root() {
        eprintln!("skipped: needs root to get past the privilege check");
        return;
    }
    let cases: &[(&[&str], &str)] = &[
        (
            &["--fn", "definitely_not_a_kernel_function_xyz"],
            "not found in /proc/kallsyms",
        ),
        (&["--fn", "vfs_reda"], "did you mean: vfs_read"),
        (&["--fn", "vfs_read.cold"], ".cold fragment"),
        (
            &["--fn", "zzzz_no_such_prefix_*"],
            "no kernel function matches",
        ),
        (
            &["--syscall", "definitely_not_a_syscall"],
            "unknown syscall",
        ),
        (
            &["--syscall", "getpid", "--", "/nonexistent/workload"],
            "cannot run workload",
        ),
        (
            &["list", "zzzz_no_such_prefix_*"],
            "no kernel function matches",
        ),
    ];
    for (args, expected) in cases {
        assert_one_line_error(args, expected);
    }
}

#[test]
fn unprivileged_users_are_told_which_capabilities() {
    if !is_root() {
        // Already unprivileged: run directly.
        assert_one_line_error(&["--fn", "vfs_read"], "CAP_BPF and CAP_PERFMON");
        return;
    }
    // Drop to nobody with no capabilities (util-linux setpriv).
    let output = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_hotprof"))
        .args(["--fn", "vfs_read"])
        .output()
        .expect("setpriv runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("needs root, or CAP_BPF and CAP_PERFMON"),
        "{stderr}"
    );
}

/// Recordings given to `hotprof compare` that are not usable: one line each, never a panic.
#[test]
fn bad_recordings_are_one_line_errors() {
    let dir = std::env::temp_dir().join(format!("hotprof-bad-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, data: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, data).unwrap();
        path.to_string_lossy().into_owned()
    };
    let good = write(
        "good.json",
        br#"{"schema_version":1,"tool":"t","kernel":"k","mode":"kprobe","duration_ns":1,"functions":[{"name":"f","symbol":"f","count":1,"sum_ns":100,"min_ns":100,"max_ns":100,"mean_ns":100.0,"stddev_ns":0.0,"p50_ns":100,"p90_ns":100,"p99_ns":100,"p999_ns":100,"sum_sq_ns2":10000.0,"buckets":[[100,101,1]]}],"losses":{"depth_exceeded":0,"task_map_full":0,"unmatched_returns":0,"orphaned_frames":0,"open_at_stop":0,"slot_missing":0}}"#,
    );
    let huge = dir.join("huge.json");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(300 << 20)
        .unwrap(); // sparse
    let cases: Vec<(String, &str)> = vec![
        (write("empty.json", b""), "is empty"),
        (
            write("truncated.json", br#"{"schema_version":1,"tool":"#),
            "not a hotprof recording",
        ),
        (
            write("version.json", br#"{"schema_version":7}"#),
            "schema version 7",
        ),
        (write("array.json", b"[1,2,3]"), "no schema_version"),
        (
            write("binary.json", b"\x00\xff\xfe garbage"),
            "not a hotprof recording",
        ),
        (
            write(
                "wrongtype.json",
                br#"{"schema_version":1,"functions":"nope"}"#,
            ),
            "not a hotprof recording",
        ),
        (
            huge.to_string_lossy().into_owned(),
            "larger than any recording",
        ),
        (
            dir.join("missing.json").to_string_lossy().into_owned(),
            "cannot read",
        ),
    ];
    for (path, expected) in &cases {
        assert_one_line_error(&["compare", &good, path], expected);
        assert_one_line_error(&["compare", path, &good], expected);
        // A bad file inside a side's comma-separated list is named just the same.
        assert_one_line_error(&["compare", &format!("{good},{path}"), &good], expected);
    }
    let not_folded = write("bad.folded", b"a;b;c notanumber\n");
    assert_one_line_error(
        &["diff-flame", &not_folded, &not_folded, "-o", "/tmp/x.svg"],
        "bad.folded",
    );
    let empty_folded = write("empty.folded", b"");
    let missing = dir.join("missing.folded").to_string_lossy().into_owned();
    let out = dir.join("out.svg").to_string_lossy().into_owned();
    for (input, expected) in [
        (&not_folded, "bad.folded"),
        (&empty_folded, "nothing to draw"),
        (&missing, "cannot read"),
    ] {
        assert_one_line_error(&["flamegraph", input, "-o", &out], expected);
    }
    let good_folded = write("good.folded", b"sh;vfs_write_[k] 100\nsh;vfs_read_[k] 50\n");
    assert_one_line_error(
        &["flamegraph", &good_folded, "-o", "/nonexistent-dir/x.svg"],
        "cannot write",
    );
    assert_one_line_error(&["flamegraph", &good_folded], "--output");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `hotprof flamegraph` draws a folded file: the root frame totals its weights.
#[test]
fn flamegraph_subcommand_draws_a_folded_file() {
    let dir = std::env::temp_dir().join(format!("hotprof-flame-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.folded");
    std::fs::write(
        &input,
        "sh;vfs_write_[k] 100\nsh;vfs_read_[k] 50\nsh;vfs_write_[k] 7\n",
    )
    .unwrap();
    let svg = dir.join("out.svg");
    let output = Command::new(env!("CARGO_BIN_EXE_hotprof"))
        .args(["flamegraph", "--unit", "calls", "--title", "t"])
        .arg(&input)
        .arg("-o")
        .arg(&svg)
        .output()
        .expect("hotprof runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("all (157 calls"), "root frame: {svg}");
    assert!(svg.contains("vfs_write (107 calls"), "vfs_write frame");
    std::fs::remove_dir_all(&dir).unwrap();
}
