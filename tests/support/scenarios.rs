//! The operator's end-to-end scenarios, on any [`Env`]: the test cluster
//! (`tests/measured/operator.rs`) or a real cluster (`tests/measured/e2e.rs`). Every wait is the test
//! cluster's, stretched by [`Env::patience`] elsewhere; every assertion is the same.

use std::time::{Duration, Instant};

use goodput::api::{CapacityBenchmark, Phase};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::DeleteParams;

use crate::harness::{Env, bench, benchmark_yaml, phase, points};

/// A simulated benchmark runs its points as Jobs, reaches the capacity `goodput bench`
/// finds on the same YAML, removes its simulated engine and then stays quiet.
pub async fn a_simulated_benchmark_finds_the_capacity_bench_finds(env: &Env) {
    let operator = env.operator();
    let yaml = benchmark_yaml("sweep", "6, 24");
    env.create(&yaml).await;
    let cb = env
        .wait_for("sweep", Duration::from_secs(240), "Succeeded", |cb| {
            phase(cb) == Some(Phase::Succeeded)
        })
        .await;
    let status = cb.status.clone().expect("status");
    let verdicts: Vec<(Option<f64>, &str)> = status
        .points
        .iter()
        .map(|p| (p.offered_rps, p.verdict.as_str()))
        .collect();
    assert_eq!(
        verdicts,
        [(Some(6.0), "pass"), (Some(24.0), "fail")],
        "{:#?}",
        status.points
    );
    assert_eq!(status.capacity_rps, Some(6.0));
    assert_eq!(status.capacity_per_replica_rps, Some(6.0));
    let bracket = status.modes[0].bracket.expect("a pass below a fail");
    assert_eq!((bracket.pass, bracket.fail), (6.0, 24.0));
    // ceil(30 / (6 × 0.75)) = 7.
    assert_eq!(status.required_replicas, Some(7));
    let ready = goodput::api::conditions::find(&status.conditions, "Ready").expect("Ready");
    assert_eq!(ready.status, "True");
    assert_eq!(status.observed_generation, cb.metadata.generation);

    // Every point was a Job owned by the benchmark; the simulated engine is gone.
    let names = env.jobs_of(&cb).await;
    assert_eq!(names.len(), 2, "{names:?}");
    let deployments: Api<Deployment> = env.api();
    env.within(
        Duration::from_secs(20),
        "the simulated engine is removed after the benchmark",
        async {
            while deployments
                .get_opt("sweep-sim")
                .await
                .ok()
                .flatten()
                .is_some()
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        },
    )
    .await;

    // Quiet when stable: once finished, nothing changes and nothing is reconciled.
    tokio::time::sleep(env.settle).await;
    let settled = operator.reconciles().await.expect("metrics");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        operator.reconciles().await,
        Some(settled),
        "reconciles after Succeeded"
    );

    // `goodput bench` on the same YAML runs the same points and finds the same capacity.
    let local = bench(&yaml, env.dir.path());
    let cold = &local["modes"][0];
    let rates: Vec<f64> = cold["points"]
        .as_array()
        .expect("points")
        .iter()
        .filter_map(|p| p["offered_rps"].as_f64())
        .collect();
    assert_eq!(rates, [6.0, 24.0]);
    assert_eq!(cold["capacity_rps"].as_f64(), status.capacity_rps);
    assert_eq!(cold["bracket"]["pass"].as_f64(), Some(bracket.pass));
    assert_eq!(cold["bracket"]["fail"].as_f64(), Some(bracket.fail));
    // Both shells sent the same schedules (up to where early stopping ended a failing
    // point, a moment that varies from run to run), and each point held the engine at
    // least as long as its schedule lasted (requests ÷ rate, in real time) or until it
    // was stopped.
    let cost = status.cost.expect("the sweep's cost");
    let local_points = cold["points"].as_array().expect("points");
    for (p, l) in status.points.iter().zip(local_points) {
        let (busy, sent, rate) = (
            p.busy_seconds.expect("busy time"),
            p.requests_sent.expect("requests"),
            p.offered_rps.expect("a rate"),
        );
        let stopped = p.unsent_seconds.is_some();
        assert_eq!(stopped, !l["early_stop"].is_null(), "{p:#?} {l:#}");
        if stopped {
            assert!(p.reasons[0].starts_with("stopped early: "), "{p:#?}");
        } else {
            assert_eq!(l["cost"]["requestsSent"].as_u64(), Some(sent), "{p:#?}");
            assert!(busy >= 0.95 * sent as f64 / rate, "{p:#?}");
        }
    }
    // 24 RPS, four times the single replica's capacity, is stopped early, and the status
    // says what that saved: the unsent schedule on the one GPU.
    let unsent = status.points[1]
        .unsent_seconds
        .expect("24 RPS stopped early");
    assert_eq!(
        status.early_stop_saved_gpu_minutes,
        Some(unsent / 60.0),
        "{status:#?}"
    );
    assert!(cost.gpu_minutes > 0.0);
    assert_eq!(
        local["plan"]["required_replicas"].as_u64(),
        status.required_replicas.map(u64::from)
    );
}

/// A simulated benchmark with a saturation sweep: the operator calibrates the engine model
/// at the knee, as `goodput bench` does, places the first two rates around its prediction
/// and says in status what the prediction was and what it saved against the grid it
/// replaced.
pub async fn a_saturation_sweep_places_the_rates_with_the_engine_model(env: &Env) {
    let _operator = env.operator();
    let yaml = benchmark_yaml("placed", "6, 24").replace(
        "    rateSweep: {rates: [6, 24], maxRefinements: 0}",
        "    saturation: {concurrency: [4, 8, 16], durationSeconds: 10}
    rateSweep: {points: 5, lowFraction: 0.6, highFraction: 1.2}",
    );
    assert!(yaml.contains("saturation:"), "{yaml}");
    env.create(&yaml).await;
    let cb = env
        .wait_for("placed", Duration::from_secs(300), "Succeeded", |cb| {
            phase(cb) == Some(Phase::Succeeded)
        })
        .await;
    let status = cb.status.clone().expect("status");
    // Every saturation level recorded what the engine sustained, the calibration's input.
    let levels: Vec<_> = status
        .points
        .iter()
        .filter(|p| p.kind == goodput::api::PointKind::Saturation)
        .collect();
    assert_eq!(levels.len(), 3, "{:#?}", status.points);
    assert!(
        levels.iter().all(|p| p.engine_rps.is_some_and(|r| r > 0.0)),
        "{levels:#?}"
    );
    let mode = &status.modes[0];
    let placement = mode.placement.clone().expect("the model placed the rates");
    let rates: Vec<f64> = status.points.iter().filter_map(|p| p.offered_rps).collect();
    assert_eq!(
        rates[..2],
        goodput::bench::sweep::placed_rates(placement.predicted_rps, 0.05),
        "{:#?}",
        status.points
    );
    let capacity = status.capacity_rps.expect("a rate passes");
    eprintln!(
        "placement {placement:?}, rates {rates:?}, capacity {capacity}, bracket {:?}, saved {:?}",
        mode.bracket, status.placement_saved_gpu_minutes
    );
    assert!(
        (capacity - placement.predicted_rps).abs() <= 0.10 * placement.predicted_rps,
        "predicted {placement:?}, measured {capacity}"
    );
    let bracket = mode.bracket.expect("a fail above a pass");
    assert!(bracket.width() <= 0.05 + 1e-9, "{bracket:?}");
    assert_eq!(placement.replaced_grid.len(), 5);
    assert_eq!(
        status.placement_saved_gpu_minutes,
        Some(placement.replaced_grid_gpu_minutes - placement.rate_points_gpu_minutes),
        "{status:#?}"
    );
    // The same model as `goodput bench` on the same YAML: its uncalibrated capacity is
    // the same bisection of the same seeded schedule.
    let local = bench(&yaml, env.dir.path());
    let model = local["modes"][0]["prediction"]["model_capacity_rps"]
        .as_f64()
        .expect("bench placed its rates too");
    assert_eq!(model, placement.model_capacity_rps);
}

/// An operator killed after the first point is replaced; the benchmark finishes with every
/// point once.
pub async fn a_restarted_operator_loses_and_repeats_no_point(env: &Env) {
    let mut first = env.operator();
    env.create(&benchmark_yaml("resume", "6, 9, 24")).await;
    env.wait_for(
        "resume",
        Duration::from_secs(180),
        "a first finished point",
        |cb| !points(cb).is_empty(),
    )
    .await;
    first.kill();
    let _second = env.operator();
    let cb = env
        .wait_for("resume", Duration::from_secs(240), "Succeeded", |cb| {
            phase(cb) == Some(Phase::Succeeded)
        })
        .await;
    let rates: Vec<Option<f64>> = points(&cb).iter().map(|p| p.offered_rps).collect();
    assert_eq!(
        rates,
        [Some(6.0), Some(9.0), Some(24.0)],
        "no point lost or run twice"
    );
    let count = env.jobs_of(&cb).await.len();
    assert_eq!(count, 3, "one Job per point");
    // The capacity is the one its recorded points give (9 RPS on a quiet machine; a loaded
    // one may fail a point, and that is a measurement, not a lost point).
    let passed = points(&cb)
        .iter()
        .filter(|p| p.valid && p.verdict == goodput::api::FinishedPoint::PASS)
        .filter_map(|p| p.offered_rps)
        .reduce(f64::max);
    assert_eq!(cb.status.as_ref().and_then(|s| s.capacity_rps), passed);
}

/// A spec the validator refuses: `SpecValid=False`, a Warning Event, no Job, no reconcile
/// loop.
pub async fn an_invalid_spec_is_a_condition_and_an_event_with_no_job_and_no_hot_loop(env: &Env) {
    let operator = env.operator();
    // A mix that does not sum to 1: the manifest validator refuses it.
    let yaml = benchmark_yaml("broken", "6").replace(
        "mix: 0.5, input_tokens: 2048",
        "mix: 0.7, input_tokens: 2048",
    );
    env.create(&yaml).await;
    let cb = env
        .wait_for("broken", Duration::from_secs(30), "SpecValid=False", |cb| {
            cb.status.as_ref().is_some_and(|s| {
                goodput::api::conditions::find(&s.conditions, "SpecValid")
                    .is_some_and(|c| c.status == "False")
            })
        })
        .await;
    let uid = cb.metadata.uid.clone();
    let status = cb.status.clone().expect("status");
    let valid = goodput::api::conditions::find(&status.conditions, "SpecValid").expect("SpecValid");
    assert_eq!(valid.reason, "InvalidSpec");
    assert!(valid.message.contains("mix"), "{}", valid.message);
    assert_eq!(status.phase, Some(Phase::Failed));

    let events: Api<Event> = env.api();
    let warning = env
        .within(
            Duration::from_secs(10),
            "a Warning Event",
            crate::harness::warning_event(&events, "broken", "InvalidSpec"),
        )
        .await;
    assert_eq!(warning.involved_object.uid, uid);

    // No Job, and no reconcile loop: the count stands still while nothing changes.
    let jobs = env.jobs_of(&cb).await;
    assert!(jobs.is_empty(), "{jobs:?}");
    tokio::time::sleep(env.settle).await;
    let before = operator.reconciles().await.expect("metrics");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = operator.reconciles().await.expect("metrics");
    assert_eq!(before, after, "reconciles while nothing changed");
}

/// Deleting a benchmark while a point runs removes its Jobs, ConfigMaps and simulated
/// engine.
pub async fn deleting_a_running_benchmark_removes_what_it_created(env: &Env) {
    let _operator = env.operator();
    env.create(&benchmark_yaml("doomed", "6, 9, 12, 24")).await;
    env.wait_for(
        "doomed",
        Duration::from_secs(120),
        "a running point",
        |cb| {
            cb.status
                .as_ref()
                .is_some_and(|s| s.current_point.is_some())
        },
    )
    .await;
    let api: Api<CapacityBenchmark> = env.api();
    api.delete("doomed", &DeleteParams::default())
        .await
        .expect("delete");
    env.within(
        Duration::from_secs(30),
        "owned Jobs, ConfigMaps and the simulated engine are deleted",
        async {
            while env.owned_by_label("doomed").await > 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        },
    )
    .await;
}

/// Two operators: only the Lease holder reconciles; when it dies without releasing the
/// Lease, the standby takes over within the lease and finishes the benchmark.
pub async fn only_the_leader_reconciles_and_a_standby_takes_over_within_the_lease(env: &Env) {
    let lease = |id: &'static str| {
        [
            "--identity",
            id,
            "--lease-duration-s",
            "2",
            "--lease-renew-s",
            "0.5",
        ]
    };
    let mut a = env.operator_with(&lease("a"));
    env.within(Duration::from_secs(20), "the first operator leads", async {
        while a.leader().await != Some(1) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let b = env.operator_with(&lease("b"));
    env.create(&benchmark_yaml("ha", "6, 9, 24")).await;
    env.wait_for(
        "ha",
        Duration::from_secs(180),
        "a first finished point",
        |cb| !points(cb).is_empty(),
    )
    .await;
    assert_eq!(b.leader().await, Some(0), "the standby does not lead");
    assert_eq!(
        b.reconciles().await,
        Some(0),
        "the standby never reconciles"
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = env.api();
    let holder = leases
        .get("goodput-operator")
        .await
        .expect("the Lease")
        .spec
        .and_then(|l| l.holder_identity);
    assert_eq!(holder.as_deref(), Some("a"));

    // The leader dies without releasing its claim: the standby takes over once it lapses.
    a.kill();
    let killed = Instant::now();
    env.within(Duration::from_secs(20), "the standby leads", async {
        while b.leader().await != Some(1) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "took over after {took:?} (lease 2 s, renewals every 0.5 s)"
    );
    let cb = env
        .wait_for("ha", Duration::from_secs(240), "Succeeded", |cb| {
            phase(cb) == Some(Phase::Succeeded)
        })
        .await;
    let rates: Vec<Option<f64>> = points(&cb).iter().map(|p| p.offered_rps).collect();
    assert_eq!(rates, [Some(6.0), Some(9.0), Some(24.0)]);
}
