//! Fentry programs.

use aya_obj::{
    btf::{Btf, BtfKind},
    generated::{bpf_attach_type::BPF_TRACE_FENTRY, bpf_prog_type::BPF_PROG_TYPE_TRACING},
};

use crate::programs::{
    FdLink, FdLinkId, ProgramData, ProgramError, ProgramType, define_link_wrapper,
    load_program_with_attach_type, load_program_with_raw_attach_type,
    utils::attach_raw_tracepoint, write_kfunc_ids,
};

/// A program that can be attached to the entry point of (almost) any kernel
/// function.
///
/// [`FEntry`] programs are similar to [kprobes](crate::programs::KProbe), but
/// the difference is that fentry has practically zero overhead to call before
/// kernel function. Fentry programs can be also attached to other eBPF
/// programs.
///
/// # Minimum kernel version
///
/// The minimum kernel version required to use this feature is 5.5.
///
/// # Examples
///
/// ```no_run
/// # #[derive(thiserror::Error, Debug)]
/// # enum Error {
/// #     #[error(transparent)]
/// #     BtfError(#[from] aya::BtfError),
/// #     #[error(transparent)]
/// #     Program(#[from] aya::programs::ProgramError),
/// #     #[error(transparent)]
/// #     Ebpf(#[from] aya::EbpfError),
/// # }
/// # let mut bpf = Ebpf::load_file("ebpf_programs.o")?;
/// use aya::{Ebpf, programs::FEntry, BtfError, Btf};
///
/// let btf = Btf::from_sys_fs()?;
/// let program: &mut FEntry = bpf.program_mut("filename_lookup").unwrap().try_into()?;
/// program.load("filename_lookup", &btf)?;
/// program.attach()?;
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug)]
#[doc(alias = "BPF_TRACE_FENTRY")]
#[doc(alias = "BPF_PROG_TYPE_TRACING")]
pub struct FEntry {
    pub(crate) data: ProgramData<FEntryLink>,
}

impl FEntry {
    /// The type of the program according to the kernel.
    pub const PROGRAM_TYPE: ProgramType = ProgramType::Tracing;

    /// Loads the program inside the kernel.
    ///
    /// Loads the program so it's executed when the kernel function `fn_name`
    /// is entered. The `btf` argument must contain the BTF info for the
    /// running kernel.
    pub fn load(&mut self, fn_name: &str, btf: &Btf) -> Result<(), ProgramError> {
        let Self { data } = self;
        data.attach_btf_id = Some(btf.id_by_type_name_kind(fn_name, BtfKind::Func)?);
        load_program_with_attach_type(BPF_PROG_TYPE_TRACING, BPF_TRACE_FENTRY, data)
    }

    /// hotprof patch (HOTPROF-PATCH.md): loads the program for the kernel BTF type `btf_id`
    /// (the function [`Self::load`] would look up by name), for callers that index the
    /// kernel's BTF themselves rather than parse it into a [`Btf`].
    pub fn load_by_btf_id(&mut self, btf_id: u32) -> Result<(), ProgramError> {
        let Self { data } = self;
        data.attach_btf_id = (btf_id != 0).then_some(btf_id);
        load_program_with_attach_type(BPF_PROG_TYPE_TRACING, BPF_TRACE_FENTRY, data)
    }

    /// hotprof patch (HOTPROF-PATCH.md): loads the program as an fsession program for the
    /// kernel BTF type `btf_id`: one program run at the function's entry and at its exit,
    /// with `bpf_session_is_return(ctx)` telling which and `bpf_session_cookie(ctx)` a u64 of
    /// the call's own. `fsession_attach_type` is `BPF_TRACE_FSESSION`'s value in the running
    /// kernel (newer than aya-obj's bindings: the caller reads it from the kernel's BTF), and
    /// `kfuncs` the session kfuncs' placeholders with their BTF ids, written into the
    /// program's calls first (as [`crate::programs::KProbe::load_for_session_link`] does).
    /// [`Self::attach`] then attaches it like an fentry program.
    ///
    /// # Minimum kernel version
    ///
    /// 7.0 (x86-64 and arm64 JITs).
    pub fn load_for_fsession(
        &mut self,
        btf_id: u32,
        fsession_attach_type: u32,
        kfuncs: &[(i32, u32)],
    ) -> Result<(), ProgramError> {
        let Self { data } = self;
        write_kfunc_ids(data, kfuncs);
        data.attach_btf_id = (btf_id != 0).then_some(btf_id);
        load_program_with_raw_attach_type(BPF_PROG_TYPE_TRACING, fsession_attach_type, data)
    }

    /// hotprof patch (HOTPROF-PATCH.md): loads the program for a tracing-multi link
    /// (`BPF_TRACE_FENTRY_MULTI`, Linux 7.x, x86-64), `attach_type` being that attach type's
    /// value as the running kernel's BTF numbers it. No attach BTF id: the kernel refuses one
    /// (EINVAL) and verifies the program against its own placeholder, `bpf_multi_func`. Such a
    /// program is attached by a `BPF_LINK_CREATE` naming its functions, not by
    /// [`Self::attach`].
    pub fn load_for_multi(&mut self, attach_type: u32) -> Result<(), ProgramError> {
        let Self { data } = self;
        data.attach_btf_id = None;
        load_program_with_raw_attach_type(BPF_PROG_TYPE_TRACING, attach_type, data)
    }

    /// Attaches the program.
    ///
    /// The returned value can be used to detach, see [`FEntry::detach`].
    pub fn attach(&mut self) -> Result<FEntryLinkId, ProgramError> {
        attach_raw_tracepoint(&mut self.data, None)
    }
}

define_link_wrapper!(FEntryLink, FEntryLinkId, FdLink, FdLinkId, FEntry);
