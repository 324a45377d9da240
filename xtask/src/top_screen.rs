//! Reading `hotprof top`'s screen as text (tmux's `capture-pane` on the host, `pty_run` in a
//! guest).

/// The table's rows: the lines under its `NAME` header, up to the first blank one.
pub fn row_names(screen: &str) -> Vec<String> {
    screen
        .lines()
        .skip_while(|line| !line.starts_with("NAME "))
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The since-start CALLS column of row `name`, read at the header's column.
pub fn since_start_calls(screen: &str, name: &str) -> Option<u64> {
    let header = screen.lines().find(|line| line.starts_with("NAME "))?;
    let (at, _) = header
        .match_indices("CALLS")
        .find(|(at, _)| !header[*at..].starts_with("CALLS/S"))?;
    // Columns in characters, not bytes: a row's `µs` is two bytes wide.
    let column = header[..at].chars().count();
    let row = screen
        .lines()
        .skip_while(|line| !line.starts_with("NAME "))
        .find(|line| line.split_whitespace().next() == Some(name))?;
    let rest: String = row.chars().skip(column).collect();
    rest.split_whitespace().next()?.parse().ok()
}

/// The calls in the histogram view's rows (`[lower, upper)  CALLS  PERCENT  BAR`).
pub fn histogram_calls(screen: &str) -> u64 {
    screen
        .lines()
        .filter(|line| line.starts_with('['))
        .filter_map(|line| {
            line.split(')')
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
