//! Pure status arithmetic: finished points from merged results, the driver's records from
//! the status, and the benchmark's conclusion. The same driver and planning core as
//! `goodput bench`; only the storage differs (status and ConfigMaps instead of memory).

use goodput_api::{CacheMode, FinishedPoint, PointClass, PointKind};
use goodput_core::analysis::PointReport;
use goodput_core::benchmark::driver::{self, Outcome, PointKey, RateOutcome, Recorded};
use goodput_core::planning::assess;
use goodput_core::workload::WorkloadManifest;
use goodput_loadgen::point::Validity;

/// What a point held, for its cost (real-time equivalents).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Held {
    /// From the schedule's time zero to the last response or the early stop.
    pub busy_seconds: f64,
    /// Requests sent, warmup included.
    pub requests_sent: u64,
    /// Stopped early: the schedule time left unsent.
    pub unsent_seconds: Option<f64>,
}

impl Held {
    /// What a load generator's client facts say the point held.
    pub fn of(client: &goodput_loadgen::run::ClientFacts) -> Held {
        Held {
            busy_seconds: client.busy_s,
            requests_sent: client.sent,
            unsent_seconds: client.early_stop.as_ref().map(|e| e.unsent_s),
        }
    }
}

/// The status entry of a point whose shards were merged into `report`.
pub fn finished_point(
    key: PointKey,
    report: &PointReport,
    validity: &Validity,
    manifest: &WorkloadManifest,
    result_config_map: String,
    held: Option<Held>,
) -> FinishedPoint {
    let gate = manifest.gate_config();
    let (kind, concurrency, offered_rps, repeat) = key_fields(key);
    let assessment = assess(offered_rps.unwrap_or(0.0), report, &gate);
    let slos_met = driver::slos_met(report, &gate);
    let valid = validity.valid;
    let verdict = match key {
        PointKey::Saturation { .. } if slos_met => FinishedPoint::PASS,
        PointKey::Saturation { .. } => FinishedPoint::FAIL,
        PointKey::Rate { .. } if !valid => FinishedPoint::INVALID,
        PointKey::Rate { .. } => match assessment.verdict {
            goodput_core::analysis::Verdict::Pass => FinishedPoint::PASS,
            goodput_core::analysis::Verdict::Fail => FinishedPoint::FAIL,
            goodput_core::analysis::Verdict::Exploratory => FinishedPoint::EXPLORATORY,
        },
    };
    let mut reasons: Vec<String> = validity.reasons.clone();
    if matches!(key, PointKey::Rate { .. }) {
        reasons.extend(assessment.reasons.iter().map(|r| r.message.clone()));
    }
    let weakest = assessment.weakest_class.as_ref();
    FinishedPoint {
        cache: key.cache(),
        kind,
        concurrency,
        offered_rps,
        repeat,
        achieved_rps: report.request_throughput_rps,
        error_rate: report.error_rate,
        weakest_class: weakest.map(|w| w.name.clone()),
        weakest_attainment: weakest.and_then(|w| w.attainment),
        weakest_successes: weakest.map(|w| w.successful_count),
        queue_trend: Some(report.queue_trend.to_string()),
        slos_met,
        valid,
        client_behind: validity.client_behind,
        verdict: verdict.to_owned(),
        reasons: FinishedPoint::bounded_reasons(reasons),
        result_config_map: Some(result_config_map),
        classes: report
            .classes
            .iter()
            .map(|(name, c)| PointClass {
                name: name.clone(),
                successes: c.successful_count,
                attainment: c.attainment,
                passed: c.class_slo_pass && c.sample_adequate,
            })
            .collect(),
        busy_seconds: held.map(|h| h.busy_seconds),
        requests_sent: held.map(|h| h.requests_sent),
        unsent_seconds: held.and_then(|h| h.unsent_seconds),
        engine_rps: None,
    }
}

/// The status entry of a point with no result: its Job failed or a shard's result was
/// missing or unreadable. Never evidence.
pub fn invalid_point(key: PointKey, reason: String) -> FinishedPoint {
    let (kind, concurrency, offered_rps, repeat) = key_fields(key);
    FinishedPoint {
        cache: key.cache(),
        kind,
        concurrency,
        offered_rps,
        repeat,
        achieved_rps: 0.0,
        error_rate: None,
        weakest_class: None,
        weakest_attainment: None,
        weakest_successes: None,
        queue_trend: None,
        slos_met: false,
        valid: false,
        client_behind: false,
        verdict: FinishedPoint::INVALID.to_owned(),
        reasons: FinishedPoint::bounded_reasons(vec![reason]),
        result_config_map: None,
        classes: Vec::new(),
        busy_seconds: None,
        requests_sent: None,
        unsent_seconds: None,
        engine_rps: None,
    }
}

/// What the finished points cost on `gpus` accelerators (replicas × GPUs per replica);
/// points without a result count nothing.
pub fn cost<'a>(
    points: impl IntoIterator<Item = &'a FinishedPoint>,
    gpus: u32,
) -> goodput_core::planning::cost::Cost {
    let each: Vec<_> = points
        .into_iter()
        .filter_map(|p| {
            Some(goodput_core::planning::cost::Cost::of(
                p.busy_seconds?,
                gpus,
                p.requests_sent.unwrap_or(0),
            ))
        })
        .collect();
    goodput_core::planning::cost::Cost::sum(&each)
}

/// What early stopping saved on `gpus` accelerators: the schedule time its stopped points
/// left unsent, in GPU-minutes; `None` when no point was stopped.
pub fn early_stop_saved_gpu_minutes(points: &[FinishedPoint], gpus: u32) -> Option<f64> {
    let unsent: Vec<f64> = points.iter().filter_map(|p| p.unsent_seconds).collect();
    (!unsent.is_empty())
        .then(|| goodput_core::planning::cost::Cost::of(unsent.iter().sum(), gpus, 0).gpu_minutes)
}

/// The status fields naming a point: kind, concurrency, offered rate, repeat.
pub fn key_fields(key: PointKey) -> (PointKind, Option<u32>, Option<f64>, u32) {
    match key {
        PointKey::Saturation { concurrency, .. } => {
            (PointKind::Saturation, Some(concurrency), None, 0)
        }
        PointKey::Rate { rate, repeat, .. } => (PointKind::Rate, None, Some(rate), repeat),
    }
}

/// The point a status entry records; `None` for an entry missing its load.
pub fn point_key(p: &FinishedPoint) -> Option<PointKey> {
    point_key_of(p.cache, p.kind, p.concurrency, p.offered_rps, p.repeat)
}

/// The point named by these status fields.
pub fn point_key_of(
    cache: CacheMode,
    kind: PointKind,
    concurrency: Option<u32>,
    offered_rps: Option<f64>,
    repeat: u32,
) -> Option<PointKey> {
    Some(match kind {
        PointKind::Saturation => PointKey::Saturation {
            cache,
            concurrency: concurrency?,
        },
        PointKind::Rate => PointKey::Rate {
            cache,
            rate: offered_rps?,
            repeat,
        },
    })
}

/// What the driver needs from the finished points in status.
pub fn recorded(points: &[FinishedPoint]) -> Vec<Recorded> {
    points
        .iter()
        .filter_map(|p| {
            let key = point_key(p)?;
            let outcome = match key {
                PointKey::Saturation { .. } => Outcome::Saturation {
                    throughput_rps: p.achieved_rps,
                    slos_met: p.slos_met,
                    engine_rps: p.engine_rps,
                },
                PointKey::Rate { .. } => Outcome::Rate(match (p.valid, p.client_behind) {
                    (_, true) => RateOutcome::ClientBehind,
                    (false, false) => RateOutcome::NotEvidence,
                    (true, false) if p.verdict == FinishedPoint::PASS => RateOutcome::Passed,
                    (true, false) => RateOutcome::Failed,
                }),
            };
            Some(Recorded { key, outcome })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_entries_give_back_the_driver_records_they_came_from() {
        let keys = [
            PointKey::Saturation {
                cache: CacheMode::Cold,
                concurrency: 16,
            },
            PointKey::Rate {
                cache: CacheMode::Warm,
                rate: 12.6,
                repeat: 1,
            },
        ];
        let points: Vec<FinishedPoint> = keys
            .iter()
            .map(|&k| invalid_point(k, "the Job failed".into()))
            .collect();
        let back = recorded(&points);
        assert_eq!(back.len(), 2);
        assert!(back[0].key.same(&keys[0]) && back[1].key.same(&keys[1]));
        // An invalid point never counts as passing, and a level with no result met no SLO.
        assert_eq!(back[1].outcome, Outcome::Rate(RateOutcome::NotEvidence));
        assert_eq!(
            back[0].outcome,
            Outcome::Saturation {
                throughput_rps: 0.0,
                slos_met: false,
                engine_rps: None,
            }
        );
    }

    #[test]
    fn the_cost_counts_what_points_held_and_early_stopping_what_they_left_unsent() {
        let key = |rate| PointKey::Rate {
            cache: CacheMode::Cold,
            rate,
            repeat: 0,
        };
        let held = |busy_seconds, requests_sent, unsent_seconds| FinishedPoint {
            busy_seconds: Some(busy_seconds),
            requests_sent: Some(requests_sent),
            unsent_seconds,
            ..invalid_point(key(6.0), String::new())
        };
        // 300 s and 60 s held on 4 GPUs: 24 GPU-minutes; the second left 150 s unsent.
        let points = [
            held(300.0, 1800, None),
            held(60.0, 500, Some(150.0)),
            invalid_point(key(9.0), "the Job failed".into()),
        ];
        let cost = cost(&points, 4);
        assert_eq!(cost.gpu_minutes, 24.0);
        assert_eq!(cost.requests_sent, 2300);
        assert_eq!(early_stop_saved_gpu_minutes(&points, 4), Some(10.0));
        assert_eq!(early_stop_saved_gpu_minutes(&points[..1], 4), None);
    }
}
