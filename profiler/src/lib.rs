//! hotprof: per-call latency of kernel functions, aggregated in the kernel by aya eBPF
//! programs. `docs/architecture.md` draws the whole picture.
//!
//! The modules, in the order a recording flows through them:

#![deny(unsafe_code)]

// The pipeline, in order (each module separated so rustfmt keeps this order).

// 0. Raw system calls behind safe functions (bpf info, clocks, fork and exec, mount, signals,
// rlimits, uname, perf_event_open of a kprobe), for every layer: the one module allowed
// `unsafe`.
#[allow(unsafe_code)]
pub mod sys;

// What differs with the machine: syscall numbers, the compat flag (and, in `resolve/isa/`,
// instruction decoding).
pub mod arch;

// 1. Which kernel functions (kallsyms, BTF, tracefs) a request names.
pub mod resolve;

// 2. Loading the eBPF object and attaching its programs (fentry, kprobe, tracepoints).
pub mod attach;

// 3. Reading the kernel maps into per-function totals and stacks.
pub mod collect;

// 4–5. Everything that never touches the kernel is the `hotprof-model` crate: the recording
// (histograms, percentiles, losses, the versioned JSON), units, base-vs-patched comparison,
// flame graphs, text reports and the exports (Prometheus, pprof, HTML). Re-exported under
// their old paths so the kernel-side stages read `crate::model`, `crate::report` as before.
pub use hotprof_model::{compare, export, flame, model, report, units};

// What the long-running commands share: validation, attach, the workload's life and the
// signals of one run.
pub mod session;

// The probes' own cost per call, measured at start-up.
pub mod calibrate;

// Spawning the workload held at a gate, and its `name: key=value` figures.
pub mod workload;

// The progress line on a terminal.
pub mod progress;

// The command layer: one module per subcommand.
pub mod commands;

// The parser and the dispatch to the commands.
pub mod cli;

/// `uname -r` of the running kernel.
pub fn kernel_release() -> String {
    sys::uname::kernel_release().unwrap_or_else(|| "unknown".into())
}
