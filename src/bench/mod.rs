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

pub mod calibration;
pub mod fidelity;
pub mod model;
pub mod point_job;

// The driver, the sweep and the result are the core's, under the paths they had here.
pub use goodput_core::benchmark::{driver, result, sweep};

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
    write_yaml(&options.out.join("workload-manifest.yaml"), &frozen)?;
    write_yaml(&options.out.join("capacity-benchmark.yaml"), benchmark)?;

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
    write_json(&options.out.join("sweep.json"), &result)?;
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
            &self.out.join(mode_dir(cache)).join("sweep.json"),
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

    /// The failure tests of `spec.failureTest`, one after another, at the given rate or the
    /// capacity × `rateFraction`; each writes its folder and comes back as its report.
    async fn failure_tests(
        &self,
        test: &crate::api::FailureTest,
        cache: CacheMode,
        capacity_rps: Option<f64>,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<crate::failure::FailureReport>, BenchError> {
        use crate::failure::local::{EngineProcess, FaultSite, SimulatedFleet, run_test};
        let Some(rate) = test.rate_rps(capacity_rps) else {
            warnings.push(
                "failure tests skipped: no rate passed the gate and failureTest.rate is not \
                 given"
                    .into(),
            );
            return Ok(Vec::new());
        };
        let k = self.target.time_scale;
        // A real engine's process when one is named; otherwise the simulated engine's
        // admin API (in-process, or `goodput serve-sim` behind a URL).
        let site = match (&self.target.fleet, &test.engine_process) {
            (None, Some(p)) => FaultSite::Process(EngineProcess {
                url: self.target.facts.url.clone(),
                pid_file: p.pid_file.clone().into(),
            }),
            _ => FaultSite::Fleet(SimulatedFleet {
                router_url: self.target.facts.url.clone(),
                time_scale: k,
            }),
        };
        let gate = self.manifest.gate_config();
        let point_target = PointTarget {
            url: self.target.facts.url.clone(),
            model: self.target.facts.model.clone(),
            metrics_targets: self.target.metrics_targets.clone(),
            discover_metrics: false,
            time_scale: k,
        };
        let key = PointKey::Rate {
            cache,
            rate,
            repeat: 0,
        };
        let mut reports = Vec::new();
        for (i, fault) in test.faults.iter().enumerate() {
            self.bar.set_message(format!(
                "failure test {}: {} on {} at {} RPS",
                i + 1,
                fault.kind,
                fault.hits(),
                rate_label(rate)
            ));
            // Prompts of their own: the sweep's never reach these engines' caches.
            let nonce = self.nonce.wrapping_add(0x9e37_79b9 * (i as u64 + 1));
            let (config, plan) =
                point_job::point_load(self.spec, self.manifest, key, &point_target, nonce)
                    .map_err(|e| BenchError::Spec(e.to_string()))?;
            let done = run_test(
                &self.client,
                &site,
                test,
                fault,
                (&config, &plan),
                self.target.facts.replicas,
                &gate,
                self.stop.clone(),
            )
            .await
            .map_err(|e| BenchError::Spec(format!("failure test {}: {e}", fault.kind)))?;
            if let Some(e) = &done.alerts_error {
                warnings.push(format!(
                    "failure test {}: alerts not evaluated: {e}",
                    fault.kind
                ));
            }
            let (report, run, config, plan) = (done.report, done.run, done.config, done.plan);
            let dir = self.out.join(fault.kind.dir());
            let summary = run.measured.summarize(&config, &plan)?;
            run.measured.write(&summary, &plan, &dir)?;
            write_json(&dir.join("failure-test.json"), &report)?;
            self.bar.inc(1);
            reports.push(report);
        }
        Ok(reports)
    }

    /// One closed-loop level.
    async fn saturation_level(
        &self,
        cache: CacheMode,
        concurrency: u32,
    ) -> Result<SaturationLevel, BenchError> {
        let key = PointKey::Saturation { cache, concurrency };
        let dir = point_job::point_dir(key, self.spec.repeats.max(1));
        self.bar
            .set_message(format!("{cache} saturation: {concurrency} in flight"));
        let (summary, _lateness) = self.point(key, &dir).await?;
        self.bar.inc(1);
        let r = &summary.report;
        let first = self
            .manifest
            .workload
            .first()
            .and_then(|c| r.classes.get(&c.name));
        Ok(SaturationLevel {
            concurrency,
            dir,
            throughput_rps: r.request_throughput_rps,
            engine_rps: summary.engine_rps(),
            output_tps: r.output_throughput_tps,
            weakest_attainment: r.weakest_attainment(),
            p95_ttft_ms: first.and_then(|c| c.p95_ttft_ms),
            p95_tpot_ms: first.and_then(|c| c.p95_tpot_ms),
            slos_met: driver::slos_met(r, &self.manifest.gate_config()),
            cost: self.cost(&summary),
        })
    }

    /// What a point cost: its busy time (real-time units) on every GPU under test.
    fn cost(&self, summary: &PointSummaryFile) -> Cost {
        Cost::of(summary.client.busy_s, self.gpus(), summary.client.sent)
    }

    /// Replicas × GPUs per replica under test.
    fn gpus(&self) -> u32 {
        let facts = &self.target.facts;
        facts.replicas.max(1) * facts.gpus_per_replica.max(1)
    }

    /// One open-loop point (one repeat).
    async fn rate_point(
        &self,
        key: PointKey,
        cache: CacheMode,
        rate: f64,
        repeat: u32,
    ) -> Result<PointResult, BenchError> {
        let seed = key.seed(self.manifest.client.request_schedule_seed);
        let dir = point_job::point_dir(key, self.spec.repeats.max(1));
        self.bar.set_message(format!(
            "{cache} {} RPS{}",
            rate_label(rate),
            if repeat >= self.spec.repeats.max(1) {
                " (again: the first was not evidence)".to_owned()
            } else if self.spec.repeats > 1 {
                format!(" repeat {}", repeat + 1)
            } else {
                String::new()
            }
        ));
        let (summary, engine_lateness) = self.point(key, &dir).await?;
        self.bar.inc(1);
        write_json(
            &self.out.join(&dir).join("slo-report.json"),
            &summary.report,
        )?;
        Ok(PointResult {
            offered_rps: rate,
            repeat,
            seed,
            refinement: false,
            dir,
            valid: summary.validity.valid,
            validity_reasons: summary.validity.reasons.clone(),
            client_behind: summary.validity.client_behind,
            validity_notes: summary.validity.notes.clone(),
            queue_trend_source: summary.queue_trend_source.clone(),
            engine_findings: summary.engine_findings.clone(),
            engine_truth: summary.engine_truth.clone(),
            littles_law: summary.littles_law,
            schedule_lag_p99_ms: summary.client.schedule_lag_ms.p99,
            engine_lateness,
            cost: self.cost(&summary),
            early_stop: summary.client.early_stop.clone(),
            report: summary.report,
        })
    }

    /// Runs one point on the run's clock, converts it to model time and writes its files.
    /// Returns the summary and, on the simulated engine, its frame lateness over the point
    /// (a point that did not pass with lateness over the bound is marked not evidence in
    /// its summary).
    async fn point(
        &self,
        key: PointKey,
        dir: &str,
    ) -> Result<(PointSummaryFile, Option<fidelity::EngineLateness>), BenchError> {
        let k = self.target.time_scale;
        let target = PointTarget {
            url: self.target.facts.url.clone(),
            model: self.target.facts.model.clone(),
            metrics_targets: self.target.metrics_targets.clone(),
            discover_metrics: false,
            time_scale: k,
        };
        let (real, real_plan) =
            point_job::point_load(self.spec, self.manifest, key, &target, self.nonce)
                .map_err(|e| BenchError::Spec(e.to_string()))?;
        // One definition of time scaling (the load generator's): the run uses the scaled
        // forms, and the measured point is rescaled to real time below.
        let scaled = real.time_scaled(k);
        let scaled_plan = real_plan.time_scaled(k);
        let replicas = self
            .target
            .fleet
            .as_ref()
            .map_or(&[][..], |f| &f.replicas[..]);
        for r in replicas {
            r.reset_lateness();
        }
        let mut measured: MeasuredPoint = measure_point(
            self.client.clone(),
            &scaled,
            &scaled_plan,
            self.stop.clone(),
        )
        .await?;
        if let Some(p) = &self.spec.target.prometheus {
            let end = measured.started_unix_s + measured.run.start.elapsed().as_secs_f64();
            match prometheus_series(&self.client, p, measured.started_unix_s, end).await {
                Ok(series) => measured.series = Some(series),
                // The point stands on the client's records; the queue trend then comes
                // from the client's in-flight count, and the summary says so.
                Err(e) => self
                    .bar
                    .println(format!("warning: {dir}: engine metrics: {e}")),
            }
        }
        if let Some(found) = measured.series.as_ref().and_then(|s| s.profile.as_ref())
            && let Ok(mut slot) = self.profile.lock()
        {
            slot.get_or_insert_with(|| found.clone());
        }
        let frames: Vec<_> = replicas
            .iter()
            .filter_map(|r| r.lateness().map(|(frames, _steps)| frames))
            .collect();
        let lateness = fidelity::tightest_ttft_cutoff_ms(&real_plan.gate)
            .and_then(|cutoff| fidelity::engine_lateness(&frames, k, cutoff));
        measured.rescale(k);
        let mut summary = measured.summarize(&real, &real_plan)?;
        if let Some(note) = failure_note(dir, &summary, &real_plan.gate) {
            self.bar.println(format!("warning: {note}"));
            if let Ok(mut f) = self.failures.lock() {
                f.push(note);
            }
        }
        let passed = summary.report.capacity_gate_pass;
        if let Some(l) = lateness.filter(|l| l.refuses_point(passed))
            && let Some(finding) = l.finding(k, passed)
        {
            // The harness's delay voids only a failure it could have caused: one whose
            // attainment stays short with the largest lateness taken off every request
            // stands (a late engine can grow its own queue, so that rule alone does not).
            let short = crate::analysis::attainment_short_beyond(
                &real_plan.gate,
                measured
                    .run
                    .records
                    .iter()
                    .filter(|r| r.ok())
                    .map(|r| (r.class, r.ttft_ms, r.tpot_ms, u64::from(r.output_tokens))),
                l.relief_ms(),
            );
            if short {
                summary.validity.notes.push(l.standing_failure(k));
            } else {
                summary.validity.valid = false;
                summary.validity.reasons.push(finding);
            }
        }
        measured.write(&summary, &real_plan, &self.out.join(dir))?;
        Ok((summary, lateness))
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

/// The simulated engine on its own async runtime and threads, so that its HTTP and SSE work
/// does not delay the load generator's sends (which would show as schedule lag).
struct SimulatedEngine {
    url: String,
    /// The replicas' handles, for their frame lateness.
    replicas: Vec<Replica>,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl SimulatedEngine {
    async fn start(config: FleetConfig) -> Result<Self, BenchError> {
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("simulated-engine".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("simulated-engine-io")
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match start_fleet(config).await {
                        Ok(fleet) => {
                            let replicas =
                                fleet.replicas.iter().map(|r| r.replica().clone()).collect();
                            let _ = ready_tx.send(Ok((fleet.router_url(), replicas)));
                            let _ = stop_rx.await;
                            fleet.shutdown().await;
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                        }
                    }
                });
            })
            .map_err(|e| BenchError::Simulated(e.to_string()))?;
        let (url, replicas) = ready_rx
            .await
            .map_err(|_| BenchError::Simulated("the engine thread ended early".into()))?
            .map_err(BenchError::Simulated)?;
        Ok(SimulatedEngine {
            url,
            replicas,
            stop,
            thread,
        })
    }

    async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = tokio::task::spawn_blocking(move || self.thread.join()).await;
    }
}

/// Starts the simulated engine in-process (no `target.url`) or takes the URL.
async fn start_target(
    spec: &CapacityBenchmarkSpec,
    manifest: &WorkloadManifest,
    client: &reqwest::Client,
) -> Result<Target, BenchError> {
    let placement = &manifest.engine.placement;
    let gpus_per_replica = spec.gpus_per_replica(manifest);
    if let Some(url) = &spec.target.url {
        let url = url.trim_end_matches('/').to_owned();
        let (metrics_targets, notes) = url_metrics_pages(spec, client, &url).await;
        return Ok(Target {
            fleet: None,
            facts: TargetFacts {
                kind: "url".into(),
                url,
                model: spec.target_model(manifest),
                preset: None,
                engine_profile: None,
                replicas: spec.target.replicas.unwrap_or(placement.replicas).max(1),
                gpus_per_replica,
                stream_interval: None,
                engine_concepts_found: Vec::new(),
                engine_concepts_missing: Vec::new(),
            },
            metrics_targets,
            time_scale: spec.target.time_scale.unwrap_or(1.0),
            calibration: None,
            setup: None,
            notes,
        });
    }
    let sim = spec.target.simulated.clone().unwrap_or_default();
    let setup = sim.setup().map_err(BenchError::Spec)?;
    if let TimeScale::Fixed(k) = sim.time_scale
        && !(k.is_finite() && k > 0.0)
    {
        return Err(BenchError::Spec(format!(
            "spec.target.simulated.timeScale must be positive, got {k}"
        )));
    }
    let model = spec
        .target
        .model
        .clone()
        .unwrap_or_else(|| setup.model.clone());
    let fleet_config = |k: f64, replicas: u32| FleetConfig {
        replica: ReplicaConfig {
            time_scale: k,
            stream_interval: sim.stream_interval.max(1),
            // Every point states how far the engine drifted from its model clock.
            record_lateness: true,
            ..ReplicaConfig::new(setup.clone())
        },
        replicas,
        host: std::net::Ipv4Addr::LOCALHOST.into(),
        port: 0,
        router: RouterConfig::default(),
        cold_start: Duration::from_secs(1),
        faults: Default::default(),
    };
    let calibration = calibrate(client, manifest, &model, &setup, sim.time_scale, |k| {
        fleet_config(k, 1)
    })
    .await?;
    let k = calibration
        .as_ref()
        .map_or_else(|| sim.time_scale.fixed().unwrap_or(1.0), |c| c.chosen);
    let fleet = SimulatedEngine::start(fleet_config(k, sim.replicas.max(1))).await?;
    let url = fleet.url.clone();
    let metrics_targets = discover_targets(client, &url)
        .await
        .map_err(|e| BenchError::Simulated(e.to_string()))?;
    Ok(Target {
        fleet: Some(fleet),
        facts: TargetFacts {
            kind: "simulated".into(),
            url,
            model,
            preset: Some(sim.preset.clone()),
            engine_profile: None,
            replicas: sim.replicas.max(1),
            gpus_per_replica,
            stream_interval: Some(sim.stream_interval.max(1)),
            engine_concepts_found: Vec::new(),
            engine_concepts_missing: Vec::new(),
        },
        metrics_targets,
        time_scale: k,
        calibration,
        setup: Some(setup),
        notes: Vec::new(),
    })
}

/// What a reviewer reads about a point that lost more requests than the gate allows: how
/// many, and the server's most frequent words for it (an out-of-vocabulary token id, a
/// closed connection).
fn failure_note(
    dir: &str,
    summary: &PointSummaryFile,
    gate: &crate::analysis::GateConfig,
) -> Option<String> {
    let r = &summary.report;
    let most = summary.client.errors.first()?;
    (r.error_rate? > gate.error_rate_max).then(|| {
        format!(
            "{dir}: {} of {} requests failed; most often {most}",
            r.failed, r.attempted
        )
    })
}

/// The engine pages a URL target's points scrape: `spec.target.metricsUrls` when given;
/// else, unless Prometheus holds the metrics, the server's own `/metrics` when it answers
/// with an engine's names there (vLLM, SGLang and llama.cpp serve them beside the API).
/// With the notes a reviewer should read: where the pages came from, or that the points
/// have no engine evidence and why.
async fn url_metrics_pages(
    spec: &CapacityBenchmarkSpec,
    client: &reqwest::Client,
    url: &str,
) -> (Vec<String>, Vec<String>) {
    use crate::engine_metrics::identify::PROBE_TIMEOUT;
    use crate::engine_metrics::profile::detect;
    use crate::engine_metrics::scrape::{metrics_url, scrape_once};
    if !spec.target.metrics_urls.is_empty() || spec.target.prometheus.is_some() {
        return (spec.target.metrics_urls.clone(), Vec::new());
    }
    let page = metrics_url(url);
    match scrape_once(client, &page, PROBE_TIMEOUT).await {
        Ok(exposition) => match detect(&exposition.samples) {
            Some(found) => (
                vec![url.to_owned()],
                vec![format!(
                    "engine metrics: {page} ({} names; spec.target.metricsUrls not given, so \
                    the API's own port is scraped)",
                    found.engine
                )],
            ),
            None => (
                Vec::new(),
                vec![format!(
                    "no engine metrics: {page} answered, but with no engine's names; the queue \
                    trend comes from the client's in-flight count (give \
                    spec.target.metricsUrls)"
                )],
            ),
        },
        Err(e) => (
            Vec::new(),
            vec![format!(
                "no engine metrics: {page} did not answer ({e}); the queue trend comes from \
                the client's in-flight count (give spec.target.metricsUrls)"
            )],
        ),
    }
}

/// Probes a fresh single-replica engine from `config(K)` at the spec's time scale (or, for
/// `auto`, at each candidate from the largest down until one is within the warning bound);
/// `None` when the classes have no finite cutoffs to judge against (nothing can drift past
/// them). A fixed K over the refusal bound is an error before any traffic.
async fn calibrate(
    client: &reqwest::Client,
    manifest: &WorkloadManifest,
    model: &str,
    setup: &crate::sim::setup::Setup,
    requested: TimeScale,
    config: impl Fn(f64) -> FleetConfig,
) -> Result<Option<calibration::Calibration>, BenchError> {
    let Some(cutoffs) = calibration::tightest_cutoffs(&manifest.gate_config()) else {
        return Ok(None);
    };
    let candidates = match requested {
        TimeScale::Fixed(k) => vec![k],
        TimeScale::Auto => calibration::AUTO_CANDIDATES.to_vec(),
    };
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut trials = Vec::new();
    for k in candidates {
        let engine = SimulatedEngine::start(config(k)).await?;
        // A fixed K over the refusal bound is probed once more (fresh prompts) and judged
        // on that round: a passing hiccup of the machine spoils one round, a K too fast
        // for it drifts in both. Both rounds go into the pack.
        for round in 0..=calibration::REFUSAL_RETRIES {
            let trial = calibration::probe(
                client,
                &engine.url,
                model,
                setup,
                &manifest.workload,
                cutoffs,
                k,
                nonce.wrapping_add(u64::from(round)),
                || engine.replicas.iter().for_each(Replica::reset_lateness),
                || {
                    engine
                        .replicas
                        .iter()
                        .filter_map(|r| r.lateness().map(|(frames, _)| frames))
                        .collect()
                },
            )
            .await;
            let refused = trial.refused(calibration::REFUSE_FRACTION);
            trials.push(trial);
            if requested == TimeScale::Auto || !refused {
                break;
            }
        }
        engine.shutdown().await;
        if trials
            .last()
            .is_some_and(|t| t.within(calibration::WARN_FRACTION))
        {
            break;
        }
    }
    let chosen = match requested {
        TimeScale::Fixed(k) => k,
        TimeScale::Auto => calibration::auto_choice(&trials).unwrap_or(1.0),
    };
    let found = calibration::Calibration {
        requested: requested.to_string(),
        chosen,
        warn_fraction: calibration::WARN_FRACTION,
        refuse_fraction: calibration::REFUSE_FRACTION,
        tightest_ttft_cutoff_ms: cutoffs.0,
        tightest_tpot_cutoff_ms: cutoffs.1,
        trials,
    };
    match found.refusal() {
        Some(why) => Err(BenchError::Calibration(why)),
        None => Ok(Some(found)),
    }
}

/// What the run found about the system under test, recorded in the frozen manifest.
async fn resolve_identity(client: &reqwest::Client, target: &Target) -> Resolved {
    let facts = &target.facts;
    let (engine, version, served) = if target.fleet.is_some() {
        let served = identify(client, &facts.url, &[]).await.served_models;
        (
            "goodput simulated engine".to_owned(),
            Some(env!("CARGO_PKG_VERSION").to_owned()),
            served,
        )
    } else {
        let found = identify(client, &facts.url, &target.metrics_targets).await;
        (
            found
                .engine
                .unwrap_or_else(|| "unknown (from the target URL)".to_owned()),
            found.version,
            found.served_models,
        )
    };
    Resolved {
        target_url: facts.url.clone(),
        engine,
        engine_version: version,
        served_models: served,
        model_sent: facts.model.clone(),
        simulated_preset: facts.preset.clone(),
        time_scale: target.time_scale,
        goodput_version: env!("CARGO_PKG_VERSION").into(),
        client_cpus: client_cpus(),
    }
}

/// The CPUs this process may run on (its `Cpus_allowed_list`) of the machine's: `0 of 2`.
fn client_cpus() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
        .trim()
        .to_owned();
    Some(
        match std::fs::read_to_string("/sys/devices/system/cpu/online") {
            Ok(online) => format!("{allowed} of {}", online.trim()),
            Err(_) => allowed,
        },
    )
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
