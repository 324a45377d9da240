//! The pure half of the instruction-count section: reading the plugin's report and the guest's
//! kallsyms, attributing the counted blocks to kernel symbols, and the per-call differences
//! between two runs.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};

/// One translated block's share of a window: the plugin counts per block start address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub addr: u64,
    /// Instructions executed in this block (block length × executions).
    pub insns: u64,
    pub executions: u64,
}

/// Everything one vCPU executed between a start marker and the end marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub vcpu: u32,
    pub insns: u64,
    /// Summed by address (a block can be translated more than once).
    pub blocks: Vec<Block>,
}

/// Reads the plugin's report (format in `xtask/qemu-plugin/insn_count.c`); checks that every
/// window is complete, numbered in order, and that its blocks add up to its total.
pub fn parse_plugin_report(text: &str) -> Result<Vec<Window>> {
    let mut windows = Vec::new();
    let mut open: Option<(Window, u64)> = None;
    for (index, line) in text.lines().enumerate() {
        let at = || format!("plugin report line {}: `{line}`", index + 1);
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [
                "window",
                number,
                "vcpu",
                vcpu,
                "insns",
                insns,
                "blocks",
                blocks,
            ] => {
                if open.is_some() {
                    bail!("{}: a window starts inside another", at());
                }
                let number: usize = number.parse().with_context(at)?;
                if number != windows.len() + 1 {
                    bail!("{}: window {number} follows {}", at(), windows.len());
                }
                let window = Window {
                    vcpu: vcpu.parse().with_context(at)?,
                    insns: insns.parse().with_context(at)?,
                    blocks: Vec::new(),
                };
                open = Some((window, blocks.parse().with_context(at)?));
            }
            ["tb", addr, insns, executions] => {
                let Some((window, _)) = open.as_mut() else {
                    bail!("{}: a block outside any window", at());
                };
                window.blocks.push(Block {
                    addr: u64::from_str_radix(addr, 16).with_context(at)?,
                    insns: insns.parse().with_context(at)?,
                    executions: executions.parse().with_context(at)?,
                });
            }
            ["end", number] => {
                let Some((mut window, blocks)) = open.take() else {
                    bail!("{}: an end outside any window", at());
                };
                if number.parse::<usize>().with_context(at)? != windows.len() + 1 {
                    bail!("{}: ends another window than it started", at());
                }
                if window.blocks.len() as u64 != blocks {
                    bail!(
                        "{}: {} blocks listed, {blocks} announced",
                        at(),
                        window.blocks.len()
                    );
                }
                let summed: u64 = window.blocks.iter().map(|b| b.insns).sum();
                if summed != window.insns {
                    bail!(
                        "{}: blocks add up to {summed} instructions, the window says {}",
                        at(),
                        window.insns
                    );
                }
                window.blocks = merge_by_address(window.blocks);
                windows.push(window);
            }
            ["exit", "windows", _, "open", _] => {}
            [] => {}
            _ => bail!("{}: not a line of the plugin's report", at()),
        }
    }
    if open.is_some() {
        bail!(
            "the plugin's report ends inside window {}",
            windows.len() + 1
        );
    }
    Ok(windows)
}

fn merge_by_address(blocks: Vec<Block>) -> Vec<Block> {
    let mut by_addr: BTreeMap<u64, Block> = BTreeMap::new();
    for block in blocks {
        let merged = by_addr.entry(block.addr).or_insert(Block {
            addr: block.addr,
            insns: 0,
            executions: 0,
        });
        merged.insns += block.insns;
        merged.executions += block.executions;
    }
    by_addr.into_values().collect()
}

/// A text symbol from `/proc/kallsyms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub addr: u64,
    pub name: String,
    /// `bpf` for JIT images and trampolines, `__builtin__kprobes` for kprobe slots, a module.
    pub module: Option<String>,
}

/// Text symbols sorted by address, to find the one an address falls in.
#[derive(Clone, Debug, Default)]
pub struct SymbolTable {
    symbols: Vec<Symbol>,
}

/// Where an address falls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place<'a> {
    /// Below the kernel half of the address space.
    User,
    Kernel(&'a Symbol),
    /// Kernel address with no text symbol at or within [`MAX_SYMBOL_REACH`] below it.
    UnknownKernel,
}

/// kallsyms has no sizes: an address this far past the nearest symbol is not taken to be in it.
pub const MAX_SYMBOL_REACH: u64 = 256 * 1024;

/// x86-64 kernel addresses are the upper half.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

impl SymbolTable {
    /// Adds the text symbols (`t`/`T`) of kallsyms lines; a line with address 0 (addresses
    /// hidden by kptr_restrict) is an error, since nothing could be attributed.
    pub fn add_kallsyms(&mut self, text: &str) -> Result<()> {
        for (index, line) in text.lines().enumerate() {
            let mut fields = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                bail!("kallsyms line {}: `{line}`", index + 1);
            };
            if !matches!(kind, "t" | "T") {
                continue;
            }
            let addr = u64::from_str_radix(addr, 16)
                .with_context(|| format!("kallsyms line {}: `{line}`", index + 1))?;
            if addr == 0 {
                bail!("kallsyms shows address 0 for {name}: addresses are hidden (kptr_restrict)");
            }
            let module = fields
                .next()
                .map(|m| m.trim_start_matches('[').trim_end_matches(']').to_owned());
            self.symbols.push(Symbol {
                addr,
                name: name.to_owned(),
                module,
            });
        }
        self.symbols
            .sort_by(|a, b| a.addr.cmp(&b.addr).then(a.name.cmp(&b.name)));
        self.symbols
            .dedup_by(|b, a| a.addr == b.addr && a.name == b.name);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// The symbol `addr` falls in: the nearest at or below it (of aliases, the first by name).
    pub fn place(&self, addr: u64) -> Place<'_> {
        if addr < KERNEL_START {
            return Place::User;
        }
        let after = self.symbols.partition_point(|s| s.addr <= addr);
        let Some(nearest) = after.checked_sub(1).map(|i| &self.symbols[i]) else {
            return Place::UnknownKernel;
        };
        if addr - nearest.addr > MAX_SYMBOL_REACH {
            return Place::UnknownKernel;
        }
        // Aliases share an address: take the first by name, the same one every run.
        let first = self.symbols.partition_point(|s| s.addr < nearest.addr);
        Place::Kernel(&self.symbols[first])
    }

    /// Whether a symbol starts exactly at `addr`, and if so the first (by name).
    fn starting_at(&self, addr: u64) -> Option<&Symbol> {
        let first = self.symbols.partition_point(|s| s.addr < addr);
        self.symbols.get(first).filter(|s| s.addr == addr)
    }
}

/// Row names for addresses outside any kernel symbol.
pub const USER_SPACE: &str = "[user space]";
pub const UNKNOWN_KERNEL: &str = "[kernel, no symbol]";

/// A window's instructions by symbol name.
pub fn insns_by_symbol(window: &Window, symbols: &SymbolTable) -> BTreeMap<String, u64> {
    let mut by_symbol: BTreeMap<String, u64> = BTreeMap::new();
    for block in &window.blocks {
        let name = match symbols.place(block.addr) {
            Place::User => USER_SPACE,
            Place::Kernel(symbol) => symbol.name.as_str(),
            Place::UnknownKernel => UNKNOWN_KERNEL,
        };
        *by_symbol.entry(name.to_owned()).or_default() += block.insns;
    }
    by_symbol
}

/// How many times BPF programs were entered in the window: executions of the blocks that
/// start exactly at a `bpf_prog_*` symbol. Counted by the plugin, so a probe that never fired
/// cannot pass for a cheap one.
pub fn bpf_program_entries(window: &Window, symbols: &SymbolTable) -> u64 {
    window
        .blocks
        .iter()
        .filter(|block| {
            symbols
                .starting_at(block.addr)
                .is_some_and(|s| s.name.starts_with("bpf_prog_"))
        })
        .map(|block| block.executions)
        .sum()
}

/// Where a kernel symbol's instructions belong, for the attribution tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    /// The JIT images of the attached programs (hotprof's, empty_probe's, bpftrace's).
    Programs,
    /// Helpers and map code the programs call (task storage, hash maps, clocks, …).
    Helpers,
    /// The kernel stack walk behind `bpf_get_stackid` (ORC unwinder, address checks).
    StackWalk,
    /// What runs around every program whatever attached it: `trace_call_bpf`,
    /// `migrate_disable/enable`, RCU read lock, program stats.
    Dispatch,
    /// The kprobe/kretprobe path: int3 trap, kprobe handlers, the out-of-line slot, rethook.
    Kprobe,
    /// fentry/fexit: the BPF trampoline and the enter/exit functions it calls.
    Trampoline,
    /// Syscall tracepoints: the perf event path that runs before the program.
    Tracepoint,
    /// The rest of the kernel (the syscall itself, interrupts, the scheduler, …).
    OtherKernel,
    User,
}

impl Category {
    pub fn label(self) -> &'static str {
        match self {
            Category::Programs => "BPF programs (bpf_prog_*)",
            Category::Helpers => "BPF helpers and maps",
            Category::StackWalk => "stack walk (bpf_get_stackid)",
            Category::Dispatch => "program dispatch (trace_call_bpf, migrate, RCU)",
            Category::Kprobe => "kprobe/int3 path",
            Category::Trampoline => "BPF trampoline",
            Category::Tracepoint => "perf tracepoint path",
            Category::OtherKernel => "other kernel",
            Category::User => "user space",
        }
    }

    pub fn of(symbol: &str) -> Self {
        if symbol == USER_SPACE {
            return Category::User;
        }
        if symbol.starts_with("bpf_prog_") {
            return Category::Programs;
        }
        const DISPATCH: &[&str] = &[
            "trace_call_bpf",
            "migrate_disable",
            "migrate_enable",
            "__rcu_read_lock",
            "__rcu_read_unlock",
            "update_prog_stats",
            "perf_call_bpf_",
            "bpf_prog_run",
            "bpf_trace_run",
        ];
        if DISPATCH.iter().any(|p| symbol.starts_with(p)) {
            return Category::Dispatch;
        }
        const STACK_WALK: &[&str] = &[
            "unwind_",
            "__unwind_",
            "__orc_",
            "orc_",
            "stack_access_ok",
            "stackid_fastpath",
            "get_perf_callchain",
            "perf_callchain_",
            "get_callchain_entry",
            "put_callchain_entry",
            "__bpf_get_stackid",
            "bpf_get_stackid",
            "kernel_text_address",
            "__kernel_text_address",
            "is_bpf_text_address",
            "bpf_ksym_find",
            "__is_insn_slot_addr",
            "is_ftrace_trampoline",
            "ftrace_graph_ret_addr",
            "is_module_text_address",
            "__module_address",
            "in_entry_stack",
            "in_task_stack",
            "in_irq_stack",
            "get_stack_info",
            "is_kernel_text",
            // arm64's unwinder.
            "kunwind_",
            "arch_stack_walk",
            "arch_bpf_stack_walk",
            "callchain_trace",
        ];
        if STACK_WALK.iter().any(|p| symbol.starts_with(p)) {
            return Category::StackWalk;
        }
        const TRAMPOLINE: &[&str] = &[
            "bpf_trampoline_",
            "__bpf_prog_enter",
            "__bpf_prog_exit",
            "__bpf_tramp_",
            "bpf_tramp",
            // arm64: the patched `bl` at a function's entry reaches the trampoline through
            // ftrace's own (call ops, direct calls).
            "ftrace_caller",
            "ftrace_common",
        ];
        if TRAMPOLINE.iter().any(|p| symbol.starts_with(p)) {
            return Category::Trampoline;
        }
        const KPROBE: &[&str] = &[
            "kprobe",
            "kretprobe",
            "__kretprobe",
            "arch_rethook",
            "rethook",
            "__rethook",
            "exc_int3",
            "asm_exc_int3",
            "do_int3",
            "poke_int3",
            "optimized_callback",
            "opt_pre_handler",
            "get_kprobe",
            "optprobe_template",
            "aggr_",
            "resume_singlestep",
            "setup_singlestep",
            "skip_prefixes",
            "objpool_",
            "ftrace_trampoline",
            // arm64: a kprobe is a BRK exception, its single step another debug exception.
            "el1h_64_sync",
            "el1_dbg",
            "arm64_enter_el1_dbg",
            "arm64_exit_el1_dbg",
            "do_debug_exception",
            "brk_handler",
            "call_break_hook",
            "single_step_handler",
            "call_step_hook",
            "do_el1_brk64",
            "ret_to_kernel",
            // The debug exception's entry and exit account it as an NMI.
            "ct_nmi_enter",
            "ct_nmi_exit",
        ];
        if KPROBE.iter().any(|p| symbol.starts_with(p))
            || symbol.contains("kprobe")
            || symbol.contains("kretprobe")
        {
            return Category::Kprobe;
        }
        const TRACEPOINT: &[&str] = &[
            "perf_syscall_",
            "perf_trace_",
            "perf_tp_",
            "perf_swevent_",
            "perf_fetch_caller_regs",
            "syscall_trace_",
            "trace_event_",
            "__traceiter_",
            "ftrace_syscall_",
        ];
        if TRACEPOINT.iter().any(|p| symbol.starts_with(p)) {
            return Category::Tracepoint;
        }
        const HELPERS: &[&str] = &[
            "bpf_",
            "copy_from_kernel_nofault",
            "__bpf_",
            "___bpf_",
            "htab_",
            "__htab_",
            "array_map_",
            "percpu_array_",
            "task_storage_",
            "get_perf_callchain",
            "perf_callchain_",
            "jhash",
            "lookup_elem_raw",
            "prealloc_lru_pop",
            "pcpu_freelist_",
            "__pcpu_freelist_",
            "ktime_get_mono_fast_ns",
        ];
        if HELPERS.iter().any(|p| symbol.starts_with(p)) {
            return Category::Helpers;
        }
        Category::OtherKernel
    }
}

/// One symbol's added instructions per call, relative to another run.
#[derive(Clone, Debug, PartialEq)]
pub struct Added {
    pub symbol: String,
    pub category: Category,
    pub per_call: f64,
}

/// Per symbol, (variant − bare) / calls, largest change first (by size, so a symbol the
/// other run spent more in shows near the top too); symbols both runs spent the same
/// instructions in are left out.
pub fn added_per_call(
    variant: &BTreeMap<String, u64>,
    bare: &BTreeMap<String, u64>,
    calls: u64,
) -> Vec<Added> {
    let names: std::collections::BTreeSet<&String> = variant.keys().chain(bare.keys()).collect();
    let mut rows: Vec<Added> = names
        .into_iter()
        .filter_map(|name| {
            let with = variant.get(name).copied().unwrap_or(0) as f64;
            let without = bare.get(name).copied().unwrap_or(0) as f64;
            (with != without).then(|| Added {
                symbol: name.clone(),
                category: Category::of(name),
                per_call: (with - without) / calls as f64,
            })
        })
        .collect();
    rows.sort_by(|a, b| {
        b.per_call
            .abs()
            .total_cmp(&a.per_call.abs())
            .then_with(|| a.symbol.cmp(&b.symbol))
    });
    rows
}

/// Added instructions per call by category, in category order.
pub fn by_category(rows: &[Added]) -> BTreeMap<Category, f64> {
    let mut totals = BTreeMap::new();
    for row in rows {
        *totals.entry(row.category).or_default() += row.per_call;
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "\
window 1 vcpu 1 insns 130 blocks 3
tb ffffffff81000010 100 10
tb 401000 20 2
tb ffffffff81000010 10 1
end 1
window 2 vcpu 0 insns 7 blocks 1
tb ffffffffc0001000 7 1
end 2
exit windows 2 open 0
";

    #[test]
    fn reads_windows_and_merges_retranslated_blocks() {
        let windows = parse_plugin_report(REPORT).expect("valid");
        assert_eq!(windows.len(), 2);
        assert_eq!(windows[0].vcpu, 1);
        assert_eq!(windows[0].insns, 130);
        assert_eq!(
            windows[0].blocks,
            [
                Block {
                    addr: 0x401000,
                    insns: 20,
                    executions: 2
                },
                Block {
                    addr: 0xffff_ffff_8100_0010,
                    insns: 110,
                    executions: 11
                }
            ]
        );
        assert_eq!(windows[1].vcpu, 0);
        assert_eq!(parse_plugin_report("exit windows 0 open 0\n").unwrap(), []);
    }

    #[test]
    fn refuses_inconsistent_reports() {
        let wrong_total = REPORT.replace("insns 130", "insns 131");
        let err = parse_plugin_report(&wrong_total).unwrap_err().to_string();
        assert!(err.contains("add up to 130"), "{err}");
        let unfinished = "window 1 vcpu 1 insns 5 blocks 1\ntb ffffffff81000000 5 1\n";
        let err = parse_plugin_report(unfinished).unwrap_err().to_string();
        assert!(err.contains("ends inside window 1"), "{err}");
        let skipped = REPORT.replace("window 2", "window 3");
        assert!(parse_plugin_report(&skipped).is_err());
        let missing_block = REPORT.replace("blocks 1", "blocks 2");
        assert!(parse_plugin_report(&missing_block).is_err());
        assert!(parse_plugin_report("tb 10 1 1\n").is_err());
        assert!(parse_plugin_report("garbage\n").is_err());
    }

    const KALLSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T startup_64
ffffffff81000100 t helper
ffffffff81200000 D some_data
ffffffffc0001000 t bpf_prog_6deef7357e7b4530_hp_entry\t[bpf]
ffffffffc0001100 t bpf_trampoline_6442491234\t[bpf]
";

    fn table() -> SymbolTable {
        let mut table = SymbolTable::default();
        table.add_kallsyms(KALLSYMS).expect("valid");
        table
    }

    #[test]
    fn addresses_find_their_symbols() {
        let table = table();
        assert_eq!(table.len(), 5, "data symbols left out");
        let name = |addr| match table.place(addr) {
            Place::Kernel(symbol) => symbol.name.clone(),
            other => format!("{other:?}"),
        };
        assert_eq!(
            name(0xffff_ffff_8100_0000),
            "_stext",
            "aliases: first by name"
        );
        assert_eq!(name(0xffff_ffff_8100_00ff), "_stext");
        assert_eq!(name(0xffff_ffff_8100_0100), "helper");
        assert_eq!(
            name(0xffff_ffff_c000_1010),
            "bpf_prog_6deef7357e7b4530_hp_entry"
        );
        assert_eq!(name(0x401000), "User");
        assert_eq!(
            name(0xffff_ffff_8000_0000),
            "UnknownKernel",
            "below every symbol"
        );
        assert_eq!(
            name(0xffff_ffff_8100_0100 + MAX_SYMBOL_REACH + 1),
            "UnknownKernel"
        );
        let Place::Kernel(bpf) = table.place(0xffff_ffff_c000_1100) else {
            panic!("trampoline not found");
        };
        assert_eq!(bpf.module.as_deref(), Some("bpf"));
    }

    #[test]
    fn hidden_addresses_are_an_error() {
        let mut table = SymbolTable::default();
        let err = table
            .add_kallsyms("0000000000000000 T _stext\n")
            .unwrap_err();
        assert!(err.to_string().contains("kptr_restrict"), "{err}");
        assert!(table.add_kallsyms("ffffffff81000000\n").is_err());
    }

    #[test]
    fn attribution_and_program_entries() {
        let window = Window {
            vcpu: 1,
            insns: 0,
            blocks: vec![
                Block {
                    addr: 0x401000,
                    insns: 6,
                    executions: 3,
                },
                Block {
                    addr: 0xffff_ffff_8100_0100,
                    insns: 40,
                    executions: 4,
                },
                Block {
                    addr: 0xffff_ffff_8100_0120,
                    insns: 8,
                    executions: 4,
                },
                Block {
                    addr: 0xffff_ffff_c000_1000,
                    insns: 30,
                    executions: 3,
                },
                Block {
                    addr: 0xffff_ffff_c000_1010,
                    insns: 9,
                    executions: 3,
                },
                Block {
                    addr: 0xffff_ffff_f000_0000,
                    insns: 1,
                    executions: 1,
                },
            ],
        };
        let table = table();
        let by_symbol = insns_by_symbol(&window, &table);
        let want: BTreeMap<String, u64> = [
            (USER_SPACE, 6),
            ("helper", 48),
            ("bpf_prog_6deef7357e7b4530_hp_entry", 39),
            (UNKNOWN_KERNEL, 1),
        ]
        .into_iter()
        .map(|(name, n)| (name.to_owned(), n))
        .collect();
        assert_eq!(by_symbol, want);
        // Only the block at the program's first instruction counts as an entry.
        assert_eq!(bpf_program_entries(&window, &table), 3);
    }

    #[test]
    fn differences_per_call_largest_first() {
        let map = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect()
        };
        let bare = map(&[
            ("do_syscall_64", 1000),
            ("__x64_sys_getpid", 300),
            (USER_SPACE, 500),
        ]);
        let probed = map(&[
            ("do_syscall_64", 1000),
            ("__x64_sys_getpid", 300),
            (USER_SPACE, 490),
            ("bpf_prog_aa_hp_entry", 2000),
            ("bpf_task_storage_get", 400),
            ("kprobe_int3_handler", 400),
            ("bpf_prog_bb_floor", 0),
        ]);
        let bare = {
            let mut bare = bare;
            bare.insert("bpf_prog_bb_floor".into(), 700);
            bare
        };
        let rows = added_per_call(&probed, &bare, 100);
        let shown: Vec<(&str, Category, f64)> = rows
            .iter()
            .map(|r| (r.symbol.as_str(), r.category, r.per_call))
            .collect();
        assert_eq!(
            shown,
            [
                ("bpf_prog_aa_hp_entry", Category::Programs, 20.0),
                ("bpf_prog_bb_floor", Category::Programs, -7.0),
                ("bpf_task_storage_get", Category::Helpers, 4.0),
                ("kprobe_int3_handler", Category::Kprobe, 4.0),
                (USER_SPACE, Category::User, -0.1),
            ]
        );
        let totals = by_category(&rows);
        assert_eq!(totals[&Category::Programs], 13.0);
        assert_eq!(totals.get(&Category::OtherKernel), None);
    }

    #[test]
    fn categories() {
        for (symbol, category) in [
            ("bpf_prog_0123456789abcdef_hp_kprobe", Category::Programs),
            ("bpf_trampoline_6442491234", Category::Trampoline),
            ("__bpf_prog_enter_recur", Category::Trampoline),
            ("bpf_task_storage_get", Category::Helpers),
            ("bpf_get_stackid", Category::StackWalk),
            ("__htab_map_lookup_elem", Category::Helpers),
            ("unwind_next_frame", Category::StackWalk),
            ("stack_access_ok", Category::StackWalk),
            ("trace_call_bpf", Category::Dispatch),
            ("bpf_trace_run2", Category::Dispatch),
            ("copy_from_kernel_nofault_allowed", Category::Helpers),
            ("migrate_enable", Category::Dispatch),
            ("objpool_push.isra.0", Category::Kprobe),
            ("ftrace_trampoline", Category::Kprobe),
            ("kprobe_int3_handler", Category::Kprobe),
            ("asm_exc_int3", Category::Kprobe),
            ("kprobe_insn_page", Category::Kprobe),
            ("pre_handler_kretprobe", Category::Kprobe),
            ("perf_syscall_enter", Category::Tracepoint),
            ("perf_trace_buf_alloc", Category::Tracepoint),
            ("do_syscall_64", Category::OtherKernel),
            (USER_SPACE, Category::User),
        ] {
            assert_eq!(Category::of(symbol), category, "{symbol}");
        }
    }
}
