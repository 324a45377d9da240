//! hotprof: per-call latency of kernel functions, aggregated in the kernel by aya eBPF
//! programs. The crate is split by stage: [`resolve`] targets → [`attach`] probes →
//! [`collect`] maps → [`model`] → [`report`]; [`record`] runs the pipeline.

pub mod attach;
pub mod calibrate;
pub mod cli;
pub mod cli_docs;
pub mod collect;
pub mod compare;
pub mod compare_cmd;
pub mod export;
pub mod flame;
pub mod flame_cmd;
pub mod list;
pub mod model;
pub mod progress;
pub mod record;
pub mod report;
pub mod resolve;
pub mod sample;
pub mod serve;
pub mod status;
pub mod units;
pub mod workload;

/// `uname -r` of the running kernel.
pub fn kernel_release() -> String {
    // SAFETY: uname fills a zeroed utsname; the release field is NUL-terminated.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut uts) } != 0 {
        return "unknown".into();
    }
    let release = unsafe { std::ffi::CStr::from_ptr(uts.release.as_ptr()) };
    release.to_string_lossy().into_owned()
}
