//! Stack outputs: folded files, flamegraph SVGs, and the `perf report`-style top table.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

use crate::collect::CollectedStack;
use crate::flame::{self, KernelSymbolizer, StackRecord, Symbols, UserSymbolizer, Weight};

/// Frames the probe machinery itself adds on top of a probed function's stack (the BPF
/// trampoline of fentry, the kprobe/ftrace handlers): cut so the probed function is the leaf.
fn is_probe_frame(name: &str) -> bool {
    [
        "bpf_",
        "__bpf_",
        "ftrace_",
        "kprobe_",
        "__kprobe",
        "arch_ftrace",
        "0x",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// Turns collected stacks into records whose kernel stack ends (leaf first) at the probed
/// function `leaf` (name and address), whatever mechanism captured it.
pub fn records_for(
    stacks: &[CollectedStack],
    func: u32,
    leaf: Option<(&str, u64)>,
    kernel: &KernelSymbolizer,
) -> Vec<StackRecord> {
    stacks
        .iter()
        .filter(|s| s.func == func)
        .map(|s| {
            let mut frames = s.kernel.clone();
            if let Some((name, address)) = leaf {
                let position = frames
                    .iter()
                    .position(|&a| kernel.symbolize(a).is_some_and(|(n, _, _)| n == name));
                match position {
                    Some(index) => {
                        frames.drain(..index);
                    }
                    None => {
                        let skip = frames
                            .iter()
                            .take_while(|&&a| is_probe_frame(&kernel.frame_name(a)))
                            .count();
                        frames.drain(..skip);
                        frames.insert(0, address);
                    }
                }
            }
            StackRecord {
                kernel: frames,
                user: s.user.clone(),
                comm: s.comm.clone(),
                pid: s.tgid,
                total_ns: s.total_ns,
                count: s.count,
            }
        })
        .collect()
}

/// Folds records with kernel (and, when wanted, user) symbols.
pub fn fold(
    records: &[StackRecord],
    weight: Weight,
    kernel: &KernelSymbolizer,
    user_stacks: bool,
) -> Vec<(String, u64)> {
    let user = user_stacks.then(UserSymbolizer::new);
    let symbols = Symbols {
        kernel,
        user: user.as_ref(),
    };
    flame::fold(records, weight, &symbols)
}

/// Writes folded stacks to `path`.
pub fn write_folded(folded: &[(String, u64)], path: &Path) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?;
    flame::write_folded(folded, std::io::BufWriter::new(file))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Renders and writes a flamegraph SVG.
pub fn write_flamegraph(
    folded: &[(String, u64)],
    title: &str,
    subtitle: &str,
    count_name: &str,
    path: &Path,
) -> anyhow::Result<()> {
    let svg = flame::render_flamegraph(folded, title, Some(subtitle), count_name)?;
    std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))
}

/// `perf report`-like table: share of samples per (command, leaf symbol), `[k]` for kernel
/// frames, `[.]` for user frames.
pub fn top_table(
    records: &[StackRecord],
    kernel: &KernelSymbolizer,
    user_stacks: bool,
    rows: usize,
) -> String {
    let user = user_stacks.then(UserSymbolizer::new);
    let total: u64 = records.iter().map(|r| r.count).sum();
    let mut by_leaf: std::collections::HashMap<(String, String), u64> =
        std::collections::HashMap::new();
    for record in records {
        let leaf = match (record.kernel.first(), record.user.first()) {
            (Some(&address), _) => format!("[k] {}", kernel.frame_name(address)),
            (None, Some(&address)) => match &user {
                Some(user) => format!("[.] {}", user.symbolize(record.pid, &[address]).remove(0)),
                None => format!("[.] {address:#x}"),
            },
            (None, None) => "[?] [unknown]".to_string(),
        };
        *by_leaf.entry((record.comm.clone(), leaf)).or_default() += record.count;
    }
    let mut rows_sorted: Vec<_> = by_leaf.into_iter().collect();
    rows_sorted.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut out = String::new();
    let _ = writeln!(out, "{:>8}  {:<16} symbol", "overhead", "command");
    for ((comm, leaf), count) in rows_sorted.into_iter().take(rows) {
        let share = if total > 0 {
            100.0 * count as f64 / total as f64
        } else {
            0.0
        };
        let _ = writeln!(out, "{share:>7.2}%  {comm:<16} {leaf}");
    }
    out
}

/// The heaviest folded stacks, leaf-most frames first: a terminal summary of `--stacks`.
pub fn top_stacks(folded: &[(String, u64)], count_name: &str, rows: usize) -> String {
    let total: u64 = folded.iter().map(|(_, w)| w).sum();
    let mut sorted: Vec<&(String, u64)> = folded.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut out = String::new();
    let _ = writeln!(out, "top stacks by {count_name} (leaf first):");
    for (stack, weight) in sorted.into_iter().take(rows) {
        let share = if total > 0 {
            100.0 * *weight as f64 / total as f64
        } else {
            0.0
        };
        let frames: Vec<&str> = stack
            .rsplit(';')
            .take(6)
            .map(|f| f.trim_end_matches(flame::KERNEL_SUFFIX))
            .collect();
        let _ = writeln!(out, "  {share:>6.2}%  {}", frames.join(" <- "));
    }
    out
}
