//! The guest's output as error messages show it: the end of the console, and `--- title ---`
//! sections.

/// Console lines kept in error messages.
const CONSOLE_TAIL: usize = 60;

/// The last `lines` lines of `text`.
pub(super) fn tail(text: &str, lines: usize) -> String {
    let all = text.lines().collect::<Vec<_>>();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The guest's output as one block for error messages.
pub(super) fn transcript(stdout: &str, stderr: &str, console: &str) -> String {
    format!(
        "{}{}{}",
        section("guest stdout", stdout),
        section("guest stderr", stderr),
        section(
            &format!("kernel console, last {CONSOLE_TAIL} lines"),
            &tail(console, CONSOLE_TAIL)
        ),
    )
}

/// `--- title ---` and the text, ending in a newline; `(empty)` when there is none.
pub(super) fn section(title: &str, text: &str) -> String {
    let text = text.trim_end_matches('\n');
    let text = if text.is_empty() { "(empty)" } else { text };
    format!("--- {title} ---\n{text}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
