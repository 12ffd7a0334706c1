//! An in-memory GitHub or GitLab REST API on 127.0.0.1 for tests: the pull-request /
//! merge-request endpoints goodput's forge client uses, with the forges' status codes and
//! JSON shapes (401, 404, GitHub's 422 and GitLab's 409 for a duplicate, rate limits on
//! demand) and GitHub App installation tokens.
//!
//! It runs on its own thread and runtime, so `start` is a plain function usable from any
//! test, async or not; it stops when the `ForgeStub` is dropped.
//!
//! Stricter than the real forges in one way: GitHub requests must carry `User-Agent` and
//! `X-GitHub-Api-Version: 2022-11-28` (GitHub itself only requires the first).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use goodput::gitops::forge::{ForgeKind, PrState};
use serde_json::{Value, json};

/// The login/username the stub's pull requests are authored by (the token's user).
pub const STUB_AUTHOR: &str = "goodput-bot";
/// GitHub's owner and GitLab users known from the start (`alice`, `bob`, `carol`).
const INITIAL_USERS: [&str; 3] = ["alice", "bob", "carol"];

/// Computes a branch's head commit at request time (e.g. `git rev-parse` in a bare repo).
pub type HeadResolver = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// One pull request as the stub holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StubPr {
    pub number: u64,
    /// `owner/name` or `group/name`, from the request path.
    pub project: String,
    pub head: String,
    pub base: String,
    pub state: PrState,
    pub title: String,
    pub body: String,
    pub labels: Vec<String>,
    /// Users asked to review (GitLab: their usernames).
    pub reviewers: Vec<String>,
    /// GitHub team slugs asked to review.
    pub team_reviewers: Vec<String>,
    pub assignees: Vec<String>,
    pub comments: Vec<String>,
    /// Set by the test; otherwise the head resolver's answer, if any.
    pub head_sha: Option<String>,
    pub author: String,
    created_at: u64,
    closed_at: Option<u64>,
}

/// The form of a rate-limited answer.
#[derive(Clone, Copy, Debug)]
pub enum StubRateLimit {
    /// `retry-after: secs` with this status (GitHub 403 or 429, GitLab 429).
    RetryAfter { status: u16, secs: u64 },
    /// GitHub: `x-ratelimit-remaining: 0` and `x-ratelimit-reset` this far ahead;
    /// GitLab: 429 with `RateLimit-Reset`.
    Reset { status: u16, in_secs: u64 },
    /// No headers at all (GitHub secondary limit text, GitLab "Retry later").
    Bare { status: u16 },
}

struct App {
    app_id: String,
    /// PKCS#1 `RSAPublicKey` DER, to verify the JWT's signature.
    public_key_der: Vec<u8>,
    installation_id: u64,
    token_ttl: Duration,
}

struct StubState {
    kind: ForgeKind,
    token: String,
    base_url: String,
    prs: Vec<StubPr>,
    log: Vec<String>,
    rate_limit: Option<(u32, StubRateLimit)>,
    failures: Option<(u32, u16)>,
    app: Option<App>,
    users: Vec<(u64, String)>,
    resolver: Option<HeadResolver>,
    /// The stub's clock: real time at start, one second more per event, so that
    /// timestamps order events even within one real second.
    clock: u64,
    notes: u64,
}

type Shared = Arc<Mutex<StubState>>;

/// A running stub. `url()` is the API root to hand to the client as `api_url`.
pub struct ForgeStub {
    url: String,
    state: Shared,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ForgeStub {
    /// A stub for `kind` that accepts `token` (GitHub: `Authorization: Bearer`; GitLab:
    /// `PRIVATE-TOKEN` or `Authorization: Bearer`).
    pub fn start(kind: ForgeKind, token: &str) -> ForgeStub {
        Self::launch(kind, token, None)
    }

    /// As `start`, with head commits computed from the branch at request time (unless a
    /// test set one with `set_head_sha`), as a real forge follows the branch.
    pub fn with_head_resolver(
        kind: ForgeKind,
        token: &str,
        resolver: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> ForgeStub {
        Self::launch(kind, token, Some(Arc::new(resolver)))
    }

    fn launch(kind: ForgeKind, token: &str, resolver: Option<HeadResolver>) -> ForgeStub {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the forge stub");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("the stub's address");
        let url = api_root(&kind, addr);
        let state = Arc::new(Mutex::new(StubState {
            kind,
            token: token.to_owned(),
            base_url: format!("http://{addr}"),
            prs: Vec::new(),
            log: Vec::new(),
            rate_limit: None,
            failures: None,
            app: None,
            users: INITIAL_USERS
                .iter()
                .enumerate()
                .map(|(i, name)| (101 + i as u64, name.to_string()))
                .collect(),
            resolver,
            clock: now_epoch(),
            notes: 0,
        }));
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let router = Router::new().fallback(handle).with_state(state.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the stub's runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                let _ = axum::serve(listener, router)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        ForgeStub {
            url,
            state,
            shutdown: Some(shutdown),
        }
    }

    /// The API root: `http://127.0.0.1:PORT` (GitHub) or `…/api/v4` (GitLab).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    fn lock(&self) -> MutexGuard<'_, StubState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A snapshot of every pull request, by number.
    pub fn prs(&self) -> Vec<StubPr> {
        let state = self.lock();
        let mut prs = state.prs.clone();
        for pr in &mut prs {
            pr.head_sha = state.head_sha(pr);
        }
        prs
    }

    pub fn pr(&self, number: u64) -> Option<StubPr> {
        self.prs().into_iter().find(|p| p.number == number)
    }

    /// A human closes the pull request without merging.
    pub fn close_as_human(&self, number: u64) {
        self.lock().finish(number, PrState::Closed);
    }

    /// A human merges the pull request.
    pub fn merge_as_human(&self, number: u64) {
        self.lock().finish(number, PrState::Merged);
    }

    /// The pull request's head commit from now on (overrides the head resolver).
    pub fn set_head_sha(&self, number: u64, sha: &str) {
        let mut state = self.lock();
        let pr = state.pr_mut(number).expect("no such pull request");
        pr.head_sha = Some(sha.to_owned());
    }

    /// The next `n` requests are rate limited with `retry-after: retry_after_s` (GitHub
    /// 403, GitLab 429).
    pub fn rate_limit_next(&self, n: u32, retry_after_s: u64) {
        let status = match self.lock().kind {
            ForgeKind::GitHub => 403,
            ForgeKind::GitLab => 429,
        };
        self.rate_limit_next_with(
            n,
            StubRateLimit::RetryAfter {
                status,
                secs: retry_after_s,
            },
        );
    }

    /// The next `n` requests are rate limited in the given form.
    pub fn rate_limit_next_with(&self, n: u32, form: StubRateLimit) {
        self.lock().rate_limit = Some((n, form));
    }

    /// The next `n` requests fail with `status` and the forge's usual body for it.
    pub fn fail_next(&self, n: u32, status: u16) {
        self.lock().failures = Some((n, status));
    }

    /// Every request so far, as "METHOD path" (the path as sent, query left off).
    pub fn request_log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    pub fn clear_request_log(&self) {
        self.lock().log.clear();
    }

    /// GitHub: accept App JWTs signed by the key whose PKCS#1 public DER is given, and issue
    /// the stub's token (valid for an hour) from `/app/installations/{id}/access_tokens`.
    pub fn enable_github_app(&self, app_id: &str, public_key_der: Vec<u8>, installation_id: u64) {
        self.lock().app = Some(App {
            app_id: app_id.to_owned(),
            public_key_der,
            installation_id,
            token_ttl: Duration::from_secs(3600),
        });
    }

    /// How long installation tokens issued from now on live.
    pub fn set_app_token_ttl(&self, ttl: Duration) {
        if let Some(app) = self.lock().app.as_mut() {
            app.token_ttl = ttl;
        }
    }

    /// GitLab: a user `/users?username=` knows; returns its id.
    pub fn add_user(&self, username: &str) -> u64 {
        let mut state = self.lock();
        let id = 101 + state.users.len() as u64;
        state.users.push((id, username.to_owned()));
        id
    }
}

impl Drop for ForgeStub {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

fn api_root(kind: &ForgeKind, addr: SocketAddr) -> String {
    match kind {
        ForgeKind::GitHub => format!("http://{addr}"),
        ForgeKind::GitLab => format!("http://{addr}/api/v4"),
    }
}

fn now_epoch() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl StubState {
    fn tick(&mut self) -> u64 {
        self.clock = self.clock.max(now_epoch()) + 1;
        self.clock
    }

    fn pr_mut(&mut self, number: u64) -> Option<&mut StubPr> {
        self.prs.iter_mut().find(|p| p.number == number)
    }

    fn finish(&mut self, number: u64, state: PrState) {
        let at = self.tick();
        let pr = self.pr_mut(number).expect("no such pull request");
        pr.state = state;
        pr.closed_at = Some(at);
    }

    fn head_sha(&self, pr: &StubPr) -> Option<String> {
        pr.head_sha
            .clone()
            .or_else(|| self.resolver.as_ref().and_then(|resolve| resolve(&pr.head)))
    }

    fn open_duplicate(&self, project: &str, head: &str, base: &str) -> Option<u64> {
        self.prs
            .iter()
            .find(|p| {
                p.project == project && p.head == head && p.base == base && p.state == PrState::Open
            })
            .map(|p| p.number)
    }

    fn create(&mut self, project: &str, head: &str, base: &str, title: &str, body: &str) -> u64 {
        let number = self.prs.len() as u64 + 1;
        let created_at = self.tick();
        self.prs.push(StubPr {
            number,
            project: project.to_owned(),
            head: head.to_owned(),
            base: base.to_owned(),
            state: PrState::Open,
            title: title.to_owned(),
            body: body.to_owned(),
            labels: Vec::new(),
            reviewers: Vec::new(),
            team_reviewers: Vec::new(),
            assignees: Vec::new(),
            comments: Vec::new(),
            head_sha: None,
            author: STUB_AUTHOR.to_owned(),
            created_at,
            closed_at: None,
        });
        number
    }

    /// A pending rate limit or failure, consumed by this request.
    fn injected(&mut self) -> Option<Response> {
        if let Some((left, form)) = self.rate_limit.take() {
            if left > 1 {
                self.rate_limit = Some((left - 1, form));
            }
            if left > 0 {
                return Some(rate_limited(&self.kind, form));
            }
        }
        if let Some((left, status)) = self.failures.take() {
            if left > 1 {
                self.failures = Some((left - 1, status));
            }
            if left > 0 {
                return Some(failure(&self.kind, status));
            }
        }
        None
    }
}

/// Every request: log, injected limits and failures, then the forge's routes.
async fn handle(
    State(state): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    state.log.push(format!("{method} {}", uri.path()));
    if let Some(response) = state.injected() {
        return response;
    }
    let segments: Vec<String> = uri
        .path()
        .trim_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let query = parse_query(uri.query().unwrap_or(""));
    let body = if body.is_empty() {
        Ok(Value::Null)
    } else {
        serde_json::from_slice::<Value>(&body)
    };
    let Ok(body) = body else {
        return reply(400, json!({ "message": "Problems parsing JSON" }));
    };
    let request = Request {
        method,
        segments: &segments,
        query: &query,
        headers: &headers,
        body: &body,
    };
    match state.kind {
        ForgeKind::GitHub => github::route(&mut state, &request),
        ForgeKind::GitLab => gitlab::route(&mut state, &request),
    }
}

struct Request<'a> {
    method: Method,
    segments: &'a [&'a str],
    query: &'a [(String, String)],
    headers: &'a HeaderMap,
    body: &'a Value,
}

impl Request<'_> {
    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn bearer(&self) -> Option<&str> {
        let value = self.header("authorization")?;
        value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("token "))
    }

    fn text(&self, field: &str) -> Option<&str> {
        self.body.get(field).and_then(Value::as_str)
    }

    fn strings(&self, field: &str) -> Vec<String> {
        match self.body.get(field) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    }
}

fn reply(status: u16, body: Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(body)).into_response()
}

fn with_headers(status: u16, body: Value, headers: &[(&'static str, String)]) -> Response {
    let mut response = reply(status, body);
    for (name, value) in headers {
        if let Ok(value) = value.parse() {
            response.headers_mut().insert(*name, value);
        }
    }
    response
}

fn rate_limited(kind: &ForgeKind, form: StubRateLimit) -> Response {
    let reset = |in_secs: u64| (now_epoch() + in_secs).to_string();
    match (kind, form) {
        (ForgeKind::GitHub, StubRateLimit::RetryAfter { status, secs }) => with_headers(
            status,
            json!({ "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again." }),
            &[("retry-after", secs.to_string())],
        ),
        (ForgeKind::GitHub, StubRateLimit::Reset { status, in_secs }) => with_headers(
            status,
            json!({ "message": "API rate limit exceeded for user ID 1.", "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api" }),
            &[
                ("x-ratelimit-limit", "5000".into()),
                ("x-ratelimit-remaining", "0".into()),
                ("x-ratelimit-used", "5000".into()),
                ("x-ratelimit-reset", reset(in_secs)),
                ("x-ratelimit-resource", "core".into()),
            ],
        ),
        (ForgeKind::GitHub, StubRateLimit::Bare { status }) => reply(
            status,
            json!({ "message": "You have exceeded a secondary rate limit." }),
        ),
        (ForgeKind::GitLab, StubRateLimit::RetryAfter { status, secs }) => {
            let mut response = (
                StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
                "Retry later\n",
            )
                .into_response();
            if let Ok(value) = secs.to_string().parse() {
                response.headers_mut().insert("retry-after", value);
            }
            response
        }
        (ForgeKind::GitLab, StubRateLimit::Reset { status, in_secs }) => {
            let mut response = (
                StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
                "Retry later\n",
            )
                .into_response();
            for (name, value) in [
                ("ratelimit-limit", "600".to_owned()),
                ("ratelimit-remaining", "0".to_owned()),
                ("ratelimit-reset", reset(in_secs)),
            ] {
                if let Ok(value) = value.parse() {
                    response.headers_mut().insert(name, value);
                }
            }
            response
        }
        (ForgeKind::GitLab, StubRateLimit::Bare { status }) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
            "Retry later\n",
        )
            .into_response(),
    }
}

fn failure(kind: &ForgeKind, status: u16) -> Response {
    let message = match (kind, status) {
        (ForgeKind::GitHub, 403) => "Resource not accessible by integration".to_owned(),
        (ForgeKind::GitHub, _) => "Server Error".to_owned(),
        (ForgeKind::GitLab, 403) => "403 Forbidden".to_owned(),
        (ForgeKind::GitLab, status) => format!("{status} Internal Server Error"),
    };
    reply(status, json!({ "message": message }))
}

/// `%XX` decoded (bytes that do not form UTF-8 are replaced).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| percent_decode(&s.replace('+', " "));
            (decode(key), decode(value))
        })
        .collect()
}

/// RFC 3339 UTC for epoch seconds (Howard Hinnant's civil-from-days).
fn iso(epoch: u64, millis: bool) -> String {
    let days = (epoch / 86_400) as i64;
    let secs = epoch % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let fraction = if millis { ".000" } else { "" };
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}{fraction}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

mod github {
    use super::*;

    pub(super) fn route(state: &mut StubState, request: &Request<'_>) -> Response {
        if let Some(refused) = check_headers(request) {
            return refused;
        }
        let s = request.segments;
        let method = &request.method;
        match s {
            ["repos", owner, repo, "installation"] if method == Method::GET => {
                as_app(state, request, |app| {
                    reply(
                        200,
                        json!({ "id": app.installation_id, "account": { "login": owner }, "repository_selection": "selected", "app_slug": "goodput", "target_type": "Organization", "repo": repo }),
                    )
                })
            }
            ["app", "installations", id, "access_tokens"] if method == Method::POST => {
                let token = state.token.clone();
                as_app(state, request, |app| {
                    if id.parse::<u64>().ok() != Some(app.installation_id) {
                        return not_found();
                    }
                    let expires = now_epoch() + app.token_ttl.as_secs();
                    reply(
                        201,
                        json!({ "token": token, "expires_at": iso(expires, false), "permissions": { "pull_requests": "write", "contents": "write" } }),
                    )
                })
            }
            _ if request.bearer() != Some(state.token.as_str()) => unauthorized(),
            ["repos", owner, repo, rest @ ..] => {
                let project = format!("{owner}/{repo}");
                repo_route(state, request, &project, rest)
            }
            _ => not_found(),
        }
    }

    fn check_headers(request: &Request<'_>) -> Option<Response> {
        if request.header("user-agent").is_none_or(str::is_empty) {
            return Some(reply(
                403,
                json!({ "message": "Request forbidden by administrative rules. Please make sure your request has a User-Agent header (https://docs.github.com/en/rest/overview/resources-in-the-rest-api#user-agent-required)." }),
            ));
        }
        match request.header("x-github-api-version") {
            Some("2022-11-28") => None,
            other => Some(reply(
                400,
                json!({ "message": format!("API version {} is not supported.", other.unwrap_or("(none)")) }),
            )),
        }
    }

    fn unauthorized() -> Response {
        reply(
            401,
            json!({ "message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401" }),
        )
    }

    fn not_found() -> Response {
        reply(
            404,
            json!({ "message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404" }),
        )
    }

    fn unprocessable(message: &str) -> Response {
        reply(
            422,
            json!({ "message": "Validation Failed", "errors": [{ "resource": "PullRequest", "code": "custom", "message": message }], "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request", "status": "422" }),
        )
    }

    /// The App endpoints take the App's JWT only.
    fn as_app(
        state: &StubState,
        request: &Request<'_>,
        answer: impl FnOnce(&App) -> Response,
    ) -> Response {
        let Some(app) = state.app.as_ref() else {
            return not_found();
        };
        match request.bearer().map(|jwt| verify_jwt(app, jwt)) {
            Some(Ok(())) => answer(app),
            Some(Err(why)) => reply(
                401,
                json!({ "message": why, "documentation_url": "https://docs.github.com/rest" }),
            ),
            None => reply(
                401,
                json!({ "message": "A JSON web token could not be decoded" }),
            ),
        }
    }

    /// Three base64url parts, header `alg: RS256`, `iss` = the App id, `iat` ≤ now < `exp`
    /// ≤ now + 10 min, and a valid RS256 signature.
    fn verify_jwt(app: &App, jwt: &str) -> Result<(), String> {
        let bad = || "A JSON web token could not be decoded".to_owned();
        let parts: Vec<&str> = jwt.split('.').collect();
        let [header, claims, signature] = parts[..] else {
            return Err(bad());
        };
        let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|_| bad());
        let header: Value = serde_json::from_slice(&decode(header)?).map_err(|_| bad())?;
        let claims: Value = serde_json::from_slice(&decode(claims)?).map_err(|_| bad())?;
        if header["alg"] != "RS256" {
            return Err(bad());
        }
        let iss_matches = match &claims["iss"] {
            Value::String(s) => *s == app.app_id,
            Value::Number(n) => n.to_string() == app.app_id,
            _ => false,
        };
        if !iss_matches {
            return Err("'Issuer' claim ('iss') must be an Integer".into());
        }
        let now = now_epoch();
        let (iat, exp) = (claims["iat"].as_u64(), claims["exp"].as_u64());
        match (iat, exp) {
            (Some(iat), Some(exp)) if iat <= now && now < exp && exp <= now + 600 => {}
            _ => return Err("'Expiration time' claim ('exp') is too far in the future".into()),
        }
        let signed = jwt.rsplit_once('.').map(|(input, _)| input).unwrap_or("");
        let key = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            &app.public_key_der,
        );
        key.verify(signed.as_bytes(), &decode(signature)?)
            .map_err(|_| "A JSON web token could not be decoded (signature)".to_owned())
    }

    fn repo_route(
        state: &mut StubState,
        request: &Request<'_>,
        project: &str,
        rest: &[&str],
    ) -> Response {
        let method = &request.method;
        match rest {
            ["pulls"] if method == Method::GET => list(state, request, project),
            ["pulls"] if method == Method::POST => create(state, request, project),
            ["pulls", n] => match n.parse::<u64>() {
                Ok(n) if method == Method::GET => show(state, n),
                Ok(n) if method == Method::PATCH => patch(state, request, n),
                _ => not_found(),
            },
            ["pulls", n, "requested_reviewers"] if method == Method::POST => {
                with_pr(state, n, |state, n| request_reviewers(state, request, n))
            }
            ["issues", n, "comments"] if method == Method::POST => with_pr(state, n, |state, n| {
                let Some(body) = request.text("body").filter(|b| !b.is_empty()) else {
                    return reply(
                        422,
                        json!({ "message": "Validation Failed", "errors": [{ "resource": "IssueComment", "code": "missing_field", "field": "body" }] }),
                    );
                };
                state.notes += 1;
                let id = state.notes;
                let base_url = state.base_url.clone();
                if let Some(pr) = state.pr_mut(n) {
                    pr.comments.push(body.to_owned());
                }
                reply(
                    201,
                    json!({ "id": id, "body": body, "html_url": format!("{base_url}/{project}/pull/{n}#issuecomment-{id}") }),
                )
            }),
            ["issues", n, "labels"] if method == Method::POST => with_pr(state, n, |state, n| {
                let labels = request.strings("labels");
                let pr = state.pr_mut(n).expect("checked by with_pr");
                for label in labels {
                    if !pr.labels.contains(&label) {
                        pr.labels.push(label);
                    }
                }
                let names: Vec<Value> = pr.labels.iter().map(|l| json!({ "name": l })).collect();
                reply(200, Value::Array(names))
            }),
            ["issues", n, "assignees"] if method == Method::POST => {
                with_pr(state, n, |state, n| {
                    let assignees = request.strings("assignees");
                    let pr = state.pr_mut(n).expect("checked by with_pr");
                    for assignee in assignees {
                        if !pr.assignees.contains(&assignee) {
                            pr.assignees.push(assignee);
                        }
                    }
                    let pr = pr.clone();
                    reply(201, render(state, &pr))
                })
            }
            _ => not_found(),
        }
    }

    fn with_pr(
        state: &mut StubState,
        n: &str,
        then: impl FnOnce(&mut StubState, u64) -> Response,
    ) -> Response {
        match n.parse::<u64>() {
            Ok(n) if state.pr_mut(n).is_some() => then(state, n),
            _ => not_found(),
        }
    }

    fn list(state: &StubState, request: &Request<'_>, project: &str) -> Response {
        let owner = project.split('/').next().unwrap_or("");
        let wanted_state = request.param("state").unwrap_or("open");
        // GitHub's head filter is `owner:branch`; anything else matches nothing here.
        let head = request
            .param("head")
            .map(|h| h.strip_prefix(&format!("{owner}:")).map(str::to_owned));
        let base = request.param("base");
        let mut prs: Vec<&StubPr> = state
            .prs
            .iter()
            .filter(|p| p.project == project)
            .filter(|p| match wanted_state {
                "all" => true,
                "closed" => p.state != PrState::Open,
                _ => p.state == PrState::Open,
            })
            .filter(|p| match &head {
                None => true,
                Some(Some(branch)) => p.head == *branch,
                Some(None) => false,
            })
            .filter(|p| base.is_none_or(|b| p.base == b))
            .collect();
        let ascending = request.param("direction") == Some("asc");
        prs.sort_by_key(|p| p.created_at);
        if !ascending {
            prs.reverse();
        }
        let per_page = request
            .param("per_page")
            .and_then(|n| n.parse().ok())
            .unwrap_or(30);
        let items: Vec<Value> = prs
            .into_iter()
            .take(per_page)
            .map(|p| render(state, p))
            .collect();
        reply(200, Value::Array(items))
    }

    fn create(state: &mut StubState, request: &Request<'_>, project: &str) -> Response {
        let owner = project.split('/').next().unwrap_or("");
        let (Some(title), Some(head), Some(base)) = (
            request.text("title"),
            request.text("head"),
            request.text("base"),
        ) else {
            return reply(
                422,
                json!({ "message": "Invalid request.\n\n\"title\", \"head\" and \"base\" are required." }),
            );
        };
        let head = head.strip_prefix(&format!("{owner}:")).unwrap_or(head);
        if head == base {
            return unprocessable(&format!("No commits between {base} and {head}"));
        }
        if state.open_duplicate(project, head, base).is_some() {
            return unprocessable(&format!(
                "A pull request already exists for {owner}:{head}."
            ));
        }
        let body = request.text("body").unwrap_or("");
        let number = state.create(project, head, base, title, body);
        let pr = state.prs[number as usize - 1].clone();
        reply(201, render(state, &pr))
    }

    fn show(state: &StubState, n: u64) -> Response {
        match state.prs.iter().find(|p| p.number == n) {
            Some(pr) => reply(200, render(state, pr)),
            None => not_found(),
        }
    }

    fn patch(state: &mut StubState, request: &Request<'_>, n: u64) -> Response {
        let at = state.tick();
        let Some(pr) = state.pr_mut(n) else {
            return not_found();
        };
        if let Some(title) = request.text("title") {
            pr.title = title.to_owned();
        }
        if let Some(body) = request.text("body") {
            pr.body = body.to_owned();
        }
        match (request.text("state"), &pr.state) {
            (Some("closed"), PrState::Open) => {
                pr.state = PrState::Closed;
                pr.closed_at = Some(at);
            }
            (Some("open"), PrState::Closed) => {
                pr.state = PrState::Open;
                pr.closed_at = None;
            }
            (Some("open"), PrState::Merged) => {
                return unprocessable("Cannot reopen a merged pull request");
            }
            _ => {}
        }
        let pr = pr.clone();
        reply(200, render(state, &pr))
    }

    fn request_reviewers(state: &mut StubState, request: &Request<'_>, n: u64) -> Response {
        let users = request.strings("reviewers");
        let teams = request.strings("team_reviewers");
        let pr = state.pr_mut(n).expect("checked by with_pr");
        // GitHub refuses the whole request when the author is among the reviewers.
        if users.contains(&pr.author) {
            return reply(
                422,
                json!({ "message": "Review cannot be requested from pull request author.", "documentation_url": "https://docs.github.com/rest/pulls/review-requests#request-reviewers-for-a-pull-request", "status": "422" }),
            );
        }
        pr.reviewers.extend(users);
        pr.team_reviewers.extend(teams);
        let pr = pr.clone();
        reply(201, render(state, &pr))
    }

    fn render(state: &StubState, pr: &StubPr) -> Value {
        let owner = pr.project.split('/').next().unwrap_or("");
        let closed_at = pr.closed_at.map(|t| iso(t, false));
        let merged_at = (pr.state == PrState::Merged)
            .then(|| closed_at.clone())
            .flatten();
        json!({
            "number": pr.number,
            "html_url": format!("{}/{}/pull/{}", state.base_url, pr.project, pr.number),
            "state": if pr.state == PrState::Open { "open" } else { "closed" },
            "draft": false,
            "title": pr.title,
            "body": if pr.body.is_empty() { Value::Null } else { Value::from(pr.body.clone()) },
            "user": { "login": pr.author },
            "head": { "ref": pr.head, "sha": state.head_sha(pr), "label": format!("{owner}:{}", pr.head) },
            "base": { "ref": pr.base, "label": format!("{owner}:{}", pr.base) },
            "labels": pr.labels.iter().map(|l| json!({ "name": l })).collect::<Vec<_>>(),
            "assignees": pr.assignees.iter().map(|l| json!({ "login": l })).collect::<Vec<_>>(),
            "requested_reviewers": pr.reviewers.iter().map(|l| json!({ "login": l })).collect::<Vec<_>>(),
            "requested_teams": pr.team_reviewers.iter().map(|t| json!({ "slug": t })).collect::<Vec<_>>(),
            "created_at": iso(pr.created_at, false),
            "closed_at": closed_at,
            "merged_at": merged_at,
            "merged": pr.state == PrState::Merged,
        })
    }
}

mod gitlab {
    use super::*;

    pub(super) fn route(state: &mut StubState, request: &Request<'_>) -> Response {
        let token = request.header("private-token").or_else(|| request.bearer());
        if token != Some(state.token.as_str()) {
            return reply(401, json!({ "message": "401 Unauthorized" }));
        }
        let method = &request.method;
        match request.segments {
            ["api", "v4", "users"] if method == Method::GET => users(state, request),
            [
                "api",
                "v4",
                "projects",
                project,
                "merge_requests",
                rest @ ..,
            ] => {
                let project = project.to_string();
                mr_route(state, request, &project, rest)
            }
            _ => not_found(),
        }
    }

    fn not_found() -> Response {
        reply(404, json!({ "message": "404 Not found" }))
    }

    fn users(state: &StubState, request: &Request<'_>) -> Response {
        let wanted = request.param("username").unwrap_or("");
        let found: Vec<Value> = state
            .users
            .iter()
            .filter(|(_, name)| name == wanted)
            .map(|(id, name)| json!({ "id": id, "username": name, "state": "active" }))
            .collect();
        reply(200, Value::Array(found))
    }

    fn mr_route(
        state: &mut StubState,
        request: &Request<'_>,
        project: &str,
        rest: &[&str],
    ) -> Response {
        let method = &request.method;
        let iid = |n: &str| {
            n.parse::<u64>().ok().filter(|n| {
                state
                    .prs
                    .iter()
                    .any(|p| p.number == *n && p.project == project)
            })
        };
        match rest {
            [] if method == Method::GET => list(state, request, project),
            [] if method == Method::POST => create(state, request, project),
            [n] => match iid(n) {
                Some(n) if method == Method::GET => {
                    let pr = state.prs[n as usize - 1].clone();
                    reply(200, render(state, &pr))
                }
                Some(n) if method == Method::PUT => put(state, request, n),
                _ => not_found(),
            },
            [n, "notes"] if method == Method::POST => match iid(n) {
                Some(n) => {
                    let Some(body) = request.text("body").filter(|b| !b.is_empty()) else {
                        return reply(400, json!({ "error": "body is missing" }));
                    };
                    state.notes += 1;
                    let id = state.notes;
                    state.prs[n as usize - 1].comments.push(body.to_owned());
                    reply(
                        201,
                        json!({ "id": id, "body": body, "author": { "username": STUB_AUTHOR }, "noteable_iid": n }),
                    )
                }
                None => not_found(),
            },
            _ => not_found(),
        }
    }

    fn gitlab_state(state: &PrState) -> &'static str {
        match state {
            PrState::Open => "opened",
            PrState::Closed => "closed",
            PrState::Merged => "merged",
        }
    }

    fn list(state: &StubState, request: &Request<'_>, project: &str) -> Response {
        let wanted_state = request.param("state").unwrap_or("all");
        let source = request.param("source_branch");
        let target = request.param("target_branch");
        let mut prs: Vec<&StubPr> = state
            .prs
            .iter()
            .filter(|p| p.project == project)
            .filter(|p| wanted_state == "all" || gitlab_state(&p.state) == wanted_state)
            .filter(|p| source.is_none_or(|s| p.head == s))
            .filter(|p| target.is_none_or(|t| p.base == t))
            .collect();
        prs.sort_by_key(|p| p.created_at);
        if request.param("sort") != Some("asc") {
            prs.reverse();
        }
        let per_page = request
            .param("per_page")
            .and_then(|n| n.parse().ok())
            .unwrap_or(20);
        let items: Vec<Value> = prs
            .into_iter()
            .take(per_page)
            .map(|p| render(state, p))
            .collect();
        reply(200, Value::Array(items))
    }

    fn user_names(state: &StubState, ids: Option<&Value>) -> Vec<String> {
        let ids: Vec<u64> = match ids {
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_u64).collect(),
            _ => Vec::new(),
        };
        ids.iter()
            .filter_map(|id| {
                state
                    .users
                    .iter()
                    .find(|(uid, _)| uid == id)
                    .map(|(_, n)| n.clone())
            })
            .collect()
    }

    fn create(state: &mut StubState, request: &Request<'_>, project: &str) -> Response {
        let (Some(head), Some(base), Some(title)) = (
            request.text("source_branch"),
            request.text("target_branch"),
            request.text("title"),
        ) else {
            return reply(
                400,
                json!({ "error": "source_branch, target_branch, title are missing, at least one parameter must be provided" }),
            );
        };
        if head == base {
            return reply(
                422,
                json!({ "message": ["You can't use same project/branch for source and target"] }),
            );
        }
        if let Some(existing) = state.open_duplicate(project, head, base) {
            return reply(
                409,
                json!({ "message": [format!("Another open merge request already exists for this source branch: !{existing}")] }),
            );
        }
        let labels: Vec<String> = match request.body.get("labels") {
            Some(Value::String(s)) => s
                .split(',')
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect(),
            _ => request.strings("labels"),
        };
        let assignees = user_names(state, request.body.get("assignee_ids"));
        let reviewers = user_names(state, request.body.get("reviewer_ids"));
        let description = request.text("description").unwrap_or("");
        let number = state.create(project, head, base, title, description);
        let pr = &mut state.prs[number as usize - 1];
        pr.labels = labels;
        pr.assignees = assignees;
        pr.reviewers = reviewers;
        let pr = pr.clone();
        reply(201, render(state, &pr))
    }

    fn put(state: &mut StubState, request: &Request<'_>, n: u64) -> Response {
        let at = state.tick();
        let pr = &mut state.prs[n as usize - 1];
        if let Some(title) = request.text("title") {
            pr.title = title.to_owned();
        }
        if let Some(description) = request.text("description") {
            pr.body = description.to_owned();
        }
        match (request.text("state_event"), &pr.state) {
            (Some("close"), PrState::Open) => {
                pr.state = PrState::Closed;
                pr.closed_at = Some(at);
            }
            (Some("reopen"), PrState::Closed) => {
                pr.state = PrState::Open;
                pr.closed_at = None;
            }
            _ => {}
        }
        let pr = pr.clone();
        reply(200, render(state, &pr))
    }

    fn render(state: &StubState, pr: &StubPr) -> Value {
        let user = |name: &String| {
            let id = state
                .users
                .iter()
                .find(|(_, n)| n == name)
                .map(|(id, _)| *id);
            json!({ "id": id, "username": name })
        };
        let closed_at = (pr.state == PrState::Closed)
            .then(|| pr.closed_at.map(|t| iso(t, true)))
            .flatten();
        let merged_at = (pr.state == PrState::Merged)
            .then(|| pr.closed_at.map(|t| iso(t, true)))
            .flatten();
        json!({
            "id": 1000 + pr.number,
            "iid": pr.number,
            "project_id": 1,
            "state": gitlab_state(&pr.state),
            "title": pr.title,
            "description": pr.body,
            "source_branch": pr.head,
            "target_branch": pr.base,
            "sha": state.head_sha(pr),
            "web_url": format!("{}/{}/-/merge_requests/{}", state.base_url, pr.project, pr.number),
            "labels": pr.labels,
            "author": { "username": pr.author },
            "assignees": pr.assignees.iter().map(user).collect::<Vec<_>>(),
            "reviewers": pr.reviewers.iter().map(user).collect::<Vec<_>>(),
            "draft": false,
            "created_at": iso(pr.created_at, true),
            "closed_at": closed_at,
            "merged_at": merged_at,
        })
    }
}
