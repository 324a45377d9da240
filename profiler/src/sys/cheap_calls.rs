//! The cheap system calls calibration times, made through syscall(2) itself, never a libc
//! wrapper that might answer from a cache without entering the kernel.

/// `personality(0xffffffff)`: asks for the persona and changes nothing.
pub fn query_persona() -> libc::c_long {
    // SAFETY: personality takes one integer; 0xffffffff only queries, changing nothing.
    unsafe { libc::syscall(libc::SYS_personality, 0xffff_ffff_u64 as libc::c_long) }
}

/// `getpid()`.
pub fn getpid() -> libc::c_long {
    // SAFETY: getpid takes no argument and has no side effects.
    unsafe { libc::syscall(libc::SYS_getpid) }
}

/// `getppid()`.
pub fn getppid() -> libc::c_long {
    // SAFETY: getppid takes no argument and has no side effects.
    unsafe { libc::syscall(libc::SYS_getppid) }
}
