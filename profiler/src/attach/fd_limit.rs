//! Enough file descriptors for every probe: each attached program holds a perf event fd and a
//! link fd, so a kprobe'd function costs four, and 1000 functions (about 4000 fds) pass both
//! the usual soft limit (1024) and the kernel's default hard limit (4096).

use std::io;

use crate::sys::rlimit::{self, Limit, Resource};

/// fds one probed function holds: entry and return program, each a perf event plus a link.
const FDS_PER_FUNCTION: u64 = 4;
/// Maps, programs, scheduler tracepoints, stdio and the runtime's own.
const FDS_BASE: u64 = 256;

/// Raises RLIMIT_NOFILE to what `functions` probed functions need, and returns the new soft
/// limit. Raising the hard limit needs CAP_SYS_RESOURCE (root has it); without it the soft
/// limit goes as far as the hard one allows, and an attach past it fails with EMFILE as before.
pub fn raise_fd_limit(functions: usize) -> io::Result<u64> {
    let needed = FDS_BASE + FDS_PER_FUNCTION * functions as u64;
    let limit = rlimit::get(Resource::OpenFiles)?;
    if limit.current >= needed {
        return Ok(limit.current);
    }
    let raised = Limit {
        current: needed,
        max: limit.max.max(needed),
    };
    if rlimit::set(Resource::OpenFiles, raised).is_ok() {
        return Ok(needed);
    }
    // No CAP_SYS_RESOURCE: as far as the hard limit goes.
    let capped = Limit {
        current: limit.max,
        max: limit.max,
    };
    rlimit::set(Resource::OpenFiles, capped)?;
    Ok(limit.max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_limit_covers_the_functions() {
        let soft = raise_fd_limit(10).expect("raising within the hard limit works");
        assert!(soft >= FDS_BASE + 10 * FDS_PER_FUNCTION);
    }
}
