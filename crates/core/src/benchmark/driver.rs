//! The benchmark driver: one pure, resumable function from the sweep plan and the points
//! recorded so far to the next point to run, shared by both shells.
//!
//! `goodput bench` executes each step in-process; the operator executes it as a Job and
//! records the finished point in the benchmark's status. Because the driver keeps no state
//! of its own (every decision is replayed from the records), a shell that stops after any
//! point and starts again from what it recorded runs exactly the points that were left, in
//! the same order, and reaches the same capacity.
//!
//! Per cache mode, in the order the spec lists them:
//! 1. the saturation levels (closed loop), when asked for or when no rates are given; their
//!    knee proposes the rate sweep's range or, with an engine model of the target,
//!    calibrates the model, whose predicted capacity places the first two rates;
//! 2. the open-loop rates, every repeat of each;
//! 3. one more rate at a time (at most [`sweep::MAX_EXTENSIONS`], or
//!    [`sweep::PLACED_MAX_EXTENSIONS`] when placed) while the sweep does not bracket the
//!    capacity (a failing rate above a passing one);
//! 4. refinements, each bisecting the bracket, until it is within the resolution or
//!    `maxRefinements` are spent.

use super::sweep;
use crate::analysis::{GateConfig, PointReport};
use crate::planning::PeakForecast;
use crate::planning::{
    CapacitySelection, PlanError, PlanInput, ReplicaPlan, SweepPoint, plan_replicas,
    select_capacity,
};
use crate::workload::CacheMode;
use crate::workload::hashing::mix64;

/// What the driver needs from a benchmark spec: the experiments, in resolved form.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepPlan {
    /// Cache modes, each swept on its own, in this order.
    pub cache_modes: Vec<CacheMode>,
    /// The closed-loop levels, if a saturation sweep runs.
    pub saturation: Option<SaturationPlan>,
    /// Where the open-loop rates come from.
    pub rates: RateSource,
    /// Whether the open-loop sweep runs at all (a spec with only `saturation` stops at the
    /// knee).
    pub run_rates: bool,
    /// Runs of every rate.
    pub repeats: u32,
    /// The manifest's schedule seed; repeats derive theirs from it.
    pub seed: u64,
    /// Refinement stops once the bracket is within this fraction of its passing rate.
    pub resolution: f64,
    /// Most refinement rates per cache mode.
    pub max_refinements: u32,
    /// The engine model's expectations per cache mode; with a knee, they place the first
    /// rates instead of the fixed-fraction grid (empty: the grid).
    pub model: Vec<ModelPrior>,
}

/// The engine model's expectations for one cache mode (`goodput_api::placement` computes
/// them before the sweep).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelPrior {
    /// The cache mode.
    pub cache: CacheMode,
    /// The model's capacity of the deployment under test (requests per second): the
    /// highest rate its per-class gate passes, replicas behind a round-robin router.
    pub capacity_rps: f64,
    /// What the model's engine sustains at each saturation level, measured as a live level
    /// measures it: `(concurrency, RPS)`.
    pub saturation_rps: Vec<(u32, f64)>,
}

/// The closed-loop experiment.
#[derive(Clone, Debug, PartialEq)]
pub struct SaturationPlan {
    /// Requests in flight, per level, in the order run.
    pub concurrency: Vec<u32>,
    /// Measured seconds per level (model time; the warmup comes on top).
    pub duration_s: f64,
}

/// Where the open-loop rates come from.
#[derive(Clone, Debug, PartialEq)]
pub enum RateSource {
    /// Given in the spec.
    Fixed(Vec<f64>),
    /// `points` rates from `low` to `high` × the knee's throughput.
    Knee {
        /// Lowest rate as a fraction of the knee's throughput.
        low: f64,
        /// Highest rate as a fraction of the knee's throughput.
        high: f64,
        /// Rates in the derived sweep.
        points: u32,
    },
}

/// One test point: which experiment, in which cache mode, at which load.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum PointKey {
    /// A closed-loop level.
    Saturation {
        /// Cache mode.
        cache: CacheMode,
        /// Requests in flight.
        concurrency: u32,
    },
    /// An open-loop rate, one repeat.
    Rate {
        /// Cache mode.
        cache: CacheMode,
        /// Offered arrival rate (requests per second, real time).
        rate: f64,
        /// Repeat index (0-based).
        repeat: u32,
    },
}

impl PointKey {
    /// The point's cache mode.
    pub fn cache(&self) -> CacheMode {
        match self {
            PointKey::Saturation { cache, .. } | PointKey::Rate { cache, .. } => *cache,
        }
    }

    /// The schedule seed: the manifest's for repeat 0 and for saturation levels, a derived
    /// one for each further repeat.
    pub fn seed(&self, base: u64) -> u64 {
        match self {
            PointKey::Rate { repeat, .. } if *repeat > 0 => mix64(base ^ u64::from(*repeat)),
            _ => base,
        }
    }

    /// Whether two keys name the same point. Rates compare with a relative tolerance, so a
    /// rate that went through JSON (the operator's status) still finds its point.
    pub fn same(&self, other: &PointKey) -> bool {
        match (self, other) {
            (
                PointKey::Saturation {
                    cache: a,
                    concurrency: c,
                },
                PointKey::Saturation {
                    cache: b,
                    concurrency: d,
                },
            ) => a == b && c == d,
            (
                PointKey::Rate {
                    cache: a,
                    rate: r,
                    repeat: i,
                },
                PointKey::Rate {
                    cache: b,
                    rate: s,
                    repeat: j,
                },
            ) => a == b && i == j && Self::same_rate(*r, *s),
            _ => false,
        }
    }

    /// Whether two rates are one: equal up to a relative 1e-9 (what a trip through JSON
    /// can change).
    pub fn same_rate(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
    }

    /// A short label: `cold saturation c=16`, `warm rate 18 r2`.
    pub fn label(&self) -> String {
        match self {
            PointKey::Saturation { cache, concurrency } => {
                format!("{} saturation c={concurrency}", cache.as_str())
            }
            PointKey::Rate {
                cache,
                rate,
                repeat,
            } => {
                let repeat = if *repeat > 0 {
                    format!(" r{}", repeat + 1)
                } else {
                    String::new()
                };
                format!(
                    "{} rate {}{repeat}",
                    cache.as_str(),
                    crate::analysis::rate_label(*rate)
                )
            }
        }
    }
}

/// What the driver needs to know about a finished point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Outcome {
    /// A closed-loop level.
    Saturation {
        /// Completed requests per second.
        throughput_rps: f64,
        /// What the engine sustained, by Little's law: the concurrency ÷ the mean
        /// end-to-end latency (the client's own turnaround between requests left out);
        /// `None` when unknown. The model is calibrated against this.
        engine_rps: Option<f64>,
        /// Whether every class met its TTFT and TPOT cutoffs at the required attainment
        /// ([`slos_met`]).
        slos_met: bool,
    },
    /// An open-loop point.
    Rate(RateOutcome),
}

/// What an open-loop point says about the target ([`rate_outcome`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateOutcome {
    /// Evidence, and the gate passed it.
    Passed,
    /// Evidence, and the gate failed it.
    Failed,
    /// The load generator could not keep its schedule: the point says nothing about the
    /// target, so the sweep never moves on it (no bracket rests on it, no lower rate is
    /// tried because of it, no higher rate is tried at all).
    ClientBehind,
    /// Not evidence for another reason (engine pages unanswered, the run stopped, the
    /// Job failed): left out of the bracket like a point never run.
    NotEvidence,
}

impl RateOutcome {
    /// Several repeats of one rate as one: a valid failure decides; else a client that fell
    /// behind in any repeat; else any other invalid repeat; else passed.
    fn combine(self, other: RateOutcome) -> RateOutcome {
        use RateOutcome::*;
        match (self, other) {
            (Failed, _) | (_, Failed) => Failed,
            (ClientBehind, _) | (_, ClientBehind) => ClientBehind,
            (NotEvidence, _) | (_, NotEvidence) => NotEvidence,
            (Passed, Passed) => Passed,
        }
    }
}

/// A finished point as the driver sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Recorded {
    /// Which point.
    pub key: PointKey,
    /// What it showed.
    pub outcome: Outcome,
}

/// Whether a closed-loop level met every class's SLOs (the knee's test): every class at
/// the required attainment and the error rate within the gate's limit (attainment counts
/// only the requests that succeeded, so a level that lost a third of its requests would
/// otherwise look healthy). Not a gate: a closed loop self-throttles, so a level is a
/// candidate, never a capacity.
pub fn slos_met(report: &PointReport, gate: &GateConfig) -> bool {
    !report.classes.is_empty()
        && report.error_rate.is_some_and(|e| e <= gate.error_rate_max)
        && report
            .classes
            .values()
            .all(|c| c.attainment.is_some_and(|a| a >= gate.attainment_min))
}

/// What an open-loop point counts as: not evidence when invalid (`client_behind` when the
/// load generator fell behind its schedule), else what the planning core's assessment
/// decided.
pub fn rate_outcome(
    valid: bool,
    client_behind: bool,
    assessment: &crate::planning::PointAssessment,
) -> RateOutcome {
    match (valid, client_behind) {
        (_, true) => RateOutcome::ClientBehind,
        (false, false) => RateOutcome::NotEvidence,
        (true, false) if assessment.verdict == crate::analysis::Verdict::Pass => {
            RateOutcome::Passed
        }
        (true, false) => RateOutcome::Failed,
    }
}

/// What to do next.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    /// Run this point and record it.
    Run(PointKey),
    /// Every point has run.
    Done,
}

/// The next point to run, or [`Step::Done`]. Records may come in any order and may hold
/// points the plan no longer asks for (they are ignored).
pub fn next_step(plan: &SweepPlan, recorded: &[Recorded]) -> Step {
    plan.cache_modes
        .iter()
        .find_map(|&cache| decide_mode(plan, cache, recorded).pending)
        .map_or(Step::Done, Step::Run)
}

/// What the records decide about one cache mode so far.
#[derive(Clone, Debug, PartialEq)]
pub struct ModeDecision {
    /// The knee's concurrency, once every saturation level has run (`None` when none met
    /// the SLOs or no saturation sweep runs).
    pub knee: Option<u32>,
    /// Rates the knee proposed (empty with fixed rates or before the saturation finished).
    pub proposed_rates: Vec<f64>,
    /// The open-loop rates run or to run, extensions and refinements included, in the
    /// order run.
    pub rates: Vec<f64>,
    /// The rates among them that refine a bracket.
    pub refinements: Vec<f64>,
    /// The highest rate that passed every repeat and the lowest failing rate above it,
    /// once the sweep has both.
    pub bracket: Option<sweep::Bracket>,
    /// The model's prediction that placed the first rates, if one did.
    pub prediction: Option<Prediction>,
    /// The fixed-fraction grid the prediction replaced: the rates the knee's throughput
    /// would have proposed (empty without a prediction).
    pub replaced_grid: Vec<f64>,
    /// The lowest rate whose load the client could not keep on schedule, once one could
    /// not: no rate at or above it runs again.
    pub client_limit: Option<ClientLimit>,
    /// The first point still to run; `None` when the mode is finished.
    pub pending: Option<PointKey>,
    /// What a reviewer should know about how the sweep went.
    pub warnings: Vec<String>,
}

/// The load generator could not send `rate`'s schedule on time: what the sweep could not
/// measure, and why the mode stopped where it did.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClientLimit {
    /// The lowest rate whose point the client fell behind on.
    pub rate: f64,
    /// No valid point lies below it: the load generator is starved, and the mode has no
    /// evidence about the target at all (not "no capacity": nothing was measured).
    pub starved: bool,
}

impl ClientLimit {
    /// What a reviewer reads: the limit, what it means and the remedy.
    pub fn message(&self, mode: &str) -> String {
        if self.starved {
            format!(
                "{mode}: the load generator is starved: it fell behind its schedule at {} RPS, \
                the lowest rate tried, so no point measured the target; give the client \
                its own CPU (pin it apart from the engine), more shards \
                (spec.loadgen.shards) or a lower time scale",
                crate::analysis::rate_label(self.rate)
            )
        } else {
            format!(
                "{mode}: the load generator fell behind its schedule at {} RPS: no rate at \
                or above it was tried again, and the capacity rests on the points below; \
                more client CPU or shards (spec.loadgen.shards) would measure higher",
                crate::analysis::rate_label(self.rate)
            )
        }
    }
}

/// Replays one cache mode's decisions from the records.
pub fn decide_mode(plan: &SweepPlan, cache: CacheMode, recorded: &[Recorded]) -> ModeDecision {
    let mut decision = ModeDecision {
        knee: None,
        proposed_rates: Vec::new(),
        rates: Vec::new(),
        refinements: Vec::new(),
        bracket: None,
        prediction: None,
        replaced_grid: Vec::new(),
        client_limit: None,
        pending: None,
        warnings: Vec::new(),
    };
    let find = |key: PointKey| {
        recorded
            .iter()
            .find(|r| r.key.same(&key))
            .map(|r| r.outcome)
    };
    let mode = cache.as_str();

    if let Some(sat) = &plan.saturation {
        let mut levels = Vec::new();
        for &concurrency in &sat.concurrency {
            let key = PointKey::Saturation { cache, concurrency };
            match find(key) {
                Some(Outcome::Saturation {
                    throughput_rps,
                    slos_met,
                    engine_rps,
                }) => levels.push((
                    concurrency,
                    throughput_rps,
                    slos_met,
                    engine_rps.unwrap_or(throughput_rps),
                )),
                _ => {
                    decision.pending = Some(key);
                    return decision;
                }
            }
        }
        // The levels that met the SLOs, by concurrency: the knee is the highest.
        let mut met: Vec<_> = levels
            .iter()
            .filter(|l| l.2 && l.1 > 0.0)
            .copied()
            .collect();
        met.sort_by_key(|l| l.0);
        let knee = met.last().copied();
        decision.knee = knee.map(|k| k.0);
        let prior = plan.model.iter().find(|p| p.cache == cache);
        decision.prediction = knee.zip(prior).and_then(|(k, prior)| {
            // The knee and the highest level below it that met the SLOs: the two closest to
            // where the engine runs at capacity, pooled against one level's noise.
            let below = met.iter().rev().nth(1).copied();
            let model_at = |c: u32| prior.saturation_rps.iter().find(|l| l.0 == c).map(|l| l.1);
            let below = below.and_then(|b| Some((b, model_at(b.0)?)));
            let (mut engine, mut model) = (k.3, model_at(k.0)?);
            if let Some((b, m)) = below {
                engine += b.3;
                model += m;
            }
            (model > 0.0).then(|| {
                let speed = engine / model;
                Prediction {
                    model_capacity_rps: prior.capacity_rps,
                    knee_concurrency: k.0,
                    below_knee_concurrency: below.map(|b| b.0.0),
                    speed,
                    predicted_rps: prior.capacity_rps * speed,
                }
            })
        });
        if let (RateSource::Knee { low, high, points }, Some(p), Some(k)) =
            (&plan.rates, &decision.prediction, knee)
        {
            decision.proposed_rates = sweep::placed_rates(p.predicted_rps, plan.resolution);
            decision.replaced_grid = sweep::proposed_rates(k.1, *low, *high, *points);
        } else if let RateSource::Knee { low, high, points } = plan.rates {
            decision.proposed_rates = match knee {
                Some(k) => sweep::proposed_rates(k.1, low, high, points),
                None => {
                    // Even the lowest level missed the SLOs: sweep below its throughput.
                    let lowest = levels.first().map_or(1.0, |l| l.1.max(0.01));
                    decision.warnings.push(format!(
                        "{mode}: no saturation level met every class's SLOs; sweeping below \
                         the lowest level's throughput ({lowest:.2} RPS)"
                    ));
                    sweep::proposed_rates(lowest, 0.25, 1.0, points)
                }
            };
        }
        if knee.is_some() && knee.map(|k| k.0) == levels.last().map(|l| l.0) {
            decision.warnings.push(format!(
                "{mode}: every saturation level met the SLOs; the knee may lie above the \
                 highest concurrency tried"
            ));
        }
    }
    if !plan.run_rates {
        return decision;
    }

    decision.rates = match &plan.rates {
        RateSource::Fixed(rates) => rates.clone(),
        RateSource::Knee { .. } => decision.proposed_rates.clone(),
    };
    let mut extensions = 0;
    let placed = matches!(plan.rates, RateSource::Knee { .. }) && decision.prediction.is_some();
    let max_extensions = if placed {
        sweep::PLACED_MAX_EXTENSIONS
    } else {
        sweep::MAX_EXTENSIONS
    };
    loop {
        // The rates that are evidence, with whether they passed; the client's limit so far.
        let mut passed = Vec::with_capacity(decision.rates.len());
        let mut behind: Option<f64> = None;
        for &rate in &decision.rates {
            if behind.is_some_and(|b| rate >= b) {
                // The client could not drive a lower rate: this one is not tried.
                continue;
            }
            let mut outcome = RateOutcome::Passed;
            for repeat in 0..plan.repeats {
                // A repeat that is not evidence for a reason other than the client (a
                // harness that ran late, pages unanswered, a Job that failed) runs once
                // more, as repeat `repeats + repeat`, whose outcome then stands for it.
                let tries = [repeat, plan.repeats + repeat].map(|repeat| PointKey::Rate {
                    cache,
                    rate,
                    repeat,
                });
                let mut last = None;
                for key in tries {
                    match find(key) {
                        Some(Outcome::Rate(o)) => {
                            last = Some(o);
                            if o != RateOutcome::NotEvidence {
                                break;
                            }
                        }
                        _ => {
                            decision.pending = Some(key);
                            return decision;
                        }
                    }
                }
                if let Some(o) = last {
                    outcome = outcome.combine(o);
                }
            }
            match outcome {
                RateOutcome::Passed => passed.push((rate, true)),
                RateOutcome::Failed => passed.push((rate, false)),
                RateOutcome::ClientBehind => behind = Some(behind.map_or(rate, |b| b.min(rate))),
                RateOutcome::NotEvidence => {}
            }
        }
        if let Some(rate) = behind {
            let limit = ClientLimit {
                rate,
                starved: !passed.iter().any(|p| p.0 < rate),
            };
            decision.client_limit = Some(limit);
            if limit.starved {
                // Nothing below it was measured: a lower rate would say no more about the
                // target than this one did about the client.
                decision.warnings.push(limit.message(mode));
                return decision;
            }
            // Only what lies below the limit is evidence the sweep can still use.
            passed.retain(|p| p.0 < rate);
        }
        let next = match sweep::bracket(&passed) {
            Some(bracket) => {
                decision.bracket = Some(bracket);
                if decision.refinements.len() >= plan.max_refinements as usize {
                    if sweep::refinement(bracket, plan.resolution).is_some() {
                        decision.warnings.push(format!(
                            "{mode}: the bracket [{}, {}] RPS is {:.1}% wide after {} \
                             refinement(s), wider than the resolution of {:.1}%; raise \
                             experiments.rateSweep.maxRefinements",
                            crate::analysis::rate_label(bracket.pass),
                            crate::analysis::rate_label(bracket.fail),
                            bracket.width() * 100.0,
                            decision.refinements.len(),
                            plan.resolution * 100.0
                        ));
                    }
                    None
                } else {
                    sweep::refinement(bracket, plan.resolution)
                        .filter(|&r| !decision.rates.iter().any(|&x| PointKey::same_rate(x, r)))
                        .inspect(|&r| decision.refinements.push(r))
                }
            }
            None => match if placed {
                sweep::placed_extension(&passed, extensions, plan.resolution)
            } else {
                sweep::extension(&passed)
            } {
                Some(next)
                    if extensions < max_extensions
                        && !decision.rates.iter().any(|&r| PointKey::same_rate(r, next)) =>
                {
                    extensions += 1;
                    Some(next)
                }
                Some(_) => {
                    decision.warnings.push(format!(
                        "{mode}: the sweep does not bracket the capacity after {extensions} \
                         extension(s); widen experiments.rateSweep"
                    ));
                    None
                }
                None => None,
            },
        };
        match (next, decision.client_limit) {
            (Some(rate), Some(limit)) if rate >= limit.rate => {
                decision.warnings.push(limit.message(mode));
                return decision;
            }
            (Some(rate), _) => decision.rates.push(rate),
            (None, Some(limit)) => {
                decision.warnings.push(limit.message(mode));
                return decision;
            }
            (None, None) => return decision,
        }
    }
}

/// The model's capacity, calibrated to the measured knee.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Prediction {
    /// The uncalibrated model's capacity (requests per second).
    pub model_capacity_rps: f64,
    /// The knee's concurrency, where the calibration was measured.
    pub knee_concurrency: u32,
    /// The highest level below the knee that met the SLOs, measured with it; `None` when
    /// the knee is the lowest.
    #[serde(default)]
    pub below_knee_concurrency: Option<u32>,
    /// What the engine sustained at those levels (each the concurrency ÷ the mean
    /// end-to-end latency), summed, ÷ the model's same figures summed.
    pub speed: f64,
    /// The capacity predicted: the model's × the speed.
    pub predicted_rps: f64,
}

/// What one cache mode's evidence concludes: the planning core's selection, capacity,
/// capacity per replica and, with a peak, the replica plan.
#[derive(Clone, Debug, PartialEq)]
pub struct ModeConclusion {
    /// Verdicts per point and the capacity chosen.
    pub selection: CapacitySelection,
    /// Highest offered rate passing in every repeat; `None` when no rate passes.
    pub capacity_rps: Option<f64>,
    /// Capacity divided by the replicas under test.
    pub capacity_per_replica_rps: Option<f64>,
    /// Replicas for the peak at this capacity.
    pub plan: Option<ReplicaPlan>,
}

/// The deployment the points ran against, as the plan needs it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TestedDeployment {
    /// Replicas serving during the benchmark.
    pub replicas: u32,
    /// GPUs per replica.
    pub gpus_per_replica: u32,
}

/// Concludes one cache mode from its open-loop points `(offered rate, valid, report)`:
/// points that are not evidence are left out, the planning core selects the capacity, and
/// a peak forecast gets its replica plan (with `default_utilization` unless the peak sets
/// its own).
pub fn conclude_mode(
    points: &[(f64, bool, &PointReport)],
    gate: &GateConfig,
    tested: TestedDeployment,
    peak: Option<&PeakForecast>,
    default_utilization: f64,
) -> Result<ModeConclusion, PlanError> {
    let evidence: Vec<SweepPoint> = points
        .iter()
        .filter(|p| p.1)
        .map(|p| SweepPoint {
            offered_rps: p.0,
            report: p.2.clone(),
        })
        .collect();
    let selection = select_capacity(&evidence, gate);
    let capacity_rps = selection.capacity_rps;
    let plan = match (peak, capacity_rps) {
        (Some(peak), Some(capacity)) => Some(plan_replicas(PlanInput {
            peak_rps: peak.rps,
            capacity_rps: capacity,
            replicas_tested: tested.replicas,
            gpus_per_replica: tested.gpus_per_replica,
            target_utilization: peak.target_utilization.unwrap_or(default_utilization),
        })?),
        _ => None,
    };
    Ok(ModeConclusion {
        selection,
        capacity_rps,
        capacity_per_replica_rps: capacity_rps.map(|c| c / f64::from(tested.replicas.max(1))),
        plan,
    })
}

/// The cache mode a replica plan uses: the peak's choice, else the lowest capacity among
/// the modes that found one (the conservative plan).
pub fn plan_cache_mode(
    peak: Option<&PeakForecast>,
    capacities: &[(CacheMode, Option<f64>)],
) -> Option<CacheMode> {
    peak.and_then(|p| p.cache_mode).or_else(|| {
        capacities
            .iter()
            .filter_map(|(mode, c)| c.map(|c| (*mode, c)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(mode, _)| mode)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A target whose capacity is `capacity` RPS: a rate passes at or below it, and a
    /// closed loop at concurrency `c` completes `min(c × per_slot, ceiling)` RPS with its
    /// SLOs met while below `ceiling`.
    #[derive(Clone, Copy, Debug)]
    struct Oracle {
        capacity: f64,
        per_slot: f64,
        ceiling: f64,
        /// Rates at or above this the client cannot drive on schedule.
        client_limit: f64,
    }

    impl Oracle {
        fn outcome(&self, key: PointKey) -> Outcome {
            match key {
                PointKey::Saturation { concurrency, .. } => {
                    let offered = f64::from(concurrency) * self.per_slot;
                    Outcome::Saturation {
                        throughput_rps: offered.min(self.ceiling),
                        slos_met: offered < self.ceiling,
                        engine_rps: None,
                    }
                }
                PointKey::Rate { rate, .. } if rate >= self.client_limit => {
                    Outcome::Rate(RateOutcome::ClientBehind)
                }
                PointKey::Rate { rate, .. } if rate <= self.capacity => {
                    Outcome::Rate(RateOutcome::Passed)
                }
                PointKey::Rate { .. } => Outcome::Rate(RateOutcome::Failed),
            }
        }
    }

    /// Runs the driver to the end from `recorded`, returning every point it ran.
    fn run(plan: &SweepPlan, oracle: Oracle, mut recorded: Vec<Recorded>) -> Vec<Recorded> {
        let mut ran = Vec::new();
        for _ in 0..1000 {
            match next_step(plan, &recorded) {
                Step::Run(key) => {
                    let r = Recorded {
                        key,
                        outcome: oracle.outcome(key),
                    };
                    recorded.push(r);
                    ran.push(r);
                }
                Step::Done => return ran,
            }
        }
        panic!("the driver did not finish in 1000 steps");
    }

    fn plan(rates: RateSource, repeats: u32, modes: Vec<CacheMode>) -> SweepPlan {
        SweepPlan {
            cache_modes: modes,
            saturation: Some(SaturationPlan {
                concurrency: vec![4, 8, 16, 32],
                duration_s: 60.0,
            }),
            rates,
            run_rates: true,
            repeats,
            seed: 7,
            resolution: 0.0,
            max_refinements: 0,
            model: Vec::new(),
        }
    }

    fn knee_plan() -> SweepPlan {
        plan(
            RateSource::Knee {
                low: 0.6,
                high: 1.2,
                points: 5,
            },
            1,
            vec![CacheMode::Cold],
        )
    }

    #[test]
    fn saturation_then_rates_around_the_knee_then_an_extension() {
        // Knee at c=16 (12 RPS); proposed 7.2..14.4; capacity 20 RPS lies above the
        // sweep, so the driver extends it upwards until a rate fails.
        let oracle = Oracle {
            capacity: 20.0,
            per_slot: 0.75,
            ceiling: 15.0,
            client_limit: f64::INFINITY,
        };
        let ran = run(&knee_plan(), oracle, Vec::new());
        let labels: Vec<String> = ran.iter().map(|r| r.key.label()).collect();
        assert_eq!(
            labels,
            [
                "cold saturation c=4",
                "cold saturation c=8",
                "cold saturation c=16",
                "cold saturation c=32",
                "cold rate 7.2",
                "cold rate 9",
                "cold rate 10.8",
                "cold rate 12.6",
                "cold rate 14.4",
                "cold rate 16.2",
                "cold rate 18",
                "cold rate 19.8",
            ]
        );
        let d = decide_mode(&knee_plan(), CacheMode::Cold, &ran);
        assert_eq!(d.knee, Some(16));
        assert_eq!(d.pending, None);
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
        assert!(d.warnings[0].contains("does not bracket"));
    }

    #[test]
    fn a_bracketed_sweep_needs_no_extension_and_repeats_every_rate() {
        let plan = plan(
            RateSource::Fixed(vec![5.0, 10.0, 15.0]),
            2,
            vec![CacheMode::Cold, CacheMode::Warm],
        );
        let oracle = Oracle {
            capacity: 11.0,
            per_slot: 1.0,
            ceiling: 100.0,
            client_limit: f64::INFINITY,
        };
        let ran = run(&plan, oracle, Vec::new());
        // Per mode: 4 levels, 3 rates × 2 repeats.
        assert_eq!(ran.len(), 2 * (4 + 6));
        assert!(ran[..10].iter().all(|r| r.key.cache() == CacheMode::Cold));
        assert_eq!(ran[5].key.label(), "cold rate 5 r2");
        assert_eq!(
            ran[5].key.seed(plan.seed),
            mix64(plan.seed ^ 1),
            "a repeat derives its seed"
        );
        assert_eq!(ran[4].key.seed(plan.seed), plan.seed);
    }

    #[test]
    fn every_rate_failing_extends_downwards() {
        let plan = plan(RateSource::Fixed(vec![8.0, 10.0]), 1, vec![CacheMode::Cold]);
        let oracle = Oracle {
            capacity: 3.0,
            per_slot: 1.0,
            ceiling: 100.0,
            client_limit: f64::INFINITY,
        };
        let ran = run(&plan, oracle, Vec::new());
        let rates: Vec<f64> = ran
            .iter()
            .filter_map(|r| match r.key {
                PointKey::Rate { rate, .. } => Some(rate),
                _ => None,
            })
            .collect();
        assert_eq!(rates, [8.0, 10.0, 4.0, 2.0]);
    }

    #[test]
    fn refinement_bisects_until_the_bracket_is_within_the_resolution() {
        let mut plan = plan(
            RateSource::Fixed(vec![5.0, 10.0, 15.0]),
            2,
            vec![CacheMode::Cold],
        );
        plan.resolution = 0.05;
        plan.max_refinements = 6;
        let oracle = Oracle {
            capacity: 11.0,
            per_slot: 1.0,
            ceiling: 100.0,
            client_limit: f64::INFINITY,
        };
        let ran = run(&plan, oracle, Vec::new());
        let d = decide_mode(&plan, CacheMode::Cold, &ran);
        let b = d.bracket.expect("bracketed");
        assert!(b.pass <= 11.0 && b.fail > 11.0, "{b:?}");
        assert!(b.width() <= 0.05, "{b:?}");
        assert_eq!(d.rates[..3], [5.0, 10.0, 15.0]);
        assert_eq!(d.refinements, d.rates[3..], "every added rate refines");
        assert_eq!(
            d.refinements[0], 12.5,
            "the first is the midpoint of 10 and 15"
        );
        assert!(
            !d.warnings.iter().any(|w| w.contains("bracket")),
            "{:?}",
            d.warnings
        );
        // Every refinement runs every repeat.
        assert_eq!(ran.len(), 4 + 2 * d.rates.len());

        // Out of refinements before the resolution: the bracket is reported, with a warning.
        plan.max_refinements = 1;
        let ran = run(&plan, oracle, Vec::new());
        let d = decide_mode(&plan, CacheMode::Cold, &ran);
        assert_eq!(d.refinements, [12.5]);
        assert_eq!(
            d.bracket,
            Some(sweep::Bracket {
                pass: 10.0,
                fail: 12.5
            })
        );
        assert!(
            d.warnings.iter().any(|w| w.contains("maxRefinements")),
            "{:?}",
            d.warnings
        );
    }

    #[test]
    fn a_calibrated_model_places_the_first_rates_around_its_prediction() {
        // Knee at c=16: 12 RPS measured where the model expected 10 (speed 1.2); the
        // model's capacity 15 predicts 18; the target's capacity is 18.3.
        let mut plan = knee_plan();
        plan.resolution = 0.05;
        plan.max_refinements = 4;
        plan.model = vec![ModelPrior {
            cache: CacheMode::Cold,
            capacity_rps: 15.0,
            saturation_rps: vec![(4, 2.5), (8, 5.0), (16, 10.0), (32, 12.5)],
        }];
        let oracle = Oracle {
            capacity: 18.3,
            per_slot: 0.75,
            ceiling: 15.0,
            client_limit: f64::INFINITY,
        };
        let ran = run(&plan, oracle, Vec::new());
        let d = decide_mode(&plan, CacheMode::Cold, &ran);
        let p = d.prediction.expect("a prediction");
        assert_eq!(p.knee_concurrency, 16);
        assert_eq!(p.below_knee_concurrency, Some(8));
        assert!((p.speed - 1.2).abs() < 1e-12 && (p.predicted_rps - 18.0).abs() < 1e-9);
        assert_eq!(d.rates[..2], sweep::placed_rates(18.0, 0.05));
        let b = d.bracket.expect("bracketed");
        assert!(
            b.pass <= 18.3 && b.fail > 18.3 && b.width() <= 0.05,
            "{b:?}"
        );
        assert!(d.rates.len() <= 3, "{:?}", d.rates);
        // A model far off still brackets, a resolution and then 10%, 20%, 40% at a time,
        // then refines.
        plan.model[0].capacity_rps = 10.0;
        let ran = run(&plan, oracle, Vec::new());
        let d = decide_mode(&plan, CacheMode::Cold, &ran);
        let b = d.bracket.expect("bracketed");
        assert!(
            b.pass <= 18.3 && b.fail > 18.3 && b.width() <= 0.05,
            "{b:?} {:?}",
            d.rates
        );
        // Without a prior the grid stays.
        plan.model.clear();
        let d = decide_mode(&plan, CacheMode::Cold, &run(&plan, oracle, Vec::new()));
        assert_eq!(d.prediction, None);
        assert_eq!(d.rates[..5], [7.2, 9.0, 10.8, 12.6, 14.4]);
    }

    fn rates_run(ran: &[Recorded]) -> Vec<f64> {
        ran.iter()
            .filter_map(|r| match r.key {
                PointKey::Rate { rate, .. } => Some(rate),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_client_behind_at_the_lowest_rate_stops_the_mode_as_starved() {
        // The first contact with a real engine: every point thrown out for client lag, and
        // the sweep walked down from 8.73 to 1.1 RPS calling them failures.
        let plan = plan(RateSource::Fixed(vec![8.0, 10.0]), 1, vec![CacheMode::Cold]);
        let oracle = Oracle {
            capacity: 9.0,
            per_slot: 1.0,
            ceiling: 100.0,
            client_limit: 0.0,
        };
        let ran = run(&plan, oracle, Vec::new());
        assert_eq!(rates_run(&ran), [8.0], "nothing above or below is tried");
        let d = decide_mode(&plan, CacheMode::Cold, &ran);
        assert_eq!(
            d.client_limit,
            Some(ClientLimit {
                rate: 8.0,
                starved: true
            })
        );
        assert_eq!(d.bracket, None);
        assert_eq!(d.pending, None);
        assert!(
            d.warnings
                .iter()
                .any(|w| w.contains("load generator is starved")
                    && w.contains("pin it apart")
                    && !w.contains("widen")),
            "{:?}",
            d.warnings
        );
    }

    #[test]
    fn a_client_behind_above_the_capacity_caps_the_sweep_without_moving_it() {
        // Rates 5, 10, 15, 20: the client keeps up to 12 RPS, the target passes to 11.
        let mut plan = plan(
            RateSource::Fixed(vec![5.0, 10.0, 15.0, 20.0]),
            1,
            vec![CacheMode::Cold],
        );
        plan.resolution = 0.05;
        plan.max_refinements = 4;
        let oracle = Oracle {
            capacity: 11.0,
            per_slot: 1.0,
            ceiling: 100.0,
            client_limit: 12.0,
        };
        let ran = run(&plan, oracle, Vec::new());
        let rates = rates_run(&ran);
        assert!(
            !rates.contains(&20.0),
            "20 lies above a rate the client could not drive"
        );
        assert!(rates.iter().all(|&r| r <= 15.0), "{rates:?}");
        let d = decide_mode(&plan, CacheMode::Cold, &ran);
        assert_eq!(
            d.client_limit,
            Some(ClientLimit {
                rate: 15.0,
                starved: false
            })
        );
        // Without a failing rate below 15 the sweep cannot bracket: it stops at the limit
        // rather than try 15 or more again, and says so.
        assert_eq!(d.bracket, None, "{rates:?}");
        assert!(
            d.warnings
                .iter()
                .any(|w| w.contains("fell behind its schedule at 15 RPS")),
            "{:?}",
            d.warnings
        );
        // With the target's capacity under the client's limit, the bracket forms below it
        // and only valid points are its ends.
        let oracle = Oracle {
            capacity: 7.0,
            ..oracle
        };
        let ran = run(&plan, oracle, Vec::new());
        let d = decide_mode(&plan, CacheMode::Cold, &ran);
        let b = d.bracket.expect("bracketed below the client's limit");
        assert!(b.pass <= 7.0 && b.fail > 7.0 && b.fail < 15.0, "{b:?}");
    }

    #[test]
    fn a_point_that_is_not_evidence_is_never_a_bracket_end() {
        let plan = plan(
            RateSource::Fixed(vec![5.0, 10.0, 15.0]),
            1,
            vec![CacheMode::Cold],
        );
        let recorded: Vec<Recorded> = plan
            .saturation
            .as_ref()
            .map(|s| s.concurrency.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|concurrency| Recorded {
                key: PointKey::Saturation {
                    cache: CacheMode::Cold,
                    concurrency,
                },
                outcome: Outcome::Saturation {
                    throughput_rps: 1.0,
                    slos_met: true,
                    engine_rps: None,
                },
            })
            .chain(
                [
                    (5.0, RateOutcome::Passed),
                    (10.0, RateOutcome::NotEvidence),
                    (15.0, RateOutcome::Failed),
                ]
                .map(|(rate, o)| Recorded {
                    key: PointKey::Rate {
                        cache: CacheMode::Cold,
                        rate,
                        repeat: 0,
                    },
                    outcome: Outcome::Rate(o),
                }),
            )
            .collect();
        // The point that is not evidence runs once more before anything is concluded.
        let retry = PointKey::Rate {
            cache: CacheMode::Cold,
            rate: 10.0,
            repeat: 1,
        };
        let d = decide_mode(&plan, CacheMode::Cold, &recorded);
        assert_eq!(d.pending, Some(retry));
        assert_eq!(d.bracket, None);
        // Not evidence again: no bracket rests on it.
        let again = |o| {
            let mut r = recorded.clone();
            r.push(Recorded {
                key: retry,
                outcome: Outcome::Rate(o),
            });
            decide_mode(&plan, CacheMode::Cold, &r)
        };
        let d = again(RateOutcome::NotEvidence);
        assert_eq!(d.pending, None);
        assert_eq!(
            d.bracket,
            Some(sweep::Bracket {
                pass: 5.0,
                fail: 15.0
            })
        );
        // Evidence the second time: it stands for the first.
        let d = again(RateOutcome::Passed);
        assert_eq!(
            d.bracket,
            Some(sweep::Bracket {
                pass: 10.0,
                fail: 15.0
            })
        );
        let d = again(RateOutcome::Failed);
        assert_eq!(
            d.bracket,
            Some(sweep::Bracket {
                pass: 5.0,
                fail: 10.0
            })
        );
    }

    #[test]
    fn a_level_that_lost_requests_is_not_the_knee() {
        // llama.cpp closed its connection after every streamed response: a third of a
        // closed loop's requests failed on the reused connection, the rest met the SLOs.
        let gate = GateConfig {
            classes: vec![crate::analysis::ClassSlo {
                name: "chat".into(),
                ttft_cutoff_ms: 500.0,
                tpot_cutoff_ms: 50.0,
            }],
            min_successes_per_class: 1,
            ..GateConfig::default()
        };
        let report = |failed: usize| {
            let mut csv =
                String::from("request_id,class,ttft_ms,tpot_ms,e2e_ms,output_tokens,status\n");
            for i in 0..6 {
                let status = if i < failed { "connection" } else { "ok" };
                csv.push_str(&format!("{i},chat,100,10,800,64,{status}\n"));
            }
            crate::analysis::analyze_requests(
                gate.clone(),
                [(std::path::Path::new("t.csv"), csv.as_bytes())],
                10.0,
                crate::analysis::QueueTrend::Flat,
            )
            .expect("rows analyse")
        };
        assert!(slos_met(&report(0), &gate));
        assert!(
            !slos_met(&report(2), &gate),
            "a third of the requests failed"
        );
    }

    #[test]
    fn saturation_only_stops_at_the_knee() {
        let mut plan = knee_plan();
        plan.run_rates = false;
        let oracle = Oracle {
            capacity: 1.0,
            per_slot: 1.0,
            ceiling: 10.0,
            client_limit: f64::INFINITY,
        };
        let ran = run(&plan, oracle, Vec::new());
        assert_eq!(ran.len(), 4);
        let d = decide_mode(&plan, CacheMode::Cold, &ran);
        assert_eq!(d.knee, Some(8));
        assert!(d.rates.is_empty());
    }

    #[test]
    fn a_rate_that_went_through_json_still_finds_its_point() {
        let key = PointKey::Rate {
            cache: CacheMode::Cold,
            rate: 0.1 + 0.2,
            repeat: 0,
        };
        let through_json: f64 =
            serde_json::from_str(&serde_json::to_string(&(0.1 + 0.2)).unwrap()).expect("a float");
        let other = PointKey::Rate {
            cache: CacheMode::Cold,
            rate: through_json * (1.0 + 1e-12),
            repeat: 0,
        };
        assert!(key.same(&other));
        assert!(!key.same(&PointKey::Rate {
            cache: CacheMode::Warm,
            rate: 0.3,
            repeat: 0
        }));
    }

    proptest! {
        /// Interrupted after any number of points and resumed from the records (in any
        /// order), the driver runs exactly the points that were left, in the same order,
        /// and decides the same knee, rates and warnings.
        #[test]
        fn resuming_from_any_point_runs_the_rest_and_decides_the_same(
            capacity in 0.5f64..60.0,
            per_slot in 0.1f64..3.0,
            ceiling in 1.0f64..80.0,
            repeats in 1u32..3,
            warm in any::<bool>(),
            behind in any::<bool>(),
            cut in 0usize..40,
            shuffle_seed in any::<u64>(),
        ) {
            let modes = if warm {
                vec![CacheMode::Cold, CacheMode::Warm]
            } else {
                vec![CacheMode::Cold]
            };
            let mut plan = plan(RateSource::Knee { low: 0.6, high: 1.2, points: 5 }, repeats, modes);
            plan.resolution = 0.05;
            plan.max_refinements = 4;
            if warm {
                plan.model = vec![ModelPrior {
                    cache: CacheMode::Warm,
                    capacity_rps: capacity * 0.9,
                    saturation_rps: vec![(4, 4.0 * per_slot), (8, 8.0 * per_slot), (16, 15.0), (32, 20.0)],
                }];
            }
            let client_limit = if behind { capacity * 1.1 } else { f64::INFINITY };
            let oracle = Oracle { capacity, per_slot, ceiling, client_limit };
            let full = run(&plan, oracle, Vec::new());
            let cut = cut.min(full.len());
            let mut kept = full[..cut].to_vec();
            // Status lists may come back in another order.
            let mut state = shuffle_seed;
            for i in (1..kept.len()).rev() {
                state = mix64(state);
                kept.swap(i, (state % (i as u64 + 1)) as usize);
            }
            let rest = run(&plan, oracle, kept);
            prop_assert_eq!(&rest[..], &full[cut..]);
            for &cache in &plan.cache_modes {
                let mut resumed = full[..cut].to_vec();
                resumed.extend_from_slice(&rest);
                prop_assert_eq!(
                    decide_mode(&plan, cache, &resumed),
                    decide_mode(&plan, cache, &full)
                );
            }
        }
    }
}
