//! `slo-report.json`: the point report. Required fields keep the capacity pack's names and
//! meaning; extra fields are additions that never change them.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::gate::{GateConfig, GateReason, GateRule, QueueTrend, Verdict};

/// The fields of `slo-report.json` the capacity pack requires at the top level.
pub const REQUIRED_REPORT_FIELDS: [&str; 12] = [
    "attempted",
    "successful",
    "failed",
    "error_rate",
    "overall_attainment",
    "observed_goodput_rps",
    "request_throughput_rps",
    "output_throughput_tps",
    "queue_trend",
    "all_class_slos_pass",
    "capacity_gate_pass",
    "classes",
];

/// The fields every class of `slo-report.json` must have.
pub const REQUIRED_CLASS_FIELDS: [&str; 16] = [
    "successful_count",
    "passing_count",
    "request_ttft_cutoff_ms",
    "request_tpot_cutoff_ms",
    "attainment",
    "sample_adequate",
    "p99_sample_adequate",
    "class_slo_pass",
    "p50_ttft_ms",
    "p95_ttft_ms",
    "p99_ttft_ms",
    "p50_tpot_ms",
    "p95_tpot_ms",
    "p99_tpot_ms",
    "p95_e2e_ms",
    "output_tokens",
];

/// The analysis of one test point: counts, rates, per-class results and the gate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PointReport {
    /// Requests attempted in the measurement window.
    pub attempted: u64,
    /// Requests that completed with status `ok`.
    pub successful: u64,
    /// Requests with any other status.
    pub failed: u64,
    /// `failed / attempted`; null when nothing was attempted.
    pub error_rate: Option<f64>,
    /// Passing successful requests over all successful ones (a counter, not the gate).
    pub overall_attainment: Option<f64>,
    /// Successful requests meeting their own class's cutoffs, per second of window.
    pub observed_goodput_rps: f64,
    /// Successful requests per second of window.
    pub request_throughput_rps: f64,
    /// Output tokens of successful requests per second of window.
    pub output_throughput_tps: f64,
    /// Queue trend over the steady-state window.
    pub queue_trend: QueueTrend,
    /// Every class has enough successes and meets its attainment minimum.
    pub all_class_slos_pass: bool,
    /// The point passes the whole gate and may be selected as capacity.
    pub capacity_gate_pass: bool,
    /// Per-class results, by class name.
    pub classes: BTreeMap<String, ClassReport>,

    // Extra fields (absent in reports from other tools, hence the defaults).
    /// Pass, exploratory (only the sample rule fails) or fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// Why the point fails the gate; empty when it passes.
    #[serde(default)]
    pub gate_reasons: Vec<GateReason>,
    /// The thresholds the gate applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateThresholds>,
    /// Length of the measurement window in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// How every percentile in this report was computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentile_algorithm: Option<String>,
    /// Failed requests by their status value.
    #[serde(default)]
    pub failed_by_status: BTreeMap<String, u64>,
    /// Successful rows whose `tpot_ms` disagrees with `(e2e − ttft) / (output_tokens − 1)`
    /// by more than 1% (a sign the tool measured TPOT differently).
    #[serde(default)]
    pub tpot_inconsistent_rows: u64,
}

/// The thresholds applied by the gate (the classes' cutoffs sit in each class).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GateThresholds {
    /// Least attainment per class.
    pub class_slo_attainment_min: f64,
    /// Fewest successes per class.
    pub min_successful_samples_per_class: u64,
    /// Fewest successes per class for P99.
    pub p99_min_successes: u64,
    /// Largest error rate.
    pub error_rate_max: f64,
    /// Required queue trend.
    pub queue_trend_required: QueueTrend,
}

impl From<&GateConfig> for GateThresholds {
    fn from(c: &GateConfig) -> Self {
        GateThresholds {
            class_slo_attainment_min: c.attainment_min,
            min_successful_samples_per_class: c.min_successes_per_class,
            p99_min_successes: c.p99_min_successes,
            error_rate_max: c.error_rate_max,
            queue_trend_required: c.queue_trend_required,
        }
    }
}

/// One workload class's results at one point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClassReport {
    /// Successful requests in the class.
    pub successful_count: u64,
    /// Successful requests meeting both cutoffs.
    pub passing_count: u64,
    /// The class's TTFT cutoff.
    pub request_ttft_cutoff_ms: f64,
    /// The class's TPOT cutoff.
    pub request_tpot_cutoff_ms: f64,
    /// `passing_count / successful_count`; null without successes.
    pub attainment: Option<f64>,
    /// At least the minimum successes: the class's figures can support a capacity verdict.
    pub sample_adequate: bool,
    /// Enough successes for a P99.
    pub p99_sample_adequate: bool,
    /// Sample adequate and attainment at or above the minimum.
    pub class_slo_pass: bool,
    /// Median TTFT of successful requests.
    pub p50_ttft_ms: Option<f64>,
    /// 95th-percentile TTFT.
    pub p95_ttft_ms: Option<f64>,
    /// 99th-percentile TTFT; null below the P99 sample minimum.
    pub p99_ttft_ms: Option<f64>,
    /// Median TPOT.
    pub p50_tpot_ms: Option<f64>,
    /// 95th-percentile TPOT.
    pub p95_tpot_ms: Option<f64>,
    /// 99th-percentile TPOT; null below the P99 sample minimum.
    pub p99_tpot_ms: Option<f64>,
    /// 95th-percentile end-to-end latency.
    pub p95_e2e_ms: Option<f64>,
    /// Output tokens of successful requests.
    pub output_tokens: u64,

    // Extra fields.
    /// Requests attempted in the class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempted_count: Option<u64>,
    /// Failed requests in the class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_count: Option<u64>,
    /// Lower end of the Wilson 95% interval on attainment: how low the true attainment
    /// could plausibly be given this sample size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attainment_wilson_lower_95: Option<f64>,
    /// Median end-to-end latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_e2e_ms: Option<f64>,
    /// Inter-token latency over every gap of every successful request, when the CSV has
    /// an `itl_ms` column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl: Option<ItlReport>,
}

/// Inter-token latency distribution (all gaps of all successful requests in a class).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ItlReport {
    /// Number of gaps observed.
    pub gaps: u64,
    /// Median gap.
    pub p50_ms: f64,
    /// 95th-percentile gap.
    pub p95_ms: f64,
    /// 99th-percentile gap.
    pub p99_ms: f64,
    /// Largest gap.
    pub max_ms: f64,
    /// How the percentiles were computed.
    pub algorithm: String,
}

impl PointReport {
    /// The lowest per-class attainment (`None` when no class has successes).
    pub fn weakest_attainment(&self) -> Option<f64> {
        self.classes
            .values()
            .filter_map(|c| c.attainment)
            .reduce(f64::min)
    }

    /// A one-screen summary for a terminal: the per-class table, the gate and its reasons.
    pub fn human_summary(&self) -> String {
        use std::fmt::Write as _;
        let ms = |x: Option<f64>| x.map_or("-".to_owned(), |v| format!("{v:.1}"));
        let pct = |x: Option<f64>| x.map_or("-".to_owned(), |v| format!("{:.1}%", v * 100.0));
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<20} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}  verdict",
            "class",
            "ok",
            "passing",
            "attain",
            "wilson",
            "p50 ttft",
            "p95 ttft",
            "p50 tpot",
            "p95 tpot"
        );
        for (name, c) in &self.classes {
            let verdict = if c.class_slo_pass {
                "pass"
            } else if c.successful_count > 0 && !c.sample_adequate {
                "exploratory"
            } else {
                "fail"
            };
            let _ = writeln!(
                out,
                "{:<20} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}  {verdict}",
                name,
                c.successful_count,
                c.passing_count,
                pct(c.attainment),
                pct(c.attainment_wilson_lower_95),
                ms(c.p50_ttft_ms),
                ms(c.p95_ttft_ms),
                ms(c.p50_tpot_ms),
                ms(c.p95_tpot_ms),
            );
        }
        let _ = writeln!(
            out,
            "attempted {}, failed {} (error rate {}), goodput {:.2} req/s, throughput {:.2} req/s, \
             {:.0} output tok/s, queue {}",
            self.attempted,
            self.failed,
            pct(self.error_rate),
            self.observed_goodput_rps,
            self.request_throughput_rps,
            self.output_throughput_tps,
            self.queue_trend
        );
        let verdict = self.verdict.map_or_else(
            || {
                if self.capacity_gate_pass {
                    "pass".into()
                } else {
                    "fail".into()
                }
            },
            |v| v.to_string(),
        );
        let _ = writeln!(
            out,
            "capacity gate: {verdict} (latencies in ms, percentiles {})",
            self.percentile_algorithm
                .as_deref()
                .unwrap_or("unspecified")
        );
        for r in &self.gate_reasons {
            let _ = writeln!(out, "  - {}", r.message);
        }
        if self.tpot_inconsistent_rows > 0 {
            let _ = writeln!(
                out,
                "warning: {} rows have tpot_ms that disagrees with (e2e_ms - ttft_ms) / (output_tokens - 1)",
                self.tpot_inconsistent_rows
            );
        }
        out
    }
}

/// Every reason `report` fails the gate under `config`'s thresholds, in a stable order
/// (classes by name, then errors, then queue). Reads only the report's required fields, so
/// it also explains reports written by other tools.
pub fn gate_reasons(report: &PointReport, config: &GateConfig) -> Vec<GateReason> {
    let mut reasons = Vec::new();
    for (name, class) in &report.classes {
        let reason = |rule, message| GateReason {
            rule,
            class: Some(name.clone()),
            message,
        };
        if class.successful_count == 0 {
            reasons.push(reason(
                GateRule::Attainment,
                format!("class {name}: no successful requests"),
            ));
            continue;
        }
        if !class.sample_adequate {
            reasons.push(reason(
                GateRule::SampleSize,
                format!(
                    "class {name}: {} successes, below the minimum of {} (exploratory)",
                    class.successful_count, config.min_successes_per_class
                ),
            ));
        }
        if let Some(a) = class.attainment
            && a < config.attainment_min
        {
            reasons.push(reason(
                GateRule::Attainment,
                format!(
                    "class {name}: attainment {:.1}% ({} of {}) below {:.1}%",
                    a * 100.0,
                    class.passing_count,
                    class.successful_count,
                    config.attainment_min * 100.0
                ),
            ));
        }
    }
    match report.error_rate {
        None => reasons.push(GateReason {
            rule: GateRule::ErrorRate,
            class: None,
            message: "no requests were attempted".into(),
        }),
        Some(rate) if rate > config.error_rate_max => reasons.push(GateReason {
            rule: GateRule::ErrorRate,
            class: None,
            message: format!(
                "error rate {:.2}% ({} of {}) above {:.2}%",
                rate * 100.0,
                report.failed,
                report.attempted,
                config.error_rate_max * 100.0
            ),
        }),
        Some(_) => {}
    }
    if report.queue_trend != config.queue_trend_required {
        reasons.push(GateReason {
            rule: GateRule::QueueTrend,
            class: None,
            message: format!(
                "queue trend {} (required {})",
                report.queue_trend, config.queue_trend_required
            ),
        });
    }
    reasons
}
