//! capget(2): this process's effective capabilities.

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit sets, in two data structs.
const VERSION_3: u32 = 0x2008_0522;

/// The effective capability set of this process (bit `n`: capability `n`); empty when
/// capget fails.
pub fn effective() -> u64 {
    let mut header = CapHeader {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget with a v3 header and room for two data structs, as the ABI requires.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    u64::from(data[0].effective) | (u64::from(data[1].effective) << 32)
}
