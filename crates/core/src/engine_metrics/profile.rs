//! Engine profiles: which exposed metric answers each engine-independent [`Concept`], per
//! engine and version (see `research/engines.md` §1.6), engine detection from a scraped
//! page, and concept values.
//!
//! Each profile lists, per concept, candidate metrics in order of preference: the current
//! name first, then older aliases (vLLM's `gpu_cache_usage_perc`, `gpu_prefix_cache_*`,
//! `time_per_output_token_seconds`, ...). The first candidate present on a page answers.
//! So one vLLM profile covers v1 engines of every version: a version that exposes both
//! names (0.9–0.11) reads the current one, an old one falls back to the alias.
//!
//! Values are aggregated over label sets (vLLM's `engine` DP ranks, `model_name`,
//! `finished_reason`, DCGM's `gpu`): counts and counters are summed, ratios (KV usage,
//! hit-rate gauges, GPU utilisation) averaged, DCGM's XID (the last error code) maxed.
//! Non-finite values are ignored, so every value is finite (and serialisable as JSON).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::parse::Sample;

/// An engine (or exporter) whose metric names a profile knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// vLLM (v1 names, with the older aliases as fallbacks).
    Vllm,
    /// SGLang (`sglang:*`).
    Sglang,
    /// TensorRT-LLM's `trtllm-serve` (`trtllm_*`; older Dynamo docs wrote `trtllm:*`).
    TensorrtLlm,
    /// Triton with the TensorRT-LLM backend (`nv_trt_llm_*`, `nv_inference_*`).
    Triton,
    /// NVIDIA Dynamo's frontend (`dynamo_frontend_*`).
    Dynamo,
    /// NVIDIA DCGM exporter (GPU metrics).
    Dcgm,
    /// llama.cpp's `llama-server` with `--metrics` (`llamacpp:*`).
    LlamaCpp,
}

impl EngineKind {
    /// Every engine, in detection tie-break order.
    pub const ALL: [EngineKind; 7] = [
        EngineKind::Vllm,
        EngineKind::Sglang,
        EngineKind::TensorrtLlm,
        EngineKind::Triton,
        EngineKind::Dynamo,
        EngineKind::Dcgm,
        EngineKind::LlamaCpp,
    ];

    /// What goodput knows of the engine: the one place an engine is described.
    pub fn descriptor(self) -> &'static EngineDescriptor {
        match self {
            EngineKind::Vllm => &ENGINE_VLLM,
            EngineKind::Sglang => &ENGINE_SGLANG,
            EngineKind::TensorrtLlm => &ENGINE_TRTLLM,
            EngineKind::Triton => &ENGINE_TRITON,
            EngineKind::Dynamo => &ENGINE_DYNAMO,
            EngineKind::Dcgm => &ENGINE_DCGM,
            EngineKind::LlamaCpp => &ENGINE_LLAMA_CPP,
        }
    }

    /// The engine's profile.
    pub fn profile(self) -> &'static Profile {
        self.descriptor().profile
    }

    /// The name used in JSON and messages (`vllm`, `sglang`, `tensorrt_llm`, ...).
    pub fn as_str(self) -> &'static str {
        self.descriptor().name
    }

    /// The engine of that name ([`Self::as_str`]), if any.
    pub fn from_name(name: &str) -> Option<EngineKind> {
        EngineKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// Everything goodput knows of one engine besides its metric names' meaning: adding an
/// engine is adding one of these (and its [`Profile`]) here.
#[derive(Debug)]
pub struct EngineDescriptor {
    /// Its name in JSON and messages, as its container images and module paths spell it,
    /// and as `/v1/models` states it in `owned_by`.
    pub name: &'static str,
    /// Its metric names, concept by concept.
    pub profile: &'static Profile,
    /// The call that empties its prefix cache before a cold point; `None`: it has none
    /// that goodput knows, and a cold point says so.
    pub cache_reset: Option<CacheResetCall>,
    /// How its container's command line names the model and the tensor-parallel size, for
    /// the operator to read what a workload runs; `None`: not read.
    pub container: Option<ContainerArgs>,
}

/// An engine's prefix-cache reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheResetCall {
    /// The path, `POST`ed at the engine's address.
    pub path: &'static str,
    /// Whether it answers `{"success": bool}` (else an empty 200).
    pub says_success: bool,
}

/// The flags of an engine's command line that the operator reads.
#[derive(Debug)]
pub struct ContainerArgs {
    /// Flags naming the model, in the order tried.
    pub model: &'static [&'static str],
    /// Flags naming the tensor-parallel size.
    pub tp: &'static [&'static str],
}

static ENGINE_VLLM: EngineDescriptor = EngineDescriptor {
    name: "vllm",
    profile: &VLLM,
    cache_reset: Some(CacheResetCall {
        path: "/reset_prefix_cache",
        says_success: true,
    }),
    container: Some(ContainerArgs {
        model: &["--model"],
        tp: &["--tensor-parallel-size", "-tp"],
    }),
};

static ENGINE_SGLANG: EngineDescriptor = EngineDescriptor {
    name: "sglang",
    profile: &SGLANG,
    cache_reset: Some(CacheResetCall {
        path: "/flush_cache",
        says_success: false,
    }),
    container: Some(ContainerArgs {
        model: &["--model-path", "--model"],
        tp: &["--tp-size", "--tp"],
    }),
};

static ENGINE_TRTLLM: EngineDescriptor = EngineDescriptor {
    name: "tensorrt_llm",
    profile: &TRTLLM,
    cache_reset: None,
    container: None,
};

static ENGINE_TRITON: EngineDescriptor = EngineDescriptor {
    name: "triton",
    profile: &TRITON,
    cache_reset: None,
    container: None,
};

static ENGINE_DYNAMO: EngineDescriptor = EngineDescriptor {
    name: "dynamo",
    profile: &DYNAMO,
    cache_reset: None,
    container: None,
};

static ENGINE_DCGM: EngineDescriptor = EngineDescriptor {
    name: "dcgm",
    profile: &DCGM,
    cache_reset: None,
    container: None,
};

static ENGINE_LLAMA_CPP: EngineDescriptor = EngineDescriptor {
    name: "llama_cpp",
    profile: &LLAMA_CPP,
    cache_reset: None,
    container: None,
};

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a concept's metric behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// A level that goes up and down.
    Gauge,
    /// A cumulative count (resets only when the process restarts).
    Counter,
    /// A histogram, read as its `_sum` and `_count` (both counters).
    Histogram,
}

/// How the samples of one metric (its label sets) combine into one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggregation {
    /// Added (counts, counters, MiB, watts).
    Sum,
    /// Averaged (fractions and percentages).
    Mean,
    /// The largest (error codes).
    Max,
}

/// An engine-independent quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Concept {
    /// Requests waiting to be scheduled (gauge).
    QueueWaiting,
    /// Requests running in the batch (gauge).
    Running,
    /// Fraction 0–1 of the KV cache in use (gauge; SGLang's `token_usage`).
    KvUsage,
    /// Prompt tokens looked up in the prefix cache (counter; SGLang: all prompt tokens).
    PrefixCacheQueries,
    /// Prompt tokens found in the prefix cache (counter; SGLang: `cached_tokens_total`).
    PrefixCacheHits,
    /// Prefix-cache hit rate as the engine reports it (gauge, 0–1; SGLang, TRT-LLM).
    PrefixCacheHitRate,
    /// Preemptions (counter; vLLM only).
    Preemptions,
    /// Prompt tokens processed (counter).
    PromptTokens,
    /// Tokens generated (counter).
    GenerationTokens,
    /// Requests finished, whatever the reason (counter).
    RequestSuccess,
    /// Requests aborted, mostly because their client went away (counter; vLLM: the
    /// `finished_reason="abort"` part of the finished count; SGLang's own counter).
    RequestAborted,
    /// Time to first token (histogram, seconds).
    Ttft,
    /// Inter-token latency (histogram, seconds; vLLM per output event, SGLang per token).
    Itl,
    /// End-to-end request latency (histogram, seconds).
    E2e,
    /// Time queued before scheduling (histogram, seconds).
    QueueTime,
    /// GPU utilisation, percent (DCGM `GPU_UTIL`, gauge; averaged over GPUs).
    GpuUtilization,
    /// Graphics-engine activity 0–1 (DCGM profiling field; works on MIG; averaged).
    GpuEngineActive,
    /// Framebuffer memory used, MiB (gauge; summed over GPUs).
    FbUsedMib,
    /// Power draw, watts (gauge; summed over GPUs).
    PowerWatts,
    /// The last XID error code (gauge, 0 = none; the largest over GPUs).
    XidErrors,
}

impl Concept {
    /// Every concept.
    pub const ALL: [Concept; 20] = [
        Concept::QueueWaiting,
        Concept::Running,
        Concept::KvUsage,
        Concept::PrefixCacheQueries,
        Concept::PrefixCacheHits,
        Concept::PrefixCacheHitRate,
        Concept::Preemptions,
        Concept::PromptTokens,
        Concept::GenerationTokens,
        Concept::RequestSuccess,
        Concept::RequestAborted,
        Concept::Ttft,
        Concept::Itl,
        Concept::E2e,
        Concept::QueueTime,
        Concept::GpuUtilization,
        Concept::GpuEngineActive,
        Concept::FbUsedMib,
        Concept::PowerWatts,
        Concept::XidErrors,
    ];

    /// The concept's name: the key in [`values`] maps and in JSON (`queue_waiting`, ...).
    /// A histogram's keys are this name plus `_sum` and `_count`.
    pub fn key(self) -> &'static str {
        match self {
            Concept::QueueWaiting => "queue_waiting",
            Concept::Running => "running",
            Concept::KvUsage => "kv_usage",
            Concept::PrefixCacheQueries => "prefix_cache_queries",
            Concept::PrefixCacheHits => "prefix_cache_hits",
            Concept::PrefixCacheHitRate => "prefix_cache_hit_rate",
            Concept::Preemptions => "preemptions",
            Concept::PromptTokens => "prompt_tokens",
            Concept::GenerationTokens => "generation_tokens",
            Concept::RequestSuccess => "request_success",
            Concept::RequestAborted => "request_aborted",
            Concept::Ttft => "ttft",
            Concept::Itl => "itl",
            Concept::E2e => "e2e",
            Concept::QueueTime => "queue_time",
            Concept::GpuUtilization => "gpu_utilization",
            Concept::GpuEngineActive => "gpu_engine_active",
            Concept::FbUsedMib => "fb_used_mib",
            Concept::PowerWatts => "power_watts",
            Concept::XidErrors => "xid_errors",
        }
    }

    /// Gauge, counter or histogram.
    pub fn kind(self) -> MetricKind {
        match self {
            Concept::QueueWaiting
            | Concept::Running
            | Concept::KvUsage
            | Concept::PrefixCacheHitRate
            | Concept::GpuUtilization
            | Concept::GpuEngineActive
            | Concept::FbUsedMib
            | Concept::PowerWatts
            | Concept::XidErrors => MetricKind::Gauge,
            Concept::PrefixCacheQueries
            | Concept::PrefixCacheHits
            | Concept::Preemptions
            | Concept::PromptTokens
            | Concept::GenerationTokens
            | Concept::RequestSuccess
            | Concept::RequestAborted => MetricKind::Counter,
            Concept::Ttft | Concept::Itl | Concept::E2e | Concept::QueueTime => {
                MetricKind::Histogram
            }
        }
    }

    /// How label sets (and, by default, targets) combine.
    pub fn aggregation(self) -> Aggregation {
        match self {
            Concept::KvUsage
            | Concept::PrefixCacheHitRate
            | Concept::GpuUtilization
            | Concept::GpuEngineActive => Aggregation::Mean,
            Concept::XidErrors => Aggregation::Max,
            _ => Aggregation::Sum,
        }
    }
}

impl fmt::Display for Concept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// One candidate metric for a concept: an exposed name, optionally restricted to samples
/// carrying one label value (Triton's `nv_trt_llm_request_metrics{request_type="waiting"}`).
/// For a histogram concept the name is the family's base name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricRef {
    /// Exposed name (or histogram base name).
    pub name: &'static str,
    /// `(label, value)` a sample must carry.
    pub label: Option<(&'static str, &'static str)>,
    /// An older name kept as an alias.
    pub deprecated: bool,
}

impl fmt::Display for MetricRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.label {
            Some((k, v)) => write!(f, "{}{{{k}=\"{v}\"}}", self.name),
            None => f.write_str(self.name),
        }
    }
}

const fn cur(name: &'static str) -> MetricRef {
    MetricRef {
        name,
        label: None,
        deprecated: false,
    }
}

const fn old(name: &'static str) -> MetricRef {
    MetricRef {
        name,
        label: None,
        deprecated: true,
    }
}

const fn sel(name: &'static str, label: &'static str, value: &'static str) -> MetricRef {
    MetricRef {
        name,
        label: Some((label, value)),
        deprecated: false,
    }
}

/// An engine's name table: per concept, candidate metrics in order of preference.
/// Concepts the engine does not expose are absent.
#[derive(Debug)]
pub struct Profile {
    /// The engine.
    pub engine: EngineKind,
    /// `(concept, candidates)`.
    pub metrics: &'static [(Concept, &'static [MetricRef])],
}

impl Profile {
    /// The candidates for `concept` (empty when the engine has no such metric).
    pub fn candidates(&self, concept: Concept) -> &'static [MetricRef] {
        self.metrics
            .iter()
            .find(|(c, _)| *c == concept)
            .map_or(&[], |(_, refs)| refs)
    }

    /// The concepts this profile maps, in table order.
    pub fn concepts(&self) -> impl Iterator<Item = Concept> + '_ {
        self.metrics.iter().map(|(c, _)| *c)
    }
}

static VLLM: Profile = Profile {
    engine: EngineKind::Vllm,
    metrics: &[
        (Concept::QueueWaiting, &[cur("vllm:num_requests_waiting")]),
        (Concept::Running, &[cur("vllm:num_requests_running")]),
        (
            Concept::KvUsage,
            &[
                cur("vllm:kv_cache_usage_perc"),
                old("vllm:gpu_cache_usage_perc"),
            ],
        ),
        (
            Concept::PrefixCacheQueries,
            &[
                cur("vllm:prefix_cache_queries_total"),
                old("vllm:gpu_prefix_cache_queries_total"),
                old("vllm:gpu_prefix_cache_queries"),
            ],
        ),
        (
            Concept::PrefixCacheHits,
            &[
                cur("vllm:prefix_cache_hits_total"),
                old("vllm:gpu_prefix_cache_hits_total"),
                old("vllm:gpu_prefix_cache_hits"),
            ],
        ),
        (
            Concept::PrefixCacheHitRate,
            &[old("vllm:gpu_prefix_cache_hit_rate")],
        ),
        (Concept::Preemptions, &[cur("vllm:num_preemptions_total")]),
        (Concept::PromptTokens, &[cur("vllm:prompt_tokens_total")]),
        (
            Concept::GenerationTokens,
            &[cur("vllm:generation_tokens_total")],
        ),
        (
            Concept::RequestSuccess,
            &[cur("vllm:request_success_total")],
        ),
        (
            Concept::RequestAborted,
            &[sel(
                "vllm:request_success_total",
                "finished_reason",
                "abort",
            )],
        ),
        (Concept::Ttft, &[cur("vllm:time_to_first_token_seconds")]),
        (
            Concept::Itl,
            &[
                cur("vllm:inter_token_latency_seconds"),
                old("vllm:time_per_output_token_seconds"),
            ],
        ),
        (Concept::E2e, &[cur("vllm:e2e_request_latency_seconds")]),
        (
            Concept::QueueTime,
            &[
                cur("vllm:request_queue_time_seconds"),
                old("vllm:time_in_queue_requests"),
            ],
        ),
    ],
};

static SGLANG: Profile = Profile {
    engine: EngineKind::Sglang,
    metrics: &[
        (Concept::QueueWaiting, &[cur("sglang:num_queue_reqs")]),
        (Concept::Running, &[cur("sglang:num_running_reqs")]),
        (Concept::KvUsage, &[cur("sglang:token_usage")]),
        // SGLang has no lookup counter; every prompt token is looked up in the radix cache.
        (
            Concept::PrefixCacheQueries,
            &[cur("sglang:prompt_tokens_total")],
        ),
        (
            Concept::PrefixCacheHits,
            &[cur("sglang:cached_tokens_total")],
        ),
        (Concept::PrefixCacheHitRate, &[cur("sglang:cache_hit_rate")]),
        (Concept::PromptTokens, &[cur("sglang:prompt_tokens_total")]),
        (
            Concept::GenerationTokens,
            &[cur("sglang:generation_tokens_total")],
        ),
        (Concept::RequestSuccess, &[cur("sglang:num_requests_total")]),
        (
            Concept::RequestAborted,
            &[cur("sglang:num_aborted_requests_total")],
        ),
        (Concept::Ttft, &[cur("sglang:time_to_first_token_seconds")]),
        (
            Concept::Itl,
            &[
                cur("sglang:inter_token_latency_seconds"),
                old("sglang:time_per_output_token_seconds"),
            ],
        ),
        (Concept::E2e, &[cur("sglang:e2e_request_latency_seconds")]),
        (Concept::QueueTime, &[cur("sglang:queue_time_seconds")]),
    ],
};

static TRTLLM: Profile = Profile {
    engine: EngineKind::TensorrtLlm,
    metrics: &[
        (
            Concept::QueueWaiting,
            &[
                cur("trtllm_num_requests_waiting"),
                old("trtllm:num_requests_waiting"),
            ],
        ),
        (
            Concept::Running,
            &[
                cur("trtllm_num_requests_running"),
                old("trtllm:num_requests_running"),
            ],
        ),
        (
            Concept::KvUsage,
            &[
                cur("trtllm_kv_cache_utilization"),
                old("trtllm:kv_cache_utilization"),
            ],
        ),
        (
            Concept::PrefixCacheHits,
            &[cur("trtllm_kv_cache_reused_blocks_total")],
        ),
        (
            Concept::PrefixCacheHitRate,
            &[
                cur("trtllm_kv_cache_hit_rate"),
                old("trtllm:kv_cache_hit_rate"),
            ],
        ),
        (Concept::PromptTokens, &[cur("trtllm_prompt_tokens_total")]),
        (
            Concept::GenerationTokens,
            &[cur("trtllm_generation_tokens_total")],
        ),
        (
            Concept::RequestSuccess,
            &[
                cur("trtllm_request_success_total"),
                old("trtllm:request_success_total"),
            ],
        ),
        (
            Concept::Ttft,
            &[
                cur("trtllm_time_to_first_token_seconds"),
                old("trtllm:time_to_first_token_seconds"),
            ],
        ),
        (
            Concept::Itl,
            &[
                cur("trtllm_time_per_output_token_seconds"),
                old("trtllm:time_per_output_token_seconds"),
            ],
        ),
        (
            Concept::E2e,
            &[
                cur("trtllm_e2e_request_latency_seconds"),
                old("trtllm:e2e_request_latency_seconds"),
            ],
        ),
        (
            Concept::QueueTime,
            &[
                cur("trtllm_request_queue_time_seconds"),
                old("trtllm:request_queue_time_seconds"),
            ],
        ),
    ],
};

static TRITON: Profile = Profile {
    engine: EngineKind::Triton,
    metrics: &[
        (
            Concept::QueueWaiting,
            &[sel("nv_trt_llm_request_metrics", "request_type", "waiting")],
        ),
        (
            Concept::Running,
            &[sel(
                "nv_trt_llm_request_metrics",
                "request_type",
                "scheduled",
            )],
        ),
        (
            Concept::KvUsage,
            &[sel(
                "nv_trt_llm_kv_cache_block_metrics",
                "kv_cache_block_type",
                "fraction",
            )],
        ),
        // Histograms of lengths: their sums are token totals.
        (Concept::PromptTokens, &[cur("nv_llm_input_token_len_sum")]),
        (
            Concept::GenerationTokens,
            &[cur("nv_llm_output_token_len_sum")],
        ),
        (
            Concept::RequestSuccess,
            &[cur("nv_inference_request_success")],
        ),
    ],
};

/// llama.cpp's server (`--metrics`): slots in use and requests deferred for want of one,
/// prompt tokens it computed (`prompt_tokens_total`) and those it reused from a slot's
/// cache (`prompt_tokens_cached_total`) counted apart, tokens predicted. Its page has no
/// request counter, KV gauge or latency histogram. [`values`] reads the prompt tokens as
/// the two added, and every one of them as looked up in the cache.
static LLAMA_CPP: Profile = Profile {
    engine: EngineKind::LlamaCpp,
    metrics: &[
        (Concept::QueueWaiting, &[cur("llamacpp:requests_deferred")]),
        (Concept::Running, &[cur("llamacpp:requests_processing")]),
        (
            Concept::PrefixCacheQueries,
            &[cur("llamacpp:prompt_tokens_total")],
        ),
        (
            Concept::PrefixCacheHits,
            &[cur("llamacpp:prompt_tokens_cached_total")],
        ),
        (
            Concept::PromptTokens,
            &[cur("llamacpp:prompt_tokens_total")],
        ),
        (
            Concept::GenerationTokens,
            &[cur("llamacpp:tokens_predicted_total")],
        ),
    ],
};

static DYNAMO: Profile = Profile {
    engine: EngineKind::Dynamo,
    metrics: &[
        (
            Concept::QueueWaiting,
            &[
                cur("dynamo_frontend_router_queue_pending_requests"),
                old("dynamo_frontend_queued_requests"),
            ],
        ),
        (
            Concept::Running,
            &[
                cur("dynamo_frontend_active_requests"),
                old("dynamo_frontend_inflight_requests"),
            ],
        ),
        (
            Concept::PrefixCacheQueries,
            &[cur("dynamo_frontend_input_sequence_tokens_sum")],
        ),
        (
            Concept::PrefixCacheHits,
            &[
                cur("dynamo_frontend_cached_tokens_sum"),
                old("dynamo_frontend_cached_sequence_length_sum"),
            ],
        ),
        (
            Concept::PromptTokens,
            &[cur("dynamo_frontend_input_sequence_tokens_sum")],
        ),
        (
            Concept::GenerationTokens,
            &[cur("dynamo_frontend_output_tokens_total")],
        ),
        (
            Concept::RequestSuccess,
            &[cur("dynamo_frontend_requests_total")],
        ),
        (
            Concept::Ttft,
            &[cur("dynamo_frontend_time_to_first_token_seconds")],
        ),
        (
            Concept::Itl,
            &[cur("dynamo_frontend_inter_token_latency_seconds")],
        ),
        (
            Concept::E2e,
            &[cur("dynamo_frontend_request_duration_seconds")],
        ),
    ],
};

static DCGM: Profile = Profile {
    engine: EngineKind::Dcgm,
    metrics: &[
        (Concept::GpuUtilization, &[cur("DCGM_FI_DEV_GPU_UTIL")]),
        (
            Concept::GpuEngineActive,
            &[cur("DCGM_FI_PROF_GR_ENGINE_ACTIVE")],
        ),
        (Concept::FbUsedMib, &[cur("DCGM_FI_DEV_FB_USED")]),
        (Concept::PowerWatts, &[cur("DCGM_FI_DEV_POWER_USAGE")]),
        (Concept::XidErrors, &[cur("DCGM_FI_DEV_XID_ERRORS")]),
    ],
};

/// What [`detect`] found on a page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DetectedProfile {
    /// The engine whose names matched best.
    pub engine: EngineKind,
    /// Concepts of the profile present on the page.
    pub found: Vec<Concept>,
    /// Concepts of the profile absent from the page (an engine version without them, or
    /// a feature that is off). Concepts the engine never exposes are in neither list.
    pub missing: Vec<Concept>,
    /// The metric that answered each found concept (`vllm:gpu_cache_usage_perc` on an old
    /// vLLM; a histogram's base name).
    pub names: BTreeMap<Concept, String>,
    /// Found concepts answered by a deprecated alias.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deprecated: Vec<Concept>,
}

impl DetectedProfile {
    /// `engine` with no concept resolved yet.
    pub fn empty(engine: EngineKind) -> Self {
        DetectedProfile {
            engine,
            found: Vec::new(),
            missing: Vec::new(),
            names: BTreeMap::new(),
            deprecated: Vec::new(),
        }
    }

    /// The profile of the detected engine.
    pub fn profile(&self) -> &'static Profile {
        self.engine.profile()
    }
}

fn matches(s: &Sample, name: &str, r: &MetricRef) -> bool {
    s.name == name && r.label.is_none_or(|(k, v)| s.label(k) == Some(v))
}

/// The first candidate of `concept` present in `samples`.
fn resolve(samples: &[Sample], profile: &Profile, concept: Concept) -> Option<&'static MetricRef> {
    profile.candidates(concept).iter().find(|r| {
        let probe = match concept.kind() {
            MetricKind::Histogram => format!("{}_count", r.name),
            _ => r.name.to_string(),
        };
        samples.iter().any(|s| matches(s, &probe, r))
    })
}

/// Picks the profile that answers the most concepts on this page (ties: the order of
/// [`EngineKind::ALL`]); `None` when no profile's names are present at all.
pub fn detect(samples: &[Sample]) -> Option<DetectedProfile> {
    detect_with(|profile, concept| resolve(samples, profile, concept))
}

/// [`detect`] over any source of names: `resolve` gives, for a profile and a concept, the
/// first candidate metric present.
pub fn detect_with(
    resolve: impl Fn(&Profile, Concept) -> Option<&'static MetricRef>,
) -> Option<DetectedProfile> {
    let mut best: Option<DetectedProfile> = None;
    for engine in EngineKind::ALL {
        let d = profile_with(engine, &resolve);
        if !d.found.is_empty() && best.as_ref().is_none_or(|b| d.found.len() > b.found.len()) {
            best = Some(d);
        }
    }
    best
}

/// What `engine`'s profile finds, per concept the candidate `resolve` picks.
pub fn profile_with(
    engine: EngineKind,
    resolve: impl Fn(&Profile, Concept) -> Option<&'static MetricRef>,
) -> DetectedProfile {
    let profile = engine.profile();
    let mut d = DetectedProfile::empty(engine);
    for concept in profile.concepts() {
        match resolve(profile, concept) {
            Some(r) => {
                d.found.push(concept);
                d.names.insert(concept, r.to_string());
                if r.deprecated {
                    d.deprecated.push(concept);
                }
            }
            None => d.missing.push(concept),
        }
    }
    // The engine's own hit-rate gauge is only a stand-in for hits ÷ queries (vLLM's V0
    // gauge is gone from V1): with both counters found, nothing is missing.
    if d.found.contains(&Concept::PrefixCacheQueries) && d.found.contains(&Concept::PrefixCacheHits)
    {
        d.missing.retain(|c| *c != Concept::PrefixCacheHitRate);
    }
    d
}

fn aggregate(values: impl Iterator<Item = f64>, how: Aggregation) -> Option<f64> {
    let mut n = 0usize;
    let mut acc = match how {
        Aggregation::Max => f64::NEG_INFINITY,
        _ => 0.0,
    };
    for v in values.filter(|v| v.is_finite()) {
        n += 1;
        acc = match how {
            Aggregation::Max => acc.max(v),
            _ => acc + v,
        };
    }
    match (n, how) {
        (0, _) => None,
        (_, Aggregation::Mean) => Some(acc / n as f64),
        _ => Some(acc),
    }
}

/// Value of a gauge or counter concept on this page, aggregated over label sets (see the
/// module doc); `None` when the profile has no such metric, it is absent from the page, or
/// the concept is a histogram (use [`histogram_totals`]).
pub fn concept_value(samples: &[Sample], profile: &Profile, concept: Concept) -> Option<f64> {
    if concept.kind() == MetricKind::Histogram {
        return None;
    }
    let r = resolve(samples, profile, concept)?;
    aggregate(
        samples
            .iter()
            .filter(|s| matches(s, r.name, r))
            .map(|s| s.value),
        concept.aggregation(),
    )
}

/// `_sum` and `_count` of a histogram, added over label sets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistogramTotals {
    /// Sum of the observations.
    pub sum: f64,
    /// Number of observations.
    pub count: f64,
}

/// `_sum` and `_count` of a histogram concept on this page, added over label sets; `None`
/// when absent or when the concept is not a histogram.
pub fn histogram_totals(
    samples: &[Sample],
    profile: &Profile,
    concept: Concept,
) -> Option<HistogramTotals> {
    if concept.kind() != MetricKind::Histogram {
        return None;
    }
    let r = resolve(samples, profile, concept)?;
    let total = |suffix: &str| {
        let name = format!("{}{suffix}", r.name);
        aggregate(
            samples
                .iter()
                .filter(|s| matches(s, &name, r))
                .map(|s| s.value),
            Aggregation::Sum,
        )
    };
    Some(HistogramTotals {
        sum: total("_sum").unwrap_or(0.0),
        count: total("_count")?,
    })
}

/// Every concept of `profile` present on the page, keyed by [`Concept::key`]; a histogram
/// gives two entries, `<key>_sum` and `<key>_count`, and the TTFT histogram also its
/// cumulative buckets ([`bucket_key`]), so a point's engine-side TTFT median can be read
/// from them. An engine's prefix-cache block size, where its page states it, is under
/// [`CACHE_BLOCK_SIZE`].
pub fn values(samples: &[Sample], profile: &Profile) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for concept in profile.concepts() {
        if concept.kind() == MetricKind::Histogram {
            if let Some(h) = histogram_totals(samples, profile, concept) {
                out.insert(format!("{}_sum", concept.key()), h.sum);
                out.insert(format!("{}_count", concept.key()), h.count);
            }
            if concept == Concept::Ttft {
                for (le, count) in histogram_buckets(samples, profile, concept) {
                    out.insert(bucket_key(concept, le), count);
                }
            }
        } else if let Some(v) = concept_value(samples, profile, concept) {
            out.insert(concept.key().to_string(), v);
        }
    }
    if let Some(b) = cache_block_size(samples, profile.engine) {
        out.insert(CACHE_BLOCK_SIZE.to_owned(), b);
    }
    if profile.engine == EngineKind::LlamaCpp
        && let (Some(computed), Some(reused)) = (
            out.get(Concept::PromptTokens.key()).copied(),
            out.get(Concept::PrefixCacheHits.key()).copied(),
        )
    {
        // Counted apart on its page: the prompt tokens are both, and all were looked up.
        for c in [Concept::PromptTokens, Concept::PrefixCacheQueries] {
            out.insert(c.key().to_owned(), computed + reused);
        }
    }
    out
}

/// The values key of the engine's prefix-cache block size (tokens): prefixes are cached
/// in whole blocks, so a shared prefix shorter than one block is never a hit.
pub const CACHE_BLOCK_SIZE: &str = "cache_block_size";

/// The key of one cumulative bucket of a histogram concept: `ttft_le_0.04`.
pub fn bucket_key(concept: Concept, le: f64) -> String {
    format!("{}_le_{le}", concept.key())
}

/// The bucket bound of a key [`bucket_key`] wrote for `concept`.
pub fn bucket_bound(concept: Concept, key: &str) -> Option<f64> {
    key.strip_prefix(concept.key())?
        .strip_prefix("_le_")?
        .parse()
        .ok()
}

/// Cumulative bucket counts `(le, count)` of a histogram concept, added over label sets,
/// by ascending bound (`+Inf` last).
pub fn histogram_buckets(
    samples: &[Sample],
    profile: &Profile,
    concept: Concept,
) -> Vec<(f64, f64)> {
    let Some(r) = resolve(samples, profile, concept) else {
        return Vec::new();
    };
    let name = format!("{}_bucket", r.name);
    let mut by: Vec<(f64, f64)> = Vec::new();
    for s in samples.iter().filter(|s| matches(s, &name, r)) {
        let Some(le) = s.label("le").and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        match by.iter_mut().find(|b| b.0 == le) {
            Some(b) => b.1 += s.value,
            None => by.push((le, s.value)),
        }
    }
    by.sort_by(|a, b| a.0.total_cmp(&b.0));
    by
}

/// The prefix-cache block size a page states: vLLM's `cache_config_info{block_size}`.
pub fn cache_block_size(samples: &[Sample], engine: EngineKind) -> Option<f64> {
    match engine {
        EngineKind::Vllm => samples
            .iter()
            .filter(|s| s.name == "vllm:cache_config_info")
            .find_map(|s| s.label("block_size")?.parse().ok()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_metrics::parse::parse;

    const VLLM_TEXT: &str = include_str!("testdata/vllm.prom");
    const SGLANG_TEXT: &str = include_str!("testdata/sglang.prom");
    const DCGM_TEXT: &str = include_str!("testdata/dcgm.prom");

    fn approx(a: Option<f64>, b: f64) {
        let a = a.unwrap_or_else(|| panic!("no value, expected {b}"));
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    /// An engine's one name is the one JSON gives it, and names it back; the operator reads
    /// the containers of exactly the engines whose descriptor says how.
    #[test]
    fn each_engine_is_named_once_and_its_descriptor_says_what_goodput_does_with_it() {
        for kind in EngineKind::ALL {
            let json = serde_json::to_value(kind).expect("serializes");
            assert_eq!(json.as_str(), Some(kind.as_str()));
            assert_eq!(EngineKind::from_name(kind.as_str()), Some(kind));
        }
        assert_eq!(EngineKind::from_name("vLLM"), None);
        let read: Vec<&str> = EngineKind::ALL
            .into_iter()
            .filter(|k| k.descriptor().container.is_some())
            .map(EngineKind::as_str)
            .collect();
        assert_eq!(read, ["vllm", "sglang"]);
        let reset = EngineKind::Vllm
            .descriptor()
            .cache_reset
            .expect("vLLM resets");
        assert_eq!(
            (reset.path, reset.says_success),
            ("/reset_prefix_cache", true)
        );
        assert_eq!(EngineKind::LlamaCpp.descriptor().cache_reset, None);
    }

    /// The page of the pinned real engine (vLLM 0.32's CPU build serving the test model,
    /// `tests/engines/`), as scraped: every concept the profile maps is on it.
    #[test]
    fn the_vllm_profile_finds_every_concept_on_a_live_0_32_page() {
        let samples = parse(include_str!("testdata/vllm-0.32-cpu.prom")).samples;
        let d = detect(&samples).unwrap_or_else(|| panic!("nothing detected"));
        assert_eq!(d.engine, EngineKind::Vllm);
        assert!(d.missing.is_empty(), "{:?}", d.missing);
        assert!(d.deprecated.is_empty(), "{:?}", d.deprecated);
        let v = values(&samples, d.profile());
        assert_eq!(
            v.get(CACHE_BLOCK_SIZE),
            Some(&128.0),
            "the CPU build's block size"
        );
        let buckets: Vec<(f64, f64)> = v
            .iter()
            .filter_map(|(k, n)| Some((bucket_bound(Concept::Ttft, k)?, *n)))
            .collect();
        assert!(buckets.len() > 10, "{buckets:?}");
        let inf = buckets.iter().find(|b| b.0.is_infinite()).map(|b| b.1);
        assert_eq!(
            inf,
            v.get("ttft_count").copied(),
            "+Inf holds every observation"
        );
    }

    /// A live page of the pinned llama.cpp server (`tests/engines/`) after two requests of
    /// the same 300-token prompt: 304 tokens computed, 299 reused from the slot's cache.
    #[test]
    fn llama_cpp_prompt_tokens_are_computed_and_reused_added() {
        let samples = parse(include_str!("testdata/llama-cpp-0.3.36.prom")).samples;
        let d = detect(&samples).unwrap_or_else(|| panic!("nothing detected"));
        assert_eq!(d.engine, EngineKind::LlamaCpp);
        assert!(d.missing.is_empty(), "{:?}", d.missing);
        let v = values(&samples, d.profile());
        assert_eq!(v.get("prompt_tokens"), Some(&603.0));
        assert_eq!(v.get("prefix_cache_queries"), Some(&603.0));
        assert_eq!(v.get("prefix_cache_hits"), Some(&299.0));
        assert_eq!(v.get("running"), Some(&0.0));
    }

    #[test]
    fn vllm_current_names_sum_over_engines_and_reasons() {
        let samples = parse(VLLM_TEXT).samples;
        let d = detect(&samples).unwrap_or_else(|| panic!("nothing detected"));
        assert_eq!(d.engine, EngineKind::Vllm);
        // Everything: the V0 hit-rate gauge is gone, and hits ÷ queries stand for it.
        assert!(d.missing.is_empty(), "{:?}", d.missing);
        assert!(d.deprecated.is_empty());
        assert_eq!(d.names[&Concept::KvUsage], "vllm:kv_cache_usage_perc");
        let p = d.profile();
        approx(concept_value(&samples, p, Concept::QueueWaiting), 7.0);
        approx(concept_value(&samples, p, Concept::Running), 20.0);
        // KV usage is a fraction: the mean of the two DP engines.
        approx(concept_value(&samples, p, Concept::KvUsage), 0.5);
        approx(concept_value(&samples, p, Concept::RequestSuccess), 4.0);
        approx(concept_value(&samples, p, Concept::PrefixCacheHits), 1024.0);
        approx(concept_value(&samples, p, Concept::Preemptions), 2.0);
        assert_eq!(concept_value(&samples, p, Concept::Ttft), None);
        assert_eq!(
            histogram_totals(&samples, p, Concept::Ttft),
            Some(HistogramTotals {
                sum: 0.5,
                count: 4.0
            })
        );
        let v = values(&samples, p);
        assert_eq!(v.get("ttft_count"), Some(&4.0));
        assert_eq!(v.get("queue_time_sum"), Some(&0.2));
        assert_eq!(v.get("queue_waiting"), Some(&7.0));
        assert!(!v.contains_key("prefix_cache_hit_rate"));
    }

    #[test]
    fn old_vllm_names_are_read_through_aliases() {
        let text = "\
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name=\"m\"} 5.0
vllm:num_requests_running{model_name=\"m\"} 2.0
vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.3
vllm:gpu_prefix_cache_queries_total{model_name=\"m\"} 100.0
vllm:gpu_prefix_cache_hits_total{model_name=\"m\"} 40.0
vllm:time_per_output_token_seconds_sum{model_name=\"m\"} 1.5
vllm:time_per_output_token_seconds_count{model_name=\"m\"} 30.0
";
        let samples = parse(text).samples;
        let d = detect(&samples).unwrap_or_else(|| panic!("nothing detected"));
        assert_eq!(d.engine, EngineKind::Vllm);
        assert_eq!(
            d.deprecated,
            vec![
                Concept::KvUsage,
                Concept::PrefixCacheQueries,
                Concept::PrefixCacheHits,
                Concept::Itl
            ]
        );
        assert_eq!(d.names[&Concept::KvUsage], "vllm:gpu_cache_usage_perc");
        let p = d.profile();
        approx(concept_value(&samples, p, Concept::KvUsage), 0.3);
        approx(concept_value(&samples, p, Concept::PrefixCacheHits), 40.0);
        assert_eq!(
            histogram_totals(&samples, p, Concept::Itl),
            Some(HistogramTotals {
                sum: 1.5,
                count: 30.0
            })
        );

        // A version exposing both names reads the current one.
        let both = format!("{text}vllm:kv_cache_usage_perc{{model_name=\"m\"}} 0.31\n");
        let samples = parse(&both).samples;
        approx(concept_value(&samples, &VLLM, Concept::KvUsage), 0.31);
    }

    #[test]
    fn sglang_is_detected_with_token_usage_and_hit_rate_gauge() {
        let samples = parse(SGLANG_TEXT).samples;
        let d = detect(&samples).unwrap_or_else(|| panic!("nothing detected"));
        assert_eq!(d.engine, EngineKind::Sglang);
        assert_eq!(
            d.missing,
            vec![Concept::RequestAborted, Concept::Itl, Concept::E2e]
        );
        let p = d.profile();
        approx(concept_value(&samples, p, Concept::QueueWaiting), 9.0);
        approx(concept_value(&samples, p, Concept::Running), 5.0);
        approx(concept_value(&samples, p, Concept::KvUsage), 0.4);
        approx(concept_value(&samples, p, Concept::PrefixCacheHitRate), 0.5);
        approx(concept_value(&samples, p, Concept::PrefixCacheHits), 1024.0);
        approx(
            concept_value(&samples, p, Concept::PrefixCacheQueries),
            2048.0,
        );
        assert_eq!(concept_value(&samples, p, Concept::Preemptions), None);
        assert_eq!(
            histogram_totals(&samples, p, Concept::QueueTime).map(|h| h.count),
            Some(2.0)
        );
    }

    #[test]
    fn trtllm_triton_dynamo_and_dcgm_profiles() {
        let trt = "\
trtllm_num_requests_waiting{model_name=\"m\",engine_type=\"trtllm\"} 4
trtllm_num_requests_running{model_name=\"m\",engine_type=\"trtllm\"} 16
trtllm_kv_cache_utilization{model_name=\"m\",engine_type=\"trtllm\"} 0.6
trtllm_kv_cache_hit_rate{model_name=\"m\",engine_type=\"trtllm\"} 0.2
trtllm_request_success_total{model_name=\"m\",finished_reason=\"length\"} 10
trtllm_time_to_first_token_seconds_sum{model_name=\"m\"} 2.0
trtllm_time_to_first_token_seconds_count{model_name=\"m\"} 10
";
        let s = parse(trt).samples;
        let d = detect(&s).unwrap_or_else(|| panic!("nothing detected"));
        assert_eq!(d.engine, EngineKind::TensorrtLlm);
        approx(concept_value(&s, d.profile(), Concept::QueueWaiting), 4.0);
        approx(
            concept_value(&s, d.profile(), Concept::PrefixCacheHitRate),
            0.2,
        );

        let triton = "\
nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"waiting\",version=\"1\"} 6
nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"scheduled\",version=\"1\"} 32
nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"max\",version=\"1\"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\",model=\"tensorrt_llm\",version=\"1\"} 0.45
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"used\",model=\"tensorrt_llm\",version=\"1\"} 900
";
        let s = parse(triton).samples;
        let d = detect(&s).unwrap_or_else(|| panic!("nothing detected"));
        assert_eq!(d.engine, EngineKind::Triton);
        assert_eq!(
            d.names[&Concept::QueueWaiting],
            "nv_trt_llm_request_metrics{request_type=\"waiting\"}"
        );
        approx(concept_value(&s, d.profile(), Concept::QueueWaiting), 6.0);
        approx(concept_value(&s, d.profile(), Concept::Running), 32.0);
        approx(concept_value(&s, d.profile(), Concept::KvUsage), 0.45);

        let dynamo = "\
dynamo_frontend_active_requests{model=\"m\"} 12
dynamo_frontend_inflight_requests{model=\"m\"} 12
dynamo_frontend_requests_total{model=\"m\",endpoint=\"chat_completions\"} 100
dynamo_frontend_output_tokens_total{model=\"m\"} 5000
dynamo_frontend_time_to_first_token_seconds_sum{model=\"m\"} 10
dynamo_frontend_time_to_first_token_seconds_count{model=\"m\"} 100
";
        let s = parse(dynamo).samples;
        let d = detect(&s).unwrap_or_else(|| panic!("nothing detected"));
        assert_eq!(d.engine, EngineKind::Dynamo);
        approx(concept_value(&s, d.profile(), Concept::Running), 12.0);
        assert!(d.missing.contains(&Concept::QueueWaiting));

        let s = parse(DCGM_TEXT).samples;
        let d = detect(&s).unwrap_or_else(|| panic!("nothing detected"));
        assert_eq!(d.engine, EngineKind::Dcgm);
        assert_eq!(d.missing, vec![Concept::GpuEngineActive]);
        let p = d.profile();
        approx(concept_value(&s, p, Concept::GpuUtilization), 70.0);
        approx(concept_value(&s, p, Concept::FbUsedMib), 141_000.0);
        approx(concept_value(&s, p, Concept::PowerWatts), 912.75);
        approx(concept_value(&s, p, Concept::XidErrors), 79.0);
    }

    #[test]
    fn unknown_pages_detect_nothing_and_non_finite_values_are_ignored() {
        let s = parse("router_requests_total 5\nprocess_cpu_seconds_total 1.5\n").samples;
        assert_eq!(detect(&s), None);
        let s = parse(
            "vllm:kv_cache_usage_perc{engine=\"0\"} NaN\nvllm:kv_cache_usage_perc{engine=\"1\"} 0.5\n",
        )
        .samples;
        approx(concept_value(&s, &VLLM, Concept::KvUsage), 0.5);
        let s = parse("vllm:kv_cache_usage_perc{engine=\"0\"} NaN\n").samples;
        assert_eq!(concept_value(&s, &VLLM, Concept::KvUsage), None);
    }

    #[test]
    fn concept_keys_match_their_serde_names() {
        for c in Concept::ALL {
            let json = serde_json::to_string(&c).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", c.key()));
        }
        for e in EngineKind::ALL {
            let json = serde_json::to_string(&e).unwrap_or_default();
            assert_eq!(json, format!("\"{e}\""));
        }
    }
}
