//! The doctor's rows and verdict, from [`Facts`]: which status each check gets, what it enables
//! in hotprof and what to do when it is missing, and whether hotprof's core works here.

use super::facts::{
    CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, CAP_SYSLOG, Facts, Kallsyms, Lockdown, Tried,
};
use crate::model::TaskStore;

/// A check's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Yes,
    No,
    /// Works in part (some of what the row covers).
    Partial,
    /// Could not be checked.
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Yes => "yes",
            Status::No => "no",
            Status::Partial => "partial",
            Status::Unknown => "unknown",
        }
    }
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The check's name, the same on every machine (scripts look rows up by it).
    pub name: &'static str,
    pub status: Status,
    /// What was found: a value, what attached, or the kernel's reason for refusing.
    pub found: String,
    /// What it enables in hotprof.
    pub enables: &'static str,
    /// What to do when it is missing (shown unless the status is yes).
    pub fix: String,
}

/// Whether hotprof's core works here, and the line that says so (or why not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub works: bool,
    pub line: String,
}

/// The rows, in the order they are printed.
pub fn rows(facts: &Facts) -> Vec<Row> {
    let mut rows = vec![
        kernel(facts),
        privileges(facts),
        btf(facts),
        programs(facts),
        kprobes(facts),
        fentry(facts),
        fsession(facts),
        tracing_multi(facts),
        syscalls(facts),
        sampling(facts),
        pmu(facts),
        kprobe_multi(facts),
        task_storage(facts),
        kcore(facts),
        lockdown(facts),
        perf_event_paranoid(facts),
        kptr_restrict(facts),
        tracefs(facts),
    ];
    // A check that could not be tried says why in its `found`; the fix is for that instead.
    for row in &mut rows {
        if row.status == Status::Unknown && untried(facts, row.name) {
            row.fix.clear();
        }
    }
    rows
}

/// Whether the check `name` is one that was not tried (for want of privileges, of the
/// object, of a function to attach to).
fn untried(facts: &Facts, name: &str) -> bool {
    let tried = match name {
        "eBPF programs" => &facts.programs,
        "kprobes" => &facts.kprobe,
        "fentry" => &facts.fentry,
        "fsession" => &facts.fsession,
        "tracing-multi" => &facts.tracing_multi,
        "syscall tracepoints" => &facts.syscalls,
        "perf sampling" => &facts.sampling,
        "PMU events" => &facts.pmu,
        "task storage" => &facts.task_storage,
        "/proc/kcore" => &facts.kcore,
        "kprobe.multi/session" => &facts.kprobe_multi,
        _ => return false,
    };
    matches!(tried, Tried::NotTried(_))
}

/// hotprof's core works when it may load its programs, they load, and at least one way of
/// timing something attaches: kprobes, fentry or the syscall tracepoints.
pub fn verdict(facts: &Facts) -> Verdict {
    let broken = |why: String| Verdict {
        works: false,
        line: format!("hotprof cannot work here: {why}"),
    };
    if !facts.privileges.sufficient {
        return broken(
            "it needs root, or CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8): run it \
             with sudo"
                .into(),
        );
    }
    if !facts.programs.works() {
        return broken(format!(
            "its eBPF programs do not load ({})",
            facts.programs.detail()
        ));
    }
    let functions: Vec<&str> = [(&facts.fentry, "fentry"), (&facts.kprobe, "kprobes")]
        .into_iter()
        .filter(|(tried, _)| tried.works())
        .map(|(_, name)| name)
        .collect();
    let syscalls = facts.syscalls.works();
    if functions.is_empty() && !syscalls {
        return broken(format!(
            "no probe attaches (kprobes: {}; fentry: {}; syscall tracepoints: {})",
            facts.kprobe.detail(),
            facts.fentry.detail(),
            facts.syscalls.detail()
        ));
    }
    let line = if functions.is_empty() {
        let sample = if facts.sampling.works() {
            " and `hotprof sample`"
        } else {
            ""
        };
        format!(
            "hotprof works here with syscall tracepoints only (`hotprof --syscall NAME`{sample}): \
             timing kernel functions needs kprobes or fentry, which this kernel refuses"
        )
    } else {
        let syscalls = if syscalls {
            ", syscalls with tracepoints"
        } else {
            ""
        };
        format!(
            "hotprof works here: kernel functions with {}{syscalls}",
            functions.join(" and ")
        )
    };
    Verdict { works: true, line }
}

/// The status of something tried: yes, no, or unknown when it could not be tried.
fn tried_status(tried: &Tried) -> Status {
    match tried {
        Tried::Works(_) => Status::Yes,
        Tried::Fails(_) => Status::No,
        Tried::NotTried(_) => Status::Unknown,
    }
}

fn kernel(facts: &Facts) -> Row {
    let (status, found) = match crate::sys::uname::version(&facts.release) {
        Some(version) if version >= (5, 10) => (Status::Yes, facts.release.clone()),
        Some(_) => (
            Status::Partial,
            format!("{} (older than 5.10)", facts.release),
        ),
        None => (
            Status::Unknown,
            format!("{} (no version number)", facts.release),
        ),
    };
    Row {
        name: "kernel",
        status,
        found,
        enables: "hotprof supports Linux 5.10 and later",
        fix: "use Linux 5.10 or later; older kernels are untested".into(),
    }
}

fn privileges(facts: &Facts) -> Row {
    let p = &facts.privileges;
    let who = if p.euid == 0 {
        "root".to_owned()
    } else {
        format!("uid {}", p.euid)
    };
    let caps = [
        (CAP_BPF, "CAP_BPF"),
        (CAP_PERFMON, "CAP_PERFMON"),
        (CAP_SYSLOG, "CAP_SYSLOG"),
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
    ];
    let found = match p.effective {
        None => format!("{who}, capabilities unreadable"),
        Some(_) => {
            let held: Vec<&str> = caps
                .iter()
                .filter(|(cap, _)| p.has(*cap))
                .map(|(_, name)| *name)
                .collect();
            if held.is_empty() {
                format!("{who}, none of CAP_BPF, CAP_PERFMON, CAP_SYSLOG, CAP_SYS_ADMIN")
            } else {
                format!("{who}, effective: {}", held.join(" "))
            }
        }
    };
    let (status, fix) = if !p.sufficient {
        (
            Status::No,
            "run as root (sudo), or give hotprof CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN before \
             5.8), and CAP_SYSLOG for kernel addresses",
        )
    } else if !p.has(CAP_SYSLOG) {
        (
            Status::Partial,
            "add CAP_SYSLOG (or run as root): with kptr_restrict=1 only it shows the kernel \
             addresses kprobe mode attaches by",
        )
    } else {
        (Status::Yes, "")
    };
    Row {
        name: "privileges",
        status,
        found,
        enables: "loading and attaching BPF programs (CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN); \
                  kernel addresses in /proc/kallsyms (CAP_SYSLOG)",
        fix: fix.into(),
    }
}

fn btf(facts: &Facts) -> Row {
    Row {
        name: "BTF",
        status: tried_status(&facts.btf),
        found: facts.btf.detail().to_owned(),
        enables: "fentry/fexit mode, task-local storage, `hotprof list`'s fentry column",
        fix: "a kernel built with CONFIG_DEBUG_INFO_BTF=y (every major distribution's); without \
              it hotprof uses kprobes and a per-task hash map"
            .into(),
    }
}

fn programs(facts: &Facts) -> Row {
    Row {
        name: "eBPF programs",
        status: tried_status(&facts.programs),
        found: facts.programs.detail().to_owned(),
        enables: "every hotprof run: its maps, its programs and its task-exit hook",
        fix: "see the privileges and lockdown rows; the kernel needs CONFIG_BPF_SYSCALL and \
              CONFIG_BPF_EVENTS"
            .into(),
    }
}

fn kprobes(facts: &Facts) -> Row {
    let detail = facts.kprobe.detail();
    let fix = if detail.contains("kptr_restrict") {
        "see the kptr_restrict row".into()
    } else {
        "boot a kernel with CONFIG_KPROBES=y and CONFIG_KPROBE_EVENTS=y (or use a VM: cargo \
         xtask vm); meanwhile `hotprof --syscall NAME` and `hotprof sample` need no kprobes"
            .into()
    };
    Row {
        name: "kprobes",
        status: tried_status(&facts.kprobe),
        found: detail.to_owned(),
        enables: "kprobe mode (auto mode's fallback from fentry; more than 64 functions on \
                  5.15+) and call-site mode for notrace functions",
        fix,
    }
}

fn fentry(facts: &Facts) -> Row {
    let detail = facts.fentry.detail();
    let why = if !facts.btf.works() {
        "fentry needs kernel BTF (see the BTF row)"
    } else if detail.contains("(os error 1)") && facts.privileges.sufficient {
        "the kernel refuses tracing programs to this process although its privileges load \
         other BPF programs: a kernel or security-module policy blocks fentry here"
    } else if detail.contains("(os error 524)") || detail.contains("(os error 95)") {
        "the kernel cannot attach BPF trampolines here (it needs \
         CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS; arm64 before 6.4 has none)"
    } else {
        "fentry needs Linux 5.5+ with BTF and BPF trampolines"
    };
    let instead = if facts.kprobe.works() {
        "; auto mode uses kprobes instead"
    } else if facts.syscalls.works() {
        "; `hotprof --syscall NAME` works without it"
    } else {
        ""
    };
    Row {
        name: "fentry",
        status: tried_status(&facts.fentry),
        found: detail.to_owned(),
        enables: "fentry/fexit mode, auto mode's first choice: cheaper per call than kprobes",
        fix: format!("{why}{instead}"),
    }
}

fn syscalls(facts: &Facts) -> Row {
    Row {
        name: "syscall tracepoints",
        status: tried_status(&facts.syscalls),
        found: facts.syscalls.detail().to_owned(),
        enables: "`hotprof --syscall NAME` (no kprobes needed)",
        fix: "a kernel with CONFIG_FTRACE_SYSCALLS=y, and tracefs (see the tracefs row)".into(),
    }
}

fn sampling(facts: &Facts) -> Row {
    Row {
        name: "perf sampling",
        status: tried_status(&facts.sampling),
        found: facts.sampling.detail().to_owned(),
        enables: "`hotprof sample` (on-CPU stacks; no kprobes needed)",
        fix: "a kernel with CONFIG_PERF_EVENTS, and perf_event_open allowed to this process \
              (root or CAP_PERFMON; a container's seccomp policy may block it)"
            .into(),
    }
}

fn pmu(facts: &Facts) -> Row {
    Row {
        name: "PMU events",
        status: tried_status(&facts.pmu),
        found: facts.pmu.detail().to_owned(),
        enables: "`--counter EVENT`: instructions, cycles, … per call beside the latency",
        fix: "a machine (or VM) with a PMU that counts the event: a VM needs a virtual PMU \
              (KVM's, or qemu's arm64 one, which counts instructions only with -icount)"
            .into(),
    }
}

fn fsession(facts: &Facts) -> Row {
    Row {
        name: "fsession",
        status: tried_status(&facts.fsession),
        found: facts.fsession.detail().to_owned(),
        enables: "fentry mode for a lone function with no option that needs frames: one \
                  trampoline program at entry and exit, the start time in the call's cookie",
        fix: "nothing needed (fentry/fexit pairs time the same calls, at about the same cost); \
              it needs Linux 7.0+ on x86-64 or arm64"
            .into(),
    }
}

fn tracing_multi(facts: &Facts) -> Row {
    Row {
        name: "tracing-multi",
        status: tried_status(&facts.tracing_multi),
        found: facts.tracing_multi.detail().to_owned(),
        enables: "fentry mode past 64 functions: one fentry.multi and one fexit.multi link for \
                  them all, each function's slot its cookie (without it, auto mode takes \
                  kprobe.multi there)",
        fix: "nothing needed (kprobe mode takes any number of functions, at kprobe cost); it \
              needs Linux 7.x on x86-64"
            .into(),
    }
}

fn kprobe_multi(facts: &Facts) -> Row {
    let (multi, session) = (&facts.kprobe_multi, &facts.kprobe_session);
    let status = match (multi, session) {
        (Tried::Works(_), Tried::Works(_)) => Status::Yes,
        (Tried::Works(_), _) | (_, Tried::Works(_)) => Status::Partial,
        (Tried::NotTried(_), Tried::NotTried(_)) => Status::Unknown,
        _ => Status::No,
    };
    let part = |name: &str, tried: &Tried| match tried {
        Tried::Works(detail) => format!("{name} yes ({detail})"),
        // What the errno means for hotprof's link program, loaded, linked to a traceable function.
        Tried::Fails(detail) if detail.ends_with("(os error 95)") => {
            format!("{name} no ({detail}: built without CONFIG_FPROBE)")
        }
        Tried::Fails(detail) if detail.ends_with("(os error 22)") => {
            format!("{name} no ({detail}: unknown to this kernel)")
        }
        Tried::Fails(detail) => format!("{name} no ({detail})"),
        Tried::NotTried(detail) => format!("{name} not tried ({detail})"),
    };
    Row {
        name: "kprobe.multi/session",
        status,
        found: format!(
            "{}; {}",
            part("kprobe.multi", multi),
            part("kprobe.session", session)
        ),
        enables: "kprobe mode's links: kprobe.multi (5.18+) attaches and detaches many \
                  functions in one call; kprobe.session (6.10+) times a lone function with no \
                  per-task lookup (its cheapest mode); without them, a perf kprobe per function",
        fix: "nothing needed (perf kprobes work alike, slower to attach and per call); they \
              need Linux 5.18+ / 6.10+ with CONFIG_FPROBE"
            .into(),
    }
}

fn task_storage(facts: &Facts) -> Row {
    let detail = facts.task_storage.detail();
    let found = match (&facts.task_storage, facts.store) {
        (Tried::Works(_), Some(TaskStore::HashMap)) => format!(
            "{detail}, but hotprof loaded its hash-map object (task storage needs kernel BTF)"
        ),
        (Tried::Works(_), _) => detail.to_owned(),
        (_, Some(TaskStore::HashMap)) => format!("{detail}; hotprof loaded its hash-map object"),
        _ => detail.to_owned(),
    };
    Row {
        name: "task storage",
        status: tried_status(&facts.task_storage),
        found,
        enables: "each task's frame stack in task-local storage, with no limit on tasks",
        fix: "Linux 5.11+ with BTF; without it hotprof keeps frame stacks in a hash map of 16384 \
              tasks (the report's `per-task state:` line says which)"
            .into(),
    }
}

fn kcore(facts: &Facts) -> Row {
    Row {
        name: "/proc/kcore",
        status: tried_status(&facts.kcore),
        found: facts.kcore.detail().to_owned(),
        enables: "call-site mode (notrace functions timed at their call sites) and `hotprof \
                  list`'s call-site column: both read the running kernel's code there",
        fix: "a kernel with CONFIG_PROC_KCORE=y, root (CAP_SYS_RAWIO), and lockdown below \
              confidentiality"
            .into(),
    }
}

fn lockdown(facts: &Facts) -> Row {
    let (status, found) = match &facts.lockdown {
        Lockdown::Mode(mode) if mode == "none" => (Status::Yes, "none".to_owned()),
        Lockdown::Mode(mode) if mode == "integrity" => (
            Status::Yes,
            "integrity (it blocks nothing hotprof uses)".to_owned(),
        ),
        Lockdown::Mode(mode) if mode == "confidentiality" => (
            Status::No,
            "confidentiality: kprobes, tracefs, perf events and BPF reads of kernel memory are \
             refused"
                .to_owned(),
        ),
        Lockdown::Mode(mode) => (Status::Unknown, format!("{mode} (unknown mode)")),
        Lockdown::NoLsm => (Status::Yes, "none (no lockdown LSM)".to_owned()),
        Lockdown::Unknown(why) => (Status::Unknown, why.clone()),
    };
    Row {
        name: "lockdown",
        status,
        found,
        enables: "below `confidentiality`: kprobes, tracefs, perf events, BPF reads of kernel \
                  memory and /proc/kcore",
        fix: "boot with lockdown=integrity or none (kernel command line), or without \
              CONFIG_LOCK_DOWN_KERNEL_FORCE_CONFIDENTIALITY"
            .into(),
    }
}

fn perf_event_paranoid(facts: &Facts) -> Row {
    let p = &facts.privileges;
    let exempt = p.has(CAP_PERFMON) || p.has(CAP_SYS_ADMIN);
    let (status, found) = match facts.perf_event_paranoid {
        None => (Status::Unknown, "unreadable".to_owned()),
        Some(level) if exempt => (
            Status::Yes,
            format!("{level} (no effect on this process: CAP_PERFMON)"),
        ),
        Some(level) if level <= -1 => (Status::Yes, level.to_string()),
        Some(level) => (
            Status::No,
            format!("{level}, and this process lacks CAP_PERFMON"),
        ),
    };
    Row {
        name: "perf_event_paranoid",
        status,
        found,
        enables: "without CAP_PERFMON it limits the perf events a process may open (kprobes \
                  and sampling are perf events); with it, or as root, nothing is refused",
        fix: "run as root or with CAP_PERFMON; lowering kernel.perf_event_paranoid alone does \
              not let hotprof run (it needs CAP_BPF too)"
            .into(),
    }
}

fn kptr_restrict(facts: &Facts) -> Row {
    let level = facts
        .kptr_restrict
        .map_or_else(|| "unreadable".to_owned(), |l| l.to_string());
    let (status, shown) = match facts.kallsyms {
        Kallsyms::Visible => (Status::Yes, "/proc/kallsyms shows addresses"),
        Kallsyms::Hidden => (Status::No, "/proc/kallsyms hides addresses"),
        Kallsyms::Unreadable => (Status::Unknown, "/proc/kallsyms unreadable"),
    };
    let fix = if facts.kptr_restrict == Some(2) {
        "sysctl kernel.kptr_restrict=1 (2 hides addresses even from root), and run as root"
    } else {
        "run as root (CAP_SYSLOG shows the addresses unless kptr_restrict is 2)"
    };
    Row {
        name: "kptr_restrict",
        status,
        found: format!("{level}; {shown}"),
        enables: "kprobe and call-site mode (they attach by address), `--by caller`, kernel \
                  stack symbols",
        fix: fix.into(),
    }
}

fn tracefs(facts: &Facts) -> Row {
    let t = &facts.tracefs;
    let (status, found) = match (&t.usable, t.mounted.is_empty()) {
        (Some(_), false) => (Status::Yes, format!("mounted at {}", t.mounted.join(", "))),
        (Some(root), true) => (
            Status::Yes,
            format!(
                "was not mounted; mounted now at {}, as every hotprof run does",
                root.display()
            ),
        ),
        (None, false) => (
            Status::No,
            format!(
                "mounted at {}, but its events/ is not readable by this process",
                t.mounted.join(", ")
            ),
        ),
        (None, true) => (Status::No, "not mounted, and mounting it failed".to_owned()),
    };
    Row {
        name: "tracefs",
        status,
        found,
        enables: "`--syscall` (tracepoint ids) and notrace detection \
                  (available_filter_functions)",
        fix: "mount -t tracefs tracefs /sys/kernel/tracing (hotprof does it itself as root); \
              the kernel needs CONFIG_TRACING"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::doctor::facts::{Privileges, Tracefs};

    fn works(text: &str) -> Tried {
        Tried::Works(text.into())
    }

    fn fails(text: &str) -> Tried {
        Tried::Fails(text.into())
    }

    const ALL_CAPS: u64 = 0x1ff_ffff_ffff;

    /// A 6.12 machine where everything works, as root.
    fn healthy() -> Facts {
        Facts {
            release: "6.12.48+deb12-cloud-amd64".into(),
            privileges: Privileges {
                euid: 0,
                effective: Some(ALL_CAPS),
                sufficient: true,
            },
            btf: works("/sys/kernel/btf/vmlinux (5 MiB)"),
            programs: works("task-storage object loaded, sched_process_exit attached"),
            store: Some(TaskStore::TaskStorage),
            kprobe: works("kprobe and kretprobe attached to __x64_sys_getpid"),
            fentry: works("fentry and fexit attached to __do_sys_getpid"),
            fsession: works("the fsession program attached to __do_sys_getpid"),
            tracing_multi: works("fentry.multi and fexit.multi links attached to __do_sys_getpid"),
            syscalls: works("sys_enter_getpid and sys_exit_getpid attached"),
            sampling: works("cpu-clock sampling attached on CPU 0"),
            pmu: works("instructions, cycles, branches count"),
            kprobe_multi: works("link created on __do_sys_getpid"),
            kprobe_session: works("link created on __do_sys_getpid"),
            task_storage: works("a task-storage map was created"),
            kcore: works("readable: kernel text read at _stext"),
            lockdown: Lockdown::Mode("none".into()),
            perf_event_paranoid: Some(2),
            kptr_restrict: Some(0),
            kallsyms: Kallsyms::Visible,
            tracefs: Tracefs {
                mounted: vec!["/sys/kernel/tracing".into()],
                usable: Some("/sys/kernel/tracing".into()),
            },
        }
    }

    /// The development machines: 6.18 without kprobes, fentry refused with EPERM, no kcore,
    /// lockdown integrity; tracepoints and perf events work.
    fn development_machine() -> Facts {
        let kprobe = fails(
            "no kprobe PMU in /sys/bus/event_source/devices: the kernel is built without \
             CONFIG_KPROBES",
        );
        let fentry = fails(
            "fentry cannot attach to __do_sys_getpid: the BPF_PROG_LOAD syscall returned \
             Operation not permitted (os error 1)",
        );
        Facts {
            release: "6.18.44-fc-v669".into(),
            kprobe,
            fentry,
            fsession: fails(
                "this kernel has no fsession (Linux 7.0): no BPF_TRACE_FSESSION in its BTF",
            ),
            tracing_multi: fails(
                "this kernel has no tracing-multi links (Linux 7.x): no BPF_TRACE_FENTRY_MULTI \
                 in its BTF",
            ),
            kprobe_multi: fails("Operation not supported (os error 95)"),
            kprobe_session: fails("Operation not supported (os error 95)"),
            kcore: fails("No such file or directory (os error 2)"),
            pmu: fails(
                "none counts: instructions, cycles (No such file or directory (os error 2))",
            ),
            lockdown: Lockdown::Mode("integrity".into()),
            ..healthy()
        }
    }

    const BULLSEYE_MULTI: &str = "loading kretprobe_multi_exit for a kprobe.multi link: this \
                                  kernel has no bpf_get_attach_cookie (Linux 5.15), nor \
                                  kprobe.multi links (5.18)";

    /// Debian 11's 5.10: no task storage, no kprobe.multi; everything else works.
    fn bullseye() -> Facts {
        Facts {
            release: "5.10.0-35-cloud-amd64".into(),
            store: Some(TaskStore::HashMap),
            task_storage: fails("the kernel does not know BPF_MAP_TYPE_TASK_STORAGE"),
            // Its verifier refuses the link programs' bpf_get_attach_cookie (5.15).
            kprobe_multi: fails(BULLSEYE_MULTI),
            kprobe_session: fails(
                "this kernel has no kprobe.session (Linux 6.10): no bpf_session_is_return in its \
                 BTF",
            ),
            lockdown: Lockdown::NoLsm,
            ..healthy()
        }
    }

    fn row(facts: &Facts, name: &str) -> Row {
        rows(facts)
            .into_iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no row {name}"))
    }

    fn statuses(facts: &Facts) -> Vec<(&'static str, &'static str)> {
        rows(facts)
            .iter()
            .map(|r| (r.name, r.status.as_str()))
            .collect()
    }

    #[test]
    fn a_healthy_machine_is_all_yes_and_works() {
        let facts = healthy();
        for row in rows(&facts) {
            assert_eq!(row.status, Status::Yes, "{row:?}");
        }
        let verdict = verdict(&facts);
        assert!(verdict.works);
        assert_eq!(
            verdict.line,
            "hotprof works here: kernel functions with fentry and kprobes, syscalls with \
             tracepoints"
        );
    }

    #[test]
    fn the_development_machine_works_with_syscall_tracepoints_only() {
        let facts = development_machine();
        assert_eq!(
            statuses(&facts),
            [
                ("kernel", "yes"),
                ("privileges", "yes"),
                ("BTF", "yes"),
                ("eBPF programs", "yes"),
                ("kprobes", "no"),
                ("fentry", "no"),
                ("fsession", "no"),
                ("tracing-multi", "no"),
                ("syscall tracepoints", "yes"),
                ("perf sampling", "yes"),
                ("PMU events", "no"),
                ("kprobe.multi/session", "no"),
                ("task storage", "yes"),
                ("/proc/kcore", "no"),
                ("lockdown", "yes"),
                ("perf_event_paranoid", "yes"),
                ("kptr_restrict", "yes"),
                ("tracefs", "yes"),
            ]
        );
        let fentry = row(&facts, "fentry");
        // The kernel's reason, and what it means here: root is refused, kprobes are missing.
        assert!(fentry.found.contains("(os error 1)"), "{fentry:?}");
        assert!(fentry.fix.contains("policy blocks fentry"), "{fentry:?}");
        assert!(
            fentry
                .fix
                .ends_with("`hotprof --syscall NAME` works without it"),
            "{fentry:?}"
        );
        assert!(row(&facts, "kprobes").fix.contains("CONFIG_KPROBES=y"));
        assert_eq!(
            row(&facts, "lockdown").found,
            "integrity (it blocks nothing hotprof uses)"
        );
        let verdict = verdict(&facts);
        assert!(verdict.works);
        assert_eq!(
            verdict.line,
            "hotprof works here with syscall tracepoints only (`hotprof --syscall NAME` and \
             `hotprof sample`): timing kernel functions needs kprobes or fentry, which this \
             kernel refuses"
        );
    }

    #[test]
    fn on_5_10_task_storage_and_kprobe_multi_are_missing_but_the_core_works() {
        let facts = bullseye();
        let storage = row(&facts, "task storage");
        assert_eq!(storage.status, Status::No);
        assert!(
            storage
                .found
                .ends_with("; hotprof loaded its hash-map object"),
            "{storage:?}"
        );
        assert!(storage.fix.contains("16384 tasks"));
        let multi = row(&facts, "kprobe.multi/session");
        assert_eq!(multi.status, Status::No);
        assert!(
            multi.found.starts_with(&format!(
                "kprobe.multi no ({BULLSEYE_MULTI}); kprobe.session no"
            )),
            "{multi:?}"
        );
        assert_eq!(row(&facts, "lockdown").found, "none (no lockdown LSM)");
        assert_eq!(row(&facts, "kprobes").status, Status::Yes);
        assert_eq!(row(&facts, "fentry").status, Status::Yes);
        assert!(verdict(&facts).works);
    }

    #[test]
    fn task_storage_without_btf_says_which_object_was_loaded() {
        let facts = Facts {
            btf: fails("No such file or directory (os error 2)"),
            store: Some(TaskStore::HashMap),
            ..healthy()
        };
        let storage = row(&facts, "task storage");
        assert_eq!(storage.status, Status::Yes);
        assert!(storage.found.contains("(task storage needs kernel BTF)"));
        let fentry = Facts {
            fentry: fails("no kernel BTF"),
            ..facts
        };
        assert_eq!(
            row(&fentry, "fentry").fix,
            "fentry needs kernel BTF (see the BTF row); auto mode uses kprobes instead"
        );
    }

    #[test]
    fn kprobe_multi_and_session_are_one_row() {
        let facts = Facts {
            kprobe_session: fails("Invalid argument (os error 22)"),
            ..healthy()
        };
        let multi = row(&facts, "kprobe.multi/session");
        assert_eq!(multi.status, Status::Partial);
        assert_eq!(
            multi.found,
            "kprobe.multi yes (link created on __do_sys_getpid); kprobe.session no (Invalid \
             argument (os error 22): unknown to this kernel)"
        );
        // Debian's 6.1 and the development machines: no fprobe.
        let no_fprobe = Facts {
            kprobe_multi: fails("Operation not supported (os error 95)"),
            ..facts.clone()
        };
        let multi = row(&no_fprobe, "kprobe.multi/session");
        assert_eq!(multi.status, Status::No);
        assert!(
            multi.found.starts_with(
                "kprobe.multi no (Operation not supported (os error 95): built without \
                 CONFIG_FPROBE)"
            ),
            "{multi:?}"
        );
        assert!(multi.enables.starts_with("kprobe mode's links"));
        // Missing, it does not decide anything.
        let none = Facts {
            kprobe_multi: fails("x"),
            ..facts
        };
        assert!(verdict(&none).works);
    }

    #[test]
    fn without_privileges_hotprof_cannot_work_and_says_so_last() {
        let facts = Facts {
            privileges: Privileges {
                euid: 1000,
                effective: Some(0),
                sufficient: false,
            },
            programs: Tried::NotTried("needs root".into()),
            kprobe: Tried::NotTried("needs root".into()),
            fentry: Tried::NotTried("needs root".into()),
            syscalls: Tried::NotTried("needs root".into()),
            kallsyms: Kallsyms::Hidden,
            kptr_restrict: Some(1),
            ..healthy()
        };
        let privileges = row(&facts, "privileges");
        assert_eq!(privileges.status, Status::No);
        assert_eq!(
            privileges.found,
            "uid 1000, none of CAP_BPF, CAP_PERFMON, CAP_SYSLOG, CAP_SYS_ADMIN"
        );
        let kprobes = row(&facts, "kprobes");
        assert_eq!(
            (kprobes.status, kprobes.found.as_str(), kprobes.fix.as_str()),
            (Status::Unknown, "needs root", "")
        );
        let paranoid = row(&facts, "perf_event_paranoid");
        assert_eq!(paranoid.status, Status::No);
        assert_eq!(paranoid.found, "2, and this process lacks CAP_PERFMON");
        let kptr = row(&facts, "kptr_restrict");
        assert_eq!(
            (kptr.status, kptr.found.as_str()),
            (Status::No, "1; /proc/kallsyms hides addresses")
        );
        let verdict = verdict(&facts);
        assert!(!verdict.works);
        assert!(
            verdict
                .line
                .starts_with("hotprof cannot work here: it needs root, or CAP_BPF and CAP_PERFMON"),
            "{verdict:?}"
        );
    }

    #[test]
    fn bpf_without_syslog_is_partial() {
        let facts = Facts {
            privileges: Privileges {
                euid: 1000,
                effective: Some((1 << CAP_BPF) | (1 << CAP_PERFMON)),
                sufficient: true,
            },
            ..healthy()
        };
        let privileges = row(&facts, "privileges");
        assert_eq!(privileges.status, Status::Partial);
        assert_eq!(privileges.found, "uid 1000, effective: CAP_BPF CAP_PERFMON");
        assert!(privileges.fix.starts_with("add CAP_SYSLOG"));
    }

    #[test]
    fn programs_that_do_not_load_or_attach_nowhere_fail_the_core() {
        let facts = Facts {
            programs: fails("map error: failed to create map `HIST`"),
            ..healthy()
        };
        assert_eq!(
            verdict(&facts).line,
            "hotprof cannot work here: its eBPF programs do not load (map error: failed to \
             create map `HIST`)"
        );
        let facts = Facts {
            kprobe: fails("k"),
            fentry: fails("f"),
            syscalls: fails("s"),
            ..healthy()
        };
        let verdict = verdict(&facts);
        assert!(!verdict.works);
        assert_eq!(
            verdict.line,
            "hotprof cannot work here: no probe attaches (kprobes: k; fentry: f; syscall \
             tracepoints: s)"
        );
        // Any one of the three is enough.
        let kprobes_only = Facts {
            kprobe: works("k"),
            ..facts
        };
        let verdict = super::verdict(&kprobes_only);
        assert!(verdict.works);
        assert_eq!(
            verdict.line,
            "hotprof works here: kernel functions with kprobes"
        );
    }

    #[test]
    fn lockdown_modes_and_settings_are_classified() {
        let with = |lockdown| Facts {
            lockdown,
            ..healthy()
        };
        let status = |facts: &Facts| row(facts, "lockdown").status;
        assert_eq!(
            status(&with(Lockdown::Mode("confidentiality".into()))),
            Status::No
        );
        assert_eq!(
            status(&with(Lockdown::Unknown("securityfs not mounted".into()))),
            Status::Unknown
        );
        assert_eq!(
            status(&with(Lockdown::Mode("weird".into()))),
            Status::Unknown
        );
        let old = Facts {
            release: "4.19.0-27-amd64".into(),
            ..healthy()
        };
        assert_eq!(
            row(&old, "kernel").found,
            "4.19.0-27-amd64 (older than 5.10)"
        );
        assert_eq!(row(&old, "kernel").status, Status::Partial);
        let hidden = Facts {
            kptr_restrict: Some(2),
            kallsyms: Kallsyms::Hidden,
            ..healthy()
        };
        assert!(
            row(&hidden, "kptr_restrict")
                .fix
                .starts_with("sysctl kernel.kptr_restrict=1")
        );
        // A kprobe refused for hidden addresses points there.
        let kprobe = Facts {
            kprobe: fails("its address is hidden in /proc/kallsyms (kptr_restrict): run as root"),
            ..hidden
        };
        assert_eq!(row(&kprobe, "kprobes").fix, "see the kptr_restrict row");
    }

    #[test]
    fn tracefs_mounted_by_hotprof_is_said_so() {
        let facts = Facts {
            tracefs: Tracefs {
                mounted: Vec::new(),
                usable: Some("/sys/kernel/tracing".into()),
            },
            ..healthy()
        };
        let tracefs = row(&facts, "tracefs");
        assert_eq!(tracefs.status, Status::Yes);
        assert_eq!(
            tracefs.found,
            "was not mounted; mounted now at /sys/kernel/tracing, as every hotprof run does"
        );
        let none = Facts {
            tracefs: Tracefs::default(),
            ..healthy()
        };
        assert_eq!(row(&none, "tracefs").status, Status::No);
    }
}
