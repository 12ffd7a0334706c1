//! Workloads with real processes: Jobs whose pods run commands, a Deployment of
//! `goodput serve-sim` pods behind a Service with EndpointSlices and the loopback proxy.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testcluster::cluster::ClusterConfig;

use crate::support::{client, goodput_bin, start_with, wait_for};

fn job_condition(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

#[tokio::test]
async fn indexed_job_runs_real_commands_to_completion() {
    let cluster = start_with(ClusterConfig::default().image("busybox", "/bin/sh")).await;
    let c = client(&cluster).await;
    let jobs: Api<Job> = Api::default_namespaced(c.clone());
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "idx"},
        "spec": {
            "completionMode": "Indexed", "completions": 3, "parallelism": 3,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "work", "image": "busybox:1.36",
                "command": ["sh", "-c", "echo index=$JOB_COMPLETION_INDEX pod=$(POD_NAME)"],
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
            }]}}
        }
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let done = wait_for("the Job to complete", Duration::from_secs(30), || async {
        jobs.get("idx")
            .await
            .ok()
            .filter(|j| job_condition(j, "Complete"))
    })
    .await;
    let status = done.status.unwrap();
    assert_eq!(status.succeeded, Some(3));
    assert_eq!(status.completed_indexes.as_deref(), Some("0-2"));
    assert!(status.completion_time.is_some());
    let pods: Api<Pod> = Api::default_namespaced(c);
    let mut seen = BTreeSet::new();
    for p in pods
        .list(&ListParams::default().labels("job-name=idx"))
        .await
        .unwrap()
    {
        let log = pods
            .logs(&p.name_any(), &LogParams::default())
            .await
            .unwrap();
        let index = p.annotations()["batch.kubernetes.io/job-completion-index"].clone();
        assert!(
            log.contains(&format!("index={index} pod={}", p.name_any())),
            "{log}"
        );
        seen.insert(index);
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["0", "1", "2"]);
}

#[tokio::test]
async fn failing_pods_are_retried_until_the_backoff_limit() {
    let cluster = start_with(ClusterConfig::default().image("busybox", "/bin/sh")).await;
    let jobs: Api<Job> = Api::default_namespaced(client(&cluster).await);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "fails"},
        "spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "work", "image": "busybox", "command": ["sh", "-c", "echo failing; exit 1"]
        }]}}}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let failed = wait_for("the Job to fail", Duration::from_secs(30), || async {
        jobs.get("fails")
            .await
            .ok()
            .filter(|j| job_condition(j, "Failed"))
    })
    .await;
    let status = failed.status.unwrap();
    assert_eq!(status.failed, Some(2), "the first pod and one retry");
    let reason = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Failed")
        .and_then(|c| c.reason);
    assert_eq!(reason.as_deref(), Some("BackoffLimitExceeded"));
    assert!(!job_condition(
        &jobs.get("fails").await.unwrap(),
        "Complete"
    ));
}

/// The replica URL the pod behind a fresh connection reports (its pod IP).
async fn served_by(cluster_ip: &str) -> Option<String> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .ok()?;
    let body: serde_json::Value = client
        .get(format!("http://{cluster_ip}:8080/replicas"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    body["replicas"][0]["url"].as_str().map(str::to_owned)
}

fn ready_endpoints(slices: &[EndpointSlice]) -> BTreeSet<String> {
    slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .filter_map(|e| e.target_ref.as_ref().and_then(|t| t.name.clone()))
        .collect()
}

#[tokio::test]
async fn serve_sim_deployment_behind_a_service() {
    let cluster = start_with(ClusterConfig::default().image("goodput", goodput_bin())).await;
    let c = client(&cluster).await;
    let deployments: Api<Deployment> = Api::default_namespaced(c.clone());
    let services: Api<Service> = Api::default_namespaced(c.clone());
    let slices: Api<EndpointSlice> = Api::default_namespaced(c.clone());
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "sim"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "sim"}},
            "template": {
                "metadata": {"labels": {"app": "sim"}},
                "spec": {"containers": [{
                    "name": "engine", "image": "goodput:0.1.0",
                    "args": ["serve-sim", "--host", "$(POD_IP)", "--port", "8000", "--time-scale", "25"],
                    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1}
                }]}
            }
        }
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "sim"},
        "spec": {"selector": {"app": "sim"}, "ports": [{"name": "http", "port": 8080, "targetPort": "http"}]}
    }))
    .unwrap();
    let svc = services.create(&PostParams::default(), &svc).await.unwrap();
    let ip = svc.spec.unwrap().cluster_ip.unwrap();
    let by_service = ListParams::default().labels("kubernetes.io/service-name=sim");
    let two = wait_for("two ready endpoints", Duration::from_secs(60), || async {
        let s = slices.list(&by_service).await.ok()?.items;
        let ready = ready_endpoints(&s);
        (ready.len() == 2).then_some(ready)
    })
    .await;
    // The proxy spreads new connections over both pods.
    let mut backends = BTreeSet::new();
    for _ in 0..8 {
        if let Some(url) = served_by(&ip).await {
            backends.insert(url);
        }
    }
    assert_eq!(
        backends.len(),
        2,
        "connections through {ip} reached {backends:?}"
    );
    let status = wait_for("deployment status", Duration::from_secs(20), || async {
        let d = deployments.get("sim").await.ok()?;
        let st = d.status?;
        (st.ready_replicas == Some(2)).then_some(st)
    })
    .await;
    assert_eq!(status.observed_generation, Some(1));
    // /scale to 4 starts two more.
    deployments
        .patch_scale(
            "sim",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    wait_for("four ready endpoints", Duration::from_secs(60), || async {
        let s = slices.list(&by_service).await.ok()?.items;
        (ready_endpoints(&s).len() == 4).then_some(())
    })
    .await;
    // A killed engine process drops out of the ready endpoints until its restart passes
    // the readiness probe again.
    let killed = two.iter().nth(1).unwrap().clone();
    cluster.kubelet().kill("default", &killed);
    wait_for(
        "the killed pod to turn not ready",
        Duration::from_secs(30),
        || async {
            let s = slices.list(&by_service).await.ok()?.items;
            (!ready_endpoints(&s).contains(&killed)).then_some(())
        },
    )
    .await;
    wait_for(
        "the restarted pod to be ready again",
        Duration::from_secs(60),
        || async {
            let s = slices.list(&by_service).await.ok()?.items;
            ready_endpoints(&s).contains(&killed).then_some(())
        },
    )
    .await;
    // A deleted pod leaves the slice; its replacement joins it.
    let victim = two.iter().next().unwrap().clone();
    pods.delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the deleted pod to leave the slice",
        Duration::from_secs(30),
        || async {
            let s = slices.list(&by_service).await.ok()?.items;
            let all: BTreeSet<String> = s
                .iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .filter_map(|e| e.target_ref.as_ref().and_then(|t| t.name.clone()))
                .collect();
            (!all.contains(&victim)).then_some(())
        },
    )
    .await;
    wait_for(
        "four ready endpoints again",
        Duration::from_secs(60),
        || async {
            let s = slices.list(&by_service).await.ok()?.items;
            let ready = ready_endpoints(&s);
            (ready.len() == 4 && !ready.contains(&victim)).then_some(())
        },
    )
    .await;
}
