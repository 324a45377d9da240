//! `/proc/kallsyms` parsing and name resolution over it.
//!
//! The input is up to four parts separated by NUL bytes:
//! `kallsyms \0 available_filter_functions \0 kprobes/blacklist \0 requested name`.
//! Every part but the first is optional; without a requested name, names are derived from
//! the first two parsed symbols (each as is, its GCC-clone base, a glob, a near miss).
//!
//! Properties: nothing panics; a successful resolution returns at least one target, each a
//! function symbol of the input.
#![no_main]

use hotprof_model::symbols::{KernelFunctions, parse_kallsyms};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(4, |&b| b == 0);
    let kallsyms = parts.next().unwrap_or_default();
    let filter = parts.next();
    let blacklist = parts.next();
    let requested = parts.next().map(String::from_utf8_lossy);

    let symbols = parse_kallsyms(kallsyms);
    let kernel = KernelFunctions::new(
        kallsyms,
        Some(filter.unwrap_or_default()),
        Some(blacklist.unwrap_or_default()),
    );
    let kernel_without_tracefs = KernelFunctions::new(kallsyms, None, None);

    // The requested name, or names derived from the first symbols: each as is, its GCC-clone
    // base (`foo` of `foo.isra.0`), a glob and a near miss (for the suggestions).
    let mut names: Vec<String> = Vec::new();
    match requested {
        Some(requested) => names.push(requested.into_owned()),
        None => {
            for symbol in symbols.iter().take(2) {
                names.push(symbol.name.clone());
                if let Some(dot) = symbol.name.find('.') {
                    names.push(symbol.name[..dot].to_string());
                }
                names.push(format!(
                    "{}*",
                    symbol.name.chars().take(3).collect::<String>()
                ));
                names.push(format!(
                    "?{}x",
                    symbol.name.chars().skip(1).collect::<String>()
                ));
            }
        }
    }

    for name in &names {
        for kernel in [&kernel, &kernel_without_tracefs] {
            if let Ok(targets) = kernel.resolve(name, &|_| false) {
                assert!(!targets.is_empty(), "Ok(empty) for {name:?}");
                for target in &targets {
                    assert!(
                        symbols
                            .iter()
                            .any(|s| s.name == target.symbol && s.is_function()),
                        "{name:?} resolved to {:?}, not a function symbol of the input",
                        target.symbol
                    );
                }
            }
        }
        let _ = kernel.matching(name);
    }
});
