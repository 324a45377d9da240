//! Golden files for the stacks → flame graph stage: `tests/fixtures/flame/*.folded` are drawn
//! and compared byte for byte with the committed `*.svg` next to them, so any change of layout,
//! colors or inferno version shows up in review. After an intended change, rewrite them with
//!
//! ```text
//! HOTPROF_BLESS=1 cargo test -p hotprof-model --test flame_golden
//! ```
//!
//! and look at the new SVGs in a browser before committing. Beyond the bytes, every SVG must
//! be well-formed XML and its root frame must carry the folded total exactly: a flame graph of
//! a latency recording has to add up to the histogram's total latency.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use hotprof_model::flame::{
    FrameNames, KernelSymbolizer, StackRecord, Weight, fold, parse_folded, render_diff,
    render_flamegraph, total_weight, write_folded,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/flame")
}

fn blessing() -> bool {
    std::env::var_os("HOTPROF_BLESS").is_some_and(|v| v == "1")
}

fn read_folded(name: &str) -> Vec<(String, u64)> {
    let path = fixtures().join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_folded(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Compares `actual` with the golden file `name`, or rewrites it under `HOTPROF_BLESS=1`.
fn golden(name: &str, actual: &[u8]) {
    let path = fixtures().join(name);
    if blessing() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (create it with HOTPROF_BLESS=1)", path.display()));
    if expected != actual {
        let at = expected
            .iter()
            .zip(actual)
            .position(|(a, b)| a != b)
            .unwrap_or(expected.len().min(actual.len()));
        let actual_path = std::env::temp_dir().join(format!("hotprof-{name}.actual"));
        std::fs::write(&actual_path, actual).unwrap();
        panic!(
            "{name} differs from the golden file at byte {at} ({} vs {} bytes); got {:?}…, wrote {}. \
             If the change is intended, rerun with HOTPROF_BLESS=1 and review the SVG.",
            expected.len(),
            actual.len(),
            String::from_utf8_lossy(&actual[at.saturating_sub(40)..(at + 40).min(actual.len())]),
            actual_path.display(),
        );
    }
}

/// `1,234` → 1234.
fn count(text: &str) -> u64 {
    text.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a count: {text:?}"))
}

/// Checks that `svg` is well-formed XML whose root frame and `total_samples` equal `total`,
/// and that every frame's tooltip count equals its width in samples. Returns the frames'
/// tooltips.
fn check_svg(name: &str, svg: &[u8], total: u64, count_name: &str) -> Vec<String> {
    let text = std::str::from_utf8(svg).unwrap_or_else(|e| panic!("{name}: not UTF-8: {e}"));
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let document = roxmltree::Document::parse_with_options(text, options)
        .unwrap_or_else(|e| panic!("{name}: not well-formed XML: {e}"));
    let frames = document
        .descendants()
        .find(|n| n.has_tag_name("svg") && n.attribute("id") == Some("frames"))
        .unwrap_or_else(|| panic!("{name}: no frames element"));
    assert_eq!(
        frames.attribute("total_samples"),
        Some(total.to_string().as_str()),
        "{name}: total_samples"
    );

    let mut titles = Vec::new();
    let mut root = None;
    for group in frames.children().filter(|n| n.has_tag_name("g")) {
        let title = group
            .children()
            .find(|n| n.has_tag_name("title"))
            .and_then(|t| t.text())
            .unwrap();
        let rect = group.children().find(|n| n.has_tag_name("rect")).unwrap();
        let width: u64 = rect
            .attribute(("http://github.com/jonhoo/inferno", "w"))
            .unwrap()
            .parse()
            .unwrap();
        // `name (1,234 ns, 12.34%)` or, in a diff, `name (1,234 ns, 12.34%; +1.00%)`.
        let (_, inside) = title
            .rsplit_once(" (")
            .unwrap_or_else(|| panic!("{name}: title {title:?}"));
        let (samples, unit_rest) = inside.split_once(' ').unwrap();
        assert!(
            unit_rest.starts_with(&format!("{count_name}, ")),
            "{name}: unit in {title:?}"
        );
        assert_eq!(count(samples), width, "{name}: {title:?} vs its width");
        if title.starts_with("all (") {
            assert!(root.is_none(), "{name}: two root frames");
            root = Some(count(samples));
        }
        titles.push(title.to_string());
    }
    assert_eq!(
        root,
        Some(total),
        "{name}: the root frame must carry the folded total"
    );
    titles
}

struct Case {
    folded: &'static str,
    svg: &'static str,
    title: &'static str,
    subtitle: Option<&'static str>,
    count_name: &'static str,
}

const CASES: [Case; 2] = [
    Case {
        folded: "latency.folded",
        svg: "latency.svg",
        title: "hotprof: vfs_read, vfs_write latency by kernel stack",
        subtitle: Some("weight = summed latency (ns)"),
        count_name: "ns",
    },
    Case {
        folded: "sample.folded",
        svg: "sample.svg",
        title: "hotprof sample: on-CPU stacks",
        subtitle: None,
        count_name: "samples",
    },
];

#[test]
fn flame_graphs_match_their_golden_files() {
    for case in CASES {
        let folded = read_folded(case.folded);
        let svg = render_flamegraph(&folded, case.title, case.subtitle, case.count_name).unwrap();
        golden(case.svg, &svg);
        let titles = check_svg(
            case.svg,
            &svg,
            total_weight(&folded).unwrap(),
            case.count_name,
        );
        assert!(
            titles.iter().all(|t| !t.contains("_[k]")),
            "{}: kernel suffix shown",
            case.svg
        );
    }
}

#[test]
fn module_and_unknown_kernel_frames_are_labelled() {
    let folded = read_folded("latency.folded");
    let svg = String::from_utf8(render_flamegraph(&folded, "t", None, "ns").unwrap()).unwrap();
    assert!(
        svg.contains("<title>ext4_file_read_iter [ext4] (30,118,002 ns, "),
        "module frame"
    );
    assert!(
        svg.contains("<title>0xffffffffc0b01234 (512,300 ns, "),
        "unknown address frame"
    );
}

#[test]
fn differential_flame_graph_matches_its_golden_file() {
    let base = read_folded("diff.base.folded");
    let new = read_folded("diff.new.folded");
    let svg = render_diff(
        &base,
        &new,
        "hotprof diff: syscall_lat before → after audit rules",
        "ns",
    )
    .unwrap();
    golden("diff.svg", &svg);
    let titles = check_svg("diff.svg", &svg, total_weight(&new).unwrap(), "ns");
    // Base (3.8 ms) is scaled to the new total (11.35 ms) before deltas are taken.
    let text = String::from_utf8(svg).unwrap();
    assert!(text.contains("base 3,800,000 ns scaled to the new 11,350,000 ns"));
    // Only in new: all of it is growth. Shrunk in share: negative.
    assert!(
        titles
            .iter()
            .any(|t| t.starts_with("__audit_filter_op (5,200,000 ns, 45.81%; +45.81%)")),
        "{titles:?}"
    );
    let write = titles
        .iter()
        .find(|t| t.starts_with("vfs_write ("))
        .unwrap();
    assert!(write.contains("; -"), "{write}");
}

/// Names kernel frames with a real [`KernelSymbolizer`] and user frames from a table of
/// 0x1000-byte functions.
struct FixtureNames {
    kernel: KernelSymbolizer,
    user: BTreeMap<u64, &'static str>,
}

impl FrameNames for FixtureNames {
    fn kernel_frame(&self, address: u64) -> String {
        self.kernel.frame_name(address)
    }
    fn user_frames(&self, _pid: u32, addresses: &[u64]) -> Vec<String> {
        addresses
            .iter()
            .map(|&a| match self.user.range(..=a).next_back() {
                Some((start, name)) if a - start < 0x1000 => name.to_string(),
                _ => "[unknown]".to_string(),
            })
            .collect()
    }
}

#[test]
fn records_fold_and_draw_as_pinned() {
    let kallsyms = std::fs::read(fixtures().join("kallsyms.txt")).unwrap();
    let names = FixtureNames {
        kernel: KernelSymbolizer::from_kallsyms(&kallsyms),
        user: BTreeMap::from([
            (0x401000, "_start"),
            (0x402000, "main"),
            (0x403000, "__read"),
            (0x404000, "__getpid"),
        ]),
    };
    let syscall = 0xffffffff81001010; // entry_SYSCALL_64_after_hwframe
    let do_syscall = 0xffffffff81002020;
    let records = [
        // read(2) into ext4, with a user stack; kernel frames leaf first as the BPF map has them.
        StackRecord {
            kernel: vec![
                0xffffffffc0a00810,
                0xffffffff81005040,
                0xffffffff81004010,
                0xffffffff81003008,
                do_syscall,
                syscall,
                0,
                0,
            ],
            user: vec![0x403010, 0x402100, 0x401008],
            comm: "file_read".into(),
            pid: 100,
            total_ns: 7_000_000,
            count: 700,
            leaf: None,
        },
        // Same stacks from another thread of the same process: merged.
        StackRecord {
            kernel: vec![
                0xffffffffc0a00810,
                0xffffffff81005040,
                0xffffffff81004010,
                0xffffffff81003008,
                do_syscall,
                syscall,
            ],
            user: vec![0x403010, 0x402100, 0x401008],
            comm: "file_read".into(),
            pid: 100,
            total_ns: 3_000_000,
            count: 300,
            leaf: None,
        },
        // An address in no function (past the data symbol) and an unnamed user address.
        StackRecord {
            kernel: vec![
                0xffffffff81006004,
                0xffffffff82000010,
                0xffffffff81003108,
                do_syscall,
                syscall,
            ],
            user: vec![0x404004, 0x7f00_0000_1234],
            comm: "syscall lat 2".into(),
            pid: 200,
            total_ns: 1_500_000,
            count: 1000,
            leaf: None,
        },
        // A `--syscall` run's stack: it ends in the entry code; the syscall is the leaf.
        StackRecord {
            kernel: vec![do_syscall, syscall],
            user: vec![0x404004],
            comm: "syscall lat 2".into(),
            pid: 200,
            total_ns: 500_000,
            count: 250,
            leaf: Some("getpid [syscall]".into()),
        },
        // Kernel-only (no user stack captured).
        StackRecord {
            kernel: vec![0xffffffff81005000],
            comm: "cat".into(),
            pid: 300,
            total_ns: 42,
            count: 1,
            ..Default::default()
        },
    ];
    let folded = fold(&records, Weight::LatencyNs, &names);
    let mut bytes = Vec::new();
    write_folded(&folded, &mut bytes).unwrap();
    golden("pipeline.folded", &bytes);
    assert_eq!(parse_folded(&bytes).unwrap(), folded);
    let total_ns: u64 = records.iter().map(|r| r.total_ns).sum();
    assert_eq!(total_weight(&folded), Some(total_ns));

    let svg = render_flamegraph(
        &folded,
        "hotprof: pipeline fixture",
        Some("kernel + user stacks"),
        "ns",
    )
    .unwrap();
    golden("pipeline.svg", &svg);
    check_svg("pipeline.svg", &svg, total_ns, "ns");

    let by_count = fold(&records, Weight::Count, &names);
    let calls: u64 = records.iter().map(|r| r.count).sum();
    assert_eq!((calls, total_weight(&by_count)), (2251, Some(2251)));
    let svg = render_flamegraph(&by_count, "calls", None, Weight::Count.count_name()).unwrap();
    check_svg("pipeline by count", &svg, calls, "calls");
    // The syscall is a leaf frame of its own, in the folded line and in the picture.
    let syscall_line = by_count
        .iter()
        .find(|(stack, _)| stack.ends_with(";getpid [syscall]_[k]"))
        .expect("a line ending in the syscall's frame");
    assert_eq!(syscall_line.1, 250);
    assert!(String::from_utf8_lossy(&svg).contains("getpid [syscall]"));
}

#[test]
fn every_fixture_is_used() {
    let mut used: BTreeSet<&str> = CASES.iter().flat_map(|c| [c.folded, c.svg]).collect();
    used.extend([
        "diff.base.folded",
        "diff.new.folded",
        "diff.svg",
        "kallsyms.txt",
        "pipeline.folded",
        "pipeline.svg",
    ]);
    let present: BTreeSet<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let unused: Vec<&String> = present
        .iter()
        .filter(|name| !used.contains(name.as_str()))
        .collect();
    assert!(unused.is_empty(), "fixtures no test reads: {unused:?}");
    if !blessing() {
        let missing: Vec<&&str> = used
            .iter()
            .filter(|name| !present.contains(**name))
            .collect();
        assert!(
            missing.is_empty(),
            "missing fixtures (HOTPROF_BLESS=1 creates golden files): {missing:?}"
        );
    }
}
