//! The VM scenarios, two guests at a time: each scenario runs in a child process of its own
//! ([`CheckProcess`]), so two scenarios never interleave their lines.
//!
//! Why two: most scenarios keep one vCPU of their 2-vCPU guest busy (one workload thread
//! under TCG), so a second guest takes the host's idle core. The scenarios whose guests keep
//! more than one core busy, or that count rates, run alone ([`Scenario::runs_alone`]), all
//! of them first ([`in_start_order`]).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::Args;

use super::child::{CheckProcess, exit_with, out_root};
use super::{Results, SOAKS, guest_died, instance, truncate};
use crate::kernels::Kernel;
use crate::scenarios::{Ctx, SCENARIOS, Scenario};
use crate::util::{fresh_dir, secs};

/// How often the runner looks for a child that ended.
const POLL: Duration = Duration::from_millis(200);

/// One scenario on one kernel, and how its guest runs.
#[derive(Args)]
pub struct ScenarioArgs {
    /// `scenario@kernel`, as `cargo xtask test --list` names it.
    pub instance: String,
    /// Seconds one guest run may take, boot included.
    #[arg(long, default_value_t = 180)]
    pub vm_timeout: u64,
    /// Stream the guest's output live.
    #[arg(long)]
    pub verbose: bool,
    /// Where to write the error of a failed run (its first line is the summary's note).
    #[arg(long)]
    pub error_file: Option<PathBuf>,
}

/// Runs `checks` (built guest binaries and fetched kernels assumed), `jobs` guests at a time,
/// and records a row for each. With `jobs` 1 (or `--verbose`) each child's output goes
/// straight to ours, live.
pub(super) fn run_scenarios(
    checks: &[(&'static Scenario, Kernel)],
    jobs: usize,
    vm_timeout: u64,
    verbose: bool,
    results: &mut Results,
) {
    let live = jobs <= 1 || verbose;
    let jobs = if live { 1 } else { jobs };
    let mut queue: VecDeque<_> = in_start_order(checks).into();
    let vm_timeout = vm_timeout.to_string();
    let mut running: Vec<CheckProcess> = Vec::new();
    while !queue.is_empty() || !running.is_empty() {
        // Start what may start: a scenario that runs alone waits for the others to end, and
        // nothing starts beside it.
        while running.len() < jobs
            && !running.iter().any(|run| run.alone)
            && let Some(&(scenario, kernel)) = queue.front()
        {
            // The soaks too: they count what happens per second.
            let alone =
                scenario.runs_alone() || SOAKS.iter().any(|soak| soak.name == scenario.name);
            if alone && !running.is_empty() {
                break;
            }
            queue.pop_front();
            let name = instance(scenario, kernel);
            let mut args = vec!["scenario", &name, "--vm-timeout", &vm_timeout];
            if verbose {
                args.push("--verbose");
            }
            match CheckProcess::start(&name, &args, alone, live) {
                Ok(run) => running.push(run),
                Err(err) => {
                    results.record(&name, Duration::ZERO, Err(err));
                }
            }
        }
        thread::sleep(POLL);
        let mut still = Vec::new();
        for mut run in running {
            match run.try_wait() {
                Ok(None) => still.push(run),
                Ok(Some(status)) => run.finish(Ok(status), live, results),
                Err(err) => run.finish(Err(err.into()), live, results),
            }
        }
        running = still;
    }
}

/// The order the scenarios start in: those that run alone first, while nothing else runs
/// (each one met later waits for the running ones to end, a guest slot idle meanwhile), the
/// peers' last of them (their layer is built in the background meanwhile); then the longest
/// of the rest, so that it does not end the run on its own; then the rest as listed.
fn in_start_order(checks: &[(&'static Scenario, Kernel)]) -> Vec<(&'static Scenario, Kernel)> {
    let rank = |scenario: &Scenario| match (scenario.runs_alone(), scenario.needs_peers()) {
        (true, false) => 0,
        (true, true) => 1,
        (false, _) if scenario.starts_early() => 2,
        (false, _) => 3,
    };
    let mut ordered = checks.to_vec();
    ordered.sort_by_key(|(scenario, _)| rank(scenario));
    ordered
}

/// `cargo xtask scenario NAME@KERNEL`: one scenario, in this process. A guest whose kernel
/// died under TCG (no fault of the code under test) is run once more. With `--error-file`
/// a failure is written there (the runner prints it), not returned.
pub fn run_one(args: &ScenarioArgs) -> Result<ExitCode> {
    let (scenario, kernel) = find(&args.instance)?;
    let name = instance(scenario, kernel);
    let mut ctx = Ctx::new(
        kernel,
        out_root().join(&name),
        Duration::from_secs(args.vm_timeout),
        args.verbose,
    )
    .on(scenario.arch);
    let result = (|| {
        fresh_dir(&out_root().join(&name))?;
        let mut result = (scenario.run)(&mut ctx);
        if let Err(err) = &result
            && let Some(died) = guest_died(err)
        {
            let why = died.0.lines().next().unwrap_or_default();
            println!(
                "  note: the guest kernel died while the scenario ran; running it once more ({})",
                truncate(why, 240)
            );
            result = (scenario.run)(&mut ctx);
        }
        if let Some(last) = ctx.last() {
            println!(
                "  {} ({:?}): boot {}, run {}",
                last.kernel_package,
                last.accel,
                secs(last.boot_time),
                secs(last.total_time)
            );
        }
        result.map_err(|err| match ctx.last() {
            Some(last) => anyhow!("{err:#}\n{}", last.transcript()),
            None => err,
        })
    })();
    exit_with(result, args.error_file.as_deref())
}

/// The scenario and kernel `name` (`scenario@kernel`) names.
fn find(name: &str) -> Result<(&'static Scenario, Kernel)> {
    SCENARIOS
        .iter()
        .chain(SOAKS)
        .flat_map(|scenario| {
            scenario
                .kernels
                .iter()
                .map(move |&kernel| (scenario, kernel))
        })
        .find(|(scenario, kernel)| instance(scenario, *kernel) == name)
        .with_context(|| format!("no scenario {name} (see `cargo xtask test --list`)"))
}
