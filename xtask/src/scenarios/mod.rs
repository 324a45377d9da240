//! VM scenarios: end-to-end tests of `hotprof` on real kernels.
//!
//! Each scenario is one function that boots a guest with a shell script (`ctx.run`) and checks
//! the exit code, the output and the JSON files the script left in `/out`, returning an error
//! that says what was expected. The test runner adds the guest's full output to any failure,
//! so a scenario only needs to say what was wrong.
//!
//! To add one: write `fn my_case(ctx: &mut Ctx) -> Result<()>` and list it in [`SCENARIOS`]
//! with the kernels it applies to. `cargo xtask test --only my_case` runs just that one.
//!
//! The contract tested here: `hotprof --fn FUNC... [--mode auto|fentry|kprobe] [--duration D]
//! [--json FILE] [-- CMD ARGS...]`, whose `--json` report is
//! `{"schema_version":2,"kernel":…,"mode":…,"functions":[{"name":…,"count":N,"sum_ns":…,…}]}`,
//! and workloads whose last stdout line is `name: key=value ...`.

use anyhow::Result;

use crate::arch::Arch;
use crate::kernels::Kernel;

pub use exporter::EXPORTER_SOAK;
pub use harness::Ctx;

mod arm64;
mod audit;
mod auto_mode;
mod callsite;
mod cli;
mod doc_examples;
mod doctor;
mod exact_counts;
mod exporter;
mod fallbacks;
mod faults;
pub mod harness;
mod keys_and_filters;
mod kprobe_multi;
mod kprobe_session;
mod kvm_fallback;
mod lifecycle;
mod modules;
mod peers;
mod raw_syscalls;
mod sampled_stacks;
mod stacks;
mod top;
mod tracing_multi;

/// A named end-to-end test, the guest architecture and the kernels it runs on.
pub struct Scenario {
    pub name: &'static str,
    /// Most run on x86_64 guests; the `arm64_*` family on aarch64 ones (TCG).
    pub arch: Arch,
    pub kernels: &'static [Kernel],
    pub run: fn(&mut Ctx) -> Result<()>,
}

impl Scenario {
    /// Whether it boots with the peers' layer, which takes minutes to build the first time.
    pub fn needs_peers(&self) -> bool {
        self.name == peers::NAME
    }

    /// Whether no other guest may run beside it (`cargo xtask test --jobs`): its guest keeps
    /// more than one host core busy for long (8 vCPUs, process storms, an exporter and its
    /// scraper, the peers' tools), or it counts what happens per second (the runner adds
    /// `soak.rs`'s soaks, which build on this module).
    pub fn runs_alone(&self) -> bool {
        [
            "many_cpus_exact",
            "process_storm_exact",
            "busy_exporter",
            exporter::EXPORTER_SOAK.name,
            peers::NAME,
        ]
        .contains(&self.name)
    }

    /// Whether it starts before the other scenarios beside it: the longest (`doc_examples`,
    /// ~280 s where most take under a minute), so that it does not end the run alone.
    pub fn starts_early(&self) -> bool {
        self.name == doc_examples::NAME
    }
}

/// The scenarios every kernel of the matrix runs: exact counts in each mode, cleanup after
/// signals, bad inputs and `serve`.
const EVERY: &[Kernel] = &Kernel::ALL;
/// The kernels that run every scenario: the distribution's current one and the newest.
const FULL: &[Kernel] = &[Kernel::V6_12, Kernel::V7];

/// Every scenario, in the order `cargo xtask test` runs them.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "kvm_fallback",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12],
        run: kvm_fallback::kvm_fallback,
    },
    Scenario {
        name: "getpid_exact",
        arch: Arch::X86_64,
        kernels: EVERY,
        run: exact_counts::getpid_exact,
    },
    Scenario {
        name: "audit_filter_fires",
        arch: Arch::X86_64,
        kernels: FULL,
        run: audit::audit_filter_fires,
    },
    Scenario {
        name: "audit_filter_missing",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_1],
        run: audit::audit_filter_missing,
    },
    Scenario {
        name: "getpid_exact_fentry",
        arch: Arch::X86_64,
        kernels: EVERY,
        run: exact_counts::getpid_exact_fentry,
    },
    Scenario {
        name: "sleep_wall_vs_on_cpu",
        arch: Arch::X86_64,
        kernels: FULL,
        run: exact_counts::sleep_wall_vs_on_cpu,
    },
    Scenario {
        name: "nested_frames",
        arch: Arch::X86_64,
        kernels: FULL,
        run: exact_counts::nested_frames,
    },
    Scenario {
        name: "glob_and_list",
        arch: Arch::X86_64,
        kernels: FULL,
        run: cli::glob_and_list,
    },
    Scenario {
        name: "bad_inputs",
        arch: Arch::X86_64,
        kernels: EVERY,
        run: cli::bad_inputs,
    },
    Scenario {
        name: "stacks_flamegraph",
        arch: Arch::X86_64,
        kernels: FULL,
        run: stacks::stacks_flamegraph,
    },
    Scenario {
        name: "leaf_frame_every_mechanism",
        arch: Arch::X86_64,
        kernels: FULL,
        run: stacks::leaf_frame_every_mechanism,
    },
    Scenario {
        name: "sampled_stacks",
        arch: Arch::X86_64,
        kernels: FULL,
        run: sampled_stacks::sampled_stacks,
    },
    Scenario {
        name: "cleanup_on_signals",
        arch: Arch::X86_64,
        kernels: EVERY,
        run: lifecycle::cleanup_on_signals,
    },
    Scenario {
        name: "load_exact_counts",
        arch: Arch::X86_64,
        kernels: EVERY,
        run: exact_counts::load_exact_counts,
    },
    Scenario {
        name: "blocked_tasks_accounted",
        arch: Arch::X86_64,
        kernels: FULL,
        run: exact_counts::blocked_tasks_accounted,
    },
    Scenario {
        name: "in_flight_at_stop",
        arch: Arch::X86_64,
        // Task storage (its task iterator) and the hash-map store.
        kernels: &[Kernel::V6_12, Kernel::V5_10],
        run: exact_counts::in_flight_at_stop,
    },
    Scenario {
        name: "no_btf_falls_back",
        arch: Arch::X86_64,
        kernels: FULL,
        run: fallbacks::no_btf_falls_back,
    },
    Scenario {
        name: "compare_audit_rules",
        arch: Arch::X86_64,
        kernels: FULL,
        run: audit::compare_audit_rules,
    },
    Scenario {
        name: "callsite_exact",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7, Kernel::V6_1],
        run: callsite::callsite_exact,
    },
    Scenario {
        name: "serve_kprobe",
        arch: Arch::X86_64,
        kernels: EVERY,
        run: lifecycle::serve_kprobe,
    },
    Scenario {
        name: "by_keys_exact",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7],
        run: keys_and_filters::by_keys_exact,
    },
    Scenario {
        name: "slowest_and_filter",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7],
        run: keys_and_filters::slowest_and_filter,
    },
    Scenario {
        name: "doctor_matches_what_works",
        arch: Arch::X86_64,
        kernels: EVERY,
        run: doctor::doctor_matches_what_works,
    },
    Scenario {
        name: "children_inside",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7],
        run: keys_and_filters::children_inside,
    },
    Scenario {
        name: "kprobe_multi_exact",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7],
        run: kprobe_multi::kprobe_multi_exact,
    },
    Scenario {
        name: "kprobe_multi_signals",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7],
        run: kprobe_multi::kprobe_multi_signals,
    },
    Scenario {
        name: "kprobe_multi_fallback",
        arch: Arch::X86_64,
        kernels: &[Kernel::V5_10, Kernel::V6_1],
        run: kprobe_multi::kprobe_multi_fallback,
    },
    Scenario {
        name: "kprobe_session_exact",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7],
        run: kprobe_session::kprobe_session_exact,
    },
    Scenario {
        name: "fsession_exact",
        arch: Arch::X86_64,
        kernels: &[Kernel::V7],
        run: kprobe_session::fsession_exact,
    },
    Scenario {
        name: "cpu_hotplug_exact",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7],
        run: faults::cpu_hotplug_exact,
    },
    Scenario {
        name: "module_functions",
        arch: Arch::X86_64,
        kernels: &[Kernel::V5_10, Kernel::V6_12, Kernel::V7],
        run: modules::module_functions,
    },
    Scenario {
        name: "top_in_guest",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7],
        run: top::top_in_guest,
    },
    Scenario {
        name: "many_cpus_exact",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7],
        run: faults::many_cpus_exact,
    },
    Scenario {
        name: "process_storm_exact",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7, Kernel::V5_10],
        run: faults::process_storm_exact,
    },
    Scenario {
        name: "busy_exporter",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7],
        run: exporter::busy_exporter,
    },
    Scenario {
        name: peers::NAME,
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7],
        run: peers::peers_side_by_side,
    },
    Scenario {
        name: "tracing_multi_exact",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7],
        run: tracing_multi::tracing_multi_exact,
    },
    Scenario {
        name: "auto_mode_typed_functions",
        arch: Arch::X86_64,
        kernels: EVERY,
        run: auto_mode::auto_mode_typed_functions,
    },
    Scenario {
        name: "bias_below_the_fastest_call",
        arch: Arch::X86_64,
        kernels: EVERY,
        run: auto_mode::bias_below_the_fastest_call,
    },
    Scenario {
        name: "raw_syscalls_exact",
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12, Kernel::V7, Kernel::V5_10],
        run: raw_syscalls::raw_syscalls_exact,
    },
    Scenario {
        name: doc_examples::NAME,
        arch: Arch::X86_64,
        kernels: &[Kernel::V6_12],
        run: doc_examples::doc_examples_run,
    },
    Scenario {
        name: "arm64_exact_counts",
        arch: Arch::Aarch64,
        kernels: &[Kernel::V6_12, Kernel::V6_1, Kernel::V7],
        run: arm64::arm64_exact_counts,
    },
    Scenario {
        name: "arm64_keys_stacks_signals",
        arch: Arch::Aarch64,
        // fentry's trampoline frame (6.12) and perf kprobes (6.1, where fentry is refused).
        kernels: &[Kernel::V6_12, Kernel::V6_1, Kernel::V7],
        run: arm64::arm64_keys_stacks_signals,
    },
    Scenario {
        name: "arm64_pmu_counter",
        arch: Arch::Aarch64,
        // qemu's emulated PMU is the kernel's: one kernel with fentry shows it.
        kernels: &[Kernel::V6_12],
        run: arm64::arm64_pmu_counter,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_are_unique() {
        let mut names = SCENARIOS.iter().map(|s| s.name).collect::<Vec<_>>();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SCENARIOS.len());
    }
}
