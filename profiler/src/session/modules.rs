//! Loadable modules coming and going while a run is attached.
//!
//! What the kernel does when a probed module function's module is unloaded depends on the
//! mechanism (checked on 6.12 and 7.2 with `dummy`): a kprobe.multi or kprobe.session link
//! holds a reference on the module, so `rmmod` fails (EAGAIN) until hotprof detaches (fentry
//! does not take module functions here: not checked); a perf kprobe does not: the module goes, the kprobe is marked gone and
//! stays gone even if the module is loaded again. hotprof keeps the calls counted until then
//! and says so once, here. Globs are resolved once, at start: a module loaded later whose
//! functions a glob would match is not probed, and that is said too rather than left silent.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::resolve::{KernelFunctions, Target, is_glob, kernel_functions};

/// Watches `/proc/modules` for the modules of the probed functions going away and for new
/// modules with functions the run's globs match.
#[derive(Debug)]
pub struct ModuleWatcher {
    /// The still-loaded modules of probed functions, each with those functions.
    probed: BTreeMap<String, Vec<String>>,
    /// The globs asked for (`--fn`, `--children`).
    globs: Vec<String>,
    /// The modules loaded at the last look.
    loaded: BTreeSet<String>,
}

impl ModuleWatcher {
    /// How often `/proc/modules` is read (a few hundred bytes per module).
    pub const PERIOD: Duration = Duration::from_secs(1);

    /// A watcher for `targets` (the probed functions) and the names and globs asked for;
    /// `None` where there is nothing to watch (no module function probed, no glob asked for)
    /// or no loadable modules (no `/proc/modules`).
    pub fn new<'a>(targets: &[Target], asked: impl IntoIterator<Item = &'a str>) -> Option<Self> {
        let asked: Vec<&str> = asked.into_iter().collect();
        if targets.iter().all(|t| t.module.is_none()) && !asked.iter().any(|a| is_glob(a)) {
            return None;
        }
        let text = std::fs::read_to_string("/proc/modules").ok()?;
        Some(Self::with_loaded(targets, asked, loaded_modules(&text)))
    }

    fn with_loaded<'a>(
        targets: &[Target],
        asked: impl IntoIterator<Item = &'a str>,
        loaded: BTreeSet<String>,
    ) -> Self {
        let mut probed: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for target in targets {
            if let Some(module) = &target.module {
                probed
                    .entry(module.clone())
                    .or_default()
                    .push(target.symbol.clone());
            }
        }
        // Loaded when they were resolved: one unloaded since (while the probes attached) is
        // said at the first look.
        let mut loaded = loaded;
        loaded.extend(probed.keys().cloned());
        Self {
            probed,
            globs: asked
                .into_iter()
                .filter(|name| is_glob(name))
                .map(str::to_owned)
                .collect(),
            loaded,
        }
    }

    /// Looks again; the notes to print (`elapsed`: the run's time so far).
    pub fn poll(&mut self, elapsed: Duration) -> Vec<String> {
        let Ok(text) = std::fs::read_to_string("/proc/modules") else {
            return Vec::new();
        };
        let functions = || kernel_functions().ok();
        self.changes(loaded_modules(&text), elapsed, functions)
    }

    /// The notes for the modules now `loaded`; the kernel's `functions` are read only when a
    /// module came (and a glob was asked for).
    fn changes(
        &mut self,
        loaded: BTreeSet<String>,
        elapsed: Duration,
        functions: impl FnOnce() -> Option<KernelFunctions>,
    ) -> Vec<String> {
        let at = format!("{:.1} s", elapsed.as_secs_f64());
        let mut notes = Vec::new();
        for module in self.loaded.difference(&loaded) {
            if let Some(functions) = self.probed.remove(module) {
                notes.push(format!(
                    "module {module} was unloaded {at} in: {} went with it; {} calls until \
                     then are kept, none after (its probes stay gone if it comes back)",
                    functions.join(", "),
                    if functions.len() == 1 { "its" } else { "their" },
                ));
            }
        }
        let came: Vec<&String> = loaded.difference(&self.loaded).collect();
        let functions = match came.is_empty() || self.globs.is_empty() {
            true => None,
            false => functions(),
        };
        for module in came.into_iter().filter(|_| functions.is_some()) {
            // What the glob would resolve to now, by the rule it was resolved by at start.
            let mut matching: Vec<String> = self
                .globs
                .iter()
                .flat_map(|glob| functions.as_ref()?.resolve(glob, &|_| false).ok())
                .flatten()
                .filter(|target| target.module.as_ref() == Some(module))
                .map(|target| target.symbol)
                .collect();
            matching.sort_unstable();
            matching.dedup();
            if matching.is_empty() {
                continue;
            }
            notes.push(format!(
                "module {module} was loaded {at} in with {} function{} matching {}: {}; not \
                 probed (globs are resolved once, at start: restart hotprof to include them)",
                matching.len(),
                if matching.len() == 1 { "" } else { "s" },
                self.globs
                    .iter()
                    .map(|glob| format!("'{glob}'"))
                    .collect::<Vec<_>>()
                    .join(", "),
                shortened(&matching),
            ));
        }
        self.loaded = loaded;
        notes
    }
}

/// The names in `/proc/modules` (`NAME SIZE REFS USERS STATE ADDRESS` lines) of modules not
/// on their way out.
fn loaded_modules(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(4) != Some(&"Unloading")).then(|| fields.first().map(|f| f.to_string()))?
        })
        .collect()
}

/// The first five names, and how many more.
fn shortened(names: &[String]) -> String {
    const SHOWN: usize = 5;
    match names.len() {
        n if n <= SHOWN => names.join(", "),
        n => format!("{}, and {} more", names[..SHOWN].join(", "), n - SHOWN),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODULES: &str = "\
dummy 12288 0 - Live 0xffffffffc041d000
loop 40960 0 - Live 0xffffffffc0420000
";

    fn target(symbol: &str, module: Option<&str>) -> Target {
        Target {
            symbol: symbol.into(),
            address: 0x1000,
            traceable: Some(true),
            note: None,
            module: module.map(str::to_owned),
        }
    }

    fn watcher(targets: &[Target], asked: &[&str]) -> ModuleWatcher {
        ModuleWatcher::with_loaded(targets, asked.iter().copied(), loaded_modules(MODULES))
    }

    fn not_read() -> Option<KernelFunctions> {
        panic!("the kernel's functions read though no module came")
    }

    /// The kernel's functions from kallsyms lines, all traceable but `__pfx_` padding (as
    /// `available_filter_functions` lists them).
    fn functions(kallsyms: &str) -> Option<KernelFunctions> {
        let traceable: String = kallsyms
            .lines()
            .filter_map(|line| line.split_whitespace().nth(2))
            .filter(|name| !name.starts_with("__pfx_"))
            .map(|name| format!("{name}\n"))
            .collect();
        Some(KernelFunctions::new(
            kallsyms.as_bytes(),
            Some(traceable.as_bytes()),
            None,
        ))
    }

    #[test]
    fn a_probed_module_going_away_is_said_once() {
        let mut w = watcher(
            &[
                target("dummy_xmit", Some("dummy")),
                target("vfs_read", None),
            ],
            &["dummy_xmit", "vfs_read"],
        );
        let gone = loaded_modules("loop 40960 0 - Live 0xffffffffc0420000\n");
        let notes = w.changes(gone.clone(), Duration::from_millis(3200), not_read);
        assert_eq!(
            notes,
            [
                "module dummy was unloaded 3.2 s in: dummy_xmit went with it; its calls until \
              then are kept, none after (its probes stay gone if it comes back)"
            ]
        );
        assert!(w.changes(gone, Duration::from_secs(4), not_read).is_empty());
        // Back again: nothing more is said (and with no glob asked for, nothing is read).
        let back = loaded_modules(MODULES);
        assert!(w.changes(back, Duration::from_secs(5), not_read).is_empty());
    }

    /// Unloaded between the resolving and the watcher's first read (the probes attaching
    /// meanwhile): said at the first look, not missed.
    #[test]
    fn a_probed_module_gone_before_the_watcher_started_is_said() {
        let targets = [target("dummy_xmit", Some("dummy"))];
        let without = loaded_modules("loop 40960 0 - Live 0xffffffffc0420000\n");
        let mut w = ModuleWatcher::with_loaded(&targets, ["dummy_xmit"], without.clone());
        let notes = w.changes(without, Duration::from_secs(1), not_read);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("module dummy was unloaded 1.0 s in: dummy_xmit"));
    }

    #[test]
    fn an_unprobed_module_going_away_or_unloading_says_nothing() {
        let mut w = watcher(&[target("dummy_xmit", Some("dummy"))], &["dummy_xmit"]);
        let unloading = "dummy 12288 0 - Live 0x0\nloop 40960 0 - Unloading 0x0\n";
        assert!(
            w.changes(loaded_modules(unloading), Duration::ZERO, not_read)
                .is_empty()
        );
        assert_eq!(w.loaded, BTreeSet::from(["dummy".to_owned()]));
    }

    #[test]
    fn a_module_loaded_later_with_functions_a_glob_matches_is_said() {
        let mut w = watcher(&[target("loop_rw_iter", None)], &["dummy_*", "loop*"]);
        let mut now = loaded_modules(MODULES);
        now.insert("veth".into());
        now.insert("dummy2".into());
        let kallsyms = "\
ffffffffc041d134 t __pfx_dummy_xmit\t[dummy2]
ffffffffc041d144 t dummy_xmit\t[dummy2]
ffffffffc041d200 t dummy_dev_init\t[dummy2]
ffffffffc041d300 d dummy_netdev_ops\t[dummy2]
ffffffffc0500000 t veth_xmit\t[veth]
ffffffff81000000 T dummy_handler
";
        let notes = w.changes(now, Duration::from_millis(2100), || functions(kallsyms));
        assert_eq!(
            notes,
            [
                "module dummy2 was loaded 2.1 s in with 2 functions matching 'dummy_*', 'loop*': \
              dummy_dev_init, dummy_xmit; not probed (globs are resolved once, at start: \
              restart hotprof to include them)"
            ]
        );
    }

    #[test]
    fn long_lists_are_shortened() {
        let names = |n: usize| (0..n).map(|i| format!("f{i}")).collect::<Vec<_>>();
        assert_eq!(shortened(&names(2)), "f0, f1");
        assert_eq!(shortened(&names(7)), "f0, f1, f2, f3, f4, and 2 more");
    }
}
