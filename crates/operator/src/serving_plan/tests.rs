//! Unit tests of `serving_plan`.

use super::revalidation::{
    PlanBounds, VerificationInputs, verification_benchmark, verification_outcome,
};
use super::*;
use goodput_api::{ModeCapacity, ServingPlanSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap()
}

fn ready(second: i64) -> Condition {
    conditions::new(
        READY,
        Cond::True,
        conditions::reason::SUCCEEDED,
        "",
        Some(1),
        Time(at(second)),
    )
}

fn point(rate: f64, verdict: &str) -> FinishedPoint {
    FinishedPoint {
        cache: CacheMode::Cold,
        kind: PointKind::Rate,
        concurrency: None,
        offered_rps: Some(rate),
        repeat: 0,
        achieved_rps: rate,
        error_rate: Some(0.0),
        weakest_class: Some("long".into()),
        weakest_attainment: Some(0.97),
        weakest_successes: Some(3000),
        queue_trend: Some("flat".into()),
        slos_met: false,
        valid: true,
        client_behind: false,
        verdict: verdict.into(),
        reasons: vec![],
        result_config_map: None,
        classes: Vec::new(),
        busy_seconds: None,
        unsent_seconds: None,
        requests_sent: None,
        engine_rps: None,
    }
}

/// A benchmark that measured 24 RPS on 4 replicas (cold), Ready at t = 1,000.
fn benchmark() -> CapacityBenchmark {
    let yaml = String::from(
        "apiVersion: goodput.dev/v1alpha1\nkind: CapacityBenchmark\nmetadata: {name: qwen, \
             namespace: llm, generation: 1}\nspec:\n  target: {service: {name: qwen, port: \
             8000}, replicas: 4, gpusPerReplica: 2}\n  workload:\n    manifestConfigMap: \
             {name: m}\n",
    );
    let mut cb: CapacityBenchmark = serde_saphyr::from_str(&yaml).unwrap();
    cb.status = Some(CapacityBenchmarkStatus {
        phase: Some(Phase::Succeeded),
        observed_generation: Some(1),
        conditions: vec![ready(1_000)],
        points: vec![point(24.0, "pass"), point(30.0, "fail")],
        modes: vec![ModeCapacity {
            cache: CacheMode::Cold,
            capacity_rps: Some(24.0),
            capacity_per_replica_rps: Some(6.0),
            bracket: None,
            refinements: Vec::new(),
            placement: None,
            client_limit_rps: None,
            loadgen_starved: false,
        }],
        capacity_rps: Some(24.0),
        pack: Some("pvc/results/qwen/g1/".into()),
        ..Default::default()
    });
    cb
}

#[test]
fn a_ready_benchmark_gives_its_capacity_point_as_evidence() {
    let e = benchmark_capacity(&benchmark(), None, at(2_000), None).unwrap();
    assert_eq!((e.capacity_rps, e.replicas_tested), (24.0, 4));
    assert_eq!(e.per_replica(), 6.0);
    assert_eq!(e.gpus_per_replica, Some(2));
    assert_eq!(e.record.weakest_class.as_deref(), Some("long"));
    assert_eq!(e.record.weakest_attainment, Some(0.97));
    assert_eq!(e.record.pack.as_deref(), Some("pvc/results/qwen/g1/"));
    assert_eq!(e.record.measured_at, Some(Time(at(1_000))));
}

#[test]
fn stale_unfinished_or_failing_evidence_is_refused_with_each_reason() {
    let day = Some(Duration::from_secs(86_400));
    let old = benchmark_capacity(&benchmark(), None, at(1_000 + 2 * 86_400), day).unwrap_err();
    assert_eq!(old.len(), 1);
    assert!(
        old[0].contains("2d old") && old[0].contains("evidenceMaxAge 24h"),
        "{old:?}"
    );

    let mut running = benchmark();
    running.status.as_mut().unwrap().phase = Some(Phase::Running);
    let e = benchmark_capacity(&running, None, at(2_000), None).unwrap_err();
    assert!(e[0].contains("not Ready (phase Running)"), "{e:?}");

    let mut changed = benchmark();
    changed.metadata.generation = Some(2);
    let e = benchmark_capacity(&changed, None, at(2_000), None).unwrap_err();
    assert!(e[0].contains("spec changed"), "{e:?}");

    let mut none = benchmark();
    none.status.as_mut().unwrap().modes[0].capacity_rps = None;
    let e = benchmark_capacity(&none, None, at(1_000 + 2 * 86_400), day).unwrap_err();
    assert_eq!(e.len(), 2, "both reasons: {e:?}");
    assert!(e[0].contains("no passing point"));

    let e = benchmark_capacity(&benchmark(), Some(CacheMode::Warm), at(2_000), None).unwrap_err();
    assert!(e[0].contains("no result for cache mode warm"), "{e:?}");
}

fn plan() -> ServingPlan {
    let spec: ServingPlanSpec = serde_json::from_value(json!({
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "qwen"},
        "capacity": {"benchmarkRef": {"name": "qwen"}},
        "peak": {"rps": 36.0},
    }))
    .unwrap();
    let mut p = ServingPlan::new("chat", spec);
    p.metadata.namespace = Some("llm".into());
    p.metadata.uid = Some("u1".into());
    p
}

#[test]
fn the_revalidation_benchmark_tries_the_peak_the_linear_expectation_and_below() {
    let mut evidence = benchmark_capacity(&benchmark(), None, at(2_000), None).unwrap();
    evidence.benchmark = Some(benchmark());
    evidence.manifest = Some(goodput_core::workload::seed_manifest());
    let declared = workload::declared_identity(&json!({"metadata": {"annotations": {
            workload::ENGINE_VERSION: "v9.9.9", workload::TP: "4"}}}));
    let inputs = VerificationInputs {
        replicas: 8,
        peak: 36.0,
        identity: "model=x",
        declared: &declared,
    };
    let cb = verification_benchmark(&plan(), &evidence, inputs).unwrap();
    // Its manifest describes what it measures: the declared version and TP, 8 replicas.
    let m = cb.spec.workload.manifest.as_ref().unwrap();
    let seed = goodput_core::workload::seed_manifest();
    assert_eq!(m.engine.version, "9.9.9");
    assert_eq!((m.engine.placement.tp, m.engine.placement.replicas), (4, 8));
    assert_eq!(m.engine.placement.gpus, 4 * seed.engine.placement.pp * 8);
    assert_eq!(m.model.revision, seed.model.revision, "not declared: kept");
    assert_eq!(m.workload, seed.workload, "the same classes and mix");
    let rates = &cb.spec.experiments.rate_sweep.as_ref().unwrap().rates;
    assert_eq!(rates, &[12.0, 24.0, 36.0, 48.0]);
    assert_eq!(cb.spec.target.replicas, Some(8));
    assert_eq!(cb.spec.target.service.as_ref().unwrap().name, "qwen");
    assert_eq!(cb.spec.experiments.cache_modes, [CacheMode::Cold]);
    assert!(cb.spec.experiments.saturation.is_none());
    assert!(cb.name_any().starts_with("chat-verify-r8-"));
    let owner = &cb.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("ServingPlan", Some(true))
    );

    // Without a Service to aim at, nothing is built and the reason says what to set.
    let mut typed = plan();
    typed.spec.capacity.benchmark_ref = None;
    typed.spec.capacity.per_replica_rps = Some(6.0);
    evidence.benchmark = None;
    let why = verification_benchmark(
        &typed,
        &evidence,
        VerificationInputs {
            replicas: 8,
            peak: 36.0,
            identity: "",
            declared: &declared,
        },
    )
    .unwrap_err();
    assert!(why.contains("spec.revalidation.service"), "{why}");
}

fn running(replicas: u32, peak: f64, expected: f64) -> Verification {
    Verification {
        replicas,
        identity: "i".into(),
        benchmark: "chat-verify".into(),
        state: Verification::RUNNING.into(),
        peak_rps: Some(peak),
        expected_fleet_rps: Some(expected),
        ..Default::default()
    }
}

fn finished(points: Vec<FinishedPoint>, capacity: Option<f64>) -> CapacityBenchmarkStatus {
    CapacityBenchmarkStatus {
        phase: Some(Phase::Succeeded),
        points,
        modes: vec![ModeCapacity {
            cache: CacheMode::Cold,
            capacity_rps: capacity,
            capacity_per_replica_rps: None,
            bracket: None,
            refinements: Vec::new(),
            placement: None,
            client_limit_rps: None,
            loadgen_starved: false,
        }],
        ..Default::default()
    }
}

const BOUNDS: PlanBounds = PlanBounds {
    utilization: 0.75,
    gpus_per_replica: 2,
    min: 1,
    max: None,
};

#[test]
fn a_linear_fleet_is_verified_with_its_efficiency() {
    let status = finished(
        vec![
            point(24.0, "pass"),
            point(36.0, "pass"),
            point(48.0, "pass"),
        ],
        Some(48.0),
    );
    let v = verification_outcome(running(8, 36.0, 48.0), &status, CacheMode::Cold, BOUNDS);
    assert_eq!(v.state, Verification::VERIFIED);
    assert_eq!(v.scaling_efficiency, Some(1.0));
    assert_eq!(v.shortfall_rps, None);
    assert!(v.message.contains("efficiency 100%"), "{}", v.message);
}

#[test]
fn a_capped_fleet_falls_short_and_proposes_from_what_it_measured() {
    let status = finished(
        vec![
            point(24.0, "pass"),
            point(36.0, "fail"),
            point(48.0, "fail"),
        ],
        Some(24.0),
    );
    let v = verification_outcome(running(8, 36.0, 48.0), &status, CacheMode::Cold, BOUNDS);
    assert_eq!(v.state, Verification::SHORTFALL);
    assert_eq!(v.measured_fleet_rps, Some(24.0));
    assert_eq!(v.scaling_efficiency, Some(0.5));
    assert_eq!(v.shortfall_rps, Some(12.0));
    // 24 RPS on 8 replicas = 3 per replica: ceil(36 / (3 × 0.75)) = 16.
    assert_eq!(v.proposed_replicas, Some(16));
    assert!(v.message.contains("needs 16 replicas"), "{}", v.message);

    let none = finished(vec![point(24.0, "fail")], None);
    let v = verification_outcome(running(8, 36.0, 48.0), &none, CacheMode::Cold, BOUNDS);
    assert_eq!(
        (v.state.as_str(), v.proposed_replicas),
        (Verification::SHORTFALL, None)
    );
    assert_eq!(v.shortfall_rps, Some(36.0));

    let mut failed = finished(vec![], None);
    failed.phase = Some(Phase::Failed);
    let v = verification_outcome(running(8, 36.0, 48.0), &failed, CacheMode::Cold, BOUNDS);
    assert_eq!(v.state, Verification::FAILED);
}
