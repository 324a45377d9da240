//! Where a function is timed: at its entry (fentry/fexit, else a kprobe/kretprobe pair), or
//! at its call sites (a kprobe on each `call F` and on the instruction after it).
//!
//! Auto mode decides by asking the kernel, not a list. `available_filter_functions` is only a
//! hint: the kernel accepts a kprobe in any function with an ftrace location somewhere in its
//! range, and the syscall wrappers (`__x64_sys_getpid`, …) are absent from the list yet take
//! kprobes at their entry (5.10, 6.1, 6.12, 7.x). So a function ftrace does not list is offered
//! a kprobe at its entry ([`crate::sys::perf::open_kprobe`], removed at once): accepted, it is
//! timed at its entry like any other (fentry is still tried first at attach); refused with
//! EINVAL (the kernel's "Could not probe notrace function"), it has no ftrace location at all,
//! so no trampoline can attach either, and only its call sites are left. Functions ftrace lists
//! are not asked: the list is built from those very locations.

use std::io;

use super::modes::Mode;

/// Where one function is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    Entry,
    CallSites,
}

/// The kernel's answer to a kprobe at a function's entry.
#[derive(Debug)]
pub enum KprobeAnswer {
    Accepted,
    Refused(io::Error),
    /// This kernel has no kprobe PMU to ask.
    NoKprobes,
}

/// Where `mode` times a function that ftrace lists (`listed`: `Some(true)`), does not list
/// (`Some(false)`), or about which there is no list (`None`); `ask` puts a kprobe at its entry
/// and says what the kernel answered, and is called only when the answer decides. With the
/// placement comes, where the kernel's answer overrode the list, a note saying so.
pub fn place(
    mode: Mode,
    symbol: &str,
    listed: Option<bool>,
    ask: impl FnOnce() -> KprobeAnswer,
) -> (Placement, Option<String>) {
    match mode {
        Mode::Callsite => return (Placement::CallSites, None),
        Mode::Fentry | Mode::Fsession | Mode::Kprobe => return (Placement::Entry, None),
        Mode::Auto if listed != Some(false) => return (Placement::Entry, None),
        Mode::Auto => {}
    }
    match ask() {
        KprobeAnswer::Accepted => (
            Placement::Entry,
            Some(format!(
                "{symbol} is not in available_filter_functions, but the kernel accepts a kprobe \
                 at its entry: timed there"
            )),
        ),
        KprobeAnswer::Refused(error) if error.raw_os_error() == Some(libc::EINVAL) => {
            (Placement::CallSites, None)
        }
        // Anything else (no permission, a symbol the kernel does not know): the entry's own
        // attach says what is wrong, in its words.
        KprobeAnswer::Refused(_) | KprobeAnswer::NoKprobes => (Placement::Entry, None),
    }
}

/// Asks this kernel for a kprobe at `symbol`'s entry and removes it again.
pub fn ask_kernel(symbol: &str) -> KprobeAnswer {
    let Some(pmu) = crate::sys::perf::kprobe_pmu_type() else {
        return KprobeAnswer::NoKprobes;
    };
    match crate::sys::perf::open_kprobe(pmu, symbol, 0) {
        Ok(_probe) => KprobeAnswer::Accepted,
        Err(error) => KprobeAnswer::Refused(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno(code: i32) -> KprobeAnswer {
        KprobeAnswer::Refused(io::Error::from_raw_os_error(code))
    }

    fn never() -> KprobeAnswer {
        panic!("the kernel was asked where the list decides")
    }

    /// Answers recorded in the test guests (`perf_event_open` of the kprobe PMU at offset 0).
    #[test]
    fn auto_mode_follows_the_kernels_answer_not_the_list() {
        // __x64_sys_getppid on 5.10, 6.12 and 7.x: not listed, kprobe accepted.
        let (placement, note) = place(Mode::Auto, "__x64_sys_getppid", Some(false), || {
            KprobeAnswer::Accepted
        });
        assert_eq!(placement, Placement::Entry);
        assert!(
            note.is_some_and(|n| n.contains("accepts a kprobe at its entry")),
            "the override is said"
        );
        // copy_page_from_iter_atomic (lib/, built without ftrace hooks): EINVAL.
        let (placement, note) = place(
            Mode::Auto,
            "copy_page_from_iter_atomic",
            Some(false),
            || errno(libc::EINVAL),
        );
        assert_eq!((placement, note), (Placement::CallSites, None));
        // Listed, or no list: the entry, without asking.
        assert_eq!(
            place(Mode::Auto, "vfs_read", Some(true), never).0,
            Placement::Entry
        );
        assert_eq!(
            place(Mode::Auto, "vfs_read", None, never).0,
            Placement::Entry
        );
    }

    #[test]
    fn other_refusals_leave_the_entry_to_say_why() {
        for answer in [
            errno(libc::EPERM),
            errno(libc::ENOENT),
            KprobeAnswer::NoKprobes,
        ] {
            assert_eq!(
                place(Mode::Auto, "f", Some(false), || answer).0,
                Placement::Entry
            );
        }
    }

    #[test]
    fn forced_modes_are_not_second_guessed() {
        assert_eq!(
            place(Mode::Callsite, "vfs_read", Some(true), never).0,
            Placement::CallSites
        );
        assert_eq!(
            place(Mode::Kprobe, "f", Some(false), never).0,
            Placement::Entry
        );
        assert_eq!(
            place(Mode::Fentry, "f", Some(false), never).0,
            Placement::Entry
        );
    }
}
