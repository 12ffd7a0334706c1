//! `goodput bench`: the whole capacity benchmark on one machine (the local shell).
//!
//! One `CapacityBenchmark` spec → per cache mode: a saturation sweep (closed loop) that
//! finds the knee and proposes the rate sweep's range, then the open-loop rate sweep with
//! every point analysed and gated by the core, extended until a failing rate sits above a
//! passing one; capacity, per-replica capacity and the replica plan, as a [`BenchResult`]
//! (`crate::pack` renders it: this module never reads the pack).
//!
//! Time scaling: against the simulated engine run `K` times faster than real time, every
//! duration handed to the load generator (warmup, minimum duration, timeouts, closed-loop
//! duration, scrape interval) is divided by `K` and every rate multiplied by `K`; the
//! measured records and engine series are multiplied back by `K` before the analysis core
//! sees them, so reports, gates and verdicts are in real-time units.
//!
//! This file holds the loop over the driver's steps ([`run_bench`]) and each mode's
//! conclusion; `target.rs` starts or finds what is measured, `points.rs` runs one point,
//! `failure_tests.rs` the failure tests after the sweep, `calibration.rs` the time scale's
//! probes and `fidelity.rs` their records.

pub mod calibration;
mod failure_tests;
pub mod fidelity;
mod points;
mod target;

use target::{SimulatedEngine, resolve_identity, start_target};

// The driver, the sweep and the result are the core's, the engine model's placement the
// API's (what a spec resolves to), one point's load the load generator's: under the paths
// they had here.
pub use goodput_api::placement as model;
pub use goodput_core::benchmark::{driver, result, sweep};
pub use goodput_loadgen::point_job;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::watch;

use crate::analysis::{PointReport, rate_label};
use crate::api::{CacheMode, CapacityBenchmark, CapacityBenchmarkSpec, TimeScale};
use crate::engine_metrics::DetectedProfile;
use crate::engine_metrics::identify::identify;
use crate::engine_metrics::prometheus_api::{PrometheusQuery, query_range_series};
use crate::engine_metrics::scrape::discover_targets;
use crate::loadgen::point::{
    MeasuredPoint, PointError, PointSummaryFile, measure_point, write_json,
};
use crate::pack_files;
use crate::planning::cost::Cost;
use crate::planning::{SweepEntry, SweepFile};
use crate::sim::live::fleet::{FleetConfig, start_fleet};
use crate::sim::live::router::RouterConfig;
use crate::sim::live::{Replica, ReplicaConfig};
use crate::workload::{Resolved, WorkloadManifest};
use driver::{Outcome, PointKey, Recorded, Step, TestedDeployment};
use point_job::PointTarget;
use result::{
    BenchResult, ModeResult, PlainGrid, PointResult, SaturationLevel, SaturationResult, TargetFacts,
};

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The spec cannot be run as written.
    #[error("{0}")]
    Spec(String),
    /// The simulated engine could not start.
    #[error("simulated engine: {0}")]
    Simulated(String),
    /// A point could not be run or written.
    #[error(transparent)]
    Point(#[from] PointError),
    /// A pack file could not be written.
    #[error("cannot write {0}: {1}")]
    Write(String, std::io::Error),
    /// The HTTP client could not be built.
    #[error("HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    /// The simulated engine cannot keep its model's time at the spec's time scale here.
    #[error("{0}")]
    Calibration(String),
}

/// How the capacity verdict treats repeats (stated in every report).
pub const CAPACITY_RULE: &str = "capacity = the highest offered rate whose point passes the \
    per-class gate in every repeat (a rate that fails in any repeat is not capacity; the \
    spread across repeats is reported, never only the best run); points the client could \
    not drive on schedule are not evidence and are left out";

/// How the queue trend is decided (stated in every report).
pub const QUEUE_TREND_RULE: &str = "queue trend = least-squares line through the engine's \
    waiting-queue gauge (summed over replicas, scraped through the measured window); \
    `growing` when its slope is significantly positive (t > 3 against its standard error) \
    and the fitted line rises by more than max(5 requests, half the mean queue) over the \
    window, else `flat` (a queue steady at any level is flat); an engine that admits every \
    request into its running batch keeps its waiting queue empty, so the requests inside \
    the engine (running plus waiting) are tested the same way and a growth there is \
    `growing` too; without engine metrics the client's in-flight count is tested the same \
    way";

/// Options of one run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// The pack folder.
    pub out: PathBuf,
    /// Progress bar on stderr.
    pub progress: bool,
}

/// A running target: the simulated engine (kept alive for the run) or a URL.
struct Target {
    fleet: Option<SimulatedEngine>,
    facts: TargetFacts,
    metrics_targets: Vec<String>,
    time_scale: f64,
    /// The simulated engine's idle calibration at that time scale.
    calibration: Option<calibration::Calibration>,
    /// The simulated engine's setup (the model it runs); `None` for a URL.
    setup: Option<crate::sim::Setup>,
    /// What a reviewer should know about how the target was found.
    notes: Vec<String>,
}

/// Runs the benchmark, writing each point's folder and `sweep.json` into `options.out`;
/// [`crate::pack::write_reports`] renders the pack's reports from the result.
pub async fn run_bench(
    benchmark: &CapacityBenchmark,
    manifest: &WorkloadManifest,
    options: &BenchOptions,
    stop: watch::Receiver<bool>,
) -> Result<BenchResult, BenchError> {
    let wall = Instant::now();
    let started_at = rfc3339_now();
    let spec = &benchmark.spec;
    let client = crate::http_client::load_client(false)?;
    let target = start_target(spec, manifest, &client).await?;
    let k = target.time_scale;
    let name = benchmark
        .metadata
        .name
        .clone()
        .unwrap_or_else(|| "benchmark".into());
    std::fs::create_dir_all(&options.out)
        .map_err(|e| BenchError::Write(options.out.display().to_string(), e))?;

    let mut frozen = manifest.clone();
    frozen.resolved = Some(resolve_identity(&client, &target).await);
    write_yaml(&options.out.join(pack_files::MANIFEST), &frozen)?;
    write_yaml(&options.out.join(pack_files::BENCHMARK), benchmark)?;

    let bar = progress_bar(options.progress);
    let runner = Runner {
        spec,
        manifest,
        client,
        target: &target,
        out: options.out.clone(),
        bar: bar.clone(),
        stop,
        nonce: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        profile: std::sync::Mutex::new(None),
        failures: std::sync::Mutex::new(Vec::new()),
    };
    // The driver decides every point; this shell only runs them in-process.
    let mut plan = spec.sweep_plan(manifest.client.request_schedule_seed);
    if let (driver::RateSource::Knee { .. }, Some(setup)) = (&plan.rates, &target.setup) {
        // The engine model places the first rates once the knee calibrates it.
        plan.model = model::model_priors(spec, manifest, setup, target.facts.replicas)
            .map_err(|e| BenchError::Spec(format!("the engine model: {e}")))?;
    }
    let model_placed = !plan.model.is_empty();
    let mut recorded: Vec<Recorded> = Vec::new();
    let mut levels: Vec<(CacheMode, SaturationLevel)> = Vec::new();
    let mut points: Vec<(CacheMode, PointResult)> = Vec::new();
    let gate = manifest.gate_config();
    let mut interrupted = None;
    while let Step::Run(key) = driver::next_step(&plan, &recorded) {
        let stopped = || *runner.stop.borrow();
        if stopped() {
            interrupted = Some(format!("before {}", key.label()));
            break;
        }
        let outcome = match key {
            PointKey::Saturation { cache, concurrency } => {
                let level = runner.saturation_level(cache, concurrency).await?;
                if stopped() {
                    // A level cut short is no evidence of the knee.
                    interrupted = Some(format!("during {} ({})", key.label(), level.dir));
                    break;
                }
                let outcome = Outcome::Saturation {
                    throughput_rps: level.throughput_rps,
                    slos_met: level.slos_met,
                    engine_rps: level.engine_rps,
                };
                levels.push((cache, level));
                outcome
            }
            PointKey::Rate {
                cache,
                rate,
                repeat,
            } => {
                let point = runner.rate_point(key, cache, rate, repeat).await?;
                if stopped() {
                    interrupted = Some(format!("during {} ({})", key.label(), point.dir));
                    break;
                }
                let assessment = crate::planning::assess(rate, &point.report, &gate);
                let outcome = Outcome::Rate(driver::rate_outcome(
                    point.valid,
                    point.client_behind,
                    &assessment,
                ));
                points.push((cache, point));
                outcome
            }
        };
        recorded.push(Recorded { key, outcome });
    }
    let mut modes = Vec::new();
    let mut warnings: Vec<String> = target
        .calibration
        .as_ref()
        .and_then(|c| c.warning())
        .into_iter()
        .chain(target.notes.iter().cloned())
        .chain(
            runner
                .failures
                .lock()
                .map(|f| f.clone())
                .unwrap_or_default(),
        )
        .collect();
    for &cache in &plan.cache_modes {
        if interrupted.is_some() && !recorded.iter().any(|r| r.key.cache() == cache) {
            // Never reached: nothing to report.
            continue;
        }
        let decision = driver::decide_mode(&plan, cache, &recorded);
        warnings.extend(decision.warnings.iter().cloned());
        let saturation = plan.saturation.as_ref().map(|_| {
            let levels: Vec<SaturationLevel> = levels
                .iter()
                .filter(|(c, _)| *c == cache)
                .map(|(_, l)| l.clone())
                .collect();
            let range = spec.experiments.rate_sweep.clone().unwrap_or_default();
            SaturationResult {
                knee: levels
                    .iter()
                    .find(|l| Some(l.concurrency) == decision.knee)
                    .cloned(),
                levels,
                rule: sweep::knee_rule(range.low_fraction, range.high_fraction, range.points),
                proposed_rates: decision.proposed_rates.clone(),
            }
        });
        let mut mode_points: Vec<PointResult> = points
            .iter()
            .filter(|(c, _)| *c == cache)
            .map(|(_, p)| PointResult {
                refinement: decision
                    .refinements
                    .iter()
                    .any(|&r| PointKey::same_rate(r, p.offered_rps)),
                ..p.clone()
            })
            .collect();
        mode_points.sort_by(|a, b| {
            a.offered_rps
                .total_cmp(&b.offered_rps)
                .then(a.repeat.cmp(&b.repeat))
        });
        let mut mode = runner.finish_mode(cache, saturation, mode_points, &mut warnings)?;
        mode.prediction = decision.prediction;
        mode.plain_grid = (!decision.replaced_grid.is_empty()).then(|| {
            PlainGrid::planned(
                decision.replaced_grid,
                manifest,
                spec.repeats,
                runner.gpus(),
            )
        });
        mode.bracket = decision.bracket;
        mode.client_limit = decision.client_limit;
        mode.refinements = decision.refinements;
        modes.push(mode);
    }
    bar.finish_and_clear();
    let mut facts = target.facts.clone();
    if let Some(found) = runner.profile.lock().ok().and_then(|p| p.clone()) {
        facts.engine_profile = Some(found.engine.as_str().to_owned());
        facts.engine_concepts_found = found.found.iter().map(|c| c.key().to_owned()).collect();
        facts.engine_concepts_missing = found.missing.iter().map(|c| c.key().to_owned()).collect();
    }

    let capacities: Vec<(CacheMode, Option<f64>)> =
        modes.iter().map(|m| (m.cache, m.capacity_rps)).collect();
    let plan_cache_mode = driver::plan_cache_mode(spec.peak.as_ref(), &capacities);
    let plan = plan_cache_mode
        .and_then(|c| modes.iter().find(|m| m.cache == c))
        .and_then(|m| m.plan.clone());
    if let (Some(_), None) = (&spec.peak, &plan) {
        warnings.push("no replica plan: no rate passed the gate in the plan's cache mode".into());
    }
    if let Some(when) = &interrupted {
        warnings.insert(
            0,
            format!(
                "INCOMPLETE: the run was interrupted {when}; the points after it never ran, \
                 and no capacity or plan here is the benchmark's result"
            ),
        );
    }
    let failure_tests = match &spec.failure_test {
        Some(_) if interrupted.is_some() => Vec::new(),
        Some(test) => {
            let cache = plan_cache_mode.or_else(|| modes.first().map(|m| m.cache));
            let capacity = cache
                .and_then(|c| modes.iter().find(|m| m.cache == c))
                .and_then(|m| m.capacity_rps);
            runner
                .failure_tests(
                    test,
                    cache.unwrap_or(CacheMode::Cold),
                    capacity,
                    &mut warnings,
                )
                .await?
        }
        None => Vec::new(),
    };
    let cost = Cost::sum(modes.iter().map(|m| &m.cost));
    let result = BenchResult {
        name,
        started_at,
        wall_seconds: wall.elapsed().as_secs_f64(),
        target: facts,
        time_scale: k,
        repeats: spec.repeats.max(1),
        capacity_rule: CAPACITY_RULE.into(),
        queue_trend_rule: QUEUE_TREND_RULE.into(),
        placement_rule: if model_placed {
            model::PLACEMENT_RULE.into()
        } else {
            String::new()
        },
        early_stop_rule: if spec.experiments.early_stop {
            crate::analysis::EARLY_STOP_RULE.into()
        } else {
            String::new()
        },
        gate: manifest.gate_config(),
        class_names: manifest.workload.iter().map(|c| c.name.clone()).collect(),
        statistics: spec.reporting.statistics.clone(),
        modes,
        peak: spec.peak.clone(),
        plan_cache_mode,
        plan,
        warnings,
        failure_tests,
        calibration: target.calibration.clone(),
        cost,
        interrupted,
    };
    write_json(&options.out.join(pack_files::SWEEP_JSON), &result)?;
    if let Some(engine) = target.fleet {
        engine.shutdown().await;
    }
    Ok(result)
}

struct Runner<'a> {
    spec: &'a CapacityBenchmarkSpec,
    manifest: &'a WorkloadManifest,
    client: reqwest::Client,
    target: &'a Target,
    out: PathBuf,
    bar: ProgressBar,
    stop: watch::Receiver<bool>,
    /// Distinguishes this run's prompts from every other run's.
    nonce: u64,
    /// The engine recognised on the first point whose metrics named one.
    profile: std::sync::Mutex<Option<DetectedProfile>>,
    /// Points that lost more requests than the gate allows, with the server's words.
    failures: std::sync::Mutex<Vec<String>>,
}

impl Runner<'_> {
    fn finish_mode(
        &self,
        cache: CacheMode,
        saturation: Option<SaturationResult>,
        points: Vec<PointResult>,
        warnings: &mut Vec<String>,
    ) -> Result<ModeResult, BenchError> {
        let gate = self.manifest.gate_config();
        let k = self.target.time_scale;
        for p in points.iter().filter(|p| p.valid) {
            let passed = p.report.capacity_gate_pass;
            // A valid point over the refusal bound that did not pass is a standing failure.
            let finding = p.engine_lateness.and_then(|l| {
                if l.refuses_point(passed) {
                    Some(l.standing_failure(k))
                } else {
                    l.finding(k, passed)
                }
            });
            if let Some(finding) = finding {
                warnings.push(format!(
                    "{cache} {} RPS repeat {}: {finding}",
                    p.offered_rps, p.repeat
                ));
            }
        }
        for p in points.iter().filter(|p| !p.valid) {
            warnings.push(format!(
                "{cache} {} RPS repeat {}: not evidence ({}); left out of the capacity",
                p.offered_rps,
                p.repeat,
                p.validity_reasons.join("; ")
            ));
        }
        let replicas = self.target.facts.replicas;
        let rows: Vec<(f64, bool, &PointReport)> = points
            .iter()
            .map(|p| (p.offered_rps, p.valid, &p.report))
            .collect();
        let conclusion = driver::conclude_mode(
            &rows,
            &gate,
            TestedDeployment {
                replicas,
                gpus_per_replica: self.target.facts.gpus_per_replica,
            },
            self.spec.peak.as_ref(),
            self.manifest.acceptance.target_utilization,
        )
        .map_err(|e| BenchError::Spec(format!("spec.peak: {e}")))?;
        let first = self
            .manifest
            .workload
            .first()
            .map(|c| c.name.clone())
            .unwrap_or_default();
        let pairs: Vec<(f64, &PointReport)> =
            points.iter().map(|p| (p.offered_rps, &p.report)).collect();
        let spread = sweep::spread(&pairs, &first, &gate);
        let rates: Vec<f64> = points
            .iter()
            .filter_map(|p| p.engine_findings.as_ref()?.prefix_cache_hit_rate)
            .collect();
        let mean_prefix_cache_hit_rate =
            (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64);
        // A per-mode sweep file that `goodput plan --sweep` reads as is.
        let sweep_file = SweepFile {
            replicas_tested: Some(replicas),
            gpus_per_replica: Some(self.target.facts.gpus_per_replica),
            points: points
                .iter()
                .filter(|p| p.valid)
                .map(|p| SweepEntry {
                    offered_rps: p.offered_rps,
                    report: None,
                    report_path: Some(format!("{}/slo-report.json", relative_to_mode(&p.dir))),
                })
                .collect(),
        };
        write_json(
            &self.out.join(mode_dir(cache)).join(pack_files::SWEEP_JSON),
            &sweep_file,
        )?;
        let cost = Cost::sum(
            points.iter().map(|p| &p.cost).chain(
                saturation
                    .iter()
                    .flat_map(|s| s.levels.iter().map(|l| &l.cost)),
            ),
        );
        Ok(ModeResult {
            cache,
            saturation,
            points,
            selection: conclusion.selection,
            spread,
            capacity_rps: conclusion.capacity_rps,
            capacity_per_replica_rps: conclusion.capacity_per_replica_rps,
            bracket: None,
            refinements: Vec::new(),
            prediction: None,
            plain_grid: None,
            plan: conclusion.plan,
            mean_prefix_cache_hit_rate,
            cost,
            client_limit: None,
        })
    }
}

/// The engine series of a point's window (`start_unix_s` to `end_unix_s`) from the
/// Prometheus `spec.target.prometheus` names, read once it has scraped the window's end:
/// what `goodput bench` and a point Job's first shard both judge the queue trend with.
pub async fn prometheus_series(
    client: &reqwest::Client,
    prometheus: &crate::api::PrometheusSource,
    start_unix_s: f64,
    end_unix_s: f64,
) -> Result<
    crate::engine_metrics::series::MetricsSeries,
    crate::engine_metrics::prometheus_api::PrometheusError,
> {
    let source = PrometheusQuery {
        base_url: prometheus.url.clone(),
        selector: prometheus.selector.clone(),
        step_s: prometheus.step_seconds,
    };
    // Prometheus has the window's last samples only after its next scrape.
    tokio::time::sleep(Duration::from_secs_f64(
        prometheus.step_seconds.clamp(0.0, 60.0),
    ))
    .await;
    query_range_series(client, &source, None, start_unix_s, end_unix_s).await
}

fn progress_bar(enabled: bool) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    // The template is a constant that parses; a failure would only lose the styling.
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {pos} points · {msg}")
    {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// `cold` / `warm`: a cache mode's folder in the pack.
pub fn mode_dir(cache: CacheMode) -> &'static str {
    cache.as_str()
}

fn relative_to_mode(dir: &str) -> &str {
    dir.split_once('/').map_or(dir, |(_, rest)| rest)
}

fn write_yaml(path: &Path, value: &impl serde::Serialize) -> Result<(), BenchError> {
    let text = serde_saphyr::to_string(value).map_err(|e| {
        BenchError::Write(
            path.display().to_string(),
            std::io::Error::other(e.to_string()),
        )
    })?;
    std::fs::write(path, text).map_err(|e| BenchError::Write(path.display().to_string(), e))
}

fn rfc3339_now() -> String {
    rfc3339(k8s_openapi::jiff::Timestamp::now())
}

/// `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds).
fn rfc3339(t: k8s_openapi::jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The default pack folder: `./capacity-pack/<name>-<UTC timestamp>/`.
pub fn default_pack_dir(name: &str) -> PathBuf {
    let stamp: String = rfc3339_now()
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    PathBuf::from("capacity-pack").join(format!("{name}-{stamp}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        let day = |d: i64| {
            rfc3339(k8s_openapi::jiff::Timestamp::from_second(d * 86_400).expect("in range"))
        };
        assert_eq!(day(0), "1970-01-01T00:00:00Z");
        assert_eq!(day(20_788), "2026-12-01T00:00:00Z");
        assert_eq!(day(11_016), "2000-02-29T00:00:00Z");
    }
}
