// The crate-root items of the two task-local storage objects, `profiler` (`main.rs`) and
// `profiler-plain` (`plain.rs`), included by both: their modules, panic handler and licence.
// Each root adds its own `PLAIN` (and `main.rs` the bench's probes).

mod filter;
mod frames;
mod keys;
mod kfunc;
mod probes;
mod raw_syscalls;
mod raw_syscalls_btf;
mod sample;
mod session;
mod slowest;
#[path = "store/task_local.rs"]
mod store;
mod task_storage;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
