//! VM scenarios on arm64 guests: Debian's arm64 cloud kernel on qemu's `virt` board (TCG),
//! with hotprof, its arm64 eBPF objects and the workloads cross-built for aarch64.

use anyhow::{Result, ensure};

use super::doctor::{check_rows, expected_rows};
use super::harness::{Ctx, Guest};

/// Calls syscall_lat makes: few, as every one is emulated.
const CALLS: u64 = 5_000;
/// dd's 4 KiB writes to tmpfs: one `copy_page_from_iter_atomic` each.
const WRITES: u64 = 200;

/// One arm64 boot: `hotprof doctor` says hotprof works there, with the rows Debian's arm64
/// kernel earns (kprobes, fentry, BTF, tracepoints, perf yes; kprobe.multi/session no, as the
/// arm64 cloud kernel is built without fprobe); then exact counts: `vfs_read` under fentry,
/// exactly file_read's reads (a musl binary: Rust's runtime reads no `/proc/self/maps` at
/// start-up, unlike the x86_64 glibc guests' one extra read); getpid's arm64 syscall wrapper
/// `__arm64_sys_getpid` under a kprobe; `--syscall getpid` on its syscall tracepoints and in
/// the default mode (the raw tracepoints, found by arm64's own syscall numbers); and the
/// notrace `copy_page_from_iter_atomic` at its call sites (`bl` found in the kernel's code),
/// exactly dd's writes to tmpfs. Every run prints its probe overhead (calibrated on arm64's
/// own symbols: `__arm64_sys_arm64_personality`, getpid's wrapper).
pub fn arm64_fentry_exact(ctx: &mut Ctx) -> Result<()> {
    let guest = ctx.run(&format!(
        "uname -m; hotprof doctor; echo doctor_exit=$?\n\
         hotprof --fn vfs_read --mode fentry --json /out/read.json -- file_read /tmp/f 4 \
         || echo fentry_failed=$?\n\
         hotprof --fn __arm64_sys_getpid --mode kprobe --json /out/getpid.json \
         -- syscall_lat {CALLS} || echo kprobe_failed=$?\n\
         hotprof --syscall getpid --syscall-mode tracepoint --json /out/syscall.json \
         -- syscall_lat {CALLS} || echo syscall_failed=$?\n\
         hotprof --syscall getpid --json /out/raw.json -- syscall_lat {CALLS} \
         || echo raw_failed=$?\n\
         hotprof --fn copy_page_from_iter_atomic --json /out/sites.json \
         -- dd if=/dev/zero of=/tmp/w bs=4k count={WRITES} || echo callsite_failed=$?\n"
    ))?;
    guest.expect_exit(0)?;
    ensure!(
        guest.outcome.stdout.starts_with("aarch64\n"),
        "the guest is not an aarch64 machine (uname -m first)"
    );
    doctor_rows(&guest)?;
    for failed in [
        "fentry_failed=",
        "kprobe_failed=",
        "syscall_failed=",
        "raw_failed=",
        "callsite_failed=",
    ] {
        let lines = guest.lines_containing(failed);
        ensure!(lines.is_empty(), "a hotprof run failed: {lines:?}");
    }

    let reads = guest.workload("file_read")?.u64("reads")?;
    let report = guest.report("read.json")?;
    ensure!(
        report.json["mode"] == "fentry",
        "vfs_read ran in mode {}, want fentry",
        report.json["mode"]
    );
    let count = report.function("vfs_read")?.u64("count")?;
    ensure!(
        reads > 0 && count == reads,
        "fentry counted {count} vfs_read calls, want exactly file_read's {reads}"
    );

    for (file, function, mode, calls) in [
        ("getpid.json", "__arm64_sys_getpid", "kprobe", CALLS),
        ("syscall.json", "getpid", "syscall", CALLS),
        ("raw.json", "getpid", "raw_syscall", CALLS),
        (
            "sites.json",
            "copy_page_from_iter_atomic",
            "callsite",
            WRITES,
        ),
    ] {
        let report = guest.report(file)?;
        let count = report.function(function)?.u64("count")?;
        ensure!(
            report.json["mode"] == mode && count == calls,
            "hotprof counted {count} {function} calls in mode {}, want exactly {calls} in {mode}",
            report.json["mode"]
        );
    }
    // Calibrated in every run: on arm64's own symbols.
    let overheads = guest.lines_containing("probe overhead: ~");
    ensure!(
        overheads.len() == 5,
        "want a probe overhead line from each of the 5 runs, got {overheads:?}; notes: {:?}",
        guest.lines_containing("not calibrated")
    );
    Ok(())
}

/// The doctor's rows on Debian's arm64 6.12, and its verdict, exit 0.
fn doctor_rows(guest: &Guest) -> Result<()> {
    ensure!(
        guest.lines_containing("doctor_exit=0").len() == 1,
        "hotprof doctor must exit 0 on arm64"
    );
    // Debian's arm64 kernels are built without CONFIG_FPROBE: kprobe.multi/session no.
    check_rows(guest, &expected_rows(false, true))?;
    let verdict = "hotprof works here: kernel functions with fentry and kprobes, syscalls with \
                   tracepoints";
    ensure!(
        guest
            .outcome
            .stdout
            .contains(&format!("\n{verdict}\ndoctor_exit=0")),
        "want the verdict {verdict:?} as the doctor's last line"
    );
    Ok(())
}
