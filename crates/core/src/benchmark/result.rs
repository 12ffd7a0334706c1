//! What `goodput bench` found, in real-time units: the content of `sweep.json`, from which
//! `sweep.md`, `plan.md`, the plots and the terminal summary are rendered.

use serde::{Deserialize, Serialize};

use crate::analysis::Statistic;
use crate::analysis::{GateConfig, LittlesLaw, PointReport};
use crate::engine_metrics::findings::EngineFindings;
use crate::planning::PeakForecast;
use crate::planning::cost::Cost;
use crate::planning::{CapacitySelection, ReplicaPlan};
use crate::workload::CacheMode;

/// The whole benchmark (`sweep.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    /// The benchmark's `metadata.name`.
    pub name: String,
    /// When the run started (RFC 3339, UTC).
    pub started_at: String,
    /// Wall-clock seconds the whole run took.
    pub wall_seconds: f64,
    /// The server under test.
    pub target: TargetFacts,
    /// K: the simulated engine ran K times faster than real time; every figure here is
    /// converted back to real-time units.
    pub time_scale: f64,
    /// Runs of every point.
    pub repeats: u32,
    /// How a rate is judged when repeated, and how capacity is chosen.
    pub capacity_rule: String,
    /// How the queue trend of a point is decided.
    pub queue_trend_rule: String,
    /// How the engine model placed the first rates; empty when it did not.
    #[serde(default)]
    pub placement_rule: String,
    /// How a failing point is stopped early; empty when early stopping was off.
    #[serde(default)]
    pub early_stop_rule: String,
    /// The gate every point faced.
    pub gate: GateConfig,
    /// Workload classes in manifest order; the first is the one the sweep table details.
    pub class_names: Vec<String>,
    /// Latency statistics the reports show.
    pub statistics: Vec<Statistic>,
    /// One sweep per cache mode, never averaged together.
    pub modes: Vec<ModeResult>,
    /// The forecast the plan is for.
    pub peak: Option<PeakForecast>,
    /// Cache mode whose capacity the plan uses.
    pub plan_cache_mode: Option<CacheMode>,
    /// The replica plan for the peak.
    pub plan: Option<ReplicaPlan>,
    /// Things a reviewer should know.
    pub warnings: Vec<String>,
    /// The failure tests run after the sweep (`failure-test.md`), each its own report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_tests: Vec<crate::failure::FailureReport>,
    /// The simulated engine's idle calibration at its time scale (how `auto` chose K, or
    /// how far a fixed K drifted); absent for a server that is not the simulated engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<super::calibration::Calibration>,
    /// What the sweep cost (every saturation level and rate point of every cache mode;
    /// failure tests not included).
    #[serde(default)]
    pub cost: Cost,
    /// Set when the run was stopped (SIGINT, SIGTERM) before the driver finished: where it
    /// stopped. The pack is then incomplete: its capacities and plan are not the
    /// benchmark's result, and `goodput bench` exits non-zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
}

/// The server under test as it was found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetFacts {
    /// `simulated` or `url`.
    pub kind: String,
    /// Base URL requests went to.
    pub url: String,
    /// Model name sent (and, when the server lists models, found there).
    pub model: String,
    /// Simulated preset, if any.
    pub preset: Option<String>,
    /// Engine recognised from its metric names (`vllm`, `sglang`, ...), if any.
    pub engine_profile: Option<String>,
    /// Replicas under test.
    pub replicas: u32,
    /// GPUs per replica.
    pub gpus_per_replica: u32,
    /// Tokens per SSE frame of the simulated engine (ITL is then per frame, not per token).
    #[serde(default)]
    pub stream_interval: Option<u32>,
    /// Engine-metric concepts found on the scraped pages (queue, KV, prefix cache, ...).
    #[serde(default)]
    pub engine_concepts_found: Vec<String>,
    /// Concepts the detected engine can expose that were absent.
    #[serde(default)]
    pub engine_concepts_missing: Vec<String>,
}

/// The sweep of one cache mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModeResult {
    /// Cache state.
    pub cache: CacheMode,
    /// The saturation experiment run for this mode, if any.
    pub saturation: Option<SaturationResult>,
    /// Every open-loop point, every repeat, by rate then repeat.
    pub points: Vec<PointResult>,
    /// Verdicts per point and the capacity chosen (the planning core's selection).
    pub selection: CapacitySelection,
    /// Spread of every figure across repeats, per rate.
    pub spread: Vec<RateSpread>,
    /// Highest passing offered rate (RPS); `None` when no rate passes.
    pub capacity_rps: Option<f64>,
    /// Capacity divided by the replicas under test.
    pub capacity_per_replica_rps: Option<f64>,
    /// The final bracket: the highest passing rate and the lowest failing rate above it.
    #[serde(default)]
    pub bracket: Option<super::sweep::Bracket>,
    /// The rates added to narrow the bracket, in the order run.
    #[serde(default)]
    pub refinements: Vec<f64>,
    /// The engine model's capacity, calibrated to the knee, that placed the first rates.
    #[serde(default)]
    pub prediction: Option<super::driver::Prediction>,
    /// The fixed-fraction grid the model's placement replaced, and what its rate points
    /// would have held at the least.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plain_grid: Option<PlainGrid>,
    /// The replica plan for the peak with this mode's capacity.
    pub plan: Option<ReplicaPlan>,
    /// Mean prefix-cache hit rate over the points that reported one.
    pub mean_prefix_cache_hit_rate: Option<f64>,
    /// What this mode's saturation levels and rate points cost.
    #[serde(default)]
    pub cost: Cost,
    /// The lowest rate the load generator could not drive on schedule, if one: no rate at
    /// or above it ran again; `starved` when nothing below it was measured either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_limit: Option<super::driver::ClientLimit>,
}

/// The fixed-fraction grid a model-placed sweep did not run, for its cost to be compared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlainGrid {
    /// The rates the knee's throughput proposed (RPS).
    pub rates: Vec<f64>,
    /// Their planned schedules, every repeat, on every GPU under test, drain not counted
    /// ([`Cost::planned`]): a lower bound on what the grid would have cost.
    pub cost: Cost,
}

impl PlainGrid {
    /// The grid of `rates` at the manifest's planned schedules, every one of `repeats`, on
    /// `gpus` accelerators.
    pub fn planned(
        rates: Vec<f64>,
        manifest: &crate::workload::WorkloadManifest,
        repeats: u32,
        gpus: u32,
    ) -> PlainGrid {
        let c = &manifest.client;
        let costs: Vec<Cost> = rates
            .iter()
            .flat_map(|&rate| {
                let one = Cost::planned(
                    rate,
                    c.initial_scheduled_requests,
                    c.minimum_duration_seconds,
                    gpus,
                );
                std::iter::repeat_n(one, repeats.max(1) as usize)
            })
            .collect();
        PlainGrid {
            rates,
            cost: Cost::sum(&costs),
        }
    }
}

impl ModeResult {
    /// What this mode's open-loop rate points cost (the saturation sweep left out).
    pub fn rate_points_cost(&self) -> Cost {
        Cost::sum(self.points.iter().map(|p| &p.cost))
    }
}

/// One open-loop test point (one repeat).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    /// Offered arrival rate (requests per second, real time).
    pub offered_rps: f64,
    /// Repeat index (0-based).
    pub repeat: u32,
    /// Schedule seed of this repeat.
    pub seed: u64,
    /// The rate was added to narrow the bracket between a pass and a fail.
    #[serde(default)]
    pub refinement: bool,
    /// Folder of the point's files, relative to the pack.
    pub dir: String,
    /// The analysis core's report (`slo-report.json`).
    pub report: PointReport,
    /// False when the point is not evidence (client behind schedule, stopped early, ...).
    pub valid: bool,
    /// Why not.
    pub validity_reasons: Vec<String>,
    /// Among the reasons, the load generator fell behind its schedule: the sweep did not
    /// move on this point.
    #[serde(default)]
    pub client_behind: bool,
    /// What a reviewer should know that does not void the point.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validity_notes: Vec<String>,
    /// Where the queue trend came from.
    pub queue_trend_source: String,
    /// KV, prefix cache, preemptions, cache-state flags.
    pub engine_findings: Option<EngineFindings>,
    /// The client's figures beside the engine's own counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_truth: Option<crate::engine_metrics::truth::EngineTruth>,
    /// Little's Law over the window.
    pub littles_law: Option<LittlesLaw>,
    /// Client schedule lag P99 (ms, on the run's own clock).
    pub schedule_lag_p99_ms: f64,
    /// The simulated engine's frame lateness over the point (model time); `None` for a
    /// server under test that is not the in-process simulated engine.
    #[serde(default)]
    pub engine_lateness: Option<super::fidelity::EngineLateness>,
    /// What the point cost.
    #[serde(default)]
    pub cost: Cost,
    /// Early stopping settled the point as failing: the evidence at that moment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_stop: Option<crate::analysis::EarlyStop>,
}

/// The saturation (closed-loop) experiment: throughput and latency per concurrency.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SaturationResult {
    /// One entry per concurrency level.
    pub levels: Vec<SaturationLevel>,
    /// The highest level at which every class still met its cutoffs at the required
    /// attainment, if any.
    pub knee: Option<SaturationLevel>,
    /// How the knee is chosen and the sweep range derived, in words.
    pub rule: String,
    /// Offered rates proposed for the rate sweep (empty when the spec fixes them).
    pub proposed_rates: Vec<f64>,
}

/// One concurrency level of the saturation experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SaturationLevel {
    /// Requests in flight.
    pub concurrency: u32,
    /// Folder of the level's files, relative to the pack.
    pub dir: String,
    /// Completed requests per second.
    pub throughput_rps: f64,
    /// What the engine sustained by Little's law: concurrency ÷ mean end-to-end latency
    /// (without the client's turnaround between requests).
    #[serde(default)]
    pub engine_rps: Option<f64>,
    /// Output tokens per second.
    pub output_tps: f64,
    /// Lowest per-class attainment.
    pub weakest_attainment: Option<f64>,
    /// P95 TTFT of the first class (ms).
    pub p95_ttft_ms: Option<f64>,
    /// P95 TPOT of the first class (ms).
    pub p95_tpot_ms: Option<f64>,
    /// Every class met its cutoffs at the required attainment (sample size aside).
    pub slos_met: bool,
    /// What the level cost.
    #[serde(default)]
    pub cost: Cost,
}

/// How one figure varied across the repeats of a rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Mean value.
    pub mean: f64,
}

/// The repeats of one rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateSpread {
    /// Offered rate.
    pub offered_rps: f64,
    /// Repeats run.
    pub repeats: u32,
    /// Repeats that passed the gate.
    pub passed: u32,
    /// Observed goodput (RPS).
    pub goodput_rps: Option<Spread>,
    /// Lowest per-class attainment.
    pub weakest_attainment: Option<Spread>,
    /// Error rate.
    pub error_rate: Option<Spread>,
    /// P95 TTFT of the first class (ms).
    pub p95_ttft_ms: Option<Spread>,
    /// P95 TPOT of the first class (ms).
    pub p95_tpot_ms: Option<Spread>,
}
