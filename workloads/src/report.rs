//! The machine-readable result line every workload prints last:
//! `<name>: key=value key=value ...`.
//!
//! Tests split it on spaces and `=`, so keys and values must be free of both;
//! lists (e.g. per-thread counts) are joined with commas.

use std::fmt;

/// Builder for the result line; fields keep the order they were added in.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    name: String,
    fields: Vec<(String, String)>,
}

impl Report {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            fields: Vec::new(),
        }
    }

    /// Adds `key=value`, formatting `value` with `Display`.
    pub fn field(mut self, key: &str, value: impl fmt::Display) -> Self {
        let value = value.to_string();
        debug_assert!(
            !key.contains([' ', '=']) && !value.contains([' ', '=']),
            "report field {key}={value} would not parse"
        );
        self.fields.push((key.to_owned(), value));
        self
    }

    /// Adds `key=value` with exactly `decimals` digits after the point.
    pub fn float(self, key: &str, value: f64, decimals: usize) -> Self {
        self.field(key, format!("{value:.decimals$}"))
    }

    /// Adds `key=a,b,c`.
    pub fn list<T: fmt::Display>(self, key: &str, values: &[T]) -> Self {
        let joined = values
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        self.field(key, joined)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.name)?;
        for (key, value) in &self.fields {
            write!(f, " {key}={value}")?;
        }
        Ok(())
    }
}

/// Average of `total` over `count`, 0 when there is nothing to average.
pub fn average(total: u64, count: u64) -> f64 {
    if count == 0 {
        0.0
    } else {
        total as f64 / count as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_the_documented_line() {
        let line = Report::new("syscall_lat")
            .field("calls", 10000)
            .float("avg_ns", 123.44, 1)
            .field("total_ns", 1_234_400u64)
            .list("per_thread", &[1, 2, 3])
            .to_string();
        assert_eq!(
            line,
            "syscall_lat: calls=10000 avg_ns=123.4 total_ns=1234400 per_thread=1,2,3"
        );
    }

    #[test]
    fn empty_report_is_just_the_name() {
        assert_eq!(Report::new("x").to_string(), "x:");
    }

    #[test]
    fn average_handles_zero() {
        assert_eq!(average(10, 4), 2.5);
        assert_eq!(average(10, 0), 0.0);
    }
}
