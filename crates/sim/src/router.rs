//! A front router for simulated replicas, like a Kubernetes Service in front of engine pods:
//! it forwards OpenAI-compatible requests to a replica chosen round-robin or by fewest
//! outstanding requests, passes streams through unchanged, and takes a replica out of
//! rotation only after its health checks have failed for the detection delay (the way an
//! endpoint is removed after its readiness probe fails). Until then, requests sent to a dead
//! replica fail, as they do in a real cluster.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router as AxumRouter;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::StreamExt;
use serde::Serialize;

use super::api::ApiError;

/// How the router picks a replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RoutingPolicy {
    /// Each replica in turn.
    #[default]
    RoundRobin,
    /// The replica with the fewest requests in flight (ties: lowest index).
    LeastOutstanding,
}

/// Router settings.
#[derive(Clone, Debug)]
pub struct RouterConfig {
    /// Replica selection.
    pub policy: RoutingPolicy,
    /// How often each replica's `/health` is probed.
    pub health_interval: Duration,
    /// How long a replica must fail its probes before it leaves rotation.
    pub detection_delay: Duration,
    /// Largest request body forwarded.
    pub max_body_bytes: usize,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            policy: RoutingPolicy::RoundRobin,
            health_interval: Duration::from_millis(100),
            detection_delay: Duration::from_secs(1),
            max_body_bytes: 4 << 20,
        }
    }
}

/// One replica behind the router.
#[derive(Debug)]
pub struct Backend {
    /// Base URL, e.g. `http://127.0.0.1:8001`.
    pub url: String,
    in_rotation: AtomicBool,
    outstanding: AtomicUsize,
    failing_since: Mutex<Option<Instant>>,
    requests_ok: AtomicU64,
    requests_failed: AtomicU64,
    removals: AtomicU64,
    /// Unix time (ms) of the last removal from rotation; 0 if never.
    last_removal_ms: AtomicU64,
    /// Unix time (ms) of the last return to rotation; 0 if never.
    last_return_ms: AtomicU64,
    /// Unix time (ms) of the first failed probe of the current failing streak; 0 while
    /// healthy (the readiness signal, before the detection delay removes the replica).
    failing_since_ms: AtomicU64,
    /// Unix time (ms) the router last picked this replica for a request; 0 if never.
    last_routed_ms: AtomicU64,
    /// Requests the router picked this replica for.
    routed: AtomicU64,
    /// `routed` when the replica was last removed from rotation.
    routed_at_removal: AtomicU64,
}

impl Backend {
    fn new(url: String) -> Self {
        Backend {
            url,
            in_rotation: AtomicBool::new(true),
            outstanding: AtomicUsize::new(0),
            failing_since: Mutex::new(None),
            requests_ok: AtomicU64::new(0),
            requests_failed: AtomicU64::new(0),
            removals: AtomicU64::new(0),
            last_removal_ms: AtomicU64::new(0),
            last_return_ms: AtomicU64::new(0),
            failing_since_ms: AtomicU64::new(0),
            last_routed_ms: AtomicU64::new(0),
            routed: AtomicU64::new(0),
            routed_at_removal: AtomicU64::new(0),
        }
    }

    /// Whether the router currently sends work to this replica.
    pub fn in_rotation(&self) -> bool {
        self.in_rotation.load(Ordering::Relaxed)
    }

    /// Requests forwarded and not yet finished.
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }
}

/// The router's state, shared by its handlers and its health checker.
#[derive(Debug)]
pub struct Router {
    backends: Vec<Arc<Backend>>,
    config: RouterConfig,
    next: AtomicUsize,
    no_replica: AtomicU64,
    client: reqwest::Client,
}

/// Why the router could not start.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// The HTTP client could not be built.
    #[error("cannot build the router's HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

impl Router {
    /// A router over replicas at `urls`, all in rotation.
    pub fn new(urls: Vec<String>, config: RouterConfig) -> Result<Arc<Self>, RouterError> {
        let client = goodput_http::default_http_client(Duration::from_secs(2))?;
        Ok(Arc::new(Router {
            backends: urls
                .into_iter()
                .map(|u| Arc::new(Backend::new(u)))
                .collect(),
            config,
            next: AtomicUsize::new(0),
            no_replica: AtomicU64::new(0),
            client,
        }))
    }

    /// The replicas, in index order.
    pub fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    /// The replica the next request goes to, or `None` when none is in rotation.
    pub fn pick(&self) -> Option<&Arc<Backend>> {
        let live = || self.backends.iter().filter(|b| b.in_rotation());
        match self.config.policy {
            RoutingPolicy::LeastOutstanding => live().min_by_key(|b| b.outstanding()),
            RoutingPolicy::RoundRobin => {
                let n = self.backends.len();
                let start = self.next.fetch_add(1, Ordering::Relaxed);
                (0..n)
                    .map(|k| &self.backends[(start + k) % n])
                    .find(|b| b.in_rotation())
            }
        }
    }

    /// Records one probe result; returns true when it changed the replica's rotation.
    fn observe_health(&self, backend: &Backend, healthy: bool, now: Instant) -> bool {
        // The lock guards a plain Option; a panic while holding it cannot leave it invalid.
        let mut since = backend
            .failing_since
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if healthy {
            *since = None;
            backend.failing_since_ms.store(0, Ordering::Relaxed);
            let returned = !backend.in_rotation.swap(true, Ordering::Relaxed);
            if returned {
                backend
                    .last_return_ms
                    .store(unix_ms(SystemTime::now()), Ordering::Relaxed);
            }
            return returned;
        }
        if since.is_none() {
            backend
                .failing_since_ms
                .store(unix_ms(SystemTime::now()), Ordering::Relaxed);
        }
        let first = *since.get_or_insert(now);
        if now.duration_since(first) >= self.config.detection_delay && backend.in_rotation() {
            backend.in_rotation.store(false, Ordering::Relaxed);
            backend.removals.fetch_add(1, Ordering::Relaxed);
            backend
                .routed_at_removal
                .store(backend.routed.load(Ordering::Relaxed), Ordering::Relaxed);
            backend
                .last_removal_ms
                .store(unix_ms(SystemTime::now()), Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Probes every replica's `/health` until `shutdown` resolves.
    pub async fn run_health_checks(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        let mut tick = tokio::time::interval(self.config.health_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tick.tick() => {}
            }
            let probes = self.backends.iter().map(|b| {
                let url = format!("{}/health", b.url);
                let probe = self
                    .client
                    .get(url)
                    .timeout(self.config.health_interval.max(Duration::from_millis(50)))
                    .send();
                async move { matches!(probe.await, Ok(r) if r.status().is_success()) }
            });
            let results = futures_util::future::join_all(probes).await;
            let now = Instant::now();
            for (b, healthy) in self.backends.iter().zip(results) {
                if self.observe_health(b, healthy, now) {
                    if b.in_rotation() {
                        tracing::info!(replica = %b.url, "replica back in rotation");
                    } else {
                        tracing::warn!(replica = %b.url, "replica removed from rotation");
                    }
                }
            }
        }
    }

    fn metrics_text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let mut family =
            |name: &str, kind: &str, help: &str, value: &dyn Fn(&Backend) -> String| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                for (i, b) in self.backends.iter().enumerate() {
                    let _ = writeln!(out, "{name}{{replica=\"{i}\"}} {}", value(b));
                }
            };
        family(
            "goodput_router_replica_in_rotation",
            "gauge",
            "1 while the router sends work to the replica.",
            &|b| u8::from(b.in_rotation()).to_string(),
        );
        family(
            "goodput_router_outstanding_requests",
            "gauge",
            "Requests forwarded to the replica and not finished.",
            &|b| b.outstanding().to_string(),
        );
        family(
            "goodput_router_replica_removals_total",
            "counter",
            "Times the replica was taken out of rotation after failing health checks.",
            &|b| b.removals.load(Ordering::Relaxed).to_string(),
        );
        let _ = writeln!(
            out,
            "# HELP goodput_router_requests_total Requests by replica and outcome.\n\
             # TYPE goodput_router_requests_total counter"
        );
        for (i, b) in self.backends.iter().enumerate() {
            let _ = writeln!(
                out,
                "goodput_router_requests_total{{replica=\"{i}\",outcome=\"forwarded\"}} {}\n\
                 goodput_router_requests_total{{replica=\"{i}\",outcome=\"upstream_error\"}} {}",
                b.requests_ok.load(Ordering::Relaxed),
                b.requests_failed.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "goodput_router_requests_total{{replica=\"none\",outcome=\"no_replica\"}} {}",
            self.no_replica.load(Ordering::Relaxed)
        );
        out
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The router's HTTP face: `/v1/*` forwarded, plus its own `/metrics`, `/health` and
/// `GET /replicas`.
pub fn router_app(router: Arc<Router>) -> AxumRouter {
    AxumRouter::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/replicas", get(replicas))
        .fallback(forward)
        .with_state(router)
}

async fn metrics(State(router): State<Arc<Router>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        router.metrics_text(),
    )
}

async fn health(State(router): State<Arc<Router>>) -> StatusCode {
    if router.backends.iter().any(|b| b.in_rotation()) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// One replica as `GET /replicas` lists it (what a failure test watches: the readiness
/// signal, the removal, the return and the last request routed).
#[derive(Serialize)]
struct ReplicaInfo<'a> {
    index: usize,
    url: &'a str,
    in_rotation: bool,
    outstanding: usize,
    removals: u64,
    last_removal_unix_ms: Option<u64>,
    last_return_unix_ms: Option<u64>,
    failing_since_unix_ms: Option<u64>,
    last_routed_unix_ms: Option<u64>,
    routed: u64,
    routed_at_last_removal: u64,
    forwarded: u64,
    upstream_errors: u64,
}

/// 0 (never) as `None`.
fn since_epoch(ms: &AtomicU64) -> Option<u64> {
    match ms.load(Ordering::Relaxed) {
        0 => None,
        ms => Some(ms),
    }
}

async fn replicas(State(router): State<Arc<Router>>) -> impl IntoResponse {
    let list: Vec<ReplicaInfo<'_>> = router
        .backends
        .iter()
        .enumerate()
        .map(|(index, b)| ReplicaInfo {
            index,
            url: &b.url,
            in_rotation: b.in_rotation(),
            outstanding: b.outstanding(),
            removals: b.removals.load(Ordering::Relaxed),
            last_removal_unix_ms: since_epoch(&b.last_removal_ms),
            last_return_unix_ms: since_epoch(&b.last_return_ms),
            failing_since_unix_ms: since_epoch(&b.failing_since_ms),
            last_routed_unix_ms: since_epoch(&b.last_routed_ms),
            routed: b.routed.load(Ordering::Relaxed),
            routed_at_last_removal: b.routed_at_removal.load(Ordering::Relaxed),
            forwarded: b.requests_ok.load(Ordering::Relaxed),
            upstream_errors: b.requests_failed.load(Ordering::Relaxed),
        })
        .collect();
    axum::Json(serde_json::json!({
        "replicas": list,
        "no_replica": router.no_replica.load(Ordering::Relaxed),
    }))
}

/// An OpenAI-style error response.
fn error(status: StatusCode, message: &str) -> Response {
    ApiError::new(status, message).into_response()
}

/// Decrements a replica's outstanding count when the response (stream) is done or dropped.
struct Outstanding(Arc<Backend>);

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn forward(State(router): State<Arc<Router>>, req: Request) -> Response {
    let Some(backend) = router.pick().cloned() else {
        router.no_replica.fetch_add(1, Ordering::Relaxed);
        return error(StatusCode::SERVICE_UNAVAILABLE, "no replica is in rotation");
    };
    backend.routed.fetch_add(1, Ordering::Relaxed);
    backend
        .last_routed_ms
        .store(unix_ms(SystemTime::now()), Ordering::Relaxed);
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, router.config.max_body_bytes).await {
        Ok(b) => b,
        Err(_) => return error(StatusCode::PAYLOAD_TOO_LARGE, "request body too large"),
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{}", backend.url, path);
    let mut upstream = router.client.request(parts.method, url).body(body);
    if let Some(ct) = parts.headers.get(header::CONTENT_TYPE) {
        upstream = upstream.header(header::CONTENT_TYPE, ct);
    }
    backend.outstanding.fetch_add(1, Ordering::Relaxed);
    let guard = Outstanding(backend.clone());
    let response = match upstream.send().await {
        Ok(r) => r,
        Err(e) => {
            backend.requests_failed.fetch_add(1, Ordering::Relaxed);
            return error(
                StatusCode::BAD_GATEWAY,
                &format!("replica {} failed: {e}", backend.url),
            );
        }
    };
    backend.requests_ok.fetch_add(1, Ordering::Relaxed);
    let status = response.status();
    let mut headers = HeaderMap::new();
    if let Some(ct) = response.headers().get(header::CONTENT_TYPE) {
        headers.insert(header::CONTENT_TYPE, ct.clone());
    }
    headers.insert(
        "x-goodput-replica",
        HeaderValue::from(replica_index(&router, &backend)),
    );
    // The guard lives as long as the body stream, so the count drops when the stream ends,
    // breaks or the client goes away. A broken upstream stream breaks the client's too.
    let stream = response.bytes_stream().map(move |chunk| {
        let _ = &guard;
        chunk
    });
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}

fn replica_index(router: &Router, backend: &Arc<Backend>) -> u32 {
    router
        .backends
        .iter()
        .position(|b| Arc::ptr_eq(b, backend))
        .unwrap_or(0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(policy: RoutingPolicy) -> Arc<Router> {
        let urls = (0..3)
            .map(|i| format!("http://127.0.0.1:{}", 9000 + i))
            .collect();
        Router::new(
            urls,
            RouterConfig {
                policy,
                detection_delay: Duration::from_millis(500),
                ..RouterConfig::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn round_robin_skips_replicas_out_of_rotation() {
        let r = router(RoutingPolicy::RoundRobin);
        let picks: Vec<String> = (0..4).map(|_| r.pick().unwrap().url.clone()).collect();
        assert_eq!(picks[0], picks[3]);
        assert_ne!(picks[0], picks[1]);
        r.backends[1].in_rotation.store(false, Ordering::Relaxed);
        for _ in 0..6 {
            assert_ne!(r.pick().unwrap().url, r.backends[1].url);
        }
        for b in &r.backends {
            b.in_rotation.store(false, Ordering::Relaxed);
        }
        assert!(r.pick().is_none());
    }

    #[test]
    fn least_outstanding_prefers_the_idlest() {
        let r = router(RoutingPolicy::LeastOutstanding);
        r.backends[0].outstanding.store(3, Ordering::Relaxed);
        r.backends[1].outstanding.store(1, Ordering::Relaxed);
        r.backends[2].outstanding.store(2, Ordering::Relaxed);
        assert_eq!(r.pick().unwrap().url, r.backends[1].url);
    }

    #[test]
    fn removal_waits_for_the_detection_delay() {
        let r = router(RoutingPolicy::RoundRobin);
        let b = &r.backends[0];
        let t0 = Instant::now();
        assert!(!r.observe_health(b, false, t0));
        assert!(!r.observe_health(b, false, t0 + Duration::from_millis(400)));
        assert!(b.in_rotation());
        assert!(r.observe_health(b, false, t0 + Duration::from_millis(500)));
        assert!(!b.in_rotation());
        assert_eq!(b.removals.load(Ordering::Relaxed), 1);
        // A healthy probe puts it back; a single blip does not remove it again at once.
        assert!(r.observe_health(b, true, t0 + Duration::from_millis(600)));
        assert!(!r.observe_health(b, false, t0 + Duration::from_millis(700)));
        assert!(b.in_rotation());
    }
}
