//! Engine metrics over loopback: the scrape loop against the simulated engine (vLLM and
//! SGLang names), target discovery through its router, and failing targets.
//!
//! Every test starts its own fleet on port-0 listeners on 127.0.0.1, holds a global lock so
//! the timing-sensitive ones do not share the CPU, and is bounded by a timeout.

use std::time::Duration;

use goodput::engine_metrics::series::slope;
use goodput::engine_metrics::{
    Concept, Coverage, DiscoverError, EngineKind, MetricsSeries, discover_targets, scrape_loop,
};
use goodput::sim::live::fleet::{Fleet, FleetConfig, start_fleet};
use goodput::sim::live::router::RouterConfig;
use goodput::sim::live::{FaultConfig, MetricsFlavor, ReplicaConfig};
use goodput::sim::preset;
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::MACHINE;

const MODEL: &str = "Qwen/Qwen2.5-7B-Instruct";

/// Runs a test body under the global lock and a time limit.
async fn bounded<F: Future<Output = ()>>(limit_s: u64, body: F) {
    let _machine = MACHINE.whole().await;
    tokio::time::timeout(Duration::from_secs(limit_s), body)
        .await
        .expect("test finished within its time limit");
}

fn client() -> reqwest::Client {
    goodput::http_client::default_http_client(Duration::from_secs(2)).expect("client builds")
}

async fn fleet(replicas: u32, flavor: MetricsFlavor) -> Fleet {
    let setup = preset("qwen2.5-7b-h100").expect("the seed preset exists");
    assert_eq!(setup.model, MODEL);
    start_fleet(FleetConfig {
        replica: ReplicaConfig {
            time_scale: 5.0,
            // Fewer SSE frames for the same tokens: the test is about the engine's queue,
            // not the client's CPU.
            stream_interval: 16,
            metrics_flavor: flavor,
            ..ReplicaConfig::new(setup)
        },
        replicas,
        host: [127, 0, 0, 1].into(),
        port: 0,
        router: RouterConfig::default(),
        cold_start: Duration::from_millis(100),
        faults: FaultConfig::default(),
    })
    .await
    .expect("fleet starts")
}

/// Starts the scrape loop on its own task; send on the returned channel to stop it.
fn start_scraping(
    targets: Vec<String>,
    interval: Duration,
) -> (oneshot::Sender<()>, JoinHandle<MetricsSeries>, Instant) {
    let (tx, rx) = oneshot::channel::<()>();
    let start = Instant::now();
    let handle = tokio::spawn(scrape_loop(client(), targets, interval, start, async {
        let _ = rx.await;
    }));
    (tx, handle, start)
}

async fn stop_scraping(
    tx: oneshot::Sender<()>,
    handle: JoinHandle<MetricsSeries>,
) -> MetricsSeries {
    let _ = tx.send(());
    handle
        .await
        .expect("the scrape loop ends without panicking")
}

/// One streaming completion of a `prompt_len`-token prompt, read to the end.
async fn stream(c: &reqwest::Client, url: &str, prompt_len: u32, max_tokens: u32, salt: u32) {
    let prompt: Vec<u32> = (0..prompt_len)
        .map(|i| 1 + (i * 7 + salt) % 50_000)
        .collect();
    let resp = c
        .post(format!("{url}/v1/completions"))
        .json(&json!({
            "model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
            "ignore_eos": true, "stream": true,
        }))
        .send()
        .await
        .expect("request sent");
    assert_eq!(resp.status(), 200);
    let body = resp.bytes().await.expect("stream read to the end");
    assert!(body.ends_with(b"data: [DONE]\n\n"), "stream cut short");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_rises_under_load_on_replicas_found_through_the_router() {
    bounded(90, async {
        let fleet = fleet(2, MetricsFlavor::Vllm).await;
        let c = client();
        let targets = discover_targets(&c, &fleet.router_url())
            .await
            .expect("discovered");
        let expected: Vec<String> = fleet.replicas.iter().map(|r| r.url()).collect();
        assert_eq!(targets, expected);

        let interval = Duration::from_millis(100);
        let (tx, handle, start) = start_scraping(targets.clone(), interval);
        // A few idle rounds first, so the counters' deltas cover every request.
        tokio::time::sleep(Duration::from_millis(250)).await;

        // Capacity for 1,024-token prompts is ~31 req/s of model time, ~155 req/s of wall
        // time at time scale 5. Offer ~330 req/s to the first replica for 300 requests
        // (about 0.9 s); the second stays idle, so the fleet's queue is the first one's.
        let n = 300u32;
        let gap = Duration::from_millis(3);
        let load_start = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..n {
            tokio::time::sleep_until(load_start + gap * i).await;
            let (c, url) = (c.clone(), targets[0].clone());
            tasks.push(tokio::spawn(
                async move { stream(&c, &url, 1024, 256, i).await },
            ));
        }
        for t in tasks {
            t.await.expect("request task");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let elapsed = start.elapsed();
        let series = stop_scraping(tx, handle).await;

        let profile = series.profile.as_ref().expect("an engine was detected");
        assert_eq!(profile.engine, EngineKind::Vllm);
        // The hit rate is hits ÷ queries: no gauge of its own is missing.
        assert!(profile.missing.is_empty(), "{:?}", profile.missing);
        assert_eq!(series.target_engines, vec![Some(EngineKind::Vllm); 2]);
        // On a busy machine a replica may take longer than the 80 ms timeout to answer
        // while hundreds of streams start; such a scrape fails as a timeout and the loop
        // goes on. Nothing else fails.
        for s in series.samples.iter().filter(|s| !s.ok) {
            let error = s.error.as_deref().unwrap_or_default();
            assert!(error.contains("no answer within"), "{error}");
        }
        assert!(
            series.failed_scrapes() * 3 <= series.samples.len(),
            "{} of {} scrapes failed",
            series.failed_scrapes(),
            series.samples.len()
        );

        // Rounds follow absolute deadlines: never early, numbered by deadline, and most
        // of them happened. The last round is the one taken when the loop is stopped, off
        // the schedule (it makes the counters hold every response of the run).
        let final_round = series.samples.last().map(|s| s.round);
        let mut last_round = None;
        for s in series
            .samples
            .iter()
            .filter(|s| Some(s.round) != final_round)
        {
            assert!(
                s.t_s + 1e-3 >= s.round as f64 * 0.1,
                "round {} at {}",
                s.round,
                s.t_s
            );
            assert!(last_round <= Some(s.round));
            last_round = Some(s.round);
        }
        let rounds = series.samples.len() / 2;
        let due = elapsed.as_secs_f64() / 0.1;
        assert!(
            rounds as f64 >= 0.5 * due && rounds as f64 <= due + 2.0,
            "{rounds} rounds in {elapsed:?}"
        );

        // The queue starts empty, climbs through several rounds to a peak of dozens and
        // drains once the load is gone.
        let queue = series.queue_series();
        let waiting: Vec<f64> = queue.iter().map(|p| p.1).collect();
        let (peak_at, &peak) = waiting
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .expect("queue samples");
        let climbing = waiting[..peak_at]
            .iter()
            .filter(|&&w| w > 0.0 && w < peak)
            .count();
        assert!(
            waiting[0] == 0.0 && peak >= 50.0 && climbing >= 3,
            "the waiting queue did not grow: {queue:?}"
        );
        let rise = slope(&queue[..=peak_at]).expect("a slope");
        assert!(rise > 0.0, "{rise}");
        assert_eq!(
            waiting.last(),
            Some(&0.0),
            "the queue did not drain: {queue:?}"
        );

        let running = series.running_series();
        let busiest = running.iter().map(|p| p.1).fold(0.0, f64::max);
        assert!(busiest > 0.0 && busiest <= 256.0, "{running:?}");
        let kv = series.kv_usage_series();
        let fullest = kv.iter().map(|p| p.1).fold(0.0, f64::max);
        assert!(fullest > 0.0 && fullest <= 1.0, "{kv:?}");

        // Counter deltas over the window account for every request.
        assert_eq!(
            series.counter_delta(Concept::RequestSuccess),
            Some(f64::from(n))
        );
        assert_eq!(
            series.counter_delta(Concept::GenerationTokens),
            Some(f64::from(n * 256))
        );
        assert!(series.counter_delta(Concept::PromptTokens) >= Some(f64::from(n * 1024)));
        assert_eq!(series.preemptions(), Some(0.0));
        let ttft = series.histogram_mean(Concept::Ttft).expect("TTFT observed");
        let queued = series
            .histogram_mean(Concept::QueueTime)
            .expect("queue time observed");
        assert!(ttft > queued && queued > 0.0, "ttft {ttft} queue {queued}");

        // What the load generator writes as engine-metrics.json reads back the same.
        let json = serde_json::to_string(&series).expect("serialises");
        let back: MetricsSeries = serde_json::from_str(&json).expect("deserialises");
        assert_eq!(
            (&back.targets, &back.profile),
            (&series.targets, &series.profile)
        );
        assert_eq!(back.samples.len(), series.samples.len());
        for (b, s) in back.samples.iter().zip(&series.samples) {
            assert_eq!(
                (b.round, b.target, b.ok, &b.error),
                (s.round, s.target, s.ok, &s.error)
            );
            assert!(b.values.keys().eq(s.values.keys()));
            // serde_json's default float parsing may differ in the last bit.
            for (x, y) in b.values.values().zip(s.values.values()) {
                assert!((x - y).abs() <= 1e-12 * y.abs().max(1.0), "{x} vs {y}");
            }
        }
        fleet.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_and_silent_targets_fail_their_samples_without_stopping_the_loop() {
    bounded(30, async {
        let fleet = fleet(1, MetricsFlavor::Vllm).await;
        let live = fleet.replicas[0].url();
        // Refused: a port that was just free.
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            format!("http://{}", l.local_addr().expect("addr"))
        };
        // Silent: accepts connections (in its backlog) and never answers.
        let silent_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let silent = format!("http://{}", silent_listener.local_addr().expect("addr"));

        // Not found: the replica has no `/nothing/metrics`.
        let missing = format!("{live}/nothing");

        let interval = Duration::from_millis(100);
        let targets = vec![live.clone(), dead.clone(), silent.clone(), missing];
        let (tx, handle, start) = start_scraping(targets, interval);
        tokio::time::sleep(Duration::from_millis(650)).await;
        let elapsed = start.elapsed();
        let series = stop_scraping(tx, handle).await;

        let rounds: std::collections::BTreeSet<u64> =
            series.samples.iter().map(|s| s.round).collect();
        // The silent target's timeout (80 ms) is shorter than the interval: no round is lost.
        assert!(
            rounds.len() as f64 >= elapsed.as_secs_f64() / 0.1 - 1.5,
            "{} rounds in {elapsed:?}",
            rounds.len()
        );
        for s in &series.samples {
            match s.target {
                0 => assert!(s.ok && s.values.contains_key("queue_waiting"), "{s:?}"),
                1..=3 => {
                    assert!(!s.ok && s.values.is_empty(), "{s:?}");
                    let error = s.error.as_deref().unwrap_or_default();
                    let expected = match s.target {
                        1 => "onnect", // "Connection refused", spelled per OS
                        2 => "no answer within 80ms",
                        _ => "/nothing/metrics: HTTP 404",
                    };
                    assert!(error.contains(expected), "target {}: {error}", s.target);
                }
                other => panic!("target {other}"),
            }
        }
        assert_eq!(series.samples.len(), rounds.len() * 4);
        assert_eq!(
            series.target_engines,
            vec![Some(EngineKind::Vllm), None, None, None]
        );
        // Fleet-wide series need every target; the answered-only view still has the live one.
        assert!(series.queue_series().is_empty());
        assert_eq!(
            series
                .concept_series(
                    Concept::QueueWaiting,
                    goodput::engine_metrics::Across::Sum,
                    Coverage::Answered
                )
                .len(),
            rounds.len()
        );

        // Discovery: a replica has no replica list; a dead port refuses.
        let c = client();
        assert!(matches!(
            discover_targets(&c, &live).await,
            Err(DiscoverError::Status { status: 404, .. })
        ));
        assert!(matches!(
            discover_targets(&c, &dead).await,
            Err(DiscoverError::Request { .. })
        ));
        drop(silent_listener);
        fleet.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_flavour_is_detected_and_read() {
    bounded(30, async {
        let fleet = fleet(1, MetricsFlavor::Sglang).await;
        let c = client();
        let targets = discover_targets(&c, &fleet.router_url())
            .await
            .expect("discovered");
        let (tx, handle, _) = start_scraping(targets.clone(), Duration::from_millis(50));
        tokio::time::sleep(Duration::from_millis(150)).await;
        // The preset leaves prefix caching off: no prompt token is a hit.
        for salt in [1, 2, 3, 4] {
            stream(&c, &targets[0], 256, 8, salt).await;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        let series = stop_scraping(tx, handle).await;

        let profile = series.profile.as_ref().expect("an engine was detected");
        assert_eq!(profile.engine, EngineKind::Sglang);
        for c in [
            Concept::QueueWaiting,
            Concept::Running,
            Concept::KvUsage,
            Concept::PrefixCacheHitRate,
            Concept::Ttft,
        ] {
            assert!(profile.found.contains(&c), "{c} not found: {profile:?}");
        }
        assert_eq!(profile.names[&Concept::KvUsage], "sglang:token_usage");
        assert_eq!(
            profile.names[&Concept::QueueWaiting],
            "sglang:num_queue_reqs"
        );
        assert_eq!(series.failed_scrapes(), 0);
        assert_eq!(series.counter_delta(Concept::RequestSuccess), Some(4.0));
        assert_eq!(series.counter_delta(Concept::GenerationTokens), Some(32.0));
        assert_eq!(series.counter_delta(Concept::PromptTokens), Some(1024.0));
        assert_eq!(series.prefix_cache_hit_rate(), Some(0.0));
        assert_eq!(series.preemptions(), None);
        assert!(series.queue_series().iter().all(|p| p.1 >= 0.0));
        assert!(!series.queue_series().is_empty());
        fleet.shutdown().await;
    })
    .await;
}
