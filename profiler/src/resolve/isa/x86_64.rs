//! x86-64: `call rel32` (E8) and `jmp rel32` (E9) found by a byte scan, confirmed by decoding
//! with iced-x86.

use iced_x86::{Decoder, DecoderOptions, FlowControl, Mnemonic};

use super::{Branch, BranchKind};

/// `CONFIG_FUNCTION_PADDING_BYTES` on the kernels that pad functions for call-depth tracking.
pub(super) const FUNCTION_PADDING: u64 = 16;

pub(super) fn candidates(code: &[u8], base: u64) -> Vec<(u64, u64)> {
    code.windows(5)
        .enumerate()
        .filter(|(_, bytes)| bytes[0] == 0xe8 || bytes[0] == 0xe9)
        .map(|(index, bytes)| {
            let rel = i32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
            let at = base + index as u64;
            (at, at.wrapping_add(5).wrapping_add_signed(i64::from(rel)))
        })
        .collect()
}

pub(super) fn branches(code: &[u8], start: u64) -> Vec<Branch> {
    Decoder::with_ip(64, code, start, DecoderOptions::NONE)
        .into_iter()
        .filter(|instruction| !instruction.is_invalid())
        .filter_map(|instruction| {
            let kind = match instruction.flow_control() {
                FlowControl::Call => BranchKind::Call,
                FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                    BranchKind::Jump
                }
                _ => return None,
            };
            // Indirect branches have no near target.
            let to = instruction.near_branch_target();
            (to != 0).then_some(Branch {
                at: instruction.ip(),
                next: instruction.next_ip(),
                to,
                kind,
            })
        })
        .collect()
}

/// Past the hook: `call __fentry__` (or the 5-byte nop it is patched to), the first
/// instruction or the one after `endbr64`.
pub(super) fn hook_end(code: &[u8], start: u64) -> u64 {
    Decoder::with_ip(64, code, start, DecoderOptions::NONE)
        .into_iter()
        .skip_while(|instruction| instruction.mnemonic() == Mnemonic::Endbr64)
        .nth(1)
        .map_or(start + code.len() as u64, |instruction| instruction.ip())
}
