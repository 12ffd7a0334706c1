//! A fake Prometheus HTTP API for tests: `GET /api/v1/query_range` served by axum on a
//! port-0 listener on 127.0.0.1, answering every query with the same series (restricted
//! to the request's window), an empty matrix, an HTTP error with Prometheus' JSON error
//! body, or no answer at all; it records every query and range it was asked.
//!
//! The server runs as a task on the caller's tokio runtime (`#[tokio::test]`, either
//! flavor) and stops when the [`FakePrometheus`] is dropped.
#![allow(dead_code)]

use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

/// What the fake answers to range queries.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// These series (each a list of `(unix_s, value)` pairs), every point outside the
    /// request's `[start, end]` left out; a series with no point left is not returned.
    Series(Vec<Vec<(f64, f64)>>),
    /// A matrix with no series (the query matched nothing).
    Empty,
    /// This HTTP status with Prometheus' JSON error body.
    Error(u16),
    /// Never answers (for timeouts).
    Hang,
}

#[derive(Default)]
struct Recorded {
    queries: Vec<String>,
    ranges: Vec<(f64, f64, f64)>,
}

struct Shared {
    answer: Mutex<Answer>,
    recorded: Mutex<Recorded>,
}

/// A running fake Prometheus.
pub struct FakePrometheus {
    /// Base URL, `http://127.0.0.1:<port>` (no trailing slash).
    pub url: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

/// Locks `m`, taking the data of a test thread that panicked while holding it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl FakePrometheus {
    /// Answers `GET /api/v1/query_range` for any query with `series` (each a list of
    /// (unix_s, value) pairs), restricted to [start, end] of the request, as a Prometheus
    /// matrix.
    pub async fn start(series: Vec<Vec<(f64, f64)>>) -> FakePrometheus {
        let shared = Arc::new(Shared {
            answer: Mutex::new(Answer::Series(series)),
            recorded: Mutex::new(Recorded::default()),
        });
        let app = Router::new()
            .route("/api/v1/query_range", get(query_range))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("listener address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakePrometheus {
            url: format!("http://{addr}"),
            shared,
            server,
        }
    }

    /// Change what it answers from the next request on.
    pub fn set(&self, answer: Answer) {
        *lock(&self.shared.answer) = answer;
    }

    /// Every `query` parameter received, in arrival order.
    pub fn queries(&self) -> Vec<String> {
        lock(&self.shared.recorded).queries.clone()
    }

    /// Every (start, end, step) received, in arrival order.
    pub fn ranges(&self) -> Vec<(f64, f64, f64)> {
        lock(&self.shared.recorded).ranges.clone()
    }
}

impl Drop for FakePrometheus {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Prometheus' error body with HTTP `status`.
fn error(status: u16, error_type: &str, text: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        code,
        axum::Json(json!({"status": "error", "errorType": error_type, "error": text})),
    )
        .into_response()
}

/// Prometheus' `errorType` for an HTTP status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 => "bad_data",
        422 => "execution",
        503 => "unavailable",
        504 => "timeout",
        _ => "internal",
    }
}

/// A sample value as Prometheus writes it (a string; `NaN`, `+Inf`, `-Inf`).
fn sample_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        v.to_string()
    }
}

/// `series` as a matrix's `result`, points outside `[start, end]` left out.
fn matrix(series: &[Vec<(f64, f64)>], start: f64, end: f64) -> Value {
    let result: Vec<Value> = series
        .iter()
        .enumerate()
        .filter_map(|(i, points)| {
            let values: Vec<Value> = points
                .iter()
                .filter(|(t, _)| *t >= start && *t <= end)
                .map(|&(t, v)| json!([t, sample_text(v)]))
                .collect();
            (!values.is_empty())
                .then(|| json!({"metric": {"pod": format!("pod-{i}")}, "values": values}))
        })
        .collect();
    Value::Array(result)
}

async fn query_range(
    State(shared): State<Arc<Shared>>,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let number = |name: &str| param(&params, name).and_then(|v| v.trim().parse::<f64>().ok());
    let query = param(&params, "query").unwrap_or_default().to_string();
    lock(&shared.recorded).queries.push(query);
    let (Some(start), Some(end), Some(step)) = (number("start"), number("end"), number("step"))
    else {
        return error(400, "bad_data", "start, end and step must be numbers");
    };
    lock(&shared.recorded).ranges.push((start, end, step));
    let answer = lock(&shared.answer).clone();
    let result = match answer {
        Answer::Series(series) => matrix(&series, start, end),
        Answer::Empty => json!([]),
        Answer::Error(status) => {
            return error(
                status,
                error_type(status),
                &format!("the fake Prometheus answers HTTP {status}"),
            );
        }
        Answer::Hang => std::future::pending().await,
    };
    axum::Json(json!({
        "status": "success",
        "data": {"resultType": "matrix", "result": result}
    }))
    .into_response()
}
