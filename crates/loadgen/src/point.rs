//! One test point end to end: schedule (continued until the window and every class's sample
//! minimum can be met), prewarm, load, engine-metrics scraping, then the files of the point:
//! `requests.csv`, `summary.json`, `engine-metrics.json`. `summary.rs` assembles the
//! summary (for one run or a sharded point's merge); `chat.rs` sizes chat prompts against
//! the server's tokenizer.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::cpu_throttle::CpuThrottling;
use super::prompt::PromptMethod;
use super::record::write_requests_csv;
use super::run::{
    ClientFacts, LoadConfig, LoadMode, PointRun, open_loop_window_s, prewarm, run_point,
    run_point_from,
};
use goodput_core::analysis::{
    AnalysisError, GateConfig, LittlesLaw, PointReport, PointSummary, QueueTrend, littles_law,
    queue_slope,
};
use goodput_core::pack_files;
use goodput_core::workload::CacheMode;
use goodput_core::workload::schedule::{
    Arrival, ScheduleError, ScheduleSpec, ScheduledRequest, build_block, schedule_hash, shard,
};
use goodput_engine_metrics::findings::{EngineFindings, findings};
use goodput_engine_metrics::scrape::scrape_loop_from;
use goodput_engine_metrics::series::MetricsSeries;
mod chat;
mod summary;

pub use chat::ChatSizing;
use chat::chat_calibration;
pub use summary::PointFacts;
use summary::summarize;

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
    /// A measured point whose schedule-lag P99 exceeds this (ms) is invalid; so is one
    /// that started more than this after `start_at_unix_s`. In the plan's own time units:
    /// against an engine `k` times faster than real time, a bound of B ms of wall clock is
    /// B × `k` ms of the real-time plan (see [`PointPlan::time_scaled`]).
    pub max_lag_ms: f64,
    /// Write every inter-token gap in `requests.csv` (`itl_ms`).
    pub record_itl: bool,
    /// The wall-clock instant (Unix seconds) of the schedule's time zero, shared by the
    /// shards of one point so that they run on one timeline; `None` starts as soon as the
    /// point is ready. Prewarm (warm cache) happens before it; the schedule's warmup is part
    /// of the timeline after it. An instant already past starts the run at once, and the
    /// lateness is recorded ([`ClientFacts::start_lateness_ms`]).
    pub start_at_unix_s: Option<f64>,
}

impl PointPlan {
    /// A point as the manifest sets it: its minimum duration, sample rule and gate; the
    /// whole schedule (no shard), 1 s scrapes, lag limit 10 ms, no ITL column.
    pub fn for_manifest(
        manifest: &goodput_core::workload::WorkloadManifest,
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
            start_at_unix_s: None,
        }
    }

    /// This plan for an engine that runs `k` times faster than real time: the minimum
    /// window, the scrape interval (at least 10 ms), the lag bound and a trace's arrival
    /// times ÷ `k`; counts, shard and start instant unchanged. `k = 1` gives the plan
    /// unchanged. See [`LoadConfig::time_scaled`] for the configuration's half and
    /// [`measure_time_scaled`] for the whole.
    pub fn time_scaled(&self, k: f64) -> PointPlan {
        if k == 1.0 {
            return self.clone();
        }
        let mut schedule = self.schedule.clone();
        if let Arrival::Trace(entries) = &mut schedule.arrival {
            for e in entries {
                e.at_s /= k;
            }
        }
        PointPlan {
            schedule,
            min_duration_s: self.min_duration_s / k,
            scrape_interval: self
                .scrape_interval
                .div_f64(k)
                .max(Duration::from_millis(10)),
            max_lag_ms: self.max_lag_ms / k,
            ..self.clone()
        }
    }
}

/// The schedule, continued block by block until its measured window (from `warmup_s` on)
/// covers `min_duration_s` and it schedules at least `min_per_class` requests of every
/// class. Returns the schedule, its blocks and why each block after the first was added.
///
/// The window is measured as the analysis measures it ([`open_loop_window_s`]): n arrivals
/// at rate r cover n / r seconds, so 15,000 arrivals at 1,000 req/s fill a 15 s minimum
/// although the last arrives one gap before 15 s.
pub fn point_schedule(
    plan: &PointPlan,
    rate: f64,
    warmup_s: f64,
) -> Result<(Vec<ScheduledRequest>, u64, Vec<String>), ScheduleError> {
    let classes = plan.schedule.classes.len();
    let mut out: Vec<ScheduledRequest> = Vec::new();
    let mut blocks = 0;
    let mut reasons = Vec::new();
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
        let window_s = match (measured().next(), out.last()) {
            (Some(first), Some(last)) => open_loop_window_s(rate, first.at_s, last.at_s),
            _ => 0.0,
        };
        // Arrival times are sums of gaps: allow their rounding, not a real shortfall.
        let short_window = window_s < plan.min_duration_s * (1.0 - 1e-9);
        let short_class = (0..classes).find_map(|c| {
            let n = measured().filter(|r| r.class == c).count() as u64;
            (n < plan.min_per_class).then_some((c, n))
        });
        if (!short_window && short_class.is_none()) || blocks >= plan.max_blocks.max(1) {
            return Ok((out, blocks, reasons));
        }
        reasons.push(if short_window {
            format!(
                "block {}: the measured window was {window_s:.3} s, under the minimum of {} s",
                blocks + 1,
                plan.min_duration_s
            )
        } else {
            let (c, n) = short_class.unwrap_or_default();
            format!(
                "block {}: class {} had {n} measured requests, under the minimum of {}",
                blocks + 1,
                plan.schedule.classes[c].name,
                plan.min_per_class
            )
        });
    }
}

/// Is this point evidence for a capacity decision?
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Validity {
    /// True when nothing below applies.
    pub valid: bool,
    /// Why not.
    pub reasons: Vec<String>,
    /// Among the reasons: the load generator fell behind its schedule (its lag, or its
    /// late start on the point's timeline). Such a point says nothing about the target, and
    /// the sweep never moves on it.
    #[serde(default)]
    pub client_behind: bool,
    /// What a reviewer should know that does not make the point void (a client behind
    /// its schedule on a point whose verdict it cannot have caused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// `summary.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointSummaryFile {
    /// `rate_sweep_point` (open loop) or `saturation_experiment` (closed loop: never a
    /// capacity).
    pub experiment: String,
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
    /// Token-id prompts: the served vocabulary as the point measured it and the ids its
    /// prompts were drawn from (absent for text prompts, or when the server answered no
    /// probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocabulary: Option<super::vocabulary::Vocabulary>,
    /// Chat prompts sized against the server's tokenizer: its words per token, the chat
    /// template's tokens taken off every request, and the endpoint asked (the prompt
    /// tokens the server then counted are in `engine_truth` and `requests.csv`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_sizing: Option<ChatSizing>,
    /// A cold point: the engine's prefix cache emptied through its own call before the
    /// load (vLLM's `/reset_prefix_cache`, SGLang's `/flush_cache`), or why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_reset: Option<super::cache_reset::CacheReset>,
    /// The engines still had requests of earlier load when the point began: how many, how
    /// long it waited for them (at most [`super::drain::MAX_WAIT`]) and what was left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<super::drain::Drain>,
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
    /// The client's figures beside the engine's own counters over the point (requests,
    /// prompt and output tokens, TTFT, prefix-cache hits); what disagrees is also among the
    /// engine findings' flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_truth: Option<goodput_engine_metrics::truth::EngineTruth>,
}

impl PointSummaryFile {
    /// What the engine sustained in a closed loop: by Little's law, its concurrency ÷ the
    /// mean end-to-end latency of its measured requests (the client's turnaround between
    /// one response and the next send left out); `None` for an open-loop point or when
    /// nothing completed.
    pub fn engine_rps(&self) -> Option<f64> {
        let LoadMode::Concurrency { concurrency, .. } = self.mode else {
            return None;
        };
        self.littles_law
            .and_then(|l| goodput_core::analysis::sustained_rps(concurrency as f64, l.mean_e2e_s))
    }
}

/// Schedule facts recorded with the point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// Why each block after the first was added, in order: a measured window or a class
    /// sample under its minimum when the schedule was built, or failures that left a class
    /// short after the run.
    #[serde(default)]
    pub block_reasons: Vec<String>,
}

/// Engine scraping facts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// How the prompts were sized: the configuration's method, or `TextCalibrated` when a
    /// chat point calibrated its estimate against the server's tokenizer.
    pub prompt_method: PromptMethod,
    /// Token-id prompts: the served vocabulary as measured, and the ids drawn.
    pub vocabulary: Option<super::vocabulary::Vocabulary>,
    /// Chat prompts: how their text was sized against the server's tokenizer.
    pub chat_sizing: Option<ChatSizing>,
    /// A cold point: the engine's cache reset, or why not.
    pub cache_reset: Option<super::cache_reset::CacheReset>,
    /// What the point waited for its engines to finish before its baseline.
    pub drain: Option<super::drain::Drain>,
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

/// Runs the point against an engine `k` times faster than real time and converts it back:
/// `config` and `plan` are in real-time units; the run uses their
/// [`time_scaled`](PointPlan::time_scaled) forms and the measured point is
/// [`rescale`](MeasuredPoint::rescale)d by `k`, so records, client facts and engine series
/// come back in real-time units. Summarise it with the real-time `config` and `plan`.
/// `k = 1` is a plain [`measure_point`].
pub async fn measure_time_scaled(
    client: reqwest::Client,
    config: &LoadConfig,
    plan: &PointPlan,
    k: f64,
    stop: watch::Receiver<bool>,
) -> Result<MeasuredPoint, PointError> {
    let mut measured =
        measure_point(client, &config.time_scaled(k), &plan.time_scaled(k), stop).await?;
    measured.rescale(k);
    Ok(measured)
}

/// Runs the point: schedule (continued until the window and sample rules hold), prewarm,
/// load with scraping from the schedule's time zero (`plan.start_at_unix_s`, else at once),
/// and continuation blocks for classes that failures left short. A shard of several
/// (`plan.shard.1 > 1`) never continues: its siblings could not follow it onto the same
/// blocks, so a shortfall shows in the merged point's gate instead.
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
    let (whole, blocks, mut block_reasons) = if closed {
        (build_block(&plan.schedule, 1.0, 0, 0.0, 0)?, 1, Vec::new())
    } else {
        point_schedule(plan, rate, warmup_s)?
    };
    let hash = schedule_hash(&whole);
    let mine = shard(&whole, plan.shard.0, plan.shard.1);
    let requests = mine.len();
    let longest_prompt = mine.iter().map(|r| r.input_tokens).max().unwrap_or(1);

    let (mut calibrated, chat_sizing) = chat_calibration(&client, config).await.unzip();
    let served = super::vocabulary::served_model(&client, &config.target, &config.model).await;
    let vocabulary = if config.text_words_per_token.is_none() {
        super::vocabulary::probe(&client, &config.target, &config.model, served.as_ref()).await
    } else {
        None
    };
    if let Some(v) = vocabulary
        .as_ref()
        .filter(|v| v.token_ids != config.token_ids)
    {
        calibrated = Some(LoadConfig {
            token_ids: v.token_ids,
            ..calibrated.unwrap_or_else(|| config.clone())
        });
    }
    if served.as_ref().is_some_and(|m| m.closes_after_streams()) && !config.close_connections {
        calibrated = Some(LoadConfig {
            close_connections: true,
            ..calibrated.unwrap_or_else(|| config.clone())
        });
    }
    let config = calibrated.as_ref().unwrap_or(config);
    let (prewarmed, cache_reset) = match config.cache {
        CacheMode::Warm => (prewarm(&client, config, longest_prompt).await, None),
        CacheMode::Cold => (
            0,
            super::cache_reset::reset(
                &client,
                &config.target,
                &plan.metrics_targets,
                served.as_ref(),
            )
            .await,
        ),
    };

    // The engines' counters before any request of the load: their increase over the point
    // is then the load's alone, once what earlier load left has finished.
    // The drain's last round of pages is that baseline.
    let (drain, baseline) = if plan.metrics_targets.is_empty() {
        (None, Vec::new())
    } else {
        super::drain::drain(&client, &plan.metrics_targets, super::drain::MAX_WAIT).await
    };
    let zero = TimeZero::new(plan.start_at_unix_s);
    let (scrape_stop_tx, scrape_stop_rx) = watch::channel(false);
    let scraper = (!plan.metrics_targets.is_empty()).then(|| {
        let mut rx = scrape_stop_rx.clone();
        tokio::spawn(scrape_loop_from(
            client.clone(),
            plan.metrics_targets.clone(),
            plan.scrape_interval,
            tokio::time::Instant::from_std(zero.start),
            async move {
                let _ = rx.wait_for(|s| *s).await;
            },
            baseline,
        ))
    });
    // Read off the sending path: before time zero, not between it and the first send.
    let throttling_before = CpuThrottling::read();
    zero.wait(stop.clone()).await;
    let started_unix_s = zero.started_unix_s;
    let mut run = run_point_from(
        client.clone(),
        config.clone(),
        mine,
        stop.clone(),
        zero.start,
    )
    .await;
    run.client.start_at_unix_s = plan.start_at_unix_s;
    run.client.start_lateness_ms = zero.lateness_s * 1e3;
    // Failures can leave a class under the sample minimum although enough were scheduled:
    // continue the same schedule (next blocks) before the point is final.
    let mut blocks = blocks;
    let mut continued = 0;
    let mut next_index = whole.len() as u64;
    let mut last_at = whole.last().map_or(0.0, |r| r.at_s);
    while !closed
        && plan.shard.1 <= 1
        && !run.client.incomplete
        && run.client.early_stop.is_none()
        && blocks < plan.max_blocks
    {
        let Some(c) = short_class(plan, &run) else {
            break;
        };
        block_reasons.push(format!(
            "block {}: failures left class {} with {} successes, under the minimum of {}; sent after the run",
            blocks + 1,
            plan.schedule.classes[c].name,
            successes(&run, c),
            plan.min_per_class
        ));
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
    run.client.cpu_throttling = throttling_before
        .zip(CpuThrottling::read())
        .map(|(before, after)| after.since(&before));
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
            block_reasons,
        },
        started_unix_s,
        prompt_method: config.prompt_method,
        vocabulary,
        chat_sizing,
        cache_reset,
        drain,
    })
}

fn unix_now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The schedule's time zero on this machine's clocks.
struct TimeZero {
    /// The monotonic instant of time zero (in the future while waiting for a start instant).
    start: Instant,
    /// Wall clock (Unix seconds) at time zero.
    started_unix_s: f64,
    /// How far past the asked start instant time zero is (s of wall clock).
    lateness_s: f64,
}

impl TimeZero {
    /// Now, or the wall-clock `start_at` (Unix seconds) when it is still ahead; an instant
    /// already past gives now, late by the difference.
    fn new(start_at: Option<f64>) -> Self {
        let now = Instant::now();
        let now_unix = unix_now_s();
        match start_at {
            Some(at) if at > now_unix => TimeZero {
                start: now + Duration::from_secs_f64(at - now_unix),
                started_unix_s: at,
                lateness_s: 0.0,
            },
            Some(at) => TimeZero {
                start: now,
                started_unix_s: now_unix,
                lateness_s: now_unix - at,
            },
            None => TimeZero {
                start: now,
                started_unix_s: now_unix,
                lateness_s: 0.0,
            },
        }
    }

    /// Sleeps until just before time zero (the pacer thread keeps the exact due times), or
    /// until `stop`.
    async fn wait(&self, mut stop: watch::Receiver<bool>) {
        let wake = self
            .start
            .checked_sub(Duration::from_millis(2))
            .unwrap_or(self.start);
        tokio::select! {
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }
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
        c.start_lateness_ms *= k;
        if let Some(e) = &mut c.early_stop {
            e.rescale(k);
        }
        for p in &mut c.in_flight_series {
            p.0 *= k;
        }
        c.totals.rescale(k);
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
        summarize(config, plan, self)
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
        let csv_path = out_dir.join(pack_files::REQUESTS_CSV);
        let file = std::fs::File::create(&csv_path)
            .map_err(|e| PointError::Write(csv_path.display().to_string(), e))?;
        write_requests_csv(
            std::io::BufWriter::new(file),
            &self.run.records,
            &names,
            plan.record_itl,
        )
        .map_err(|e| PointError::Write(csv_path.display().to_string(), e.into()))?;
        write_json(&out_dir.join(pack_files::SUMMARY_JSON), summary)?;
        if let Some(series) = &self.series {
            write_json(&out_dir.join(pack_files::ENGINE_METRICS_JSON), series)?;
        }
        Ok(())
    }
}

/// The first class with fewer successes than the sample minimum, if any.
fn short_class(plan: &PointPlan, run: &PointRun) -> Option<usize> {
    (0..plan.schedule.classes.len()).find(|&c| successes(run, c) < plan.min_per_class)
}

/// Successful measured requests of class `c`.
fn successes(run: &PointRun, c: usize) -> u64 {
    run.records
        .iter()
        .filter(|r| r.class == c && r.ok())
        .count() as u64
}

/// Appends a continuation run (started `offset` s after the first) to `run`.
fn merge_runs(run: &mut PointRun, more: PointRun, offset: f64) {
    let shift = |x: f64| x + offset;
    for mut r in more.records {
        r.scheduled_s = shift(r.scheduled_s);
        r.sent_s = shift(r.sent_s);
        r.first_token_s = r.first_token_s.map(shift);
        r.last_token_s = r.last_token_s.map(shift);
        r.ended_s = shift(r.ended_s);
        run.records.push(r);
    }
    let (a, b) = (&mut run.client, more.client);
    a.sent += b.sent;
    a.measured += b.measured;
    a.warmup_excluded += b.warmup_excluded;
    a.peak_in_flight = a.peak_in_flight.max(b.peak_in_flight);
    a.window_s += b.window_s;
    a.incomplete |= b.incomplete;
    a.totals.add(&b.totals);
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
    /// The analysis core refused the point's figures.
    #[error("analysing the point: {0}")]
    Analysis(#[from] AnalysisError),
    /// A file could not be written.
    #[error("cannot write {0}: {1}")]
    Write(String, std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::summary::{queue_trend, unanswered_pages};
    use super::*;
    use crate::Timeouts;
    use goodput_core::workload::schedule::{ScheduleClass, TraceEntry};
    use goodput_engine_metrics::series::ScrapeSample;

    fn plan(arrival: Arrival) -> PointPlan {
        PointPlan {
            schedule: ScheduleSpec {
                classes: vec![ScheduleClass {
                    name: "chat".into(),
                    mix: 1.0,
                    input_tokens: 64,
                    output_tokens: 8,
                }],
                requests: 10,
                seed: 1,
                arrival,
                output_jitter: 0.0,
                shared_prefix: None,
            },
            min_duration_s: 120.0,
            min_per_class: 5,
            max_blocks: 3,
            shard: (1, 4),
            gate: GateConfig::default(),
            metrics_targets: Vec::new(),
            scrape_interval: Duration::from_secs(1),
            max_lag_ms: 200.0,
            record_itl: false,
            start_at_unix_s: Some(1.0e9),
        }
    }

    #[test]
    fn a_block_that_fills_the_window_is_not_continued() {
        let mut p = plan(Arrival::Constant);
        p.schedule.requests = 15_000;
        p.min_duration_s = 15.0;
        p.min_per_class = 1;
        // 15,000 arrivals at 1,000 req/s cover 15 s: one block, nothing to explain.
        let (out, blocks, reasons) = point_schedule(&p, 1_000.0, 0.0).expect("schedule");
        assert_eq!((out.len(), blocks), (15_000, 1));
        assert!(reasons.is_empty(), "{reasons:?}");
        // A window really short by a second gets a second block, and says why.
        p.min_duration_s = 16.0;
        let (out, blocks, reasons) = point_schedule(&p, 1_000.0, 0.0).expect("schedule");
        assert_eq!((out.len(), blocks), (30_000, 2));
        assert_eq!(reasons.len(), 1);
        assert!(
            reasons[0].starts_with("block 2: the measured window was 15.000 s"),
            "{reasons:?}"
        );
    }

    #[test]
    fn a_short_class_sample_continues_the_schedule_and_says_so() {
        let mut p = plan(Arrival::Constant);
        p.min_duration_s = 0.0;
        p.min_per_class = 25;
        let (out, blocks, reasons) = point_schedule(&p, 10.0, 0.0).expect("schedule");
        assert_eq!((out.len(), blocks), (30, 3));
        assert_eq!(reasons.len(), 2);
        assert!(
            reasons[1].contains("class chat had 20 measured requests, under the minimum of 25"),
            "{reasons:?}"
        );
    }

    #[test]
    fn time_scaling_divides_durations_and_multiplies_rates() {
        let manifest = goodput_core::workload::seed_manifest();
        let config = LoadConfig {
            timeouts: Timeouts {
                request: Duration::from_secs(600),
                stall: Duration::from_secs(60),
                connect: Duration::from_secs(10),
            },
            warmup_s: 60.0,
            ..LoadConfig::for_manifest(
                &manifest,
                "http://127.0.0.1:1".into(),
                "m".into(),
                LoadMode::Rate { rate: 3.0 },
            )
        };
        let c = config.time_scaled(20.0);
        assert_eq!(c.mode, LoadMode::Rate { rate: 60.0 });
        assert_eq!(c.warmup_s, 3.0);
        assert_eq!(c.timeouts.request, Duration::from_secs(30));
        assert_eq!(c.timeouts.stall, Duration::from_secs(3));
        assert_eq!(c.timeouts.connect, Duration::from_secs(10), "the network's");
        let closed = LoadConfig {
            mode: LoadMode::Concurrency {
                concurrency: 8,
                duration_s: 40.0,
            },
            ..config.clone()
        };
        assert_eq!(
            closed.time_scaled(20.0).mode,
            LoadMode::Concurrency {
                concurrency: 8,
                duration_s: 2.0
            }
        );
        assert_eq!(config.time_scaled(1.0).mode, config.mode);

        let p = plan(Arrival::Trace(vec![
            TraceEntry {
                at_s: 0.0,
                class: None,
                input_tokens: None,
                output_tokens: None,
            },
            TraceEntry {
                at_s: 4.0,
                class: None,
                input_tokens: None,
                output_tokens: None,
            },
        ]))
        .time_scaled(20.0);
        assert_eq!(p.min_duration_s, 6.0);
        assert_eq!(p.scrape_interval, Duration::from_millis(50));
        assert_eq!(p.max_lag_ms, 10.0);
        assert_eq!(p.shard, (1, 4));
        assert_eq!(p.start_at_unix_s, Some(1.0e9), "a wall-clock instant");
        match &p.schedule.arrival {
            Arrival::Trace(t) => assert_eq!(t[1].at_s, 0.2),
            other => panic!("{other:?}"),
        }
        let fine = PointPlan {
            scrape_interval: Duration::from_millis(100),
            ..plan(Arrival::Poisson)
        };
        assert_eq!(
            fine.time_scaled(20.0).scrape_interval,
            Duration::from_millis(10),
            "at least 10 ms"
        );
    }

    #[test]
    fn time_zero_waits_for_a_future_instant_and_records_a_past_one() {
        let now = unix_now_s();
        let ahead = TimeZero::new(Some(now + 5.0));
        let wait = ahead.start.saturating_duration_since(Instant::now());
        assert!(wait > Duration::from_secs(4) && wait <= Duration::from_secs(5));
        assert_eq!((ahead.started_unix_s, ahead.lateness_s), (now + 5.0, 0.0));
        let late = TimeZero::new(Some(now - 2.0));
        assert!(late.start <= Instant::now());
        assert!(
            late.lateness_s >= 2.0 && late.lateness_s < 3.0,
            "{}",
            late.lateness_s
        );
        assert_eq!(TimeZero::new(None).lateness_s, 0.0);
    }

    fn scrapes(targets: &[&str], ok: &[(usize, bool)]) -> MetricsSeries {
        MetricsSeries {
            targets: targets.iter().map(|t| t.to_string()).collect(),
            interval_s: 1.0,
            profile: None,
            target_engines: vec![None; targets.len()],
            samples: ok
                .iter()
                .enumerate()
                .map(|(round, &(target, ok))| ScrapeSample {
                    round: round as u64,
                    t_s: round as f64,
                    target,
                    ok,
                    error: (!ok).then(|| "connection refused".to_owned()),
                    values: Default::default(),
                    skipped_lines: 0,
                })
                .collect(),
        }
    }

    /// One target's waiting and running gauges over ten one-second rounds.
    fn gauges(waiting: impl Fn(f64) -> f64, running: impl Fn(f64) -> f64) -> MetricsSeries {
        let mut s = scrapes(&["http://a:8000"], &[(0, true); 10]);
        for x in &mut s.samples {
            x.values.insert("queue_waiting".into(), waiting(x.t_s));
            x.values.insert("running".into(), running(x.t_s));
        }
        s
    }

    #[test]
    fn the_queue_trend_is_the_growth_wherever_the_requests_wait() {
        let flat = |_: f64| 4.0;
        let growing = |t: f64| 4.0 + 6.0 * t;
        let client = |f: &dyn Fn(f64) -> f64| -> Vec<(f64, f64)> {
            (0..10).map(|t| (t as f64, f(t as f64))).collect()
        };
        // Engine and client flat: flat, from the engine's gauge.
        let quiet = gauges(flat, flat);
        let (trend, source) = queue_trend(&client(&flat), Some(&quiet), 0.0, 9.0);
        assert_eq!(trend, QueueTrend::Flat);
        assert!(source.starts_with("engine waiting-queue"), "{source}");
        // The waiting queue grows: growing, from the engine.
        let waiting = gauges(growing, flat);
        let (trend, source) = queue_trend(&client(&growing), Some(&waiting), 0.0, 9.0);
        assert_eq!(trend, QueueTrend::Growing);
        assert!(source.starts_with("engine waiting-queue"), "{source}");
        // Everything admitted into the running batch: growing inside the engine.
        let running = gauges(flat, growing);
        let (trend, source) = queue_trend(&client(&growing), Some(&running), 0.0, 9.0);
        assert_eq!(trend, QueueTrend::Growing);
        assert!(source.starts_with("requests inside the engine"), "{source}");
        // The engine flat while the client's in-flight count grows (vLLM's API server on a
        // starved core at 2.4 times its capacity): the requests wait in front of it.
        let (trend, source) = queue_trend(&client(&growing), Some(&quiet), 0.0, 9.0);
        assert_eq!(trend, QueueTrend::Growing);
        assert!(source.contains("in front of the engine"), "{source}");
        // Without engine pages the client's count decides alone.
        let (trend, source) = queue_trend(&client(&growing), None, 0.0, 9.0);
        assert_eq!(trend, QueueTrend::Growing);
        assert!(source.contains("no engine metrics"), "{source}");
    }

    #[test]
    fn a_point_without_the_engine_pages_it_asked_for_is_not_evidence() {
        let asked = ["http://a:8000".to_owned(), "http://b:8000".to_owned()];
        // Nothing asked: the client's in-flight count stands in, no reason.
        assert_eq!(unanswered_pages(&[], None), None);
        // Asked, never scraped.
        let why = unanswered_pages(&asked, None).expect("no series");
        assert!(why.contains("never scraped"), "{why}");
        // Every page answered, a few scrapes lost: still evidence.
        let mostly = scrapes(
            &["http://a:8000", "http://b:8000"],
            &[
                (0, true),
                (1, true),
                (0, false),
                (1, true),
                (0, true),
                (1, true),
            ],
        );
        assert_eq!(unanswered_pages(&asked, Some(&mostly)), None);
        // One replica's page never answered: its queue is unknown.
        let silent = scrapes(
            &["http://a:8000", "http://b:8000"],
            &[(0, true), (1, false), (0, true), (1, false)],
        );
        let why = unanswered_pages(&asked, Some(&silent)).expect("b never answered");
        assert!(
            why.contains("http://b:8000") && !why.contains("http://a:8000"),
            "{why}"
        );
        assert!(why.contains("connection refused"), "{why}");
        // Both answered at times, but most scrapes failed.
        let flaky = scrapes(
            &["http://a:8000", "http://b:8000"],
            &[(0, true), (1, true), (0, false), (1, false), (0, false)],
        );
        let why = unanswered_pages(&asked, Some(&flaky)).expect("mostly failed");
        assert!(why.starts_with("3 of 5 engine scrapes failed"), "{why}");
    }
}
