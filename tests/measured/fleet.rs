//! `serve-sim` as a fleet: replicas behind the router, the port contract, and fault
//! injection through the admin API (kill → errors until detection → removal → restore).

use crate::MACHINE;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use goodput::sim::live::fleet::{FleetConfig, start_fleet};
use goodput::sim::live::router::RouterConfig;
use goodput::sim::live::{FaultConfig, ReplicaConfig};
use goodput::sim::preset;
use serde_json::{Value, json};

fn client() -> reqwest::Client {
    goodput::http_client::default_http_client(Duration::from_secs(2)).unwrap()
}

fn fleet_config(replicas: u32) -> FleetConfig {
    FleetConfig {
        replica: ReplicaConfig {
            time_scale: 20.0,
            ..ReplicaConfig::new(preset("qwen2.5-7b-h100").unwrap())
        },
        replicas,
        host: [127, 0, 0, 1].into(),
        port: 0,
        router: RouterConfig {
            health_interval: Duration::from_millis(20),
            detection_delay: Duration::from_millis(300),
            ..RouterConfig::default()
        },
        cold_start: Duration::from_millis(200),
        faults: FaultConfig::default(),
    }
}

/// A short non-streaming completion; `Ok(status)` or `Err` when the connection failed.
async fn complete(c: &reqwest::Client, url: &str) -> Result<u16, reqwest::Error> {
    let body = json!({"model": "Qwen/Qwen2.5-7B-Instruct", "prompt": [1, 2, 3, 4], "max_tokens": 4, "ignore_eos": true});
    let r = c
        .post(format!("{url}/v1/completions"))
        .json(&body)
        .send()
        .await?;
    let status = r.status().as_u16();
    r.bytes().await?;
    Ok(status)
}

#[tokio::test]
async fn kill_is_detected_then_routed_around_and_restore_rejoins() {
    let _machine = MACHINE.whole().await;
    let fleet = start_fleet(fleet_config(2)).await.unwrap();
    let url = fleet.router_url();
    let c = client();
    for _ in 0..4 {
        assert_eq!(complete(&c, &url).await.unwrap(), 200);
    }
    let killed: Value = c
        .post(format!("{url}/admin/replicas/0/kill"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(killed["killed_at_unix_ms"].as_u64().unwrap() > 0);
    let killed_at = Instant::now();

    // Until the router notices, requests routed to the dead replica fail (502 or refused).
    let mut failures = 0;
    while fleet.router.backends()[0].in_rotation() {
        assert!(
            killed_at.elapsed() < Duration::from_secs(5),
            "never detected"
        );
        if complete(&c, &url).await.map_or(true, |s| s != 200) {
            failures += 1;
        }
    }
    let detected = killed_at.elapsed();
    assert!(detected >= Duration::from_millis(300), "{detected:?}");
    assert!(failures > 0, "no request saw the dead replica");
    for _ in 0..6 {
        assert_eq!(complete(&c, &url).await.unwrap(), 200);
    }

    let restore: Value = c
        .post(format!("{url}/admin/replicas/0/restore"))
        .json(&json!({"cold_start_ms": 200}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(restore["replica"], 0);
    let restored = Instant::now();
    while !fleet.router.backends()[0].in_rotation() {
        assert!(
            restored.elapsed() < Duration::from_secs(5),
            "never readmitted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        restored.elapsed() >= Duration::from_millis(200),
        "served before the cold start"
    );
    let list: Value = c
        .get(format!("{url}/admin/replicas"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["replicas"][0]["serving"], true);
    fleet.shutdown().await;
}

#[tokio::test]
async fn admin_faults_and_kv_cuts_apply_and_validate() {
    let _machine = MACHINE.whole().await;
    let fleet = start_fleet(fleet_config(1)).await.unwrap();
    let url = fleet.router_url();
    let c = client();
    let r = c
        .post(format!("{url}/admin/replicas/0/faults"))
        .json(&json!({"error_fraction": 1.0, "error_status": 503}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(complete(&c, &url).await.unwrap(), 503);
    c.post(format!("{url}/admin/replicas/0/faults"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(complete(&c, &url).await.unwrap(), 200);

    let bad = c
        .post(format!("{url}/admin/replicas/0/faults"))
        .json(&json!({"error_fraction": 2.0}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let bad = c
        .post(format!("{url}/admin/replicas/0/kv"))
        .json(&json!({"factor": -1}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let missing = c
        .post(format!("{url}/admin/replicas/7/kill"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let ok = c
        .post(format!("{url}/admin/replicas/0/kv"))
        .json(&json!({"factor": 0.5}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    fleet.shutdown().await;
}

/// Three consecutive free loopback ports.
fn free_port_run(n: u16) -> u16 {
    for _ in 0..50 {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = probe.local_addr().unwrap().port();
        drop(probe);
        if base > 65_000 {
            continue;
        }
        let all_free = (0..n).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok());
        if all_free {
            return base;
        }
    }
    panic!("no run of {n} free ports");
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_cli_serves_the_router_on_p_and_replica_i_on_p_plus_1_plus_i() {
    let _machine = MACHINE.whole().await;
    let port = free_port_run(3);
    let child = Command::new(env!("CARGO_BIN_EXE_goodput"))
        .args([
            "serve-sim",
            "--preset",
            "qwen2.5-7b-h100",
            "--port",
            &port.to_string(),
        ])
        .args(["--replicas", "2", "--time-scale", "50"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _guard = Killed(child);
    let c = client();
    let router = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    let replicas: Value = loop {
        if let Ok(r) = c.get(format!("{router}/replicas")).send().await {
            break r.json().await.unwrap();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "serve-sim did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let urls: Vec<&str> = replicas["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["url"].as_str().unwrap())
        .collect();
    let expected = [
        format!("http://127.0.0.1:{}", port + 1),
        format!("http://127.0.0.1:{}", port + 2),
    ];
    assert_eq!(urls, expected);
    assert_eq!(complete(&c, &router).await.unwrap(), 200);
    for replica in &expected {
        assert_eq!(complete(&c, replica).await.unwrap(), 200);
        let metrics = c
            .get(format!("{replica}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(metrics.contains("vllm:num_requests_waiting"), "{replica}");
    }
    let router_metrics = c
        .get(format!("{router}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(router_metrics.contains("goodput_router_requests_total"));
    assert!(!router_metrics.contains("vllm:"));
}
