//! Loading the eBPF object with this run's configuration baked into `.rodata`.

use aya::{Ebpf, EbpfError, EbpfLoader};
use profiler_common::{NUM_BUCKETS, names};

use super::TracepointOffsets;

/// The eBPF object built from `profiler-ebpf` by `build.rs`.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"));

/// What the probes need to know before they are loaded.
#[derive(Clone, Debug, Default)]
pub struct ProbeConfig {
    /// Number of probed functions (sizes the per-function maps).
    pub functions: u32,
    /// Only tasks whose tgid is in the `TGIDS` map.
    pub filter_tgids: bool,
    /// A process never traced (hotprof's own, so its work never shows up in the results).
    pub exclude_tgid: Option<u32>,
    pub tid: Option<u32>,
    pub cpu: Option<u32>,
    pub cgroup_id: Option<u64>,
    pub comm: Option<[u8; 16]>,
    pub min_latency_ns: u64,
    pub off_cpu: bool,
    /// 0: none, 1: kernel stacks, 2: kernel and user stacks.
    pub capture_stacks: u8,
    /// Load for `hotprof sample` (sizes the sample map; stacks are kernel + user).
    pub sampling: bool,
    /// Distinct stacks the stack maps hold.
    pub stack_map_size: u32,
    pub offsets: Option<TracepointOffsets>,
}

/// Why loading failed, in one line; a kernel that cannot create task-local storage (older
/// than 5.11, or built without BTF) is named as such, since that is what it lacks.
pub fn load_error_line(error: &EbpfError) -> String {
    let line = super::one_line(error);
    match error {
        EbpfError::MapError(aya::maps::MapError::CreateError { name, .. })
            if name == names::TASK_FRAMES || name == names::FLOOR_START =>
        {
            format!(
                "{line} (per-task state lives in task-local storage: Linux 5.11+ with kernel \
                 BTF, CONFIG_DEBUG_INFO_BTF, is needed)"
            )
        }
        _ => line,
    }
}

/// Loads the maps and program definitions; programs are loaded into the kernel when attached.
/// Task-local storage for the frame stacks needs Linux 5.11 with kernel BTF.
pub fn load(config: &ProbeConfig) -> Result<Ebpf, EbpfError> {
    let functions = config.functions.max(1);
    let filter_tgids = u8::from(config.filter_tgids);
    let tid = config.tid.unwrap_or(0);
    let exclude = config.exclude_tgid.unwrap_or(0);
    let cpu = config.cpu.unwrap_or(u32::MAX);
    let cgroup = config.cgroup_id.unwrap_or(0);
    let comm = config.comm.unwrap_or([0; 16]);
    let off_cpu = u8::from(config.off_cpu);
    let offsets = config.offsets;
    let child_pid = offsets.map_or(44, |o| o.fork_child_pid);

    let mut loader = EbpfLoader::new();
    // TASK_STORAGE maps: aya creates them but has no userspace type; only the programs use them.
    loader.allow_unsupported_maps();
    loader
        .override_global("FILTER_TGIDS", &filter_tgids, true)
        .override_global("FILTER_TID", &tid, true)
        .override_global("EXCLUDE_TGID", &exclude, true)
        .override_global("FILTER_CPU", &cpu, true)
        .override_global("FILTER_CGROUP", &cgroup, true)
        .override_global("FILTER_COMM", &comm, true)
        .override_global("MIN_LATENCY_NS", &config.min_latency_ns, true)
        .override_global("TRACK_OFF_CPU", &off_cpu, true)
        .override_global("CAPTURE_STACKS", &config.capture_stacks, true)
        .override_global("FORK_CHILD_PID_OFFSET", &child_pid, true)
        .map_max_entries(names::STATS, functions)
        .map_max_entries(names::HIST, functions * NUM_BUCKETS)
        .map_max_entries(names::FUNC_IPS, functions * 2)
        .map_max_entries(
            names::STACKS,
            if config.capture_stacks > 0 || config.sampling {
                config.stack_map_size.max(1)
            } else {
                1
            },
        )
        .map_max_entries(
            names::STACK_TOTALS,
            if config.capture_stacks > 0 {
                config.stack_map_size.max(1)
            } else {
                1
            },
        )
        .map_max_entries(
            names::SAMPLES,
            if config.sampling {
                config.stack_map_size.max(1)
            } else {
                1
            },
        );
    loader.load(EBPF_OBJECT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create_error(name: &str) -> EbpfError {
        EbpfError::MapError(aya::maps::MapError::CreateError {
            name: name.into(),
            io_error: std::io::Error::from_raw_os_error(22),
        })
    }

    #[test]
    fn a_kernel_without_task_storage_is_told_what_it_lacks() {
        let line = load_error_line(&create_error(names::TASK_FRAMES));
        assert!(line.contains("TASK_FRAMES"), "{line}");
        assert!(line.contains("Linux 5.11+ with kernel BTF"), "{line}");
        assert!(!line.contains('\n'), "{line}");
        let other = load_error_line(&create_error(names::STATS));
        assert!(!other.contains("5.11"), "{other}");
    }
}
