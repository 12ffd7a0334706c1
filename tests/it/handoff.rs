//! The hand-off of shard results through the Kubernetes API, against the in-repo test
//! cluster (an API-server double over HTTPS; pods are local processes) and the simulated
//! engine on loopback, run 20× faster than real time:
//! - a `goodput loadgen` process, with only its ServiceAccount's rights (get and patch of
//!   its own ConfigMaps), writes its result into the pre-created ConfigMap, where it parses
//!   and merges; with no such ConfigMap it fails with a clear message before any load;
//! - an Indexed Job of four `goodput loadgen` pods (`--shard $(JOB_COMPLETION_INDEX)/4`,
//!   one `--start-at`) writes four results that merge into the point one shard measures:
//!   the same schedule, the same requests, each counted once.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use goodput::analysis::GateConfig;
use goodput::loadgen::handoff::{SHARD_ANNOTATION, ShardResult, merge_shards, merged_requests_csv};
use goodput::sim::live::ReplicaConfig;
use goodput::sim::live::fleet::{Fleet, FleetConfig, start_fleet};
use goodput::sim::live::router::RouterConfig;
use goodput::sim::preset;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, LogParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use testcluster::cluster::{Cluster, ClusterConfig};

/// Time scale of the simulated engine and of the load generator. At 5 a point's measured
/// window is about 0.8 s of wall time, enough engine scrapes (every 40 ms) for the queue
/// trend even on a loaded machine; at 20 a slow first scrape could leave fewer than three.
const K: &str = "5";

/// Two classes, 200 requests at 40 RPS (5 s of schedule, a quarter second of wall clock),
/// the first second warmup.
const MANIFEST: &str = r#"model: {id: Qwen/Qwen2.5-7B-Instruct, revision: r1-fixture, tokenizer_revision: t1-fixture, precision: bf16}
engine:
  name: goodput-simulated-engine
  version: "0.1.0"
  placement: {tp: 1, pp: 1, dp: 1, replicas: 1, gpus: 1}
  prefix_cache: disabled
  speculative_decoding: disabled
  disaggregated_prefill: disabled
client:
  location: localhost
  streaming: true
  arrival_pattern: poisson
  minimum_duration_seconds: 2
  initial_scheduled_requests: 200
  request_schedule_seed: 5
  class_schedule_counts: {chat: 140, long: 60}
  warmup_seconds: 1
workload:
  - {name: chat, mix: 0.7, input_tokens: 256, output_tokens: 16, request_ttft_cutoff_ms: 2000, request_tpot_cutoff_ms: 100}
  - {name: long, mix: 0.3, input_tokens: 1024, output_tokens: 16, request_ttft_cutoff_ms: 4000, request_tpot_cutoff_ms: 100}
acceptance:
  class_slo_attainment_min: 0.95
  min_successful_samples_per_class: 10
  error_rate_max: 0.01
  queue_trend_required: flat
  target_utilization: 0.75
"#;

/// The cluster, the engine and what the tests share.
struct Bed {
    cluster: Cluster,
    fleet: Fleet,
    admin: kube::Client,
    dir: tempfile::TempDir,
    manifest: PathBuf,
    /// A kubeconfig of ServiceAccount `loadgen`, which may only get, patch and update the
    /// ConfigMaps named in [`Bed::start`].
    loadgen_kubeconfig: PathBuf,
}

impl Bed {
    async fn start(config_maps: &[&str]) -> Bed {
        // kube's TLS takes the process's rustls provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let cluster = Cluster::start(
            ClusterConfig::default().image("goodput", env!("CARGO_BIN_EXE_goodput")),
        )
        .await
        .expect("cluster starts");
        let admin = client(&cluster.kubeconfig()).await;
        let fleet = start_fleet(FleetConfig {
            replica: ReplicaConfig {
                time_scale: K.parse().expect("a number"),
                ..ReplicaConfig::new(preset("qwen2.5-7b-h100").expect("preset"))
            },
            replicas: 1,
            host: [127, 0, 0, 1].into(),
            port: 0,
            router: RouterConfig::default(),
            cold_start: Duration::ZERO,
            faults: Default::default(),
        })
        .await
        .expect("engine starts");
        let dir = tempfile::tempdir().expect("tempdir");
        let manifest = dir.path().join("manifest.yaml");
        std::fs::write(&manifest, MANIFEST).expect("manifest written");

        // The pod's least privilege: its own ConfigMaps, get/patch/update, never create.
        let post = PostParams::default();
        let sa: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": "loadgen"}})).expect("sa");
        Api::<ServiceAccount>::default_namespaced(admin.clone())
            .create(&post, &sa)
            .await
            .expect("service account created");
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": "loadgen-results"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                       "resourceNames": config_maps, "verbs": ["get", "patch", "update"]}]
        }))
        .expect("role");
        Api::<Role>::default_namespaced(admin.clone())
            .create(&post, &role)
            .await
            .expect("role created");
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "loadgen-results"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "loadgen-results"},
            "subjects": [{"kind": "ServiceAccount", "name": "loadgen", "namespace": "default"}]
        }))
        .expect("role binding");
        Api::<RoleBinding>::default_namespaced(admin.clone())
            .create(&post, &binding)
            .await
            .expect("role binding created");
        let loadgen_kubeconfig = dir.path().join("loadgen-kubeconfig");
        std::fs::write(
            &loadgen_kubeconfig,
            cluster.kubeconfig_for("default", "loadgen"),
        )
        .expect("kubeconfig written");
        Bed {
            cluster,
            fleet,
            admin,
            dir,
            manifest,
            loadgen_kubeconfig,
        }
    }

    /// Creates an empty result ConfigMap, as the operator does before a point's Job.
    async fn create_config_map(&self, name: &str, shard: &str) {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {SHARD_ANNOTATION: shard}}
        }))
        .expect("config map");
        Api::<ConfigMap>::default_namespaced(self.admin.clone())
            .create(&PostParams::default(), &cm)
            .await
            .expect("config map created");
    }

    async fn config_map(&self, name: &str) -> ConfigMap {
        Api::<ConfigMap>::default_namespaced(self.admin.clone())
            .get(name)
            .await
            .expect("config map read")
    }

    /// `goodput loadgen` of this bed's point, as the operator's Job runs it.
    fn loadgen_args(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "loadgen",
            "--target",
            &self.fleet.router_url(),
            "--rate",
            "40",
            "--time-scale",
            K,
            "--metrics-discover",
            "--scrape-interval-ms",
            "200",
            "--quiet",
            "--manifest",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.push(self.manifest.display().to_string());
        args
    }

    /// Runs `goodput loadgen` here as ServiceAccount `loadgen` (without blocking the
    /// runtime the cluster serves on).
    async fn run_loadgen(&self, extra: &[&str]) -> std::process::Output {
        tokio::time::timeout(
            Duration::from_secs(60),
            tokio::process::Command::new(env!("CARGO_BIN_EXE_goodput"))
                .args(self.loadgen_args())
                .args(extra)
                .env("KUBECONFIG", &self.loadgen_kubeconfig)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("loadgen finished within 60 s")
        .expect("loadgen runs")
    }

    fn gate(&self) -> GateConfig {
        goodput::workload::parse_manifest(MANIFEST, Path::new("manifest.yaml"))
            .expect("manifest parses")
            .manifest
            .gate_config()
    }
}

async fn client(kubeconfig: &str) -> kube::Client {
    let kc = Kubeconfig::from_yaml(kubeconfig).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    kube::Client::try_from(config).expect("client builds")
}

/// The schedule indices in a `requests.csv` (`r-<index>` ids).
fn request_ids(csv: &[u8]) -> BTreeSet<u64> {
    String::from_utf8_lossy(csv)
        .lines()
        .skip(1)
        .map(|l| {
            l.split(',')
                .next()
                .and_then(|id| id.strip_prefix("r-"))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("a request id in {l}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loadgen_process_hands_its_result_to_its_config_map() {
    // The pod may touch cb-x-p3-0 and cb-x-p3-9; the operator created only the first.
    let bed = Bed::start(&["cb-x-p3-0", "cb-x-p3-9"]).await;
    bed.create_config_map("cb-x-p3-0", "0/1").await;

    // No --result-namespace: the kubeconfig's namespace (outside a pod there is no
    // service-account namespace file). The API server answers the first two writes with
    // 500: they are retried (kube's client retries 429, 503 and 504 itself).
    bed.cluster
        .faults()
        .fail_next("patch", "", "configmaps", 2, 500);
    let out = bed.run_loadgen(&["--result-config-map", "cb-x-p3-0"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.matches("trying again").count(), 2, "{stderr}");
    let cm = bed.config_map("cb-x-p3-0").await;
    let managers: Vec<String> = cm
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.iter().any(|m| m == "goodput-loadgen"),
        "{managers:?}"
    );
    let result = ShardResult::from_config_map(&cm).expect("the ConfigMap holds a result");
    assert_eq!((result.shard, result.shards), (0, 1));
    assert!(
        result.engine_series.is_some(),
        "the engine series came along"
    );
    let merged = merge_shards(std::slice::from_ref(&result), &bed.gate()).expect("merges");
    let report = merged.report();
    assert_eq!(report.attempted, result.summary.report.attempted);
    assert_eq!(report.successful, result.summary.report.successful);
    assert_eq!(report.attempted, result.summary.client.measured);
    assert!(report.attempted > 100, "{}", report.attempted);
    assert_eq!(
        report.classes["chat"].attempted_count.map(|n| n > 0),
        Some(true)
    );
    // Real-time units: 200 requests at 40 RPS less the first second's.
    let window = merged.summary.client.window_s;
    assert!(window > 3.0 && window < 4.5, "window {window} s");
    assert!(merged.summary.queue_trend_source.starts_with("engine"));

    // A write that keeps failing: the command gives up after its tries and says so.
    bed.cluster.faults().fail_next(
        "patch",
        "",
        "configmaps",
        goodput::loadgen::publish::ATTEMPTS,
        500,
    );
    let out = bed.run_loadgen(&["--result-config-map", "cb-x-p3-0"]).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("shard 0/1 measured, but its result could not be written")
            && stderr.contains("cannot patch ConfigMap default/cb-x-p3-0 (after 5 attempt(s))"),
        "{stderr}"
    );

    // No such ConfigMap: a clear failure, before any load (no point files written).
    let out_dir = bed.dir.path().join("never");
    let out = bed
        .run_loadgen(&[
            "--result-config-map",
            "cb-x-p3-9",
            "--result-namespace",
            "default",
            "--out",
            out_dir.to_str().expect("utf-8 path"),
        ])
        .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ConfigMap default/cb-x-p3-9 does not exist")
            && stderr.contains("never creates"),
        "{stderr}"
    );
    assert!(!out_dir.exists(), "no load was run");

    // A ConfigMap outside the pod's rights: as clear.
    let out = bed
        .run_loadgen(&[
            "--result-config-map",
            "cb-y-p0-0",
            "--out",
            out_dir.to_str().expect("utf-8 path"),
        ])
        .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not allowed to get ConfigMap default/cb-y-p0-0"),
        "{stderr}"
    );
    assert!(!out_dir.exists(), "no load was run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_indexed_job_of_four_shards_merges_into_the_one_shard_point() {
    let names = [
        "cb-x-p4-0",
        "cb-x-p4-1",
        "cb-x-p4-2",
        "cb-x-p4-3",
        "cb-x-p4-all",
    ];
    let bed = Bed::start(&names).await;
    for i in 0..4 {
        bed.create_config_map(&format!("cb-x-p4-{i}"), &format!("{i}/4"))
            .await;
    }
    bed.create_config_map("cb-x-p4-all", "0/1").await;

    // The whole point in one shard, for reference.
    let out = bed
        .run_loadgen(&["--result-config-map", "cb-x-p4-all"])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let whole = ShardResult::from_config_map(&bed.config_map("cb-x-p4-all").await)
        .expect("the whole point's result");

    // Four pods of an Indexed Job on one timeline starting 4 s from now.
    let start_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
        + 4.0;
    let mut args = bed.loadgen_args();
    args.extend(
        [
            "--shard",
            "$(JOB_COMPLETION_INDEX)/4",
            "--result-config-map",
            "cb-x-p4-$(JOB_COMPLETION_INDEX)",
            "--start-at",
            &format!("{start_at:.3}"),
        ]
        .map(str::to_owned),
    );
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "cb-x-p4"},
        "spec": {
            "completionMode": "Indexed", "completions": 4, "parallelism": 4, "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "serviceAccountName": "loadgen",
                "containers": [{"name": "loadgen", "image": "goodput", "args": args}]
            }}
        }
    }))
    .expect("job");
    let jobs: Api<Job> = Api::default_namespaced(bed.admin.clone());
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("job created");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let j = jobs.get("cb-x-p4").await.expect("job read");
        let done = |t: &str| {
            j.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == t && c.status == "True"))
        };
        if done("Complete") {
            break;
        }
        if done("Failed") || Instant::now() > deadline {
            let pods: Api<Pod> = Api::default_namespaced(bed.admin.clone());
            let mut logs = String::new();
            for p in pods
                .list(&ListParams::default().labels("job-name=cb-x-p4"))
                .await
                .expect("pods")
            {
                let name = p.metadata.name.clone().unwrap_or_default();
                let log = pods
                    .logs(&name, &LogParams::default())
                    .await
                    .unwrap_or_default();
                logs.push_str(&format!("--- {name}\n{log}\n"));
            }
            panic!("the Job did not complete: {:?}\n{logs}", j.status);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut shards = Vec::new();
    for i in 0..4 {
        let cm = bed.config_map(&format!("cb-x-p4-{i}")).await;
        let r = ShardResult::from_config_map(&cm).expect("a shard result");
        assert_eq!((r.shard, r.shards), (i, 4));
        let c = &r.summary.client;
        assert_eq!(c.start_at_unix_s, Some(start_at_rounded(start_at)));
        assert_eq!(c.start_lateness_ms, 0.0, "shard {i} started on time");
        shards.push(r);
    }
    let gate = bed.gate();
    let merged = merge_shards(&shards, &gate).expect("the four shards merge");
    // One request set, each counted once: the one-shard point's.
    assert_eq!(merged.summary.schedule.hash, whole.summary.schedule.hash);
    assert_eq!(merged.summary.schedule.shard, "0-3/4");
    assert_eq!(merged.report().attempted, whole.summary.report.attempted);
    assert_eq!(
        merged.summary.client.measured,
        whole.summary.client.measured
    );
    let ids = request_ids(&merged_requests_csv(&shards).expect("merged csv"));
    assert_eq!(ids.len() as u64, merged.report().attempted);
    assert_eq!(ids, request_ids(&whole.requests_csv), "the same requests");
    for (name, c) in &merged.report().classes {
        assert_eq!(
            c.attempted_count, whole.summary.report.classes[name].attempted_count,
            "{name}"
        );
    }
    // The same window on the shared timeline (the schedule's, in real seconds).
    let (a, b) = (
        merged.summary.client.window_s,
        whole.summary.client.window_s,
    );
    assert!((a - b).abs() < 1e-3, "window {a} vs {b}");
    eprintln!(
        "four shards: {} requests, lag p99 {:.2} ms, validity {:?}",
        merged.report().attempted,
        merged.summary.client.schedule_lag_ms.p99,
        merged.summary.validity
    );
    // Missing one shard's result is an error naming it.
    let err = merge_shards(&shards[..3], &gate).expect_err("a shard is missing");
    assert!(err.to_string().contains("shard(s) 3 of 4 missing"), "{err}");
    drop(bed.cluster);
}

/// `--start-at` as the test wrote it (3 decimals) and the pod parsed it.
fn start_at_rounded(t: f64) -> f64 {
    format!("{t:.3}").parse().expect("a number")
}
