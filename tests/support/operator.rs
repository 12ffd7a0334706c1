//! The harness of the operator's end-to-end tests: an [`Env`] (a cluster, a namespace in it,
//! the image its pods run, how patient to be), the operator as its own process, and waits
//! on a benchmark's status.
//!
//! An [`Env`] is either the in-repo test cluster (pods run the real `goodput` binary; what
//! `tests/measured/operator.rs` runs on) or a real cluster named by `GOODPUT_E2E_KUBECONFIG` (pods run
//! `GOODPUT_E2E_IMAGE`; what `tests/measured/e2e.rs` runs on). The scenarios in `scenarios.rs` run on
//! either.

#![allow(dead_code)] // each test binary uses its own part of the harness

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use goodput::api::{CapacityBenchmark, FinishedPoint, Phase};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, CustomResourceExt as _, Resource, ResourceExt as _};
use testcluster::cluster::{Cluster, ClusterConfig};

#[path = "manifest.rs"]
mod manifest;
pub use manifest::MANIFEST;

pub const GOODPUT: &str = env!("CARGO_BIN_EXE_goodput");

/// The real cluster's kubeconfig; unset: the real-cluster suite is skipped.
pub const E2E_KUBECONFIG: &str = "GOODPUT_E2E_KUBECONFIG";
/// The image loaded into the real cluster (default [`E2E_DEFAULT_IMAGE`]).
pub const E2E_IMAGE: &str = "GOODPUT_E2E_IMAGE";
/// A namespace to run in, kept afterwards (default: a fresh one per test, deleted after).
pub const E2E_NAMESPACE: &str = "GOODPUT_E2E_NAMESPACE";
pub const E2E_DEFAULT_IMAGE: &str = "goodput:dev";
/// The label of owned objects that names their benchmark (`controller::build`).
const BENCHMARK_LABEL: &str = "goodput.dev/benchmark";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by=goodput";

/// A benchmark of one simulated replica, 20× faster than real time, at fixed rates: one
/// far below the model's capacity (about 13 RPS for this mix) and one far above, so both
/// shells reach the same verdicts however the machine's timing falls. [`Env::create`] puts
/// it in the environment's namespace.
pub fn benchmark_yaml(name: &str, rates: &str) -> String {
    format!(
        r#"apiVersion: goodput.dev/v1alpha1
kind: CapacityBenchmark
metadata: {{name: {name}}}
spec:
  target:
    simulated: {{preset: qwen2.5-7b-h100, overrides: {{prefix_caching: true}}, replicas: 1, timeScale: 20, streamInterval: 8}}
  workload:
    manifest:{MANIFEST}
  experiments:
    rateSweep: {{rates: [{rates}], maxRefinements: 0}}
    # 10 ms at time scale 20 is 200 ms of model time, and here two shared cores run the
    # cluster, the operator, the engines and every shard: a lag bound that a loaded test
    # machine keeps, still tight enough that a stalled client is invalid.
    maxLagMs: 25
  peak: {{rps: 30}}
"#
    )
}

/// `goodput bench` on the same YAML, on this machine: its sweep.json.
pub fn bench(yaml: &str, dir: &Path) -> serde_json::Value {
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

/// The operator as its own process (so a test can kill it), on a free admin port.
pub struct Operator {
    pub child: Child,
    pub admin: String,
}

impl Operator {
    pub fn start(kubeconfig: &Path, image: &str, log: &Path) -> Operator {
        Operator::start_with(kubeconfig, image, log, &[])
    }

    pub fn start_with(kubeconfig: &Path, image: &str, log: &Path, extra: &[&str]) -> Operator {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("operator log");
        let child = Command::new(GOODPUT)
            .args(["operator", "--image", image, "--admin-addr"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(extra)
            .env("RUST_LOG", "info,kube=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the operator starts");
        Operator {
            child,
            admin: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The operator process's id (for reading its memory from `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `goodput_operator_reconciles_total` from `/metrics`.
    pub async fn reconciles(&self) -> Option<u64> {
        self.metric("goodput_operator_reconciles_total").await
    }

    /// `goodput_operator_leader` from `/metrics`: 1 while this replica leads.
    pub async fn leader(&self) -> Option<u64> {
        self.metric("goodput_operator_leader").await
    }

    pub async fn metric(&self, name: &str) -> Option<u64> {
        let text = self.metrics_text().await?;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    }

    /// The whole `/metrics` page.
    pub async fn metrics_text(&self) -> Option<String> {
        reqwest::get(format!("{}/metrics", self.admin))
            .await
            .ok()?
            .text()
            .await
            .ok()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Where the scenarios run: a cluster, the namespace they use in it, and the image its pods
/// run. Operators started from it watch that namespace's benchmarks (on a real cluster only
/// that namespace's, with their Lease in it) and log to `operator.log` in [`Env::dir`].
pub struct Env {
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    /// Where the benchmarks, their Jobs and the operators' Lease live.
    pub namespace: String,
    /// The image `--image` names: the test cluster maps `goodput` to the binary.
    pub image: String,
    /// Flags every operator started here gets before the test's own.
    pub operator_args: Vec<String>,
    /// Waits of the test cluster stretch to `timeout × factor + extra` here.
    pub patience: (u32, Duration),
    /// Time for the last watch events of a finished change to arrive.
    pub settle: Duration,
    pub dir: tempfile::TempDir,
    /// The test cluster, stopped when the environment drops.
    pub cluster: Option<Cluster>,
    /// A namespace this environment created, deleted when it drops (kept after a failure).
    created_namespace: bool,
}

impl Env {
    /// A fresh test cluster ([`setup`]); the scenarios use its `default` namespace and the
    /// operator watches all namespaces.
    pub async fn test_cluster() -> Env {
        let Setup {
            cluster,
            client,
            kubeconfig,
            dir,
            ..
        } = setup().await;
        Env {
            client,
            kubeconfig,
            namespace: "default".into(),
            image: "goodput".into(),
            // Pods start in milliseconds here: sharded points need little lead.
            operator_args: vec!["--shard-start-lead-s".into(), "5".into()],
            patience: (1, Duration::ZERO),
            settle: Duration::from_secs(1),
            dir,
            cluster: Some(cluster),
            created_namespace: false,
        }
    }

    /// The real cluster `GOODPUT_E2E_KUBECONFIG` names, or `None` (printing why the test
    /// is skipped) when it is unset. The CRD is applied server-side (left installed
    /// afterwards); the namespace is `GOODPUT_E2E_NAMESPACE`, else a fresh
    /// `goodput-e2e-<random>` created here and deleted when the environment drops.
    pub async fn real_cluster(test: &str) -> Option<Env> {
        let Some(kubeconfig) = env_var(E2E_KUBECONFIG) else {
            eprintln!(
                "SKIPPED: {test}: {E2E_KUBECONFIG} is not set; the real-cluster suite runs \
                 only against a cluster it names (CONTRIBUTING.md says how)"
            );
            return None;
        };
        let kubeconfig = PathBuf::from(kubeconfig);
        let image = env_var(E2E_IMAGE).unwrap_or_else(|| E2E_DEFAULT_IMAGE.into());
        let client = client_from(&kubeconfig).await;
        install_crd(&client).await;
        let (namespace, created_namespace) = match env_var(E2E_NAMESPACE) {
            Some(ns) => (ns, false),
            None => (create_namespace(&client).await, true),
        };
        eprintln!("{test}: namespace {namespace}, image {image}");
        Some(Env {
            client,
            kubeconfig,
            operator_args: vec![
                "--namespace".into(),
                namespace.clone(),
                "--lease-namespace".into(),
                namespace.clone(),
            ],
            namespace,
            image,
            // Pods are scheduled, containers started, and the cluster may be busy.
            patience: (2, Duration::from_secs(180)),
            settle: Duration::from_secs(3),
            dir: tempfile::tempdir().expect("tempdir"),
            cluster: None,
            created_namespace,
        })
    }

    /// How long a wait that takes at most `timeout` on the test cluster may take here.
    pub fn patience(&self, timeout: Duration) -> Duration {
        timeout * self.patience.0 + self.patience.1
    }

    pub fn log(&self) -> PathBuf {
        self.dir.path().join("operator.log")
    }

    /// An operator of this environment.
    pub fn operator(&self) -> Operator {
        self.operator_with(&[])
    }

    /// An operator of this environment with `extra` flags.
    pub fn operator_with(&self, extra: &[&str]) -> Operator {
        let mut args: Vec<&str> = self.operator_args.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        Operator::start_with(&self.kubeconfig, &self.image, &self.log(), &args)
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates the benchmark `yaml` describes in this environment's namespace, after
    /// removing a leftover of the same name (from an earlier run in a kept namespace) and
    /// what it owned.
    pub async fn create(&self, yaml: &str) -> CapacityBenchmark {
        let mut cb: CapacityBenchmark =
            serde_saphyr::from_str(yaml).expect("benchmark YAML parses");
        cb.metadata.namespace = Some(self.namespace.clone());
        let name = cb.name_any();
        let api: Api<CapacityBenchmark> = self.api();
        if api.get_opt(&name).await.expect("benchmarks read").is_some() {
            api.delete(&name, &DeleteParams::default())
                .await
                .expect("a leftover benchmark deletes");
            self.within(
                Duration::from_secs(30),
                "the leftover benchmark is gone",
                async {
                    while api.get_opt(&name).await.ok().flatten().is_some()
                        || self.owned_by_label(&name).await > 0
                    {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                },
            )
            .await;
        }
        api.create(&PostParams::default(), &cb)
            .await
            .expect("the benchmark is accepted")
    }

    /// Jobs, ConfigMaps and Deployments labelled as the operator's for benchmark `name`.
    pub async fn owned_by_label(&self, name: &str) -> usize {
        let owned = ListParams::default().labels(&format!("{MANAGED_BY},{BENCHMARK_LABEL}={name}"));
        let jobs = self.api::<Job>().list(&owned).await.expect("jobs").items;
        let maps = self.api::<ConfigMap>().list(&owned).await.expect("maps");
        let deployments = self.api::<Deployment>().list(&owned).await;
        jobs.len() + maps.items.len() + deployments.expect("deployments").items.len()
    }

    /// The names of the Jobs whose controller is this benchmark (its uid).
    pub async fn jobs_of(&self, cb: &CapacityBenchmark) -> Vec<String> {
        let uid = cb
            .metadata
            .uid
            .clone()
            .expect("a created benchmark has a uid");
        self.api::<Job>()
            .list(&ListParams::default())
            .await
            .expect("jobs list")
            .items
            .into_iter()
            .filter(|j| j.owner_references().iter().any(|o| o.uid == uid))
            .filter_map(|j| j.metadata.name)
            .collect()
    }

    /// Polls the benchmark until `done` holds, or panics after `timeout` (stretched by
    /// [`Env::patience`]) with its status.
    pub async fn wait_for(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        done: impl Fn(&CapacityBenchmark) -> bool,
    ) -> CapacityBenchmark {
        poll(self.api(), name, self.patience(timeout), what, done).await
    }

    /// Runs `f` for at most `timeout` (stretched by [`Env::patience`]), else panics with
    /// `what`.
    pub async fn within<T>(
        &self,
        timeout: Duration,
        what: &str,
        f: impl std::future::Future<Output = T>,
    ) -> T {
        match tokio::time::timeout(self.patience(timeout), f).await {
            Ok(v) => v,
            Err(_) => panic!("timed out: {what}"),
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        if failed && self.cluster.is_none() {
            // What the operator said, before the temporary directory goes.
            print_log_tail(&self.log());
        }
        if !self.created_namespace {
            return;
        }
        if failed {
            eprintln!(
                "kept namespace {ns} for inspection; remove it with `kubectl delete namespace {ns}`",
                ns = self.namespace
            );
            return;
        }
        // The test's runtime is ending: delete from a runtime and client of our own.
        let kubeconfig = self.kubeconfig.clone();
        let namespace = self.namespace.clone();
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let client = client_from(&kubeconfig).await;
                Api::<Namespace>::all(client)
                    .delete(&namespace, &DeleteParams::background())
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        })
        .join();
        match deleted {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("deleting namespace {}: {e}", self.namespace),
            Err(_) => eprintln!("deleting namespace {} panicked", self.namespace),
        }
    }
}

/// A variable's value, unset when empty.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

async fn client_from(kubeconfig: &Path) -> kube::Client {
    let kc = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("{E2E_KUBECONFIG}={}: {e}", kubeconfig.display()));
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("the kubeconfig loads");
    kube::Client::try_from(config).expect("client builds")
}

/// Server-side apply of the CRDs this build generates (so the cluster serves the schemas
/// under test), then waits until each is established.
async fn install_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [CapacityBenchmark::crd(), goodput::api::ServingPlan::crd()] {
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply("goodput-e2e").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("the CRD applies");
        let established = kube::runtime::wait::await_condition(
            crds.clone(),
            &name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        tokio::time::timeout(Duration::from_secs(60), established)
            .await
            .expect("the CRD is established within 60 s")
            .expect("the CRD reads");
    }
}

/// Creates `goodput-e2e-<random>`.
async fn create_namespace(client: &kube::Client) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let suffix = (u64::from(nanos) << 20 ^ u64::from(std::process::id())) % 36u64.pow(6);
    let name = format!("goodput-e2e-{}", base36(suffix, 6));
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(
                [(
                    "app.kubernetes.io/part-of".to_owned(),
                    "goodput-e2e".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("the test namespace creates");
    name
}

fn base36(mut n: u64, width: usize) -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = vec![b'0'; width];
    for slot in out.iter_mut().rev() {
        *slot = digits[(n % 36) as usize];
        n /= 36;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A test cluster whose image `goodput` is the binary built, the CRD installed.
pub struct Setup {
    pub cluster: Cluster,
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    /// The operator's log (`operator.log` in `dir`), printed if the test fails: declared
    /// before `dir`, so it drops (and reads the log) before the directory is removed.
    pub log_on_failure: LogOnFailure,
    pub dir: tempfile::TempDir,
}

impl Setup {
    /// The operator as its own process on this cluster, pods running `image`, logging to
    /// `operator.log` in the setup's directory.
    pub fn operator(&self, image: &str, args: &[&str]) -> Operator {
        Operator::start_with(&self.kubeconfig, image, &self.log_on_failure.0, args)
    }
}

/// Prints the operator's log at its path when the test that holds it fails (before the
/// temporary directory goes).
pub struct LogOnFailure(PathBuf);

impl Drop for LogOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log_tail(&self.0);
        }
    }
}

/// The last 60 lines of the operator's log at `path`, on stderr (a failed test's output).
fn print_log_tail(path: &Path) {
    if let Ok(log) = std::fs::read_to_string(path) {
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(60)..];
        eprintln!(
            "operator log (last {} lines):\n{}",
            tail.len(),
            tail.join("\n")
        );
    }
}

pub async fn setup() -> Setup {
    setup_with_scripts(&[]).await
}

/// [`setup`] with more images: each `(name, script)` is a `/bin/sh` script (written into
/// the setup's directory) that the image runs with the container's args.
pub async fn setup_with_scripts(scripts: &[(&str, &str)]) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = ClusterConfig::default().image("goodput", GOODPUT);
    for (name, script) in scripts {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).expect("script written");
        let mut perms = std::fs::metadata(&path).expect("script").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&path, perms).expect("script made executable");
        config = config.image(name, path);
    }
    let cluster = Cluster::start(config).await.expect("cluster starts");
    let kubeconfig = dir.path().join("kubeconfig");
    cluster
        .write_kubeconfig(&kubeconfig)
        .expect("kubeconfig written");
    let kc = Kubeconfig::from_yaml(&cluster.kubeconfig()).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    let client = kube::Client::try_from(config).expect("client builds");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [CapacityBenchmark::crd(), goodput::api::ServingPlan::crd()] {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("the CRD installs");
    }
    let log_on_failure = LogOnFailure(dir.path().join("operator.log"));
    Setup {
        cluster,
        client,
        kubeconfig,
        dir,
        log_on_failure,
    }
}

/// The first Warning Event with `reason` about the object named `name`, polled until one
/// appears (callers bound the wait).
pub async fn warning_event(
    events: &Api<k8s_openapi::api::core::v1::Event>,
    name: &str,
    reason: &str,
) -> k8s_openapi::api::core::v1::Event {
    loop {
        let list = events.list(&ListParams::default()).await.expect("events");
        if let Some(e) = list.items.into_iter().find(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some(reason)
                && e.involved_object.name.as_deref() == Some(name)
        }) {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates the benchmark in the `default` namespace.
pub async fn create(client: &kube::Client, yaml: &str) -> CapacityBenchmark {
    let mut cb: CapacityBenchmark = serde_saphyr::from_str(yaml).expect("benchmark YAML parses");
    cb.metadata.namespace = Some("default".into());
    let api: Api<CapacityBenchmark> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cb)
        .await
        .expect("the benchmark is accepted")
}

/// Waits up to `timeout` for the benchmark in `default` to reach `Succeeded`.
pub async fn succeeded(client: &kube::Client, name: &str, timeout: Duration) -> CapacityBenchmark {
    wait_for(client, name, timeout, "Succeeded", |cb| {
        phase(cb) == Some(Phase::Succeeded)
    })
    .await
}

/// Polls the benchmark in the `default` namespace until `done` holds, or panics after
/// `timeout` with its status.
pub async fn wait_for(
    client: &kube::Client,
    name: &str,
    timeout: Duration,
    what: &str,
    done: impl Fn(&CapacityBenchmark) -> bool,
) -> CapacityBenchmark {
    poll(
        Api::namespaced(client.clone(), "default"),
        name,
        timeout,
        what,
        done,
    )
    .await
}

async fn poll(
    api: Api<CapacityBenchmark>,
    name: &str,
    timeout: Duration,
    what: &str,
    done: impl Fn(&CapacityBenchmark) -> bool,
) -> CapacityBenchmark {
    let deadline = Instant::now() + timeout;
    loop {
        let cb = api.get(name).await.expect("the benchmark reads");
        if done(&cb) {
            return cb;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {:#?}",
            cb.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn phase(cb: &CapacityBenchmark) -> Option<Phase> {
    cb.status.as_ref().and_then(|s| s.phase)
}

pub fn points(cb: &CapacityBenchmark) -> &[FinishedPoint] {
    cb.status.as_ref().map_or(&[], |s| &s.points[..])
}
