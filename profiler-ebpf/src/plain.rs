//! hotprof's eBPF programs for the runs that set no per-call option: the main object's
//! programs (`main.rs`, task-local storage) with every per-call option fixed at its default
//! at compile time ([`PLAIN`], `config::per_call`), so a plain `hotprof --fn F` pays no
//! instruction for `--cpu`, `--cgroup`, `--comm`, `--children`, `--min-latency`, `--off-cpu`,
//! `--stacks`, `--by`, `--slowest` or `--filter`. Built as the `profiler-plain` object;
//! userspace loads it instead of `profiler` when the run sets none of them. The bench's empty
//! and timing-floor probes are not in this object. Minimum kernels per mode are in `main.rs`.
#![no_std]
#![no_main]
// kfunc calls are written as instruction words (`kfunc.rs`).
#![feature(asm_experimental_arch)]

// The modules, panic handler and licence this object shares with `profiler`.
include!("task_local_object.rs");

/// Per-call options read as their defaults: the point of this object.
const PLAIN: bool = true;
