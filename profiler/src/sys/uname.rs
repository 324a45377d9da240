//! uname(2): the running kernel's release.

/// `uname -r` of the running kernel; `None` when uname(2) fails.
pub fn kernel_release() -> Option<String> {
    // SAFETY: utsname is plain C char arrays, for which all zeroes is a valid value.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a live, writable utsname, the buffer uname(2) fills.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    // SAFETY: uname succeeded, so `release` holds a NUL-terminated string within its array,
    // and `uts` outlives the borrow (the CStr is copied out below).
    let release = unsafe { std::ffi::CStr::from_ptr(uts.release.as_ptr()) };
    Some(release.to_string_lossy().into_owned())
}
