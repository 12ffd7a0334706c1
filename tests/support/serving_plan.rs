//! The world of the `ServingPlan` tests and bench (`tests/measured/serving_plan.rs`,
//! `benches/serving_plan.rs`; included with `#[path]`): a Deployment of simulated engines
//! that declares what it runs, the evidence (a finished CapacityBenchmark of 24 RPS on 4
//! replicas, the seed's worked example, written through `/status` as the operator writes a
//! finished run), and plans on it.
//!
//! Its includer includes `operator.rs` as `harness` too (the benchmark's workload is the
//! harness's [`MANIFEST`]).

#![allow(dead_code)] // the test and the bench each use their own part

use std::time::{Duration, Instant};

use goodput::api::{CapacityBenchmark, ServingPlan};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::harness::MANIFEST;

pub const NS: &str = "default";
/// What the evidence was measured on, as the Deployment's annotations declare it.
pub const IDENTITY: [(&str, &str); 5] = [
    ("goodput.dev/model", "Qwen/Qwen2.5-7B-Instruct"),
    ("goodput.dev/model-revision", "r1-fixture"),
    ("goodput.dev/engine-version", "0.1.0"),
    ("goodput.dev/tp", "1"),
    ("goodput.dev/workload-mix", "chat=0.5,long=0.5"),
];
/// The evidence: a CapacityBenchmark of Service `qwen`.
pub const BENCHMARK: &str = "qwen-capacity";
/// Replicas the evidence was measured on.
pub const REPLICAS: u32 = 4;
/// The capacity the evidence measured (RPS on [`REPLICAS`] replicas).
pub const CAPACITY: f64 = 24.0;
/// The peak (RPS) the evidence's spec and the plans declare.
pub const PEAK: f64 = 36.0;
/// An image the cluster cannot pull: pods of it stay Pending.
pub const UNPULLABLE: &str = "never-pulled";

/// A Deployment `name` of `replicas` simulated engines labelled `app: <app>`, annotated
/// with `annotations`.
pub fn engines(name: &str, app: &str, replicas: u32, annotations: &[(&str, &str)]) -> Deployment {
    let annotations: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{
                    "name": "engine", "image": "goodput",
                    "args": ["serve-sim", "--host", "$(POD_IP)", "--port", "8000",
                             "--time-scale", "5", "--stream-interval", "8"],
                    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1}
                }]}
            }
        }
    }))
    .expect("a Deployment")
}

/// [`engines`] (labelled `app: <name>`) that never start: they run [`UNPULLABLE`], so
/// their pods stay Pending and a plan reads only the Deployment and its `/scale`.
pub fn unstarted_engines(name: &str, replicas: u32, annotations: &[(&str, &str)]) -> Deployment {
    let mut d = engines(name, name, replicas, annotations);
    if let Some(pod) = d.spec.template.spec.as_mut() {
        pod.containers[0].image = Some(UNPULLABLE.into());
    }
    d
}

/// The evidence's spec: Service `qwen` on [`REPLICAS`] replicas of 2 GPUs, rates 24 and 30,
/// peak [`PEAK`].
pub fn evidence_yaml() -> String {
    format!(
        r#"apiVersion: goodput.dev/v1alpha1
kind: CapacityBenchmark
metadata: {{name: {BENCHMARK}, namespace: {NS}}}
spec:
  target:
    service: {{name: qwen, port: 8000}}
    replicas: {REPLICAS}
    gpusPerReplica: 2
    timeScale: 5
  workload:
    manifest:{MANIFEST}
  experiments:
    rateSweep: {{rates: [24, 30], maxRefinements: 0}}
  peak: {{rps: {PEAK}}}
"#
    )
}

/// The evidence's result at `capacity` RPS on [`REPLICAS`] replicas, as a merge patch of
/// `/status`: the fields a plan reads (the mode's capacity and capacity per replica, the
/// points at 24 and 30 RPS, passing up to `capacity`). With the benchmark's `generation`,
/// also what a finished run leaves (phase `Succeeded` of that generation, `Ready`, the
/// target, the pack): the first write; without, a later change of the capacity alone.
pub fn result(capacity: f64, generation: Option<i64>) -> Value {
    let per_replica = capacity / f64::from(REPLICAS);
    let point = |rate: f64| {
        let verdict = if rate <= capacity { "pass" } else { "fail" };
        json!({"cache": "cold", "kind": "rate", "offeredRps": rate, "achievedRps": rate,
               "errorRate": 0.0, "weakestClass": "long", "weakestAttainment": 0.962,
               "weakestSuccesses": 2400, "queueTrend": "flat", "valid": true,
               "verdict": verdict})
    };
    let mut status = json!({
        "points": [point(24.0), point(30.0)],
        "modes": [{"cache": "cold", "capacityRps": capacity,
                   "capacityPerReplicaRps": per_replica}],
        "capacityRps": capacity,
        "capacityPerReplicaRps": per_replica,
    });
    if let (Some(generation), Some(s)) = (generation, status.as_object_mut()) {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        s.extend([
            ("phase".to_owned(), json!("Succeeded")),
            ("observedGeneration".to_owned(), json!(generation)),
            (
                "conditions".to_owned(),
                json!([{"type": "Ready", "status": "True", "reason": "Succeeded",
                        "message": format!("capacity {capacity} RPS"),
                        "lastTransitionTime": now, "observedGeneration": generation}]),
            ),
            ("target".to_owned(), json!("svc/qwen")),
            (
                "pack".to_owned(),
                json!(format!("pvc/results/{BENCHMARK}/g{generation}/")),
            ),
        ]);
    }
    json!({ "status": status })
}

/// Creates the evidence and writes its finished result ([`CAPACITY`] RPS); returns its API.
pub async fn evidence(client: &kube::Client) -> Api<CapacityBenchmark> {
    let cb: CapacityBenchmark = serde_saphyr::from_str(&evidence_yaml()).expect("benchmark YAML");
    let api: Api<CapacityBenchmark> = Api::namespaced(client.clone(), NS);
    let created = api
        .create(&PostParams::default(), &cb)
        .await
        .expect("the benchmark is created");
    api.patch_status(
        BENCHMARK,
        &PatchParams::default(),
        &Patch::Merge(&result(CAPACITY, created.metadata.generation)),
    )
    .await
    .expect("the result is written");
    api
}

/// A ServingPlan `name` of the Deployment `qwen` on the evidence, for [`PEAK`] RPS on
/// replicas of 2 GPUs, in `mode`; `extra` adds lines to its spec (each indented by two
/// spaces, ending in a newline).
pub fn plan_yaml(name: &str, mode: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: goodput.dev/v1alpha1
kind: ServingPlan
metadata: {{name: {name}, namespace: {NS}}}
spec:
  targetRef: {{apiVersion: apps/v1, kind: Deployment, name: qwen}}
  capacity: {{benchmarkRef: {{name: {BENCHMARK}}}}}
  peak: {{rps: {PEAK}}}
  gpusPerReplica: 2
  mode: {mode}
{extra}"#
    )
}

/// Polls the plan `name` until `done` holds, or panics after `timeout` with its status.
pub async fn plan_until(
    client: &kube::Client,
    name: &str,
    timeout: Duration,
    what: &str,
    done: impl Fn(&ServingPlan) -> bool,
) -> ServingPlan {
    let api: Api<ServingPlan> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + timeout;
    loop {
        let plan = api.get(name).await.expect("the plan reads");
        if done(&plan) {
            return plan;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {:#?}",
            plan.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The plan's condition `type_`: its status, reason and message.
pub fn condition<'a>(plan: &'a ServingPlan, type_: &str) -> Option<(&'a str, &'a str, &'a str)> {
    let c = plan
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}
