//! The scheduler hooks a run needs beside its probes: `sched_switch` for `--off-cpu`, the
//! fork, exit and free hooks that follow tasks and clean up after them.

use aya::{
    Ebpf,
    programs::{BtfTracePoint, ProgramError, RawTracePoint, TracePoint},
};

use super::btf::kernel_btf;
use super::error::{AttachError, Reason, one_line};
use super::program::program;
use crate::model::TaskStore;

/// Attaches the scheduler hooks a run needs: `sched_switch` for `--off-cpu`,
/// `sched_process_fork` to follow a traced process tree, `sched_process_exit` always, and
/// with the hash-map store `sched_process_free`. `sched_switch` is a BTF tracepoint where the
/// frame stacks are in task storage (it reads the two tasks' storage), a raw tracepoint where
/// they are in the hash map (keyed by the tasks' addresses, its arguments); so is
/// `sched_process_free`.
pub fn attach_tracking(
    ebpf: &mut Ebpf,
    store: TaskStore,
    off_cpu: bool,
    follow_forks: bool,
) -> Result<(), AttachError> {
    for hook in tracking_hooks(store, off_cpu, follow_forks) {
        match hook {
            Hook::BtfTracepoint(name) => {
                let fail = |reason: Reason| AttachError::Tracepoint {
                    tracepoint: format!("tp_btf/{name}"),
                    reason,
                };
                let refused = |e: ProgramError| fail(Reason::of(e, |e| one_line(e)));
                let btf = kernel_btf().map_err(|e| {
                    fail(Reason::of(e, |e| {
                        format!("--off-cpu needs kernel BTF: {}", one_line(e))
                    }))
                })?;
                let btf_id = btf
                    .tracepoint(name)
                    .ok_or_else(|| fail(Reason::new("no such BTF tracepoint in this kernel")))?;
                let prog: &mut BtfTracePoint = program(ebpf, name)?;
                prog.load_by_btf_id(btf_id).map_err(refused)?;
                prog.attach().map_err(refused)?;
            }
            Hook::RawTracepoint(name) => {
                let fail = |e: ProgramError| AttachError::Tracepoint {
                    tracepoint: format!("raw_tp/{name}"),
                    reason: Reason::of(e, |e| one_line(e)),
                };
                let prog: &mut RawTracePoint = program(ebpf, name)?;
                prog.load().map_err(fail)?;
                prog.attach(name).map_err(fail)?;
            }
            Hook::Tracepoint(name) => {
                let fail = |e: ProgramError| AttachError::Tracepoint {
                    tracepoint: format!("sched/{name}"),
                    reason: Reason::of(e, |e| one_line(e)),
                };
                let prog: &mut TracePoint = program(ebpf, name)?;
                prog.load().map_err(fail)?;
                prog.attach("sched", name).map_err(fail)?;
            }
        }
    }
    Ok(())
}

/// A scheduler hook: its program (named after the event) and how it is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hook {
    /// `tp_btf/NAME`: arguments are BTF-typed kernel pointers.
    BtfTracepoint(&'static str),
    /// `raw_tp/NAME`: arguments are raw values.
    RawTracepoint(&'static str),
    /// The classic tracepoint `sched/NAME`.
    Tracepoint(&'static str),
}

/// The hooks [`attach_tracking`] attaches, in order.
fn tracking_hooks(store: TaskStore, off_cpu: bool, follow_forks: bool) -> Vec<Hook> {
    let hashed = store == TaskStore::HashMap;
    let mut hooks = Vec::new();
    if off_cpu {
        hooks.push(if hashed {
            Hook::RawTracepoint("sched_switch")
        } else {
            Hook::BtfTracepoint("sched_switch")
        });
    }
    if hashed {
        // Deletes what the task's calls after its exit left in the hash map.
        hooks.push(Hook::RawTracepoint("sched_process_free"));
    }
    if follow_forks {
        hooks.push(Hook::Tracepoint("sched_process_fork"));
    }
    // Always: counts an exiting task's open frames (their returns will never come) and
    // deletes its hash-map entry.
    hooks.push(Hook::Tracepoint("sched_process_exit"));
    hooks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduler_hooks_follow_the_task_store_and_the_options() {
        use Hook::{BtfTracepoint as Btf, RawTracepoint as Raw, Tracepoint as Tp};
        let storage = TaskStore::TaskStorage;
        let hashed = TaskStore::HashMap;
        // The exit hook always; the fork hook when following a workload.
        assert_eq!(
            tracking_hooks(storage, false, false),
            [Tp("sched_process_exit")]
        );
        assert_eq!(
            tracking_hooks(storage, false, true),
            [Tp("sched_process_fork"), Tp("sched_process_exit")]
        );
        // --off-cpu: sched_switch reads task storage through BTF-typed task pointers...
        assert_eq!(
            tracking_hooks(storage, true, true),
            [
                Btf("sched_switch"),
                Tp("sched_process_fork"),
                Tp("sched_process_exit")
            ]
        );
        // ...and the hash map by the tasks' addresses, a raw tracepoint's arguments; the hash
        // map also needs its entries of freed tasks deleted.
        assert_eq!(
            tracking_hooks(hashed, false, false),
            [Raw("sched_process_free"), Tp("sched_process_exit")]
        );
        assert_eq!(
            tracking_hooks(hashed, true, true),
            [
                Raw("sched_switch"),
                Raw("sched_process_free"),
                Tp("sched_process_fork"),
                Tp("sched_process_exit")
            ]
        );
    }
}
