//! The running kernel's BTF, parsed once per process.
//!
//! Resolving `--fn` targets, loading fentry/fexit and BTF tracepoint programs and the stop-time
//! task iterator all need it; each parsed `/sys/kernel/btf/vmlinux` itself before (~50 ms on
//! the host, several times that in a TCG guest, every time).

use std::sync::OnceLock;

use aya::Btf;

/// Why the kernel's BTF could not be read (kept as text: the parse result is shared).
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
pub struct KernelBtfError(String);

static KERNEL_BTF: OnceLock<Result<Btf, KernelBtfError>> = OnceLock::new();

/// The kernel's BTF, parsed on first use.
pub fn kernel_btf() -> Result<&'static Btf, KernelBtfError> {
    KERNEL_BTF
        .get_or_init(|| Btf::from_sys_fs().map_err(|e| KernelBtfError(e.to_string())))
        .as_ref()
        .map_err(Clone::clone)
}
