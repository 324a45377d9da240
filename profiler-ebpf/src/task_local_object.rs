// The crate-root items of the two task-local storage objects, `profiler` (`main.rs`) and
// `profiler-plain` (`plain.rs`), included by both: their modules, and what every object's
// root has (`object_items.rs`).
// Each root adds its own `PLAIN` (and `main.rs` the bench's probes).

mod arch;
mod config;
mod counters;
mod filter;
mod frames;
mod fsession;
mod hist;
mod keys;
mod kfunc;
mod pmu;
mod probes;
mod raw_syscalls;
mod raw_syscalls_btf;
mod sample;
mod session;
mod slowest;
#[path = "store/task_local.rs"]
mod store;
mod task_storage;

include!("object_items.rs");

/// Loaded on 5.11+ only (task-local storage): see `compat.rs`.
const PRE_5_11_VERIFIER: bool = false;
