//! Stage 4: the data model every report is made from, and its versioned JSON form.

mod bias;
mod filter;
mod heat;
mod histogram;
mod keys;
mod merge;
mod pmu;
mod recording;
mod snapshot;
mod stacks;
mod totals;

pub use bias::{not_subtracted, without_bias};
pub use filter::{FilterError, FilterExpr};
pub use heat::{INTERVAL_KEYS, heat_buckets, heat_row, interval_keys};
pub use histogram::Histogram;
pub use keys::{ByError, ByField, KeySpec, errno_name};
pub use merge::{distinct_values, mean_probe_bias, mean_probe_overhead};
pub use pmu::{CounterRecord, PmuEvent};
pub use recording::{
    CallerRecord, FilterRecord, FunctionRecord, IntervalFunction, IntervalKey, IntervalRecord,
    KeyRecord, LoadError, Losses, Recording, RunRecord, SCHEMA_VERSION, SlowCallRecord, TaskStore,
    load_recording, parse_recording,
};
pub use snapshot::{KeyTotals, Snapshot, gauge, merge_stats, totals_of_chunks};
pub use stacks::{CollectedStack, walked_calls, weight_sampled};
pub use totals::FunctionTotals;
