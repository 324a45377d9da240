//! `--by`: what a call's key is made of, and the key the probes aggregate under.
//!
//! Userspace writes up to [`BY_FIELDS_MAX`] field codes into the eBPF `BY_FIELDS` global; the
//! entry probe fills the fields known at entry (arguments, caller, CPU, process, cgroup) into
//! the frame, the return probe those known at return (return value, errno, comm), and the
//! call is added to the histogram slot of its [`ByKey`] as well as its function's.

/// Fields one key can combine.
pub const BY_FIELDS_MAX: usize = 3;

/// Default for distinct keys per CPU (`--max-keys`): each is a histogram slot.
pub const DEFAULT_MAX_KEYS: u32 = 256;

/// A field's code in `BY_FIELDS`: one byte, 0 for unused. Argument fields carry the
/// argument's index in the low nibble.
pub mod field {
    pub const NONE: u8 = 0;
    /// The return address of the call (kprobe and fentry modes; userspace names the site).
    pub const CALLER: u8 = 1;
    /// CPU the call entered on.
    pub const CPU: u8 = 2;
    /// Process (thread group) id.
    pub const PID: u8 = 3;
    /// Thread id.
    pub const TID: u8 = 4;
    /// cgroup v2 id.
    pub const CGROUP: u8 = 5;
    /// The task's comm at return; held in [`super::ByKey::comm`], not in a value slot.
    pub const COMM: u8 = 6;
    /// The return value, as a raw 64-bit register.
    pub const RET: u8 = 7;
    /// The errno of a negative return in `-4095..0`, or 0 for any other value.
    pub const ERRNO: u8 = 8;
    /// `ARG | n`: argument n (0..=5), raw.
    pub const ARG: u8 = 0x10;
    /// `ARG_LOG2 | n`: argument n's power-of-two class: 0 for 0, else `floor(log2(x)) + 1`.
    pub const ARG_LOG2: u8 = 0x20;
    /// Mask of the argument index.
    pub const ARG_INDEX: u8 = 0x0f;
    /// Mask of the kind.
    pub const KIND: u8 = 0xf0;

    /// Whether the field is known at entry (kept in the frame until the return).
    pub const fn at_entry(code: u8) -> bool {
        !matches!(code, NONE | COMM | RET | ERRNO)
    }
}

/// Where a keyed call is aggregated: its function and its key's field values, in the order
/// of `BY_FIELDS` (0 where a field is unused or is the comm).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ByKey {
    pub func: u32,
    pub _pad: u32,
    pub values: [u64; BY_FIELDS_MAX],
    /// The task's comm when `comm` is a field, else zeroes.
    pub comm: [u8; 16],
}

/// Conditions one `--filter` can join with `&&`.
pub const FILTER_CONDITIONS_MAX: usize = 4;

/// A `--filter` comparison's operator (`FilterCond::op`).
pub mod op {
    pub const NONE: u8 = 0;
    pub const EQ: u8 = 1;
    pub const NE: u8 = 2;
    pub const LT: u8 = 3;
    pub const LE: u8 = 4;
    pub const GT: u8 = 5;
    pub const GE: u8 = 6;
}

/// One `--filter` condition: `field op value`, the field coded as for `--by` (the comm's value
/// is in the eBPF `FILTER_COMM_VALUE` global; `value` unused). Signed fields (`ret`) compare
/// as i64, the rest as u64. `op::NONE` ends the list.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterCond {
    pub field: u8,
    pub op: u8,
    pub _pad: [u8; 6],
    pub value: u64,
}

impl FilterCond {
    /// Whether `actual` (the field's raw value) satisfies the condition.
    #[inline(always)]
    pub fn holds(&self, actual: u64) -> bool {
        if self.field == field::RET {
            let (a, b) = (signed_return(actual), self.value as i64);
            compare(self.op, a < b, a == b)
        } else {
            compare(self.op, actual < self.value, actual == self.value)
        }
    }
}

#[inline(always)]
fn compare(op: u8, less: bool, equal: bool) -> bool {
    match op {
        op::EQ => equal,
        op::NE => !equal,
        op::LT => less,
        op::LE => less || equal,
        op::GT => !less && !equal,
        op::GE => !less,
        _ => true,
    }
}

/// `floor(log2(x)) + 1`, 0 for 0: the `argN:log2` class. Loop-free for the verifier.
#[inline(always)]
pub fn log2_class(x: u64) -> u64 {
    if x == 0 {
        return 0;
    }
    64 - u64::from(crate::histogram::leading_zeros(x))
}

/// The errno of a syscall-style return: `-4095..0` is `-errno`; anything else is 0 (success).
/// A function returning `int` leaves the upper half of the register zero, so a 32-bit
/// `-4095..0` with a zero upper half is an errno too (the cost: a `u32` return in
/// `0xfffff001..` reads as one).
#[inline(always)]
pub fn errno_of(ret: u64) -> u64 {
    let signed = signed_return(ret);
    if (-4095..0).contains(&signed) {
        (-signed) as u64
    } else {
        0
    }
}

/// A return register as a signed value: 64-bit, or 32-bit sign-extended when the upper half
/// is zero and the lower half is a small negative `int` (`-4095..0`, an errno).
#[inline(always)]
pub fn signed_return(ret: u64) -> i64 {
    let low = ret as u32 as i32;
    if ret >> 32 == 0 && (-4095..0).contains(&low) {
        i64::from(low)
    } else {
        ret as i64
    }
}

#[cfg(feature = "user")]
// SAFETY: repr(C) and Copy; two u8, six padding-free u8 and a u64 (16 bytes), so no padding,
// and any bit pattern is valid.
unsafe impl aya::Pod for FilterCond {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_classes_split_at_powers_of_two() {
        assert_eq!(log2_class(0), 0);
        assert_eq!(log2_class(1), 1);
        assert_eq!(log2_class(2), 2);
        assert_eq!(log2_class(3), 2);
        assert_eq!(log2_class(4095), 12);
        assert_eq!(log2_class(4096), 13);
        assert_eq!(log2_class(u64::MAX), 64);
    }

    #[test]
    fn conditions_compare_signed_returns_and_unsigned_rest() {
        let cond = |field, op, value| FilterCond {
            field,
            op,
            value,
            ..FilterCond::default()
        };
        assert!(cond(field::ARG | 2, op::GE, 4096).holds(4096));
        assert!(!cond(field::ARG | 2, op::GT, 4096).holds(4096));
        assert!(cond(field::ARG | 2, op::LT, 4096).holds(4095));
        assert!(cond(field::ERRNO, op::EQ, 2).holds(2));
        assert!(cond(field::ERRNO, op::NE, 2).holds(0));
        // -2 from an `int` return is below 0; as u64 it would be huge.
        assert!(cond(field::RET, op::LT, 0).holds(0xffff_fffe));
        assert!(cond(field::RET, op::LT, 0).holds((-2i64) as u64));
        assert!(cond(field::RET, op::GE, 0).holds(3));
        assert!(cond(field::RET, op::LE, (-1i64) as u64).holds((-1i64) as u64));
    }

    #[test]
    fn errno_is_the_negated_small_negative_return() {
        assert_eq!(errno_of((-2i64) as u64), 2);
        assert_eq!(errno_of((-4095i64) as u64), 4095);
        assert_eq!(errno_of((-4096i64) as u64), 0);
        assert_eq!(errno_of(0), 0);
        assert_eq!(errno_of(3), 0);
        // An `int` return: the register's upper half is zero.
        assert_eq!(errno_of(0xffff_fffe), 2);
        assert_eq!(errno_of(0xffff_f000), 0);
        assert_eq!(signed_return(0xffff_fffe), -2);
        assert_eq!(signed_return(0xffff_f000), 0xffff_f000);
    }
}
