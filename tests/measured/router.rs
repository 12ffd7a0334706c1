//! The front router over loopback: forwarding, stream pass-through, least-outstanding
//! routing, and removal of a dead replica after the detection delay.

use crate::MACHINE;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router as AxumRouter;
use axum::body::Body;
use axum::http::StatusCode;
use axum::routing::{get, post};
use goodput::sim::live::router::{Router, RouterConfig, RoutingPolicy, router_app};
use tokio::net::TcpListener;

/// A fake replica: `/health` (failing while `down` is set), `/v1/completions` answering its
/// name, and `/v1/stream` sending three chunks 50 ms apart.
async fn fake_replica(name: &'static str, down: Arc<AtomicBool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = AxumRouter::new()
        .route(
            "/health",
            get(move || {
                let down = down.clone();
                async move {
                    if down.load(Ordering::Relaxed) {
                        StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        StatusCode::OK
                    }
                }
            }),
        )
        .route(
            "/v1/completions",
            post(move |body: String| async move { format!("{name}:{body}") }),
        )
        .route(
            "/v1/stream",
            post(|| async {
                let chunks = futures_util::stream::unfold(0, |i| async move {
                    if i == 3 {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Some((Ok::<_, std::io::Error>(format!("data: {i}\n\n")), i + 1))
                });
                Body::from_stream(chunks)
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn start_router(urls: Vec<String>, config: RouterConfig) -> (String, Arc<Router>) {
    let router = Router::new(urls, config).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(router.clone().run_health_checks(std::future::pending()));
    let app = router_app(router.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), router)
}

fn client() -> reqwest::Client {
    goodput::http_client::default_http_client(Duration::from_secs(2)).unwrap()
}

#[tokio::test]
async fn forwards_round_robin_and_streams_through() {
    let _machine = MACHINE.whole().await;
    let a = fake_replica("a", Arc::default()).await;
    let b = fake_replica("b", Arc::default()).await;
    let (url, _) = start_router(vec![a.clone(), b.clone()], RouterConfig::default()).await;
    let c = client();
    let mut seen = Vec::new();
    for _ in 0..4 {
        let r = c
            .post(format!("{url}/v1/completions"))
            .body("hi")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        seen.push(r.text().await.unwrap());
    }
    assert_eq!(seen.iter().filter(|s| *s == "a:hi").count(), 2, "{seen:?}");
    assert_eq!(seen.iter().filter(|s| *s == "b:hi").count(), 2, "{seen:?}");

    // Chunks arrive as the replica sends them, not all at the end.
    let start = Instant::now();
    let mut r = c.post(format!("{url}/v1/stream")).send().await.unwrap();
    let first = r.chunk().await.unwrap().unwrap();
    let first_at = start.elapsed();
    let mut rest = Vec::new();
    while let Some(chunk) = r.chunk().await.unwrap() {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(&first[..], b"data: 0\n\n");
    assert_eq!(rest, b"data: 1\n\ndata: 2\n\n");
    assert!(start.elapsed() >= first_at + Duration::from_millis(80));

    let replicas: serde_json::Value = c
        .get(format!("{url}/replicas"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(replicas["replicas"][1]["url"], b.as_str());
    let metrics = c
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let lines = metrics.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
    assert!(
        scrape
            .samples
            .iter()
            .any(|s| s.metric == "goodput_router_requests_total")
    );
}

#[tokio::test]
async fn a_failing_replica_leaves_rotation_after_the_detection_delay() {
    let _machine = MACHINE.whole().await;
    let down = Arc::new(AtomicBool::new(false));
    let a = fake_replica("a", down.clone()).await;
    let b = fake_replica("b", Arc::default()).await;
    let config = RouterConfig {
        health_interval: Duration::from_millis(20),
        detection_delay: Duration::from_millis(300),
        ..RouterConfig::default()
    };
    let (url, router) = start_router(vec![a, b], config).await;
    down.store(true, Ordering::Relaxed);
    let failed_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        router.backends()[0].in_rotation(),
        "removed before the delay"
    );
    while router.backends()[0].in_rotation() {
        assert!(
            failed_at.elapsed() < Duration::from_secs(3),
            "never removed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(failed_at.elapsed() >= Duration::from_millis(300));
    let c = client();
    for _ in 0..4 {
        let body = c
            .post(format!("{url}/v1/completions"))
            .body("x")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(body, "b:x");
    }
    down.store(false, Ordering::Relaxed);
    let back = Instant::now();
    while !router.backends()[0].in_rotation() {
        assert!(back.elapsed() < Duration::from_secs(3), "never readmitted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn no_replica_gives_503_and_a_refused_replica_502() {
    let _machine = MACHINE.whole().await;
    // Nothing listens on a just-closed port.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let config = RouterConfig {
        policy: RoutingPolicy::LeastOutstanding,
        health_interval: Duration::from_millis(20),
        detection_delay: Duration::from_millis(200),
        ..RouterConfig::default()
    };
    let (url, router) = start_router(vec![dead], config).await;
    let c = client();
    let r = c
        .post(format!("{url}/v1/completions"))
        .body("x")
        .send()
        .await
        .unwrap();
    // Still in rotation (detection pending): the connection is refused upstream.
    if router.backends()[0].in_rotation() {
        assert_eq!(r.status(), 502);
    }
    let start = Instant::now();
    while router.backends()[0].in_rotation() {
        assert!(start.elapsed() < Duration::from_secs(3));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = c
        .post(format!("{url}/v1/completions"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let err: serde_json::Value = r.json().await.unwrap();
    assert_eq!(err["error"]["code"], 503);
    assert_eq!(
        c.get(format!("{url}/health"))
            .send()
            .await
            .unwrap()
            .status(),
        503
    );
}
