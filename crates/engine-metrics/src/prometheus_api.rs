//! Engine metrics from a Prometheus server instead of scraping the engines: the HTTP API's
//! `GET /api/v1/query_range` turned into the [`MetricsSeries`] the scrape loop would have
//! built, so the queue trend, KV peak and mean, prefix-cache hit rate, preemptions and the
//! findings read it unchanged.
//!
//! - The engine is detected from the metric names the server holds
//!   (`GET /api/v1/label/__name__/values`, restricted to the selector and the window) with
//!   the profile tables of [`super::profile`]: the profile answering the most concepts
//!   wins, and per concept the first candidate name present answers (current names before
//!   older aliases).
//! - One PromQL query per concept, aggregated over every series the selector matches (all
//!   pods and label sets) the way the scrape path combines them: gauges by the concept's
//!   [`Aggregation`] (`sum` for counts, `avg` for fractions, `max` for error codes),
//!   counters as `sum` of the raw cumulative values (the series' counter-delta logic takes
//!   the increase; a pod restarting mid-window shows as a drop of the sum, which that logic
//!   reads as a restart from zero, overcounting by the surviving pods' totals), histograms
//!   as `sum` of `_sum` and of `_count`.
//! - The result has one pseudo-target, `prometheus <base_url> {<selector>}`, and one sample
//!   per step timestamp at which any concept had a value (round = the step's index from
//!   `start`, `t_s` = seconds since `start`). `NaN` and infinite values are skipped.
//!
//! Prometheus refuses a range of more than 11,000 points per series; a step that would
//! exceed it is raised (see [`capped_step`]), logged, and the series' `interval_s` is the
//! step used.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::future::try_join_all;
use serde::{Deserialize, Serialize};

use super::profile::{
    Aggregation, Concept, DetectedProfile, EngineKind, MetricKind, MetricRef, Profile, detect_with,
    profile_with,
};
use super::scrape::chain;
use super::series::{MetricsSeries, ScrapeSample};

/// Most points per series Prometheus returns for a range query.
pub const MAX_POINTS: f64 = 11_000.0;

/// Smallest step (Prometheus resolves steps to milliseconds; a zero step is refused).
const MIN_STEP_S: f64 = 0.001;

/// Time allowed for one API call, connect to last byte.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest error body quoted when it is not Prometheus' JSON.
const MAX_QUOTED_BODY: usize = 300;

/// Names quoted when no engine is recognised.
const NAMES_QUOTED: usize = 8;

/// A Prometheus server holding the engines' metrics, with the selector and step to query
/// it by (what `spec.target.prometheus` resolves to).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrometheusQuery {
    /// Base URL of the server (`http://prometheus.monitoring:9090`, or with a path prefix
    /// behind a proxy); `/api/v1/...` is appended.
    pub base_url: String,
    /// Label matchers restricting the series to the benchmarked engines, without braces
    /// (`namespace="llm",job="vllm"`); may be empty. Surrounding braces are tolerated.
    pub selector: String,
    /// Query resolution step, seconds (at least the server's scrape interval, so every step
    /// sees a fresh value).
    pub step_s: f64,
}

impl PrometheusQuery {
    /// The pseudo-target naming this source in [`MetricsSeries::targets`]:
    /// `prometheus <base_url> {<selector>}`.
    pub fn target_name(&self) -> String {
        format!(
            "prometheus {} {{{}}}",
            base(&self.base_url),
            matchers(&self.selector)
        )
    }
}

/// Why the series could not be read from Prometheus. Every error about a call names the
/// endpoint URL and the PromQL query (for the name listing, its `match[]` selector).
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    /// The base URL does not make a valid URL.
    #[error("bad Prometheus URL `{url}`: {reason}")]
    BadUrl {
        /// The URL tried.
        url: String,
        /// Why it is not valid.
        reason: String,
    },
    /// The range or step cannot be queried.
    #[error(
        "bad query range: start {start}, end {end}, step {step_s} s \
         (needs finite times, end >= start and a positive step)"
    )]
    BadRange {
        /// Start, Unix seconds.
        start: f64,
        /// End, Unix seconds.
        end: f64,
        /// Step, seconds.
        step_s: f64,
    },
    /// Connecting, sending or reading failed (including the timeout).
    #[error("{url} (query `{query}`): {}", chain(.source))]
    Request {
        /// The endpoint URL (without its query string).
        url: String,
        /// The PromQL query.
        query: String,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with an HTTP error status.
    #[error("{url} (query `{query}`): HTTP {status}: {error}")]
    Status {
        /// The endpoint URL (without its query string).
        url: String,
        /// The PromQL query.
        query: String,
        /// The status code (400 bad query, 422 cannot execute, 503 timeout or overload).
        status: u16,
        /// The body's `errorType: error` text, or the start of the body when it is not
        /// Prometheus' JSON.
        error: String,
    },
    /// The server answered `"status": "error"`.
    #[error("{url} (query `{query}`): Prometheus error: {error}")]
    Api {
        /// The endpoint URL (without its query string).
        url: String,
        /// The PromQL query.
        query: String,
        /// The body's `errorType: error` text.
        error: String,
    },
    /// The body is not the API's JSON.
    #[error("{url} (query `{query}`): malformed answer: {reason}")]
    Malformed {
        /// The endpoint URL (without its query string).
        url: String,
        /// The PromQL query.
        query: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A range query answered with something other than a matrix.
    #[error("{url} (query `{query}`): result type `{result_type}`, expected `matrix`")]
    NotMatrix {
        /// The endpoint URL (without its query string).
        url: String,
        /// The PromQL query.
        query: String,
        /// The result type received.
        result_type: String,
    },
    /// No engine's metric names (or none of the requested engine's) are on the server
    /// under the selector.
    #[error(
        "{url}: no {} metric names among the {names_seen} names under {{{selector}}}{}",
        .engine.map_or("known engine".to_string(), |e| e.to_string()),
        quote_names(.examples)
    )]
    NoEngine {
        /// The name-listing URL.
        url: String,
        /// The selector.
        selector: String,
        /// The engine asked for (`None`: detection).
        engine: Option<EngineKind>,
        /// How many names the server listed.
        names_seen: usize,
        /// A few of them.
        examples: Vec<String>,
    },
}

fn quote_names(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!(" (e.g. {})", names.join(", "))
    }
}

/// The base URL without trailing slashes.
fn base(url: &str) -> &str {
    url.trim().trim_end_matches('/')
}

/// The selector's matchers: trimmed, surrounding braces removed.
fn matchers(selector: &str) -> &str {
    let s = selector.trim();
    s.strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .unwrap_or(s)
        .trim()
}

/// The step a range query uses: `step_s` (at least 1 ms), raised to the next millisecond
/// above `(end − start) / 11,000` when the range would otherwise exceed Prometheus'
/// 11,000 points per series.
pub fn capped_step(start_unix_s: f64, end_unix_s: f64, step_s: f64) -> f64 {
    let step = step_s.max(MIN_STEP_S);
    let span = (end_unix_s - start_unix_s).max(0.0);
    if span / step <= MAX_POINTS {
        return step;
    }
    let mut raised = (span / MAX_POINTS * 1000.0).ceil() / 1000.0;
    // Guard against the rounding landing just under the bound.
    while span / raised > MAX_POINTS {
        raised += MIN_STEP_S;
    }
    raised
}

/// The selector of one metric: `name{<selector>,<label restriction>}` (`name` alone when
/// there are no matchers). Metric names with colons are valid PromQL as they are.
pub fn metric_selector(name: &str, label: Option<(&str, &str)>, selector: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    let sel = matchers(selector);
    if !sel.is_empty() {
        parts.push(sel.to_string());
    }
    if let Some((k, v)) = label {
        parts.push(format!(
            "{k}=\"{}\"",
            v.replace('\\', "\\\\").replace('"', "\\\"")
        ));
    }
    if parts.is_empty() {
        name.to_string()
    } else {
        format!("{name}{{{}}}", parts.join(","))
    }
}

/// The PromQL aggregation operator for an [`Aggregation`].
fn operator(how: Aggregation) -> &'static str {
    match how {
        Aggregation::Sum => "sum",
        Aggregation::Mean => "avg",
        Aggregation::Max => "max",
    }
}

/// The queries answering `concept` through metric `r`: `(values key, PromQL)`. A gauge is
/// aggregated by the concept's [`Aggregation`], a counter summed, a histogram summed as
/// `<key>_sum` (`<name>_sum`) and `<key>_count` (`<name>_count`).
pub fn concept_queries(concept: Concept, r: &MetricRef, selector: &str) -> Vec<(String, String)> {
    let label = r.label;
    match concept.kind() {
        MetricKind::Gauge => vec![(
            concept.key().to_string(),
            format!(
                "{}({})",
                operator(concept.aggregation()),
                metric_selector(r.name, label, selector)
            ),
        )],
        MetricKind::Counter => vec![(
            concept.key().to_string(),
            format!("sum({})", metric_selector(r.name, label, selector)),
        )],
        MetricKind::Histogram => ["_sum", "_count"]
            .iter()
            .map(|suffix| {
                (
                    format!("{}{suffix}", concept.key()),
                    format!(
                        "sum({})",
                        metric_selector(&format!("{}{suffix}", r.name), label, selector)
                    ),
                )
            })
            .collect(),
    }
}

/// The name whose presence shows candidate `r` of `concept` (a histogram's `_count`).
/// A label restriction (Triton's `request_type="waiting"`) cannot be checked from names
/// and is taken as met.
fn probe(concept: Concept, r: &MetricRef) -> String {
    match concept.kind() {
        MetricKind::Histogram => format!("{}_count", r.name),
        _ => r.name.to_string(),
    }
}

/// What `engine`'s profile finds among the metric `names`: per concept the first candidate
/// present (see [`DetectedProfile`]).
pub fn profile_from_names(engine: EngineKind, names: &BTreeSet<String>) -> DetectedProfile {
    profile_with(engine, |profile, concept| {
        find_named(profile, concept, names)
    })
}

fn find_named(
    profile: &Profile,
    concept: Concept,
    names: &BTreeSet<String>,
) -> Option<&'static MetricRef> {
    profile
        .candidates(concept)
        .iter()
        .find(|r| names.contains(&probe(concept, r)))
}

/// The engine whose profile answers the most concepts among the metric `names` (ties: the
/// order of [`EngineKind::ALL`]), as [`super::profile::detect`] does on a page; `None` when
/// no profile's names are present.
pub fn detect_from_names(names: &BTreeSet<String>) -> Option<DetectedProfile> {
    detect_with(|profile, concept| find_named(profile, concept, names))
}

/// Every query for the found concepts of `d`: `(values key, PromQL, how several series of
/// the answer combine)`, in table order.
fn profile_queries(d: &DetectedProfile, selector: &str) -> Vec<(String, String, Aggregation)> {
    let profile = d.profile();
    let mut out = Vec::new();
    for &concept in &d.found {
        let Some(name) = d.names.get(&concept) else {
            continue;
        };
        if let Some(r) = profile
            .candidates(concept)
            .iter()
            .find(|r| r.to_string() == *name)
        {
            let how = match concept.kind() {
                MetricKind::Gauge => concept.aggregation(),
                _ => Aggregation::Sum,
            };
            out.extend(
                concept_queries(concept, r, selector)
                    .into_iter()
                    .map(|(key, query)| (key, query, how)),
            );
        }
    }
    out
}

/// Why a body was not a successful answer (the caller adds the URL and query).
#[derive(Debug, PartialEq)]
enum Failure {
    Status { status: u16, error: String },
    Api { error: String },
    Malformed { reason: String },
    NotMatrix { result_type: String },
}

impl Failure {
    fn at(self, url: &str, query: &str) -> PrometheusError {
        let (url, query) = (url.to_string(), query.to_string());
        match self {
            Failure::Status { status, error } => PrometheusError::Status {
                url,
                query,
                status,
                error,
            },
            Failure::Api { error } => PrometheusError::Api { url, query, error },
            Failure::Malformed { reason } => PrometheusError::Malformed { url, query, reason },
            Failure::NotMatrix { result_type } => PrometheusError::NotMatrix {
                url,
                query,
                result_type,
            },
        }
    }
}

/// The API's envelope.
#[derive(Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<serde_json::Value>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

impl Envelope {
    fn error_text(&self) -> String {
        match (&self.error_type, &self.error) {
            (Some(t), Some(e)) => format!("{t}: {e}"),
            (None, Some(e)) => e.clone(),
            (Some(t), None) => t.clone(),
            (None, None) => "no error text".to_string(),
        }
    }
}

/// The `data` of an API answer with HTTP status `status`, or why there is none.
fn parse_data(status: u16, body: &[u8]) -> Result<serde_json::Value, Failure> {
    let envelope = serde_json::from_slice::<Envelope>(body);
    if !(200..300).contains(&status) {
        let error = match envelope {
            Ok(e) => e.error_text(),
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let text = text.trim();
                match text.char_indices().nth(MAX_QUOTED_BODY) {
                    Some((i, _)) => format!("{}...", &text[..i]),
                    None if text.is_empty() => "empty body".to_string(),
                    None => text.to_string(),
                }
            }
        };
        return Err(Failure::Status { status, error });
    }
    let envelope = envelope.map_err(|e| Failure::Malformed {
        reason: e.to_string(),
    })?;
    if envelope.status != "success" {
        return Err(Failure::Api {
            error: envelope.error_text(),
        });
    }
    envelope.data.ok_or_else(|| Failure::Malformed {
        reason: "no `data` in a successful answer".to_string(),
    })
}

/// One series of a matrix.
#[derive(Deserialize)]
struct MatrixSeries {
    #[serde(default)]
    values: Vec<(f64, String)>,
}

/// The points of a range query's `data`, combined per timestamp over the series by `how`
/// (an aggregated query gives at most one series; more are combined, not dropped).
/// Values that are not finite numbers are skipped. Points are in time order.
fn matrix_points(data: serde_json::Value, how: Aggregation) -> Result<Vec<(f64, f64)>, Failure> {
    #[derive(Deserialize)]
    struct RangeData {
        #[serde(rename = "resultType")]
        result_type: String,
        result: serde_json::Value,
    }
    let data: RangeData = serde_json::from_value(data).map_err(|e| Failure::Malformed {
        reason: e.to_string(),
    })?;
    if data.result_type != "matrix" {
        return Err(Failure::NotMatrix {
            result_type: data.result_type,
        });
    }
    let series: Vec<MatrixSeries> =
        serde_json::from_value(data.result).map_err(|e| Failure::Malformed {
            reason: e.to_string(),
        })?;
    // Keyed by the millisecond (Prometheus' resolution): the series of one query share
    // their evaluation timestamps.
    let mut by_ts: BTreeMap<i64, (f64, f64, usize)> = BTreeMap::new();
    for s in series {
        for (ts, text) in s.values {
            let Ok(v) = text.trim().parse::<f64>() else {
                continue;
            };
            if !v.is_finite() || !ts.is_finite() {
                continue;
            }
            let key = (ts * 1000.0).round() as i64;
            let e = by_ts.entry(key).or_insert((
                ts,
                match how {
                    Aggregation::Max => f64::NEG_INFINITY,
                    _ => 0.0,
                },
                0,
            ));
            e.1 = match how {
                Aggregation::Max => e.1.max(v),
                _ => e.1 + v,
            };
            e.2 += 1;
        }
    }
    Ok(by_ts
        .into_values()
        .map(|(ts, acc, n)| match how {
            Aggregation::Mean => (ts, acc / n as f64),
            _ => (ts, acc),
        })
        .collect())
}

/// One sample per step timestamp at which any key had a value: round = the timestamp's
/// step index from `start_unix_s`, `t_s` = seconds since `start_unix_s`, target 0.
fn assemble(
    points: Vec<(String, Vec<(f64, f64)>)>,
    start_unix_s: f64,
    step_s: f64,
) -> Vec<ScrapeSample> {
    let mut rounds: BTreeMap<u64, ScrapeSample> = BTreeMap::new();
    for (key, series) in points {
        for (ts, v) in series {
            let t_s = ts - start_unix_s;
            let round = (t_s / step_s).round().max(0.0) as u64;
            rounds
                .entry(round)
                .or_insert_with(|| ScrapeSample {
                    round,
                    t_s,
                    target: 0,
                    ok: true,
                    error: None,
                    values: BTreeMap::new(),
                    skipped_lines: 0,
                })
                .values
                .insert(key.clone(), v);
        }
    }
    rounds.into_values().collect()
}

/// `base/path` as a URL.
fn endpoint(base_url: &str, path: &str) -> Result<reqwest::Url, PrometheusError> {
    let url = format!("{}{path}", base(base_url));
    reqwest::Url::parse(&url).map_err(|e| PrometheusError::BadUrl {
        url: without_userinfo(&url),
        reason: e.to_string(),
    })
}

/// `url` as errors show it: without its query string and without the `user:password@`
/// of basic authentication.
fn shown_url(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    strip_credentials(&mut url);
    url.to_string()
}

/// Removes the user name and password of `url` (a URL that cannot have them has none).
fn strip_credentials(url: &mut reqwest::Url) {
    // Both fail only for URLs without a host (`mailto:`), which hold no credentials.
    let _ = url.set_username("");
    let _ = url.set_password(None);
}

/// `text`, a URL that may not parse, without the `user:password@` before its host.
fn without_userinfo(text: &str) -> String {
    let Some(scheme_end) = text.find("://") else {
        return text.to_string();
    };
    let authority_start = scheme_end + 3;
    let rest = &text[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_len].rfind('@') {
        Some(at) => format!("{}{}", &text[..authority_start], &rest[at + 1..]),
        None => text.to_string(),
    }
}

/// GETs `url` and returns the answer's `data`; `query` names the call in errors.
async fn get_data(
    client: &reqwest::Client,
    url: reqwest::Url,
    query: &str,
) -> Result<serde_json::Value, PrometheusError> {
    let shown = shown_url(&url);
    // reqwest's message quotes the URL it requested: without credentials too.
    let request = |mut source: reqwest::Error| {
        if let Some(url) = source.url_mut() {
            strip_credentials(url);
        }
        PrometheusError::Request {
            url: shown.clone(),
            query: query.to_string(),
            source,
        }
    };
    let resp = client
        .get(url)
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await
        .map_err(request)?;
    let status = resp.status().as_u16();
    let body = resp.bytes().await.map_err(request)?;
    parse_data(status, &body).map_err(|f| f.at(&shown, query))
}

/// The metric names the server holds under the selector during the window.
async fn metric_names(
    client: &reqwest::Client,
    source: &PrometheusQuery,
    start_unix_s: f64,
    end_unix_s: f64,
) -> Result<(String, BTreeSet<String>), PrometheusError> {
    let mut url = endpoint(&source.base_url, "/api/v1/label/__name__/values")?;
    let sel = matchers(&source.selector);
    let query = if sel.is_empty() {
        "all metric names".to_string()
    } else {
        format!("match[]={{{sel}}}")
    };
    {
        let mut q = url.query_pairs_mut();
        if !sel.is_empty() {
            q.append_pair("match[]", &format!("{{{sel}}}"));
        }
        q.append_pair("start", &format!("{start_unix_s:.3}"));
        q.append_pair("end", &format!("{end_unix_s:.3}"));
    }
    let shown = shown_url(&url);
    let data = get_data(client, url, &query).await?;
    let names: Vec<String> =
        serde_json::from_value(data).map_err(|e| PrometheusError::Malformed {
            url: shown.clone(),
            query,
            reason: format!("label values are not a list of strings: {e}"),
        })?;
    Ok((shown, names.into_iter().collect()))
}

/// One range query's points, combined per timestamp by `how`.
async fn range_points(
    client: &reqwest::Client,
    base_url: &str,
    query: &str,
    how: Aggregation,
    start_unix_s: f64,
    end_unix_s: f64,
    step_s: f64,
) -> Result<Vec<(f64, f64)>, PrometheusError> {
    let mut url = endpoint(base_url, "/api/v1/query_range")?;
    url.query_pairs_mut()
        .append_pair("query", query)
        .append_pair("start", &format!("{start_unix_s:.3}"))
        .append_pair("end", &format!("{end_unix_s:.3}"))
        .append_pair("step", &format!("{step_s}"));
    let shown = shown_url(&url);
    let data = get_data(client, url, query).await?;
    matrix_points(data, how).map_err(|f| f.at(&shown, query))
}

/// `Ok` when `[start_unix_s, end_unix_s]` with `step_s` can be queried: finite times,
/// `end >= start`, a finite positive step.
fn check_range(start_unix_s: f64, end_unix_s: f64, step_s: f64) -> Result<(), PrometheusError> {
    if start_unix_s.is_finite()
        && end_unix_s.is_finite()
        && end_unix_s >= start_unix_s
        && step_s.is_finite()
        && step_s > 0.0
    {
        Ok(())
    } else {
        Err(PrometheusError::BadRange {
            start: start_unix_s,
            end: end_unix_s,
            step_s,
        })
    }
}

/// [`capped_step`], with a warning when the requested step had to be raised.
fn step_for_range(start_unix_s: f64, end_unix_s: f64, step_s: f64) -> f64 {
    let capped = capped_step(start_unix_s, end_unix_s, step_s);
    if capped > step_s.max(MIN_STEP_S) {
        tracing::warn!(
            requested_step_s = step_s,
            step_s = capped,
            span_s = end_unix_s - start_unix_s,
            "Prometheus returns at most 11000 points per series: step raised"
        );
    }
    capped
}

/// The samples of one PromQL range query, the series it returns summed per timestamp (a
/// request-rate query per pod becomes the fleet's rate), in time order: `(unix_s, value)`.
///
/// The window is `[start_unix_s, end_unix_s]` at `step_s` seconds; a step that would
/// exceed Prometheus' 11,000 points per series is raised (see [`capped_step`]) and logged.
/// Values that are not finite numbers are skipped, and a timestamp at which no series has
/// a value gives no sample, so an empty result is `Ok` with no samples. Errors name the
/// endpoint URL (without credentials) and the query.
pub async fn query_range_total(
    client: &reqwest::Client,
    base_url: &str,
    query: &str,
    start_unix_s: f64,
    end_unix_s: f64,
    step_s: f64,
) -> Result<Vec<(f64, f64)>, PrometheusError> {
    check_range(start_unix_s, end_unix_s, step_s)?;
    let step_s = step_for_range(start_unix_s, end_unix_s, step_s);
    range_points(
        client,
        base_url,
        query,
        Aggregation::Sum,
        start_unix_s,
        end_unix_s,
        step_s,
    )
    .await
}

/// The engine metrics of the window `[start_unix_s, end_unix_s]` from the Prometheus server
/// of `source`, as the [`MetricsSeries`] scraping would have produced (see the module doc).
/// `engine`: the engine whose profile to read; `None` detects it from the server's metric
/// names. Queries run concurrently; the first failure is returned.
pub async fn query_range_series(
    client: &reqwest::Client,
    source: &PrometheusQuery,
    engine: Option<EngineKind>,
    start_unix_s: f64,
    end_unix_s: f64,
) -> Result<MetricsSeries, PrometheusError> {
    check_range(start_unix_s, end_unix_s, source.step_s)?;
    let step_s = step_for_range(start_unix_s, end_unix_s, source.step_s);
    let (names_url, names) = metric_names(client, source, start_unix_s, end_unix_s).await?;
    let detected = match engine {
        Some(e) => Some(profile_from_names(e, &names)).filter(|d| !d.found.is_empty()),
        None => detect_from_names(&names),
    };
    let Some(detected) = detected else {
        return Err(PrometheusError::NoEngine {
            url: names_url,
            selector: matchers(&source.selector).to_string(),
            engine,
            names_seen: names.len(),
            examples: names.iter().take(NAMES_QUOTED).cloned().collect(),
        });
    };
    let queries = profile_queries(&detected, &source.selector);
    let results = try_join_all(queries.iter().map(|(_, query, how)| {
        range_points(
            client,
            &source.base_url,
            query,
            *how,
            start_unix_s,
            end_unix_s,
            step_s,
        )
    }))
    .await?;
    let points = queries
        .into_iter()
        .map(|(key, _, _)| key)
        .zip(results)
        .collect();
    Ok(MetricsSeries {
        targets: vec![source.target_name()],
        interval_s: step_s,
        target_engines: vec![Some(detected.engine)],
        profile: Some(detected),
        samples: assemble(points, start_unix_s, step_s),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn selectors_and_queries() {
        assert_eq!(
            metric_selector("vllm:num_requests_waiting", None, ""),
            "vllm:num_requests_waiting"
        );
        assert_eq!(
            metric_selector("vllm:num_requests_waiting", None, " {job=\"vllm\"} "),
            "vllm:num_requests_waiting{job=\"vllm\"}"
        );
        assert_eq!(
            metric_selector(
                "nv_trt_llm_request_metrics",
                Some(("request_type", "waiting")),
                "namespace=\"llm\""
            ),
            "nv_trt_llm_request_metrics{namespace=\"llm\",request_type=\"waiting\"}"
        );
        let vllm = EngineKind::Vllm.profile();
        let sel = "namespace=\"llm\",job=\"vllm\"";
        let q = |c: Concept| concept_queries(c, &vllm.candidates(c)[0], sel);
        assert_eq!(
            q(Concept::QueueWaiting),
            vec![(
                "queue_waiting".to_string(),
                "sum(vllm:num_requests_waiting{namespace=\"llm\",job=\"vllm\"})".to_string()
            )]
        );
        assert_eq!(
            q(Concept::KvUsage)[0].1,
            "avg(vllm:kv_cache_usage_perc{namespace=\"llm\",job=\"vllm\"})"
        );
        assert_eq!(
            q(Concept::Preemptions)[0].1,
            "sum(vllm:num_preemptions_total{namespace=\"llm\",job=\"vllm\"})"
        );
        assert_eq!(
            q(Concept::Ttft),
            vec![
                (
                    "ttft_sum".to_string(),
                    "sum(vllm:time_to_first_token_seconds_sum{namespace=\"llm\",job=\"vllm\"})"
                        .to_string()
                ),
                (
                    "ttft_count".to_string(),
                    "sum(vllm:time_to_first_token_seconds_count{namespace=\"llm\",job=\"vllm\"})"
                        .to_string()
                ),
            ]
        );
        let dcgm = EngineKind::Dcgm.profile();
        assert_eq!(
            concept_queries(
                Concept::XidErrors,
                &dcgm.candidates(Concept::XidErrors)[0],
                ""
            )[0]
            .1,
            "max(DCGM_FI_DEV_XID_ERRORS)"
        );
    }

    #[test]
    fn detection_from_names_prefers_current_names_and_the_best_profile() {
        let n = names(&[
            "up",
            "vllm:num_requests_waiting",
            "vllm:num_requests_running",
            "vllm:gpu_cache_usage_perc",
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_prefix_cache_hits_total",
            "vllm:time_to_first_token_seconds_bucket",
            "vllm:time_to_first_token_seconds_count",
            "vllm:time_to_first_token_seconds_sum",
            "DCGM_FI_DEV_GPU_UTIL",
        ]);
        let d = detect_from_names(&n).unwrap_or_else(|| panic!("nothing detected"));
        assert_eq!(d.engine, EngineKind::Vllm);
        assert_eq!(
            d.found,
            vec![
                Concept::QueueWaiting,
                Concept::Running,
                Concept::KvUsage,
                Concept::PrefixCacheHits,
                Concept::Ttft
            ]
        );
        assert_eq!(d.names[&Concept::KvUsage], "vllm:kv_cache_usage_perc");
        assert_eq!(d.deprecated, vec![Concept::PrefixCacheHits]);
        assert!(d.missing.contains(&Concept::Preemptions));
        let qs = profile_queries(&d, "");
        assert_eq!(qs.len(), 6);
        assert_eq!(qs[3].1, "sum(vllm:gpu_prefix_cache_hits_total)");

        // Asked for DCGM: its profile, whatever else is there.
        let d = profile_from_names(EngineKind::Dcgm, &n);
        assert_eq!(d.found, vec![Concept::GpuUtilization]);
        assert_eq!(
            detect_from_names(&names(&["up", "process_cpu_seconds_total"])),
            None
        );
    }

    #[test]
    fn step_is_raised_past_eleven_thousand_points() {
        assert_eq!(capped_step(0.0, 3600.0, 1.0), 1.0);
        assert_eq!(capped_step(0.0, 11_000.0, 1.0), 1.0);
        let s = capped_step(0.0, 86_400.0, 1.0);
        assert!(86_400.0 / s <= MAX_POINTS && s < 7.9, "{s}");
        assert_eq!(s, 7.855);
        assert_eq!(capped_step(0.0, 10.0, 0.0), MIN_STEP_S);
        let s = capped_step(1_700_000_000.0, 1_700_000_111.0, 0.001);
        assert!(111.0 / s <= MAX_POINTS, "{s}");
    }

    #[test]
    fn matrices_combine_skip_non_finite_and_assemble_into_rounds() {
        let data = json!({
            "resultType": "matrix",
            "result": [
                {"metric": {}, "values": [[100.0, "1"], [101.0, "NaN"], [102.0, "3"], [103.0, "+Inf"]]},
                {"metric": {"pod": "b"}, "values": [[100.0, "3"]]}
            ]
        });
        assert_eq!(
            matrix_points(data.clone(), Aggregation::Mean),
            Ok(vec![(100.0, 2.0), (102.0, 3.0)])
        );
        assert_eq!(
            matrix_points(data.clone(), Aggregation::Sum),
            Ok(vec![(100.0, 4.0), (102.0, 3.0)])
        );
        assert_eq!(
            matrix_points(data, Aggregation::Max),
            Ok(vec![(100.0, 3.0), (102.0, 3.0)])
        );
        assert_eq!(
            matrix_points(
                json!({"resultType": "vector", "result": []}),
                Aggregation::Sum
            ),
            Err(Failure::NotMatrix {
                result_type: "vector".into()
            })
        );
        assert!(matches!(
            matrix_points(
                json!({"resultType": "matrix", "result": {}}),
                Aggregation::Sum
            ),
            Err(Failure::Malformed { .. })
        ));

        let samples = assemble(
            vec![
                ("queue_waiting".into(), vec![(100.0, 1.0), (102.0, 3.0)]),
                ("kv_usage".into(), vec![(100.0, 0.5), (101.0, 0.6)]),
            ],
            100.0,
            1.0,
        );
        assert_eq!(samples.len(), 3);
        assert_eq!(
            samples.iter().map(|s| (s.round, s.t_s)).collect::<Vec<_>>(),
            vec![(0, 0.0), (1, 1.0), (2, 2.0)]
        );
        assert_eq!(samples[0].values.len(), 2);
        assert_eq!(samples[1].values.get("queue_waiting"), None);
        assert_eq!(samples[2].values.get("queue_waiting"), Some(&3.0));
        assert!(samples.iter().all(|s| s.ok && s.target == 0));
    }

    #[test]
    fn bodies_are_classified() {
        let ok = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(parse_data(200, ok).is_ok());
        assert_eq!(
            parse_data(
                503,
                br#"{"status":"error","errorType":"unavailable","error":"too many queries"}"#
            ),
            Err(Failure::Status {
                status: 503,
                error: "unavailable: too many queries".into()
            })
        );
        assert_eq!(
            parse_data(502, b"<html>bad gateway</html>"),
            Err(Failure::Status {
                status: 502,
                error: "<html>bad gateway</html>".into()
            })
        );
        assert_eq!(
            parse_data(
                200,
                br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#
            ),
            Err(Failure::Api {
                error: "bad_data: parse error".into()
            })
        );
        assert!(matches!(
            parse_data(200, b"{\"status\": \"succ"),
            Err(Failure::Malformed { .. })
        ));
        assert!(matches!(
            parse_data(200, br#"{"status":"success"}"#),
            Err(Failure::Malformed { .. })
        ));
        let long = "x".repeat(1000);
        match parse_data(500, long.as_bytes()) {
            Err(Failure::Status { error, .. }) => assert_eq!(error.len(), MAX_QUOTED_BODY + 3),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn credentials_are_kept_out_of_shown_urls() {
        let url = reqwest::Url::parse(
            "https://alice:s3cret@prom.example:9090/p/api/v1/query_range?query=up",
        )
        .unwrap();
        assert_eq!(
            shown_url(&url),
            "https://prom.example:9090/p/api/v1/query_range"
        );
        assert_eq!(
            without_userinfo("http://alice:s3cret@prom:9090/api/v1/query_range"),
            "http://prom:9090/api/v1/query_range"
        );
        // An `@` after the host is not credentials.
        assert_eq!(
            without_userinfo("http://prom:9090/api?x=a@b"),
            "http://prom:9090/api?x=a@b"
        );
        assert_eq!(without_userinfo("not a url"), "not a url");
        match endpoint("http://alice:s3cret@[bad", "/api/v1/query_range") {
            Err(e @ PrometheusError::BadUrl { .. }) => {
                assert!(!e.to_string().contains("s3cret"), "{e}");
                assert!(e.to_string().contains("http://[bad"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            check_range(10.0, 5.0, 1.0),
            Err(PrometheusError::BadRange { .. })
        ));
        assert!(check_range(5.0, 5.0, 1.0).is_ok());
        assert!(check_range(0.0, 5.0, f64::NAN).is_err());
    }

    #[test]
    fn target_names_and_error_messages() {
        let src = PrometheusQuery {
            base_url: "http://prom:9090/".into(),
            selector: "{job=\"vllm\"}".into(),
            step_s: 1.0,
        };
        assert_eq!(
            src.target_name(),
            "prometheus http://prom:9090 {job=\"vllm\"}"
        );
        let e = Failure::Status {
            status: 503,
            error: "unavailable: overloaded".into(),
        }
        .at("http://prom:9090/api/v1/query_range", "sum(x)");
        assert_eq!(
            e.to_string(),
            "http://prom:9090/api/v1/query_range (query `sum(x)`): HTTP 503: unavailable: overloaded"
        );
        let e = PrometheusError::NoEngine {
            url: "http://prom:9090/api/v1/label/__name__/values".into(),
            selector: String::new(),
            engine: None,
            names_seen: 2,
            examples: vec!["up".into(), "foo".into()],
        };
        assert_eq!(
            e.to_string(),
            "http://prom:9090/api/v1/label/__name__/values: no known engine metric names among \
             the 2 names under {} (e.g. up, foo)"
        );
    }
}
