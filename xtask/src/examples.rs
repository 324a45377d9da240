//! Every example hotprof documents runs as written: the `Examples:` sections and inline
//! ``Example: `…` `` of `hotprof --help` and each subcommand's `--help`, the same in the man
//! pages `hotprof man` writes (what `cargo xtask dist` ships), and the shell blocks and inline
//! `` `sudo hotprof …` `` of README.md and docs/*.md.
//!
//! This module extracts them into [`Block`]s (commands that run in order in one directory, so
//! `compare base.json new.json` finds the files the commands before it wrote) and turns each
//! block into a shell script. [`plan`] decides per command: hotprof commands run (on the host,
//! or in the 6.12 guest when the block needs kprobes), `cargo xtask …` commands are only
//! parsed, a few installation steps are named in [`NOT_RUN`]; any other command fails the
//! check, so a new example cannot slip past unrun. What cannot be literal is replaced through
//! [`SUBSTITUTIONS`], an explicit table.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result, bail, ensure};
use clap::Parser as _;

/// Where an example was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    Help,
    Man,
    Docs,
}

/// Commands documented together, run in order in one fresh directory.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub source: Source,
    /// `hotprof compare --help`, `hotprof-compare.1`, `docs/usage.md:120`.
    pub origin: String,
    pub commands: Vec<String>,
}

/// The `Examples:` section of a `--help` text (or a man page's EXAMPLES section, unescaped)
/// as one block, and each inline ``Example: `…` `` as a block of its own.
pub fn from_help(source: Source, origin: &str, text: &str) -> Vec<Block> {
    let block = |commands: Vec<String>| Block {
        source,
        origin: origin.to_owned(),
        commands,
    };
    let mut blocks = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim_end().ends_with("Examples:") {
            let mut commands = Vec::new();
            while let Some(next) = lines.next_if(|l| l.is_empty() || l.starts_with(' ')) {
                let command = next.trim();
                // Prose after the examples (`Completions and man pages: …`), which the man
                // page's EXAMPLES section keeps unindented like the commands.
                let prose = command.starts_with(|c: char| c.is_uppercase());
                if !command.is_empty() && !command.starts_with('#') && !prose {
                    commands.push(command.to_owned());
                }
            }
            blocks.push(block(commands));
        }
    }
    // Inline examples: backquoted spans after "Example:" up to the end of the sentence.
    for paragraph in text.split("\n\n") {
        let paragraph = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut rest = paragraph.as_str();
        while let Some(at) = rest.find("Example: ") {
            rest = &rest[at + "Example: ".len()..];
            let sentence = rest.split("`. ").next().unwrap_or(rest);
            for span in backquoted(sentence) {
                blocks.push(block(vec![span.to_owned()]));
            }
        }
    }
    blocks
}

/// A man page's text with roff's escapes and requests undone, so [`from_help`] reads it:
/// `.SH EXAMPLES` becomes `Examples:` and its lines are indented as in `--help`.
pub fn man_to_text(roff: &str) -> String {
    let mut text = String::new();
    let mut in_examples = false;
    for line in roff.lines() {
        let line = line
            .replace("\\-", "-")
            .replace("\\*(Aq", "'")
            .replace("\\(aq", "'")
            .replace("\\fB", "")
            .replace("\\fI", "")
            .replace("\\fR", "")
            .replace("\\\\", "\\");
        if let Some(section) = line.strip_prefix(".SH ") {
            in_examples = section.trim() == "EXAMPLES";
            text.push_str(if in_examples { "Examples:\n" } else { "\n\n" });
        } else if line.starts_with(".sp") || line.starts_with(".TP") || line.starts_with(".PP") {
            text.push_str(if in_examples { "\n" } else { "\n\n" });
        } else if line.starts_with('.') {
            continue;
        } else if in_examples {
            text.push_str("  ");
            text.push_str(&line);
            text.push('\n');
        } else {
            text.push_str(&line);
            text.push('\n');
        }
    }
    text
}

/// A markdown file's shell examples: each fenced block (untagged, sh, shell, console, bash)
/// whose first line is a command ([`COMMAND_STARTS`]) is a block: its `$ ` lines if it has any (the rest is output), else every line that is
/// not a comment; each inline `` `sudo hotprof …` `` is a block of its own.
pub fn from_markdown(path: &str, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut fence: Option<(usize, Vec<&str>)> = None;
    let mut paragraph = Vec::new();
    let mut paragraph_start = 0;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if let Some(tag) = line.trim_start().strip_prefix("```") {
            inline(path, &mut paragraph, &mut blocks);
            match fence.take() {
                Some((start, lines)) => {
                    let commands = shell_commands(&lines);
                    if !commands.is_empty() {
                        blocks.push(Block {
                            source: Source::Docs,
                            origin: format!("{path}:{start}"),
                            commands,
                        });
                    }
                }
                None if ["", "sh", "shell", "console", "bash"].contains(&tag.trim()) => {
                    fence = Some((number, Vec::new()));
                }
                // Another language (yaml, json): skipped to its closing fence.
                None => fence = Some((number, vec!["```other"])),
            }
            continue;
        }
        match &mut fence {
            Some((_, lines)) => lines.push(line),
            None if line.trim().is_empty() => inline(path, &mut paragraph, &mut blocks),
            None => {
                if paragraph.is_empty() {
                    paragraph_start = number;
                }
                paragraph.push((paragraph_start, line));
            }
        }
    }
    inline(path, &mut paragraph, &mut blocks);
    blocks
}

/// The `` `sudo hotprof …` `` spans of a paragraph (its lines joined: a span may wrap).
fn inline(path: &str, paragraph: &mut Vec<(usize, &str)>, blocks: &mut Vec<Block>) {
    let Some(&(start, _)) = paragraph.first() else {
        return;
    };
    let text = paragraph
        .iter()
        .map(|(_, line)| line.trim())
        .collect::<Vec<_>>()
        .join(" ");
    paragraph.clear();
    for span in backquoted(&text) {
        if span.starts_with("sudo hotprof ") {
            blocks.push(Block {
                source: Source::Docs,
                origin: format!("{path}:{start}"),
                commands: vec![span.to_owned()],
            });
        }
    }
}

/// How the first line of a fenced shell block starts.
const COMMAND_STARTS: &[&str] = &["$ ", "sudo ", "hotprof ", "cargo ", "sha256sum ", "curl "];

fn shell_commands(lines: &[&str]) -> Vec<String> {
    // Untagged blocks also hold output and diagrams: a shell block starts with a command.
    let first = lines.iter().find(|line| !line.trim().is_empty());
    if !first.is_some_and(|line| COMMAND_STARTS.iter().any(|s| line.starts_with(s))) {
        return Vec::new();
    }
    let prompted = lines.iter().any(|line| line.starts_with("$ "));
    let mut commands: Vec<String> = Vec::new();
    let mut continued = false;
    for line in lines {
        let command = if prompted {
            match line.strip_prefix("$ ") {
                Some(command) => command,
                None if continued => line.trim(),
                None => continue,
            }
        } else {
            line.trim()
        };
        if continued {
            let last = commands
                .last_mut()
                .expect("a continued line follows a command");
            last.push(' ');
            last.push_str(command.trim_end_matches('\\').trim());
        } else if !command.is_empty() && !command.starts_with('#') {
            commands.push(command.trim_end_matches('\\').trim().to_owned());
        }
        continued = command.ends_with('\\');
    }
    commands
}

/// `line` up to a `#` that starts a word outside quotes (a shell comment), trimmed.
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if previous.is_whitespace() => return line[..at].trim_end(),
            _ => {}
        }
        previous = c;
    }
    line.trim_end()
}

fn backquoted(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Splits a shell command line into words (quotes and backslashes as `sh` reads them), up to
/// a `#` that starts a word (a comment).
pub fn shell_words(line: &str) -> Result<Vec<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => words.extend(word.take()),
            '#' if word.is_none() => break,
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => bail!("unterminated ' in {line}"),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => w.extend(chars.next()),
                        Some(c) => w.push(c),
                        None => bail!("unterminated \" in {line}"),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

/// What cannot run literally, and what runs in its place (applied to every example, in
/// order, on the text with `sudo ` dropped: the checks run as root).
pub const SUBSTITUTIONS: &[(&str, &str, &str)] = &[
    (
        "-p 1234",
        "-p $SLEEPER",
        "a process that exists: a `sleep` the script starts",
    ),
    (
        "hotprof compare a1.json,a2.json,a3.json b1.json,b2.json,b3.json",
        "for s in a1 a2 a3; do cp base.json $s.json; done && \
         for s in b1 b2 b3; do cp new.json $s.json; done && \
         hotprof compare a1.json,a2.json,a3.json b1.json,b2.json,b3.json",
        "interleaved recordings the example does not show: copies of its block's base and new",
    ),
    (
        "-- dd ...",
        "-- dd if=/dev/zero of=/dev/shm/x bs=4k count=1000",
        "`...`: the rest of a dd command line",
    ),
    (
        "-- hdparm -T /dev/sda",
        "-- dd if=big.file of=/dev/null bs=1M",
        "no hdparm nor disk where the checks run: dd reads a cached file, as hdparm -T does",
    ),
    (
        "-- make",
        "-- dd if=/dev/zero of=/dev/null bs=4k count=1000",
        "no make (nor a tree to build) where the checks run: dd writes and opens files",
    ),
    (
        "-- hackbench -g 10 -l 2000",
        "-- dd if=/dev/zero of=/dev/null bs=4k count=10000",
        "no hackbench: dd reads and writes",
    ),
    (
        "> /etc/bash_completion.d/hotprof",
        "> hotprof.bash",
        "system directories: a file in the example's directory",
    ),
    (
        "> /usr/local/share/zsh/site-functions/_hotprof",
        "> _hotprof",
        "system directories: a file in the example's directory",
    ),
    (
        "> ~/.config/fish/completions/hotprof.fish",
        "> hotprof.fish",
        "system directories: a file in the example's directory",
    ),
    (
        "--out /usr/local/share/man/man1 && man hotprof",
        "--out man/man1 && MANPATH=$PWD/man man hotprof",
        "system directories: man pages in the example's directory",
    ),
    (
        "hotprof man --out /usr/local/share/man/man1",
        "hotprof man --out man/man1",
        "system directories: man pages in the example's directory",
    ),
];

/// An inline example that is only options (`--filter errno==ENOENT`) runs in this command
/// line, in place of `{}`: a function whose calls both succeed and fail, under dd.
pub const FRAGMENT: &str = "hotprof --fn do_sys_openat2 {} -- sh -c \
     'dd if=/dev/zero of=/dev/null bs=64k count=100; cat /nonexistent 2>/dev/null; true'";

/// Examples that are not run, with why: no hotprof command, or one this project's x86
/// guests cannot run.
pub const NOT_RUN: &[(&str, &str)] = &[
    (
        "--counter ",
        "needs a PMU, which the x86 TCG guests lack: the arm64_pmu_counter scenario runs \
         `--counter` in the arm64 guest on qemu's emulated PMU",
    ),
    (
        "sha256sum -c SHA256SUMS",
        "verifies a download: dist writes and checks SHA256SUMS",
    ),
    (
        "apt install ./hotprof_",
        "installs the package: the host_deb check does",
    ),
    (
        "cargo build --release -p profiler",
        "a build: the checks build hotprof",
    ),
    (
        "install -m ",
        "installs files: the host_deb and systemd_unit checks do",
    ),
    (
        "systemctl ",
        "the exporter's unit: the systemd_unit check runs it",
    ),
    (
        "journalctl ",
        "the exporter's log: the systemd_unit check runs its unit",
    ),
];

/// What runs in every example directory before a block: the files examples read.
const FIXTURES: &str = "dd if=/dev/zero of=big.file bs=1M count=8 2>/dev/null";

/// What to do with one example command.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Run this shell text; `kprobes`: it needs a kernel with them (the guest);
    /// `until_stopped`: it runs until Ctrl-C (started in the background, stopped with SIGINT
    /// before the next such command and at the block's end).
    Run {
        shell: String,
        kprobes: bool,
        until_stopped: bool,
    },
    /// `cargo xtask …`: its arguments must parse.
    Parse(Vec<String>),
    NotRun(&'static str),
}

/// The step for `command`, or an error when this module does not know how to run it.
pub fn plan(command: &str) -> Result<Step> {
    if let Some((_, why)) = NOT_RUN.iter().find(|(text, _)| command.contains(text)) {
        return Ok(Step::NotRun(why));
    }
    let words = shell_words(command)?;
    if words.starts_with(&["cargo".into(), "xtask".into()]) {
        return Ok(Step::Parse(words[2..].to_vec()));
    }
    let mut literal = strip_comment(command).replace("sudo ", "");
    if literal.starts_with("--") {
        literal = FRAGMENT.replace("{}", &literal);
    }
    let mut shell = literal.clone();
    for (from, to, _) in SUBSTITUTIONS {
        shell = shell.replace(from, to);
    }
    // What runs where is decided on the example as written.
    let words = shell_words(&literal)?;
    let program = words.first().map(String::as_str);
    match program {
        Some("hotprof") => {}
        // Reads what the `serve` before it serves.
        Some("curl") if command.starts_with("curl -s http://127.0.0.1:9435/") => {}
        _ => bail!("no rule to run the example `{command}` (see xtask/src/examples.rs)"),
    }
    let options = words.iter().take_while(|w| *w != "--").collect::<Vec<_>>();
    let has = |flag: &str| options.iter().any(|w| *w == flag);
    let subcommand = options.get(1).map(|w| w.as_str()).unwrap_or_default();
    let records = ![
        "list",
        "compare",
        "diff-flame",
        "flamegraph",
        "heatmap",
        "doctor",
        "status",
    ]
    .contains(&subcommand)
        && !["completions", "man"].contains(&subcommand);
    // `list` too: its examples name functions of Debian's kernels (the guest's), which the
    // host's may lack or inline.
    let kprobes = ["--fn", "--callers", "--children", "--inside"]
        .iter()
        .any(|flag| has(flag))
        || subcommand == "list";
    let workload = words.len() > options.len();
    // `top` draws on a terminal: it runs in one (tmux) for 3 s, then q ends it.
    if subcommand == "top" {
        return Ok(Step::Run {
            shell: format!("in_terminal {shell}"),
            kprobes,
            until_stopped: false,
        });
    }
    let until_stopped = program == Some("hotprof")
        && (subcommand == "serve" || (records && !workload && !has("--duration")));
    Ok(Step::Run {
        shell,
        kprobes,
        until_stopped,
    })
}

/// Exit codes an example may end with besides 0: `--fail-if-slower` exits 3 when the two
/// recordings (of the same kernel here) happen to differ significantly.
fn allowed_exit(command: &str, code: i32) -> bool {
    code == 0 || (command.contains("--fail-if-slower") && code == 3)
}

/// `cargo xtask ARGS` parses with xtask's own command line.
fn parses(args: &[String]) -> Result<()> {
    crate::Cli::try_parse_from(std::iter::once("cargo xtask".to_owned()).chain(args.to_vec()))
        .map(drop)
        .map_err(|err| anyhow::anyhow!("{}", err.render().to_string().trim()))
}

/// Blocks with the same commands (a `--help` section and its man page's) once, the first.
pub fn unique(blocks: Vec<Block>) -> Vec<Block> {
    let mut seen = BTreeSet::new();
    blocks
        .into_iter()
        .filter(|block| seen.insert(block.commands.clone()))
        .collect()
}

/// Whether a block needs the guest: any of its commands needs kprobes.
pub fn needs_guest(block: &Block) -> Result<bool> {
    for command in &block.commands {
        if let Step::Run { kprobes: true, .. } = plan(command)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Checks the `cargo xtask` examples parse and returns the script that runs the other
/// blocks, each in `ROOT/N` (`ROOT` the script's first argument), printing
/// `@@ N.I RC` after the I-th command of block N; `wget` stands for `curl` where there is no
/// curl (the guest's busybox). `in_terminal CMD` runs CMD in a 160×40 tmux pane (a server of
/// its own, with this environment) for 3 s, presses q and returns its exit code (124 if it
/// did not exit within 10 s of the q). A command that runs until stopped starts in the
/// background and gets 3 s once it has said `attached` (up to 2 min: attaching takes seconds
/// under TCG, and a fixed wait once stopped `serve` while it attached); its stderr comes
/// after it stops.
pub fn script(blocks: &[Block], root: &str) -> Result<String> {
    let mut script = format!("BGERR={root}/bg.err\n");
    script.push_str(
        "sleep 1000 & SLEEPER=$!\n\
         now() { read U _ < /proc/uptime; echo \"${U%.*}${U#*.}\"; }\n\
         command -v curl >/dev/null || curl() { wget -qO- \"$2\"; }\n\
         stop() { [ -n \"$BG\" ] && kill -INT $BG && wait $BG; echo \"@@ $BGID $?\"; BG=; \
         cat \"$BGERR\" >&2; }\n\
         attached() { i=0; while [ $i -lt 1200 ] && kill -0 $BG 2>/dev/null \
         && ! grep -q attached \"$BGERR\"; do sleep 0.1; i=$((i+1)); done; }\n\
         in_terminal() { T=\"tmux -L hotprof-examples-$$\"; rm -f .rc; \
         $T new-session -d -x 160 -y 40 \"$*; echo \\$? > .rc\" || return 125; sleep 3; \
         $T send-keys q; i=0; while [ ! -f .rc ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; \
         $T kill-server 2>/dev/null; [ -f .rc ] || return 124; return $(cat .rc); }\n",
    );
    for (n, block) in blocks.iter().enumerate() {
        script.push_str(&format!(
            "mkdir -p {root}/{n} && cd {root}/{n} && {FIXTURES}\nBG=\n"
        ));
        for (i, command) in block.commands.iter().enumerate() {
            match plan(command)? {
                Step::NotRun(_) => {}
                Step::Parse(args) => parses(&args)
                    .with_context(|| format!("{}: `{command}` does not parse", block.origin))?,
                Step::Run {
                    shell,
                    until_stopped: true,
                    ..
                } => script.push_str(&format!(
                    "[ -n \"$BG\" ] && stop\necho '@> {n}.{i}'\n{shell} 2>\"$BGERR\" & BG=$! BGID={n}.{i}\n\
                     attached\nsleep 3\n"
                )),
                // `@@ N.I RC CENTISECONDS`: its exit code and how long it took.
                Step::Run { shell, .. } => script.push_str(&format!(
                    "echo '@> {n}.{i}'\nT0=$(now)\n{shell}\n\
                     rc=$?; echo \"@@ {n}.{i} $rc $(( $(now) - T0 ))\"\n"
                )),
            }
        }
        // The guest's 1 GB of RAM holds every file: none outlives its block.
        script.push_str(&format!(
            "[ -n \"$BG\" ] && stop\ncd / && rm -rf {root}/{n} /dev/shm/x\n"
        ));
    }
    script.push_str("kill $SLEEPER\n");
    Ok(script)
}

/// Checks every `@@ N.I RC` the script printed against the blocks: each command that ran
/// exited as allowed.
pub fn check_output(blocks: &[Block], output: &str) -> Result<usize> {
    let mut ran = 0;
    let mut failed = Vec::new();
    for (n, block) in blocks.iter().enumerate() {
        for (i, command) in block.commands.iter().enumerate() {
            if !matches!(plan(command)?, Step::Run { .. }) {
                continue;
            }
            let marker = format!("@@ {n}.{i} ");
            let code = output
                .lines()
                .find_map(|line| line.strip_prefix(&marker))
                .and_then(|rest| rest.split_whitespace().next()?.parse::<i32>().ok());
            match code {
                Some(code) if allowed_exit(command, code) => ran += 1,
                Some(code) => failed.push(format!("{}: `{command}` exited {code}", block.origin)),
                None => failed.push(format!("{}: `{command}` did not finish", block.origin)),
            }
        }
    }
    ensure!(failed.is_empty(), "{}", failed.join("\n"));
    Ok(ran)
}

/// The `count` commands that took longest, slowest first, from the script's `@@ N.I RC CS`
/// lines: `12.3 s  docs/usage.md:40: hotprof …`. Where the suite's time goes.
pub fn slowest(blocks: &[Block], output: &str, count: usize) -> Vec<String> {
    let mut timed: Vec<(u64, String)> = output
        .lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("@@ ")?.split_whitespace();
            let (n, i) = words.next()?.split_once('.')?;
            let centiseconds: u64 = words.nth(1)?.parse().ok()?;
            let block = blocks.get(n.parse::<usize>().ok()?)?;
            let command = block.commands.get(i.parse::<usize>().ok()?)?;
            Some((centiseconds, format!("{}: {command}", block.origin)))
        })
        .collect();
    timed.sort_by_key(|(centiseconds, _)| std::cmp::Reverse(*centiseconds));
    timed
        .into_iter()
        .take(count)
        .map(|(cs, what)| format!("{:.1} s  {what}", cs as f64 / 100.0))
        .collect()
}

/// The host's part: every block that needs no kprobes, run by `sh` in a fresh directory with
/// the debug builds of hotprof and the workloads first in PATH.
pub fn host_examples() -> Result<()> {
    crate::util::run(&mut crate::host::debug_build())?;
    let bin = crate::util::target_dir().join("debug");
    let all = all_blocks(&bin.join("hotprof"), &crate::util::workspace_root())?;
    println!("  {}", summary(&all)?);
    let blocks = unique(all);
    let mine = select(&blocks, false)?;
    print_plan(&mine, "host")?;
    let dir = tempfile::tempdir()?;
    let script = script(&mine, &dir.path().display().to_string())?;
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("exec 2>&1\n{script}")])
        .env("PATH", path)
        .current_dir(dir.path())
        .output()
        .context("cannot run sh")?;
    let output = String::from_utf8_lossy(&out.stdout);
    let ran = check_output(&mine, &output).map_err(|err| anyhow::anyhow!("{err}\n{output}"))?;
    println!("  host: {ran} commands in {} blocks", mine.len());
    Ok(())
}

/// One line per command of `blocks`: where it came from and where it runs.
pub fn print_plan(blocks: &[Block], place: &str) -> Result<()> {
    for block in blocks {
        for command in &block.commands {
            let what = match plan(command)? {
                Step::Run { .. } => place,
                Step::Parse(_) => "parsed",
                Step::NotRun(_) => "not run",
            };
            println!("  [{what}] {}: {command}", block.origin);
        }
    }
    Ok(())
}

/// The blocks that run on the host (`guest` false) or in the guest.
pub fn select(blocks: &[Block], guest: bool) -> Result<Vec<Block>> {
    let mut mine = Vec::new();
    for block in blocks {
        if needs_guest(block)? == guest {
            mine.push(block.clone());
        }
    }
    Ok(mine)
}

/// How many commands each source has, and what becomes of them.
pub fn summary(blocks: &[Block]) -> Result<String> {
    let mut counts = std::collections::BTreeMap::<(Source, &str), usize>::new();
    for block in blocks {
        let guest = needs_guest(block)?;
        for command in &block.commands {
            let kind = match plan(command)? {
                Step::Run { .. } if guest => "guest",
                Step::Run { .. } => "host",
                Step::Parse(_) => "parsed",
                Step::NotRun(_) => "not run",
            };
            *counts.entry((block.source, kind)).or_default() += 1;
        }
    }
    Ok(counts
        .iter()
        .map(|((source, kind), n)| format!("{source:?} {kind} {n}"))
        .collect::<Vec<_>>()
        .join(", "))
}

/// Every block: `--help` of hotprof and each subcommand, its man pages, README and docs.
pub fn all_blocks(hotprof: &Path, repo: &Path) -> Result<Vec<Block>> {
    let help = |args: &[&str]| -> Result<String> {
        crate::util::stdout_of(std::process::Command::new(hotprof).args(args))
    };
    let root_help = help(&["--help"])?;
    let mut blocks = from_help(Source::Help, "hotprof --help", &root_help);
    let subcommands = root_help
        .split("Commands:\n")
        .nth(1)
        .context("hotprof --help lists no commands")?
        .lines()
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect::<Vec<_>>();
    for sub in &subcommands {
        let text = help(&[sub, "--help"])?;
        blocks.extend(from_help(
            Source::Help,
            &format!("hotprof {sub} --help"),
            &text,
        ));
    }
    let man_dir = tempfile::tempdir()?;
    help(&["man", "--out", &man_dir.path().display().to_string()])?;
    let mut pages = std::fs::read_dir(man_dir.path())?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()?;
    pages.sort();
    ensure!(
        pages.len() > subcommands.len(),
        "hotprof man wrote {} pages",
        pages.len()
    );
    for page in pages {
        let roff = std::fs::read_to_string(&page)?;
        let name = page.file_name().unwrap_or_default().to_string_lossy();
        blocks.extend(from_help(Source::Man, &name, &man_to_text(&roff)));
    }
    let mut docs = vec![repo.join("README.md")];
    let mut more = std::fs::read_dir(repo.join("docs"))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()?;
    more.sort();
    docs.extend(
        more.into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    for doc in docs {
        let text = std::fs::read_to_string(&doc)?;
        let name = doc.strip_prefix(repo).unwrap_or(&doc).display().to_string();
        blocks.extend(from_markdown(&name, &text));
    }
    Ok(blocks
        .into_iter()
        .filter(|b| !b.commands.is_empty())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELP: &str = "\
Options:
      --by <KEY>
          Also break calls down. Example: `hotprof --fn vfs_write --by arg2:log2 -- dd
          if=/dev/zero of=/dev/null bs=4k count=10`. More text `not this`.

Examples:
  # a comment
  sudo hotprof --fn x -- syscall_lat 10

  hotprof compare a.json b.json
";

    #[test]
    fn help_sections_and_inline_examples() {
        let blocks = from_help(Source::Help, "h", HELP);
        let commands: Vec<_> = blocks.iter().map(|b| b.commands.clone()).collect();
        assert_eq!(
            commands,
            [
                vec![
                    "sudo hotprof --fn x -- syscall_lat 10".to_owned(),
                    "hotprof compare a.json b.json".to_owned()
                ],
                vec![
                    "hotprof --fn vfs_write --by arg2:log2 -- dd if=/dev/zero of=/dev/null \
                     bs=4k count=10"
                        .to_owned()
                ],
            ]
        );
    }

    #[test]
    fn man_examples_read_like_help() {
        let roff = ".SH NAME\nhotprof\n.SH EXAMPLES\n.nf\n# c\nsudo hotprof list \\*(Aqvfs_*\\*(Aq\n\
                    .sp\nhotprof \\-\\-version\n.fi\n";
        let blocks = from_help(Source::Man, "m", &man_to_text(roff));
        assert_eq!(
            blocks[0].commands,
            ["sudo hotprof list 'vfs_*'", "hotprof --version"]
        );
    }

    #[test]
    fn markdown_blocks_prompts_and_inline() {
        let md = "Run `sudo hotprof\ndoctor` first, `hotprof serve` later.\n\n\
                  ```\nsudo hotprof --fn a   # a comment\n  # more comment\nhotprof compare \\\n  a b\n```\n\
                  ```console\n$ cargo xtask vm -- 'hotprof list x'\noutput line\n```\n\
                  ```yaml\n- a: b\n```\n";
        let blocks = from_markdown("d.md", md);
        let commands: Vec<_> = blocks.iter().map(|b| b.commands.clone()).collect();
        assert_eq!(
            commands,
            [
                vec!["sudo hotprof doctor".to_owned()],
                vec![
                    "sudo hotprof --fn a   # a comment".to_owned(),
                    "hotprof compare a b".to_owned()
                ],
                vec!["cargo xtask vm -- 'hotprof list x'".to_owned()],
            ]
        );
        assert_eq!(blocks[1].origin, "d.md:4");
    }

    #[test]
    fn plans() {
        assert_eq!(
            plan("sudo hotprof --fn f -p 1234   # c").unwrap(),
            Step::Run {
                shell: "hotprof --fn f -p $SLEEPER".into(),
                kprobes: true,
                until_stopped: true
            }
        );
        assert_eq!(
            plan("hotprof compare a b").unwrap(),
            Step::Run {
                shell: "hotprof compare a b".into(),
                kprobes: false,
                until_stopped: false
            }
        );
        assert_eq!(
            plan("sudo hotprof top --syscall getpid -- syscall_lat 10").unwrap(),
            Step::Run {
                shell: "in_terminal hotprof top --syscall getpid -- syscall_lat 10".into(),
                kprobes: false,
                until_stopped: false
            }
        );
        assert_eq!(
            plan("cargo xtask vm -- 'a b' # c").unwrap(),
            Step::Parse(vec!["vm".into(), "--".into(), "a b".into()])
        );
        assert!(plan("rm -rf /").is_err());
        assert!(parses(&["vm".into(), "--".into(), "a b".into()]).is_ok());
        assert!(parses(&["vm".into(), "--no-such-flag".into()]).is_err());
    }

    #[test]
    fn exit_codes_are_checked_per_command() {
        let blocks = [Block {
            source: Source::Docs,
            origin: "d.md:1".into(),
            commands: vec![
                "hotprof compare a b --fail-if-slower 5".into(),
                "cargo xtask test --list".into(),
                "hotprof doctor".into(),
            ],
        }];
        assert_eq!(
            check_output(&blocks, "x\n@@ 0.0 3 120\n@@ 0.2 0\n").unwrap(),
            2
        );
        assert_eq!(
            slowest(&blocks, "@@ 0.0 3 120\n@@ 0.2 0 1234\n@@ 0.1 0\n", 5).len(),
            2
        );
        let err = check_output(&blocks, "@@ 0.0 1\n").unwrap_err().to_string();
        assert!(
            err.contains("`hotprof compare a b --fail-if-slower 5` exited 1"),
            "{err}"
        );
        assert!(err.contains("`hotprof doctor` did not finish"), "{err}");
        let script = script(&blocks, "/r").unwrap();
        assert!(
            script.contains("hotprof doctor\nrc=$?; echo \"@@ 0.2 $rc $(( $(now) - T0 ))\""),
            "{script}"
        );
    }

    #[test]
    fn words() {
        assert_eq!(
            shell_words(r#"a 'b c' "d\"e" f\ g # h"#).unwrap(),
            ["a", "b c", "d\"e", "f g"]
        );
    }
}
