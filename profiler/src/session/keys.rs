//! How the `--by` keys of a run read in its report.

use super::error::SpecError;
use crate::flame::KernelSymbolizer;
use crate::model::{ByField, KeySpec};

/// How `--by` keys read in a report: the fields, and the kernel's symbols to name callers.
#[derive(Debug, Default)]
pub struct KeyNames {
    pub spec: KeySpec,
    symbols: Option<KernelSymbolizer>,
}

impl KeyNames {
    /// Reads the kernel's symbols when callers are to be named.
    pub fn new(spec: KeySpec) -> anyhow::Result<Self> {
        let symbols = if spec.fields().contains(&ByField::Caller) {
            Some(KernelSymbolizer::from_system().map_err(SpecError::CallerNames)?)
        } else {
            None
        };
        Ok(Self { spec, symbols })
    }

    /// The printed values of `key`. A call-site slot's caller is its site (its kprobe sits
    /// on the `call`, where the stack holds no return address of this call).
    pub(super) fn values(&self, key: &profiler_common::ByKey, site: Option<&str>) -> Vec<String> {
        self.spec
            .fields()
            .iter()
            .zip(key.values)
            .map(|(&field, raw)| match field {
                ByField::Caller => match (site, &self.symbols) {
                    (Some(site), _) => site.to_owned(),
                    (None, Some(symbols)) => match symbols.symbolize(raw) {
                        Some((name, offset, None)) => format!("{name}+{offset:#x}"),
                        Some((name, offset, Some(module))) => {
                            format!("{name}+{offset:#x} [{module}]")
                        }
                        None => format!("{raw:#x}"),
                    },
                    (None, None) => format!("{raw:#x}"),
                },
                ByField::Comm => {
                    let end = key.comm.iter().position(|&b| b == 0).unwrap_or(16);
                    String::from_utf8_lossy(&key.comm[..end]).into_owned()
                }
                other => other.describe(raw),
            })
            .collect()
    }
}
