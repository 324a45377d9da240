//! Chunked file I/O with an exact count of the read(2)/write(2) calls made,
//! so a profiler's per-call counts can be checked against it.
//!
//! `File::write`/`File::read` are used one call at a time (never
//! `write_all`/`read_to_end`, which hide how many calls they make): each is
//! exactly one system call.

use std::fs::File;
use std::io::{self, Read, Write};

/// Bytes in one MiB.
pub const MIB: u64 = 1 << 20;

/// What a chunked transfer did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Transfer {
    pub bytes: u64,
    /// System calls made, including any interrupted or short ones.
    pub calls: u64,
}

/// Writes `total` bytes to `out` with write calls of at most `chunk` bytes.
pub fn write_chunks(out: &mut impl Write, total: u64, chunk: usize) -> io::Result<Transfer> {
    let buffer = pattern(chunk);
    let mut done = Transfer::default();
    while done.bytes < total {
        let want = usize::try_from(total - done.bytes).map_or(chunk, |left| left.min(chunk));
        done.calls += 1;
        match out.write(&buffer[..want]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => done.bytes += written as u64,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(done)
}

/// Reads `input` to its end with read calls of `chunk` bytes. The final
/// call that returns 0 (end of file) is counted too.
pub fn read_chunks(input: &mut impl Read, chunk: usize) -> io::Result<Transfer> {
    let mut buffer = vec![0u8; chunk];
    let mut done = Transfer::default();
    loop {
        done.calls += 1;
        match input.read(&mut buffer) {
            Ok(0) => return Ok(done),
            Ok(got) => done.bytes += got as u64,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
}

/// Creates (or truncates) `path` and fills it with `total` bytes.
pub fn create_file(path: &str, total: u64, chunk: usize) -> io::Result<Transfer> {
    let mut file = File::create(path)?;
    write_chunks(&mut file, total, chunk)
}

/// A non-zero, recognisable fill, so the data is not all zero pages.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that accepts at most `limit` bytes per call.
    struct Trickle {
        data: Vec<u8>,
        limit: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.limit);
            self.data.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn writes_in_chunks_with_a_short_last_one() {
        let mut out = Vec::new();
        let done = write_chunks(&mut out, 10_000, 4096).unwrap();
        assert_eq!(
            done,
            Transfer {
                bytes: 10_000,
                calls: 3
            }
        );
        assert_eq!(out.len(), 10_000);
        assert_eq!(&out[..3], b"abc");
    }

    #[test]
    fn short_writes_are_counted() {
        let mut out = Trickle {
            data: Vec::new(),
            limit: 1000,
        };
        let done = write_chunks(&mut out, 4096, 4096).unwrap();
        assert_eq!(
            done,
            Transfer {
                bytes: 4096,
                calls: 5
            }
        );
        assert_eq!(out.data.len(), 4096);
    }

    #[test]
    fn reads_to_eof_counting_the_final_call() {
        let data = vec![7u8; 150];
        let done = read_chunks(&mut data.as_slice(), 64).unwrap();
        assert_eq!(
            done,
            Transfer {
                bytes: 150,
                calls: 4
            }
        );
        let empty: &[u8] = &[];
        assert_eq!(
            read_chunks(&mut &*empty, 64).unwrap(),
            Transfer { bytes: 0, calls: 1 }
        );
    }
}
