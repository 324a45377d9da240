//! Completions, man pages and `--help` examples, exercised with the real consumers: bash
//! sources the completion script and its completion function is driven the way readline
//! drives it; fish is asked for completions with `complete -C`; zsh checks the syntax;
//! groff/man render every page with warnings on. zsh, fish and groff/man-db are installed by
//! `cargo xtask setup`; a test whose tool is missing says SKIPPED instead of passing quietly.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clap::{CommandFactory as _, Parser as _};
use profiler::cli::Cli;

fn hotprof(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hotprof"))
        .args(args)
        .output()
        .expect("hotprof runs")
}

fn stdout_of(args: &[&str]) -> String {
    let output = hotprof(args);
    assert!(
        output.status.success(),
        "hotprof {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(tool))
        .find(|path| path.is_file())
}

fn scratch_dir(name: &str) -> PathBuf {
    // Cargo's per-target scratch space (target/tmp), not /tmp: nothing left behind there.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-docs-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Writes the `shell` completion script into a scratch file.
fn completion_file(shell: &str) -> PathBuf {
    let path = scratch_dir(shell).join(format!("hotprof.{shell}"));
    std::fs::write(&path, stdout_of(&["completions", shell])).expect("write script");
    path
}

/// What bash's completion function offers for the words typed so far (the last word is the
/// one being completed), as readline would call it after `<TAB>`.
fn bash_complete(script: &Path, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let line = words.join(" ");
    let program = format!(
        r#"source '{script}' || exit 90
complete -p hotprof >/dev/null || exit 91
COMP_WORDS=({words})
COMP_CWORD={cword}
COMP_LINE='{line}'
COMP_POINT=${{#COMP_LINE}}
COMP_TYPE=9
_hotprof hotprof '{cur}' '{prev}' || exit 92
printf '%s\n' "${{COMPREPLY[@]}}""#,
        script = script.display(),
        words = quoted.join(" "),
        cword = words.len() - 1,
        cur = words[words.len() - 1],
        prev = words[words.len() - 2],
    );
    let output = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "bash completion for {words:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completion_is_registered_and_completes_options_subcommands_and_values() {
    let script = completion_file("bash");
    let registered = Command::new("bash")
        .args([
            "--norc",
            "--noprofile",
            "-c",
            &format!("source '{}' && complete -p hotprof", script.display()),
        ])
        .output()
        .expect("bash runs");
    let registered = String::from_utf8_lossy(&registered.stdout);
    assert!(
        registered.contains("-F _hotprof") && registered.trim_end().ends_with(" hotprof"),
        "complete -p hotprof: {registered}"
    );

    let cases: &[(&[&str], &[&str])] = &[
        (&["hotprof", "--mo"], &["--mode"]),
        (&["hotprof", "--sys"], &["--syscall"]),
        (&["hotprof", "comp"], &["compare", "completions"]),
        (&["hotprof", "diff"], &["diff-flame"]),
        (&["hotprof", "--mode", ""], &["auto", "fentry", "kprobe"]),
        (&["hotprof", "--weight", ""], &["latency", "count"]),
        (&["hotprof", "completions", ""], &["bash", "zsh", "fish"]),
        (&["hotprof", "compare", "--fail"], &["--fail-if-slower"]),
        (&["hotprof", "sample", "--fr"], &["--freq"]),
        (&["hotprof", "man", "--o"], &["--out"]),
    ];
    for (words, expected) in cases {
        let offered = bash_complete(&script, words);
        for want in *expected {
            assert!(
                offered.iter().any(|o| o == want),
                "{words:?}<TAB> offers {offered:?}, not {want}"
            );
        }
        // A prefix completes to matching words only.
        let typed = words[words.len() - 1];
        assert!(
            offered.iter().all(|o| o.starts_with(typed)),
            "{words:?}<TAB> offers {offered:?}"
        );
    }
}

#[test]
fn fish_completes_from_its_script() {
    if which("fish").is_none() {
        eprintln!("SKIPPED: fish is not installed (Debian package `fish`)");
        return;
    }
    let script = completion_file("fish");
    let syntax = Command::new("fish")
        .arg("--no-execute")
        .arg(&script)
        .output()
        .expect("fish runs");
    assert!(
        syntax.status.success(),
        "fish -n: {}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    for (line, want) in [
        ("hotprof --mo", "--mode"),
        ("hotprof comp", "compare"),
        // fish 3.6 offers option values after `=` (after a space it lists files).
        ("hotprof --mode=", "--mode=kprobe"),
        ("hotprof compare --fa", "--fail-if-slower"),
    ] {
        let output = Command::new("fish")
            .args(["--no-config", "-c"])
            .arg(format!(
                "source '{}'; complete -C '{line}'",
                script.display()
            ))
            .output()
            .expect("fish runs");
        let offered = String::from_utf8_lossy(&output.stdout);
        assert!(
            offered.lines().any(|l| l.split('\t').next() == Some(want)),
            "fish: '{line}'<TAB> offers:\n{offered}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn zsh_elvish_and_powershell_scripts_are_generated() {
    // zsh can check the syntax; the other two have no interpreter on Debian 12, so check
    // that the script names the subcommands and options.
    let zsh = completion_file("zsh");
    if which("zsh").is_some() {
        let output = Command::new("zsh")
            .arg("-n")
            .arg(&zsh)
            .output()
            .expect("zsh runs");
        assert!(
            output.status.success(),
            "zsh -n: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    } else {
        eprintln!("SKIPPED: zsh -n: zsh is not installed (Debian package `zsh`)");
    }
    assert!(
        std::fs::read_to_string(&zsh)
            .unwrap()
            .starts_with("#compdef hotprof")
    );
    for shell in ["elvish", "powershell"] {
        let script = stdout_of(&["completions", shell]);
        for word in ["compare", "diff-flame", "--syscall", "--mode", "--fn"] {
            assert!(script.contains(word), "{shell} script lacks {word}");
        }
    }
}

/// `man` renders the page (through groff) with warnings on; returns the text and stderr.
fn render_man(page: &Path) -> (String, String) {
    let output = Command::new("man")
        .args(["--warnings=all", "-P", "cat", "-l"])
        .arg(page)
        .env("MANWIDTH", "200")
        .env("MAN_KEEP_FORMATTING", "0")
        .output()
        .expect("man runs");
    assert!(output.status.success(), "man -l {}", page.display());
    (
        without_overstrike(&String::from_utf8_lossy(&output.stdout)),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// grotty's bold and underline (`X\bX`, `_\bX`) reduced to the plain text, like `col -b`.
fn without_overstrike(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\u{8}' {
            plain.pop();
        } else {
            plain.push(c);
        }
    }
    plain
}

#[test]
fn man_pages_render_without_warnings_and_document_everything() {
    if which("man").is_none() || which("groff").is_none() {
        eprintln!("SKIPPED: man/groff not installed (Debian packages `man-db groff`)");
        return;
    }
    let dir = scratch_dir("man");
    let out = hotprof(&["man", "--out", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let subcommands: Vec<String> = Cli::command()
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name().to_owned())
        .collect();
    assert!(subcommands.len() >= 7, "{subcommands:?}");
    let mut expected: Vec<String> = vec!["hotprof.1".into()];
    expected.extend(subcommands.iter().map(|s| format!("hotprof-{s}.1")));
    let mut written: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    expected.sort();
    assert_eq!(written, expected);

    for name in &written {
        let page = dir.join(name);
        // groff's own check, every warning category on: no output at all.
        let groff = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(&page)
            .output()
            .expect("groff runs");
        assert!(
            groff.status.success() && groff.stderr.is_empty(),
            "groff warnings for {name}: {}",
            String::from_utf8_lossy(&groff.stderr)
        );
        let (text, warnings) = render_man(&page);
        assert!(
            warnings.trim().is_empty(),
            "man warnings for {name}: {warnings}"
        );
        for section in ["NAME", "SYNOPSIS", "OPTIONS"] {
            assert!(text.contains(section), "{name} lacks {section}:\n{text}");
        }
    }

    let (main, _) = render_man(&dir.join("hotprof.1"));
    for option in [
        "--fn",
        "--syscall",
        "--mode",
        "--duration",
        "--stacks",
        "--runs",
    ] {
        assert!(main.contains(option), "hotprof.1 lacks {option}");
    }
    for sub in &subcommands {
        assert!(
            main.contains(&format!("hotprof-{sub}(1)")),
            "hotprof.1 lacks {sub}"
        );
    }
    // Examples are kept one command per line, dashes and quotes as typed.
    assert!(main.contains("EXAMPLES"));
    assert!(
        main.lines()
            .any(|l| l.trim() == "sudo hotprof list 'copy_*_iter*'"),
        "{main}"
    );
    let (compare, _) = render_man(&dir.join("hotprof-compare.1"));
    assert!(compare.contains("--fail-if-slower") && compare.contains("EXAMPLES"));

    // Without --out: hotprof.1 on stdout, the same bytes.
    let stdout = hotprof(&["man"]);
    assert_eq!(stdout.stdout, std::fs::read(dir.join("hotprof.1")).unwrap());
}

#[test]
fn bad_arguments_are_one_line_errors() {
    for (args, expected) in [
        (&["completions", "tcsh"][..], "tcsh"),
        (&["completions"][..], "SHELL"),
        (
            &["man", "--out", "/proc/version/man1"][..],
            "/proc/version/man1",
        ),
    ] {
        let output = hotprof(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("hotprof: ") && stderr.contains(expected),
            "{args:?}: {stderr}"
        );
    }
}

/// Every `hotprof …` line in the examples of `--help` and of each subcommand's help parses
/// with the real argument definitions (shell redirections and pipes cut off).
#[test]
fn help_examples_parse_and_cover_the_seed_scenarios() {
    let help = stdout_of(&["--help"]);
    for seed in [
        "__audit_filter_op",
        "generic_perform_write",
        "copy_page_from_iter_atomic",
        "_copy_to_user",
        "filemap_read",
        "--syscall",
        "hackbench",
    ] {
        assert!(help.contains(seed), "hotprof --help lacks {seed}");
    }
    let mut checked = 0;
    let mut pages = vec![help];
    for sub in [
        "list",
        "compare",
        "diff-flame",
        "sample",
        "completions",
        "man",
    ] {
        let page = stdout_of(&[sub, "--help"]);
        assert!(
            page.contains("Examples:"),
            "hotprof {sub} --help has no examples"
        );
        pages.push(page);
    }
    for page in &pages {
        let examples = page.split("Examples:").nth(1).expect("an Examples section");
        for line in examples.lines().map(str::trim) {
            let Some(command) = line
                .strip_prefix("sudo ")
                .unwrap_or(line)
                .strip_prefix("hotprof ")
            else {
                continue;
            };
            let command = command.split(['|', '>', '&']).next().unwrap();
            let mut argv = vec!["hotprof".to_owned()];
            argv.extend(
                command
                    .split_whitespace()
                    .map(|w| w.trim_matches('\'').to_owned()),
            );
            if let Err(error) = Cli::try_parse_from(&argv) {
                panic!("example `{line}` does not parse: {error}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} example commands found");
}
