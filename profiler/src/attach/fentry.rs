//! fentry/fexit: a BPF trampoline pair per function, found by its BTF id, in the
//! `fentry_N`/`fexit_N` slot programs. Linux 5.5+, with kernel BTF; `--by` and `--filter`
//! read arguments, returns and callers with helpers of Linux 5.17.

use aya::{
    Ebpf,
    programs::{FEntry, FExit, ProgramError},
};
use aya_obj::generated::bpf_func_id;
use profiler_common::FENTRY_SLOTS;

use super::btf::{kernel_btf, module_refusal};
use super::error::{AttachError, Reason, one_line};
use super::interrupt::AttachSignals;
use super::program::{program, refuses_helper};
use crate::progress::Progress;
use crate::resolve::Target;

pub(super) fn attach_fentry(
    ebpf: &mut Ebpf,
    targets: &[Target],
    progress: &mut Progress,
) -> Result<(), AttachError> {
    if targets.len() > FENTRY_SLOTS as usize {
        return Err(AttachError::TooManyForFentry {
            requested: targets.len(),
        });
    }
    let first = targets
        .first()
        .map(|t| t.symbol.clone())
        .unwrap_or_default();
    let btf = kernel_btf().map_err(|e| AttachError::Fentry {
        function: first,
        reason: Reason::of(e, |e| {
            format!("no kernel BTF (/sys/kernel/btf/vmlinux): {e}")
        }),
    })?;
    for (slot, target) in targets.iter().enumerate() {
        let fail = |reason: Reason| AttachError::Fentry {
            function: target.symbol.clone(),
            reason,
        };
        let refused = |e: ProgramError| {
            fail(no_trampolines_hint(unlisted_hint(
                target,
                fentry_load_reason(e),
            )))
        };
        if let Some(why) = module_refusal(target) {
            return Err(fail(Reason::new(why)));
        }
        let btf_id = btf
            .trampoline_target(&target.symbol)
            .map_err(|why| fail(Reason::new(why.to_string())))?;
        let entry: &mut FEntry = program(ebpf, &format!("fentry_{slot}"))?;
        entry.load_by_btf_id(btf_id).map_err(refused)?;
        entry.attach().map_err(refused)?;
        let exit: &mut FExit = program(ebpf, &format!("fexit_{slot}"))?;
        exit.load_by_btf_id(btf_id).map_err(refused)?;
        exit.attach().map_err(refused)?;
        progress.attaching("fentry/fexit pairs", slot + 1, targets.len());
        AttachSignals::check("fentry/fexit pairs", slot + 1, targets.len())?;
    }
    Ok(())
}

/// Why an fentry/fexit program did not load or attach, in one line: a verifier that does not
/// know the helpers `--by` reads arguments, returns and callers with (before 5.17) says so
/// rather than dumping its log.
fn fentry_load_reason(error: ProgramError) -> Reason {
    let lacks_by_helpers = match &error {
        ProgramError::LoadError { verifier_log, .. } => {
            let log = verifier_log.to_string();
            [
                bpf_func_id::BPF_FUNC_get_func_arg,
                bpf_func_id::BPF_FUNC_get_func_ret,
                bpf_func_id::BPF_FUNC_get_func_arg_cnt,
                bpf_func_id::BPF_FUNC_get_func_ip,
            ]
            .into_iter()
            .any(|helper| refuses_helper(&log, helper))
        }
        _ => false,
    };
    if lacks_by_helpers {
        Reason::of(error, |_| {
            "this kernel's fentry programs cannot read arguments, returns or callers \
             (bpf_get_func_arg/_ret, Linux 5.17), which this --by or --filter needs"
                .into()
        })
    } else {
        Reason::of(error, |e| one_line(e))
    }
}

/// `reason`, with a hint where ftrace does not list `target`: the kernel was asked all the
/// same (a syscall wrapper such as `__x64_sys_getpid` is an alias of a function ftrace lists
/// under another name, and attaches), and when it refuses, the missing ftrace location is the
/// likely why.
fn unlisted_hint(target: &Target, reason: Reason) -> Reason {
    if target.traceable != Some(false) {
        return reason;
    }
    reason.with_hint("it is not in available_filter_functions: notrace, inlined or an alias")
}

/// `reason`, saying what the kernel's internal ENOTSUPP (524, which libc names "Unknown
/// error" or "No error information") means for an fentry attach: the trampoline cannot be
/// reached from the function's ftrace site, as on Debian's arm64 6.1 (arm64 has ftrace
/// direct calls from 6.4).
fn no_trampolines_hint(reason: Reason) -> Reason {
    if !reason.to_string().contains("(os error 524)") {
        return reason;
    }
    reason.with_hint(
        "ENOTSUPP: this kernel cannot attach BPF trampolines to kernel functions; it needs \
         CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS",
    )
}

/// Unloads whatever fentry/fexit slots an unsuccessful attempt left behind.
pub(super) fn detach_fentry(ebpf: &mut Ebpf, slots: usize) {
    for slot in 0..slots.min(FENTRY_SLOTS as usize) {
        if let Ok(entry) = program::<FEntry>(ebpf, &format!("fentry_{slot}")) {
            let _ = entry.unload();
        }
        if let Ok(exit) = program::<FExit>(ebpf, &format!("fexit_{slot}")) {
            let _ = exit.unload();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(symbol: &str, address: u64, traceable: Option<bool>) -> Target {
        Target {
            symbol: symbol.into(),
            address,
            traceable,
            note: None,
            module: None,
        }
    }

    #[test]
    fn enotsupp_says_the_kernel_has_no_trampolines() {
        let refused = "`bpf_raw_tracepoint_open` failed: No error information (os error 524)";
        assert_eq!(
            no_trampolines_hint(Reason::new(refused)).to_string(),
            format!(
                "{refused} (ENOTSUPP: this kernel cannot attach BPF trampolines to kernel \
                 functions; it needs CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS)"
            )
        );
        let other = "Invalid argument (os error 22)";
        assert_eq!(no_trampolines_hint(Reason::new(other)).to_string(), other);
    }

    #[test]
    fn a_refusal_of_an_unlisted_function_says_it_is_unlisted() {
        let refused = || Reason::new("Invalid argument (os error 22)");
        assert_eq!(
            unlisted_hint(&target("vfs_read.cold", 1, Some(false)), refused()).to_string(),
            "Invalid argument (os error 22) (it is not in available_filter_functions: notrace, \
             inlined or an alias)"
        );
        assert_eq!(
            unlisted_hint(&target("vfs_read", 1, Some(true)), refused()).to_string(),
            "Invalid argument (os error 22)"
        );
        // No tracefs to tell: nothing to hint.
        assert_eq!(
            unlisted_hint(&target("vfs_read", 1, None), refused()).to_string(),
            "Invalid argument (os error 22)"
        );
    }
}
