//! The examples a user copies (`examples/*.yaml`), checked the way a user uses them: every
//! `CapacityBenchmark` in them passes `goodput lint --cluster` (and plain `goodput lint`
//! but for a Service target, which only the operator resolves), and every document of
//! every example (the benchmarks, and the Deployments and Services beside them) is accepted by an API
//! server with the committed CRDs installed, their schemas and CEL rules included, and reads
//! back as written. The directory is listed, so a new example is covered without a change
//! here. No operator runs: whether a benchmark reaches `Ready` is the operator tests' part.

use std::path::{Path, PathBuf};
use std::process::Command;

use goodput::api::{CapacityBenchmark, ServingPlan};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolumeClaim, Secret, Service, ServiceAccount,
};
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::Value;
use testcluster::cluster::{Cluster, ClusterConfig};

/// Files in `examples/` that hold no Kubernetes object, each with why. Every other `.yaml`
/// file there must hold at least one `CapacityBenchmark`.
const NOT_BENCHMARKS: &[&str] = &[
    // The methodology's frozen workload manifest on its own: what `goodput analyze
    // --manifest` and `spec.workload.manifestFile` read, and the seed the binary embeds.
    "workload-manifest.yaml",
];

const CRD_FILES: [&str; 2] = ["crds/capacitybenchmark.yaml", "crds/servingplan.yaml"];
use crate::crd_install as crd;
const BENCHMARK_KIND: &str = "CapacityBenchmark";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One YAML document of an example: its text (for `goodput lint` and the benchmark loader)
/// and its value (for the API server).
struct Document {
    text: String,
    value: Value,
}

impl Document {
    fn str_at(&self, pointer: &str) -> Option<&str> {
        self.value.pointer(pointer).and_then(Value::as_str)
    }

    fn kind(&self) -> &str {
        self.str_at("/kind").unwrap_or_default()
    }

    fn api_version(&self) -> &str {
        self.str_at("/apiVersion").unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.str_at("/metadata/name").unwrap_or_default()
    }

    /// `Kind/name`, for messages.
    fn label(&self) -> String {
        format!("{}/{}", self.kind(), self.name())
    }
}

/// An example file and its documents, in file order.
struct Example {
    path: PathBuf,
    file_name: String,
    documents: Vec<Document>,
}

/// The documents of a multi-document YAML file: split at `---` lines (what `kubectl apply
/// -f` does), each part parsed alone. A part with nothing but comments is no document. The
/// split is checked against the YAML parser's own reading of the whole file.
fn documents(path: &Path, text: &str) -> Vec<Document> {
    let mut parts = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            parts.push(String::new());
        } else {
            let part = parts.last_mut().expect("parts starts with one part");
            part.push_str(line);
            part.push('\n');
        }
    }
    let docs: Vec<Document> = parts
        .into_iter()
        .filter(|part| {
            part.lines().any(|l| {
                let l = l.trim();
                !l.is_empty() && !l.starts_with('#')
            })
        })
        .map(|text| {
            let value: Value = serde_saphyr::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: a document does not parse: {e}", path.display()));
            Document { text, value }
        })
        .collect();
    let whole: Vec<Value> = serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("{}: does not parse as YAML: {e}", path.display()))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect();
    let split: Vec<&Value> = docs.iter().map(|d| &d.value).collect();
    assert_eq!(
        split,
        whole.iter().collect::<Vec<_>>(),
        "{}: splitting at `---` lines reads other documents than the YAML parser does",
        path.display()
    );
    docs
}

/// Every `examples/*.yaml` file but [`NOT_BENCHMARKS`], sorted by name.
fn examples() -> Vec<Example> {
    let dir = repo().join("examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("examples/ lists")
        .map(|entry| {
            entry
                .expect("an examples/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    names.sort();
    for skipped in NOT_BENCHMARKS {
        assert!(
            names.iter().any(|n| n == skipped),
            "NOT_BENCHMARKS names examples/{skipped}, which is gone: remove it from the list"
        );
    }
    let examples: Vec<Example> = names
        .into_iter()
        .filter(|name| !NOT_BENCHMARKS.contains(&name.as_str()))
        .map(|file_name| {
            let path = dir.join(&file_name);
            let text = std::fs::read_to_string(&path).expect("an example reads");
            let documents = documents(&path, &text);
            Example {
                path,
                file_name,
                documents,
            }
        })
        .collect();
    assert!(
        !examples.is_empty(),
        "no example found in {}",
        dir.display()
    );
    for ex in &examples {
        assert!(
            ex.documents.iter().any(|d| d.kind() == BENCHMARK_KIND),
            "examples/{} holds no {BENCHMARK_KIND}: every example does, else list it in \
             NOT_BENCHMARKS with why",
            ex.file_name
        );
    }
    examples
}

/// `goodput lint` on a file: its lines, parsed as `(label, finding)`; `Ok` lines and
/// findings alike (a finding is `error: PATH: message` or `warning: ...`; `ok` closes a
/// clean benchmark), and whether it succeeded.
fn lint(path: &Path, cluster: bool) -> (bool, Vec<(String, String)>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_goodput"));
    command.arg("lint");
    if cluster {
        command.arg("--cluster");
    }
    let out = command.arg(path).output().expect("the goodput binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let file = path.display().to_string();
    let lines = stdout
        .lines()
        .map(|line| {
            let rest = line
                .strip_prefix(&file)
                .unwrap_or_else(|| panic!("a line that names no file: {line}\n{stdout}"));
            // `FILE: ...`, or `FILE (NAME): ...` in a file of several documents.
            let (label, finding) = rest
                .split_once(": ")
                .unwrap_or_else(|| panic!("an unexpected line: {line}\n{stdout}"));
            (label.trim().to_owned(), finding.to_owned())
        })
        .collect();
    (out.status.success(), lines, stdout)
}

/// Every example file, whole (its Deployment and Service beside the benchmark included),
/// passes `goodput lint --cluster` (the operator's check) with every benchmark `ok` and
/// no warning, but for a failure test on the simulated engine (`goodput bench` only: the
/// operator injects a fault by deleting a pod of a Service), which the check refuses with
/// that one reason; plain `goodput lint` (for `goodput bench`) refuses only what only the
/// operator resolves: a Service target.
#[test]
fn every_example_lints_clean_for_the_operator_and_for_bench_but_for_a_service_target() {
    let mut linted = 0;
    for ex in examples() {
        let benchmarks: Vec<&Document> = ex
            .documents
            .iter()
            .filter(|d| d.kind() == BENCHMARK_KIND)
            .collect();
        let (ok, lines, said) = lint(&ex.path, true);
        let context = format!(
            "examples/{}: goodput lint --cluster said:\n{said}",
            ex.file_name
        );
        let local_failure_tests = benchmarks
            .iter()
            .filter(|d| {
                d.value.pointer("/spec/failureTest").is_some()
                    && d.value.pointer("/spec/target/service").is_none()
            })
            .count();
        assert_eq!(ok, local_failure_tests == 0, "{context}");
        let oks = lines.iter().filter(|(_, f)| f == "ok").count();
        assert_eq!(
            oks,
            benchmarks.len() - local_failure_tests,
            "every other benchmark is ok: {context}"
        );
        let refused: Vec<&String> = lines
            .iter()
            .map(|(_, f)| f)
            .filter(|f| f.as_str() != "ok")
            .collect();
        assert_eq!(
            refused.len(),
            local_failure_tests,
            "no other finding: {context}"
        );
        for f in refused {
            assert!(
                f.starts_with("error: spec.failureTest: the operator's simulated engine runs"),
                "{context}"
            );
        }

        let (ok, lines, said) = lint(&ex.path, false);
        let context = format!("examples/{}: goodput lint said:\n{said}", ex.file_name);
        let services = benchmarks
            .iter()
            .filter(|d| d.value.pointer("/spec/target/service").is_some())
            .count();
        let errors: Vec<&String> = lines
            .iter()
            .map(|(_, f)| f)
            .filter(|f| f.starts_with("error: "))
            .collect();
        assert_eq!(errors.len(), services, "{context}");
        for e in &errors {
            assert!(
                e.starts_with("error: spec.target.service: ")
                    && e.contains("is resolved by the operator in a cluster"),
                "{context}"
            );
        }
        assert_eq!(ok, services == 0, "{context}");
        linted += benchmarks.len();
    }
    assert!(linted > 0, "no benchmark was linted");
}

/// The fields of a document that its Kubernetes type does not know, as paths (a misspelt
/// field, or one at the wrong level). A real API server refuses them under `kubectl
/// apply`'s default strict field validation; the test cluster checks only CRD schemas, so
/// built-in kinds are checked here against k8s-openapi's types.
fn unknown_fields(doc: &Document) -> Vec<String> {
    fn ignored<K: serde::de::DeserializeOwned>(value: &Value) -> Result<Vec<String>, String> {
        let mut paths = Vec::new();
        serde_ignored::deserialize::<_, _, K>(value.clone(), |path| paths.push(path.to_string()))
            .map_err(|e| e.to_string())?;
        // The derived custom resource reads its type from the Rust type, not the document.
        paths.retain(|p| p != "apiVersion" && p != "kind");
        Ok(paths)
    }
    let found = match (doc.api_version(), doc.kind()) {
        ("apps/v1", "Deployment") => ignored::<Deployment>(&doc.value),
        ("v1", "Service") => ignored::<Service>(&doc.value),
        ("v1", "ConfigMap") => ignored::<ConfigMap>(&doc.value),
        ("v1", "Secret") => ignored::<Secret>(&doc.value),
        ("v1", "ServiceAccount") => ignored::<ServiceAccount>(&doc.value),
        ("v1", "PersistentVolumeClaim") => ignored::<PersistentVolumeClaim>(&doc.value),
        ("goodput.dev/v1alpha1", BENCHMARK_KIND) => ignored::<CapacityBenchmark>(&doc.value),
        ("goodput.dev/v1alpha1", "ServingPlan") => ignored::<ServingPlan>(&doc.value),
        (version, kind) => panic!(
            "{version} {kind} ({}): add its k8s-openapi type to unknown_fields",
            doc.name()
        ),
    };
    found.unwrap_or_else(|e| panic!("{}: does not read as its type: {e}", doc.label()))
}

/// Where `stored` differs from `sent` for the fields `sent` has (what the API server
/// dropped or changed; fields it added, such as defaults and metadata, are fine). Numbers
/// compare by value, and a number equals its string form (a quantity `2` reads back as
/// `"2"`).
fn differences(sent: &Value, stored: &Value, at: &str, out: &mut Vec<String>) {
    let here = |key: &str| {
        if at.is_empty() {
            key.to_owned()
        } else {
            format!("{at}.{key}")
        }
    };
    match (sent, stored) {
        (Value::Object(s), Value::Object(t)) => {
            for (key, value) in s {
                match t.get(key) {
                    Some(back) => differences(value, back, &here(key), out),
                    None if value.is_null() => {}
                    None => out.push(format!("{}: sent, not stored", here(key))),
                }
            }
        }
        (Value::Array(s), Value::Array(t)) if s.len() == t.len() => {
            for (i, (value, back)) in s.iter().zip(t).enumerate() {
                differences(value, back, &format!("{at}[{i}]"), out);
            }
        }
        (Value::Number(s), Value::Number(t)) if s.as_f64() == t.as_f64() => {}
        (Value::Number(s), Value::String(t)) if s.to_string() == *t => {}
        (s, t) if s == t => {}
        (s, t) => out.push(format!("{at}: sent {s}, stored {t}")),
    }
}

/// A kube client for the cluster.
async fn client(cluster: &Cluster) -> kube::Client {
    let kubeconfig = Kubeconfig::from_yaml(&cluster.kubeconfig()).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    kube::Client::try_from(config).expect("client builds")
}

/// Installs the committed CRDs (the files a user applies with the examples) and waits
/// until each is established.
async fn install_crd(client: &kube::Client) {
    for file in CRD_FILES {
        let yaml = std::fs::read_to_string(repo().join(file)).expect("the CRD file reads");
        crd::install_crd(client, &yaml).await;
    }
}

/// A namespace name for an example: `example-` and the file's stem, as a DNS label.
fn namespace_for(file_name: &str) -> String {
    let stem = file_name.trim_end_matches(".yaml");
    let label: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let mut name = format!("example-{label}");
    name.truncate(63);
    name.trim_end_matches('-').to_owned()
}

#[tokio::test]
async fn every_example_document_is_accepted_by_the_api_server() {
    let cluster = Cluster::start(ClusterConfig::default())
        .await
        .expect("cluster starts");
    let client = client(&cluster).await;
    install_crd(&client).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut benchmarks_read = 0;

    for ex in examples() {
        let file = format!("examples/{}", ex.file_name);
        // Each example in a namespace of its own, as a user applies it (`kubectl apply -n`):
        // no example's objects can stand in for another's.
        let ns = namespace_for(&ex.file_name);
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("{file}: namespace {ns}: {e}"));

        let mut seen = Vec::new();
        for doc in &ex.documents {
            let label = doc.label();
            assert!(
                !doc.name().is_empty(),
                "{file}: a {} has no name",
                doc.kind()
            );
            assert!(
                !seen.contains(&label),
                "{file}: {label} appears twice: the second would overwrite the first"
            );
            seen.push(label.clone());
            assert!(
                doc.value.pointer("/metadata/namespace").is_none(),
                "{file}: {label} names a namespace; the examples leave it to `kubectl apply -n`"
            );
            let unknown = unknown_fields(doc);
            assert!(
                unknown.is_empty(),
                "{file}: {label}: fields its type does not know (misspelt, or at the wrong \
                 level): {unknown:?}"
            );

            let (group, version) = match doc.api_version().split_once('/') {
                Some((group, version)) => (group, version),
                None => ("", doc.api_version()),
            };
            let gvk = GroupVersionKind::gvk(group, version, doc.kind());
            let (resource, capabilities) = pinned_kind(&client, &gvk)
                .await
                .unwrap_or_else(|e| panic!("{file}: {label}: the cluster does not serve it: {e}"));
            let api: Api<DynamicObject> = match capabilities.scope {
                Scope::Namespaced => Api::namespaced_with(client.clone(), &ns, &resource),
                Scope::Cluster => Api::all_with(client.clone(), &resource),
            };
            // Server-side apply with strict field validation, as `kubectl apply
            // --server-side` sends it: the CRD's schema and CEL rules judge a benchmark.
            api.patch(
                doc.name(),
                &PatchParams::apply("goodput-examples-test").validation_strict(),
                &Patch::Apply(&doc.value),
            )
            .await
            .unwrap_or_else(|e| panic!("{file}: {label}: the API server refused it: {e}"));

            let stored = api
                .get(doc.name())
                .await
                .unwrap_or_else(|e| panic!("{file}: {label}: cannot be read back: {e}"));
            let stored = serde_json::to_value(&stored).expect("an object serializes");
            let mut changed = Vec::new();
            differences(&doc.value, &stored, "", &mut changed);
            assert!(
                changed.is_empty(),
                "{file}: {label}: the API server did not keep what was sent (pruned or \
                 changed): {changed:#?}"
            );

            if doc.kind() == BENCHMARK_KIND {
                // Read back as the operator reads it: the typed resource, with the schema's
                // defaults filled in, is the benchmark `goodput bench` loads from the file.
                let typed: Api<CapacityBenchmark> = Api::namespaced(client.clone(), &ns);
                let back = typed.get(doc.name()).await.unwrap_or_else(|e| {
                    panic!("{file}: {label}: does not read as a typed {BENCHMARK_KIND}: {e}")
                });
                let loaded = goodput::api::parse_benchmark(&doc.text, &ex.path)
                    .unwrap_or_else(|e| panic!("{file}: {label}: the loader refuses it: {e}"));
                assert_eq!(
                    back.spec, loaded.benchmark.spec,
                    "{file}: {label}: the stored spec is not the one the file gives"
                );
                assert_eq!(back.metadata.namespace.as_deref(), Some(ns.as_str()));
                assert!(back.status.is_none(), "{file}: {label}: no operator ran");
                benchmarks_read += 1;
            }
        }
    }
    assert!(benchmarks_read > 0, "no benchmark was applied");
}

#[test]
fn differences_finds_what_the_server_dropped_or_changed() {
    let sent = serde_json::json!({
        "spec": {"replicas": 1, "limits": {"nvidia.com/gpu": 2}, "args": ["a", "b"], "x": null}
    });
    // Added fields (defaults, metadata) and a quantity read back as a string are the same.
    let same = serde_json::json!({
        "metadata": {"uid": "u"},
        "spec": {"replicas": 1.0, "limits": {"nvidia.com/gpu": "2"}, "args": ["a", "b"], "more": 1}
    });
    let mut out = Vec::new();
    differences(&sent, &same, "", &mut out);
    assert!(out.is_empty(), "{out:?}");
    // A pruned field, a changed value and a shortened list are each reported.
    let pruned = serde_json::json!({"spec": {"replicas": 2, "args": ["a"]}});
    let mut out = Vec::new();
    differences(&sent, &pruned, "", &mut out);
    assert_eq!(
        out,
        [
            "spec.args: sent [\"a\",\"b\"], stored [\"a\"]",
            "spec.limits: sent, not stored",
            "spec.replicas: sent 1, stored 2",
        ]
    );
}

/// The vLLM example's Deployment declares (args, image tag, annotation) exactly what its
/// benchmark's manifest measured, so the ServingPlan beside them uses the evidence.
#[test]
fn the_vllm_examples_deployment_matches_its_benchmarks_manifest() {
    let path = repo().join("examples/capacity-benchmark-vllm.yaml");
    let text = std::fs::read_to_string(&path).expect("the example reads");
    let docs = documents(&path, &text);
    let of = |kind: &str| {
        docs.iter()
            .find(|d| d.kind() == kind)
            .unwrap_or_else(|| panic!("the example has a {kind}"))
    };
    let cb: CapacityBenchmark =
        serde_json::from_value(of(BENCHMARK_KIND).value.clone()).expect("a benchmark");
    let manifest = cb.spec.workload.manifest.expect("an inline manifest");
    let declared = goodput::controller::workload::declared_identity(&of("Deployment").value);
    let found = goodput::controller::workload::compare(&manifest, &declared);
    assert!(found.refused.is_empty(), "{:?}", found.refused);
    assert!(found.unchecked.is_empty(), "{:?}", found.unchecked);
    let plan: ServingPlan =
        serde_json::from_value(of("ServingPlan").value.clone()).expect("a plan");
    assert_eq!(plan.spec.target_ref.name, of("Deployment").name());
}
