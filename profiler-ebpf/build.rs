use which::which;

/// Rebuild when bpf-linker changes: cargo does not track the linker as an input.
fn main() {
    let bpf_linker = which("bpf-linker").unwrap_or_else(|err| {
        panic!("bpf-linker not found ({err}); run `cargo xtask setup` to install it")
    });
    println!(
        "cargo:rerun-if-changed={}",
        bpf_linker.to_str().unwrap_or_default()
    );
}
