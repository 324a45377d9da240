//! Types shared by hotprof's eBPF programs (`profiler-ebpf`) and its userspace (`profiler`).
//!
//! Everything here is `#![no_std]`, `#[repr(C)]` and free of pointers so the same bytes mean the
//! same thing on both sides of a BPF map.
#![no_std]
// `opaque`'s empty `asm!` (the eBPF crates build with nightly).
#![cfg_attr(target_arch = "bpf", feature(asm_experimental_arch))]

pub mod histogram;
pub mod keys;
pub mod kfunc;
pub mod maps;

pub use histogram::{
    HIST_CHUNKS, HistPosition, NUM_BUCKETS, bucket_index, bucket_lower_bound, bucket_upper_bound,
    first_bucket_of_chunk, hist_element, hist_position,
};
pub use keys::{BY_FIELDS_MAX, ByKey, DEFAULT_MAX_KEYS, FILTER_CONDITIONS_MAX, FilterCond};
pub use maps::*;

/// `value`, through an empty `asm!` on BPF, so LLVM cannot see how it was computed: where it
/// would otherwise rewrite code into a shape that costs more instructions, or drop a mask the
/// verifier needs.
#[inline(always)]
pub fn opaque(mut value: u64) -> u64 {
    #[cfg(target_arch = "bpf")]
    // SAFETY: the template is empty: no instruction, no memory touched, the value unchanged.
    unsafe {
        core::arch::asm!("/* {0} */", inout(reg) value, options(pure, nomem, nostack));
    }
    #[cfg(not(target_arch = "bpf"))]
    {
        value = core::hint::black_box(value);
    }
    value
}
