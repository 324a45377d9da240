//! Stage 2: load the eBPF object and attach its programs in the chosen mode.
//!
//! Every attachment is owned by the returned [`aya::Ebpf`]: links are file descriptors, so
//! they are detached when hotprof exits for any reason, SIGKILL included, and nothing is
//! pinned.

mod btf;
mod callsite;
mod error;
mod fd_limit;
mod fentry;
mod format;
mod fsession;
mod interrupt;
mod kprobe;
mod links;
mod loader;
mod misses;
mod mode;
mod modes;
mod multi;
mod perf_event;
mod placement;
mod pmu;
mod privileges;
mod program;
mod session_link;
mod syscalls;
mod tracing_multi;
mod tracking;

pub use btf::{BtfIndex, BtfParseError, KernelBtfError, NoTrampoline, kernel_btf};
pub use callsite::{AttachedSites, RefusedSite, attach_call_sites, group_sites, site_slots};
pub use error::{AttachError, Reason, one_line};
pub use fd_limit::raise_fd_limit;
pub use format::{FormatError, TracepointOffsets, field_offset};
pub use fsession::{FSESSION_PROGRAM, FentryAttach};
pub use interrupt::AttachSignals;
pub use links::RunLinks;
pub use loader::{EbpfLoadError, Loaded, ProbeConfig, load, load_object};
pub use misses::{link_misses, recursion_misses};
pub use mode::{AttachedFunctions, Mechanisms, attach_functions, attach_functions_with};
pub use modes::{AttachedMode, LinkKind, Mode};
pub use multi::KprobeAttach;
pub use perf_event::attach_sampler;
pub use placement::{KprobeAnswer, Placement, ask_kernel, place};
pub use pmu::{PmuCounters, PmuError, try_event};
pub use privileges::check_privileges;
pub use program::kprobes_available;
pub use session_link::kfunc_ids;
pub use syscalls::{
    SyscallMode, attach_syscalls, attach_syscalls_in, running_thread_info_status_offset,
};
pub use tracing_multi::attach_types as tracing_multi_attach_types;
pub use tracking::attach_tracking;
