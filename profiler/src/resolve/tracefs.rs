//! Reading the tracing file systems: which functions ftrace can trace, which kprobes refuse.

use std::collections::HashSet;
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

/// Parses `available_filter_functions`: `name` or `name [module]` per line.
pub fn parse_filter_functions(data: &[u8]) -> HashSet<String> {
    String::from_utf8_lossy(data)
        .lines()
        .filter_map(|line| line.split_ascii_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Parses debugfs `kprobes/blacklist`: `0xstart-0xend\tname` per line.
pub fn parse_blacklist(data: &[u8]) -> HashSet<String> {
    String::from_utf8_lossy(data)
        .lines()
        .filter_map(|line| line.split_ascii_whitespace().nth(1))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_filter_functions_with_modules() {
        let set = parse_filter_functions(b"vfs_read\next4_read_iter [ext4]\n\n");
        assert!(set.contains("vfs_read") && set.contains("ext4_read_iter"));
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn parses_the_kprobe_blacklist() {
        let set = parse_blacklist(b"0xffffffff81000000-0xffffffff81000010\tnmi_handle\nbogus\n");
        assert_eq!(set.into_iter().collect::<Vec<_>>(), ["nmi_handle"]);
    }
}
