//! `/proc/kallsyms` parsing.

/// One kernel symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSymbol {
    /// Zero when kptr_restrict hides addresses (not root).
    pub address: u64,
    /// nm-style type: `t`/`T` for text (functions), `d`/`b`/`r`… for data.
    pub kind: char,
    pub name: String,
    /// Module name for symbols of loadable modules (`[ext4]`).
    pub module: Option<String>,
}

impl KernelSymbol {
    /// A function (text) symbol.
    pub fn is_function(&self) -> bool {
        matches!(self.kind, 't' | 'T' | 'w' | 'W')
    }
}

/// Parses the contents of `/proc/kallsyms`: `ffffffff81000000 T _text` and
/// `ffffffffc0a01000 t ext4_read [ext4]`. Malformed lines are skipped, not fatal: the file is
/// the kernel's, and one odd line must not stop a profile.
pub fn parse_kallsyms(data: &[u8]) -> Vec<KernelSymbol> {
    data.split(|&b| b == b'\n')
        .filter_map(|line| parse_line(std::str::from_utf8(line).ok()?))
        .collect()
}

fn parse_line(line: &str) -> Option<KernelSymbol> {
    let mut fields = line.split_ascii_whitespace();
    let address = u64::from_str_radix(fields.next()?, 16).ok()?;
    let mut kind_field = fields.next()?.chars();
    let kind = kind_field.next()?;
    if kind_field.next().is_some() {
        return None;
    }
    let name = fields.next()?.to_string();
    let module = fields
        .next()
        .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'))
        .map(str::to_string);
    Some(KernelSymbol {
        address,
        kind,
        name,
        module,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &[u8] = b"ffffffffb2ee4a30 T __x64_sys_getpid\n\
ffffffffb2ffdaf0 t __audit_filter_op\n\
ffffffffb32b4400 t __ep_eventpoll_poll.isra.0\n\
ffffffffb3000000 d audit_filter_list\n\
ffffffffc0a01000 t ext4_file_read_iter\t[ext4]\n\
garbage line\n\
\n\
0000000000000000 T hidden_when_not_root\n";

    #[test]
    fn parses_functions_data_and_modules() {
        let symbols = parse_kallsyms(FIXTURE);
        assert_eq!(symbols.len(), 6);
        assert_eq!(
            symbols[0],
            KernelSymbol {
                address: 0xffffffffb2ee4a30,
                kind: 'T',
                name: "__x64_sys_getpid".into(),
                module: None
            }
        );
        assert!(symbols[1].is_function());
        assert!(!symbols[3].is_function());
        assert_eq!(symbols[4].module.as_deref(), Some("ext4"));
        assert_eq!(symbols[5].address, 0);
    }

    #[test]
    fn survives_arbitrary_bytes() {
        assert!(parse_kallsyms(b"\xff\xfe\x00 T x\nffff T\nffff TT name\n").is_empty());
    }
}
