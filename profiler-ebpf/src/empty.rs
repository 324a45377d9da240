//! Empty probe pairs for `cargo xtask bench`: the floor each mechanism costs before hotprof
//! does any work. They return at once; only `profiler/examples/empty_probe.rs` attaches them,
//! never hotprof. Minimum kernels as for the real programs: kprobe 4.1 (kretprobe too),
//! fentry/fexit 5.5 with BTF, syscall tracepoints 4.7.

use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe, tracepoint},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext, TracePointContext},
};

#[kprobe]
pub fn empty_kprobe(_ctx: ProbeContext) -> u32 {
    0
}

#[kretprobe]
pub fn empty_kretprobe(_ctx: RetProbeContext) -> u32 {
    0
}

#[fentry]
pub fn empty_fentry(_ctx: FEntryContext) -> u32 {
    0
}

#[fexit]
pub fn empty_fexit(_ctx: FExitContext) -> u32 {
    0
}

#[tracepoint]
pub fn empty_sys_enter(_ctx: TracePointContext) -> u32 {
    0
}

#[tracepoint]
pub fn empty_sys_exit(_ctx: TracePointContext) -> u32 {
    0
}
