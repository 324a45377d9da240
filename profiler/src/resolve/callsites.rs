//! Call sites of a function in the running kernel's code, for call-site mode: a function
//! without an ftrace location (Debian builds `lib/` — iov_iter, usercopy — without one, and the
//! kernel's `inline` implies `notrace`) refuses a kprobe anywhere inside itself, but a kprobe on
//! the `call F` in an ftrace-able caller, and on the instruction after it, is allowed. Timed
//! from one to the other, a call means what it means to fentry/fexit.
//!
//! The code comes from `/proc/kcore` ([`KernelCode`]); the finding itself is pure
//! ([`scan_many`], [`sites_in`]) over the instruction set's decoder ([`Arch`]).

use super::isa::{Arch, BranchKind};
use super::kcore::{Kcore, KcoreError};
use super::{KernelFunctions, KernelSymbol, glob_match};

/// A function's code: its symbol, and where it starts and ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    pub start: u64,
    pub end: u64,
    /// ftrace can trace it: kprobes inside it are allowed.
    pub traceable: bool,
    /// No other function has its name: a kprobe can be placed at `name+offset` (the kernel
    /// refuses a name that matches several symbols with EADDRNOTAVAIL, e.g. the two
    /// `load_elf_binary` of `binfmt_elf` and `compat_binfmt_elf`).
    pub unique: bool,
}

/// A direct `call F` (`bl F`) at an instruction boundary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSite {
    /// The calling function.
    pub caller: String,
    /// Of the `call` instruction, from the caller's start.
    pub offset: u64,
    /// Of the instruction after the `call`, where F returns to, from the caller's start.
    pub return_offset: u64,
}

impl CallSite {
    /// `caller+0xoff`, as the kernel writes code addresses.
    pub fn label(&self) -> String {
        format!("{}+{:#x}", self.caller, self.offset)
    }
}

/// Why a place that reaches F cannot be timed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skipped {
    /// `jmp F` (or a conditional jump to F): F returns to the caller's caller, past any
    /// probe this caller could hold.
    TailCall { caller: String, offset: u64 },
    /// The caller has no ftrace location (`notrace`, which a non-inlined `inline` function
    /// is too), so the kernel refuses kprobes inside it.
    NotraceCaller { caller: String, offset: u64 },
    /// Another function has the caller's name, so no kprobe can name the place.
    SharedName { caller: String, offset: u64 },
}

/// Every way the code reaches F: the sites call-site mode can time and the places it cannot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallSites {
    pub covered: Vec<CallSite>,
    pub skipped: Vec<Skipped>,
}

impl CallSites {
    pub fn tail_calls(&self) -> usize {
        self.skipped
            .iter()
            .filter(|s| matches!(s, Skipped::TailCall { .. }))
            .count()
    }

    pub fn notrace_callers(&self) -> usize {
        self.skipped
            .iter()
            .filter(|s| matches!(s, Skipped::NotraceCaller { .. }))
            .count()
    }

    pub fn shared_names(&self) -> usize {
        self.skipped
            .iter()
            .filter(|s| matches!(s, Skipped::SharedName { .. }))
            .count()
    }

    /// `18 of 21 call sites covered: 2 tail calls, 1 in a notrace caller` (indirect calls
    /// cannot be seen in the code at all, so they are named, not counted).
    pub fn summary(&self) -> String {
        let total = self.covered.len() + self.skipped.len();
        let mut why = Vec::new();
        if self.tail_calls() > 0 {
            why.push(plural(self.tail_calls(), "tail call", "tail calls"));
        }
        if self.notrace_callers() > 0 {
            why.push(format!(
                "{} (notrace, or a non-inlined `inline` function)",
                plural(
                    self.notrace_callers(),
                    "in a notrace caller",
                    "in notrace callers"
                )
            ));
        }
        if self.shared_names() > 0 {
            why.push(plural(
                self.shared_names(),
                "in a caller whose name another function shares",
                "in callers whose names other functions share",
            ));
        }
        let mut line = format!("{} of {total} call sites covered", self.covered.len());
        if !why.is_empty() {
            line.push_str(": ");
            line.push_str(&why.join(", "));
        }
        line.push_str("; calls through function pointers are not seen");
        line
    }

    /// Distinct callers of the covered sites.
    pub fn callers(&self) -> usize {
        let mut callers: Vec<&str> = self.covered.iter().map(|s| s.caller.as_str()).collect();
        callers.sort_unstable();
        callers.dedup();
        callers.len()
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Addresses in `code` (kernel code starting at `base`) of direct calls and jumps whose
/// target is one of `targets` or its padding, each with the index of its target: candidates,
/// to be confirmed by decoding their function. One pass for any number of targets.
pub fn scan_many(arch: Arch, code: &[u8], base: u64, targets: &[u64]) -> Vec<(u64, usize)> {
    let mut sorted: Vec<(u64, usize)> = targets.iter().copied().zip(0..).collect();
    sorted.sort_unstable();
    arch.candidates(code, base)
        .into_iter()
        .filter_map(|(at, to)| {
            // The first target at or above `to`; `to` must be within its padding.
            let next = sorted.partition_point(|&(target, _)| target < to);
            let &(target, index) = sorted.get(next)?;
            (target - to <= arch.function_padding()).then_some((at, index))
        })
        .collect()
}

/// Decodes `function` (its code is `code`) from its start and sorts every branch to `target`
/// (or its padding): calls on instruction boundaries are sites, jumps are tail calls.
pub fn sites_in(arch: Arch, function: &Function, code: &[u8], target: u64) -> CallSites {
    let low = target.saturating_sub(arch.function_padding());
    let mut found = CallSites::default();
    for branch in arch.branches(code, function.start) {
        if !(low..=target).contains(&branch.to) {
            continue;
        }
        let offset = branch.at - function.start;
        let skipped = if branch.kind == BranchKind::Jump {
            Skipped::TailCall {
                caller: function.name.clone(),
                offset,
            }
        } else if !function.traceable {
            Skipped::NotraceCaller {
                caller: function.name.clone(),
                offset,
            }
        } else if !function.unique {
            Skipped::SharedName {
                caller: function.name.clone(),
                offset,
            }
        } else {
            found.covered.push(CallSite {
                caller: function.name.clone(),
                offset,
                return_offset: branch.next - function.start,
            });
            continue;
        };
        found.skipped.push(skipped);
    }
    found
}

/// Whether `name` matches one of the comma-separated `globs` (`--callers 'a*,b*'`).
fn matches_any(globs: &str, name: &str) -> bool {
    globs.split(',').any(|glob| glob_match(glob, name))
}

/// The function `functions` (sorted by start) holds `address`, if any.
pub fn containing(functions: &[Function], address: u64) -> Option<&Function> {
    let index = functions.partition_point(|f| f.start <= address);
    let function = functions.get(index.checked_sub(1)?)?;
    (address < function.end).then_some(function)
}

/// Why call sites cannot be found.
#[derive(Debug, thiserror::Error)]
pub enum CallSiteError {
    #[error(
        "kallsyms shows no addresses (kptr_restrict): call-site mode needs them; run as root \
         (CAP_SYSLOG) or set kernel.kptr_restrict=0"
    )]
    NoAddresses,
    #[error("kallsyms has no _stext/_etext: cannot tell where the kernel's code is")]
    NoText,
    #[error(transparent)]
    Kcore(#[from] KcoreError),
}

/// The kernel's code (core text and each module's), read once from `/proc/kcore`.
pub struct KernelCode {
    arch: Arch,
    regions: Vec<(u64, Vec<u8>)>,
    functions: Vec<Function>,
}

impl KernelCode {
    pub fn read(kernel: &KernelFunctions, kcore: &Kcore) -> Result<Self, CallSiteError> {
        if !kernel.addresses_visible() {
            return Err(CallSiteError::NoAddresses);
        }
        let symbol = |name: &str| {
            kernel
                .symbols()
                .iter()
                .find(|s| s.name == name && s.module.is_none())
                .map(|s| s.address)
        };
        let (start, end) = symbol("_stext")
            .zip(symbol("_etext"))
            .ok_or(CallSiteError::NoText)?;
        let mut regions = Vec::new();
        for (start, end) in std::iter::once((start, end)).chain(module_regions(kernel)) {
            regions.push((start, kcore.read(start, (end - start) as usize)?));
        }
        Ok(Self {
            arch: Arch::NATIVE,
            regions,
            functions: functions_by_address(kernel),
        })
    }

    /// The code of one region of kernel text starting at `start`, as `/proc/kcore` would give
    /// it (for tests of what is planned from it).
    #[cfg(test)]
    pub fn from_text(kernel: &KernelFunctions, start: u64, text: Vec<u8>) -> Self {
        Self {
            arch: Arch::X86_64,
            regions: vec![(start, text)],
            functions: functions_by_address(kernel),
        }
    }

    /// The bytes of `function`, if its code was read.
    fn code_of(&self, function: &Function) -> Option<&[u8]> {
        self.regions.iter().find_map(|(start, code)| {
            let from = function.start.checked_sub(*start)? as usize;
            let to = (function.end - start) as usize;
            code.get(from..to.min(code.len()))
        })
    }

    /// Every call site of the function at `address`; with `callers`, only those in callers
    /// whose names match the glob.
    pub fn call_sites(&self, address: u64, callers: Option<&str>) -> CallSites {
        self.call_sites_of(&[address], callers)
            .pop()
            .unwrap_or_default()
    }

    /// [`KernelCode::call_sites`] of several functions, in one pass over the code.
    pub fn call_sites_of(&self, addresses: &[u64], callers: Option<&str>) -> Vec<CallSites> {
        let mut callers_of: Vec<Vec<&Function>> = vec![Vec::new(); addresses.len()];
        for (start, code) in &self.regions {
            for (at, index) in scan_many(self.arch, code, *start, addresses) {
                if let Some(function) = containing(&self.functions, at)
                    && callers.is_none_or(|globs| matches_any(globs, &function.name))
                {
                    callers_of[index].push(function);
                }
            }
        }
        callers_of
            .into_iter()
            .zip(addresses)
            .map(|(mut functions, &address)| {
                functions.sort_by_key(|f| f.start);
                functions.dedup_by_key(|f| f.start);
                let mut sites = CallSites::default();
                for function in functions {
                    if let Some(code) = self.code_of(function) {
                        let found = sites_in(self.arch, function, code, address);
                        sites.covered.extend(found.covered);
                        sites.skipped.extend(found.skipped);
                    }
                }
                sites
            })
            .collect()
    }
}

/// Every direct call in `function` (any callee) but its ftrace hook, if ftrace lists
/// `function`: the places where the call-site probes' own cost can be measured (calibration),
/// in the order of the code. The hook is a call only while something traces the function,
/// and never a call of the function's own work.
pub fn direct_calls(
    kernel: &KernelFunctions,
    kcore: &Kcore,
    function: &str,
) -> Result<Vec<CallSite>, CallSiteError> {
    if !kernel.addresses_visible() {
        return Err(CallSiteError::NoAddresses);
    }
    let functions = functions_by_address(kernel);
    let Some(function) = functions.iter().find(|f| f.name == function && f.traceable) else {
        return Ok(Vec::new());
    };
    let code = kcore.read(function.start, (function.end - function.start) as usize)?;
    Ok(calls_past_the_hook(Arch::NATIVE, &code, function))
}

/// [`direct_calls`]' decoding of `function`'s `code`.
fn calls_past_the_hook(arch: Arch, code: &[u8], function: &Function) -> Vec<CallSite> {
    arch.calls_past_the_hook(code, function.start)
        .into_iter()
        .map(|call| CallSite {
            caller: function.name.clone(),
            offset: call.at - function.start,
            return_offset: call.next - function.start,
        })
        .collect()
}

/// Function symbols by start address, each ending where the next symbol starts.
fn functions_by_address(kernel: &KernelFunctions) -> Vec<Function> {
    let mut symbols: Vec<&KernelSymbol> =
        kernel.symbols().iter().filter(|s| s.address != 0).collect();
    symbols.sort_by_key(|s| s.address);
    let mut names: std::collections::HashMap<&str, usize> = Default::default();
    for symbol in symbols.iter().filter(|s| s.is_function()) {
        *names.entry(symbol.name.as_str()).or_default() += 1;
    }
    symbols
        .windows(2)
        .filter(|pair| pair[0].is_function() && pair[1].address > pair[0].address)
        .map(|pair| Function {
            name: pair[0].name.clone(),
            start: pair[0].address,
            end: pair[1].address,
            traceable: kernel.is_traceable(&pair[0].name) != Some(false),
            unique: names.get(pair[0].name.as_str()) == Some(&1),
        })
        .collect()
}

/// Each loaded module's code, from its first function to its last symbol.
fn module_regions(kernel: &KernelFunctions) -> Vec<(u64, u64)> {
    let mut by_module: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for symbol in kernel.symbols() {
        if let Some(module) = &symbol.module
            && symbol.is_function()
            && symbol.address != 0
        {
            let range = by_module
                .entry(module)
                .or_insert((symbol.address, symbol.address));
            range.0 = range.0.min(symbol.address);
            range.1 = range.1.max(symbol.address);
        }
    }
    by_module
        .into_values()
        .filter(|(start, end)| end > start)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 0xffff_ffff_8100_0000;

    /// [`scan_many`] for one target: the candidates' addresses.
    fn scan(code: &[u8], base: u64, target: u64) -> Vec<u64> {
        scan_many(Arch::X86_64, code, base, &[target])
            .into_iter()
            .map(|(at, _)| at)
            .collect()
    }

    /// `call rel32` / `jmp rel32` at `at` to `to`.
    fn branch(opcode: u8, at: u64, to: u64) -> [u8; 5] {
        let rel = (to as i64 - (at as i64 + 5)) as i32;
        let mut bytes = [opcode; 5];
        bytes[1..].copy_from_slice(&rel.to_le_bytes());
        bytes
    }

    /// A caller at BASE: `push rbp; call F; mov edi, 0x..e8..; jmp F; pop rbp; ret`, where
    /// the `mov` immediate holds bytes that look like a `call F` but are not an instruction.
    fn caller_code(target: u64) -> Vec<u8> {
        let mut code = vec![0x55]; // push rbp
        code.extend(branch(0xe8, BASE + 1, target)); // call F at +1
        // mov edi, imm32 at +6: bf + 4 bytes; then a fake "call" inside the next mov's imm.
        code.extend([0xbf, 0x90, 0x90, 0x90, 0x90]);
        // movabs rax, imm64 at +11 (48 b8 + 8 bytes), the imm holding e8 rel32 → F.
        let fake_at = BASE + 13;
        let fake = branch(0xe8, fake_at, target);
        code.extend([0x48, 0xb8]);
        code.extend(fake);
        code.extend([0x90, 0x90, 0x90]);
        code.extend(branch(0xe9, BASE + 21, target)); // jmp F at +21 (a tail call)
        code.extend([0x5d, 0xc3]); // pop rbp; ret
        code
    }

    fn function(traceable: bool, code: &[u8]) -> Function {
        Function {
            name: "caller".into(),
            start: BASE,
            end: BASE + code.len() as u64,
            traceable,
            unique: true,
        }
    }

    /// `__do_sys_getpid` as 7.x lays it out (`endbr64; call __fentry__; …; call
    /// __task_pid_nr_ns; cltq; jmp`), and as 5.10 does with its hook patched to a nop.
    #[test]
    fn calibration_calls_skip_the_ftrace_hook() {
        let callee = BASE + 0x1000;
        let body = |hook: &[u8], at: u64| {
            let mut code = hook.to_vec();
            code.extend([0x31, 0xd2]); // xor edx, edx
            code.extend(branch(0xe8, at + hook.len() as u64 + 2, callee));
            code.extend([0x48, 0x98]); // cltq
            code.extend(branch(0xe9, at + hook.len() as u64 + 9, callee));
            code
        };
        let mut traced = vec![0xf3, 0x0f, 0x1e, 0xfa]; // endbr64
        traced.extend(branch(0xe8, BASE + 4, BASE + 0x2000)); // the hook, live
        let code = body(&traced, BASE);
        let calls = calls_past_the_hook(Arch::X86_64, &code, &function(true, &code));
        assert_eq!(
            calls,
            [CallSite {
                caller: "caller".into(),
                offset: 11,
                return_offset: 16,
            }]
        );
        let nop5 = [0x0f, 0x1f, 0x44, 0x00, 0x00];
        let code = body(&nop5, BASE);
        let calls = calls_past_the_hook(Arch::X86_64, &code, &function(true, &code));
        assert_eq!(calls.iter().map(|c| c.offset).collect::<Vec<_>>(), [7]);
    }

    #[test]
    fn the_scan_finds_candidates_decoding_keeps_only_real_instructions() {
        let target = BASE + 0x1000;
        let code = caller_code(target);
        assert_eq!(scan(&code, BASE, target), [BASE + 1, BASE + 13, BASE + 21]);
        let sites = sites_in(Arch::X86_64, &function(true, &code), &code, target);
        assert_eq!(
            sites.covered,
            [CallSite {
                caller: "caller".into(),
                offset: 1,
                return_offset: 6
            }]
        );
        assert_eq!(
            sites.skipped,
            [Skipped::TailCall {
                caller: "caller".into(),
                offset: 21
            }]
        );
        assert_eq!(sites.covered[0].label(), "caller+0x1");
    }

    #[test]
    fn one_pass_finds_each_targets_callers() {
        let (f, g) = (BASE + 0x1000, BASE + 0x2000);
        let mut code = branch(0xe8, BASE, g).to_vec();
        code.extend(branch(0xe8, BASE + 5, f - 3));
        code.extend(branch(0xe8, BASE + 10, f + 0x800));
        assert_eq!(
            scan_many(Arch::X86_64, &code, BASE, &[f, g]),
            [(BASE, 1), (BASE + 5, 0)]
        );
    }

    #[test]
    fn calls_into_the_padding_count_as_calls_of_f() {
        let target = BASE + 0x1000;
        let code = branch(0xe8, BASE, target - 16);
        assert_eq!(scan(&code, BASE, target), [BASE]);
        let too_far = branch(0xe8, BASE, target - 17);
        assert!(scan(&too_far, BASE, target).is_empty());
        let after = branch(0xe8, BASE, target + 1);
        assert!(scan(&after, BASE, target).is_empty());
    }

    #[test]
    fn a_notrace_caller_is_skipped_with_its_reason() {
        let target = BASE + 0x1000;
        let code = caller_code(target);
        let sites = sites_in(Arch::X86_64, &function(false, &code), &code, target);
        assert!(sites.covered.is_empty());
        assert_eq!(sites.notrace_callers(), 1);
        assert_eq!(sites.tail_calls(), 1);
        assert_eq!(
            sites.summary(),
            "0 of 2 call sites covered: 1 tail call, 1 in a notrace caller (notrace, or a \
             non-inlined `inline` function); calls through function pointers are not seen"
        );
    }

    /// `load_elf_binary` is in `binfmt_elf` and `compat_binfmt_elf` alike: the kernel refuses
    /// a kprobe at `load_elf_binary+0xd22` (EADDRNOTAVAIL, seen on 6.12).
    #[test]
    fn a_call_in_a_caller_whose_name_is_shared_is_skipped_and_said() {
        let target = BASE + 0x1000;
        let code = caller_code(target);
        let shared = Function {
            unique: false,
            ..function(true, &code)
        };
        let sites = sites_in(Arch::X86_64, &shared, &code, target);
        assert!(sites.covered.is_empty());
        assert_eq!(sites.shared_names(), 1);
        assert_eq!(
            sites.summary(),
            "0 of 2 call sites covered: 1 tail call, 1 in a caller whose name another \
             function shares; calls through function pointers are not seen"
        );
    }

    #[test]
    fn callers_may_be_a_comma_list_of_globs() {
        assert!(matches_any("ext4_*,shmem_write_*", "shmem_write_end"));
        assert!(matches_any("ext4_*,shmem_write_*", "ext4_read"));
        assert!(!matches_any("ext4_*,shmem_write_*", "vfs_read"));
        assert!(matches_any("vfs_read", "vfs_read"));
    }

    #[test]
    fn the_containing_function_is_found_by_address() {
        let functions = [
            Function {
                name: "a".into(),
                start: 0x100,
                end: 0x180,
                traceable: true,
                unique: true,
            },
            Function {
                name: "b".into(),
                start: 0x200,
                end: 0x280,
                traceable: true,
                unique: true,
            },
        ];
        assert_eq!(
            containing(&functions, 0x100).map(|f| f.name.as_str()),
            Some("a")
        );
        assert_eq!(
            containing(&functions, 0x27f).map(|f| f.name.as_str()),
            Some("b")
        );
        assert_eq!(containing(&functions, 0x190), None);
        assert_eq!(containing(&functions, 0x50), None);
    }
}
