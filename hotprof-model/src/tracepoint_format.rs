//! Tracepoint `format` files: field offsets differ between kernels, so they are read at run
//! time instead of being compiled into the eBPF programs.

/// Offset of `field` in a tracepoint `format` description
/// (`\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;`).
pub fn field_offset(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let mut parts = line.trim().split(';').map(str::trim);
        let declaration = parts.next()?.strip_prefix("field:")?;
        let name = declaration.rsplit([' ', '*']).next()?;
        let name = name.split('[').next()?;
        if name != field {
            return None;
        }
        parts.find_map(|p| p.strip_prefix("offset:")?.parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH_6_1: &str = "name: sched_switch\nID: 316\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n";
    const FORK_6_18: &str = "format:\n\
\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:pid_t parent_pid;\toffset:12;\tsize:4;\tsigned:1;\n\
\tfield:__data_loc char[] child_comm;\toffset:16;\tsize:4;\tsigned:0;\n\
\tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;\n";

    #[test]
    fn finds_offsets_in_both_layouts() {
        assert_eq!(field_offset(SWITCH_6_1, "prev_pid"), Some(24));
        assert_eq!(field_offset(SWITCH_6_1, "next_pid"), Some(56));
        assert_eq!(field_offset(SWITCH_6_1, "prev_comm"), Some(8));
        assert_eq!(field_offset(FORK_6_18, "child_pid"), Some(20));
        assert_eq!(field_offset(FORK_6_18, "child_comm"), Some(16));
        assert_eq!(field_offset(FORK_6_18, "missing"), None);
        assert_eq!(field_offset("garbage\n\n", "x"), None);
    }
}
