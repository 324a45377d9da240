//! `hotprof_model::tracepoint_format::field_offset`: tracepoint `format` files from tracefs.
//!
//! The input is `format \0 field`; without a NUL byte, the fields the eBPF programs really
//! read (`prev_pid`, `next_pid`, `child_pid`) and every name declared in the input are asked.
//!
//! Properties: never panics; a field that is found is named in the format text.
#![no_main]

use hotprof_model::tracepoint_format::field_offset;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (format, requested) = match text.split_once('\0') {
        Some((format, field)) => (format, Some(field)),
        None => (text, None),
    };
    let mut fields: Vec<&str> = vec!["prev_pid", "next_pid", "child_pid", ""];
    fields.extend(requested);
    fields.extend(
        format
            .lines()
            .filter_map(|line| line.trim().strip_prefix("field:"))
            .filter_map(|declaration| declaration.split(';').next()?.rsplit([' ', '*']).next())
            .take(16),
    );
    for field in fields {
        if field_offset(format, field).is_some() {
            assert!(
                format.contains(field),
                "{field:?} found but not in the format"
            );
        }
    }
});
