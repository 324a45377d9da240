//! `hotprof list GLOB`: matching functions and which probe modes can attach to each.

use anyhow::Context as _;

use crate::attach;
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
    let kernel = KernelFunctions::from_system().context("cannot read /proc/kallsyms")?;
    let btf = aya::Btf::from_sys_fs().ok();
    let in_btf = |name: &str| {
        btf.as_ref().is_some_and(|b| {
            b.id_by_type_name_kind(name, aya_obj::btf::BtfKind::Func)
                .is_ok()
        })
    };
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
    println!("{:<48} {:<28} fentry", "function", "kprobe");
    for name in &symbols {
        let kprobe = if kernel.is_blacklisted(name) {
            "no (blacklisted)"
        } else if !kprobes {
            "no (kernel has no kprobes)"
        } else {
            "yes"
        };
        let fentry = match (btf.is_some(), in_btf(name), kernel.is_traceable(name)) {
            (false, _, _) => "no (no kernel BTF)",
            (true, false, _) => "no (not in BTF: clone or inlined)",
            (true, true, Some(false)) => "no (notrace)",
            (true, true, _) => "yes",
        };
        println!("{name:<48} {kprobe:<28} {fentry}");
    }
    eprintln!("{} function(s)", symbols.len());
    Ok(0)
}
