//! Latency stacks as a gzip-compressed pprof `profile.proto`, for `go tool pprof`,
//! Speedscope, Pyroscope and every other pprof reader.
//!
//! The input is already symbolized (the `flame` module owns symbolization): one
//! [`StackSample`] per distinct stack, frames root first, with the total latency and the
//! number of calls that ended under it. The profile has two sample types, `latency` in
//! `nanoseconds` (the default) and `calls` in `count`, and one `Function` plus one
//! `Location` per distinct frame name. Locations carry no addresses: pprof needs none to
//! aggregate by function, and the names are all a reader can use here. Their one `Mapping`
//! is marked `has_functions`, so pprof never tries to symbolize them again.
//!
//! The message set is small (Profile, ValueType, Sample, Mapping, Location, Line, Function
//! and the string table), so it is encoded by hand in a few lines instead of pulling in a protobuf
//! code generator. Field numbers follow
//! <https://github.com/google/pprof/blob/main/proto/profile.proto>.

use std::collections::HashMap;
use std::io::Write as _;

/// One stack: `(frames root-first, total latency in ns, number of calls)`.
pub type StackSample = (Vec<String>, u64, u64);

/// Profile-wide fields; all optional.
#[derive(Clone, Debug, Default)]
pub struct ProfileMeta {
    /// When the profile was collected, nanoseconds since the Unix epoch (0: not set).
    pub time_nanos: u64,
    /// How long the profile covered (0: not set).
    pub duration_nanos: u64,
    /// Free-form lines pprof shows with `-comments` (e.g. kernel, mode, command).
    pub comments: Vec<String>,
}

/// The frame name used for a stack with no frames (a lost stack), so its latency is still
/// visible and the totals still add up.
pub const EMPTY_STACK_FRAME: &str = crate::flame::UNKNOWN;

/// The file name of the profile's single mapping (frames are symbolized names, not
/// addresses in a binary).
pub const MAPPING_NAME: &str = "[hotprof]";

impl ProfileMeta {
    /// The profile of one recording: its duration, and its mode and kernel as a comment.
    pub fn of_recording(recording: &crate::model::Recording) -> Self {
        Self {
            duration_nanos: recording.duration_ns,
            comments: vec![format!(
                "hotprof {} mode, kernel {}",
                recording.mode, recording.kernel
            )],
            ..Default::default()
        }
    }
}

/// Latency and calls per stack, from the same stacks folded by latency and by count; frames
/// root first as pprof wants them, without the folded format's kernel-frame suffix.
pub fn stack_samples(
    by_latency: Vec<(String, u64)>,
    by_count: &[(String, u64)],
) -> Vec<StackSample> {
    let calls: std::collections::HashMap<&str, u64> = by_count
        .iter()
        .map(|(stack, calls)| (stack.as_str(), *calls))
        .collect();
    by_latency
        .into_iter()
        .map(|(stack, ns)| {
            let calls = calls.get(stack.as_str()).copied().unwrap_or(0);
            let frames = stack
                .split(';')
                .map(|f| f.trim_end_matches(crate::flame::KERNEL_SUFFIX).to_string())
                .collect();
            (frames, ns, calls)
        })
        .collect()
}

/// Encodes `stacks` as a gzip-compressed `profile.proto`, the form `go tool pprof` reads.
pub fn encode(stacks: &[StackSample], meta: &ProfileMeta) -> Vec<u8> {
    let raw = encode_uncompressed(stacks, meta);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&raw).expect("writing to a Vec cannot fail");
    gz.finish().expect("writing to a Vec cannot fail")
}

/// The `profile.proto` message itself, before compression.
pub fn encode_uncompressed(stacks: &[StackSample], meta: &ProfileMeta) -> Vec<u8> {
    let mut strings = StringTable::default();
    let mut profile = Vec::new();

    // sample_type = 1: latency/nanoseconds, calls/count.
    let latency = strings.id("latency");
    for (kind, unit) in [("latency", "nanoseconds"), ("calls", "count")] {
        let mut value_type = Vec::new();
        put_int(&mut value_type, 1, strings.id(kind));
        put_int(&mut value_type, 2, strings.id(unit));
        put_bytes(&mut profile, 1, &value_type);
    }

    // Identical stacks are merged (first-seen order) so each appears once.
    let mut merged: Vec<(Vec<&str>, u64, u64)> = Vec::new();
    let mut seen: HashMap<Vec<&str>, usize> = HashMap::new();
    for (frames, latency_ns, count) in stacks {
        let mut key: Vec<&str> = frames.iter().map(String::as_str).collect();
        if key.is_empty() {
            key.push(EMPTY_STACK_FRAME);
        }
        match seen.get(&key) {
            Some(&i) => {
                merged[i].1 += latency_ns;
                merged[i].2 += count;
            }
            None => {
                seen.insert(key.clone(), merged.len());
                merged.push((key, *latency_ns, *count));
            }
        }
    }

    // One Function and one Location (same id) per distinct frame name, in first-seen order.
    let mut frame_ids: HashMap<&str, u64> = HashMap::new();
    let mut frame_names: Vec<&str> = Vec::new();
    for (frames, latency_ns, count) in &merged {
        let mut sample = Vec::new();
        // pprof lists locations leaf first.
        let ids: Vec<u64> = frames
            .iter()
            .rev()
            .map(|frame| {
                *frame_ids.entry(frame).or_insert_with(|| {
                    frame_names.push(frame);
                    frame_names.len() as u64
                })
            })
            .collect();
        put_packed(&mut sample, 1, &ids);
        put_packed(&mut sample, 2, &[*latency_ns, *count]);
        put_bytes(&mut profile, 2, &sample);
    }
    // One mapping for every location, marked as already symbolized so pprof never goes
    // looking for binaries to symbolize against.
    let mut mapping = Vec::new();
    put_int(&mut mapping, 1, 1); // id
    put_int(&mut mapping, 5, strings.id(MAPPING_NAME)); // filename
    put_int(&mut mapping, 7, 1); // has_functions
    put_bytes(&mut profile, 3, &mapping);
    for id in 1..=frame_names.len() as u64 {
        let mut line = Vec::new();
        put_int(&mut line, 1, id); // function_id
        let mut location = Vec::new();
        put_int(&mut location, 1, id);
        put_int(&mut location, 2, 1); // mapping_id
        put_bytes(&mut location, 4, &line);
        put_bytes(&mut profile, 4, &location);
    }
    for (i, name) in frame_names.iter().enumerate() {
        let name = strings.id(name);
        let mut function = Vec::new();
        put_int(&mut function, 1, i as u64 + 1);
        put_int(&mut function, 2, name);
        put_int(&mut function, 3, name); // system_name
        put_bytes(&mut profile, 5, &function);
    }

    put_int(&mut profile, 9, meta.time_nanos);
    put_int(&mut profile, 10, meta.duration_nanos);
    for comment in &meta.comments {
        let id = strings.id(comment);
        put_int(&mut profile, 13, id);
    }
    put_int(&mut profile, 14, latency); // default_sample_type
    // string_table = 6, written last: every id above has been assigned by now. Field order
    // on the wire is free in protobuf.
    for text in &strings.texts {
        put_bytes(&mut profile, 6, text.as_bytes());
    }
    profile
}

/// `string_table`: index 0 must be the empty string.
struct StringTable {
    texts: Vec<String>,
    ids: HashMap<String, u64>,
}

impl Default for StringTable {
    fn default() -> Self {
        Self {
            texts: vec![String::new()],
            ids: HashMap::from([(String::new(), 0)]),
        }
    }
}

impl StringTable {
    fn id(&mut self, text: &str) -> u64 {
        if let Some(&id) = self.ids.get(text) {
            return id;
        }
        let id = self.texts.len() as u64;
        self.texts.push(text.to_string());
        self.ids.insert(text.to_string(), id);
        id
    }
}

/// Protobuf base-128 varint.
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Wire type 0 (varint) field; zero is the default and is omitted, as proto3 does.
fn put_int(out: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        put_varint(out, u64::from(field) << 3);
        put_varint(out, value);
    }
}

/// Wire type 2 (length-delimited) field: a string, bytes or an embedded message.
fn put_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_varint(out, (u64::from(field) << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A packed repeated varint field (how proto3 encodes `repeated uint64`/`int64`).
fn put_packed(out: &mut Vec<u8>, field: u32, values: &[u64]) {
    if values.is_empty() {
        return;
    }
    let mut packed = Vec::new();
    for &value in values {
        put_varint(&mut packed, value);
    }
    put_bytes(out, field, &packed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal protobuf reader for the tests: `(field, value)` where value is a varint or
    /// a byte slice.
    #[derive(Debug)]
    enum Value<'a> {
        Int(u64),
        Bytes(&'a [u8]),
    }

    fn varint(data: &[u8], pos: &mut usize) -> u64 {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let byte = data[*pos];
            *pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return value;
            }
            shift += 7;
        }
    }

    fn fields(data: &[u8]) -> Vec<(u64, Value<'_>)> {
        let mut pos = 0;
        let mut out = Vec::new();
        while pos < data.len() {
            let key = varint(data, &mut pos);
            match key & 7 {
                0 => out.push((key >> 3, Value::Int(varint(data, &mut pos)))),
                2 => {
                    let len = varint(data, &mut pos) as usize;
                    out.push((key >> 3, Value::Bytes(&data[pos..pos + len])));
                    pos += len;
                }
                other => panic!("unexpected wire type {other}"),
            }
        }
        out
    }

    fn packed(data: &[u8]) -> Vec<u64> {
        let mut pos = 0;
        let mut out = Vec::new();
        while pos < data.len() {
            out.push(varint(data, &mut pos));
        }
        out
    }

    #[test]
    fn varints_match_the_protobuf_spec() {
        let mut out = Vec::new();
        put_varint(&mut out, 1);
        put_varint(&mut out, 150);
        put_varint(&mut out, u64::MAX);
        assert_eq!(out[..3], [0x01, 0x96, 0x01]);
        assert_eq!(
            out[3..],
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
    }

    /// `(leaf-first frame names, values)` of one sample.
    type DecodedSample = (Vec<String>, Vec<u64>);

    /// Decodes the profile back into its sample types, samples and default sample type.
    fn decode(profile: &[u8]) -> (Vec<String>, Vec<DecodedSample>, u64) {
        let top = fields(profile);
        let strings: Vec<String> = top
            .iter()
            .filter_map(|(f, v)| match (f, v) {
                (6, Value::Bytes(b)) => Some(String::from_utf8(b.to_vec()).unwrap()),
                _ => None,
            })
            .collect();
        let mut function_names = HashMap::new();
        let mut location_function = HashMap::new();
        let mut sample_types = Vec::new();
        let mut default = 0;
        for (field, value) in &top {
            match (field, value) {
                (1, Value::Bytes(b)) => {
                    let vt = fields(b);
                    let get = |n| {
                        vt.iter().find_map(|(f, v)| {
                            if *f == n {
                                if let Value::Int(i) = v {
                                    Some(*i)
                                } else {
                                    None
                                }
                            } else {
                                None
                            }
                        })
                    };
                    sample_types.push(format!(
                        "{}/{}",
                        strings[get(1).unwrap() as usize],
                        strings[get(2).unwrap() as usize]
                    ));
                }
                (4, Value::Bytes(b)) => {
                    let loc = fields(b);
                    let Value::Int(id) = loc[0].1 else { panic!() };
                    assert!(matches!(loc[1], (2, Value::Int(1))), "mapping_id 1");
                    let Value::Bytes(line) = loc[2].1 else {
                        panic!()
                    };
                    let Value::Int(function) = fields(line)[0].1 else {
                        panic!()
                    };
                    location_function.insert(id, function);
                }
                (5, Value::Bytes(b)) => {
                    let function = fields(b);
                    let (Value::Int(id), Value::Int(name)) = (&function[0].1, &function[1].1)
                    else {
                        panic!()
                    };
                    function_names.insert(*id, strings[*name as usize].clone());
                }
                (14, Value::Int(i)) => default = *i,
                _ => {}
            }
        }
        let samples = top
            .iter()
            .filter_map(|(f, v)| match (f, v) {
                (2, Value::Bytes(b)) => {
                    let sample = fields(b);
                    let mut frames = Vec::new();
                    let mut values = Vec::new();
                    for (field, value) in sample {
                        match (field, value) {
                            (1, Value::Bytes(p)) => {
                                frames = packed(p)
                                    .iter()
                                    .map(|l| function_names[&location_function[l]].clone())
                                    .collect();
                            }
                            (2, Value::Bytes(p)) => values = packed(p),
                            _ => panic!("unexpected sample field"),
                        }
                    }
                    Some((frames, values))
                }
                _ => None,
            })
            .collect();
        assert_eq!(strings[0], "");
        (sample_types, samples, default)
    }

    #[test]
    fn round_trips_through_a_decoder() {
        let stacks: Vec<StackSample> = vec![
            (
                vec!["main".into(), "read".into(), "vfs_read".into()],
                3_000,
                3,
            ),
            (vec!["main".into(), "write".into()], 500, 1),
            (
                vec!["main".into(), "read".into(), "vfs_read".into()],
                1_000,
                2,
            ),
            (vec![], 7, 1),
        ];
        let meta = ProfileMeta {
            comments: vec!["kernel 6.1".into()],
            ..ProfileMeta::default()
        };
        let (types, samples, default) = decode(&encode_uncompressed(&stacks, &meta));
        assert_eq!(types, ["latency/nanoseconds", "calls/count"]);
        assert_eq!(default, 1, "default_sample_type is the 'latency' string");
        assert_eq!(samples.len(), 3, "identical stacks merged");
        assert_eq!(
            samples[0],
            (
                vec!["vfs_read".to_string(), "read".into(), "main".into()],
                vec![4_000, 5]
            )
        );
        assert_eq!(
            samples[1],
            (vec!["write".to_string(), "main".into()], vec![500, 1])
        );
        assert_eq!(
            samples[2],
            (vec![EMPTY_STACK_FRAME.to_string()], vec![7, 1])
        );
    }

    #[test]
    fn compressed_output_is_gzip() {
        let gz = encode(&[(vec!["a".into()], 1, 1)], &ProfileMeta::default());
        assert_eq!(gz[..2], [0x1f, 0x8b]);
    }
}
