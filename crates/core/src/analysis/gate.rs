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

/// Whether some class's attainment stays under the gate's minimum even with `relief_ms`
/// taken off each successful request's TTFT and `relief_ms / (output_tokens − 1)` off its
/// TPOT: a failure that a delay of at most `relief_ms` on any token's arrival cannot
/// explain (a late last token lengthens `e2e − ttft` by at most the delay). `successes` are
/// `(class, ttft_ms, tpot_ms, output_tokens)` of the successful requests.
pub fn attainment_short_beyond(
    gate: &GateConfig,
    successes: impl IntoIterator<Item = (usize, f64, f64, u64)>,
    relief_ms: f64,
) -> bool {
    let mut counts = vec![(0u64, 0u64); gate.classes.len()];
    for (class, ttft, tpot, tokens) in successes {
        let (Some(slo), Some(count)) = (gate.classes.get(class), counts.get_mut(class)) else {
            continue;
        };
        let tpot_relief = if tokens > 1 {
            relief_ms / (tokens - 1) as f64
        } else {
            0.0
        };
        count.1 += 1;
        count.0 += u64::from(super::meets_slo(
            ttft - relief_ms,
            tpot - tpot_relief,
            slo.ttft_cutoff_ms,
            slo.tpot_cutoff_ms,
        ));
    }
    counts.iter().any(|&(passing, successful)| {
        super::attainment(passing, successful).is_some_and(|a| a < gate.attainment_min)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> GateConfig {
        GateConfig {
            classes: vec![ClassSlo {
                name: "chat".into(),
                ttft_cutoff_ms: 300.0,
                tpot_cutoff_ms: 50.0,
            }],
            ..GateConfig::default()
        }
    }

    /// TTFTs of 320 ms miss a 300 ms cutoff by 20: a delay of 30 ms explains that miss, a
    /// delay of 10 ms does not; TPOT is relieved by the delay's share of the tokens.
    #[test]
    fn a_miss_larger_than_the_delay_stands() {
        let late = vec![(0, 320.0, 40.0, 11); 100];
        assert!(attainment_short_beyond(&gate(), late.clone(), 10.0));
        assert!(!attainment_short_beyond(&gate(), late, 30.0));
        // TPOT 52 over 11 tokens: 30 ms of delay is 3 ms a token, enough; 10 ms is 1, not.
        let slow = vec![(0, 100.0, 52.0, 11); 100];
        assert!(!attainment_short_beyond(&gate(), slow.clone(), 30.0));
        assert!(attainment_short_beyond(&gate(), slow, 10.0));
        // 96 of 100 meet their cutoffs already: nothing is short.
        let mut mostly = vec![(0, 100.0, 40.0, 11); 96];
        mostly.extend(vec![(0, 900.0, 40.0, 11); 4]);
        assert!(!attainment_short_beyond(&gate(), mostly, 0.0));
    }
}
