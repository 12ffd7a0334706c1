//! The per-class capacity gate: thresholds, and the reasons a point fails.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whether the engine's waiting queue held steady through the steady-state window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum QueueTrend {
    /// No sustained growth: arrivals are being absorbed.
    Flat,
    /// Sustained growth: offered load exceeds what the system drains.
    Growing,
}

impl fmt::Display for QueueTrend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QueueTrend::Flat => "flat",
            QueueTrend::Growing => "growing",
        })
    }
}

/// One class's request-level cutoffs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClassSlo {
    /// Class name as written in `requests.csv`.
    pub name: String,
    /// A request passes only with TTFT at most this.
    pub ttft_cutoff_ms: f64,
    /// A request passes only with TPOT at most this.
    pub tpot_cutoff_ms: f64,
}

/// Everything the analyzer needs to judge a point; derived from a workload manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GateConfig {
    /// The classes, in manifest order.
    pub classes: Vec<ClassSlo>,
    /// Least attainment per class.
    pub attainment_min: f64,
    /// Fewest successes per class for a point to count as more than exploratory.
    pub min_successes_per_class: u64,
    /// Fewest successes per class before P99 is reported (the top 1% must hold 100
    /// observations).
    pub p99_min_successes: u64,
    /// Largest error rate over attempted requests.
    pub error_rate_max: f64,
    /// Queue trend a passing point must show.
    pub queue_trend_required: QueueTrend,
}

impl Default for GateConfig {
    /// The seed's thresholds, with no classes.
    fn default() -> Self {
        GateConfig {
            classes: Vec::new(),
            attainment_min: 0.95,
            min_successes_per_class: 2_000,
            p99_min_successes: 10_000,
            error_rate_max: 0.01,
            queue_trend_required: QueueTrend::Flat,
        }
    }
}

/// The rule a gate failure breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GateRule {
    /// A class has fewer successes than the sample minimum (the point is exploratory).
    SampleSize,
    /// A class's attainment is under the minimum, or it has no successes at all.
    Attainment,
    /// Too many attempted requests failed, or none were attempted.
    ErrorRate,
    /// The queue grew.
    QueueTrend,
}

/// One reason a point fails the gate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GateReason {
    /// Which rule.
    pub rule: GateRule,
    /// The class concerned, for per-class rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The failure in words, with the figures.
    pub message: String,
}

/// The outcome of the gate for one point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every rule holds: the point may be selected as capacity.
    Pass,
    /// Only the sample-size rule fails: tails may be shown, never used as capacity.
    Exploratory,
    /// A latency, error or queue rule fails.
    Fail,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Pass => "pass",
            Verdict::Exploratory => "exploratory",
            Verdict::Fail => "fail",
        })
    }
}

/// The verdict that a list of reasons amounts to.
pub fn verdict(reasons: &[GateReason]) -> Verdict {
    if reasons.is_empty() {
        Verdict::Pass
    } else if reasons.iter().all(|r| r.rule == GateRule::SampleSize) {
        Verdict::Exploratory
    } else {
        Verdict::Fail
    }
}
