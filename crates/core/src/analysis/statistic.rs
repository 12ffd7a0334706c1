//! The latency statistics a report may show.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A latency statistic shown in reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Statistic {
    /// Arithmetic mean (never enough alone: it hides the tail).
    Mean,
    /// Median.
    P50,
    /// 95th percentile (nearest rank).
    P95,
    /// 99th percentile (nearest rank; needs 10,000 successes to be adequate).
    P99,
}
