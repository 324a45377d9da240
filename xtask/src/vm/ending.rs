//! How a boot ended, sorted: finished, worth another boot, KVM unusable, timed out, or the
//! guest died ([`GuestDied`], which the test runner retries once).

use super::boot::{BOOT_TIMEOUT, Wait};
use super::spec::Accel;

/// The guest's kernel died (panic or oops) while the command ran. Under TCG this has been seen
/// without any fault of the code under test: a CPU executing from the middle of an instruction
/// the kernel had just patched (7.2, `ktime_get_mono_fast_ns+0x2c` inside a `jmp`, while
/// kprobes were being registered) — the emulator's cross-modifying-code race also seen at
/// boot. The test runner runs such a scenario once more, and says so.
#[derive(Debug)]
pub struct GuestDied(pub String);

impl std::fmt::Display for GuestDied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GuestDied {}

/// qemu's own stderr lines kept in a verdict's one-line reason.
pub(super) const QEMU_STDERR_TAIL: usize = 3;

/// How qemu's process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum QemuEnd {
    Exited(i32),
    Signal(i32),
}

impl QemuEnd {
    pub(super) fn from_status(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt as _;
        match (status.code(), status.signal()) {
            (Some(code), _) => QemuEnd::Exited(code),
            (None, Some(signal)) => QemuEnd::Signal(signal),
            (None, None) => QemuEnd::Exited(-1),
        }
    }
}

impl std::fmt::Display for QemuEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            QemuEnd::Exited(code) => write!(f, "qemu exited with status {code}"),
            QemuEnd::Signal(signal) => {
                let name = match signal {
                    libc::SIGABRT => " (SIGABRT)",
                    libc::SIGKILL => " (SIGKILL)",
                    libc::SIGSEGV => " (SIGSEGV)",
                    libc::SIGTERM => " (SIGTERM)",
                    _ => "",
                };
                write!(f, "qemu was killed by signal {signal}{name}")
            }
        }
    }
}

/// Everything known about one boot once qemu is gone and every reader has finished.
#[derive(Clone, Debug)]
pub(super) struct AttemptEnd {
    pub(super) accel: Accel,
    pub(super) waited: Wait,
    /// `/init` reached the command.
    pub(super) ready: bool,
    pub(super) exit_code: Option<i32>,
    /// The `/out` archive arrived whole.
    pub(super) out_complete: bool,
    pub(super) qemu: QemuEnd,
    pub(super) qemu_stderr_tail: String,
    pub(super) console_tail: String,
}

impl AttemptEnd {
    /// What happened, in one line: how qemu ended and the last lines it and the console said.
    fn story(&self) -> String {
        let said = |what: &str, text: &str| {
            if text.trim().is_empty() {
                format!("{what}: (nothing)")
            } else {
                format!("{what}: {}", text.lines().collect::<Vec<_>>().join(" | "))
            }
        };
        let how = match self.waited {
            // Our own kill after a hang: its signal says nothing about the guest.
            Wait::BootTimedOut => format!(
                "the guest did not boot within {} s and was killed",
                BOOT_TIMEOUT.as_secs()
            ),
            Wait::KvmComplained => "qemu complained about KVM and was stopped".to_owned(),
            _ => self.qemu.to_string(),
        };
        format!(
            "{how}; {}; {}",
            said("qemu's stderr", &self.qemu_stderr_tail),
            said("console", &self.console_tail)
        )
    }
}

/// How one boot ended.
#[derive(Debug, PartialEq)]
pub(super) enum Ending {
    /// The command ran and `/out` came back: its exit code.
    Finished(i32),
    RetryBoot(String),
    KvmUnusable(String),
    /// The command ran past the timeout (the watchdog's dump, if any, is in the state).
    TimedOut,
    /// The guest's kernel died (panic, oops) while the command ran.
    DiedRunning(String),
    /// The harness cannot go on: the reason, without the transcript.
    Failed(String),
}

/// Sorts every way a boot can end. Under KVM, *any* end before the guest is ready — an exit,
/// an abort, a signal, a closed console, a boot that hangs — means KVM does not work here
/// (seen: qemu aborting on `failed to set MSR 0x10a` while `/dev/kvm` opens fine). Under
/// TCG the same is a boot that is worth one more try.
pub(super) fn classify(end: &AttemptEnd) -> Ending {
    if !end.ready {
        if matches!(end.waited, Wait::TimedOut) {
            return Ending::TimedOut;
        }
        let story = end.story();
        return match end.accel {
            Accel::Kvm => Ending::KvmUnusable(story),
            Accel::Auto | Accel::Tcg => {
                Ending::RetryBoot(format!("the guest died while booting ({story})"))
            }
        };
    }
    match (end.exit_code, end.out_complete, &end.waited) {
        (Some(code), true, _) => Ending::Finished(code),
        (_, _, Wait::TimedOut) => Ending::TimedOut,
        (None, _, _) => Ending::DiedRunning(format!(
            "the guest died while running the command (kernel panic or oops?): {}",
            end.story()
        )),
        (Some(code), false, _) => Ending::Failed(format!(
            "the guest reported exit code {code} but /out did not arrive complete: {}",
            end.story()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A boot that ended before the guest was ready, qemu's stderr as seen in the field.
    fn early_end(accel: Accel, waited: Wait, qemu: QemuEnd) -> AttemptEnd {
        AttemptEnd {
            accel,
            waited,
            ready: false,
            exit_code: None,
            out_complete: false,
            qemu,
            qemu_stderr_tail: "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69\n\
                kvm_buf_set_msrs: Assertion `ret == cpu->kvm_msr_buf->nmsrs' failed."
                .into(),
            console_tail: String::new(),
        }
    }

    fn ran(exit_code: Option<i32>, out_complete: bool, waited: Wait) -> AttemptEnd {
        AttemptEnd {
            ready: true,
            exit_code,
            out_complete,
            ..early_end(Accel::Kvm, waited, QemuEnd::Exited(0))
        }
    }

    #[test]
    fn under_kvm_any_end_before_ready_is_a_kvm_failure() {
        let abort = QemuEnd::Signal(libc::SIGABRT);
        for (waited, qemu) in [
            (Wait::QemuExited, abort),
            (Wait::QemuExited, QemuEnd::Exited(1)),
            (Wait::QemuExited, QemuEnd::Exited(0)),
            (Wait::BootTimedOut, QemuEnd::Signal(libc::SIGKILL)),
            (Wait::KvmComplained, QemuEnd::Signal(libc::SIGKILL)),
        ] {
            let ending = classify(&early_end(Accel::Kvm, waited, qemu));
            let Ending::KvmUnusable(why) = ending else {
                panic!("{waited:?}/{qemu:?}: {ending:?}");
            };
            assert!(why.contains("failed to set MSR 0x10a"), "{why}");
            assert!(!why.contains('\n'), "{why}");
        }
    }

    #[test]
    fn the_reason_says_how_qemu_ended() {
        let abort = early_end(Accel::Kvm, Wait::QemuExited, QemuEnd::Signal(libc::SIGABRT));
        assert!(
            abort
                .story()
                .starts_with("qemu was killed by signal 6 (SIGABRT);")
        );
        let exit = early_end(Accel::Kvm, Wait::QemuExited, QemuEnd::Exited(1));
        assert!(exit.story().starts_with("qemu exited with status 1;"));
        let hung = early_end(
            Accel::Tcg,
            Wait::BootTimedOut,
            QemuEnd::Signal(libc::SIGKILL),
        );
        assert!(
            hung.story()
                .starts_with("the guest did not boot within 90 s")
        );
        let silent = AttemptEnd {
            qemu_stderr_tail: String::new(),
            ..exit
        };
        assert!(silent.story().contains("qemu's stderr: (nothing)"));
    }

    #[test]
    fn under_tcg_an_end_before_ready_is_worth_one_more_boot() {
        for waited in [Wait::QemuExited, Wait::BootTimedOut] {
            let ending = classify(&early_end(Accel::Tcg, waited, QemuEnd::Exited(0)));
            assert!(
                matches!(&ending, Ending::RetryBoot(why) if why.starts_with("the guest died while booting (")),
                "{ending:?}"
            );
        }
    }

    #[test]
    fn once_ready_the_ending_is_the_guests() {
        assert_eq!(
            classify(&ran(Some(3), true, Wait::Done)),
            Ending::Finished(3)
        );
        // qemu exiting right after sending everything is the normal poweroff.
        assert_eq!(
            classify(&ran(Some(0), true, Wait::QemuExited)),
            Ending::Finished(0)
        );
        assert_eq!(
            classify(&ran(None, false, Wait::TimedOut)),
            Ending::TimedOut
        );
        assert_eq!(
            classify(&ran(Some(0), false, Wait::TimedOut)),
            Ending::TimedOut
        );
        let died = classify(&ran(None, false, Wait::QemuExited));
        assert!(
            matches!(&died, Ending::DiedRunning(why) if why.starts_with("the guest died while running")),
            "{died:?}"
        );
        let partial = classify(&ran(Some(0), false, Wait::QemuExited));
        assert!(
            matches!(&partial, Ending::Failed(why) if why.contains("did not arrive complete")),
            "{partial:?}"
        );
    }
}
