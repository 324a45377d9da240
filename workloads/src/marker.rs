//! The bench's instruction-count marker: a no-op that the bench's QEMU plugin
//! (`xtask/qemu-plugin/insn_count.c`) recognises by its bytes when it translates it, counting
//! the guest instructions between two of them. Opt-in (`--marker`): without the plugin it is an
//! ordinary no-op. One per architecture, each an encoding no compiler emits:
//! - x86-64: `nopl 0x48505246(%rax,%rax,1)`, 8 bytes ending in "FRPH";
//! - arm64: `hint #0x7e`, an unallocated hint (architecturally a NOP), 4 bytes.

/// The x86-64 marker's encoding, as the plugin matches it.
pub const MARKER_BYTES_X86_64: [u8; 8] = [0x0f, 0x1f, 0x84, 0x00, 0x46, 0x52, 0x50, 0x48];

/// The arm64 marker's encoding (`0xd5032fdf`, little-endian), as the plugin matches it.
pub const MARKER_BYTES_AARCH64: [u8; 4] = [0xdf, 0x2f, 0x03, 0xd5];

/// Whether this build can execute a marker.
pub const MARKER_SUPPORTED: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// Executes the marker once (nothing on an architecture without one, where
/// [`MARKER_SUPPORTED`] is false).
#[inline(always)]
pub fn bench_marker() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a multi-byte nop: reads no memory, writes no register or flag.
    unsafe {
        core::arch::asm!(
            ".byte 0x0f, 0x1f, 0x84, 0x00, 0x46, 0x52, 0x50, 0x48",
            options(nomem, nostack, preserves_flags)
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: an unallocated hint executes as a NOP: reads no memory, writes no register or
    // flag.
    unsafe {
        core::arch::asm!(".inst 0xd5032fdf", options(nomem, nostack, preserves_flags));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_a_harmless_nop() {
        // Runs on the host (and on aarch64 under qemu-user): executing it twice changes
        // nothing and does not fault.
        bench_marker();
        bench_marker();
        assert_eq!(&MARKER_BYTES_X86_64[4..], b"FRPH");
        // HINT #imm7: 0xd503201f | imm7 << 5.
        assert_eq!(
            u32::from_le_bytes(MARKER_BYTES_AARCH64),
            0xd503_201f | (0x7e << 5)
        );
    }
}
