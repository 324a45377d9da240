//! `hotprof completions SHELL` and `hotprof man [--out DIR]`: shell completion scripts and
//! man pages generated from the clap definitions in [`crate::cli`], so they can never
//! disagree with `--help`.
//!
//! Both are rendered into memory first and then written: clap_complete panics when its
//! writer fails (e.g. `hotprof completions bash | head -1` closing the pipe), and a half
//! written man page is worse than none.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::CommandFactory as _;
use clap_complete::Shell;
use clap_mangen::roff::{Roff, roman};

use crate::cli::Cli;

/// The binary's name as shells and `man` know it.
const BIN: &str = "hotprof";

#[derive(Debug, thiserror::Error)]
pub enum DocsError {
    #[error("cannot create the man page directory {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write to stdout: {0}")]
    Stdout(std::io::Error),
}

/// The completion script for `shell`.
pub fn completion_script(shell: Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), BIN, &mut script);
    script
}

/// `hotprof completions SHELL`: the script on stdout.
pub fn print_completions(shell: Shell) -> Result<(), DocsError> {
    write_stdout(&completion_script(shell))
}

/// One man page: its file name (`hotprof.1`, `hotprof-compare.1`) and roff source.
pub struct ManPage {
    pub file_name: String,
    pub roff: Vec<u8>,
}

/// hotprof.1 followed by one page per (visible) subcommand, in definition order.
pub fn man_pages() -> Vec<ManPage> {
    let mut root = Cli::command().disable_help_subcommand(true);
    root.build();
    let mut pages = vec![man_page(root.clone())];
    pages.extend(
        root.get_subcommands()
            .filter(|sub| !sub.is_hide_set())
            .map(|sub| man_page(sub.clone())),
    );
    pages
}

/// clap_mangen's sections, except that `after_help` (our examples) becomes an EXAMPLES
/// section kept verbatim (clap_mangen would name it EXTRA and fill the lines into one
/// paragraph, running the commands together).
fn man_page(command: clap::Command) -> ManPage {
    let examples = command.get_after_help().map(|text| text.to_string());
    let has_options = command.get_arguments().any(|arg| !arg.is_hide_set());
    let has_subcommands = command.get_subcommands().any(|sub| !sub.is_hide_set());
    let has_version = command.get_version().is_some();
    // Subcommands have no version of their own; every page's footer names hotprof's. (No
    // date: clap_mangen drops an empty .TH argument, so the source lands in the date slot,
    // the footer's centre, which is where it is wanted anyway.)
    let man =
        clap_mangen::Man::new(command).source(format!("hotprof {}", env!("CARGO_PKG_VERSION")));
    let file_name = man.get_filename();
    let mut roff = Vec::new();
    // Writing into a Vec cannot fail.
    let render = |roff: &mut Vec<u8>| -> std::io::Result<()> {
        man.render_title(roff)?;
        man.render_name_section(roff)?;
        man.render_synopsis_section(roff)?;
        man.render_description_section(roff)?;
        if has_options {
            man.render_options_section(roff)?;
        }
        if has_subcommands {
            man.render_subcommands_section(roff)?;
        }
        if let Some(examples) = &examples {
            roff.extend_from_slice(examples_section(examples).as_bytes());
        }
        if has_version {
            man.render_version_section(roff)?;
        }
        Ok(())
    };
    render(&mut roff).expect("rendering into memory does not fail");
    ManPage { file_name, roff }
}

/// The EXAMPLES section: comment lines (`# …`) as plain paragraphs' worth of text, commands
/// in a no-fill block so each stays on its own line exactly as typed.
fn examples_section(after_help: &str) -> String {
    let mut roff = Roff::new();
    roff.control("SH", ["EXAMPLES"]);
    roff.control("nf", [] as [&str; 0]);
    let lines = after_help
        .lines()
        .skip_while(|line| line.trim().is_empty() || line.trim_end().ends_with("Examples:"));
    for line in lines {
        if line.trim().is_empty() {
            roff.control("sp", [] as [&str; 0]);
        } else {
            roff.text([roman(line.trim_start())]);
        }
    }
    roff.control("fi", [] as [&str; 0]);
    // `render` (unlike `to_roff`) maps ' to \*(Aq, so quoted globs copy-paste as typed.
    roff.render()
}

/// `hotprof man`: every page into `out` (created if missing), or hotprof.1 to stdout.
pub fn write_man_pages(out: Option<&Path>) -> Result<(), DocsError> {
    let pages = man_pages();
    let Some(dir) = out else {
        return write_stdout(&pages[0].roff);
    };
    std::fs::create_dir_all(dir).map_err(|source| DocsError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    for page in &pages {
        let path = dir.join(&page.file_name);
        std::fs::write(&path, &page.roff).map_err(|source| DocsError::Write {
            path: path.clone(),
            source,
        })?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    Ok(())
}

fn write_stdout(bytes: &[u8]) -> Result<(), DocsError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .map_err(DocsError::Stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subcommand_gets_a_page_named_after_it() {
        let names: Vec<String> = man_pages().into_iter().map(|p| p.file_name).collect();
        for expected in [
            "hotprof.1",
            "hotprof-list.1",
            "hotprof-compare.1",
            "hotprof-diff-flame.1",
            "hotprof-status.1",
            "hotprof-sample.1",
            "hotprof-completions.1",
            "hotprof-man.1",
        ] {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} in {names:?}"
            );
        }
    }

    #[test]
    fn examples_keep_one_command_per_line() {
        let section = examples_section("Examples:\n  # a comment\n  sudo hotprof --fn x\n\n  y\n");
        assert!(section.contains(".SH EXAMPLES\n.nf\n"), "{section}");
        assert!(
            section.contains("# a comment\nsudo hotprof \\-\\-fn x\n.sp\ny\n.fi\n"),
            "{section}"
        );
    }

    #[test]
    fn every_shell_gets_a_script_naming_the_subcommands() {
        for shell in [
            Shell::Bash,
            Shell::Zsh,
            Shell::Fish,
            Shell::Elvish,
            Shell::PowerShell,
        ] {
            let script = String::from_utf8(completion_script(shell)).unwrap();
            // fish spells options without dashes (`-l syscall`).
            for word in ["compare", "diff-flame", "syscall", "mode", "kprobe"] {
                assert!(script.contains(word), "{shell:?} script lacks {word}");
            }
        }
    }
}
