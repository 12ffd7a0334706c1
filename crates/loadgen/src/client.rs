//! One streaming request to an OpenAI-compatible endpoint, recorded as a
//! [`RequestOutcome`].
//!
//! [`send`] builds the JSON body, hands the request to the caller's pooled reqwest client,
//! reads the server-sent events as they arrive ([`super::sse`]) and records when each
//! chunk with generated content came. Every failure becomes an outcome with an
//! [`ErrorKind`]; nothing panics and nothing waits past the timeouts.
//!
//! Rules:
//! - **Send time** (`sent`): taken just before the built request is handed to reqwest
//!   (after the body is serialized), so it includes connecting and writing the request.
//! - **Tokens**: a *content chunk* is an event whose `choices[0]` carries non-empty
//!   generated text (completions `text`; chat `delta.content` or the reasoning text). The
//!   first one is `first_token`, the last one `last_token`; `itl_ms` holds the gaps between
//!   consecutive content chunks. A chat role-only chunk (`delta: {"role": "assistant"}` or
//!   with `content: ""`) and the final `finish_reason` / usage chunks are not tokens. Chunks
//!   that arrived in one read share its arrival time (their gap is 0). The server's
//!   `usage` (final chunk or continuous) is kept as is; the last value seen wins.
//! - **End of stream**: `data: [DONE]` ends a successful stream (`ended` is when it
//!   arrived). A body that ends cleanly without `[DONE]` is still a success if a
//!   `finish_reason` was seen (the generation itself said it was complete; usage is not
//!   required, since some servers ignore `include_usage`); otherwise it is `Disconnected`.
//!   A truncated last event (no blank line and not parseable) at the end of the body is
//!   `Disconnected` too, not `Malformed`. A body that breaks (reset, bad chunked encoding)
//!   is `Disconnected` unless `[DONE]` came first.
//! - **Failures after a complete stream**: a successful stream with no content chunk is
//!   `Empty`; one whose `finish_reason` is `error` or `abort` is `StreamError`.
//! - **Errors**: connection refused, DNS failure or connect timeout: `Connect`; a non-2xx
//!   status: `HttpStatus`, with the server's message from at most
//!   [`MAX_ERROR_BODY_BYTES`] of its body; `data: {"error": ...}`: `StreamError`; a frame
//!   that is not JSON or not a chunk, an event over the parser's limit, or a 2xx
//!   `application/json` answer to a streaming request: `Malformed`; no bytes (headers
//!   included) for `timeouts.stall`: `Stalled`; past `timeouts.request` from `sent`:
//!   `Timeout`.
//! - **Chat with a token prompt**: chat takes text, so token ids are sent as their
//!   decimal numbers separated by spaces. The server then sees a different number of
//!   prompt tokens than ids (`usage_prompt_tokens` tells how many); generate text prompts
//!   for chat where the length matters.
//! - **Connections**: after `[DONE]` (or an error frame) the rest of the body is read for
//!   up to [`DRAIN_AFTER_DONE`] so that an HTTP/1.1 connection goes back to the pool
//!   instead of being closed. Dropping the future drops the connection, which tells the
//!   server to abort the request; [`send`] is cancel-safe. [`send_or_abort`] does that on
//!   purpose after a given number of content chunks (`Aborted`).

use std::error::Error as _;
use std::time::{Duration, Instant};

use reqwest::header::{CONNECTION, CONTENT_TYPE, HeaderValue};
use serde::Serialize;

use super::sse::{self, SseParser, StreamEvent};
use super::{Api, ErrorKind, Prompt, RequestOutcome, RequestSpec, Timeouts};

/// At most this much of a non-2xx body is read for its error message.
pub const MAX_ERROR_BODY_BYTES: usize = 4096;

/// How long the rest of a body is read after `[DONE]` before the connection is dropped.
pub const DRAIN_AFTER_DONE: Duration = Duration::from_secs(1);

/// The endpoint for `api` under `base_url` (`http://host:port`, with or without a trailing
/// `/` or `/v1`): `{base}/v1/completions` or `{base}/v1/chat/completions`.
pub fn endpoint_url(base_url: &str, api: Api) -> String {
    let base = base_url.trim_end_matches('/');
    let v1 = if base.ends_with("/v1") { "" } else { "/v1" };
    let path = match api {
        Api::Completions => "/completions",
        Api::Chat => "/chat/completions",
    };
    let mut url = String::with_capacity(base.len() + v1.len() + path.len());
    url.push_str(base);
    url.push_str(v1);
    url.push_str(path);
    url
}

#[derive(Serialize)]
#[serde(untagged)]
enum PromptJson<'a> {
    Tokens(&'a [u32]),
    Text(&'a str),
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<PromptJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<[Message<'a>; 1]>,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "is_false")]
    ignore_eos: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
}

/// Token ids as the text a chat message carries: decimal numbers separated by spaces.
pub fn tokens_as_text(ids: &[u32]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(ids.len() * 6);
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        // Writing to a String cannot fail.
        let _ = write!(s, "{id}");
    }
    s
}

/// The JSON body of `spec`: completions
/// `{"model","prompt","max_tokens","stream":true,"stream_options":{"include_usage":true}}`
/// plus `ignore_eos` (when set), `min_tokens` and `temperature` (when given); chat the same
/// with `"messages":[{"role":"user","content":...}]` instead of `prompt` and
/// `max_completion_tokens` next to `max_tokens`.
pub fn request_body(spec: &RequestSpec) -> Vec<u8> {
    let chat_text;
    let (prompt, messages, max_completion_tokens) = match (spec.api, &spec.prompt) {
        (Api::Completions, Prompt::Tokens(ids)) => (Some(PromptJson::Tokens(ids)), None, None),
        (Api::Completions, Prompt::Text(t)) => (Some(PromptJson::Text(t)), None, None),
        (Api::Chat, prompt) => {
            let content = match prompt {
                Prompt::Text(t) => t.as_str(),
                Prompt::Tokens(ids) => {
                    chat_text = tokens_as_text(ids);
                    chat_text.as_str()
                }
            };
            let message = Message {
                role: "user",
                content,
            };
            (None, Some([message]), Some(spec.max_tokens))
        }
    };
    let body = Body {
        model: &spec.model,
        prompt,
        messages,
        max_tokens: spec.max_tokens,
        max_completion_tokens,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        ignore_eos: spec.ignore_eos,
        min_tokens: spec.min_tokens,
        temperature: spec.temperature,
    };
    let estimate = 160
        + spec.model.len()
        + match &spec.prompt {
            Prompt::Tokens(ids) => ids.len() * 7,
            Prompt::Text(t) => t.len() + t.len() / 8,
        };
    let mut out = Vec::with_capacity(estimate);
    // Serializing plain structs of strings and numbers into a Vec cannot fail (a NaN
    // temperature is written as null).
    let _ = serde_json::to_writer(&mut out, &body);
    out
}

/// `i + d`, saturating far in the future instead of overflowing.
fn later(i: Instant, d: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 3600);
    i.checked_add(d).or_else(|| i.checked_add(FAR)).unwrap_or(i)
}

/// The stall and overall deadlines of one request, armed lazily: the timer is re-armed
/// only when it fires, not on every read.
struct Deadlines {
    request: Instant,
    stall: Duration,
    /// When the timer is set to fire.
    armed: Instant,
}

impl Deadlines {
    fn new(sent: Instant, timeouts: &Timeouts) -> Self {
        let request = later(sent, timeouts.request);
        Deadlines {
            request,
            stall: timeouts.stall,
            armed: later(sent, timeouts.stall).min(request),
        }
    }

    /// The timer fired; `last_read` is when bytes last arrived. `Some` when a deadline has
    /// passed, else the timer is re-armed (to `self.armed`).
    fn fired(&mut self, last_read: Instant) -> Option<ErrorKind> {
        let stall_at = later(last_read, self.stall);
        let next = stall_at.min(self.request);
        if next <= self.armed {
            return Some(if self.request <= stall_at {
                ErrorKind::Timeout
            } else {
                ErrorKind::Stalled
            });
        }
        self.armed = next;
        None
    }
}

/// How an event ended the stream.
enum End {
    Done(Instant),
    Failed(ErrorKind, String, Instant),
}

/// What has been seen of one response so far.
struct Recorder {
    sent: Instant,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    content_chunks: u32,
    itl_ms: Vec<f64>,
    usage_completion_tokens: Option<u32>,
    usage_prompt_tokens: Option<u32>,
    finish_reason: Option<String>,
    http_status: Option<u16>,
    end: Option<End>,
}

impl Recorder {
    fn new(spec: &RequestSpec, sent: Instant) -> Self {
        Recorder {
            sent,
            first_token: None,
            last_token: None,
            content_chunks: 0,
            itl_ms: Vec::with_capacity(spec.max_tokens.saturating_sub(1).min(1024) as usize),
            usage_completion_tokens: None,
            usage_prompt_tokens: None,
            finish_reason: None,
            http_status: None,
            end: None,
        }
    }

    /// One event payload that arrived at `now`; `at_eof` when it is a last event whose
    /// blank line never came (a parse failure then means truncation).
    fn on_event(&mut self, data: &[u8], now: Instant, at_eof: bool) {
        if self.end.is_some() {
            return;
        }
        match sse::parse_event(data) {
            Ok(None) => {}
            Ok(Some(StreamEvent::Done)) => self.end = Some(End::Done(now)),
            Ok(Some(StreamEvent::Error(m))) => {
                self.end = Some(End::Failed(ErrorKind::StreamError, m, now));
            }
            Ok(Some(StreamEvent::Chunk(c))) => {
                if c.has_content() {
                    self.content_chunks = self.content_chunks.saturating_add(1);
                    match self.last_token {
                        Some(prev) => self
                            .itl_ms
                            .push(now.saturating_duration_since(prev).as_secs_f64() * 1e3),
                        None => self.first_token = Some(now),
                    }
                    self.last_token = Some(now);
                }
                if let Some(f) = c.finish_reason
                    && self.finish_reason.as_deref() != Some(&*f)
                {
                    self.finish_reason = Some(f.into_owned());
                }
                if let Some(u) = c.usage {
                    if u.completion_tokens.is_some() {
                        self.usage_completion_tokens = u.completion_tokens;
                    }
                    if u.prompt_tokens.is_some() {
                        self.usage_prompt_tokens = u.prompt_tokens;
                    }
                }
            }
            Err(e) if at_eof => {
                self.end = Some(End::Failed(
                    ErrorKind::Disconnected,
                    format!("the body ended inside an event ({e})"),
                    now,
                ));
            }
            Err(e) => self.end = Some(End::Failed(ErrorKind::Malformed, e.to_string(), now)),
        }
    }

    fn outcome(
        self,
        ended: Instant,
        error: Option<ErrorKind>,
        error_message: Option<String>,
    ) -> RequestOutcome {
        RequestOutcome {
            sent: self.sent,
            first_token: self.first_token,
            last_token: self.last_token,
            ended,
            content_chunks: self.content_chunks,
            itl_ms: self.itl_ms,
            usage_completion_tokens: self.usage_completion_tokens,
            usage_prompt_tokens: self.usage_prompt_tokens,
            finish_reason: self.finish_reason,
            http_status: self.http_status,
            error,
            error_message,
        }
    }

    fn fail(self, kind: ErrorKind, message: String, at: Instant) -> RequestOutcome {
        self.outcome(at, Some(kind), Some(message))
    }

    /// A stream that ended as a success: still `Empty` without content, and a
    /// `StreamError` if the server's finish reason says the generation failed.
    fn complete(self, ended: Instant) -> RequestOutcome {
        if self.content_chunks == 0 {
            return self.fail(
                ErrorKind::Empty,
                "the stream carried no generated content".into(),
                ended,
            );
        }
        if let Some(f @ ("error" | "abort")) = self.finish_reason.as_deref() {
            let msg = format!("the generation ended with finish_reason `{f}`");
            return self.fail(ErrorKind::StreamError, msg, ended);
        }
        self.outcome(ended, None, None)
    }

    /// Ends the outcome on the event that ended the stream.
    fn ended_by_event(mut self) -> RequestOutcome {
        match self.end.take() {
            Some(End::Done(at)) => self.complete(at),
            Some(End::Failed(kind, msg, at)) => self.fail(kind, msg, at),
            None => {
                let now = Instant::now();
                self.fail(ErrorKind::Disconnected, "no end event".into(), now)
            }
        }
    }
}

/// An error and its causes, `a: b: c`, without repeats.
pub(crate) fn error_chain(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        source = cause.source();
    }
    sse::truncate(&s).to_string()
}

fn deadline_message(kind: ErrorKind, timeouts: &Timeouts) -> String {
    match kind {
        ErrorKind::Timeout => format!("the request ran past its timeout of {:?}", timeouts.request),
        _ => format!("no bytes from the server for {:?}", timeouts.stall),
    }
}

/// Reads at most `cap` bytes of the body until `until`; whatever came.
async fn read_capped(resp: &mut reqwest::Response, cap: usize, until: Instant) -> Vec<u8> {
    let mut buf = Vec::new();
    let read = async {
        while buf.len() < cap {
            match resp.chunk().await {
                Ok(Some(b)) => {
                    let take = (cap - buf.len()).min(b.len());
                    buf.extend_from_slice(&b[..take]);
                }
                Ok(None) | Err(_) => break,
            }
        }
    };
    let _ = tokio::time::timeout_at(until.into(), read).await;
    buf
}

/// The server's message in an error body: OpenAI's `error` object (vLLM), a flat
/// `message`, FastAPI's `detail`, else the text.
fn http_error_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            return sse::error_message(e);
        }
        for key in ["message", "detail"] {
            match v.get(key) {
                Some(serde_json::Value::String(m)) => return sse::truncate(m).to_string(),
                Some(other) if !other.is_null() => {
                    return sse::truncate(&other.to_string()).to_string();
                }
                _ => {}
            }
        }
        return sse::truncate(&v.to_string()).to_string();
    }
    let text = String::from_utf8_lossy(body);
    sse::truncate(text.trim()).to_string()
}

/// Sends `spec` to `base_url` (see [`endpoint_url`]) on `client` and records what came
/// back. `timeouts.request` and `timeouts.stall` are enforced here; `timeouts.connect` is
/// the client's own (build it with
/// `goodput_http::default_http_client(timeouts.connect)`).
/// Never panics and never outlives `timeouts.request` by more than a timer tick (plus, on
/// success, up to [`DRAIN_AFTER_DONE`] spent returning the connection to the pool, which
/// does not move `ended`). Cancel-safe: dropping the future closes the connection.
pub async fn send(
    client: &reqwest::Client,
    base_url: &str,
    spec: &RequestSpec,
    timeouts: &Timeouts,
) -> RequestOutcome {
    send_or_abort(client, base_url, spec, timeouts, None).await
}

/// [`send`], with the client going away on purpose once `abort_after` content chunks have
/// arrived (`Some(0)`: as soon as the response headers have): the connection is closed,
/// which tells the server to abort the request, and the outcome is
/// [`ErrorKind::Aborted`] with what had arrived. A stream that ends first is recorded as
/// it ended.
pub async fn send_or_abort(
    client: &reqwest::Client,
    base_url: &str,
    spec: &RequestSpec,
    timeouts: &Timeouts,
    abort_after: Option<u32>,
) -> RequestOutcome {
    let mut request = client
        .post(endpoint_url(base_url, spec.api))
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if spec.close_connection {
        request = request.header(CONNECTION, HeaderValue::from_static("close"));
    }
    let request = request.body(request_body(spec)).build();
    let sent = Instant::now();
    let mut rec = Recorder::new(spec, sent);
    let request = match request {
        Ok(r) => r,
        Err(e) => {
            let msg = format!("invalid request: {}", error_chain(&e));
            return rec.fail(ErrorKind::Connect, msg, sent);
        }
    };
    let mut deadlines = Deadlines::new(sent, timeouts);
    let sleep = tokio::time::sleep_until(deadlines.armed.into());
    tokio::pin!(sleep);

    // Headers.
    let pending = client.execute(request);
    tokio::pin!(pending);
    let response = loop {
        tokio::select! {
            biased;
            r = &mut pending => break r,
            () = &mut sleep => match deadlines.fired(sent) {
                Some(kind) => {
                    return rec.fail(kind, deadline_message(kind, timeouts), Instant::now());
                }
                None => sleep.as_mut().reset(deadlines.armed.into()),
            },
        }
    };
    let mut resp = match response {
        Ok(r) => r,
        Err(e) => {
            let kind = if e.is_connect() || e.is_builder() {
                ErrorKind::Connect
            } else if e.is_timeout() {
                ErrorKind::Timeout
            } else {
                ErrorKind::Disconnected
            };
            return rec.fail(kind, error_chain(&e), Instant::now());
        }
    };
    let mut last_read = Instant::now();
    let status = resp.status();
    rec.http_status = Some(status.as_u16());
    if !status.is_success() {
        let until = later(last_read, timeouts.stall).min(deadlines.request);
        let body = read_capped(&mut resp, MAX_ERROR_BODY_BYTES, until).await;
        let msg = http_error_message(&body);
        let msg = if msg.is_empty() {
            status.to_string()
        } else {
            format!("{status}: {msg}")
        };
        return rec.fail(ErrorKind::HttpStatus, msg, Instant::now());
    }
    let is_json = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"));
    if is_json {
        let until = later(last_read, timeouts.stall).min(deadlines.request);
        let body = read_capped(&mut resp, MAX_ERROR_BODY_BYTES, until).await;
        let msg = format!(
            "expected an event stream, got application/json: {}",
            http_error_message(&body)
        );
        return rec.fail(ErrorKind::Malformed, msg, Instant::now());
    }

    // Body.
    let aborted = |rec: Recorder, n: u32, at: Instant| {
        let msg = format!("the client went away after {n} content chunks, as asked");
        rec.fail(ErrorKind::Aborted, msg, at)
    };
    if abort_after == Some(0) {
        return aborted(rec, 0, Instant::now());
    }
    let mut parser = SseParser::new();
    loop {
        let read = tokio::select! {
            biased;
            r = resp.chunk() => r,
            () = &mut sleep => match deadlines.fired(last_read) {
                Some(kind) => {
                    return rec.fail(kind, deadline_message(kind, timeouts), Instant::now());
                }
                None => {
                    sleep.as_mut().reset(deadlines.armed.into());
                    continue;
                }
            },
        };
        match read {
            Ok(Some(bytes)) => {
                let now = Instant::now();
                last_read = now;
                if let Err(e) = parser.feed(&bytes, &mut |d| rec.on_event(d, now, false)) {
                    return rec.fail(ErrorKind::Malformed, e.to_string(), now);
                }
                match rec.end {
                    None => {
                        if let Some(n) = abort_after.filter(|&n| rec.content_chunks >= n) {
                            // Returning drops the response: hyper closes a connection
                            // whose body was not read to its end.
                            return aborted(rec, n, now);
                        }
                    }
                    Some(End::Failed(ErrorKind::Malformed, ..)) => {
                        // A garbage stream: drop the connection rather than read on.
                        return rec.ended_by_event();
                    }
                    Some(_) => {
                        let until = later(now, DRAIN_AFTER_DONE).min(deadlines.request);
                        let drain = async { while let Ok(Some(_)) = resp.chunk().await {} };
                        let _ = tokio::time::timeout_at(until.into(), drain).await;
                        return rec.ended_by_event();
                    }
                }
            }
            Ok(None) => {
                let now = Instant::now();
                if let Err(e) = parser.finish(&mut |d| rec.on_event(d, now, true)) {
                    return rec.fail(ErrorKind::Malformed, e.to_string(), now);
                }
                if rec.end.is_some() {
                    return rec.ended_by_event();
                }
                if rec.finish_reason.is_some() {
                    return rec.complete(now);
                }
                let msg = "the body ended before [DONE] and without a finish_reason".into();
                return rec.fail(ErrorKind::Disconnected, msg, now);
            }
            Err(e) => {
                let now = Instant::now();
                let kind = if e.is_timeout() {
                    ErrorKind::Timeout
                } else {
                    ErrorKind::Disconnected
                };
                return rec.fail(kind, error_chain(&e), now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn spec(api: Api, prompt: Prompt) -> RequestSpec {
        RequestSpec {
            model: "m".into(),
            api,
            prompt,
            max_tokens: 16,
            min_tokens: None,
            ignore_eos: false,
            temperature: None,
            close_connection: false,
        }
    }

    fn body(s: &RequestSpec) -> Value {
        serde_json::from_slice(&request_body(s)).expect("valid JSON")
    }

    #[test]
    fn urls() {
        for base in [
            "http://h:1",
            "http://h:1/",
            "http://h:1/v1",
            "http://h:1/v1/",
        ] {
            assert_eq!(
                endpoint_url(base, Api::Completions),
                "http://h:1/v1/completions"
            );
            assert_eq!(
                endpoint_url(base, Api::Chat),
                "http://h:1/v1/chat/completions"
            );
        }
        assert_eq!(
            endpoint_url("http://h/proxy", Api::Completions),
            "http://h/proxy/v1/completions"
        );
    }

    #[test]
    fn completion_bodies() {
        let s = spec(Api::Completions, Prompt::Tokens(vec![1, 2, 3]));
        assert_eq!(
            body(&s),
            json!({"model":"m","prompt":[1,2,3],"max_tokens":16,"stream":true,
                   "stream_options":{"include_usage":true}})
        );
        let s = RequestSpec {
            ignore_eos: true,
            min_tokens: Some(4),
            temperature: Some(0.5),
            ..spec(Api::Completions, Prompt::Text("hi \"there\"".into()))
        };
        assert_eq!(
            body(&s),
            json!({"model":"m","prompt":"hi \"there\"","max_tokens":16,"stream":true,
                   "stream_options":{"include_usage":true},"ignore_eos":true,"min_tokens":4,
                   "temperature":0.5})
        );
    }

    #[test]
    fn chat_bodies() {
        let s = spec(Api::Chat, Prompt::Text("hello".into()));
        assert_eq!(
            body(&s),
            json!({"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":16,
                   "max_completion_tokens":16,"stream":true,
                   "stream_options":{"include_usage":true}})
        );
        let s = spec(Api::Chat, Prompt::Tokens(vec![10, 200, 3000]));
        assert_eq!(body(&s)["messages"][0]["content"], "10 200 3000");
        assert_eq!(tokens_as_text(&[]), "");
    }

    #[test]
    fn error_bodies() {
        assert_eq!(
            http_error_message(
                br#"{"error":{"message":"The model `x` does not exist.","type":"NotFoundError","param":"model","code":404}}"#
            ),
            "The model `x` does not exist. (NotFoundError, code 404)"
        );
        assert_eq!(
            http_error_message(br#"{"object":"error","message":"flat","code":400}"#),
            "flat"
        );
        assert_eq!(
            http_error_message(br#"{"detail":"Not Found"}"#),
            "Not Found"
        );
        assert_eq!(
            http_error_message(b"  upstream connect error\n"),
            "upstream connect error"
        );
        assert_eq!(http_error_message(b""), "");
    }

    #[test]
    fn deadlines_rearm_lazily() {
        let t0 = Instant::now();
        let timeouts = Timeouts {
            request: Duration::from_secs(10),
            stall: Duration::from_secs(2),
            connect: Duration::from_secs(1),
        };
        let mut d = Deadlines::new(t0, &timeouts);
        assert_eq!(d.armed, t0 + Duration::from_secs(2));
        // Bytes came at t0 + 1.5 s: re-armed to t0 + 3.5 s.
        assert_eq!(d.fired(t0 + Duration::from_millis(1500)), None);
        assert_eq!(d.armed, t0 + Duration::from_millis(3500));
        // Nothing since: stalled.
        assert_eq!(
            d.fired(t0 + Duration::from_millis(1500)),
            Some(ErrorKind::Stalled)
        );
        // Near the overall deadline the request deadline wins.
        let mut d = Deadlines::new(t0, &timeouts);
        assert_eq!(d.fired(t0 + Duration::from_millis(9000)), None);
        assert_eq!(d.armed, t0 + Duration::from_secs(10));
        assert_eq!(
            d.fired(t0 + Duration::from_millis(9500)),
            Some(ErrorKind::Timeout)
        );
        // Huge timeouts do not overflow.
        let d = Deadlines::new(
            t0,
            &Timeouts {
                request: Duration::MAX,
                stall: Duration::MAX,
                connect: Duration::MAX,
            },
        );
        assert!(d.armed > t0);
    }
}
