//! `hotprof top`: the probes of a recording as a live terminal table.
//!
//! Attaches exactly as the default command and `serve` do ([`crate::session::validate`],
//! [`crate::session::Run::start`]) and every refresh (`-d`, 1 s) reads the cumulative maps:
//! what changed since the previous read is the "last" columns, the read itself "since
//! start" ([`table`] keeps the rows, [`draw`] renders them). While it runs, the kernel's BPF
//! run-time statistics are on, so the header shows what hotprof's programs cost ([`cost`]);
//! they are restored on exit. The workload's output is kept off the screen (its last line is
//! shown), and the newest note on modules coming and going ([`ModuleWatcher`]). q, Ctrl-C,
//! SIGINT and SIGTERM end it: the terminal is restored (on an error or a
//! panic too), then the probes are detached.

mod cost;
mod draw;
mod input;
mod table;

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use self::cost::{OwnCost, StatsSwitch};
use self::draw::Header;
use self::input::{Keys, TerminalEvent};
use self::table::{Input, Outcome, Table};
use super::args::{DEFAULT_STACK_MAP_SIZE, ProbeArgs, worded};
use crate::model::Snapshot;
use crate::session::{self, ModuleWatcher, ProgramsRunTime, Run, SessionSpec, Signals};
use crate::units::parse_duration;
use crate::workload::WorkloadOutput;

const EXAMPLES: &str = "\
Examples:
  # getpid and read of every process, refreshed every second
  sudo hotprof top --syscall getpid,read
  # One workload's calls, refreshed every 2 s; the table stays up after it exits, until q
  sudo hotprof top -d 2s --syscall getpid -- syscall_lat 100000
  # A row per command name that reads or writes
  sudo hotprof top --syscall read,write --by comm";

/// Options of `hotprof top`: the refresh, and the probe options of the default command.
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct TopArgs {
    /// Time between refreshes (`500ms`, `2s`).
    #[arg(short = 'd', long = "delay", value_name = "DURATION", default_value = "1s",
          value_parser = parse_refresh)]
    pub delay: Duration,

    #[command(flatten)]
    pub probe: ProbeArgs,

    /// Workload to run and measure (only its process tree); the table stays up after it
    /// exits, until q.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Shortest refresh: each one reads every map.
const SHORTEST_REFRESH: Duration = Duration::from_millis(100);

fn parse_refresh(text: &str) -> Result<Duration, String> {
    let delay = parse_duration(text)?;
    if delay < SHORTEST_REFRESH {
        return Err(format!(
            "a refresh every {text} is too often: give at least 100ms"
        ));
    }
    Ok(delay)
}

impl TopArgs {
    /// The session this command runs: the default command's, without stacks, and without
    /// calibration (the header shows the programs' measured run time instead).
    fn session_spec(&self) -> anyhow::Result<SessionSpec> {
        let mut probe = self.probe.to_spec()?;
        probe.calibrate = false;
        Ok(SessionSpec {
            probe,
            command: self.command.clone(),
            stack_map_size: DEFAULT_STACK_MAP_SIZE,
            ..SessionSpec::default()
        })
    }
}

/// The terminal in raw mode on the alternate screen, restored when dropped (on an error
/// too); ratatui's panic hook restores it on a panic.
struct Screen(ratatui::DefaultTerminal);

impl Screen {
    fn enter() -> anyhow::Result<Self> {
        ratatui::try_init()
            .map(Screen)
            .context("cannot set up the terminal")
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = self.0.show_cursor();
        ratatui::restore();
    }
}

/// Each refresh's reads, and the previous ones they are the difference from.
struct Reads {
    started: Instant,
    previous: Snapshot,
    previous_at: Instant,
    previous_cost: ProgramsRunTime,
}

impl Reads {
    /// Reads the maps into `table` (the last refresh and since start) and, when given
    /// `own_cost`, the programs' run time into it.
    fn refresh(
        &mut self,
        run: &Run,
        table: &mut Table,
        own_cost: Option<&mut OwnCost>,
    ) -> anyhow::Result<()> {
        let now = run.snapshot().context("cannot read the maps")?;
        let at = Instant::now();
        let period = at - self.previous_at;
        let last = run.recording(&now.since(&self.previous), period);
        let total = run.recording(&now, at - self.started);
        table.update(&last, &total, period);
        if let Some(own_cost) = own_cost {
            let cost = run.programs_run_time()?;
            *own_cost = OwnCost::Measured {
                since_start: cost,
                last: cost.since(&self.previous_cost),
                period,
            };
            self.previous_cost = cost;
        }
        self.previous = now;
        self.previous_at = at;
        Ok(())
    }
}

/// Runs the view until q, Ctrl-C, SIGINT or SIGTERM; returns the exit code (the workload's,
/// when there is one and it exited, else 0).
pub async fn run(args: TopArgs) -> anyhow::Result<i32> {
    let spec = args.session_spec()?;
    if !std::io::stdout().is_terminal() {
        bail!(
            "hotprof top draws on a terminal and stdout is not one: run it in a terminal, or \
             use `hotprof --interval 1s` for reports as text"
        );
    }
    let filter = session::validate(&spec).map_err(worded)?;
    session::check_system(&args.command)?;
    let mut signals = Signals::new()?;
    // On from before the programs load, so that every run of theirs is counted.
    let stats = StatsSwitch::turn_on();
    let mut run = Run::start(&spec, &filter).map_err(worded)?;
    let mut workload =
        run.follow_with_output(&args.command, WorkloadOutput::Kept, &args.probe.filter.pids)?;
    let mut screen = Screen::enter()?;
    let mut keys = Keys::start();
    let started = Instant::now();
    workload.release()?;

    let attached = format!(
        "{}: {}",
        run.layout().attached(),
        run.layout().probed_names()
    );
    let mut table = Table::default();
    let mut own_cost = match &stats {
        StatsSwitch::On { .. } => OwnCost::Pending,
        StatsSwitch::Unavailable(why) => OwnCost::Unavailable(why.clone()),
    };
    let mut reads = Reads {
        started,
        previous: Snapshot::default(),
        previous_at: started,
        previous_cost: ProgramsRunTime::default(),
    };
    let mut exited: Option<i32> = None;
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + args.delay, args.delay);
    // Modules coming and going, as `record` and `serve` watch them; said on the screen.
    let mut modules = run.module_watcher(&spec.probe);
    let mut modules_ticker = tokio::time::interval(ModuleWatcher::PERIOD);
    let mut note: Option<String> = None;
    let command = args.command.join(" ");
    loop {
        let workload_line = workload.is_some().then(|| {
            let state = match exited {
                None => format!("running: {command}"),
                Some(code) => format!("{command} exited with code {code}"),
            };
            match workload.last_line() {
                Some(line) => format!("{state}; its last line: {line}"),
                None => state,
            }
        });
        let header = Header {
            attached: &attached,
            workload: workload_line,
            uptime: started.elapsed(),
            period: args.delay,
            cost: &own_cost,
            note: note.as_deref(),
        };
        screen
            .0
            .draw(|frame| draw::screen(frame, &header, &table))
            .context("cannot draw on the terminal")?;

        tokio::select! {
            signal = signals.recv() => {
                workload.signal(signal);
                break;
            }
            status = workload.exit(), if workload.running() => {
                exited = Some(status?);
            }
            event = keys.events.recv() => {
                match event {
                    Some(Ok(TerminalEvent::Key(key))) => {
                        if table.handle(key) == Outcome::Quit {
                            // What the key would have sent the workload outside raw mode.
                            let interrupt = key == Input::Interrupt;
                            workload.signal(if interrupt { libc::SIGINT } else { libc::SIGTERM });
                            break;
                        }
                    }
                    Some(Ok(TerminalEvent::Resized)) => {}
                    Some(Err(error)) => return Err(error).context("cannot read the terminal"),
                    None => bail!("the terminal's key reader stopped"),
                }
            }
            _ = modules_ticker.tick(), if modules.is_some() => {
                let notes = modules.as_mut().map(|m| m.poll(started.elapsed())).unwrap_or_default();
                if !notes.is_empty() {
                    note = Some(notes.join("; "));
                }
            }
            _ = ticker.tick() => {
                let costs_measured = matches!(stats, StatsSwitch::On { .. });
                reads.refresh(&run, &mut table, costs_measured.then_some(&mut own_cost))?;
            }
        }
    }

    drop(keys);
    drop(screen);
    // Detach every probe, then turn the statistics back off.
    run.finish()?;
    drop(stats);
    // Stopped while the workload ran: it was told to stop; reap it.
    if let Some(code) = workload.reap().await {
        exited = Some(code);
    }
    Ok(exited.unwrap_or(0))
}
