//! The load generator (re-exported as `goodput::loadgen`): seeded open-loop schedules and
//! closed-loop workers driving an OpenAI-compatible endpoint over streaming HTTP, with exact
//! per-request records.
//!
//! Clock rule: in open loop every latency is measured from the request's *scheduled* send
//! time, and the lag between scheduled and actual send is recorded per request, so a client
//! that falls behind shows it instead of hiding it (no coordinated omission).
//!
//! This crate is the instrument: it sends, times and records one point, defined from a
//! benchmark spec by [`point_job`] (for `goodput bench` in-process, and for a loadgen pod
//! from its point file). What carries a point's results to the operator (the ConfigMap
//! hand-off, its publication, the results bucket) is the operator's (`goodput-operator`).

pub mod cache_reset;
pub mod client;
pub mod cpu_throttle;
pub mod drain;
pub mod live_metrics;
pub mod point;
pub mod point_job;
pub mod prompt;
pub mod run;
pub mod sse;
pub mod vocabulary;

/// The record types live in the pure core; these are their historical paths.
pub use goodput_core::record;
pub use goodput_core::record::{ErrorKind, RequestOutcome};

use std::time::Duration;

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
