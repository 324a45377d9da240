//! Who may load BPF programs: root, or CAP_BPF + CAP_PERFMON (5.8+), or CAP_SYS_ADMIN.

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capability set of this process.
fn effective_caps() -> u64 {
    crate::sys::caps::effective()
}

/// Whether `caps` allow loading and attaching tracing programs.
pub fn caps_suffice(caps: u64) -> bool {
    let has = |cap: u32| caps & (1 << cap) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

/// This process may not load tracing BPF programs.
#[derive(Debug, thiserror::Error)]
#[error(
    "hotprof needs root, or CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8): run it with sudo"
)]
pub struct NotPrivileged;

/// A one-line error unless this process may load tracing BPF programs.
pub fn check_privileges() -> Result<(), NotPrivileged> {
    if caps_suffice(effective_caps()) {
        Ok(())
    } else {
        Err(NotPrivileged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_sys_admin_or_bpf_plus_perfmon() {
        assert!(caps_suffice(1 << CAP_SYS_ADMIN));
        assert!(caps_suffice((1 << CAP_BPF) | (1 << CAP_PERFMON)));
        assert!(!caps_suffice(1 << CAP_BPF));
        assert!(!caps_suffice(0));
    }
}
