//! VM scenarios: end-to-end tests of `hotprof` on real kernels.
//!
//! Each scenario is one function that boots a guest with a shell script (`ctx.run`) and checks
//! the exit code, the output and the JSON files the script left in `/out`, returning an error
//! that says what was expected. The test runner adds the guest's full output to any failure,
//! so a scenario only needs to say what was wrong.
//!
//! To add one: write `fn my_case(ctx: &mut Ctx) -> Result<()>` and list it in [`SCENARIOS`]
//! with the kernels it applies to. `cargo xtask test --only my_case` runs just that one.
//!
//! The contract tested here: `hotprof --fn FUNC... [--mode auto|fentry|kprobe] [--duration D]
//! [--json FILE] [-- CMD ARGS...]`, whose `--json` report is
//! `{"schema_version":1,"kernel":…,"mode":…,"functions":[{"name":…,"count":N,"sum_ns":…,…}]}`,
//! and workloads whose last stdout line is `name: key=value ...`.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::kernels::Kernel;
use crate::util::fresh_dir;
use crate::vm::{self, VmOutcome, VmRun};

/// A named end-to-end test and the kernels it runs on.
pub struct Scenario {
    pub name: &'static str,
    pub kernels: &'static [Kernel],
    pub run: fn(&mut Ctx) -> Result<()>,
}

const BOTH: &[Kernel] = &Kernel::ALL;

/// Every scenario, in the order `cargo xtask test` runs them.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "getpid_exact",
        kernels: BOTH,
        run: getpid_exact,
    },
    Scenario {
        name: "audit_filter_fires",
        kernels: &[Kernel::V6_12],
        run: audit_filter_fires,
    },
    Scenario {
        name: "audit_filter_missing",
        kernels: &[Kernel::V6_1],
        run: audit_filter_missing,
    },
];

/// With a kprobe on getpid's syscall entry and the workload as the only process counted, the
/// count is exact: every one of syscall_lat's calls and nothing else.
fn getpid_exact(ctx: &mut Ctx) -> Result<()> {
    const CALLS: u64 = 10_000;
    let guest = ctx.run(&format!(
        "hotprof --fn __x64_sys_getpid --mode kprobe --json /out/r.json -- syscall_lat {CALLS}"
    ))?;
    guest.expect_exit(0)?;
    let reported = guest.workload("syscall_lat")?.u64("calls")?;
    let count = guest
        .report("r.json")?
        .function("__x64_sys_getpid")?
        .u64("count")?;
    ensure!(
        count == CALLS,
        "hotprof counted {count} __x64_sys_getpid calls, want exactly {CALLS}"
    );
    ensure!(
        count == reported,
        "hotprof counted {count} calls but syscall_lat reports calls={reported}"
    );
    Ok(())
}

/// 6.12 evaluates each audit rule with `__audit_filter_op`, so three rules and 10000 syscalls
/// give at least 10000 calls.
fn audit_filter_fires(ctx: &mut Ctx) -> Result<()> {
    let guest = ctx.run(
        "audit_rules enable && audit_rules add 3 && \
         hotprof --fn __audit_filter_op --json /out/r.json -- syscall_lat 10000",
    )?;
    guest.expect_exit(0)?;
    let count = guest
        .report("r.json")?
        .function("__audit_filter_op")?
        .u64("count")?;
    ensure!(
        count >= 10_000,
        "hotprof counted {count} __audit_filter_op calls, want at least 10000"
    );
    Ok(())
}

/// 6.1 has no `__audit_filter_op`: hotprof must fail and say so once, not spew.
fn audit_filter_missing(ctx: &mut Ctx) -> Result<()> {
    let guest = ctx.run("hotprof --fn __audit_filter_op --duration 1s")?;
    guest.expect_failure()?;
    let lines = guest.lines_containing("not found");
    ensure!(
        lines.len() == 1,
        "want exactly one line saying \"not found\", got {}: {lines:?}",
        lines.len()
    );
    Ok(())
}

/// What a scenario runs guests with.
pub struct Ctx {
    kernel: Kernel,
    out_root: PathBuf,
    timeout: Duration,
    echo: bool,
    runs: usize,
    last: Option<VmOutcome>,
}

impl Ctx {
    /// `out_root` receives one directory per guest run.
    pub fn new(kernel: Kernel, out_root: PathBuf, timeout: Duration, echo: bool) -> Self {
        Self {
            kernel,
            out_root,
            timeout,
            echo,
            runs: 0,
            last: None,
        }
    }

    /// The kernel this instance of the scenario runs on.
    #[allow(
        dead_code,
        reason = "for scenarios whose expectations differ by kernel"
    )]
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Boots a fresh guest and runs `script` in it (busybox `sh`, cwd `/out`).
    pub fn run(&mut self, script: &str) -> Result<Guest> {
        self.runs += 1;
        let out_dir = self.out_root.join(format!("run{}", self.runs));
        fresh_dir(&out_dir)?;
        let run = VmRun {
            timeout: self.timeout,
            echo: self.echo,
            ..VmRun::new(self.kernel, script, out_dir)
        };
        let outcome = vm::run(&run)?;
        self.last = Some(outcome.clone());
        Ok(Guest { outcome })
    }

    /// The most recent guest run, for failure reports.
    pub fn last(&self) -> Option<&VmOutcome> {
        self.last.as_ref()
    }
}

/// A finished guest run, with assertions that explain themselves.
pub struct Guest {
    pub outcome: VmOutcome,
}

impl Guest {
    pub fn expect_exit(&self, want: i32) -> Result<()> {
        let got = self.outcome.exit_code;
        ensure!(got == want, "the guest command exited {got}, want {want}");
        Ok(())
    }

    pub fn expect_failure(&self) -> Result<()> {
        ensure!(
            self.outcome.exit_code != 0,
            "the guest command exited 0, want a failure"
        );
        Ok(())
    }

    /// Lines of stdout and stderr that contain `needle`.
    pub fn lines_containing(&self, needle: &str) -> Vec<String> {
        self.outcome
            .stdout
            .lines()
            .chain(self.outcome.stderr.lines())
            .filter(|line| line.contains(needle))
            .map(str::to_owned)
            .collect()
    }

    /// A JSON file the command wrote under `/out`.
    pub fn json(&self, name: &str) -> Result<Value> {
        let path = self.outcome.out_dir.join(name);
        let text = fs::read_to_string(&path)
            .with_context(|| format!("the guest left no readable /out/{name}"))?;
        serde_json::from_str(&text).with_context(|| format!("/out/{name} is not valid JSON"))
    }

    /// hotprof's `--json` report from `/out/<name>`.
    pub fn report(&self, name: &str) -> Result<Report> {
        let json = self.json(name)?;
        let version = json["schema_version"].as_u64();
        ensure!(
            version == Some(1),
            "/out/{name} has schema_version {:?}, want 1",
            json["schema_version"]
        );
        Ok(Report { json })
    }

    /// The result line (`name: key=value ...`) the workload `name` printed last.
    pub fn workload(&self, name: &str) -> Result<Fields> {
        let prefix = format!("{name}:");
        let line = self
            .outcome
            .stdout
            .lines()
            .rev()
            .find(|line| line.starts_with(&prefix))
            .with_context(|| format!("{name} printed no `{prefix} key=value ...` line"))?;
        Ok(Fields::parse(name, &line[prefix.len()..]))
    }
}

/// A hotprof JSON report.
pub struct Report {
    pub json: Value,
}

impl Report {
    /// The `functions` entry named `name`.
    pub fn function(&self, name: &str) -> Result<Fields> {
        let functions = self.json["functions"]
            .as_array()
            .context("the report has no functions array")?;
        let Some(entry) = functions.iter().find(|entry| entry["name"] == name) else {
            let names = functions
                .iter()
                .filter_map(|entry| entry["name"].as_str())
                .collect::<Vec<_>>();
            bail!("the report has no function {name} (it has {names:?})");
        };
        let fields = entry
            .as_object()
            .context("a functions entry is not an object")?
            .iter()
            .map(|(key, value)| {
                let text = value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_owned);
                (key.clone(), text)
            })
            .collect();
        Ok(Fields {
            what: format!("function {name}"),
            fields,
        })
    }
}

/// Named values of one record (a workload's result line or a report entry).
pub struct Fields {
    what: String,
    fields: BTreeMap<String, String>,
}

impl Fields {
    fn parse(name: &str, text: &str) -> Self {
        let fields = text
            .split_whitespace()
            .filter_map(|pair| pair.split_once('='))
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        Self {
            what: name.to_owned(),
            fields,
        }
    }

    pub fn str(&self, key: &str) -> Result<&str> {
        self.fields
            .get(key)
            .map(String::as_str)
            .with_context(|| format!("{} has no {key}", self.what))
    }

    pub fn u64(&self, key: &str) -> Result<u64> {
        let text = self.str(key)?;
        text.parse()
            .with_context(|| format!("{} has {key}={text}, not a whole number", self.what))
    }

    #[allow(dead_code, reason = "for latency assertions; the unit tests use it")]
    pub fn f64(&self, key: &str) -> Result<f64> {
        let text = self.str(key)?;
        text.parse()
            .with_context(|| format!("{} has {key}={text}, not a number", self.what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_are_unique() {
        let mut names = SCENARIOS.iter().map(|s| s.name).collect::<Vec<_>>();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SCENARIOS.len());
    }

    #[test]
    fn workload_line_parses() {
        let fields = Fields::parse("syscall_lat", " calls=10000 threads=1 avg_ns=123.4");
        assert_eq!(fields.u64("calls").ok(), Some(10_000));
        assert_eq!(fields.f64("avg_ns").ok(), Some(123.4));
        assert!(fields.u64("avg_ns").is_err());
        assert!(fields.u64("missing").is_err());
    }

    #[test]
    fn report_functions_are_found_by_name() {
        let report = Report {
            json: serde_json::json!({"schema_version": 1, "functions": [
                {"name": "__x64_sys_getpid", "count": 10000, "p50_ns": 250}
            ]}),
        };
        let getpid = report.function("__x64_sys_getpid").expect("present");
        assert_eq!(getpid.u64("count").ok(), Some(10_000));
        let missing = report.function("nope").err().map(|err| err.to_string());
        assert!(missing.is_some_and(|msg| msg.contains("__x64_sys_getpid")));
    }
}
