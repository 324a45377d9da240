//! Types shared by hotprof's eBPF programs (`profiler-ebpf`) and its userspace (`profiler`).
//!
//! Everything here is `#![no_std]`, `#[repr(C)]` and free of pointers so the same bytes mean the
//! same thing on both sides of a BPF map.
#![no_std]

pub mod histogram;
pub mod keys;
pub mod kfunc;
pub mod maps;

pub use histogram::{
    HIST_CHUNKS, HistPosition, NUM_BUCKETS, bucket_index, bucket_lower_bound, bucket_upper_bound,
    first_bucket_of_chunk, hist_position,
};
pub use keys::{BY_FIELDS_MAX, ByKey, DEFAULT_MAX_KEYS, FILTER_CONDITIONS_MAX, FilterCond};
pub use maps::*;
