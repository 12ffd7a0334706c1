//! The HTTP side both forges share: the client, URLs, and turning a response into a
//! [`ForgeError`] (rate limits included).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;
use reqwest::{RequestBuilder, Url};
use serde::de::DeserializeOwned;

use super::{ForgeError, ForgeKind};

/// Every request's overall limit; a forge that takes longer is treated as unavailable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// GitHub's "otherwise wait at least a minute" and GitLab's default without headers.
const DEFAULT_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);
/// A reset hours away is a clock problem or a bogus header; an hour covers GitHub's
/// primary window, and the reconciler simply meets the limit again if it is still there.
const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(3600);
/// How much of the forge's own message goes into an error.
const MESSAGE_CHARS: usize = 300;

/// The forges' client: rustls on ring, a 30 s timeout per request, and redirects only
/// within the same origin (reqwest drops `Authorization` on a cross-origin redirect, but
/// not GitLab's `PRIVATE-TOKEN`).
pub(super) fn client() -> Result<reqwest::Client, ForgeError> {
    let builder = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(concat!("goodput/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::custom(|attempt| {
            let same_origin = attempt
                .previous()
                .first()
                .is_some_and(|first| first.origin() == attempt.url().origin());
            if attempt.previous().len() > 5 || !same_origin {
                attempt.stop()
            } else {
                attempt.follow()
            }
        }));
    goodput_http::http_client(builder)
        .map_err(|e| ForgeError::Config(format!("cannot build the HTTP client: {e}")))
}

/// The API root as a URL (http or https, no credentials in it).
pub(super) fn api_base(api_url: &str) -> Result<Url, ForgeError> {
    let url = Url::parse(api_url.trim_end_matches('/'))
        .map_err(|e| ForgeError::Config(format!("the forge API URL is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
        return Err(ForgeError::Config(format!(
            "the forge API URL must be http(s), got scheme {:?}",
            url.scheme()
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ForgeError::Config(
            "the forge API URL must not carry credentials".into(),
        ));
    }
    Ok(url)
}

/// `base` plus path segments, each percent-encoded (so GitLab's `group/name` project id
/// becomes the one segment `group%2Fname`), plus the query.
pub(super) fn endpoint(base: &Url, segments: &[&str], query: &[(&str, &str)]) -> Url {
    let mut url = base.clone();
    // `api_base` rejected cannot-be-a-base URLs, the only ones without path segments.
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty().extend(segments);
    }
    if !query.is_empty() {
        url.query_pairs_mut().extend_pairs(query);
    }
    url
}

/// Sends a request and returns the body of a 2xx answer; anything else becomes a
/// [`ForgeError`]. `what` names the call for `NotFound`; `secret` is scrubbed from every
/// message.
pub(super) async fn send(
    request: RequestBuilder,
    kind: &ForgeKind,
    what: &str,
    secret: &str,
) -> Result<String, ForgeError> {
    let response = request
        .send()
        .await
        .map_err(|e| transport_error(&e, secret))?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .text()
        .await
        .map_err(|e| transport_error(&e, secret))?;
    if (200..300).contains(&status) {
        return Ok(body);
    }
    Err(classify(
        kind,
        status,
        &headers,
        &body,
        what,
        secret,
        SystemTime::now(),
    ))
}

/// A 2xx body as `T`. A body that does not parse means something between us and the forge
/// (a proxy's HTML page, say), so it counts as unavailable.
pub(super) fn parse<T: DeserializeOwned>(body: &str, what: &str) -> Result<T, ForgeError> {
    serde_json::from_str(body)
        .map_err(|e| ForgeError::Transport(format!("unexpected answer to {what}: {e}")))
}

/// The error for a non-2xx answer.
pub(super) fn classify(
    kind: &ForgeKind,
    status: u16,
    headers: &HeaderMap,
    body: &str,
    what: &str,
    secret: &str,
    now: SystemTime,
) -> ForgeError {
    let message = redact(&error_message(body), secret);
    let limited = match kind {
        ForgeKind::GitHub => github_rate_limit(status, headers, &message, now),
        ForgeKind::GitLab => gitlab_rate_limit(status, headers, now),
    };
    if let Some(retry_after) = limited {
        return ForgeError::RateLimited { retry_after };
    }
    match status {
        401 => ForgeError::Unauthorized,
        403 => ForgeError::Forbidden { message },
        404 => ForgeError::NotFound {
            what: what.to_owned(),
        },
        422 => ForgeError::Validation { message },
        500..=599 => ForgeError::Server { status, message },
        _ => ForgeError::Validation {
            message: format!("HTTP {status}: {message}"),
        },
    }
}

/// GitHub's documented order: `retry-after`, else `x-ratelimit-remaining: 0` until
/// `x-ratelimit-reset`, else a minute. A 403 is a rate limit only with those headers or a
/// message saying so (secondary limits sometimes come bare); otherwise it is a permission.
fn github_rate_limit(
    status: u16,
    headers: &HeaderMap,
    message: &str,
    now: SystemTime,
) -> Option<Duration> {
    if !matches!(status, 403 | 429) {
        return None;
    }
    if let Some(seconds) = header_u64(headers, "retry-after") {
        return Some(clamp_wait(Duration::from_secs(seconds)));
    }
    if header_u64(headers, "x-ratelimit-remaining") == Some(0)
        && let Some(reset) = header_u64(headers, "x-ratelimit-reset")
    {
        return Some(until_epoch(reset, now));
    }
    let says_so = message.to_ascii_lowercase().contains("rate limit");
    (status == 429 || says_so).then_some(DEFAULT_RATE_LIMIT_WAIT)
}

/// GitLab: 429 with `Retry-After`, else `RateLimit-Reset` (epoch seconds), else a minute.
fn gitlab_rate_limit(status: u16, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if status != 429 {
        return None;
    }
    if let Some(seconds) = header_u64(headers, "retry-after") {
        return Some(clamp_wait(Duration::from_secs(seconds)));
    }
    if let Some(reset) = header_u64(headers, "ratelimit-reset") {
        return Some(until_epoch(reset, now));
    }
    Some(DEFAULT_RATE_LIMIT_WAIT)
}

/// A header holding whole seconds (an HTTP-date `retry-after` does not parse and falls
/// through to the next rule).
fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

fn until_epoch(reset: u64, now: SystemTime) -> Duration {
    let reset = UNIX_EPOCH + Duration::from_secs(reset);
    clamp_wait(reset.duration_since(now).unwrap_or_default())
}

/// At least a second (a reset already past still means "not now"), at most an hour.
fn clamp_wait(wait: Duration) -> Duration {
    wait.clamp(Duration::from_secs(1), MAX_RATE_LIMIT_WAIT)
}

/// The forge's explanation from an error body: GitHub's `message` plus its `errors[]`
/// messages, GitLab's `message` (text, list or field map) or `error`; else the raw text.
pub(super) fn error_message(body: &str) -> String {
    let text = match serde_json::from_str::<serde_json::Value>(body) {
        Ok(json) => json_message(&json).unwrap_or_else(|| body.trim().to_owned()),
        Err(_) => body.trim().to_owned(),
    };
    truncate(&text, MESSAGE_CHARS)
}

fn json_message(json: &serde_json::Value) -> Option<String> {
    let mut parts = Vec::new();
    for key in ["message", "error", "error_description"] {
        if let Some(value) = json.get(key) {
            parts.push(flatten(value));
        }
    }
    if let Some(errors) = json.get("errors").and_then(|e| e.as_array()) {
        for error in errors {
            let detail = error
                .get("message")
                .map(flatten)
                .unwrap_or_else(|| flatten(error));
            parts.push(detail);
        }
    }
    parts.retain(|p| !p.is_empty());
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// A JSON value as one line: strings bare, lists joined, `{field: [..]}` as `field ..`.
fn flatten(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(items) => items.iter().map(flatten).collect::<Vec<_>>().join("; "),
        serde_json::Value::Object(fields) => fields
            .iter()
            .map(|(k, v)| format!("{k} {}", flatten(v)))
            .collect::<Vec<_>>()
            .join("; "),
        other => other.to_string(),
    }
}

fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// `text` with every occurrence of the credential replaced.
pub(super) fn redact(text: &str, secret: &str) -> String {
    if secret.is_empty() {
        text.to_owned()
    } else {
        text.replace(secret, "<redacted>")
    }
}

/// A connection-level failure, with the causes reqwest keeps in its source chain
/// ("connection refused", "timed out").
fn transport_error(error: &reqwest::Error, secret: &str) -> ForgeError {
    let mut text = if error.is_timeout() {
        format!("timed out after {}s: {error}", REQUEST_TIMEOUT.as_secs())
    } else {
        error.to_string()
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    ForgeError::Transport(truncate(&redact(&text, secret), MESSAGE_CHARS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn github(status: u16, pairs: &[(&'static str, &str)], body: &str) -> ForgeError {
        classify(
            &ForgeKind::GitHub,
            status,
            &headers(pairs),
            body,
            "GET /x",
            "sekrit",
            at(1_000),
        )
    }

    fn gitlab(status: u16, pairs: &[(&'static str, &str)], body: &str) -> ForgeError {
        classify(
            &ForgeKind::GitLab,
            status,
            &headers(pairs),
            body,
            "GET /x",
            "sekrit",
            at(1_000),
        )
    }

    fn limited(secs: u64) -> ForgeError {
        ForgeError::RateLimited {
            retry_after: Duration::from_secs(secs),
        }
    }

    #[test]
    fn github_rate_limits_follow_the_documented_order() {
        let both = [
            ("retry-after", "7"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1100"),
        ];
        assert_eq!(github(403, &both, "{}"), limited(7));
        let reset = [
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1100"),
        ];
        assert_eq!(github(403, &reset, "{}"), limited(100));
        assert_eq!(github(429, &[], "{}"), limited(60));
        let secondary = r#"{"message":"You have exceeded a secondary rate limit."}"#;
        assert_eq!(github(403, &[], secondary), limited(60));
        // A reset in the past still waits a second.
        let past = [("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "10")];
        assert_eq!(github(403, &past, "{}"), limited(1));
    }

    #[test]
    fn a_bare_github_403_is_a_permission_problem() {
        let body = r#"{"message":"Resource not accessible by integration"}"#;
        assert_eq!(
            github(403, &[("x-ratelimit-remaining", "4999")], body),
            ForgeError::Forbidden {
                message: "Resource not accessible by integration".into()
            }
        );
    }

    #[test]
    fn gitlab_rate_limits() {
        assert_eq!(
            gitlab(429, &[("retry-after", "12")], "Retry later"),
            limited(12)
        );
        assert_eq!(gitlab(429, &[("ratelimit-reset", "1030")], ""), limited(30));
        assert_eq!(gitlab(429, &[], "Retry later"), limited(60));
        // GitLab's 403 is never a rate limit.
        assert!(matches!(
            gitlab(403, &[], "{}"),
            ForgeError::Forbidden { .. }
        ));
    }

    #[test]
    fn statuses_map_to_errors() {
        assert_eq!(github(401, &[], "{}"), ForgeError::Unauthorized);
        assert_eq!(
            github(404, &[], "{}"),
            ForgeError::NotFound {
                what: "GET /x".into()
            }
        );
        assert!(matches!(
            github(502, &[], "<html>"),
            ForgeError::Server { status: 502, .. }
        ));
        assert!(matches!(
            gitlab(409, &[], "{}"),
            ForgeError::Validation { .. }
        ));
    }

    #[test]
    fn messages_come_from_either_forges_json() {
        let github = r#"{"message":"Validation Failed","errors":[{"resource":"PullRequest","code":"custom","message":"A pull request already exists for acme:b."}]}"#;
        assert_eq!(
            error_message(github),
            "Validation Failed; A pull request already exists for acme:b."
        );
        let gitlab = r#"{"message":["Another open merge request already exists for this source branch: !3"]}"#;
        assert_eq!(
            error_message(gitlab),
            "Another open merge request already exists for this source branch: !3"
        );
        let fields = r#"{"message":{"title":["is too long"]}}"#;
        assert_eq!(error_message(fields), "title is too long");
        assert_eq!(
            error_message(r#"{"error":"title is missing"}"#),
            "title is missing"
        );
        assert_eq!(error_message("Retry later\n"), "Retry later");
    }

    #[test]
    fn messages_are_cut_and_scrubbed() {
        let long = format!(r#"{{"message":"{}"}}"#, "é".repeat(1000));
        assert_eq!(error_message(&long).chars().count(), MESSAGE_CHARS + 1);
        let echoed = r#"{"message":"token sekrit is bad"}"#;
        let error = github(400, &[], echoed);
        assert!(!error.to_string().contains("sekrit"), "{error}");
    }

    #[test]
    fn endpoints_encode_each_segment() {
        let base = api_base("https://gitlab.example.com/api/v4/").unwrap();
        let query = [("source_branch", "goodput/ns/a b")];
        let url = endpoint(
            &base,
            &["projects", "group/sub/name", "merge_requests"],
            &query,
        );
        assert_eq!(
            url.as_str(),
            "https://gitlab.example.com/api/v4/projects/group%2Fsub%2Fname/merge_requests\
             ?source_branch=goodput%2Fns%2Fa+b"
        );
        let root = api_base("https://api.github.com").unwrap();
        assert_eq!(
            endpoint(&root, &["repos", "o", "r"], &[]).as_str(),
            "https://api.github.com/repos/o/r"
        );
    }

    #[test]
    fn api_urls_must_be_plain_http() {
        assert!(api_base("file:///tmp/x").is_err());
        assert!(api_base("https://user:pw@example.com/api/v4").is_err());
        assert!(api_base("not a url").is_err());
    }
}
