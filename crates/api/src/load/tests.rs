//! Unit tests of `load`.

use super::*;
use crate::GROUP;

const VALID: &str = include_str!("../../../../tests/data/lint/valid-inline.yaml");

fn parse(yaml: &str) -> Result<LoadedBenchmark, BenchmarkError> {
    parse_benchmark(yaml, Path::new("bench.yaml"))
}

fn paths<'a>(findings: impl Iterator<Item = &'a Finding>) -> Vec<&'a str> {
    findings.map(|f| f.path.as_str()).collect()
}

#[test]
fn the_crd_names_group_version_columns_and_status() {
    let crd = CapacityBenchmark::crd();
    assert_eq!(crd.spec.group, GROUP);
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("capacitybenchmarks.goodput.dev")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        crd.spec.names.short_names,
        Some(vec!["cb".to_string(), "cbench".to_string()])
    );
    let [version] = crd.spec.versions.as_slice() else {
        panic!("one version");
    };
    assert_eq!(version.name, "v1alpha1");
    assert!(version.served && version.storage);
    let columns: Vec<(&str, &str, &str)> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        columns,
        [
            ("Target", "string", ".status.target"),
            ("Phase", "string", ".status.phase"),
            ("Point", "string", ".status.currentPoint.label"),
            ("Capacity", "number", ".status.capacityRps"),
            ("Per-replica", "number", ".status.capacityPerReplicaRps"),
            ("Replicas", "integer", ".status.requiredReplicas"),
            ("Age", "date", ".metadata.creationTimestamp"),
        ]
    );
    let subresources = version.subresources.as_ref().expect("subresources");
    assert!(subresources.status.is_some());
}

/// The schema as `kubectl explain` and the API server see it.
fn schema() -> serde_json::Value {
    let crd = serde_json::to_value(CapacityBenchmark::crd()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn the_crd_describes_itself_instead_of_kubes_placeholder() {
    let schema = schema();
    let description = schema["description"].as_str().unwrap();
    assert!(
        description.starts_with("CapacityBenchmark measures how many requests per second"),
        "{description}"
    );
    assert!(!description.contains("Auto-generated"), "{description}");
    let service = &schema["properties"]["spec"]["properties"]["target"]["properties"]["service"];
    assert!(
        service["properties"]["namespace"]["description"]
            .as_str()
            .unwrap()
            .contains("Default: the benchmark's namespace")
    );
    assert_eq!(service["properties"]["port"]["type"], "integer");
    assert_eq!(service["properties"]["port"]["minimum"], 1.0);
    assert_eq!(service["properties"]["port"]["maximum"], 65535.0);
    assert_eq!(service["required"], serde_json::json!(["name", "port"]));
}

#[test]
fn conditions_merge_by_type() {
    let schema = schema();
    let conditions = &schema["properties"]["status"]["properties"]["conditions"];
    assert_eq!(conditions["type"], "array");
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(
        conditions["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );
    // A list-map key must be required in the items (the API server refuses the CRD
    // otherwise).
    let required = conditions["items"]["required"].as_array().unwrap();
    assert!(
        required.contains(&serde_json::json!("type")),
        "{required:?}"
    );
}

#[test]
fn the_crd_carries_the_cel_rules() {
    let schema = schema();
    let spec = &schema["properties"]["spec"]["properties"];
    let rules = |at: &serde_json::Value| -> Vec<(String, String)> {
        at["x-kubernetes-validations"]
            .as_array()
            .unwrap_or_else(|| panic!("no rules: {at}"))
            .iter()
            .map(|r| {
                (
                    r["rule"].as_str().unwrap().to_owned(),
                    r["message"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let target = rules(&spec["target"]);
    assert_eq!(target.len(), 1);
    for field in ["self.url", "self.service", "self.simulated"] {
        assert!(target[0].0.contains(&format!("has({field})")), "{target:?}");
    }
    assert!(target[0].0.ends_with("<= 1"), "{target:?}");
    assert_eq!(
        target[0].1,
        "give at most one of url, service and simulated"
    );
    let workload = rules(&spec["workload"]);
    assert_eq!(workload.len(), 1);
    for field in [
        "self.manifest",
        "self.manifestFile",
        "self.manifestConfigMap",
    ] {
        assert!(
            workload[0].0.contains(&format!("has({field})")),
            "{workload:?}"
        );
    }
    assert!(workload[0].0.ends_with("== 1"), "{workload:?}");
    assert_eq!(
        workload[0].1,
        "give exactly one of manifest, manifestFile and manifestConfigMap"
    );
}

#[test]
fn the_status_schema_names_phases_and_point_kinds() {
    let schema = schema();
    let status = &schema["properties"]["status"]["properties"];
    assert_eq!(
        status["phase"]["enum"],
        serde_json::json!(["Pending", "Running", "Succeeded", "Failed"])
    );
    let point = &status["points"]["items"]["properties"];
    assert_eq!(
        point["kind"]["enum"],
        serde_json::json!(["saturation", "rate"])
    );
    assert_eq!(point["cache"]["enum"], serde_json::json!(["cold", "warm"]));
    assert_eq!(
        status["currentPoint"]["properties"]["startedAt"]["format"],
        "date-time"
    );
    // Nothing in the status is required at the top: a partial status is valid.
    assert!(schema["properties"]["status"].get("required").is_none());
}

/// Kubernetes accepts only structural schemas: every node typed (or preserving unknown
/// fields), no references, no `additionalProperties` beside `properties`.
#[test]
fn the_crd_schema_is_structural() {
    fn walk(v: &serde_json::Value, at: &str) {
        let Some(obj) = v.as_object() else { return };
        for banned in [
            "$ref",
            "$defs",
            "definitions",
            "anyOf",
            "oneOf",
            "allOf",
            "not",
        ] {
            assert!(!obj.contains_key(banned), "{at}: {banned}");
        }
        assert!(
            obj.contains_key("type") || obj.contains_key("x-kubernetes-preserve-unknown-fields"),
            "{at}: no type"
        );
        assert!(
            !(obj.contains_key("properties") && obj.contains_key("additionalProperties")),
            "{at}: properties and additionalProperties"
        );
        if let Some(props) = obj.get("properties").and_then(|p| p.as_object()) {
            for (name, schema) in props {
                walk(schema, &format!("{at}.{name}"));
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(schema) = obj.get(key) {
                walk(schema, &format!("{at}.{key}"));
            }
        }
    }
    let crd = serde_json::to_value(CapacityBenchmark::crd()).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    walk(schema, "openAPIV3Schema");
    let spec = &schema["properties"]["spec"]["properties"];
    assert_eq!(
        spec["target"]["properties"]["simulated"]["properties"]["overrides"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
}

#[test]
fn the_crd_yaml_reads_back_as_the_crd() {
    let yaml = crds_yaml();
    assert!(yaml.starts_with(CRD_HEADER));
    let back: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(
        back,
        serde_json::to_value(CapacityBenchmark::crd()).unwrap()
    );
}

#[test]
fn a_valid_benchmark_resolves_its_inline_manifest() {
    let loaded = parse(VALID).unwrap();
    assert!(loaded.findings.is_empty(), "{:?}", loaded.findings);
    assert_eq!(
        loaded.benchmark.metadata.name.as_deref(),
        Some("seed-70b-inline")
    );
    assert_eq!(loaded.manifest.workload.len(), 3);
    assert_eq!(
        loaded.benchmark.spec.experiments.warm_pool.prefix_tokens,
        256
    );
}

#[test]
fn a_manifest_file_resolves_relative_to_the_benchmark() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("m")).unwrap();
    let manifest =
        crate::workload::SEED_MANIFEST_YAML.replace("warmup_seconds: 60", "warmup_seconds: 0");
    std::fs::write(dir.path().join("m/manifest.yaml"), manifest).unwrap();
    let bench = dir.path().join("bench.yaml");
    std::fs::write(
        &bench,
        "apiVersion: goodput.dev/v1alpha1\nkind: CapacityBenchmark\nmetadata: {name: b}\n\
             spec:\n  workload: {manifestFile: m/manifest.yaml}\n  acceptance:\n    \
             class_slo_attainment_min: 0.9\n    min_successful_samples_per_class: 1000\n    \
             error_rate_max: 2\n    queue_trend_required: flat\n    target_utilization: 0.8\n",
    )
    .unwrap();
    let loaded = load_benchmark(&bench).unwrap();
    // spec.acceptance replaces the manifest's, and its findings point at the spec.
    assert_eq!(
        loaded.manifest.acceptance.min_successful_samples_per_class,
        1000
    );
    assert_eq!(paths(loaded.errors()), ["spec.acceptance.error_rate_max"]);
    // The validator and the lint both warn about no warmup: shown once.
    assert_eq!(
        paths(loaded.warnings()),
        ["spec.workload.manifestFile(m/manifest.yaml).client.warmup_seconds"]
    );
}

#[test]
fn unresolvable_manifests_are_error_findings() {
    let cm = VALID.replace(
        "    manifest:\n",
        "    manifestConfigMap: {name: seed}\n    unused:\n",
    );
    // `unused` is not a field: the parser names it.
    let err = parse(&cm).unwrap_err().to_string();
    assert!(err.contains("spec.workload.unused"), "{err}");
    let head = VALID.split("    manifest:\n").next().unwrap();
    let tail = VALID.split("  experiments:\n").nth(1).unwrap();
    let cm = format!("{head}    manifestConfigMap: {{name: seed}}\n  experiments:\n{tail}");
    let loaded = parse(&cm).unwrap();
    assert_eq!(paths(loaded.errors()), ["spec.workload.manifestConfigMap"]);
    assert!(
        loaded
            .errors()
            .next()
            .unwrap()
            .message
            .contains("resolved by the operator")
    );

    let missing = format!("{head}    manifestFile: no-such-manifest.yaml\n  experiments:\n{tail}");
    let loaded = parse(&missing).unwrap();
    assert_eq!(paths(loaded.errors()), ["spec.workload.manifestFile"]);

    // Found with the `benchmark_yaml` fuzz target: a manifestFile that is a device was read
    // without end (`/dev/zero`: memory without bound) or blocked; it is refused at once.
    #[cfg(unix)]
    for device in ["/dev/zero", "/dev/null", "/"] {
        let text = format!("{head}    manifestFile: {device}\n  experiments:\n{tail}");
        let loaded = parse(&text).unwrap();
        assert_eq!(paths(loaded.errors()), ["spec.workload.manifestFile"]);
        let message = &loaded.errors().next().unwrap().message;
        assert!(message.contains("not a regular file"), "{message}");
    }

    let none = format!("{head}    {{}}\n  experiments:\n{tail}")
        .replace("  workload:\n    {}", "  workload: {}");
    let loaded = parse(&none).unwrap();
    assert_eq!(paths(loaded.errors()), ["spec.workload"]);
    // The spec is still linted without a manifest.
    let loaded = parse(&none.replace("rps: 36", "rps: -1")).unwrap();
    assert_eq!(paths(loaded.errors()), ["spec.workload", "spec.peak.rps"]);
}

#[test]
fn parse_errors_name_the_file_field_and_line() {
    let bad = VALID.replace("lowFraction: 0.5", "lowFraction: half");
    let err = parse(&bad).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("bench.yaml: "), "{msg}");
    assert!(
        msg.contains("field `spec.experiments.rateSweep.lowFraction`"),
        "{msg}"
    );
    assert!(msg.contains("line 50"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
    assert_eq!(err.path(), Path::new("bench.yaml"));

    let bad = VALID.replace("mix: 0.20", "mix: [0.2]");
    let msg = parse(&bad).unwrap_err().to_string();
    assert!(
        msg.contains("field `spec.workload.manifest.workload[1].mix`"),
        "{msg}"
    );
}

#[test]
fn unknown_fields_are_refused_with_their_path_line_and_the_expected_fields() {
    let bad = VALID.replace("    rateSweep: {", "    rateSweeps: {");
    let err = parse(&bad).unwrap_err();
    let msg = err.message();
    assert!(
        msg.starts_with("field `spec.experiments.rateSweeps`: unknown field `rateSweeps`"),
        "{msg}"
    );
    assert!(
        msg.contains("expected one of cacheModes, coldPrompts"),
        "{msg}"
    );
    assert!(msg.contains("rateSweep, saturation"), "{msg}");
    let line = 1 + VALID
        .lines()
        .position(|l| l.starts_with("    rateSweep: {"))
        .unwrap();
    assert!(msg.ends_with(&format!("at line {line}, column 5")), "{msg}");

    // In metadata (the Kubernetes type ignores them too) and in the status.
    let bad = VALID.replace(
        "  name: seed-70b-inline\n",
        "  name: seed-70b-inline\n  lables: {}\n",
    );
    let msg = parse(&bad).unwrap_err().message();
    assert!(
        msg.starts_with("field `metadata.lables`: unknown field `lables`"),
        "{msg}"
    );
    assert!(msg.ends_with("at line 6, column 3"), "{msg}");
    let with_status = format!(
        "{VALID}status:\n  phase: Running\n  points:\n  - {{cache: cold, kind: rate, offeredRps: 1, verdictt: pass}}\n"
    );
    let msg = parse(&with_status).unwrap_err().message();
    assert!(
        msg.starts_with("field `status.points[0].verdictt`: unknown field `verdictt`"),
        "{msg}"
    );
    assert!(
        msg.contains("expected one of achievedRps, busySeconds, cache"),
        "{msg}"
    );
    // Without the typo the status reads.
    let loaded = parse(&with_status.replace("verdictt", "verdict")).unwrap();
    let status = loaded.benchmark.status.unwrap();
    assert_eq!(status.phase, Some(crate::Phase::Running));
    assert_eq!(status.points[0].verdict, "pass");
}

#[test]
fn the_wire_types_ignore_unknown_fields() {
    // What an operator older than its CRD does with a newer object: reads it.
    let mut value: serde_json::Value = serde_saphyr::from_str(VALID).unwrap();
    value["spec"]["experiments"]["newExperiment"] = serde_json::json!({"x": 1});
    value["spec"]["target"]["newTargetField"] = serde_json::json!(true);
    let cb: CapacityBenchmark = serde_json::from_value(value).unwrap();
    assert_eq!(cb.metadata.name.as_deref(), Some("seed-70b-inline"));
}

#[test]
fn a_service_target_needs_the_operator() {
    let svc = VALID.replace(
        "    url: http://vllm.llm.svc:8000\n",
        "    service: {name: qwen-7b, port: 8000}\n",
    );
    let loaded = parse(&svc).unwrap();
    assert_eq!(paths(loaded.errors()), ["spec.target.service"]);
    let message = &loaded.errors().next().unwrap().message;
    assert!(message.contains("resolved by the operator"), "{message}");
    assert!(message.contains("give url"), "{message}");
    assert!(
        message.contains("kubectl port-forward svc/qwen-7b 8000:8000"),
        "{message}"
    );
    assert_eq!(loaded.benchmark.spec.target.printable(), "svc/qwen-7b");
    // A URL target (the fixture) is unchanged.
    let loaded = parse(VALID).unwrap();
    assert!(!loaded.has_errors(), "{:?}", loaded.findings);
    assert_eq!(
        loaded.benchmark.spec.target.printable(),
        "http://vllm.llm.svc:8000"
    );
}

#[test]
fn documents_keep_the_files_line_numbers() {
    let text = "# a Service first\napiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\n# only a comment\n---\n"
            .to_owned()
            + VALID;
    let docs = yaml_documents(&text);
    assert_eq!(docs.len(), 2, "the comment-only document is left out");
    assert!(!is_benchmark_document(&docs[0].text));
    assert!(is_benchmark_document(&docs[1].text));
    assert_eq!(document_name(&docs[0].text).as_deref(), Some("s"));
    // The benchmark starts on the file's line 8: 7 lines come before it.
    assert_eq!(docs[1].line_offset, 7);
    assert!(docs[1].text.starts_with(VALID.lines().next().unwrap()));
    let broken = text.replacen(
        "kind: CapacityBenchmark",
        "kind: CapacityBenchmark\nbogus: 1",
        1,
    );
    let path = Path::new("b.yaml");
    let doc = &yaml_documents(&broken)[1];
    let err = parse_benchmark_document(doc, path).unwrap_err().message();
    assert!(err.contains("line 11"), "{err}"); // the file's line of `bogus`
    // A parser error (not an unknown field) names the file's line too.
    let malformed = text.replacen(
        "kind: CapacityBenchmark",
        "kind: CapacityBenchmark\nspec: [",
        1,
    );
    let doc = &yaml_documents(&malformed)[1];
    let err = parse_benchmark_document(doc, path).unwrap_err().message();
    let alone = parse(&doc.text).unwrap_err().message();
    assert_ne!(err, alone, "the offset moves the line: {err}");
    let line = |m: &str| -> usize {
        let at = m.find("line ").expect("a line number") + 5;
        m[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(line(&err), line(&alone) + 7, "{err} / {alone}");
}

/// Found with the `benchmark_yaml` fuzz target: each document was padded with one newline
/// per line before it, so a file of many small documents cost its size times their count
/// (180 KB of them took 480 MB). The documents together now hold no more than the file.
#[test]
fn many_documents_cost_the_files_size() {
    let text = "a: 1\n---\n".repeat(30_000);
    let docs = yaml_documents(&text);
    assert_eq!(docs.len(), 30_000);
    let held: usize = docs.iter().map(|d| d.text.len()).sum();
    assert!(
        held <= text.len(),
        "{held} bytes held for a {}-byte file",
        text.len()
    );
    assert_eq!(docs[29_999].line_offset, 59_998);
}

#[test]
fn the_examples_load() {
    // The repository's root, two folders above this crate.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for name in [
        "examples/capacity-benchmark.yaml",
        "examples/simulated-engine.yaml",
    ] {
        let loaded = load_benchmark(&root.join(name)).unwrap();
        assert!(!loaded.has_errors(), "{name}: {:?}", loaded.findings);
        assert_eq!(loaded.benchmark.spec.target.printable(), "simulated");
    }
}

#[test]
fn other_kinds_are_refused_clearly() {
    let msg = parse(&VALID.replace("kind: CapacityBenchmark", "kind: Benchmark"))
        .unwrap_err()
        .message();
    assert_eq!(msg, "`kind` is `Benchmark`, expected `CapacityBenchmark`");
    let msg = parse(&VALID.replace("goodput.dev/v1alpha1", "goodput.dev/v1"))
        .unwrap_err()
        .message();
    assert!(msg.contains("`apiVersion` is `goodput.dev/v1`"), "{msg}");
    let err = parse(crate::workload::SEED_MANIFEST_YAML).unwrap_err();
    assert!(matches!(err, BenchmarkError::NotABenchmark { .. }));
    assert!(
        err.message().contains("looks like a workload manifest"),
        "{err}"
    );
}
