//! What planning takes from a sweep and a forecast: where a capacity lies and the peak
//! to plan for.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::workload::CacheMode;

/// Where a capacity lies.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBracket {
    /// Highest offered rate that passed in every repeat (requests per second).
    pub pass: f64,
    /// Lowest offered rate above it that failed.
    pub fail: f64,
}

impl CapacityBracket {
    /// The gap as a fraction of the passing rate: how far above the capacity the truth may
    /// lie.
    pub fn width(&self) -> f64 {
        (self.fail - self.pass) / self.pass
    }
}

/// The peak to plan for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeakForecast {
    /// Forecast peak arrival rate (requests per second), same workload mix.
    pub rps: f64,
    /// Planned utilization of capacity. Default: the acceptance's `target_utilization`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_utilization: Option<f64>,
    /// Cache state the plan uses. Default: the lowest capacity among the cache modes run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_mode: Option<CacheMode>,
}
