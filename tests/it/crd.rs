//! The generated `CapacityBenchmark` CRD in an API server (the workspace's test cluster,
//! which checks schemas and runs `x-kubernetes-validations` like kube-apiserver): its CEL
//! rules refuse what they should and nothing else, the status round-trips through
//! `/status`, and `kubectl get cb` reads as the story of the run.

use std::path::Path;

use goodput::api::conditions::{self, Status, reason};
use goodput::api::{
    CacheMode, CapacityBenchmark, CapacityBenchmarkStatus, CurrentPoint, FinishedPoint,
    ModeCapacity, Phase, PointKind, ResolvedIdentity, ServiceTarget,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use testcluster::cluster::{Cluster, ClusterConfig};

use crate::crd_install as crd;
use crd::install_crd;

/// A cluster with the committed CRD (`goodput crds`) installed and established, and an
/// admin client for it.
async fn cluster_with_crd() -> (Cluster, kube::Client) {
    let cluster = Cluster::start(ClusterConfig::default())
        .await
        .expect("cluster starts");
    let kubeconfig = Kubeconfig::from_yaml(&cluster.kubeconfig()).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    let client = kube::Client::try_from(config).expect("client builds");
    install_crd(&client, &goodput::api::crds_yaml()).await;
    (cluster, client)
}

/// The repository's example benchmark (simulated target, inline manifest), named `name`.
fn example(name: &str) -> CapacityBenchmark {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/capacity-benchmark.yaml");
    let loaded = goodput::api::load_benchmark(&path).expect("the example loads");
    let mut cb = loaded.benchmark;
    cb.metadata.name = Some(name.into());
    cb
}

fn service(name: &str) -> ServiceTarget {
    ServiceTarget {
        name: name.into(),
        port: 8000,
        namespace: None,
    }
}

/// The API error of a refused call: (code, reason, message).
fn api_error(result: Result<CapacityBenchmark, kube::Error>) -> (u16, String, String) {
    match result {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        Err(other) => panic!("expected an API error, got {other:?}"),
        Ok(cb) => panic!(
            "expected a refusal, the server accepted {:?}",
            cb.spec.target
        ),
    }
}

#[tokio::test]
async fn the_cel_rules_refuse_ambiguous_targets_and_workloads() {
    let (_cluster, client) = cluster_with_crd().await;
    let api: Api<CapacityBenchmark> = Api::default_namespaced(client);
    let pp = PostParams::default();

    // url and service: which server? Refused with the rule's message, at spec.target.
    let mut both = example("both");
    both.spec.target.simulated = None;
    both.spec.target.url = Some("http://vllm.llm.svc:8000".into());
    both.spec.target.service = Some(service("vllm"));
    let (code, why, message) = api_error(api.create(&pp, &both).await);
    assert_eq!((code, why.as_str()), (422, "Invalid"), "{message}");
    assert!(
        message.contains("spec.target: Invalid value")
            && message.contains("give at most one of url, service and simulated"),
        "{message}"
    );
    // service and simulated, too.
    let mut both = example("both");
    both.spec.target.service = Some(service("vllm"));
    let (code, _, message) = api_error(api.create(&pp, &both).await);
    assert_eq!(code, 422, "{message}");
    assert!(message.contains("give at most one of url"), "{message}");

    // Two manifest sources, and none.
    let mut two = example("two-manifests");
    two.spec.workload.manifest_file = Some("workload-manifest.yaml".into());
    let (code, _, message) = api_error(api.create(&pp, &two).await);
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains("spec.workload: Invalid value")
            && message.contains("give exactly one of manifest, manifestFile and manifestConfigMap"),
        "{message}"
    );
    let mut none = example("no-manifest");
    none.spec.workload.manifest = None;
    let (code, _, message) = api_error(api.create(&pp, &none).await);
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains("give exactly one of manifest"),
        "{message}"
    );

    // The schema's port range.
    let mut port = example("port");
    port.spec.target.simulated = None;
    port.spec.target.service = Some(ServiceTarget {
        port: 70000,
        ..service("vllm")
    });
    let (code, _, message) = api_error(api.create(&pp, &port).await);
    assert_eq!(code, 422, "{message}");
    assert!(message.contains("spec.target.service.port"), "{message}");

    // Raw results to a claim and a bucket at once; a bucket URL that is not s3://.
    let bucket = |url: &str| goodput::api::ResultsBucket {
        url: url.into(),
        ..Default::default()
    };
    let mut two = example("two-sinks");
    two.spec.loadgen.results_claim = Some("results".into());
    two.spec.loadgen.results_bucket = Some(bucket("s3://results/runs"));
    let (code, _, message) = api_error(api.create(&pp, &two).await);
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains("spec.loadgen: Invalid value")
            && message.contains("give at most one of resultsClaim and resultsBucket"),
        "{message}"
    );
    let mut gs = example("not-s3");
    gs.spec.loadgen.results_bucket = Some(bucket("gs://results/runs"));
    let (code, _, message) = api_error(api.create(&pp, &gs).await);
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains("spec.loadgen.resultsBucket.url")
            && message.contains("must be s3://<bucket> or s3://<bucket>/<prefix>"),
        "{message}"
    );

    // Nothing was stored.
    assert!(
        api.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn each_kind_of_target_is_accepted() {
    let (_cluster, client) = cluster_with_crd().await;
    let api: Api<CapacityBenchmark> = Api::default_namespaced(client);
    let pp = PostParams::default();

    let mut by_service = example("by-service");
    by_service.spec.target.simulated = None;
    by_service.spec.target.service = Some(ServiceTarget {
        namespace: Some("llm".into()),
        ..service("qwen-7b")
    });
    let mut by_url = example("by-url");
    by_url.spec.target.simulated = None;
    by_url.spec.target.url = Some("http://vllm.llm.svc:8000".into());
    let simulated = example("simulated");
    let mut defaults = example("simulated-defaults");
    defaults.spec.target.simulated = None;
    let mut by_config_map = example("by-config-map");
    by_config_map.spec.workload.manifest = None;
    by_config_map.spec.workload.manifest_config_map = Some(goodput::api::ConfigMapKey {
        name: "qwen-workload".into(),
        key: "workload-manifest.yaml".into(),
    });

    for cb in [by_service, by_url, simulated, defaults, by_config_map] {
        let name = cb.metadata.name.clone().unwrap();
        let created = api
            .create(&pp, &cb)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(created.spec, cb.spec, "{name}: the spec comes back as sent");
    }
    let stored = api.get("by-service").await.unwrap();
    assert_eq!(
        stored.spec.target.service,
        Some(ServiceTarget {
            name: "qwen-7b".into(),
            port: 8000,
            namespace: Some("llm".into()),
        })
    );
    assert_eq!(stored.spec.target.printable(), "svc/qwen-7b.llm");
    let stored = api.get("simulated").await.unwrap();
    assert_eq!(
        stored.spec.target.simulated.as_ref().map(|s| s.replicas),
        Some(2)
    );
    let defaults = api.get("simulated-defaults").await.unwrap().spec.target;
    assert_eq!(defaults, goodput::api::Target::default());
    assert!(defaults.is_simulated());
}

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(second).expect("in range"))
}

/// A status in the middle of a run: one point done, one being measured.
fn running_status(generation: i64) -> CapacityBenchmarkStatus {
    let mut conds = Vec::new();
    for (type_, status, why, message) in [
        (conditions::SPEC_VALID, Status::True, reason::VALID, ""),
        (
            conditions::TARGET_REACHABLE,
            Status::True,
            reason::REACHABLE,
            "svc/qwen-7b has 2 ready endpoints",
        ),
        (
            conditions::PROGRESSING,
            Status::True,
            reason::RUNNING,
            "cold rate 18.0 (2 of 10)",
        ),
        (
            conditions::READY,
            Status::False,
            reason::RUNNING,
            "measuring",
        ),
    ] {
        conditions::set(
            &mut conds,
            conditions::new(
                type_,
                status,
                why,
                message,
                Some(generation),
                at(1_780_000_000),
            ),
        );
    }
    CapacityBenchmarkStatus {
        phase: Some(Phase::Running),
        observed_generation: Some(generation),
        conditions: conds,
        target: Some("svc/qwen-7b".into()),
        current_point: Some(CurrentPoint {
            label: goodput::bench::driver::PointKey::Rate {
                cache: CacheMode::Cold,
                rate: 18.0,
                repeat: 0,
            }
            .label(),
            cache: CacheMode::Cold,
            kind: PointKind::Rate,
            concurrency: None,
            offered_rps: Some(18.0),
            repeat: 0,
            job: "by-service-cold-rate-18-0".into(),
            attempt: 0,
            started_at: Some(at(1_780_000_060)),
        }),
        points: vec![FinishedPoint {
            cache: CacheMode::Cold,
            kind: PointKind::Rate,
            concurrency: None,
            offered_rps: Some(12.0),
            repeat: 0,
            achieved_rps: 11.9,
            error_rate: Some(0.0),
            weakest_class: Some("long_context".into()),
            weakest_attainment: Some(0.97),
            weakest_successes: Some(2104),
            queue_trend: Some("flat".into()),
            slos_met: true,
            valid: true,
            client_behind: false,
            verdict: FinishedPoint::PASS.into(),
            reasons: FinishedPoint::bounded_reasons(vec!["every class met its SLOs".into()]),
            result_config_map: Some("by-service-cold-rate-12-0".into()),
            classes: Vec::new(),
            busy_seconds: None,
            requests_sent: None,
            unsent_seconds: None,
            engine_rps: None,
        }],
        modes: vec![ModeCapacity {
            cache: CacheMode::Cold,
            capacity_rps: Some(12.0),
            capacity_per_replica_rps: Some(6.0),
            bracket: None,
            refinements: Vec::new(),
            placement: Some(goodput::api::Placement {
                model_capacity_rps: 12.4,
                speed: 0.98,
                predicted_rps: 12.15,
                replaced_grid: vec![7.2, 9.0, 10.8, 12.6, 14.4],
                replaced_grid_gpu_minutes: 31.2,
                rate_points_gpu_minutes: 12.5,
            }),
            client_limit_rps: Some(14.0),
            loadgen_starved: false,
        }],
        cost: None,
        early_stop_saved_gpu_minutes: None,
        placement_saved_gpu_minutes: Some(18.7),
        capacity_rps: Some(12.0),
        capacity_per_replica_rps: Some(6.0),
        required_replicas: Some(4),
        resolved: Some(ResolvedIdentity {
            engine: "vllm".into(),
            engine_version: Some("0.11.0".into()),
            model: "Qwen/Qwen2.5-7B-Instruct".into(),
        }),
        pack: Some("by-service-pack".into()),
        failure_test: Some(goodput::api::FailureTestStatus {
            rate_rps: Some(10.0),
            current: Some(goodput::api::CurrentFault {
                fault: 0,
                job: "by-service-g1-f0".into(),
                zero_unix_ms: 1_780_000_100_000,
                inject_at_unix_ms: 1_780_000_112_600,
                poll_ms: 200,
                victim: Some("qwen-7b-0".into()),
                victim_address: Some("127.1.0.2".into()),
                ready_before: Some(2),
                injected_unix_ms: Some(1_780_000_112_650),
                endpoint_removed_unix_ms: Some(1_780_000_112_850),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn status_round_trips_through_the_status_subresource() {
    let (_cluster, client) = cluster_with_crd().await;
    let api: Api<CapacityBenchmark> = Api::default_namespaced(client.clone());
    let mut cb = example("by-service");
    cb.spec.target.simulated = None;
    cb.spec.target.service = Some(service("qwen-7b"));
    let created = api.create(&PostParams::default(), &cb).await.unwrap();
    let generation = created.metadata.generation.expect("a generation");

    // Server-side apply of the status, as the operator writes it.
    let status = running_status(generation);
    let patch = json!({
        "apiVersion": "goodput.dev/v1alpha1",
        "kind": "CapacityBenchmark",
        "status": status,
    });
    api.patch_status(
        "by-service",
        &PatchParams::apply("goodput-test").force(),
        &Patch::Apply(&patch),
    )
    .await
    .expect("the status applies");
    let back = api.get_status("by-service").await.unwrap();
    assert_eq!(
        back.status.as_ref(),
        Some(&status),
        "the status reads back as written"
    );
    assert_eq!(
        back.metadata.generation,
        Some(generation),
        "status writes keep it"
    );
    let ready = conditions::find(&back.status.as_ref().unwrap().conditions, conditions::READY)
        .expect("Ready is set");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "Running")
    );

    // kubectl get cb: the columns tell where the run is.
    let row = table_row(&client, "by-service").await;
    assert_eq!(
        row,
        [
            json!("by-service"),
            json!("svc/qwen-7b"),
            json!("Running"),
            json!("cold rate 18"),
            json!(12.0),
            json!(6.0),
            json!(4),
        ]
    );

    // A list-map keyed by type: two Ready conditions are one too many.
    let mut twice = status.clone();
    twice.conditions.push(twice.conditions[3].clone());
    let err = api
        .patch_status(
            "by-service",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": twice})),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422, "{}", s.message);
            assert!(
                s.message.contains("status.conditions[4]") && s.message.contains("Duplicate"),
                "{}",
                s.message
            );
        }
        other => panic!("expected a 422, got {other:?}"),
    }

    // Succeeded: Ready flips (its transition time moves), the current point goes away.
    let mut done = back.status.clone().unwrap();
    done.phase = Some(Phase::Succeeded);
    done.current_point = None;
    conditions::set(
        &mut done.conditions,
        conditions::new(
            conditions::READY,
            Status::True,
            reason::SUCCEEDED,
            "capacity 12.0 RPS, 4 replicas for 36 RPS",
            Some(generation),
            at(1_780_000_900),
        ),
    );
    conditions::set(
        &mut done.conditions,
        conditions::new(
            conditions::PROGRESSING,
            Status::False,
            reason::SUCCEEDED,
            "",
            Some(generation),
            at(1_780_000_900),
        ),
    );
    conditions::set(
        &mut done.conditions,
        conditions::new(
            conditions::SPEC_VALID,
            Status::True,
            reason::VALID,
            "",
            Some(generation),
            at(1_780_000_900),
        ),
    );
    let mut replaced = back.clone();
    replaced.status = Some(done.clone());
    let stored = api
        .replace_status("by-service", &PostParams::default(), &replaced)
        .await
        .expect("the status replaces");
    let stored = stored.status.unwrap();
    assert_eq!(stored, done);
    let times: Vec<(&str, i64)> = stored
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.last_transition_time.0.as_second()))
        .collect();
    assert_eq!(
        times,
        [
            ("SpecValid", 1_780_000_000),
            ("TargetReachable", 1_780_000_000),
            ("Progressing", 1_780_000_900),
            ("Ready", 1_780_000_900),
        ]
    );
    let row = table_row(&client, "by-service").await;
    assert_eq!(row[2], "Succeeded");
    assert_eq!(row[3], Value::Null, "no point is being measured");
}

/// The cells of `kubectl get cb <name>` without the age, as the API server's Table gives
/// them.
async fn table_row(client: &kube::Client, name: &str) -> Vec<Value> {
    let request = http::Request::get(format!(
        "/apis/goodput.dev/v1alpha1/namespaces/default/capacitybenchmarks/{name}"
    ))
    .header(
        "Accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )
    .body(Vec::new())
    .unwrap();
    let table: Value = client.request(request).await.expect("a Table");
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "Name",
            "Target",
            "Phase",
            "Point",
            "Capacity",
            "Per-replica",
            "Replicas",
            "Age"
        ]
    );
    let mut cells = table["rows"][0]["cells"]
        .as_array()
        .expect("one row")
        .clone();
    cells.pop(); // the age
    cells
}

/// `spec.gitops.edit` names exactly one number: two, or none, is refused at the field.
#[tokio::test]
async fn a_gitops_edit_names_exactly_one_replica_field() {
    let (_cluster, client) = cluster_with_crd().await;
    let plans = goodput::api::crd_files()
        .into_iter()
        .find(|(name, _)| *name == "servingplan.yaml")
        .expect("the ServingPlan CRD")
        .1;
    install_crd(&client, &plans).await;
    let api: Api<goodput::api::ServingPlan> = Api::default_namespaced(client);
    let plan = |edit: &str| -> goodput::api::ServingPlan {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gitops/servingplan.yaml"),
        )
        .expect("the gitops example");
        let text = text
            .replace("  namespace: llm\n", "")
            .replace("    edit: {deployment: qwen-7b}\n", edit);
        serde_saphyr::from_str(&text).expect("the plan parses")
    };
    let pp = PostParams::default();
    for (edit, accepted) in [
        ("    edit: {deployment: qwen-7b}\n", true),
        ("    edit: {helmValues: vllm.replicaCount}\n", true),
        ("", true),
        (
            "    edit: {deployment: qwen-7b, kustomizeReplicas: qwen-7b}\n",
            false,
        ),
        ("    edit: {}\n", false),
    ] {
        let mut p = plan(edit);
        p.metadata.name = Some(format!("p{}", edit.len()));
        match api.create(&pp, &p).await {
            Ok(_) => assert!(accepted, "{edit:?} was accepted"),
            Err(kube::Error::Api(s)) => {
                assert!(!accepted, "{edit:?}: {}", s.message);
                assert_eq!(s.code, 422);
                assert!(
                    s.message.contains("spec.gitops.edit: Invalid value")
                        && s.message
                            .contains("give exactly one of deployment, statefulSet"),
                    "{}",
                    s.message
                );
            }
            Err(other) => panic!("{other:?}"),
        }
    }
}
