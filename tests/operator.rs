//! `goodput operator` on the in-repo test cluster: real HTTPS API server, the real
//! `kube::Client`, pods as processes of the real `goodput` binary. A benchmark against the
//! simulated engine runs its points as Jobs and reaches the capacity `goodput bench` finds
//! on the same spec; a restarted operator loses and repeats nothing; an invalid spec waits
//! quietly; deleting a benchmark removes what it created.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use goodput::api::{CapacityBenchmark, Phase};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams};

#[path = "support/operator.rs"]
mod harness;
use harness::{GOODPUT, Operator, benchmark_yaml, create, phase, points, setup, wait_for};

/// Benchmarks measure latency on a 2-core machine: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `goodput bench` on the same YAML: its sweep.json.
fn bench(yaml: &str, dir: &Path) -> serde_json::Value {
    let file = dir.join("cb.yaml");
    std::fs::write(&file, yaml).expect("write benchmark");
    let out = dir.join("pack");
    let run = Command::new(GOODPUT)
        .arg("bench")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("bench runs");
    assert!(
        run.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(out.join("sweep.json")).expect("sweep.json");
    serde_json::from_str(&text).expect("sweep.json parses")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_benchmark_runs_as_jobs_and_finds_the_capacity_bench_finds() {
    let _serial = SERIAL.lock().await;
    let s = setup().await;
    let log = s.dir.path().join("operator.log");
    let operator = Operator::start(&s.kubeconfig, "goodput", &log);
    let yaml = benchmark_yaml("sweep", "6, 24");
    create(&s.client, &yaml).await;
    let cb = wait_for(
        &s.client,
        "sweep",
        Duration::from_secs(240),
        "Succeeded",
        |cb| phase(cb) == Some(Phase::Succeeded),
    )
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
    // ceil(30 / (6 × 0.75)) = 7.
    assert_eq!(status.required_replicas, Some(7));
    let ready = goodput::api::conditions::find(&status.conditions, "Ready").expect("Ready");
    assert_eq!(ready.status, "True");
    assert_eq!(status.observed_generation, cb.metadata.generation);

    // Every point was a Job owned by the benchmark; the simulated engine is gone.
    let jobs: Api<Job> = Api::namespaced(s.client.clone(), "default");
    let names: Vec<String> = jobs
        .list(&ListParams::default())
        .await
        .expect("jobs list")
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let deployments: Api<Deployment> = Api::namespaced(s.client.clone(), "default");
    tokio::time::timeout(Duration::from_secs(20), async {
        while deployments
            .get_opt("sweep-sim")
            .await
            .ok()
            .flatten()
            .is_some()
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the simulated engine is removed after the benchmark");

    // Quiet when stable: once finished, nothing changes and nothing is reconciled.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let settled = operator.reconciles().await.expect("metrics");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        operator.reconciles().await,
        Some(settled),
        "reconciles after Succeeded"
    );

    // `goodput bench` on the same YAML runs the same points and finds the same capacity.
    let local = bench(&yaml, s.dir.path());
    let cold = &local["modes"][0];
    let rates: Vec<f64> = cold["points"]
        .as_array()
        .expect("points")
        .iter()
        .filter_map(|p| p["offered_rps"].as_f64())
        .collect();
    assert_eq!(rates, [6.0, 24.0]);
    assert_eq!(cold["capacity_rps"].as_f64(), status.capacity_rps);
    assert_eq!(
        local["plan"]["required_replicas"].as_u64(),
        status.required_replicas.map(u64::from)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_operator_loses_and_repeats_no_point() {
    let _serial = SERIAL.lock().await;
    let s = setup().await;
    let log = s.dir.path().join("operator.log");
    let mut first = Operator::start(&s.kubeconfig, "goodput", &log);
    create(&s.client, &benchmark_yaml("resume", "6, 9, 24")).await;
    wait_for(
        &s.client,
        "resume",
        Duration::from_secs(180),
        "a first finished point",
        |cb| !points(cb).is_empty(),
    )
    .await;
    first.kill();
    let _second = Operator::start(&s.kubeconfig, "goodput", &log);
    let cb = wait_for(
        &s.client,
        "resume",
        Duration::from_secs(240),
        "Succeeded",
        |cb| phase(cb) == Some(Phase::Succeeded),
    )
    .await;
    let rates: Vec<Option<f64>> = points(&cb).iter().map(|p| p.offered_rps).collect();
    assert_eq!(
        rates,
        [Some(6.0), Some(9.0), Some(24.0)],
        "no point lost or run twice"
    );
    let jobs: Api<Job> = Api::namespaced(s.client.clone(), "default");
    let count = jobs
        .list(&ListParams::default())
        .await
        .expect("jobs")
        .items
        .len();
    assert_eq!(count, 3, "one Job per point");
    assert_eq!(cb.status.as_ref().and_then(|s| s.capacity_rps), Some(9.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_spec_is_a_condition_and_an_event_with_no_job_and_no_hot_loop() {
    let _serial = SERIAL.lock().await;
    let s = setup().await;
    let log = s.dir.path().join("operator.log");
    let operator = Operator::start(&s.kubeconfig, "goodput", &log);
    // A mix that does not sum to 1: the manifest validator refuses it.
    let yaml = benchmark_yaml("broken", "6").replace(
        "mix: 0.5, input_tokens: 2048",
        "mix: 0.7, input_tokens: 2048",
    );
    create(&s.client, &yaml).await;
    let cb = wait_for(
        &s.client,
        "broken",
        Duration::from_secs(30),
        "SpecValid=False",
        |cb| {
            cb.status.as_ref().is_some_and(|s| {
                goodput::api::conditions::find(&s.conditions, "SpecValid")
                    .is_some_and(|c| c.status == "False")
            })
        },
    )
    .await;
    let status = cb.status.expect("status");
    let valid = goodput::api::conditions::find(&status.conditions, "SpecValid").expect("SpecValid");
    assert_eq!(valid.reason, "InvalidSpec");
    assert!(valid.message.contains("mix"), "{}", valid.message);
    assert_eq!(status.phase, Some(Phase::Failed));

    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(s.client.clone(), "default");
    let warning = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let list = events.list(&ListParams::default()).await.expect("events");
            if let Some(e) = list.items.into_iter().find(|e| {
                e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some("InvalidSpec")
            }) {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("a Warning Event");
    assert_eq!(warning.involved_object.name.as_deref(), Some("broken"));

    // No Job, and no reconcile loop: the count stands still while nothing changes.
    let jobs: Api<Job> = Api::namespaced(s.client.clone(), "default");
    assert!(
        jobs.list(&ListParams::default())
            .await
            .expect("jobs")
            .items
            .is_empty()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = operator.reconciles().await.expect("metrics");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = operator.reconciles().await.expect("metrics");
    assert_eq!(before, after, "reconciles while nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_benchmark_removes_what_it_created() {
    let _serial = SERIAL.lock().await;
    let s = setup().await;
    let log = s.dir.path().join("operator.log");
    let _operator = Operator::start(&s.kubeconfig, "goodput", &log);
    create(&s.client, &benchmark_yaml("doomed", "6, 9, 12, 24")).await;
    wait_for(
        &s.client,
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
    let api: Api<CapacityBenchmark> = Api::namespaced(s.client.clone(), "default");
    api.delete("doomed", &DeleteParams::default())
        .await
        .expect("delete");
    let jobs: Api<Job> = Api::namespaced(s.client.clone(), "default");
    let maps: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(s.client.clone(), "default");
    let owned = ListParams::default().labels("app.kubernetes.io/managed-by=goodput");
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let j = jobs.list(&owned).await.expect("jobs").items.len();
            let m = maps.list(&owned).await.expect("maps").items.len();
            let d = deployments
                .list(&owned)
                .await
                .expect("deployments")
                .items
                .len();
            if j + m + d == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("owned Jobs, ConfigMaps and the simulated engine are deleted");
    drop(s.cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_reconciles_and_a_standby_takes_over_within_the_lease() {
    let _serial = SERIAL.lock().await;
    let s = setup().await;
    let log = s.dir.path().join("operator.log");
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
    let mut a = Operator::start_with(&s.kubeconfig, "goodput", &log, &lease("a"));
    tokio::time::timeout(Duration::from_secs(20), async {
        while a.leader().await != Some(1) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the first operator leads");
    let b = Operator::start_with(&s.kubeconfig, "goodput", &log, &lease("b"));
    create(&s.client, &benchmark_yaml("ha", "6, 9, 24")).await;
    wait_for(
        &s.client,
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
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(s.client.clone(), "default");
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
    tokio::time::timeout(Duration::from_secs(20), async {
        while b.leader().await != Some(1) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the standby leads");
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "took over after {took:?} (lease 2 s, renewals every 0.5 s)"
    );
    let cb = wait_for(
        &s.client,
        "ha",
        Duration::from_secs(240),
        "Succeeded",
        |cb| phase(cb) == Some(Phase::Succeeded),
    )
    .await;
    let rates: Vec<Option<f64>> = points(&cb).iter().map(|p| p.offered_rps).collect();
    assert_eq!(rates, [Some(6.0), Some(9.0), Some(24.0)]);
}
