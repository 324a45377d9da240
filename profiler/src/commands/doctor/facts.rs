//! What `hotprof doctor` found out about this machine, as plain values, and the parsers of the
//! kernel files it reads (pure, so the tests can feed them any machine).

use std::path::PathBuf;

use crate::model::TaskStore;

/// The outcome of trying one thing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tried {
    /// It works; what was done.
    Works(String),
    /// It was tried and refused; the kernel's reason, one line.
    Fails(String),
    /// It could not be tried; why not.
    NotTried(String),
}

impl Tried {
    pub fn works(&self) -> bool {
        matches!(self, Tried::Works(_))
    }

    /// What was seen: the detail of a success, the reason of a failure, why it was not tried.
    pub fn detail(&self) -> &str {
        match self {
            Tried::Works(text) | Tried::Fails(text) | Tried::NotTried(text) => text,
        }
    }
}

/// Who this process is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Privileges {
    pub euid: u32,
    /// The effective capability set (`CapEff` of `/proc/self/status`); `None` if unreadable.
    pub effective: Option<u64>,
    /// Whether hotprof's own check (`attach::check_privileges`) lets it load programs.
    pub sufficient: bool,
}

pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_SYSLOG: u32 = 34;
pub const CAP_PERFMON: u32 = 38;
pub const CAP_BPF: u32 = 39;

impl Privileges {
    /// Whether capability `cap` is in the effective set (unknown counts as absent).
    pub fn has(&self, cap: u32) -> bool {
        self.effective.is_some_and(|set| set & (1 << cap) != 0)
    }
}

/// `/sys/kernel/security/lockdown`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lockdown {
    /// The active mode (`none`, `integrity`, `confidentiality`).
    Mode(String),
    /// securityfs has no lockdown file: the kernel has no lockdown LSM.
    NoLsm,
    /// Could not be read; why.
    Unknown(String),
}

/// Whether `/proc/kallsyms` shows kernel addresses to this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kallsyms {
    Visible,
    /// Every address reads as zero (kptr_restrict).
    Hidden,
    Unreadable,
}

/// Where tracefs is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tracefs {
    /// Its mount points before hotprof looked (`/proc/mounts`).
    pub mounted: Vec<String>,
    /// The root hotprof uses, after mounting it itself if it was not mounted (as every run
    /// does); `None` when there is none.
    pub usable: Option<PathBuf>,
}

/// Everything `hotprof doctor` reports on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// `uname -r`.
    pub release: String,
    pub privileges: Privileges,
    /// Kernel BTF parsed from `/sys/kernel/btf/vmlinux`.
    pub btf: Tried,
    /// hotprof's eBPF object loaded and its task-exit hook attached (what every run does).
    pub programs: Tried,
    /// The object that loaded: where its per-task state lives.
    pub store: Option<TaskStore>,
    /// A kprobe and a kretprobe attached.
    pub kprobe: Tried,
    /// An fentry and fexit pair attached.
    pub fentry: Tried,
    /// One fsession program attached (7.0+).
    pub fsession: Tried,
    /// An fentry.multi and an fexit.multi link created (7.x, x86-64).
    pub tracing_multi: Tried,
    /// `syscalls/sys_enter_getpid` and `sys_exit_getpid` attached.
    pub syscalls: Tried,
    /// The sampling program attached to a cpu-clock perf event.
    pub sampling: Tried,
    /// The PMU events `--counter` can count here.
    pub pmu: Tried,
    /// A kprobe.multi link created (5.18+).
    pub kprobe_multi: Tried,
    /// A kprobe.session link created (6.10+).
    pub kprobe_session: Tried,
    /// A task-local storage map created (5.11+).
    pub task_storage: Tried,
    /// `/proc/kcore` opened and kernel text read from it.
    pub kcore: Tried,
    pub lockdown: Lockdown,
    pub perf_event_paranoid: Option<i64>,
    pub kptr_restrict: Option<i64>,
    pub kallsyms: Kallsyms,
    pub tracefs: Tracefs,
}

/// The effective capability set from `/proc/PID/status` (`CapEff:\t000001ffffffffff`).
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
}

/// The active lockdown mode from `/sys/kernel/security/lockdown`
/// (`none [integrity] confidentiality`): the bracketed word.
pub fn parse_lockdown(text: &str) -> Option<String> {
    text.split_whitespace()
        .find_map(|word| word.strip_prefix('[')?.strip_suffix(']'))
        .map(str::to_owned)
}

/// The mount points of file systems of type `fstype` in `/proc/mounts`
/// (`tracefs /sys/kernel/tracing tracefs rw,nosuid 0 0`).
pub fn parse_mounts(mounts: &str, fstype: &str) -> Vec<String> {
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let _source = fields.next()?;
            let target = fields.next()?;
            (fields.next()? == fstype).then(|| target.replace("\\040", " "))
        })
        .collect()
}

/// An error line without an empty verifier log at its end (aya's `… (os error 1). Verifier
/// output: ` when the kernel refused before verifying).
pub fn tidy_reason(text: &str) -> String {
    let text = text.trim_end();
    match text.strip_suffix("Verifier output:") {
        Some(head) => head.trim_end().trim_end_matches('.').to_owned(),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_come_from_cap_eff() {
        let status = "Name:\thotprof\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        let privileges = Privileges {
            euid: 0,
            effective: parse_cap_eff(status),
            sufficient: true,
        };
        assert_eq!(privileges.effective, Some(0x1ff_ffff_ffff));
        assert!(privileges.has(CAP_BPF) && privileges.has(CAP_SYSLOG));
        let bpf_only = Privileges {
            effective: parse_cap_eff("CapEff:\t0000008000000000\n"),
            ..privileges
        };
        assert!(bpf_only.has(CAP_BPF) && !bpf_only.has(CAP_PERFMON));
        assert_eq!(parse_cap_eff("CapEff:\tzz\n"), None);
        assert_eq!(parse_cap_eff(""), None);
    }

    #[test]
    fn the_lockdown_mode_is_the_bracketed_word() {
        assert_eq!(
            parse_lockdown("none [integrity] confidentiality\n").as_deref(),
            Some("integrity")
        );
        assert_eq!(
            parse_lockdown("[none] integrity confidentiality").as_deref(),
            Some("none")
        );
        assert_eq!(parse_lockdown("none integrity"), None);
    }

    #[test]
    fn mounts_of_one_type_are_found() {
        let mounts = "sysfs /sys sysfs rw 0 0\n\
                      tracefs /sys/kernel/tracing tracefs rw,nosuid 0 0\n\
                      debugfs /sys/kernel/debug debugfs rw 0 0\n\
                      tracefs /sys/kernel/debug/tracing tracefs rw 0 0\n\
                      short line\n";
        assert_eq!(
            parse_mounts(mounts, "tracefs"),
            ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        );
        assert_eq!(
            parse_mounts("x /mnt/my\\040dir tracefs rw 0 0", "tracefs"),
            ["/mnt/my dir"]
        );
        assert!(parse_mounts(mounts, "securityfs").is_empty());
    }

    #[test]
    fn an_empty_verifier_log_is_dropped_from_reasons() {
        assert_eq!(
            tidy_reason(
                "fentry cannot attach to f: the BPF_PROG_LOAD syscall returned Operation not \
                 permitted (os error 1). Verifier output: "
            ),
            "fentry cannot attach to f: the BPF_PROG_LOAD syscall returned Operation not \
             permitted (os error 1)"
        );
        let with_log = "returned Invalid argument (os error 22). Verifier output: R1 invalid";
        assert_eq!(tidy_reason(with_log), with_log);
    }
}
