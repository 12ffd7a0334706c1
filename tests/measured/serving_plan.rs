//! `ServingPlan` on the in-repo test cluster: the real API server double, the real
//! `kube::Client`, the operator as its own process, the workload a Deployment of
//! `goodput serve-sim` pods (time scale 5) behind a Service.
//!
//! The evidence is a CapacityBenchmark whose result (24 RPS on 4 replicas, the seed's
//! worked example) is written through `/status` before the operator starts, so the plan's
//! arithmetic is checked on known numbers; the revalidations are real measurements of the
//! scaled Deployment.

use crate::fake_prometheus;
use crate::fixture;
use crate::harness;

use std::time::Duration;

use fixture::{IDENTITY, NS, condition, engines, evidence, unstarted_engines};
use goodput::api::conditions::plan::{self as plan_cond, reason};
use goodput::api::{CapacityBenchmark, ServingPlan, Verification};
use harness::{Operator, Setup, setup};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Event, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Plans measure latency on a 2-core machine: one test at a time.
use crate::MACHINE;

/// The plan the tests make.
const PLAN: &str = "qwen-chat";

/// The Service `qwen` in front of the pods labelled `app: <app>`.
fn service(app: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "qwen"},
        "spec": {"selector": {"app": app}, "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]}
    }))
    .expect("a Service")
}

/// The plan [`PLAN`] in `mode` ([`fixture::plan_yaml`]).
fn plan_yaml(mode: &str, extra: &str) -> String {
    fixture::plan_yaml(PLAN, mode, extra)
}

async fn create_plan(client: &kube::Client, yaml: &str) {
    let plan: ServingPlan = serde_saphyr::from_str(yaml).expect("plan YAML");
    let api: Api<ServingPlan> = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &plan)
        .await
        .expect("the plan is accepted");
}

/// Polls the plan until `done` holds, or panics after `timeout` with its status.
async fn plan_until(
    client: &kube::Client,
    timeout: Duration,
    what: &str,
    done: impl Fn(&ServingPlan) -> bool,
) -> ServingPlan {
    fixture::plan_until(client, PLAN, timeout, what, done).await
}

async fn warnings(client: &kube::Client, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    events
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.message)
        .collect()
}

fn operator(s: &Setup) -> Operator {
    s.operator(
        "goodput",
        &["--shard-start-lead-s", "5", "--plan-resync-s", "1"],
    )
}

async fn deploy(client: &kube::Client, d: Deployment) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &d)
        .await
        .expect("Deployment");
}

/// The seed's worked example end to end: evidence from another revision and TP size is
/// refused naming each difference; once the Deployment declares what was measured, the
/// plan proposes `ceil(36 / (6 × 0.75)) = 8` replicas and 16 GPUs (what `goodput plan`
/// computes); in Apply mode `/scale` goes to 8, the cluster starts 8 engines, and the
/// revalidation measures them and records `Verified` with the scaling efficiency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worked_example_is_refused_on_other_evidence_then_proposed_applied_and_verified() {
    let _machine = MACHINE.whole().await;
    let s = setup().await;
    let c = &s.client;
    let mismatched = [
        IDENTITY[0],
        ("goodput.dev/model-revision", "r2"),
        IDENTITY[2],
        ("goodput.dev/tp", "2"),
        IDENTITY[4],
    ];
    deploy(c, engines("qwen", "qwen", 4, &mismatched)).await;
    let services: Api<Service> = Api::namespaced(c.clone(), NS);
    services
        .create(&PostParams::default(), &service("qwen"))
        .await
        .expect("Service");
    evidence(c).await;
    let _op = operator(&s);
    create_plan(c, &plan_yaml("Propose", "")).await;

    // Refused: each difference named, a Warning, no proposal.
    let refused = plan_until(c, Duration::from_secs(30), "refused evidence", |p| {
        condition(p, plan_cond::EVIDENCE_VALID).is_some_and(|c| c.0 == "False")
    })
    .await;
    let (_, why, message) = condition(&refused, plan_cond::EVIDENCE_VALID).unwrap();
    assert_eq!(why, reason::EVIDENCE_REFUSED);
    assert!(
        message.contains("model revision") && message.contains("r2"),
        "{message}"
    );
    assert!(
        message.contains("TP") || message.contains("tp"),
        "{message}"
    );
    let status = refused.status.as_ref().unwrap();
    assert_eq!(
        status.proposed_replicas, None,
        "nothing proposed on refused evidence"
    );
    assert_eq!(status.evidence.as_ref().unwrap().refused.len(), 2);
    assert_eq!(condition(&refused, "Ready").unwrap().0, "False");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !warnings(c, reason::EVIDENCE_REFUSED).await.is_empty(),
        "a Warning Event"
    );

    // The Deployment now declares what was measured: the worked example.
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), NS);
    let annotations: serde_json::Map<String, Value> = IDENTITY
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    deployments
        .patch(
            "qwen",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await
        .expect("annotations");
    let proposed = plan_until(c, Duration::from_secs(30), "a proposal", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.proposed_replicas.is_some())
    })
    .await;
    let st = proposed.status.as_ref().unwrap();
    assert_eq!(st.peak_rps, Some(36.0));
    assert_eq!(st.capacity_per_replica_rps, Some(6.0));
    assert_eq!(
        (st.current_replicas, st.proposed_replicas, st.proposed_gpus),
        (Some(4), Some(8), Some(16))
    );
    assert_eq!(st.arithmetic[0], "ceil(36 / (6 × 0.75)) = ceil(8) = 8");
    let ev = st.evidence.as_ref().unwrap();
    assert_eq!(ev.source, "CapacityBenchmark qwen-capacity");
    assert_eq!((ev.capacity_rps, ev.replicas_tested), (Some(24.0), Some(4)));
    assert_eq!(ev.weakest_class.as_deref(), Some("long"));
    assert_eq!(ev.pack.as_deref(), Some("pvc/results/qwen-capacity/g1/"));
    assert_eq!(condition(&proposed, "Ready").unwrap().1, reason::PROPOSED);
    assert_eq!(
        condition(&proposed, plan_cond::APPLIED).unwrap().1,
        reason::PROPOSE_ONLY
    );
    let d = deployments.get("qwen").await.unwrap();
    assert_eq!(d.spec.replicas, Some(4), "Propose writes nothing");

    // `goodput plan` computes the same from the same figures.
    let out = std::process::Command::new(harness::GOODPUT)
        .args([
            "plan",
            "--peak-rps",
            "36",
            "--capacity-rps",
            "24",
            "--replicas-tested",
            "4",
            "--gpus-per-replica",
            "2",
            "--output",
            "json",
        ])
        .output()
        .expect("goodput plan");
    let json: Value = serde_json::from_slice(&out.stdout).expect("plan --output json");
    assert_eq!(json["required_replicas"], 8);
    assert_eq!(json["required_gpus"], 16);

    // Apply: /scale to 8, then a revalidation of the 8 replicas.
    let plans: Api<ServingPlan> = Api::namespaced(c.clone(), NS);
    plans
        .patch(
            PLAN,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "Apply"}})),
        )
        .await
        .expect("mode Apply");
    let applied = plan_until(c, Duration::from_secs(30), "applied", |p| {
        condition(p, plan_cond::APPLIED).is_some_and(|c| c.0 == "True")
    })
    .await;
    let a = applied.status.as_ref().unwrap().applied.clone().unwrap();
    assert_eq!((a.replicas, a.via.as_str()), (8, "scale"));
    let d = deployments.get("qwen").await.unwrap();
    assert_eq!(d.spec.replicas, Some(8));

    let verified = plan_until(c, Duration::from_secs(240), "a verification", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.verification.as_ref())
            .is_some_and(|v| v.state != Verification::RUNNING)
    })
    .await;
    let v = verified
        .status
        .as_ref()
        .unwrap()
        .verification
        .clone()
        .unwrap();
    assert_eq!(v.replicas, 8);
    assert_eq!(v.expected_fleet_rps, Some(48.0));
    assert_eq!(v.state, Verification::VERIFIED, "{v:#?}");
    // Eight engines each carry far more than the 6 RPS the evidence credits them with: the
    // linear expectation passes and the sweep goes on above it (the driver adds rates
    // while they pass), so the efficiency is above 1. No simulated engine of this preset
    // serves 20 RPS of this mix, so eight cannot exceed 160.
    let measured = v.measured_fleet_rps.expect("a measured fleet capacity");
    assert!((48.0..160.0).contains(&measured), "{measured}");
    assert_eq!(
        v.scaling_efficiency,
        Some((measured / 48.0 * 1000.0).round() / 1000.0)
    );
    let (status, why, _) = condition(&verified, plan_cond::VERIFIED).unwrap();
    assert_eq!((status, why), ("True", reason::VERIFIED));
    // The revalidation benchmark is the plan's own.
    let cbs: Api<CapacityBenchmark> = Api::namespaced(c.clone(), NS);
    let own = cbs
        .get(&v.benchmark)
        .await
        .expect("the revalidation benchmark");
    assert_eq!(
        own.metadata.owner_references.unwrap()[0].kind,
        "ServingPlan"
    );
    assert_eq!(own.spec.target.replicas, Some(8));

    // The Deployment now declares another engine version: the benchmark no longer matches
    // it, so the plan measures the workload as it runs now and plans on that measurement.
    deployments
        .patch(
            "qwen",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"goodput.dev/engine-version": "0.2.0"}}}),
            ),
        )
        .await
        .expect("a new engine version");
    let again = plan_until(
        c,
        Duration::from_secs(240),
        "evidence from a revalidation",
        |p| condition(p, plan_cond::EVIDENCE_VALID).is_some_and(|c| c.1 == reason::REVALIDATED),
    )
    .await;
    let st = again.status.as_ref().unwrap();
    let v = st.verification.as_ref().unwrap();
    assert!(v.identity.contains("engine=0.2.0"), "{v:#?}");
    assert_eq!((v.replicas, v.state.as_str()), (8, Verification::VERIFIED));
    let ev = st.evidence.as_ref().unwrap();
    assert_eq!(
        ev.source,
        format!("CapacityBenchmark {} (revalidation)", v.benchmark)
    );
    assert_eq!(ev.capacity_rps, v.measured_fleet_rps);
    assert!(
        ev.reason.as_deref().unwrap().contains("engine version"),
        "{ev:#?}"
    );
    // Its benchmark's manifest says what it measured: the new version on 8 replicas.
    let own = cbs
        .get(&v.benchmark)
        .await
        .expect("the new revalidation benchmark");
    let manifest = own.spec.workload.manifest.expect("an inline manifest");
    assert_eq!(manifest.engine.version, "0.2.0");
    assert_eq!(manifest.engine.placement.replicas, 8);
    // The older revalidation is gone; the proposal holds at 8 through the cooldown.
    let all = cbs.list(&Default::default()).await.unwrap().items;
    let verifications = all
        .iter()
        .filter(|b| b.metadata.owner_references.is_some())
        .count();
    assert_eq!(verifications, 1);
    let st = plan_until(
        c,
        Duration::from_secs(30),
        "a proposal on the new evidence",
        |p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.proposed_replicas.is_some())
        },
    )
    .await
    .status
    .unwrap();
    assert_eq!(st.proposed_replicas, Some(8), "{:?}", st.arithmetic);
}

/// A fleet that cannot scale linearly: the Deployment goes to 8 replicas but its Service
/// reaches a fixed pair of engines (a shared bottleneck), so the peak fails on the new
/// topology: `Verified=False` with the shortfall, the scaling efficiency and a proposal
/// from the measured capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_behind_a_shared_bottleneck_is_not_verified_and_gets_a_measured_proposal() {
    let _machine = MACHINE.whole().await;
    let s = setup().await;
    let c = &s.client;
    deploy(c, engines("qwen", "qwen", 8, &IDENTITY)).await;
    deploy(c, engines("bottleneck", "bottleneck", 2, &IDENTITY)).await;
    let services: Api<Service> = Api::namespaced(c.clone(), NS);
    services
        .create(&PostParams::default(), &service("bottleneck"))
        .await
        .expect("Service");
    evidence(c).await;
    let _op = operator(&s);
    create_plan(c, &plan_yaml("Propose", "")).await;
    let done = plan_until(c, Duration::from_secs(240), "a verification", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.verification.as_ref())
            .is_some_and(|v| v.state != Verification::RUNNING)
    })
    .await;
    let v = done.status.as_ref().unwrap().verification.clone().unwrap();
    assert_eq!(v.state, Verification::SHORTFALL, "{v:#?}");
    assert_eq!(v.expected_fleet_rps, Some(48.0));
    // Two engines carry under the peak of this mix: a quarter of the expectation (12 RPS)
    // passes, the peak (36) and the expectation (48) do not; refinement then narrows the
    // measured fleet capacity between the highest pass and 36.
    let measured = v.measured_fleet_rps.expect("a rate passed");
    assert!((12.0..36.0).contains(&measured), "{measured}");
    // The status keeps three decimals.
    let efficiency = v.scaling_efficiency.expect("an efficiency");
    assert!((efficiency - measured / 48.0).abs() <= 5e-4, "{efficiency}");
    let shortfall = v.shortfall_rps.expect("a shortfall");
    assert!((shortfall - (36.0 - measured)).abs() <= 5e-4, "{shortfall}");
    let per_replica = measured / 8.0;
    let expected = (36.0 / (per_replica * 0.75)).ceil() as u32;
    assert_eq!(v.proposed_replicas, Some(expected));
    let (status, why, message) = condition(&done, plan_cond::VERIFIED).unwrap();
    assert_eq!((status, why), ("False", reason::SHORTFALL));
    assert!(message.contains("short"), "{message}");
    // The plan now stands on the measured capacity of this topology.
    let st = plan_until(c, Duration::from_secs(10), "the measured proposal", |p| {
        p.status.as_ref().and_then(|s| s.proposed_replicas) == Some(expected)
    })
    .await;
    assert!(st.status.unwrap().arithmetic[0].contains("measured on 8 replicas"));
    assert!(
        !warnings(c, reason::SHORTFALL).await.is_empty(),
        "a Warning Event"
    );
}

/// An HPA manages the workload: Apply raises its `minReplicas` instead of writing
/// `/scale`, and an HPA whose maximum is below the proposal is a condition with nothing
/// written; a KEDA ScaledObject gets its `minReplicaCount` raised the same way. A Prometheus peak (P99 of a window of rates × growth) plans the same way, and
/// a query that returns nothing is a condition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_gets_its_minimum_raised_and_a_prometheus_peak_is_planned() {
    // The whole machine: beside another test (with a part) its plan once went unreconciled
    // for 30 s, cause unseen (a failure now prints the operator's log).
    let _machine = MACHINE.whole().await;
    let s = setup().await;
    let c = &s.client;
    deploy(c, engines("qwen", "qwen", 4, &IDENTITY)).await;
    evidence(c).await;
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(c.clone(), NS);
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": "qwen"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "qwen"},
                 "minReplicas": 2, "maxReplicas": 6}
    }))
    .unwrap();
    hpas.create(&PostParams::default(), &hpa)
        .await
        .expect("HPA");
    // 4,000 five-minute rates within the last 14 days (the oldest 10 minutes inside the
    // window, the newest hours before now): k, 2k, ..., 4000k with k = 0.0075 RPS, so the
    // nearest-rank P99 (rank 3,960) is 29.7 RPS.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let samples: Vec<(f64, f64)> = (0..4000)
        .map(|i| {
            let t = now - 14.0 * 86_400.0 + 600.0 + 300.0 * f64::from(i);
            (t, f64::from(i + 1) * 0.0075)
        })
        .collect();
    let prometheus = fake_prometheus::FakePrometheus::start(vec![samples]).await;
    let op = operator(&s);
    let extra = format!(
        "  revalidation: {{enabled: false}}\n  peak:\n    prometheus: {{url: \"{}\", query: \
         \"sum(rate(vllm:request_success_total[5m]))\", lookback: 336h, step: 5m, quantile: \
         0.99, growthFactor: 1.2}}\n",
        prometheus.url
    );
    let yaml = plan_yaml("Apply", &extra).replace("  peak: {rps: 36}\n", "");
    create_plan(c, &yaml).await;

    // P99 = 29.7 × 1.2 = 35.64 RPS → ceil(35.64 / (6 × 0.75)) = 8 > the HPA's maximum of 6.
    let conflict = plan_until(c, Duration::from_secs(30), "the HPA conflict", |p| {
        condition(p, plan_cond::APPLIED).is_some_and(|c| c.1 == reason::AUTOSCALER_MAX_CONFLICT)
    })
    .await;
    let st = conflict.status.as_ref().unwrap();
    assert_eq!(st.peak_rps, Some(35.64));
    assert!(
        st.peak_source.as_deref().unwrap().contains("P99"),
        "{:?}",
        st.peak_source
    );
    assert_eq!(
        st.proposed_replicas,
        Some(8),
        "the proposal stands, unapplied"
    );
    let h = hpas.get("qwen").await.unwrap().spec;
    assert_eq!(h.min_replicas, Some(2), "nothing written");
    assert!(
        prometheus
            .queries()
            .iter()
            .any(|q| q.contains("request_success_total"))
    );

    // The HPA may reach 10: its minimum goes to 8, the Deployment's /scale is left to it.
    hpas.patch(
        "qwen",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"maxReplicas": 10}})),
    )
    .await
    .expect("HPA max");
    let applied = plan_until(c, Duration::from_secs(30), "applied through the HPA", |p| {
        condition(p, plan_cond::APPLIED).is_some_and(|c| c.0 == "True")
    })
    .await;
    let a = applied.status.as_ref().unwrap().applied.clone().unwrap();
    assert_eq!((a.replicas, a.via.as_str()), (8, "hpa/qwen"));
    assert_eq!(hpas.get("qwen").await.unwrap().spec.min_replicas, Some(8));
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), NS);
    assert_eq!(
        deployments.get("qwen").await.unwrap().spec.replicas,
        Some(4)
    );

    // KEDA instead of the HPA: its ScaledObject's minReplicaCount is raised.
    hpas.delete("qwen", &Default::default())
        .await
        .expect("HPA deleted");
    install_keda_crd(c).await;
    let keda = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
        "scaledobjects",
    );
    let scaled: Api<kube::api::DynamicObject> = Api::namespaced_with(c.clone(), NS, &keda);
    let so: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": "qwen"},
        "spec": {"scaleTargetRef": {"name": "qwen"}, "minReplicaCount": 1, "maxReplicaCount": 20,
                 "triggers": [{"type": "prometheus", "metadata": {"query": "x", "threshold": "5"}}]}
    }))
    .unwrap();
    scaled
        .create(&PostParams::default(), &so)
        .await
        .expect("ScaledObject");
    let applied = plan_until(c, Duration::from_secs(30), "applied through KEDA", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.applied.as_ref())
            .is_some_and(|a| a.via == "scaledobject/qwen")
    })
    .await;
    assert_eq!(applied.status.unwrap().applied.unwrap().replicas, 8);
    let so = scaled.get("qwen").await.unwrap();
    assert_eq!(so.data["spec"]["minReplicaCount"], 8);
    assert_eq!(
        so.data["spec"]["maxReplicaCount"], 20,
        "only the minimum is written"
    );
    // The operator counts what it did.
    let metrics = op.metrics_text().await.expect("/metrics answers");
    for kind in ["proposed", "applied"] {
        let line = format!("goodput_operator_servingplan_events_total{{kind=\"{kind}\"}} ");
        let count: f64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(line.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {line} in:\n{metrics}"));
        assert!(count >= 1.0, "{line}{count}");
    }
    assert!(
        metrics.contains("goodput_operator_servingplan_proposed_replicas{namespace=\"default\",plan=\"qwen-chat\"} 8"),
        "{metrics}"
    );

    // A query that returns nothing: a condition, a Warning, no proposal.
    prometheus.set(fake_prometheus::Answer::Empty);
    let plans: Api<ServingPlan> = Api::namespaced(c.clone(), NS);
    plans
        .patch(
            PLAN,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"peak": {"prometheus": {"quantile": 0.95}}}})),
        )
        .await
        .expect("a new quantile reads the peak again");
    let empty = plan_until(c, Duration::from_secs(30), "the empty peak", |p| {
        condition(p, "Ready").is_some_and(|c| c.1 == reason::PEAK_EMPTY)
    })
    .await;
    assert_eq!(empty.status.as_ref().unwrap().proposed_replicas, None);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !warnings(c, reason::PEAK_EMPTY).await.is_empty(),
        "a Warning Event"
    );
}

/// Patches the plan's spec (a JSON merge patch).
async fn patch_plan(client: &kube::Client, spec: Value) {
    let plans: Api<ServingPlan> = Api::namespaced(client.clone(), NS);
    plans
        .patch(
            PLAN,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .expect("the plan is patched");
}

/// What needs no load: a target without `/scale`, a missing benchmark, a rejected scale
/// write (a condition, a Warning, a retry with backoff, and never a half-written scale), a
/// peak oscillating around a boundary (the proposal does not flap), a plan at rest (no
/// status write), and a Prometheus query that does not answer in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_are_conditions_and_an_oscillating_peak_does_not_flap_the_proposal() {
    let _machine = MACHINE.whole().await;
    let s = setup().await;
    let c = &s.client;
    // The engines are never started: a plan reads only the Deployment and its /scale.
    deploy(c, unstarted_engines("qwen", 4, &IDENTITY)).await;
    evidence(c).await;
    let _op = operator(&s);

    // A kind without /scale.
    let yaml = plan_yaml("Apply", "  revalidation: {enabled: false}\n").replace(
        "{apiVersion: apps/v1, kind: Deployment, name: qwen}",
        "{apiVersion: v1, kind: ConfigMap, name: qwen}",
    );
    create_plan(c, &yaml).await;
    let p = plan_until(c, Duration::from_secs(30), "no /scale", |p| {
        condition(p, "Ready").is_some_and(|c| c.1 == reason::NO_SCALE_SUBRESOURCE)
    })
    .await;
    assert!(
        condition(&p, "Ready")
            .unwrap()
            .2
            .contains("v1 ConfigMap has no /scale")
    );

    // The Deployment, and a benchmark that does not exist.
    patch_plan(
        c,
        json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "qwen"},
               "capacity": {"benchmarkRef": {"name": "missing"}}}),
    )
    .await;
    let p = plan_until(c, Duration::from_secs(30), "a missing benchmark", |p| {
        condition(p, plan_cond::EVIDENCE_VALID).is_some_and(|c| c.1 == reason::BENCHMARK_NOT_FOUND)
    })
    .await;
    assert!(
        condition(&p, plan_cond::EVIDENCE_VALID)
            .unwrap()
            .2
            .contains("missing")
    );

    // Two rejected scale writes: a condition and a Warning, then the retry succeeds.
    s.cluster
        .faults()
        .fail_next("patch", "apps", "deployments/scale", 2, 500);
    patch_plan(
        c,
        json!({"capacity": {"benchmarkRef": {"name": "qwen-capacity"}}}),
    )
    .await;
    plan_until(c, Duration::from_secs(30), "a failed scale write", |p| {
        condition(p, plan_cond::APPLIED).is_some_and(|c| c.1 == reason::SCALE_FAILED)
    })
    .await;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), NS);
    assert_eq!(
        deployments.get("qwen").await.unwrap().spec.replicas,
        Some(4)
    );
    let p = plan_until(c, Duration::from_secs(60), "the retried write", |p| {
        condition(p, plan_cond::APPLIED).is_some_and(|c| c.0 == "True")
    })
    .await;
    assert_eq!(p.status.unwrap().applied.unwrap().replicas, 8);
    assert_eq!(
        deployments.get("qwen").await.unwrap().spec.replicas,
        Some(8)
    );
    assert!(
        !warnings(c, reason::SCALE_FAILED).await.is_empty(),
        "a Warning Event"
    );

    // A peak oscillating around the 8/9 boundary: up to 9 at once, then held there through
    // the scale-down cooldown (15 minutes by default) however often it dips.
    patch_plan(c, json!({"mode": "Propose"})).await;
    for (peak, round) in [(36.1, 0), (35.9, 1), (36.1, 2), (35.9, 3)] {
        patch_plan(c, json!({"peak": {"rps": peak}})).await;
        let p = plan_until(c, Duration::from_secs(30), "the new peak", |p| {
            p.status.as_ref().is_some_and(|s| {
                s.peak_rps == Some(peak) && s.observed_generation == p.metadata.generation
            })
        })
        .await;
        let st = p.status.unwrap();
        assert_eq!(
            st.proposed_replicas,
            Some(9),
            "round {round}: {:?}",
            st.arithmetic
        );
        let required = if peak > 36.0 { 9 } else { 8 };
        assert_eq!(st.required_replicas, Some(required));
        if required == 8 {
            assert!(
                st.arithmetic.iter().any(|l| l.starts_with("held at 9")),
                "{:?}",
                st.arithmetic
            );
        }
    }

    // At rest: resyncs every second write nothing.
    let plans: Api<ServingPlan> = Api::namespaced(c.clone(), NS);
    let before = plans.get(PLAN).await.unwrap().metadata.resource_version;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = plans.get(PLAN).await.unwrap().metadata.resource_version;
    assert_eq!(before, after, "no status write when nothing changed");

    // A Prometheus that never answers: the query's timeout is a condition.
    let prometheus = fake_prometheus::FakePrometheus::start(vec![]).await;
    prometheus.set(fake_prometheus::Answer::Hang);
    patch_plan(
        c,
        json!({"peak": {"rps": null, "prometheus": {"url": prometheus.url, "query": "sum(rate(x[5m]))", "timeout": "1s"}}}),
    )
    .await;
    let p = plan_until(c, Duration::from_secs(30), "a timed-out peak", |p| {
        condition(p, "Ready").is_some_and(|c| c.1 == reason::PEAK_QUERY_FAILED)
    })
    .await;
    assert!(
        condition(&p, "Ready").unwrap().2.contains("within 1s"),
        "{:?}",
        condition(&p, "Ready")
    );
    assert_eq!(p.status.unwrap().proposed_replicas, None);
}

/// KEDA's ScaledObject CRD, as far as a plan reads it (its schema left open).
async fn install_keda_crd(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "scaledobjects.keda.sh"},
        "spec": {
            "group": "keda.sh",
            "names": {"kind": "ScaledObject", "plural": "scaledobjects", "singular": "scaledobject"},
            "scope": "Namespaced",
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("KEDA CRD");
    let established = kube::runtime::wait::await_condition(
        crds,
        "scaledobjects.keda.sh",
        kube::runtime::conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(30), established)
        .await
        .expect("established in time")
        .expect("watching the CRD");
}
