//! Checking the request against the system before anything is loaded.

use super::error::SpecError;
use super::spec::{FilterSpec, Filters, SessionSpec, Targets};
use crate::attach;
use crate::model::{ByField, FilterExpr};

/// Fails unless the run names either processes (`-p`) or a command, not both.
pub fn check_processes(pids: &[u32], command: &[String]) -> anyhow::Result<()> {
    if !command.is_empty() && !pids.is_empty() {
        return Err(SpecError::PidsAndCommand.into());
    }
    Ok(())
}

/// Checks the request against the system before anything is loaded, so a typo costs nothing;
/// returns the filters as the probes compare them.
pub fn validate(spec: &SessionSpec) -> anyhow::Result<Filters> {
    let probe = &spec.probe;
    check_processes(&probe.filter.pids, &spec.command)?;
    let syscalls = matches!(probe.targets, Targets::Syscalls(_));
    if syscalls && probe.by.fields().contains(&ByField::Caller) {
        return Err(SpecError::SyscallCallerKey.into());
    }
    if syscalls
        && probe
            .condition
            .as_ref()
            .is_some_and(FilterExpr::reads_caller)
    {
        return Err(SpecError::SyscallCallerFilter.into());
    }
    if !probe.by.is_empty() && probe.max_keys == 0 {
        return Err(SpecError::NoKeyRoom.into());
    }
    validate_filters(&probe.filter)
}

/// Checks what must hold once the command's own options are checked: the workload can be run
/// and hotprof may load BPF programs.
pub fn check_system(command: &[String]) -> anyhow::Result<()> {
    if let Some(program) = command.first() {
        crate::workload::check_runnable(program)?;
    }
    attach::check_privileges()?;
    Ok(())
}

/// Fails unless `pid` (`-p`) is a running process other than this hotprof.
pub fn check_pid(pid: u32) -> anyhow::Result<()> {
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(SpecError::NoProcess(pid).into());
    }
    // The probes never see hotprof's own calls: they take a traced process tree not to hold
    // it (`wanted_task` in the eBPF programs).
    if pid == std::process::id() {
        return Err(SpecError::Itself(pid).into());
    }
    Ok(())
}

/// Checks filter arguments against the system, turning them into what the probes compare.
fn validate_filters(filter: &FilterSpec) -> anyhow::Result<Filters> {
    for &pid in &filter.pids {
        check_pid(pid)?;
    }
    if let Some(cpu) = filter.cpu {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        if cpu >= cpus {
            let last = cpus - 1;
            return Err(SpecError::NoCpu { cpu, last }.into());
        }
    }
    let comm = match &filter.comm {
        None => None,
        Some(comm) => Some(comm_bytes(comm)?),
    };
    let cgroup_id = match &filter.cgroup {
        None => None,
        Some(path) => {
            use std::os::unix::fs::MetadataExt as _;
            let meta = std::fs::metadata(path).map_err(|source| SpecError::Cgroup {
                path: path.clone(),
                source,
            })?;
            if !meta.is_dir() {
                return Err(SpecError::NotCgroup { path: path.clone() }.into());
            }
            Some(meta.ino())
        }
    };
    Ok(Filters { cgroup_id, comm })
}

/// A command name as the kernel keeps it: 1 to 15 bytes, NUL-padded to 16.
fn comm_bytes(comm: &str) -> anyhow::Result<[u8; 16]> {
    if comm.is_empty() || comm.len() > 15 {
        return Err(SpecError::Comm(comm.to_owned()).into());
    }
    let mut bytes = [0u8; 16];
    bytes[..comm.len()].copy_from_slice(comm.as_bytes());
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::super::spec::ProbeSpec;
    use super::*;

    fn spec(functions: &[&str], syscalls: &[&str]) -> SessionSpec {
        let names = |names: &[&str]| names.iter().map(|s| s.to_string()).collect();
        let targets = match (functions, syscalls) {
            (_, []) => Targets::Functions(names(functions)),
            _ => Targets::Syscalls(names(syscalls)),
        };
        SessionSpec {
            probe: ProbeSpec {
                targets,
                ..ProbeSpec::default()
            },
            ..SessionSpec::default()
        }
    }

    fn error(result: anyhow::Result<Filters>) -> SpecError {
        match result {
            Ok(_) => panic!("accepted"),
            Err(err) => err.downcast().expect("a SpecError"),
        }
    }

    #[test]
    fn a_syscall_has_no_kernel_caller() {
        assert!(validate(&spec(&["vfs_read"], &[])).is_ok());
        let mut by_caller = spec(&[], &["getpid"]);
        by_caller.probe.by = crate::model::KeySpec::new(vec![ByField::Caller]).unwrap();
        assert!(matches!(
            error(validate(&by_caller)),
            SpecError::SyscallCallerKey
        ));
    }

    #[test]
    fn pids_or_a_command_not_both() {
        let mut both = spec(&["vfs_read"], &[]);
        both.probe.filter.pids = vec![1];
        both.command = vec!["true".into()];
        assert!(matches!(error(validate(&both)), SpecError::PidsAndCommand));
        assert!(check_processes(&[1], &[]).is_ok());
        assert!(check_processes(&[], &["true".into()]).is_ok());
    }

    #[test]
    fn filters_are_checked_against_the_system() {
        let mut no_pid = spec(&["vfs_read"], &[]);
        no_pid.probe.filter.pids = vec![u32::MAX];
        assert!(matches!(
            error(validate(&no_pid)),
            SpecError::NoProcess(u32::MAX)
        ));
        // The probes take hotprof never to be in the traced process tree.
        let mut itself = spec(&["vfs_read"], &[]);
        itself.probe.filter.pids = vec![std::process::id()];
        assert!(matches!(error(validate(&itself)), SpecError::Itself(_)));
        let mut cpu = spec(&["vfs_read"], &[]);
        cpu.probe.filter.cpu = Some(100_000);
        assert!(matches!(
            error(validate(&cpu)),
            SpecError::NoCpu { cpu: 100_000, .. }
        ));
        let mut cgroup = spec(&["vfs_read"], &[]);
        cgroup.probe.filter.cgroup = Some("/proc/self/status".into());
        assert!(matches!(
            error(validate(&cgroup)),
            SpecError::NotCgroup { .. }
        ));
        let mut missing = spec(&["vfs_read"], &[]);
        missing.probe.filter.cgroup = Some("/no/such/cgroup".into());
        assert!(matches!(
            error(validate(&missing)),
            SpecError::Cgroup { path, .. } if path == std::path::Path::new("/no/such/cgroup")
        ));
    }

    #[test]
    fn a_comm_is_one_to_fifteen_bytes_nul_padded() {
        assert_eq!(&comm_bytes("dd").unwrap()[..3], b"dd\0");
        assert!(comm_bytes("").is_err());
        assert!(comm_bytes("sixteen_bytes_xx").is_err());
        assert_eq!(comm_bytes("fifteen_bytes_x").unwrap()[15], 0);
    }
}
