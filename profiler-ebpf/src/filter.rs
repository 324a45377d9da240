//! `--filter`: only calls whose fields satisfy every condition are recorded. Conditions on
//! fields known at entry (arguments, CPU, task, cgroup) are checked there and mark the frame;
//! those on the return value, errno or comm at the return. A call that fails is still closed
//! (its time stays in its parent's child time) and counted as `FilteredOut`, never recorded.
//! Without `--filter` every condition is `op::NONE` and the verifier drops all of this.

use aya_ebpf::helpers::bpf_get_current_comm;
use profiler_common::{
    FILTER_CONDITIONS_MAX, FilterCond,
    keys::{errno_of, field, op},
};

use crate::config::{FILTER_COMM_VALUE, FILTERS, config, per_call};
use crate::keys::{EntryContext, ExitContext, entry_field};

/// Condition `index`, read field by field from `.rodata` so the verifier knows each value.
#[inline(always)]
fn condition(index: usize) -> FilterCond {
    FilterCond {
        field: config(&FILTERS[index].field),
        op: config(&FILTERS[index].op),
        _pad: [0; 6],
        value: config(&FILTERS[index].value),
    }
}

/// Whether `--filter` is in use.
#[inline(always)]
pub(crate) fn active() -> bool {
    per_call(&FILTERS[0].op) != op::NONE
}

/// Whether the call passes every condition known at entry.
#[inline(always)]
pub(crate) fn passes_at_entry<C: EntryContext>(ctx: &C) -> bool {
    let mut passes = true;
    for index in 0..FILTER_CONDITIONS_MAX {
        let condition = condition(index);
        if condition.op != op::NONE && field::at_entry(condition.field) {
            passes &= condition.holds(entry_field(ctx, condition.field));
        }
    }
    passes
}

/// Whether the call passes every condition known at its return.
#[inline(always)]
pub(crate) fn passes_at_return<X: ExitContext>(exit: &X) -> bool {
    let mut passes = true;
    for index in 0..FILTER_CONDITIONS_MAX {
        let condition = condition(index);
        if condition.op == op::NONE {
            continue;
        }
        passes &= match condition.field {
            field::RET => condition.holds(exit.ret()),
            field::ERRNO => condition.holds(errno_of(exit.ret())),
            field::COMM => {
                let same =
                    bpf_get_current_comm().is_ok_and(|comm| comm == config(&FILTER_COMM_VALUE));
                if condition.op == op::NE { !same } else { same }
            }
            _ => true,
        };
    }
    passes
}
