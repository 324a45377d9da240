//! Kernel space probes.
use std::{
    ffi::OsStr,
    fmt::{self, Write},
    io,
    path::{Path, PathBuf},
};

use std::os::fd::AsFd as _;

use aya_obj::generated::{
    BPF_F_KPROBE_MULTI_RETURN, bpf_attach_type::BPF_TRACE_KPROBE_MULTI, bpf_link_type,
    bpf_prog_type::BPF_PROG_TYPE_KPROBE,
};
use thiserror::Error;

/// hotprof patch (HOTPROF-PATCH.md): `BPF_TRACE_KPROBE_SESSION` (56, Linux 6.10) is past the
/// attach types aya-obj 0.3's bindings know; their `__MAX_BPF_ATTACH_TYPE` is that value.
const BPF_TRACE_KPROBE_SESSION: aya_obj::generated::bpf_attach_type =
    aya_obj::generated::bpf_attach_type::__MAX_BPF_ATTACH_TYPE;
const _: () = assert!(BPF_TRACE_KPROBE_SESSION as u32 == 56);

use crate::{
    VerifierLogLevel,
    programs::{
        FdLink, ProgramData, ProgramError, ProgramType, define_link_wrapper, impl_try_from_fdlink,
        impl_try_into_fdlink, load_program_with_attach_type, load_program_without_attach_type,
        write_kfunc_ids,
        perf_attach::{PerfLinkIdInner, PerfLinkInner},
        probe::{Probe, ProbeKind, attach},
    },
    sys::{BpfLinkCreateArgs, LinkTarget, SyscallError, bpf_link_create},
};

/// A kernel probe.
///
/// Kernel probes are eBPF programs that can be attached to almost any function inside
/// the kernel. They can be of two kinds:
///
/// - `kprobe`: get attached to the *start* of the target functions
/// - `kretprobe`: get attached to the *return address* of the target functions
///
/// # Minimum kernel version
///
/// The minimum kernel version required to use this feature is 4.1.
///
/// # Examples
///
/// ```no_run
/// # let mut bpf = Ebpf::load_file("ebpf_programs.o")?;
/// use aya::{Ebpf, programs::KProbe};
///
/// let program: &mut KProbe = bpf.program_mut("intercept_wakeups").unwrap().try_into()?;
/// program.load()?;
/// program.attach("try_to_wake_up", 0)?;
/// # Ok::<(), aya::EbpfError>(())
/// ```
#[derive(Debug)]
#[doc(alias = "BPF_PROG_TYPE_KPROBE")]
pub struct KProbe {
    pub(crate) data: ProgramData<KProbeLink>,
    pub(crate) kind: ProbeKind,
}

impl KProbe {
    /// The type of the program according to the kernel.
    pub const PROGRAM_TYPE: ProgramType = ProgramType::KProbe;

    /// Loads the program inside the kernel.
    pub fn load(&mut self) -> Result<(), ProgramError> {
        let Self { data, kind: _ } = self;
        load_program_without_attach_type(BPF_PROG_TYPE_KPROBE, data)
    }

    /// Returns [`ProbeKind::Entry`] if the program is a `kprobe`, or
    /// [`ProbeKind::Return`] if the program is a `kretprobe`.
    pub const fn kind(&self) -> ProbeKind {
        self.kind
    }

    /// Attaches the program.
    ///
    /// Attaches the probe to the given function name inside the kernel. If
    /// `offset` is non-zero, it is added to the address of the target
    /// function.
    ///
    /// If the program is a `kprobe`, it is attached to the *start* address of the target function.
    /// Conversely if the program is a `kretprobe`, it is attached to the return address of the
    /// target function.
    ///
    /// The returned value can be used to detach from the given function, see [`KProbe::detach`].
    pub fn attach<T: AsRef<OsStr>>(
        &mut self,
        fn_name: T,
        offset: u64,
    ) -> Result<KProbeLinkId, ProgramError> {
        let Self { data, kind } = self;
        attach::<Self, _>(
            data,
            *kind,
            fn_name.as_ref(),
            offset,
            None, // pid
            None, // cookie
        )
    }

    /// hotprof patch (HOTPROF-PATCH.md): loads the program for a kprobe.multi link, i.e. with
    /// `expected_attach_type = BPF_TRACE_KPROBE_MULTI`, which the kernel requires of programs
    /// attached with [`KProbe::attach_multi`] (and refuses for perf kprobes, so a program loaded
    /// this way cannot be [`KProbe::attach`]ed).
    ///
    /// # Minimum kernel version
    ///
    /// 5.18. Older kernels load the program but refuse the link (`EINVAL`).
    pub fn load_for_multi_link(&mut self) -> Result<(), ProgramError> {
        let Self { data, kind: _ } = self;
        load_program_with_attach_type(BPF_PROG_TYPE_KPROBE, BPF_TRACE_KPROBE_MULTI, data)
    }

    /// hotprof patch (HOTPROF-PATCH.md): attaches the program, loaded with
    /// [`KProbe::load_for_multi_link`], to kernel functions with one kprobe.multi link
    /// (`BPF_LINK_CREATE`, fprobe-based: only functions ftrace can trace). `functions` are
    /// `(address, cookie)` pairs: the cookie is what `bpf_get_attach_cookie` returns in the
    /// program when it runs for that function's address. A `kretprobe` program runs at the functions' returns
    /// (`BPF_F_KPROBE_MULTI_RETURN`).
    ///
    /// The link is owned by the program like [`KProbe::attach`]'s: detached on
    /// [`KProbe::detach`], on drop, or when taken with [`KProbe::take_link`] and dropped.
    ///
    /// # Minimum kernel version
    ///
    /// 5.18, with `CONFIG_FPROBE` (else `EOPNOTSUPP`).
    pub fn attach_multi(&mut self, functions: &[(u64, u64)]) -> Result<KProbeLinkId, ProgramError> {
        let (addresses, cookies): (Vec<u64>, Vec<u64>) = functions.iter().copied().unzip();
        let Self { data, kind } = self;
        let flags = match kind {
            ProbeKind::Entry => 0,
            ProbeKind::Return => BPF_F_KPROBE_MULTI_RETURN,
        };
        let prog_fd = data.fd()?;
        let prog_fd = prog_fd.as_fd();
        // No target: a kprobe.multi link names its functions in `kprobe_multi`, and the
        // kernel ignores `target_fd` (left zero, as `LinkTarget::Iter` does).
        let link_fd = bpf_link_create(
            prog_fd,
            LinkTarget::Iter,
            BPF_TRACE_KPROBE_MULTI,
            0,
            Some(BpfLinkCreateArgs::KProbeMulti {
                addrs: &addresses,
                cookies: &cookies,
                flags,
            }),
        )
        .map_err(|io_error| SyscallError {
            call: "bpf_link_create",
            io_error,
        })?;
        data.links
            .insert(KProbeLink::new(PerfLinkInner::Fd(FdLink::new(link_fd))))
    }

    /// hotprof patch (HOTPROF-PATCH.md): loads the program for a kprobe.session link
    /// (`expected_attach_type = BPF_TRACE_KPROBE_SESSION`), after writing each kfunc's BTF id
    /// into its calls: `kfuncs` are `(placeholder, btf_id)` pairs, and every call instruction
    /// with `src_reg = BPF_PSEUDO_KFUNC_CALL` and a placeholder as `imm` gets that kfunc's id
    /// in vmlinux's BTF (aya-obj cannot relocate extern kfuncs; the program writes such calls
    /// with placeholders instead).
    ///
    /// # Minimum kernel version
    ///
    /// 6.10, with `CONFIG_FPROBE`.
    pub fn load_for_session_link(&mut self, kfuncs: &[(i32, u32)]) -> Result<(), ProgramError> {
        let Self { data, kind: _ } = self;
        write_kfunc_ids(data, kfuncs);
        load_program_with_attach_type(BPF_PROG_TYPE_KPROBE, BPF_TRACE_KPROBE_SESSION, data)
    }

    /// hotprof patch (HOTPROF-PATCH.md): attaches the program, loaded with
    /// [`KProbe::load_for_session_link`], to kernel functions with one kprobe.session link:
    /// the program runs at each call's entry and, unless the entry returned non-zero, at its
    /// return. `functions` as in [`KProbe::attach_multi`].
    ///
    /// # Minimum kernel version
    ///
    /// 6.10, with `CONFIG_FPROBE`.
    pub fn attach_session(
        &mut self,
        functions: &[(u64, u64)],
    ) -> Result<KProbeLinkId, ProgramError> {
        let (addresses, cookies): (Vec<u64>, Vec<u64>) = functions.iter().copied().unzip();
        let Self { data, kind: _ } = self;
        let prog_fd = data.fd()?;
        let prog_fd = prog_fd.as_fd();
        let link_fd = bpf_link_create(
            prog_fd,
            LinkTarget::Iter,
            BPF_TRACE_KPROBE_SESSION,
            0,
            Some(BpfLinkCreateArgs::KProbeMulti {
                addrs: &addresses,
                cookies: &cookies,
                flags: 0,
            }),
        )
        .map_err(|io_error| SyscallError {
            call: "bpf_link_create",
            io_error,
        })?;
        data.links
            .insert(KProbeLink::new(PerfLinkInner::Fd(FdLink::new(link_fd))))
    }

    /// Creates a program from a pinned entry on a bpffs.
    ///
    /// Existing links will not be populated. To work with existing links you should use [`crate::programs::links::PinnedLink`].
    ///
    /// On drop, any managed links are detached and the program is unloaded. This will not result in
    /// the program being unloaded from the kernel if it is still pinned.
    pub fn from_pin<P: AsRef<Path>>(path: P, kind: ProbeKind) -> Result<Self, ProgramError> {
        let data = ProgramData::from_pinned_path(path, VerifierLogLevel::default())?;
        Ok(Self { data, kind })
    }
}

impl Probe for KProbe {
    const PMU: &'static str = "kprobe";

    type Error = KProbeError;

    fn file_error(filename: PathBuf, io_error: io::Error) -> Self::Error {
        KProbeError::FileError { filename, io_error }
    }

    fn write_offset<W: Write>(w: &mut W, kind: ProbeKind, offset: u64) -> fmt::Result {
        match kind {
            ProbeKind::Entry => write!(w, "+{offset}"),
            ProbeKind::Return => Ok(()),
        }
    }
}

define_link_wrapper!(
    KProbeLink,
    KProbeLinkId,
    PerfLinkInner,
    PerfLinkIdInner,
    KProbe,
);

impl KProbeLink {
    /// hotprof patch (HOTPROF-PATCH.md): the link's file descriptor where it is an fd link
    /// (kprobe.multi and kprobe.session links; perf links on 5.15+), to read its
    /// `BPF_OBJ_GET_INFO_BY_FD` info (a kprobe.multi link's `missed`, 6.7+).
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match self.inner() {
            PerfLinkInner::Fd(link) => Some(link.fd.as_fd()),
            PerfLinkInner::PerfLink(_) => None,
        }
    }
}


/// The type returned when attaching a [`KProbe`] fails.
#[derive(Debug, Error)]
pub enum KProbeError {
    /// Error detaching from debugfs
    #[error("`{filename}`")]
    FileError {
        /// The file name
        filename: PathBuf,
        /// The [`io::Error`] returned from the file operation
        #[source]
        io_error: io::Error,
    },
}

impl_try_into_fdlink!(KProbeLink, PerfLinkInner);
impl_try_from_fdlink!(
    KProbeLink,
    PerfLinkInner,
    bpf_link_type::BPF_LINK_TYPE_PERF_EVENT
);
