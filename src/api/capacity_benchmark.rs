//! `CapacityBenchmark`: what to measure (target, frozen workload, experiments, cache modes),
//! how to judge it (acceptance), how often (repeats) and what to plan for (peak).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::workload::{Acceptance, WorkloadManifest};

/// A capacity benchmark: saturation sweep, open-loop rate sweep per cache mode, the
/// per-class gate at every point, capacity, per-replica capacity and the replica plan for a
/// forecast peak.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "goodput.dev",
    version = "v1alpha1",
    kind = "CapacityBenchmark",
    plural = "capacitybenchmarks",
    shortname = "cbench",
    namespaced,
    status = "CapacityBenchmarkStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Capacity","type":"number","jsonPath":".status.capacityRps","description":"Highest passing offered rate (RPS)"}"#,
    printcolumn = r#"{"name":"Per-replica","type":"number","jsonPath":".status.capacityPerReplicaRps"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".status.requiredReplicas","description":"Replicas needed for the peak"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBenchmarkSpec {
    /// The server under test. Without `url`, the built-in simulated engine (`simulated`).
    #[serde(default)]
    pub target: Target,
    /// The frozen workload manifest, inline or by reference.
    pub workload: WorkloadSource,
    /// Which experiments to run. Absent: a saturation sweep, then an open-loop rate sweep
    /// around the knee it finds, with a cold cache.
    #[serde(default)]
    pub experiments: Experiments,
    /// Replaces the manifest's `acceptance` (the gate) when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<Acceptance>,
    /// Runs of every point, each with a fresh schedule from a derived seed. A rate counts
    /// as passing only if it passes in every repeat.
    #[serde(default = "one")]
    pub repeats: u32,
    /// The forecast peak to plan replicas for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak: Option<PeakForecast>,
    /// What the reports show.
    #[serde(default)]
    pub reporting: Reporting,
}

fn one() -> u32 {
    1
}

/// The server under test.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// Base URL of an OpenAI-compatible server (`http://host:port`). Absent: the simulated
    /// engine is started in-process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Model name sent with every request. Default: the manifest's `model.id` (a URL
    /// target) or the preset's model (simulated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Endpoint: `completions` (token-id prompts) or `chat` (text prompts).
    #[serde(default)]
    pub api: TargetApi,
    /// Engine `/metrics` base URLs (one per replica) scraped during every point.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics_urls: Vec<String>,
    /// Read engine metrics from a Prometheus server instead of scraping the replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusSource>,
    /// Replicas serving during the benchmark (per-replica capacity divides by it).
    /// Default: `simulated.replicas`, else the manifest's `engine.placement.replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// GPUs per replica (the plan's GPU count). Default: the manifest's placement
    /// (`gpus / replicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_replica: Option<u32>,
    /// The built-in simulated engine's setup (used when `url` is absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated: Option<SimulatedTarget>,
}

/// Which OpenAI-compatible endpoint requests use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum TargetApi {
    /// `POST /v1/completions` with token-id prompts of exact length.
    #[default]
    Completions,
    /// `POST /v1/chat/completions` with text prompts.
    Chat,
}

/// A Prometheus server holding the engine's metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusSource {
    /// Base URL, e.g. `http://prometheus.monitoring:9090`.
    pub url: String,
    /// Label matchers selecting the target's series, e.g. `namespace="llm",job="vllm"`.
    #[serde(default)]
    pub selector: String,
    /// Resolution of `query_range` (seconds).
    #[serde(default = "default_step")]
    pub step_seconds: f64,
}

fn default_step() -> f64 {
    5.0
}

/// The built-in simulated engine: replicas of the engine model behind a router.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SimulatedTarget {
    /// Hardware and model preset (`goodput simulate --list-presets`).
    #[serde(default = "default_preset")]
    pub preset: String,
    /// Setup fields replaced, e.g. `{prefix_caching: true, max_num_seqs: 512}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "preserve_unknown_fields")]
    pub overrides: BTreeMap<String, serde_json::Value>,
    /// Replicas behind the router.
    #[serde(default = "one")]
    pub replicas: u32,
    /// Run the engine K times faster than real time. Inside the run every duration
    /// (latencies, cutoffs, warmup, minimum duration, timeouts) is divided by K and every
    /// rate multiplied by K; reports convert back, so verdicts are those of a real-time run.
    #[serde(default = "one_f")]
    pub time_scale: f64,
    /// Tokens per SSE frame, as engines with a stream interval send them. TPOT is
    /// unaffected; ITL is then per frame.
    #[serde(default = "one")]
    pub stream_interval: u32,
}

impl Default for SimulatedTarget {
    fn default() -> Self {
        SimulatedTarget {
            preset: default_preset(),
            overrides: BTreeMap::new(),
            replicas: 1,
            time_scale: 1.0,
            stream_interval: 1,
        }
    }
}

fn default_preset() -> String {
    "qwen2.5-7b-h100".into()
}

fn one_f() -> f64 {
    1.0
}

fn preserve_unknown_fields(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Where the frozen workload manifest comes from (exactly one).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSource {
    /// The manifest inline (the `workload-manifest.yaml` schema, snake_case fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<Box<WorkloadManifest>>,
    /// A manifest file, relative to the benchmark file (local runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_file: Option<String>,
    /// A ConfigMap key holding the manifest (cluster runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_config_map: Option<ConfigMapKey>,
}

/// A key of a ConfigMap in the benchmark's namespace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKey {
    /// ConfigMap name.
    pub name: String,
    /// Key holding the manifest YAML.
    #[serde(default = "default_manifest_key")]
    pub key: String,
}

fn default_manifest_key() -> String {
    "workload-manifest.yaml".into()
}

/// The experiments of one benchmark.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Experiments {
    /// Closed loop over concurrency levels: finds the throughput-latency knee and proposes
    /// the rate sweep's range. Never a capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturation: Option<Saturation>,
    /// Open loop at offered rates: the only experiment that validates a capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_sweep: Option<RateSweep>,
    /// Cache states, each swept and reported separately (never averaged).
    #[serde(default = "default_cache_modes")]
    pub cache_modes: Vec<CacheModeName>,
    /// Shared prefixes of the warm cache.
    #[serde(default)]
    pub warm_pool: WarmPool,
    /// Prompts of a cold run: `unique` (nothing to reuse). `repeated` sends one prompt
    /// again and again, which the prefix cache serves: such a run is not cold and is refused.
    #[serde(default)]
    pub cold_prompts: ColdPrompts,
    /// Most schedule blocks per point while meeting the minimum duration and the sample
    /// rule (failures are made up with further blocks).
    #[serde(default = "default_max_blocks")]
    pub max_blocks: u32,
    /// A point whose schedule-lag P99 (ms, on the run's own clock) exceeds this is invalid.
    #[serde(default = "default_max_lag")]
    pub max_lag_ms: f64,
    /// Engine-metrics scrape interval (seconds of model time).
    #[serde(default = "one_f")]
    pub scrape_interval_seconds: f64,
}

impl Default for Experiments {
    fn default() -> Self {
        Experiments {
            saturation: None,
            rate_sweep: None,
            cache_modes: default_cache_modes(),
            warm_pool: WarmPool::default(),
            cold_prompts: ColdPrompts::default(),
            max_blocks: default_max_blocks(),
            max_lag_ms: default_max_lag(),
            scrape_interval_seconds: 1.0,
        }
    }
}

fn default_cache_modes() -> Vec<CacheModeName> {
    vec![CacheModeName::Cold]
}

fn default_max_blocks() -> u32 {
    10
}

fn default_max_lag() -> f64 {
    10.0
}

/// The saturation (closed-loop) experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Saturation {
    /// Concurrency levels (requests in flight), ascending.
    #[serde(default = "default_concurrency")]
    pub concurrency: Vec<u32>,
    /// Seconds each level runs (model time).
    #[serde(default = "default_saturation_duration")]
    pub duration_seconds: f64,
}

impl Default for Saturation {
    fn default() -> Self {
        Saturation {
            concurrency: default_concurrency(),
            duration_seconds: default_saturation_duration(),
        }
    }
}

fn default_concurrency() -> Vec<u32> {
    vec![4, 8, 16, 32, 64, 128]
}

fn default_saturation_duration() -> f64 {
    60.0
}

/// The rate sweep (open loop).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateSweep {
    /// Offered rates (requests per second). Empty: derived from the saturation knee.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rates: Vec<f64>,
    /// Points of a derived sweep.
    #[serde(default = "default_points")]
    pub points: u32,
    /// Lowest derived rate as a fraction of the knee's throughput.
    #[serde(default = "default_low")]
    pub low_fraction: f64,
    /// Highest derived rate as a fraction of the knee's throughput.
    #[serde(default = "default_high")]
    pub high_fraction: f64,
}

impl Default for RateSweep {
    fn default() -> Self {
        RateSweep {
            rates: Vec::new(),
            points: default_points(),
            low_fraction: default_low(),
            high_fraction: default_high(),
        }
    }
}

fn default_points() -> u32 {
    5
}

fn default_low() -> f64 {
    0.6
}

fn default_high() -> f64 {
    1.2
}

/// A cache state.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum CacheModeName {
    /// Unique prompts: the prefix cache has nothing to reuse.
    Cold,
    /// A pinned pool of shared prefixes, prewarmed before each point.
    Warm,
}

/// Prompts of a cold run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ColdPrompts {
    /// Every prompt unique.
    #[default]
    Unique,
    /// One prompt repeated (refused: the prefix cache makes it warm).
    Repeated,
}

/// The warm cache's shared prefixes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WarmPool {
    /// Distinct shared prefixes.
    #[serde(default = "default_prefixes")]
    pub prefixes: u32,
    /// Tokens per prefix (at most each class's input length).
    #[serde(default = "default_prefix_tokens")]
    pub prefix_tokens: u32,
    /// Zipf exponent of prefix popularity (0 = uniform).
    #[serde(default = "one_f")]
    pub zipf: f64,
}

impl Default for WarmPool {
    fn default() -> Self {
        WarmPool {
            prefixes: default_prefixes(),
            prefix_tokens: default_prefix_tokens(),
            zipf: 1.0,
        }
    }
}

fn default_prefixes() -> u32 {
    16
}

fn default_prefix_tokens() -> u32 {
    512
}

/// The peak to plan for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeakForecast {
    /// Forecast peak arrival rate (requests per second), same workload mix.
    pub rps: f64,
    /// Planned utilization of capacity. Default: the acceptance's `target_utilization`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_utilization: Option<f64>,
    /// Cache state the plan uses. Default: the lowest capacity among the cache modes run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_mode: Option<CacheModeName>,
}

/// A latency statistic shown in reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Statistic {
    /// Arithmetic mean (never enough alone: it hides the tail).
    Mean,
    /// Median.
    P50,
    /// 95th percentile (nearest rank).
    P95,
    /// 99th percentile (nearest rank; needs 10,000 successes to be adequate).
    P99,
}

/// What the reports show.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reporting {
    /// Latency statistics per class in summaries. Must include a percentile.
    #[serde(default = "default_statistics")]
    pub statistics: Vec<Statistic>,
}

impl Default for Reporting {
    fn default() -> Self {
        Reporting {
            statistics: default_statistics(),
        }
    }
}

fn default_statistics() -> Vec<Statistic> {
    vec![Statistic::P50, Statistic::P95, Statistic::P99]
}

/// What the operator (or `goodput bench`) found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBenchmarkStatus {
    /// `Pending`, `Running`, `Succeeded` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Highest passing offered rate (RPS) of the plan's cache mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_rps: Option<f64>,
    /// Capacity divided by the replicas under test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_per_replica_rps: Option<f64>,
    /// Replicas for the forecast peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_replicas: Option<u32>,
    /// `Validated`, `Running`, `Complete` and their reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
