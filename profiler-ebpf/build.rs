use which::which;

/// Rebuild when bpf-linker changes: cargo does not track the linker as an input. Declares
/// `bpf_target_arch` (`src/arch/`), which profiler's build sets to the architecture userspace
/// is built for; a build of this crate alone (clippy) takes `AYA_BPF_TARGET_ARCH`, else the
/// host's.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(bpf_target_arch, values(\"x86_64\", \"aarch64\"))");
    if let Err(error) = aya_build::emit_bpf_target_arch_cfg() {
        panic!("cannot choose bpf_target_arch: {error}");
    }
    let bpf_linker = which("bpf-linker").unwrap_or_else(|err| {
        panic!("bpf-linker not found ({err}); run `cargo xtask setup` to install it")
    });
    println!(
        "cargo:rerun-if-changed={}",
        bpf_linker.to_str().unwrap_or_default()
    );
}
