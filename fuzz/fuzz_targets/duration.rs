//! `hotprof_model::units::parse_duration`: `--duration`, `--interval`, `--min-latency` values.
//!
//! Properties: never panics; an accepted duration is below `u64::MAX / 2` ns (the bound the
//! parser promises) and `parse_positive_duration` agrees with it.
#![no_main]

use hotprof_model::units::{parse_duration, parse_positive_duration};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = parse_duration(text);
    if let Ok(duration) = parsed {
        assert!(
            duration.as_nanos() <= u128::from(u64::MAX / 2) + 1,
            "{text:?} -> {duration:?}"
        );
    }
    if let Err(message) = &parsed {
        assert!(
            message.starts_with("invalid duration"),
            "{text:?}: {message}"
        );
    }
    let positive = parse_positive_duration(text);
    assert_eq!(
        positive.is_ok(),
        parsed.is_ok_and(|d| !d.is_zero()),
        "{text:?}"
    );
});
