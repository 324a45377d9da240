//! `--filter EXPR`: conditions on the `--by` fields, joined by `&&`, checked in the kernel
//! (`arg2>=4096`, `errno==ENOENT`, `comm==dd`, `ret<0 && cpu==1`).

use std::str::FromStr;

use profiler_common::{
    FILTER_CONDITIONS_MAX, FilterCond,
    keys::{field, op},
};

use super::keys::{ByError, ByField};

/// Why a `--filter` expression cannot be used: one line naming the bad token.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("--filter: empty condition in `{0}`")]
    Empty(String),
    #[error("--filter: no comparison (==, !=, <, <=, >, >=) in `{0}`")]
    NoOperator(String),
    #[error("--filter: {0}")]
    Field(ByError),
    #[error("--filter: bad value `{value}` for {field} ({want})")]
    Value {
        field: String,
        value: String,
        want: &'static str,
    },
    #[error("--filter: {0} compares only with == or !=")]
    EqualityOnly(String),
    #[error("--filter: at most {FILTER_CONDITIONS_MAX} conditions, got {0}")]
    TooMany(usize),
    #[error("--filter: one comm condition at most")]
    TwoComms,
}

/// A parsed `--filter`: what the probes compare.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterExpr {
    conditions: Vec<FilterCond>,
    comm: Option<[u8; 16]>,
    text: String,
}

const OPERATORS: [(&str, u8); 6] = [
    (">=", op::GE),
    ("<=", op::LE),
    ("==", op::EQ),
    ("!=", op::NE),
    (">", op::GT),
    ("<", op::LT),
];

impl FromStr for FilterExpr {
    type Err = FilterError;

    fn from_str(text: &str) -> Result<Self, FilterError> {
        let parts: Vec<&str> = text.split("&&").map(str::trim).collect();
        if parts.len() > FILTER_CONDITIONS_MAX {
            return Err(FilterError::TooMany(parts.len()));
        }
        let mut expr = FilterExpr {
            text: text.trim().to_owned(),
            ..FilterExpr::default()
        };
        for part in parts {
            if part.is_empty() {
                return Err(FilterError::Empty(text.to_owned()));
            }
            let (at, symbol, code) = OPERATORS
                .iter()
                .filter_map(|&(symbol, code)| part.find(symbol).map(|at| (at, symbol, code)))
                // The leftmost operator; at one position the longer (`>=` before `>`).
                .min_by_key(|&(at, symbol, _)| (at, usize::MAX - symbol.len()))
                .ok_or_else(|| FilterError::NoOperator(part.to_owned()))?;
            let name = part[..at].trim();
            let value = part[at + symbol.len()..].trim();
            let by: ByField = name.parse().map_err(FilterError::Field)?;
            if by == ByField::Comm {
                if !matches!(code, op::EQ | op::NE) {
                    return Err(FilterError::EqualityOnly(name.to_owned()));
                }
                if expr.comm.is_some() {
                    return Err(FilterError::TwoComms);
                }
                expr.comm = Some(comm_value(value)?);
            }
            expr.conditions.push(FilterCond {
                field: by.code(),
                op: code,
                value: if by == ByField::Comm {
                    0
                } else {
                    parse_value(by, name, value)?
                },
                ..FilterCond::default()
            });
        }
        Ok(expr)
    }
}

impl FilterExpr {
    /// The eBPF `FILTERS` global.
    pub fn conditions(&self) -> [FilterCond; FILTER_CONDITIONS_MAX] {
        let mut all = [FilterCond::default(); FILTER_CONDITIONS_MAX];
        for (slot, condition) in all.iter_mut().zip(&self.conditions) {
            *slot = *condition;
        }
        all
    }

    /// The eBPF `FILTER_COMM_VALUE` global.
    pub fn comm(&self) -> [u8; 16] {
        self.comm.unwrap_or([0; 16])
    }

    /// The expression as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether a condition needs the function's return value.
    pub fn reads_return(&self) -> bool {
        self.conditions
            .iter()
            .any(|c| matches!(c.field, field::RET | field::ERRNO))
    }

    /// Whether a condition is on the caller (meaningless for syscalls).
    pub fn reads_caller(&self) -> bool {
        self.conditions.iter().any(|c| c.field == field::CALLER)
    }
}

fn comm_value(value: &str) -> Result<[u8; 16], FilterError> {
    let value = value.trim_matches(|c| c == '\'' || c == '"');
    if value.is_empty() || value.len() > 15 {
        return Err(FilterError::Value {
            field: "comm".into(),
            value: value.into(),
            want: "a command name of 1 to 15 bytes",
        });
    }
    let mut bytes = [0; 16];
    bytes[..value.len()].copy_from_slice(value.as_bytes());
    Ok(bytes)
}

/// A condition's number: decimal or `0x` hex, with an optional `k`/`m`/`g` (binary) suffix; a
/// negative number for `ret`; an errno name or `ok` for `errno`.
fn parse_value(by: ByField, name: &str, value: &str) -> Result<u64, FilterError> {
    let bad = |want| FilterError::Value {
        field: name.to_owned(),
        value: value.to_owned(),
        want,
    };
    if by == ByField::Errno {
        if value == "ok" {
            return Ok(0);
        }
        if let Some(errno) = super::keys::errno_number(value) {
            return Ok(errno);
        }
        return value
            .parse::<u64>()
            .map_err(|_| bad("an errno name such as ENOENT, a number, or ok"));
    }
    let (negative, digits) = match value.strip_prefix('-') {
        Some(rest) if by == ByField::Ret => (true, rest),
        _ => (false, value),
    };
    let (digits, scale) = match digits.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('k') => (&digits[..digits.len() - 1], 1u64 << 10),
        Some('m') => (&digits[..digits.len() - 1], 1 << 20),
        Some('g') => (&digits[..digits.len() - 1], 1 << 30),
        _ => (digits, 1),
    };
    let number = match digits.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => digits.parse::<u64>(),
    }
    .ok()
    .and_then(|n| n.checked_mul(scale))
    .ok_or_else(|| bad("a number such as 4096, 0x1000 or 4k"))?;
    Ok(if negative {
        (number as i64).wrapping_neg() as u64
    } else {
        number
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<FilterExpr, String> {
        text.parse::<FilterExpr>().map_err(|e| e.to_string())
    }

    #[test]
    fn conditions_become_what_the_probes_compare() {
        let expr = parse("arg2>=4k && errno==ENOENT && comm!=dd && ret < -1").unwrap();
        let c = expr.conditions();
        assert_eq!(
            (c[0].field, c[0].op, c[0].value),
            (field::ARG | 2, op::GE, 4096)
        );
        assert_eq!((c[1].field, c[1].op, c[1].value), (field::ERRNO, op::EQ, 2));
        assert_eq!((c[2].field, c[2].op), (field::COMM, op::NE));
        assert_eq!(
            (c[3].field, c[3].op, c[3].value as i64),
            (field::RET, op::LT, -1)
        );
        assert_eq!(&expr.comm()[..3], b"dd\0");
        assert!(expr.reads_return());
        assert_eq!(parse("arg0==0x10").unwrap().conditions()[0].value, 16);
        assert_eq!(parse("errno==ok").unwrap().conditions()[0].value, 0);
        assert_eq!(parse("cpu!=1").unwrap().conditions()[0].op, op::NE);
        assert_eq!(parse("pid<5").unwrap().conditions()[0].op, op::LT);
    }

    #[test]
    fn bad_expressions_are_one_line_naming_the_bad_token() {
        for (text, said) in [
            ("arg2>=4x", "bad value `4x` for arg2"),
            ("size>1", "unknown --by key `size`"),
            ("arg7==1", "--by arg7"),
            ("arg2 4096", "no comparison"),
            ("arg2>1 &&", "empty condition"),
            ("comm>dd", "comm compares only with == or !="),
            ("errno==ENOPE", "bad value `ENOPE` for errno"),
            ("ret>=-x", "bad value `-x` for ret"),
            ("cpu==-1", "bad value `-1` for cpu"),
            ("a>1&&b>1&&c>1&&d>1&&e>1", "at most 4 conditions"),
            ("comm==a && comm==b", "one comm condition"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(said), "{text}: {error}");
            assert!(!error.contains('\n'), "{text}: {error}");
        }
    }
}
