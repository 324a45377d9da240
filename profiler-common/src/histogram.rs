//! The log-linear latency histogram, written once and used by both sides.
//!
//! Every power of two `[2^m, 2^(m+1))` is split into [`SUB_BUCKETS`] equal linear buckets, so a
//! bucket is never wider than 1/32 (3.125%) of the values it holds. Values below
//! `2 * SUB_BUCKETS` get one bucket each (exact). This is HdrHistogram's layout with 5 bits of
//! precision; it covers the whole `u64` range in [`NUM_BUCKETS`] buckets.
//!
//! The eBPF side calls [`bucket_index`] on the hot path, so it is branch-light and loop-free
//! (the verifier of every kernel since 4.x accepts it).

/// log2 of the number of linear sub-buckets per power of two.
pub const SUB_BUCKET_BITS: u32 = 5;
/// Linear sub-buckets per power of two.
pub const SUB_BUCKETS: u64 = 1 << SUB_BUCKET_BITS;
/// Number of buckets needed to cover every `u64` value.
pub const NUM_BUCKETS: u32 = ((64 - SUB_BUCKET_BITS) * SUB_BUCKETS as u32) + SUB_BUCKETS as u32;

/// Buckets per element of the `HIST` map: one power of two's sub-buckets. Per-bucket
/// elements made a 1000-function run create 1.92 M per-CPU allocations (10–16 s in the TCG
/// guests); per-function elements (15 KB each per CPU) would make every read copy them all.
pub const HIST_CHUNK_BUCKETS: u32 = SUB_BUCKETS as u32;
/// `HIST` elements per function (or `--by` key) slot.
pub const HIST_CHUNKS: u32 = NUM_BUCKETS / HIST_CHUNK_BUCKETS;

// A slot's chunks are the bits of its `u64` in the `OCCUPIED` map.
const _: () = assert!(HIST_CHUNKS <= 64, "a slot's chunks must fit a u64 bitmask");

/// Where `value` goes in slot `slot`'s histogram: the slot's chunk (`0..HIST_CHUNKS`), the
/// `HIST` element holding it and the bucket's index in that element. From [`chunk_and_sub`]
/// directly, not through [`bucket_index`]: joining the two halves and splitting them again
/// cost the eBPF return path ~6 instructions per call (a TCG count,
/// `cargo xtask bench --only insns`).
#[inline(always)]
pub fn hist_position(slot: u32, value: u64) -> HistPosition {
    let (chunk, sub) = chunk_and_sub(value);
    HistPosition {
        chunk,
        element: hist_element(slot, chunk),
        index: sub as usize,
    }
}

/// A value's place in a slot's histogram ([`hist_position`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistPosition {
    /// The slot's chunk, `0..HIST_CHUNKS`: its bit in the slot's `OCCUPIED` mask.
    pub chunk: u32,
    /// The `HIST` element: `slot * HIST_CHUNKS + chunk`.
    pub element: u32,
    /// The bucket in the element, `0..HIST_CHUNK_BUCKETS`.
    pub index: usize,
}

/// The `HIST` element holding chunk `chunk` of slot `slot` (the probes write it, userspace
/// reads it).
#[inline(always)]
pub fn hist_element(slot: u32, chunk: u32) -> u32 {
    slot * HIST_CHUNKS + chunk
}

/// The first bucket of chunk `chunk` (userspace turns an element's buckets into indices).
pub fn first_bucket_of_chunk(chunk: u32) -> u32 {
    chunk * HIST_CHUNK_BUCKETS
}

/// Index of the bucket holding `value` (nanoseconds, but the layout is unit-free).
#[inline(always)]
pub fn bucket_index(value: u64) -> u32 {
    let (chunk, sub) = chunk_and_sub(value);
    chunk * SUB_BUCKETS as u32 + sub
}

/// The layout's one definition: `value`'s bucket as its power of two's chunk (the first two
/// chunks hold 0..64 one value each) and its sub-bucket in that chunk.
#[inline(always)]
fn chunk_and_sub(value: u64) -> (u32, u32) {
    if value < 2 * SUB_BUCKETS {
        return (
            (value >> SUB_BUCKET_BITS) as u32,
            (value & (SUB_BUCKETS - 1)) as u32,
        );
    }
    let msb = 63 - leading_zeros(value);
    (
        msb - SUB_BUCKET_BITS + 1,
        ((value >> (msb - SUB_BUCKET_BITS)) & (SUB_BUCKETS - 1)) as u32,
    )
}

/// Smallest value that falls into bucket `index`.
pub fn bucket_lower_bound(index: u32) -> u64 {
    let sub_buckets = SUB_BUCKETS as u32;
    if index < 2 * sub_buckets {
        return index as u64;
    }
    let msb = index / sub_buckets + SUB_BUCKET_BITS - 1;
    let sub = (index % sub_buckets) as u64;
    (SUB_BUCKETS + sub) << (msb - SUB_BUCKET_BITS)
}

/// Largest value that falls into bucket `index` (inclusive).
pub fn bucket_upper_bound(index: u32) -> u64 {
    if index + 1 >= NUM_BUCKETS {
        return u64::MAX;
    }
    bucket_lower_bound(index + 1) - 1
}

/// `u64::leading_zeros` for `x > 0` (0 gives 63) by binary search without branches: BPF has
/// no count-leading-zeros instruction, and each branch of a branchy search gave the verifier
/// another path (64 in all, each a different constant bucket) through everything after it,
/// which made the return programs' verification several times longer (start-up). For
/// `top < 2^63`, `(top - 1) >> 63` is 1 exactly when `top == 0`.
#[inline(always)]
pub(crate) fn leading_zeros(mut x: u64) -> u32 {
    let mut n = 0;
    for log2_width in [5, 4, 3, 2, 1, 0] {
        let width = 1u32 << log2_width;
        let top_is_zero = (x >> (64 - width)).wrapping_sub(1) >> 63;
        let shift = top_is_zero << log2_width;
        n += shift;
        x <<= shift;
    }
    n as u32
}

/// Adds `value²` to the 128-bit accumulator `(hi, lo)` using only 64-bit operations (BPF has no
/// 128-bit multiply), so the in-kernel sum of squares never overflows.
#[inline(always)]
pub fn add_square(lo: &mut u64, hi: &mut u64, value: u64) {
    if value >> 32 == 0 {
        // Any call under 4.3 s: its square fits 64 bits, one multiply instead of three (~12
        // instructions less on every return, a TCG count: `cargo xtask bench --only insns`).
        let square = value * value;
        let new_lo = lo.wrapping_add(square);
        *lo = new_lo;
        // The carry as a cold branch on one compare. LLVM recognises `sum < addend` as an
        // add's overflow flag, which the BPF backend makes a 0-or-1 value and then tests, or
        // adds to `hi` with a load and a store (~7 instructions on every return, a TCG count:
        // `cargo xtask bench --only insns`); `opaque` hides that the sum is one.
        if crate::opaque(new_lo) < square {
            core::hint::cold_path();
            *hi = hi.wrapping_add(1);
        }
        return;
    }
    core::hint::cold_path();
    let (v_hi, v_lo) = (value >> 32, value & 0xffff_ffff);
    // value² = v_hi²·2^64 + 2·v_hi·v_lo·2^32 + v_lo²
    let low = v_lo * v_lo;
    let cross = v_hi * v_lo; // < 2^64
    let mut add_hi = v_hi * v_hi + (cross >> 31);
    let cross_lo = cross << 33; // (2·cross) mod 2^64, shifted by 32
    let (sum, c1) = low.overflowing_add(cross_lo);
    add_hi += c1 as u64;
    let (new_lo, c2) = lo.overflowing_add(sum);
    *lo = new_lo;
    *hi = hi.wrapping_add(add_hi).wrapping_add(c2 as u64);
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    /// The reference: the definition, computed with 128-bit arithmetic and no shortcuts.
    fn reference_index(value: u64) -> u32 {
        if value < 64 {
            return value as u32;
        }
        let msb = 63 - value.leading_zeros();
        let width = 1u128 << (msb - SUB_BUCKET_BITS);
        let sub = ((value as u128 - (1u128 << msb)) / width) as u32;
        (msb - 4) * 32 + sub
    }

    #[test]
    fn small_values_are_exact() {
        for v in 0..64 {
            assert_eq!(bucket_index(v), v as u32);
            assert_eq!(bucket_lower_bound(v as u32), v);
            assert_eq!(bucket_upper_bound(v as u32), v);
        }
    }

    #[test]
    fn matches_reference_at_every_boundary() {
        for msb in 0..64u32 {
            let base = 1u64 << msb;
            for v in [
                base,
                base + 1,
                base.wrapping_sub(1),
                base | (base >> 1),
                base | (base - 1),
            ] {
                assert_eq!(bucket_index(v), reference_index(v), "value {v}");
            }
        }
        assert_eq!(bucket_index(u64::MAX), NUM_BUCKETS - 1);
    }

    #[test]
    fn matches_reference_on_a_dense_sweep() {
        let mut v = 1u64;
        while v < u64::MAX / 3 {
            assert_eq!(bucket_index(v), reference_index(v), "value {v}");
            v = v + v / 97 + 1;
        }
    }

    #[test]
    fn bounds_contain_their_values_and_tile_the_range() {
        for i in 0..NUM_BUCKETS {
            let lo = bucket_lower_bound(i);
            let hi = bucket_upper_bound(i);
            assert!(lo <= hi);
            assert_eq!(bucket_index(lo), i);
            assert_eq!(bucket_index(hi), i);
            if i + 1 < NUM_BUCKETS {
                assert_eq!(bucket_lower_bound(i + 1), hi + 1);
            }
        }
    }

    #[test]
    fn bucket_width_is_at_most_3_2_percent_of_its_values() {
        for i in 64..NUM_BUCKETS {
            let lo = bucket_lower_bound(i) as f64;
            let hi = bucket_upper_bound(i) as f64;
            assert!((hi - lo + 1.0) / lo <= 0.032, "bucket {i}: [{lo}, {hi}]");
        }
    }

    #[test]
    fn leading_zeros_matches_core() {
        assert_eq!(leading_zeros(0), 63);
        for shift in 0..64 {
            for v in [1u64 << shift, (1u64 << shift) | 1, u64::MAX >> shift] {
                assert_eq!(leading_zeros(v), v.leading_zeros());
            }
        }
    }

    #[test]
    fn hist_position_splits_the_bucket_index() {
        let mut values: std::vec::Vec<u64> = (0..200).collect();
        for msb in 6..64 {
            let base = 1u64 << msb;
            values.extend([base - 1, base, base + 1, base + base / 3, base | (base - 1)]);
        }
        values.push(u64::MAX);
        for value in values {
            let position = hist_position(3, value);
            assert_eq!(
                first_bucket_of_chunk(position.chunk) + position.index as u32,
                bucket_index(value),
                "{value}"
            );
            // The layout, written out: slot 3's chunks follow slots 0..3's.
            assert_eq!(
                position.element,
                3 * HIST_CHUNKS + position.chunk,
                "{value}"
            );
            assert!(
                position.chunk < HIST_CHUNKS && position.index < HIST_CHUNK_BUCKETS as usize,
                "{value}"
            );
        }
    }

    #[test]
    fn add_square_matches_u128() {
        let values = [
            0u64,
            1,
            3,
            0xffff_ffff,
            0x1_0000_0000,
            123_456_789_012,
            u64::MAX / 7,
            u64::MAX,
        ];
        let (mut lo, mut hi) = (0u64, 0u64);
        let mut reference = 0u128;
        for &v in &values {
            add_square(&mut lo, &mut hi, v);
            reference = reference.wrapping_add((v as u128) * (v as u128));
            assert_eq!(((hi as u128) << 64) | lo as u128, reference, "after {v}");
        }
    }
}
