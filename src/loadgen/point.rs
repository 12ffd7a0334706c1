//! One test point end to end: schedule (continued until the window and every class's sample
//! minimum can be met), prewarm, load, engine-metrics scraping, then the files of the point:
//! `requests.csv`, `summary.json`, `engine-metrics.json`.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

use super::prompt::{CacheMode, PromptMethod};
use super::record::write_requests_csv;
use super::run::{ClientFacts, LoadConfig, LoadMode, PointRun, prewarm, run_point};
use crate::analysis::{
    GateConfig, LittlesLaw, PointReport, PointSummary, QueueTrend, littles_law, queue_slope,
};
use crate::engine_metrics::findings::{EngineFindings, findings};
use crate::engine_metrics::scrape::scrape_loop;
use crate::engine_metrics::series::MetricsSeries;
use crate::workload::schedule::{
    ScheduleError, ScheduleSpec, ScheduledRequest, build_block, schedule_hash, shard,
};

/// How a point is measured and judged, besides the load itself.
#[derive(Clone, Debug)]
pub struct PointPlan {
    /// The schedule's spec (its `requests` is one block).
    pub schedule: ScheduleSpec,
    /// Shortest measured window (s) in open loop.
    pub min_duration_s: f64,
    /// Fewest scheduled requests per class in the measured window (the sample rule).
    pub min_per_class: u64,
    /// Most schedule blocks to use while meeting the two rules above.
    pub max_blocks: u64,
    /// This shard of `shards` (`(0, 1)` = the whole schedule).
    pub shard: (u32, u32),
    /// The gate the report applies.
    pub gate: GateConfig,
    /// `/metrics` base URLs to scrape.
    pub metrics_targets: Vec<String>,
    /// Scrape interval.
    pub scrape_interval: Duration,
    /// A measured point whose schedule-lag P99 exceeds this (ms) is invalid.
    pub max_lag_ms: f64,
    /// Write every inter-token gap in `requests.csv` (`itl_ms`).
    pub record_itl: bool,
}

impl PointPlan {
    /// A point as the manifest sets it: its minimum duration, sample rule and gate; the
    /// whole schedule (no shard), 1 s scrapes, lag limit 10 ms, no ITL column.
    pub fn for_manifest(
        manifest: &crate::workload::WorkloadManifest,
        schedule: ScheduleSpec,
        metrics_targets: Vec<String>,
    ) -> Self {
        PointPlan {
            schedule,
            min_duration_s: manifest.client.minimum_duration_seconds,
            min_per_class: manifest.acceptance.min_successful_samples_per_class,
            max_blocks: 10,
            shard: (0, 1),
            gate: manifest.gate_config(),
            metrics_targets,
            scrape_interval: Duration::from_secs(1),
            max_lag_ms: 10.0,
            record_itl: false,
        }
    }
}

/// The schedule, continued block by block until, from `warmup_s` on, it spans
/// `min_duration_s` and schedules at least `min_per_class` requests of every class.
pub fn point_schedule(
    plan: &PointPlan,
    rate: f64,
    warmup_s: f64,
) -> Result<(Vec<ScheduledRequest>, u64), ScheduleError> {
    let classes = plan.schedule.classes.len();
    let mut out: Vec<ScheduledRequest> = Vec::new();
    let mut blocks = 0;
    loop {
        let start = out.last().map_or(0.0, |r| r.at_s);
        out.extend(build_block(
            &plan.schedule,
            rate,
            blocks,
            start,
            out.len() as u64,
        )?);
        blocks += 1;
        let measured = || out.iter().filter(|r| r.at_s >= warmup_s);
        let span = out.last().map_or(0.0, |r| r.at_s) - warmup_s;
        let enough_classes = (0..classes)
            .all(|c| measured().filter(|r| r.class == c).count() as u64 >= plan.min_per_class);
        if (span >= plan.min_duration_s && enough_classes) || blocks >= plan.max_blocks.max(1) {
            return Ok((out, blocks));
        }
    }
}

/// Is this point evidence for a capacity decision?
#[derive(Clone, Debug, Serialize)]
pub struct Validity {
    /// True when nothing below applies.
    pub valid: bool,
    /// Why not.
    pub reasons: Vec<String>,
}

/// `summary.json`.
#[derive(Clone, Debug, Serialize)]
pub struct PointSummaryFile {
    /// `rate_sweep_point` (open loop) or `saturation_experiment` (closed loop: never a
    /// capacity).
    pub experiment: &'static str,
    /// Open or closed loop and its parameters.
    pub mode: LoadMode,
    /// Offered rate (open loop).
    pub offered_rps: Option<f64>,
    /// Requests actually sent per second of the window.
    pub achieved_send_rps: f64,
    /// Cache state of the experiment.
    pub cache: CacheMode,
    /// How prompt lengths were set.
    pub prompt_method: PromptMethod,
    /// Prefixes sent before measurement (warm cache).
    pub prewarmed_prefixes: usize,
    /// Schedule: seed, blocks used, requests, shard and a hash of the exact schedule.
    pub schedule: ScheduleFacts,
    /// Evidence for capacity or not.
    pub validity: Validity,
    /// Where the queue trend came from.
    pub queue_trend_source: String,
    /// The analysis core's report over the measured requests.
    pub report: PointReport,
    /// What the client saw.
    pub client: ClientFacts,
    /// Engine scrapes: targets, rounds, failures.
    pub engine_metrics: EngineFacts,
    /// KV usage, prefix-cache hit rate, preemptions and cache-state flags from the scrapes.
    pub engine_findings: Option<EngineFindings>,
    /// Little's Law over the window: mean in flight vs completions/s × mean E2E.
    pub littles_law: Option<LittlesLaw>,
}

/// Schedule facts recorded with the point.
#[derive(Clone, Debug, Serialize)]
pub struct ScheduleFacts {
    /// Recorded seed.
    pub seed: u64,
    /// Blocks of `requests_per_block` used.
    pub blocks: u64,
    /// Requests per block.
    pub requests_per_block: u64,
    /// Requests in this shard's schedule.
    pub requests: usize,
    /// `i/N`.
    pub shard: String,
    /// FNV-1a of the whole (unsharded) initial schedule.
    pub hash: String,
    /// Blocks appended after the run because failures left a class under the sample
    /// minimum (each sent after the previous part drained).
    pub continuations: u64,
}

/// Engine scraping facts.
#[derive(Clone, Debug, Serialize)]
pub struct EngineFacts {
    /// Targets scraped.
    pub targets: Vec<String>,
    /// Samples taken.
    pub samples: usize,
    /// Samples that failed.
    pub failed: usize,
}

/// A point as measured, before analysis: the client's records and facts, the engine
/// series, and the schedule facts.
#[derive(Debug)]
pub struct MeasuredPoint {
    /// Records and client facts.
    pub run: PointRun,
    /// Engine series (scraped, or read from Prometheus afterwards).
    pub series: Option<MetricsSeries>,
    /// Prefixes sent before measurement (warm cache).
    pub prewarmed: usize,
    /// Seed, blocks, hash, continuations.
    pub schedule: ScheduleFacts,
    /// Wall clock (Unix seconds) at the schedule's time zero.
    pub started_unix_s: f64,
}

/// Runs the point and writes its files into `out_dir`. Returns the summary.
pub async fn run_and_write(
    client: reqwest::Client,
    config: LoadConfig,
    plan: PointPlan,
    out_dir: &Path,
    stop: watch::Receiver<bool>,
) -> Result<PointSummaryFile, PointError> {
    let measured = measure_point(client, &config, &plan, stop).await?;
    let summary = measured.summarize(&config, &plan)?;
    measured.write(&summary, &plan, out_dir)?;
    Ok(summary)
}

/// Runs the point: schedule (continued until the window and sample rules hold), prewarm,
/// load with scraping, and continuation blocks for classes that failures left short.
pub async fn measure_point(
    client: reqwest::Client,
    config: &LoadConfig,
    plan: &PointPlan,
    stop: watch::Receiver<bool>,
) -> Result<MeasuredPoint, PointError> {
    let (rate, warmup_s) = match config.mode {
        LoadMode::Rate { rate } => (rate, config.warmup_s),
        // Closed loop ignores the times; one block gives the class and length sequence.
        LoadMode::Concurrency { .. } => (1.0, 0.0),
    };
    let closed = matches!(config.mode, LoadMode::Concurrency { .. });
    let (whole, blocks) = if closed {
        (build_block(&plan.schedule, 1.0, 0, 0.0, 0)?, 1)
    } else {
        point_schedule(plan, rate, warmup_s)?
    };
    let hash = schedule_hash(&whole);
    let mine = shard(&whole, plan.shard.0, plan.shard.1);
    let requests = mine.len();
    let longest_prompt = mine.iter().map(|r| r.input_tokens).max().unwrap_or(1);

    let prewarmed = match config.cache {
        CacheMode::Warm => prewarm(&client, config, longest_prompt).await,
        CacheMode::Cold => 0,
    };

    let (scrape_stop_tx, scrape_stop_rx) = watch::channel(false);
    let scraper = (!plan.metrics_targets.is_empty()).then(|| {
        let mut rx = scrape_stop_rx.clone();
        tokio::spawn(scrape_loop(
            client.clone(),
            plan.metrics_targets.clone(),
            plan.scrape_interval,
            tokio::time::Instant::now(),
            async move {
                let _ = rx.wait_for(|s| *s).await;
            },
        ))
    });
    let started_unix_s = unix_now_s();
    let mut run = run_point(client.clone(), config.clone(), mine, stop.clone()).await;
    // Failures can leave a class under the sample minimum although enough were scheduled:
    // continue the same schedule (next blocks) before the point is final.
    let mut blocks = blocks;
    let mut continued = 0;
    let mut next_index = whole.len() as u64;
    let mut last_at = whole.last().map_or(0.0, |r| r.at_s);
    while !closed
        && !run.client.incomplete
        && blocks < plan.max_blocks
        && short_classes(plan, &run).is_some()
    {
        let next = build_block(&plan.schedule, rate, blocks, last_at, next_index)?;
        next_index += next.len() as u64;
        blocks += 1;
        continued += 1;
        let first_at = next.first().map_or(last_at, |r| r.at_s);
        last_at = next.last().map_or(last_at, |r| r.at_s);
        // Send the continuation now, on its own clock; records are moved back onto the
        // point's timeline below.
        let part: Vec<ScheduledRequest> = shard(&next, plan.shard.0, plan.shard.1)
            .into_iter()
            .map(|mut r| {
                r.at_s -= first_at;
                r
            })
            .collect();
        let offset = run.start.elapsed().as_secs_f64();
        let more_config = LoadConfig {
            warmup_s: 0.0,
            warmup_requests: 0,
            ..config.clone()
        };
        let more = run_point(client.clone(), more_config, part, stop.clone()).await;
        merge_runs(&mut run, more, offset);
    }
    let _ = scrape_stop_tx.send(true);
    let series = match scraper {
        Some(task) => task.await.ok(),
        None => None,
    };
    Ok(MeasuredPoint {
        run,
        series,
        prewarmed,
        schedule: ScheduleFacts {
            seed: plan.schedule.seed,
            blocks,
            requests_per_block: plan.schedule.requests,
            requests,
            shard: format!("{}/{}", plan.shard.0, plan.shard.1),
            hash: format!("{hash:016x}"),
            continuations: continued,
        },
        started_unix_s,
    })
}

fn unix_now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl MeasuredPoint {
    /// Converts the run's clock to model time for an engine that ran `k` times faster than
    /// real time: every time and latency is multiplied by `k` (rates follow, since they
    /// are counts over the scaled window).
    pub fn rescale(&mut self, k: f64) {
        for r in &mut self.run.records {
            r.rescale(k);
        }
        let c = &mut self.run.client;
        c.window_s *= k;
        for p in &mut c.in_flight_series {
            p.0 *= k;
        }
        c.refresh_from(&self.run.records);
        if let Some(s) = &mut self.series {
            s.rescale(k);
        }
    }

    /// The analysis core's report and everything else `summary.json` holds.
    pub fn summarize(
        &self,
        config: &LoadConfig,
        plan: &PointPlan,
    ) -> Result<PointSummaryFile, PointError> {
        summarize(
            config,
            plan,
            &self.run,
            self.series.as_ref(),
            self.prewarmed,
            self.schedule.clone(),
        )
    }

    /// Writes `requests.csv`, `summary.json` and (when scraped) `engine-metrics.json`.
    pub fn write(
        &self,
        summary: &PointSummaryFile,
        plan: &PointPlan,
        out_dir: &Path,
    ) -> Result<(), PointError> {
        std::fs::create_dir_all(out_dir)
            .map_err(|e| PointError::Write(out_dir.display().to_string(), e))?;
        let names: Vec<String> = plan
            .schedule
            .classes
            .iter()
            .map(|c| c.name.clone())
            .collect();
        let csv_path = out_dir.join("requests.csv");
        let file = std::fs::File::create(&csv_path)
            .map_err(|e| PointError::Write(csv_path.display().to_string(), e))?;
        write_requests_csv(
            std::io::BufWriter::new(file),
            &self.run.records,
            &names,
            plan.record_itl,
        )
        .map_err(|e| PointError::Write(csv_path.display().to_string(), e.into()))?;
        write_json(&out_dir.join("summary.json"), summary)?;
        if let Some(series) = &self.series {
            write_json(&out_dir.join("engine-metrics.json"), series)?;
        }
        Ok(())
    }
}

/// The first class with fewer successes than the sample minimum, if any.
fn short_classes(plan: &PointPlan, run: &PointRun) -> Option<usize> {
    (0..plan.schedule.classes.len()).find(|&c| {
        let ok = run
            .records
            .iter()
            .filter(|r| r.class == c && r.ok())
            .count() as u64;
        ok < plan.min_per_class
    })
}

/// Appends a continuation run (started `offset` s after the first) to `run`.
fn merge_runs(run: &mut PointRun, more: PointRun, offset: f64) {
    let shift = |x: f64| x + offset;
    for mut r in more.records {
        r.scheduled_s = shift(r.scheduled_s);
        r.sent_s = shift(r.sent_s);
        r.first_token_s = r.first_token_s.map(shift);
        r.last_token_s = r.last_token_s.map(shift);
        run.records.push(r);
    }
    let (a, b) = (&mut run.client, more.client);
    a.sent += b.sent;
    a.measured += b.measured;
    a.warmup_excluded += b.warmup_excluded;
    a.peak_in_flight = a.peak_in_flight.max(b.peak_in_flight);
    a.window_s += b.window_s;
    a.incomplete |= b.incomplete;
    a.in_flight_series
        .extend(b.in_flight_series.into_iter().map(|(t, v)| (t + offset, v)));
    a.refresh_from(&run.records);
}

/// Writes `value` as pretty JSON with a trailing newline.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), PointError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| PointError::Write(path.display().to_string(), e.into()))?;
    std::fs::write(path, text + "\n").map_err(|e| PointError::Write(path.display().to_string(), e))
}

/// Why a point could not be run or written.
#[derive(Debug, thiserror::Error)]
pub enum PointError {
    /// The schedule could not be built.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// A file could not be written.
    #[error("cannot write {0}: {1}")]
    Write(String, std::io::Error),
}

/// Queue trend over the measured window: the engine's waiting queue when scraped, else the
/// client's in-flight count.
fn queue_trend(
    run: &PointRun,
    series: Option<&MetricsSeries>,
    from_s: f64,
    to_s: f64,
) -> (QueueTrend, String) {
    let inside = |v: Vec<(f64, f64)>| -> Vec<(f64, f64)> {
        v.into_iter()
            .filter(|p| p.0 >= from_s && p.0 <= to_s)
            .collect()
    };
    if let Some(s) = series {
        let q = inside(s.queue_series());
        if q.len() >= 3 {
            return (
                queue_slope(&q, 5.0).trend,
                "engine waiting-queue gauge (least-squares slope)".into(),
            );
        }
    }
    (
        client_trend(run, from_s, to_s),
        "client in-flight requests (no engine metrics)".into(),
    )
}

/// The queue-trend rule applied to the client's in-flight count over the window.
fn client_trend(run: &PointRun, from_s: f64, to_s: f64) -> QueueTrend {
    let f: Vec<(f64, f64)> = run
        .client
        .in_flight_series
        .iter()
        .copied()
        .filter(|p| p.0 >= from_s && p.0 <= to_s)
        .collect();
    queue_slope(&f, 5.0).trend
}

fn summarize(
    config: &LoadConfig,
    plan: &PointPlan,
    run: &PointRun,
    series: Option<&MetricsSeries>,
    prewarmed: usize,
    schedule: ScheduleFacts,
) -> Result<PointSummaryFile, PointError> {
    let mut summary = PointSummary::new(plan.gate.clone());
    for r in &run.records {
        if r.ok() {
            summary.record_success(r.class, &r.success());
        } else {
            summary.record_failure(r.class, r.status);
        }
    }
    let from = run
        .records
        .iter()
        .map(|r| r.scheduled_s)
        .fold(f64::INFINITY, f64::min);
    let to = run
        .records
        .iter()
        .map(|r| r.scheduled_s)
        .fold(0.0, f64::max);
    let (trend, source) = queue_trend(run, series, from, to);
    let window = run.client.window_s.max(1e-3);
    let report = summary
        .finish(window, trend)
        .map_err(|e| PointError::Write("report".into(), std::io::Error::other(e.to_string())))?;

    let mut reasons = Vec::new();
    let closed = matches!(config.mode, LoadMode::Concurrency { .. });
    if closed {
        reasons.push("closed loop: a saturation experiment, never a capacity".to_owned());
    }
    if !closed && run.client.schedule_lag_ms.p99 > plan.max_lag_ms {
        reasons.push(format!(
            "the client fell behind its schedule: lag P99 {:.2} ms > {} ms (max {:.2} ms)",
            run.client.schedule_lag_ms.p99, plan.max_lag_ms, run.client.schedule_lag_ms.max
        ));
    }
    if run.client.incomplete {
        reasons.push("the run was stopped before its schedule ended".to_owned());
    }
    if run.records.is_empty() {
        reasons.push("no request was measured".to_owned());
    }
    let mut engine_findings = series.map(|s| findings(s, window, config.cache == CacheMode::Warm));
    // Cross-check: the client's in-flight count should tell the same story as the engine's
    // waiting queue; when it does not, the boundaries disagree (lost telemetry, retries).
    if let Some(f) = engine_findings.as_mut()
        && source.starts_with("engine")
    {
        let client = client_trend(run, from, to);
        if client != trend {
            f.flags.push(format!(
                "queue trend {trend} from the engine's waiting queue, but {client} from the \
                 client's in-flight count: client and engine boundaries disagree"
            ));
        }
    }
    let law = {
        let inside: Vec<f64> = run
            .client
            .in_flight_series
            .iter()
            .filter(|p| p.0 >= from && p.0 <= to)
            .map(|p| p.1)
            .collect();
        let ok: Vec<&super::record::RequestRecord> =
            run.records.iter().filter(|r| r.ok()).collect();
        let mean_e2e_s = ok.iter().map(|r| r.e2e_ms).sum::<f64>() / ok.len().max(1) as f64 / 1e3;
        let mean_in_flight = inside.iter().sum::<f64>() / inside.len().max(1) as f64;
        (!inside.is_empty() && !ok.is_empty())
            .then(|| littles_law(mean_in_flight, ok.len() as f64 / window, mean_e2e_s))
            .flatten()
    };
    let offered = match config.mode {
        LoadMode::Rate { rate } => Some(rate),
        LoadMode::Concurrency { .. } => None,
    };
    Ok(PointSummaryFile {
        experiment: if closed {
            "saturation_experiment"
        } else {
            "rate_sweep_point"
        },
        mode: config.mode,
        offered_rps: offered,
        achieved_send_rps: run.client.measured as f64 / window,
        cache: config.cache,
        prompt_method: config.prompt_method,
        prewarmed_prefixes: prewarmed,
        schedule,
        validity: Validity {
            valid: reasons.is_empty(),
            reasons,
        },
        queue_trend_source: source,
        report,
        client: run.client.clone(),
        engine_metrics: EngineFacts {
            targets: plan.metrics_targets.clone(),
            samples: series.map_or(0, |s| s.samples.len()),
            failed: series.map_or(0, |s| s.samples.iter().filter(|x| !x.ok).count()),
        },
        engine_findings,
        littles_law: law,
    })
}
