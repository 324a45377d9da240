//! x86's bzImage unpacked to the ELF `vmlinux` inside it, which qemu's `-kernel` enters at its
//! PVH entry point (the `XEN_ELFNOTE_PHYS32_ENTRY` note; every Debian kernel from 5.10 on has
//! one). That skips SeaBIOS's Linux loader and the kernel's own decompressor, the part of a
//! boot before the kernel's clock starts: under TCG, booting 7.x's zstd image took 5.2 s
//! (median of 5) and its unpacked `vmlinux` 3.9 s; 6.1's lz4 image 4.2 s and 3.6 s.
//!
//! The one thing that differs for the kernel under test: the decompressor is what places
//! the kernel at a random address (KASLR), so a kernel entered this way runs at its link
//! address. Nothing hotprof does depends on where the kernel lies.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};

/// `HdrS` at 0x202: the boot protocol's setup header.
const SETUP_MAGIC: &[u8] = b"HdrS";
/// Boot protocol 2.08 added the payload's offset and length.
const PAYLOAD_FIELDS_SINCE: u16 = 0x0208;
/// The ELF note qemu looks for to enter a kernel the PVH way.
const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;
const PT_NOTE: u32 = 4;

/// Writes the `vmlinux` inside `bzimage` to `dest`, or says why it cannot be booted that way.
pub fn unpack(bzimage: &Path, dest: &Path) -> Result<()> {
    let image =
        fs::read(bzimage).with_context(|| format!("could not read {}", bzimage.display()))?;
    let payload = payload(&image)?;
    let vmlinux = decompress(payload)?;
    ensure!(
        has_pvh_entry(&vmlinux)?,
        "its vmlinux has no PVH entry note (CONFIG_PVH)"
    );
    // Written aside and renamed into place: another process may be booting it.
    let dir = dest.parent().context("the destination has no directory")?;
    let mut partial = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("could not create a file in {}", dir.display()))?;
    partial
        .write_all(&vmlinux)
        .with_context(|| format!("could not write {}", partial.path().display()))?;
    partial
        .persist(dest)
        .with_context(|| format!("could not write {}", dest.display()))?;
    Ok(())
}

/// The compressed kernel: `payload_offset` (from the end of the real-mode setup sectors) and
/// `payload_length` of the setup header. Its last four bytes are the kernel's own
/// `size_append`, the uncompressed size, which the decompressors do not expect.
fn payload(image: &[u8]) -> Result<&[u8]> {
    ensure!(
        image.get(0x202..0x206) == Some(SETUP_MAGIC),
        "not a bzImage (no setup header)"
    );
    let version = u16::from_le_bytes(image[0x206..0x208].try_into()?);
    ensure!(
        version >= PAYLOAD_FIELDS_SINCE,
        "boot protocol {version:#x} does not locate its payload"
    );
    let setup_sectors = match image[0x1f1] {
        0 => 4,
        sectors => usize::from(sectors),
    };
    let offset = u32::from_le_bytes(image[0x248..0x24c].try_into()?) as usize;
    let length = u32::from_le_bytes(image[0x24c..0x250].try_into()?) as usize;
    let start = (setup_sectors + 1) * 512 + offset;
    image
        .get(start..start + length)
        .and_then(|payload| payload.get(..payload.len().checked_sub(4)?))
        .context("the setup header's payload lies outside the image")
}

/// Decompresses with the tool the payload's magic names (the formats Debian's kernels use).
fn decompress(payload: &[u8]) -> Result<Vec<u8>> {
    let tool: &[&str] = match payload {
        [0x28, 0xb5, 0x2f, 0xfd, ..] => &["zstd", "-d", "-c", "-q"],
        [0x02, 0x21, 0x4c, 0x18, ..] => &["lz4", "-d", "-c", "-q"],
        [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => &["xz", "-d", "-c", "-q"],
        [0x1f, 0x8b, ..] => &["gzip", "-d", "-c", "-q"],
        [a, b, c, d, ..] => {
            bail!("payload compressed in an unknown format ({a:02x}{b:02x}{c:02x}{d:02x})")
        }
        _ => bail!("empty payload"),
    };
    let line = tool.join(" ");
    let mut child = Command::new(tool[0])
        .args(&tool[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not run `{line}` (`cargo xtask setup` installs it)"))?;
    let mut stdin = child.stdin.take().context("no stdin")?;
    let output = std::thread::scope(|scope| {
        // Fed from a thread: the tool's output fills its pipe long before its input is read.
        let feeder = scope.spawn(move || stdin.write_all(payload));
        let output = child.wait_with_output();
        let fed = feeder
            .join()
            .map_err(|_| anyhow::anyhow!("the feeder panicked"))?;
        fed.with_context(|| format!("could not feed `{line}`"))?;
        output.with_context(|| format!("`{line}` did not finish"))
    })?;
    ensure!(
        output.status.success(),
        "`{line}` failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    ensure!(
        output.stdout.starts_with(b"\x7fELF\x02\x01"),
        "`{line}` gave no little-endian ELF64"
    );
    Ok(output.stdout)
}

/// Whether the ELF64 `elf` carries the PVH entry note in one of its `PT_NOTE` segments.
fn has_pvh_entry(elf: &[u8]) -> Result<bool> {
    let u16_at = |at: usize| -> Result<u16> {
        Ok(u16::from_le_bytes(
            elf.get(at..at + 2).context("truncated ELF")?.try_into()?,
        ))
    };
    let u32_at = |at: usize| -> Result<u32> {
        Ok(u32::from_le_bytes(
            elf.get(at..at + 4).context("truncated ELF")?.try_into()?,
        ))
    };
    let u64_at = |at: usize| -> Result<usize> {
        Ok(u64::from_le_bytes(elf.get(at..at + 8).context("truncated ELF")?.try_into()?) as usize)
    };
    let (phoff, phentsize, phnum) = (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?);
    for header in (0..usize::from(phnum)).map(|i| phoff + i * usize::from(phentsize)) {
        if u32_at(header)? != PT_NOTE {
            continue;
        }
        let (start, size) = (u64_at(header + 0x08)?, u64_at(header + 0x20)?);
        let mut at = start;
        while at + 12 <= start + size {
            let (name_size, desc_size, kind) = (u32_at(at)?, u32_at(at + 4)?, u32_at(at + 8)?);
            let name = elf
                .get(at + 12..at + 12 + name_size as usize)
                .context("truncated ELF note")?;
            if name == b"Xen\0" && kind == XEN_ELFNOTE_PHYS32_ENTRY {
                return Ok(true);
            }
            at += 12 + aligned(name_size) + aligned(desc_size);
        }
    }
    Ok(false)
}

/// A note's name or description takes a multiple of four bytes.
fn aligned(size: u32) -> usize {
    (size as usize).div_ceil(4) * 4
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF64 header with one PT_NOTE segment holding `notes`.
    fn elf_with_notes(notes: &[(&[u8], u32)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (name, kind) in notes {
            body.extend((name.len() as u32).to_le_bytes());
            body.extend(4u32.to_le_bytes());
            body.extend(kind.to_le_bytes());
            body.extend(*name);
            body.resize(body.len().div_ceil(4) * 4, 0);
            body.extend([0xaa; 4]);
        }
        let mut elf = vec![0u8; 0x40 + 0x38];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        elf[0x40..0x44].copy_from_slice(&PT_NOTE.to_le_bytes());
        let start = elf.len() as u64;
        elf[0x48..0x50].copy_from_slice(&start.to_le_bytes());
        elf[0x60..0x68].copy_from_slice(&(body.len() as u64).to_le_bytes());
        elf.extend(body);
        elf
    }

    #[test]
    fn finds_the_pvh_note_among_others() {
        let elf = elf_with_notes(&[(b"GNU\0", 3), (b"Xen\0", 6), (b"Xen\0", 18)]);
        assert!(has_pvh_entry(&elf).unwrap());
        let without = elf_with_notes(&[(b"GNU\0", 18), (b"Xen\0", 6)]);
        assert!(!has_pvh_entry(&without).unwrap());
    }

    #[test]
    fn a_file_without_a_setup_header_is_not_a_bzimage() {
        let error = payload(&[0u8; 0x300]).unwrap_err();
        assert_eq!(error.to_string(), "not a bzImage (no setup header)");
    }

    #[test]
    fn the_payload_leaves_out_the_appended_size() {
        let mut image = vec![0u8; 5 * 512 + 16];
        image[0x1f1] = 4;
        image[0x202..0x206].copy_from_slice(SETUP_MAGIC);
        image[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
        image[0x248..0x24c].copy_from_slice(&4u32.to_le_bytes());
        image[0x24c..0x250].copy_from_slice(&10u32.to_le_bytes());
        image[5 * 512 + 4..5 * 512 + 14].copy_from_slice(b"abcdefSIZE");
        assert_eq!(payload(&image).unwrap(), b"abcdef");
    }
}
