//! What differs between the architectures the probes run on: which saved register holds an
//! argument, the return value, the stack pointer, the return address and the syscall number,
//! and where the compat-syscall flag lives. One file per architecture, picked by
//! `bpf_target_arch` (aya-build sets it from the architecture userspace is built for, so an
//! object always reads the registers of the kernel it is shipped for): a new architecture is a
//! file here, not an edit in every probe.
//!
//! Each file provides the same items; the probes use only these.

#[cfg(bpf_target_arch = "x86_64")]
#[path = "x86_64.rs"]
mod imp;

#[cfg(bpf_target_arch = "aarch64")]
#[path = "aarch64.rs"]
mod imp;

#[cfg(not(any(bpf_target_arch = "x86_64", bpf_target_arch = "aarch64")))]
compile_error!("hotprof's probes know the registers of x86_64 and aarch64 only");

pub(crate) use imp::*;
