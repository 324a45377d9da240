//! `empty_probe [--timed] MODE TARGET -- CMD [ARGS]`: attaches an *empty* probe pair
//! (programs that return at once, `profiler-ebpf/src/empty.rs`) to TARGET, runs CMD, detaches,
//! and exits with CMD's status. `cargo xtask bench` uses it as the floor each mechanism costs,
//! to compare hotprof's probes with. Not installed with hotprof.
//!
//! With `--timed` the pair is the *timing floor* instead: a per-task start time and one
//! histogram bucket per call, the least any per-call latency tool does; it prints
//! `calls N` (every call it timed) at the end, so the bench can check it did the work.
//!
//! MODE is `kprobe` (kprobe + kretprobe, kernel 4.1+), `fentry` (fentry + fexit, 5.5+ with
//! BTF), `tracepoint` (TARGET is a syscall name: `syscalls/sys_enter_TARGET` and
//! `sys_exit_TARGET`, 4.7+) or `raw` (TARGET is an x86-64 syscall number: the raw tracepoints
//! `raw_syscalls/sys_enter` and `sys_exit` as BTF tracepoints, 5.5+ with BTF, which run for
//! every syscall; the empty pair
//! ignores TARGET, the timing floor times only that syscall, found by number as hotprof does)
//! or `session` (one program at TARGET's entry and return through a kprobe.session link, 6.10+
//! with BTF; the floor keeps its start time in the call's session cookie) or `fsession` (the
//! same as one fsession program on TARGET's trampoline, 7.0+) or `multi` (fentry's pair of
//! programs through two tracing-multi links on TARGET alone, 7.x on x86-64).

use std::os::fd::AsFd as _;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use aya::maps::{Array, PerCpuArray};
use aya::programs::{BtfTracePoint, FEntry, FExit, KProbe, TracePoint};
use aya::{Btf, Ebpf, EbpfLoader};
use profiler::sys::bpf::link_create_tracing_multi;
use profiler_common::names;

/// The same object hotprof loads; the empty programs live in it beside the real ones.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"));

const USAGE: &str = "usage: empty_probe [--timed] kprobe|fentry|tracepoint|raw|session|fsession|multi TARGET -- CMD [ARGS]";

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
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let timed = args.first().is_some_and(|a| a == "--timed");
    if timed {
        args.remove(0);
    }
    // The programs of empty.rs: `empty_*` or the timing floor's `floor_*`.
    let kind = if timed { "floor" } else { "empty" };
    let (mode, target, command) = match args.as_slice() {
        [mode, target, dashes, command @ ..] if dashes == "--" && !command.is_empty() => {
            (mode.as_str(), target.as_str(), command)
        }
        _ => bail!("{USAGE}"),
    };
    let mut ebpf = load()?;
    // The tracing-multi links (`multi`), held until the command has run.
    let mut links = Vec::new();
    match mode {
        "kprobe" => {
            // The program's section (kprobe or kretprobe) decides which one it attaches as.
            for program in [format!("{kind}_kprobe"), format!("{kind}_kretprobe")] {
                let program = program.as_str();
                let probe: &mut KProbe = program_mut(&mut ebpf, program)?;
                probe.load().with_context(|| format!("loading {program}"))?;
                probe
                    .attach(target, 0)
                    .with_context(|| format!("attaching {program} to {target}"))?;
            }
        }
        "fentry" => {
            let btf = Btf::from_sys_fs().context("fentry needs /sys/kernel/btf/vmlinux")?;
            let entry: &mut FEntry = program_mut(&mut ebpf, &format!("{kind}_fentry"))?;
            entry
                .load(target, &btf)
                .with_context(|| format!("loading fentry for {target}"))?;
            entry.attach().context("attaching fentry")?;
            let exit: &mut FExit = program_mut(&mut ebpf, &format!("{kind}_fexit"))?;
            exit.load(target, &btf)
                .with_context(|| format!("loading fexit for {target}"))?;
            exit.attach().context("attaching fexit")?;
        }
        "tracepoint" => {
            for (program, event) in [
                (format!("{kind}_sys_enter"), format!("sys_enter_{target}")),
                (format!("{kind}_sys_exit"), format!("sys_exit_{target}")),
            ] {
                let program = program.as_str();
                let tracepoint: &mut TracePoint = program_mut(&mut ebpf, program)?;
                tracepoint
                    .load()
                    .with_context(|| format!("loading {program}"))?;
                tracepoint
                    .attach("syscalls", &event)
                    .with_context(|| format!("attaching {program} to syscalls/{event}"))?;
            }
        }
        "raw" => {
            let number: u32 = target
                .parse()
                .with_context(|| format!("raw mode takes a syscall number, not {target:?}"))?;
            // Slot 0 (stored plus one) for the timed syscall, as hotprof's table holds it.
            let mut slots: Array<_, u32> = Array::try_from(
                ebpf.map_mut("RAW_SYSCALL_SLOTS")
                    .context("the eBPF object has no RAW_SYSCALL_SLOTS map")?,
            )?;
            slots
                .set(number, 1, 0)
                .with_context(|| format!("syscall number {number}"))?;
            // BTF tracepoints, as hotprof attaches the pair with this object.
            let btf = Btf::from_sys_fs().context("raw mode needs /sys/kernel/btf/vmlinux")?;
            for (program, event) in [
                (format!("{kind}_raw_sys_enter"), "sys_enter"),
                (format!("{kind}_raw_sys_exit"), "sys_exit"),
            ] {
                let program = program.as_str();
                let tracepoint: &mut BtfTracePoint = program_mut(&mut ebpf, program)?;
                tracepoint
                    .load(event, &btf)
                    .with_context(|| format!("loading {program}"))?;
                tracepoint
                    .attach()
                    .with_context(|| format!("attaching {program} to raw_syscalls/{event}"))?;
            }
        }
        "session" => {
            let functions =
                profiler::resolve::kernel_functions().context("reading /proc/kallsyms")?;
            let address = functions
                .resolve(target, &|_| false)
                .ok()
                .and_then(|targets| targets.first().map(|t| t.address))
                .with_context(|| format!("no kernel function {target}"))?;
            let btf = profiler::attach::kernel_btf()?;
            let kfuncs = profiler::attach::kfunc_ids(btf)?;
            let program = format!("{kind}_session");
            let probe: &mut KProbe = program_mut(&mut ebpf, &program)?;
            probe
                .load_for_session_link(&kfuncs)
                .with_context(|| format!("loading {program}"))?;
            probe
                .attach_session(&[(address, 0)])
                .with_context(|| format!("attaching {program} to {target}"))?;
        }
        "fsession" => {
            let btf = profiler::attach::kernel_btf()?;
            let id = btf
                .function(target)
                .with_context(|| format!("{target} is not a function in the kernel's BTF"))?;
            let fsession = btf
                .enumerator("BPF_TRACE_FSESSION")
                .context("this kernel has no fsession (Linux 7.0)")?;
            let kfuncs = profiler::attach::kfunc_ids(btf)?;
            let program = format!("{kind}_fsession");
            let entry: &mut FEntry = program_mut(&mut ebpf, &program)?;
            entry
                .load_for_fsession(id, fsession as u32, &kfuncs)
                .with_context(|| format!("loading {program} for {target}"))?;
            entry
                .attach()
                .with_context(|| format!("attaching {program} to {target}"))?;
        }
        "multi" => {
            let btf = profiler::attach::kernel_btf()?;
            let id = btf
                .trampoline_target(target)
                .map_err(|why| anyhow::anyhow!("{target}: {why}"))?;
            let (entry_type, exit_type) =
                profiler::attach::tracing_multi_attach_types().map_err(anyhow::Error::msg)?;
            let entry: &mut FEntry = program_mut(&mut ebpf, &format!("{kind}_fentry"))?;
            entry
                .load_for_multi(entry_type)
                .context("loading fentry for a tracing-multi link")?;
            links.push(
                link_create_tracing_multi(entry.fd()?.as_fd(), entry_type, &[id], &[0])
                    .with_context(|| format!("linking fentry.multi to {target}"))?,
            );
            let exit: &mut FExit = program_mut(&mut ebpf, &format!("{kind}_fexit"))?;
            exit.load_for_multi(exit_type)
                .context("loading fexit for a tracing-multi link")?;
            links.push(
                link_create_tracing_multi(exit.fd()?.as_fd(), exit_type, &[id], &[0])
                    .with_context(|| format!("linking fexit.multi to {target}"))?,
            );
        }
        other => bail!("unknown mode {other:?}; {USAGE}"),
    }
    let status = Command::new(&command[0])
        .args(&command[1..])
        .status()
        .with_context(|| format!("could not run {}", command[0]))?;
    if timed {
        println!("calls {}", floor_calls(&ebpf)?);
    }
    drop(links);
    drop(ebpf);
    Ok(status.code().map_or(1, |code| code.clamp(0, 255) as u8))
}

/// Every call the timing floor timed: its histogram summed over buckets and CPUs.
fn floor_calls(ebpf: &Ebpf) -> Result<u64> {
    let hist: PerCpuArray<_, u64> = PerCpuArray::try_from(
        ebpf.map("FLOOR_HIST")
            .context("the eBPF object has no FLOOR_HIST map")?,
    )?;
    let mut total = 0;
    for per_cpu in hist.iter() {
        total += per_cpu?.iter().sum::<u64>();
    }
    Ok(total)
}

/// Loads the object with hotprof's big maps at their smallest: these programs do not use them.
fn load() -> Result<Ebpf> {
    let mut loader = EbpfLoader::new();
    // The floor's task storage: aya creates it but has no userspace type for it.
    loader.allow_unsupported_maps();
    loader.map_max_entries(names::TGIDS, 1);
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
