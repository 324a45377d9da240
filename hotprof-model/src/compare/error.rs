//! Why two sets of recordings cannot be compared; each a one-line message.

/// Inputs that cannot be compared at all. Lesser mismatches (a function on one side only, a
/// different kernel or probe mode) are reported in [`super::Comparison`]'s notes and warnings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompareError {
    #[error("no {side} recording to compare")]
    NoRecordings { side: &'static str },
    #[error("no function is common to both sides: base has {base}; new has {new}")]
    NoCommonFunction { base: String, new: String },
}

/// `a, b, c and 4 more`, or `none`: keeps a long list of names on one line.
pub(super) fn short_list<S: AsRef<str>>(names: &[S]) -> String {
    const SHOWN: usize = 6;
    if names.is_empty() {
        return "none".into();
    }
    let shown: Vec<&str> = names.iter().take(SHOWN).map(AsRef::as_ref).collect();
    match names.len().checked_sub(SHOWN) {
        Some(more) if more > 0 => format!("{} and {more} more", shown.join(", ")),
        _ => shown.join(", "),
    }
}
