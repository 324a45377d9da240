//! The eBPF object passes this kernel's verifier: every program hotprof can attach is loaded
//! for real (root needed; run by `cargo xtask test`). Attaching needs kprobes, which the
//! development machines lack, so that part is covered by the VM scenarios.

use aya::programs::{BtfTracePoint, FEntry, FExit, KProbe, TracePoint};
use profiler::attach::{ProbeConfig, load};
use profiler_common::{FENTRY_SLOTS, KPROBE_SLOTS, SYSCALL_SLOTS};

fn config() -> ProbeConfig {
    ProbeConfig {
        functions: 4,
        filter_tgids: true,
        ..Default::default()
    }
}

#[test]
#[ignore = "needs root: loads programs into the running kernel"]
fn every_program_passes_the_verifier() {
    let mut ebpf = load(&config()).expect("maps of the eBPF object are created");
    let mut loaded = Vec::new();
    let kprobes = ["kprobe_entry".to_string(), "kretprobe_exit".to_string()]
        .into_iter()
        .chain((0..KPROBE_SLOTS).map(|slot| format!("kprobe_{slot}")));
    for name in kprobes {
        let name = name.as_str();
        let program: &mut KProbe = ebpf.program_mut(name).unwrap().try_into().unwrap();
        program
            .load()
            .unwrap_or_else(|e| panic!("{name} rejected: {e:?}"));
        loaded.push(name.to_string());
    }
    let mut tracepoints = vec![
        "sched_process_fork".to_string(),
        "sched_process_exit".to_string(),
    ];
    for slot in 0..SYSCALL_SLOTS {
        tracepoints.push(format!("sys_enter_{slot}"));
        tracepoints.push(format!("sys_exit_{slot}"));
    }
    for name in tracepoints {
        let program: &mut TracePoint = ebpf.program_mut(&name).unwrap().try_into().unwrap();
        program
            .load()
            .unwrap_or_else(|e| panic!("{name} rejected: {e:?}"));
        loaded.push(name);
    }
    let btf = aya::Btf::from_sys_fs().expect("kernel BTF (task storage needs it anyway)");
    let switch: &mut BtfTracePoint = ebpf
        .program_mut("sched_switch")
        .unwrap()
        .try_into()
        .unwrap();
    switch
        .load("sched_switch", &btf)
        .unwrap_or_else(|e| panic!("sched_switch rejected: {e:?}"));
    loaded.push("sched_switch".to_string());
    assert_eq!(
        loaded.len(),
        5 + KPROBE_SLOTS as usize + 2 * SYSCALL_SLOTS as usize
    );
}

/// fentry programs are verified against their target's BTF at load time. Kernels that block
/// function tracing refuse the load itself (EINVAL/EPERM/ENOTSUPP); anything else is a bug.
#[test]
#[ignore = "needs root: loads programs into the running kernel"]
fn fentry_slots_verify_or_are_refused_by_the_kernel() {
    let btf = match aya::Btf::from_sys_fs() {
        Ok(btf) => btf,
        Err(e) => {
            eprintln!("no kernel BTF, fentry cannot be checked here: {e}");
            return;
        }
    };
    let mut ebpf = load(&config()).expect("maps of the eBPF object are created");
    for slot in [0, FENTRY_SLOTS - 1] {
        let entry: &mut FEntry = ebpf
            .program_mut(&format!("fentry_{slot}"))
            .unwrap()
            .try_into()
            .unwrap();
        match entry.load("__x64_sys_getpid", &btf) {
            Ok(()) => {}
            Err(e) => {
                let text = profiler::attach::one_line(&e);
                assert!(
                    !text.contains("verifier") || text.contains("tracing progs are blocked"),
                    "fentry_{slot} failed verification: {text}"
                );
                eprintln!(
                    "fentry refused by this kernel (expected where function tracing is blocked): {text}"
                );
                return;
            }
        }
        let exit: &mut FExit = ebpf
            .program_mut(&format!("fexit_{slot}"))
            .unwrap()
            .try_into()
            .unwrap();
        exit.load("__x64_sys_getpid", &btf)
            .expect("fexit verifies where fentry did");
    }
}
