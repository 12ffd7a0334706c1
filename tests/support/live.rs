//! Helpers shared by the integration tests that start the simulated engine in-process
//! (included with `#[path]`).

#![allow(dead_code)]

use std::time::Duration;

use goodput::sim::live::{ReplicaConfig, ReplicaServer};
use goodput::sim::{Setup, preset};
use tokio::net::TcpListener;

/// Tests of one binary that time the engine run one at a time.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The seed's Qwen2.5-7B / H100 setup.
pub fn qwen() -> Setup {
    preset("qwen2.5-7b-h100").expect("the seed preset exists")
}

/// A replica of [`qwen`] at the given time scale.
pub fn config(time_scale: f64) -> ReplicaConfig {
    ReplicaConfig {
        time_scale,
        ..ReplicaConfig::new(qwen())
    }
}

/// Serves a replica on a loopback port chosen by the OS.
pub async fn start(config: ReplicaConfig) -> ReplicaServer {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    ReplicaServer::start(listener, config).expect("replica starts")
}

/// The project's HTTP client.
pub fn client() -> reqwest::Client {
    goodput::http_client::default_http_client(Duration::from_secs(2)).expect("client builds")
}

/// Runs a test body under the global lock and a time limit.
pub async fn bounded<F: Future<Output = ()>>(limit_s: u64, body: F) {
    let _guard = SERIAL.lock().await;
    tokio::time::timeout(Duration::from_secs(limit_s), body)
        .await
        .expect("test finished within its time limit");
}
