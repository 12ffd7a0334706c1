//! The harness of the operator's end-to-end tests and bench: a test cluster whose pods run
//! the real `goodput` binary, the CRD installed, the operator as its own process, and
//! waits on a benchmark's status.

#![allow(dead_code)] // each test binary uses its own part of the harness

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use goodput::api::{CapacityBenchmark, FinishedPoint, Phase};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, CustomResourceExt as _};
use testcluster::cluster::{Cluster, ClusterConfig};

#[path = "manifest.rs"]
mod manifest;
pub use manifest::MANIFEST;

pub const GOODPUT: &str = env!("CARGO_BIN_EXE_goodput");

/// A benchmark of one simulated replica, 20× faster than real time, at fixed rates: one
/// far below the model's capacity (about 13 RPS for this mix) and one far above, so both
/// shells reach the same verdicts however the machine's timing falls.
pub fn benchmark_yaml(name: &str, rates: &str) -> String {
    format!(
        r#"apiVersion: goodput.dev/v1alpha1
kind: CapacityBenchmark
metadata: {{name: {name}, namespace: default}}
spec:
  target:
    simulated: {{preset: qwen2.5-7b-h100, overrides: {{prefix_caching: true}}, replicas: 1, timeScale: 20, streamInterval: 8}}
  workload:
    manifest:{MANIFEST}
  experiments:
    rateSweep: {{rates: [{rates}]}}
  peak: {{rps: 30}}
"#
    )
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

pub struct Setup {
    pub cluster: Cluster,
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    pub dir: tempfile::TempDir,
}

pub async fn setup() -> Setup {
    let cluster = Cluster::start(ClusterConfig::default().image("goodput", GOODPUT))
        .await
        .expect("cluster starts");
    let dir = tempfile::tempdir().expect("tempdir");
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
    crds.create(&PostParams::default(), &CapacityBenchmark::crd())
        .await
        .expect("the CRD installs");
    Setup {
        cluster,
        client,
        kubeconfig,
        dir,
    }
}

pub async fn create(client: &kube::Client, yaml: &str) -> CapacityBenchmark {
    let cb: CapacityBenchmark = serde_saphyr::from_str(yaml).expect("benchmark YAML parses");
    let api: Api<CapacityBenchmark> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cb)
        .await
        .expect("the benchmark is accepted")
}

/// Polls the benchmark until `done` holds, or panics after `timeout` with its status.
pub async fn wait_for(
    client: &kube::Client,
    name: &str,
    timeout: Duration,
    what: &str,
    done: impl Fn(&CapacityBenchmark) -> bool,
) -> CapacityBenchmark {
    let api: Api<CapacityBenchmark> = Api::namespaced(client.clone(), "default");
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
