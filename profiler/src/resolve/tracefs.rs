//! Where the tracing file system is.

use std::path::PathBuf;

/// Where tracefs is mounted, mounting it at `/sys/kernel/tracing` if needed (root only).
pub fn tracefs_root() -> Option<PathBuf> {
    for root in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        let root = PathBuf::from(root);
        if root.join("events").is_dir() {
            return Some(root);
        }
    }
    let root = PathBuf::from("/sys/kernel/tracing");
    let mounted =
        crate::sys::mount::mount(c"tracefs", c"/sys/kernel/tracing", c"tracefs", 0).is_ok();
    (mounted && root.join("events").is_dir()).then_some(root)
}
