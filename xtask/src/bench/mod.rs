//! `cargo xtask bench` (placeholder until merged with the full benchmark's module): runs the
//! flamegraph section and prints it.

pub mod flame;

/// Runs every bench section this module knows and prints the markdown.
pub fn run() -> anyhow::Result<()> {
    let section = flame::run()?;
    println!("\n{section}");
    Ok(())
}
