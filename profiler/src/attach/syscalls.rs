//! `--syscall`: which mechanism times the syscalls, and attaching it.
//!
//! - **tracepoint**: the perf tracepoints `syscalls:sys_enter_NAME`/`sys_exit_NAME`, one
//!   program pair per syscall slot ([`attach_syscalls`]). The kernel fills a perf record
//!   before the program runs; only the traced syscalls run a program. Linux 4.7.
//! - **raw**: the raw tracepoints `raw_syscalls:sys_enter`/`sys_exit`, one program pair for
//!   every syscall of the system, which finds the traced ones by number in a table
//!   (`RAW_SYSCALL_SLOTS`). No record is built, but every other syscall pays the lookup.
//!   Linux 4.17; the numbers are x86-64's, and compat (32-bit) syscalls are left out.
//!
//! `--syscall-mode auto` picks by [`choose`] (the measurements behind it are in its doc):
//! raw for a run limited to a command or `--pid`, the perf tracepoints for a system-wide one.

use std::path::Path;

use aya::{
    Ebpf,
    maps::{Array, MapError},
    programs::{BtfTracePoint, ProgramError, RawTracePoint, TracePoint},
};
use profiler_common::SYSCALL_SLOTS;

use super::btf::kernel_btf;
use super::error::{AttachError, Reason, one_line};
use super::modes::AttachedMode;
use super::program::program;

/// Syscall numbers `RAW_SYSCALL_SLOTS` covers (`profiler-ebpf/src/raw_syscalls.rs`).
const RAW_SYSCALL_NUMBERS: u32 = 512;
/// The eBPF map from syscall number to slot + 1.
const RAW_SYSCALL_SLOTS: &str = "RAW_SYSCALL_SLOTS";

/// How the user asked `--syscall` to be timed (`--syscall-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyscallMode {
    /// Whichever [`choose`] finds cheaper for the request.
    #[default]
    Auto,
    /// The perf tracepoints `syscalls:sys_enter_NAME`/`sys_exit_NAME`.
    Tracepoint,
    /// The raw tracepoints `raw_syscalls:sys_enter`/`sys_exit`.
    Raw,
}

impl SyscallMode {
    /// The mode that attaches what `mode` names (calibration repeats a run's choice).
    pub fn of(mode: AttachedMode) -> Self {
        match mode {
            AttachedMode::RawSyscall => Self::Raw,
            _ => Self::Tracepoint,
        }
    }
}

/// Picks the mechanism for syscalls whose x86-64 numbers are `numbers` (None: not in
/// [`syscall_number`]'s table, which only the tracepoints can time). `targeted`: the run
/// counts only a command's process tree or `--pid` processes, not the whole system.
///
/// Auto, from the host measurements (6.18 in a 2-core VM on a real CPU; the workload's CPU
/// ns per call, median of 12 interleaved rounds; see the issue #16 report): per traced
/// getpid the raw pair adds ~350 ns and the perf pair ~480 ns, but every *untraced* syscall
/// of the system pays ~145 ns under the raw pair against ~65 ns under the perf one (which
/// only sends syscalls through the kernel's slow path). So raw is cheaper overall only where
/// the traced syscalls are more than ~40 % of all syscalls. A targeted run (`-- CMD`, `-p`)
/// is usually there to measure that workload's calls, for a short time: raw. A system-wide
/// run watches a few syscalls among all the others, often for long: the perf tracepoints.
pub fn choose(
    mode: SyscallMode,
    names: &[String],
    numbers: &[Option<u32>],
    targeted: bool,
) -> Result<AttachedMode, AttachError> {
    let unknown = names
        .iter()
        .zip(numbers)
        .find(|(_, number)| number.is_none())
        .map(|(name, _)| name);
    match (mode, unknown) {
        (SyscallMode::Tracepoint, _) => Ok(AttachedMode::Syscall),
        (SyscallMode::Raw, Some(name)) => Err(AttachError::NoSyscallNumber { name: name.clone() }),
        (SyscallMode::Raw, None) => Ok(AttachedMode::RawSyscall),
        (SyscallMode::Auto, None) if targeted => Ok(AttachedMode::RawSyscall),
        (SyscallMode::Auto, _) => Ok(AttachedMode::Syscall),
    }
}

/// Attaches `syscalls` with the mechanism [`choose`] picks; returns the one in use.
pub fn attach_syscalls_in(
    ebpf: &mut Ebpf,
    syscalls: &[String],
    tracefs: &Path,
    mode: SyscallMode,
    targeted: bool,
) -> Result<AttachedMode, AttachError> {
    if syscalls.len() > SYSCALL_SLOTS as usize {
        return Err(AttachError::TooManySyscalls {
            requested: syscalls.len(),
        });
    }
    // The names tracefs knows first, so a typo gets the closest names whatever the mode.
    check_syscall_names(syscalls, tracefs)?;
    let numbers: Vec<Option<u32>> = syscalls.iter().map(|s| syscall_number(s)).collect();
    match choose(mode, syscalls, &numbers, targeted)? {
        AttachedMode::RawSyscall => {
            let numbers: Vec<u32> = numbers.into_iter().flatten().collect();
            attach_raw(ebpf, &numbers)?;
            Ok(AttachedMode::RawSyscall)
        }
        _ => {
            attach_syscalls(ebpf, syscalls, tracefs)?;
            Ok(AttachedMode::Syscall)
        }
    }
}

/// Attaches `syscalls/sys_enter_NAME` and `sys_exit_NAME` for each syscall.
pub fn attach_syscalls(
    ebpf: &mut Ebpf,
    syscalls: &[String],
    tracefs: &Path,
) -> Result<(), AttachError> {
    if syscalls.len() > SYSCALL_SLOTS as usize {
        return Err(AttachError::TooManySyscalls {
            requested: syscalls.len(),
        });
    }
    check_syscall_names(syscalls, tracefs)?;
    for (slot, name) in syscalls.iter().enumerate() {
        for (side, program_name) in [
            ("enter", format!("sys_enter_{slot}")),
            ("exit", format!("sys_exit_{slot}")),
        ] {
            let tracepoint = format!("sys_{side}_{name}");
            let fail = |e: ProgramError| AttachError::Tracepoint {
                tracepoint: format!("syscalls/{tracepoint}"),
                reason: Reason::of(e, |e| one_line(e)),
            };
            let prog: &mut TracePoint = program(ebpf, &program_name)?;
            prog.load().map_err(fail)?;
            prog.attach("syscalls", &tracepoint).map_err(fail)?;
        }
    }
    Ok(())
}

/// Fails on the first of `syscalls` that has no `syscalls/sys_enter_NAME` tracepoint, with
/// the closest known names.
fn check_syscall_names(syscalls: &[String], tracefs: &Path) -> Result<(), AttachError> {
    let events = tracefs.join("events/syscalls");
    match syscalls
        .iter()
        .find(|name| !events.join(format!("sys_enter_{name}")).is_dir())
    {
        Some(name) => Err(AttachError::UnknownSyscall {
            name: name.clone(),
            suggestions: similar_syscalls(&events, name),
        }),
        None => Ok(()),
    }
}

fn similar_syscalls(events: &Path, name: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(events) else {
        return Vec::new();
    };
    let known = entries.filter_map(|e| {
        e.ok()?
            .file_name()
            .to_str()?
            .strip_prefix("sys_enter_")
            .map(str::to_string)
    });
    closest_syscalls(known, name)
}

/// The syscalls (of `known`) to suggest for an unknown `name`: those containing it or
/// contained in it, closest in length first, at most three.
fn closest_syscalls(known: impl Iterator<Item = String>, name: &str) -> Vec<String> {
    let mut names: Vec<String> = known
        .filter(|candidate| candidate.contains(name) || name.contains(candidate.as_str()))
        .collect();
    names.sort_by_key(|c| c.len().abs_diff(name.len()));
    names.truncate(3);
    names
}

/// Fills the number table (slot `i` for `numbers[i]`) and attaches the raw pair.
fn attach_raw(ebpf: &mut Ebpf, numbers: &[u32]) -> Result<(), AttachError> {
    let internal = |what: String| {
        move |e: MapError| {
            AttachError::Internal(Reason::of(e, |e| format!("{what}: {}", one_line(e))))
        }
    };
    let map = ebpf.map_mut(RAW_SYSCALL_SLOTS).ok_or_else(|| {
        AttachError::Internal(Reason::of(MissingFromObject(RAW_SYSCALL_SLOTS), |e| {
            e.to_string()
        }))
    })?;
    let mut slots: Array<_, u32> =
        Array::try_from(map).map_err(internal(format!("map {RAW_SYSCALL_SLOTS}")))?;
    for (slot, &number) in (1u32..).zip(numbers) {
        slots
            .set(number, slot, 0)
            .map_err(internal(format!("syscall number {number}")))?;
    }
    // The task-storage object has the pair as BTF tracepoints (typed arguments, read
    // without helper calls); the hash-map object, for kernels that may lack BTF, only as
    // raw tracepoints.
    let btf = if ebpf.program(BTF_PROGRAMS[0].0).is_some() {
        Some(kernel_btf().map_err(|e| AttachError::Tracepoint {
            tracepoint: "raw_syscalls/sys_enter".into(),
            reason: Reason::of(e, |e| format!("reading kernel BTF: {}", one_line(e))),
        })?)
    } else {
        None
    };
    let programs = if btf.is_some() {
        BTF_PROGRAMS
    } else {
        RAW_PROGRAMS
    };
    for (program_name, tracepoint) in programs {
        let fail = |e: ProgramError| AttachError::Tracepoint {
            tracepoint: format!("raw_syscalls/{tracepoint}"),
            reason: Reason::of(e, |e| one_line(e)),
        };
        let program = ebpf.program_mut(program_name).ok_or_else(|| {
            AttachError::Internal(Reason::of(MissingFromObject(program_name), |e| {
                e.to_string()
            }))
        })?;
        match &btf {
            Some(btf) => {
                let btf_id = btf
                    .tracepoint(tracepoint)
                    .ok_or_else(|| AttachError::Tracepoint {
                        tracepoint: format!("raw_syscalls/{tracepoint}"),
                        reason: Reason::new("no such BTF tracepoint in this kernel"),
                    })?;
                let program: &mut BtfTracePoint = program.try_into().map_err(fail)?;
                program.load_by_btf_id(btf_id).map_err(fail)?;
                program.attach().map_err(fail)?;
            }
            None => {
                let program: &mut RawTracePoint = program.try_into().map_err(fail)?;
                program.load().map_err(fail)?;
                program.attach(tracepoint).map_err(fail)?;
            }
        }
    }
    Ok(())
}

/// The raw syscall pair's programs and tracepoints: as BTF tracepoints (only in the
/// task-storage object) and as raw tracepoints (in both).
const BTF_PROGRAMS: [(&str, &str); 2] =
    [("btf_sys_enter", "sys_enter"), ("btf_sys_exit", "sys_exit")];
const RAW_PROGRAMS: [(&str, &str); 2] =
    [("raw_sys_enter", "sys_enter"), ("raw_sys_exit", "sys_exit")];

/// A program or map the eBPF object should have and has not (a build mismatch: a bug).
#[derive(Debug, thiserror::Error)]
#[error("{0} missing from the eBPF object")]
struct MissingFromObject(&'static str);

/// Offset of `thread_info.status` in `task_struct` on x86-64 for kernel `(major, minor)`:
/// `thread_info` is the first member; `status` follows `flags`, and since 5.11 also
/// `syscall_work`. The raw programs read it for `TS_COMPAT` (a 32-bit syscall).
pub fn thread_info_status_offset(version: Option<(u32, u32)>) -> u32 {
    match version {
        Some(version) if version < (5, 11) => 8,
        _ => 16,
    }
}

/// The running kernel's [`thread_info_status_offset`].
pub fn running_thread_info_status_offset() -> u32 {
    let release = crate::kernel_release();
    let mut parts = release.split(['.', '-', '+']);
    let version = (|| Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?)))();
    thread_info_status_offset(version)
}

/// The x86-64 syscall number of `name` as tracefs names it (`newstat` for stat), if known.
/// Numbers are ABI: they never change once assigned.
pub fn syscall_number(name: &str) -> Option<u32> {
    X86_64_SYSCALLS
        .iter()
        .find(|(known, _)| *known == name)
        .map(|&(_, number)| number)
        .filter(|&number| number < RAW_SYSCALL_NUMBERS)
}

/// x86-64 syscalls by tracefs name: `asm/unistd_64.h` of Linux 6.1, the names tracefs gives
/// some of them (`newstat`, `newfstat`, `newlstat`, `newuname`, `sendfile64`, `umount`), and
/// the syscalls added up to 6.17 (451 `cachestat` .. 469 `file_setattr`).
const X86_64_SYSCALLS: &[(&str, u32)] = &[
    ("_sysctl", 156),
    ("accept", 43),
    ("accept4", 288),
    ("access", 21),
    ("acct", 163),
    ("add_key", 248),
    ("adjtimex", 159),
    ("afs_syscall", 183),
    ("alarm", 37),
    ("arch_prctl", 158),
    ("bind", 49),
    ("bpf", 321),
    ("brk", 12),
    ("cachestat", 451),
    ("capget", 125),
    ("capset", 126),
    ("chdir", 80),
    ("chmod", 90),
    ("chown", 92),
    ("chroot", 161),
    ("clock_adjtime", 305),
    ("clock_getres", 229),
    ("clock_gettime", 228),
    ("clock_nanosleep", 230),
    ("clock_settime", 227),
    ("clone", 56),
    ("clone3", 435),
    ("close", 3),
    ("close_range", 436),
    ("connect", 42),
    ("copy_file_range", 326),
    ("creat", 85),
    ("create_module", 174),
    ("delete_module", 176),
    ("dup", 32),
    ("dup2", 33),
    ("dup3", 292),
    ("epoll_create", 213),
    ("epoll_create1", 291),
    ("epoll_ctl", 233),
    ("epoll_ctl_old", 214),
    ("epoll_pwait", 281),
    ("epoll_pwait2", 441),
    ("epoll_wait", 232),
    ("epoll_wait_old", 215),
    ("eventfd", 284),
    ("eventfd2", 290),
    ("execve", 59),
    ("execveat", 322),
    ("exit", 60),
    ("exit_group", 231),
    ("faccessat", 269),
    ("faccessat2", 439),
    ("fadvise64", 221),
    ("fallocate", 285),
    ("fanotify_init", 300),
    ("fanotify_mark", 301),
    ("fchdir", 81),
    ("fchmod", 91),
    ("fchmodat", 268),
    ("fchmodat2", 452),
    ("fchown", 93),
    ("fchownat", 260),
    ("fcntl", 72),
    ("fdatasync", 75),
    ("fgetxattr", 193),
    ("file_getattr", 468),
    ("file_setattr", 469),
    ("finit_module", 313),
    ("flistxattr", 196),
    ("flock", 73),
    ("fork", 57),
    ("fremovexattr", 199),
    ("fsconfig", 431),
    ("fsetxattr", 190),
    ("fsmount", 432),
    ("fsopen", 430),
    ("fspick", 433),
    ("fstat", 5),
    ("fstatfs", 138),
    ("fsync", 74),
    ("ftruncate", 77),
    ("futex", 202),
    ("futex_requeue", 456),
    ("futex_wait", 455),
    ("futex_waitv", 449),
    ("futex_wake", 454),
    ("futimesat", 261),
    ("get_kernel_syms", 177),
    ("get_mempolicy", 239),
    ("get_robust_list", 274),
    ("get_thread_area", 211),
    ("getcpu", 309),
    ("getcwd", 79),
    ("getdents", 78),
    ("getdents64", 217),
    ("getegid", 108),
    ("geteuid", 107),
    ("getgid", 104),
    ("getgroups", 115),
    ("getitimer", 36),
    ("getpeername", 52),
    ("getpgid", 121),
    ("getpgrp", 111),
    ("getpid", 39),
    ("getpmsg", 181),
    ("getppid", 110),
    ("getpriority", 140),
    ("getrandom", 318),
    ("getresgid", 120),
    ("getresuid", 118),
    ("getrlimit", 97),
    ("getrusage", 98),
    ("getsid", 124),
    ("getsockname", 51),
    ("getsockopt", 55),
    ("gettid", 186),
    ("gettimeofday", 96),
    ("getuid", 102),
    ("getxattr", 191),
    ("getxattrat", 464),
    ("init_module", 175),
    ("inotify_add_watch", 254),
    ("inotify_init", 253),
    ("inotify_init1", 294),
    ("inotify_rm_watch", 255),
    ("io_cancel", 210),
    ("io_destroy", 207),
    ("io_getevents", 208),
    ("io_pgetevents", 333),
    ("io_setup", 206),
    ("io_submit", 209),
    ("io_uring_enter", 426),
    ("io_uring_register", 427),
    ("io_uring_setup", 425),
    ("ioctl", 16),
    ("ioperm", 173),
    ("iopl", 172),
    ("ioprio_get", 252),
    ("ioprio_set", 251),
    ("kcmp", 312),
    ("kexec_file_load", 320),
    ("kexec_load", 246),
    ("keyctl", 250),
    ("kill", 62),
    ("landlock_add_rule", 445),
    ("landlock_create_ruleset", 444),
    ("landlock_restrict_self", 446),
    ("lchown", 94),
    ("lgetxattr", 192),
    ("link", 86),
    ("linkat", 265),
    ("listen", 50),
    ("listmount", 458),
    ("listxattr", 194),
    ("listxattrat", 465),
    ("llistxattr", 195),
    ("lookup_dcookie", 212),
    ("lremovexattr", 198),
    ("lseek", 8),
    ("lsetxattr", 189),
    ("lsm_get_self_attr", 459),
    ("lsm_list_modules", 461),
    ("lsm_set_self_attr", 460),
    ("lstat", 6),
    ("madvise", 28),
    ("map_shadow_stack", 453),
    ("mbind", 237),
    ("membarrier", 324),
    ("memfd_create", 319),
    ("memfd_secret", 447),
    ("migrate_pages", 256),
    ("mincore", 27),
    ("mkdir", 83),
    ("mkdirat", 258),
    ("mknod", 133),
    ("mknodat", 259),
    ("mlock", 149),
    ("mlock2", 325),
    ("mlockall", 151),
    ("mmap", 9),
    ("modify_ldt", 154),
    ("mount", 165),
    ("mount_setattr", 442),
    ("move_mount", 429),
    ("move_pages", 279),
    ("mprotect", 10),
    ("mq_getsetattr", 245),
    ("mq_notify", 244),
    ("mq_open", 240),
    ("mq_timedreceive", 243),
    ("mq_timedsend", 242),
    ("mq_unlink", 241),
    ("mremap", 25),
    ("mseal", 462),
    ("msgctl", 71),
    ("msgget", 68),
    ("msgrcv", 70),
    ("msgsnd", 69),
    ("msync", 26),
    ("munlock", 150),
    ("munlockall", 152),
    ("munmap", 11),
    ("name_to_handle_at", 303),
    ("nanosleep", 35),
    ("newfstat", 5),
    ("newfstatat", 262),
    ("newlstat", 6),
    ("newstat", 4),
    ("newuname", 63),
    ("nfsservctl", 180),
    ("open", 2),
    ("open_by_handle_at", 304),
    ("open_tree", 428),
    ("open_tree_attr", 467),
    ("openat", 257),
    ("openat2", 437),
    ("pause", 34),
    ("perf_event_open", 298),
    ("personality", 135),
    ("pidfd_getfd", 438),
    ("pidfd_open", 434),
    ("pidfd_send_signal", 424),
    ("pipe", 22),
    ("pipe2", 293),
    ("pivot_root", 155),
    ("pkey_alloc", 330),
    ("pkey_free", 331),
    ("pkey_mprotect", 329),
    ("poll", 7),
    ("ppoll", 271),
    ("prctl", 157),
    ("pread64", 17),
    ("preadv", 295),
    ("preadv2", 327),
    ("prlimit64", 302),
    ("process_madvise", 440),
    ("process_mrelease", 448),
    ("process_vm_readv", 310),
    ("process_vm_writev", 311),
    ("pselect6", 270),
    ("ptrace", 101),
    ("putpmsg", 182),
    ("pwrite64", 18),
    ("pwritev", 296),
    ("pwritev2", 328),
    ("query_module", 178),
    ("quotactl", 179),
    ("quotactl_fd", 443),
    ("read", 0),
    ("readahead", 187),
    ("readlink", 89),
    ("readlinkat", 267),
    ("readv", 19),
    ("reboot", 169),
    ("recvfrom", 45),
    ("recvmmsg", 299),
    ("recvmsg", 47),
    ("remap_file_pages", 216),
    ("removexattr", 197),
    ("removexattrat", 466),
    ("rename", 82),
    ("renameat", 264),
    ("renameat2", 316),
    ("request_key", 249),
    ("restart_syscall", 219),
    ("rmdir", 84),
    ("rseq", 334),
    ("rt_sigaction", 13),
    ("rt_sigpending", 127),
    ("rt_sigprocmask", 14),
    ("rt_sigqueueinfo", 129),
    ("rt_sigreturn", 15),
    ("rt_sigsuspend", 130),
    ("rt_sigtimedwait", 128),
    ("rt_tgsigqueueinfo", 297),
    ("sched_get_priority_max", 146),
    ("sched_get_priority_min", 147),
    ("sched_getaffinity", 204),
    ("sched_getattr", 315),
    ("sched_getparam", 143),
    ("sched_getscheduler", 145),
    ("sched_rr_get_interval", 148),
    ("sched_setaffinity", 203),
    ("sched_setattr", 314),
    ("sched_setparam", 142),
    ("sched_setscheduler", 144),
    ("sched_yield", 24),
    ("seccomp", 317),
    ("security", 185),
    ("select", 23),
    ("semctl", 66),
    ("semget", 64),
    ("semop", 65),
    ("semtimedop", 220),
    ("sendfile", 40),
    ("sendfile64", 40),
    ("sendmmsg", 307),
    ("sendmsg", 46),
    ("sendto", 44),
    ("set_mempolicy", 238),
    ("set_mempolicy_home_node", 450),
    ("set_robust_list", 273),
    ("set_thread_area", 205),
    ("set_tid_address", 218),
    ("setdomainname", 171),
    ("setfsgid", 123),
    ("setfsuid", 122),
    ("setgid", 106),
    ("setgroups", 116),
    ("sethostname", 170),
    ("setitimer", 38),
    ("setns", 308),
    ("setpgid", 109),
    ("setpriority", 141),
    ("setregid", 114),
    ("setresgid", 119),
    ("setresuid", 117),
    ("setreuid", 113),
    ("setrlimit", 160),
    ("setsid", 112),
    ("setsockopt", 54),
    ("settimeofday", 164),
    ("setuid", 105),
    ("setxattr", 188),
    ("setxattrat", 463),
    ("shmat", 30),
    ("shmctl", 31),
    ("shmdt", 67),
    ("shmget", 29),
    ("shutdown", 48),
    ("sigaltstack", 131),
    ("signalfd", 282),
    ("signalfd4", 289),
    ("socket", 41),
    ("socketpair", 53),
    ("splice", 275),
    ("stat", 4),
    ("statfs", 137),
    ("statmount", 457),
    ("statx", 332),
    ("swapoff", 168),
    ("swapon", 167),
    ("symlink", 88),
    ("symlinkat", 266),
    ("sync", 162),
    ("sync_file_range", 277),
    ("syncfs", 306),
    ("sysfs", 139),
    ("sysinfo", 99),
    ("syslog", 103),
    ("tee", 276),
    ("tgkill", 234),
    ("time", 201),
    ("timer_create", 222),
    ("timer_delete", 226),
    ("timer_getoverrun", 225),
    ("timer_gettime", 224),
    ("timer_settime", 223),
    ("timerfd_create", 283),
    ("timerfd_gettime", 287),
    ("timerfd_settime", 286),
    ("times", 100),
    ("tkill", 200),
    ("truncate", 76),
    ("tuxcall", 184),
    ("umask", 95),
    ("umount", 166),
    ("umount2", 166),
    ("uname", 63),
    ("unlink", 87),
    ("unlinkat", 263),
    ("unshare", 272),
    ("uselib", 134),
    ("userfaultfd", 323),
    ("ustat", 136),
    ("utime", 132),
    ("utimensat", 280),
    ("utimes", 235),
    ("vfork", 58),
    ("vhangup", 153),
    ("vmsplice", 278),
    ("vserver", 236),
    ("wait4", 61),
    ("waitid", 247),
    ("write", 1),
    ("writev", 20),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn auto_picks_raw_for_targeted_runs_with_known_numbers_and_tracepoints_otherwise() {
        let both = names(&["getpid", "uprobe"]);
        let mode =
            |mode, numbers: &[Option<u32>]| choose(mode, &both[..numbers.len()], numbers, true);
        let system_wide = choose(SyscallMode::Auto, &both[..1], &[Some(39)], false);
        assert_eq!(system_wide.unwrap(), AttachedMode::Syscall);
        let forced = choose(SyscallMode::Raw, &both[..1], &[Some(39)], false);
        assert_eq!(forced.unwrap(), AttachedMode::RawSyscall);
        assert_eq!(
            mode(SyscallMode::Auto, &[Some(39)]).unwrap(),
            AttachedMode::RawSyscall
        );
        assert_eq!(
            mode(SyscallMode::Auto, &[Some(39), None]).unwrap(),
            AttachedMode::Syscall
        );
        assert_eq!(
            mode(SyscallMode::Tracepoint, &[Some(39)]).unwrap(),
            AttachedMode::Syscall
        );
        assert_eq!(
            mode(SyscallMode::Raw, &[Some(39)]).unwrap(),
            AttachedMode::RawSyscall
        );
        let refused = mode(SyscallMode::Raw, &[Some(39), None])
            .unwrap_err()
            .message();
        assert_eq!(
            refused,
            "--syscall-mode raw: no x86-64 syscall number known for 'uprobe' (use --syscall-mode tracepoint)"
        );
    }

    #[test]
    fn syscall_numbers_are_x86_64_s_under_tracefs_names() {
        assert_eq!(syscall_number("read"), Some(0));
        assert_eq!(syscall_number("getpid"), Some(39));
        assert_eq!(syscall_number("newstat"), Some(4));
        assert_eq!(syscall_number("newfstatat"), Some(262));
        assert_eq!(syscall_number("openat"), Some(257));
        assert_eq!(syscall_number("set_mempolicy_home_node"), Some(450));
        assert_eq!(syscall_number("file_setattr"), Some(469));
        assert_eq!(syscall_number("nosuch"), None);
        // One number per name, and every number fits the eBPF table.
        for (index, (name, number)) in X86_64_SYSCALLS.iter().enumerate() {
            assert!(*number < RAW_SYSCALL_NUMBERS, "{name}");
            assert!(
                X86_64_SYSCALLS[index + 1..]
                    .iter()
                    .all(|(other, _)| other != name),
                "{name}"
            );
        }
    }

    #[test]
    fn compat_flag_offset_follows_the_kernel_s_thread_info() {
        assert_eq!(thread_info_status_offset(Some((5, 10))), 8);
        assert_eq!(thread_info_status_offset(Some((4, 19))), 8);
        assert_eq!(thread_info_status_offset(Some((5, 11))), 16);
        assert_eq!(thread_info_status_offset(Some((6, 18))), 16);
        assert_eq!(thread_info_status_offset(None), 16);
    }

    #[test]
    fn unknown_syscalls_get_the_closest_known_names() {
        let known = [
            "read",
            "pread64",
            "readv",
            "preadv2",
            "write",
            "readahead",
            "getpid",
        ];
        let closest = |name| closest_syscalls(known.iter().map(|s| s.to_string()), name);
        // Containing it or contained in it, closest in length first, three at most.
        assert_eq!(closest("read"), ["read", "readv", "pread64"]);
        assert_eq!(closest("readx"), ["read"]);
        assert_eq!(closest("getpidd"), ["getpid"]);
        assert!(closest("nosuch").is_empty());
    }
}
