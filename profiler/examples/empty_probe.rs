//! `empty_probe MODE TARGET -- CMD [ARGS]`: attaches an *empty* probe pair (programs that
//! return at once, `profiler-ebpf/src/empty.rs`) to TARGET, runs CMD, detaches, and exits with
//! CMD's status. `cargo xtask bench` uses it as the floor each mechanism costs, to compare
//! hotprof's probes with. Not installed with hotprof.
//!
//! MODE is `kprobe` (kprobe + kretprobe, kernel 4.1+), `fentry` (fentry + fexit, 5.5+ with
//! BTF) or `tracepoint` (TARGET is a syscall name: `syscalls/sys_enter_TARGET` and
//! `sys_exit_TARGET`, 4.7+).

use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use aya::programs::{FEntry, FExit, KProbe, TracePoint};
use aya::{Btf, Ebpf, EbpfLoader};
use profiler_common::names;

/// The same object hotprof loads; the empty programs live in it beside the real ones.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"));

const USAGE: &str = "usage: empty_probe kprobe|fentry|tracepoint TARGET -- CMD [ARGS]";

fn main() -> ExitCode {
    match run() {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("empty_probe: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<u8> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, target, command) = match args.as_slice() {
        [mode, target, dashes, command @ ..] if dashes == "--" && !command.is_empty() => {
            (mode.as_str(), target.as_str(), command)
        }
        _ => bail!("{USAGE}"),
    };
    let mut ebpf = load()?;
    match mode {
        "kprobe" => {
            // The program's section (kprobe or kretprobe) decides which one it attaches as.
            for program in ["empty_kprobe", "empty_kretprobe"] {
                let probe: &mut KProbe = program_mut(&mut ebpf, program)?;
                probe.load().with_context(|| format!("loading {program}"))?;
                probe
                    .attach(target, 0)
                    .with_context(|| format!("attaching {program} to {target}"))?;
            }
        }
        "fentry" => {
            let btf = Btf::from_sys_fs().context("fentry needs /sys/kernel/btf/vmlinux")?;
            let entry: &mut FEntry = program_mut(&mut ebpf, "empty_fentry")?;
            entry
                .load(target, &btf)
                .with_context(|| format!("loading fentry for {target}"))?;
            entry.attach().context("attaching fentry")?;
            let exit: &mut FExit = program_mut(&mut ebpf, "empty_fexit")?;
            exit.load(target, &btf)
                .with_context(|| format!("loading fexit for {target}"))?;
            exit.attach().context("attaching fexit")?;
        }
        "tracepoint" => {
            for (program, event) in [
                ("empty_sys_enter", format!("sys_enter_{target}")),
                ("empty_sys_exit", format!("sys_exit_{target}")),
            ] {
                let tracepoint: &mut TracePoint = program_mut(&mut ebpf, program)?;
                tracepoint
                    .load()
                    .with_context(|| format!("loading {program}"))?;
                tracepoint
                    .attach("syscalls", &event)
                    .with_context(|| format!("attaching {program} to syscalls/{event}"))?;
            }
        }
        other => bail!("unknown mode {other:?}; {USAGE}"),
    }
    let status = Command::new(&command[0])
        .args(&command[1..])
        .status()
        .with_context(|| format!("could not run {}", command[0]))?;
    drop(ebpf);
    Ok(status.code().map_or(1, |code| code.clamp(0, 255) as u8))
}

/// Loads the object with every map at its smallest: the empty programs use none.
fn load() -> Result<Ebpf> {
    let mut loader = EbpfLoader::new();
    for map in [names::TASKS, names::TGIDS] {
        loader.map_max_entries(map, 1);
    }
    loader
        .load(EBPF_OBJECT)
        .context("could not load the eBPF object (root or CAP_BPF + CAP_PERFMON needed)")
}

fn program_mut<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(name)
        .with_context(|| format!("the eBPF object has no program {name}"))?
        .try_into()
        .with_context(|| format!("{name} has an unexpected program type"))
}
