//! The `hotprof` binary: parse the command line, run, and turn any error into one line on
//! stderr with a non-zero exit code.

#![deny(unsafe_code)]

use clap::Parser as _;
use profiler::cli::{Cli, Command};

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) if !error.use_stderr() => error.exit(), // --help, --version
        Err(error) => {
            // clap's own message is several lines (usage, hint); keep the one that matters.
            let text = error.to_string();
            let first: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.is_empty())
                .collect();
            eprintln!(
                "hotprof: {} (see hotprof --help)",
                first.join(" ").trim_start_matches("error: ")
            );
            std::process::exit(2);
        }
    };
    // Not for `serve`: a scraper that hangs up mid-answer must not end it.
    if !matches!(cli.command, Some(Command::Serve(_))) {
        profiler::sys::signal::default_sigpipe();
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => fail(&anyhow::Error::new(error).context("cannot start the async runtime")),
    };
    let result = runtime.block_on(cli.run());
    match result {
        Ok(code) => std::process::exit(code),
        Err(error) => fail(&error),
    }
}

fn fail(error: &anyhow::Error) -> ! {
    // `{:#}` joins the context chain with ": " on one line.
    eprintln!(
        "hotprof: error: {}",
        format!("{error:#}").replace('\n', " ")
    );
    std::process::exit(1)
}
