//! What every scenario runs on: [`Ctx`] boots guests, [`Guest`] holds one run's outcome with
//! assertions that explain themselves, [`Report`] and [`Fields`] read hotprof's JSON and the
//! workloads' `name: key=value` lines, and the small facts about kernels that several
//! scenario families share.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::arch::Arch;
use crate::kernels::Kernel;
use crate::util::fresh_dir;
use crate::vm::{self, QemuSetup, VmOutcome, VmRun};

/// How the text report names the per-task store on `kernel`.
pub fn store_words(kernel: Kernel) -> &'static str {
    match kernel {
        Kernel::V5_10 => "hash map",
        _ => "task-local storage",
    }
}

/// The page-cache write copy: `copy_page_from_iter_atomic` from 5.14 until 7.x renamed it
/// (5.10 has `iov_iter_copy_from_user_atomic`).
pub fn write_copy_function(kernel: Kernel) -> &'static str {
    match kernel {
        Kernel::V7 | Kernel::V7Rt => "copy_folio_from_iter_atomic",
        Kernel::V6_12 | Kernel::V6_1 => "copy_page_from_iter_atomic",
        Kernel::V5_10 => "iov_iter_copy_from_user_atomic",
    }
}

/// How `--by argN:log2` prints the class of `value`.
pub fn log2_class_label(value: u64) -> String {
    match 64 - value.leading_zeros() {
        0 => "0".into(),
        1 => "1".into(),
        class => format!("[{}, {})", 1u64 << (class - 1), 1u64 << class),
    }
}

/// A report function's `--by` rows: the key's values and the calls.
pub fn key_rows(report: &Report, function: &str) -> Result<Vec<(Vec<String>, u64)>> {
    let entry = report.json["functions"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == function))
        .with_context(|| format!("no function {function}"))?;
    entry["keys"]
        .as_array()
        .with_context(|| format!("{function} has no keys"))?
        .iter()
        .map(|row| {
            let key = row["key"]
                .as_array()
                .context("a key row without a key")?
                .iter()
                .map(|value| value.as_str().unwrap_or_default().to_owned())
                .collect();
            let calls = row["count"].as_u64().context("a key row without a count")?;
            Ok((key, calls))
        })
        .collect()
}

/// A report function's call sites and their calls, busiest first (as recorded).
pub fn caller_rows(report: &Report, function: &str) -> Result<Vec<(String, u64)>> {
    let entry = report.json["functions"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == function))
        .with_context(|| format!("no function {function}"))?;
    entry["callers"]
        .as_array()
        .with_context(|| format!("{function} has no callers"))?
        .iter()
        .map(|caller| {
            let site = caller["site"].as_str().context("a caller without a site")?;
            let calls = caller["count"]
                .as_u64()
                .context("a caller without a count")?;
            Ok((site.to_owned(), calls))
        })
        .collect()
}

/// The first function's `--slowest` calls, which must be `want` of them.
pub fn slowest_calls(report: &Report, want: usize) -> Result<&Vec<Value>> {
    let slowest = report.json["functions"][0]["slowest"]
        .as_array()
        .context("no slowest calls in the report")?;
    ensure!(
        slowest.len() == want,
        "want {want} slowest calls, got {}",
        slowest.len()
    );
    Ok(slowest)
}

/// What a scenario runs guests with.
pub struct Ctx {
    kernel: Kernel,
    arch: Arch,
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
            arch: Arch::X86_64,
            out_root,
            timeout,
            echo,
            runs: 0,
            last: None,
        }
    }

    /// This context with `arch` guests (x86_64 by default).
    pub fn on(self, arch: Arch) -> Self {
        Self { arch, ..self }
    }

    /// The kernel this instance of the scenario runs on.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Boots a fresh guest and runs `script` in it (busybox `sh`, cwd `/out`).
    pub fn run(&mut self, script: &str) -> Result<Guest> {
        self.run_with_timeout(script, self.timeout)
    }

    /// [`Ctx::run`] for a long script: the guest may take `at_least` (or the configured
    /// timeout, if longer) before it is killed as hung.
    pub fn run_with_timeout(&mut self, script: &str, at_least: Duration) -> Result<Guest> {
        self.launch(script, at_least, Ok)
    }

    /// [`Ctx::run`] with Debian sid's peers in the guest ([`VmRun::with_peers`]).
    pub fn run_with_peers(&mut self, script: &str) -> Result<Guest> {
        self.launch(script, self.timeout, VmRun::with_peers)
    }

    /// [`Ctx::run`] with another qemu (a stand-in).
    pub fn run_with_qemu(&mut self, script: &str, qemu: &QemuSetup) -> Result<Guest> {
        self.launch(script, self.timeout, |run| {
            Ok(VmRun {
                qemu: qemu.clone(),
                ..run
            })
        })
    }

    /// [`Ctx::run`] on a guest with `cpus` virtual CPUs instead of 2 (each a host thread under
    /// TCG: slower, but the kernel's per-CPU code paths are real).
    pub fn run_on_cpus(&mut self, script: &str, cpus: u32) -> Result<Guest> {
        self.launch(script, self.timeout, |run| Ok(VmRun { cpus, ..run }))
    }

    /// [`Ctx::run`] on qemu's instruction clock (TCG, `-icount shift=0,sleep=off`, one CPU:
    /// 5.10 and 6.1 hang bringing up a second on this clock): the guest's clock advances
    /// 1 ns per instruction it executes, so every duration the probes take is an instruction
    /// count, the same in every run. On the host's clock a TCG guest's
    /// durations drift by a third between tasks and runs (a kprobe pair's shortest getpid
    /// call 768–832 ns in 17 threads of a 6.1 guest, 1088–1184 ns in 7 others): a check that
    /// compares two durations measured apart needs this one.
    pub fn run_on_instruction_clock(&mut self, script: &str) -> Result<Guest> {
        self.launch(script, self.timeout, |run| Ok(run.on_instruction_clock()))
    }

    /// Boots a guest for `script` with this context's kernel, architecture and output
    /// directory, changed by `adjust`.
    fn launch(
        &mut self,
        script: &str,
        at_least: Duration,
        adjust: impl FnOnce(VmRun) -> Result<VmRun>,
    ) -> Result<Guest> {
        self.runs += 1;
        let out_dir = self.out_root.join(format!("run{}", self.runs));
        fresh_dir(&out_dir)?;
        let run = adjust(VmRun {
            timeout: self.timeout.max(at_least),
            echo: self.echo,
            ..VmRun::new(self.kernel, script, out_dir).on(self.arch)
        })?;
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
            version == Some(2),
            "/out/{name} has schema_version {:?}, want 2",
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
    pub fn parse(name: &str, text: &str) -> Self {
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

/// Every one of the `made` getpid calls counted, or among those the kernel says it skipped
/// (`losses.kernel_missed`, or the exporter's `kernel_missed` series): 7.x's kernel code is
/// preemptible, and a task preempted inside the program makes the kernel skip it for the
/// others on its CPU (`process_storm_exact`; `busy_exporter`, 199 of 7,880,000 in a CI
/// rehearsal). Exact where the kernel missed none. `what` names the count in messages.
pub fn every_call_counted_or_missed(
    what: &str,
    counted: u64,
    missed: u64,
    made: u64,
) -> Result<()> {
    ensure!(
        counted <= made && counted + missed >= made,
        "{what}: {counted} getpid calls and {missed} missed by the kernel, want every one of \
         the {made} counted or among the missed"
    );
    if missed > 0 {
        println!(
            "  {what}: {counted} of {made} getpid calls counted, {missed} missed by the kernel"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
            json: serde_json::json!({"schema_version": 2, "functions": [
                {"name": "__x64_sys_getpid", "count": 10000, "p50_ns": 250}
            ]}),
        };
        let getpid = report.function("__x64_sys_getpid").expect("present");
        assert_eq!(getpid.u64("count").ok(), Some(10_000));
        let missing = report.function("nope").err().map(|err| err.to_string());
        assert!(missing.is_some_and(|msg| msg.contains("__x64_sys_getpid")));
    }
}
