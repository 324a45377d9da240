//! arm64: fixed 4-byte instructions, so every aligned word is an instruction boundary.
//! `bl imm26` is the call; `b imm26`, `b.cond`/`cbz`/`cbnz imm19` and `tbz`/`tbnz imm14` jump.

use super::{Branch, BranchKind};

/// `bl`: 100101 imm26.
const BL: (u32, u32) = (0xfc00_0000, 0x9400_0000);
/// `b`: 000101 imm26.
const B: (u32, u32) = (0xfc00_0000, 0x1400_0000);
/// `b.cond`: 01010100 imm19 0 cond.
const B_COND: (u32, u32) = (0xff00_0010, 0x5400_0000);
/// `cbz`/`cbnz`: sf 011010 op imm19 Rt.
const CB: (u32, u32) = (0x7e00_0000, 0x3400_0000);
/// `tbz`/`tbnz`: b5 011011 op b40 imm14 Rt.
const TB: (u32, u32) = (0x7e00_0000, 0x3600_0000);
/// The hint space (`nop`, `bti c`, `paciasp`, …): `d503201f` with CRm:op2 in bits 5–11.
const HINT: (u32, u32) = (0xffff_f01f, 0xd503_201f);
/// `mov x9, x30`: the first of the two instructions of the ftrace hook
/// (`-fpatchable-function-entry=2`), the second being the `nop` patched into `bl`.
const MOV_X9_LR: u32 = 0xaa1e_03e9;

fn is(word: u32, (mask, bits): (u32, u32)) -> bool {
    word & mask == bits
}

/// `imm` of `bits` bits, sign-extended, times 4: a branch offset.
fn offset(imm: u32, bits: u32) -> i64 {
    let shift = 32 - bits;
    i64::from(((imm << shift) as i32) >> shift) * 4
}

fn decode(word: u32, at: u64) -> Option<Branch> {
    let (kind, delta) = if is(word, BL) {
        (BranchKind::Call, offset(word & 0x03ff_ffff, 26))
    } else if is(word, B) {
        (BranchKind::Jump, offset(word & 0x03ff_ffff, 26))
    } else if is(word, B_COND) || is(word, CB) {
        (BranchKind::Jump, offset((word >> 5) & 0x7_ffff, 19))
    } else if is(word, TB) {
        (BranchKind::Jump, offset((word >> 5) & 0x3fff, 14))
    } else {
        return None;
    };
    Some(Branch {
        at,
        next: at + 4,
        to: at.wrapping_add_signed(delta),
        kind,
    })
}

fn words(code: &[u8], start: u64) -> impl Iterator<Item = (u64, u32)> + '_ {
    code.chunks_exact(4)
        .zip((start..).step_by(4))
        .map(|(bytes, at)| {
            let word = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            (at, word)
        })
}

pub(super) fn candidates(code: &[u8], base: u64) -> Vec<(u64, u64)> {
    words(code, base)
        .filter(|&(_, word)| is(word, BL) || is(word, B))
        .filter_map(|(at, word)| decode(word, at).map(|branch| (at, branch.to)))
        .collect()
}

pub(super) fn branches(code: &[u8], start: u64) -> Vec<Branch> {
    words(code, start)
        .filter_map(|(at, word)| decode(word, at))
        .collect()
}

/// Past the hook: leading hints (`bti c`, `paciasp`) skipped, then `mov x9, x30` and the
/// `nop`/`bl ftrace_caller` after it.
pub(super) fn hook_end(code: &[u8], start: u64) -> u64 {
    let mut words = words(code, start).skip_while(|&(_, word)| is(word, HINT));
    match words.next() {
        Some((at, MOV_X9_LR)) => at + 8,
        Some((at, _)) => at,
        None => start + code.len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 0xffff_8000_8001_0000;

    fn bl(at: u64, to: u64) -> u32 {
        0x9400_0000 | ((to.wrapping_sub(at) as i64 / 4) as u32 & 0x03ff_ffff)
    }

    fn code(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn branches_decode_forward_and_backward_with_their_kind() {
        let callee = BASE + 0x4000;
        let words = [
            bl(BASE, callee),
            0x1400_0000 | ((-1i32) as u32 & 0x03ff_ffff), // b . - 4
            0x5400_0040,                                  // b.eq . + 8
            0xb400_0061,                                  // cbz x1, . + 12
            0x3608_0042,                                  // tbz w2, #1, . + 8
            0xd503_201f,                                  // nop
        ];
        let found = branches(&code(&words), BASE);
        let summary: Vec<(u64, u64, BranchKind)> = found
            .iter()
            .map(|b| (b.at - BASE, b.to.wrapping_sub(BASE), b.kind))
            .collect();
        assert_eq!(
            summary,
            [
                (0, 0x4000, BranchKind::Call),
                (4, 0, BranchKind::Jump),
                (8, 16, BranchKind::Jump),
                (12, 24, BranchKind::Jump),
                (16, 24, BranchKind::Jump),
            ]
        );
        assert_eq!(found[0].next, BASE + 4);
        // The scan keeps only the imm26 branches.
        assert_eq!(
            candidates(&code(&words), BASE),
            [(BASE, callee), (BASE + 4, BASE)]
        );
    }

    #[test]
    fn the_hook_is_skipped_whether_patched_or_not() {
        let callee = BASE + 0x4000;
        // bti c; mov x9, x30; nop; bl callee
        let idle = [0xd503_245f, MOV_X9_LR, 0xd503_201f, bl(BASE + 12, callee)];
        assert_eq!(hook_end(&code(&idle), BASE), BASE + 12);
        // mov x9, x30; bl ftrace_caller; bl callee
        let live = [
            MOV_X9_LR,
            bl(BASE + 4, BASE - 0x10_0000),
            bl(BASE + 8, callee),
        ];
        assert_eq!(hook_end(&code(&live), BASE), BASE + 8);
        // No hook (a notrace function): nothing skipped past the hints.
        assert_eq!(hook_end(&code(&[bl(BASE, callee)]), BASE), BASE);
    }
}
