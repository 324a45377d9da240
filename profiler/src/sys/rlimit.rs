//! getrlimit(2)/setrlimit(2): the fd and locked-memory limits hotprof raises.

use std::io;

/// No limit.
pub const UNLIMITED: u64 = libc::RLIM_INFINITY;

/// The limits hotprof raises.
#[derive(Clone, Copy, Debug)]
pub enum Resource {
    /// RLIMIT_NOFILE: open file descriptors.
    OpenFiles,
    /// RLIMIT_MEMLOCK: locked memory, which kernels before 5.11 charge BPF maps to.
    LockedMemory,
}

/// A resource limit: the soft (`current`) and hard (`max`) values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    pub current: u64,
    pub max: u64,
}

// The type of the resource argument differs between C libraries (glibc: an enum, musl: int).
macro_rules! resource_id {
    ($resource:expr) => {
        match $resource {
            Resource::OpenFiles => libc::RLIMIT_NOFILE,
            Resource::LockedMemory => libc::RLIMIT_MEMLOCK,
        }
    };
}

/// The limit of `resource`.
pub fn get(resource: Resource) -> io::Result<Limit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `limit`, which outlives the call.
    if unsafe { libc::getrlimit(resource_id!(resource), &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Limit {
        current: limit.rlim_cur,
        max: limit.rlim_max,
    })
}

/// Sets the limit of `resource`.
pub fn set(resource: Resource, limit: Limit) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: limit.current,
        rlim_max: limit.max,
    };
    // SAFETY: setrlimit only reads `limit`.
    if unsafe { libc::setrlimit(resource_id!(resource), &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
