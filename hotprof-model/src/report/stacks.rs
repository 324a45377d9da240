//! Stack outputs: folded files, flamegraph SVGs, and the `perf report`-style top table.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

use crate::flame::{
    self, KernelSymbolizer, SavedMaps, StackRecord, Symbols, UserSymbolizer, Weight,
};
use crate::model::CollectedStack;
use crate::model::{FunctionRecord, Recording};

/// Notes on each function of `recording` how its stacks were taken (`--stacks`): a random
/// 1 in `every` calls walked, and how many were, from `walked` per slot (counted before
/// weighting); `function_of` is each slot's index in `recording.functions`.
pub fn note_sampling(recording: &mut Recording, function_of: &[usize], walked: &[u64], every: u32) {
    let mut per_function = vec![0u64; recording.functions.len()];
    for (slot, &calls) in walked.iter().enumerate() {
        if let Some(&index) = function_of.get(slot)
            && let Some(total) = per_function.get_mut(index)
        {
            *total += calls;
        }
    }
    for (function, walked) in recording.functions.iter_mut().zip(per_function) {
        function.note_stacks(every, walked);
    }
}

/// The N of `--stacks-every N` the recording's stacks were taken with, when it is above 1.
fn sampled_every(recording: &Recording) -> Option<u32> {
    recording
        .functions
        .iter()
        .filter_map(|f| f.stacks)
        .map(|s| s.sample_every)
        .max()
        .filter(|&every| every > 1)
}

/// One line for the stack outputs' headers (flamegraph subtitle, pprof comment) when only
/// some calls' stacks were walked.
pub fn sampling_summary(recording: &Recording) -> Option<String> {
    sampled_every(recording).map(|every| {
        format!(
            "stacks of a random 1 in {every} calls, each counted ×{every}: per-path figures are estimates"
        )
    })
}

/// What `--stacks-every N` (N > 1) does to a function's stack figures, for its block in the
/// text report: how many calls were walked, and how far a path's weighted figure can be from
/// the truth. Empty when every call's stack was walked.
pub fn render_sampling(function: &FunctionRecord) -> String {
    let Some(sampling) = function.stacks else {
        return String::new();
    };
    let every = sampling.sample_every;
    if every <= 1 {
        return String::new();
    }
    // A path of n calls has a binomial(n, 1/N) number walked; times N, its standard
    // deviation is √(n·(N−1)), relatively √((N−1)/n).
    let example = (function.count / 10).max(1);
    let relative = 100.0 * (f64::from(every - 1) / example as f64).sqrt();
    format!(
        "  stacks: 1 in {every} calls walked at random ({} of {}), each counted ×{every} in the stack outputs\n    \
         per-path figures are estimates: a path of n calls within ±√({}·n) calls (1σ), \
         ±{relative:.1} % for one with 10 % of the calls; paths of fewer than ~{every} calls may be missing\n",
        sampling.walked_calls,
        function.count,
        every - 1,
    )
}

/// Frames the probe machinery itself adds to a probed function's stack (the BPF program and
/// trampoline of fentry, unsymbolized JIT code, the kprobe/ftrace handlers, the perf
/// tracepoint path of `--syscall`): cut so the stack starts at what was probed.
fn is_probe_frame(name: &str) -> bool {
    [
        "bpf_",
        "__bpf_",
        "ftrace_",
        "kprobe_",
        "__kprobe",
        "arch_ftrace",
        "arch_rethook",
        "rethook_",
        "perf_syscall_",
        "perf_trace_",
        "perf_tp_",
        "trace_call_bpf",
        "syscall_trace_enter",
        // Retpoline thunks called from JIT code the unwinder cannot walk.
        "__x86_indirect_thunk",
        "0x",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// Whether `address` lies where x86-64 puts modules and BPF JIT code (an unnamed frame
/// there is a BPF program or trampoline; elsewhere, unknown code worth keeping).
fn is_jit(address: u64) -> bool {
    address >= 0xffff_ffff_a000_0000
}

/// A stack captured at a probed call's entry (innermost first), without the probe's own
/// frames: it starts at `leaf` (the probed function: name and address), inserted when the
/// mechanism left it out, or at the first real frame when there is no leaf (syscalls); JIT
/// frames deeper in (a trampoline's return address) are dropped, and a caller left twice
/// in a row by them once.
pub fn without_probe_frames(
    mut frames: Vec<u64>,
    leaf: Option<(&str, u64)>,
    kernel: &KernelSymbolizer,
) -> Vec<u64> {
    let named = |address: u64| kernel.symbolize(address).map(|(name, _, _)| name);
    let at_leaf = leaf.and_then(|(name, _)| frames.iter().position(|&a| named(a) == Some(name)));
    match (at_leaf, leaf) {
        (Some(index), _) => {
            frames.drain(..index);
        }
        (None, leaf) => {
            let skip = frames
                .iter()
                .take_while(|&&a| is_probe_frame(&kernel.frame_name(a)))
                .count();
            frames.drain(..skip);
            if let Some((_, address)) = leaf {
                frames.insert(0, address);
            }
        }
    }
    let mut kept: Vec<u64> = Vec::with_capacity(frames.len());
    let mut dropped = false;
    for address in frames {
        if !kept.is_empty() && is_jit(address) && kernel.symbolize(address).is_none() {
            dropped = true;
            continue;
        }
        let repeated =
            named(address).is_some() && kept.last().and_then(|&last| named(last)) == named(address);
        if dropped && repeated {
            dropped = false;
            continue;
        }
        dropped = false;
        kept.push(address);
    }
    kept
}

/// What one slot's stacks end in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaf<'a> {
    /// A probed function (name and address): its frame, inserted where the mechanism left it
    /// out.
    Function(&'a str, u64),
    /// A syscall timed at its tracepoints: its stacks end in the syscall entry code (the
    /// tracepoint's own frames cut), so a frame `NAME [syscall]` names it.
    Syscall(&'a str),
    /// A slot without a known target: the stack as captured, less the probe's frames.
    Unknown,
}

/// Turns collected stacks into records whose kernel stack ends (leaf first) at `leaf`,
/// whatever mechanism captured it.
pub fn records_for(
    stacks: &[CollectedStack],
    func: u32,
    leaf: Leaf,
    kernel: &KernelSymbolizer,
) -> Vec<StackRecord> {
    let (function, named) = match leaf {
        Leaf::Function(name, address) => (Some((name, address)), None),
        Leaf::Syscall(name) => (None, Some(format!("{name} [syscall]"))),
        Leaf::Unknown => (None, None),
    };
    stacks
        .iter()
        .filter(|s| s.func == func)
        .map(|s| StackRecord {
            kernel: without_probe_frames(s.kernel.clone(), function, kernel),
            leaf: named.clone(),
            ..record(s)
        })
        .collect()
}

/// Records of on-CPU samples (`hotprof sample`): kept as taken, since a sample inside a BPF
/// program or trampoline is where the CPU really was.
pub fn sampled_records(stacks: &[CollectedStack]) -> Vec<StackRecord> {
    stacks.iter().map(record).collect()
}

/// Records of samples taken inside `function` (`hotprof sample --inside`): a stack that shows
/// it is kept whole (what runs inside is the point); one that does not was taken in the
/// function's own entry or return probe, whose frames go and the function takes their place.
pub fn inside_records(
    stacks: &[CollectedStack],
    function: (&str, u64),
    kernel: &KernelSymbolizer,
) -> Vec<StackRecord> {
    let shows = |frames: &[u64]| {
        frames.iter().any(|&a| {
            kernel
                .symbolize(a)
                .is_some_and(|(name, _, _)| name == function.0)
        })
    };
    stacks
        .iter()
        .map(|s| StackRecord {
            kernel: if shows(&s.kernel) {
                s.kernel.clone()
            } else {
                without_probe_frames(s.kernel.clone(), Some(function), kernel)
            },
            ..record(s)
        })
        .collect()
}

fn record(stack: &CollectedStack) -> StackRecord {
    StackRecord {
        kernel: stack.kernel.clone(),
        user: stack.user.clone(),
        comm: stack.comm.clone(),
        pid: stack.tgid,
        total_ns: stack.total_ns,
        count: stack.count,
        leaf: None,
    }
}

/// Folds records with kernel symbols, and user symbols when `user` is given (the mappings
/// saved for processes that may have exited).
pub fn fold(
    records: &[StackRecord],
    weight: Weight,
    kernel: &KernelSymbolizer,
    user: Option<&SavedMaps>,
) -> Vec<(String, u64)> {
    let user = user.map(UserSymbolizer::with_saved);
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
    user: Option<&SavedMaps>,
    rows: usize,
) -> String {
    let user = user.map(UserSymbolizer::with_saved);
    let total: u64 = records.iter().map(|r| r.count).sum();
    let mut by_leaf: std::collections::HashMap<(String, String), u64> =
        std::collections::HashMap::new();
    for record in records {
        let leaf = match (&record.leaf, record.kernel.first(), record.user.first()) {
            (Some(leaf), _, _) => format!("[k] {leaf}"),
            (None, Some(&address), _) => format!("[k] {}", kernel.frame_name(address)),
            (None, None, Some(&address)) => match &user {
                Some(user) => format!("[.] {}", user.symbolize(record.pid, &[address]).remove(0)),
                None => format!("[.] {address:#x}"),
            },
            (None, None, None) => format!("[?] {}", flame::UNKNOWN),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel with the probe machinery's frames below the functions of a `read`.
    const KALLSYMS: &[u8] = b"\
ffffffff81000000 T kprobe_ftrace_handler\n\
ffffffff81001000 T arch_ftrace_ops_list_func\n\
ffffffff81002000 T bpf_trampoline_6442451234\n\
ffffffff81010000 T vfs_read\n\
ffffffff81011000 T ksys_read\n\
ffffffff81012000 T do_syscall_64\n\
ffffffffc0a01000 t ext4_file_read_iter\t[ext4]\n";

    const KPROBE_HANDLER: u64 = 0xffffffff81000010;
    const FTRACE_OPS: u64 = 0xffffffff81001020;
    const TRAMPOLINE: u64 = 0xffffffff81002030;
    const VFS_READ: u64 = 0xffffffff81010000;
    const KSYS_READ: u64 = 0xffffffff81011040;
    const SYSCALL: u64 = 0xffffffff81012050;
    const EXT4_READ: u64 = 0xffffffffc0a01060;
    /// Below every symbol: a frame kallsyms cannot name (`0xffffffff70000000`).
    const UNNAMED: u64 = 0xffffffff70000000;

    fn kernel() -> KernelSymbolizer {
        KernelSymbolizer::from_kallsyms(KALLSYMS)
    }

    fn stack(func: u32, kernel: &[u64], total_ns: u64, count: u64) -> CollectedStack {
        CollectedStack {
            func,
            tgid: 42,
            comm: "cat".into(),
            kernel: kernel.to_vec(),
            user: vec![0x401000],
            total_ns,
            count,
        }
    }

    fn kernel_frames(records: &[StackRecord]) -> Vec<Vec<u64>> {
        records.iter().map(|r| r.kernel.clone()).collect()
    }

    #[test]
    fn the_probed_function_becomes_the_leaf_when_it_is_on_the_stack() {
        // fentry: the trampoline sits on top of the probed function's own frame.
        let stacks = [stack(
            0,
            &[TRAMPOLINE, VFS_READ + 8, KSYS_READ, SYSCALL],
            900,
            3,
        )];
        let records = records_for(&stacks, 0, Leaf::Function("vfs_read", VFS_READ), &kernel());
        assert_eq!(
            records,
            [StackRecord {
                kernel: vec![VFS_READ + 8, KSYS_READ, SYSCALL],
                user: vec![0x401000],
                comm: "cat".into(),
                pid: 42,
                total_ns: 900,
                count: 3,
                leaf: None,
            }]
        );
    }

    #[test]
    fn jit_frames_and_the_tracepoint_path_are_cut_and_a_doubled_caller_is_one() {
        const KALLSYMS: &[u8] = b"ffffffff81000000 T do_syscall_64\n\
ffffffff81001000 T perf_syscall_enter\n\
ffffffff81002000 T syscall_trace_enter\n\
ffffffff81003000 T shmem_file_write_iter\n\
ffffffff81004000 T generic_perform_write\n\
ffffffff81005000 T do_nanosleep\n\
ffffffff81006000 T hrtimer_nanosleep\n\
ffffffff81007000 D __start_rodata\n";
        let kernel = KernelSymbolizer::from_kallsyms(KALLSYMS);
        let names = |frames: Vec<u64>| -> Vec<String> {
            frames.iter().map(|&a| kernel.frame_name(a)).collect()
        };
        let (prog, trampoline) = (0xffff_ffff_c008_185a, 0xffff_ffff_c008_3996);
        // fentry entered by `call`: program, trampoline, the return into the function.
        let nanosleep = Some(("do_nanosleep", 0xffff_ffff_8100_5000));
        let stack = vec![
            prog,
            trampoline,
            0xffff_ffff_8100_5005,
            0xffff_ffff_8100_6010,
        ];
        assert_eq!(
            names(without_probe_frames(stack, nanosleep, &kernel)),
            ["do_nanosleep", "hrtimer_nanosleep"]
        );
        // Entered by `jmp` (7.x): no frame of the function; it is put first.
        let stack = vec![prog, trampoline, 0xffff_ffff_8100_6010];
        assert_eq!(
            names(without_probe_frames(stack, nanosleep, &kernel)),
            ["do_nanosleep", "hrtimer_nanosleep"]
        );
        // A trampoline's return address between two frames of the caller.
        let stack = vec![
            0xffff_ffff_8100_4010,
            0xffff_ffff_8100_3020,
            0xffff_ffff_c010_7b79,
            0xffff_ffff_8100_3010,
            0xffff_ffff_8100_0010,
        ];
        let write = Some(("generic_perform_write", 0xffff_ffff_8100_4000));
        assert_eq!(
            names(without_probe_frames(stack, write, &kernel)),
            [
                "generic_perform_write",
                "shmem_file_write_iter",
                "do_syscall_64"
            ]
        );
        // --syscall: the perf tracepoint path goes; there is no leaf to put first.
        let stack = vec![
            0xffff_ffff_8100_1010,
            0xffff_ffff_8100_2010,
            0xffff_ffff_8100_0010,
        ];
        assert_eq!(
            names(without_probe_frames(stack, None, &kernel)),
            ["do_syscall_64"]
        );
        // Real recursion stays.
        let stack = vec![
            0xffff_ffff_8100_5005,
            0xffff_ffff_8100_5040,
            0xffff_ffff_8100_6010,
        ];
        assert_eq!(
            names(without_probe_frames(stack, nanosleep, &kernel)),
            ["do_nanosleep", "do_nanosleep", "hrtimer_nanosleep"]
        );
    }

    #[test]
    fn samples_inside_a_function_keep_their_inner_frames_or_get_the_function_in_place_of_its_probe()
    {
        let stacks = [
            // Inside: ext4 under vfs_read; all of it stays.
            stack(0, &[EXT4_READ, VFS_READ + 8, KSYS_READ], 1, 1),
            // In vfs_read's entry probe: the trampoline goes, vfs_read takes its place.
            stack(0, &[TRAMPOLINE, KSYS_READ, SYSCALL], 1, 1),
        ];
        let records = inside_records(&stacks, ("vfs_read", VFS_READ), &kernel());
        assert_eq!(
            kernel_frames(&records),
            [
                vec![EXT4_READ, VFS_READ + 8, KSYS_READ],
                vec![VFS_READ, KSYS_READ, SYSCALL]
            ]
        );
    }

    #[test]
    fn probe_frames_are_replaced_by_the_probed_function_when_it_is_not() {
        // kprobe: the handlers are called before the probed function has a frame.
        let stacks = [
            stack(0, &[KPROBE_HANDLER, FTRACE_OPS, KSYS_READ, SYSCALL], 1, 1),
            // An unnamed frame on top is the machinery too; one further down is kept.
            stack(0, &[UNNAMED, KPROBE_HANDLER, KSYS_READ, UNNAMED], 1, 1),
            // A stack that was lost: the probed function alone.
            stack(0, &[], 1, 1),
        ];
        let records = records_for(&stacks, 0, Leaf::Function("vfs_read", VFS_READ), &kernel());
        assert_eq!(
            kernel_frames(&records),
            [
                vec![VFS_READ, KSYS_READ, SYSCALL],
                vec![VFS_READ, KSYS_READ, UNNAMED],
                vec![VFS_READ],
            ]
        );
    }

    #[test]
    fn records_are_those_of_one_function_without_probe_frames_even_without_a_leaf() {
        let stacks = [
            stack(0, &[KPROBE_HANDLER, VFS_READ], 10, 1),
            stack(1, &[KPROBE_HANDLER, EXT4_READ, VFS_READ], 20, 2),
            stack(1, &[EXT4_READ], 30, 3),
        ];
        let records = records_for(&stacks, 1, Leaf::Unknown, &kernel());
        assert_eq!(
            kernel_frames(&records),
            [vec![EXT4_READ, VFS_READ], vec![EXT4_READ]]
        );
        assert_eq!(
            records.iter().map(|r| r.total_ns).collect::<Vec<_>>(),
            [20, 30]
        );
        assert!(records_for(&stacks, 2, Leaf::Unknown, &kernel()).is_empty());
    }

    /// Two syscalls' stacks end in the same entry code: each ends in a frame naming its
    /// syscall, so they stay two leaves with their own calls (not one merged tower).
    #[test]
    fn syscall_stacks_end_in_a_frame_naming_the_syscall() {
        let stacks = [
            stack(0, &[KSYS_READ, SYSCALL], 70, 7),
            stack(1, &[KSYS_READ, SYSCALL], 30, 3),
        ];
        let mut records = records_for(&stacks, 0, Leaf::Syscall("getpid"), &kernel());
        records.extend(records_for(&stacks, 1, Leaf::Syscall("getppid"), &kernel()));
        assert_eq!(
            kernel_frames(&records),
            [vec![KSYS_READ, SYSCALL], vec![KSYS_READ, SYSCALL]]
        );
        let folded = fold(&records, Weight::Count, &kernel(), None);
        let leaves: Vec<(&str, u64)> = folded
            .iter()
            .map(|(stack, weight)| (stack.rsplit(';').next().unwrap_or(""), *weight))
            .collect();
        assert_eq!(
            leaves,
            [("getpid [syscall]_[k]", 7), ("getppid [syscall]_[k]", 3)]
        );
        let table = top_table(&records, &kernel(), None, 5);
        assert!(table.contains("[k] getpid [syscall]"), "{table}");
    }

    #[test]
    fn folding_names_kernel_frames_and_leaves_user_frames_unknown_without_user_stacks() {
        let stacks = [
            stack(0, &[TRAMPOLINE, VFS_READ, KSYS_READ, SYSCALL], 900, 3),
            stack(0, &[KPROBE_HANDLER, KSYS_READ, SYSCALL], 100, 1),
            // Entered straight from the syscall, and timed but with no call counted.
            stack(0, &[KPROBE_HANDLER, SYSCALL], 50, 0),
        ];
        let kernel = kernel();
        let records = records_for(&stacks, 0, Leaf::Function("vfs_read", VFS_READ), &kernel);
        let read = "cat;[unknown];do_syscall_64_[k];ksys_read_[k];vfs_read_[k]";
        let direct = "cat;[unknown];do_syscall_64_[k];vfs_read_[k]";
        assert_eq!(
            fold(&records, Weight::LatencyNs, &kernel, None),
            [(read.to_string(), 1_000), (direct.to_string(), 50)]
        );
        // By count, the stack of no calls draws nothing.
        assert_eq!(
            fold(&records, Weight::Count, &kernel, None),
            [(read.to_string(), 4)]
        );
    }

    /// `--stacks-every 8`: every stack output is folded from the weighted stacks, so a path's
    /// latency and calls are its walked calls' figures times 8, whichever weight is drawn.
    #[test]
    fn sampled_stacks_fold_to_their_walked_figures_times_n() {
        let mut stacks = vec![
            stack(0, &[TRAMPOLINE, VFS_READ, KSYS_READ, SYSCALL], 1_000, 4),
            stack(0, &[TRAMPOLINE, VFS_READ, SYSCALL], 50, 1),
        ];
        crate::model::weight_sampled(&mut stacks, 8);
        let kernel = kernel();
        let records = records_for(&stacks, 0, Leaf::Function("vfs_read", VFS_READ), &kernel);
        let read = "cat;[unknown];do_syscall_64_[k];ksys_read_[k];vfs_read_[k]";
        let direct = "cat;[unknown];do_syscall_64_[k];vfs_read_[k]";
        assert_eq!(
            fold(&records, Weight::LatencyNs, &kernel, None),
            [(read.to_string(), 8_000), (direct.to_string(), 400)]
        );
        assert_eq!(
            fold(&records, Weight::Count, &kernel, None),
            [(read.to_string(), 32), (direct.to_string(), 8)]
        );
    }

    fn recording_of(counts: &[u64]) -> Recording {
        let functions = counts
            .iter()
            .enumerate()
            .map(|(index, &count)| {
                let durations = vec![100; count as usize];
                FunctionRecord::from_aggregates(
                    format!("f{index}"),
                    format!("f{index}"),
                    &crate::model::FunctionTotals::from_durations(&durations),
                )
            })
            .collect();
        // From JSON, the way a saved recording is read: only the fields every file has.
        let mut recording: Recording = serde_json::from_value(serde_json::json!({
            "schema_version": crate::model::SCHEMA_VERSION,
            "tool": "hotprof test",
            "kernel": "6.12.0",
            "mode": "fentry",
            "duration_ns": 1,
            "functions": [],
            "losses": crate::model::Losses::default(),
        }))
        .unwrap();
        recording.functions = functions;
        recording
    }

    #[test]
    fn walked_calls_are_summed_over_a_functions_call_sites() {
        // Slots 0 and 1 are two call sites of the first function, slot 2 the second.
        let mut recording = recording_of(&[1_000, 80]);
        note_sampling(&mut recording, &[0, 0, 1], &[100, 30, 10], 8);
        let noted: Vec<_> = recording.functions.iter().map(|f| f.stacks).collect();
        assert_eq!(
            noted
                .iter()
                .map(|s| s.map(|s| (s.sample_every, s.walked_calls)))
                .collect::<Vec<_>>(),
            [Some((8, 130)), Some((8, 10))]
        );
        // Walked counts of slots the recording has no function for are ignored.
        let mut short = recording_of(&[5]);
        note_sampling(&mut short, &[0, 1], &[5, 9], 1);
        assert_eq!(short.functions[0].stacks.map(|s| s.walked_calls), Some(5));
    }

    #[test]
    fn the_report_states_the_sampling_and_its_error_only_when_sampled() {
        let mut recording = recording_of(&[10_000]);
        note_sampling(&mut recording, &[0], &[1_262], 8);
        let function = &recording.functions[0];
        // A path with 10 % of the calls: 1000 calls, ±√(7·1000) = ±83.7 (8.4 %).
        assert_eq!(
            render_sampling(function),
            "  stacks: 1 in 8 calls walked at random (1262 of 10000), each counted ×8 in the stack outputs\n\
             \x20   per-path figures are estimates: a path of n calls within ±√(7·n) calls (1σ), \
             ±8.4 % for one with 10 % of the calls; paths of fewer than ~8 calls may be missing\n"
        );
        assert_eq!(
            sampling_summary(&recording).as_deref(),
            Some(
                "stacks of a random 1 in 8 calls, each counted ×8: per-path figures are estimates"
            )
        );
        // Exact stacks (every call walked), or none at all: nothing to say.
        let mut exact = recording_of(&[10_000]);
        note_sampling(&mut exact, &[0], &[10_000], 1);
        assert_eq!(render_sampling(&exact.functions[0]), "");
        assert_eq!(sampling_summary(&exact), None);
        let none = recording_of(&[10_000]);
        assert_eq!(render_sampling(&none.functions[0]), "");
        assert_eq!(sampling_summary(&none), None);
    }

    fn record(comm: &str, kernel: &[u64], user: &[u64], count: u64) -> StackRecord {
        StackRecord {
            kernel: kernel.to_vec(),
            user: user.to_vec(),
            comm: comm.into(),
            pid: 42,
            total_ns: 0,
            count,
            leaf: None,
        }
    }

    #[test]
    fn the_top_table_shares_calls_by_command_and_leaf() {
        let records = [
            record("cat", &[VFS_READ, SYSCALL], &[0x401000], 3),
            record("dd", &[VFS_READ], &[], 2),
            record("cat", &[VFS_READ + 4], &[], 2),
            record("cat", &[KSYS_READ], &[], 1),
            record("cat", &[], &[0x401000], 1),
            record("dd", &[], &[], 1),
        ];
        assert_eq!(
            top_table(&records, &kernel(), None, 10),
            "overhead  command          symbol\n\
             \x20 50.00%  cat              [k] vfs_read\n\
             \x20 20.00%  dd               [k] vfs_read\n\
             \x20 10.00%  cat              [.] 0x401000\n\
             \x20 10.00%  cat              [k] ksys_read\n\
             \x20 10.00%  dd               [?] [unknown]\n"
        );
        assert_eq!(
            top_table(&records, &kernel(), None, 1),
            "overhead  command          symbol\n\
             \x20 50.00%  cat              [k] vfs_read\n"
        );
    }

    #[test]
    fn the_top_table_names_modules_and_survives_no_calls() {
        let records = [record("cat", &[EXT4_READ], &[], 0)];
        assert_eq!(
            top_table(&records, &kernel(), None, 10),
            "overhead  command          symbol\n\
             \x20  0.00%  cat              [k] ext4_file_read_iter [ext4]\n"
        );
        assert_eq!(
            top_table(&[], &kernel(), None, 10),
            "overhead  command          symbol\n"
        );
    }

    #[test]
    fn top_stacks_show_the_heaviest_leaf_first_six_frames_deep() {
        let folded = [
            (
                "cat;[unknown];do_syscall_64_[k];ksys_read_[k];vfs_read_[k]".to_string(),
                600,
            ),
            (
                "dd;a_[k];b_[k];c_[k];d_[k];e_[k];f_[k];g_[k]".to_string(),
                200,
            ),
            ("b;x_[k]".to_string(), 100),
            ("a;x_[k]".to_string(), 100),
        ];
        assert_eq!(
            top_stacks(&folded, "ns", 10),
            "top stacks by ns (leaf first):\n\
             \x20  60.00%  vfs_read <- ksys_read <- do_syscall_64 <- [unknown] <- cat\n\
             \x20  20.00%  g <- f <- e <- d <- c <- b\n\
             \x20  10.00%  x <- a\n\
             \x20  10.00%  x <- b\n"
        );
        assert_eq!(
            top_stacks(&folded, "calls", 1),
            "top stacks by calls (leaf first):\n\
             \x20  60.00%  vfs_read <- ksys_read <- do_syscall_64 <- [unknown] <- cat\n"
        );
        assert_eq!(
            top_stacks(&[("a;x_[k]".to_string(), 0)], "ns", 5),
            "top stacks by ns (leaf first):\n\x20   0.00%  x <- a\n"
        );
    }
}
