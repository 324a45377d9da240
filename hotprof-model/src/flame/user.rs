//! User-space addresses of a process → function names, with blazesym.
//!
//! blazesym reads `/proc/PID/maps`, opens each mapped ELF (through `/proc/PID/map_files/`, so
//! deleted or namespaced binaries still work), turns the absolute address into a file offset
//! and then a virtual offset (which is what makes PIE and static-PIE binaries work), and looks
//! it up in the ELF symbol tables (`.symtab`, else `.dynsym`), demangling Rust and C++ names.
//! That needs the process alive. For one that has exited, the mappings hotprof saved while it
//! ran ([`SavedMaps`]) give each address's file and offset, and blazesym names it from the
//! ELF file itself.
//!
//! Symbolization never fails as a whole. An address whose file has no symbol for it becomes
//! `libfoo.so+0x1234` (file name and file offset, what `addr2line -e` wants); an address that
//! belongs to no file, or any address of a process that has gone, becomes `[unknown]` (perf's
//! spelling).

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use blazesym::Pid;
use blazesym::normalize::{Normalizer, UserMeta};
use blazesym::symbolize::source::{Elf, Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};

/// The frame name of an address that cannot be symbolized at all.
pub const UNKNOWN: &str = "[unknown]";

/// Symbolizes user stacks, caching names per (pid, address) for the life of the value, so the
/// many stacks of one process share one pass over its maps and ELF files.
///
/// Not `Send` (blazesym's caches use `Rc`): create it where the report is made, in synchronous
/// code or `spawn_blocking`, not across an `.await` of a multi-threaded runtime.
pub struct UserSymbolizer {
    symbolizer: Symbolizer,
    normalizer: Normalizer,
    cache: RefCell<HashMap<u32, HashMap<u64, String>>>,
    /// Mappings of processes that may have exited since.
    saved: SavedMaps,
}

/// A file-backed executable mapping of a process, as `/proc/PID/maps` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset in the file of `start`.
    pub offset: u64,
    pub path: PathBuf,
}

/// Parses `/proc/PID/maps`, keeping the executable mappings of files.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (range, perms, offset) = (fields.next()?, fields.next()?, fields.next()?);
            let (_device, _inode) = (fields.next()?, fields.next()?);
            let path = fields.collect::<Vec<_>>().join(" ");
            if !perms.contains('x') || !path.starts_with('/') {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
                path: PathBuf::from(path.trim_end_matches(" (deleted)")),
            })
        })
        .collect()
}

/// The executable mappings of processes, saved while they lived: what names the frames of a
/// workload that has exited by the time the report is made.
#[derive(Clone, Debug, Default)]
pub struct SavedMaps(HashMap<u32, Vec<Mapping>>);

impl SavedMaps {
    /// Reads `pid`'s mappings now; keeps the last non-empty reading (an exiting process's
    /// maps are empty). False when there was nothing to read.
    pub fn save(&mut self, pid: u32) -> bool {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return false;
        };
        let maps = parse_maps(&text);
        if maps.is_empty() {
            return false;
        }
        self.0.insert(pid, maps);
        true
    }

    pub fn insert(&mut self, pid: u32, maps: Vec<Mapping>) {
        self.0.insert(pid, maps);
    }

    /// The mapping holding `address` in `pid`, if saved.
    fn find(&self, pid: u32, address: u64) -> Option<&Mapping> {
        self.0
            .get(&pid)?
            .iter()
            .find(|m| m.start <= address && address < m.end)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Default for UserSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for UserSymbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserSymbolizer")
            .field("pids", &self.cache.borrow().len())
            .finish_non_exhaustive()
    }
}

impl UserSymbolizer {
    pub fn new() -> Self {
        Self::with_saved(&SavedMaps::default())
    }

    /// A symbolizer that falls back on `saved` for processes that have gone.
    pub fn with_saved(saved: &SavedMaps) -> Self {
        Self {
            saved: saved.clone(),
            // Names only: no source lines or inlined frames (no DWARF support is built in).
            symbolizer: Symbolizer::builder()
                .enable_code_info(false)
                .enable_inlined_fns(false)
                .build(),
            normalizer: Normalizer::builder().enable_build_ids(false).build(),
            cache: RefCell::new(HashMap::new()),
        }
    }

    /// One frame name per address of process `pid`, in order. Pid 0 (the idle task, kernel
    /// threads) has no user space: all `[unknown]`.
    pub fn symbolize(&self, pid: u32, addresses: &[u64]) -> Vec<String> {
        if pid == 0 {
            return vec![UNKNOWN.to_string(); addresses.len()];
        }
        let mut cache = self.cache.borrow_mut();
        let known = cache.entry(pid).or_default();
        let mut missing: Vec<u64> = addresses
            .iter()
            .copied()
            .filter(|a| !known.contains_key(a))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            let names = self.resolve(pid, &missing);
            known.extend(missing.into_iter().zip(names));
        }
        addresses.iter().map(|a| known[a].clone()).collect()
    }

    /// Names for `addresses` (sorted, distinct), uncached.
    fn resolve(&self, pid: u32, addresses: &[u64]) -> Vec<String> {
        let symbolized = [true, false].into_iter().find_map(|map_files| {
            // map_files needs ptrace rights over the target; symbolic paths are the fallback.
            let mut process = Process::new(Pid::from(pid));
            process.map_files = map_files;
            process.debug_syms = false;
            self.symbolizer
                .symbolize(&Source::Process(process), Input::AbsAddr(addresses))
                .ok()
        });
        let Some(symbolized) = symbolized else {
            // The process is gone (or its maps are unreadable): its saved mappings, if any.
            return self.resolve_saved(pid, addresses);
        };
        let mut names: Vec<Option<String>> = symbolized
            .into_iter()
            .map(|result| match result {
                Symbolized::Sym(sym) if !sym.name.is_empty() => Some(sym.name.into_owned()),
                _ => None,
            })
            .collect();

        // Unsymbolized addresses: name the file and the offset in it, if they are in one.
        let unknown: Vec<u64> = addresses
            .iter()
            .zip(&names)
            .filter(|(_, n)| n.is_none())
            .map(|(a, _)| *a)
            .collect();
        let mut fallbacks = match self
            .normalizer
            .normalize_user_addrs(Pid::from(pid), &unknown)
        {
            Ok(output) => output
                .outputs
                .iter()
                .map(|&(offset, meta)| match output.meta.get(meta) {
                    Some(UserMeta::Elf(elf)) => file_offset_frame(Some(&elf.path), offset),
                    _ => file_offset_frame(None, offset),
                })
                .collect(),
            Err(_) => Vec::new(),
        }
        .into_iter();
        for name in names.iter_mut().filter(|n| n.is_none()) {
            *name = Some(fallbacks.next().unwrap_or_else(|| UNKNOWN.to_string()));
        }
        names
            .into_iter()
            .map(|n| n.unwrap_or_else(|| UNKNOWN.to_string()))
            .collect()
    }
}

impl UserSymbolizer {
    /// Names for the addresses of a process that has gone, through its saved mappings: the
    /// file and the offset in it, looked up in the ELF file.
    fn resolve_saved(&self, pid: u32, addresses: &[u64]) -> Vec<String> {
        addresses
            .iter()
            .map(|&address| {
                let Some(mapping) = self.saved.find(pid, address) else {
                    return UNKNOWN.to_string();
                };
                let offset = address - mapping.start + mapping.offset;
                let mut elf = Elf::new(&mapping.path);
                elf.debug_syms = false;
                match self
                    .symbolizer
                    .symbolize_single(&Source::Elf(elf), Input::FileOffset(offset))
                {
                    Ok(Symbolized::Sym(sym)) if !sym.name.is_empty() => sym.name.into_owned(),
                    _ => file_offset_frame(Some(&mapping.path), offset),
                }
            })
            .collect()
    }
}

/// `libfoo.so+0x1234` for an address at file offset 0x1234 of `/usr/lib/libfoo.so`, or
/// `[unknown]` without a file.
pub fn file_offset_frame(path: Option<&Path>, file_offset: u64) -> String {
    match path.and_then(Path::file_name) {
        Some(name) => format!("{}+{file_offset:#x}", name.to_string_lossy()),
        None => UNKNOWN.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};

    #[inline(never)]
    fn hotprof_known_function(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(31)
    }

    #[test]
    fn symbolizes_a_function_of_this_test_process_by_pid() {
        assert_eq!(hotprof_known_function(1), 31);
        let address = hotprof_known_function as *const () as u64;
        let symbolizer = UserSymbolizer::new();
        // +4: like a return address, inside the function rather than at its first byte.
        let names = symbolizer.symbolize(std::process::id(), &[address + 4, address]);
        // Demangled, without the `::h0123456789abcdef` hash.
        assert_eq!(
            names[0],
            "hotprof_model::flame::user::tests::hotprof_known_function"
        );
        assert_eq!(names[0], names[1]);
        // Cached: a second call answers the same without re-reading anything.
        assert_eq!(
            symbolizer.symbolize(std::process::id(), &[address]),
            names[..1]
        );
    }

    #[test]
    fn a_gone_process_is_named_through_the_mappings_saved_while_it_lived() {
        assert_eq!(hotprof_known_function(2), 62);
        let address = hotprof_known_function as *const () as u64;
        let mut saved = SavedMaps::default();
        assert!(saved.save(std::process::id()));
        // Above the largest pid_max (2^22): a process that is gone, with this one's mappings.
        let gone = 4_194_305;
        let own = saved.0[&std::process::id()].clone();
        saved.insert(gone, own);
        let symbolizer = UserSymbolizer::with_saved(&saved);
        assert_eq!(
            symbolizer.symbolize(gone, &[address + 4, 8]),
            [
                "hotprof_model::flame::user::tests::hotprof_known_function",
                UNKNOWN
            ]
        );
    }

    #[test]
    fn maps_keep_the_executable_mappings_of_files() {
        let text = "\
55d0c0a00000-55d0c0a02000 r--p 00000000 08:01 1234    /usr/bin/dd
55d0c0a02000-55d0c0a10000 r-xp 00002000 08:01 1234    /usr/bin/dd
7f0000000000-7f0000021000 rw-p 00000000 00:00 0 
7f1000000000-7f1000100000 r-xp 00028000 08:01 99      /usr/lib/libc.so.6
7f2000000000-7f2000001000 r-xp 00000000 08:01 77      /tmp/a b (deleted)
7ffc00000000-7ffc00002000 r-xp 00000000 00:00 0       [vdso]
";
        let maps = parse_maps(text);
        assert_eq!(
            maps.iter()
                .map(|m| (m.start, m.offset, m.path.to_string_lossy().into_owned()))
                .collect::<Vec<_>>(),
            [
                (0x55d0c0a02000, 0x2000, "/usr/bin/dd".to_string()),
                (0x7f1000000000, 0x28000, "/usr/lib/libc.so.6".to_string()),
                (0x7f2000000000, 0, "/tmp/a b".to_string()),
            ]
        );
        assert_eq!(maps[0].end, 0x55d0c0a10000);
    }

    #[test]
    fn a_gone_process_and_pid_0_give_unknown_frames() {
        let symbolizer = UserSymbolizer::new();
        // Above the largest pid_max Linux allows (2^22), so it never exists.
        assert_eq!(
            symbolizer.symbolize(4_194_305, &[0x401000, 0x401010]),
            [UNKNOWN, UNKNOWN]
        );
        assert_eq!(symbolizer.symbolize(0, &[0x401000]), [UNKNOWN]);
        assert!(symbolizer.symbolize(1234, &[]).is_empty());
    }

    #[test]
    fn unmapped_addresses_of_a_live_process_are_unknown() {
        let symbolizer = UserSymbolizer::new();
        assert_eq!(symbolizer.symbolize(std::process::id(), &[8]), [UNKNOWN]);
    }

    #[test]
    fn file_offset_frames_name_the_file() {
        assert_eq!(
            file_offset_frame(Some(Path::new("/usr/lib/libfoo.so.1")), 0x123),
            "libfoo.so.1+0x123"
        );
        assert_eq!(file_offset_frame(None, 0x123), UNKNOWN);
        assert_eq!(file_offset_frame(Some(Path::new("/")), 0x123), UNKNOWN);
    }

    /// A tiny program that prints the address of a function of its own, then waits for EOF on
    /// stdin: a live process whose layout the test knows.
    const CHILD: &str = r#"
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn hotprof_static_marker(x: u64) -> u64 { std::hint::black_box(x) ^ 0x5a }
fn main() {
    let f: extern "C" fn(u64) -> u64 = hotprof_static_marker;
    println!("{:#x} {}", f as usize, f(1));
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}
"#;

    /// Builds the child as the guest builds its workloads: static, `+crt-static` (static-pie).
    fn build_static_child(dir: &Path) -> PathBuf {
        let source = dir.join("child.rs");
        let binary = dir.join("hotprof-static-child");
        std::fs::write(&source, CHILD).unwrap();
        rustc_static(&source, &binary, &[]);
        binary
    }

    /// `rustc` from PATH, else the one beside the `cargo` running the tests.
    fn rustc_static(source: &Path, binary: &Path, extra: &[&str]) {
        let beside_cargo =
            std::env::var_os("CARGO").map(|cargo| PathBuf::from(cargo).with_file_name("rustc"));
        let rustc = match beside_cargo {
            Some(path) if path.exists() => path,
            _ => PathBuf::from("rustc"),
        };
        let status = Command::new(&rustc)
            .args([
                "--edition",
                "2024",
                "-C",
                "target-feature=+crt-static",
                "-C",
                "opt-level=1",
            ])
            .args(extra)
            .arg("-o")
            .arg(binary)
            .arg(source)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", rustc.display()));
        assert!(
            status.success(),
            "rustc could not build a +crt-static test program"
        );
    }

    /// `p_type` of each program header of a little-endian ELF64 file.
    fn program_header_types(elf: &[u8]) -> Vec<u32> {
        let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap()) as usize;
        let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
        let (offset, size, count) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
        (0..count)
            .map(|i| u32::from_le_bytes(elf[offset + i * size..][..4].try_into().unwrap()))
            .collect()
    }

    fn spawn(binary: &Path) -> (Child, u64) {
        let mut child = Command::new(binary)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = u64::from_str_radix(
            line.split_whitespace()
                .next()
                .unwrap()
                .trim_start_matches("0x"),
            16,
        )
        .unwrap_or_else(|_| panic!("child printed {line:?}"));
        (child, address)
    }

    fn finish(mut child: Child) {
        drop(child.stdin.take());
        child.wait().unwrap();
    }

    #[test]
    fn symbolizes_a_static_pie_process_and_falls_back_to_file_offsets_when_stripped() {
        let dir = std::env::temp_dir().join(format!("hotprof-flame-user-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let binary = build_static_child(&dir);
        let header = std::fs::read(&binary).unwrap();
        // ET_DYN (position independent, loaded at a random base) without PT_INTERP (static).
        assert_eq!(
            u16::from_le_bytes([header[16], header[17]]),
            3,
            "expected a static-pie binary"
        );
        assert!(
            !program_header_types(&header).contains(&3),
            "PT_INTERP: dynamically linked"
        );

        let (child, address) = spawn(&binary);
        let names = UserSymbolizer::new().symbolize(child.id(), &[address + 1]);
        finish(child);
        assert_eq!(names, ["hotprof_static_marker"]);

        // The same program without symbols: the frame names the file and the file offset.
        let stripped = dir.join("hotprof-static-child-stripped");
        rustc_static(&dir.join("child.rs"), &stripped, &["-C", "strip=symbols"]);
        let (child, address) = spawn(&stripped);
        let names = UserSymbolizer::new().symbolize(child.id(), &[address + 1]);
        finish(child);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            names[0].starts_with("hotprof-static-child-stripped+0x"),
            "{names:?}"
        );
    }
}
