//! Reading the kernel's code as it runs, from `/proc/kcore` (an ELF core file whose `PT_LOAD`
//! segments map kernel virtual addresses to file offsets): alternatives, static calls and
//! `call` thunks already patched, which the vmlinux file on disk would not show.

use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

const PT_LOAD: u32 = 1;

/// Why the running kernel's code cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum KcoreError {
    #[error(
        "cannot read /proc/kcore ({0}): call-site mode reads the running kernel's code there; it \
         needs root (CAP_SYS_RAWIO) and no kernel lockdown (`cat /sys/kernel/security/lockdown`)"
    )]
    Open(std::io::Error),
    #[error("/proc/kcore is not the ELF core file it should be: {0}")]
    Format(&'static str),
    #[error("/proc/kcore maps no kernel code at {address:#x}")]
    Unmapped { address: u64 },
    #[error("cannot read {len} bytes of kernel code at {address:#x} from /proc/kcore: {source}")]
    Read {
        address: u64,
        len: usize,
        source: std::io::Error,
    },
}

/// One `PT_LOAD` segment: kernel addresses `vaddr .. vaddr + size` are at `offset` in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub size: u64,
    pub offset: u64,
}

/// The kernel's memory as `/proc/kcore` shows it.
pub struct Kcore {
    file: File,
    segments: Vec<Segment>,
}

impl Kcore {
    pub fn open() -> Result<Self, KcoreError> {
        Self::open_path(Path::new("/proc/kcore"))
    }

    pub fn open_path(path: &Path) -> Result<Self, KcoreError> {
        let file = File::open(path).map_err(KcoreError::Open)?;
        // The ELF header and program headers are at the start; 64 KiB holds hundreds.
        let mut head = vec![0u8; 64 * 1024];
        let read = file.read_at(&mut head, 0).map_err(KcoreError::Open)?;
        head.truncate(read);
        let segments = parse_segments(&head)?;
        Ok(Self { file, segments })
    }

    /// `len` bytes of kernel memory at `address`.
    pub fn read(&self, address: u64, len: usize) -> Result<Vec<u8>, KcoreError> {
        let segment = self
            .segments
            .iter()
            .find(|s| address >= s.vaddr && address + len as u64 <= s.vaddr + s.size)
            .ok_or(KcoreError::Unmapped { address })?;
        let mut bytes = vec![0u8; len];
        self.file
            .read_exact_at(&mut bytes, segment.offset + (address - segment.vaddr))
            .map_err(|source| KcoreError::Read {
                address,
                len,
                source,
            })?;
        Ok(bytes)
    }
}

/// The `PT_LOAD` segments of an ELF64 little-endian core file, from its first bytes.
pub fn parse_segments(head: &[u8]) -> Result<Vec<Segment>, KcoreError> {
    let u16_at = |at: usize| {
        head.get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        head.get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()))
    };
    let u64_at = |at: usize| {
        head.get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    };
    if head.get(..4) != Some(b"\x7fELF") {
        return Err(KcoreError::Format("no ELF magic"));
    }
    if head.get(4) != Some(&2) || head.get(5) != Some(&1) {
        return Err(KcoreError::Format("not 64-bit little-endian"));
    }
    let phoff = u64_at(0x20).ok_or(KcoreError::Format("short header"))? as usize;
    let phentsize = u16_at(0x36).ok_or(KcoreError::Format("short header"))? as usize;
    let phnum = u16_at(0x38).ok_or(KcoreError::Format("short header"))? as usize;
    if phentsize < 56 {
        return Err(KcoreError::Format("program headers too small"));
    }
    let mut segments = Vec::new();
    for index in 0..phnum {
        let at = phoff + index * phentsize;
        let field =
            |offset: usize| u64_at(at + offset).ok_or(KcoreError::Format("short program headers"));
        let kind = u32_at(at).ok_or(KcoreError::Format("short program headers"))?;
        if kind != PT_LOAD {
            continue;
        }
        segments.push(Segment {
            offset: field(8)?,
            vaddr: field(16)?,
            size: field(32)?,
        });
    }
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF64 core header with a PT_NOTE and two PT_LOAD program headers.
    fn core_head() -> Vec<u8> {
        let mut head = vec![0u8; 64 + 3 * 56];
        head[..4].copy_from_slice(b"\x7fELF");
        head[4] = 2;
        head[5] = 1;
        head[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        head[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        head[0x38..0x3a].copy_from_slice(&3u16.to_le_bytes());
        let mut phdr = |index: usize, kind: u32, offset: u64, vaddr: u64, size: u64| {
            let at = 64 + index * 56;
            head[at..at + 4].copy_from_slice(&kind.to_le_bytes());
            head[at + 8..at + 16].copy_from_slice(&offset.to_le_bytes());
            head[at + 16..at + 24].copy_from_slice(&vaddr.to_le_bytes());
            head[at + 32..at + 40].copy_from_slice(&size.to_le_bytes());
        };
        phdr(0, 4, 0x1000, 0, 0x100);
        phdr(1, PT_LOAD, 0x2000, 0xffff_ffff_8100_0000, 0x20_0000);
        phdr(2, PT_LOAD, 0x40_0000, 0xffff_ffff_c000_0000, 0x1000);
        head
    }

    #[test]
    fn load_segments_are_found_and_notes_skipped() {
        let segments = parse_segments(&core_head()).unwrap();
        assert_eq!(
            segments,
            [
                Segment {
                    vaddr: 0xffff_ffff_8100_0000,
                    size: 0x20_0000,
                    offset: 0x2000
                },
                Segment {
                    vaddr: 0xffff_ffff_c000_0000,
                    size: 0x1000,
                    offset: 0x40_0000
                },
            ]
        );
    }

    #[test]
    fn reads_through_the_segment_map() {
        let dir = std::env::temp_dir().join(format!("hotprof-kcore-{}", std::process::id()));
        let mut file = core_head();
        file.resize(0x2000 + 0x20, 0);
        file[0x2010..0x2015].copy_from_slice(&[0xe8, 1, 2, 3, 4]);
        std::fs::write(&dir, &file).unwrap();
        let kcore = Kcore::open_path(&dir).unwrap();
        assert_eq!(
            kcore.read(0xffff_ffff_8100_0010, 5).unwrap(),
            [0xe8, 1, 2, 3, 4]
        );
        assert!(matches!(
            kcore.read(0xffff_ffff_9000_0000, 4),
            Err(KcoreError::Unmapped { .. })
        ));
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn a_file_that_is_not_a_core_is_refused() {
        assert!(matches!(
            parse_segments(b"not elf"),
            Err(KcoreError::Format("no ELF magic"))
        ));
        let mut truncated = core_head();
        truncated.truncate(100);
        assert!(matches!(
            parse_segments(&truncated),
            Err(KcoreError::Format(_))
        ));
    }
}
