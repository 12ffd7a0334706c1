//! Engine metrics from a Prometheus server's HTTP API, against a fake Prometheus served by
//! axum on a port-0 listener on 127.0.0.1: vLLM v1 names, range queries answered from the
//! PromQL text (a waiting queue growing or flat, prefix-cache counters with a known hit
//! rate, KV usage with a known peak), and the server's failures. Then the forecast peak of
//! a serving plan from a request-rate query (`query_range_total` and `peak_from_rates`)
//! against the reusable fake of `tests/support/prometheus.rs`.

use crate::fake_prometheus;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use goodput::analysis::{QueueTrend, queue_slope};
use goodput::engine_metrics::prometheus_api::{
    PrometheusError, PrometheusQuery, capped_step, query_range_series, query_range_total,
};
use goodput::engine_metrics::{Concept, EngineKind, MetricsSeries};
use goodput::planning::peak::{PeakError, peak_from_rates};

use fake_prometheus::{Answer, FakePrometheus};
use serde_json::{Value, json};

const START: f64 = 1_700_000_000.0;
const SELECTOR: &str = r#"namespace="llm",job="vllm""#;

/// What the fake answers to range queries.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// The waiting queue grows by 2 per second.
    Growing,
    /// The waiting queue holds at 5.
    Flat,
    /// HTTP 503 with Prometheus' error body.
    Unavailable,
    /// HTTP 200 with `"status": "error"`.
    ApiError,
    /// A body cut off in the middle.
    Malformed,
}

struct Fake {
    names: Vec<&'static str>,
    mode: Mode,
    /// `query` of every range query received.
    queries: Mutex<Vec<String>>,
    /// `step` of every range query received.
    steps: Mutex<Vec<String>>,
    /// Parameters of every name listing received.
    listings: Mutex<Vec<Vec<(String, String)>>>,
}

const VLLM_NAMES: &[&str] = &[
    "up",
    "DCGM_FI_DEV_GPU_UTIL",
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    // The older alias too: the current name must be preferred.
    "vllm:gpu_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:time_to_first_token_seconds_count",
    "vllm:time_to_first_token_seconds_sum",
];

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

async fn label_values(
    State(fake): State<Arc<Fake>>,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    fake.listings.lock().expect("lock").push(params);
    axum::Json(json!({"status": "success", "data": fake.names})).into_response()
}

/// The value of the metric named in `query` at step `k` of `n` (`None`: no point).
fn value(mode: Mode, query: &str, k: usize, n: usize) -> Option<String> {
    // A step at which no metric has a value: no sample.
    if k == 30 {
        return None;
    }
    let k_f = k as f64;
    let v = if query.contains("vllm:num_requests_waiting") {
        match mode {
            Mode::Growing => 2.0 * k_f,
            _ => 5.0,
        }
    } else if query.contains("vllm:num_requests_running") {
        8.0
    } else if query.contains("vllm:kv_cache_usage_perc") {
        if k == 7 {
            return Some("NaN".into());
        }
        0.2 + 0.6 * k_f / (n - 1) as f64
    } else if query.contains("vllm:prefix_cache_queries_total") {
        1000.0 + 100.0 * k_f
    } else if query.contains("vllm:prefix_cache_hits_total") {
        500.0 + 25.0 * k_f
    } else if query.contains("vllm:num_preemptions_total") {
        3.0 + (k / 10) as f64
    } else if query.contains("vllm:time_to_first_token_seconds_sum") {
        0.5 * k_f
    } else if query.contains("vllm:time_to_first_token_seconds_count") {
        k_f
    } else {
        return None;
    };
    Some(v.to_string())
}

async fn query_range(
    State(fake): State<Arc<Fake>>,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let query = param(&params, "query").unwrap_or_default().to_string();
    let step_text = param(&params, "step").unwrap_or_default().to_string();
    fake.queries.lock().expect("lock").push(query.clone());
    fake.steps.lock().expect("lock").push(step_text.clone());
    let number = |name: &str| param(&params, name).and_then(|v| v.parse::<f64>().ok());
    let (Some(start), Some(end), Some(step)) = (number("start"), number("end"), number("step"))
    else {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"status": "error", "errorType": "bad_data", "error": "bad range"})),
        )
            .into_response();
    };
    match fake.mode {
        Mode::Unavailable => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(json!({
                    "status": "error", "errorType": "unavailable",
                    "error": "too many concurrent queries"
                })),
            )
                .into_response();
        }
        Mode::ApiError => {
            return axum::Json(json!({
                "status": "error", "errorType": "execution",
                "error": "query processing would load too many samples"
            }))
            .into_response();
        }
        Mode::Malformed => {
            return (
                [("content-type", "application/json")],
                r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1700000000,"#,
            )
                .into_response();
        }
        Mode::Growing | Mode::Flat => {}
    }
    let n = ((end - start) / step).floor() as usize + 1;
    let values: Vec<Value> = (0..n)
        .filter_map(|k| value(fake.mode, &query, k, n).map(|v| json!([start + k as f64 * step, v])))
        .collect();
    let result = if values.is_empty() {
        json!([])
    } else {
        json!([{"metric": {}, "values": values}])
    };
    axum::Json(json!({
        "status": "success",
        "data": {"resultType": "matrix", "result": result}
    }))
    .into_response()
}

/// Starts a fake Prometheus; returns its base URL and its state.
async fn fake_prometheus(names: &[&'static str], mode: Mode) -> (String, Arc<Fake>) {
    let fake = Arc::new(Fake {
        names: names.to_vec(),
        mode,
        queries: Mutex::new(Vec::new()),
        steps: Mutex::new(Vec::new()),
        listings: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/api/v1/label/__name__/values", get(label_values))
        .route("/api/v1/query_range", get(query_range))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/"), fake)
}

fn client() -> reqwest::Client {
    goodput::http_client::default_http_client(Duration::from_secs(2)).expect("client builds")
}

fn source(base_url: &str, selector: &str, step_s: f64) -> PrometheusQuery {
    PrometheusQuery {
        base_url: base_url.to_string(),
        selector: selector.to_string(),
        step_s,
    }
}

async fn series(
    mode: Mode,
    engine: Option<EngineKind>,
) -> Result<(MetricsSeries, Arc<Fake>), PrometheusError> {
    let (url, fake) = fake_prometheus(VLLM_NAMES, mode).await;
    let s = query_range_series(
        &client(),
        &source(&url, SELECTOR, 1.0),
        engine,
        START,
        START + 60.0,
    )
    .await?;
    Ok((s, fake))
}

fn expected_queries() -> Vec<String> {
    let mut q: Vec<String> = [
        "sum(vllm:num_requests_waiting{S})",
        "sum(vllm:num_requests_running{S})",
        "avg(vllm:kv_cache_usage_perc{S})",
        "sum(vllm:prefix_cache_queries_total{S})",
        "sum(vllm:prefix_cache_hits_total{S})",
        "sum(vllm:num_preemptions_total{S})",
        "sum(vllm:time_to_first_token_seconds_sum{S})",
        "sum(vllm:time_to_first_token_seconds_count{S})",
    ]
    .iter()
    .map(|q| q.replace('S', SELECTOR))
    .collect();
    q.sort();
    q
}

fn close(a: Option<f64>, b: f64) {
    let a = a.unwrap_or_else(|| panic!("no value, expected {b}"));
    assert!((a - b).abs() < 1e-9, "{a} != {b}");
}

#[tokio::test]
async fn growing_queue_and_counters_from_a_vllm_prometheus() {
    let (s, fake) = series(Mode::Growing, None).await.expect("series read");

    // The PromQL sent, and the name listing restricted to the selector and the window.
    let mut queries = fake.queries.lock().expect("lock").clone();
    queries.sort();
    assert_eq!(queries, expected_queries());
    let listings = fake.listings.lock().expect("lock").clone();
    assert_eq!(listings.len(), 1);
    assert_eq!(
        param(&listings[0], "match[]"),
        Some(format!("{{{SELECTOR}}}").as_str())
    );
    assert_eq!(param(&listings[0], "start"), Some("1700000000.000"));
    assert_eq!(param(&listings[0], "end"), Some("1700000060.000"));
    assert!(fake.steps.lock().expect("lock").iter().all(|s| s == "1"));

    // One pseudo-target, the detected profile.
    assert_eq!(s.targets.len(), 1);
    assert!(
        s.targets[0].starts_with("prometheus http://127.0.0.1:")
            && s.targets[0].ends_with(&format!(" {{{SELECTOR}}}")),
        "{:?}",
        s.targets
    );
    assert_eq!(s.interval_s, 1.0);
    assert_eq!(s.target_engines, vec![Some(EngineKind::Vllm)]);
    let profile = s.profile.as_ref().expect("profile");
    assert_eq!(profile.engine, EngineKind::Vllm);
    assert_eq!(profile.names[&Concept::KvUsage], "vllm:kv_cache_usage_perc");
    assert!(profile.deprecated.is_empty());
    assert!(profile.missing.contains(&Concept::PromptTokens));
    assert!(!profile.missing.contains(&Concept::Ttft));

    // 61 steps, none at step 30; rounds are step indices, times from the start.
    assert_eq!(s.samples.len(), 60);
    assert!(s.samples.iter().all(|x| x.ok && x.target == 0));
    assert!(s.samples.iter().all(|x| x.round != 30));
    assert!(
        s.samples
            .iter()
            .all(|x| (x.t_s - x.round as f64).abs() < 1e-9)
    );
    // The NaN at step 7 is skipped, the rest of the step kept.
    let seventh = &s.samples[7];
    assert_eq!(seventh.round, 7);
    assert!(!seventh.values.contains_key("kv_usage"));
    assert_eq!(seventh.values.get("queue_waiting"), Some(&14.0));

    let queue = s.queue_series();
    assert_eq!(queue.len(), 60);
    assert_eq!(queue.last(), Some(&(60.0, 120.0)));
    assert_eq!(queue_slope(&queue, 5.0).trend, QueueTrend::Growing);
    close(s.peak(Concept::KvUsage), 0.8);
    close(s.prefix_cache_hit_rate(), 0.25);
    close(s.preemptions(), 6.0);
    close(s.histogram_mean(Concept::Ttft), 0.5);
    assert_eq!(s.running_series().len(), 60);
    assert_eq!(s.failed_scrapes(), 0);

    let f = goodput::engine_metrics::findings::findings(&s, 60.0, true);
    close(f.kv_usage_peak, 0.8);
    close(f.queue_waiting_peak, 120.0);
    close(f.prefix_cache_hit_rate, 0.25);
    assert!(f.flags.is_empty(), "{:?}", f.flags);
}

#[tokio::test]
async fn flat_queue_with_the_engine_named() {
    let (s, fake) = series(Mode::Flat, Some(EngineKind::Vllm))
        .await
        .expect("series read");
    assert_eq!(fake.queries.lock().expect("lock").len(), 8);
    let queue = s.queue_series();
    assert_eq!(queue.len(), 60);
    assert!(queue.iter().all(|p| p.1 == 5.0));
    assert_eq!(queue_slope(&queue, 5.0).trend, QueueTrend::Flat);
}

#[tokio::test]
async fn long_windows_raise_the_step_to_eleven_thousand_points() {
    let (url, fake) = fake_prometheus(VLLM_NAMES, Mode::Flat).await;
    let s = query_range_series(
        &client(),
        &source(&url, "", 1.0),
        None,
        START,
        START + 20_000.0,
    )
    .await
    .expect("series read");
    assert_eq!(s.interval_s, 1.819);
    assert!(
        fake.steps
            .lock()
            .expect("lock")
            .iter()
            .all(|s| s == "1.819")
    );
    assert!(s.samples.len() <= 11_001, "{}", s.samples.len());
    // No selector: no match[] and bare names.
    let listings = fake.listings.lock().expect("lock").clone();
    assert_eq!(param(&listings[0], "match[]"), None);
    assert!(
        fake.queries
            .lock()
            .expect("lock")
            .contains(&"sum(vllm:num_requests_waiting)".to_string())
    );
    assert!(s.targets[0].ends_with(" {}"), "{:?}", s.targets);
}

#[tokio::test]
async fn http_503_names_the_query_and_the_server_error() {
    let err = series(Mode::Unavailable, None)
        .await
        .err()
        .expect("the server's 503 is an error");
    assert!(
        matches!(err, PrometheusError::Status { status: 503, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("/api/v1/query_range"), "{msg}");
    assert!(msg.contains("too many concurrent queries"), "{msg}");
    assert!(
        expected_queries().iter().any(|q| msg.contains(q.as_str())),
        "{msg}"
    );
}

#[tokio::test]
async fn status_error_and_malformed_json_are_errors() {
    let err = series(Mode::ApiError, None)
        .await
        .err()
        .expect("status: error is an error");
    assert!(matches!(err, PrometheusError::Api { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("execution: query processing would load too many samples"));
    assert!(msg.contains("(query `sum(vllm:") || msg.contains("(query `avg(vllm:"));

    let err = series(Mode::Malformed, None)
        .await
        .err()
        .expect("a cut-off body is an error");
    assert!(matches!(err, PrometheusError::Malformed { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("/api/v1/query_range") && msg.contains("malformed answer"));
    assert!(msg.contains(SELECTOR), "{msg}");
}

#[tokio::test]
async fn unknown_names_fail_detection() {
    let names = &["up", "node_cpu_seconds_total", "go_goroutines"];
    let (url, fake) = fake_prometheus(names, Mode::Flat).await;
    let err = query_range_series(
        &client(),
        &source(&url, SELECTOR, 1.0),
        None,
        START,
        START + 60.0,
    )
    .await
    .expect_err("no engine is an error");
    let msg = err.to_string();
    assert!(matches!(err, PrometheusError::NoEngine { .. }), "{err:?}");
    assert!(
        msg.contains("no known engine metric names among the 3 names"),
        "{msg}"
    );
    assert!(msg.contains("node_cpu_seconds_total"), "{msg}");
    assert!(fake.queries.lock().expect("lock").is_empty());

    // The engine named but absent.
    let (url, _fake) = fake_prometheus(VLLM_NAMES, Mode::Flat).await;
    let err = query_range_series(
        &client(),
        &source(&url, SELECTOR, 1.0),
        Some(EngineKind::Sglang),
        START,
        START + 60.0,
    )
    .await
    .expect_err("no sglang names is an error");
    assert!(err.to_string().contains("no sglang metric names"), "{err}");
}

#[tokio::test]
async fn unreachable_servers_and_bad_ranges() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("address").port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let err = query_range_series(
        &client(),
        &source(&url, SELECTOR, 1.0),
        None,
        START,
        START + 60.0,
    )
    .await
    .expect_err("a closed port is an error");
    assert!(matches!(err, PrometheusError::Request { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("{url}/api/v1/label/__name__/values")),
        "{msg}"
    );

    let err = query_range_series(&client(), &source(&url, "", 0.0), None, START, START + 60.0)
        .await
        .expect_err("a zero step is an error");
    assert!(matches!(err, PrometheusError::BadRange { .. }), "{err:?}");
    let err = query_range_series(
        &client(),
        &source("not a url", "", 1.0),
        None,
        START,
        START + 60.0,
    )
    .await
    .expect_err("a bad URL is an error");
    assert!(matches!(err, PrometheusError::BadUrl { .. }), "{err:?}");
}

// ---- The forecast peak: one request-rate query summed over its series. ----

/// A per-pod request-rate query, as a serving plan would write it.
const RATE_QUERY: &str = r#"rate(vllm:request_success_total{namespace="llm"}[5m])"#;

const DAY_S: f64 = 86_400.0;

#[tokio::test(flavor = "multi_thread")]
async fn two_series_are_summed_per_timestamp_within_the_window() {
    // Pod 0: k at START + 10k, NaN at k = 5. Pod 1: 100 at the same times but k = 4.
    let pod0: Vec<(f64, f64)> = (0..=10)
        .map(|k| {
            let v = if k == 5 { f64::NAN } else { f64::from(k) };
            (START + 10.0 * f64::from(k), v)
        })
        .collect();
    let pod1: Vec<(f64, f64)> = (0..=10)
        .filter(|&k| k != 4)
        .map(|k| (START + 10.0 * f64::from(k), 100.0))
        .collect();
    let fake = FakePrometheus::start(vec![pod0, pod1]).await;

    let points = query_range_total(
        &client(),
        &fake.url,
        RATE_QUERY,
        START + 20.0,
        START + 60.0,
        10.0,
    )
    .await
    .expect("range read");
    // Only [START + 20, START + 60]; pod 1 alone at k = 5 (pod 0's NaN is skipped), pod 0
    // alone at k = 4.
    assert_eq!(
        points,
        vec![
            (START + 20.0, 102.0),
            (START + 30.0, 103.0),
            (START + 40.0, 4.0),
            (START + 50.0, 100.0),
            (START + 60.0, 106.0),
        ]
    );
    assert_eq!(fake.queries(), vec![RATE_QUERY.to_string()]);
    assert_eq!(fake.ranges(), vec![(START + 20.0, START + 60.0, 10.0)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fourteen_day_lookback_at_five_seconds_raises_the_step() {
    let fake = FakePrometheus::start(vec![vec![(START + 1.0, 7.0)]]).await;
    let end = START + 14.0 * DAY_S;
    let points = query_range_total(&client(), &fake.url, RATE_QUERY, START, end, 5.0)
        .await
        .expect("range read");
    assert_eq!(points, vec![(START + 1.0, 7.0)]);
    // 1,209,600 s / 5 s = 241,920 points > 11,000: the step becomes the next millisecond
    // above 1,209,600 / 11,000 = 109.9636..., so 109.964 s (11,000 points at most).
    let ranges = fake.ranges();
    assert_eq!(ranges.len(), 1);
    assert_eq!(ranges[0], (START, end, 109.964));
    assert_eq!(capped_step(START, end, 5.0), 109.964);
    assert!(14.0 * DAY_S / ranges[0].2 <= 11_000.0);

    // A lookback within the bound keeps its step: 14 days at 5 minutes is 4,032 points.
    query_range_total(&client(), &fake.url, RATE_QUERY, START, end, 300.0)
        .await
        .expect("range read");
    assert_eq!(fake.ranges()[1].2, 300.0);
}

/// The fleet's rate in 5-minute slot `slot` (0..288) of every day: 10 RPS for the first 8
/// hours, 20 RPS for the rest except 30 RPS in the peak hour (slots 216..228) and two
/// 5-minute spikes of 50 RPS (slots 100 and 200).
fn fleet_rate(slot: usize) -> f64 {
    match slot {
        100 | 200 => 50.0,
        216..228 => 30.0,
        0..96 => 10.0,
        _ => 20.0,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn fourteen_days_of_rates_give_the_hand_computed_p99_peak() {
    // 14 days of 5-minute samples, k = 1..=4032 at START + 300 k, the fleet's rate split
    // evenly over two pods. One more sample per pod lies before the window (a 1,000 RPS
    // burst the query must not see).
    let samples = 14 * 288;
    let mut pods = vec![vec![(START - 300.0, 500.0)], vec![(START - 300.0, 500.0)]];
    for k in 1..=samples {
        let half = fleet_rate((k - 1) % 288) / 2.0;
        for pod in &mut pods {
            pod.push((START + 300.0 * k as f64, half));
        }
    }
    let fake = FakePrometheus::start(pods).await;

    let end = START + 14.0 * DAY_S;
    let points = query_range_total(&client(), &fake.url, RATE_QUERY, START, end, 300.0)
        .await
        .expect("range read");
    assert_eq!(points.len(), samples);
    let rates: Vec<f64> = points.iter().map(|p| p.1).collect();

    // Per day: 96 × 10, 178 × 20, 12 × 30, 2 × 50 RPS; over 14 days, sorted: 10 at ranks
    // 1..=1344, 20 at 1345..=3836, 30 at 3837..=4004, 50 at 4005..=4032. P99 is rank
    // ceil(0.99 × 4032) = ceil(3991.68) = 3992: 30 RPS; × 1.2 = 36 RPS.
    let peak = peak_from_rates(&rates, 0.99, 1.2).expect("a peak");
    assert_eq!(peak.samples, 4032);
    assert_eq!(peak.quantile_rps, 30.0);
    assert!((peak.peak_rps - 36.0).abs() < 1e-9, "{}", peak.peak_rps);
    assert_eq!(
        peak.describe(),
        "P99 of 4032 samples = 30 RPS × growth 1.2 = 36 RPS"
    );
    // The spikes are the maximum, not the P99.
    let max = peak_from_rates(&rates, 1.0, 1.0).expect("a peak");
    assert_eq!(max.quantile_rps, 50.0);
}

#[tokio::test]
async fn an_empty_matrix_gives_no_samples() {
    let fake = FakePrometheus::start(vec![vec![(START, 5.0)]]).await;
    fake.set(Answer::Empty);
    let points = query_range_total(
        &client(),
        &fake.url,
        RATE_QUERY,
        START,
        START + DAY_S,
        300.0,
    )
    .await
    .expect("an empty matrix is an answer");
    assert!(points.is_empty(), "{points:?}");
    assert_eq!(
        peak_from_rates(&points.iter().map(|p| p.1).collect::<Vec<_>>(), 0.99, 1.2),
        Err(PeakError::NoSamples)
    );

    // Series that have no point in the window are the same.
    fake.set(Answer::Series(vec![vec![(START - 600.0, 5.0)]]));
    let points = query_range_total(
        &client(),
        &fake.url,
        RATE_QUERY,
        START,
        START + DAY_S,
        300.0,
    )
    .await
    .expect("no series is an answer");
    assert!(points.is_empty(), "{points:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn http_503_on_a_rate_query_names_the_query_but_not_the_credentials() {
    let fake = FakePrometheus::start(Vec::new()).await;
    fake.set(Answer::Error(503));
    // Basic-auth credentials in the base URL must not reach the message.
    let with_credentials = fake.url.replace("http://", "http://alice:s3cret@");
    let err = query_range_total(
        &client(),
        &with_credentials,
        RATE_QUERY,
        START,
        START + DAY_S,
        300.0,
    )
    .await
    .expect_err("a 503 is an error");
    assert!(
        matches!(err, PrometheusError::Status { status: 503, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&format!("(query `{RATE_QUERY}`)")), "{msg}");
    assert!(
        msg.contains(&format!("{}/api/v1/query_range", fake.url)),
        "{msg}"
    );
    assert!(msg.contains("HTTP 503: unavailable"), "{msg}");
    assert!(!msg.contains("s3cret") && !msg.contains("alice"), "{msg}");
    assert_eq!(fake.queries(), vec![RATE_QUERY.to_string()]);
}

#[tokio::test]
async fn unreachable_servers_bad_ranges_and_hangs_on_a_rate_query() {
    // A closed port: reqwest's own message quotes the URL; no credentials in it either.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("address").port()
    };
    let err = query_range_total(
        &client(),
        &format!("http://alice:s3cret@127.0.0.1:{port}"),
        RATE_QUERY,
        START,
        START + 60.0,
        1.0,
    )
    .await
    .expect_err("a closed port is an error");
    assert!(matches!(err, PrometheusError::Request { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("http://127.0.0.1:{port}/api/v1/query_range")),
        "{msg}"
    );
    assert!(msg.contains(RATE_QUERY), "{msg}");
    assert!(!msg.contains("s3cret") && !msg.contains("alice"), "{msg}");

    let fake = FakePrometheus::start(vec![vec![(START, 1.0)]]).await;
    for (start, end, step) in [
        (START + 60.0, START, 1.0),
        (START, START + 60.0, 0.0),
        (f64::NAN, START, 1.0),
    ] {
        let err = query_range_total(&client(), &fake.url, RATE_QUERY, start, end, step)
            .await
            .expect_err("a bad range is an error");
        assert!(matches!(err, PrometheusError::BadRange { .. }), "{err:?}");
    }
    assert!(fake.queries().is_empty(), "bad ranges are not sent");

    // A server that never answers: the caller's deadline ends the call.
    fake.set(Answer::Hang);
    let waited = tokio::time::timeout(
        Duration::from_millis(300),
        query_range_total(&client(), &fake.url, RATE_QUERY, START, START + 60.0, 1.0),
    )
    .await;
    assert!(waited.is_err(), "{waited:?}");
    assert_eq!(fake.queries().len(), 1);
}
