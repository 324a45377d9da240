//! Loading the eBPF object with this run's configuration baked into `.rodata`.
//!
//! `profiler-ebpf` builds three objects from the same programs, differing in where each task's
//! frame stack lives: task-local storage (`profiler`, Linux 5.11+ with kernel BTF) or a hash
//! map keyed by task (`profiler-compat`, for older kernels such as 5.10). aya creates
//! every map of an object when it loads it, so on a kernel without task storage the first
//! object fails as a whole, at its task-storage map; the compat object is loaded instead.
//! The third, `profiler-plain`, is `profiler` with every per-call option fixed at its default
//! at compile time: a run that sets none of them (the common `hotprof --fn F`) loads it and
//! pays no instruction per call for them (~90 fewer per getpid call in every mode, a TCG
//! count: `cargo xtask bench --only insns`).

use std::path::Path;

use aya::{Ebpf, EbpfError, EbpfLoader, maps::MapError};
use profiler_common::{
    BY_FIELDS_MAX, FILTER_CONDITIONS_MAX, FilterCond, HIST_CHUNKS, SLOT_PROGRAMS, SLOWEST_MAX,
    StackCapture, globals, keys::op, names,
};

use super::error::one_line;
use super::format::TracepointOffsets;
use crate::model::TaskStore;

/// The main eBPF object built from `profiler-ebpf` by `build.rs`: task-local storage.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"));
/// The main object with every per-call option at its default, for the runs that set none.
static PLAIN_EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler-plain"));
/// The same programs with a hash map for the per-task state, for kernels without task storage.
static COMPAT_EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler-compat"));

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
    pub capture_stacks: StackCapture,
    /// `--stacks-every N`: walk the stacks of a random 1 in N calls (0 or 1: every call).
    pub stack_sample_every: u32,
    /// Load for `hotprof sample` (sizes the sample map; stacks are kernel + user).
    pub sampling: bool,
    /// Distinct stacks the stack maps hold.
    pub stack_map_size: u32,
    pub offsets: Option<TracepointOffsets>,
    /// `--by`: the key's field codes (all zero: no keys).
    pub by: [u8; BY_FIELDS_MAX],
    /// `--by`: key slots per CPU.
    pub max_keys: u32,
    /// `--slowest N`: calls kept per function and CPU (0: off).
    pub slowest: u32,
    /// `--filter`: the conditions (all `op::NONE`: none) and a comm condition's value.
    pub conditions: [FilterCond; FILTER_CONDITIONS_MAX],
    pub condition_comm: [u8; 16],
    /// `--children`: bit `f` set for each slot `f` timed only inside a parent's frame.
    pub child_slots: u64,
    /// `sample --inside F`: sample only tasks with a probed frame open.
    pub sample_inside: bool,
    /// `--counter`: the PMU events the probes read per call, in order (at most
    /// `PMU_EVENTS_MAX`; their perf events go in after the load, [`super::PmuCounters`]).
    pub pmu_events: Vec<crate::model::PmuEvent>,
    /// Load the main object even if no per-call option is set: the overhead calibration of
    /// a run that sets some (it cannot copy them all: filters would skip its calls) must
    /// measure the programs the run uses.
    pub main_object: bool,
}

impl ProbeConfig {
    /// Histogram slots of the `--by` keys, which follow the functions' in `HIST`/`OCCUPIED`.
    pub fn key_slots(&self) -> u32 {
        if self.by[0] == 0 { 0 } else { self.max_keys }
    }

    /// Whether the run sets an option the probes read at every call (`frames::per_call` in
    /// `profiler-ebpf`); without one, the task-storage object's plain build is loaded. The
    /// per-task filters (`--tid`, the process tree, hotprof itself) are read once per task
    /// and stay configurable there.
    pub fn sets_per_call_options(&self) -> bool {
        self.main_object
            || self.cpu.is_some()
            || self.cgroup_id.is_some()
            || self.comm.is_some()
            || self.min_latency_ns != 0
            || self.off_cpu
            || self.capture_stacks.any()
            || self.by.iter().any(|&code| code != 0)
            || self.slowest != 0
            || self
                .conditions
                .iter()
                .any(|condition| condition.op != op::NONE)
            || self.child_slots != 0
            || !self.pmu_events.is_empty()
    }
}

/// A loaded object and where its probes keep per-task state.
pub struct Loaded {
    pub ebpf: Ebpf,
    pub task_store: TaskStore,
}

/// Why no eBPF object could be loaded, in one line. (Boxed: aya's errors are large.)
#[derive(Debug, thiserror::Error)]
pub enum EbpfLoadError {
    #[error("{}", one_line(.0))]
    Object(Box<EbpfError>),
    /// The kernel has no task-local storage, and the hash-map object failed too.
    #[error(
        "{} (loading the hash-map object, as this kernel cannot create task-local storage: {})",
        one_line(.hash_map),
        one_line(.task_storage)
    )]
    Compat {
        task_storage: Box<EbpfError>,
        hash_map: Box<EbpfError>,
    },
}

/// Loads the maps and program definitions of the object this kernel can run; programs are
/// loaded into the kernel when attached. Task-local storage first, unless the kernel has no
/// BTF (the task-storage helpers take BTF-typed task pointers); the hash-map object when the
/// kernel cannot create task storage.
pub fn load(config: &ProbeConfig) -> Result<Loaded, EbpfLoadError> {
    let kernel_btf = Path::new("/sys/kernel/btf/vmlinux").exists();
    let task_storage = match first_choice(kernel_btf) {
        TaskStore::TaskStorage => match load_object(config, TaskStore::TaskStorage) {
            Ok(ebpf) => {
                return Ok(Loaded {
                    ebpf,
                    task_store: TaskStore::TaskStorage,
                });
            }
            Err(error) if lacks_task_storage(&error) => Some(error),
            Err(error) => return Err(EbpfLoadError::Object(Box::new(error))),
        },
        TaskStore::HashMap => None,
    };
    match (load_object(config, TaskStore::HashMap), task_storage) {
        (Ok(ebpf), _) => Ok(Loaded {
            ebpf,
            task_store: TaskStore::HashMap,
        }),
        (Err(hash_map), Some(task_storage)) => Err(EbpfLoadError::Compat {
            task_storage: Box::new(task_storage),
            hash_map: Box::new(hash_map),
        }),
        (Err(error), None) => Err(EbpfLoadError::Object(Box::new(error))),
    }
}

/// The store to try first: task-local storage, unless the kernel has no BTF to type the task
/// pointers its helpers take.
fn first_choice(kernel_btf: bool) -> TaskStore {
    if kernel_btf {
        TaskStore::TaskStorage
    } else {
        TaskStore::HashMap
    }
}

/// Whether the task-storage object failed because the kernel cannot create task-local
/// storage (before 5.11 the map type is unknown: EINVAL): then the hash-map object does the
/// same work. Anything else (no permission, no memory) would fail that one too.
fn lacks_task_storage(error: &EbpfError) -> bool {
    const EOPNOTSUPP: i32 = 95;
    // The kernel's internal ENOTSUPP, which some map checks return as is.
    const ENOTSUPP: i32 = 524;
    match error {
        EbpfError::MapError(MapError::CreateError { name, io_error }) => {
            (name == names::TASK_FRAMES || name == names::FLOOR_START)
                && matches!(
                    io_error.raw_os_error(),
                    Some(libc::EINVAL | EOPNOTSUPP | ENOTSUPP)
                )
        }
        _ => false,
    }
}

/// Loads one object, the one whose per-task state is in `store`, with this run's
/// configuration.
pub fn load_object(config: &ProbeConfig, store: TaskStore) -> Result<Ebpf, EbpfError> {
    let functions = config.functions.max(1);
    // Function slots, each PMU event's function slots (`--counter`), then the key slots
    // (`--by`).
    let pmu_events = config.pmu_events.len() as u8;
    let key_base = functions * (1 + u32::from(pmu_events));
    let slots = key_base + config.key_slots();
    // Every CPU may meet every key; the entry of a key another CPU met holds 0 for this one.
    let cpus = aya::util::nr_cpus().map_or(1, |n| n as u32);
    let key_entries = (config.key_slots() * cpus).max(1);
    let filter_tgids = u8::from(config.filter_tgids);
    let tid = config.tid.unwrap_or(0);
    let exclude = config.exclude_tgid.unwrap_or(0);
    let cpu = config.cpu.unwrap_or(u32::MAX);
    let cgroup = config.cgroup_id.unwrap_or(0);
    let comm = config.comm.unwrap_or([0; 16]);
    let off_cpu = u8::from(config.off_cpu);
    let child_pid = config.offsets.map_or(44, |o| o.fork_child_pid);
    let thread_info_status = super::syscalls::running_thread_info_status_offset();

    let capture_stacks = config.capture_stacks as u8;
    let stack_sample_every = config.stack_sample_every.max(1);
    let sample_inside = u8::from(config.sample_inside);
    // No CO-RE relocations in our objects (the build script checks), so the kernel's BTF,
    // which `EbpfLoader::new` parses for those alone, is not needed to load them.
    let mut loader = EbpfLoader::without_kernel_btf();
    loader.skip_programs(unused_slot_programs(functions));
    match store {
        // TASK_STORAGE maps: aya creates them but has no userspace type; only the programs
        // use them.
        TaskStore::TaskStorage => {
            loader.allow_unsupported_maps();
        }
        TaskStore::HashMap => raise_memlock_limit(),
    }
    loader
        .override_global(globals::FILTER_TGIDS, &filter_tgids, true)
        .override_global(globals::FILTER_TID, &tid, true)
        .override_global(globals::EXCLUDE_TGID, &exclude, true)
        .override_global(globals::FILTER_CPU, &cpu, true)
        .override_global(globals::FILTER_CGROUP, &cgroup, true)
        .override_global(globals::FILTER_COMM, &comm, true)
        .override_global(globals::MIN_LATENCY_NS, &config.min_latency_ns, true)
        .override_global(globals::TRACK_OFF_CPU, &off_cpu, true)
        .override_global(globals::CAPTURE_STACKS, &capture_stacks, true)
        .override_global(globals::STACK_SAMPLE_EVERY, &stack_sample_every, true)
        .override_global(globals::FORK_CHILD_PID_OFFSET, &child_pid, true)
        .override_global(
            globals::THREAD_INFO_STATUS_OFFSET,
            &thread_info_status,
            true,
        )
        .override_global(globals::BY_FIELDS, &config.by, true)
        .override_global(globals::MAX_KEYS, &config.max_keys, true)
        .override_global(globals::KEY_SLOT_BASE, &key_base, true)
        .override_global(globals::SLOWEST_N, &config.slowest, true)
        .override_global(globals::FILTERS, &config.conditions, true)
        .override_global(globals::CHILD_SLOTS, &config.child_slots, true)
        .override_global(globals::SAMPLE_INSIDE, &sample_inside, true)
        .override_global(globals::FILTER_COMM_VALUE, &config.condition_comm, true)
        .override_global(globals::PMU_EVENT_COUNT, &pmu_events, true)
        .override_global(globals::FUNCTION_SLOTS, &functions, true)
        .map_max_entries(
            names::SLOWEST,
            if config.slowest > 0 {
                functions * SLOWEST_MAX
            } else {
                1
            },
        )
        .map_max_entries(names::SLOWEST_FLOOR, functions)
        .map_max_entries(names::HIST, slots * HIST_CHUNKS)
        .map_max_entries(names::OCCUPIED, slots)
        .map_max_entries(names::KEY_SLOTS, key_entries)
        .map_max_entries(names::FUNC_IPS, functions * 2)
        .map_max_entries(
            names::STACKS,
            if config.capture_stacks.any() || config.sampling {
                config.stack_map_size.max(1)
            } else {
                1
            },
        )
        .map_max_entries(
            names::STACK_TOTALS,
            if config.capture_stacks.any() {
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
    loader.load(match store {
        TaskStore::TaskStorage if config.sets_per_call_options() => EBPF_OBJECT,
        TaskStore::TaskStorage => PLAIN_EBPF_OBJECT,
        TaskStore::HashMap => COMPAT_EBPF_OBJECT,
    })
}

/// The slot programs past the first `used` (one per probed function, call site or syscall),
/// which no attach step of this run asks for.
fn unused_slot_programs(used: u32) -> impl Iterator<Item = String> {
    SLOT_PROGRAMS
        .into_iter()
        .flat_map(move |(prefix, count)| (used..count).map(move |slot| format!("{prefix}{slot}")))
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK (64 KiB by default there), which the
/// per-task hash map alone exceeds; later kernels charge the memory cgroup instead. Best
/// effort: without CAP_SYS_RESOURCE the limit stays and the map that does not fit is named.
/// (The workload inherits the raised limit, as it does the raised fd limit.)
fn raise_memlock_limit() {
    use crate::sys::rlimit::{self, Limit, Resource, UNLIMITED};
    let unlimited = Limit {
        current: UNLIMITED,
        max: UNLIMITED,
    };
    // On failure the limit is left as it was.
    let _ = rlimit::set(Resource::LockedMemory, unlimited);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create_error(name: &str, errno: i32) -> EbpfError {
        EbpfError::MapError(MapError::CreateError {
            name: name.into(),
            io_error: std::io::Error::from_raw_os_error(errno),
        })
    }

    #[test]
    fn a_kernel_without_task_storage_gets_the_hash_map_object() {
        // 5.10: the map type is unknown (EINVAL), at whichever task-storage map comes first.
        assert!(lacks_task_storage(&create_error(
            names::TASK_FRAMES,
            libc::EINVAL
        )));
        assert!(lacks_task_storage(&create_error(
            names::FLOOR_START,
            libc::EINVAL
        )));
        assert!(lacks_task_storage(&create_error(names::TASK_FRAMES, 524)));
        // Would fail the other object too, or is not about task storage at all.
        assert!(!lacks_task_storage(&create_error(
            names::TASK_FRAMES,
            libc::EPERM
        )));
        assert!(!lacks_task_storage(&create_error(
            names::HIST,
            libc::EINVAL
        )));
        assert!(!lacks_task_storage(&EbpfError::NoBTF));
        // No kernel BTF: task storage is no use, whatever the map would do.
        assert_eq!(first_choice(true), TaskStore::TaskStorage);
        assert_eq!(first_choice(false), TaskStore::HashMap);
    }

    #[test]
    fn only_runs_without_per_call_options_get_the_plain_object() {
        let plain = ProbeConfig {
            functions: 3,
            filter_tgids: true,
            exclude_tgid: Some(1),
            tid: Some(7),
            stack_sample_every: 8,
            sample_inside: true,
            ..Default::default()
        };
        assert!(!plain.sets_per_call_options());
        let mut condition = plain.conditions;
        condition[1].op = op::EQ;
        for each in [
            ProbeConfig {
                cpu: Some(0),
                ..plain.clone()
            },
            ProbeConfig {
                cgroup_id: Some(1),
                ..plain.clone()
            },
            ProbeConfig {
                comm: Some([b'x'; 16]),
                ..plain.clone()
            },
            ProbeConfig {
                min_latency_ns: 1,
                ..plain.clone()
            },
            ProbeConfig {
                off_cpu: true,
                ..plain.clone()
            },
            ProbeConfig {
                capture_stacks: StackCapture::Kernel,
                ..plain.clone()
            },
            ProbeConfig {
                by: [0, 0, 1],
                ..plain.clone()
            },
            ProbeConfig {
                slowest: 1,
                ..plain.clone()
            },
            ProbeConfig {
                conditions: condition,
                ..plain.clone()
            },
            ProbeConfig {
                child_slots: 2,
                ..plain.clone()
            },
            ProbeConfig {
                main_object: true,
                ..plain.clone()
            },
        ] {
            assert!(each.sets_per_call_options(), "{each:?}");
        }
    }

    #[test]
    fn only_the_slots_a_run_uses_are_loaded() {
        let skipped: Vec<String> = unused_slot_programs(1).collect();
        for used in [
            "kprobe_0",
            "fentry_0",
            "fexit_0",
            "sys_enter_0",
            "sys_exit_0",
        ] {
            assert!(!skipped.iter().any(|name| name == used), "{used}");
        }
        for unused in ["kprobe_1", "fexit_63", "sys_exit_15"] {
            assert!(skipped.iter().any(|name| name == unused), "{unused}");
        }
        assert_eq!(skipped.len(), 3 * 63 + 2 * 15);
        // Past the syscall slots, only function slots are left out; at 64, nothing.
        assert!(unused_slot_programs(16).all(|name| !name.starts_with("sys_")));
        assert_eq!(unused_slot_programs(64).count(), 0);
    }

    #[test]
    fn load_errors_are_one_line_and_name_both_objects_when_both_failed() {
        let both = EbpfLoadError::Compat {
            task_storage: Box::new(create_error(names::TASK_FRAMES, libc::EINVAL)),
            hash_map: Box::new(create_error(names::TASK_FRAMES_BY_TASK, libc::EPERM)),
        }
        .to_string();
        assert!(
            both.starts_with("map error: failed to create map `TASK_FRAMES_BY_TASK`"),
            "{both}"
        );
        assert!(both.contains("cannot create task-local storage"), "{both}");
        assert!(both.contains("`TASK_FRAMES`"), "{both}");
        assert!(!both.contains('\n'), "{both}");
        let one =
            EbpfLoadError::Object(Box::new(create_error(names::HIST, libc::EPERM))).to_string();
        assert!(
            one.starts_with("map error: failed to create map `HIST`"),
            "{one}"
        );
        assert!(!one.contains("task-local"), "{one}");
    }
}
