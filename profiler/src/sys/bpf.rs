//! bpf(2) where aya 0.14 has no call for it: the kernel's info about a program or a link
//! (`BPF_OBJ_GET_INFO_BY_FD`), and putting a perf event in a perf event array (aya's
//! `PerfEventArray` only opens output buffers of its own).

use std::io;
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd};

use aya_obj::generated::{bpf_cmd, bpf_link_info, bpf_link_type, bpf_prog_info};

/// bpf(2) with `attr`; the kernel's return value.
///
/// # Safety
/// `attr` must be a `repr(C)` prefix of `union bpf_attr` for `cmd`, exactly the size passed,
/// whose pointers point to memory valid for what `cmd` reads or writes through them.
unsafe fn bpf<T>(cmd: bpf_cmd, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: the caller's contract; the kernel reads `size_of::<T>()` bytes of `attr` and
    // treats the rest of the union as zero.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut T,
            std::mem::size_of::<T>() as libc::c_long,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// Sets element `index` of the perf event array `map` to the perf event `event`
/// (`BPF_MAP_UPDATE_ELEM`): the map then holds its own reference to the event.
pub fn set_perf_event(map: BorrowedFd<'_>, index: u32, event: BorrowedFd<'_>) -> io::Result<()> {
    let value = event.as_raw_fd() as u32;
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: &index as *const u32 as u64,
        value: &value as *const u32 as u64,
        flags: 0,
    };
    // SAFETY: the prefix of bpf_attr BPF_MAP_UPDATE_ELEM reads (map_fd, key, value, flags);
    // `key` and `value` point to u32s, the map's key and value sizes, alive across the call.
    unsafe { bpf(bpf_cmd::BPF_MAP_UPDATE_ELEM, &mut attr) }.map(drop)
}

/// `bpf_attr.link_create` with its `tracing_multi` member (Linux 7.x).
#[repr(C)]
struct TracingMultiLinkAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    ids: u64,
    cookies: u64,
    cnt: u32,
    _pad: u32,
}

/// `BPF_LINK_CREATE` of a tracing-multi link: the program `prog` (loaded with
/// `attach_type`, a `*_MULTI` tracing attach type) on the kernel functions of BTF ids `ids`,
/// each with its cookie. The link is the returned descriptor: closing it detaches them all.
pub fn link_create_tracing_multi(
    prog: BorrowedFd<'_>,
    attach_type: u32,
    ids: &[u32],
    cookies: &[u64],
) -> io::Result<OwnedFd> {
    if ids.len() != cookies.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut attr = TracingMultiLinkAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_fd: 0,
        attach_type,
        flags: 0,
        ids: ids.as_ptr() as u64,
        cookies: cookies.as_ptr() as u64,
        cnt: ids.len() as u32,
        _pad: 0,
    };
    // SAFETY: the prefix of bpf_attr BPF_LINK_CREATE reads for a tracing-multi link;
    // `ids` and `cookies` point to `cnt` u32s and u64s, alive across the call.
    let fd = unsafe { bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr) }?;
    // SAFETY: BPF_LINK_CREATE returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[repr(C)]
struct InfoByFdAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// `BPF_OBJ_GET_INFO_BY_FD` on `fd`, into a zeroed `T`; None when the kernel refuses.
///
/// # Safety
/// `T` must be the kernel's info struct for `fd`'s kind (program, link, …), plain old data for
/// which all-zero bytes are a valid value and a request for nothing optional.
unsafe fn info_by_fd<T>(fd: BorrowedFd<'_>) -> Option<T> {
    // SAFETY: the caller's contract: all-zero bytes are a valid `T`.
    let mut info: T = unsafe { std::mem::zeroed() };
    let mut attr = InfoByFdAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of::<T>() as u32,
        info: &mut info as *mut T as u64,
    };
    // SAFETY: BPF_OBJ_GET_INFO_BY_FD writes at most `info_len` bytes into `info`, which lives
    // across the call; older kernels fill fewer fields and leave the rest zero.
    unsafe { bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr) }.ok()?;
    Some(info)
}

/// The kernel's info about the program `fd`; None when it refuses.
pub fn program_info(fd: BorrowedFd<'_>) -> Option<bpf_prog_info> {
    // SAFETY: bpf_prog_info is plain old data; zero is a valid value for every field.
    unsafe { info_by_fd(fd) }
}

/// The `missed` count of the kprobe.multi (or kprobe.session) link `fd`; None for another
/// kind of link, or when the kernel refuses.
pub fn kprobe_multi_link_missed(fd: BorrowedFd<'_>) -> Option<u64> {
    // SAFETY: bpf_link_info is plain old data; zero is a valid value for every field (and
    // zero `addrs`/`count` ask the kernel for no address array).
    let info: bpf_link_info = unsafe { info_by_fd(fd)? };
    if info.type_ != bpf_link_type::BPF_LINK_TYPE_KPROBE_MULTI as u32 {
        return None;
    }
    // SAFETY: the kernel filled the union's kprobe_multi member (the link's type says so).
    Some(unsafe { info.__bindgen_anon_1.kprobe_multi.missed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_info_attr_has_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<InfoByFdAttr>(), 16);
    }
}
