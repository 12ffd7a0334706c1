//! One test point's load, defined once for both shells: from the benchmark spec, the frozen
//! manifest and the driver's [`PointKey`] to the load generator's configuration.
//! `goodput bench` runs it in-process; in a cluster the operator writes a [`PointJob`] into
//! a ConfigMap and every pod of the point's Job runs `goodput loadgen --point-file` on it,
//! so both build the same schedule, prompts and plan.
//!
//! # A point's life, type by type
//!
//! 1. The driver names the point: a [`PointKey`] (`bench::driver`: experiment, cache mode,
//!    load, repeat) against a [`PointTarget`] (the server and its time scale).
//! 2. [`point_load`] turns key, spec and manifest into the load generator's
//!    [`LoadConfig`] and a [`PointPlan`] (`loadgen::point`: schedule, window, sample
//!    minimums, scrape, lag bound), or a [`PointSetupError`]. In a cluster the same inputs
//!    travel as a [`PointJob`] (this file, the point file in a ConfigMap), and the operator
//!    starts them as a Job described by a `PointJobSpec` (`controller::build`: name, image,
//!    shards, deadline); each pod calls [`PointJob::load`].
//! 3. `loadgen::run` sends the load and returns a `PointRun` (every record, warmup flagged
//!    out, and the client's facts); `loadgen::point` adds the engine's series and the
//!    schedule's facts into a `MeasuredPoint`, or stops with a `PointError`.
//! 4. `MeasuredPoint::summarize` reduces the records to a `PointSummary`
//!    (`analysis::summary`: counts and histograms that merge exactly across shards), which
//!    the analysis core turns into a `PointReport` (`analysis::report`: rates, per-class
//!    attainment, the gate's verdict); both go into a `PointSummaryFile`, written as the
//!    point's `summary.json` beside `requests.csv` and `engine-metrics.json`. A sharded
//!    point's pods each write theirs, and `loadgen::handoff::merge_shards` makes the one
//!    file again.
//! 5. The shells read it back: `goodput bench` into a `PointResult` (`bench::result`, a row
//!    of `sweep.json`), the operator into the status's points (`api::status`: a
//!    `PointKind` and one `PointClass` per class). `planning::assess` makes a
//!    `PointAssessment` of a report (pass, fail, or not evidence, and why), on which the
//!    capacity and its bracket are chosen.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::point::PointPlan;
use crate::prompt::PromptMethod;
use crate::run::{LoadConfig, LoadMode};
use goodput_api::{CacheMode, CapacityBenchmarkSpec, FailureTest, Fault, TargetApi};
use goodput_core::benchmark::driver::PointKey;
use goodput_core::failure::FaultKind;
use goodput_core::record::CancelPlan;
use goodput_core::workload::WorkloadManifest;
use goodput_core::workload::hashing::{fnv1a, mix64};
use goodput_core::workload::schedule::{ScheduleSpec, SharedPrefix};

/// Everything a loadgen pod needs to run one point (the point file).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PointJob {
    /// Which point.
    pub key: PointKey,
    /// The benchmark's spec (experiments, repeats, target API).
    pub spec: CapacityBenchmarkSpec,
    /// The frozen workload manifest.
    pub manifest: WorkloadManifest,
    /// Where the requests go.
    pub target: PointTarget,
    /// Distinguishes this run's prompts from every other run's.
    pub nonce: u64,
    /// Set for a failure test's load: one block of the warmup, the steady period and the
    /// observation period at the point's rate, bounded in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureLoad>,
}

/// The span of a failure test's load (model seconds after the warmup).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailureLoad {
    /// Load before the fault.
    pub steady_seconds: f64,
    /// Load after it.
    pub observe_seconds: f64,
    /// A request-cancellation test's cancellations, on the load's timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<CancelPlan>,
}

impl FailureLoad {
    /// The load of `test` injecting `fault` after a warmup of `warmup_s`: its two spans
    /// and, for a `RequestCancel`, the client's cancellations from the injection on. Both
    /// shells build it here.
    pub fn new(test: &FailureTest, fault: &Fault, warmup_s: f64) -> Self {
        FailureLoad {
            steady_seconds: test.steady_seconds,
            observe_seconds: test.observe_seconds,
            cancel: cancel_plan(fault, Self::inject_after_s(test, warmup_s)),
        }
    }

    /// When the fault goes in: after the warmup and the steady period (seconds since the
    /// load's time zero).
    pub fn inject_after_s(test: &FailureTest, warmup_s: f64) -> f64 {
        warmup_s + test.steady_seconds
    }

    /// The point's load at `rate` made this failure test's: [`fault_load`] with its
    /// cancellations.
    pub fn apply(
        &self,
        config: &LoadConfig,
        plan: &PointPlan,
        rate: f64,
    ) -> (LoadConfig, PointPlan) {
        let (mut config, plan) = fault_load(
            config,
            plan,
            rate,
            self.steady_seconds,
            self.observe_seconds,
        );
        config.cancel = self.cancel;
        (config, plan)
    }
}

impl PointJob {
    /// The load this point file asks for, in real-time units: [`point_load`], and for a
    /// failure test the bounded block of [`FailureLoad::apply`].
    pub fn load(&self) -> Result<(LoadConfig, PointPlan), PointSetupError> {
        let (config, plan) = point_load(
            &self.spec,
            &self.manifest,
            self.key,
            &self.target,
            self.nonce,
        )?;
        Ok(match (self.failure, self.key) {
            (Some(f), PointKey::Rate { rate, .. }) => f.apply(&config, &plan, rate),
            _ => (config, plan),
        })
    }
}

/// The server a point runs against.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PointTarget {
    /// Base URL of the OpenAI-compatible API.
    pub url: String,
    /// Model name sent.
    pub model: String,
    /// Engine `/metrics` base URLs scraped during the point.
    #[serde(default)]
    pub metrics_targets: Vec<String>,
    /// Ask the target's router (`/replicas`) for its replicas' metrics pages.
    #[serde(default)]
    pub discover_metrics: bool,
    /// K: the simulated engine runs K times faster than real time.
    pub time_scale: f64,
}

/// Why a point cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum PointSetupError {
    /// Trace arrivals are replayed by `goodput loadgen --trace`, not by a benchmark.
    #[error(
        "the manifest's arrival pattern is `trace`: replay traces with `goodput loadgen \
         --trace`; a benchmark needs a generated arrival process"
    )]
    TraceArrival,
}

/// The point's folder in the capacity pack, relative to it: `cold/saturation/c16`,
/// `warm/rate-12.5rps`, `cold/rate-8rps-r1` (with repeats).
pub fn point_dir(key: PointKey, repeats: u32) -> String {
    match key {
        PointKey::Saturation { cache, concurrency } => {
            format!("{}/saturation/c{concurrency}", cache.as_str())
        }
        PointKey::Rate {
            cache,
            rate,
            repeat,
        } => format!(
            "{}/rate-{}rps{}",
            cache.as_str(),
            goodput_core::analysis::rate_label(rate),
            // A retry of a point that was not evidence is repeat `repeats` or more.
            if repeats > 1 || repeat >= repeats {
                format!("-r{repeat}")
            } else {
                String::new()
            }
        ),
    }
}

/// One failure test's load, in real-time units: the point's configuration at `rate` and a
/// single schedule block spanning the manifest's warmup, the steady period and the
/// observation period (no continuation: the test is bounded in time).
pub fn fault_load(
    config: &LoadConfig,
    plan: &PointPlan,
    rate: f64,
    steady_s: f64,
    observe_s: f64,
) -> (LoadConfig, PointPlan) {
    let span = config.warmup_s + steady_s + observe_s;
    let mut plan = plan.clone();
    plan.schedule.requests = (rate * span).ceil().max(1.0) as u64;
    plan.max_blocks = 1;
    plan.min_duration_s = 0.0;
    plan.min_per_class = 0;
    // A failure test watches recovery, not a verdict: it always runs its whole span.
    let config = LoadConfig {
        mode: LoadMode::Rate { rate },
        early_stop: None,
        ..config.clone()
    };
    (config, plan)
}

/// The client's cancellations of a `RequestCancel` fault injected `inject_after_s` after
/// the load's time zero (model time); `None` for the other faults.
fn cancel_plan(fault: &Fault, inject_after_s: f64) -> Option<CancelPlan> {
    if fault.kind != FaultKind::RequestCancel {
        return None;
    }
    let (fraction, after_chunks) = fault.cancel();
    Some(CancelPlan {
        from_s: inject_after_s,
        // A cancellation always has a duration (30 s when not given).
        to_s: inject_after_s + fault.duration_s()?,
        fraction,
        after_chunks,
    })
}

/// The load of one point in real-time units (the caller scales it by the target's time
/// scale to run it): the seeded schedule, prompts unique to this run and point, and the
/// plan with the spec's block, scrape and lag settings.
pub fn point_load(
    spec: &CapacityBenchmarkSpec,
    manifest: &WorkloadManifest,
    key: PointKey,
    target: &PointTarget,
    nonce: u64,
) -> Result<(LoadConfig, PointPlan), PointSetupError> {
    let ex = &spec.experiments;
    let m = manifest;
    let seed = key.seed(m.client.request_schedule_seed);
    let mode = match key {
        // The manifest's warmup is excluded from measurement, so it comes on top of the
        // level's measured duration.
        PointKey::Saturation { concurrency, .. } => LoadMode::Concurrency {
            concurrency: concurrency.max(1) as usize,
            duration_s: ex
                .saturation
                .as_ref()
                .map_or(goodput_api::Saturation::default().duration_seconds, |s| {
                    s.duration_seconds
                })
                + m.client.warmup_seconds,
        },
        PointKey::Rate { rate, .. } => LoadMode::Rate { rate },
    };
    let warm = key.cache() == CacheMode::Warm;
    let shared_prefix = warm.then_some(SharedPrefix {
        pool: ex.warm_pool.prefixes.max(1),
        tokens: ex.warm_pool.prefix_tokens,
        zipf: ex.warm_pool.zipf,
    });
    let arrival = m.arrival().ok_or(PointSetupError::TraceArrival)?;
    let schedule = ScheduleSpec {
        classes: m.schedule_classes(),
        requests: m.client.initial_scheduled_requests,
        seed,
        arrival,
        output_jitter: 0.0,
        shared_prefix,
    };
    let dir = point_dir(key, spec.repeats.max(1));
    let mut config = LoadConfig {
        cache: key.cache(),
        shared_prefix,
        // Prompt tokens are seeded per point and per run: a cold point never finds its
        // prompts cached by an earlier point (or an earlier run against the same server).
        seed: mix64(seed ^ fnv1a(nonce, dir.as_bytes())),
        ..LoadConfig::for_manifest(m, target.url.clone(), target.model.clone(), mode)
    };
    config.close_connections = connection_per_request(&spec.target, target);
    if ex.early_stop && matches!(key, PointKey::Rate { .. }) {
        config.early_stop = Some(crate::run::EarlyStopConfig {
            gate: m.gate_config(),
            latency_scale: 1.0,
        });
    }
    if spec.target.api == TargetApi::Chat {
        config.api = crate::Api::Chat;
        // Calibrated against the server's tokenizer when the point starts.
        config.text_words_per_token = Some(crate::prompt::ESTIMATED_WORDS_PER_TOKEN);
        config.prompt_method = PromptMethod::TextEstimated;
    }
    let plan = PointPlan {
        max_blocks: u64::from(ex.max_blocks.max(1)),
        scrape_interval: Duration::from_secs_f64(ex.scrape_interval_seconds.max(0.01)),
        // The client's lag is judged on the run's own clock: `max_lag_ms` of wall time,
        // which is `K` times as much model time.
        max_lag_ms: ex.max_lag_ms * target.time_scale,
        ..PointPlan::for_manifest(m, schedule, target.metrics_targets.clone())
    };
    Ok((config, plan))
}

/// Whether each request gets a connection of its own: against a real server with several
/// replicas behind one address. A Service (kube-proxy) or an L4 load balancer spreads
/// connections, not requests, so the few kept-alive connections of one client would load
/// one replica and leave another idle (two vLLM pods behind a Service took 156 and 29 of
/// one point's requests), a benchmark of the client, not the fleet; the many clients of
/// production traffic spread like new connections do. A time-scaled simulated engine keeps
/// its connections: it runs K times the rate, where a connection per request would cost
/// the client more than the imbalance costs the measurement.
pub fn connection_per_request(spec: &goodput_api::Target, target: &PointTarget) -> bool {
    let several = target.metrics_targets.len() > 1 || spec.replicas.is_some_and(|r| r > 1);
    !spec.is_simulated() && target.time_scale == 1.0 && several
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_real_fleet_behind_one_address_gets_a_connection_per_request() {
        let target = |metrics: usize, time_scale: f64| PointTarget {
            url: "http://10.0.0.1:8000".into(),
            model: "m".into(),
            metrics_targets: (0..metrics)
                .map(|i| format!("http://10.1.0.{i}:8000"))
                .collect(),
            discover_metrics: false,
            time_scale,
        };
        let service = goodput_api::Target {
            service: Some(goodput_api::ServiceTarget {
                name: "vllm".into(),
                port: 8000,
                namespace: None,
            }),
            ..Default::default()
        };
        assert!(connection_per_request(&service, &target(2, 1.0)));
        assert!(!connection_per_request(&service, &target(1, 1.0)));
        assert!(!connection_per_request(&service, &target(2, 5.0)));
        let declared = goodput_api::Target {
            replicas: Some(3),
            ..service.clone()
        };
        assert!(connection_per_request(&declared, &target(0, 1.0)));
        let simulated = goodput_api::Target::default();
        assert!(!connection_per_request(&simulated, &target(4, 1.0)));
    }

    #[test]
    fn point_folders_name_mode_load_and_repeat() {
        let rate = |repeat| PointKey::Rate {
            cache: CacheMode::Warm,
            rate: 12.5,
            repeat,
        };
        assert_eq!(point_dir(rate(0), 1), "warm/rate-12.5rps");
        assert_eq!(point_dir(rate(1), 3), "warm/rate-12.5rps-r1");
        let level = PointKey::Saturation {
            cache: CacheMode::Cold,
            concurrency: 16,
        };
        assert_eq!(point_dir(level, 2), "cold/saturation/c16");
    }
}
