//! `goodput serve-sim`: N simulated replicas, each on its own port with its own API and
//! `/metrics`, behind the front router, plus an admin API on the router's port for fault
//! injection (the failure test's kill / restore / KV cut / latency / 5xx / stream cuts).
//!
//! Ports: the router on P, replica i (0-based) on P+1+i. With P = 0 every port is chosen by
//! the OS (tests).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

use super::api::ApiError;
use super::router::{Router, RouterConfig, router_app};
use super::{CutMode, FaultConfig, LiveError, ReplicaConfig, ReplicaServer, StreamCut};

/// Everything `serve-sim` needs.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    /// Configuration shared by every replica (each gets its own seed).
    pub replica: ReplicaConfig,
    /// Number of replicas (at least 1).
    pub replicas: u32,
    /// Address to bind.
    pub host: IpAddr,
    /// Router port; replica i listens on `port + 1 + i` (all OS-chosen when 0).
    pub port: u16,
    /// Routing policy and failure detection.
    pub router: RouterConfig,
    /// Default delay before a restored replica serves again.
    pub cold_start: Duration,
    /// Faults every replica starts with.
    pub faults: FaultConfig,
}

/// A running fleet.
#[derive(Debug)]
pub struct Fleet {
    /// The router's address.
    pub router_addr: SocketAddr,
    /// The router (rotation state, outstanding counts).
    pub router: Arc<Router>,
    /// The replicas, by index.
    pub replicas: Vec<Arc<ReplicaServer>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Fleet {
    /// `http://ADDR` of the router.
    pub fn router_url(&self) -> String {
        format!("http://{}", self.router_addr)
    }

    /// Stops the router and every replica.
    pub async fn shutdown(self) {
        for t in &self.tasks {
            t.abort();
        }
        for r in &self.replicas {
            r.kill().await;
        }
    }
}

async fn bind(host: IpAddr, port: u16) -> Result<TcpListener, LiveError> {
    TcpListener::bind((host, port))
        .await
        .map_err(|e| LiveError::Io {
            context: format!("binding {host}:{port}"),
            source: e,
        })
}

/// Starts the replicas, the router, its health checks and the admin API.
pub async fn start_fleet(config: FleetConfig) -> Result<Fleet, LiveError> {
    if config.replicas == 0 {
        return Err(LiveError::Config("--replicas must be at least 1".into()));
    }
    config.replica.validate()?;
    let router_listener = bind(config.host, config.port).await?;
    let mut replicas = Vec::new();
    for i in 0..config.replicas {
        let port = if config.port == 0 {
            0
        } else {
            u16::try_from(u32::from(config.port) + 1 + i)
                .map_err(|_| LiveError::Config(format!("replica {i}: port past 65535")))?
        };
        let listener = bind(config.host, port).await?;
        let replica_config = ReplicaConfig {
            seed: config.replica.seed.wrapping_add(u64::from(i)),
            ..config.replica.clone()
        };
        let server = ReplicaServer::start(listener, replica_config)?;
        server.replica().set_faults(config.faults);
        replicas.push(Arc::new(server));
    }
    // Reach replicas on loopback when bound to every interface.
    let reach = |addr: SocketAddr| {
        let ip = if addr.ip().is_unspecified() {
            IpAddr::from([127, 0, 0, 1])
        } else {
            addr.ip()
        };
        format!("http://{}", SocketAddr::new(ip, addr.port()))
    };
    let urls = replicas.iter().map(|r| reach(r.local_addr())).collect();
    let router =
        Router::new(urls, config.router.clone()).map_err(|e| LiveError::Config(e.to_string()))?;
    let router_addr = router_listener.local_addr().map_err(|e| LiveError::Io {
        context: "reading the router's address".into(),
        source: e,
    })?;
    let admin = Arc::new(Admin {
        replicas: replicas.clone(),
        cold_start: config.cold_start,
    });
    let app = router_app(router.clone()).merge(admin_routes(admin));
    let mut tasks = vec![tokio::spawn(
        router.clone().run_health_checks(std::future::pending()),
    )];
    // SSE frames are small writes: without TCP_NODELAY, Nagle holds each one until the
    // client's delayed ACK (up to 40 ms), which shows up as TTFT.
    let router_listener = router_listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tasks.push(tokio::spawn(async move {
        if let Err(e) = axum::serve(router_listener, app).await {
            tracing::error!("router stopped: {e}");
        }
    }));
    Ok(Fleet {
        router_addr,
        router,
        replicas,
        tasks,
    })
}

/// Runs a fleet until `shutdown` resolves.
pub async fn run_fleet(
    config: FleetConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), LiveError> {
    let fleet = start_fleet(config).await?;
    tracing::info!(router = %fleet.router_url(), replicas = fleet.replicas.len(), "serve-sim ready");
    shutdown.await;
    fleet.shutdown().await;
    Ok(())
}

struct Admin {
    replicas: Vec<Arc<ReplicaServer>>,
    cold_start: Duration,
}

fn admin_routes(admin: Arc<Admin>) -> axum::Router {
    axum::Router::new()
        .route("/admin/replicas", get(list))
        .route("/admin/replicas/{index}/kill", post(kill))
        .route("/admin/replicas/{index}/restore", post(restore))
        .route("/admin/replicas/{index}/kv", post(kv))
        .route("/admin/replicas/{index}/faults", post(faults))
        .with_state(admin)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn not_found(index: usize) -> Response {
    ApiError::new(StatusCode::NOT_FOUND, format!("no replica {index}")).into_response()
}

fn bad_request(message: String) -> Response {
    ApiError::new(StatusCode::BAD_REQUEST, message).into_response()
}

/// One replica as the admin API lists it.
#[derive(Serialize)]
struct ReplicaState {
    index: usize,
    url: String,
    serving: bool,
    outstanding: usize,
    running: Option<usize>,
    waiting: Option<usize>,
    kv_usage: Option<f64>,
}

async fn list(State(admin): State<Arc<Admin>>) -> impl IntoResponse {
    let mut out = Vec::new();
    for (index, r) in admin.replicas.iter().enumerate() {
        let stats = r.replica().stats();
        out.push(ReplicaState {
            index,
            url: r.url(),
            serving: r.is_serving().await,
            outstanding: r.replica().outstanding(),
            running: stats.as_ref().map(|s| s.running),
            waiting: stats.as_ref().map(|s| s.waiting),
            kv_usage: stats.as_ref().map(|s| s.kv_usage),
        });
    }
    Json(serde_json::json!({ "replicas": out }))
}

async fn kill(State(admin): State<Arc<Admin>>, Path(index): Path<usize>) -> Response {
    let Some(r) = admin.replicas.get(index) else {
        return not_found(index);
    };
    let at = now_ms();
    r.kill().await;
    tracing::warn!(replica = index, "replica killed by the admin API");
    Json(serde_json::json!({"replica": index, "killed_at_unix_ms": at})).into_response()
}

/// `POST /admin/replicas/{i}/restore` body (optional).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RestoreBody {
    /// Delay before the replica serves again (default: the fleet's cold start).
    cold_start_ms: Option<u64>,
}

async fn restore(
    State(admin): State<Arc<Admin>>,
    Path(index): Path<usize>,
    body: Option<Json<RestoreBody>>,
) -> Response {
    let Some(r) = admin.replicas.get(index).cloned() else {
        return not_found(index);
    };
    let delay = body
        .and_then(|Json(b)| b.cold_start_ms)
        .map_or(admin.cold_start, Duration::from_millis);
    let at = now_ms();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        match r.restore().await {
            Ok(()) => tracing::info!(replica = index, "replica restored"),
            Err(e) => tracing::error!(replica = index, "restore failed: {e}"),
        }
    });
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({
            "replica": index,
            "requested_at_unix_ms": at,
            "serving_from_unix_ms": at + delay.as_millis() as u64,
        })),
    )
        .into_response()
}

/// `POST /admin/replicas/{i}/kv` body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KvBody {
    /// Usable fraction of KV capacity (1 = all).
    factor: f64,
}

async fn kv(
    State(admin): State<Arc<Admin>>,
    Path(index): Path<usize>,
    Json(body): Json<KvBody>,
) -> Response {
    let Some(r) = admin.replicas.get(index) else {
        return not_found(index);
    };
    if !(0.0..=1.0).contains(&body.factor) {
        return bad_request(format!("factor must be in [0, 1], got {}", body.factor));
    }
    r.replica().set_kv_capacity_factor(body.factor);
    Json(serde_json::json!({"replica": index, "kv_capacity_factor": body.factor, "at_unix_ms": now_ms()}))
        .into_response()
}

/// `POST /admin/replicas/{i}/faults` body: the faults to inject from now on (an empty
/// object clears them).
#[derive(Deserialize, Default, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FaultsBody {
    /// Fraction of requests answered with `error_status`.
    #[serde(default)]
    pub error_fraction: f64,
    /// HTTP status of injected errors (default 500).
    #[serde(default)]
    pub error_status: Option<u16>,
    /// Latency added before a request reaches the engine.
    #[serde(default)]
    pub added_latency_ms: u64,
    /// Extra uniform jitter on top.
    #[serde(default)]
    pub latency_jitter_ms: u64,
    /// Streams cut mid-way.
    #[serde(default)]
    pub stream_cut: Option<StreamCutBody>,
}

/// A stream cut in [`FaultsBody`].
#[derive(Deserialize, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StreamCutBody {
    /// Fraction of streams cut.
    pub fraction: f64,
    /// Token frames delivered before the cut.
    pub after_tokens: u32,
    /// `error_frame` (vLLM's mid-stream error) or `disconnect`.
    #[serde(default)]
    pub mode: Option<String>,
}

impl FaultsBody {
    /// The replica fault settings this body asks for.
    pub fn to_faults(&self) -> Result<FaultConfig, String> {
        let fraction = |name: &str, f: f64| {
            if (0.0..=1.0).contains(&f) {
                Ok(f)
            } else {
                Err(format!("{name} must be in [0, 1], got {f}"))
            }
        };
        let stream_cut = match &self.stream_cut {
            None => None,
            Some(c) => Some(StreamCut {
                fraction: fraction("stream_cut.fraction", c.fraction)?,
                after_tokens: c.after_tokens,
                mode: match c.mode.as_deref().unwrap_or("error_frame") {
                    "error_frame" => CutMode::ErrorFrame,
                    "disconnect" => CutMode::Disconnect,
                    other => {
                        return Err(format!(
                            "stream_cut.mode must be error_frame or disconnect, got {other}"
                        ));
                    }
                },
            }),
        };
        let status = self.error_status.unwrap_or(500);
        if !(400..=599).contains(&status) {
            return Err(format!(
                "error_status must be a 4xx or 5xx code, got {status}"
            ));
        }
        Ok(FaultConfig {
            error_fraction: fraction("error_fraction", self.error_fraction)?,
            error_status: status,
            added_latency: Duration::from_millis(self.added_latency_ms),
            latency_jitter: Duration::from_millis(self.latency_jitter_ms),
            stream_cut,
        })
    }
}

async fn faults(
    State(admin): State<Arc<Admin>>,
    Path(index): Path<usize>,
    Json(body): Json<FaultsBody>,
) -> Response {
    let Some(r) = admin.replicas.get(index) else {
        return not_found(index);
    };
    match body.to_faults() {
        Ok(f) => {
            r.replica().set_faults(f);
            Json(serde_json::json!({"replica": index, "at_unix_ms": now_ms()})).into_response()
        }
        Err(e) => bad_request(e),
    }
}
