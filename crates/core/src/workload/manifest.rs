//! The frozen workload manifest: the system under test and the traffic sent to it.
//!
//! Every run records the manifest it used; two runs with the same manifest and seed send the
//! same schedule. Field names follow the capacity pack's `workload-manifest.yaml`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::analysis::QueueTrend;

/// A frozen, versioned description of one benchmark's system and traffic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadManifest {
    /// Date the manifest was frozen (free text, usually `YYYY-MM-DD`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cutoff: Option<String>,
    /// The model served, pinned to immutable revisions.
    pub model: Model,
    /// The serving engine and how it is placed on GPUs.
    pub engine: ServingEngine,
    /// How the load generator drives traffic.
    pub client: Client,
    /// Workload classes; each is judged by its own request-level SLO.
    pub workload: Vec<WorkloadClass>,
    /// The gate every test point must pass to count as capacity.
    pub acceptance: Acceptance,
    /// Sampling parameters sent with every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Sampling>,
    /// How generation stops (fixed output length or natural end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopBehaviour>,
    /// Chat template applied by the engine, by name or revision; absent for raw completions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<String>,
    /// What the client does with a request that runs too long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancellation: Option<Cancellation>,
    /// What a run found about the system under test (written into the capacity pack's
    /// copy; absent in a manifest a person writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<Resolved>,
}

/// The system under test as a run found it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resolved {
    /// Base URL the requests went to.
    pub target_url: String,
    /// The engine found.
    pub engine: String,
    /// Its version, when the server reports one (`GET /version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_version: Option<String>,
    /// Models the server lists (`GET /v1/models`).
    #[serde(default)]
    pub served_models: Vec<String>,
    /// Model name sent with every request.
    pub model_sent: String,
    /// Simulated engine preset, if the target was simulated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated_preset: Option<String>,
    /// K: the simulated engine ran K times faster than real time (1 = real time).
    pub time_scale: f64,
    /// Version of goodput that ran the benchmark.
    pub goodput_version: String,
    /// The CPUs the load generator could run on and how many the machine has
    /// (`0 of 2`): a client that shares its cores with an engine on the same machine
    /// competes with it, so the two are pinned apart (`taskset`, cpusets) and this says
    /// how the run was placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cpus: Option<String>,
}

/// The model under test. Revisions must be immutable (no `latest`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// Model identifier as the engine serves it.
    pub id: String,
    /// Immutable weights revision (commit hash or release tag).
    pub revision: String,
    /// Immutable tokenizer revision; token counts depend on it.
    pub tokenizer_revision: String,
    /// Weight precision, e.g. `bf16`, `fp8`.
    pub precision: String,
}

/// The serving engine, its version and its GPU placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServingEngine {
    /// Engine name, e.g. `vllm`, `sglang`, `tensorrt-llm`.
    pub name: String,
    /// Immutable engine version (no `latest`).
    pub version: String,
    /// Parallelism and replica layout.
    pub placement: Placement,
    /// Whether prefix caching is on; cold and warm runs are still reported apart.
    pub prefix_cache: Toggle,
    /// Whether speculative decoding is on.
    pub speculative_decoding: Toggle,
    /// Whether prefill and decode run on separate workers.
    pub disaggregated_prefill: Toggle,
}

/// Parallelism of the deployment under test.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Data-parallel degree.
    pub dp: u32,
    /// Engine replicas behind the service.
    pub replicas: u32,
    /// GPUs used by all replicas together.
    pub gpus: u32,
}

impl Placement {
    /// GPUs per replica, when `gpus` divides evenly among `replicas`.
    pub fn gpus_per_replica(&self) -> Option<u32> {
        (self.replicas > 0 && self.gpus.is_multiple_of(self.replicas))
            .then(|| self.gpus / self.replicas)
    }
}

/// An on/off engine feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Toggle {
    /// The feature is on.
    Enabled,
    /// The feature is off.
    Disabled,
}

/// How the load generator drives traffic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Client {
    /// Where the client runs (zone, node pool); the measurement boundary starts here.
    pub location: String,
    /// Whether responses are streamed (needed to observe TTFT).
    pub streaming: bool,
    /// Inter-arrival process of the open-loop schedule.
    pub arrival_pattern: ArrivalPattern,
    /// Shape of the gamma arrival process (1 = Poisson; below 1 is burstier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burstiness: Option<f64>,
    /// Shortest measurement window in seconds.
    pub minimum_duration_seconds: f64,
    /// Requests in the initial schedule.
    pub initial_scheduled_requests: u64,
    /// Seed of the schedule shuffle and arrival gaps; same seed, same schedule.
    pub request_schedule_seed: u64,
    /// Exact requests per class in the initial schedule; must match the mix.
    pub class_schedule_counts: BTreeMap<String, u64>,
    /// Seconds at the start excluded from measurement.
    pub warmup_seconds: f64,
}

/// Inter-arrival process of an open-loop schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ArrivalPattern {
    /// Exponential gaps.
    Poisson,
    /// Gamma gaps with the `burstiness` shape.
    Gamma,
    /// Equal gaps.
    Constant,
    /// Timestamps from a recorded trace.
    Trace,
}

/// One workload class and its request-level SLO.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadClass {
    /// Class name, as written in the `class` column of `requests.csv`.
    pub name: String,
    /// Share of requests in this class; the mixes of all classes sum to 1.
    pub mix: f64,
    /// Prompt length in tokens.
    pub input_tokens: u32,
    /// Output length in tokens.
    pub output_tokens: u32,
    /// A request passes only if its TTFT is at most this many milliseconds.
    pub request_ttft_cutoff_ms: f64,
    /// A request passes only if its TPOT is at most this many milliseconds per token.
    pub request_tpot_cutoff_ms: f64,
}

/// The gate a test point must pass to count as capacity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Acceptance {
    /// Least fraction of a class's successful requests that must meet both cutoffs.
    pub class_slo_attainment_min: f64,
    /// Fewest successful requests per class for a point to be more than exploratory.
    pub min_successful_samples_per_class: u64,
    /// Largest allowed fraction of attempted requests that failed.
    pub error_rate_max: f64,
    /// Queue trend a passing point must show (only `flat` is meaningful).
    pub queue_trend_required: QueueTrend,
    /// Planned utilization of measured capacity (0.75 keeps 25% headroom).
    pub target_utilization: f64,
}

/// Sampling parameters sent with every request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sampling {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling mass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Top-k cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    /// Sampling seed sent to the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// How generation stops.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopBehaviour {
    /// Keep generating past the end-of-sequence token.
    pub ignore_eos: bool,
    /// Ask for exactly the class's output tokens (`max_tokens` = `min_tokens`).
    pub fixed_output_length: bool,
}

/// What the client does with a request that runs too long.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Cancellation {
    /// A request still running after this many seconds is cancelled and counted as failed.
    pub request_timeout_seconds: f64,
}
