//! The doctor's table as text: a line per check (name, status, what was found), under it what
//! the check enables and, unless its status is yes, what to do; the verdict last.

use super::rows::{Row, Status, Verdict};

/// The whole report: `header`, the table, and the verdict as the last line.
pub fn render(header: &str, rows: &[Row], verdict: &Verdict) -> String {
    let name_width = rows
        .iter()
        .map(|r| r.name.len())
        .chain(["check".len()])
        .max()
        .unwrap_or(0);
    let status_width = "unknown".len();
    let indent = " ".repeat(name_width + 2 + status_width + 2);
    let mut out = format!("{header}\n\n");
    out.push_str(&format!(
        "{:name_width$}  {:status_width$}  found\n",
        "check", "status"
    ));
    for row in rows {
        out.push_str(&format!(
            "{:name_width$}  {:status_width$}  {}\n",
            row.name,
            row.status.as_str(),
            one_line(&row.found)
        ));
        out.push_str(&format!("{indent}for: {}\n", row.enables));
        if row.status != Status::Yes && !row.fix.is_empty() {
            out.push_str(&format!("{indent}fix: {}\n", row.fix));
        }
    }
    out.push('\n');
    out.push_str(&verdict.line);
    out.push('\n');
    out
}

/// `text` on one line, never empty (a table cell).
fn one_line(text: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() { "-".into() } else { text }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &'static str, status: Status, found: &str) -> Row {
        Row {
            name,
            status,
            found: found.into(),
            enables: "something",
            fix: "do this".into(),
        }
    }

    #[test]
    fn rows_align_and_only_missing_ones_say_what_to_do() {
        let rows = [
            row("kernel", Status::Yes, "6.12.48"),
            row("syscall tracepoints", Status::No, "refused:\n  EPERM "),
            row("BTF", Status::Unknown, ""),
        ];
        let verdict = Verdict {
            works: false,
            line: "hotprof cannot work here: no probe attaches".into(),
        };
        let text = render("hotprof 0.1.0 on Linux 6.12.48", &rows, &verdict);
        let pad = " ".repeat(19 + 2 + 7 + 2);
        let want = format!(
            "hotprof 0.1.0 on Linux 6.12.48\n\
             \n\
             check                status   found\n\
             kernel               yes      6.12.48\n\
             {pad}for: something\n\
             syscall tracepoints  no       refused: EPERM\n\
             {pad}for: something\n\
             {pad}fix: do this\n\
             BTF                  unknown  -\n\
             {pad}for: something\n\
             {pad}fix: do this\n\
             \n\
             hotprof cannot work here: no probe attaches\n"
        );
        assert_eq!(text, want);
        assert_eq!(text.lines().last(), Some(verdict.line.as_str()));
    }
}
