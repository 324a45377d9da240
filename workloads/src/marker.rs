//! The bench's instruction-count marker: `nopl 0x48505246(%rax,%rax,1)`, a no-op that the
//! bench's QEMU plugin (`xtask/qemu-plugin/insn_count.c`) recognises by its bytes when it
//! translates it, counting the guest instructions between two of them. Opt-in (`--marker`):
//! without the plugin it is an ordinary 8-byte no-op.

/// The marker's encoding, as the plugin matches it.
pub const MARKER_BYTES: [u8; 8] = [0x0f, 0x1f, 0x84, 0x00, 0x46, 0x52, 0x50, 0x48];

/// Whether this build can execute the marker (it is an x86-64 instruction).
pub const MARKER_SUPPORTED: bool = cfg!(target_arch = "x86_64");

/// Executes the marker once (a no-op off x86-64, where [`MARKER_SUPPORTED`] is false).
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_a_harmless_nop() {
        // Runs on the host: executing it twice changes nothing and does not fault.
        bench_marker();
        bench_marker();
        assert_eq!(&MARKER_BYTES[4..], b"FRPH");
    }
}
