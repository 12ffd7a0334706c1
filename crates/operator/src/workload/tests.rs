//! Unit tests of `workload`.

use std::path::Path;

use serde_json::json;

use super::*;

/// The end-to-end tests' manifest (tests/support/manifest.rs), dedented.
const MANIFEST: &str = r#"
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

fn manifest() -> WorkloadManifest {
    goodput_core::workload::parse_manifest(MANIFEST, Path::new("test manifest"))
        .expect("the test manifest is valid")
        .manifest
}

/// A Deployment with the given annotations and one container.
fn deployment(annotations: Value, container: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llm", "annotations": annotations},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"labels": {"app": "llm"}},
                "spec": {"containers": [
                    {"name": "proxy", "image": "envoyproxy/envoy:v1.30.0", "args": ["--tp", "9"]},
                    container,
                ]},
            },
        },
    })
}

fn declared<T: Clone>(d: &Option<Declared<T>>) -> (T, String) {
    let d = d.as_ref().expect("declared");
    (d.value.clone(), d.from.clone())
}

#[test]
fn vllm_deployment_by_args_only() {
    let w = deployment(
        json!({}),
        json!({
            "name": "vllm",
            "image": "vllm/vllm-openai:v0.6.3",
            "args": ["--model", "Qwen/Qwen2.5-7B-Instruct", "--revision=r1",
                     "--tensor-parallel-size", "2", "--port", "8000"],
        }),
    );
    let d = declared_identity(&w);
    assert_eq!(d.problems, Vec::<String>::new());
    assert_eq!(
        declared(&d.model),
        (
            "Qwen/Qwen2.5-7B-Instruct".to_string(),
            "container vllm arg --model".to_string()
        )
    );
    assert_eq!(
        declared(&d.model_revision),
        (
            "r1".to_string(),
            "container vllm arg --revision".to_string()
        )
    );
    assert_eq!(
        declared(&d.tp),
        (2, "container vllm arg --tensor-parallel-size".to_string())
    );
    assert_eq!(
        declared(&d.engine_version),
        (
            "0.6.3".to_string(),
            "container vllm image vllm/vllm-openai:v0.6.3".to_string()
        )
    );
    assert_eq!(declared(&d.engine).0, "vllm");
    assert_eq!(d.workload_mix, None);
    assert_eq!(
        identity_key(&d),
        "model=Qwen/Qwen2.5-7B-Instruct revision=r1 engine=0.6.3 tp=2"
    );
}

#[test]
fn vllm_serve_positional_and_api_server_module() {
    let w = deployment(
        json!({}),
        json!({
            "name": "engine",
            "image": "registry.local:5000/vllm/vllm-openai:latest",
            "command": ["vllm", "serve"],
            "args": ["meta-llama/Llama-3.1-8B-Instruct", "-tp", "4"],
        }),
    );
    let d = declared_identity(&w);
    assert_eq!(
        declared(&d.model),
        (
            "meta-llama/Llama-3.1-8B-Instruct".to_string(),
            "container engine arg after `vllm serve`".to_string()
        )
    );
    assert_eq!(declared(&d.tp).0, 4);
    assert_eq!(d.engine_version, None, "latest is no version");
    assert_eq!(
        declared(&d.engine),
        ("vllm".to_string(), "container engine command".to_string())
    );
    assert_eq!(
        identity_key(&d),
        "model=meta-llama/Llama-3.1-8B-Instruct revision=? engine=? tp=4"
    );

    let w = deployment(
        json!({}),
        json!({
            "name": "server",
            "image": "my.registry/inference:1.2",
            "command": ["sh", "-c", "pip list && python3 -m vllm.entrypoints.openai.api_server --model 'm/x' --tensor-parallel-size=8"],
        }),
    );
    let d = declared_identity(&w);
    assert_eq!(declared(&d.engine).0, "vllm");
    assert_eq!(declared(&d.model).0, "m/x");
    assert_eq!(declared(&d.tp).0, 8);
    assert_eq!(d.engine_version, None, "the image does not name an engine");
}

#[test]
fn sglang_tp_size_with_equals() {
    let w = deployment(
        json!({}),
        json!({
            "name": "sglang",
            "image": "lmsysorg/sglang:v0.4.1.post7-cu124",
            "command": ["python3", "-m", "sglang.launch_server"],
            "args": ["--model-path", "Qwen/Qwen2.5-7B-Instruct", "--tp-size=2", "--revision", "abc123"],
        }),
    );
    let d = declared_identity(&w);
    assert_eq!(d.problems, Vec::<String>::new());
    assert_eq!(declared(&d.engine).0, "sglang");
    assert_eq!(
        declared(&d.model),
        (
            "Qwen/Qwen2.5-7B-Instruct".to_string(),
            "container sglang arg --model-path".to_string()
        )
    );
    assert_eq!(
        declared(&d.tp),
        (2, "container sglang arg --tp-size".to_string())
    );
    assert_eq!(declared(&d.model_revision).0, "abc123");
    assert_eq!(declared(&d.engine_version).0, "0.4.1.post7");
}

#[test]
fn leader_worker_set_reads_the_leader_template() {
    let w = json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "big"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": {
                    "metadata": {"annotations": {MODEL_REVISION: "r7"}},
                    "spec": {"containers": [{
                        "name": "leader",
                        "image": "vllm/vllm-openai:v0.8.5",
                        "command": ["sh", "-c", "ray start --head --port=6379; vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 --pipeline-parallel-size 2"],
                    }]},
                },
                "workerTemplate": {
                    "spec": {"containers": [{
                        "name": "worker",
                        "image": "vllm/vllm-openai:v0.9.0",
                        "command": ["sh", "-c", "ray start --address=$(LWS_LEADER_ADDRESS):6379 --block"],
                    }]},
                },
            },
        },
    });
    let d = declared_identity(&w);
    assert_eq!(d.problems, Vec::<String>::new());
    assert_eq!(declared(&d.model).0, "deepseek-ai/DeepSeek-V3");
    assert_eq!(
        declared(&d.model_revision),
        (
            "r7".to_string(),
            "pod template annotation goodput.dev/model-revision".to_string()
        )
    );
    assert_eq!(declared(&d.tp).0, 8);
    assert_eq!(
        declared(&d.engine_version),
        (
            "0.8.5".to_string(),
            "container leader image vllm/vllm-openai:v0.8.5".to_string()
        )
    );

    // Without a leader template, the worker template is read.
    let mut w = w;
    let lwt = w["spec"]["leaderWorkerTemplate"]
        .as_object_mut()
        .expect("an object");
    lwt.remove("leaderTemplate");
    let d = declared_identity(&w);
    assert_eq!(declared(&d.engine_version).0, "0.9.0");
    assert_eq!(d.model, None);
}

#[test]
fn annotations_override_args() {
    let mut w = deployment(
        json!({
            MODEL_REVISION: "r2",
            TP: "4",
            ENGINE_VERSION: "v0.7.0",
            WORKLOAD_MIX: "chat=0.6, long=0.4,",
        }),
        json!({
            "name": "vllm",
            "image": "vllm/vllm-openai:v0.6.3",
            "args": ["--model", "Qwen/Qwen2.5-7B-Instruct", "--revision", "r1", "--tensor-parallel-size", "2"],
        }),
    );
    // The workload's own annotation wins over the pod template's.
    w["spec"]["template"]["metadata"]["annotations"] = json!({TP: "8", MODEL: "pod/model"});
    let d = declared_identity(&w);
    assert_eq!(d.problems, Vec::<String>::new());
    assert_eq!(
        declared(&d.model_revision),
        (
            "r2".to_string(),
            "annotation goodput.dev/model-revision".to_string()
        )
    );
    assert_eq!(
        declared(&d.tp),
        (4, "annotation goodput.dev/tp".to_string())
    );
    assert_eq!(
        declared(&d.model),
        (
            "pod/model".to_string(),
            "pod template annotation goodput.dev/model".to_string()
        )
    );
    assert_eq!(declared(&d.engine_version).0, "v0.7.0");
    assert_eq!(
        declared(&d.workload_mix).0,
        BTreeMap::from([("chat".to_string(), 0.6), ("long".to_string(), 0.4)])
    );
    assert_eq!(
        identity_key(&d),
        "model=pod/model revision=r2 engine=0.7.0 tp=4"
    );
}

#[test]
fn a_bad_tp_annotation_is_a_problem_and_a_refusal() {
    let w = deployment(
        json!({TP: "two", WORKLOAD_MIX: "chat0.5,long=0.5"}),
        json!({"name": "vllm", "image": "vllm/vllm-openai:v0.1.0", "args": ["--tensor-parallel-size", "1"]}),
    );
    let d = declared_identity(&w);
    assert_eq!(
        d.tp, None,
        "an unreadable annotation does not fall back to args"
    );
    assert_eq!(d.workload_mix, None);
    assert_eq!(
            d.problems,
            vec![
                r#"TP: annotation goodput.dev/tp is "two", not a positive whole number"#.to_string(),
                r#"workload mix: annotation goodput.dev/workload-mix is "chat0.5,long=0.5", entry "chat0.5" has no '='"#.to_string(),
            ]
        );
    let c = compare(&manifest(), &d);
    assert_eq!(c.refused, d.problems);
    assert!(
        c.unchecked
            .iter()
            .all(|u| !u.starts_with("TP:") && !u.starts_with("workload mix:")),
        "a fact with a problem is refused, not unchecked: {:?}",
        c.unchecked
    );
}

#[test]
fn an_unreadable_arg_is_a_problem() {
    let w = deployment(
        json!({}),
        json!({"name": "vllm", "image": "vllm/vllm-openai", "args": ["--tensor-parallel-size", "$(TP)", "--revision"]}),
    );
    let d = declared_identity(&w);
    assert_eq!(
            d.problems,
            vec![
                "model revision: container vllm arg --revision has no value".to_string(),
                r#"TP: container vllm arg --tensor-parallel-size is "$(TP)", not a positive whole number"#.to_string(),
            ]
        );
}

/// A workload declaring exactly what the test manifest measured.
fn matching() -> Value {
    deployment(
        json!({MODEL_REVISION: "r1-fixture", WORKLOAD_MIX: "chat=0.5,long=0.5"}),
        json!({
            "name": "vllm",
            "image": "vllm/vllm-openai:v0.1.0-cu124",
            "args": ["--model", "Qwen/Qwen2.5-7B-Instruct", "--tensor-parallel-size", "1"],
        }),
    )
}

#[test]
fn compare_all_match() {
    let c = compare(&manifest(), &declared_identity(&matching()));
    assert_eq!(c, Comparison::default());
}

#[test]
fn compare_revision_and_tp_differ() {
    let mut w = matching();
    w["metadata"]["annotations"][MODEL_REVISION] = json!("r2");
    w["metadata"]["annotations"][TP] = json!("2");
    let c = compare(&manifest(), &declared_identity(&w));
    assert_eq!(
            c.refused,
            vec![
                r#"model revision: the benchmark measured "r1-fixture", the workload runs "r2" (annotation goodput.dev/model-revision)"#.to_string(),
                "TP: the benchmark measured tp=1, the workload runs tp=2 (annotation goodput.dev/tp)".to_string(),
            ]
        );
    assert_eq!(c.unchecked, Vec::<String>::new());
}

#[test]
fn compare_mix_differs_names_the_class() {
    let mut w = matching();
    // Within tolerance: same mix.
    w["metadata"]["annotations"][WORKLOAD_MIX] = json!("chat=0.505,long=0.495");
    assert_eq!(
        compare(&manifest(), &declared_identity(&w)),
        Comparison::default()
    );

    w["metadata"]["annotations"][WORKLOAD_MIX] = json!("chat=0.5,long=0.4,code=0.1");
    let c = compare(&manifest(), &declared_identity(&w));
    assert_eq!(
            c.refused,
            vec![
                "workload mix: the benchmark measured chat=0.5,long=0.5, the workload runs chat=0.5,code=0.1,long=0.4 (annotation goodput.dev/workload-mix); classes that differ: code, long".to_string(),
            ]
        );
    assert_eq!(c.unchecked, Vec::<String>::new());
}

#[test]
fn compare_nothing_declared_is_all_unchecked() {
    let w = deployment(json!({}), json!({"name": "app", "image": "nginx:1.27"}));
    let d = declared_identity(&w);
    assert_eq!(d, DeclaredIdentity::default());
    assert_eq!(identity_key(&d), "model=? revision=? engine=? tp=?");
    let c = compare(&manifest(), &d);
    assert_eq!(c.refused, Vec::<String>::new());
    let labels: Vec<&str> = c
        .unchecked
        .iter()
        .map(|u| u.split(':').next().unwrap_or(""))
        .collect();
    assert_eq!(
        labels,
        [
            "model",
            "model revision",
            "engine version",
            "TP",
            "workload mix"
        ]
    );
    assert_eq!(
        c.unchecked[1],
        "model revision: the workload does not declare it (annotation goodput.dev/model-revision or a --revision argument)"
    );
}

#[test]
fn engine_version_ignores_a_leading_v() {
    let mut w = matching();
    w["metadata"]["annotations"][ENGINE_VERSION] = json!("v0.1.0");
    assert_eq!(
        compare(&manifest(), &declared_identity(&w)),
        Comparison::default()
    );
    w["metadata"]["annotations"][ENGINE_VERSION] = json!("0.2.0");
    let c = compare(&manifest(), &declared_identity(&w));
    assert_eq!(
            c.refused,
            vec![r#"engine version: the benchmark measured "0.1.0", the workload runs "0.2.0" (annotation goodput.dev/engine-version)"#.to_string()]
        );
}

#[test]
fn image_tags() {
    assert_eq!(split_image("vllm/vllm-openai"), ("vllm/vllm-openai", None));
    assert_eq!(
        split_image("reg:5000/vllm/vllm-openai@sha256:abcd"),
        ("reg:5000/vllm/vllm-openai", None)
    );
    assert_eq!(
        split_image("reg:5000/lmsysorg/sglang:v0.4.1-cu124@sha256:abcd"),
        ("reg:5000/lmsysorg/sglang", Some("v0.4.1-cu124"))
    );
    assert_eq!(version_from_tag("v0.6.3"), Some("0.6.3".to_string()));
    assert_eq!(
        version_from_tag("0.4.1.post7-cu124"),
        Some("0.4.1.post7".to_string())
    );
    assert_eq!(version_from_tag("latest"), None);
    assert_eq!(version_from_tag("nightly-2024"), None);
}
