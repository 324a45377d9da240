//! Auto mode without what it would pick: no kernel BTF.

use anyhow::{Result, ensure};

use super::harness::Ctx;

/// Without kernel BTF (hidden in the guest) auto mode falls back to kprobes, says so, and
/// still counts exactly.
pub(super) fn no_btf_falls_back(ctx: &mut Ctx) -> Result<()> {
    let guest = ctx.run(
        "mount --bind /dev/null /sys/kernel/btf/vmlinux && \
         hotprof --fn __do_sys_getpid --json /out/r.json -- syscall_lat 5000",
    )?;
    guest.expect_exit(0)?;
    let notes = guest.lines_containing("using kprobe/kretprobe instead");
    ensure!(
        notes.len() == 1,
        "want one note about the kprobe fallback, got {notes:?}"
    );
    // kprobe.session's kfuncs are found in the kernel's BTF: without it the lone function
    // goes through the kprobe.multi link, with nothing more said.
    let session = guest.lines_containing("kprobe.session");
    ensure!(
        session.is_empty(),
        "kprobe.session named without kernel BTF: {session:?}"
    );
    let report = guest.report("r.json")?;
    ensure!(
        report.json["mode"] == "kprobe.multi",
        "mode is {}, want kprobe.multi (kprobe mode through the kprobe.multi link)",
        report.json["mode"]
    );
    let count = report.function("__do_sys_getpid")?.u64("count")?;
    ensure!(count == 5000, "counted {count}, want 5000");
    Ok(())
}
