// What every eBPF object's crate root needs, included by `compat.rs` and
// `task_local_object.rs`: a panic handler (`no_std`) and the GPL licence the kernel requires
// for the helpers the programs call.

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

/// The architecture whose registers the programs read (`arch::NAME`): userspace's build
/// refuses to embed an object built for another (`profiler/build.rs`).
#[unsafe(link_section = "hotprof_arch")]
#[unsafe(no_mangle)]
static HOTPROF_ARCH: [u8; arch::NAME.len()] = *arch::NAME_BYTES;
