//! The programs of hotprof's object, taken by name and loaded: the small steps every
//! mechanism's attach shares.

use std::path::Path;

use aya::{
    Ebpf,
    programs::{KProbe, kprobe::KProbeLink},
};
use aya_obj::generated::bpf_func_id;

use super::error::{AttachError, Reason, one_line};

/// Whether this kernel can create kprobes through perf (how aya attaches them).
pub fn kprobes_available() -> bool {
    Path::new("/sys/bus/event_source/devices/kprobe/type").exists()
}

/// The program `name` of hotprof's object, as a `T` (fentry, kprobe, …).
pub(super) fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T, AttachError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let program = ebpf.program_mut(name).ok_or_else(|| {
        AttachError::Internal(Reason::new(format!(
            "program {name} missing from the eBPF object"
        )))
    })?;
    program
        .try_into()
        .map_err(|e| AttachError::Internal(Reason::of(e, |e| format!("program {name}: {e}"))))
}

/// Loads the kprobe (or kretprobe) program `name` of hotprof's object into the kernel.
pub(super) fn load_kprobe<'a>(
    ebpf: &'a mut Ebpf,
    name: &str,
) -> Result<&'a mut KProbe, AttachError> {
    let program: &mut KProbe = program(ebpf, name)?;
    program.load().map_err(|e| {
        AttachError::Internal(Reason::of(e, |e| {
            format!("loading {name}: {}", one_line(e))
        }))
    })?;
    Ok(program)
}

/// A link just attached, taken out of its program (only fails on an unknown id: a bug).
pub(super) fn take(
    link: Result<KProbeLink, aya::programs::ProgramError>,
) -> Result<KProbeLink, AttachError> {
    link.map_err(|e| {
        AttachError::Internal(Reason::of(e, |e| {
            format!("taking a kprobe link: {}", one_line(e))
        }))
    })
}

/// Whether a verifier log says the kernel does not know `helper` for this program, as
/// `refuses_func_ip` reads it.
pub(super) fn refuses_helper(verifier_log: &str, helper: bpf_func_id) -> bool {
    let helper = format!("#{}", helper as u32);
    verifier_log.lines().any(|line| {
        let line = line.trim();
        (line.starts_with("invalid func ") || line.starts_with("unknown func "))
            && line.ends_with(&helper)
    })
}
