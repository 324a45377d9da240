//! `hotprof man [--out DIR]`: man pages generated from the clap definitions, so they can never
//! disagree with `--help`. Each page is rendered into memory first: a half-written man page is
//! worse than none.

use std::path::{Path, PathBuf};

use clap_mangen::roff::{Roff, roman};

const EXAMPLES: &str = "\
Examples:
  sudo hotprof man --out /usr/local/share/man/man1 && man hotprof
  hotprof man | man -l -";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct ManArgs {
    /// Directory to write hotprof.1 and hotprof-SUBCOMMAND.1 into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ManError {
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
    #[error(transparent)]
    Stdout(#[from] super::StdoutError),
}

/// One man page: its file name (`hotprof.1`, `hotprof-compare.1`) and roff source.
pub struct ManPage {
    pub file_name: String,
    pub roff: Vec<u8>,
}

/// The page of `root` (hotprof's whole command line) followed by one page per (visible)
/// subcommand, in definition order.
pub fn man_pages(root: clap::Command) -> Vec<ManPage> {
    let mut root = root.disable_help_subcommand(true);
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

/// `hotprof man`: every page of `root` into `--out` (created if missing), or hotprof.1 to
/// stdout.
pub fn run(args: &ManArgs, root: clap::Command) -> anyhow::Result<i32> {
    write_pages(&man_pages(root), args.out.as_deref())?;
    Ok(0)
}

fn write_pages(pages: &[ManPage], out: Option<&Path>) -> Result<(), ManError> {
    let Some(dir) = out else {
        return Ok(super::write_stdout(&pages[0].roff)?);
    };
    std::fs::create_dir_all(dir).map_err(|source| ManError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    for page in pages {
        let path = dir.join(&page.file_name);
        std::fs::write(&path, &page.roff).map_err(|source| ManError::Write {
            path: path.clone(),
            source,
        })?;
        eprintln!("hotprof: wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn every_subcommand_gets_a_page_named_after_it() {
        let names: Vec<String> = man_pages(crate::cli::Cli::command())
            .into_iter()
            .map(|p| p.file_name)
            .collect();
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
}
