//! `hotprof_model::model::parse_recording`: the JSON recordings `--json` writes and
//! `hotprof compare` reads back, possibly from someone else's machine.
//!
//! Properties:
//! - parsing never panics, whatever the bytes;
//! - a recording that parses survives a round trip: serialising it with serde_json and
//!   parsing that again gives an equal value;
//! - what a reader derives from an accepted recording (the histogram rebuilt from its
//!   buckets, its quantiles) does not panic either.
#![no_main]

use hotprof_model::model::parse_recording;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(recording) = parse_recording(data, "fuzz.json") else {
        return;
    };
    let json = serde_json::to_vec(&recording).expect("an accepted recording serialises");
    let again = match parse_recording(&json, "fuzz.json") {
        Ok(again) => again,
        Err(error) => panic!(
            "re-serialised recording is refused: {error}\n{}",
            String::from_utf8_lossy(&json)
        ),
    };
    assert_eq!(
        again,
        recording,
        "round trip changed the recording:\n{}",
        String::from_utf8_lossy(&json)
    );

    for function in recording
        .functions
        .iter()
        .chain(recording.runs.iter().flat_map(|run| &run.functions))
    {
        let histogram = function.histogram();
        for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
            let _ = histogram.quantile(q, Some(function.min_ns), Some(function.max_ns));
        }
    }
});
