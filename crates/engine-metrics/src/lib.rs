//! Engine metrics: scraping the Prometheus `/metrics` pages of inference engines while a
//! test point runs, and reading them as engine-independent concepts (waiting queue,
//! running requests, KV usage, prefix-cache hits, preemptions, token counters, latency
//! histograms).
//!
//! - [`mod@parse`]: Prometheus text exposition → flat samples (pure; handles the colons in
//!   `vllm:`/`sglang:` names).
//! - [`profile`]: per-engine name tables (vLLM with its older aliases, SGLang,
//!   TensorRT-LLM, Triton's TRT-LLM backend, Dynamo frontend, DCGM), engine detection and
//!   concept values (pure).
//! - [`series`]: the time series kept during a point (`engine-metrics.json`) and what is
//!   derived from it (queue series, counter deltas over the window).
//! - [`scrape`]: the scrape loop over HTTP, target discovery from the simulated engine's
//!   router, and target lists from files.
//! - [`identify`]: what a target says it runs (engine, version, models) and whether its
//!   engine pages answer, asked before it is measured.
//!
//! Re-exported as `goodput::engine_metrics`.

// The pure half (the text format, the profiles, the series, their findings and the truth
// check) is the core's; this crate adds what reads pages over HTTP. (`parse` names the
// module and its function both.)
pub use goodput_core::engine_metrics::{findings, parse, profile, series, truth};

pub mod identify;
pub mod prometheus_api;
pub mod scrape;

pub use parse::{Exposition, MetricType, Sample};
pub use profile::{Concept, DetectedProfile, EngineKind, MetricKind, Profile, detect};
pub use prometheus_api::{PrometheusError, PrometheusQuery, query_range_series};
pub use scrape::{
    DiscoverError, ScrapeError, TargetsError, discover_targets, parse_targets, read_targets_file,
    scrape_loop, scrape_once,
};
pub use series::{Across, Coverage, MetricsSeries, ScrapeSample};
