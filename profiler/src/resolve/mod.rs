//! Stage 1: turn what the user typed (`__audit_filter_op`, `copy_*_iter*`) into kernel
//! functions that can really be probed, or a one-line reason why not.
//!
//! The table and the name resolution over it are pure and live in the model crate
//! ([`hotprof_model::symbols`]); this stage reads the system's files into it, mounts tracefs
//! when it must, and finds call sites in the kernel's code (`/proc/kcore`).

pub mod callsites;
pub mod isa;
pub mod kcore;
mod tracefs;

pub use hotprof_model::symbols::{
    KernelFunctions, KernelSymbol, ResolveError, Target, did_you_mean, glob_match, is_glob,
    parse_blacklist, parse_filter_functions, parse_kallsyms,
};
pub use tracefs::tracefs_root;

/// This kernel's functions: `/proc/kallsyms`, with `available_filter_functions` (tracefs
/// mounted if needed) and the kprobe blacklist when they can be read.
pub fn kernel_functions() -> std::io::Result<KernelFunctions> {
    KernelFunctions::read(tracefs_root().as_deref())
}
