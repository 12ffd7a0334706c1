//! The OpenAI-compatible HTTP API of one simulated replica (axum), shaped like vLLM's.
//!
//! Routes: `POST /v1/completions`, `POST /v1/chat/completions`, `GET /v1/models`,
//! `GET /health`, `POST /tokenize`, `GET /metrics`, and, for the benchmark,
//! `GET /debug/lateness` and `POST /debug/lateness/reset`.
//!
//! Request handling:
//! - The prompt is a string (tokenized by [`super::tokenizer`]), an array of token ids
//!   (taken as is), or a one-element array of either. Chat messages go through the chat
//!   template of [`super::tokenizer`]. With prefix caching on, the ids are hashed into
//!   blocks ([`block_hashes`]) so identical prefixes hit the engine's prefix cache.
//! - Output length: with `ignore_eos`, exactly `max_tokens` (`max_completion_tokens` wins
//!   for chat); without it, a deterministic draw, uniform in
//!   `[max(min_tokens, 1), max_tokens]`, from the request's `seed` if it has one, else from
//!   the replica's seed and the request's sequence number. Without `max_tokens` the cap is
//!   the context left (`max_model_len` − prompt) and the draw's upper end is
//!   `min(256, cap)`. `finish_reason` is `length` when the cap is reached, else `stop`.
//! - Only `n = 1` is served. Validation errors are HTTP 400 (413 for a body over
//!   `max_body_bytes`, 404 for an unknown model or route) with vLLM's error body
//!   `{"error":{"message","type","param","code"}}`.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use super::replica::{Replica, mix, unit};
use super::sse::{FrameSpec, Kind, SseStream, response_text, wait_finished};
use super::tokenizer::{chat_tokens, count_tokens, tokenize};
use super::{MetricsFlavor, ReplicaConfig};
use goodput_model::engine::{NewRequest, block_hashes};

// Salts of the per-request draws, so each kind of draw is independent of the others.
const SALT_LENGTH: u64 = 1;
const SALT_ERROR: u64 = 2;
const SALT_JITTER: u64 = 3;
const SALT_CUT: u64 = 4;

/// Upper end of the sampled output length when a request sets neither `max_tokens` nor
/// `ignore_eos`.
pub const DEFAULT_SAMPLED_MAX_TOKENS: u32 = 256;

// ---------------------------------------------------------------------------------------
// Errors

/// An error answered with vLLM's JSON error body.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    param: Option<String>,
}

impl ApiError {
    /// An error with `status` and a message; the body's `type` follows the status.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            param: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    fn param(mut self, p: &str) -> Self {
        self.param = Some(p.to_string());
        self
    }

    fn unavailable() -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "the engine is not running")
    }

    fn from_body_rejection(rej: BytesRejection, limit: usize) -> Self {
        let status = rej.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            return Self::new(
                status,
                format!("request body is larger than the limit of {limit} bytes"),
            );
        }
        Self::new(
            if status.is_client_error() {
                status
            } else {
                StatusCode::BAD_REQUEST
            },
            rej.body_text(),
        )
    }
}

fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        404 => "NotFoundError",
        429 => "RateLimitError",
        503 => "ServiceUnavailableError",
        500..=599 => "InternalServerError",
        _ => "BadRequestError",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "error": {
                "message": self.message,
                "type": error_type(self.status),
                "param": self.param,
                "code": self.status.as_u16(),
            }
        });
        (self.status, axum::Json(body)).into_response()
    }
}

// ---------------------------------------------------------------------------------------
// Requests

/// A prompt as OpenAI's completions API accepts it.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
    Texts(Vec<String>),
    TokenLists(Vec<Vec<u32>>),
}

#[derive(Debug, Deserialize)]
struct ContentPart {
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
struct Message {
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
    continuous_usage_stats: Option<bool>,
}

/// The fields of `/v1/completions`, `/v1/chat/completions` and `/tokenize` that the
/// simulator reads; everything else is accepted and ignored, as vLLM ignores unknown
/// fields.
#[derive(Debug, Deserialize)]
struct GenerateRequest {
    model: Option<String>,
    prompt: Option<Prompt>,
    messages: Option<Vec<Message>>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    min_tokens: Option<i64>,
    ignore_eos: Option<bool>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    n: Option<i64>,
    seed: Option<i64>,
}

fn parse_request(body: &[u8]) -> Result<GenerateRequest, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    match serde_path_to_error::deserialize::<_, GenerateRequest>(&mut de) {
        Ok(r) => {
            de.end()
                .map_err(|e| ApiError::bad_request(format!("JSON decode error: {e}")))?;
            Ok(r)
        }
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if inner.is_syntax() || inner.is_eof() {
                return Err(ApiError::bad_request(format!("JSON decode error: {inner}")));
            }
            let top = path.split(['.', '[']).next().unwrap_or("").to_string();
            let message = match top.as_str() {
                "prompt" => "prompt must be a string, an array of token ids, or a one-element array of either".to_string(),
                "." | "" => format!("the request body must be a JSON object: {inner}"),
                _ => format!("{path}: {inner}"),
            };
            let err = ApiError::bad_request(message);
            Err(if top.is_empty() { err } else { err.param(&top) })
        }
    }
}

fn text_of(content: &Option<Content>) -> String {
    match content {
        None => String::new(),
        Some(Content::Text(s)) => s.clone(),
        Some(Content::Parts(parts)) => parts
            .iter()
            .filter_map(|p| p.text.as_deref())
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// The prompt's token ids (`ids` empty when only the count was needed) and length.
struct PromptTokens {
    ids: Vec<u32>,
    len: usize,
}

fn prompt_tokens(
    req: &GenerateRequest,
    kind: Kind,
    need_ids: bool,
) -> Result<PromptTokens, ApiError> {
    match kind {
        Kind::Chat => {
            let messages = req.messages.as_ref().ok_or_else(|| {
                ApiError::bad_request("missing field `messages`").param("messages")
            })?;
            let texts: Vec<(&str, String)> = messages
                .iter()
                .map(|m| (m.role.as_str(), text_of(&m.content)))
                .collect();
            let ids = chat_tokens(texts.iter().map(|(r, c)| (*r, c.as_str())));
            Ok(PromptTokens {
                len: ids.len(),
                ids,
            })
        }
        Kind::Completion => {
            let prompt = req
                .prompt
                .as_ref()
                .ok_or_else(|| ApiError::bad_request("missing field `prompt`").param("prompt"))?;
            let one = |n: usize| {
                if n == 1 {
                    Ok(())
                } else {
                    Err(ApiError::bad_request(format!(
                        "the simulator serves one prompt per request, got {n}"
                    ))
                    .param("prompt"))
                }
            };
            let (ids, len) = match prompt {
                Prompt::Text(s) if need_ids => {
                    let ids = tokenize(s);
                    let n = ids.len();
                    (ids, n)
                }
                Prompt::Text(s) => (Vec::new(), count_tokens(s)),
                Prompt::Tokens(t) => (t.clone(), t.len()),
                Prompt::Texts(v) => {
                    one(v.len())?;
                    let ids = tokenize(&v[0]);
                    let n = ids.len();
                    (ids, n)
                }
                Prompt::TokenLists(v) => {
                    one(v.len())?;
                    (v[0].clone(), v[0].len())
                }
            };
            if len == 0 {
                return Err(ApiError::bad_request("the prompt cannot be empty").param("prompt"));
            }
            Ok(PromptTokens { ids, len })
        }
    }
}

/// A validated generation request.
struct Plan {
    output_len: u32,
    finish_stop: bool,
    stream: bool,
    include_usage: bool,
    continuous_usage: bool,
}

fn plan(
    req: &GenerateRequest,
    kind: Kind,
    prompt_len: usize,
    config: &ReplicaConfig,
    key: u64,
) -> Result<Plan, ApiError> {
    if let Some(n) = req.n
        && n != 1
    {
        return Err(
            ApiError::bad_request(format!("the simulator serves n = 1 only, got n = {n}"))
                .param("n"),
        );
    }
    let max_model_len = u64::from(config.setup.max_model_len);
    let prompt_len = prompt_len as u64;
    let (max_tokens, max_field) = match (kind, req.max_completion_tokens, req.max_tokens) {
        (Kind::Chat, Some(m), _) => (Some(m), "max_completion_tokens"),
        (_, _, m) => (m, "max_tokens"),
    };
    if let Some(m) = max_tokens
        && m < 1
    {
        return Err(
            ApiError::bad_request(format!("{max_field} must be at least 1, got {m}"))
                .param(max_field),
        );
    }
    let max_tokens = max_tokens.map(|m| m as u64);
    if prompt_len >= max_model_len && max_tokens.is_none() {
        return Err(ApiError::bad_request(format!(
            "This model's maximum context length is {max_model_len} tokens. However, your request has {prompt_len} input tokens. Please reduce the length of the input messages."
        )));
    }
    if let Some(m) = max_tokens
        && prompt_len + m > max_model_len
    {
        return Err(ApiError::bad_request(format!(
            "This model's maximum context length is {max_model_len} tokens. However, you requested {} tokens ({prompt_len} in the messages, {m} in the completion). Please reduce the length of the messages or completion.",
            prompt_len + m
        )));
    }
    let cap = max_tokens.unwrap_or(max_model_len - prompt_len) as u32;
    let min_tokens = req.min_tokens.unwrap_or(0);
    if min_tokens < 0 {
        return Err(ApiError::bad_request(format!(
            "min_tokens must be at least 0, got {min_tokens}"
        ))
        .param("min_tokens"));
    }
    if min_tokens as u64 > u64::from(cap) {
        return Err(ApiError::bad_request(format!(
            "min_tokens must be less than or equal to {max_field}={cap}, got {min_tokens}"
        ))
        .param("min_tokens"));
    }
    let (output_len, finish_stop) = if req.ignore_eos.unwrap_or(false) {
        (cap, false)
    } else {
        let hi = if max_tokens.is_some() {
            cap
        } else {
            cap.min(DEFAULT_SAMPLED_MAX_TOKENS)
        };
        let lo = (min_tokens as u32).clamp(1, hi.max(1));
        let hi = hi.max(lo);
        let u = match req.seed {
            Some(s) => unit(s as u64, 0, SALT_LENGTH),
            None => unit(config.seed, key, SALT_LENGTH),
        };
        let n = lo + ((u * f64::from(hi - lo + 1)) as u32).min(hi - lo);
        (n, n < cap)
    };
    let opts = req.stream_options.as_ref();
    if opts.is_some() && req.stream != Some(true) {
        return Err(ApiError::bad_request(
            "Stream options can only be defined when `stream=True`.",
        )
        .param("stream_options"));
    }
    Ok(Plan {
        output_len,
        finish_stop,
        stream: req.stream.unwrap_or(false),
        include_usage: opts.and_then(|o| o.include_usage).unwrap_or(false),
        continuous_usage: opts.and_then(|o| o.continuous_usage_stats).unwrap_or(false),
    })
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn model_json(config: &ReplicaConfig) -> String {
    // Serializing a string cannot fail.
    serde_json::to_string(&config.setup.model).unwrap_or_else(|_| "\"\"".into())
}

// ---------------------------------------------------------------------------------------
// Handlers

async fn generate(
    replica: Replica,
    kind: Kind,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let arrival = Instant::now();
    let config = replica.config();
    let body = body.map_err(|r| ApiError::from_body_rejection(r, config.max_body_bytes))?;
    let req = parse_request(&body)?;
    drop(body);
    if let Some(m) = &req.model
        && *m != config.setup.model
    {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("The model `{m}` does not exist."),
        )
        .param("model"));
    }
    let prompt = prompt_tokens(&req, kind, config.setup.prefix_caching)?;
    let key = replica.next_key();
    let plan = plan(&req, kind, prompt.len, config, key)?;

    let faults = replica.faults();
    if faults.error_fraction > 0.0 && unit(config.seed, key, SALT_ERROR) < faults.error_fraction {
        let status =
            StatusCode::from_u16(faults.error_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return Err(ApiError::new(status, "simulated server error"));
    }
    let jitter = faults
        .latency_jitter
        .mul_f64(unit(config.seed, key, SALT_JITTER));
    let delay = faults.added_latency.saturating_add(jitter);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    // A degraded link delivers the request `delay` late: it reaches the engine then.
    let arrival = arrival + delay;

    let block_hashes = if config.setup.prefix_caching {
        block_hashes(&prompt.ids, config.setup.block_size)
    } else {
        Vec::new()
    };
    let new = NewRequest {
        input_len: prompt.len as u32,
        output_len: plan.output_len,
        block_hashes,
    };
    let every = if plan.stream {
        config.stream_interval
    } else {
        0
    };
    let mut ticket = replica
        .submit(key, new, arrival, every, plan.finish_stop)
        .map_err(|_| ApiError::unavailable())?;

    let prefix = match kind {
        Kind::Completion => "cmpl",
        Kind::Chat => "chatcmpl",
    };
    let id = format!("{prefix}-{:016x}{:016x}", mix(config.seed ^ key), key);
    let created = unix_now();
    let model = model_json(config);
    let finish_reason = if plan.finish_stop { "stop" } else { "length" };

    if plan.stream {
        let spec = FrameSpec {
            kind,
            head: FrameSpec::head(kind, &id, created, &model),
            prompt_tokens: prompt.len as u32,
            include_usage: plan.include_usage,
            continuous_usage: plan.continuous_usage,
            finish_reason,
        };
        let cut = faults
            .stream_cut
            .filter(|c| unit(config.seed, key, SALT_CUT) < c.fraction)
            .map(|c| (c.after_tokens, c.mode));
        let stream = SseStream::new(
            ticket.inbox,
            ticket.guard,
            spec,
            cut,
            replica.frame_lateness().cloned(),
        );
        let mut resp = Response::new(Body::from_stream(stream));
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return Ok(resp);
    }

    let generated = wait_finished(&ticket.inbox)
        .await
        .ok_or_else(ApiError::unavailable)?;
    ticket.guard.disarm();
    let text = response_text(generated);
    let usage = json!({
        "prompt_tokens": prompt.len,
        "completion_tokens": generated,
        "total_tokens": prompt.len as u64 + u64::from(generated),
    });
    let choice = match kind {
        Kind::Completion => json!({
            "index": 0, "text": text, "logprobs": null, "finish_reason": finish_reason,
            "stop_reason": null, "prompt_logprobs": null,
        }),
        Kind::Chat => json!({
            "index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": null, "finish_reason": finish_reason, "stop_reason": null,
        }),
    };
    let object = match kind {
        Kind::Completion => "text_completion",
        Kind::Chat => "chat.completion",
    };
    let body = json!({
        "id": id, "object": object, "created": created, "model": config.setup.model,
        "choices": [choice], "usage": usage,
    });
    Ok(axum::Json(body).into_response())
}

async fn completions(State(r): State<Replica>, body: Result<Bytes, BytesRejection>) -> Response {
    generate(r, Kind::Completion, body).await.into_response()
}

async fn chat_completions(
    State(r): State<Replica>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(r, Kind::Chat, body).await.into_response()
}

async fn models(State(r): State<Replica>) -> Response {
    let c = r.config();
    let owner = match c.metrics_flavor {
        MetricsFlavor::Vllm => "vllm",
        MetricsFlavor::Sglang => "sglang",
    };
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": c.setup.model, "object": "model", "created": unix_now(), "owned_by": owner,
            "root": c.setup.model, "parent": null, "max_model_len": c.setup.max_model_len,
        }],
    }))
    .into_response()
}

async fn health(State(r): State<Replica>) -> Response {
    if r.is_running() {
        StatusCode::OK.into_response()
    } else {
        ApiError::unavailable().into_response()
    }
}

async fn tokenize_route(State(r): State<Replica>, body: Result<Bytes, BytesRejection>) -> Response {
    let run = || -> Result<Response, ApiError> {
        let config = r.config();
        let body = body.map_err(|e| ApiError::from_body_rejection(e, config.max_body_bytes))?;
        let req = parse_request(&body)?;
        let kind = if req.messages.is_some() {
            Kind::Chat
        } else {
            Kind::Completion
        };
        let p = prompt_tokens(&req, kind, true)?;
        Ok(axum::Json(json!({
            "count": p.len, "max_model_len": config.setup.max_model_len, "tokens": p.ids,
            "token_strs": null,
        }))
        .into_response())
    };
    run().into_response()
}

async fn metrics(State(r): State<Replica>) -> Response {
    match r.metrics_text() {
        Some(text) => {
            let mut resp = text.into_response();
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            resp
        }
        None => ApiError::unavailable().into_response(),
    }
}

async fn lateness(State(r): State<Replica>) -> Response {
    match r.lateness() {
        Some((frames, steps)) => {
            axum::Json(json!({"frames": frames, "steps": steps})).into_response()
        }
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "lateness recording is off (record_lateness)",
        )
        .into_response(),
    }
}

async fn reset_lateness(State(r): State<Replica>) -> StatusCode {
    r.reset_lateness();
    StatusCode::NO_CONTENT
}

async fn not_found() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "Not Found").into_response()
}

/// The axum app of one replica.
pub(crate) fn router(replica: Replica) -> Router {
    let limit = replica.config().max_body_bytes;
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/tokenize", post(tokenize_route))
        .route("/metrics", get(metrics))
        .route("/debug/lateness", get(lateness))
        .route("/debug/lateness/reset", post(reset_lateness))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(replica)
}
