//! `hotprof_model::flame::parse_folded`: folded stacks (`frame;frame;frame WEIGHT` per line), as
//! written by `hotprof --folded` and by other profilers' stackcollapse scripts, read back to
//! draw and diff flame graphs.
//!
//! Properties:
//! - parsing never panics, whatever the bytes;
//! - what parses survives a round trip: `write_folded` then `parse_folded` gives the same
//!   lines, and so does the canonical form `merge_folded` makes of them;
//! - `total_weight` and `merge_folded` agree (merging saturates, the total is checked);
//! - frames made safe by `sanitize_frame` (here: each line of the input taken as one frame
//!   name) always form a stack that parses back as exactly itself.
#![no_main]

use hotprof_model::flame::{
    merge_folded, parse_folded, sanitize_frame, total_weight, write_folded,
};
use libfuzzer_sys::fuzz_target;

fn written(folded: &[(String, u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    write_folded(folded, &mut out).expect("writing to a Vec cannot fail");
    out
}

fn assert_round_trips(folded: &[(String, u64)]) {
    let text = written(folded);
    match parse_folded(&text) {
        Ok(back) => assert_eq!(
            back,
            folded,
            "round trip changed:\n{}",
            String::from_utf8_lossy(&text)
        ),
        Err(error) => panic!(
            "written folded text is refused: {error}\n{}",
            String::from_utf8_lossy(&text)
        ),
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(folded) = parse_folded(data) {
        assert_round_trips(&folded);
        let merged = merge_folded(&folded);
        assert_round_trips(&merged);
        assert!(
            merged.windows(2).all(|w| w[0].0 < w[1].0),
            "merge_folded is not sorted and unique"
        );
        assert!(merged.iter().all(|(_, weight)| *weight > 0));
        if let Some(total) = total_weight(&folded) {
            assert_eq!(total_weight(&merged), Some(total));
        }
    }

    let text = String::from_utf8_lossy(data);
    let frames: Vec<String> = text.split('\n').take(64).map(sanitize_frame).collect();
    let stack = frames.join(";");
    assert_round_trips(&[(stack, 1 + data.len() as u64)]);
});
