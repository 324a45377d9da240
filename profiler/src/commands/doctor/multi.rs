//! Whether the kernel creates kprobe.multi (5.18+) and kprobe.session (6.10+) links. aya 0.14
//! attaches neither, so a trivial kprobe program (`r0 = 0; exit`) is loaded and linked to one
//! function with raw bpf(2) calls (`sys::bpf`); both file descriptors are closed at once, which
//! detaches it.

use std::ffi::CStr;
use std::io;

use aya_obj::generated::bpf_attach_type;

use crate::sys::bpf::TrivialLinkError;

/// `BPF_TRACE_KPROBE_MULTI` (5.18).
pub const KPROBE_MULTI: u32 = bpf_attach_type::BPF_TRACE_KPROBE_MULTI as u32;
/// `BPF_TRACE_KPROBE_SESSION` (6.10): after `BPF_NETKIT_PEER`, the last type aya-obj 0.3 knows.
pub const KPROBE_SESSION: u32 = bpf_attach_type::BPF_NETKIT_PEER as u32 + 1;

/// Why no link was created.
#[derive(Debug, thiserror::Error)]
pub enum MultiError {
    #[error("a trivial kprobe program does not load: {0}")]
    Load(io::Error),
    #[error("{0}")]
    Link(io::Error),
}

/// Creates, and closes at once, a link of `attach_type` ([`KPROBE_MULTI`] or
/// [`KPROBE_SESSION`]) on `symbol`.
pub fn try_link(attach_type: u32, symbol: &CStr) -> Result<(), MultiError> {
    crate::sys::bpf::try_trivial_link(attach_type, symbol).map_err(|error| match error {
        TrivialLinkError::Load(error) => MultiError::Load(error),
        TrivialLinkError::Link(error) => MultiError::Link(error),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attach_types_have_the_kernel_numbers() {
        assert_eq!((KPROBE_MULTI, KPROBE_SESSION), (42, 56));
    }
}
