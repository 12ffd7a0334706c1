//! Per-request records and `requests.csv`: the capacity pack's columns first, in order, then
//! the client's extra columns.

use std::io::Write;
use std::time::Instant;

use serde::Serialize;

use super::RequestOutcome;
use crate::analysis::{REQUIRED_COLUMNS, Success, nearest_rank, tpot_ms};

/// One attempted request, with times relative to the run's start.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestRecord {
    /// Position in the schedule.
    pub index: u64,
    /// Class index.
    pub class: usize,
    /// Scheduled send time (s from the start; closed loop: the actual send).
    pub scheduled_s: f64,
    /// Actual send time (s from the start).
    pub sent_s: f64,
    /// First token arrival (s from the start).
    pub first_token_s: Option<f64>,
    /// Last token arrival (s from the start).
    pub last_token_s: Option<f64>,
    /// When the response ended: `[DONE]`, the end of the body, or the failure (s from the
    /// start). For a failure it is when the client learnt of it.
    pub ended_s: f64,
    /// Prompt tokens sent.
    pub input_tokens: u32,
    /// `max_tokens` asked.
    pub max_tokens: u32,
    /// TTFT from the scheduled send (ms; 0 for failures).
    pub ttft_ms: f64,
    /// TPOT (ms; 0 for failures and single-token outputs).
    pub tpot_ms: f64,
    /// End-to-end latency from the scheduled send (ms; 0 for failures).
    pub e2e_ms: f64,
    /// Output tokens (server usage when present, else counted chunks; 0 for failures).
    pub output_tokens: u32,
    /// Content chunks counted by the client.
    pub output_tokens_counted: u32,
    /// `usage.completion_tokens` from the server.
    pub output_tokens_usage: Option<u32>,
    /// `ok` or the error kind.
    pub status: &'static str,
    /// Gaps between content chunks (ms).
    pub itl_ms: Vec<f64>,
    /// `finish_reason`.
    pub finish_reason: Option<String>,
    /// HTTP status.
    pub http_status: Option<u16>,
    /// Failure detail.
    pub error_message: Option<String>,
}

impl RequestRecord {
    /// Multiplies every time and latency by `k` (a run against an engine `k` times faster
    /// than real time, converted back to model time).
    pub fn rescale(&mut self, k: f64) {
        self.scheduled_s *= k;
        self.sent_s *= k;
        self.first_token_s = self.first_token_s.map(|t| t * k);
        self.last_token_s = self.last_token_s.map(|t| t * k);
        self.ended_s *= k;
        self.ttft_ms *= k;
        self.tpot_ms *= k;
        self.e2e_ms *= k;
        for gap in &mut self.itl_ms {
            *gap *= k;
        }
    }

    /// Builds the record of `outcome`; latencies are measured from `scheduled` (open loop:
    /// the schedule's time, so client lag counts against the request).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: u64,
        class: usize,
        start: Instant,
        scheduled: Instant,
        input_tokens: u32,
        max_tokens: u32,
        outcome: RequestOutcome,
    ) -> Self {
        let since = |t: Instant| t.saturating_duration_since(start).as_secs_f64();
        let ms = |t: Instant| t.saturating_duration_since(scheduled).as_secs_f64() * 1e3;
        let ok = outcome.error.is_none();
        let output_tokens = if ok { outcome.output_tokens() } else { 0 };
        let (ttft, e2e) = match (ok, outcome.first_token, outcome.last_token) {
            (true, Some(f), Some(l)) => (ms(f), ms(l)),
            _ => (0.0, 0.0),
        };
        RequestRecord {
            index,
            class,
            scheduled_s: since(scheduled),
            sent_s: since(outcome.sent),
            first_token_s: outcome.first_token.map(since),
            last_token_s: outcome.last_token.map(since),
            ended_s: since(outcome.ended),
            input_tokens,
            max_tokens,
            ttft_ms: ttft,
            tpot_ms: if ok {
                tpot_ms(ttft, e2e, u64::from(output_tokens)).unwrap_or(0.0)
            } else {
                0.0
            },
            e2e_ms: e2e,
            output_tokens,
            output_tokens_counted: outcome.content_chunks,
            output_tokens_usage: outcome.usage_completion_tokens,
            status: outcome.error.map_or("ok", |k| k.as_str()),
            itl_ms: outcome.itl_ms,
            finish_reason: outcome.finish_reason,
            http_status: outcome.http_status,
            error_message: outcome.error_message,
        }
    }

    /// True for a success.
    pub fn ok(&self) -> bool {
        self.status == "ok"
    }

    /// Scheduled-to-actual send lag (ms).
    pub fn schedule_lag_ms(&self) -> f64 {
        ((self.sent_s - self.scheduled_s) * 1e3).max(0.0)
    }

    /// A success that stopped short of `max_tokens`.
    pub fn short_output(&self) -> bool {
        self.ok() && self.output_tokens < self.max_tokens
    }

    /// The analysis core's view of a success.
    pub fn success(&self) -> Success<'_> {
        Success {
            ttft_ms: self.ttft_ms,
            tpot_ms: self.tpot_ms,
            e2e_ms: self.e2e_ms,
            output_tokens: u64::from(self.output_tokens),
            itl_ms: &self.itl_ms,
        }
    }
}

/// Writes `requests.csv`. With `with_itl`, an `itl_ms` column holds every gap (`;`-joined),
/// which `goodput analyze` turns into an ITL distribution.
pub fn write_requests_csv(
    out: impl Write,
    records: &[RequestRecord],
    class_names: &[String],
    with_itl: bool,
) -> csv::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    // The capacity pack's columns first, in their order (the row below follows it), then
    // the client's.
    let mut header = REQUIRED_COLUMNS.to_vec();
    header.extend([
        "scheduled_s",
        "sent_s",
        "first_token_s",
        "last_token_s",
        "ended_s",
        "schedule_lag_ms",
        "input_tokens",
        "max_tokens",
        "output_tokens_counted",
        "output_tokens_usage",
        "itl_mean_ms",
        "itl_p99_ms",
        "itl_max_ms",
        "finish_reason",
        "http_status",
        "error_message",
    ]);
    if with_itl {
        header.push("itl_ms");
    }
    w.write_record(&header)?;
    let f3 = |x: f64| format!("{x:.3}");
    let opt = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.6}"));
    for r in records {
        let mut sorted = r.itl_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let mean = (!sorted.is_empty()).then(|| sorted.iter().sum::<f64>() / sorted.len() as f64);
        let mut row = vec![
            format!("r-{:07}", r.index),
            class_names.get(r.class).cloned().unwrap_or_default(),
            f3(r.ttft_ms),
            f3(r.tpot_ms),
            f3(r.e2e_ms),
            r.output_tokens.to_string(),
            r.status.to_owned(),
            format!("{:.6}", r.scheduled_s),
            format!("{:.6}", r.sent_s),
            opt(r.first_token_s),
            opt(r.last_token_s),
            format!("{:.6}", r.ended_s),
            f3(r.schedule_lag_ms()),
            r.input_tokens.to_string(),
            r.max_tokens.to_string(),
            r.output_tokens_counted.to_string(),
            r.output_tokens_usage
                .map_or(String::new(), |u| u.to_string()),
            mean.map_or(String::new(), f3),
            nearest_rank(&sorted, 0.99).map_or(String::new(), f3),
            sorted.last().map_or(String::new(), |v| f3(*v)),
            r.finish_reason.clone().unwrap_or_default(),
            r.http_status.map_or(String::new(), |s| s.to_string()),
            r.error_message.clone().unwrap_or_default(),
        ];
        if with_itl {
            row.push(
                r.itl_ms
                    .iter()
                    .map(|g| f3(*g))
                    .collect::<Vec<_>>()
                    .join(";"),
            );
        }
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}
