//! Helpers shared by the integration tests that start the simulated engine in-process
//! (included with `#[path]`).

#![allow(dead_code)]

use std::time::Duration;

use goodput::sim::engine::{Engine, NewRequest};
use goodput::sim::live::{ReplicaConfig, ReplicaServer};
use goodput::sim::{Setup, preset};
use tokio::net::TcpListener;

/// Tests of one binary that time the engine run one at a time.
pub use crate::MACHINE;

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
    let _machine = MACHINE.whole().await;
    tokio::time::timeout(Duration::from_secs(limit_s), body)
        .await
        .expect("test finished within its time limit");
}

/// TTFT and TPOT (s) the offline model predicts for one request on an idle engine.
pub fn predict(setup: &Setup, input_len: u32, output_len: u32) -> (f64, f64) {
    let mut e = Engine::new(setup.clone());
    e.submit(NewRequest {
        input_len,
        output_len,
        block_hashes: Vec::new(),
    });
    let (mut first, mut last) = (None, 0.0);
    while e.step().is_some() {
        if !e.events().is_empty() {
            first.get_or_insert(e.now());
            last = e.now();
        }
    }
    let first = first.expect("the request produced tokens");
    (first, (last - first) / f64::from(output_len - 1))
}
