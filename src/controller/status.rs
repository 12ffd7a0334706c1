//! Pure status arithmetic: finished points from merged results, the driver's records from
//! the status, and the benchmark's conclusion. The same driver and planning core as
//! `goodput bench`; only the storage differs (status and ConfigMaps instead of memory).

use crate::analysis::PointReport;
use crate::api::{CacheMode, FinishedPoint, PointClass, PointKind};
use crate::bench::driver::{self, Outcome, PointKey, Recorded};
use crate::planning::assess;
use crate::workload::WorkloadManifest;

/// The status entry of a point whose shards were merged into `report`.
pub fn finished_point(
    key: PointKey,
    report: &PointReport,
    valid: bool,
    validity_reasons: &[String],
    manifest: &WorkloadManifest,
    result_config_map: String,
    busy: Option<(f64, u64)>,
) -> FinishedPoint {
    let gate = manifest.gate_config();
    let (kind, concurrency, offered_rps, repeat) = key_fields(key);
    let assessment = assess(offered_rps.unwrap_or(0.0), report, &gate);
    let slos_met = driver::slos_met(report, manifest.acceptance.class_slo_attainment_min);
    let verdict = match key {
        PointKey::Saturation { .. } if slos_met => FinishedPoint::PASS,
        PointKey::Saturation { .. } => FinishedPoint::FAIL,
        PointKey::Rate { .. } if !valid => FinishedPoint::INVALID,
        PointKey::Rate { .. } => match assessment.verdict {
            crate::analysis::Verdict::Pass => FinishedPoint::PASS,
            crate::analysis::Verdict::Fail => FinishedPoint::FAIL,
            crate::analysis::Verdict::Exploratory => FinishedPoint::EXPLORATORY,
        },
    };
    let mut reasons: Vec<String> = validity_reasons.to_vec();
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
        busy_seconds: busy.map(|b| b.0),
        requests_sent: busy.map(|b| b.1),
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
        verdict: FinishedPoint::INVALID.to_owned(),
        reasons: FinishedPoint::bounded_reasons(vec![reason]),
        result_config_map: None,
        classes: Vec::new(),
        busy_seconds: None,
        requests_sent: None,
    }
}

/// What the finished points cost on `gpus` accelerators (replicas × GPUs per replica);
/// points without a result count nothing.
pub fn cost(points: &[FinishedPoint], gpus: u32) -> crate::planning::cost::Cost {
    let each: Vec<_> = points
        .iter()
        .filter_map(|p| {
            Some(crate::planning::cost::Cost::of(
                p.busy_seconds?,
                gpus,
                p.requests_sent.unwrap_or(0),
            ))
        })
        .collect();
    crate::planning::cost::Cost::sum(&each)
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
                },
                PointKey::Rate { .. } => Outcome::Rate {
                    passed: p.valid && p.verdict == FinishedPoint::PASS,
                },
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
        assert_eq!(back[1].outcome, Outcome::Rate { passed: false });
        assert_eq!(
            back[0].outcome,
            Outcome::Saturation {
                throughput_rps: 0.0,
                slos_met: false
            }
        );
    }
}
