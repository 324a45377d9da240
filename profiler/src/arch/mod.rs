//! The machine hotprof's userspace runs on, and what differs with it: syscall numbers
//! (`syscalls_*.rs`) and where the kernel keeps the compat-syscall flag. Instruction decoding
//! for call-site mode is its own concern (`resolve/isa/`, more methods of [`Arch`]); the eBPF
//! programs' registers are `profiler-ebpf/src/arch/`. A new architecture is a variant here and
//! a file per concern, not an edit everywhere.

mod syscalls_aarch64;
mod syscalls_x86_64;

/// An architecture hotprof runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// Every architecture hotprof knows.
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The architecture of this build (hotprof runs on the kernel it probes).
    #[cfg(target_arch = "x86_64")]
    pub const NATIVE: Arch = Arch::X86_64;
    #[cfg(target_arch = "aarch64")]
    pub const NATIVE: Arch = Arch::Aarch64;

    /// As Rust and `uname -m` name it.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// A syscall's name in this architecture's tracefs and symbols, from the name x86-64
    /// gives it: arm64 defines `personality` as `arm64_personality`
    /// (`sys_enter_arm64_personality`, `__arm64_sys_arm64_personality`).
    pub fn tracefs_syscall(self, syscall: &'static str) -> &'static str {
        match (self, syscall) {
            (Arch::Aarch64, "personality") => "arm64_personality",
            _ => syscall,
        }
    }

    /// The symbol of a syscall's entry wrapper: `__x64_sys_getpid`, `__arm64_sys_getpid`.
    pub fn syscall_wrapper(self, syscall: &str) -> String {
        let prefix = match self {
            Arch::X86_64 => "__x64_sys_",
            Arch::Aarch64 => "__arm64_sys_",
        };
        format!("{prefix}{syscall}")
    }

    /// The syscall number of `name` as tracefs names it (`newfstat` for fstat), if this
    /// architecture has that syscall. Numbers are ABI: they never change once assigned.
    pub fn syscall_number(self, name: &str) -> Option<u32> {
        let table = match self {
            Arch::X86_64 => syscalls_x86_64::SYSCALLS,
            Arch::Aarch64 => syscalls_aarch64::SYSCALLS,
        };
        table
            .iter()
            .find(|(known, _)| *known == name)
            .map(|&(_, number)| number)
    }

    /// Another architecture that has syscall `name` when this one does not: `open` is x86-64's
    /// alone (arm64's generic table has only `openat`), so a command line written on x86-64
    /// hears why it fails on arm64.
    pub fn elsewhere(self, name: &str) -> Option<Arch> {
        if self.syscall_number(name).is_some() {
            return None;
        }
        Arch::ALL
            .into_iter()
            .find(|&other| other != self && other.syscall_number(name).is_some())
    }

    /// Offset in `task_struct` of the word holding the compat-syscall flag on kernel
    /// `(major, minor)`: `thread_info` is the first member on both. x86-64: `status`
    /// (`TS_COMPAT`), after `flags`, and since 5.11 also `syscall_work`; arm64: `flags`
    /// (`TIF_32BIT`) itself.
    pub fn compat_word_offset(self, version: Option<(u32, u32)>) -> u32 {
        match (self, version) {
            (Arch::Aarch64, _) => 0,
            (Arch::X86_64, Some(version)) if version < (5, 11) => 8,
            (Arch::X86_64, _) => 16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_syscall_missing_here_is_placed_where_it_exists() {
        assert_eq!(Arch::Aarch64.elsewhere("open"), Some(Arch::X86_64));
        assert_eq!(Arch::Aarch64.elsewhere("fork"), Some(Arch::X86_64));
        assert_eq!(Arch::Aarch64.elsewhere("openat"), None);
        assert_eq!(Arch::X86_64.elsewhere("open"), None);
        assert_eq!(Arch::X86_64.elsewhere("nosuch"), None);
        let unknown = crate::attach::AttachError::UnknownSyscall {
            name: "open".into(),
            elsewhere: Some(Arch::X86_64),
            suggestions: vec!["openat".into()],
        };
        let said = unknown.to_string();
        assert!(
            said.starts_with("unknown syscall 'open': x86_64 has it, ")
                && said.ends_with(" does not (did you mean: openat?)"),
            "{said}"
        );
    }

    #[test]
    fn syscall_numbers_are_each_architecture_s_under_tracefs_names() {
        let x86 = |name| Arch::X86_64.syscall_number(name);
        assert_eq!(x86("read"), Some(0));
        assert_eq!(x86("getpid"), Some(39));
        assert_eq!(x86("newstat"), Some(4));
        assert_eq!(x86("newfstatat"), Some(262));
        assert_eq!(x86("openat"), Some(257));
        assert_eq!(x86("set_mempolicy_home_node"), Some(450));
        assert_eq!(x86("file_setattr"), Some(469));
        assert_eq!(x86("nosuch"), None);
        let arm = |name| Arch::Aarch64.syscall_number(name);
        assert_eq!(arm("read"), Some(63));
        assert_eq!(arm("getpid"), Some(172));
        assert_eq!(arm("getppid"), Some(173));
        assert_eq!(arm("openat"), Some(56));
        assert_eq!(arm("newfstat"), Some(80));
        assert_eq!(arm("newfstatat"), Some(79));
        assert_eq!(arm("personality"), Some(92));
        assert_eq!(arm("arm64_personality"), Some(92));
        assert_eq!(
            Arch::Aarch64.syscall_wrapper(Arch::Aarch64.tracefs_syscall("personality")),
            "__arm64_sys_arm64_personality"
        );
        assert_eq!(Arch::X86_64.tracefs_syscall("personality"), "personality");
        assert_eq!(arm("file_setattr"), Some(469));
        // The generic table has no open, stat or fork: their *at and clone forms only.
        assert_eq!(
            (arm("open"), arm("newstat"), arm("fork")),
            (None, None, None)
        );
        // One number per name, and every number fits the eBPF table (512).
        for table in [syscalls_x86_64::SYSCALLS, syscalls_aarch64::SYSCALLS] {
            for (index, (name, number)) in table.iter().enumerate() {
                assert!(*number < 512, "{name}");
                assert!(
                    table[index + 1..].iter().all(|(other, _)| other != name),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn compat_flag_offset_follows_the_kernel_s_thread_info() {
        let x86 = |version| Arch::X86_64.compat_word_offset(version);
        assert_eq!(x86(Some((5, 10))), 8);
        assert_eq!(x86(Some((4, 19))), 8);
        assert_eq!(x86(Some((5, 11))), 16);
        assert_eq!(x86(Some((6, 18))), 16);
        assert_eq!(x86(None), 16);
        assert_eq!(Arch::Aarch64.compat_word_offset(Some((6, 12))), 0);
    }
}
