//! Instruction decoding for call-site mode: where the kernel's code branches, on instruction
//! boundaries, and which branches are calls, as methods of [`Arch`]. One file per instruction
//! set; `Arch::NATIVE` is the one this build runs on (hotprof reads the code of the kernel it
//! runs under). Both are always built, so each is unit-tested on any host.

mod aarch64;
mod x86_64;

pub use crate::arch::Arch;

/// A direct branch in kernel code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Branch {
    /// Address of the branch instruction.
    pub at: u64,
    /// Address of the instruction after it: where a call returns to.
    pub next: u64,
    /// Where it branches to.
    pub to: u64,
    pub kind: BranchKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BranchKind {
    /// `call` / `bl`: returns to [`Branch::next`].
    Call,
    /// `jmp`, `b`, a conditional branch: never returns here (to F, a tail call).
    Jump,
}

impl Arch {
    /// Bytes before a function that a call may target and still mean the function (x86-64:
    /// call-depth tracking lands calls in `CONFIG_FUNCTION_PADDING_BYTES`, which falls
    /// through into the function; arm64 calls the entry itself).
    pub fn function_padding(self) -> u64 {
        match self {
            Arch::X86_64 => x86_64::FUNCTION_PADDING,
            Arch::Aarch64 => 0,
        }
    }

    /// Every place in `code` (starting at `base`) that encodes a direct call or
    /// unconditional jump, with its target, whether or not it is on an instruction boundary:
    /// a fast scan, whose hits are confirmed by [`Arch::branches`] of their function.
    pub fn candidates(self, code: &[u8], base: u64) -> Vec<(u64, u64)> {
        match self {
            Arch::X86_64 => x86_64::candidates(code, base),
            Arch::Aarch64 => aarch64::candidates(code, base),
        }
    }

    /// Every direct branch of a function whose code (`code`, at `start`) is decoded from its
    /// first instruction.
    pub fn branches(self, code: &[u8], start: u64) -> Vec<Branch> {
        match self {
            Arch::X86_64 => x86_64::branches(code, start),
            Arch::Aarch64 => aarch64::branches(code, start),
        }
    }

    /// The direct calls of a function past its ftrace hook (a call only while something
    /// traces the function, never one of its own work), in code order.
    pub fn calls_past_the_hook(self, code: &[u8], start: u64) -> Vec<Branch> {
        let skip = match self {
            Arch::X86_64 => x86_64::hook_end(code, start),
            Arch::Aarch64 => aarch64::hook_end(code, start),
        };
        self.branches(code, start)
            .into_iter()
            .filter(|branch| branch.at >= skip && branch.kind == BranchKind::Call)
            .collect()
    }
}
