//! The running kernel's BTF, read once per process, as an index of the names hotprof looks
//! up in it: functions (`--fn` targets' BTF check, fentry/fexit targets, kfuncs, the task
//! iterator), typedefs (BTF tracepoints' `btf_trace_*`) and enumerators (attach types newer
//! than aya's bindings, such as `BPF_TRACE_FSESSION`).
//!
//! aya's `Btf::from_sys_fs` builds every one of the ~150,000 types (~20 ms on the host, the
//! largest part of start-up, several times that in a TCG guest); a program load only needs
//! the id of one name, so hotprof walks the type section once, keeps the ids of functions
//! and typedefs by name, and loads programs by id (aya's `load_by_btf_id`, a patch).
//! Format: the kernel's `Documentation/bpf/btf.rst`.

use std::sync::OnceLock;

/// Why the kernel's BTF could not be read (kept as text: the result is shared).
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
pub struct KernelBtfError(String);

/// Why bytes are not BTF this index can read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BtfParseError {
    #[error("not BTF (magic {0:#06x}, expected 0xeb9f)")]
    Magic(u16),
    #[error("BTF truncated: {0}")]
    Truncated(&'static str),
    #[error("BTF type {id} has unknown kind {kind}")]
    UnknownKind { id: u32, kind: u32 },
}

/// Why a function has no trampoline target (the kernel refuses fentry, fexit and fsession
/// there: EINVAL at load or link, with no word of why).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoTrampoline {
    #[error("not a function in the kernel's BTF (/sys/kernel/btf/vmlinux)")]
    NotInBtf,
    #[error("it takes variable arguments (`...`), which a BPF trampoline cannot pass")]
    Variadic,
}

const MAGIC: u16 = 0xeb9f;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;

/// The ids of functions and typedefs, by the offset of their name in the string section.
/// A lookup finds the name's offset in the strings first, so building the index never
/// touches a string: hashing the ~60,000 names themselves cost more than aya's whole parse
/// saved (their bytes are scattered over megabytes). The first type of a name wins, as in
/// aya's lookup (static functions of one name in several files repeat).
#[derive(Debug)]
pub struct BtfIndex<'a> {
    strings: &'a [u8],
    /// `(name offset, id)` in id order; unsorted (sorting took longer than the whole
    /// walk, for the few lookups a run makes).
    functions: Vec<(u32, u32)>,
    typedefs: Vec<(u32, u32)>,
    /// The values of every enum (32-bit), as `(name offset, value)`.
    enumerators: Vec<(u32, i32)>,
    /// Each function's prototype id, in the order of `functions`.
    prototypes: Vec<u32>,
    /// The ids of variadic prototypes (`...`: a last parameter of no name and no type), in
    /// id order.
    variadic: Vec<u32>,
}

impl<'a> BtfIndex<'a> {
    /// Indexes raw BTF (native byte order, as `/sys/kernel/btf/vmlinux` is).
    pub fn parse(btf: &'a [u8]) -> Result<Self, BtfParseError> {
        let magic = u16::from_ne_bytes(
            btf.get(0..2)
                .ok_or(BtfParseError::Truncated("header"))?
                .try_into()
                .expect("two bytes"),
        );
        if magic != MAGIC {
            return Err(BtfParseError::Magic(magic));
        }
        let word = |at: usize| read_u32(btf, at).ok_or(BtfParseError::Truncated("header"));
        let header_len = word(4)? as usize;
        let (type_off, type_len) = (word(8)? as usize, word(12)? as usize);
        let (str_off, str_len) = (word(16)? as usize, word(20)? as usize);
        let section = |off: usize, len: usize, what| {
            let start = header_len.checked_add(off);
            start
                .and_then(|start| btf.get(start..start.checked_add(len)?))
                .ok_or(BtfParseError::Truncated(what))
        };
        let types = section(type_off, type_len, "type section")?;
        let strings = section(str_off, str_len, "string section")?;

        let (mut functions, mut typedefs, mut enumerators) = (Vec::new(), Vec::new(), Vec::new());
        let (mut prototypes, mut variadic) = (Vec::new(), Vec::new());
        let mut at = 0;
        // Type ids start at 1 (0 is void).
        let mut id = 1u32;
        while at < types.len() {
            let (Some(name_off), Some(info)) = (read_u32(types, at), read_u32(types, at + 4))
            else {
                return Err(BtfParseError::Truncated("type"));
            };
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let trailing = match kind {
                // ptr, fwd, typedef, volatile, const, restrict, func, float, type_tag
                2 | 7 | 8 | 9 | 10 | 11 | 12 | 16 | 18 => 0,
                // int (encoding), var (linkage), decl_tag (component index)
                1 | 14 | 17 => 4,
                // array
                3 => 12,
                // struct/union members, datasec entries, enum64 values
                4 | 5 | 15 | 19 => 12 * vlen,
                // enum values, func_proto parameters
                6 | 13 => 8 * vlen,
                _ => return Err(BtfParseError::UnknownKind { id, kind }),
            };
            match kind {
                KIND_FUNC => {
                    functions.push((name_off, id));
                    prototypes
                        .push(read_u32(types, at + 8).ok_or(BtfParseError::Truncated("func"))?);
                }
                KIND_FUNC_PROTO if vlen > 0 => {
                    let last = at + 12 + 8 * (vlen - 1);
                    let (Some(name), Some(ty)) = (read_u32(types, last), read_u32(types, last + 4))
                    else {
                        return Err(BtfParseError::Truncated("func_proto"));
                    };
                    if name == 0 && ty == 0 {
                        variadic.push(id);
                    }
                }
                KIND_TYPEDEF => typedefs.push((name_off, id)),
                KIND_ENUM => {
                    let values = types
                        .get(at + 12..at + 12 + trailing)
                        .ok_or(BtfParseError::Truncated("enum"))?;
                    enumerators.extend(values.chunks_exact(8).map(|value| {
                        let word = |at| read_u32(value, at).expect("8-byte chunk");
                        (word(0), word(4) as i32)
                    }));
                }
                _ => {}
            }
            at += 12 + trailing;
            id += 1;
        }
        if at != types.len() {
            return Err(BtfParseError::Truncated("type"));
        }
        Ok(Self {
            strings,
            functions,
            typedefs,
            enumerators,
            prototypes,
            variadic,
        })
    }

    /// The id of the function `name` (a `BTF_KIND_FUNC`).
    pub fn function(&self, name: &str) -> Option<u32> {
        self.find(&self.functions, name)
    }

    /// The BTF id a trampoline program (fentry, fexit, fsession, tracing-multi) is loaded or
    /// linked for to time the function `name`, or why there is none.
    pub fn trampoline_target(&self, name: &str) -> Result<u32, NoTrampoline> {
        self.target_of(self.function(name))
    }

    /// [`Self::trampoline_target`] of each of `names`, in one walk over the functions: a
    /// lookup searches the whole string section for its name (~2.5 MB), which for a
    /// 1000-function glob took 4.7 s of a TCG guest's start; the walk reads each function's
    /// name once instead.
    pub fn trampoline_targets(&self, names: &[&str]) -> Vec<Result<u32, NoTrampoline>> {
        let wanted: std::collections::HashMap<&[u8], usize> = names
            .iter()
            .enumerate()
            .map(|(index, name)| (name.as_bytes(), index))
            .collect();
        let mut found: Vec<Option<u32>> = vec![None; names.len()];
        for &(name_off, id) in &self.functions {
            let Some(name) = self.string_at(name_off) else {
                continue;
            };
            if let Some(&index) = wanted.get(name) {
                // In id order: the first of a name wins, as in `function`.
                found[index].get_or_insert(id);
            }
        }
        found.into_iter().map(|id| self.target_of(id)).collect()
    }

    /// The trampoline target of the function of BTF id `function`, if any.
    fn target_of(&self, function: Option<u32>) -> Result<u32, NoTrampoline> {
        let id = function.ok_or(NoTrampoline::NotInBtf)?;
        // `functions` is in id order, `prototypes` beside it.
        let variadic = self
            .functions
            .binary_search_by_key(&id, |&(_, function)| function)
            .ok()
            .and_then(|index| self.prototypes.get(index))
            .is_some_and(|proto| self.variadic.binary_search(proto).is_ok());
        if variadic {
            return Err(NoTrampoline::Variadic);
        }
        Ok(id)
    }

    /// The string at `offset` of the string section, without its NUL.
    fn string_at(&self, offset: u32) -> Option<&[u8]> {
        let rest = self.strings.get(offset as usize..)?;
        let end = memchr::memchr(0, rest)?;
        Some(&rest[..end])
    }

    /// Whether the function `name` takes variable arguments (`...`).
    pub fn variadic(&self, name: &str) -> bool {
        self.trampoline_target(name) == Err(NoTrampoline::Variadic)
    }

    /// The id of the typedef `name` (a `BTF_KIND_TYPEDEF`, e.g. `btf_trace_sched_switch`).
    pub fn typedef(&self, name: &str) -> Option<u32> {
        self.find(&self.typedefs, name)
    }

    /// The id a BTF tracepoint program on `tracepoint` (`sched_switch`, `sys_exit`) is
    /// loaded for: the kernel's `btf_trace_<tracepoint>` typedef, as aya's
    /// `BtfTracePoint::load` looks it up.
    pub fn tracepoint(&self, tracepoint: &str) -> Option<u32> {
        self.typedef(&format!("btf_trace_{tracepoint}"))
    }

    /// The value of the enumerator `name` (e.g. `BPF_TRACE_FSESSION` of `enum
    /// bpf_attach_type`): what the running kernel numbers it, where it has it.
    pub fn enumerator(&self, name: &str) -> Option<i32> {
        let offsets: Vec<u32> = self.name_offsets(name).collect();
        self.enumerators
            .iter()
            .find(|(off, _)| offsets.contains(off))
            .map(|&(_, value)| value)
    }

    fn find(&self, ids: &[(u32, u32)], name: &str) -> Option<u32> {
        self.name_offsets(name)
            .filter_map(|name_off| {
                // In id order: the first is the smallest id.
                ids.iter()
                    .find(|&&(off, _)| off == name_off)
                    .map(|&(_, id)| id)
            })
            .min()
    }

    /// Each offset in the string section where the whole string `name` starts.
    fn name_offsets(&self, name: &str) -> impl Iterator<Item = u32> {
        let valid = !name.is_empty() && !name.contains('\0');
        // A whole string equals `name` where `name\0` follows a NUL (the section starts with
        // the empty string). Matches of `name\0` cannot overlap, so none is skipped even
        // where a name repeats back to back. Deduplicated BTF has one such offset; the
        // smallest id over all of them wins all the same.
        let needle = [name.as_bytes(), b"\0"].concat();
        let strings = self.strings;
        memchr::memmem::find_iter(strings, &needle)
            .filter(move |&at| valid && at > 0 && strings[at - 1] == 0)
            .filter_map(|at| u32::try_from(at).ok())
            .collect::<Vec<_>>()
            .into_iter()
    }
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        bytes.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

static KERNEL_BTF: OnceLock<Result<BtfIndex<'static>, KernelBtfError>> = OnceLock::new();

/// Why a loadable module's function has no trampoline target for hotprof: its BTF is the
/// module's own (`/sys/kernel/btf/MODULE`, split from vmlinux's), and a program for it is
/// loaded against that BTF object; hotprof reads vmlinux's alone. `None` for the kernel's
/// own functions.
pub fn module_refusal(target: &crate::resolve::Target) -> Option<String> {
    target.module.as_ref().map(|module| {
        format!(
            "it is in module {module}, and hotprof reads vmlinux's BTF only, not the module's \
             (/sys/kernel/btf/{module}; --mode kprobe times it)"
        )
    })
}

/// The kernel's BTF index, read on first use. (Its bytes live as long as the process: the
/// index borrows them.)
pub fn kernel_btf() -> Result<&'static BtfIndex<'static>, KernelBtfError> {
    KERNEL_BTF
        .get_or_init(|| {
            const PATH: &str = "/sys/kernel/btf/vmlinux";
            let bytes = map_or_read(PATH).map_err(|e| KernelBtfError(format!("{PATH}: {e}")))?;
            BtfIndex::parse(bytes).map_err(|e| KernelBtfError(format!("{PATH}: {e}")))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The whole file, mapped where the kernel allows it (vmlinux BTF since 6.16: no copy of
/// its ~6 MB, which took ~5 ms of start-up to read), read otherwise. Never unmapped or
/// freed: the index lives as long as the process.
fn map_or_read(path: &str) -> std::io::Result<&'static [u8]> {
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len() as usize;
    if let Some(mapped) = (len > 0)
        .then(|| crate::sys::mmap::map_for_good(&file, len))
        .flatten()
    {
        return Ok(mapped);
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut &file, &mut bytes)?;
    Ok(Vec::leak(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    /// A type record's 12 bytes.
    fn ty(name: u32, kind: u32, vlen: u32, size: u32) -> Vec<u8> {
        words(&[name, (kind << 24) | vlen, size])
    }

    /// A BTF blob: the header, then `types`, then `strings`.
    fn btf(types: &[u8], strings: &[u8]) -> Vec<u8> {
        let mut btf = Vec::new();
        btf.extend(MAGIC.to_ne_bytes());
        btf.extend([1, 0]);
        btf.extend(words(&[
            24,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ]));
        btf.extend(types);
        btf.extend(strings);
        btf
    }

    /// BTF with: 1 int "int", 2 func_proto (1 param), 3 func "f", 4 typedef "btf_trace_t",
    /// 5 struct "s" (2 members), 6 func "f" again (a second static `f`), 7 func "g".
    fn fixture() -> Vec<u8> {
        let strings = b"\0int\0f\0btf_trace_t\0s\0a\0b\0g\0";
        let (int, f, trace, s, a, b, g) = (1u32, 5, 7, 19, 21, 23, 25);
        let mut types = Vec::new();
        types.extend(ty(int, 1, 0, 4));
        types.extend(words(&[32]));
        types.extend(ty(0, 13, 1, 1));
        types.extend(words(&[0, 1]));
        types.extend(ty(f, 12, 0, 2));
        types.extend(ty(trace, 8, 0, 1));
        types.extend(ty(s, 4, 2, 8));
        types.extend(words(&[a, 1, 0, b, 1, 32]));
        types.extend(ty(f, 12, 0, 2));
        types.extend(ty(g, 12, 0, 2));
        btf(&types, strings)
    }

    #[test]
    fn a_name_repeated_back_to_back_in_the_strings_is_found_at_either_offset() {
        // Not deduplicated: "f" at offsets 1 and 3; the typedef uses the first, the
        // function the second (overlapping `\0f\0` matches would miss it).
        let mut types = ty(1, 8, 0, 0);
        types.extend(ty(3, 12, 0, 0));
        let bytes = btf(&types, b"\0f\0f\0");
        let index = BtfIndex::parse(&bytes).unwrap();
        assert_eq!(index.typedef("f"), Some(1));
        assert_eq!(index.function("f"), Some(2));
    }

    #[test]
    fn finds_functions_and_typedefs_by_name_past_every_kind_of_record() {
        let bytes = fixture();
        let index = BtfIndex::parse(&bytes).unwrap();
        assert_eq!(index.function("f"), Some(3), "the first of two wins");
        assert_eq!(index.function("g"), Some(7));
        assert_eq!(index.typedef("btf_trace_t"), Some(4));
        assert_eq!(index.tracepoint("t"), Some(4));
        // Names of other kinds, or of the other kind, are not found.
        assert_eq!(index.function("int"), None);
        assert_eq!(index.function("btf_trace_t"), None);
        assert_eq!(index.typedef("f"), None);
        assert_eq!(index.function("h"), None);
        // Not whole strings: a prefix, a suffix, the empty string, a name with a NUL.
        assert_eq!(index.typedef("btf_trace"), None);
        assert_eq!(index.typedef("trace_t"), None);
        assert_eq!(index.function(""), None);
        assert_eq!(index.function("f\0g"), None);
    }

    #[test]
    fn tells_variadic_functions_by_their_prototypes_last_parameter() {
        // 1 int "int", 2 func_proto (int a, ...), 3 func "p", 4 func_proto (int a), 5 func "q",
        // 6 func_proto (), 7 func "r".
        let strings = b"\0int\0a\0p\0q\0r\0";
        let (int, a, p, q, r) = (1u32, 5, 7, 9, 11);
        let mut types = ty(int, 1, 0, 4);
        types.extend(words(&[32]));
        types.extend(ty(0, KIND_FUNC_PROTO, 2, int));
        types.extend(words(&[a, 1, 0, 0]));
        types.extend(ty(p, KIND_FUNC, 0, 2));
        types.extend(ty(0, KIND_FUNC_PROTO, 1, int));
        types.extend(words(&[a, 1]));
        types.extend(ty(q, KIND_FUNC, 0, 4));
        types.extend(ty(0, KIND_FUNC_PROTO, 0, int));
        types.extend(ty(r, KIND_FUNC, 0, 6));
        let bytes = btf(&types, strings);
        let index = BtfIndex::parse(&bytes).unwrap();
        assert!(index.variadic("p"));
        assert!(!index.variadic("q"));
        assert!(!index.variadic("r"));
        assert!(!index.variadic("unknown"));
        // One at a time or all in one walk: the same answers.
        let names = ["p", "q", "r", "unknown", "int"];
        let batch = index.trampoline_targets(&names);
        for (name, answer) in names.iter().zip(batch) {
            assert_eq!(answer, index.trampoline_target(name), "{name}");
        }
        assert_eq!(index.trampoline_target("q"), Ok(5));
        assert_eq!(index.trampoline_target("p"), Err(NoTrampoline::Variadic));
        assert_eq!(index.trampoline_target("int"), Err(NoTrampoline::NotInBtf));
    }

    #[test]
    fn finds_an_enumerators_value_in_any_enum() {
        // 1 enum "e" { A = 3, B = -1 }, 2 enum "f" { C = 7 }, 3 typedef "D".
        let strings = b"\0e\0A\0B\0f\0C\0D\0";
        let (e, a, b, f, c, d) = (1u32, 3, 5, 7, 9, 11);
        let mut types = ty(e, KIND_ENUM, 2, 4);
        types.extend(words(&[a, 3, b, u32::MAX]));
        types.extend(ty(f, KIND_ENUM, 1, 4));
        types.extend(words(&[c, 7]));
        types.extend(ty(d, KIND_TYPEDEF, 0, 1));
        let bytes = btf(&types, strings);
        let index = BtfIndex::parse(&bytes).unwrap();
        assert_eq!(index.enumerator("A"), Some(3));
        assert_eq!(index.enumerator("B"), Some(-1));
        assert_eq!(index.enumerator("C"), Some(7));
        // An enum's own name, a typedef, an unknown name: no enumerator.
        assert_eq!(index.enumerator("e"), None);
        assert_eq!(index.enumerator("D"), None);
        assert_eq!(index.enumerator("Z"), None);
        assert_eq!(index.typedef("D"), Some(3));
    }

    #[test]
    fn the_running_kernels_attach_types_are_numbered_as_its_uapi() {
        let Ok(index) = kernel_btf() else {
            eprintln!("no /sys/kernel/btf/vmlinux here");
            return;
        };
        // Numbers fixed by the uapi header since their kernels (5.5, 5.18).
        assert_eq!(index.enumerator("BPF_TRACE_FENTRY"), Some(24));
        assert_eq!(index.enumerator("BPF_TRACE_KPROBE_MULTI"), Some(42));
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        let bytes = fixture();
        assert_eq!(
            BtfIndex::parse(&[0x7f, b'E', b'L', b'F']).unwrap_err(),
            BtfParseError::Magic(u16::from_ne_bytes([0x7f, b'E']))
        );
        for len in [0, 1, 2, 10, 30, 60, bytes.len() - 1] {
            assert!(BtfIndex::parse(&bytes[..len]).is_err(), "{len}");
        }
        let mut unknown = bytes.clone();
        // The int's info word: kind 31.
        unknown[24 + 4..24 + 8].copy_from_slice(&(31u32 << 24).to_ne_bytes());
        assert_eq!(
            BtfIndex::parse(&unknown).unwrap_err(),
            BtfParseError::UnknownKind { id: 1, kind: 31 }
        );
    }

    #[test]
    fn indexes_the_running_kernels_btf_as_aya_does() {
        let Ok(index) = kernel_btf() else {
            eprintln!("no /sys/kernel/btf/vmlinux here");
            return;
        };
        let aya = aya::Btf::from_sys_fs().unwrap();
        use aya_obj::btf::BtfKind;
        for name in [
            "__x64_sys_getpid",
            "do_nanosleep",
            "bpf_session_cookie",
            "bpf_iter_task",
            "schedule",
            "f\0",
        ] {
            assert_eq!(
                index.function(name),
                aya.id_by_type_name_kind(name, BtfKind::Func).ok(),
                "{name}"
            );
        }
        for name in ["btf_trace_sys_exit", "btf_trace_sched_switch"] {
            assert_eq!(
                index.typedef(name),
                aya.id_by_type_name_kind(name, BtfKind::Typedef).ok(),
                "{name}"
            );
        }
        assert!(index.function("schedule").is_some());
        assert!(index.typedef("btf_trace_sys_exit").is_some());
        // `_printk(const char *fmt, ...)`; `vfs_read` takes four.
        assert!(index.variadic("_printk"));
        assert!(!index.variadic("vfs_read"));
        let names = ["_printk", "vfs_read", "schedule", "no_such_function_here"];
        let batch = index.trampoline_targets(&names);
        for (name, answer) in names.iter().zip(batch) {
            assert_eq!(answer, index.trampoline_target(name), "{name}");
        }
    }
}
