//! `hotprof list GLOB`: matching functions and which probe modes can attach to each.

use anyhow::Context as _;

use crate::attach::{self, NoTrampoline};
use crate::commands::doctor::Tried;
use crate::resolve::callsites::{CallSites, KernelCode};
use crate::resolve::kcore::Kcore;
use crate::resolve::{KernelFunctions, is_glob};

const EXAMPLES: &str = "\
Examples:
  sudo hotprof list 'copy_*_iter*'
  sudo hotprof list 'vfs_*'
  # Why a function cannot be probed (notrace, inlined, blacklisted) and what is close
  sudo hotprof list copy_page_from_iter_atomic";

#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct ListArgs {
    /// Function name or glob (`copy_*_iter*`).
    pub pattern: String,
}

pub fn run(args: &ListArgs) -> anyhow::Result<i32> {
    let pattern = args.pattern.as_str();
    let kernel = crate::resolve::kernel_functions().context("cannot read /proc/kallsyms")?;
    let btf = crate::attach::kernel_btf().ok();
    let in_btf = |name: &str| btf.is_some_and(|b| b.function(name).is_some());
    let symbols: Vec<String> = if is_glob(pattern) {
        kernel
            .matching(pattern)
            .into_iter()
            .map(|s| s.name.clone())
            .collect()
    } else {
        kernel
            .resolve(pattern, &in_btf)?
            .into_iter()
            .map(|t| t.symbol)
            .collect()
    };
    if symbols.is_empty() {
        anyhow::bail!("no kernel function matches '{pattern}'");
    }
    let kprobes = attach::kprobes_available();
    // What a run would get, from doctor's own tries (once, not per function): the files can
    // list a function that the kernel still refuses to probe in any way.
    let tries = crate::commands::doctor::attach_tries(&kernel);
    let refused = |tried: &Tried| matches!(tried, Tried::Fails(_));
    // Absent before 7.0: the kernel's BTF names the attach type where it has it.
    let fsession = if btf.is_none_or(|b| b.enumerator("BPF_TRACE_FSESSION").is_none()) {
        Fsession::Absent
    } else if refused(&tries.fsession) {
        Fsession::Refused
    } else {
        Fsession::Available
    };
    let callsites = call_sites(&kernel, &symbols);
    // What fentry can take of each, in one walk over the BTF's functions.
    let names: Vec<&str> = symbols.iter().map(String::as_str).collect();
    let trampolines = btf.map(|btf| btf.trampoline_targets(&names));
    println!("{}", header());
    for (index, name) in symbols.iter().enumerate() {
        let trampoline = trampolines.as_ref().map(|targets| targets[index]);
        let blacklisted = kernel.is_blacklisted(name);
        let traceable = kernel.is_traceable(name);
        // Where ftrace's list leaves a function out, the kernel is asked, as a run asks it.
        let entry_kprobe =
            (kprobes && !blacklisted && traceable == Some(false)).then(
                || match attach::ask_kernel(name) {
                    attach::KprobeAnswer::Accepted => Ok(()),
                    attach::KprobeAnswer::Refused(error) => Err(error.raw_os_error().unwrap_or(0)),
                    attach::KprobeAnswer::NoKprobes => Err(libc::ENOENT),
                },
            );
        let facts = Facts {
            kprobes,
            kprobe_refused: refused(&tries.kprobe),
            fentry_refused: refused(&tries.fentry),
            fsession,
            btf: btf.is_some(),
            blacklisted,
            in_btf: !matches!(trampoline, None | Some(Err(NoTrampoline::NotInBtf))),
            variadic: trampoline == Some(Err(NoTrampoline::Variadic)),
            traceable,
            entry_kprobe,
        };
        let callsite = match &callsites {
            Ok(sites) => callsite_verdict(&sites[index]),
            Err(_) => "? (kernel code unreadable)".to_owned(),
        };
        println!("{}", row(name, &facts, &callsite));
    }
    if let Err(error) = callsites {
        eprintln!("hotprof: note: no call-site column: {error}");
    }
    eprintln!("{} function(s)", symbols.len());
    Ok(0)
}

/// The call sites of each of `symbols`, found in one pass over the running kernel's code.
fn call_sites(kernel: &KernelFunctions, symbols: &[String]) -> anyhow::Result<Vec<CallSites>> {
    let code = KernelCode::read(kernel, &Kcore::open()?)?;
    let addresses: Vec<u64> = symbols
        .iter()
        .map(|name| {
            kernel
                .symbols()
                .iter()
                .find(|s| &s.name == name && s.is_function())
                .map_or(0, |s| s.address)
        })
        .collect();
    Ok(code.call_sites_of(&addresses, None))
}

/// The callsite column: `yes (N sites in M callers)`, or `no (why)`.
fn callsite_verdict(sites: &CallSites) -> String {
    if !sites.covered.is_empty() {
        return format!(
            "yes ({} sites in {} callers)",
            sites.covered.len(),
            sites.callers()
        );
    }
    if sites.skipped.is_empty() {
        return "no (no direct callers)".to_owned();
    }
    format!(
        "no ({} tail calls, {} in notrace callers)",
        sites.tail_calls(),
        sites.notrace_callers()
    )
}

/// A mode the kernel refused outright when doctor's tries asked it.
const REFUSED: &str = "no (refused; see doctor)";

/// Whether the kernel runs fsession programs (Linux 7.0+), as doctor's try found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fsession {
    /// No `BPF_TRACE_FSESSION` in the kernel's BTF.
    Absent,
    /// The kernel has it, but refused doctor's fsession program.
    Refused,
    Available,
}

/// What decides whether each probe mode can attach to one function.
#[derive(Clone, Copy, Debug)]
struct Facts {
    /// The kernel can create kprobes at all.
    kprobes: bool,
    /// The kernel refused doctor's kprobe on getpid (lockdown, a missing permission).
    kprobe_refused: bool,
    /// The kernel refused doctor's fentry on getpid (e.g. `BPF_PROG_LOAD` not permitted).
    fentry_refused: bool,
    fsession: Fsession,
    /// The kernel has BTF at all.
    btf: bool,
    /// On the kprobe blacklist.
    blacklisted: bool,
    /// Has a function entry in the kernel's BTF (not a compiler clone, not inlined).
    in_btf: bool,
    /// Takes variable arguments, which no trampoline passes.
    variadic: bool,
    /// Whether ftrace lists it; `None` when the list of traceable functions is unreadable.
    traceable: Option<bool>,
    /// For a function ftrace does not list: what the kernel answered a kprobe at its entry
    /// (`Err(errno)` when it refused).
    entry_kprobe: Option<Result<(), i32>>,
}

impl Facts {
    /// The kprobe column: `yes`, or `no (why)`.
    fn kprobe(&self) -> &'static str {
        if self.blacklisted {
            "no (blacklisted)"
        } else if !self.kprobes {
            "no (kernel has no kprobes)"
        } else if self.kprobe_refused {
            REFUSED
        } else {
            match self.entry_kprobe {
                // Without CONFIG_KPROBE_EVENTS_ON_NOTRACE (Debian's, and most distributions'
                // setting) the kernel refuses kprobe events in functions without an ftrace
                // location, with EINVAL.
                Some(Err(libc::EINVAL)) => "no (notrace)",
                Some(Err(libc::EPERM | libc::EACCES)) => "no (not permitted: run as root)",
                Some(Err(_)) => "no (refused by the kernel)",
                Some(Ok(())) | None => "yes",
            }
        }
    }

    /// The fentry column: `yes`, or `no (why)`.
    fn fentry(&self) -> &'static str {
        match (self.btf, self.in_btf, self.entry_kprobe) {
            (false, _, _) => "no (no kernel BTF)",
            _ if self.fentry_refused => REFUSED,
            (true, false, _) => "no (not in BTF: alias or clone)",
            _ if self.variadic => "no (variadic: `...`)",
            // No ftrace location at all: nothing for a trampoline to patch.
            (true, true, Some(Err(libc::EINVAL))) => "no (notrace)",
            // Unlisted, but the kernel took a kprobe: a run tries fentry first, and the
            // kernel decides then.
            (true, true, Some(_)) => "tried at attach (unlisted)",
            (true, true, None) if self.traceable == Some(false) => "tried at attach (unlisted)",
            (true, true, None) => "yes",
        }
    }
}

impl Facts {
    /// The fsession column: fsession attaches through the trampoline fentry uses, so where
    /// the kernel has it, it takes what fentry takes.
    fn fsession(&self) -> &'static str {
        match self.fsession {
            Fsession::Absent => "no (needs Linux 7.0)",
            Fsession::Refused => REFUSED,
            Fsession::Available => match self.fentry() {
                "yes" => "yes",
                "tried at attach (unlisted)" => "tried at attach",
                _ => "no (as fentry)",
            },
        }
    }
}

/// The header of the table `hotprof list` prints.
fn header() -> String {
    format!(
        "{:<48} {:<28} {:<34} {:<24} callsite",
        "function", "kprobe", "fentry", "fsession"
    )
}

/// One function's line of the table: whether each probe mode can attach to it.
fn row(name: &str, facts: &Facts, callsite: &str) -> String {
    format!(
        "{name:<48} {:<28} {:<34} {:<24} {callsite}",
        facts.kprobe(),
        facts.fentry(),
        facts.fsession()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_YES: Facts = Facts {
        kprobes: true,
        kprobe_refused: false,
        fentry_refused: false,
        fsession: Fsession::Available,
        btf: true,
        blacklisted: false,
        in_btf: true,
        variadic: false,
        traceable: Some(true),
        entry_kprobe: None,
    };

    /// A function ftrace does not list, the kernel's answer to a kprobe at its entry (as
    /// recorded in the test guests: EINVAL for `copy_page_from_iter_atomic`, accepted for
    /// `__x64_sys_getppid`).
    fn unlisted(answer: Result<(), i32>) -> Facts {
        Facts {
            traceable: Some(false),
            entry_kprobe: Some(answer),
            ..ALL_YES
        }
    }

    #[test]
    fn a_probeable_function_is_yes_in_both_columns() {
        assert_eq!((ALL_YES.kprobe(), ALL_YES.fentry()), ("yes", "yes"));
        // An unreadable list of traceable functions does not stop fentry.
        let unknown = Facts {
            traceable: None,
            ..ALL_YES
        };
        assert_eq!(unknown.fentry(), "yes");
    }

    #[test]
    fn a_variadic_function_is_no_for_trampolines_and_yes_for_kprobes() {
        let variadic = Facts {
            variadic: true,
            ..ALL_YES
        };
        assert_eq!(variadic.kprobe(), "yes");
        assert_eq!(variadic.fentry(), "no (variadic: `...`)");
        assert!(
            variadic.fsession().starts_with("no"),
            "{}",
            variadic.fsession()
        );
    }

    #[test]
    fn kprobe_verdicts_say_why_not() {
        let blacklisted = Facts {
            blacklisted: true,
            ..ALL_YES
        };
        assert_eq!(blacklisted.kprobe(), "no (blacklisted)");
        let no_kprobes = Facts {
            kprobes: false,
            ..ALL_YES
        };
        assert_eq!(no_kprobes.kprobe(), "no (kernel has no kprobes)");
        // The blacklist is named first: it holds on any kernel.
        let both = Facts {
            kprobes: false,
            ..blacklisted
        };
        assert_eq!(both.kprobe(), "no (blacklisted)");
        assert_eq!(unlisted(Err(libc::EINVAL)).kprobe(), "no (notrace)");
        // Unlisted is not refused: the kernel's answer decides (a syscall wrapper).
        assert_eq!(unlisted(Ok(())).kprobe(), "yes");
        assert_eq!(
            unlisted(Err(libc::EPERM)).kprobe(),
            "no (not permitted: run as root)"
        );
        // Neither depends on BTF.
        assert_eq!(
            Facts {
                btf: false,
                ..ALL_YES
            }
            .kprobe(),
            "yes"
        );
    }

    #[test]
    fn fentry_verdicts_say_why_not() {
        let cases = [
            (
                Facts {
                    btf: false,
                    ..ALL_YES
                },
                "no (no kernel BTF)",
            ),
            (
                Facts {
                    btf: false,
                    in_btf: false,
                    variadic: false,
                    ..unlisted(Err(libc::EINVAL))
                },
                "no (no kernel BTF)",
            ),
            (
                Facts {
                    in_btf: false,
                    variadic: false,
                    ..ALL_YES
                },
                "no (not in BTF: alias or clone)",
            ),
            (
                Facts {
                    in_btf: false,
                    variadic: false,
                    ..unlisted(Ok(()))
                },
                "no (not in BTF: alias or clone)",
            ),
            (unlisted(Err(libc::EINVAL)), "no (notrace)"),
            (unlisted(Ok(())), "tried at attach (unlisted)"),
        ];
        for (facts, expected) in cases {
            assert_eq!(facts.fentry(), expected, "{facts:?}");
        }
        // The kprobe column is independent.
        assert_eq!(
            Facts {
                btf: false,
                ..ALL_YES
            }
            .kprobe(),
            "yes"
        );
    }

    #[test]
    fn fsession_takes_what_fentry_takes_where_the_kernel_has_it() {
        let before_7_0 = Facts {
            fsession: Fsession::Absent,
            ..ALL_YES
        };
        assert_eq!(before_7_0.fsession(), "no (needs Linux 7.0)");
        assert_eq!(ALL_YES.fsession(), "yes");
        assert_eq!(unlisted(Ok(())).fsession(), "tried at attach");
        assert_eq!(unlisted(Err(libc::EINVAL)).fsession(), "no (as fentry)");
        let refused = Facts {
            fsession: Fsession::Refused,
            ..ALL_YES
        };
        assert_eq!(refused.fsession(), "no (refused; see doctor)");
        assert_eq!(refused.fentry(), "yes");
        // Every verdict fits its column.
        for facts in [before_7_0, refused, unlisted(Ok(())), ALL_YES] {
            assert!(facts.fsession().len() <= 24, "{}", facts.fsession());
        }
    }

    /// A kernel that refuses a mode outright (doctor's try failed) gets "no" in that column
    /// for every function, whatever the files say: `list` and `doctor` agree.
    #[test]
    fn a_mode_the_kernel_refuses_is_no_for_every_function() {
        let fentry_refused = Facts {
            fentry_refused: true,
            ..ALL_YES
        };
        assert_eq!(fentry_refused.fentry(), "no (refused; see doctor)");
        assert_eq!(fentry_refused.kprobe(), "yes");
        let kprobe_refused = Facts {
            kprobe_refused: true,
            ..ALL_YES
        };
        assert_eq!(kprobe_refused.kprobe(), "no (refused; see doctor)");
        assert_eq!(kprobe_refused.fentry(), "yes");
        // Facts that hold on any kernel are named first.
        let blacklisted = Facts {
            blacklisted: true,
            ..kprobe_refused
        };
        assert_eq!(blacklisted.kprobe(), "no (blacklisted)");
    }

    #[test]
    fn the_table_has_a_header_and_aligned_rows() {
        let notrace = unlisted(Err(libc::EINVAL));
        let clone = Facts {
            blacklisted: true,
            in_btf: false,
            variadic: false,
            ..ALL_YES
        };
        let lines = [
            header(),
            row("vfs_read", &ALL_YES, "yes (12 sites in 9 callers)"),
            row(
                "copy_page_from_iter_atomic",
                &notrace,
                "yes (3 sites in 3 callers)",
            ),
            row(
                "__ep_eventpoll_poll.isra.0",
                &clone,
                "no (no direct callers)",
            ),
        ];
        assert_eq!(
            lines,
            [
                format!(
                    "{:<48} {:<28} {:<34} {:<24} callsite",
                    "function", "kprobe", "fentry", "fsession"
                ),
                format!(
                    "{:<48} {:<28} {:<34} {:<24} yes (12 sites in 9 callers)",
                    "vfs_read", "yes", "yes", "yes"
                ),
                format!(
                    "{:<48} {:<28} {:<34} {:<24} yes (3 sites in 3 callers)",
                    "copy_page_from_iter_atomic", "no (notrace)", "no (notrace)", "no (as fentry)"
                ),
                format!(
                    "{:<48} {:<28} {:<34} {:<24} no (no direct callers)",
                    "__ep_eventpoll_poll.isra.0",
                    "no (blacklisted)",
                    "no (not in BTF: alias or clone)",
                    "no (as fentry)"
                ),
            ]
        );
        // The kprobe column starts at 49, fentry at 78, fsession at 113 and callsite at 138,
        // whatever the verdicts.
        for line in &lines {
            assert!(!line.contains('\n'), "{line}");
            for at in [48, 77, 112, 137] {
                assert_eq!(line.as_bytes()[at], b' ', "{line}");
            }
        }
    }

    #[test]
    fn a_long_name_pushes_its_row_but_keeps_every_column() {
        let name = "a_function_name_longer_than_the_forty_eight_columns_it_gets";
        assert_eq!(
            row(name, &ALL_YES, "yes (1 sites in 1 callers)"),
            format!(
                "{name} {:<28} {:<34} {:<24} yes (1 sites in 1 callers)",
                "yes", "yes", "yes"
            )
        );
    }

    #[test]
    fn callsite_verdicts_count_sites_callers_and_what_was_skipped() {
        use crate::resolve::callsites::{CallSite, Skipped};
        let site = |caller: &str, offset| CallSite {
            caller: caller.into(),
            offset,
            return_offset: offset + 5,
        };
        let covered = CallSites {
            covered: vec![site("a", 1), site("a", 9), site("b", 4)],
            skipped: vec![],
        };
        assert_eq!(callsite_verdict(&covered), "yes (3 sites in 2 callers)");
        assert_eq!(
            callsite_verdict(&CallSites::default()),
            "no (no direct callers)"
        );
        let skipped = CallSites {
            covered: vec![],
            skipped: vec![
                Skipped::TailCall {
                    caller: "a".into(),
                    offset: 3,
                },
                Skipped::NotraceCaller {
                    caller: "b".into(),
                    offset: 7,
                },
            ],
        };
        assert_eq!(
            callsite_verdict(&skipped),
            "no (1 tail calls, 1 in notrace callers)"
        );
    }
}
