//! hotprof's profile model: everything a recording is after the kernel has been read, and
//! nothing that reads the kernel. No aya, no tokio, no eBPF object: `cargo test -p
//! hotprof-model` and the fuzz targets build this crate alone.
//!
//! The modules, bottom up (imports point up this list, never down). No `unsafe` anywhere.

#![forbid(unsafe_code)]

// The kernel's function table from the text of kallsyms and the tracing lists, and the
// names a request resolves to.
pub mod symbols;

// Tracepoint `format` files: field offsets.
pub mod tracepoint_format;

// Durations and sizes as people write and read them.
pub mod units;

// The recording: histograms, percentiles, losses, stacks; the versioned JSON model.
pub mod model;

// Folded stacks, symbolization and inferno flame graphs.
pub mod flame;

// Text and JSON reports, stack tables, flame graph titles.
pub mod report;

// Base vs patched statistics, in the kernel test robot's style.
pub mod compare;

// Prometheus, pprof, HTML.
pub mod export;
