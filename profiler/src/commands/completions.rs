//! `hotprof completions SHELL`: a shell completion script generated from the clap definitions,
//! so it can never disagree with `--help`. Rendered into memory first: clap_complete panics
//! when its writer fails (e.g. `hotprof completions bash | head -1` closing the pipe).

use clap_complete::Shell;

const EXAMPLES: &str = "\
Examples:
  hotprof completions bash > /etc/bash_completion.d/hotprof
  hotprof completions zsh > /usr/local/share/zsh/site-functions/_hotprof
  hotprof completions fish > ~/.config/fish/completions/hotprof.fish";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct CompletionsArgs {
    /// The shell to generate the completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The binary's name as shells know it.
const BIN: &str = "hotprof";

/// The completion script for `shell`, completing `command` (hotprof's whole command line).
pub fn completion_script(shell: Shell, mut command: clap::Command) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, BIN, &mut script);
    script
}

/// `hotprof completions SHELL`: the script on stdout.
pub fn run(args: &CompletionsArgs, command: clap::Command) -> anyhow::Result<i32> {
    super::write_stdout(&completion_script(args.shell, command))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn every_shell_gets_a_script_naming_the_subcommands() {
        for shell in [
            Shell::Bash,
            Shell::Zsh,
            Shell::Fish,
            Shell::Elvish,
            Shell::PowerShell,
        ] {
            let script =
                String::from_utf8(completion_script(shell, crate::cli::Cli::command())).unwrap();
            // fish spells options without dashes (`-l syscall`).
            for word in ["compare", "diff-flame", "syscall", "mode", "kprobe"] {
                assert!(script.contains(word), "{shell:?} script lacks {word}");
            }
        }
    }
}
