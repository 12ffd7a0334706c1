//! Server-side metrics of one simulated replica and their Prometheus text exposition
//! (format 0.0.4) under vLLM's or SGLang's names.
//!
//! The engine thread owns a [`ServerMetrics`] and copies it, with the engine's gauges and
//! counters, into the shared [`Published`] snapshot once per step; `/metrics` renders the
//! snapshot. Latencies are wall-clock seconds as the server sees them (so a time scale
//! of K shrinks them K-fold).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use super::MetricsFlavor;
use goodput_model::engine::EngineStats;

/// vLLM's TTFT buckets (seconds).
const VLLM_TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's inter-token latency (and per-request TPOT) buckets.
const VLLM_ITL: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM's request-latency buckets (e2e, queue, prefill, decode, inference).
const VLLM_REQUEST: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// SGLang's default TTFT buckets.
const SGLANG_TTFT: &[f64] = &[
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
    400.0,
];
/// SGLang's default inter-token latency buckets.
const SGLANG_ITL: &[f64] = &[
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
];
/// SGLang's default e2e latency buckets.
const SGLANG_E2E: &[f64] = &[
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
    400.0, 600.0, 1200.0, 1800.0, 2400.0,
];
/// SGLang's queue-time buckets.
const SGLANG_QUEUE: &[f64] = &[
    0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0,
    80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0,
    1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0,
];

/// A cumulative histogram with fixed upper bounds (the `+Inf` bucket is implicit).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Histogram {
    bounds: &'static [f64],
    /// Per-bucket (not cumulative) counts; the last entry is the `+Inf` bucket.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    /// Records one value (negative values count as 0).
    pub(crate) fn observe(&mut self, v: f64) {
        let v = if v.is_finite() { v.max(0.0) } else { 0.0 };
        let i = self.bounds.partition_point(|&b| b < v);
        self.counts[i] += 1;
        self.sum += v;
    }

    /// Number of observations.
    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Sum of observations.
    #[cfg(test)]
    pub(crate) fn sum(&self) -> f64 {
        self.sum
    }
}

/// Histograms and request counters kept by the engine thread.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ServerMetrics {
    /// Arrival to first token.
    pub ttft: Histogram,
    /// Between consecutive tokens of a request (one observation per token).
    pub itl: Histogram,
    /// Arrival to last token.
    pub e2e: Histogram,
    /// Arrival to the (most recent) scheduling of the request.
    pub queue: Histogram,
    /// Per request: (last token − first token) / (tokens − 1).
    pub tpot: Histogram,
    /// Requests finished by reaching `max_tokens`.
    pub finished_length: u64,
    /// Requests finished by "sampling EOS" (a length shorter than `max_tokens`).
    pub finished_stop: u64,
    /// Requests cancelled (client gone, stream cut, replica killed).
    pub aborted: u64,
}

impl ServerMetrics {
    pub(crate) fn new(flavor: MetricsFlavor) -> Self {
        let (ttft, itl, e2e, queue) = match flavor {
            MetricsFlavor::Vllm => (VLLM_TTFT, VLLM_ITL, VLLM_REQUEST, VLLM_REQUEST),
            MetricsFlavor::Sglang => (SGLANG_TTFT, SGLANG_ITL, SGLANG_E2E, SGLANG_QUEUE),
        };
        ServerMetrics {
            ttft: Histogram::new(ttft),
            itl: Histogram::new(itl),
            e2e: Histogram::new(e2e),
            queue: Histogram::new(queue),
            tpot: Histogram::new(VLLM_ITL),
            finished_length: 0,
            finished_stop: 0,
            aborted: 0,
        }
    }
}

/// What `/metrics` renders: the engine's counters and gauges after the latest step, and the
/// server's histograms.
#[derive(Clone, Debug)]
pub(crate) struct Published {
    pub stats: EngineStats,
    pub metrics: ServerMetrics,
}

/// Fixed text of one exposition.
pub(crate) struct Exposition<'a> {
    pub flavor: MetricsFlavor,
    pub model: &'a str,
    /// Value of vLLM's `engine` label.
    pub engine: &'a str,
    /// KV capacity in tokens (SGLang's `max_total_num_tokens`).
    pub kv_capacity_tokens: u64,
}

/// Formats a sample value the way Python's prometheus_client does (`3.0`, `0.25`).
fn num(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if v.is_nan() {
        return "NaN".into();
    }
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Writes the text exposition of one metric family at a time; labels are given sorted
/// by name, as prometheus_client prints them.
struct Writer {
    out: String,
    /// `(name, escaped value)` pairs common to every sample, sorted by name.
    labels: Vec<(&'static str, String)>,
}

impl Writer {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// The label set with `extra` merged in name order.
    fn label_set(&self, extra: &[(&'static str, &str)]) -> String {
        let mut all: Vec<(&str, String)> = self
            .labels
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .chain(extra.iter().map(|(k, v)| (*k, escape_label(v))))
            .collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        if all.is_empty() {
            return String::new();
        }
        let body: Vec<String> = all.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        format!("{{{}}}", body.join(","))
    }

    fn sample(&mut self, name: &str, extra: &[(&'static str, &str)], v: f64) {
        let labels = self.label_set(extra);
        let _ = writeln!(self.out, "{name}{labels} {}", num(v));
    }

    fn gauge(&mut self, name: &str, help: &str, v: f64) {
        self.header(name, "gauge", help);
        self.sample(name, &[], v);
    }

    fn counter(&mut self, name: &str, help: &str, v: u64) {
        self.header(name, "counter", help);
        self.sample(name, &[], v as f64);
    }

    fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.header(name, "histogram", help);
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0;
        for (i, &b) in h.bounds.iter().enumerate() {
            cumulative += h.counts[i];
            let le = num(b);
            self.sample(&bucket, &[("le", &le)], cumulative as f64);
        }
        cumulative += h.counts[h.bounds.len()];
        self.sample(&bucket, &[("le", "+Inf")], cumulative as f64);
        self.sample(&format!("{name}_count"), &[], cumulative as f64);
        self.sample(&format!("{name}_sum"), &[], h.sum);
    }
}

/// Renders the whole `/metrics` page.
pub(crate) fn render(
    exp: &Exposition<'_>,
    p: &Published,
    lateness: Option<&LatenessRecorder>,
) -> String {
    let s = &p.stats;
    let m = &p.metrics;
    let mut w = Writer {
        out: String::with_capacity(16 * 1024),
        labels: Vec::new(),
    };
    match exp.flavor {
        MetricsFlavor::Vllm => {
            w.labels = vec![
                ("engine", escape_label(exp.engine)),
                ("model_name", escape_label(exp.model)),
            ];
            w.gauge(
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                s.running as f64,
            );
            w.gauge(
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                s.waiting as f64,
            );
            w.gauge(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                s.kv_usage,
            );
            w.counter(
                "vllm:prefix_cache_queries_total",
                "Prefix cache queries, in terms of number of queried tokens.",
                s.prefix_cache_queries_total,
            );
            w.counter(
                "vllm:prefix_cache_hits_total",
                "Prefix cache hits, in terms of number of cached tokens.",
                s.prefix_cache_hits_total,
            );
            w.counter(
                "vllm:num_preemptions_total",
                "Cumulative number of preemption from the engine.",
                s.preemptions_total,
            );
            w.counter(
                "vllm:prompt_tokens_total",
                "Number of prefill tokens processed.",
                s.prompt_tokens_total,
            );
            w.counter(
                "vllm:generation_tokens_total",
                "Number of generation tokens processed.",
                s.generation_tokens_total,
            );
            let name = "vllm:request_success_total";
            w.header(name, "counter", "Count of successfully processed requests.");
            for (reason, v) in [
                ("stop", m.finished_stop),
                ("length", m.finished_length),
                ("abort", m.aborted),
                ("error", 0),
            ] {
                w.sample(name, &[("finished_reason", reason)], v as f64);
            }
            w.histogram(
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                &m.ttft,
            );
            w.histogram(
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                &m.itl,
            );
            w.histogram(
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                &m.e2e,
            );
            w.histogram(
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                &m.queue,
            );
            w.histogram(
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                &m.tpot,
            );
        }
        MetricsFlavor::Sglang => {
            w.labels = vec![
                ("engine_type", "unified".into()),
                ("model_name", escape_label(exp.model)),
                ("pp_rank", "0".into()),
                ("tp_rank", "0".into()),
            ];
            w.gauge(
                "sglang:num_running_reqs",
                "The number of running requests.",
                s.running as f64,
            );
            w.gauge(
                "sglang:num_queue_reqs",
                "The number of requests in the waiting queue.",
                s.waiting as f64,
            );
            w.gauge(
                "sglang:num_used_tokens",
                "The number of used tokens.",
                (s.kv_usage * exp.kv_capacity_tokens as f64).round(),
            );
            w.gauge("sglang:token_usage", "The token usage.", s.kv_usage);
            w.gauge(
                "sglang:max_total_num_tokens",
                "Maximum total number of tokens in the KV cache pool.",
                exp.kv_capacity_tokens as f64,
            );
            let hit_rate = if s.prefix_cache_queries_total == 0 {
                0.0
            } else {
                s.prefix_cache_hits_total as f64 / s.prefix_cache_queries_total as f64
            };
            w.gauge(
                "sglang:cache_hit_rate",
                "The prefix cache hit rate.",
                hit_rate,
            );
            w.counter(
                "sglang:prompt_tokens_total",
                "Number of prefill tokens processed.",
                s.prompt_tokens_total,
            );
            w.counter(
                "sglang:generation_tokens_total",
                "Number of generation tokens processed.",
                s.generation_tokens_total,
            );
            w.counter(
                "sglang:cached_tokens_total",
                "Number of cached prompt tokens.",
                s.prefix_cache_hits_total,
            );
            w.counter(
                "sglang:num_requests_total",
                "Number of requests processed.",
                m.finished_length + m.finished_stop,
            );
            w.counter(
                "sglang:num_aborted_requests_total",
                "Number of requests aborted.",
                m.aborted,
            );
            w.histogram(
                "sglang:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                &m.ttft,
            );
            w.histogram(
                "sglang:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                &m.itl,
            );
            w.histogram(
                "sglang:e2e_request_latency_seconds",
                "Histogram of End-to-end request latency in seconds",
                &m.e2e,
            );
            w.histogram(
                "sglang:queue_time_seconds",
                "Histogram of queueing time in seconds.",
                &m.queue,
            );
        }
    }
    if let Some(l) = lateness {
        let snap = l.snapshot();
        w.labels.clear();
        w.gauge(
            "goodput_sim_frame_lateness_p99_seconds",
            "Benchmark instrumentation: 99th percentile of (frame handed to the HTTP layer - step end the model scheduled it for).",
            snap.p99_us * 1e-6,
        );
        w.counter(
            "goodput_sim_frames_total",
            "Benchmark instrumentation: token frames handed to the HTTP layer.",
            snap.count,
        );
    }
    w.out
}

/// Buckets of [`LatenessRecorder`]: exact below 64 µs, then 32 per power of two
/// (about 3% wide), up to about 2^40 µs.
const LATENESS_BUCKETS: usize = 64 + 35 * 32;

fn lateness_bucket(us: u64) -> usize {
    if us < 64 {
        return us as usize;
    }
    let e = 63 - us.leading_zeros() as usize; // 6..
    let m = ((us >> (e - 5)) & 31) as usize;
    (64 + (e - 6) * 32 + m).min(LATENESS_BUCKETS - 1)
}

/// Upper bound (µs) of a bucket.
fn lateness_upper(i: usize) -> u64 {
    if i < 64 {
        return i as u64;
    }
    let e = (i - 64) / 32 + 6;
    let m = ((i - 64) % 32) as u64;
    ((32 + m + 1) << (e - 5)) - 1
}

/// Lock-free histogram of lateness values (microsecond resolution), for the serve-sim
/// benchmark. Only allocated when `record_lateness` is on; every recording is a few
/// relaxed atomic adds.
#[derive(Debug)]
pub struct LatenessRecorder {
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_us: AtomicU64,
    max_us: AtomicU64,
}

/// Summary of a [`LatenessRecorder`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatenessSnapshot {
    /// Values recorded.
    pub count: u64,
    /// Mean (µs).
    pub mean_us: f64,
    /// Median (µs, bucket upper bound).
    pub p50_us: f64,
    /// 90th percentile (µs).
    pub p90_us: f64,
    /// 99th percentile (µs).
    pub p99_us: f64,
    /// 99.9th percentile (µs).
    pub p999_us: f64,
    /// Largest value (µs, exact).
    pub max_us: f64,
}

impl Default for LatenessRecorder {
    fn default() -> Self {
        LatenessRecorder {
            buckets: (0..LATENESS_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
            max_us: AtomicU64::new(0),
        }
    }
}

impl LatenessRecorder {
    /// Records one lateness.
    pub fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.buckets[lateness_bucket(us)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// Forgets everything recorded so far.
    pub fn reset(&self) {
        for b in &self.buckets {
            b.store(0, Ordering::Relaxed);
        }
        self.count.store(0, Ordering::Relaxed);
        self.sum_us.store(0, Ordering::Relaxed);
        self.max_us.store(0, Ordering::Relaxed);
    }

    /// Percentiles of what was recorded (racy against concurrent recording, which only
    /// blurs the edges of a live window).
    pub fn snapshot(&self) -> LatenessSnapshot {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return LatenessSnapshot::default();
        }
        let pct = |q: f64| {
            let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
            let mut seen = 0;
            for (i, &c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return lateness_upper(i) as f64;
                }
            }
            lateness_upper(LATENESS_BUCKETS - 1) as f64
        };
        LatenessSnapshot {
            count: total,
            mean_us: self.sum_us.load(Ordering::Relaxed) as f64 / total as f64,
            p50_us: pct(0.5),
            p90_us: pct(0.9),
            p99_us: pct(0.99),
            p999_us: pct(0.999),
            max_us: self.max_us.load(Ordering::Relaxed) as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_upper_inclusive() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.1, 0.5, 1.0, 7.0, -1.0] {
            h.observe(v);
        }
        assert_eq!(h.counts, vec![3, 2, 1]);
        assert_eq!(h.count(), 6);
        assert!((h.sum() - 8.65).abs() < 1e-12);
    }

    #[test]
    fn values_print_like_prometheus_client() {
        assert_eq!(num(3.0), "3.0");
        assert_eq!(num(0.25), "0.25");
        assert_eq!(num(2560.0), "2560.0");
        assert_eq!(num(f64::INFINITY), "+Inf");
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn histogram_exposition_is_cumulative() {
        let mut m = ServerMetrics::new(MetricsFlavor::Vllm);
        m.ttft.observe(0.003);
        m.ttft.observe(0.03);
        m.ttft.observe(5000.0);
        let p = Published {
            stats: EngineStats::default(),
            metrics: m,
        };
        let exp = Exposition {
            flavor: MetricsFlavor::Vllm,
            model: "m",
            engine: "0",
            kv_capacity_tokens: 100,
        };
        let text = render(&exp, &p, None);
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.starts_with(needle))
                .unwrap_or_else(|| panic!("no {needle} in\n{text}"))
                .to_string()
        };
        assert_eq!(
            line("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.001\""),
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.001\",model_name=\"m\"} 0.0"
        );
        assert!(
            line("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.005\"")
                .ends_with(" 1.0")
        );
        assert!(
            line("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"2560.0\"")
                .ends_with(" 2.0")
        );
        assert!(
            line("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\"")
                .ends_with(" 3.0")
        );
        assert!(line("vllm:time_to_first_token_seconds_count").ends_with(" 3.0"));
        assert!(text.contains("# TYPE vllm:prompt_tokens_total counter\n"));
    }

    #[test]
    fn lateness_buckets_round_up_by_at_most_a_few_percent() {
        for us in [0u64, 1, 63, 64, 65, 100, 999, 1000, 12_345, 1 << 30] {
            let i = lateness_bucket(us);
            let hi = lateness_upper(i);
            assert!(hi >= us, "{us} -> bucket {i} upper {hi}");
            assert!(hi as f64 <= us as f64 * 1.04 + 1.0, "{us} -> {hi}");
            if i > 0 {
                assert!(
                    lateness_upper(i - 1) < us,
                    "{us} also fits bucket {}",
                    i - 1
                );
            }
        }
        let r = LatenessRecorder::default();
        for us in 1..=1000u64 {
            r.record(Duration::from_micros(us));
        }
        let s = r.snapshot();
        assert_eq!(s.count, 1000);
        assert!((495.0..=520.0).contains(&s.p50_us), "{s:?}");
        assert!((990.0..=1030.0).contains(&s.p99_us), "{s:?}");
        assert_eq!(s.max_us, 1000.0);
        r.reset();
        assert_eq!(r.snapshot().count, 0);
    }
}
