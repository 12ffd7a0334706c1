//! The load generator's client metrics, exported live on `GET /metrics` while a point runs
//! (`goodput loadgen --metrics-addr HOST:PORT`), for the `goodput-client` alert rules of
//! `charts/goodput/files/alerts.yaml`:
//!
//! - `goodput_loadgen_requests_total{class, result}`: completed requests, `result` `ok` or
//!   `error`; both series of every class exist at 0 from the start;
//! - `goodput_loadgen_requests_slo_met_total{class}`: successes meeting both cutoffs of
//!   their class ([`goodput_core::analysis::meets_slo`] on the record's TTFT and TPOT);
//! - `goodput_loadgen_slo_attainment_target{class}`: the manifest's attainment minimum;
//! - `goodput_loadgen_schedule_lag_seconds`: nearest-rank p99 of the send lag behind the
//!   open-loop schedule over the last [`LAG_WINDOW`] (see [`LiveMetrics::schedule_lag_p99_s`]).
//!
//! These are the series [`SampleStore::add_client_records`] derives from the records after a
//! run, with the same definitions, so the rules evaluated offline and a Prometheus scraping
//! this endpoint see the same values. Warmup requests count: the alerts watch the live
//! system, not the measured window. Labels are bounded: class names only, never request ids.
//!
//! [`SampleStore::add_client_records`]: goodput_core::alerts::SampleStore::add_client_records

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::record::RequestRecord;
use goodput_core::analysis::{GateConfig, meets_slo, nearest_rank};

/// How far back the schedule-lag gauge looks: the requests sent within this long before a
/// scrape (plus those due and not sent yet).
pub const LAG_WINDOW: Duration = Duration::from_secs(1);

/// The content type of [`LiveMetrics::render`]: `prometheus-client` writes OpenMetrics text.
pub const CONTENT_TYPE_OPENMETRICS: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(String, String)>;

/// The client metrics of one load generator process. Shared (`Arc`) between the run loop,
/// which observes every request, and the `/metrics` server.
pub struct LiveMetrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    slo_met: Family<Labels, Counter>,
    target: Family<Labels, Gauge<f64, AtomicU64>>,
    lag: Gauge<f64, AtomicU64>,
    /// Per class index, its counters resolved once, so observing a request is an atomic add.
    classes: Vec<ClassCounters>,
    attainment_target: f64,
    time_scale: f64,
    lags: Mutex<LagWindow>,
}

struct ClassCounters {
    ok: Counter,
    error: Counter,
    slo_met: Counter,
    ttft_cutoff_ms: f64,
    tpot_cutoff_ms: f64,
}

/// Recent sends and the requests due but not sent yet, on the wall clock.
#[derive(Default)]
struct LagWindow {
    /// `(sent, lag s)` in about send order; entries older than [`LAG_WINDOW`] are dropped
    /// as new ones come, so it holds about one window's sends.
    sent: VecDeque<(Instant, f64)>,
    /// Scheduled instants of the requests due and not sent yet, by slot (`None`: free).
    due: Vec<Option<Instant>>,
    free: Vec<usize>,
}

impl LagWindow {
    fn push_sent(&mut self, scheduled: Instant, sent: Instant) {
        let lag_s = sent.saturating_duration_since(scheduled).as_secs_f64();
        while self
            .sent
            .front()
            .is_some_and(|&(t, _)| sent.saturating_duration_since(t) > LAG_WINDOW)
        {
            self.sent.pop_front();
        }
        self.sent.push_back((sent, lag_s));
    }

    fn release(&mut self, slot: usize) {
        if let Some(d) = self.due.get_mut(slot) {
            *d = None;
            self.free.push(slot);
        }
    }
}

impl fmt::Debug for LiveMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveMetrics")
            .field("classes", &self.classes.len())
            .field("attainment_target", &self.attainment_target)
            .field("time_scale", &self.time_scale)
            .finish_non_exhaustive()
    }
}

impl LiveMetrics {
    /// The metrics of a run judged by `gate` (its classes in manifest order, which is the
    /// records' class index, their cutoffs and the attainment minimum), every series
    /// created at 0. `time_scale` is the run's `K` (`--time-scale`; 1 for a real engine):
    /// latencies and lags are multiplied by it before they are judged or exported, so they
    /// are in the model time of the point's results.
    pub fn new(gate: &GateConfig, time_scale: f64) -> Self {
        let mut registry = Registry::with_prefix("goodput_loadgen");
        let requests = Family::<Labels, Counter>::default();
        let slo_met = Family::<Labels, Counter>::default();
        let target = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        let lag = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "requests",
            "Requests completed (warmup included), by class and result (ok or error)",
            requests.clone(),
        );
        registry.register(
            "requests_slo_met",
            "Successful requests meeting both the TTFT and the TPOT cutoff of their class \
             (warmup included)",
            slo_met.clone(),
        );
        registry.register(
            "slo_attainment_target",
            "Least share of a class's successes that must meet both cutoffs (the manifest's \
             class_slo_attainment_min)",
            target.clone(),
        );
        registry.register(
            "schedule_lag_seconds",
            format!(
                "Nearest-rank p99 of the lag of sends behind the open-loop schedule (s): over \
                 the requests sent in the {} s before the scrape, plus those due and not sent \
                 yet at their lag so far; 0 when there are none; closed loop sends on no \
                 schedule (lag 0); warmup included",
                LAG_WINDOW.as_secs_f64()
            ),
            lag.clone(),
        );
        let mut metrics = LiveMetrics {
            registry,
            requests,
            slo_met,
            target,
            lag,
            classes: Vec::with_capacity(gate.classes.len()),
            attainment_target: gate.attainment_min,
            time_scale,
            lags: Mutex::new(LagWindow::default()),
        };
        for class in &gate.classes {
            let mut counters = metrics.class_counters(&class.name);
            counters.ttft_cutoff_ms = class.ttft_cutoff_ms;
            counters.tpot_cutoff_ms = class.tpot_cutoff_ms;
            metrics.classes.push(counters);
        }
        metrics
    }

    /// Creates every series of class `name` at 0 and returns its counters (cutoffs that no
    /// request meets, for a class the gate does not name).
    fn class_counters(&self, name: &str) -> ClassCounters {
        let class = ("class".to_owned(), name.to_owned());
        let result = |r: &str| vec![class.clone(), ("result".to_owned(), r.to_owned())];
        self.target
            .get_or_create(&vec![class.clone()])
            .set(self.attainment_target);
        ClassCounters {
            ok: self.requests.get_or_create_owned(&result("ok")),
            error: self.requests.get_or_create_owned(&result("error")),
            slo_met: self.slo_met.get_or_create_owned(&vec![class.clone()]),
            ttft_cutoff_ms: f64::NEG_INFINITY,
            tpot_cutoff_ms: f64::NEG_INFINITY,
        }
    }

    /// Counts a completed request: `ok` or `error` for its class, and SLO met for a success
    /// within both cutoffs (a request the client aborted on purpose is neither). A class index the gate does not name gets its series under the
    /// index as its name (as the offline store names it) and never meets its SLO.
    pub fn observe(&self, r: &RequestRecord) {
        if r.aborted() {
            // Cancelled by the client on purpose: the server neither served nor failed it.
            return;
        }
        let unknown;
        let c = match self.classes.get(r.class) {
            Some(c) => c,
            None => {
                unknown = self.class_counters(&r.class.to_string());
                &unknown
            }
        };
        if r.ok() {
            c.ok.inc();
            // The product is the one `RequestRecord::rescale` computes, so the verdict is
            // the one the point's (rescaled) records get.
            let k = self.time_scale;
            if meets_slo(
                r.ttft_ms * k,
                r.tpot_ms * k,
                c.ttft_cutoff_ms,
                c.tpot_cutoff_ms,
            ) {
                c.slo_met.inc();
            }
        } else {
            c.error.inc();
        }
    }

    fn lags(&self) -> MutexGuard<'_, LagWindow> {
        // Nothing panics while holding the lock; a poisoned one still holds valid data.
        self.lags.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks a request due at `scheduled` and not sent yet: until [`Due::sent`] (or the
    /// returned handle's drop), the lag gauge counts it at its lag so far. Open loop calls
    /// this when the request's time comes.
    pub fn due(self: &Arc<Self>, scheduled: Instant) -> Due {
        let mut w = self.lags();
        let slot = match w.free.pop() {
            Some(i) => {
                w.due[i] = Some(scheduled);
                i
            }
            None => {
                w.due.push(Some(scheduled));
                w.due.len() - 1
            }
        };
        Due {
            metrics: self.clone(),
            slot: Some(slot),
            scheduled,
        }
    }

    /// Records a send at `sent` of a request scheduled at `scheduled` (closed loop: the
    /// send itself, lag 0).
    pub fn sent(&self, scheduled: Instant, sent: Instant) {
        self.lags().push_sent(scheduled, sent);
    }

    /// The schedule-lag gauge's value at `now` (s, × the time scale): the nearest-rank p99
    /// of the lags (`sent − scheduled`) of the requests sent in (`now` − [`LAG_WINDOW`],
    /// `now`], together with `now − scheduled` for each request due and not sent yet (as
    /// the offline store counts a request still unsent past its schedule); 0 without any.
    pub fn schedule_lag_p99_s(&self, now: Instant) -> f64 {
        let mut lags: Vec<f64> = {
            let w = self.lags();
            w.sent
                .iter()
                .filter(|&&(t, _)| t <= now && now.saturating_duration_since(t) < LAG_WINDOW)
                .map(|&(_, lag)| lag)
                .chain(
                    w.due
                        .iter()
                        .flatten()
                        .map(|&s| now.saturating_duration_since(s).as_secs_f64()),
                )
                .collect()
        };
        lags.sort_by(f64::total_cmp);
        nearest_rank(&lags, 0.99).map_or(0.0, |p99| p99 * self.time_scale)
    }

    /// The OpenMetrics text exposition, the lag gauge computed for now.
    pub fn render(&self) -> String {
        self.lag.set(self.schedule_lag_p99_s(Instant::now()));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// A request due and not sent yet (see [`LiveMetrics::due`]). Dropping it unsent (a task
/// that never ran) stops counting it.
pub struct Due {
    metrics: Arc<LiveMetrics>,
    /// `None` once sent.
    slot: Option<usize>,
    scheduled: Instant,
}

impl Due {
    /// The request is sent at `at`: its lag enters the window and it is no longer due.
    pub fn sent(mut self, at: Instant) {
        let mut w = self.metrics.lags();
        w.push_sent(self.scheduled, at);
        if let Some(slot) = self.slot.take() {
            w.release(slot);
        }
    }
}

impl Drop for Due {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.metrics.lags().release(slot);
        }
    }
}

/// Binds the metrics address (before any load is sent, so a taken port fails the command
/// early).
pub async fn bind(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// Serves `GET /metrics` (the OpenMetrics text of `metrics`) on `listener` until
/// `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<LiveMetrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(render))
        .with_state(metrics);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn render(State(m): State<Arc<LiveMetrics>>) -> impl IntoResponse {
    ([(CONTENT_TYPE, CONTENT_TYPE_OPENMETRICS)], m.render())
}

#[cfg(test)]
mod tests {
    use super::*;
    use goodput_core::alerts::{CLIENT_METRICS, SampleStore};
    use goodput_core::analysis::ClassSlo;

    fn gate() -> GateConfig {
        GateConfig {
            classes: vec![
                ClassSlo {
                    name: "chat".into(),
                    ttft_cutoff_ms: 500.0,
                    tpot_cutoff_ms: 50.0,
                },
                ClassSlo {
                    name: "batch".into(),
                    ttft_cutoff_ms: 2_000.0,
                    tpot_cutoff_ms: 100.0,
                },
            ],
            attainment_min: 0.9,
            ..GateConfig::default()
        }
    }

    fn record(
        index: u64,
        class: usize,
        status: &'static str,
        ttft: f64,
        tpot: f64,
    ) -> RequestRecord {
        let ok = status == "ok";
        RequestRecord {
            index,
            class,
            scheduled_s: index as f64 * 0.1,
            sent_s: index as f64 * 0.1,
            first_token_s: ok.then_some(index as f64 * 0.1 + ttft / 1e3),
            last_token_s: ok.then_some(index as f64 * 0.1 + 1.0),
            ended_s: index as f64 * 0.1 + 1.0,
            input_tokens: 16,
            input_tokens_usage: None,
            max_tokens: 8,
            ttft_ms: if ok { ttft } else { 0.0 },
            tpot_ms: if ok { tpot } else { 0.0 },
            e2e_ms: if ok { 1_000.0 } else { 0.0 },
            output_tokens: if ok { 8 } else { 0 },
            output_tokens_counted: if ok { 8 } else { 0 },
            output_tokens_usage: None,
            status,
            itl_ms: Vec::new(),
            finish_reason: None,
            http_status: Some(if ok { 200 } else { 503 }),
            error_message: None,
        }
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn every_series_exists_at_zero_from_the_start() {
        let m = LiveMetrics::new(&gate(), 1.0);
        let text = m.render();
        for class in ["chat", "batch"] {
            for result in ["ok", "error"] {
                let s = format!(
                    "goodput_loadgen_requests_total{{class=\"{class}\",result=\"{result}\"}}"
                );
                assert_eq!(value(&text, &s), Some(0.0), "{s} in\n{text}");
            }
            let met = format!("goodput_loadgen_requests_slo_met_total{{class=\"{class}\"}}");
            assert_eq!(value(&text, &met), Some(0.0), "{text}");
            let target = format!("goodput_loadgen_slo_attainment_target{{class=\"{class}\"}}");
            assert_eq!(value(&text, &target), Some(0.9), "{text}");
        }
        assert_eq!(
            value(&text, "goodput_loadgen_schedule_lag_seconds"),
            Some(0.0)
        );
        for name in CLIENT_METRICS {
            assert!(text.contains(name), "{name} missing from\n{text}");
        }
        assert!(
            text.contains("# TYPE goodput_loadgen_requests counter"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE goodput_loadgen_schedule_lag_seconds gauge"),
            "{text}"
        );
        // The HELP texts say what counts: the lag window and the warmup.
        assert!(
            text.contains("the requests sent in the 1 s before the scrape"),
            "{text}"
        );
        assert!(
            text.contains("Requests completed (warmup included)"),
            "{text}"
        );
    }

    #[test]
    fn observed_records_give_exact_counters_equal_to_the_offline_store() {
        let m = LiveMetrics::new(&gate(), 1.0);
        let records = vec![
            record(0, 0, "ok", 100.0, 20.0),      // chat, met
            record(1, 0, "ok", 500.0, 50.0),      // chat, met (cutoffs are inclusive)
            record(2, 0, "ok", 501.0, 20.0),      // chat, TTFT missed
            record(3, 0, "ok", 100.0, 60.0),      // chat, TPOT missed
            record(4, 0, "timeout", 0.0, 0.0),    // chat, error
            record(5, 1, "ok", 1_500.0, 90.0),    // batch, met
            record(6, 1, "http_error", 0.0, 0.0), // batch, error
            record(7, 1, "http_error", 0.0, 0.0), // batch, error
            record(8, 2, "ok", 1.0, 1.0),         // a class the gate does not name
        ];
        for r in &records {
            m.observe(r);
        }
        let text = m.render();
        let expect = [
            (
                "goodput_loadgen_requests_total{class=\"chat\",result=\"ok\"}",
                4.0,
            ),
            (
                "goodput_loadgen_requests_total{class=\"chat\",result=\"error\"}",
                1.0,
            ),
            (
                "goodput_loadgen_requests_total{class=\"batch\",result=\"ok\"}",
                1.0,
            ),
            (
                "goodput_loadgen_requests_total{class=\"batch\",result=\"error\"}",
                2.0,
            ),
            (
                "goodput_loadgen_requests_total{class=\"2\",result=\"ok\"}",
                1.0,
            ),
            (
                "goodput_loadgen_requests_total{class=\"2\",result=\"error\"}",
                0.0,
            ),
            (
                "goodput_loadgen_requests_slo_met_total{class=\"chat\"}",
                2.0,
            ),
            (
                "goodput_loadgen_requests_slo_met_total{class=\"batch\"}",
                1.0,
            ),
            ("goodput_loadgen_requests_slo_met_total{class=\"2\"}", 0.0),
            ("goodput_loadgen_slo_attainment_target{class=\"2\"}", 0.9),
        ];
        for (series, v) in expect {
            assert_eq!(value(&text, series), Some(v), "{series} in\n{text}");
        }
        assert!(!text.contains("index"), "no per-request label: {text}");

        // The offline store's last sample, from the same records, agrees.
        let g = gate();
        let names: Vec<String> = g.classes.iter().map(|c| c.name.clone()).collect();
        let cutoffs: Vec<(f64, f64)> = g
            .classes
            .iter()
            .map(|c| (c.ttft_cutoff_ms, c.tpot_cutoff_ms))
            .collect();
        let mut store = SampleStore::default();
        store.add_client_records(&records, &names, &cutoffs, 0.9, 1.0, 10.0);
        for s in store.series() {
            if s.name == "goodput_loadgen_schedule_lag_seconds" {
                continue;
            }
            let labels: Vec<String> = s
                .labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{v}\""))
                .collect();
            let series = format!("{}{{{}}}", s.name, labels.join(","));
            let last = s.points.last().map(|p| p.1);
            assert_eq!(value(&text, &series), last, "{series}");
        }
    }

    #[test]
    fn slo_is_judged_in_model_time() {
        // K = 10: a 60 ms wall-clock TTFT is 600 ms of model time, over chat's 500 ms.
        let m = LiveMetrics::new(&gate(), 10.0);
        m.observe(&record(0, 0, "ok", 60.0, 2.0));
        m.observe(&record(1, 0, "ok", 40.0, 2.0));
        let text = m.render();
        assert_eq!(
            value(
                &text,
                "goodput_loadgen_requests_slo_met_total{class=\"chat\"}"
            ),
            Some(1.0)
        );
    }

    #[test]
    fn lag_gauge_is_the_nearest_rank_p99_of_the_last_second_of_sends() {
        let m = LiveMetrics::new(&gate(), 1.0);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let now = at(2_000);
        // Sent 1.1 s before `now`: outside the window, whatever its lag.
        m.sent(at(0), at(900));
        // 99 on time and one 300 ms late: the p99 of 100 lags is the 99th, 0.
        for i in 0..99 {
            m.sent(at(1_500 + i), at(1_500 + i));
        }
        m.sent(at(1_600), at(1_900));
        assert_eq!(m.schedule_lag_p99_s(now), 0.0);
        // One more, 200 ms late: the p99 of 101 is the 100th, 0.2 s.
        m.sent(at(1_700), at(1_900));
        assert!((m.schedule_lag_p99_s(now) - 0.2).abs() < 1e-9);
        // Nothing in the window: 0.
        assert_eq!(m.schedule_lag_p99_s(at(5_000)), 0.0);
    }

    #[test]
    fn a_request_due_and_not_sent_counts_at_its_lag_so_far() {
        let m = Arc::new(LiveMetrics::new(&gate(), 1.0));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let now = at(2_000);
        for i in 0..10 {
            m.sent(at(1_500 + i), at(1_500 + i));
        }
        let due = m.due(at(500));
        assert!((m.schedule_lag_p99_s(now) - 1.5).abs() < 1e-9);
        // Sent, it leaves the due set and its lag is that of its send.
        due.sent(at(1_950));
        assert!((m.schedule_lag_p99_s(now) - 1.45).abs() < 1e-9);
        // A handle dropped unsent (a task that never ran) stops counting.
        drop(m.due(at(0)));
        assert!((m.schedule_lag_p99_s(now) - 1.45).abs() < 1e-9);
        // K = 4: exported in model time.
        let k = LiveMetrics::new(&gate(), 4.0);
        k.sent(at(1_000), at(1_100));
        assert!((k.schedule_lag_p99_s(now) - 0.4).abs() < 1e-9);
    }
}
