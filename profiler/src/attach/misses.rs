//! Misses the kernel counts on its own: BPF programs skipped because another BPF program was
//! already running on the CPU (`recursion_misses`, Linux 5.12+ for fentry/fexit; kprobe
//! programs count theirs since 6.7), and calls a kprobe.multi or kprobe.session link's fprobe
//! could not hand to its programs (the link's `missed`, 6.7+: e.g. before 6.14 its return
//! hooks come from a pool of 2 per CPU per function, so a further call open at once is
//! missed).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use aya::Ebpf;
use aya_obj::generated::{bpf_link_info, bpf_link_type};

use super::links::KprobeLinks;

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
    let info: aya_obj::generated::bpf_prog_info = unsafe { info_by_fd(fd)? };
    Some(info.recursion_misses)
}

/// `BPF_OBJ_GET_INFO_BY_FD` on `fd`, into a zeroed `T`; None when the kernel refuses.
///
/// # Safety
/// `T` must be the kernel's info struct for `fd`'s kind (program, link, …), plain old data for
/// which all-zero bytes are a valid value and a request for nothing optional.
unsafe fn info_by_fd<T>(fd: BorrowedFd<'_>) -> Option<T> {
    // SAFETY: the caller's contract: all-zero bytes are a valid `T`.
    let mut info: T = unsafe { std::mem::zeroed() };
    let attr = InfoByFdAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of::<T>() as u32,
        info: &mut info as *mut T as u64,
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
    (rc == 0).then_some(info)
}

/// Sum of the `missed` counts of the kprobe.multi and kprobe.session links among `links`
/// (perf kprobes' links have none; kernels before 6.7 report 0).
pub fn link_misses(links: &KprobeLinks) -> u64 {
    links
        .0
        .iter()
        .filter_map(|link| link.fd())
        .map(|fd| multi_link_missed(fd).unwrap_or(0))
        .sum()
}

fn multi_link_missed(fd: BorrowedFd<'_>) -> Option<u64> {
    // SAFETY: bpf_link_info is plain old data; zero is a valid value for every field (and
    // zero `addrs`/`count` ask the kernel for no address array).
    let info: bpf_link_info = unsafe { info_by_fd(fd)? };
    if info.type_ != bpf_link_type::BPF_LINK_TYPE_KPROBE_MULTI as u32 {
        return None;
    }
    // SAFETY: the kernel filled the union's kprobe_multi member (the link's type says so).
    Some(unsafe { info.__bindgen_anon_1.kprobe_multi.missed })
}
