//! The `hotprof` binary: parse the command line, run, and turn any error into one line on
//! stderr with a non-zero exit code.

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
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => fail(&anyhow::Error::new(error).context("cannot start the async runtime")),
    };
    let result = runtime.block_on(async {
        match cli.command {
            Some(Command::List(args)) => profiler::list::run(&args.pattern),
            Some(Command::Sample(args)) => profiler::sample::run(&args).await,
            Some(Command::Serve(args)) => profiler::serve::run(args).await,
            Some(Command::Status) => profiler::status::run(),
            Some(Command::Compare(args)) => profiler::compare_cmd::run_compare(&args),
            Some(Command::DiffFlame(args)) => profiler::compare_cmd::run_diff_flame(&args),
            Some(Command::Completions(args)) => profiler::cli_docs::print_completions(args.shell)
                .map(|()| 0)
                .map_err(Into::into),
            Some(Command::Man(args)) => profiler::cli_docs::write_man_pages(args.out.as_deref())
                .map(|()| 0)
                .map_err(Into::into),
            Some(Command::Flamegraph(args)) => profiler::flame_cmd::run(&args),
            None => profiler::record::run(cli.record).await,
        }
    });
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
