use super::*;
use crate::analysis::{PointSummary, Success};
use crate::workload::seed_manifest;

fn plan(peak: f64, cap: f64, tested: u32, gpus: u32, u: f64) -> Result<ReplicaPlan, PlanError> {
    plan_replicas(PlanInput {
        peak_rps: peak,
        capacity_rps: cap,
        replicas_tested: tested,
        gpus_per_replica: gpus,
        target_utilization: u,
    })
}

#[test]
fn seed_worked_example() {
    let p = plan(36.0, 24.0, 4, 2, 0.75).unwrap();
    assert_eq!(p.capacity_per_replica_rps, 6.0);
    assert_eq!(p.planned_rps_per_replica, 4.5);
    assert_eq!(p.required_replicas, 8);
    assert_eq!(p.required_gpus, 16);
    let text = p.explain();
    assert!(
        text.contains("ceil(36 / (6 × 0.75)) = ceil(8) = 8"),
        "{text}"
    );
    assert!(text.contains("8 replicas × 2 GPUs/replica = 16"), "{text}");
}

#[test]
fn float_noise_does_not_add_a_replica() {
    // 0.1 + 0.2 style noise: capacity 3 × 0.1 = 0.30000000000000004 per replica...
    let p = plan(0.9, 0.3, 1, 1, 1.0).unwrap();
    assert_eq!(p.required_replicas, 3);
    // 36 / (7.2 / 1.6 × 1.0): 4.5 computed through a lossy division.
    let p = plan(36.0, 7.2, 1, 1, 0.625).unwrap();
    assert_eq!(p.required_replicas, 8);
    // A real fraction still rounds up.
    assert_eq!(plan(37.0, 24.0, 4, 2, 0.75).unwrap().required_replicas, 9);
    assert_eq!(plan(1.0, 24.0, 4, 2, 0.75).unwrap().required_replicas, 1);
}

#[test]
fn bad_inputs_are_rejected() {
    assert!(matches!(
        plan(0.0, 24.0, 4, 2, 0.75),
        Err(PlanError::NotPositive {
            name: "peak_rps",
            ..
        })
    ));
    assert!(matches!(
        plan(36.0, -1.0, 4, 2, 0.75),
        Err(PlanError::NotPositive {
            name: "capacity_rps",
            ..
        })
    ));
    assert!(matches!(
        plan(36.0, f64::NAN, 4, 2, 0.75),
        Err(PlanError::NotPositive { .. })
    ));
    assert!(matches!(
        plan(36.0, 24.0, 0, 2, 0.75),
        Err(PlanError::NotPositive {
            name: "replicas_tested",
            ..
        })
    ));
    assert!(matches!(
        plan(36.0, 24.0, 4, 0, 0.75),
        Err(PlanError::NotPositive {
            name: "gpus_per_replica",
            ..
        })
    ));
    assert_eq!(
        plan(36.0, 24.0, 4, 2, 0.0),
        Err(PlanError::Utilization(0.0))
    );
    assert_eq!(
        plan(36.0, 24.0, 4, 2, 1.01),
        Err(PlanError::Utilization(1.01))
    );
    assert!(plan(36.0, 24.0, 4, 2, 1.0).is_ok());
}

/// A point shaped like a row of the seed's sweep table: per class (successes, passing),
/// failures per class, and the queue trend.
fn point(rate: f64, classes: [(u64, u64, u64); 3], trend: QueueTrend) -> SweepPoint {
    let cfg = seed_manifest().gate_config();
    let mut s = PointSummary::new(cfg.clone());
    for (i, &(ok, passing, failed)) in classes.iter().enumerate() {
        let slo = &cfg.classes[i];
        for k in 0..ok {
            let ttft = if k < passing {
                slo.ttft_cutoff_ms * 0.5
            } else {
                slo.ttft_cutoff_ms * 1.5
            };
            s.record_success(
                i,
                &Success {
                    ttft_ms: ttft,
                    tpot_ms: 10.0,
                    e2e_ms: ttft + 10.0 * 127.0,
                    output_tokens: 128,
                    itl_ms: &[],
                },
            );
        }
        for _ in 0..failed {
            s.record_failure(i, "error");
        }
    }
    SweepPoint {
        offered_rps: rate,
        report: s.finish(900.0, trend).unwrap(),
    }
}

fn seed_sweep() -> Vec<SweepPoint> {
    vec![
        point(
            28.0,
            [
                (15_092, 13_206, 308),
                (4_312, 3_827, 88),
                (2_156, 1_682, 44),
            ],
            QueueTrend::Growing,
        ),
        point(
            16.0,
            [(15_400, 15_354, 0), (4_400, 4_387, 0), (2_200, 2_180, 0)],
            QueueTrend::Flat,
        ),
        point(
            24.0,
            [(15_339, 14_649, 61), (4_382, 4_171, 18), (2_191, 2_084, 9)],
            QueueTrend::Flat,
        ),
        point(
            20.0,
            [(15_385, 15_259, 15), (4_396, 4_365, 4), (2_197, 2_158, 3)],
            QueueTrend::Flat,
        ),
    ]
}

#[test]
fn seed_sweep_selects_24_and_explains_28() {
    let sel = select_capacity(&seed_sweep(), &seed_manifest().gate_config());
    assert_eq!(sel.capacity_rps, Some(24.0));
    let rates: Vec<f64> = sel.points.iter().map(|p| p.offered_rps).collect();
    assert_eq!(rates, [16.0, 20.0, 24.0, 28.0]);
    let p24 = &sel.points[2];
    assert_eq!(p24.verdict, Verdict::Pass);
    let weakest = p24.weakest_class.as_ref().unwrap();
    assert_eq!(
        (weakest.name.as_str(), weakest.successful_count),
        ("generation_heavy", 2191)
    );
    assert!((weakest.attainment.unwrap() - 0.951).abs() < 0.0005);

    let p28 = &sel.points[3];
    assert_eq!(p28.verdict, Verdict::Fail);
    let rules: Vec<GateRule> = p28.reasons.iter().map(|r| r.rule).collect();
    assert!(rules.contains(&GateRule::Attainment), "{rules:?}");
    assert!(rules.contains(&GateRule::ErrorRate), "{rules:?}");
    assert!(rules.contains(&GateRule::QueueTrend), "{rules:?}");
    assert!((p28.error_rate.unwrap() - 0.02).abs() < 1e-9);
    assert!(sel.warnings.is_empty());

    let p = plan(36.0, sel.capacity_rps.unwrap(), 4, 2, 0.75).unwrap();
    assert_eq!((p.required_replicas, p.required_gpus), (8, 16));
    let table = sel.table();
    assert!(table.contains("<- capacity"), "{table}");
}

use crate::analysis::GateRule;

#[test]
fn exploratory_points_are_never_capacity() {
    // 40 RPS passes on attainment but one class has 1,500 successes.
    let mut sweep = seed_sweep();
    sweep.push(point(
        40.0,
        [(15_400, 15_400, 0), (4_400, 4_400, 0), (1_500, 1_500, 0)],
        QueueTrend::Flat,
    ));
    let sel = select_capacity(&sweep, &seed_manifest().gate_config());
    assert_eq!(sel.capacity_rps, Some(24.0));
    let p40 = sel.points.last().unwrap();
    assert!(p40.exploratory);
    assert_eq!(p40.verdict, Verdict::Exploratory);
    assert_eq!(sel.exploratory().count(), 1);
}

#[test]
fn repeats_must_all_pass_and_non_monotonic_sweeps_warn() {
    let mut sweep = seed_sweep();
    // A repeat of 24 that fails: 24 no longer counts, 20 becomes the capacity.
    sweep.push(point(
        24.0,
        [(15_339, 14_000, 61), (4_382, 4_171, 18), (2_191, 2_084, 9)],
        QueueTrend::Flat,
    ));
    let sel = select_capacity(&sweep, &seed_manifest().gate_config());
    assert_eq!(sel.capacity_rps, Some(20.0));
    assert!(
        sel.warnings[0].contains("1 of 2 repeats"),
        "{:?}",
        sel.warnings
    );

    // 20 fails but 24 passes: 24 is selected, with a warning.
    let mut sweep = seed_sweep();
    sweep[3] = point(
        20.0,
        [(15_385, 14_000, 15), (4_396, 4_365, 4), (2_197, 2_158, 3)],
        QueueTrend::Flat,
    );
    let sel = select_capacity(&sweep, &seed_manifest().gate_config());
    assert_eq!(sel.capacity_rps, Some(24.0));
    assert!(
        sel.warnings[0].contains("not monotonic"),
        "{:?}",
        sel.warnings
    );
}

#[test]
fn reports_from_other_tools_are_judged_from_their_fields() {
    let mut sweep = seed_sweep();
    for p in &mut sweep {
        p.report.verdict = None;
        p.report.gate_reasons.clear();
    }
    let sel = select_capacity(&sweep, &seed_manifest().gate_config());
    assert_eq!(sel.capacity_rps, Some(24.0));
    // 28 RPS: three classes under 95%, the error rate, the queue.
    let rules: Vec<GateRule> = sel.points[3].reasons.iter().map(|r| r.rule).collect();
    assert_eq!(
        rules,
        [
            GateRule::Attainment,
            GateRule::Attainment,
            GateRule::Attainment,
            GateRule::ErrorRate,
            GateRule::QueueTrend
        ]
    );
}
