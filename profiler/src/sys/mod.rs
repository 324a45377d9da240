//! Raw system calls that neither aya nor the standard library make for hotprof, each wrapped
//! in a safe function with its `SAFETY:` argument here, so that the rest of the crate asks
//! the kernel through ordinary Rust calls.

pub mod bpf;
pub mod caps;
pub mod cheap_calls;
pub mod clock;
pub mod ids;
pub mod mmap;
pub mod mount;
pub mod perf;
pub mod process;
pub mod rlimit;
pub mod signal;
pub mod uname;
