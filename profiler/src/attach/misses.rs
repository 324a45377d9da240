//! Misses the kernel counts on its own: BPF programs skipped because another BPF program was
//! already running on the CPU (`recursion_misses`, Linux 5.12+ for fentry/fexit; kprobe
//! programs count theirs since 6.7).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use aya::Ebpf;

const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

#[repr(C)]
struct InfoByFdAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// Sum of `recursion_misses` over every loaded program of `ebpf`.
pub fn recursion_misses(ebpf: &Ebpf) -> u64 {
    ebpf.programs()
        .filter_map(|(_, program)| program.fd().ok())
        .map(|fd| program_misses(fd.as_fd()).unwrap_or(0))
        .sum()
}

fn program_misses(fd: BorrowedFd<'_>) -> Option<u64> {
    // SAFETY: bpf_prog_info is plain old data; zero is a valid value for every field.
    let mut info: aya_obj::generated::bpf_prog_info = unsafe { std::mem::zeroed() };
    let attr = InfoByFdAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of_val(&info) as u32,
        info: &mut info as *mut _ as u64,
    };
    // SAFETY: BPF_OBJ_GET_INFO_BY_FD writes at most `info_len` bytes into `info`, which lives
    // across the call; older kernels fill fewer fields and leave the rest zero.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &attr as *const InfoByFdAttr,
            std::mem::size_of::<InfoByFdAttr>(),
        )
    };
    (rc == 0).then_some(info.recursion_misses)
}
