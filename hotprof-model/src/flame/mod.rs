//! Stacks → flame graphs: the stage after the profiler's collector for `--stacks` recordings and
//! `hotprof sample`.
//!
//! The eBPF side aggregates, per distinct (kernel stack id, user stack id, pid), the summed
//! latency and the call count; the collector turns that into [`StackRecord`]s. This module
//!
//! 1. names the frames: kernel addresses with [`KernelSymbolizer`] (`/proc/kallsyms`, binary
//!    search), user addresses with [`UserSymbolizer`] (blazesym over `/proc/PID/maps` and the
//!    mapped ELF files);
//! 2. [`fold()`]s the records into Brendan Gregg's folded format, one `stack weight` line per
//!    distinct stack, weighted by latency or by count ([`Weight`]); see [`folded`] for the
//!    convention (root first, `comm` first, kernel frames `_[k]`);
//! 3. draws SVGs with inferno: [`render_flamegraph`], and [`render_diff`] for a normalized
//!    differential flame graph of two runs.
//!
//! Folded text is also an output of its own ([`write_folded`]) and an input
//! ([`parse_folded`]), so other tools' profiles can be drawn and diffed the same way.
//!
//! Everything but the two symbolizers' system loaders is pure and unit-tested; the SVG output
//! is pinned by golden files in `tests/fixtures/flame/` (`tests/flame_golden.rs`).

pub mod folded;
pub mod kernel;
pub mod svg;
pub mod user;

pub use folded::{
    FoldedError, FoldedLine, FoldedReason, FoldedText, FrameNames, KERNEL_SUFFIX, StackRecord,
    Weight, fold, merge_folded, merge_folded_owned, parse_folded, parse_folded_lines,
    parse_folded_text, sanitize_frame, total_weight, write_folded,
};
pub use kernel::KernelSymbolizer;
pub use svg::{
    RenderError, render_diff, render_flamegraph, render_flamegraph_owned, render_folded_lines,
    render_folded_text,
};
pub use user::{Mapping, SavedMaps, UNKNOWN, UserSymbolizer, file_offset_frame, parse_maps};

/// The real [`FrameNames`]: kernel frames from kallsyms, user frames from blazesym (or all
/// `[unknown]` when user stacks are not symbolized).
#[derive(Clone, Copy, Debug)]
pub struct Symbols<'a> {
    pub kernel: &'a KernelSymbolizer,
    pub user: Option<&'a UserSymbolizer>,
}

impl FrameNames for Symbols<'_> {
    fn kernel_frame(&self, address: u64) -> String {
        self.kernel.frame_name(address)
    }

    fn user_frames(&self, pid: u32, addresses: &[u64]) -> Vec<String> {
        match self.user {
            Some(user) => user.symbolize(pid, addresses),
            None => vec![UNKNOWN.to_string(); addresses.len()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_name_kernel_frames_and_unknown_user_frames_without_a_user_symbolizer() {
        let kernel = KernelSymbolizer::from_kallsyms(
            b"ffffffff81002000 t vfs_read\nffffffff81003000 t ksys_read\n",
        );
        let symbols = Symbols {
            kernel: &kernel,
            user: None,
        };
        let record = StackRecord {
            kernel: vec![0xffffffff81002010, 0xffffffff81003020, 0xffffffff70000000],
            user: vec![0x401000],
            comm: "cat".into(),
            pid: 7,
            total_ns: 99,
            count: 1,
            leaf: None,
        };
        assert_eq!(
            fold(&[record], Weight::LatencyNs, &symbols),
            [(
                "cat;[unknown];0xffffffff70000000_[k];ksys_read_[k];vfs_read_[k]".to_string(),
                99
            )]
        );
    }

    #[test]
    fn symbols_use_the_user_symbolizer_for_live_processes() {
        #[inline(never)]
        fn hotprof_fold_marker() -> u32 {
            std::hint::black_box(7)
        }
        assert_eq!(hotprof_fold_marker(), 7);
        let kernel = KernelSymbolizer::default();
        let user = UserSymbolizer::new();
        let symbols = Symbols {
            kernel: &kernel,
            user: Some(&user),
        };
        let address = hotprof_fold_marker as *const () as u64 + 1;
        let record = StackRecord {
            user: vec![address],
            comm: "t".into(),
            pid: std::process::id(),
            count: 3,
            leaf: None,
            ..Default::default()
        };
        let folded = fold(&[record], Weight::Count, &symbols);
        assert_eq!(folded.len(), 1);
        assert!(
            folded[0].0.starts_with("t;") && folded[0].0.ends_with("hotprof_fold_marker"),
            "{folded:?}"
        );
        assert_eq!(folded[0].1, 3);
    }
}

#[cfg(test)]
mod send_check {
    #[test]
    fn the_kernel_symbolizer_can_be_shared_between_threads() {
        // (UserSymbolizer cannot: blazesym's caches are Rc-based.)
        fn send<T: Send>() {}
        fn sync<T: Sync>() {}
        send::<super::KernelSymbolizer>();
        sync::<super::KernelSymbolizer>();
    }
}
