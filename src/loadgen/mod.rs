//! The load generator: seeded open-loop schedules and closed-loop workers driving an
//! OpenAI-compatible endpoint over streaming HTTP, with exact per-request records.
//!
//! Clock rule: in open loop every latency is measured from the request's *scheduled* send
//! time, and the lag between scheduled and actual send is recorded per request, so a client
//! that falls behind shows it instead of hiding it (no coordinated omission).

pub mod bucket;
pub mod cache_reset;
pub mod client;
pub mod cpu_throttle;
pub mod drain;
pub mod handoff;
pub mod live_metrics;
pub mod point;
pub mod prompt;
pub mod publish;
pub mod record;
pub mod run;
pub mod sse;
pub mod vocabulary;

use std::time::{Duration, Instant};

use serde::Serialize;

/// Which OpenAI-compatible endpoint a request uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `POST /v1/completions` (prompt as token ids or text).
    Completions,
    /// `POST /v1/chat/completions` (one user message).
    Chat,
}

/// The prompt of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    /// Token ids: the engine sees exactly this many input tokens.
    Tokens(Vec<u32>),
    /// Text (the only form chat accepts).
    Text(String),
}

/// One request to send.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestSpec {
    /// Model name sent in the body.
    pub model: String,
    /// Endpoint.
    pub api: Api,
    /// Prompt.
    pub prompt: Prompt,
    /// `max_tokens` (chat: `max_completion_tokens` too).
    pub max_tokens: u32,
    /// `min_tokens`, where the engine supports it (vLLM, SGLang).
    pub min_tokens: Option<u32>,
    /// `ignore_eos`: generate exactly `max_tokens`.
    pub ignore_eos: bool,
    /// Sampling temperature, if set.
    pub temperature: Option<f64>,
    /// Ask the server to close the connection after the response (`Connection: close`).
    pub close_connection: bool,
}

/// How long a request may take.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timeouts {
    /// Whole request, from send to the last byte.
    pub request: Duration,
    /// Longest silence between two reads of a stream.
    pub stall: Duration,
    /// Connection establishment.
    pub connect: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            request: Duration::from_secs(600),
            stall: Duration::from_secs(60),
            connect: Duration::from_secs(10),
        }
    }
}

/// Why a request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The connection could not be made (refused, unreachable, DNS failure).
    Connect,
    /// The server answered with a non-2xx status (see `http_status`).
    HttpStatus,
    /// A `data: {"error": ...}` frame inside a 200 stream.
    StreamError,
    /// The connection broke mid-response (reset, closed before `[DONE]`).
    Disconnected,
    /// A frame that is not valid JSON or not a completion chunk.
    Malformed,
    /// No bytes for longer than the stall timeout.
    Stalled,
    /// The request ran past its overall timeout.
    Timeout,
    /// The run was stopped (Ctrl-C, end of the window) while the request was in flight.
    Cancelled,
    /// A 200 response with no generated token at all.
    Empty,
    /// The client went away on purpose mid-stream (a failure test's request
    /// cancellation): neither a success nor a failure of the server.
    Aborted,
}

impl ErrorKind {
    /// Every kind.
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::Connect,
        ErrorKind::HttpStatus,
        ErrorKind::StreamError,
        ErrorKind::Disconnected,
        ErrorKind::Malformed,
        ErrorKind::Stalled,
        ErrorKind::Timeout,
        ErrorKind::Cancelled,
        ErrorKind::Empty,
        ErrorKind::Aborted,
    ];

    /// The value written in the `status` column of `requests.csv`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect_error",
            ErrorKind::HttpStatus => "http_error",
            ErrorKind::StreamError => "stream_error",
            ErrorKind::Disconnected => "disconnected",
            ErrorKind::Malformed => "malformed",
            ErrorKind::Stalled => "stalled",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Empty => "empty",
            ErrorKind::Aborted => "aborted",
        }
    }
}

/// What happened to one request, as the client saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestOutcome {
    /// When the request was handed to the connection (just before writing it).
    pub sent: Instant,
    /// Arrival of the first chunk with non-empty generated content.
    pub first_token: Option<Instant>,
    /// Arrival of the last chunk with generated content.
    pub last_token: Option<Instant>,
    /// When the response ended (`[DONE]`, end of body, or the failure).
    pub ended: Instant,
    /// Chunks that carried generated content.
    pub content_chunks: u32,
    /// Gaps between consecutive content chunks, in arrival order (ms).
    pub itl_ms: Vec<f64>,
    /// `usage.completion_tokens` from the server, if it sent usage.
    pub usage_completion_tokens: Option<u32>,
    /// `usage.prompt_tokens` from the server, if it sent usage.
    pub usage_prompt_tokens: Option<u32>,
    /// `finish_reason` of the last choice, if any.
    pub finish_reason: Option<String>,
    /// HTTP status of the response, if one arrived.
    pub http_status: Option<u16>,
    /// Why it failed; `None` for a success.
    pub error: Option<ErrorKind>,
    /// Detail of the failure (server message, I/O error), for the log and the CSV.
    pub error_message: Option<String>,
}

impl RequestOutcome {
    /// Output tokens: the server's usage count when present, else the content chunks
    /// counted (one token per chunk).
    pub fn output_tokens(&self) -> u32 {
        self.usage_completion_tokens.unwrap_or(self.content_chunks)
    }

    /// Whether the server's usage and the counted chunks disagree (engines that send
    /// several tokens per chunk do; the record keeps both).
    pub fn tokens_mismatch(&self) -> bool {
        self.usage_completion_tokens
            .is_some_and(|u| u != self.content_chunks)
    }
}
