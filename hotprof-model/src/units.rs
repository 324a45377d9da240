//! Human units: parsing durations from the command line and printing nanoseconds.

use std::time::Duration;

/// Parses `2s`, `500ms`, `10us`, `250ns`, `1.5m`, `1h`. A bare number is rejected: the unit
/// is what makes `--min-latency 100` unambiguous.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(format!(
            "invalid duration '{text}': a duration cannot be negative"
        ));
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("invalid duration '{text}': missing unit (ns, us, ms, s, m, h)"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration '{text}': '{number}' is not a number"))?;
    let nanos_per_unit = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        _ => {
            return Err(format!(
                "invalid duration '{text}': unknown unit '{unit}' (ns, us, ms, s, m, h)"
            ));
        }
    };
    let nanos = value * nanos_per_unit;
    if !nanos.is_finite() || nanos > u64::MAX as f64 / 2.0 {
        return Err(format!("invalid duration '{text}': too large"));
    }
    Ok(Duration::from_nanos(nanos.round() as u64))
}

/// Like [`parse_duration`] but zero is an error (an interval or run time of 0 means nothing).
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration.is_zero() {
        return Err(format!(
            "invalid duration '{text}': must be greater than zero"
        ));
    }
    Ok(duration)
}

/// Nanoseconds in the largest unit that keeps the value ≥ 1: `(2.0, "µs")` for 2000.
pub fn scale_ns(ns: f64) -> (f64, &'static str) {
    if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    }
}

/// Formats nanoseconds with an auto-scaled unit: `812 ns`, `2.00 µs`, `1.97 ms`, `3.20 s`.
pub fn format_ns(ns: f64) -> String {
    let (value, unit) = scale_ns(ns);
    if unit == "ns" {
        return format!("{ns:.0} ns");
    }
    let decimals = if value < 10.0 {
        2
    } else if value < 100.0 {
        1
    } else {
        0
    };
    format!("{value:.decimals$} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse_duration("250ns"), Ok(Duration::from_nanos(250)));
        assert_eq!(parse_duration("10us"), Ok(Duration::from_micros(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn rejects_bad_durations_with_a_reason() {
        for bad in ["", "2", "s", "2x", "-1s", "1..2s", "1e999s", "99999999999h"] {
            let error = parse_duration(bad).unwrap_err();
            assert!(error.starts_with("invalid duration"), "{bad}: {error}");
        }
        assert!(parse_positive_duration("0s").is_err());
    }

    #[test]
    fn a_negative_duration_is_named_as_such() {
        assert_eq!(
            parse_duration("-5s"),
            Err("invalid duration '-5s': a duration cannot be negative".into())
        );
        assert_eq!(
            parse_positive_duration("0s"),
            Err("invalid duration '0s': must be greater than zero".into())
        );
    }

    #[test]
    fn formats_with_auto_scaled_units() {
        assert_eq!(format_ns(812.0), "812 ns");
        assert_eq!(format_ns(2_000.0), "2.00 µs");
        assert_eq!(format_ns(19_700_000.0), "19.7 ms");
        assert_eq!(format_ns(3_200_000_000.0), "3.20 s");
    }
}
