//! Misses the kernel counts on its own: BPF programs skipped because another BPF program was
//! already running on the CPU (`recursion_misses`, Linux 5.12+ for fentry/fexit; kprobe
//! programs count theirs since 6.7), and calls a kprobe.multi or kprobe.session link's fprobe
//! could not hand to its programs (the link's `missed`, 6.7+: e.g. before 6.14 its return
//! hooks come from a pool of 2 per CPU per function, so a further call open at once is
//! missed).

use std::os::fd::{AsFd, BorrowedFd};

use aya::Ebpf;

use super::links::RunLinks;
use crate::sys;

/// Sum of `recursion_misses` over every loaded program of `ebpf`.
pub fn recursion_misses(ebpf: &Ebpf) -> u64 {
    ebpf.programs()
        .filter_map(|(_, program)| program.fd().ok())
        .map(|fd| program_misses(fd.as_fd()).unwrap_or(0))
        .sum()
}

fn program_misses(fd: BorrowedFd<'_>) -> Option<u64> {
    Some(sys::bpf::program_info(fd)?.recursion_misses)
}

/// Sum of the `missed` counts of the kprobe.multi and kprobe.session links among `links`
/// (perf kprobes' links have none; kernels before 6.7 report 0).
pub fn link_misses(links: &RunLinks) -> u64 {
    links
        .kprobes
        .iter()
        .filter_map(|link| link.fd())
        .map(|fd| sys::bpf::kprobe_multi_link_missed(fd).unwrap_or(0))
        .sum()
}
