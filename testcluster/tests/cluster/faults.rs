//! Faults a test injects, and the cluster as a process: failed requests, dropped and
//! delayed watches, killed and not-ready pods, unpullable images, dry runs, streaming lists,
//! Lease claims, and `testcluster --kubeconfig FILE` serving until SIGTERM.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use testcluster::cluster::ClusterConfig;

use crate::api::err;
use crate::support::{Kubectl, client, start, start_with, wait_for};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test]
async fn injected_request_failures_then_recovery() {
    let cluster = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client(&cluster).await);
    cluster
        .faults()
        .fail_next("create", "", "configmaps", 2, 500);
    for _ in 0..2 {
        let e = err(api
            .create(&PostParams::default(), &cm("a"))
            .await
            .unwrap_err());
        assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));
    }
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    // kube's client retries a 429 after the server's Retry-After (1 s here), so the read
    // succeeds, late.
    cluster.faults().fail_next("get", "", "configmaps", 1, 429);
    let t = Instant::now();
    api.get("a").await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_secs(1),
        "retried after {:?}",
        t.elapsed()
    );
    cluster.faults().fail_next("get", "", "configmaps", 1, 500);
    let e = err(api.get("a").await.unwrap_err());
    assert_eq!(e.code, 500, "a 500 is not retried");
    cluster
        .faults()
        .fail_next("patch", "", "configmaps", 1, 409);
    let e = err(api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await
        .unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        api.get("a").await.unwrap().data.unwrap()["k"],
        "v",
        "the failed patch changed nothing"
    );
    // Dry runs validate and answer, and store nothing.
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let shown = api.create(&pp, &cm("dry")).await.unwrap();
    assert_eq!(shown.name_any(), "dry");
    assert!(api.get_opt("dry").await.unwrap().is_none());
}

#[tokio::test]
async fn dropped_watches_resume_and_delayed_watches_lag() {
    let cluster = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client(&cluster).await);
    let mut stream = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut inits = 0;
    loop {
        match stream.next().await.unwrap().unwrap() {
            watcher::Event::Init => inits += 1,
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    // A dropped stream resumes from the last resourceVersion: no second list.
    cluster.faults().drop_watches();
    api.create(&PostParams::default(), &cm("after-drop"))
        .await
        .unwrap();
    loop {
        match stream.next().await.unwrap().unwrap() {
            watcher::Event::Apply(o) if o.name_any() == "after-drop" => break,
            watcher::Event::Init => inits += 1,
            _ => {}
        }
    }
    assert_eq!(inits, 1, "a healthy resume does not relist");
    // Delayed events arrive no sooner than the delay.
    cluster.faults().delay_watches(Duration::from_millis(300));
    let t = Instant::now();
    api.create(&PostParams::default(), &cm("delayed"))
        .await
        .unwrap();
    loop {
        if let watcher::Event::Apply(o) = stream.next().await.unwrap().unwrap()
            && o.name_any() == "delayed"
        {
            break;
        }
    }
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "arrived after {:?}",
        t.elapsed()
    );
    cluster.faults().delay_watches(Duration::ZERO);
}

#[tokio::test]
async fn streaming_list_watch_sends_initial_events_then_a_bookmark() {
    let cluster = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client(&cluster).await);
    api.create(&PostParams::default(), &cm("one"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("two"))
        .await
        .unwrap();
    let mut stream = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut initial = Vec::new();
    loop {
        match stream.next().await.unwrap().unwrap() {
            watcher::Event::Init => {}
            watcher::Event::InitApply(o) => initial.push(o.name_any()),
            watcher::Event::InitDone => break,
            e => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(initial, ["one", "two"]);
    api.create(&PostParams::default(), &cm("three"))
        .await
        .unwrap();
    match stream.next().await.unwrap().unwrap() {
        watcher::Event::Apply(o) => assert_eq!(o.name_any(), "three"),
        e => panic!("unexpected {e:?}"),
    }
}

#[tokio::test]
async fn lease_claims_exclude_each_other_through_apply_conflicts() {
    let cluster = start().await;
    let leases: Api<Lease> = Api::default_namespaced(client(&cluster).await);
    let claim = |holder: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader"},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
    };
    leases
        .patch(
            "leader",
            &PatchParams::apply("kube-lease-a"),
            &Patch::Apply(claim("a")),
        )
        .await
        .unwrap();
    let e = err(leases
        .patch(
            "leader",
            &PatchParams::apply("kube-lease-b"),
            &Patch::Apply(claim("b")),
        )
        .await
        .unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    // Release: a strategic merge patch with nulls deletes the fields and their ownership.
    leases
        .patch(
            "leader",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"holderIdentity": null, "leaseDurationSeconds": null}}),
            ),
        )
        .await
        .unwrap();
    let taken = leases
        .patch(
            "leader",
            &PatchParams::apply("kube-lease-b"),
            &Patch::Apply(claim("b")),
        )
        .await
        .unwrap();
    assert_eq!(taken.spec.unwrap().holder_identity.as_deref(), Some("b"));
}

fn pod_ready(p: &Pod) -> Option<bool> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status == "True")
}

fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum())
}

#[tokio::test]
async fn pod_faults_kill_not_ready_and_unpullable_images() {
    let cluster = start_with(ClusterConfig::default().image("busybox", "/bin/sh")).await;
    let pods: Api<Pod> = Api::default_namespaced(client(&cluster).await);
    let pod = |name: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "echo started; exec sleep 300"]}]}
        }))
        .unwrap()
    };
    pods.create(&PostParams::default(), &pod("p"))
        .await
        .unwrap();
    wait_for("the pod to be ready", Duration::from_secs(20), || async {
        pods.get("p")
            .await
            .ok()
            .filter(|p| pod_ready(p) == Some(true))
    })
    .await;
    // Killing the process restarts it (restartPolicy Always).
    cluster.kubelet().kill("default", "p");
    wait_for("a restart", Duration::from_secs(20), || async {
        pods.get("p")
            .await
            .ok()
            .filter(|p| restarts(p) >= 1 && pod_ready(p) == Some(true))
    })
    .await;
    // Marked not ready whatever its probes say, then back.
    cluster
        .kubelet()
        .set_ready_override("default", "p", Some(false));
    wait_for("not ready", Duration::from_secs(20), || async {
        pods.get("p")
            .await
            .ok()
            .filter(|p| pod_ready(p) == Some(false))
    })
    .await;
    cluster.kubelet().set_ready_override("default", "p", None);
    wait_for("ready again", Duration::from_secs(20), || async {
        pods.get("p")
            .await
            .ok()
            .filter(|p| pod_ready(p) == Some(true))
    })
    .await;
    // An unpullable image keeps a new pod waiting in ErrImagePull until it is pullable.
    cluster.kubelet().set_image_pullable("busybox", false);
    pods.create(&PostParams::default(), &pod("q"))
        .await
        .unwrap();
    let waiting = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.first())
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.clone())
    };
    let reason = wait_for("ErrImagePull", Duration::from_secs(20), || async {
        pods.get("q").await.ok().and_then(|p| waiting(&p))
    })
    .await;
    assert!(
        reason == "ErrImagePull" || reason == "ImagePullBackOff",
        "{reason}"
    );
    cluster.kubelet().set_image_pullable("busybox", true);
    wait_for(
        "the pod to start once pullable",
        Duration::from_secs(20),
        || async {
            pods.get("q")
                .await
                .ok()
                .filter(|p| pod_ready(p) == Some(true))
        },
    )
    .await;
    // Logs through kubectl.
    let Some(k) = Kubectl::new(&cluster) else {
        return;
    };
    let out = k.ok(&["logs", "q"]).await;
    assert!(out.contains("started"), "{out}");
    let out = k.ok(&["get", "pods"]).await;
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{out}"
    );
}

#[tokio::test]
async fn serves_as_a_process_until_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let started = Instant::now();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_testcluster"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--image")
        .arg("busybox=/bin/sh")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_for("the kubeconfig", Duration::from_secs(20), || async {
        kubeconfig.exists().then_some(())
    })
    .await;
    eprintln!(
        "kubeconfig written {:?} after the process started",
        started.elapsed()
    );
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let c = crate::support::client_from(&text).await;
    let pods: Api<Pod> = Api::default_namespaced(c);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "hello"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1", "command": ["sh", "-c", "echo hi"]}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_for("the pod to succeed", Duration::from_secs(20), || async {
        pods.get("hello")
            .await
            .ok()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
    })
    .await;
    if let Some(k) = Kubectl::with_kubeconfig(&text) {
        let out = k.ok(&["get", "pods", "-A"]).await;
        assert!(out.contains("hello") && out.contains("Completed"), "{out}");
    }
    let pid = child.id().unwrap() as i32;
    // SAFETY: signalling our own child process by its pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
}
