//! Raw system calls that neither aya nor the standard library make for hotprof, each wrapped
//! in a safe function with its `SAFETY:` argument here, so that the rest of the crate asks
//! the kernel through ordinary Rust calls.

pub mod perf;
