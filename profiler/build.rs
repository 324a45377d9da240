//! Builds the eBPF object (`profiler-ebpf`) for `bpfel-unknown-none` with the nightly toolchain
//! and bpf-linker; `src/attach/loader.rs` embeds it with `include_bytes_aligned!`.
fn main() -> anyhow::Result<()> {
    let root_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../profiler-ebpf");
    let package = aya_build::Package {
        name: "profiler-ebpf",
        root_dir,
        ..Default::default()
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::default())
}
