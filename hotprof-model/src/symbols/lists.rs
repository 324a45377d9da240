//! The tracing file systems' lists: which functions ftrace can trace, which kprobes refuse.

use std::collections::HashSet;

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
