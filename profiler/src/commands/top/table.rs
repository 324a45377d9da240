//! What `hotprof top` shows, as plain state: one row per probed function or syscall (per
//! `--by` key value when the run has keys), its figures over the last refresh and since the
//! start, how the rows are sorted and filtered, and what the keys do to it. No terminal here:
//! `draw.rs` renders it, `mod.rs` feeds it recordings and keys.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::model::{FunctionRecord, KeyRecord, Recording};

/// How many refreshes of p99 a row keeps for its sparkline.
pub const HISTORY: usize = 30;

/// A row's figures over some span: the last refresh's, or since the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    pub calls: u64,
    pub sum_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl Figures {
    fn of_function(record: &FunctionRecord) -> Self {
        Self {
            calls: record.count,
            sum_ns: record.sum_ns,
            p50_ns: record.p50_ns,
            p99_ns: record.p99_ns,
            max_ns: record.max_ns,
        }
    }

    fn of_key(record: &KeyRecord) -> Self {
        Self {
            calls: record.count,
            sum_ns: record.sum_ns,
            p50_ns: record.p50_ns,
            p99_ns: record.p99_ns,
            max_ns: record.max_ns,
        }
    }
}

/// One probed function or syscall, or one of its `--by` key values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    /// `getpid`, or `vfs_write [4096, 8192)` for a key value.
    pub name: String,
    /// The last refresh.
    pub last: Figures,
    pub calls_per_s: f64,
    pub total: Figures,
    /// p99 of each refresh, oldest first; `None` for a refresh without calls.
    pub p99_history: VecDeque<Option<u64>>,
    /// The buckets since the start, `[lower_ns, upper_ns, count]`.
    pub buckets: Vec<[u64; 3]>,
}

/// What the rows are sorted by (largest first, names alphabetically).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortBy {
    #[default]
    TotalTime,
    CallsPerSecond,
    P99,
    Max,
    Name,
}

impl SortBy {
    const ALL: [SortBy; 5] = [
        SortBy::TotalTime,
        SortBy::CallsPerSecond,
        SortBy::P99,
        SortBy::Max,
        SortBy::Name,
    ];

    fn next(self) -> Self {
        let at = Self::ALL.iter().position(|&s| s == self).unwrap_or(0);
        Self::ALL[(at + 1) % Self::ALL.len()]
    }

    pub fn describe(self) -> &'static str {
        match self {
            SortBy::TotalTime => "total time",
            SortBy::CallsPerSecond => "calls/s",
            SortBy::P99 => "p99",
            SortBy::Max => "max",
            SortBy::Name => "name",
        }
    }
}

/// A key, as the table understands it (`mod.rs` translates the terminal's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    Char(char),
    Up,
    Down,
    Enter,
    Escape,
    Backspace,
    /// Ctrl-C: the terminal is in raw mode, so it comes as a key, not SIGINT.
    Interrupt,
}

/// What the view shows besides the header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum View {
    #[default]
    Rows,
    /// Typing the name filter (the rows below follow it as it is typed).
    EditingFilter,
    /// One row's histogram since the start.
    Histogram { name: String },
}

/// Whether to go on after a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Continue,
    Quit,
}

/// The table and what the keys changed in it.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Row>,
    pub sort: SortBy,
    /// Only rows whose name contains this (case-insensitively).
    pub filter: String,
    pub paused: bool,
    /// Index into [`Table::visible`].
    pub selected: usize,
    pub view: View,
    /// Refreshes taken in.
    pub refreshes: u64,
}

impl Table {
    /// Takes in one refresh: `last` the recording of the refresh's `period`, `total` the one
    /// since the start (ignored while paused: the view stays as it was).
    pub fn update(&mut self, last: &Recording, total: &Recording, period: Duration) {
        if self.paused {
            return;
        }
        self.refreshes += 1;
        let last_figures: HashMap<String, Figures> = rows_of(last)
            .map(|(name, figures, _)| (name, figures))
            .collect();
        let mut previous: HashMap<String, Row> = std::mem::take(&mut self.rows)
            .into_iter()
            .map(|row| (row.name.clone(), row))
            .collect();
        let seconds = period.as_secs_f64();
        for (name, total, buckets) in rows_of(total) {
            let last = last_figures.get(&name).copied().unwrap_or_default();
            let mut p99_history = previous
                .remove(&name)
                .map(|row| row.p99_history)
                .unwrap_or_default();
            p99_history.push_back((last.calls > 0).then_some(last.p99_ns));
            while p99_history.len() > HISTORY {
                p99_history.pop_front();
            }
            self.rows.push(Row {
                name,
                calls_per_s: if seconds > 0.0 {
                    last.calls as f64 / seconds
                } else {
                    0.0
                },
                last,
                total,
                p99_history,
                buckets,
            });
        }
        self.clamp_selection();
    }

    /// The rows the filter lets through, sorted.
    pub fn visible(&self) -> Vec<&Row> {
        let filter = self.filter.to_lowercase();
        let mut rows: Vec<&Row> = self
            .rows
            .iter()
            .filter(|row| row.name.to_lowercase().contains(&filter))
            .collect();
        let by = self.sort;
        rows.sort_by(|a, b| {
            let larger_first = match by {
                SortBy::TotalTime => b.total.sum_ns.cmp(&a.total.sum_ns),
                SortBy::CallsPerSecond => b.calls_per_s.total_cmp(&a.calls_per_s),
                SortBy::P99 => b.last.p99_ns.cmp(&a.last.p99_ns),
                SortBy::Max => b.total.max_ns.cmp(&a.total.max_ns),
                SortBy::Name => std::cmp::Ordering::Equal,
            };
            larger_first.then_with(|| a.name.cmp(&b.name))
        });
        rows
    }

    /// Rows in all, filtered out or not.
    pub fn total_rows(&self) -> usize {
        self.rows.len()
    }

    /// The row whose histogram is open, if it is still there.
    pub fn opened(&self) -> Option<&Row> {
        match &self.view {
            View::Histogram { name } => self.rows.iter().find(|row| &row.name == name),
            _ => None,
        }
    }

    /// Applies a key.
    pub fn handle(&mut self, input: Input) -> Outcome {
        if input == Input::Interrupt {
            return Outcome::Quit;
        }
        match self.view {
            View::EditingFilter => match input {
                Input::Char(c) => self.filter.push(c),
                Input::Backspace => {
                    self.filter.pop();
                }
                Input::Enter => self.view = View::Rows,
                Input::Escape => {
                    self.filter.clear();
                    self.view = View::Rows;
                }
                _ => {}
            },
            View::Histogram { .. } => match input {
                Input::Char('q') => return Outcome::Quit,
                Input::Escape | Input::Enter | Input::Backspace => self.view = View::Rows,
                Input::Char(' ') => self.paused = !self.paused,
                _ => {}
            },
            View::Rows => match input {
                Input::Char('q') => return Outcome::Quit,
                Input::Char('/') => self.view = View::EditingFilter,
                Input::Char(' ') => self.paused = !self.paused,
                Input::Char('s') => self.sort = self.sort.next(),
                Input::Char('t') => self.sort = SortBy::TotalTime,
                Input::Char('c') => self.sort = SortBy::CallsPerSecond,
                Input::Char('9') => self.sort = SortBy::P99,
                Input::Char('m') => self.sort = SortBy::Max,
                Input::Char('n') => self.sort = SortBy::Name,
                Input::Up | Input::Char('k') => self.selected = self.selected.saturating_sub(1),
                Input::Down | Input::Char('j') => self.selected += 1,
                Input::Escape => self.filter.clear(),
                Input::Enter => {
                    if let Some(row) = self.visible().get(self.selected) {
                        self.view = View::Histogram {
                            name: row.name.clone(),
                        };
                    }
                }
                _ => {}
            },
        }
        self.clamp_selection();
        Outcome::Continue
    }

    fn clamp_selection(&mut self) {
        let visible = self.visible().len();
        self.selected = self.selected.min(visible.saturating_sub(1));
    }
}

/// A recording's rows: each function's, or with `--by` each of its key values', with their
/// buckets.
fn rows_of(recording: &Recording) -> impl Iterator<Item = (String, Figures, Vec<[u64; 3]>)> + '_ {
    recording.functions.iter().flat_map(|function| {
        let rows: Vec<_> = if function.keys.is_empty() {
            vec![(
                function.name.clone(),
                Figures::of_function(function),
                function.buckets.clone(),
            )]
        } else {
            function
                .keys
                .iter()
                .map(|key| {
                    (
                        format!("{} {}", function.name, key.label()),
                        Figures::of_key(key),
                        key.buckets.clone(),
                    )
                })
                .collect()
        };
        rows
    })
}

/// `values` as one block character each, scaled to the largest; a blank for `None`.
pub fn sparkline(values: impl IntoIterator<Item = Option<u64>> + Clone) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.clone().into_iter().flatten().max().unwrap_or(0);
    values
        .into_iter()
        .map(|value| match value {
            None => ' ',
            Some(_) if max == 0 => BLOCKS[0],
            Some(v) => BLOCKS[((v as u128 * 7).div_ceil(max as u128)) as usize],
        })
        .collect()
}

/// A histogram's buckets merged into power-of-two latency ranges, `(lower_ns, upper_ns,
/// calls)` ascending: the log-linear buckets are too fine to read on a terminal.
pub fn power_of_two_ranges(buckets: &[[u64; 3]]) -> Vec<(u64, u64, u64)> {
    let mut ranges: Vec<(u64, u64, u64)> = Vec::new();
    for &[lower, _, count] in buckets {
        let floor = if lower == 0 { 0 } else { 1u64 << lower.ilog2() };
        let ceiling = if floor == 0 {
            1
        } else {
            floor.saturating_mul(2)
        };
        match ranges.last_mut() {
            Some(last) if last.0 == floor => last.2 += count,
            _ => ranges.push((floor, ceiling, count)),
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(name: &str, count: u64, sum_ns: u64, p99_ns: u64) -> FunctionRecord {
        FunctionRecord {
            name: name.into(),
            symbol: name.into(),
            count,
            sum_ns,
            p50_ns: p99_ns / 2,
            p99_ns,
            max_ns: p99_ns * 2,
            buckets: vec![[p99_ns, p99_ns, count]],
            ..FunctionRecord::default()
        }
    }

    fn recording(functions: Vec<FunctionRecord>) -> Recording {
        Recording {
            schema_version: crate::model::SCHEMA_VERSION,
            tool: "hotprof test".into(),
            kernel: "6.18.0".into(),
            mode: "syscall".into(),
            task_store: None,
            duration_ns: 1_000_000_000,
            by: Vec::new(),
            filter: None,
            command: vec![],
            functions,
            losses: crate::model::Losses::default(),
            probe_overhead_ns: None,
            probe_bias_ns: None,
            runs: vec![],
            intervals: vec![],
        }
    }

    fn table() -> Table {
        let mut table = Table::default();
        table.update(
            &recording(vec![
                function("getpid", 1000, 100_000, 200),
                function("read", 10, 500_000, 90_000),
            ]),
            &recording(vec![
                function("getpid", 3000, 300_000, 200),
                function("read", 20, 1_000_000, 90_000),
            ]),
            Duration::from_millis(500),
        );
        table
    }

    fn names(table: &Table) -> Vec<&str> {
        table.visible().iter().map(|r| r.name.as_str()).collect()
    }

    #[test]
    fn rows_carry_the_last_refresh_and_the_total() {
        let table = table();
        let getpid = table.visible()[1].clone();
        assert_eq!(getpid.name, "getpid");
        assert_eq!(getpid.calls_per_s, 2000.0);
        assert_eq!(getpid.last.calls, 1000);
        assert_eq!(getpid.total.calls, 3000);
        assert_eq!(getpid.total.sum_ns, 300_000);
        assert_eq!(getpid.p99_history, VecDeque::from([Some(200)]));
    }

    #[test]
    fn sorted_by_total_time_then_by_the_key_asked_for() {
        let mut table = table();
        assert_eq!(names(&table), ["read", "getpid"]);
        table.handle(Input::Char('c'));
        assert_eq!(table.sort, SortBy::CallsPerSecond);
        assert_eq!(names(&table), ["getpid", "read"]);
        table.handle(Input::Char('9'));
        assert_eq!(names(&table), ["read", "getpid"]);
        table.handle(Input::Char('n'));
        assert_eq!(names(&table), ["getpid", "read"]);
        table.handle(Input::Char('s'));
        assert_eq!(table.sort, SortBy::TotalTime);
    }

    #[test]
    fn the_filter_narrows_as_typed_and_escape_clears_it() {
        let mut table = table();
        table.handle(Input::Char('/'));
        assert_eq!(table.view, View::EditingFilter);
        // Keys that are commands elsewhere are text while typing.
        table.handle(Input::Char('G'));
        table.handle(Input::Char('e'));
        table.handle(Input::Char('q'));
        assert_eq!(names(&table), Vec::<&str>::new());
        table.handle(Input::Backspace);
        assert_eq!(names(&table), ["getpid"]);
        table.handle(Input::Enter);
        assert_eq!(
            (table.view.clone(), table.filter.as_str()),
            (View::Rows, "Ge")
        );
        table.handle(Input::Escape);
        assert_eq!(names(&table), ["read", "getpid"]);
    }

    #[test]
    fn pausing_freezes_the_rows() {
        let mut table = table();
        table.handle(Input::Char(' '));
        table.update(
            &recording(vec![function("getpid", 1, 1, 1)]),
            &recording(vec![function("getpid", 9, 9, 9)]),
            Duration::from_secs(1),
        );
        assert_eq!(names(&table), ["read", "getpid"]);
        assert_eq!(table.refreshes, 1);
        table.handle(Input::Char(' '));
        table.update(
            &recording(vec![function("getpid", 1, 1, 1)]),
            &recording(vec![function("getpid", 9, 9, 9)]),
            Duration::from_secs(1),
        );
        assert_eq!(names(&table), ["getpid"]);
        // The paused refresh left no point in the trend.
        assert_eq!(table.visible()[0].p99_history.len(), 2);
    }

    #[test]
    fn enter_opens_the_selected_rows_histogram() {
        let mut table = table();
        table.handle(Input::Down);
        table.handle(Input::Down);
        assert_eq!(table.selected, 1);
        table.handle(Input::Enter);
        assert_eq!(table.opened().map(|r| r.name.as_str()), Some("getpid"));
        assert_eq!(table.handle(Input::Escape), Outcome::Continue);
        assert_eq!(table.view, View::Rows);
        assert_eq!(table.handle(Input::Char('q')), Outcome::Quit);
        table.handle(Input::Char('/'));
        assert_eq!(table.handle(Input::Interrupt), Outcome::Quit);
    }

    #[test]
    fn history_keeps_the_last_refreshes_and_marks_idle_ones() {
        let mut table = Table::default();
        for refresh in 0..HISTORY as u64 + 5 {
            let calls = refresh % 2;
            table.update(
                &recording(vec![function("f", calls, calls, 100 + refresh)]),
                &recording(vec![function("f", 1, 1, 1)]),
                Duration::from_secs(1),
            );
        }
        let history = &table.visible()[0].p99_history;
        assert_eq!(history.len(), HISTORY);
        // The last HISTORY refreshes are kept (the first 5 dropped); the even ones had no call.
        assert_eq!(history.front(), Some(&Some(105)));
        assert_eq!(history[HISTORY - 2], Some(100 + HISTORY as u64 + 3));
        assert_eq!(history.back(), Some(&None));
    }

    #[test]
    fn key_values_are_rows_of_their_own() {
        let mut write = function("vfs_write", 3, 30, 10);
        write.keys = vec![
            KeyRecord {
                key: vec!["[4096, 8192)".into()],
                count: 2,
                sum_ns: 20,
                ..KeyRecord::default()
            },
            KeyRecord {
                key: vec!["[1, 2)".into()],
                count: 1,
                sum_ns: 10,
                ..KeyRecord::default()
            },
        ];
        let mut table = Table::default();
        table.update(
            &recording(vec![write.clone()]),
            &recording(vec![write]),
            Duration::from_secs(1),
        );
        assert_eq!(
            names(&table),
            ["vfs_write [4096, 8192)", "vfs_write [1, 2)"]
        );
    }

    #[test]
    fn sparklines_scale_to_the_largest_value() {
        assert_eq!(sparkline([Some(0), Some(50), None, Some(100)]), "▁▅ █");
        assert_eq!(sparkline([Some(0), Some(0)]), "▁▁");
        assert_eq!(sparkline(Vec::<Option<u64>>::new()), "");
    }

    #[test]
    fn buckets_merge_into_power_of_two_ranges() {
        assert_eq!(
            power_of_two_ranges(&[[0, 0, 1], [100, 103, 2], [120, 127, 3], [128, 131, 4]]),
            [(0, 1, 1), (64, 128, 5), (128, 256, 4)]
        );
    }
}
