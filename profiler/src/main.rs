//! The `hotprof` binary: parse the command line, run, and turn any error into one line on
//! stderr with a non-zero exit code.

use clap::Parser as _;
use profiler::cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => fail(&anyhow::Error::new(error).context("cannot start the async runtime")),
    };
    let result = runtime.block_on(async {
        match cli.command {
            Some(Command::List(args)) => profiler::list::run(&args.pattern),
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
    eprintln!("hotprof: error: {}", format!("{error:#}").replace('\n', " "));
    std::process::exit(1)
}
