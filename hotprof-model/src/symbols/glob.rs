//! Shell-style globs over symbol names: `*` any run, `?` one character. Enough for
//! `copy_*_iter*`; no character classes (kernel symbols need none).

/// Whether `pattern` contains glob metacharacters.
pub fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?'])
}

/// Matches `name` against `pattern` (iterative, linear-ish: no exponential backtracking).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((star_p, star_n)) = star {
            pi = star_p + 1;
            ni = star_n + 1;
            star = Some((star_p, star_n + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_like_a_shell() {
        assert!(glob_match("copy_*_iter*", "copy_page_from_iter_atomic"));
        assert!(glob_match("copy_*_iter*", "copy_page_to_iter"));
        assert!(!glob_match("copy_*_iter*", "_copy_to_user"));
        assert!(glob_match("vfs_?ead", "vfs_read"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("?", ""));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("__x64_sys_getpid", "__x64_sys_getpid"));
    }

    #[test]
    fn is_not_exponential() {
        let name = "a".repeat(200);
        assert!(!glob_match(&format!("{}b", "*a".repeat(30)), &name));
    }
}
