//! VM scenario `doctor_matches_what_works`: `hotprof doctor` in the guest reports what the
//! other scenarios observe on that kernel, and exits 0.

use anyhow::{Context, Result, bail, ensure};

use super::harness::{Ctx, Guest};
use super::kprobe_session::has_fsession;
use crate::kernels::Kernel;

/// `hotprof doctor` on each kernel: kprobes everywhere (every scenario attaches them); fentry
/// everywhere, 5.10 included (`getpid_exact_fentry` attaches `__do_sys_getpid` there); task
/// storage from 5.11 (5.10 runs the hash-map object); kprobe.multi and kprobe.session
/// (kprobe mode's optional links) on 6.12 and 7.x, while 5.10 does not know them and Debian's 6.1 is built
/// without fprobe; fsession on 7.x only; the syscall tracepoints and tracefs everywhere; exit 0 with the verdict
/// last. `--version` names the commit, aya and the eBPF object.
pub fn doctor_matches_what_works(ctx: &mut Ctx) -> Result<()> {
    let kernel = ctx.kernel();
    let guest = ctx.run("hotprof doctor; echo doctor_exit=$?; hotprof --version")?;
    guest.expect_exit(0)?;
    ensure!(
        guest.lines_containing("doctor_exit=0").len() == 1,
        "hotprof doctor must exit 0 here"
    );
    let old = kernel == Kernel::V5_10;
    // kprobe.multi needs 5.18 and fprobe, which Debian's 6.1 is built without (EOPNOTSUPP).
    let multi = !matches!(kernel, Kernel::V5_10 | Kernel::V6_1);
    check_rows(&guest, &expected_rows(multi, !old))?;

    let (_, release) = row(&guest, "kernel")?;
    let series = match kernel {
        Kernel::V5_10 => "5.10.",
        Kernel::V6_1 => "6.1.",
        Kernel::V6_12 => "6.12.",
        Kernel::V7 | Kernel::V7Rt => "7.",
    };
    ensure!(
        release.starts_with(series),
        "the kernel row says {release}, want {series}*"
    );
    // The object a run loads: the hash map where there is no task storage.
    let (_, programs) = row(&guest, "eBPF programs")?;
    let object = if old {
        "the hash-map object"
    } else {
        "the task-storage object"
    };
    ensure!(
        programs.starts_with(object),
        "the eBPF programs row says {programs:?}, want {object}"
    );
    let (_, kprobe_multi) = row(&guest, "kprobe.multi/session")?;
    let why_not = match kernel {
        // The run's own link program, which 5.10's verifier refuses.
        Kernel::V5_10 => Some(
            "kprobe.multi no (loading kretprobe_multi_exit for a kprobe.multi link: this kernel \
             has no bpf_get_attach_cookie",
        ),
        Kernel::V6_1 => Some("kprobe.multi no (Operation not supported (os error 95): built"),
        _ => None,
    };
    if let Some(why_not) = why_not {
        ensure!(
            kprobe_multi.starts_with(why_not),
            "the kprobe.multi/session row says {kprobe_multi:?}, want {why_not}…"
        );
    }
    // fsession: attached on 7.x; elsewhere the kernel's BTF has no such attach type.
    let (status, fsession) = row(&guest, "fsession")?;
    let (want, found) = if has_fsession(kernel) {
        ("yes", "the fsession program attached to ")
    } else {
        (
            "no",
            "this kernel has no fsession (Linux 7.0): no BPF_TRACE_FSESSION in its BTF",
        )
    };
    ensure!(
        status == want && fsession.starts_with(found),
        "the fsession row says {status} {fsession:?}, want {want} {found}…"
    );
    // tracing-multi: both links attached on 7.x (x86-64); elsewhere no such attach types.
    let (status, multi) = row(&guest, "tracing-multi")?;
    let (want, found) = if has_fsession(kernel) {
        ("yes", "fentry.multi and fexit.multi links attached to ")
    } else {
        (
            "no",
            "this kernel has no tracing-multi links (Linux 7.x): no BPF_TRACE_FENTRY_MULTI in its \
             BTF",
        )
    };
    ensure!(
        status == want && multi.starts_with(found),
        "the tracing-multi row says {status} {multi:?}, want {want} {found}…"
    );
    let (_, storage) = row(&guest, "task storage")?;
    if old {
        ensure!(
            storage.ends_with("; hotprof loaded its hash-map object"),
            "on 5.10 the task storage row must say the hash-map object is used: {storage:?}"
        );
    }
    let verdict = "hotprof works here: kernel functions with fentry and kprobes, syscalls with \
                   tracepoints";
    ensure!(
        guest
            .outcome
            .stdout
            .contains(&format!("\n{verdict}\ndoctor_exit=0")),
        "want the verdict {verdict:?} as the doctor's last line"
    );

    let version = guest.lines_containing("hotprof 0.1.0 (commit ");
    ensure!(
        version.len() == 2,
        "want the version in the doctor's header and from --version, got {version:?}"
    );
    let line = version.last().map(String::as_str).unwrap_or_default();
    ensure!(
        line.contains(", aya 0.14.0, eBPF object ") && line.ends_with(')'),
        "hotprof --version printed {line:?}"
    );
    Ok(())
}

/// The status and `found` of the doctor's row `name`: the line that starts with the name,
/// then the column gap.
pub(super) fn row(guest: &Guest, name: &str) -> Result<(String, String)> {
    let mut found = guest.outcome.stdout.lines().filter_map(|line| {
        let rest = line.strip_prefix(name)?;
        rest.starts_with("  ").then(|| rest.trim_start())
    });
    let Some(rest) = found.next() else {
        bail!("hotprof doctor printed no row {name:?}");
    };
    ensure!(
        found.next().is_none(),
        "hotprof doctor printed two rows {name:?}"
    );
    let (status, found) = rest
        .split_once(' ')
        .with_context(|| format!("row {name:?} has no found column: {rest:?}"))?;
    Ok((status.to_owned(), found.trim_start().to_owned()))
}

/// doctor's rows on a Debian guest where hotprof works: everything yes but, where the kernel
/// lacks them, the kprobe.multi/session links (`multi`) and task storage (`task_storage`).
pub(super) fn expected_rows(multi: bool, task_storage: bool) -> Vec<(&'static str, &'static str)> {
    let yes_if = |works: bool| if works { "yes" } else { "no" };
    vec![
        ("kernel", "yes"),
        ("privileges", "yes"),
        ("BTF", "yes"),
        ("eBPF programs", "yes"),
        ("kprobes", "yes"),
        ("fentry", "yes"),
        ("syscall tracepoints", "yes"),
        ("perf sampling", "yes"),
        ("kprobe.multi/session", yes_if(multi)),
        ("task storage", yes_if(task_storage)),
        ("/proc/kcore", "yes"),
        ("kptr_restrict", "yes"),
        ("tracefs", "yes"),
    ]
}

/// Each `(row, status)` of `expected` as doctor printed it; every row that differs is named.
pub(super) fn check_rows(guest: &Guest, expected: &[(&str, &str)]) -> Result<()> {
    let mut wrong = Vec::new();
    for &(name, want) in expected {
        let (status, found) = row(guest, name)?;
        if status != want {
            wrong.push(format!("{name}: {status} ({found}), want {want}"));
        }
    }
    ensure!(
        wrong.is_empty(),
        "doctor rows disagree: {}",
        wrong.join("; ")
    );
    Ok(())
}
