//! The test cluster's bars, measured: start-up time (bar: under 200 ms), the memory of 100
//! concurrent watchers on one kind (bar: under 50 MiB), and a watch over 1,000 objects.
//!
//!     cargo bench -p testcluster --bench cluster

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use testcluster::cluster::{Cluster, ClusterConfig};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

async fn client(cluster: &Cluster) -> kube::Client {
    let kc = Kubeconfig::from_yaml(&cluster.kubeconfig()).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "data": {"v": "0"}}))
        .expect("configmap")
}

#[tokio::main]
async fn main() {
    // Start-up: from nothing to serving (the server answers /readyz over TLS).
    let mut starts = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let cluster = Cluster::start(ClusterConfig::default())
            .await
            .expect("start");
        let c = client(&cluster).await;
        c.apiserver_version().await.expect("version");
        starts.push(t.elapsed());
        drop(cluster);
    }
    starts.sort();
    println!(
        "start-up to first answered request: median {:.1} ms, max {:.1} ms (bar: 200 ms)",
        starts[starts.len() / 2].as_secs_f64() * 1e3,
        starts[starts.len() - 1].as_secs_f64() * 1e3
    );

    let cluster = Cluster::start(ClusterConfig::default())
        .await
        .expect("start");
    let c = client(&cluster).await;
    let api: Api<ConfigMap> = Api::default_namespaced(c.clone());
    for i in 0..100 {
        api.create(&PostParams::default(), &cm(&format!("seed{i}")))
            .await
            .expect("create");
    }
    // 100 watchers: the server's share is measured as this process's RSS growth, which
    // also includes the 100 client-side watchers (an upper bound on the server's cost).
    let before = rss_kib();
    let key = testcluster::resources::ResKey::new("", "configmaps");
    let mut handles = Vec::new();
    for _ in 0..100 {
        let api = api.clone();
        handles.push(tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(_)) = s.next().await {}
        }));
    }
    let t = Instant::now();
    while cluster.store().watchers(&key) < 100 && t.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for i in 0..200 {
        api.create(&PostParams::default(), &cm(&format!("w{i}")))
            .await
            .expect("create");
    }
    let after = rss_kib();
    println!(
        "100 watchers on one kind (with 300 objects and 200 changes delivered to each): +{:.1} MiB RSS, server and clients together (bar: 50 MiB)",
        (after.saturating_sub(before)) as f64 / 1024.0
    );
    for h in handles {
        h.abort();
    }

    // A watch over 1,000 objects: every change arrives, and how fast.
    let api2: Api<ConfigMap> = Api::namespaced(c, "kube-public");
    let mut s = watcher(api2.clone(), watcher::Config::default()).boxed();
    while let Some(Ok(ev)) = s.next().await {
        if matches!(ev, watcher::Event::InitDone) {
            break;
        }
    }
    let t = Instant::now();
    let writer = tokio::spawn(async move {
        for i in 0..1000 {
            api2.create(&PostParams::default(), &cm(&format!("o{i}")))
                .await
                .expect("create");
        }
    });
    let mut seen = 0;
    while seen < 1000 {
        if let Some(Ok(watcher::Event::Apply(_))) = s.next().await {
            seen += 1;
        }
    }
    writer.await.expect("writer");
    println!(
        "watch over 1,000 creations: all {seen} delivered in {:.2} s ({:.0} events/s, one client writing)",
        t.elapsed().as_secs_f64(),
        seen as f64 / t.elapsed().as_secs_f64()
    );
}
