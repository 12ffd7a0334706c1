//! The simulated hardware + model + scheduler configuration, and its presets.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Everything the engine model needs: roofline figures of the GPU(s), the model's size and
/// KV footprint, and the scheduler's limits. One replica; for tensor parallelism the
/// figures are those of the whole TP group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Setup {
    /// Model name served on `/v1/models`.
    pub model: String,
    /// Parameters active per token (MoE: the active experts only).
    pub params: f64,
    /// Bytes of weights read every step.
    pub weight_bytes: f64,
    /// KV-cache bytes per token of context.
    pub kv_bytes_per_token: f64,
    /// Tokens of KV cache that fit in GPU memory.
    pub kv_capacity_tokens: u64,
    /// Peak dense FLOP/s of the replica.
    pub peak_flops: f64,
    /// Memory bandwidth of the replica in bytes/s.
    pub bandwidth: f64,
    /// Fraction of peak FLOP/s reached by the compute-bound part of a step.
    pub mfu: f64,
    /// Fixed cost of every step (scheduling, kernel launches), in seconds.
    pub step_overhead_s: f64,
    /// Token budget of one step (decode tokens plus prefill chunks).
    pub max_num_batched_tokens: u32,
    /// Most sequences running at once.
    pub max_num_seqs: u32,
    /// Longest context (prompt + output) a request may have.
    pub max_model_len: u32,
    /// Tokens per KV block (prefix caching and recompute preemption work in blocks).
    pub block_size: u32,
    /// Reuse cached KV of prompt prefixes seen before (block-granular LRU).
    pub prefix_caching: bool,
    /// How KV capacity is managed.
    pub kv_policy: KvPolicy,
}

/// How the scheduler keeps requests within KV capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KvPolicy {
    /// Admit a request only if prompt + full output fit, reserved up front; never preempt
    /// (the seed model; TensorRT-LLM's guaranteed-no-evict).
    Reserve,
    /// Allocate KV blocks as tokens are computed; when they run out, preempt the most
    /// recently admitted request and recompute it later (vLLM v1).
    Recompute,
}

impl Setup {
    /// Seconds one step takes: `max(compute, memory) + overhead`, where
    /// `compute = 2 × params × tokens / (peak_flops × mfu)` and
    /// `memory = (weight_bytes + kv_bytes_per_token × context_tokens) / bandwidth`.
    pub fn step_time(&self, tokens: u64, context_tokens: u64) -> f64 {
        let compute = 2.0 * self.params * tokens as f64 / (self.peak_flops * self.mfu);
        let memory =
            (self.weight_bytes + self.kv_bytes_per_token * context_tokens as f64) / self.bandwidth;
        compute.max(memory) + self.step_overhead_s
    }

    /// Checks that every figure is usable; each message names the field.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("params", self.params),
            ("weight_bytes", self.weight_bytes),
            ("kv_bytes_per_token", self.kv_bytes_per_token),
            ("peak_flops", self.peak_flops),
            ("bandwidth", self.bandwidth),
            ("mfu", self.mfu),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{name} must be positive, got {v}"));
            }
        }
        if self.mfu > 1.0 {
            return Err(format!("mfu must be at most 1, got {}", self.mfu));
        }
        if !(self.step_overhead_s.is_finite() && self.step_overhead_s >= 0.0) {
            return Err("step_overhead_s must be zero or more".into());
        }
        for (name, v) in [
            ("max_num_batched_tokens", self.max_num_batched_tokens),
            ("max_num_seqs", self.max_num_seqs),
            ("max_model_len", self.max_model_len),
            ("block_size", self.block_size),
        ] {
            if v == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        if self.kv_capacity_tokens < u64::from(self.max_model_len) {
            return Err(format!(
                "kv_capacity_tokens ({}) cannot hold one request of max_model_len ({})",
                self.kv_capacity_tokens, self.max_model_len
            ));
        }
        Ok(())
    }
}

/// One named preset.
pub struct Preset {
    /// Name used by `--preset`.
    pub name: &'static str,
    /// What it models.
    pub description: &'static str,
    /// The figures.
    pub setup: fn() -> Setup,
}

const H100_FLOPS: f64 = 989e12;
const H100_BW: f64 = 3.35e12;
const H200_BW: f64 = 4.8e12;

/// The presets, first the seed's.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "qwen2.5-7b-h100",
        description: "Qwen2.5-7B BF16 on one H100 SXM (the seed's reference setup)",
        setup: qwen7b_h100,
    },
    Preset {
        name: "dense-70b-h200-tp2",
        description: "70B-class dense model, BF16, tensor-parallel over two H200",
        setup: dense70b_h200_tp2,
    },
    Preset {
        name: "dense-70b-fp8-h100-tp2",
        description: "70B-class dense model, FP8 weights, tensor-parallel over two H100 SXM",
        setup: dense70b_fp8_h100_tp2,
    },
    Preset {
        name: "llama-3.1-8b-l4",
        description: "Llama-3.1-8B BF16 on one L4 (24 GB)",
        setup: llama8b_l4,
    },
    Preset {
        name: "llama-3.1-8b-a10g",
        description: "Llama-3.1-8B BF16 on one A10G (24 GB)",
        setup: llama8b_a10g,
    },
];

/// The preset called `name`.
pub fn preset(name: &str) -> Option<Setup> {
    PRESETS.iter().find(|p| p.name == name).map(|p| (p.setup)())
}

/// Why a preset and its overrides give no setup.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PresetError {
    /// No preset has that name; the message lists those that do.
    #[error("unknown preset `{name}` (presets: {})", preset_names().join(", "))]
    Unknown {
        /// The name asked for.
        name: String,
    },
    /// An override does not apply (an unknown field, a value that does not parse, a setup
    /// that is no longer valid).
    #[error("{0}")]
    Overrides(String),
}

/// Every preset's name, in the order `goodput simulate --list-presets` lists them.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.name).collect()
}

/// The setup of the preset called `name` with `overrides` (a YAML or JSON mapping of
/// [`Setup`] fields, or none) applied: the one resolution of a preset that the CLI, the
/// benchmark spec, its lint and the operator all use.
pub fn resolve_preset(name: &str, overrides: Option<&str>) -> Result<Setup, PresetError> {
    let setup = preset(name).ok_or_else(|| PresetError::Unknown {
        name: name.to_owned(),
    })?;
    match overrides {
        None => Ok(setup),
        Some(yaml) => apply_yaml_overrides(&setup, yaml).map_err(PresetError::Overrides),
    }
}

fn qwen7b_h100() -> Setup {
    Setup {
        model: "Qwen/Qwen2.5-7B-Instruct".into(),
        params: 7.6e9,
        weight_bytes: 15.2e9,
        kv_bytes_per_token: 57_344.0,
        // int(55e9 / 57344), as in the seed.
        kv_capacity_tokens: 959_123,
        peak_flops: H100_FLOPS,
        bandwidth: H100_BW,
        mfu: 0.5,
        step_overhead_s: 0.5e-3,
        max_num_batched_tokens: 8192,
        max_num_seqs: 256,
        max_model_len: 32_768,
        block_size: 16,
        prefix_caching: false,
        kv_policy: KvPolicy::Reserve,
    }
}

/// 80 layers × 8 KV heads × 128 dims × (K, V) × bytes per element.
const DENSE70B_KV_BF16: f64 = 80.0 * 8.0 * 128.0 * 2.0 * 2.0;

fn dense70b_h200_tp2() -> Setup {
    Setup {
        model: "dense-70b-class".into(),
        params: 70.6e9,
        weight_bytes: 141e9,
        kv_bytes_per_token: DENSE70B_KV_BF16,
        // 2 × 141 GB × 0.9 usable − 141 GB weights − ~6 GB activations.
        kv_capacity_tokens: (107e9 / DENSE70B_KV_BF16) as u64,
        peak_flops: 2.0 * H100_FLOPS,
        bandwidth: 2.0 * H200_BW,
        mfu: 0.45,
        // Two all-reduces per layer add to the fixed cost.
        step_overhead_s: 1.5e-3,
        max_num_batched_tokens: 8192,
        max_num_seqs: 256,
        max_model_len: 32_768,
        block_size: 16,
        prefix_caching: true,
        kv_policy: KvPolicy::Recompute,
    }
}

fn dense70b_fp8_h100_tp2() -> Setup {
    Setup {
        model: "dense-70b-class-fp8".into(),
        params: 70.6e9,
        weight_bytes: 70.6e9,
        kv_bytes_per_token: DENSE70B_KV_BF16,
        // 2 × 80 GB × 0.9 usable − 70.6 GB weights − ~6 GB activations.
        kv_capacity_tokens: (67e9 / DENSE70B_KV_BF16) as u64,
        // FP8 tensor cores double the dense peak.
        peak_flops: 2.0 * 2.0 * H100_FLOPS,
        bandwidth: 2.0 * H100_BW,
        mfu: 0.4,
        step_overhead_s: 1.5e-3,
        max_num_batched_tokens: 8192,
        max_num_seqs: 256,
        max_model_len: 32_768,
        block_size: 16,
        prefix_caching: true,
        kv_policy: KvPolicy::Recompute,
    }
}

/// 32 layers × 8 KV heads × 128 dims × (K, V) × 2 bytes.
const LLAMA8B_KV: f64 = 32.0 * 8.0 * 128.0 * 2.0 * 2.0;

fn llama8b_24gb(peak_flops: f64, bandwidth: f64) -> Setup {
    Setup {
        model: "meta-llama/Llama-3.1-8B-Instruct".into(),
        params: 8.0e9,
        weight_bytes: 16.1e9,
        kv_bytes_per_token: LLAMA8B_KV,
        // 24 GB × 0.9 usable − 16.1 GB weights − ~1.3 GB activations.
        kv_capacity_tokens: (4.2e9 / LLAMA8B_KV) as u64,
        peak_flops,
        bandwidth,
        mfu: 0.5,
        step_overhead_s: 1e-3,
        max_num_batched_tokens: 2048,
        max_num_seqs: 128,
        max_model_len: 8192,
        block_size: 16,
        prefix_caching: true,
        kv_policy: KvPolicy::Recompute,
    }
}

fn llama8b_l4() -> Setup {
    llama8b_24gb(121e12, 300e9)
}

fn llama8b_a10g() -> Setup {
    llama8b_24gb(125e12, 600e9)
}

/// Applies `key=value` overrides (values in YAML syntax) to a setup, field by field.
pub fn apply_overrides(setup: &Setup, overrides: &[(String, String)]) -> Result<Setup, String> {
    let mut value = serde_json::to_value(setup).map_err(|e| e.to_string())?;
    let map = value
        .as_object_mut()
        .ok_or_else(|| "setup is not an object".to_string())?;
    for (key, raw) in overrides {
        if !map.contains_key(key) {
            let known: Vec<&str> = map.keys().map(String::as_str).collect();
            return Err(format!(
                "unknown setup field `{key}` (fields: {})",
                known.join(", ")
            ));
        }
        let parsed: serde_json::Value =
            serde_saphyr::from_str(raw).map_err(|e| format!("{key}: cannot parse `{raw}`: {e}"))?;
        map.insert(key.clone(), parsed);
    }
    let out: Setup = serde_json::from_value(value).map_err(|e| format!("setup: {e}"))?;
    out.validate()?;
    Ok(out)
}

/// Applies a YAML mapping of overrides (a partial [`Setup`]) to a setup.
pub fn apply_yaml_overrides(setup: &Setup, yaml: &str) -> Result<Setup, String> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_saphyr::from_str(yaml).map_err(|e| format!("setup overrides: {e}"))?;
    let pairs: Vec<(String, String)> = map.into_iter().map(|(k, v)| (k, v.to_string())).collect();
    apply_overrides(setup, &pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preset_resolves_once_with_its_overrides_or_says_what_is_wrong() {
        let plain = resolve_preset("qwen2.5-7b-h100", None).expect("a preset");
        assert_eq!(Some(plain.clone()), preset("qwen2.5-7b-h100"));
        let more = resolve_preset("qwen2.5-7b-h100", Some("max_num_seqs: 7")).expect("applies");
        assert_eq!(more.max_num_seqs, 7);
        assert_ne!(more, plain);
        let unknown = resolve_preset("nope", None).expect_err("no such preset");
        assert!(matches!(&unknown, PresetError::Unknown { name } if name == "nope"));
        let message = unknown.to_string();
        assert!(
            message.starts_with("unknown preset `nope` (presets: "),
            "{message}"
        );
        assert!(
            preset_names().iter().all(|n| message.contains(n)),
            "{message}"
        );
        let bad = resolve_preset("qwen2.5-7b-h100", Some("no_such_field: 1")).expect_err("bad");
        assert!(
            matches!(&bad, PresetError::Overrides(m) if m.contains("unknown setup field `no_such_field`")),
            "{bad:?}"
        );
    }

    #[test]
    fn every_preset_is_valid() {
        for p in PRESETS {
            (p.setup)()
                .validate()
                .unwrap_or_else(|e| panic!("{}: {e}", p.name));
        }
    }

    #[test]
    fn seed_sanity_check_prefill_and_decode_times() {
        let s = preset("qwen2.5-7b-h100").unwrap();
        // Prefill of 1,024 tokens ≈ 2 × 7.6e9 × 1024 / 494.5e12 ≈ 31 ms, plus overhead.
        let prefill = s.step_time(1024, 0);
        assert!((prefill - 0.0320).abs() < 0.0005, "{prefill}");
        // One decode step is bound by reading 15.2 GB of weights: ≈ 4.5 ms + overhead.
        let decode = s.step_time(1, 1024);
        assert!((decode - 0.0050).abs() < 0.0002, "{decode}");
    }

    #[test]
    fn overrides_change_one_field_and_check_names() {
        let s = preset("qwen2.5-7b-h100").unwrap();
        let o = apply_overrides(&s, &[("max_num_seqs".into(), "512".into())]).unwrap();
        assert_eq!(o.max_num_seqs, 512);
        assert_eq!(o.params, s.params);
        let err = apply_overrides(&s, &[("max_seqs".into(), "1".into())]).unwrap_err();
        assert!(err.contains("unknown setup field `max_seqs`"), "{err}");
        let err = apply_overrides(&s, &[("mfu".into(), "2".into())]).unwrap_err();
        assert!(err.contains("mfu"), "{err}");
        let y = apply_yaml_overrides(&s, "weight_bytes: 4.5e9\nkv_policy: recompute\n").unwrap();
        assert_eq!((y.weight_bytes, y.kv_policy), (4.5e9, KvPolicy::Recompute));
    }
}
