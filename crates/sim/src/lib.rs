//! The simulated engine served live (re-exported as `goodput::sim::live`): the
//! discrete-event model of [`goodput_model::engine`]
//! stepped in real time behind an OpenAI-compatible HTTP API with engine-style `/metrics`.
//!
//! One replica is a [`Replica`] (the engine on its own thread, the request plumbing and the
//! fault hooks) served by a [`ReplicaServer`] on one TCP port. Time: the model runs
//! `time_scale` (K) times faster than real time; a step that the model says ends at engine
//! time `t` delivers its tokens at `epoch + t / K` of wall time. When the engine has no
//! work its clock follows wall time (`advance_to`), so a request's model latency starts
//! when it arrives. Latencies in `/metrics` are wall-clock, as the server observes them.
//!
//! ```no_run
//! # async fn demo() -> Result<(), goodput_sim::LiveError> {
//! use goodput_sim::{ReplicaConfig, serve_replica};
//! let setup = goodput_model::preset("qwen2.5-7b-h100").expect("a known preset");
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8000").await.map_err(|e| {
//!     goodput_sim::LiveError::Io { context: "bind".into(), source: e }
//! })?;
//! serve_replica(listener, ReplicaConfig::new(setup), async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await
//! # }
//! ```
//!
//! See [`api`] for the request semantics, [`sse`] for the wire format and
//! [`tokenizer`] for the stand-in tokenizer; [`fleet`] serves several replicas behind the
//! [`router`] (what `goodput serve-sim` and `goodput bench` run).

pub mod api;
pub mod fleet;
mod metrics;
mod net;
mod replica;
pub mod router;
pub mod sse;
pub mod tokenizer;

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use metrics::{LatenessRecorder, LatenessSnapshot};
pub use replica::{CutMode, FaultConfig, Replica, StreamCut};

use goodput_model::setup::Setup;

/// Default limit on a request body.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;

/// Which engine's metric names `/metrics` uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MetricsFlavor {
    /// vLLM v1 names (`vllm:num_requests_running`, ...), labels `model_name` and `engine`.
    #[default]
    Vllm,
    /// SGLang names (`sglang:num_running_reqs`, ...), labels `model_name`, `engine_type`,
    /// `tp_rank` and `pp_rank`.
    Sglang,
}

impl FromStr for MetricsFlavor {
    type Err = LiveError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "vllm" => Ok(MetricsFlavor::Vllm),
            "sglang" => Ok(MetricsFlavor::Sglang),
            other => Err(LiveError::Config(format!(
                "unknown metrics flavor `{other}` (vllm or sglang)"
            ))),
        }
    }
}

impl fmt::Display for MetricsFlavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MetricsFlavor::Vllm => "vllm",
            MetricsFlavor::Sglang => "sglang",
        })
    }
}

/// Errors of the live simulator.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// A configuration value is unusable.
    #[error("invalid serve-sim configuration: {0}")]
    Config(String),
    /// An OS-level failure (binding a port, starting a thread).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Configuration of one simulated replica.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaConfig {
    /// The engine model (its `model` is the served model name).
    pub setup: Setup,
    /// The model runs this many times faster than real time (> 0).
    pub time_scale: f64,
    /// Tokens per SSE frame (≥ 1); the first token is always sent alone (it sets TTFT) and
    /// the last frame may be shorter.
    pub stream_interval: u32,
    /// Metric names on `/metrics`.
    pub metrics_flavor: MetricsFlavor,
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Seed of the sampled output lengths and injected faults.
    pub seed: u64,
    /// Benchmark instrumentation: record how late token frames reach the HTTP layer
    /// (`GET /debug/lateness`). Off by default; when off it costs nothing.
    pub record_lateness: bool,
    /// Abort a request in the engine when its client goes away (as vLLM and SGLang do).
    /// Off: the engine keeps generating for nobody until the request's end, a leak a
    /// request-cancellation failure test must catch.
    pub abort_on_disconnect: bool,
}

impl ReplicaConfig {
    /// Defaults around `setup`: real time, one token per frame, vLLM names, 4 MiB bodies.
    pub fn new(setup: Setup) -> Self {
        ReplicaConfig {
            setup,
            time_scale: 1.0,
            stream_interval: 1,
            metrics_flavor: MetricsFlavor::Vllm,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            seed: 0,
            record_lateness: false,
            abort_on_disconnect: true,
        }
    }

    /// Checks every value.
    pub fn validate(&self) -> Result<(), LiveError> {
        self.setup.validate().map_err(LiveError::Config)?;
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return Err(LiveError::Config(format!(
                "time_scale must be positive, got {}",
                self.time_scale
            )));
        }
        if self.stream_interval == 0 {
            return Err(LiveError::Config(
                "stream_interval must be at least 1".into(),
            ));
        }
        if self.max_body_bytes == 0 {
            return Err(LiveError::Config(
                "max_body_bytes must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

impl Replica {
    /// The replica's HTTP app (all routes), for serving it on a listener of one's own.
    pub fn app(&self) -> axum::Router {
        api::router(self.clone())
    }
}

struct Serving {
    task: JoinHandle<()>,
    registry: Arc<net::ConnRegistry>,
}

fn spawn_serving(listener: TcpListener, replica: &Replica) -> Serving {
    let registry = Arc::new(net::ConnRegistry::default());
    let listener = net::TrackedListener::new(listener, registry.clone());
    let app = replica.app();
    let task = tokio::spawn(async move {
        // Serving only ends when the task is aborted; an accept error is retried inside.
        let _ = axum::serve(listener, app).await;
    });
    Serving { task, registry }
}

/// One replica served on one TCP port, which can be killed (the port refuses connections,
/// in-flight streams break, the engine's state is lost) and restored (a cold start on the
/// same port).
pub struct ReplicaServer {
    replica: Replica,
    addr: SocketAddr,
    serving: tokio::sync::Mutex<Option<Serving>>,
}

impl fmt::Debug for ReplicaServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaServer")
            .field("addr", &self.addr)
            .field("replica", &self.replica)
            .finish()
    }
}

impl ReplicaServer {
    /// Starts a replica and serves it on `listener`. Must be called inside a tokio
    /// runtime.
    pub fn start(listener: TcpListener, config: ReplicaConfig) -> Result<Self, LiveError> {
        Self::serve(listener, Replica::new(config)?)
    }

    /// Serves an existing replica on `listener`.
    pub fn serve(listener: TcpListener, replica: Replica) -> Result<Self, LiveError> {
        let addr = listener.local_addr().map_err(|e| LiveError::Io {
            context: "reading the listener's address".into(),
            source: e,
        })?;
        let serving = spawn_serving(listener, &replica);
        Ok(ReplicaServer {
            replica,
            addr,
            serving: tokio::sync::Mutex::new(Some(serving)),
        })
    }

    /// The address it serves on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The replica's control handle (stats, faults, KV capacity factor).
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// True unless killed.
    pub async fn is_serving(&self) -> bool {
        self.serving.lock().await.is_some()
    }

    /// Connections open now (0 while killed).
    pub async fn open_connections(&self) -> usize {
        self.serving
            .lock()
            .await
            .as_ref()
            .map_or(0, |s| s.registry.open())
    }

    /// Kills the replica as if its process died: the port stops accepting (connections
    /// are refused), every open connection is shut down (in-flight streams break
    /// mid-body) and the engine stops, losing its state.
    pub async fn kill(&self) {
        let mut serving = self.serving.lock().await;
        if let Some(s) = serving.take() {
            s.task.abort();
            s.registry.close_all();
            // Aborted: dropping it closed the listening socket.
            let _ = s.task.await;
        }
        self.replica.kill_engine();
    }

    /// Restores a killed replica on the same address with a fresh engine (cold start:
    /// empty prefix cache, zeroed metrics). Faults and the KV factor set on the replica
    /// stay. Does nothing if it is serving.
    pub async fn restore(&self) -> Result<(), LiveError> {
        let mut serving = self.serving.lock().await;
        if serving.is_some() {
            return Ok(());
        }
        let listener = TcpListener::bind(self.addr)
            .await
            .map_err(|e| LiveError::Io {
                context: format!("binding {} again", self.addr),
                source: e,
            })?;
        self.replica.start_engine()?;
        *serving = Some(spawn_serving(listener, &self.replica));
        Ok(())
    }

    /// Stops serving for good (as [`ReplicaServer::kill`]; dropping the server does the
    /// same without waiting for the port to close).
    pub async fn shutdown(self) {
        self.kill().await;
    }
}

impl Drop for ReplicaServer {
    /// Dropping a server kills it (without waiting for the listening socket to close).
    fn drop(&mut self) {
        if let Some(s) = self.serving.get_mut().take() {
            s.task.abort();
            s.registry.close_all();
        }
        self.replica.kill_engine();
    }
}

/// Serves one replica on `listener` until `shutdown` completes, then stops it.
pub async fn serve_replica(
    listener: TcpListener,
    config: ReplicaConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), LiveError> {
    let server = ReplicaServer::start(listener, config)?;
    shutdown.await;
    server.shutdown().await;
    Ok(())
}
