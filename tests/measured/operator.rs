//! `goodput operator` on the in-repo test cluster: real HTTPS API server, the real
//! `kube::Client`, pods as processes of the real `goodput` binary. A benchmark against the
//! simulated engine runs its points as Jobs and reaches the capacity `goodput bench` finds
//! on the same spec; a restarted operator loses and repeats nothing; an invalid spec waits
//! quietly; deleting a benchmark removes what it created. The scenarios are shared with the
//! real-cluster suite (`tests/measured/e2e.rs`) in `support/scenarios.rs`.

use crate::harness;
use crate::scenarios;
use harness::{Env, Operator, benchmark_yaml, create, phase, points, setup, wait_for};

use std::time::Duration;

use goodput::api::{CapacityBenchmark, FinishedPoint, Phase};
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::ListParams;

/// Benchmarks measure latency on a 2-core machine: one test at a time.
use crate::MACHINE;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_benchmark_runs_as_jobs_and_finds_the_capacity_bench_finds() {
    let _machine = MACHINE.whole().await;
    let env = Env::test_cluster().await;
    scenarios::a_simulated_benchmark_finds_the_capacity_bench_finds(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturation_sweep_places_the_rates_with_the_engine_model() {
    let _machine = MACHINE.whole().await;
    let env = Env::test_cluster().await;
    scenarios::a_saturation_sweep_places_the_rates_with_the_engine_model(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_operator_loses_and_repeats_no_point() {
    let _machine = MACHINE.whole().await;
    let env = Env::test_cluster().await;
    scenarios::a_restarted_operator_loses_and_repeats_no_point(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_spec_is_a_condition_and_an_event_with_no_job_and_no_hot_loop() {
    let _machine = MACHINE.part().await;
    let env = Env::test_cluster().await;
    scenarios::an_invalid_spec_is_a_condition_and_an_event_with_no_job_and_no_hot_loop(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_benchmark_removes_what_it_created() {
    let _machine = MACHINE.part().await;
    let env = Env::test_cluster().await;
    scenarios::deleting_a_running_benchmark_removes_what_it_created(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_reconciles_and_a_standby_takes_over_within_the_lease() {
    let _machine = MACHINE.whole().await;
    let env = Env::test_cluster().await;
    scenarios::only_the_leader_reconciles_and_a_standby_takes_over_within_the_lease(&env).await;
}

// Faults only the test cluster can inject (killed pods, unpullable images).

/// The names of the Jobs in `default`.
async fn job_names(client: &kube::Client) -> Vec<String> {
    Api::<Job>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("jobs")
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect()
}

/// A benchmark of [`benchmark_yaml`] with another `spec.target`.
fn with_target(yaml: String, target: &str) -> String {
    const SIMULATED: &str = "simulated: {preset: qwen2.5-7b-h100, overrides: {prefix_caching: true}, replicas: 1, timeScale: 20, streamInterval: 8}";
    assert!(yaml.contains(SIMULATED), "the fixture's target moved");
    yaml.replace(SIMULATED, target)
}

/// The first Warning Event with this reason about `name`, waiting up to `timeout`.
async fn warning(
    client: &kube::Client,
    name: &str,
    reason: &str,
    timeout: Duration,
) -> k8s_openapi::api::core::v1::Event {
    let events = Api::namespaced(client.clone(), "default");
    tokio::time::timeout(timeout, harness::warning_event(&events, name, reason))
        .await
        .unwrap_or_else(|_| panic!("no Warning Event {reason} about {name}"))
}

/// A measured point's Job and its merged `slo-report.json` (from the `<job>-point`
/// ConfigMap).
async fn merged_report(client: &kube::Client, p: &FinishedPoint) -> (String, serde_json::Value) {
    let map = p
        .result_config_map
        .as_deref()
        .unwrap_or_else(|| panic!("the point measured: {p:#?}"));
    let job = map.strip_suffix("-point").expect("a point ConfigMap");
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    let data = maps
        .get(map)
        .await
        .expect("the point ConfigMap")
        .data
        .expect("data");
    let report = serde_json::from_str(&data["slo-report.json"]).expect("the merged report parses");
    (job.to_owned(), report)
}

fn condition<'a>(
    cb: &'a CapacityBenchmark,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    cb.status
        .as_ref()
        .and_then(|s| goodput::api::conditions::find(&s.conditions, type_))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_loadgen_pod_is_retried_and_one_that_keeps_crashing_leaves_an_invalid_point() {
    let _machine = MACHINE.part().await;
    let s = setup().await;
    let _operator = s.operator(
        "goodput",
        &["--pod-retries", "1", "--shard-start-lead-s", "5"],
    );
    // The first attempt of the first point crashes once; every attempt of the second
    // point (two shards) crashes. The killer stops once it has killed a pod of each of
    // those three Jobs.
    let doomed = |job: &str| job == "crash-g1-p0" || job.starts_with("crash-g1-p1");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(s.client.clone(), "default");
    let kubelet_pods = pods.clone();
    let cluster = &s.cluster;
    let killer = async {
        let mut killed = std::collections::BTreeSet::new();
        loop {
            let list = kubelet_pods
                .list(&ListParams::default().labels("app.kubernetes.io/component=loadgen"))
                .await
                .expect("pods");
            for p in list.items {
                let name = p.metadata.name.clone().unwrap_or_default();
                let job = p
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("job-name").cloned())
                    .unwrap_or_default();
                let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                if doomed(&job) && running && cluster.kubelet().is_running("default", &name) {
                    cluster.kubelet().kill("default", &name);
                    killed.insert(job);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            if killed.len() >= 3 {
                return killed;
            }
        }
    };
    create(&s.client, &benchmark_yaml("crash", "6, 24")).await;
    let killed = tokio::time::timeout(Duration::from_secs(180), killer)
        .await
        .expect("three attempts were killed");
    let cb = harness::succeeded(&s.client, "crash", Duration::from_secs(180)).await;
    let finished = points(&cb);
    let at = |rate: f64| {
        finished
            .iter()
            .find(|p| p.offered_rps == Some(rate))
            .unwrap_or_else(|| panic!("no {rate} RPS point: {finished:#?} (killed {killed:?})"))
    };
    // The retried attempt measured the point: its result is the attempt's, with no trace
    // of the crash (whether it passed is the measurement's business: on a loaded machine
    // the client may fall behind its schedule).
    let retried_point = at(6.0);
    assert_eq!(
        retried_point.result_config_map.as_deref(),
        Some("crash-g1-p0-a1-point"),
        "the retried point measured: {retried_point:#?}"
    );
    assert!(
        !retried_point.reasons.iter().any(|r| r.contains("exit 137")),
        "{retried_point:#?}"
    );
    let invalid = at(24.0);
    assert_eq!(invalid.verdict, FinishedPoint::INVALID);
    assert!(!invalid.valid && invalid.result_config_map.is_none());
    let reason = invalid.reasons.join(" ");
    assert!(
        reason.contains("attempt 2 of 2") && reason.contains("exit 137"),
        "the reason says what happened: {reason}"
    );
    let retried = warning(&s.client, "crash", "PointRetried", Duration::from_secs(5)).await;
    assert!(
        retried
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("crash-g1-p0-a1"),
        "{retried:?}"
    );
    warning(&s.client, "crash", "PointFailed", Duration::from_secs(5)).await;
    // The invalid point is no evidence: it bounds nothing (the sweep may go on between the
    // rates it measured), and the capacity rests on the highest measured pass.
    let capacity = cb.status.as_ref().and_then(|s| s.capacity_rps);
    let highest_pass = finished
        .iter()
        .filter(|p| p.valid && p.verdict == FinishedPoint::PASS)
        .filter_map(|p| p.offered_rps)
        .reduce(f64::max);
    assert_eq!(capacity, highest_pass, "{finished:#?}");
    assert!(capacity.is_none_or(|c| c < 24.0), "{capacity:?}");
    let left: Vec<String> = job_names(&s.client).await;
    assert!(
        left.iter().any(|j| j == "crash-g1-p0-a1")
            && left.iter().any(|j| j == "crash-g1-p1-a1")
            && !left
                .iter()
                .any(|j| j == "crash-g1-p0" || j == "crash-g1-p1"),
        "failed attempts are removed, the last ones kept: {left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_pods_never_start_times_out_with_a_condition() {
    let _machine = MACHINE.part().await;
    let s = setup().await;
    s.cluster.kubelet().set_image_pullable("goodput", false);
    let _operator = s.operator("goodput", &["--pod-start-timeout-s", "6"]);
    // A URL target: nothing to deploy, so only the loadgen pods need the image.
    let yaml = with_target(benchmark_yaml("stuck", "6, 24"), "url: http://127.0.0.1:9");
    create(&s.client, &yaml).await;
    let cb = wait_for(
        &s.client,
        "stuck",
        Duration::from_secs(30),
        "PodsPending",
        |cb| condition(cb, "Progressing").is_some_and(|c| c.reason == "PodsPending"),
    )
    .await;
    let pending = condition(&cb, "Progressing").expect("Progressing");
    assert!(
        pending.message.contains("stuck-g1-p0") && pending.message.contains("ImagePull"),
        "{}",
        pending.message
    );
    // Each point gives up after the start timeout; the benchmark goes on to the next.
    let cb = wait_for(
        &s.client,
        "stuck",
        Duration::from_secs(60),
        "two finished points",
        |cb| points(cb).len() >= 2,
    )
    .await;
    for p in &points(&cb)[..2] {
        assert_eq!(p.verdict, FinishedPoint::INVALID, "{p:#?}");
        let reason = p.reasons.join(" ");
        assert!(
            reason.contains("never started within 6 s") && reason.contains("ImagePull"),
            "{reason}"
        );
    }
    warning(&s.client, "stuck", "PointFailed", Duration::from_secs(5)).await;
    let jobs: Vec<String> = job_names(&s.client).await;
    assert!(
        !jobs
            .iter()
            .any(|j| j == "stuck-g1-p0" || j == "stuck-g1-p1"),
        "Jobs that never started are removed: {jobs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_empty_service_target_is_a_condition_and_an_event() {
    let _machine = MACHINE.part().await;
    let s = setup().await;
    let _operator = s.operator("goodput", &[]);
    let yaml = with_target(
        benchmark_yaml("nosvc", "6"),
        "service: {name: qwen, port: 8000}",
    );
    create(&s.client, &yaml).await;
    let cb = wait_for(
        &s.client,
        "nosvc",
        Duration::from_secs(30),
        "TargetReachable=False",
        |cb| condition(cb, "TargetReachable").is_some_and(|c| c.status == "False"),
    )
    .await;
    let c = condition(&cb, "TargetReachable").expect("TargetReachable");
    assert_eq!(c.reason, "TargetNotFound");
    assert!(c.message.contains("default/qwen"), "{}", c.message);
    warning(&s.client, "nosvc", "TargetNotFound", Duration::from_secs(5)).await;

    // The Service appears, selecting no pod: still not reachable, now for that reason.
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "qwen", "namespace": "default"},
        "spec": {"selector": {"app": "qwen"}, "ports": [{"port": 8000}]}
    }))
    .expect("a Service literal");
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(s.client.clone(), "default")
        .create(&kube::api::PostParams::default(), &svc)
        .await
        .expect("the Service is created");
    let cb = wait_for(
        &s.client,
        "nosvc",
        Duration::from_secs(60),
        "NoReadyEndpoints",
        |cb| condition(cb, "TargetReachable").is_some_and(|c| c.reason == "NoReadyEndpoints"),
    )
    .await;
    assert_eq!(phase(&cb), Some(Phase::Pending));
    warning(
        &s.client,
        "nosvc",
        "NoReadyEndpoints",
        Duration::from_secs(5),
    )
    .await;
    let jobs = job_names(&s.client).await;
    assert!(jobs.is_empty(), "no load without a target");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_whose_role_may_not_create_jobs_says_forbidden_and_backs_off() {
    let _machine = MACHINE.part().await;
    let s = setup().await;
    // A role with everything the operator uses except writing Jobs (it may still watch
    // them): RBAC denies the point's Job.
    let rbac = serde_json::json!([
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "operator", "namespace": "default"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "goodput-no-jobs"},
         "rules": [
            {"apiGroups": ["", "apps", "goodput.dev", "coordination.k8s.io", "events.k8s.io",
                           "discovery.k8s.io", "rbac.authorization.k8s.io"],
             "resources": ["*"], "verbs": ["*"]},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]}
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "goodput-no-jobs"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "goodput-no-jobs"},
         "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": "default"}]}
    ]);
    for object in rbac.as_array().expect("a list") {
        let object: kube::api::DynamicObject =
            serde_json::from_value(object.clone()).expect("an object");
        let gvk = kube::api::GroupVersionKind::try_from(
            object.types.as_ref().expect("apiVersion and kind"),
        )
        .expect("a GVK");
        let (resource, caps) = kube::discovery::pinned_kind(&s.client, &gvk)
            .await
            .expect("the kind is served");
        let api: Api<kube::api::DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced
        {
            Api::namespaced_with(s.client.clone(), "default", &resource)
        } else {
            Api::all_with(s.client.clone(), &resource)
        };
        api.create(&kube::api::PostParams::default(), &object)
            .await
            .expect("RBAC object created");
    }
    let kubeconfig = s.dir.path().join("operator-kubeconfig");
    std::fs::write(&kubeconfig, s.cluster.kubeconfig_for("default", "operator"))
        .expect("kubeconfig written");
    let log = s.dir.path().join("operator.log");
    let _operator = Operator::start(&kubeconfig, "goodput", &log);
    let yaml = with_target(benchmark_yaml("denied", "6"), "url: http://127.0.0.1:9");
    create(&s.client, &yaml).await;
    let cb = wait_for(
        &s.client,
        "denied",
        Duration::from_secs(30),
        "Forbidden",
        |cb| condition(cb, "Progressing").is_some_and(|c| c.reason == "Forbidden"),
    )
    .await;
    let c = condition(&cb, "Progressing").expect("Progressing");
    assert_eq!(c.status, "False");
    assert!(c.message.contains("Job"), "{}", c.message);
    assert_eq!(phase(&cb), Some(Phase::Pending));
    assert!(points(&cb).is_empty(), "no point recorded on a refusal");
    warning(&s.client, "denied", "Forbidden", Duration::from_secs(5)).await;
    let jobs = job_names(&s.client).await;
    assert!(jobs.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_results_claim_keeps_every_shards_raw_requests() {
    let _machine = MACHINE.part().await;
    let s = setup().await;
    // The test cluster serves no PersistentVolumeClaim objects: a pod's claim is a
    // directory of the cluster, kept across pods.
    let _operator = s.operator("goodput", &["--shard-start-lead-s", "5"]);
    let yaml = benchmark_yaml("sinked", "6, 24") + "  loadgen: {resultsClaim: results}\n";
    create(&s.client, &yaml).await;
    let cb = harness::succeeded(&s.client, "sinked", Duration::from_secs(180)).await;
    let status = cb.status.as_ref().expect("status");
    assert_eq!(status.pack.as_deref(), Some("pvc/results/sinked/g1/"));
    let root = s.cluster.workdir().join("pvcs/default/results/sinked/g1");
    let mut sharded = false;
    // Every measured point, valid or not: an invalid point's requests are evidence too.
    for p in points(&cb).iter().filter(|p| p.result_config_map.is_some()) {
        let (job, report) = merged_report(&s.client, p).await;
        let job = job.as_str();
        let mut shards: Vec<_> = std::fs::read_dir(root.join(job))
            .unwrap_or_else(|e| panic!("{job}'s directory in the claim: {e}"))
            .map(|e| e.expect("an entry").path())
            .collect();
        shards.sort();
        sharded |= shards.len() > 1;
        let rows: u64 = shards
            .iter()
            .map(|dir| {
                let csv = std::fs::read_to_string(dir.join("requests.csv"))
                    .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
                csv.lines().count() as u64 - 1
            })
            .sum();
        assert_eq!(
            Some(rows),
            report["attempted"].as_u64(),
            "{job}: every request the merged report counts is in the claim, once"
        );
    }
    assert!(
        sharded,
        "the 24 RPS point ran in shards: {:#?}",
        points(&cb)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_page_that_does_not_answer_holds_the_points_with_a_condition() {
    let _machine = MACHINE.part().await;
    let s = setup().await;
    let _operator = s.operator("goodput", &[]);
    // A port nothing listens on yet: the engine's page comes up later.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("its address")
        .port();
    let page = format!("http://127.0.0.1:{port}");
    let yaml = with_target(
        benchmark_yaml("nopage", "6"),
        &format!("url: {page}\n    metricsUrls: ['{page}']"),
    );
    create(&s.client, &yaml).await;
    let cb = wait_for(
        &s.client,
        "nopage",
        Duration::from_secs(30),
        "MetricsUnreachable",
        |cb| condition(cb, "TargetReachable").is_some_and(|c| c.reason == "MetricsUnreachable"),
    )
    .await;
    let c = condition(&cb, "TargetReachable").expect("TargetReachable");
    assert_eq!(c.status, "False");
    assert!(
        c.message.contains(&format!("{page}/metrics")),
        "the message names the page: {}",
        c.message
    );
    assert_eq!(phase(&cb), Some(Phase::Pending));
    warning(
        &s.client,
        "nopage",
        "MetricsUnreachable",
        Duration::from_secs(5),
    )
    .await;
    assert!(
        job_names(&s.client).await.is_empty(),
        "no point without its engine page"
    );

    // The engine comes up: a vLLM-like page, version and model list. The next try (after
    // the backoff) finds it, says what it runs, and starts the point.
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(|| async {
                "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n\
                 # TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
            }),
        )
        .route(
            "/version",
            axum::routing::get(|| async { axum::Json(serde_json::json!({"version": "0.11.0"})) }),
        );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the page's port is still free");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let cb = wait_for(
        &s.client,
        "nopage",
        Duration::from_secs(40),
        "a point started",
        |cb| {
            cb.status
                .as_ref()
                .is_some_and(|s| s.current_point.is_some())
        },
    )
    .await;
    let c = condition(&cb, "TargetReachable").expect("TargetReachable");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "Reachable")
    );
    let resolved = cb
        .status
        .as_ref()
        .and_then(|s| s.resolved.clone())
        .expect("the identity is recorded");
    assert_eq!(resolved.engine, "vllm", "found by its metric names");
    assert_eq!(resolved.engine_version.as_deref(), Some("0.11.0"));
    assert_eq!(job_names(&s.client).await, ["nopage-g1-p0"]);
    server.abort();
}

/// A loadgen image with two faults: in the first point, shard 1 exits 0 without running
/// (it never reports); in the second, every shard reports and then lingers, so the test
/// can spoil a result before the Job completes.
const FAULTY_LOADGEN: &str = r#"case "$*" in
  *"--result-config-map faulty-g1-p0-1 "*) exit 0 ;;
  *"--result-config-map faulty-g1-p1-"*) "$GOODPUT" "$@"; rc=$?; sleep 4; exit $rc ;;
  *) exec "$GOODPUT" "$@" ;;
esac"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_never_reports_or_a_result_that_does_not_parse_leaves_an_invalid_point() {
    let _machine = MACHINE.part().await;
    let script = format!("GOODPUT='{}'\n{FAULTY_LOADGEN}", harness::GOODPUT);
    let s = harness::setup_with_scripts(&[("goodput-faulty", &script)]).await;
    let _operator = s.operator(
        "goodput-faulty",
        &["--pod-retries", "0", "--shard-start-lead-s", "5"],
    );
    let yaml = benchmark_yaml("faulty", "6, 8") + "  loadgen: {shards: 2}\n";
    create(&s.client, &yaml).await;
    // Spoil shard 0's result of the second point once it is written, while its pod
    // lingers (the Job is not complete, so the operator has not read it).
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(s.client.clone(), "default");
    let spoiled = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            if let Some(cm) = maps.get_opt("faulty-g1-p1-0").await.expect("get")
                && goodput::loadgen::handoff::ShardResult::is_written(&cm)
            {
                let mut binary = cm.binary_data.clone().expect("written");
                for v in binary.values_mut() {
                    *v = k8s_openapi::ByteString(b"not gzip".to_vec());
                }
                maps.patch(
                    "faulty-g1-p1-0",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(serde_json::json!({"binaryData": binary})),
                )
                .await
                .expect("spoiled");
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(spoiled.is_ok(), "the second point's shard 0 reported");
    let cb = harness::succeeded(&s.client, "faulty", Duration::from_secs(120)).await;
    let finished = points(&cb);
    assert!(finished.len() >= 2, "{finished:#?}");
    assert!(
        finished[..2]
            .iter()
            .all(|p| p.verdict == FinishedPoint::INVALID && !p.valid),
        "no point passes on partial data: {finished:#?}"
    );
    let never = finished[0].reasons.join(" ");
    assert!(
        never.contains("shard 1 never reported") && never.contains("faulty-g1-p0-1"),
        "{never}"
    );
    let unreadable = finished[1].reasons.join(" ");
    assert!(
        unreadable.contains("shard 0's result ConfigMap faulty-g1-p1-0 does not parse"),
        "{unreadable}"
    );
    warning(&s.client, "faulty", "PointFailed", Duration::from_secs(5)).await;
    // The first point was not evidence, so its rate ran once more (the second point, whose
    // result was spoiled); the capacity rests on the valid points only.
    assert_eq!(finished[1].offered_rps, finished[0].offered_rps);
    let highest_pass = finished
        .iter()
        .filter(|p| p.valid && p.verdict == FinishedPoint::PASS)
        .filter_map(|p| p.offered_rps)
        .reduce(f64::max);
    let capacity = cb.status.as_ref().and_then(|s| s.capacity_rps);
    assert_eq!(capacity, highest_pass, "{finished:#?}");
}

/// moto's S3-compatible server on a free loopback port (`moto_server`, installed by
/// `testcluster/scripts/install-moto.sh`; [`MOTO_SERVER`] names it), stopped on drop.
struct S3Server {
    child: std::process::Child,
    endpoint: String,
}

/// The variable naming the `moto_server` binary (default: where `install-moto.sh` puts it
/// with no argument, `target/moto/bin/moto_server`).
const MOTO_SERVER: &str = "GOODPUT_MOTO_SERVER";

impl S3Server {
    async fn start(log: &std::path::Path) -> S3Server {
        let bin = std::env::var_os(MOTO_SERVER)
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/moto/bin/moto_server")
            });
        assert!(
            bin.is_file(),
            "moto_server is not at {}: install it with `bash testcluster/scripts/install-moto.sh` \
             (needs python3 with venv and pip; .ci/run does this) and set {MOTO_SERVER} to the \
             path it prints",
            bin.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let out = std::fs::File::create(log).expect("the moto log");
        let child = std::process::Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(out.try_clone().expect("the moto log"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", bin.display()));
        let server = S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let http = reqwest::Client::new();
        for _ in 0..300 {
            if http.get(&server.endpoint).send().await.is_ok() {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "moto_server did not answer on {} within 30 s: {}",
            server.endpoint,
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }

    /// Creates a bucket (moto serves S3 without checking signatures).
    async fn create_bucket(&self, bucket: &str) {
        let response = reqwest::Client::new()
            .put(format!("{}/{bucket}", self.endpoint))
            .send()
            .await
            .expect("moto answers");
        assert!(response.status().is_success(), "{response:?}");
    }

    /// An object_store client for `bucket` on this server, as a user of the results would
    /// read them.
    fn store(&self, bucket: &str) -> object_store::aws::AmazonS3 {
        let _ = rustls::crypto::ring::default_provider().install_default();
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(bucket)
            .with_access_key_id("reader")
            .with_secret_access_key("reader-secret")
            .build()
            .expect("the client builds")
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates the Secret `name` with AWS-style credentials in `default`.
async fn credentials_secret(client: &kube::Client, name: &str, key_id: &str, secret: &str) {
    use k8s_openapi::ByteString;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), "default");
    let data = [
        ("AWS_ACCESS_KEY_ID", key_id),
        ("AWS_SECRET_ACCESS_KEY", secret),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
    .collect();
    secrets
        .create(
            &kube::api::PostParams::default(),
            &k8s_openapi::api::core::v1::Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            },
        )
        .await
        .expect("the Secret is created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_results_bucket_keeps_every_shards_raw_requests() {
    use futures_util::TryStreamExt as _;
    use object_store::{ObjectStore as _, ObjectStoreExt as _};
    let _machine = MACHINE.part().await;
    let s = setup().await;
    let s3 = S3Server::start(&s.dir.path().join("moto.log")).await;
    s3.create_bucket("goodput-results").await;
    const KEY_ID: &str = "AKIDBUCKETTEST";
    const SECRET: &str = "bucket-test-secret-value";
    credentials_secret(&s.client, "s3-credentials", KEY_ID, SECRET).await;
    let _operator = s.operator("goodput", &["--shard-start-lead-s", "5"]);
    let yaml = benchmark_yaml("bucketed", "6, 24")
        + &format!(
            "  loadgen:\n    resultsBucket: {{url: s3://goodput-results/runs/, endpoint: '{}', \
             region: us-east-1, allowHttp: true, credentialsSecret: s3-credentials}}\n",
            s3.endpoint
        );
    create(&s.client, &yaml).await;
    let cb = harness::succeeded(&s.client, "bucketed", Duration::from_secs(180)).await;
    let status = cb.status.as_ref().expect("status");
    assert_eq!(
        status.pack.as_deref(),
        Some("s3://goodput-results/runs/bucketed/g1/")
    );
    let store = s3.store("goodput-results");
    let listed: Vec<object_store::ObjectMeta> = store
        .list(Some(&object_store::path::Path::from("runs/bucketed/g1")))
        .try_collect()
        .await
        .expect("the bucket lists");
    let keys: std::collections::BTreeSet<String> =
        listed.iter().map(|o| o.location.to_string()).collect();
    let jobs: Api<Job> = Api::namespaced(s.client.clone(), "default");
    let mut sharded = false;
    let mut expected = std::collections::BTreeSet::new();
    // Both rates measured (valid or not: on a loaded machine a client may fall behind and
    // the sweep add rates); every measured point's files are in the bucket.
    for rate in [6.0, 24.0] {
        assert!(
            points(&cb)
                .iter()
                .any(|p| p.result_config_map.is_some() && p.offered_rps == Some(rate)),
            "a measured {rate} RPS point: {:#?}",
            points(&cb)
        );
    }
    for p in points(&cb).iter().filter(|p| p.result_config_map.is_some()) {
        let (job, report) = merged_report(&s.client, p).await;
        let job = job.as_str();
        let spec = jobs.get(job).await.expect("the point's Job").spec;
        let shards = spec.and_then(|s| s.completions).expect("completions");
        sharded |= shards > 1;
        let mut rows = 0;
        for shard in 0..shards {
            let dir = format!("runs/bucketed/g1/{job}/shard-{shard}");
            for file in ["engine-metrics.json", "requests.csv", "summary.json"] {
                expected.insert(format!("{dir}/{file}"));
            }
            let csv = store
                .get(&object_store::path::Path::from(format!(
                    "{dir}/requests.csv"
                )))
                .await
                .unwrap_or_else(|e| panic!("{dir}/requests.csv: {e} (the bucket holds {keys:#?})"))
                .bytes()
                .await
                .expect("requests.csv reads");
            rows += String::from_utf8_lossy(&csv).lines().count() as u64 - 1;
        }
        assert_eq!(
            Some(rows),
            report["attempted"].as_u64(),
            "{job}: every request the merged report counts is in the bucket, once"
        );
    }
    assert_eq!(
        keys, expected,
        "every shard of every point uploaded its three files, and nothing else"
    );
    assert!(
        sharded,
        "the 24 RPS point ran in shards: {:#?}",
        points(&cb)
    );
    // The credentials reach the pods from the Secret, never through the Job or the status.
    for job in job_names(&s.client).await {
        let text = serde_json::to_string(&jobs.get(&job).await.expect("a Job")).expect("JSON");
        assert!(!text.contains(SECRET) && !text.contains(KEY_ID), "{text}");
        assert!(text.contains("\"secretKeyRef\""), "{text}");
    }
    let text = serde_json::to_string(&cb).expect("JSON");
    assert!(!text.contains(SECRET) && !text.contains(KEY_ID));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_results_bucket_that_refuses_the_upload_leaves_an_invalid_point_that_says_why() {
    let _machine = MACHINE.part().await;
    let s = setup().await;
    let s3 = S3Server::start(&s.dir.path().join("moto.log")).await;
    credentials_secret(&s.client, "s3-credentials", "AKIDMISSING", "missing-secret").await;
    let _operator = s.operator("goodput", &["--pod-retries", "0"]);
    // No bucket was created: every upload is refused with NoSuchBucket.
    let yaml = benchmark_yaml("unbucketed", "6")
        + &format!(
            "  loadgen:\n    resultsBucket: {{url: 's3://no-such-bucket', endpoint: '{}', \
             allowHttp: true, credentialsSecret: s3-credentials}}\n",
            s3.endpoint
        );
    create(&s.client, &yaml).await;
    let cb = wait_for(
        &s.client,
        "unbucketed",
        Duration::from_secs(180),
        "a finished point",
        |cb| !points(cb).is_empty(),
    )
    .await;
    let point = &points(&cb)[0];
    assert_eq!(point.verdict, FinishedPoint::INVALID, "{point:#?}");
    assert!(!point.valid);
    let reason = point.reasons.join(" ");
    assert!(
        reason
            .contains("cannot upload s3://no-such-bucket/unbucketed/g1/unbucketed-g1-p0/shard-0/")
            && reason.contains("NoSuchBucket"),
        "the reason names the object and the server's answer: {reason}"
    );
    assert_eq!(
        cb.status.as_ref().and_then(|s| s.pack.as_deref()),
        Some("s3://no-such-bucket/unbucketed/g1/")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_given_namespaces_reconciles_those_and_no_other() {
    let _machine = MACHINE.part().await;
    let s = setup().await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(s.client.clone());
    for ns in ["team-a", "team-b", "team-c"] {
        let namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))
            .expect("a Namespace");
        namespaces
            .create(&kube::api::PostParams::default(), &namespace)
            .await
            .expect("the namespace is created");
    }
    // The comma form the chart's GOODPUT_WATCH_NAMESPACE uses.
    let _operator = s.operator("goodput", &["--namespace", "team-a,team-b"]);
    // A mix that does not sum to 1: refused without a Job, so only the status tells
    // whether the operator reconciled it.
    let yaml = benchmark_yaml("broken", "6").replace(
        "mix: 0.5, input_tokens: 2048",
        "mix: 0.7, input_tokens: 2048",
    );
    let mut cb: CapacityBenchmark = serde_saphyr::from_str(&yaml).expect("YAML parses");
    for ns in ["team-a", "team-b", "team-c"] {
        cb.metadata.namespace = Some(ns.into());
        Api::<CapacityBenchmark>::namespaced(s.client.clone(), ns)
            .create(&kube::api::PostParams::default(), &cb)
            .await
            .expect("the benchmark is accepted");
    }
    let invalid =
        |cb: &CapacityBenchmark| condition(cb, "SpecValid").is_some_and(|c| c.status == "False");
    for ns in ["team-a", "team-b"] {
        let api: Api<CapacityBenchmark> = Api::namespaced(s.client.clone(), ns);
        tokio::time::timeout(Duration::from_secs(30), async {
            while !api.get("broken").await.is_ok_and(|cb| invalid(&cb)) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{ns}: no SpecValid=False within 30 s"));
    }
    // Both watched namespaces are done; the third, unwatched, was never touched.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let other = Api::<CapacityBenchmark>::namespaced(s.client.clone(), "team-c")
        .get("broken")
        .await
        .expect("the benchmark");
    assert!(other.status.is_none(), "{:#?}", other.status);
}
