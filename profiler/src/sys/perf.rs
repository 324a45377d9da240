//! perf_event_open(2) without a BPF program: a kprobe, how hotprof asks the kernel whether it
//! accepts a kprobe at a place before deciding how to time a function there; and a counting
//! hardware event on one CPU, which `--counter`'s programs read.

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd as _, OwnedFd};

use aya_obj::generated::{PERF_FLAG_FD_CLOEXEC, perf_event_attr, perf_type_id};

/// The kprobe PMU's type, as the kernel numbers it (`/sys/bus/event_source/devices/kprobe/type`);
/// `None` on a kernel without kprobes.
pub fn kprobe_pmu_type() -> Option<u32> {
    std::fs::read_to_string("/sys/bus/event_source/devices/kprobe/type")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Creates a kprobe at `symbol+offset` through the kprobe PMU of type `pmu_type` (on CPU 0,
/// every process; created, never enabled), as aya does before attaching a program to it. The
/// kernel registers it, running every check it would run for a probe hotprof attaches
/// (notrace functions, the kprobe blacklist, instruction boundaries): the error is its answer.
/// Dropping the descriptor removes the kprobe.
pub fn open_kprobe(pmu_type: u32, symbol: &str, offset: u64) -> io::Result<OwnedFd> {
    let name = CString::new(symbol).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: perf_event_attr is plain old data; all-zero bytes are a valid value for every
    // field (a counting event with nothing optional requested).
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.size = std::mem::size_of::<perf_event_attr>() as u32;
    attr.type_ = pmu_type;
    attr.__bindgen_anon_3.config1 = name.as_ptr() as u64;
    attr.__bindgen_anon_4.config2 = offset;
    attr.set_disabled(1);
    // SAFETY: `attr` is a valid perf_event_attr of the size it states, and `name`, which
    // config1 points to, is a NUL-terminated string alive across the call; the kernel copies
    // both before returning.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const perf_event_attr,
            -1 as libc::pid_t,
            0 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: perf_event_open returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Opens a counting (never sampling) event of perf's generic hardware event `config`
/// (`PERF_COUNT_HW_*`) on CPU `cpu`, every process, kernel and user mode, enabled now: the
/// count a BPF program reads with `bpf_perf_event_read_value` on that CPU.
pub fn open_hardware_counter(config: u64, cpu: u32) -> io::Result<OwnedFd> {
    // SAFETY: perf_event_attr is plain old data; all-zero bytes are a valid value for every
    // field (a counting event with nothing optional requested).
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.size = std::mem::size_of::<perf_event_attr>() as u32;
    attr.type_ = perf_type_id::PERF_TYPE_HARDWARE as u32;
    attr.config = config;
    // SAFETY: `attr` is a valid perf_event_attr of the size it states; the kernel copies it
    // before returning.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const perf_event_attr,
            -1 as libc::pid_t,
            cpu as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: perf_event_open returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
