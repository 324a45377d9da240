//! The guest's part of the documented examples (`crate::examples`): every block that needs
//! kprobes, in one 6.12 boot, with audit rules loaded as the `__audit_filter_op` examples say
//! and the files a Debian system has that examples name (/dev/shm, /etc/passwd, the loopback interface).

use std::time::Duration;

use anyhow::{Result, anyhow};

use super::Ctx;
use crate::arch::Arch;
use crate::build::guest_bin_dir;
use crate::examples::{all_blocks, check_output, print_plan, script, select, slowest, unique};
use crate::util::workspace_root;

pub const NAME: &str = "doc_examples";

pub fn doc_examples_run(ctx: &mut Ctx) -> Result<()> {
    let hotprof = guest_bin_dir(Arch::X86_64).join("hotprof");
    let blocks = select(&unique(all_blocks(&hotprof, &workspace_root())?), true)?;
    print_plan(&blocks, "guest")?;
    let script = format!(
        "audit_rules enable && audit_rules add 3\nip link set lo up && mkdir -p /dev/shm /etc\n\
         [ -e /etc/passwd ] || echo root:x:0:0::/:/bin/sh > /etc/passwd\n{}",
        script(&blocks, "/tmp/examples")?
    );
    let guest = ctx.run_with_timeout(&script, Duration::from_secs(900))?;
    let ran = check_output(&blocks, &guest.outcome.stdout).map_err(|err| anyhow!("{err}"))?;
    println!(
        "  guest: {ran} commands in {} blocks; the slowest:",
        blocks.len()
    );
    for line in slowest(&blocks, &guest.outcome.stdout, 5) {
        println!("    {line}");
    }
    Ok(())
}
