//! The tracepoint fields the eBPF programs read, from tracefs' `format` files (parsed by
//! [`field_offset`]).

use std::path::{Path, PathBuf};

pub use hotprof_model::tracepoint_format::field_offset;

/// The tracepoint fields the eBPF programs read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracepointOffsets {
    pub fork_child_pid: u32,
}

/// Why [`TracepointOffsets::read`] failed. The I/O error is the source, not part of the
/// message: an error chain printed on one line (`{:#}`) reads `cannot read PATH: ERROR`.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("cannot read {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no field '{field}' in {}", .path.display())]
    NoField { path: PathBuf, field: &'static str },
}

impl TracepointOffsets {
    /// Reads the offsets from tracefs (`events/sched/*/format`).
    pub fn read(tracefs: &Path) -> Result<Self, FormatError> {
        let read = |event: &str, field: &'static str| -> Result<u32, FormatError> {
            let path = tracefs.join("events/sched").join(event).join("format");
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(source) => return Err(FormatError::Read { path, source }),
            };
            field_offset(&text, field).ok_or(FormatError::NoField { path, field })
        };
        Ok(Self {
            fork_child_pid: read("sched_process_fork", "child_pid")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A format without the field (sched_switch's), and one with it (sched_process_fork's).
    const WITHOUT: &str = "format:\n\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n";
    const FORK: &str = "format:\n\tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;\n";

    #[test]
    fn read_errors_keep_the_io_error_as_their_source() {
        let tracefs = std::env::temp_dir().join(format!("hotprof-format-{}", std::process::id()));
        let format = tracefs.join("events/sched/sched_process_fork/format");
        let _ = std::fs::remove_dir_all(&tracefs);

        let error = TracepointOffsets::read(&tracefs).unwrap_err();
        assert!(matches!(&error, FormatError::Read { path, .. } if *path == format));
        let io = std::error::Error::source(&error)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .expect("the io error is the source");
        assert_eq!(io.raw_os_error(), Some(libc::ENOENT));
        // What hotprof prints, the error and its source on one line, is what it always said.
        assert_eq!(
            format!("{:#}", anyhow::Error::new(error)),
            format!(
                "cannot read {}: {}",
                format.display(),
                std::io::Error::from_raw_os_error(libc::ENOENT)
            )
        );

        std::fs::create_dir_all(format.parent().unwrap()).unwrap();
        std::fs::write(&format, WITHOUT).unwrap();
        let error = TracepointOffsets::read(&tracefs).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("no field 'child_pid' in {}", format.display())
        );
        assert!(std::error::Error::source(&error).is_none());

        std::fs::write(&format, FORK).unwrap();
        assert_eq!(
            TracepointOffsets::read(&tracefs).unwrap(),
            TracepointOffsets { fork_child_pid: 20 }
        );
        std::fs::remove_dir_all(&tracefs).unwrap();
    }
}
