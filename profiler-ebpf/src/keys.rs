//! `--by`: each call is also added to the histogram slot of its key (see
//! `profiler_common::keys`). Keys get slots per CPU, so no atomics are needed: each CPU numbers
//! the keys it meets from 0 in `NEXT_KEY_SLOT`, and its copy of the key's `KEY_SLOTS` value is
//! `slot + 1` (0: this CPU has not met the key). A key's slot `s` is function slot
//! `KEY_SLOT_BASE + s` of `HIST` and `OCCUPIED`, on that CPU; userspace adds up the CPUs.
//! With no `--by`, `BY_FIELDS` is all zeroes and the verifier drops every branch of this.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_smp_processor_id,
    },
    macros::map,
    maps::{PerCpuArray, PerCpuHashMap},
};
use profiler_common::{
    BY_FIELDS_MAX, ByKey, Call, Counter,
    keys::{errno_of, field, log2_class},
};

use crate::config::{BY_FIELDS, KEY_SLOT_BASE, MAX_KEYS, config, per_call};
use crate::counters::count;
use crate::hist::record;

/// Each key's slot on each CPU, plus one (0: none yet on that CPU); sized by userspace.
#[map]
static KEY_SLOTS: PerCpuHashMap<ByKey, u32> = PerCpuHashMap::with_max_entries(1, 0);
/// The next free key slot of each CPU.
#[map]
static NEXT_KEY_SLOT: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// What an entry probe can tell about the call it sees.
pub(crate) trait EntryContext {
    /// Argument `n` (0..=5) as a raw 64-bit value, 0 where unreadable.
    fn arg(&self, n: u8) -> u64;
    /// The call's return address, 0 where unknown.
    fn caller(&self) -> u64;
}

/// What a return probe can tell about the call it sees.
pub(crate) trait ExitContext {
    /// The return value as a raw 64-bit register, 0 where unreadable.
    fn ret(&self) -> u64;
}

/// Field `index`'s code. One byte at a time, straight from `.rodata`: the verifier knows
/// each such load's value (the map is frozen) and skips the branches of other codes; a copy
/// of the whole array on the stack would lose that.
#[inline(always)]
fn code(index: usize) -> u8 {
    config(&BY_FIELDS[index])
}

/// Whether `--by` is in use.
#[inline(always)]
pub(crate) fn keyed() -> bool {
    per_call(&BY_FIELDS[0]) != field::NONE
}

/// The key fields known at entry, for the frame.
#[inline(always)]
pub(crate) fn at_entry<C: EntryContext>(ctx: &C) -> [u64; BY_FIELDS_MAX] {
    let mut values = [0; BY_FIELDS_MAX];
    for (index, value) in values.iter_mut().enumerate() {
        *value = entry_field(ctx, code(index));
    }
    values
}

#[inline(always)]
pub(crate) fn entry_field<C: EntryContext>(ctx: &C, code: u8) -> u64 {
    match code {
        field::CALLER => ctx.caller(),
        // SAFETY: the helper takes no arguments and touches no memory.
        field::CPU => u64::from(unsafe { bpf_get_smp_processor_id() }),
        field::PID => bpf_get_current_pid_tgid() >> 32,
        field::TID => bpf_get_current_pid_tgid() & 0xffff_ffff,
        // SAFETY: the helper takes no arguments and touches no memory.
        field::CGROUP => unsafe { bpf_get_current_cgroup_id() },
        _ if code & field::KIND == field::ARG => ctx.arg(code & field::ARG_INDEX),
        _ if code & field::KIND == field::ARG_LOG2 => log2_class(ctx.arg(code & field::ARG_INDEX)),
        _ => 0,
    }
}

/// The key of a call of `func`: the entry fields from the frame, the rest from the return.
#[inline(always)]
pub(crate) fn key_of<X: ExitContext>(exit: &X, func: u32, entry: [u64; BY_FIELDS_MAX]) -> ByKey {
    let mut key = ByKey {
        func,
        values: entry,
        ..ByKey::default()
    };
    for (index, value) in key.values.iter_mut().enumerate() {
        match code(index) {
            field::RET => *value = exit.ret(),
            field::ERRNO => *value = errno_of(exit.ret()),
            field::COMM => key.comm = bpf_get_current_comm().unwrap_or([0; 16]),
            _ => {}
        }
    }
    key
}

/// Adds a recorded call to its key's slot.
#[inline(always)]
pub(crate) fn record_keyed(key: &ByKey, call: &Call) {
    match slot_of(key) {
        Some(slot) => {
            record(config(&KEY_SLOT_BASE) + slot, call);
        }
        None => count(Counter::KeysFull, 1),
    }
}

/// This CPU's slot for `key`, taking a new one the first time this CPU meets it.
#[inline(always)]
fn slot_of(key: &ByKey) -> Option<u32> {
    if KEY_SLOTS.get_ptr_mut(key).is_none() {
        // NOEXIST: another CPU may have created the entry meanwhile, with its own slot.
        let _ = KEY_SLOTS.insert(key, 0, u64::from(BPF_NOEXIST));
    }
    let mine = KEY_SLOTS.get_ptr_mut(key)?;
    // SAFETY: `mine` is the non-null result of a lookup: this CPU's u32 of the entry, valid
    // and aligned while the program runs; no other CPU writes it (migration is disabled).
    let mine = unsafe { &mut *mine };
    if *mine != 0 {
        return Some(*mine - 1);
    }
    let next = NEXT_KEY_SLOT.get_ptr_mut(0)?;
    // SAFETY: as above: this CPU's counter in a per-CPU array.
    let next = unsafe { &mut *next };
    if *next >= config(&MAX_KEYS) {
        return None;
    }
    let slot = *next;
    *next += 1;
    *mine = slot + 1;
    Some(slot)
}
