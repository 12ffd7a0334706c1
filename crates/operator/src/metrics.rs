//! The operator's Prometheus metrics and its admin endpoints (`/metrics`, `/healthz`,
//! `/readyz`). Labels are bounded: failures by a static category, capacities by benchmark.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use kube::ResourceExt as _;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use goodput_api::CapacityBenchmark;

/// The operator's metrics, cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    reconciles: Counter,
    failures: Family<Vec<(String, String)>, Counter>,
    duration: Histogram,
    capacity: Family<Vec<(String, String)>, Gauge<f64, AtomicU64>>,
    leader: Gauge,
    plan_events: Family<Vec<(String, String)>, Counter>,
    proposed: Family<Vec<(String, String)>, Gauge>,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("goodput_operator");
        let reconciles = Counter::default();
        let failures = Family::<Vec<(String, String)>, Counter>::default();
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        let capacity = Family::<Vec<(String, String)>, Gauge<f64, AtomicU64>>::default();
        let leader = Gauge::default();
        let plan_events = Family::<Vec<(String, String)>, Counter>::default();
        let proposed = Family::<Vec<(String, String)>, Gauge>::default();
        registry.register(
            "servingplan_events",
            "Serving plan proposals, applies, verifications and refusals, by kind",
            plan_events.clone(),
        );
        registry.register(
            "servingplan_proposed_replicas",
            "Replicas a serving plan proposes",
            proposed.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the Lease and runs the controller",
            leader.clone(),
        );
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_failures",
            "Reconciles that failed, by category",
            failures.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconcile took",
            duration.clone(),
        );
        registry.register(
            "benchmark_capacity_rps",
            "Last capacity a benchmark found (requests per second)",
            capacity.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                registry,
                reconciles,
                failures,
                duration,
                capacity,
                leader,
                plan_events,
                proposed,
                ready: AtomicBool::new(false),
            }),
        }
    }
}

impl Metrics {
    /// Counts a reconcile and its duration.
    pub fn reconciled(&self, took: Duration) {
        self.inner.reconciles.inc();
        self.inner.duration.observe(took.as_secs_f64());
    }

    /// Counts a failed reconcile.
    pub fn failed(&self, category: &'static str) {
        self.inner
            .failures
            .get_or_create(&vec![("category".to_owned(), category.to_owned())])
            .inc();
    }

    /// Sets a benchmark's capacity gauge when it has one.
    pub fn observe_capacity(&self, cb: &CapacityBenchmark) {
        if let Some(c) = cb.status.as_ref().and_then(|s| s.capacity_rps) {
            let labels = vec![
                ("namespace".to_owned(), cb.namespace().unwrap_or_default()),
                ("benchmark".to_owned(), cb.name_any()),
            ];
            self.inner.capacity.get_or_create(&labels).set(c);
        }
    }

    /// Counts a serving plan event: `proposed`, `applied`, `verified`, `shortfall`,
    /// `refused` or `apply_failed`.
    pub fn plan_event(&self, kind: &'static str) {
        self.inner
            .plan_events
            .get_or_create(&vec![("kind".to_owned(), kind.to_owned())])
            .inc();
    }

    /// Sets a serving plan's proposed-replicas gauge.
    pub fn observe_proposal(&self, namespace: &str, plan: &str, replicas: u32) {
        let labels = vec![
            ("namespace".to_owned(), namespace.to_owned()),
            ("plan".to_owned(), plan.to_owned()),
        ];
        self.inner
            .proposed
            .get_or_create(&labels)
            .set(i64::from(replicas));
    }

    /// Marks this replica the leader (it runs the controller) or a standby.
    pub fn set_leader(&self, leading: bool) {
        self.inner.leader.set(i64::from(leading));
    }

    /// Marks the operator ready (it leads and its controller runs) or not.
    pub fn set_ready(&self, ready: bool) {
        self.inner.ready.store(ready, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.inner.registry);
        out
    }
}

/// Serves `/metrics`, `/healthz` (the process answers) and `/readyz` (ready as set by
/// [`Metrics::set_ready`]) until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(render))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(metrics);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds the admin address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

async fn render(State(m): State<Metrics>) -> String {
    m.render()
}

async fn ready(State(m): State<Metrics>) -> (StatusCode, &'static str) {
    if m.inner.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciles_and_failures_are_exposed_with_bounded_labels() {
        let m = Metrics::default();
        m.reconciled(Duration::from_millis(3));
        m.reconciled(Duration::from_millis(5));
        m.failed("apply");
        let text = m.render();
        assert!(
            text.contains("goodput_operator_reconciles_total 2"),
            "{text}"
        );
        assert!(
            text.contains("goodput_operator_reconcile_failures_total{category=\"apply\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("goodput_operator_reconcile_duration_seconds_count 2"),
            "{text}"
        );
    }
}
