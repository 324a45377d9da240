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
/// the kernel's, and one odd line must not stop a profile. Bytes, not text, until a name is
/// kept: every run's start parses ~200,000 lines (checking each whole line as UTF-8 and
/// splitting it as text took twice as long).
pub fn parse_kallsyms(data: &[u8]) -> Vec<KernelSymbol> {
    let mut symbols = Vec::with_capacity(data.len() / 40);
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', data).chain([data.len()]) {
        if let Some(symbol) = parse_line(&data[start..end]) {
            symbols.push(symbol);
        }
        start = end + 1;
    }
    symbols
}

fn parse_line(line: &[u8]) -> Option<KernelSymbol> {
    let mut fields = line
        .split(u8::is_ascii_whitespace)
        .filter(|field| !field.is_empty());
    let address = hex(fields.next()?)?;
    let kind = match fields.next()? {
        &[kind] if kind.is_ascii() => char::from(kind),
        _ => return None,
    };
    let name = std::str::from_utf8(fields.next()?).ok()?.to_owned();
    let module = fields
        .next()
        .and_then(|module| module.strip_prefix(b"[")?.strip_suffix(b"]"))
        .and_then(|module| std::str::from_utf8(module).ok())
        .map(str::to_owned);
    Some(KernelSymbol {
        address,
        kind,
        name,
        module,
    })
}

/// A 64-bit address in hex, as kallsyms prints it.
fn hex(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    digits.iter().try_fold(0u64, |value, &digit| {
        Some(value << 4 | u64::from(char::from(digit).to_digit(16)?))
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
    fn addresses_are_sixteen_hex_digits_at_most() {
        assert_eq!(hex(b"ffffffffb2ee4a30"), Some(0xffffffffb2ee4a30));
        assert_eq!(hex(b"0000000000000000"), Some(0));
        assert_eq!(hex(b"1ffffffffb2ee4a30"), None);
        assert_eq!(hex(b"ffffg"), None);
        assert_eq!(hex(b""), None);
    }

    #[test]
    fn survives_arbitrary_bytes() {
        assert!(parse_kallsyms(b"\xff\xfe\x00 T x\nffff T\nffff TT name\n").is_empty());
    }
}
