//! What the client saw of each request, pure data: its outcome as it ended
//! ([`RequestOutcome`], [`ErrorKind`]), its record on the run's timeline ([`RequestRecord`])
//! and `requests.csv` (the capacity pack's columns first, in order, then the client's extra
//! columns); and which requests a failure test's client cancels on purpose ([`CancelPlan`]).
//! The load generator makes them, the analysis, the failure tests and the alert store read
//! them; none of it does IO beyond the writer it is given.

use std::io::Write;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::analysis::{REQUIRED_COLUMNS, Success, nearest_rank, tpot_ms};

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

/// Which requests the client cancels on purpose, and when: of the requests scheduled in
/// `[from_s, to_s)` (seconds since the schedule's time zero), a `fraction` drawn from the
/// request index and the seed, each after `after_chunks` content chunks.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelPlan {
    /// Start of the cancellation (scheduled time, s).
    pub from_s: f64,
    /// Its end (s).
    pub to_s: f64,
    /// Fraction of the requests scheduled in it that are cancelled.
    pub fraction: f64,
    /// Content chunks a cancelled request receives first (0: none, the client goes away
    /// as soon as the response headers arrive).
    pub after_chunks: u32,
}

impl CancelPlan {
    /// `Some(after_chunks)` when the request `index` scheduled at `at_s` is one to cancel:
    /// the same requests on every run and shard with the same `seed`.
    pub fn abort_after(&self, seed: u64, index: u64, at_s: f64) -> Option<u32> {
        /// Keeps these draws apart from any other drawn from the same seed and index.
        const SALT_CANCEL: u64 = 0xCA9C_E11E;
        let inside = at_s >= self.from_s && at_s < self.to_s;
        (inside && crate::workload::hashing::unit(seed, index, SALT_CANCEL) < self.fraction)
            .then_some(self.after_chunks)
    }
}

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
    /// Prompt tokens sent (the schedule's length: exact for token-id prompts, the target of
    /// a text prompt's sizing).
    pub input_tokens: u32,
    /// `usage.prompt_tokens` from the server: what it counted (a chat prompt's template
    /// included).
    pub input_tokens_usage: Option<u32>,
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
            input_tokens_usage: outcome.usage_prompt_tokens,
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

    /// True for a request the client cancelled on purpose (a failure test's
    /// `RequestCancel`): neither a success nor a failure of the server.
    pub fn aborted(&self) -> bool {
        self.status == ErrorKind::Aborted.as_str()
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

/// Reads back the records [`write_requests_csv`] wrote (the columns by name, in any
/// order; without an `itl_ms` column the gaps are empty). `source` names the file in
/// errors, which give its line and column.
pub fn read_records(
    csv_bytes: &[u8],
    source: &str,
    class_names: &[String],
) -> Result<Vec<RequestRecord>, String> {
    let mut reader = csv::Reader::from_reader(csv_bytes);
    let header = reader
        .headers()
        .map_err(|e| format!("{source}: the header does not parse: {e}"))?
        .clone();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| format!("{source}: no column `{name}`"))
    };
    // The capacity pack's columns, then the client's times.
    let [id, class, ttft, tpot, e2e, tokens, status] = REQUIRED_COLUMNS.map(col);
    let (id, class, ttft, tpot, e2e, tokens, status) =
        (id?, class?, ttft?, tpot?, e2e?, tokens?, status?);
    let [scheduled, sent, first, last, ended] = [
        "scheduled_s",
        "sent_s",
        "first_token_s",
        "last_token_s",
        "ended_s",
    ]
    .map(col);
    let (scheduled, sent, first, last, ended) = (scheduled?, sent?, first?, last?, ended?);
    let optional = |name: &str| header.iter().position(|h| h == name);
    let input_usage = optional("input_tokens_usage");
    let (input, max, counted, usage, finish, http, message, itl) = (
        optional("input_tokens"),
        optional("max_tokens"),
        optional("output_tokens_counted"),
        optional("output_tokens_usage"),
        optional("finish_reason"),
        optional("http_status"),
        optional("error_message"),
        optional("itl_ms"),
    );
    let mut out = Vec::new();
    for row in reader.records() {
        let row = row.map_err(|e| format!("{source}: {e}"))?;
        let line = row.position().map_or(0, csv::Position::line);
        let at = |c: usize| row.get(c).unwrap_or("");
        let bad = |c: usize, what: &str| {
            format!(
                "{source}:{line}: column {} ({}): {what}: {:?}",
                c + 1,
                &header[c],
                at(c)
            )
        };
        let num = |c: usize| at(c).parse::<f64>().map_err(|_| bad(c, "not a number"));
        let opt_num = |c: Option<usize>| match c.map(at).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => v
                .parse::<f64>()
                .map(Some)
                .map_err(|_| bad(c.unwrap_or(0), "not a number")),
        };
        let count = |c: Option<usize>| -> Result<u32, String> {
            match c.map(at).filter(|v| !v.is_empty()) {
                None => Ok(0),
                Some(v) => v.parse().map_err(|_| bad(c.unwrap_or(0), "not a count")),
            }
        };
        let text = |c: Option<usize>| c.map(at).filter(|v| !v.is_empty()).map(str::to_owned);
        let index = at(id)
            .strip_prefix("r-")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| bad(id, "not a request id r-<n>"))?;
        let class = class_names
            .iter()
            .position(|n| n == at(class))
            .ok_or_else(|| bad(class, "not a class of the workload"))?;
        let status = std::iter::once("ok")
            .chain(ErrorKind::ALL.map(ErrorKind::as_str))
            .find(|s| *s == at(status))
            .ok_or_else(|| bad(status, "not a status the load generator writes"))?;
        out.push(RequestRecord {
            index,
            class,
            scheduled_s: num(scheduled)?,
            sent_s: num(sent)?,
            first_token_s: opt_num(Some(first))?,
            last_token_s: opt_num(Some(last))?,
            ended_s: num(ended)?,
            input_tokens: count(input)?,
            input_tokens_usage: match input_usage.map(at).filter(|v| !v.is_empty()) {
                None => None,
                Some(_) => Some(count(input_usage)?),
            },
            max_tokens: count(max)?,
            ttft_ms: num(ttft)?,
            tpot_ms: num(tpot)?,
            e2e_ms: num(e2e)?,
            output_tokens: count(Some(tokens))?,
            output_tokens_counted: count(counted)?,
            output_tokens_usage: match usage.map(at).filter(|v| !v.is_empty()) {
                None => None,
                Some(_) => Some(count(usage)?),
            },
            status,
            itl_ms: match itl.map(at).filter(|v| !v.is_empty()) {
                None => Vec::new(),
                Some(v) => v
                    .split(';')
                    .map(|g| g.parse::<f64>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| bad(itl.unwrap_or(0), "not `;`-joined numbers"))?,
            },
            finish_reason: text(finish),
            http_status: match http.map(at).filter(|v| !v.is_empty()) {
                None => None,
                Some(v) => Some(
                    v.parse()
                        .map_err(|_| bad(http.unwrap_or(0), "not an HTTP status"))?,
                ),
            },
            error_message: text(message),
        });
    }
    Ok(out)
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
        "input_tokens_usage",
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
            r.input_tokens_usage
                .map_or(String::new(), |u| u.to_string()),
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

/// What a run sent and got back over every request, warmup included (the engine's counters
/// see them all), for comparison with the engine's own figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunTotals {
    /// Requests that completed.
    pub completed: u64,
    /// Requests that failed or were cancelled (the engine may have counted part of them).
    pub not_completed: u64,
    /// Prompt tokens of the completed requests as scheduled: for token-id prompts exactly
    /// the ids sent.
    pub prompt_tokens_scheduled: u64,
    /// `usage.prompt_tokens` summed over the completed requests that reported it.
    pub prompt_tokens_usage: u64,
    /// Completed requests that reported `usage.prompt_tokens`.
    pub prompt_usage_reports: u64,
    /// Output tokens of the completed requests (usage when reported, else counted chunks).
    pub completion_tokens: u64,
    /// Sum of the completed requests' time to first token from their actual send (ms): the
    /// engine's TTFT plus the client and the wire, without the client's schedule lag.
    pub ttft_from_send_ms_sum: f64,
    /// The median of those (ms); `None` once runs were merged (a median does not add).
    pub ttft_from_send_p50_ms: Option<f64>,
    /// Completed requests by the length of the shared prefix their prompt began with
    /// (tokens; warm cache only): what a prefix cache can serve.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub shared_prefix_tokens: std::collections::BTreeMap<u32, u64>,
}

impl RunTotals {
    /// The totals of `records` (every record of a run), where a request's shared prefix is
    /// `prefix_tokens` long, capped one below its prompt (warm cache; `None`: cold).
    pub fn of(records: &[RequestRecord], prefix_tokens: Option<u32>) -> RunTotals {
        let done: Vec<&RequestRecord> = records.iter().filter(|r| r.ok()).collect();
        let mut ttft: Vec<f64> = done
            .iter()
            .filter_map(|r| Some((r.first_token_s? - r.sent_s) * 1e3))
            .collect();
        ttft.sort_by(f64::total_cmp);
        let mut shared = std::collections::BTreeMap::new();
        if let Some(p) = prefix_tokens {
            for r in &done {
                *shared
                    .entry(p.min(r.input_tokens.saturating_sub(1)))
                    .or_default() += 1;
            }
        }
        RunTotals {
            completed: done.len() as u64,
            not_completed: (records.len() - done.len()) as u64,
            prompt_tokens_scheduled: done.iter().map(|r| u64::from(r.input_tokens)).sum(),
            prompt_tokens_usage: done
                .iter()
                .filter_map(|r| r.input_tokens_usage.map(u64::from))
                .sum(),
            prompt_usage_reports: done
                .iter()
                .filter(|r| r.input_tokens_usage.is_some())
                .count() as u64,
            completion_tokens: done.iter().map(|r| u64::from(r.output_tokens)).sum(),
            ttft_from_send_ms_sum: ttft.iter().sum(),
            ttft_from_send_p50_ms: nearest_rank(&ttft, 0.5),
            shared_prefix_tokens: shared,
        }
    }

    /// `other`'s requests added to these (a continuation, a shard).
    pub fn add(&mut self, other: &RunTotals) {
        self.completed += other.completed;
        self.not_completed += other.not_completed;
        self.prompt_tokens_scheduled += other.prompt_tokens_scheduled;
        self.prompt_tokens_usage += other.prompt_tokens_usage;
        self.prompt_usage_reports += other.prompt_usage_reports;
        self.completion_tokens += other.completion_tokens;
        self.ttft_from_send_ms_sum += other.ttft_from_send_ms_sum;
        self.ttft_from_send_p50_ms = None;
        for (len, n) in &other.shared_prefix_tokens {
            *self.shared_prefix_tokens.entry(*len).or_default() += n;
        }
    }

    /// Times multiplied by `k` (a run against an engine `k` times faster than real time).
    pub fn rescale(&mut self, k: f64) {
        self.ttft_from_send_ms_sum *= k;
        self.ttft_from_send_p50_ms = self.ttft_from_send_p50_ms.map(|t| t * k);
    }

    /// Mean time to first token from the actual send (ms).
    pub fn mean_ttft_from_send_ms(&self) -> Option<f64> {
        (self.completed > 0).then(|| self.ttft_from_send_ms_sum / self.completed as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(index: u64, class: usize, status: &'static str) -> RequestRecord {
        let ok = status == "ok";
        RequestRecord {
            index,
            class,
            scheduled_s: 1.5,
            sent_s: 1.501,
            first_token_s: ok.then_some(1.625),
            last_token_s: ok.then_some(2.0),
            ended_s: 2.125,
            input_tokens: 512,
            input_tokens_usage: None,
            max_tokens: 32,
            ttft_ms: if ok { 125.0 } else { 0.0 },
            tpot_ms: if ok { 12.25 } else { 0.0 },
            e2e_ms: if ok { 500.0 } else { 0.0 },
            output_tokens: if ok { 32 } else { 0 },
            output_tokens_counted: if ok { 32 } else { 0 },
            output_tokens_usage: ok.then_some(32),
            status,
            itl_ms: if ok { vec![12.5, 12.0] } else { Vec::new() },
            finish_reason: ok.then(|| "length".to_owned()),
            http_status: if ok { Some(200) } else { Some(503) },
            error_message: (!ok).then(|| "HTTP 503, \"overloaded\"".to_owned()),
        }
    }

    #[test]
    fn records_read_back_as_they_were_written() {
        let names = vec!["chat".to_owned(), "long".to_owned()];
        let records = vec![record(3, 1, "ok"), record(7, 0, "http_error")];
        for itl in [false, true] {
            let mut csv = Vec::new();
            write_requests_csv(&mut csv, &records, &names, itl).expect("written");
            let back = read_records(&csv, "requests.csv", &names).expect("read back");
            let mut want = records.clone();
            if !itl {
                want[0].itl_ms.clear();
            }
            assert_eq!(back, want);
        }
    }

    #[test]
    fn a_bad_value_names_its_line_and_column() {
        let names = vec!["chat".to_owned(), "long".to_owned()];
        let mut csv = Vec::new();
        write_requests_csv(
            &mut csv,
            &[record(0, 0, "ok"), record(1, 0, "ok")],
            &names,
            false,
        )
        .expect("written");
        let text = String::from_utf8(csv).expect("utf-8");
        let broken = text.replacen("r-0000001,chat", "r-0000001,other", 1);
        let e = read_records(broken.as_bytes(), "shard 0/1", &names).expect_err("a bad class");
        assert!(e.starts_with("shard 0/1:3: column 2 (class)"), "{e}");
        let broken = text.replacen(",ok,", ",gone,", 1);
        let e = read_records(broken.as_bytes(), "shard 0/1", &names).expect_err("a bad status");
        assert!(e.contains(":2: column 7 (status)"), "{e}");
    }
}
