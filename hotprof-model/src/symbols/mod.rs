//! The kernel's function table, from the text of `/proc/kallsyms`, `available_filter_functions`
//! and the kprobe blacklist: what the user typed (`__audit_filter_op`, `copy_*_iter*`) turned
//! into kernel functions that can really be probed, or a one-line reason why not. Pure (bytes
//! in): the profiler's `resolve` stage reads the files and adds what needs the kernel itself.

mod glob;
mod index;
mod kallsyms;
mod lists;

use std::collections::{BTreeSet, HashSet};

use index::NameIndex;

pub use glob::{glob_match, is_glob};
pub use kallsyms::{KernelSymbol, parse_kallsyms};
pub use lists::{parse_blacklist, parse_filter_functions};

/// Why a function cannot be probed, each a one-line message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResolveError {
    #[error("function '{name}' not found in /proc/kallsyms{}", did_you_mean(.suggestions))]
    NotFound {
        name: String,
        suggestions: Vec<String>,
    },
    #[error("function '{name}' is inlined into its callers (it is in BTF but has no symbol): probe a caller instead{}", did_you_mean(.suggestions))]
    Inlined {
        name: String,
        suggestions: Vec<String>,
    },
    #[error(
        "'{name}' is a .cold fragment split out by GCC, not a function entry: probe '{parent}' instead"
    )]
    ColdFragment { name: String, parent: String },
    #[error("'{name}' is a data symbol (type '{kind}'), not a function")]
    NotAFunction { name: String, kind: char },
    #[error(
        "function '{name}' is on the kernel's kprobe blacklist (NOKPROBE_SYMBOL): it cannot be probed"
    )]
    Blacklisted { name: String },
    #[error("no kernel function matches '{pattern}'")]
    NoMatch { pattern: String },
    #[error(
        "every function '{pattern}' matches shares its name with another ({}): a kprobe cannot \
         name one of them (the kernel refuses, EADDRNOTAVAIL); probe their callers instead",
        .names.join(", ")
    )]
    OnlySharedNames { pattern: String, names: Vec<String> },
}

/// ` (did you mean: a, b?)`, or nothing.
pub fn did_you_mean(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        String::new()
    } else {
        format!(" (did you mean: {}?)", suggestions.join(", "))
    }
}

/// A kernel function hotprof will probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The symbol to attach to (may be a GCC clone such as `__audit_filter_op.isra.0`).
    pub symbol: String,
    /// Kernel address (0 when hidden by kptr_restrict).
    pub address: u64,
    /// Whether ftrace can trace it (`available_filter_functions`); `None` when unreadable.
    pub traceable: Option<bool>,
    /// A note for the user, e.g. that a clone was picked.
    pub note: Option<String>,
    /// The loadable module it is in (`dummy`), `None` for the kernel's own.
    pub module: Option<String>,
}

/// What the running kernel says about its functions.
pub struct KernelFunctions {
    symbols: Vec<KernelSymbol>,
    by_name: NameIndex,
    /// Names more than one function has (static functions of different files, a module's
    /// function named as one of vmlinux's).
    shared: HashSet<String>,
    traceable: Option<HashSet<String>>,
    blacklist: Option<HashSet<String>>,
}

/// GCC suffixes of clones that are still whole functions with the same entry semantics.
const CLONE_SUFFIXES: [&str; 4] = [".isra.", ".constprop.", ".part.", ".llvm."];

impl KernelFunctions {
    /// Builds the view from raw file contents (kept pure so it is unit-testable).
    pub fn new(kallsyms: &[u8], filter_functions: Option<&[u8]>, blacklist: Option<&[u8]>) -> Self {
        Self::from_parsed(
            parse_kallsyms(kallsyms),
            filter_functions.map(parse_filter_functions),
            blacklist.map(parse_blacklist),
        )
    }

    fn from_parsed(
        symbols: Vec<KernelSymbol>,
        traceable: Option<HashSet<String>>,
        blacklist: Option<HashSet<String>>,
    ) -> Self {
        let (by_name, shared) = NameIndex::build(&symbols);
        Self {
            symbols,
            by_name,
            shared,
            traceable,
            blacklist,
        }
    }

    /// Reads `/proc/kallsyms`, and `available_filter_functions` under `tracefs` and the kprobe
    /// blacklist when they can be read (tracefs/debugfs may be unmounted). The lists are read
    /// and parsed on a thread of their own beside kallsyms: the kernel writes each file from
    /// its symbol table as it is read, and that, with the parsing, made this the longest step
    /// of a run's start (1.7 s of 3.4 in a 6.12 TCG guest, 1.0 s of it with both read at once).
    pub fn read(tracefs: Option<&std::path::Path>) -> std::io::Result<Self> {
        std::thread::scope(|scope| {
            let lists = scope.spawn(|| {
                let filter = tracefs
                    .and_then(|root| std::fs::read(root.join("available_filter_functions")).ok());
                let blacklist = std::fs::read("/sys/kernel/debug/kprobes/blacklist").ok();
                (
                    filter.as_deref().map(parse_filter_functions),
                    blacklist.as_deref().map(parse_blacklist),
                )
            });
            let symbols = parse_kallsyms(&std::fs::read("/proc/kallsyms")?);
            let (traceable, blacklist) = lists
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            Ok(Self::from_parsed(symbols, traceable, blacklist))
        })
    }

    /// Every symbol, as kallsyms lists them.
    pub fn symbols(&self) -> &[KernelSymbol] {
        &self.symbols
    }

    /// Whether kallsyms shows real addresses (root, or kptr_restrict off).
    pub fn addresses_visible(&self) -> bool {
        self.symbols.iter().any(|s| s.address != 0)
    }

    pub fn is_blacklisted(&self, name: &str) -> bool {
        self.blacklist.as_ref().is_some_and(|b| b.contains(name))
    }

    pub fn is_traceable(&self, name: &str) -> Option<bool> {
        self.traceable.as_ref().map(|t| t.contains(name))
    }

    /// Resolves one `--fn` argument (a name or a glob) to targets. `in_btf` tells whether BTF
    /// knows a function, to tell "inlined" from "misspelled".
    pub fn resolve(
        &self,
        requested: &str,
        in_btf: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<Target>, ResolveError> {
        if is_glob(requested) {
            return self.resolve_glob(requested);
        }
        if let Some(parent) = requested
            .strip_suffix(".cold")
            .or_else(|| cold_parent(requested))
        {
            return Err(ResolveError::ColdFragment {
                name: requested.into(),
                parent: parent.into(),
            });
        }
        if let Some(index) = self.by_name.get(&self.symbols, requested) {
            let symbol = &self.symbols[index];
            if !symbol.is_function() {
                return Err(ResolveError::NotAFunction {
                    name: requested.into(),
                    kind: symbol.kind,
                });
            }
            if self.is_blacklisted(requested) {
                return Err(ResolveError::Blacklisted {
                    name: requested.into(),
                });
            }
            return Ok(vec![self.target(symbol, None)]);
        }
        let clones: Vec<&KernelSymbol> = self
            .symbols
            .iter()
            .filter(|s| s.is_function() && clone_base(&s.name) == Some(requested))
            .filter(|s| !self.is_blacklisted(&s.name))
            .collect();
        if !clones.is_empty() {
            return Ok(clones
                .into_iter()
                .map(|s| {
                    let note = format!(
                        "'{requested}' exists only as the GCC clone '{}'; probing the clone",
                        s.name
                    );
                    self.target(s, Some(note))
                })
                .collect());
        }
        let suggestions = self.suggestions(requested);
        if in_btf(requested) {
            Err(ResolveError::Inlined {
                name: requested.into(),
                suggestions,
            })
        } else {
            Err(ResolveError::NotFound {
                name: requested.into(),
                suggestions,
            })
        }
    }

    /// A glob's functions. A name two functions share is left out, and said in a note on the
    /// first target: a kprobe names its function, and the kernel refuses an ambiguous name
    /// (EADDRNOTAVAIL, 6.6 and the stable kernels before), which failed the whole run; the
    /// other mechanisms would time one of the two under a name that means both.
    fn resolve_glob(&self, pattern: &str) -> Result<Vec<Target>, ResolveError> {
        let mut seen = BTreeSet::new();
        let (shared, mut targets): (Vec<&KernelSymbol>, Vec<&KernelSymbol>) = self
            .symbols
            .iter()
            .filter(|s| s.is_function() && glob_match(pattern, &s.name))
            .filter(|s| cold_parent(&s.name).is_none() && !s.name.ends_with(".cold"))
            .filter(|s| !self.is_blacklisted(&s.name))
            // Like bpftrace and funclatency: a glob covers what ftrace lists, which leaves out
            // __init code freed after boot and notrace functions.
            .filter(|s| self.is_traceable(&s.name) != Some(false))
            .filter(|s| seen.insert(s.name.clone()))
            .partition(|s| self.shared.contains(&s.name));
        let shared: Vec<String> = shared.into_iter().map(|s| s.name.clone()).collect();
        if targets.is_empty() {
            return Err(if shared.is_empty() {
                ResolveError::NoMatch {
                    pattern: pattern.into(),
                }
            } else {
                ResolveError::OnlySharedNames {
                    pattern: pattern.into(),
                    names: shared,
                }
            });
        }
        let note = (!shared.is_empty()).then(|| {
            format!(
                "'{pattern}' leaves out {}: {} shared with another function, which a kprobe \
                 cannot tell apart",
                shared.join(", "),
                if shared.len() == 1 {
                    "a name"
                } else {
                    "names each"
                }
            )
        });
        let first = targets.remove(0);
        Ok(std::iter::once(self.target(first, note))
            .chain(targets.into_iter().map(|s| self.target(s, None)))
            .collect())
    }

    /// Every function symbol matching `pattern`, blacklisted ones included (for `hotprof list`).
    pub fn matching(&self, pattern: &str) -> Vec<&KernelSymbol> {
        let mut seen = BTreeSet::new();
        self.symbols
            .iter()
            .filter(|s| s.is_function() && glob_match(pattern, &s.name) && seen.insert(&s.name))
            .collect()
    }

    fn target(&self, symbol: &KernelSymbol, note: Option<String>) -> Target {
        Target {
            symbol: symbol.name.clone(),
            address: symbol.address,
            traceable: self.is_traceable(&symbol.name),
            note,
            module: symbol.module.clone(),
        }
    }

    /// Up to three function names close to `name`: same clone base, substring, or small edit
    /// distance.
    fn suggestions(&self, name: &str) -> Vec<String> {
        let mut scored: Vec<(usize, &str)> = self
            .by_name
            .places()
            .map(|place| &self.symbols[place])
            .filter(|symbol| symbol.is_function())
            .map(|symbol| &symbol.name)
            .filter_map(|candidate| {
                let distance = if candidate.contains(name)
                    || name.contains(candidate.as_str()) && candidate.len() > 3
                {
                    candidate.len().abs_diff(name.len()).min(3)
                } else if candidate.len().abs_diff(name.len()) > 4 {
                    return None;
                } else {
                    levenshtein(name, candidate)
                };
                (distance <= 4).then_some((distance, candidate.as_str()))
            })
            .collect();
        scored.sort();
        scored
            .into_iter()
            .take(3)
            .map(|(_, s)| s.to_string())
            .collect()
    }
}

/// `foo` for `foo.isra.0` / `foo.constprop.3` / `foo.part.1`.
fn clone_base(name: &str) -> Option<&str> {
    CLONE_SUFFIXES
        .iter()
        .filter_map(|suffix| name.find(suffix))
        .min()
        .map(|at| &name[..at])
}

/// `foo` for `foo.cold.12` (GCC numbers some cold fragments).
fn cold_parent(name: &str) -> Option<&str> {
    let at = name.find(".cold")?;
    let rest = &name[at + ".cold".len()..];
    (rest.is_empty() || rest.starts_with('.')).then(|| &name[..at])
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &[u8] = b"ffffffff81000010 T __x64_sys_getpid\n\
ffffffff81000020 t __audit_filter_op\n\
ffffffff81000030 t __ep_eventpoll_poll.isra.0\n\
ffffffff81000040 t ep_item_poll.isra.0\n\
ffffffff81000050 t do_thing.cold\n\
ffffffff81000060 t do_thing\n\
ffffffff81000070 d audit_filter_list\n\
ffffffff81000080 T copy_page_from_iter_atomic\n\
ffffffff81000090 T copy_page_to_iter\n\
ffffffff810000a0 T _copy_to_user\n\
ffffffff810000b0 t nmi_handle\n";
    const FILTER: &[u8] = b"__x64_sys_getpid\n__audit_filter_op\ncopy_page_to_iter\ndo_thing\n";
    const BLACKLIST: &[u8] = b"0xffffffff810000b0-0xffffffff810000c0\tnmi_handle\n";

    #[test]
    fn globs_leave_out_names_two_functions_share_and_say_so() {
        let kallsyms = b"ffffffff81000010 t dummy_handler\n\
ffffffff81000020 t dummy_irq\n\
ffffffff81000030 t dummy_handler\n\
ffffffff81000040 d dummy_data\n\
ffffffffc0000010 t dummy_xmit\t[dummy]\n";
        let kernel = KernelFunctions::new(kallsyms, None, None);
        let targets = kernel.resolve("dummy_*", &no_btf).unwrap();
        let names: Vec<&str> = targets.iter().map(|t| t.symbol.as_str()).collect();
        assert_eq!(names, ["dummy_irq", "dummy_xmit"]);
        assert_eq!(
            targets[0].note.as_deref(),
            Some(
                "'dummy_*' leaves out dummy_handler: a name shared with another function, \
                 which a kprobe cannot tell apart"
            )
        );
        assert_eq!(targets[1].note, None);
        let error = kernel.resolve("dummy_h*", &no_btf).unwrap_err();
        assert!(matches!(error, ResolveError::OnlySharedNames { .. }));
        assert!(error.to_string().contains("(dummy_handler)"), "{error}");
    }

    fn kernel() -> KernelFunctions {
        KernelFunctions::new(KALLSYMS, Some(FILTER), Some(BLACKLIST))
    }

    fn no_btf(_: &str) -> bool {
        false
    }

    #[test]
    fn resolves_exact_names() {
        let targets = kernel().resolve("__audit_filter_op", &no_btf).unwrap();
        assert_eq!(targets.len(), 1);
        assert_eq!(targets[0].symbol, "__audit_filter_op");
        assert_eq!(targets[0].address, 0xffffffff81000020);
        assert_eq!(targets[0].traceable, Some(true));
        assert_eq!(targets[0].note, None);
    }

    #[test]
    fn resolves_gcc_clones_with_a_note() {
        let targets = kernel().resolve("__ep_eventpoll_poll", &no_btf).unwrap();
        assert_eq!(targets[0].symbol, "__ep_eventpoll_poll.isra.0");
        assert!(targets[0].note.as_deref().unwrap().contains("GCC clone"));
    }

    #[test]
    fn refuses_cold_fragments_naming_the_parent() {
        let error = kernel().resolve("do_thing.cold", &no_btf).unwrap_err();
        assert_eq!(
            error,
            ResolveError::ColdFragment {
                name: "do_thing.cold".into(),
                parent: "do_thing".into()
            }
        );
    }

    #[test]
    fn unknown_names_get_close_suggestions() {
        let error = kernel().resolve("__audit_filter_ops", &no_btf).unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("function '__audit_filter_ops' not found"),
            "{message}"
        );
        assert!(message.contains("__audit_filter_op"), "{message}");
        assert!(!message.contains('\n'));
    }

    #[test]
    fn inlined_functions_are_told_apart_from_typos() {
        let error = kernel()
            .resolve("audit_filter_inlined", &|n| n == "audit_filter_inlined")
            .unwrap_err();
        assert!(matches!(error, ResolveError::Inlined { .. }));
    }

    #[test]
    fn data_symbols_and_blacklisted_functions_are_refused() {
        assert!(matches!(
            kernel().resolve("audit_filter_list", &no_btf),
            Err(ResolveError::NotAFunction { .. })
        ));
        assert!(matches!(
            kernel().resolve("nmi_handle", &no_btf),
            Err(ResolveError::Blacklisted { .. })
        ));
    }

    #[test]
    fn globs_expand_skipping_cold_and_blacklisted() {
        let names: Vec<String> = kernel()
            .resolve("copy_*_iter*", &no_btf)
            .unwrap()
            .into_iter()
            .map(|t| t.symbol)
            .collect();
        // copy_page_from_iter_atomic is not in the ftrace list of the fixture.
        assert_eq!(names, ["copy_page_to_iter"]);
        let without_tracefs = KernelFunctions::new(KALLSYMS, None, Some(BLACKLIST));
        let names: Vec<String> = without_tracefs
            .resolve("copy_*_iter*", &no_btf)
            .unwrap()
            .into_iter()
            .map(|t| t.symbol)
            .collect();
        assert_eq!(names, ["copy_page_from_iter_atomic", "copy_page_to_iter"]);
        assert!(
            kernel()
                .resolve("do_thing*", &no_btf)
                .unwrap()
                .iter()
                .all(|t| t.symbol == "do_thing")
        );
        assert_eq!(
            kernel().resolve("nmi_*", &no_btf),
            Err(ResolveError::NoMatch {
                pattern: "nmi_*".into()
            })
        );
    }

    #[test]
    fn traceability_is_unknown_without_tracefs() {
        let kernel = KernelFunctions::new(KALLSYMS, None, None);
        assert_eq!(
            kernel.resolve("_copy_to_user", &no_btf).unwrap()[0].traceable,
            None
        );
    }

    #[test]
    fn levenshtein_is_right() {
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("same", "same"), 0);
    }
}
