//! hotprof's eBPF programs.
//!
//! Every probe mode feeds the same two functions: [`enter`] pushes a timestamped frame on the
//! current task's frame stack, [`leave`] pops the frame that belongs to this return and adds
//! its duration to per-CPU, per-function aggregates. Nothing is sent to userspace per event.
//!
//! Every mode keeps each task's frame stack in task-local storage (`task_storage.rs`): Linux
//! 5.11 with kernel BTF, whatever the mode. Modes and their own minimum kernels:
//! - kprobe/kretprobe (`kprobe_N`, one per function slot for the first 64 functions;
//!   `kprobe_entry` shared by the rest, which looks up the function by address; one
//!   `kretprobe_exit`): 5.15 (`bpf_get_func_ip`).
//! - fentry/fexit (`fentry_N`/`fexit_N`, one pair per function slot): 5.5, BTF required.
//! - syscall tracepoints (`sys_enter`/`sys_exit`): 4.7.
//! - perf_event on-CPU sampling (`on_cpu_sample`, `hotprof sample`): 4.9.
//! - `sched_switch` (a BTF tracepoint) for off-CPU accounting (`--off-cpu`): 5.11, BTF;
//!   `sched_process_fork` to follow a workload's process tree and `sched_process_exit` to
//!   count an exiting task's open frames: 4.7.
#![no_std]
#![no_main]

mod empty;
mod frames;
mod probes;
mod sample;
mod task_storage;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
