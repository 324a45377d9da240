//! `hotprof status`: are any hotprof programs or kprobes still in the kernel? After hotprof
//! exits, for whatever reason, the answer must be no: every attachment is an fd that the kernel
//! releases with the process, and nothing is pinned.

use anyhow::Context as _;

/// Program names of hotprof's eBPF object, as the kernel keeps them (15 bytes at most).
fn is_hotprof_program(name: &str) -> bool {
    // As the kernel keeps them: at most 15 bytes.
    let exact = [
        "kprobe_entry",
        "kretprobe_exit",
        "kprobe_multi_en",
        "kretprobe_multi",
        "kprobe_session",
        "fsession",
        "fentry_multi_en",
        "fexit_multi_exi",
        "callsite_return",
        "btf_sys_enter",
        "btf_sys_exit",
        "raw_sys_enter",
        "raw_sys_exit",
        "sched_switch",
        "sched_process_f",
        "sched_process_e",
        "on_cpu_sample",
    ];
    let numbered = ["kprobe_", "fentry_", "fexit_", "sys_enter_", "sys_exit_"];
    exact.contains(&name)
        || numbered.iter().any(|prefix| {
            name.strip_prefix(prefix)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// Registered kprobes, from debugfs `kprobes/list` (`addr  k  symbol+off  [FLAGS]`).
pub fn parse_kprobe_list(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let _address = fields.next()?;
            let kind = fields.next()?;
            let symbol = fields.next()?;
            matches!(kind, "k" | "r").then(|| format!("{kind} {symbol}"))
        })
        .collect()
}

/// How long a closed program may take to leave the kernel's list: it is freed after an RCU
/// grace period (tracing programs: a tasks-trace one, slower), from a workqueue, so right
/// after a hotprof exits its programs can still be listed (`hotprof doctor` then `hotprof
/// status` on a loaded 2-core machine: still there after a 1 s wait once).
const FREEING: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits (up to [`FREEING`]) until the kernel lists no hotprof program: for a command whose
/// own programs are all closed, so that it ends with them gone. `status` itself does not wait:
/// its sleeps while another hotprof runs would be calls that hotprof may be probing (a
/// kprobe.session on `do_nanosleep` counted each as missed, its return-hook pool full).
/// Best effort: where the programs cannot be listed (no `bpf()`, as under qemu-user) it
/// returns at once.
pub fn wait_until_freed() {
    let deadline = std::time::Instant::now() + FREEING;
    while hotprof_programs().is_ok_and(|programs| !programs.is_empty())
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// hotprof's programs in the kernel now: `id N name`.
fn hotprof_programs() -> anyhow::Result<Vec<String>> {
    let mut programs = Vec::new();
    for info in aya::programs::loaded_programs() {
        let info = info.context("listing loaded BPF programs")?;
        let name = info.name_as_str().unwrap_or_default().to_string();
        if is_hotprof_program(&name) {
            programs.push(format!("id {} {name}", info.id()));
        }
    }
    Ok(programs)
}

pub fn run() -> anyhow::Result<i32> {
    crate::attach::check_privileges().map_err(anyhow::Error::msg)?;
    let programs = hotprof_programs()?;
    let kprobes = std::fs::read_to_string("/sys/kernel/debug/kprobes/list")
        .map(|text| parse_kprobe_list(&text))
        .unwrap_or_default();
    println!("hotprof programs loaded: {}", programs.len());
    for program in &programs {
        println!("  {program}");
    }
    println!("kprobes registered (any tool): {}", kprobes.len());
    for kprobe in &kprobes {
        println!("  {kprobe}");
    }
    Ok(if programs.is_empty() && kprobes.is_empty() {
        0
    } else {
        1
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognizes_only_hotprof_program_names() {
        for name in [
            "kprobe_entry",
            "kprobe_0",
            "fentry_0",
            "fexit_63",
            "sys_enter_15",
            "sched_process_f",
            "kprobe_session",
            "kprobe_multi_en",
            "btf_sys_exit",
        ] {
            assert!(is_hotprof_program(name), "{name}");
        }
        for name in ["fentry_", "fentry_x", "tracepoint__sys", "kprobe_entry2"] {
            assert!(!is_hotprof_program(name), "{name}");
        }
    }

    #[test]
    fn parses_the_kprobe_list() {
        let text = "ffffffff8139c0a0  k  vfs_read+0x0    [FTRACE]\nffffffff8139c0a0  r  vfs_read+0x0    [FTRACE]\n";
        assert_eq!(
            parse_kprobe_list(text),
            ["k vfs_read+0x0", "r vfs_read+0x0"]
        );
        assert!(parse_kprobe_list("").is_empty());
    }
}
