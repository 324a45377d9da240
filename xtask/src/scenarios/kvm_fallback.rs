//! The runner itself: a machine whose qemu aborts under KVM falls back to TCG, and remembers it.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;

use anyhow::{Context, Result, ensure};

use super::harness::Ctx;
use crate::vm::{Accel, QemuSetup};

/// A machine whose qemu aborts under KVM while `/dev/kvm` opens fine (seen on a fresh machine:
/// `failed to set MSR 0x10a`) boots with TCG on the first try, and later runs go straight to
/// TCG. A stand-in qemu makes this machine such a machine: it prints what the real one printed
/// and aborts whenever it is asked for KVM, and runs the real qemu otherwise.
pub(super) fn kvm_fallback(ctx: &mut Ctx) -> Result<()> {
    let dir = tempfile::tempdir().context("could not create a scratch directory")?;
    let invocations = dir.path().join("invocations");
    let stand_in = dir.path().join("qemu-system-x86_64");
    fs::write(
        &stand_in,
        format!(
            r#"#!/bin/sh
echo "$*" >> '{log}'
case " $* " in
*" -accel kvm "*)
    echo "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69" >&2
    echo "qemu-system-x86_64: ../../target/i386/kvm/kvm.c:3183: kvm_buf_set_msrs: Assertion \`ret == cpu->kvm_msr_buf->nmsrs' failed." >&2
    kill -ABRT $$ ;;
esac
exec qemu-system-x86_64 "$@"
"#,
            log = invocations.display()
        ),
    )?;
    fs::set_permissions(&stand_in, fs::Permissions::from_mode(0o755))?;
    let qemu = QemuSetup {
        binary: stand_in,
        // Opens read-write anywhere, so `--accel auto` tries KVM whatever this machine has.
        kvm_device: PathBuf::from("/dev/null"),
        kvm_marker: dir.path().join("kvm-unusable"),
    };
    // A boot whose guest died under TCG is started once more by the runner (`vm::run`), and
    // counted here.
    let mut reboots = 0;
    for run in 1..=2 {
        let guest = ctx.run_with_qemu("echo booted", &qemu)?;
        reboots += guest.outcome.reboots as usize;
        guest.expect_exit(0)?;
        ensure!(
            guest.lines_containing("booted").len() == 1,
            "run {run}: the command's output did not arrive"
        );
        ensure!(
            guest.outcome.accel == Accel::Tcg,
            "run {run} ran with {:?}, want TCG",
            guest.outcome.accel
        );
    }
    let reason =
        fs::read_to_string(&qemu.kvm_marker).context("the KVM failure was not remembered")?;
    for said in ["killed by signal 6 (SIGABRT)", "failed to set MSR 0x10a"] {
        ensure!(
            reason.contains(said),
            "the remembered reason does not say {said:?}: {reason}"
        );
    }
    let invocations = fs::read_to_string(&invocations)?;
    let with = |accel: &str| {
        invocations
            .lines()
            .filter(|line| line.contains(&format!("-accel {accel}")))
            .count()
    };
    ensure!(
        (with("kvm"), with("tcg")) == (1, 2 + reboots),
        "want KVM tried once and TCG twice over two runs (and once more for each of the {reboots} \
         boots that died), qemu was started {} time(s) with KVM and {} with TCG",
        with("kvm"),
        with("tcg")
    );
    Ok(())
}
