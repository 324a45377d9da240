//! Turning a snapshot of the kernel's maps into a recording ([`Layout::recording`]).

use std::time::Duration;

use super::keys::KeyNames;
use super::spec::Probed;
use crate::attach::{AttachedMode, LinkKind};
use crate::collect::Snapshot;
use crate::model::{
    CallerRecord, CounterRecord, FilterExpr, FilterRecord, FunctionRecord, FunctionTotals,
    KeyRecord, PmuEvent, Recording, SCHEMA_VERSION, SlowCallRecord, TaskStore,
};

/// What was attached, slot by slot, and what every recording of the run says beside its
/// figures: all a snapshot needs to become a recording. Data in, [`Recording`] out (no handle
/// on the kernel), so that it can move to the model with the rest of the pure code.
pub struct Layout {
    pub probed: Vec<Probed>,
    pub mode: AttachedMode,
    pub task_store: TaskStore,
    /// Known from the start when calibrated while the probes run (`serve`); else `None`.
    pub overhead: Option<crate::calibrate::Overhead>,
    pub off_cpu: bool,
    pub command: Vec<String>,
    pub keys: KeyNames,
    /// The filter expression, if any.
    pub condition: Option<FilterExpr>,
    /// The kernel's release, as the recordings name it (read once, at start).
    pub kernel: String,
    /// `--counter`: the PMU events counted per call, in the snapshots' order.
    pub pmu_events: Vec<PmuEvent>,
}

impl Layout {
    /// A recording of `snapshot` (cumulative or one run's delta) over `elapsed`.
    pub fn recording(&self, snapshot: &Snapshot, elapsed: Duration) -> Recording {
        let mut functions = Vec::new();
        for slots in self.function_slots() {
            let end = slots.end.min(snapshot.functions.len());
            if slots.start >= end {
                break;
            }
            let slots = slots.start..end;
            let probed = &self.probed[slots.start];
            let totals = &snapshot.functions[slots.clone()];
            if probed.site.is_none() {
                let mut record = self.function(probed, &totals[0]);
                self.add_counters(&mut record, snapshot, slots.clone());
                self.add_keys(&mut record, snapshot, slots);
                functions.push(record);
                continue;
            }
            // A function's call sites: one record for all, one row each.
            let mut all = totals[0].clone();
            totals[1..].iter().for_each(|more| all.absorb(more));
            let mut record = self.function(probed, &all);
            self.add_counters(&mut record, snapshot, slots.clone());
            self.add_keys(&mut record, snapshot, slots.clone());
            record.callers = self.probed[slots]
                .iter()
                .zip(totals)
                .filter_map(|(slot, totals)| {
                    let site = slot.site.clone()?;
                    Some(CallerRecord::of(site, &self.function(probed, totals)))
                })
                .collect();
            record
                .callers
                .sort_by(|a, b| b.sum_ns.cmp(&a.sum_ns).then_with(|| a.site.cmp(&b.site)));
            functions.push(record);
        }
        Recording {
            schema_version: SCHEMA_VERSION,
            tool: format!("hotprof {}", env!("CARGO_PKG_VERSION")),
            kernel: self.kernel.clone(),
            mode: self.mode_label(),
            task_store: Some(self.task_store),
            duration_ns: elapsed.as_nanos() as u64,
            by: self.keys.spec.names(),
            filter: self.condition.as_ref().map(|condition| FilterRecord {
                expression: condition.text().to_owned(),
                not_matched: snapshot.counter(profiler_common::Counter::FilteredOut),
            }),
            command: self.command.clone(),
            functions,
            losses: snapshot.losses(),
            probe_overhead_ns: self.overhead.map(|o| o.per_call_ns),
            probe_bias_ns: self.overhead.map(|o| o.in_window_ns),
            runs: Vec::new(),
            intervals: Vec::new(),
        }
    }

    /// The probed functions' (or syscalls') names, comma-separated, for the live views.
    pub fn probed_names(&self) -> String {
        self.probed
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// What is attached, for the line saying the run has started:
    /// `2 function(s) attached (fentry+callsite mode, 3 call sites)`.
    pub fn attached(&self) -> String {
        let mut symbols: Vec<&str> = self.probed.iter().map(|p| p.symbol.as_str()).collect();
        symbols.dedup();
        let what = if matches!(self.mode, AttachedMode::Syscall | AttachedMode::RawSyscall) {
            "syscall(s)"
        } else {
            "function(s)"
        };
        let sites = match self.probed.iter().filter(|p| p.site.is_some()).count() {
            0 => String::new(),
            sites => format!(", {sites} call sites"),
        };
        format!(
            "{} {what} attached ({} mode{sites})",
            symbols.len(),
            self.mode_label()
        )
    }

    /// The mode as the report names it: `fentry+callsite` when some functions are timed at
    /// their entry and others at their call sites; in kprobe mode `kprobe.multi` for the
    /// functions attached through the kprobe.multi link, `kprobe` for perf kprobes, and
    /// `kprobe.multi+kprobe` when some are each.
    pub fn mode_label(&self) -> String {
        let sites = self.probed.iter().any(|p| p.site.is_some());
        let mechanism = if self.mode == AttachedMode::Kprobe {
            kprobe_label(self.probed.iter().filter(|p| p.site.is_none()))
        } else if self.probed.iter().any(|p| p.link == LinkKind::Fsession) {
            "fsession"
        } else if self.probed.iter().any(|p| p.link == LinkKind::TracingMulti) {
            "fentry.multi"
        } else {
            self.mode.as_str()
        };
        if sites && self.mode != AttachedMode::Callsite {
            format!("{mechanism}+callsite")
        } else {
            mechanism.to_owned()
        }
    }

    /// `--counter`: each PMU event's counts of the function whose slots are `slots` (its call
    /// sites' merged).
    fn add_counters(
        &self,
        record: &mut FunctionRecord,
        snapshot: &Snapshot,
        slots: std::ops::Range<usize>,
    ) {
        record.counters = self
            .pmu_events
            .iter()
            .zip(&snapshot.pmu)
            .enumerate()
            .map(|(index, (&event, per_slot))| {
                let mut all = FunctionTotals::default();
                per_slot
                    .get(slots.clone())
                    .unwrap_or_default()
                    .iter()
                    .for_each(|slot| all.absorb(slot));
                CounterRecord {
                    bias: self.overhead.and_then(|o| o.pmu_in_window[index]),
                    ..CounterRecord::of(event, &all)
                }
            })
            .collect();
    }

    /// The `--by` rows of the function whose slots are `slots`, busiest first: equal keys
    /// of its call sites merged. `--by caller` alone fills the per-caller table instead
    /// (call-site functions have theirs already).
    fn add_keys(
        &self,
        record: &mut FunctionRecord,
        snapshot: &Snapshot,
        slots: std::ops::Range<usize>,
    ) {
        if self.keys.spec.is_empty() {
            return;
        }
        let mut merged: Vec<(Vec<String>, FunctionTotals)> = Vec::new();
        for keyed in &snapshot.keys {
            let slot = keyed.key.func as usize;
            if !slots.contains(&slot) {
                continue;
            }
            let site = self.probed[slot].site.as_deref();
            let values = self.keys.values(&keyed.key, site);
            match merged.iter_mut().find(|(known, _)| *known == values) {
                Some((_, totals)) => totals.absorb(&keyed.totals),
                None => merged.push((values, keyed.totals.clone())),
            }
        }
        let probed = &self.probed[slots.start];
        let mut rows: Vec<KeyRecord> = merged
            .into_iter()
            .map(|(values, totals)| KeyRecord::of(values, &self.function(probed, &totals)))
            .collect();
        rows.sort_by(|a, b| b.sum_ns.cmp(&a.sum_ns).then_with(|| a.key.cmp(&b.key)));
        if !self.keys.spec.is_caller_only() {
            record.keys = rows;
        } else if record.callers.is_empty() {
            record.callers = rows
                .into_iter()
                .map(|row| CallerRecord {
                    site: row.label(),
                    count: row.count,
                    sum_ns: row.sum_ns,
                    p50_ns: row.p50_ns,
                    p99_ns: row.p99_ns,
                })
                .collect();
        }
    }

    /// Adds the slowest calls (`--slowest`, `calls` slowest first, as read from the kernel)
    /// to their functions in `recording`, `n` per function. `started_ns` is CLOCK_MONOTONIC
    /// when measuring started; `stack` names the frames of a slot's kernel stack id.
    pub fn add_slowest(
        &self,
        recording: &mut Recording,
        calls: &[(u32, profiler_common::SlowCall)],
        n: usize,
        started_ns: u64,
        stack: impl Fn(u32, i32) -> Vec<String>,
    ) {
        let function_of = self.function_of_slots();
        for (slot, call) in calls {
            let Some(&index) = function_of.get(*slot as usize) else {
                continue;
            };
            let Some(function) = recording.functions.get_mut(index) else {
                continue;
            };
            if function.slowest.len() >= n {
                continue;
            }
            let key = profiler_common::ByKey {
                values: call.key,
                comm: call.comm,
                ..Default::default()
            };
            let site = self.probed[*slot as usize].site.as_deref();
            let end = call.comm.iter().position(|&b| b == 0).unwrap_or(16);
            function.slowest.push(SlowCallRecord {
                at_ns: call.entry_ns.saturating_sub(started_ns),
                duration_ns: call.duration_ns,
                off_cpu_ns: self.off_cpu.then_some(call.off_cpu_ns),
                cpu: call.cpu,
                pid: (call.pid_tgid >> 32) as u32,
                tid: call.pid_tgid as u32,
                comm: String::from_utf8_lossy(&call.comm[..end]).into_owned(),
                key: self.keys.values(&key, site),
                stack: stack(*slot, call.kernel_stack),
            });
        }
    }

    /// Notes on each function of `recording` how its stacks were taken (`--stacks`): a random
    /// 1 in `every` calls walked, `walked` of them per slot.
    pub fn add_stack_sampling(&self, recording: &mut Recording, walked: &[u64], every: u32) {
        let function_of = self.function_of_slots();
        crate::report::stacks::note_sampling(recording, &function_of, walked, every);
    }

    /// The slots of each function of a recording, in order: one slot, or a function's
    /// consecutive call sites (one record for all of them).
    fn function_slots(&self) -> Vec<std::ops::Range<usize>> {
        let mut functions: Vec<std::ops::Range<usize>> = Vec::new();
        for (slot, probed) in self.probed.iter().enumerate() {
            let joins_previous = slot > 0
                && probed.site.is_some()
                && self.probed[slot - 1].site.is_some()
                && self.probed[slot - 1].symbol == probed.symbol;
            match functions.last_mut() {
                Some(last) if joins_previous => last.end = slot + 1,
                _ => functions.push(slot..slot + 1),
            }
        }
        functions
    }

    /// The index in `recording.functions` of each slot's function.
    fn function_of_slots(&self) -> Vec<usize> {
        self.function_slots()
            .into_iter()
            .enumerate()
            .flat_map(|(index, slots)| slots.map(move |_| index))
            .collect()
    }

    fn function(&self, probed: &Probed, totals: &FunctionTotals) -> FunctionRecord {
        let mut record =
            FunctionRecord::from_aggregates(probed.name.clone(), probed.symbol.clone(), totals);
        if probed.child {
            record.child_of = self
                .probed
                .iter()
                .find(|p| !p.child)
                .map(|parent| parent.name.clone());
        }
        record.on_cpu_sum_ns = self.off_cpu.then_some(totals.on_cpu_sum_ns);
        record
    }
}

/// kprobe mode's label for the functions timed at their entry, by how they were attached.
fn kprobe_label<'a>(entries: impl Iterator<Item = &'a Probed>) -> &'static str {
    let (mut multi, mut single) = (false, false);
    for probed in entries {
        match probed.link {
            LinkKind::Session => return "kprobe.session",
            LinkKind::Multi => multi = true,
            _ => single = true,
        }
    }
    match (multi, single) {
        (true, true) => "kprobe.multi+kprobe",
        (true, false) => "kprobe.multi",
        (false, _) => "kprobe",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout of `probed` in `mode`: no overhead, no command, no keys, no filter.
    fn layout(probed: &[Probed], mode: AttachedMode) -> Layout {
        Layout {
            probed: probed.to_vec(),
            mode,
            task_store: TaskStore::TaskStorage,
            overhead: None,
            off_cpu: false,
            command: Vec::new(),
            keys: KeyNames::default(),
            condition: None,
            pmu_events: Vec::new(),
            kernel: "6.12.0".into(),
        }
    }

    #[test]
    fn a_recording_holds_every_total_and_on_cpu_time_only_with_off_cpu() {
        use crate::model::FunctionTotals;
        let probed = [
            Probed {
                name: "vfs_read".into(),
                symbol: "vfs_read".into(),
                site: None,
                child: false,
                link: LinkKind::Perf,
            },
            Probed {
                name: "__ep_eventpoll_poll".into(),
                symbol: "__ep_eventpoll_poll.isra.0".into(),
                site: None,
                child: false,
                link: LinkKind::Perf,
            },
        ];
        let totals = FunctionTotals {
            on_cpu_sum_ns: 500,
            below_min: 4,
            self_sum_ns: 550,
            outer_count: 2,
            outer_sum_ns: 600,
            ..FunctionTotals::from_durations(&[100, 200, 300])
        };
        let mut counters = [0; profiler_common::NUM_COUNTERS as usize];
        counters[profiler_common::Counter::DepthExceeded as usize] = 3;
        let snapshot = Snapshot {
            functions: vec![totals.clone(), FunctionTotals::default()],
            counters,
            ..Snapshot::default()
        };
        let command = ["true".to_string()];
        let mut session = Layout {
            task_store: TaskStore::HashMap,
            overhead: Some(crate::calibrate::Overhead {
                per_call_ns: 12.5,
                in_window_ns: 4.0,
                pmu_in_window: [None; profiler_common::PMU_EVENTS_MAX],
            }),
            command: command.to_vec(),
            ..layout(&probed, AttachedMode::Kprobe)
        };
        let recording = session.recording(&snapshot, Duration::from_millis(2));
        assert_eq!(
            (recording.mode.as_str(), recording.task_store),
            ("kprobe", Some(TaskStore::HashMap))
        );
        assert_eq!(recording.duration_ns, 2_000_000);
        assert_eq!(recording.command, command);
        assert_eq!(recording.probe_overhead_ns, Some(12.5));
        assert_eq!(recording.probe_bias_ns, Some(4.0));
        assert_eq!(recording.losses.depth_exceeded, 3);
        let expected =
            FunctionRecord::from_aggregates("vfs_read".into(), "vfs_read".into(), &totals);
        assert_eq!(recording.functions[0], expected);
        assert_eq!(
            (
                expected.below_min_latency,
                expected.self_sum_ns,
                expected.outer_count,
                expected.outer_sum_ns
            ),
            (4, 550, 2, 600)
        );
        assert_eq!(recording.functions[1].symbol, "__ep_eventpoll_poll.isra.0");
        assert_eq!(recording.functions[1].count, 0);

        session.off_cpu = true;
        let recording = session.recording(&snapshot, Duration::from_millis(2));
        assert_eq!(recording.functions[0].on_cpu_sum_ns, Some(500));
        assert_eq!(recording.functions[1].on_cpu_sum_ns, Some(0));
    }

    #[test]
    fn kprobe_mode_is_labelled_by_how_its_functions_were_attached() {
        let probed = |name: &str, site: Option<&str>, link| Probed {
            name: name.into(),
            symbol: name.into(),
            site: site.map(str::to_owned),
            child: false,
            link,
        };
        let label = |probed: &[Probed], mode| layout(probed, mode).mode_label();
        let multi = || probed("vfs_read", None, LinkKind::Multi);
        let single = || probed("memcpy_orig", None, LinkKind::Perf);
        let site = || probed("copy_page_from_iter_atomic", Some("f+0x1"), LinkKind::Perf);
        let kprobe = AttachedMode::Kprobe;
        assert_eq!(label(&[], kprobe), "kprobe");
        assert_eq!(label(&[single()], kprobe), "kprobe");
        assert_eq!(label(&[multi()], kprobe), "kprobe.multi");
        assert_eq!(label(&[multi(), single()], kprobe), "kprobe.multi+kprobe");
        // Call sites are always perf kprobes, labelled as such.
        assert_eq!(label(&[multi(), site()], kprobe), "kprobe.multi+callsite");
        assert_eq!(label(&[single(), site()], kprobe), "kprobe+callsite");
        assert_eq!(label(&[site()], AttachedMode::Callsite), "callsite");
        assert_eq!(label(&[multi()], AttachedMode::Fentry), "fentry");
        let session = Probed {
            link: LinkKind::Session,
            ..multi()
        };
        assert_eq!(label(&[session], kprobe), "kprobe.session");
        let fsession = probed("vfs_read", None, LinkKind::Fsession);
        assert_eq!(label(&[fsession], AttachedMode::Fentry), "fsession");
        let pair = probed("vfs_read", None, LinkKind::Fentry);
        assert_eq!(label(&[pair], AttachedMode::Fentry), "fentry");
    }

    #[test]
    fn call_sites_of_a_function_make_one_record_with_a_row_each() {
        let site = |name: &str, site: Option<&str>| Probed {
            name: name.into(),
            symbol: name.into(),
            site: site.map(str::to_owned),
            child: false,
            link: LinkKind::Perf,
        };
        let probed = [
            site("generic_perform_write", None),
            site(
                "copy_page_from_iter_atomic",
                Some("generic_perform_write+0x14e"),
            ),
            site(
                "copy_page_from_iter_atomic",
                Some("iter_file_splice_write+0x2a0"),
            ),
        ];
        let snapshot = Snapshot {
            functions: vec![
                FunctionTotals::from_durations(&[5_000, 6_000]),
                FunctionTotals::from_durations(&[100, 200]),
                FunctionTotals::from_durations(&[900]),
            ],
            ..Snapshot::default()
        };
        let session = layout(&probed, AttachedMode::Kprobe);
        let recording = session.recording(&snapshot, Duration::from_secs(1));
        assert_eq!(recording.functions.len(), 2);
        assert!(recording.functions[0].callers.is_empty());
        let copy = &recording.functions[1];
        assert_eq!(
            (copy.count, copy.sum_ns, copy.min_ns, copy.max_ns),
            (3, 1200, 100, 900)
        );
        let rows: Vec<(&str, u64, u64)> = copy
            .callers
            .iter()
            .map(|c| (c.site.as_str(), c.count, c.sum_ns))
            .collect();
        // Busiest (by time) first.
        assert_eq!(
            rows,
            [
                ("iter_file_splice_write+0x2a0", 1, 900),
                ("generic_perform_write+0x14e", 2, 300)
            ]
        );
    }
}
