//! Capacity and replicas: the highest passing offered rate of a sweep, and
//! `required_replicas = ceil(peak / (capacity_per_replica × target_utilization))`.

mod bracket;
pub mod cost;
pub mod peak;

pub mod serving;

use std::fmt::Write as _;

pub use bracket::{CapacityBracket, PeakForecast};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::analysis::{
    GateConfig, GateReason, PointReport, QueueTrend, Verdict, ceil_tolerant, gate_reasons, verdict,
};

/// Why a plan could not be computed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    /// An input that must be positive is not.
    #[error("{name} must be a positive number, got {value}")]
    NotPositive {
        /// The input's name.
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// Target utilization outside (0, 1].
    #[error("target utilization must be in (0, 1], got {0}")]
    Utilization(f64),
    /// No point of the sweep passes the gate.
    #[error("no point of the sweep passes the gate, so there is no measured capacity")]
    NoPassingPoint,
    /// The sweep has no points.
    #[error("the sweep has no points")]
    EmptySweep,
}

/// Inputs of the replica arithmetic.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlanInput {
    /// Forecast peak arrival rate (requests per second).
    pub peak_rps: f64,
    /// Measured capacity: highest passing offered rate on the tested deployment.
    pub capacity_rps: f64,
    /// Replicas serving during the benchmark.
    pub replicas_tested: u32,
    /// GPUs per replica (TP × PP).
    pub gpus_per_replica: u32,
    /// Fraction of measured capacity the plan may use (0.75 keeps 25% headroom).
    pub target_utilization: f64,
}

/// The replica arithmetic, every intermediate kept so it can be shown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReplicaPlan {
    /// Forecast peak (requests per second).
    pub peak_rps: f64,
    /// Measured capacity on the tested deployment.
    pub capacity_rps: f64,
    /// Replicas during the benchmark.
    pub replicas_tested: u32,
    /// `capacity_rps / replicas_tested`.
    pub capacity_per_replica_rps: f64,
    /// Planned utilization of measured capacity.
    pub target_utilization: f64,
    /// `capacity_per_replica_rps × target_utilization`: load planned per replica.
    pub planned_rps_per_replica: f64,
    /// `peak_rps / planned_rps_per_replica` before rounding up.
    pub replicas_unrounded: f64,
    /// `ceil(replicas_unrounded)`.
    pub required_replicas: u64,
    /// GPUs per replica.
    pub gpus_per_replica: u32,
    /// `required_replicas × gpus_per_replica`.
    pub required_gpus: u64,
    /// The formula, in words.
    pub formula: String,
}

/// Computes the replicas and GPUs needed to serve `peak_rps` at the target utilization.
pub fn plan_replicas(input: PlanInput) -> Result<ReplicaPlan, PlanError> {
    let positive = |name, value: f64| {
        if value.is_finite() && value > 0.0 {
            Ok(())
        } else {
            Err(PlanError::NotPositive { name, value })
        }
    };
    positive("peak_rps", input.peak_rps)?;
    positive("capacity_rps", input.capacity_rps)?;
    positive("replicas_tested", f64::from(input.replicas_tested))?;
    positive("gpus_per_replica", f64::from(input.gpus_per_replica))?;
    let u = input.target_utilization;
    if !(u > 0.0 && u <= 1.0) {
        return Err(PlanError::Utilization(u));
    }
    let per_replica = input.capacity_rps / f64::from(input.replicas_tested);
    let planned = per_replica * u;
    let unrounded = input.peak_rps / planned;
    let required = ceil_tolerant(unrounded) as u64;
    Ok(ReplicaPlan {
        peak_rps: input.peak_rps,
        capacity_rps: input.capacity_rps,
        replicas_tested: input.replicas_tested,
        capacity_per_replica_rps: per_replica,
        target_utilization: u,
        planned_rps_per_replica: planned,
        replicas_unrounded: unrounded,
        required_replicas: required,
        gpus_per_replica: input.gpus_per_replica,
        required_gpus: required * u64::from(input.gpus_per_replica),
        formula:
            "required_replicas = ceil(peak_rps / (capacity_per_replica_rps × target_utilization))"
                .into(),
    })
}

impl ReplicaPlan {
    /// The arithmetic with its figures, for a terminal.
    pub fn explain(&self) -> String {
        format!(
            "capacity per replica = capacity / replicas tested = {cap} / {rt} = {pr} RPS\n\
             required replicas    = ceil(peak / (capacity per replica × target utilization))\n\
             \x20                    = ceil({peak} / ({pr} × {u})) = ceil({un}) = {req}\n\
             required GPUs        = {req} replicas × {g} GPUs/replica = {gpus}\n",
            cap = num(self.capacity_rps),
            rt = self.replicas_tested,
            pr = num(self.capacity_per_replica_rps),
            peak = num(self.peak_rps),
            u = num(self.target_utilization),
            un = num(self.replicas_unrounded),
            req = self.required_replicas,
            g = self.gpus_per_replica,
            gpus = self.required_gpus,
        )
    }
}

/// A number without float noise: up to 4 decimals, trailing zeros dropped.
fn num(x: f64) -> String {
    crate::analysis::decimal(x, 4)
}

/// One test point of a sweep file: its offered rate and its report, inline or by path
/// (relative to the sweep file).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepEntry {
    /// Offered arrival rate of the point (requests per second).
    pub offered_rps: f64,
    /// The point's `slo-report.json`, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Box<PointReport>>,
    /// Path of the point's `slo-report.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_path: Option<String>,
}

/// `sweep.json`: the points of a rate sweep on one deployment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    /// Replicas serving during the sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas_tested: Option<u32>,
    /// GPUs per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_replica: Option<u32>,
    /// The test points, in any order.
    pub points: Vec<SweepEntry>,
}

/// One point with its report, ready for selection.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepPoint {
    /// Offered arrival rate.
    pub offered_rps: f64,
    /// The point's report.
    pub report: PointReport,
}

/// What the selection concluded about one point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PointAssessment {
    /// Offered arrival rate.
    pub offered_rps: f64,
    /// Gate verdict.
    pub verdict: Verdict,
    /// A class is under the sample minimum: never selectable as capacity.
    pub exploratory: bool,
    /// Why the point fails, if it does.
    pub reasons: Vec<GateReason>,
    /// Completed requests per second.
    pub request_throughput_rps: f64,
    /// Passing requests per second.
    pub observed_goodput_rps: f64,
    /// Output tokens per second.
    pub output_throughput_tps: f64,
    /// Error rate.
    pub error_rate: Option<f64>,
    /// Overall attainment (a counter; the gate is per class).
    pub overall_attainment: Option<f64>,
    /// The class with the lowest attainment: name, attainment, successes.
    pub weakest_class: Option<WeakestClass>,
    /// Queue trend.
    pub queue_trend: QueueTrend,
}

/// The class with the lowest attainment at a point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WeakestClass {
    /// Class name.
    pub name: String,
    /// Its attainment (null without successes).
    pub attainment: Option<f64>,
    /// Its successes.
    pub successful_count: u64,
}

/// The outcome of capacity selection over a sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CapacitySelection {
    /// Highest offered rate whose every point passes the gate; null if none passes.
    pub capacity_rps: Option<f64>,
    /// Every point, by offered rate.
    pub points: Vec<PointAssessment>,
    /// Things a reviewer should know (non-monotonic results, repeats that disagree).
    pub warnings: Vec<String>,
}

/// Judges every point and picks the highest offered rate that passes the gate. A rate
/// measured several times counts as passing only if every repeat passes. Reports that carry
/// their own verdict keep it; others are judged from their fields under `config`.
pub fn select_capacity(points: &[SweepPoint], config: &GateConfig) -> CapacitySelection {
    let mut assessed: Vec<PointAssessment> = points
        .iter()
        .map(|p| assess(p.offered_rps, &p.report, config))
        .collect();
    assessed.sort_by(|a, b| a.offered_rps.total_cmp(&b.offered_rps));

    let mut warnings = Vec::new();
    let mut capacity = None;
    let mut i = 0;
    while i < assessed.len() {
        let rate = assessed[i].offered_rps;
        let same: Vec<&PointAssessment> = assessed[i..]
            .iter()
            .take_while(|p| p.offered_rps == rate)
            .collect();
        let passing = same.iter().filter(|p| p.verdict == Verdict::Pass).count();
        if passing == same.len() {
            capacity = Some(rate);
        } else if passing > 0 {
            warnings.push(format!(
                "{} RPS passes in {passing} of {} repeats; it counts as failing",
                num(rate),
                same.len()
            ));
        }
        i += same.len();
    }
    if let Some(cap) = capacity {
        for p in assessed
            .iter()
            .filter(|p| p.offered_rps < cap && p.verdict == Verdict::Fail)
        {
            warnings.push(format!(
                "{} RPS fails below the selected {} RPS: the sweep is not monotonic; \
                 repeat both points before trusting the capacity",
                num(p.offered_rps),
                num(cap)
            ));
        }
    }
    CapacitySelection {
        capacity_rps: capacity,
        points: assessed,
        warnings,
    }
}

/// What the gate concludes about one point: its verdict, reasons and weakest class (a
/// report that carries its own verdict keeps it; others are judged under `config`).
pub fn assess(offered_rps: f64, report: &PointReport, config: &GateConfig) -> PointAssessment {
    let reasons = match report.verdict {
        Some(_) => report.gate_reasons.clone(),
        None => gate_reasons(report, config),
    };
    let judged = verdict(&reasons);
    // The required field has the last word: a report whose own gate failed never passes.
    let verdict = if report.capacity_gate_pass {
        judged
    } else if judged == Verdict::Pass {
        Verdict::Fail
    } else {
        judged
    };
    let weakest_class = report
        .classes
        .iter()
        .min_by(|a, b| {
            let key = |c: &crate::analysis::ClassReport| c.attainment.unwrap_or(-1.0);
            key(a.1).total_cmp(&key(b.1))
        })
        .map(|(name, c)| WeakestClass {
            name: name.clone(),
            attainment: c.attainment,
            successful_count: c.successful_count,
        });
    PointAssessment {
        offered_rps,
        verdict,
        exploratory: report.classes.values().any(|c| !c.sample_adequate),
        reasons,
        request_throughput_rps: report.request_throughput_rps,
        observed_goodput_rps: report.observed_goodput_rps,
        output_throughput_tps: report.output_throughput_tps,
        error_rate: report.error_rate,
        overall_attainment: report.overall_attainment,
        weakest_class,
        queue_trend: report.queue_trend,
    }
}

impl CapacitySelection {
    /// The sweep table and each failing point's reasons, for a terminal.
    pub fn table(&self) -> String {
        let pct = |x: Option<f64>| x.map_or("-".into(), |v| format!("{:.1}%", v * 100.0));
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:>8} {:>9} {:>7} {:>8} {:>8} {:>9} {:>9} {:>9}  {:<8} verdict",
            "offered",
            "completed",
            "errors",
            "overall",
            "weakest",
            "weakest n",
            "goodput",
            "out tok/s",
            "queue"
        );
        for p in &self.points {
            let (weak, weak_n) = p
                .weakest_class
                .as_ref()
                .map_or(("-".into(), "-".into()), |w| {
                    (pct(w.attainment), w.successful_count.to_string())
                });
            let chosen = if Some(p.offered_rps) == self.capacity_rps {
                "  <- capacity"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "{:>8} {:>9.2} {:>7} {:>8} {:>8} {:>9} {:>9.2} {:>9.0}  {:<8} {}{}",
                num(p.offered_rps),
                p.request_throughput_rps,
                pct(p.error_rate),
                pct(p.overall_attainment),
                weak,
                weak_n,
                p.observed_goodput_rps,
                p.output_throughput_tps,
                p.queue_trend.to_string(),
                p.verdict,
                chosen
            );
        }
        for p in self.points.iter().filter(|p| !p.reasons.is_empty()) {
            let _ = writeln!(out, "{} RPS {}:", num(p.offered_rps), p.verdict);
            for r in &p.reasons {
                let _ = writeln!(out, "  - {}", r.message);
            }
        }
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        out
    }

    /// The points that are exploratory (a class under the sample minimum).
    pub fn exploratory(&self) -> impl Iterator<Item = &PointAssessment> {
        self.points.iter().filter(|p| p.exploratory)
    }
}

#[cfg(test)]
mod tests;
