//! uname(2): the running kernel's release and version.

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

/// `(major, minor)` of the running kernel; `None` when uname(2) fails or the release does
/// not start with two numbers.
pub fn kernel_version() -> Option<(u32, u32)> {
    version(&kernel_release()?)
}

/// `(major, minor)` of a kernel release (`6.12.48+deb12-cloud-amd64` → `(6, 12)`).
pub fn version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::version;

    #[test]
    fn versions_parse_from_distribution_releases() {
        assert_eq!(version("6.12.48+deb12-cloud-amd64"), Some((6, 12)));
        assert_eq!(version("5.10.0-35-cloud-amd64"), Some((5, 10)));
        assert_eq!(version("7.2.13+deb14-cloud-amd64"), Some((7, 2)));
        assert_eq!(version("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(version("unknown"), None);
    }
}
