//! bpf(2) where aya 0.14 has no call for it: the kernel's info about a program or a link
//! (`BPF_OBJ_GET_INFO_BY_FD`), and a trivial kprobe program linked through a kprobe.multi or
//! kprobe.session link (doctor's question whether the kernel creates such links).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd};

use aya_obj::generated::{bpf_cmd, bpf_link_info, bpf_link_type, bpf_prog_info, bpf_prog_type};

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

/// [`bpf`] for a command that returns a new file descriptor.
///
/// # Safety
/// As for [`bpf`]; `cmd` returns a new descriptor on success.
unsafe fn bpf_fd<T>(cmd: bpf_cmd, attr: &mut T) -> io::Result<OwnedFd> {
    // SAFETY: the caller's contract.
    let fd = unsafe { bpf(cmd, attr)? };
    // SAFETY: a non-negative return of these commands is a new file descriptor owned by no one
    // else.
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

/// One BPF instruction.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

/// The head of `union bpf_attr` for BPF_PROG_LOAD, up to `expected_attach_type` (4.17).
#[repr(C)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The head of `union bpf_attr` for BPF_LINK_CREATE with its `kprobe_multi` member.
#[repr(C)]
struct LinkCreate {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    multi_flags: u32,
    cnt: u32,
    syms: u64,
    addrs: u64,
    cookies: u64,
}

/// Why no trivial link was created.
#[derive(Debug)]
pub enum TrivialLinkError {
    /// The program (`r0 = 0; exit`) did not load.
    Load(io::Error),
    /// The link was refused.
    Link(io::Error),
}

/// Loads a trivial kprobe program (`r0 = 0; exit`) expecting `attach_type` (a kprobe.multi
/// or kprobe.session attach type), links it to `symbol`, and closes both at once, which
/// detaches it.
pub fn try_trivial_link(attach_type: u32, symbol: &CStr) -> Result<(), TrivialLinkError> {
    const MOV64_IMM: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
    const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT
    let insns = [
        Insn {
            code: MOV64_IMM,
            regs: 0,
            off: 0,
            imm: 0,
        },
        Insn {
            code: EXIT,
            regs: 0,
            off: 0,
            imm: 0,
        },
    ];
    let license = c"GPL";
    let mut name = [0u8; 16];
    name[..14].copy_from_slice(b"hotprof_doctor");
    let mut load = ProgLoad {
        prog_type: bpf_prog_type::BPF_PROG_TYPE_KPROBE as u32,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
        prog_name: name,
        prog_ifindex: 0,
        expected_attach_type: attach_type,
    };
    // SAFETY: `load` is BPF_PROG_LOAD's head of `union bpf_attr`; `insns` and `license`, which
    // it points to, are alive across the call, and no log buffer is given.
    let program =
        unsafe { bpf_fd(bpf_cmd::BPF_PROG_LOAD, &mut load) }.map_err(TrivialLinkError::Load)?;
    let symbols = [symbol.as_ptr()];
    let mut link = LinkCreate {
        prog_fd: program.as_raw_fd() as u32,
        target_fd: 0,
        attach_type,
        flags: 0,
        multi_flags: 0,
        cnt: symbols.len() as u32,
        syms: symbols.as_ptr() as u64,
        addrs: 0,
        cookies: 0,
    };
    // SAFETY: `link` is BPF_LINK_CREATE's head with its kprobe_multi member; `symbols` (and
    // the string it points to) is alive across the call, and no addresses or cookies are given.
    let link =
        unsafe { bpf_fd(bpf_cmd::BPF_LINK_CREATE, &mut link) }.map_err(TrivialLinkError::Link)?;
    drop(link);
    drop(program);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attr_heads_have_the_kernel_layout() {
        // Offsets of `expected_attach_type` and `kprobe_multi.cookies` in `union bpf_attr`.
        assert_eq!(std::mem::offset_of!(ProgLoad, expected_attach_type), 68);
        assert_eq!(std::mem::offset_of!(LinkCreate, syms), 24);
        assert_eq!(std::mem::offset_of!(LinkCreate, cookies), 40);
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        assert_eq!(std::mem::size_of::<InfoByFdAttr>(), 16);
    }
}
