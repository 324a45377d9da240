//! mmap(2) of a whole file, read-only, for the life of the process.

use std::fs::File;
use std::os::fd::AsRawFd as _;

/// `file`'s first `len` bytes, mapped private and read-only, never unmapped; `None` where the
/// kernel refuses the mapping (some pseudo-files).
pub fn map_for_good(file: &File, len: usize) -> Option<&'static [u8]> {
    // SAFETY: a private read-only mapping of an open file; the kernel checks the length and
    // offset. The mapping outlives `file` (mappings hold their own reference) and is never
    // unmapped, so the slice below stays valid for the process's life.
    let mapped = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    if mapped == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: `len` readable bytes at `mapped`, as above.
    Some(unsafe { std::slice::from_raw_parts(mapped.cast::<u8>(), len) })
}
