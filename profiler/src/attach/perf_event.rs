//! `hotprof sample`'s sampler: the `on_cpu_sample` program on a CPU-clock perf event per
//! online CPU (any kernel with perf events; no kprobes needed).

use anyhow::Context as _;
use aya::{
    Ebpf,
    programs::{
        PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};

use super::error::one_line;

/// Loads the sampling program and attaches it to every online CPU at `frequency` samples a
/// second; the CPUs sampled. The links live in `ebpf`, detached when it is dropped.
pub fn attach_sampler(ebpf: &mut Ebpf, frequency: u64) -> anyhow::Result<usize> {
    let program: &mut PerfEvent = ebpf
        .program_mut("on_cpu_sample")
        .context("on_cpu_sample program missing")?
        .try_into()?;
    program
        .load()
        .map_err(|e| anyhow::anyhow!("cannot load the sampling program: {}", one_line(&e)))?;
    let cpus = online_cpus();
    for &cpu in &cpus {
        program
            .attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Frequency(frequency),
                false,
            )
            .map_err(|e| anyhow::anyhow!("cannot sample CPU {cpu}: {}", one_line(&e)))?;
    }
    Ok(cpus.len())
}

/// CPUs to sample: `/sys/devices/system/cpu/online` ("0-1,4").
pub(super) fn online_cpus() -> Vec<u32> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .map(|text| parse_cpu_list(&text))
        .filter(|cpus| !cpus.is_empty())
        .unwrap_or_else(|| {
            (0..std::thread::available_parallelism().map_or(1, |n| n.get() as u32)).collect()
        })
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
fn parse_cpu_list(text: &str) -> Vec<u32> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>())
                    && a <= b
                    && b - a < 65536
                {
                    cpus.extend(a..=b);
                }
            }
            None => cpus.extend(part.parse::<u32>().ok()),
        }
    }
    cpus
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), [0, 1]);
        assert_eq!(parse_cpu_list("0,2-3,8"), [0, 2, 3, 8]);
        assert_eq!(parse_cpu_list("3-1,x,"), Vec::<u32>::new());
    }
}
