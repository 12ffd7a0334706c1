//! Running one test point: open loop on a precise schedule, or closed loop with N workers.
//!
//! Open loop: a dedicated thread sleeps until each request's scheduled time and hands it to
//! the async runtime; the request's latencies are measured from the scheduled time and the
//! scheduled-to-sent lag is recorded. Nothing caps requests in flight unless asked
//! (`max_in_flight`), and then the lag it causes shows in the figures and can invalidate
//! the point. Closed loop: each worker sends its next request when the previous one ends;
//! the result is a saturation experiment, never a capacity.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc, watch};

use super::client::{send, send_or_abort};
use super::live_metrics::{Due, LiveMetrics};
use super::prompt::{PromptMethod, build_prompt};
use super::record::RequestRecord;
use super::{Api, ErrorKind, RequestOutcome, RequestSpec, Timeouts};
use goodput_core::analysis::{EarlyStop, EarlyStopper, GateConfig, nearest_rank_many};
pub use goodput_core::record::CancelPlan;
use goodput_core::workload::CacheMode;
use goodput_core::workload::schedule::{ScheduledRequest, SharedPrefix};

/// Open or closed loop.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum LoadMode {
    /// Open loop at the schedule's times (its rate).
    Rate {
        /// Offered rate (requests per second), as the schedule was built.
        rate: f64,
    },
    /// Closed loop: `concurrency` workers for `duration_s`.
    Concurrency {
        /// Workers, each with one request in flight.
        concurrency: usize,
        /// How long workers start new requests.
        duration_s: f64,
    },
}

/// Everything one point needs besides its schedule.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Base URL of the endpoint (`http://host:port`).
    pub target: String,
    /// Model name sent with every request.
    pub model: String,
    /// Endpoint kind.
    pub api: Api,
    /// Open or closed loop.
    pub mode: LoadMode,
    /// Cold (unique prompts) or warm (shared prefixes, prewarmed).
    pub cache: CacheMode,
    /// Shared prefixes (warm cache).
    pub shared_prefix: Option<SharedPrefix>,
    /// Seed of the prompt tokens (the schedule's seed).
    pub seed: u64,
    /// Per-request limits.
    pub timeouts: Timeouts,
    /// Requests scheduled before this many seconds are warmup, not measured.
    pub warmup_s: f64,
    /// The first this-many requests are warmup, not measured.
    pub warmup_requests: u64,
    /// Send `ignore_eos` (fixed output length).
    pub ignore_eos: bool,
    /// Also send `min_tokens` = `max_tokens`.
    pub min_tokens: bool,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Text prompts (chat) instead of token ids; words per token for their length. With
    /// [`PromptMethod::TextEstimated`] the point replaces the estimate with the ratio of the
    /// server's tokenizer when it serves `/tokenize`.
    pub text_words_per_token: Option<f64>,
    /// Token ids of token-id prompts: the default range, or one cut to the served model's
    /// vocabulary (the point measures it before any load).
    pub token_ids: super::prompt::TokenRange,
    /// Text prompts: tokens the server's chat template adds to each request, taken off its
    /// text so that the server counts the scheduled length.
    pub chat_template_tokens: u32,
    /// Send `Connection: close` with every request, so each has a connection of its own:
    /// for a server that closes its connections after a streamed response without saying
    /// so (llama.cpp), which a reused connection would turn into failures that are the
    /// client's doing, and for replicas behind one address that balances connections
    /// ([`crate::point_job::connection_per_request`]).
    pub close_connections: bool,
    /// How prompt lengths were set, for the summary.
    pub prompt_method: PromptMethod,
    /// A cap on requests in flight (open loop); `None` = no cap.
    pub max_in_flight: Option<usize>,
    /// Print progress to stderr.
    pub progress: bool,
    /// Live client metrics to update as each request is sent and completes (warmup
    /// included), served by `goodput loadgen --metrics-addr`; `None`: none kept.
    pub live_metrics: Option<Arc<LiveMetrics>>,
    /// Requests the client cancels mid-stream (a failure test's `RequestCancel`); `None`:
    /// none.
    pub cancel: Option<CancelPlan>,
    /// Stop a failing open-loop point as soon as its requests settle the verdict
    /// ([`EarlyStopper`]); `None`: every point runs to its end.
    pub early_stop: Option<EarlyStopConfig>,
}

/// What early stopping judges a running point against.
#[derive(Clone, Debug, PartialEq)]
pub struct EarlyStopConfig {
    /// The point's gate (cutoffs in real-time milliseconds).
    pub gate: GateConfig,
    /// Real-time milliseconds per millisecond of the run's clock: K against an engine K
    /// times faster than real time, else 1.
    pub latency_scale: f64,
}

impl LoadConfig {
    /// A point's configuration as the manifest sets it: its warmup, request timeout
    /// (cancellation, else 600 s), stop behaviour and sampling; cold cache, token-id prompts
    /// on `/v1/completions`, no in-flight cap, no progress lines.
    pub fn for_manifest(
        manifest: &goodput_core::workload::WorkloadManifest,
        target: String,
        model: String,
        mode: LoadMode,
    ) -> Self {
        let stop = manifest.stop.as_ref();
        let timeout_s = manifest
            .cancellation
            .as_ref()
            .map_or(600.0, |c| c.request_timeout_seconds);
        LoadConfig {
            target,
            model,
            api: Api::Completions,
            mode,
            cache: CacheMode::Cold,
            shared_prefix: None,
            seed: manifest.client.request_schedule_seed,
            timeouts: Timeouts {
                request: Duration::from_secs_f64(timeout_s.max(0.001)),
                stall: Duration::from_secs(60),
                connect: Duration::from_secs(10),
            },
            warmup_s: manifest.client.warmup_seconds,
            warmup_requests: 0,
            ignore_eos: stop.is_none_or(|s| s.ignore_eos),
            min_tokens: stop.is_none_or(|s| s.fixed_output_length),
            temperature: manifest.sampling.as_ref().and_then(|s| s.temperature),
            text_words_per_token: None,
            token_ids: super::prompt::TokenRange::DEFAULT,
            chat_template_tokens: 0,
            close_connections: false,
            prompt_method: PromptMethod::TokenIds,
            max_in_flight: None,
            progress: false,
            live_metrics: None,
            cancel: None,
            early_stop: None,
        }
    }

    /// Whether a record is measured rather than warmup: scheduled (open loop) or sent
    /// (closed loop) after the warmup, and past the warmup's request count.
    pub fn is_measured(&self, r: &RequestRecord) -> bool {
        let at = match self.mode {
            LoadMode::Rate { .. } => r.scheduled_s,
            LoadMode::Concurrency { .. } => r.sent_s,
        };
        at >= self.warmup_s && r.index >= self.warmup_requests
    }

    /// This configuration for an engine that runs `k` times faster than real time: the
    /// open-loop rate × `k` (closed loop: its duration ÷ `k`), the warmup, the
    /// cancellation window and the request and stall timeouts ÷ `k`. The connect timeout stays: it is the network's, not the
    /// engine's. `k = 1` gives the configuration unchanged.
    ///
    /// With [`PointPlan::time_scaled`](super::point::PointPlan::time_scaled) and
    /// [`MeasuredPoint::rescale`](super::point::MeasuredPoint::rescale) this is the one
    /// definition of time scaling, used by `goodput bench` and `goodput loadgen
    /// --time-scale` alike (see [`measure_time_scaled`](super::point::measure_time_scaled)).
    pub fn time_scaled(&self, k: f64) -> LoadConfig {
        if k == 1.0 {
            return self.clone();
        }
        LoadConfig {
            mode: match self.mode {
                LoadMode::Rate { rate } => LoadMode::Rate { rate: rate * k },
                LoadMode::Concurrency {
                    concurrency,
                    duration_s,
                } => LoadMode::Concurrency {
                    concurrency,
                    duration_s: duration_s / k,
                },
            },
            warmup_s: self.warmup_s / k,
            cancel: self.cancel.map(|c| CancelPlan {
                from_s: c.from_s / k,
                to_s: c.to_s / k,
                ..c
            }),
            early_stop: self.early_stop.clone().map(|e| EarlyStopConfig {
                latency_scale: e.latency_scale * k,
                ..e
            }),
            timeouts: Timeouts {
                request: self.timeouts.request.div_f64(k),
                stall: self.timeouts.stall.div_f64(k),
                connect: self.timeouts.connect,
            },
            ..self.clone()
        }
    }
}

/// The measured window of an open-loop run (s) whose measured requests were scheduled from
/// `first_s` to `last_s` at `rate`: n arrivals span n − 1 gaps, so one mean gap is added
/// and n requests over the window give n / window. One definition for a single run and for
/// the merge of a point's shards.
pub fn open_loop_window_s(rate: f64, first_s: f64, last_s: f64) -> f64 {
    (last_s - first_s) + 1.0 / rate
}

/// The measured window of a closed-loop run (s): from its first measured send to the end
/// of its last measured request. Workers stop sending at the nominal duration, but what is
/// in flight then finishes later: its tokens divided by the nominal duration would be more
/// than the server delivered in that time (129% of a fixed-latency server's ceiling for a
/// 3-second run at concurrency 100). Every throughput figure divides by this span.
pub fn closed_loop_window_s(measured: &[RequestRecord]) -> f64 {
    let first = measured
        .iter()
        .map(|r| r.sent_s)
        .fold(f64::INFINITY, f64::min);
    let last = measured
        .iter()
        .map(|r| r.ended_s)
        .fold(f64::NEG_INFINITY, f64::max);
    if last > first { last - first } else { 0.0 }
}

/// What the client itself saw while running the point.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientFacts {
    /// Requests sent (warmup included).
    pub sent: u64,
    /// Requests measured.
    pub measured: u64,
    /// Requests excluded as warmup.
    pub warmup_excluded: u64,
    /// Highest number of requests in flight at once.
    pub peak_in_flight: usize,
    /// Scheduled-to-sent lag (ms): p50, p99, max over measured requests.
    pub schedule_lag_ms: LagFigures,
    /// Measured window (s). Open loop: its first scheduled send to its last plus one mean
    /// gap ([`open_loop_window_s`]); closed loop: its first send to its last end
    /// ([`closed_loop_window_s`]).
    pub window_s: f64,
    /// Seconds from the schedule's time zero to the last measured response (warmup and
    /// drain included), or to the early stop if later: how long the point held the
    /// deployment.
    #[serde(default)]
    pub busy_s: f64,
    /// Successes whose server usage and counted chunks disagree.
    pub tokens_mismatches: u64,
    /// Successes that ended before `max_tokens`.
    pub short_outputs: u64,
    /// The run was stopped before its schedule ended (from outside: not early stopping).
    pub incomplete: bool,
    /// Early stopping settled the point as failing: the evidence at that moment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_stop: Option<EarlyStop>,
    /// Requests in flight when the point was stopped early, cancelled and left out of the
    /// measured records.
    #[serde(default)]
    pub cancelled_at_stop: u64,
    /// `(time s, requests in flight)` sampled every 100 ms.
    pub in_flight_series: Vec<(f64, f64)>,
    /// The wall-clock instant (Unix seconds) the schedule's time zero was asked for
    /// (`goodput loadgen --start-at`, shared by the shards of one point), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at_unix_s: Option<f64>,
    /// How late the run's time zero was against `start_at_unix_s` (ms, in the units of the
    /// other figures): the run then started at once, on a timeline this much behind the
    /// shared one. 0 when on time or without a start instant.
    #[serde(default)]
    pub start_lateness_ms: f64,
    /// The measured failures by what the server or the connection said, most frequent
    /// first (at most [`ErrorCount::KEPT`]): why a point lost its requests, in the
    /// server's own words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ErrorCount>,
    /// Every request the run sent, warmup included: what the engine's own counters saw
    /// over the point, for the truth checks.
    #[serde(default)]
    pub totals: RunTotals,
    /// The client's cgroup CPU throttling from just before its time zero to its last
    /// response (the shards' sum), where the cgroup's `cpu.stat` can be read: the evidence
    /// when a CPU limit, not the target, kept the client behind its schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_throttling: Option<super::cpu_throttle::CpuThrottling>,
}

/// What a run sent and got back, for the engine's truth check (the core's).
pub use goodput_core::record::RunTotals;

/// How many measured requests failed with one status and message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCount {
    /// The record's status (`http_status`, `stream_error`, `connection`, ...).
    pub status: String,
    /// The server's message (or the connection's error), as recorded.
    pub message: String,
    /// Failed requests with both.
    pub count: u64,
}

impl ErrorCount {
    /// Distinct failures kept in a summary.
    pub const KEPT: usize = 5;

    /// The failures among `records`, most frequent first (ties by message), at most
    /// [`Self::KEPT`].
    pub fn of<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> Vec<ErrorCount> {
        Self::merge(
            records
                .into_iter()
                .filter(|r| !r.ok() && !r.aborted())
                .map(|r| ErrorCount {
                    status: r.status.to_owned(),
                    message: r.error_message.clone().unwrap_or_default(),
                    count: 1,
                }),
        )
    }

    /// Counts of the same status and message added up (a point's shards), most frequent
    /// first, at most [`Self::KEPT`].
    pub fn merge(counts: impl IntoIterator<Item = ErrorCount>) -> Vec<ErrorCount> {
        let mut by: std::collections::BTreeMap<(String, String), u64> = Default::default();
        for c in counts {
            *by.entry((c.status, c.message)).or_default() += c.count;
        }
        let mut out: Vec<ErrorCount> = by
            .into_iter()
            .map(|((status, message), count)| ErrorCount {
                status,
                message,
                count,
            })
            .collect();
        out.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| a.message.cmp(&b.message))
        });
        out.truncate(Self::KEPT);
        out
    }
}

impl std::fmt::Display for ErrorCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.message.is_empty() {
            write!(f, "{} × {}", self.count, self.status)
        } else {
            write!(f, "{} × {}: {}", self.count, self.status, self.message)
        }
    }
}

impl ClientFacts {
    /// Recomputes the figures that follow from the measured records (lag percentiles,
    /// token mismatches, short outputs), e.g. after records were added.
    pub fn refresh_from(&mut self, measured: &[RequestRecord]) {
        let mut lags: Vec<f64> = measured
            .iter()
            .map(RequestRecord::schedule_lag_ms)
            .collect();
        self.schedule_lag_ms = LagFigures::of(&mut lags);
        // A point stopped early held the engine until the stop: the requests it cancelled
        // ran after the last response it kept.
        let stopped_s = self.early_stop.as_ref().map_or(0.0, |e| e.at_s);
        self.busy_s = measured.iter().map(|r| r.ended_s).fold(stopped_s, f64::max);
        self.tokens_mismatches = measured
            .iter()
            .filter(|r| {
                r.ok()
                    && r.output_tokens_usage
                        .is_some_and(|u| u != r.output_tokens_counted)
            })
            .count() as u64;
        self.short_outputs = measured.iter().filter(|r| r.short_output()).count() as u64;
        self.errors = ErrorCount::of(measured);
    }
}

/// Lag percentiles (nearest-rank).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LagFigures {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl LagFigures {
    /// The figures of these lags (ms; reordered in place); all 0 without any.
    pub fn of(lags_ms: &mut [f64]) -> Self {
        let lag = nearest_rank_many(lags_ms, &[0.5, 0.99, 1.0]);
        LagFigures {
            p50: lag[0].unwrap_or(0.0),
            p99: lag[1].unwrap_or(0.0),
            max: lag[2].unwrap_or(0.0),
        }
    }
}

/// A finished point: every record (warmup flagged out) and the client's facts.
#[derive(Debug)]
pub struct PointRun {
    /// Measured requests, in schedule order.
    pub records: Vec<RequestRecord>,
    /// Client facts.
    pub client: ClientFacts,
    /// When the run started (the schedule's time zero).
    pub start: Instant,
}

struct Shared {
    client: reqwest::Client,
    config: LoadConfig,
    start: Instant,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    sent: AtomicU64,
    cap: Option<Semaphore>,
    stop: watch::Receiver<bool>,
}

impl Shared {
    fn spec_for(&self, r: &ScheduledRequest) -> RequestSpec {
        let prefix = match (self.config.cache, self.config.shared_prefix, r.prefix) {
            (CacheMode::Warm, Some(sp), Some(p)) => Some((p, sp.tokens)),
            _ => None,
        };
        RequestSpec {
            model: self.config.model.clone(),
            api: self.config.api,
            prompt: build_prompt(
                self.config.text_words_per_token.is_some(),
                self.config.text_words_per_token.unwrap_or(1.0),
                self.config.token_ids,
                self.config.chat_template_tokens,
                self.config.seed,
                r.index,
                r.input_tokens,
                prefix,
            ),
            max_tokens: r.output_tokens,
            min_tokens: self.config.min_tokens.then_some(r.output_tokens),
            ignore_eos: self.config.ignore_eos,
            temperature: self.config.temperature,
            close_connection: self.config.close_connections,
        }
    }

    /// One finished request's record (timed from `due`), counted by the live metrics and
    /// handed to the collector: the same for open and closed loop.
    fn deliver(
        &self,
        tx: &mpsc::UnboundedSender<RequestRecord>,
        r: &ScheduledRequest,
        due: Instant,
        outcome: RequestOutcome,
    ) {
        let rec = RequestRecord::new(
            r.index,
            r.class,
            self.start,
            due,
            r.input_tokens,
            r.output_tokens,
            outcome,
        );
        if let Some(m) = &self.config.live_metrics {
            m.observe(&rec);
        }
        // The collector is gone only once the run is over: nothing is left to count.
        let _ = tx.send(rec);
    }

    /// Sends one request, honouring the stop signal; the outcome is `Cancelled` if stopped.
    /// `due`: the open-loop request's mark in the live metrics, sent with it (`None` in
    /// closed loop, which sends on no schedule, or without live metrics).
    async fn run_one(&self, r: &ScheduledRequest, due: Option<Due>) -> RequestOutcome {
        let spec = self.spec_for(r);
        let _permit = match &self.cap {
            Some(sem) => sem.acquire().await.ok(),
            None => None,
        };
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
        self.sent.fetch_add(1, Ordering::Relaxed);
        let mut stop = self.stop.clone();
        let started = Instant::now();
        match (due, &self.config.live_metrics) {
            (Some(due), _) => due.sent(started),
            (None, Some(m)) => m.sent(started, started),
            (None, None) => {}
        }
        let abort_after = self
            .config
            .cancel
            .and_then(|c| c.abort_after(self.config.seed, r.index, r.at_s));
        let outcome = tokio::select! {
            o = send_or_abort(
                &self.client,
                &self.config.target,
                &spec,
                &self.config.timeouts,
                abort_after,
            ) => o,
            _ = stop.wait_for(|s| *s) => cancelled(started),
        };
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        outcome
    }
}

fn cancelled(sent: Instant) -> RequestOutcome {
    RequestOutcome {
        sent,
        first_token: None,
        last_token: None,
        ended: Instant::now(),
        content_chunks: 0,
        itl_ms: Vec::new(),
        usage_completion_tokens: None,
        usage_prompt_tokens: None,
        finish_reason: None,
        http_status: None,
        error: Some(ErrorKind::Cancelled),
        error_message: Some("the run was stopped".into()),
    }
}

/// Sends each shared prefix once (warm cache) and waits for them, so measurement starts
/// with the cache state in place.
pub async fn prewarm(client: &reqwest::Client, config: &LoadConfig, input_tokens: u32) -> usize {
    let Some(sp) = config.shared_prefix else {
        return 0;
    };
    let mut ok = 0;
    for p in 0..sp.pool {
        let spec = RequestSpec {
            model: config.model.clone(),
            api: config.api,
            prompt: build_prompt(
                config.text_words_per_token.is_some(),
                config.text_words_per_token.unwrap_or(1.0),
                config.token_ids,
                config.chat_template_tokens,
                config.seed,
                u64::MAX - u64::from(p),
                input_tokens.max(sp.tokens + 1),
                Some((p, sp.tokens)),
            ),
            max_tokens: 1,
            min_tokens: None,
            ignore_eos: true,
            temperature: config.temperature,
            close_connection: config.close_connections,
        };
        if send(client, &config.target, &spec, &config.timeouts)
            .await
            .error
            .is_none()
        {
            ok += 1;
        }
    }
    ok
}

/// Runs one point over `schedule` (already sharded). `stop` ends it early (Ctrl-C): what was
/// measured is kept and the point is marked incomplete.
pub async fn run_point(
    client: reqwest::Client,
    config: LoadConfig,
    schedule: Vec<ScheduledRequest>,
    stop: watch::Receiver<bool>,
) -> PointRun {
    run_point_from(client, config, schedule, stop, Instant::now()).await
}

/// [`run_point`] with the schedule's time zero at `start`, which may lie a little in the
/// future (the common start of a point's shards): open-loop sends wait for their due time
/// on that timeline; closed-loop workers start at once and stop at `start` + duration.
pub async fn run_point_from(
    client: reqwest::Client,
    config: LoadConfig,
    schedule: Vec<ScheduledRequest>,
    stop: watch::Receiver<bool>,
    start: Instant,
) -> PointRun {
    // Requests stop on the caller's signal or on early stopping's.
    let (halt_tx, halt) = watch::channel(false);
    let halt_tx = Arc::new(halt_tx);
    let forward = {
        let (tx, mut outside) = (halt_tx.clone(), stop.clone());
        tokio::spawn(async move {
            if outside.wait_for(|s| *s).await.is_ok() {
                let _ = tx.send(true);
            }
        })
    };
    let mut stopper = early_stopper(&config, &schedule);
    let shared = Arc::new(Shared {
        client,
        cap: config.max_in_flight.map(Semaphore::new),
        config,
        start,
        in_flight: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
        sent: AtomicU64::new(0),
        stop: halt.clone(),
    });
    let (tx, mut rx) = mpsc::unbounded_channel::<RequestRecord>();
    let series = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sampler = tokio::spawn(sample_in_flight(shared.clone(), series.clone()));
    let total = schedule.len();
    let stopped_early = Arc::new(AtomicBool::new(false));
    let mut sending = None;

    match shared.config.mode {
        LoadMode::Rate { .. } => {
            let handle = tokio::runtime::Handle::current();
            let sh = shared.clone();
            let stop_flag = stopped_early.clone();
            let stop_rx = halt.clone();
            let tx = tx.clone();
            // A plain thread keeps to the schedule within tens of microseconds; tokio's
            // timer would round every send up to the next millisecond.
            let pacer = std::thread::spawn(move || {
                // Linux lets a sleeping thread wake up to 50 µs late by default (timer
                // slack); the pacer asks for the tightest wake-up instead.
                #[cfg(target_os = "linux")]
                // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
                #[allow(unsafe_code)]
                unsafe {
                    libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0);
                }
                for r in schedule {
                    if *stop_rx.borrow() {
                        stop_flag.store(true, Ordering::Relaxed);
                        break;
                    }
                    let due = sh.start + Duration::from_secs_f64(r.at_s);
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    // Due from now until sent: a task the runtime is slow to start shows
                    // in the live lag gauge while it waits.
                    let pending = sh.config.live_metrics.as_ref().map(|m| m.due(due));
                    let sh = sh.clone();
                    let tx = tx.clone();
                    handle.spawn(async move {
                        let outcome = sh.run_one(&r, pending).await;
                        sh.deliver(&tx, &r, due, outcome);
                    });
                }
            });
            // Records are collected (and early stopping judged) while the pacer sends.
            sending = Some(tokio::task::spawn_blocking(move || pacer.join()));
        }
        LoadMode::Concurrency {
            concurrency,
            duration_s,
        } => {
            let next = Arc::new(AtomicU64::new(0));
            let schedule = Arc::new(schedule);
            let deadline = start + Duration::from_secs_f64(duration_s);
            let workers: Vec<_> = (0..concurrency)
                .map(|_| {
                    let sh = shared.clone();
                    let tx = tx.clone();
                    let next = next.clone();
                    let schedule = schedule.clone();
                    let stop_flag = stopped_early.clone();
                    tokio::spawn(async move {
                        while Instant::now() < deadline && !schedule.is_empty() {
                            if *sh.stop.borrow() {
                                stop_flag.store(true, Ordering::Relaxed);
                                break;
                            }
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let mut r = schedule[(i % schedule.len() as u64) as usize].clone();
                            r.index = i;
                            let outcome = sh.run_one(&r, None).await;
                            // Closed loop: a request is due when it is sent.
                            sh.deliver(&tx, &r, outcome.sent, outcome);
                        }
                    })
                })
                .collect();
            for w in workers {
                let _ = w.await;
            }
        }
    }
    drop(tx);
    let mut records = Vec::with_capacity(total);
    let mut progress = Progress::new(shared.config.progress, total);
    let mut failed = 0u64;
    let mut early: Option<EarlyStop> = None;
    let mut observed = 0u64;
    while let Some(rec) = rx.recv().await {
        failed += u64::from(!rec.ok());
        if let Some(s) = stopper.as_mut()
            && shared.config.is_measured(&rec)
        {
            s.observe(&rec);
            observed += 1;
            if observed.is_multiple_of(EARLY_STOP_EVERY) {
                let now = start.elapsed().as_secs_f64();
                let in_flight = series.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let Some(evidence) = s.check(now, &in_flight) {
                    let _ = halt_tx.send(true);
                    early = Some(evidence);
                    stopper = None;
                }
            }
        }
        records.push(rec);
        progress.update(
            records.len(),
            failed,
            shared.in_flight.load(Ordering::Relaxed),
            start,
        );
    }
    if let Some(pacer) = sending {
        // The pacer only sleeps and spawns; it cannot panic short of a bug.
        let _ = pacer.await;
    }
    forward.abort();
    progress.finish();
    sampler.abort();
    let _ = sampler.await;
    // The sampler is gone, so nobody else holds the lock; a poisoned lock still has data.
    let in_flight_series = std::mem::take(&mut *series.lock().unwrap_or_else(|e| e.into_inner()));
    // What early stopping cut off was not the server's doing: out of the figures.
    let before = records.len();
    if early.is_some() {
        records.retain(|r| r.status != ErrorKind::Cancelled.as_str());
    }
    let cancelled_at_stop = (before - records.len()) as u64;
    records.sort_by_key(|r| r.index);
    let outside = *stop.borrow();
    let mut run = finish(
        shared,
        records,
        in_flight_series,
        outside || (stopped_early.load(Ordering::Relaxed) && early.is_none()),
    );
    run.client.early_stop = early;
    run.client.cancelled_at_stop = cancelled_at_stop;
    // The engine worked on the cancelled requests, for as long as they ran: what it counted
    // no longer matches the client's completions.
    run.client.totals.not_completed += cancelled_at_stop;
    run.client.refresh_from(&run.records);
    run
}

/// Measured requests between two looks of early stopping.
const EARLY_STOP_EVERY: u64 = 25;

/// Early stopping for this open-loop schedule, when the configuration asks for it: the
/// measured requests per class, their planned window and the last due time.
fn early_stopper(config: &LoadConfig, schedule: &[ScheduledRequest]) -> Option<RecordStopper> {
    let (LoadMode::Rate { rate }, Some(e)) = (config.mode, config.early_stop.as_ref()) else {
        return None;
    };
    let classes = e.gate.classes.len();
    let mut scheduled = vec![0u64; classes];
    let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
    for r in schedule
        .iter()
        .filter(|r| r.at_s >= config.warmup_s && r.index >= config.warmup_requests)
    {
        if let Some(n) = scheduled.get_mut(r.class) {
            *n += 1;
        }
        first = first.min(r.at_s);
        last = last.max(r.at_s);
    }
    if !first.is_finite() {
        return None;
    }
    let last_due = schedule.last().map_or(last, |r| r.at_s);
    Some(RecordStopper {
        stopper: EarlyStopper::new(
            e.gate.clone(),
            scheduled,
            first,
            open_loop_window_s(rate, first, last),
            last_due,
        ),
        latency_scale: e.latency_scale,
    })
}

/// An [`EarlyStopper`] fed with the run's records (latencies on the run's clock).
struct RecordStopper {
    stopper: EarlyStopper,
    latency_scale: f64,
}

impl RecordStopper {
    fn observe(&mut self, r: &RequestRecord) {
        let k = self.latency_scale;
        let success = r.ok().then_some((r.ttft_ms * k, r.tpot_ms * k));
        self.stopper.observe(r.class, success);
    }

    fn check(&self, now_s: f64, in_flight: &[(f64, f64)]) -> Option<EarlyStop> {
        self.stopper.check(now_s, in_flight)
    }
}

/// A live progress line on a terminal, a log line every 5 s otherwise, or nothing.
enum Progress {
    Off,
    Bar(indicatif::ProgressBar),
    Log(Instant),
}

impl Progress {
    fn new(enabled: bool, total: usize) -> Self {
        use std::io::IsTerminal as _;
        if !enabled {
            Progress::Off
        } else if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(total as u64);
            // The template is a constant known to be valid.
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} done {msg}",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            Progress::Bar(bar)
        } else {
            Progress::Log(Instant::now())
        }
    }

    fn update(&mut self, done: usize, failed: u64, in_flight: usize, start: Instant) {
        match self {
            Progress::Off => {}
            Progress::Bar(bar) => {
                bar.set_position(done as u64);
                bar.set_message(format!("{in_flight} in flight, {failed} failed"));
            }
            Progress::Log(last) => {
                if last.elapsed() >= Duration::from_secs(5) {
                    *last = Instant::now();
                    eprintln!(
                        "loadgen: {done} done, {failed} failed, {in_flight} in flight, {:.0} s",
                        start.elapsed().as_secs_f64()
                    );
                }
            }
        }
    }

    fn finish(self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// Samples requests in flight every 100 ms until aborted.
async fn sample_in_flight(shared: Arc<Shared>, series: Arc<std::sync::Mutex<Vec<(f64, f64)>>>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let point = (
            shared.start.elapsed().as_secs_f64(),
            shared.in_flight.load(Ordering::Relaxed) as f64,
        );
        series.lock().unwrap_or_else(|e| e.into_inner()).push(point);
    }
}

fn finish(
    shared: Arc<Shared>,
    all: Vec<RequestRecord>,
    in_flight_series: Vec<(f64, f64)>,
    incomplete: bool,
) -> PointRun {
    let cfg = &shared.config;
    let prefix_tokens = match (cfg.cache, cfg.shared_prefix) {
        (CacheMode::Warm, Some(p)) => Some(p.tokens),
        _ => None,
    };
    let totals = RunTotals::of(&all, prefix_tokens);
    let (measured, warmup): (Vec<_>, Vec<_>) = all.into_iter().partition(|r| cfg.is_measured(r));
    let first = measured
        .iter()
        .map(|r| r.scheduled_s)
        .fold(f64::INFINITY, f64::min);
    let last = measured
        .iter()
        .map(|r| r.scheduled_s)
        .fold(f64::NEG_INFINITY, f64::max);
    let window_s = match cfg.mode {
        LoadMode::Rate { rate } => {
            if measured.is_empty() {
                0.0
            } else {
                open_loop_window_s(rate, first, last)
            }
        }
        LoadMode::Concurrency { .. } => closed_loop_window_s(&measured),
    };
    let mut client = ClientFacts {
        sent: shared.sent.load(Ordering::Relaxed),
        measured: measured.len() as u64,
        warmup_excluded: warmup.len() as u64,
        peak_in_flight: shared.peak.load(Ordering::Relaxed),
        window_s,
        incomplete,
        in_flight_series,
        totals,
        ..ClientFacts::default()
    };
    client.refresh_from(&measured);
    PointRun {
        records: measured,
        client,
        start: shared.start,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_plan_picks_its_fraction_of_the_window_the_same_way_every_time() {
        let plan = CancelPlan {
            from_s: 10.0,
            to_s: 20.0,
            fraction: 0.25,
            after_chunks: 8,
        };
        let picked: Vec<u64> = (0..4000)
            .filter(|&i| plan.abort_after(7, i, 15.0).is_some())
            .collect();
        // 1000 expected; a binomial's sd is about 27.
        assert!((880..=1120).contains(&picked.len()), "{}", picked.len());
        assert_eq!(plan.abort_after(7, picked[0], 15.0), Some(8));
        let again: Vec<u64> = (0..4000)
            .filter(|&i| plan.abort_after(7, i, 19.9).is_some())
            .collect();
        assert_eq!(picked, again, "the draw depends on the index and seed only");
        let other_seed = (0..4000)
            .filter(|&i| plan.abort_after(8, i, 15.0).is_some())
            .count();
        assert!(other_seed > 0);
        assert_ne!(
            picked,
            (0..4000)
                .filter(|&i| plan.abort_after(8, i, 15.0).is_some())
                .collect::<Vec<_>>()
        );
        // Outside [from, to): never.
        assert!((0..4000).all(|i| plan.abort_after(7, i, 9.99).is_none()));
        assert!((0..4000).all(|i| plan.abort_after(7, i, 20.0).is_none()));
        let all = CancelPlan {
            fraction: 1.0,
            ..plan
        };
        assert!((0..100).all(|i| all.abort_after(7, i, 10.0) == Some(8)));
    }

    #[test]
    fn time_scaling_moves_the_cancel_window() {
        let mut config = LoadConfig::for_manifest(
            &goodput_core::workload::seed_manifest(),
            "http://127.0.0.1:1".into(),
            "m".into(),
            LoadMode::Rate { rate: 2.0 },
        );
        config.cancel = Some(CancelPlan {
            from_s: 10.0,
            to_s: 40.0,
            fraction: 0.5,
            after_chunks: 3,
        });
        let scaled = config.time_scaled(5.0).cancel.expect("kept");
        assert_eq!((scaled.from_s, scaled.to_s), (2.0, 8.0));
        assert_eq!((scaled.fraction, scaled.after_chunks), (0.5, 3));
    }
}
