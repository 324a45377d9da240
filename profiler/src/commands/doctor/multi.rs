//! Whether the kernel creates kprobe.multi (5.18+) and kprobe.session (6.10+) links. aya 0.14
//! attaches neither, so a trivial kprobe program (`r0 = 0; exit`) is loaded and linked to one
//! function with raw bpf(2) calls; both file descriptors are closed at once, which detaches it.

use std::ffi::CStr;
use std::io;
use std::os::fd::{FromRawFd as _, OwnedFd};

use aya_obj::generated::{bpf_attach_type, bpf_cmd, bpf_prog_type};

/// `BPF_TRACE_KPROBE_MULTI` (5.18).
pub const KPROBE_MULTI: u32 = bpf_attach_type::BPF_TRACE_KPROBE_MULTI as u32;
/// `BPF_TRACE_KPROBE_SESSION` (6.10): after `BPF_NETKIT_PEER`, the last type aya-obj 0.3 knows.
pub const KPROBE_SESSION: u32 = bpf_attach_type::BPF_NETKIT_PEER as u32 + 1;

/// Why no link was created.
#[derive(Debug, thiserror::Error)]
pub enum MultiError {
    #[error("a trivial kprobe program does not load: {0}")]
    Load(io::Error),
    #[error("{0}")]
    Link(io::Error),
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

/// bpf(2) with `attr`; the file descriptor it returns.
fn bpf<T>(cmd: bpf_cmd, attr: &mut T) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a live, writable `repr(C)` prefix of `union bpf_attr` of exactly the
    // size passed; the kernel reads that many bytes and treats the rest as zero.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut T,
            std::mem::size_of::<T>() as libc::c_long,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a non-negative return of these commands is a new file descriptor owned by no one
    // else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Creates, and closes at once, a link of `attach_type` ([`KPROBE_MULTI`] or
/// [`KPROBE_SESSION`]) on `symbol`.
pub fn try_link(attach_type: u32, symbol: &CStr) -> Result<(), MultiError> {
    use std::os::fd::AsRawFd as _;

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
    let program = bpf(bpf_cmd::BPF_PROG_LOAD, &mut load).map_err(MultiError::Load)?;
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
    let link = bpf(bpf_cmd::BPF_LINK_CREATE, &mut link).map_err(MultiError::Link)?;
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
        assert_eq!((KPROBE_MULTI, KPROBE_SESSION), (42, 56));
    }
}
