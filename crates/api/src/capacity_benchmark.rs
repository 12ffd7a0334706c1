//! `CapacityBenchmark`: what to measure (target, frozen workload, experiments, cache modes),
//! how to judge it (acceptance), how often (repeats) and what to plan for (peak).

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::CapacityBenchmarkStatus;
use crate::benchmark::driver::{RateSource, SaturationPlan, SweepPlan};
use crate::workload::{Acceptance, WorkloadManifest};

/// A capacity benchmark: saturation sweep, open-loop rate sweep per cache mode, the
/// per-class gate at every point, capacity, per-replica capacity and the replica plan for a
/// forecast peak.
// The `doc` below is the CRD's top-level description (`kubectl explain cb`); these comments
// stay out of the schema. Clippy reads the columns' repeated `type_ = "string"` as one
// attribute given twice: they are arguments of different `printcolumn(...)` entries.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "goodput.dev",
    version = "v1alpha1",
    kind = "CapacityBenchmark",
    plural = "capacitybenchmarks",
    shortname = "cb",
    shortname = "cbench",
    namespaced,
    status = "CapacityBenchmarkStatus",
    doc = "CapacityBenchmark measures how many requests per second an LLM inference server \
           serves while every workload class meets its latency SLOs: a saturation sweep \
           finds the knee, an open-loop rate sweep per cache mode finds the highest rate \
           that passes the per-class gate, and the status gives that capacity, the \
           capacity per replica and the replicas a forecast peak needs.",
    printcolumn(
        name = "Target",
        type_ = "string",
        json_path = ".status.target",
        description = "The server under test"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Pending, Running, Succeeded or Failed"
    ),
    printcolumn(
        name = "Point",
        type_ = "string",
        json_path = ".status.currentPoint.label",
        description = "The point being measured"
    ),
    printcolumn(
        name = "Capacity",
        type_ = "number",
        json_path = ".status.capacityRps",
        description = "Highest passing offered rate (RPS)"
    ),
    printcolumn(
        name = "Per-replica",
        type_ = "number",
        json_path = ".status.capacityPerReplicaRps",
        description = "Capacity per replica under test (RPS)"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.requiredReplicas",
        description = "Replicas needed for the peak"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBenchmarkSpec {
    /// The server under test: `url`, `service` or `simulated`, at most one. None of them:
    /// the built-in simulated engine with its defaults.
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
    /// How the operator runs each point's load generator (cluster runs only).
    #[serde(default, skip_serializing_if = "LoadgenSettings::is_default")]
    pub loadgen: LoadgenSettings,
    /// Faults injected at a passing rate after the sweep, each its own test and report
    /// (`goodput bench` against the simulated engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_test: Option<super::FailureTest>,
}

/// How the operator runs each point's load generator: one Job per point, an Indexed Job
/// of `shards` pods when one pod cannot drive the rate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("!(has(self.resultsClaim) && has(self.resultsBucket))")
    .message("give at most one of resultsClaim and resultsBucket"))]
#[serde(rename_all = "camelCase")]
pub struct LoadgenSettings {
    /// Pods per open-loop point, each sending its share of the same seeded schedule on one
    /// timeline. Default: enough that no pod sends more than 400 requests per second of
    /// wall time. Closed-loop (saturation) levels always run in one pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub shards: Option<u32>,
    /// A PersistentVolumeClaim in the benchmark's namespace that keeps every shard's raw
    /// results (`requests.csv`, `summary.json`, `engine-metrics.json`) under
    /// `<benchmark>/g<generation>/<job>/shard-<i>/`, for `goodput analyze` later. The
    /// claim must be writable by all of a point's pods at once (ReadWriteMany, or one
    /// node). Without it or `resultsBucket`, each shard's results live only in its result
    /// ConfigMap. At most one of `resultsClaim` and `resultsBucket`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results_claim: Option<String>,
    /// An S3-compatible bucket (AWS S3, MinIO, Ceph, R2, ...) that keeps every shard's raw
    /// results, the same files under the same `<benchmark>/g<generation>/<job>/shard-<i>/`
    /// as `resultsClaim`, below the bucket URL's prefix. Each pod uploads its files when
    /// its load has run; an upload that fails fails the pod (and so the point, once the
    /// operator's retries are spent). At most one of `resultsClaim` and `resultsBucket`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results_bucket: Option<ResultsBucket>,
}

/// An S3-compatible bucket for the shards' raw results.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResultsBucket {
    /// `s3://<bucket>` or `s3://<bucket>/<prefix>`: shard `i` of Job `<job>` writes under
    /// `<prefix>/<benchmark>/g<generation>/<job>/shard-<i>/`. The bucket must exist.
    #[x_kube(validation = Rule::new("self.matches('^s3://[^/]+(/.*)?$')")
        .message("must be s3://<bucket> or s3://<bucket>/<prefix>"))]
    pub url: String,
    /// The S3 API endpoint of a server other than AWS (`https://minio.example:9000`,
    /// `https://<account>.r2.cloudflarestorage.com`); requests then use path-style URLs.
    /// Default: AWS S3 of `region`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The bucket's region (signing region). Default: the pods' `AWS_REGION` or
    /// `AWS_DEFAULT_REGION`, else `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// A Secret in the benchmark's namespace with keys `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY` (and optionally `AWS_SESSION_TOKEN`), given to the loadgen
    /// pods as environment variables; the operator never reads it. Absent: the pods use
    /// the credentials their environment provides (web identity, instance metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// Allow a plain `http://` endpoint (a server without TLS). Default: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_http: bool,
}

impl ResultsBucket {
    /// The bucket and the prefix of `url` ([`split_s3_url`]).
    pub fn bucket_and_prefix(&self) -> Option<(&str, &str)> {
        split_s3_url(&self.url)
    }
}

/// The bucket and the prefix (without surrounding `/`, possibly empty) of an
/// `s3://<bucket>[/<prefix>]` URL; `None` for anything else.
pub fn split_s3_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("s3://")?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    (!bucket.is_empty()).then_some((bucket, prefix.trim_matches('/')))
}

impl LoadgenSettings {
    fn is_default(&self) -> bool {
        self == &LoadgenSettings::default()
    }
}

fn one() -> u32 {
    1
}

/// The server under test: at most one of `url`, `service` and `simulated`. None of them:
/// the built-in simulated engine with its defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new(
    "(has(self.url) ? 1 : 0) + (has(self.service) ? 1 : 0) + (has(self.simulated) ? 1 : 0) <= 1"
).message("give at most one of url, service and simulated"))]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// Base URL of an OpenAI-compatible server (`http://host:port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A Service in the cluster in front of the server (operator runs only: `goodput bench`
    /// cannot resolve it, give `url` there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceTarget>,
    /// Model name sent with every request. Default: the manifest's `model.id` (a URL or
    /// Service target) or the preset's model (simulated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Endpoint: `completions` (token-id prompts) or `chat` (text prompts).
    #[serde(default)]
    pub api: TargetApi,
    /// Engine `/metrics` base URLs (one per replica) scraped during every point.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics_urls: Vec<String>,
    /// With `service`: the port on each ready pod whose `/metrics` the points scrape, when
    /// the engine serves its metrics apart from its API (Triton: 8002; `goodput serve-sim`:
    /// its replica's port, the router's plus one). Default: the Service's target port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub metrics_port: Option<i32>,
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
    /// A `url` or `service` target that runs its model this many times faster than real
    /// time (the simulated engine served by `goodput serve-sim --time-scale K`): inside the
    /// run every duration is divided by K and every rate multiplied by K, and reports
    /// convert back, as with `simulated.timeScale`. Default: 1 (a real engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_scale: Option<f64>,
    /// The built-in simulated engine. `goodput bench` runs it in-process; in a cluster the
    /// operator deploys it (a Deployment and a Service owned by the benchmark) and
    /// benchmarks that. Also the target when none of url, service and simulated is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated: Option<SimulatedTarget>,
}

impl Target {
    /// Whether the built-in simulated engine is the target: neither `url` nor `service`.
    pub fn is_simulated(&self) -> bool {
        self.url.is_none() && self.service.is_none()
    }

    /// The target as `status.target` prints it: `svc/<name>` (`svc/<name>.<namespace>` for
    /// another namespace), the URL, or `simulated`. With several given (a spec the lint
    /// refuses), the first of url, service.
    pub fn printable(&self) -> String {
        match (&self.url, &self.service) {
            (Some(url), _) => url.clone(),
            (None, Some(svc)) => match &svc.namespace {
                Some(ns) => format!("svc/{}.{ns}", svc.name),
                None => format!("svc/{}", svc.name),
            },
            (None, None) => "simulated".into(),
        }
    }
}

/// A Service in the cluster in front of an OpenAI-compatible server. Requests go to
/// `http://<name>.<namespace>.svc:<port>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceTarget {
    /// Name of the Service.
    pub name: String,
    /// Port number of the Service (its `spec.ports[].port`, not the target port).
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Namespace of the Service. Default: the benchmark's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
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
#[serde(default, rename_all = "camelCase")]
pub struct SimulatedTarget {
    /// Hardware and model preset (`goodput simulate --list-presets`).
    pub preset: String,
    /// Setup fields replaced, e.g. `{prefix_caching: true, max_num_seqs: 512}`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "preserve_unknown_fields")]
    pub overrides: BTreeMap<String, serde_json::Value>,
    /// Replicas behind the router.
    pub replicas: u32,
    /// Run the engine K times faster than real time: a number, or `auto`. Inside the run
    /// every duration (latencies, cutoffs, warmup, minimum duration, timeouts) is divided by
    /// K and every rate multiplied by K; reports convert back, so verdicts are those of a
    /// real-time run. Before the sweep `goodput bench` probes the idle engine and compares
    /// its TTFT and TPOT with the model's: a K whose drift is over 10% of the tightest
    /// cutoff is refused, over 2% warned about. `auto` (goodput bench only) picks the
    /// largest K whose probe stays within 2% on this machine. Default: 1.
    pub time_scale: TimeScale,
    /// Tokens per SSE frame, as engines with a stream interval send them. TPOT is
    /// unaffected; ITL is then per frame.
    pub stream_interval: u32,
}

impl SimulatedTarget {
    /// The engine model the target runs: its preset with the overrides applied (the
    /// engine model's one resolution, [`crate::sim::resolve_preset`]); the error names the
    /// field at fault. The lint, both shells and the model's placement all ask here.
    pub fn setup(&self) -> Result<crate::sim::Setup, SimulatedSetupError> {
        let overrides = if self.overrides.is_empty() {
            None
        } else {
            // A map of JSON values always serializes; the arm keeps a failure an error.
            Some(
                serde_json::to_string(&self.overrides).map_err(|e| SimulatedSetupError {
                    field: "spec.target.simulated.overrides",
                    error: crate::sim::PresetError::Overrides(e.to_string()),
                })?,
            )
        };
        crate::sim::resolve_preset(&self.preset, overrides.as_deref()).map_err(|error| {
            let field = match error {
                crate::sim::PresetError::Unknown { .. } => "spec.target.simulated.preset",
                crate::sim::PresetError::Overrides(_) => "spec.target.simulated.overrides",
            };
            SimulatedSetupError { field, error }
        })
    }
}

/// Why a simulated target gives no engine model, and the spec's field at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {error}")]
pub struct SimulatedSetupError {
    /// The field's path in the spec.
    pub field: &'static str,
    /// What is wrong with it.
    pub error: crate::sim::PresetError,
}

impl Default for SimulatedTarget {
    fn default() -> Self {
        SimulatedTarget {
            preset: "qwen2.5-7b-h100".into(),
            overrides: BTreeMap::new(),
            replicas: 1,
            time_scale: TimeScale::default(),
            stream_interval: 1,
        }
    }
}

/// How much faster than real time the simulated engine runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimeScale {
    /// K times faster (K > 0; 1 is real time).
    Fixed(f64),
    /// The largest K whose idle calibration stays within bound on the machine running the
    /// benchmark (`goodput bench`; in a cluster give a number).
    Auto,
}

impl Default for TimeScale {
    fn default() -> Self {
        TimeScale::Fixed(1.0)
    }
}

impl TimeScale {
    /// The fixed K; `None` for `auto`.
    pub fn fixed(self) -> Option<f64> {
        match self {
            TimeScale::Fixed(k) => Some(k),
            TimeScale::Auto => None,
        }
    }
}

impl std::fmt::Display for TimeScale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimeScale::Fixed(k) => write!(f, "{k}"),
            TimeScale::Auto => f.write_str("auto"),
        }
    }
}

impl Serialize for TimeScale {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TimeScale::Fixed(k) => s.serialize_f64(*k),
            TimeScale::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for TimeScale {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = TimeScale;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a speed-up (a number) or `auto`")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<TimeScale, E> {
                Ok(TimeScale::Fixed(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<TimeScale, E> {
                Ok(TimeScale::Fixed(v as f64))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<TimeScale, E> {
                Ok(TimeScale::Fixed(v as f64))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TimeScale, E> {
                match v {
                    "auto" => Ok(TimeScale::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl JsonSchema for TimeScale {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TimeScale".into()
    }

    /// A number or the string `auto`: no single OpenAPI type, so the API server keeps the
    /// value as given and `goodput lint` (and the operator, through it) checks it.
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

fn preserve_unknown_fields(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Where the frozen workload manifest comes from: exactly one of `manifest`,
/// `manifestFile` and `manifestConfigMap`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new(
    "(has(self.manifest) ? 1 : 0) + (has(self.manifestFile) ? 1 : 0) + (has(self.manifestConfigMap) ? 1 : 0) == 1"
).message("give exactly one of manifest, manifestFile and manifestConfigMap"))]
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
    crate::pack_files::MANIFEST.into()
}

/// The experiments of one benchmark.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct Experiments {
    /// Closed loop over concurrency levels: finds the throughput-latency knee and proposes
    /// the rate sweep's range. Never a capacity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saturation: Option<Saturation>,
    /// Open loop at offered rates: the only experiment that validates a capacity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_sweep: Option<RateSweep>,
    /// Cache states, each swept and reported separately (never averaged).
    pub cache_modes: Vec<CacheMode>,
    /// Shared prefixes of the warm cache.
    pub warm_pool: WarmPool,
    /// Prompts of a cold run: `unique` (nothing to reuse). `repeated` sends one prompt
    /// again and again, which the prefix cache serves: such a run is not cold and is refused.
    pub cold_prompts: ColdPrompts,
    /// Most schedule blocks per point while meeting the minimum duration and the sample
    /// rule (failures are made up with further blocks).
    pub max_blocks: u32,
    /// A point whose schedule-lag P99 (ms, on the run's own clock) exceeds this is invalid.
    pub max_lag_ms: f64,
    /// Engine-metrics scrape interval (seconds of model time).
    pub scrape_interval_seconds: f64,
    /// Stop an open-loop point as soon as its requests settle it as failing (a class's
    /// attainment, the error rate or the queue trend, by the rule every report states);
    /// a point is never passed early. `false`: every point runs its whole schedule.
    pub early_stop: bool,
}

impl Default for Experiments {
    fn default() -> Self {
        Experiments {
            saturation: None,
            rate_sweep: None,
            cache_modes: vec![CacheMode::Cold],
            warm_pool: WarmPool::default(),
            cold_prompts: ColdPrompts::default(),
            max_blocks: 10,
            max_lag_ms: 10.0,
            scrape_interval_seconds: 1.0,
            early_stop: true,
        }
    }
}

/// The saturation (closed-loop) experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct Saturation {
    /// Concurrency levels (requests in flight), ascending.
    pub concurrency: Vec<u32>,
    /// Seconds each level runs (model time).
    pub duration_seconds: f64,
}

impl Default for Saturation {
    fn default() -> Self {
        Saturation {
            concurrency: vec![4, 8, 16, 32, 64, 128],
            duration_seconds: 60.0,
        }
    }
}

/// The rate sweep (open loop).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct RateSweep {
    /// Offered rates (requests per second). Empty: derived from the saturation knee.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rates: Vec<f64>,
    /// Points of a derived sweep.
    pub points: u32,
    /// Lowest derived rate as a fraction of the knee's throughput.
    pub low_fraction: f64,
    /// Highest derived rate as a fraction of the knee's throughput.
    pub high_fraction: f64,
    /// How close the final bracket must be: once a failing rate lies above a passing one,
    /// rates are bisected between the highest pass and the lowest fail above it until their
    /// gap is at most this fraction of the passing rate (0.05: capacity known to within 5%).
    /// 0 turns refinement off.
    pub resolution: f64,
    /// Most refinement rates per cache mode (each runs every repeat and follows every rule
    /// of an ordinary point).
    pub max_refinements: u32,
}

impl Default for RateSweep {
    fn default() -> Self {
        RateSweep {
            rates: Vec::new(),
            points: 5,
            low_fraction: 0.6,
            high_fraction: 1.2,
            resolution: 0.05,
            max_refinements: 4,
        }
    }
}

/// The cache state is a workload concept, defined in the core.
pub use crate::workload::CacheMode;

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
#[serde(default, rename_all = "camelCase")]
pub struct WarmPool {
    /// Distinct shared prefixes.
    pub prefixes: u32,
    /// Tokens per prefix (at most each class's input length).
    pub prefix_tokens: u32,
    /// Zipf exponent of prefix popularity (0 = uniform).
    pub zipf: f64,
}

impl Default for WarmPool {
    fn default() -> Self {
        WarmPool {
            prefixes: 16,
            prefix_tokens: 512,
            zipf: 1.0,
        }
    }
}

/// The peak a plan is for, defined with the planning core.
pub use crate::planning::PeakForecast;

/// The statistics a report may show, defined with the analysis core.
pub use crate::analysis::Statistic;

/// What the reports show.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct Reporting {
    /// Latency statistics per class in summaries. Must include a percentile.
    pub statistics: Vec<Statistic>,
}

impl Default for Reporting {
    fn default() -> Self {
        Reporting {
            statistics: vec![Statistic::P50, Statistic::P95, Statistic::P99],
        }
    }
}

/// What the benchmark driver (`goodput_core::benchmark::driver`) and both shells take from a
/// spec, resolved once here.
impl CapacityBenchmarkSpec {
    /// The driver's plan of this spec: a saturation sweep when asked for or when no rates
    /// are given, the rate sweep unless only a saturation sweep was asked for.
    pub fn sweep_plan(&self, seed: u64) -> SweepPlan {
        let ex = &self.experiments;
        let fixed = ex.rate_sweep.as_ref().filter(|r| !r.rates.is_empty());
        let saturation = match (&ex.saturation, fixed) {
            (Some(s), _) => Some(s.clone()),
            (None, None) => Some(Default::default()),
            (None, Some(_)) => None,
        };
        let range = ex.rate_sweep.clone().unwrap_or_default();
        SweepPlan {
            cache_modes: ex.cache_modes.clone(),
            saturation: saturation.map(|s| SaturationPlan {
                concurrency: s.concurrency,
                duration_s: s.duration_seconds,
            }),
            rates: match fixed {
                Some(r) => RateSource::Fixed(r.rates.clone()),
                None => RateSource::Knee {
                    low: range.low_fraction,
                    high: range.high_fraction,
                    points: range.points,
                },
            },
            run_rates: ex.rate_sweep.is_some() || ex.saturation.is_none(),
            repeats: self.repeats.max(1),
            seed,
            resolution: range.resolution,
            max_refinements: range.max_refinements,
            model: Vec::new(),
        }
    }

    /// The model a real target is asked for, decided once for both shells: `target.model`,
    /// else the manifest's model id. (A simulated target serves its preset's.)
    pub fn target_model(&self, manifest: &WorkloadManifest) -> String {
        self.target
            .model
            .clone()
            .unwrap_or_else(|| manifest.model.id.clone())
    }

    /// GPUs per replica, decided once for both shells: `target.gpusPerReplica`, else the
    /// manifest's placement split evenly among its replicas (lint refuses an uneven split),
    /// else 1.
    pub fn gpus_per_replica(&self, manifest: &WorkloadManifest) -> u32 {
        self.target
            .gpus_per_replica
            .or_else(|| manifest.engine.placement.gpus_per_replica())
            .filter(|&g| g > 0)
            .unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_print_as_the_status_shows_them() {
        let mut t = Target::default();
        assert!(t.is_simulated());
        assert_eq!(t.printable(), "simulated");
        t.simulated = Some(SimulatedTarget::default());
        assert_eq!(t.printable(), "simulated");
        t.service = Some(ServiceTarget {
            name: "qwen-7b".into(),
            port: 8000,
            namespace: None,
        });
        assert!(!t.is_simulated());
        assert_eq!(t.printable(), "svc/qwen-7b");
        if let Some(svc) = &mut t.service {
            svc.namespace = Some("llm".into());
        }
        assert_eq!(t.printable(), "svc/qwen-7b.llm");
        t.url = Some("http://localhost:8000".into());
        assert_eq!(t.printable(), "http://localhost:8000");
    }
}
