//! hotprof's eBPF programs for kernels without task-local storage (before 5.11, or built
//! without BTF): the same programs as `main.rs`, with each task's frame stack in a hash map
//! keyed by task (`store/hash_map.rs`) instead. Built as the `profiler-compat` object;
//! userspace loads it when the kernel cannot create the main object's task-storage map.
//! Minimum kernels per mode are listed in `main.rs`; nothing here needs more than the mode.
//! The bench's empty and timing-floor probes are not in this object.
#![no_std]
#![no_main]

mod arch;
mod config;
mod counters;
mod filter;
mod frames;
mod hist;
mod keys;
mod pmu;
mod probes;
mod raw_syscalls;
mod sample;
mod slowest;
#[path = "store/hash_map.rs"]
mod store;

/// Per-call options are read from `.rodata`: the one object for kernels without task storage.
const PLAIN: bool = false;

/// Also loaded by kernels before 5.11, whose verifier does not carry a bound checked on a
/// register to a copy of it spilled before the check (5.11: "bpf: Propagate scalar ranges
/// through register assignments"): the code masks such indices again.
const PRE_5_11_VERIFIER: bool = true;

include!("object_items.rs");
