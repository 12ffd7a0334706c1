//! The engine model for a fleet of replicas behind a round-robin router (the simulated
//! engine's default, and a Kubernetes Service's): open-loop points, the closed-loop rate as
//! a live saturation level measures it, and the capacity the per-class gate finds. A benchmark places its first rates with it.

use std::collections::HashMap;

use super::engine::{Engine, EngineStats, NewRequest, RequestId, synthetic_block_hashes};
use super::offline::{
    RateRow, RunResult, SimArrival, SimOutcome, WorkloadSpec, build_arrivals, find_max_rate, run,
    summarize,
};
use super::setup::Setup;
use crate::analysis::GateConfig;
use crate::workload::schedule::ScheduleError;

/// One open-loop point on `replicas` replicas: the schedule at `rate` dealt round-robin,
/// each replica's share run through its own engine, the outcomes judged together.
pub fn simulate_fleet_rate(
    setup: &Setup,
    spec: &WorkloadSpec,
    rate: f64,
    replicas: u32,
    gate: Option<&GateConfig>,
) -> Result<RateRow, ScheduleError> {
    let arrivals = build_arrivals(spec, rate)?;
    let n = replicas.max(1) as usize;
    let mut outcomes = vec![SimOutcome::default(); arrivals.len()];
    let mut queue_samples = Vec::new();
    let mut stats = EngineStats::default();
    for r in 0..n {
        let mine: Vec<SimArrival> = arrivals.iter().skip(r).step_by(n).cloned().collect();
        let result = run(setup, spec, &mine);
        for (j, o) in result.outcomes.into_iter().enumerate() {
            outcomes[r + j * n] = o;
        }
        queue_samples.extend(result.queue_samples);
        let s = result.stats;
        stats.preemptions_total += s.preemptions_total;
        stats.prefix_cache_queries_total += s.prefix_cache_queries_total;
        stats.prefix_cache_hits_total += s.prefix_cache_hits_total;
        stats.request_success_total += s.request_success_total;
        stats.generation_tokens_total += s.generation_tokens_total;
    }
    queue_samples.sort_by(|a, b| a.0.total_cmp(&b.0));
    let fleet = RunResult {
        outcomes,
        stats,
        queue_samples,
    };
    Ok(summarize(rate, spec, &arrivals, &fleet, gate))
}

/// The highest rate in `[lo, hi]` (12 bisection steps) at which the fleet passes the
/// per-class gate, as `goodput simulate --find-max-rate` bisects for one replica.
pub fn fleet_capacity(
    setup: &Setup,
    spec: &WorkloadSpec,
    replicas: u32,
    gate: &GateConfig,
    (lo, hi): (f64, f64),
) -> Result<f64, ScheduleError> {
    let mut failure = None;
    let capacity = find_max_rate(lo, hi, 12, |rate| {
        match simulate_fleet_rate(setup, spec, rate, replicas, Some(gate)) {
            Ok(row) => row.report.is_some_and(|r| r.capacity_gate_pass),
            Err(e) => {
                failure = Some(e);
                false
            }
        }
    });
    match failure {
        Some(e) => Err(e),
        None => Ok(capacity),
    }
}

/// Closed-loop rate of `replicas` replicas with `concurrency` requests in flight in all
/// (dealt evenly), as a live saturation level reports what the engine sustained: each
/// finished request is replaced at once by the next of the workload's schedule until
/// `warmup_s + duration_s` of model time, then the last ones drain; the rate is the
/// concurrency ÷ the mean end-to-end latency of the requests sent after the warmup (Little's
/// law). Measured the same way on both sides, the drain's lighter load and the window's edges
/// bias the model and the live level alike.
pub fn fleet_closed_loop_rps(
    setup: &Setup,
    spec: &WorkloadSpec,
    concurrency: u32,
    replicas: u32,
    warmup_s: f64,
    duration_s: f64,
) -> Result<f64, ScheduleError> {
    let shapes = build_arrivals(spec, 1.0)?;
    let n = replicas.max(1);
    let (mut count, mut e2e_sum) = (0u64, 0.0);
    for r in 0..n {
        let mine = concurrency / n + u32::from(r < concurrency % n);
        let (c, sum) = closed_loop_e2e(setup, spec, &shapes, mine, warmup_s, duration_s);
        count += c;
        e2e_sum += sum;
    }
    let mean_e2e_s = e2e_sum / count.max(1) as f64;
    Ok(crate::analysis::sustained_rps(f64::from(concurrency), mean_e2e_s).unwrap_or(0.0))
}

/// One replica's closed loop (see [`fleet_closed_loop_rps`]): the count and the summed
/// end-to-end latency (s) of the requests sent after the warmup.
fn closed_loop_e2e(
    setup: &Setup,
    spec: &WorkloadSpec,
    shapes: &[SimArrival],
    concurrency: u32,
    warmup_s: f64,
    duration_s: f64,
) -> (u64, f64) {
    if concurrency == 0 || shapes.is_empty() || duration_s <= 0.0 {
        return (0, 0.0);
    }
    let mut engine = Engine::bulk(setup.clone());
    let mut next = 0usize;
    let mut sent_at: HashMap<RequestId, f64> = HashMap::new();
    let mut submit = |engine: &mut Engine, sent_at: &mut HashMap<RequestId, f64>| {
        let a = &shapes[next % shapes.len()];
        let block_hashes = match (a.prefix, spec.shared_prefix, setup.prefix_caching) {
            (Some(p), Some(shared), true) => synthetic_block_hashes(
                u64::from(p),
                shared.tokens.min(a.input_tokens.saturating_sub(1)),
                next as u64,
                a.input_tokens,
                setup.block_size,
            ),
            _ => Vec::new(),
        };
        let id = engine.submit(NewRequest {
            input_len: a.input_tokens,
            output_len: a.output_tokens,
            block_hashes,
        });
        sent_at.insert(id, engine.now());
        next += 1;
    };
    for _ in 0..concurrency {
        submit(&mut engine, &mut sent_at);
    }
    let end = warmup_s + duration_s;
    let (mut count, mut e2e_sum) = (0u64, 0.0);
    while !sent_at.is_empty() {
        if engine.step().is_none() {
            break;
        }
        let now = engine.now();
        let finished: Vec<_> = engine
            .events()
            .iter()
            .filter(|e| e.finished)
            .map(|e| e.id)
            .collect();
        for id in finished {
            if let Some(sent) = sent_at.remove(&id)
                && sent >= warmup_s
            {
                count += 1;
                e2e_sum += now - sent;
            }
            if now < end {
                submit(&mut engine, &mut sent_at);
            }
        }
    }
    (count, e2e_sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offline::simulate_rate;
    use crate::preset;

    fn workload() -> WorkloadSpec {
        WorkloadSpec::single_shape(1024, 128, 500.0, 40.0, 2000)
    }

    #[test]
    fn one_replica_is_the_single_engine_model() {
        let setup = preset("qwen2.5-7b-h100").expect("preset");
        let fleet = simulate_fleet_rate(&setup, &workload(), 6.0, 1, None).expect("runs");
        let single = simulate_rate(&setup, &workload(), 6.0, None).expect("runs");
        assert_eq!(fleet, single);
    }

    #[test]
    fn two_replicas_hold_at_least_twice_one_and_closed_loop_scales_with_them() {
        let setup = preset("qwen2.5-7b-h100").expect("preset");
        let w = workload();
        let gate = crate::offline::gate_for(&w.classes, &GateConfig::default());
        let one = fleet_capacity(&setup, &w, 1, &gate, (0.5, 60.0)).expect("bisects");
        let two = fleet_capacity(&setup, &w, 2, &gate, (0.5, 120.0)).expect("bisects");
        // Round-robin smooths each replica's arrivals: never worse than two lone replicas,
        // and not beyond the pooling of one queue (bounded loosely at 2.5×).
        assert!(
            two >= 2.0 * one * 0.97 && two <= 2.5 * one,
            "one {one}, two {two}"
        );
        let c1 = fleet_closed_loop_rps(&setup, &w, 16, 1, 10.0, 30.0).expect("runs");
        let c2 = fleet_closed_loop_rps(&setup, &w, 32, 2, 10.0, 30.0).expect("runs");
        assert!(c1 > 0.0 && (c2 / c1 - 2.0).abs() < 0.05, "{c1} vs {c2}");
        // More in flight never completes fewer per second at these levels.
        let c4 = fleet_closed_loop_rps(&setup, &w, 4, 1, 10.0, 30.0).expect("runs");
        assert!(c4 < c1, "{c4} vs {c1}");
    }
}
