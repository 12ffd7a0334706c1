//! The failure phase of a CapacityBenchmark in a cluster: on the in-repo test cluster (the
//! API server double, pods as local processes, Services as loopback proxies), a Deployment
//! of four `goodput serve-sim` pods (time scale 5) behind a Service, the operator as its
//! own process. After the sweep, the operator runs the kill-one-replica test at the
//! passing rate × 20/24: it deletes a ready pod of the Service on the load's timeline,
//! reads the EndpointSlice for the removal and the replacement, and writes the report of
//! `goodput bench`'s analysis into `status.failureTest` and `failure-test.md`.

use crate::MACHINE;
use crate::fixture;
use crate::harness;

use std::time::Duration;

use goodput::api::{FaultKind, Phase};
use goodput::failure::FailureVerdict;
use harness::{MANIFEST, create, phase, setup};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Service};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

const NS: &str = "default";

/// A benchmark of Service `qwen` (4 replicas, time scale 5) from 16 RPS, far below what
/// four engines hold, then the kill of replica 1 at the capacity × 20/24.
fn benchmark_yaml(name: &str, failure_test: &str) -> String {
    format!(
        r#"apiVersion: goodput.dev/v1alpha1
kind: CapacityBenchmark
metadata: {{name: {name}}}
spec:
  target:
    service: {{name: qwen, port: 8000}}
    # serve-sim's router answers on 8000; its replica's engine metrics are on 8001.
    metricsPort: 8001
    timeScale: 5
  workload:
    manifest:{MANIFEST}
  experiments:
    rateSweep: {{rates: [16]}}
    maxLagMs: 25
  failureTest: {failure_test}
"#
    )
}

async fn engines_behind_a_service(client: &kube::Client) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    deployments
        .create(
            &PostParams::default(),
            &fixture::engines("qwen", "qwen", 4, &fixture::IDENTITY),
        )
        .await
        .expect("Deployment");
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "qwen"},
        "spec": {"selector": {"app": "qwen"}, "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]}
    }))
    .expect("a Service");
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    services
        .create(&PostParams::default(), &service)
        .await
        .expect("Service");
}

async fn events(client: &kube::Client, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default())
        .await
        .expect("events list")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

/// The kill of one of four replicas at a passing rate: the pod is deleted on the load's
/// timeline, the EndpointSlice's removal is the detection and the routing removal, the
/// Deployment's replacement brings the capacity back, every request is accounted for with
/// none lost, and the report (the same analysis as `goodput bench`'s) is in status and in
/// `failure-test.md` beside the load's merged report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pod_is_seen_in_the_endpoint_slice_and_reported_in_status() {
    let _machine = MACHINE.whole().await;
    let s = setup().await;
    let c = &s.client;
    engines_behind_a_service(c).await;
    let _operator = s.operator("goodput", &["--shard-start-lead-s", "3"]);
    create(
        c,
        &benchmark_yaml(
            "killed",
            "{steadySeconds: 30, observeSeconds: 60, faults: [{kind: KillReplica, replica: 1}, \
             {kind: RequestCancel, cancelFraction: 0.25, cancelAfterChunks: 2, \
             durationSeconds: 20}]}",
        ),
    )
    .await;
    let cb = harness::succeeded(c, "killed", Duration::from_secs(300)).await;
    let status = cb.status.as_ref().expect("status");
    // The sweep goes on past a rate every class passes, so the capacity is 16 RPS or more.
    let capacity = status.capacity_rps.expect("a capacity");
    assert!(capacity >= 16.0, "{:#?}", status.points);
    let rate = (capacity * 20.0 / 24.0 * 1000.0).round() / 1000.0;
    let ft = status.failure_test.as_ref().expect("status.failureTest");
    assert!(ft.errors.is_empty(), "{:?}", ft.errors);
    assert_eq!(ft.rate_rps, Some(rate));
    assert_eq!((ft.next, ft.current.as_ref()), (2, None));
    let [r, cancelled] = ft.reports.as_slice() else {
        panic!("two reports: {ft:#?}")
    };
    let dump = serde_json::to_string_pretty(r).expect("the report serialises");
    assert_eq!(r.fault, FaultKind::KillReplica);
    assert_eq!(r.replicas, 4, "{dump}");
    assert_eq!(r.rate_rps, rate);
    // The pod deleted is the second of the Service's ready pods by name, and it is gone.
    let victim = r.replica.strip_prefix("pod ").expect("a pod");
    let pods: Api<Pod> = Api::namespaced(c.clone(), NS);
    assert!(pods.get_opt(victim).await.expect("pods read").is_none());
    // The fault went in after the warmup and the steady period, on the load's timeline
    // (model seconds: 3 + 30, give or take the operator's reaction).
    assert!(
        (33.0..40.0).contains(&r.injected_at_s),
        "injected at {} s: {dump}",
        r.injected_at_s
    );
    let removed = r
        .signals
        .endpoint_removed_s
        .expect("the endpoint's removal");
    assert!(
        removed >= r.injected_at_s && removed - r.injected_at_s < 10.0,
        "{dump}"
    );
    assert!(r.detected_at_s.is_some_and(|t| t <= removed), "{dump}");
    assert_eq!(r.stopped_receiving_work, Some(true), "{dump}");
    assert_eq!(
        r.signals.routed_after_removal, None,
        "a Service's proxy does not count its picks"
    );
    let back = r.signals.serving_again_s.expect("the replacement serves");
    assert!(back > removed, "{dump}");
    assert!(r.capacity_returned);
    // Every request accounted for, none lost: the killed pod's streams failed with an
    // error the client saw.
    let a = &r.accounting;
    assert!(a.balanced(), "{dump}");
    assert_eq!(a.lost, 0, "{dump}");
    assert!(a.attempted as f64 > rate * 80.0, "{dump}");
    assert!(
        a.engine_finished.is_some(),
        "the engines' own counters were scraped"
    );
    let names: Vec<&str> = r.windows.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["before", "during", "after"], "{dump}");
    assert_eq!(r.verdict, FailureVerdict::Pass, "{dump}");

    // The report beside the load's merged records, and the Events.
    let maps: Api<ConfigMap> = Api::namespaced(c.clone(), NS);
    let data = maps
        .get("killed-g1-f0-point")
        .await
        .expect("the point ConfigMap")
        .data
        .expect("data");
    let md = &data["failure-test.md"];
    for part in ["KillReplica", victim, "before", "during", "after", "pass"] {
        assert!(md.contains(part), "failure-test.md lacks {part}:\n{md}");
    }
    let json: goodput::failure::FailureReport =
        serde_json::from_str(&data["failure-test.json"]).expect("failure-test.json parses");
    assert_eq!(&json, r);
    assert!(
        events(c, "FailureTestPassed")
            .await
            .iter()
            .any(|m| m.contains("KillReplica")),
        "an Event for the verdict"
    );
    assert!(
        events(c, "FaultInjected")
            .await
            .iter()
            .any(|m| m.contains(&format!("Deleted pod {victim}"))),
        "an Event for the deletion"
    );

    // Then the load's own clients cancel a quarter of their requests for 20 s: the
    // engines behind the Service count them as aborted and free the slots.
    let dump = serde_json::to_string_pretty(cancelled).expect("the report serialises");
    assert_eq!(cancelled.fault, FaultKind::RequestCancel);
    assert_eq!(cancelled.replica, "every replica");
    let cx = cancelled
        .cancellation
        .as_ref()
        .expect("a cancellation block");
    assert!(cx.client_aborted as f64 > 0.15 * rate * 20.0, "{dump}");
    let counted = cx.engine_aborted.expect("the engines' abort count");
    assert!(
        counted >= 0.95 * cx.client_aborted as f64 && counted <= cx.client_aborted as f64,
        "{dump}"
    );
    assert_eq!(cx.slots_freed, Some(true), "{dump}");
    assert!(cancelled.accounting.balanced(), "{dump}");
    assert_eq!(cancelled.accounting.aborted, cx.client_aborted, "{dump}");
    assert_eq!(cancelled.verdict, FailureVerdict::Pass, "{dump}");
    let data = maps
        .get("killed-g1-f1-point")
        .await
        .expect("the second test's point ConfigMap")
        .data
        .expect("data");
    assert!(
        data["failure-test.md"].contains("### Cancelled requests"),
        "{}",
        data["failure-test.md"]
    );
    assert_eq!(phase(&cb), Some(Phase::Succeeded));
}

/// What the operator cannot inject (a fault of the simulated engine's admin API, or any
/// fault against the operator's own simulated engine) is an invalid spec, with the reason
/// and an Event, before any load runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_the_cluster_cannot_inject_is_an_invalid_spec() {
    let _machine = MACHINE.whole().await;
    let s = setup().await;
    let c = &s.client;
    let _operator = s.operator("goodput", &[]);
    create(
        c,
        &benchmark_yaml("kvcut", "{faults: [{kind: KvCapacity}]}"),
    )
    .await;
    let cb = harness::wait_for(
        c,
        "kvcut",
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
    let status = cb.status.as_ref().expect("status");
    let c0 = goodput::api::conditions::find(&status.conditions, "SpecValid").expect("SpecValid");
    assert_eq!(c0.reason, "InvalidSpec");
    assert!(
        c0.message.contains("spec.failureTest.faults[0].kind") && c0.message.contains("KvCapacity"),
        "{}",
        c0.message
    );
    assert!(status.points.is_empty(), "no load ran");
    assert!(
        events(c, "InvalidSpec")
            .await
            .iter()
            .any(|m| m.contains("KvCapacity")),
        "a Warning Event says why"
    );
}
