//! mount(2) and umount2(2), for tracefs and securityfs.

use std::ffi::CStr;
use std::io;

pub use libc::{MS_NODEV, MS_NOEXEC, MS_NOSUID};

/// Mounts a file system of type `fstype` from `source` at `target` with `flags` (`MS_*`) and
/// no data.
pub fn mount(source: &CStr, target: &CStr, fstype: &CStr, flags: libc::c_ulong) -> io::Result<()> {
    // SAFETY: plain mount(2) with valid NUL-terminated strings that outlive the call, and no
    // data argument.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Unmounts what is mounted at `target`.
pub fn unmount(target: &CStr) -> io::Result<()> {
    // SAFETY: umount2(2) with a valid NUL-terminated path and no flags.
    if unsafe { libc::umount2(target.as_ptr(), 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
