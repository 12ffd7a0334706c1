//! The workload both shells' end-to-end tests run (`goodput bench` and `goodput operator`):
//! two classes against one simulated Qwen2.5-7B replica, small enough for a time-scaled
//! point of a few seconds, indented to sit under `spec.workload.manifest:`.

/// The inline manifest, each line indented by six spaces.
pub const MANIFEST: &str = r#"
      model: {id: Qwen/Qwen2.5-7B-Instruct, revision: r1-fixture, tokenizer_revision: t1-fixture, precision: bf16}
      engine:
        name: goodput-simulated-engine
        version: "0.1.0"
        placement: {tp: 1, pp: 1, dp: 1, replicas: 1, gpus: 1}
        prefix_cache: enabled
        speculative_decoding: disabled
        disaggregated_prefill: disabled
      client:
        location: localhost
        streaming: true
        arrival_pattern: poisson
        minimum_duration_seconds: 20
        initial_scheduled_requests: 600
        request_schedule_seed: 7
        class_schedule_counts: {chat: 300, long: 300}
        warmup_seconds: 3
      workload:
        - {name: chat, mix: 0.5, input_tokens: 512, output_tokens: 32, request_ttft_cutoff_ms: 300, request_tpot_cutoff_ms: 30}
        - {name: long, mix: 0.5, input_tokens: 2048, output_tokens: 64, request_ttft_cutoff_ms: 1000, request_tpot_cutoff_ms: 40}
      acceptance:
        class_slo_attainment_min: 0.95
        min_successful_samples_per_class: 250
        error_rate_max: 0.01
        queue_trend_required: flat
        target_utilization: 0.75
"#;
