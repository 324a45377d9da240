//! Task-local storage (`BPF_MAP_TYPE_TASK_STORAGE`): one value per task, kept in the
//! `task_struct` itself, so finding the current task's value costs no hash and the value is
//! freed with the task. aya-ebpf 0.2.1 has BTF-defined storage maps for cgroups, inodes and
//! sockets but none for tasks; this is the same kind of definition for tasks.
//!
//! The kernel only creates this map type from a BTF definition (key and value types), which is
//! what the `#[btf_map]` layout below is: aya reads the member names and pointee types from
//! the object's BTF. Userspace must load with `EbpfLoader::allow_unsupported_maps`, as aya
//! 0.14 has no userspace type for it (nor needs one: only the programs read it).
//!
//! Minimum kernel 5.11 (task storage and `bpf_get_current_task_btf` in tracing programs),
//! kernel BTF required.

use core::{ffi::c_void, ptr};

pub(crate) use aya_ebpf::bindings::task_struct;
use aya_ebpf::bindings::{BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE, bpf_map_type};
use aya_ebpf::helpers::generated::{bpf_get_current_task_btf, bpf_task_storage_get};

/// A BTF map definition: every member is a pointer whose pointee type encodes one attribute
/// (`[i32; N]` for a number), the libbpf convention aya parses. Never dereferenced.
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: the members are null pointers that only carry types for the map's BTF
// description: they are never dereferenced, so nothing is shared through them. (The loader
// relocates references to the static itself to the map.)
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    pub const fn new() -> Self {
        Self {
            r#type: ptr::null(),
            key: ptr::null(),
            value: ptr::null(),
            max_entries: ptr::null(),
            map_flags: ptr::null(),
        }
    }

    #[inline(always)]
    fn get(&self, task: *mut task_struct, flags: u64) -> Option<*mut T> {
        // SAFETY: the map pointer is relocated by the loader; the verifier only accepts a
        // `task` it trusts (checked at load, not here).
        let value = unsafe {
            bpf_task_storage_get(
                ptr::from_ref(self).cast_mut().cast::<c_void>(),
                task,
                ptr::null_mut(),
                flags,
            )
        };
        (!value.is_null()).then_some(value.cast::<T>())
    }

    #[inline(always)]
    fn get_current(&self, flags: u64) -> Option<*mut T> {
        // SAFETY: the helper takes no arguments and touches no memory; it returns the running
        // task, a pointer the verifier trusts as `get` requires.
        self.get(unsafe { bpf_get_current_task_btf() }, flags)
    }

    /// The value of `task`, if it has one. `task` must be a pointer the verifier trusts (a
    /// `tp_btf` argument, say).
    #[inline(always)]
    pub fn of(&self, task: *mut task_struct) -> Option<*mut T> {
        self.get(task, 0)
    }

    /// The current task's value, if it has one.
    #[inline(always)]
    pub fn current(&self) -> Option<*mut T> {
        self.get_current(0)
    }

    /// The current task's value, created zero-filled if it has none. None when the kernel
    /// could not allocate it or refused a nested use (a probe firing inside task storage code).
    #[inline(always)]
    pub fn current_or_create(&self) -> Option<*mut T> {
        self.get_current(u64::from(BPF_LOCAL_STORAGE_GET_F_CREATE))
    }
}
