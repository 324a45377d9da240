//! `hotprof doctor` on this machine (root needed; run by hand or by `cargo xtask test`): the
//! rows it can know for sure agree with what the kernel shows by other means, and the core
//! works (the development machines have no kprobes and refuse fentry, but the syscall
//! tracepoints attach). The guest kernels' rows are checked by the VM scenario
//! `doctor_matches_what_works`.

use std::path::Path;

use profiler::commands::doctor::{Row, Status, Tried, gather, render, rows, verdict};

fn row<'a>(rows: &'a [Row], name: &str) -> &'a Row {
    rows.iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no row {name}"))
}

#[test]
#[ignore = "needs root: loads hotprof's programs and attaches them to getpid"]
fn doctor_tells_the_truth_about_this_machine() {
    let facts = gather();
    let rows = rows(&facts);
    let verdict = verdict(&facts);
    let text = render("hotprof doctor test", &rows, &verdict);

    assert_eq!(row(&rows, "kernel").found, profiler::kernel_release());
    assert_eq!(row(&rows, "privileges").status, Status::Yes, "{text}");
    assert_eq!(row(&rows, "eBPF programs").status, Status::Yes, "{text}");
    let btf = Path::new("/sys/kernel/btf/vmlinux").exists();
    assert_eq!(row(&rows, "BTF").status == Status::Yes, btf, "{text}");

    // kprobes: what the kernel's kprobe PMU says, and the missing PMU named when it is missing.
    let kprobe_pmu = Path::new("/sys/bus/event_source/devices/kprobe").exists();
    let kprobes = row(&rows, "kprobes");
    assert_eq!(kprobes.status == Status::Yes, kprobe_pmu, "{text}");
    if !kprobe_pmu {
        assert!(kprobes.found.starts_with("no kprobe PMU"), "{text}");
    }
    // fentry: tried for real, so it agrees with aya's own probe of tracing programs (which
    // attaches one to bpf_fentry_test1); refused, it gives the kernel's reason.
    let fentry = row(&rows, "fentry");
    let aya_says = aya::sys::is_program_supported(aya::programs::ProgramType::Tracing);
    if fentry.status == Status::Yes {
        assert!(matches!(aya_says, Ok(true)), "{aya_says:?}\n{text}");
    } else {
        assert!(!matches!(aya_says, Ok(true)), "{aya_says:?}\n{text}");
        assert!(fentry.found.contains("(os error "), "{text}");
    }
    // Every kernel hotprof supports has syscall tracepoints and perf events.
    assert_eq!(
        row(&rows, "syscall tracepoints").status,
        Status::Yes,
        "{text}"
    );
    assert_eq!(row(&rows, "perf sampling").status, Status::Yes, "{text}");
    assert_eq!(row(&rows, "tracefs").status, Status::Yes, "{text}");
    let tracefs = facts.tracefs.usable.as_deref().expect("a tracefs root");
    assert!(tracefs.join("events/syscalls").is_dir(), "{text}");
    // kcore: present or not, as the file says.
    let kcore = Path::new("/proc/kcore").exists();
    assert_eq!(
        !matches!(facts.kcore, Tried::Fails(ref why) if why.contains("does not exist")),
        kcore,
        "{text}"
    );
    // Root sees addresses unless kptr_restrict is 2.
    let kptr = row(&rows, "kptr_restrict");
    assert_eq!(
        kptr.status == Status::Yes,
        facts.kptr_restrict != Some(2),
        "{text}"
    );

    assert!(verdict.works, "{text}");
    assert_eq!(text.lines().last(), Some(verdict.line.as_str()));
    if !kprobe_pmu && fentry.status != Status::Yes {
        assert!(
            verdict
                .line
                .starts_with("hotprof works here with syscall tracepoints only"),
            "{text}"
        );
    }
}
