//! The kfuncs hotprof's programs call, by placeholder: the eBPF side writes each call with its
//! placeholder as `imm` (`profiler-ebpf/src/kfunc.rs`), userspace replaces it with the kfunc's
//! BTF id in the running kernel before loading.

/// `bpf_session_is_return` (kprobe.session, 6.10+).
pub const SESSION_IS_RETURN: i32 = 0x4b46_0001;
/// `bpf_session_cookie` (kprobe.session, 6.10+).
pub const SESSION_COOKIE: i32 = 0x4b46_0002;

/// Each placeholder with the name of the kfunc it stands for.
pub const KFUNCS: [(i32, &str); 2] = [
    (SESSION_IS_RETURN, "bpf_session_is_return"),
    (SESSION_COOKIE, "bpf_session_cookie"),
];
