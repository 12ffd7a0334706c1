//! Offline what-if: drive the engine model with a seeded open-loop workload on a virtual
//! clock, summarise each rate, and bisect for the highest rate that meets the SLO.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;

use super::engine::{Engine, EngineStats, NewRequest, synthetic_block_hashes};
use super::setup::Setup;
use crate::analysis::{
    ClassSlo, GateConfig, PointReport, PointSummary, QueueTrend, Success, meets_slo,
    nearest_rank_many, queue_slope, tpot_ms,
};
pub use crate::workload::schedule::{Arrival, SharedPrefix};
use crate::workload::schedule::{
    ScheduleClass, ScheduleError, ScheduleSpec, ScheduledRequest, build_schedule,
};

/// One request shape of the workload and its request-level SLO.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassShape {
    /// Class name.
    pub name: String,
    /// Share of requests.
    pub mix: f64,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens (the mean when output lengths vary).
    pub output_tokens: u32,
    /// TTFT cutoff of one request.
    pub ttft_cutoff_ms: f64,
    /// TPOT cutoff of one request.
    pub tpot_cutoff_ms: f64,
}

/// A seeded open-loop workload; only the rate varies between points of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadSpec {
    /// Classes with their mix.
    pub classes: Vec<ClassShape>,
    /// Requests per point.
    pub requests: usize,
    /// Seed of the class order, arrival gaps and lengths (PCG64, `seed_from_u64`).
    pub seed: u64,
    /// Arrival process.
    pub arrival: Arrival,
    /// Output lengths vary uniformly within ±this fraction of the class's (0 = fixed).
    pub output_jitter: f64,
    /// Shared prompt prefixes, if any.
    pub shared_prefix: Option<SharedPrefix>,
}

impl WorkloadSpec {
    /// One request shape, Poisson arrivals, seed 0, fixed lengths, no shared prefixes: the
    /// methodology's what-if workload.
    pub fn single_shape(
        input_tokens: u32,
        output_tokens: u32,
        ttft_cutoff_ms: f64,
        tpot_cutoff_ms: f64,
        requests: usize,
    ) -> Self {
        WorkloadSpec {
            classes: vec![ClassShape {
                name: "default".into(),
                mix: 1.0,
                input_tokens,
                output_tokens,
                ttft_cutoff_ms,
                tpot_cutoff_ms,
            }],
            requests,
            seed: 0,
            arrival: Arrival::Poisson,
            output_jitter: 0.0,
            shared_prefix: None,
        }
    }
}

impl WorkloadSpec {
    /// A manifest's workload as the model runs it: its classes with their cutoffs, its
    /// initial schedule's size, seed and arrival process; fixed lengths, no shared
    /// prefixes. `None` for trace arrivals, which have no rate to vary.
    pub fn for_manifest(m: &crate::workload::WorkloadManifest) -> Option<WorkloadSpec> {
        Some(WorkloadSpec {
            classes: m
                .workload
                .iter()
                .map(|c| ClassShape {
                    name: c.name.clone(),
                    mix: c.mix,
                    input_tokens: c.input_tokens,
                    output_tokens: c.output_tokens,
                    ttft_cutoff_ms: c.request_ttft_cutoff_ms,
                    tpot_cutoff_ms: c.request_tpot_cutoff_ms,
                })
                .collect(),
            requests: m.client.initial_scheduled_requests as usize,
            seed: m.client.request_schedule_seed,
            arrival: m.arrival()?,
            output_jitter: 0.0,
            shared_prefix: None,
        })
    }

    /// The schedule this workload sends (the load generator builds the same one).
    pub fn schedule_spec(&self) -> ScheduleSpec {
        ScheduleSpec {
            classes: self
                .classes
                .iter()
                .map(|c| ScheduleClass {
                    name: c.name.clone(),
                    mix: c.mix,
                    input_tokens: c.input_tokens,
                    output_tokens: c.output_tokens,
                })
                .collect(),
            requests: self.requests as u64,
            seed: self.seed,
            arrival: self.arrival.clone(),
            output_jitter: self.output_jitter,
            shared_prefix: self.shared_prefix,
        }
    }
}

/// One scheduled request of a simulated run.
pub type SimArrival = ScheduledRequest;

/// Builds the schedule: exact per-class counts, shuffled, then gaps from the arrival process
/// (the load generator's schedule for the same workload and rate).
pub fn build_arrivals(spec: &WorkloadSpec, rate: f64) -> Result<Vec<SimArrival>, ScheduleError> {
    build_schedule(&spec.schedule_spec(), rate, 1)
}

/// What happened to one request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SimOutcome {
    /// Arrival time.
    pub arrival: f64,
    /// Time of the first output token.
    pub first_token: f64,
    /// Time of the last output token.
    pub finish: f64,
    /// Largest gap between consecutive tokens.
    pub max_itl: f64,
    /// Output tokens generated.
    pub output_len: u32,
}

/// A finished run.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Per request, in schedule order.
    pub outcomes: Vec<SimOutcome>,
    /// Engine counters at the end.
    pub stats: EngineStats,
    /// `(time, waiting requests)` sampled at each arrival.
    pub queue_samples: Vec<(f64, f64)>,
}

/// Runs `arrivals` through one engine replica until every request has finished.
pub fn run(setup: &Setup, spec: &WorkloadSpec, arrivals: &[SimArrival]) -> RunResult {
    run_on(Engine::bulk(setup.clone()), spec, arrivals)
}

/// [`run`] on a given engine (one token at a time or in bulk: the same result).
pub(crate) fn run_on(
    mut engine: Engine,
    spec: &WorkloadSpec,
    arrivals: &[SimArrival],
) -> RunResult {
    let (prefix_caching, block_size) = (engine.setup().prefix_caching, engine.setup().block_size);
    let bulk = engine.decodes_in_bulk();
    let mut outcomes = vec![SimOutcome::default(); arrivals.len()];
    let mut by_slot: Vec<usize> = Vec::new();
    let mut last_token = vec![0.0; arrivals.len()];
    // In bulk, a request's largest gap is the longest step from its first token to its last.
    let mut first_step = vec![0u64; if bulk { arrivals.len() } else { 0 }];
    let mut longest = SuffixMax::default();
    let mut steps = 0u64;
    let mut queue_samples = Vec::with_capacity(arrivals.len());
    let mut next = 0;
    loop {
        while next < arrivals.len() && arrivals[next].at_s <= engine.now() {
            let a = &arrivals[next];
            queue_samples.push((a.at_s, engine.stats().waiting as f64));
            let block_hashes = match (a.prefix, spec.shared_prefix, prefix_caching) {
                (Some(p), Some(shared), true) => synthetic_block_hashes(
                    u64::from(p),
                    shared.tokens.min(a.input_tokens.saturating_sub(1)),
                    next as u64,
                    a.input_tokens,
                    block_size,
                ),
                _ => Vec::new(),
            };
            let id = engine.submit(NewRequest {
                input_len: a.input_tokens,
                output_len: a.output_tokens,
                block_hashes,
            });
            if by_slot.len() <= id.slot() {
                by_slot.resize(id.slot() + 1, 0);
            }
            by_slot[id.slot()] = next;
            outcomes[next].arrival = a.at_s;
            next += 1;
        }
        if engine.is_idle() {
            if next == arrivals.len() {
                break;
            }
            engine.advance_to(arrivals[next].at_s);
            continue;
        }
        let Some(step) = engine.step() else {
            unreachable!("an engine with work always steps");
        };
        steps += 1;
        if bulk {
            longest.push(steps, step.end - step.start);
        }
        let now = engine.now();
        for ev in engine.events() {
            let r = by_slot[ev.id.slot()];
            let o = &mut outcomes[r];
            if ev.generated == 1 {
                o.first_token = now;
                if bulk {
                    first_step[r] = steps;
                }
            } else if bulk {
                // Steps run back to back while a request decodes, so each gap between its
                // tokens is one step's duration.
                o.max_itl = o.max_itl.max(longest.since(first_step[r] + 1));
            } else {
                o.max_itl = o.max_itl.max(now - last_token[r]);
            }
            last_token[r] = now;
            if ev.finished {
                o.finish = now;
                o.output_len = ev.generated;
            }
        }
    }
    RunResult {
        outcomes,
        stats: engine.stats(),
        queue_samples,
    }
}

/// The longest of the steps from a given one to the latest: a stack of the steps no later
/// step outlasts, so pushing is amortised constant time and a query is a binary search.
#[derive(Debug, Default)]
struct SuffixMax {
    /// `(step, duration)`, steps rising and durations falling.
    stack: Vec<(u64, f64)>,
}

impl SuffixMax {
    fn push(&mut self, step: u64, duration: f64) {
        while self.stack.last().is_some_and(|&(_, d)| d <= duration) {
            self.stack.pop();
        }
        self.stack.push((step, duration));
    }

    /// The longest duration of the steps numbered `from` or later (0 when there are none).
    fn since(&self, from: u64) -> f64 {
        let i = self.stack.partition_point(|&(s, _)| s < from);
        self.stack.get(i).map_or(0.0, |&(_, d)| d)
    }
}

/// One row of a rate sweep (latencies in ms, as the seed's table).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RateRow {
    /// Offered arrival rate (requests per second).
    pub rate: f64,
    /// Median TTFT.
    pub ttft_p50_ms: f64,
    /// 99th-percentile TTFT.
    pub ttft_p99_ms: f64,
    /// Median TPOT.
    pub tpot_p50_ms: f64,
    /// 99th-percentile TPOT.
    pub tpot_p99_ms: f64,
    /// Output tokens per second over the run (first arrival to last token).
    pub output_tps: f64,
    /// Requests meeting their SLO per second.
    pub goodput_rps: f64,
    /// Fraction of requests meeting their SLO.
    pub slo_met: f64,
    /// Largest gap between two tokens of one request.
    pub itl_max_ms: f64,
    /// Requests preempted during the run.
    pub preemptions: u64,
    /// Prompt tokens served from the prefix cache / prompt tokens looked up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hit_rate: Option<f64>,
    /// Waiting-queue trend while arrivals lasted.
    pub queue_trend: QueueTrend,
    /// The per-class point report (when the workload has named classes from a manifest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<PointReport>,
}

/// Summarises a run: percentiles over every request (nearest-rank), SLO met with each
/// request judged by its own class's cutoffs, and, when `gate` is given, the per-class
/// point report of the analysis core.
pub fn summarize(
    rate: f64,
    spec: &WorkloadSpec,
    arrivals: &[SimArrival],
    run: &RunResult,
    gate: Option<&GateConfig>,
) -> RateRow {
    let n = run.outcomes.len();
    let mut ttft = Vec::with_capacity(n);
    let mut tpot = Vec::with_capacity(n);
    let (mut good, mut tokens, mut itl_max) = (0u64, 0u64, 0.0f64);
    let mut summary = gate.map(|g| PointSummary::new(g.clone()));
    let start = run
        .outcomes
        .iter()
        .map(|o| o.arrival)
        .fold(f64::INFINITY, f64::min);
    let end = run.outcomes.iter().map(|o| o.finish).fold(0.0, f64::max);
    for (a, o) in arrivals.iter().zip(&run.outcomes) {
        let class = &spec.classes[a.class];
        let t_ms = (o.first_token - o.arrival) * 1e3;
        let e2e_ms = (o.finish - o.arrival) * 1e3;
        let p_ms = tpot_ms(t_ms, e2e_ms, u64::from(o.output_len)).unwrap_or(0.0);
        good += u64::from(meets_slo(
            t_ms,
            p_ms,
            class.ttft_cutoff_ms,
            class.tpot_cutoff_ms,
        ));
        tokens += u64::from(o.output_len);
        itl_max = itl_max.max(o.max_itl);
        ttft.push(t_ms);
        tpot.push(p_ms);
        if let Some(s) = summary.as_mut() {
            s.record_success(
                a.class,
                &Success {
                    ttft_ms: t_ms,
                    tpot_ms: p_ms,
                    e2e_ms,
                    output_tokens: u64::from(o.output_len),
                    itl_ms: &[],
                },
            );
        }
    }
    let duration = (end - start).max(f64::MIN_POSITIVE);
    let ttft_p = nearest_rank_many(&mut ttft, &[0.5, 0.99]);
    let tpot_p = nearest_rank_many(&mut tpot, &[0.5, 0.99]);
    // The trend is judged while arrivals last, after the first 10% of the schedule.
    let last_arrival = arrivals.last().map_or(0.0, |a| a.at_s);
    let window: Vec<(f64, f64)> = run
        .queue_samples
        .iter()
        .copied()
        .filter(|s| s.0 >= 0.1 * last_arrival)
        .collect();
    let queue_trend = queue_slope(&window, 5.0).trend;
    let stats = &run.stats;
    RateRow {
        rate,
        ttft_p50_ms: ttft_p[0].unwrap_or(0.0),
        ttft_p99_ms: ttft_p[1].unwrap_or(0.0),
        tpot_p50_ms: tpot_p[0].unwrap_or(0.0),
        tpot_p99_ms: tpot_p[1].unwrap_or(0.0),
        output_tps: tokens as f64 / duration,
        goodput_rps: good as f64 / duration,
        slo_met: if n == 0 { 0.0 } else { good as f64 / n as f64 },
        itl_max_ms: itl_max * 1e3,
        preemptions: stats.preemptions_total,
        prefix_cache_hit_rate: (stats.prefix_cache_queries_total > 0).then(|| {
            stats.prefix_cache_hits_total as f64 / stats.prefix_cache_queries_total as f64
        }),
        queue_trend,
        // A window is positive and finite here, so finishing cannot fail.
        report: summary.and_then(|s| s.finish(duration, queue_trend).ok()),
    }
}

/// Simulates one rate and summarises it.
pub fn simulate_rate(
    setup: &Setup,
    spec: &WorkloadSpec,
    rate: f64,
    gate: Option<&GateConfig>,
) -> Result<RateRow, ScheduleError> {
    let arrivals = build_arrivals(spec, rate)?;
    let result = run(setup, spec, &arrivals);
    Ok(summarize(rate, spec, &arrivals, &result, gate))
}

/// Simulates several rates on all cores (each rate is independent and seeded, so the rows
/// are the same as one by one), in the order given.
pub fn simulate_rates(
    setup: &Setup,
    spec: &WorkloadSpec,
    rates: &[f64],
    gate: Option<&GateConfig>,
) -> Result<Vec<RateRow>, ScheduleError> {
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(rates.len());
    if workers <= 1 {
        return rates
            .iter()
            .map(|&r| simulate_rate(setup, spec, r, gate))
            .collect();
    }
    let next = AtomicUsize::new(0);
    let mut rows: Vec<Option<Result<RateRow, ScheduleError>>> = vec![None; rates.len()];
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&rate) = rates.get(i) else { break };
                        done.push((i, simulate_rate(setup, spec, rate, gate)));
                    }
                    done
                })
            })
            .collect();
        for h in handles {
            // A worker only panics if the simulation itself has a bug; surface it.
            for (i, row) in h.join().expect("simulation worker panicked") {
                rows[i] = Some(row);
            }
        }
    });
    rows.into_iter().flatten().collect()
}

/// Bisection for the highest rate in `[lo, hi]` at which `passes` holds, assuming it holds
/// below some rate and fails above it; returns the last passing midpoint (or `lo`).
pub fn find_max_rate(
    lo: f64,
    hi: f64,
    iterations: u32,
    mut passes: impl FnMut(f64) -> bool,
) -> f64 {
    let (mut lo, mut hi) = (lo, hi);
    for _ in 0..iterations {
        let mid = (lo + hi) / 2.0;
        if passes(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The gate config for a workload's classes under the given thresholds.
pub fn gate_for(classes: &[ClassShape], thresholds: &GateConfig) -> GateConfig {
    GateConfig {
        classes: classes
            .iter()
            .map(|c| ClassSlo {
                name: c.name.clone(),
                ttft_cutoff_ms: c.ttft_cutoff_ms,
                tpot_cutoff_ms: c.tpot_cutoff_ms,
            })
            .collect(),
        ..thresholds.clone()
    }
}
