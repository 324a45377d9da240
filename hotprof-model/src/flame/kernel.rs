//! Kernel addresses → function names, from `/proc/kallsyms`.
//!
//! The table is built once from the file's bytes (parsed by [`crate::symbols::parse_kallsyms`],
//! the same parser target resolution uses) and looked up by binary search, so symbolizing the
//! ≤127 frames of thousands of stacks costs microseconds. Data symbols stay in the table as
//! upper bounds: an address past the last function before a data symbol is unknown rather than
//! attributed to that function with a huge offset.

use crate::symbols::{KernelSymbol, parse_kallsyms};

#[derive(Clone, Debug)]
struct Entry {
    address: u64,
    /// Index into `names`; `None` for a data symbol (an upper bound only).
    function: Option<usize>,
}

#[derive(Clone, Debug)]
struct Function {
    name: String,
    module: Option<String>,
}

/// A sorted view of the kernel's symbols for address lookups.
#[derive(Clone, Debug, Default)]
pub struct KernelSymbolizer {
    entries: Vec<Entry>,
    functions: Vec<Function>,
}

impl KernelSymbolizer {
    /// Builds the table from the contents of `/proc/kallsyms` (pure, for tests). Symbols with
    /// address 0 (all of them when kptr_restrict hides addresses) are left out. When a function
    /// and other symbols share an address, the first function in file order names it.
    pub fn from_kallsyms(data: &[u8]) -> Self {
        Self::from_symbols(parse_kallsyms(data))
    }

    fn from_symbols(symbols: Vec<KernelSymbol>) -> Self {
        let mut functions = Vec::new();
        let mut entries: Vec<Entry> = symbols
            .into_iter()
            .filter(|symbol| symbol.address != 0)
            .map(|symbol| {
                let function = symbol.is_function().then(|| {
                    functions.push(Function {
                        name: symbol.name,
                        module: symbol.module,
                    });
                    functions.len() - 1
                });
                Entry {
                    address: symbol.address,
                    function,
                }
            })
            .collect();
        // Stable: file order decides among equals, functions first.
        entries.sort_by_key(|entry| (entry.address, entry.function.is_none()));
        entries.dedup_by_key(|entry| entry.address);
        Self { entries, functions }
    }

    /// Reads the running kernel's `/proc/kallsyms`. Fails when its addresses are hidden
    /// (`kptr_restrict`, not root): every frame would otherwise come out as a bare address.
    pub fn from_system() -> std::io::Result<Self> {
        let symbolizer = Self::from_kallsyms(&std::fs::read("/proc/kallsyms")?);
        if symbolizer.entries.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "/proc/kallsyms shows no addresses (kptr_restrict): run hotprof as root",
            ));
        }
        Ok(symbolizer)
    }

    /// Number of distinct symbol addresses in the table.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The function containing `address`: `(name, offset into it, module)`, module being
    /// `Some("ext4")` for a loadable module's symbol. `None` below the first symbol or when the
    /// closest symbol below is a data symbol.
    pub fn symbolize(&self, address: u64) -> Option<(&str, u64, Option<&str>)> {
        let index = self
            .entries
            .partition_point(|entry| entry.address <= address)
            .checked_sub(1)?;
        let entry = &self.entries[index];
        let function = &self.functions[entry.function?];
        Some((
            &function.name,
            address - entry.address,
            function.module.as_deref(),
        ))
    }

    /// A frame name for flame graphs: `name`, `name [module]`, or `0xffffffffc0a01234` when the
    /// address is unknown (freed init code, an unloaded module, a stale table).
    pub fn frame_name(&self, address: u64) -> String {
        match self.symbolize(address) {
            Some((name, _, None)) => name.to_string(),
            Some((name, _, Some(module))) => format!("{name} [{module}]"),
            None => format!("{address:#x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &[u8] = b"0000000000000000 A fixed_percpu_data\n\
ffffffff81000000 T _stext\n\
ffffffff81000000 T _text\n\
ffffffff81001000 T do_syscall_64\n\
ffffffff81002000 t vfs_read\n\
ffffffff81002000 t vfs_read_alias\n\
ffffffff81003000 W weak_fn\n\
ffffffff81004000 T _etext\n\
ffffffff82000000 D some_data\n\
ffffffff82000100 d more_data\n\
ffffffffc0a01000 t ext4_file_read_iter\t[ext4]\n\
ffffffffc0a00800 t ext4_lookup\t[ext4]\n\
ffffffffc0a02000 d ext4_data\t[ext4]\n\
ffffffffc0b00000 t bpf_prog_6deef7357e7b4530_probe\t[bpf]\n\
not a line\n";

    fn symbolizer() -> KernelSymbolizer {
        KernelSymbolizer::from_kallsyms(KALLSYMS)
    }

    #[test]
    fn finds_the_containing_function_with_its_offset() {
        let s = symbolizer();
        assert_eq!(
            s.symbolize(0xffffffff81001000),
            Some(("do_syscall_64", 0, None))
        );
        assert_eq!(
            s.symbolize(0xffffffff81001fff),
            Some(("do_syscall_64", 0xfff, None))
        );
        assert_eq!(
            s.symbolize(0xffffffff81003010),
            Some(("weak_fn", 0x10, None))
        );
        assert_eq!(
            s.symbolize(0xffffffffc0a01234),
            Some(("ext4_file_read_iter", 0x234, Some("ext4")))
        );
    }

    #[test]
    fn module_symbols_are_sorted_even_when_kallsyms_is_not() {
        assert_eq!(
            symbolizer().symbolize(0xffffffffc0a00900),
            Some(("ext4_lookup", 0x100, Some("ext4")))
        );
    }

    #[test]
    fn the_first_function_at_an_address_names_it() {
        let s = symbolizer();
        assert_eq!(s.symbolize(0xffffffff81000010).unwrap().0, "_stext");
        assert_eq!(s.symbolize(0xffffffff81002004).unwrap().0, "vfs_read");
    }

    #[test]
    fn data_symbols_and_the_space_below_the_first_symbol_are_unknown() {
        let s = symbolizer();
        assert_eq!(s.symbolize(0xffffffff80000000), None);
        assert_eq!(s.symbolize(0), None);
        assert_eq!(s.symbolize(0xffffffff82000050), None);
        assert_eq!(s.symbolize(0xffffffffc0a02010), None);
        assert_eq!(
            s.symbolize(u64::MAX).unwrap().0,
            "bpf_prog_6deef7357e7b4530_probe"
        );
    }

    #[test]
    fn frame_names_carry_the_module_or_the_address() {
        let s = symbolizer();
        assert_eq!(s.frame_name(0xffffffff81002010), "vfs_read");
        assert_eq!(
            s.frame_name(0xffffffffc0a01010),
            "ext4_file_read_iter [ext4]"
        );
        assert_eq!(s.frame_name(0xffffffff82000050), "0xffffffff82000050");
    }

    #[test]
    fn hidden_addresses_give_an_empty_table() {
        let hidden = KernelSymbolizer::from_kallsyms(
            b"0000000000000000 T vfs_read\n0000000000000000 t x [m]\n",
        );
        assert!(hidden.is_empty());
        assert_eq!(hidden.frame_name(0xffffffff81002010), "0xffffffff81002010");
        assert_eq!(symbolizer().len(), 11);
    }

    #[test]
    fn the_running_kernel_symbolizes_its_own_functions() {
        // Only meaningful as root (kallsyms addresses visible); otherwise it must say why.
        match KernelSymbolizer::from_system() {
            Ok(s) => {
                let kallsyms = std::fs::read("/proc/kallsyms").unwrap();
                let symbol = parse_kallsyms(&kallsyms)
                    .into_iter()
                    .find(|s| s.name == "vfs_read" && s.is_function())
                    .expect("vfs_read in kallsyms");
                assert_eq!(
                    s.symbolize(symbol.address + 1).map(|(n, o, _)| (n, o)),
                    Some(("vfs_read", 1))
                );
            }
            Err(error) => assert_eq!(
                error.kind(),
                std::io::ErrorKind::PermissionDenied,
                "{error}"
            ),
        }
    }
}
