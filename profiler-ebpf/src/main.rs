//! hotprof's eBPF programs.
//!
//! Every probe mode feeds the same two functions: [`enter`] pushes a timestamped frame on the
//! current task's frame stack, [`leave`] pops the frame that belongs to this return and adds
//! its duration to per-CPU, per-function aggregates. Nothing is sent to userspace per event.
//!
//! The crate builds three objects from the same code, differing in where each task's frame
//! stack lives (the `store` module each root file picks) and in [`PLAIN`]:
//! - `profiler` (this file): task-local storage (`store/task_local.rs`), Linux 5.11 with
//!   kernel BTF, whatever the mode. It also holds the bench's empty and timing-floor probes.
//! - `profiler-plain` (`plain.rs`): the same, with every per-call option fixed at its
//!   default (`config::per_call`), for the runs that set none: the common case pays no
//!   instruction for the options it does not use.
//! - `profiler-compat` (`compat.rs`): a hash map keyed by task (`store/hash_map.rs`),
//!   for kernels without task storage (5.10 and older, or built without BTF). Userspace loads
//!   it when creating the task-storage map fails.
//!
//! Modes and their own minimum kernels:
//! - kprobe/kretprobe (`kprobe_N`, one per function slot for the first 64 functions;
//!   `kretprobe_exit`): 4.17 (kprobes through perf). `kprobe_entry`, shared by the functions
//!   beyond the first 64, looks up the function by address: 5.15 (`bpf_get_func_ip`).
//! - kprobe.multi (`kprobe_multi_entry`/`kretprobe_multi_exit`, one program per side for
//!   every function of the run's kprobe.multi link, each function's id its cookie): 5.18 with
//!   `CONFIG_FPROBE`, functions ftrace lists only; the rest, and every function on older
//!   kernels, use the kprobe/kretprobe programs above.
//! - kprobe.session (`kprobe_session`, one program at both sides of each call, the entry time
//!   in the call's session cookie: no frames, no per-task lookup), for a run of one function
//!   that needs no frames: 6.10 with `CONFIG_FPROBE` and BTF (its kfuncs are called by BTF
//!   id, `kfunc.rs`). Main object only.
//! - fentry/fexit (`fentry_N`/`fexit_N`, one pair per function slot): 5.5, BTF required.
//! - fsession (`fsession`, kprobe.session's body on a trampoline: one program at entry and
//!   exit, the entry time in the call's cookie), for a run of one function that needs no
//!   frames: 7.0, BTF required (`fsession.rs`).
//! - syscall tracepoints (`sys_enter_N`/`sys_exit_N`, one pair per syscall slot on
//!   `syscalls:sys_enter_NAME`/`sys_exit_NAME`): 4.7.
//! - raw syscall tracepoints (`raw_syscalls:sys_enter`/`sys_exit`, every syscall, the traced
//!   ones found by number): here BTF tracepoints (`btf_sys_enter`/`btf_sys_exit`, 5.5 with
//!   BTF: typed arguments read directly); in both objects also raw tracepoint programs
//!   (`raw_sys_enter`/`raw_sys_exit`, 4.17), which `profiler-compat` uses.
//! - perf_event on-CPU sampling (`on_cpu_sample`, `hotprof sample`): 4.9.
//! - `sched_switch` for off-CPU accounting (`--off-cpu`): here a BTF tracepoint (5.11, BTF:
//!   its arguments are the tasks, whose storage it reads); in `profiler-compat` a raw
//!   tracepoint (4.17) with the same arguments, the tasks' addresses being their keys.
//!   `sched_process_fork` to follow a workload's process tree and `sched_process_exit` to count
//!   an exiting task's open frames: 4.7. `profiler-compat` also deletes a freed task's entry
//!   at the raw tracepoint `sched_process_free`: 4.17.
//! - The calls in flight at a run's stop: here the task iterator `open_frames` (`iter/task`,
//!   5.11 for its task storage; iterators 5.8); `profiler-compat` has none (userspace walks
//!   its hash map).
//!
//! [`enter`]: frames::enter
//! [`leave`]: frames::leave
#![no_std]
#![no_main]
// kfunc calls are written as instruction words (`kfunc.rs`).
#![feature(asm_experimental_arch)]

mod empty;
// The modules, panic handler and licence this object shares with `profiler-plain`.
include!("task_local_object.rs");

/// Per-call options are read from `.rodata` (the `profiler-plain` object fixes them).
const PLAIN: bool = false;
