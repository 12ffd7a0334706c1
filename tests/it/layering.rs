//! The crates keep to their layers. A crate cannot name one above it (the compiler holds
//! that); this holds what each may depend on, as `cargo tree` resolves each alone: the
//! core (`crates/core`) and the engine model (`crates/model`) nothing that brings an async
//! runtime, HTTP or Kubernetes; the custom resources (`crates/api`) and the pack
//! (`crates/pack`) kube's derive but no client or runtime; Git (`crates/gitops`) and the
//! instruments (`crates/sim`, `crates/engine-metrics`) no custom resource or Kubernetes
//! type; the load generator (`crates/loadgen`) the custom resources' types but no client;
//! and only the operator (`crates/operator`) kube's client and runtime. So each builds, and
//! its tests run, without the layers above it.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// What an async runtime, an HTTP stack or a Kubernetes client brings.
const IO: &[&str] = &[
    "tokio",
    "hyper",
    "reqwest",
    "axum",
    "kube-client",
    "kube-runtime",
];

/// The package names in `package`'s normal dependency tree, itself included.
fn tree(package: &str) -> BTreeSet<String> {
    let output = Command::new(env!("CARGO"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .args([
            "tree",
            "--frozen",
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
            "--package",
            package,
        ])
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The names of `forbidden` that `reached` holds.
fn found<'a>(reached: &BTreeSet<String>, forbidden: &[&'a str]) -> Vec<&'a str> {
    forbidden
        .iter()
        .copied()
        .filter(|c| reached.contains(*c))
        .collect()
}

#[test]
fn each_crate_below_the_shells_depends_only_on_what_its_layer_allows() {
    let mut pure = IO.to_vec();
    pure.extend(["kube", "k8s-openapi", "goodput-api", "goodput"]);
    for package in ["goodput-core", "goodput-model"] {
        let reached = tree(package);
        assert!(reached.contains("serde"), "{package}: {reached:?}");
        assert_eq!(found(&reached, &pure), [] as [&str; 0], "{package}");
    }
    let api = tree("goodput-api");
    assert!(
        api.contains("kube-derive") && api.contains("goodput-model"),
        "{api:?}"
    );
    assert_eq!(found(&api, IO), [] as [&str; 0], "goodput-api");
    let pack = tree("goodput-pack");
    assert!(pack.contains("plotters"), "{pack:?}");
    assert_eq!(found(&pack, IO), [] as [&str; 0], "goodput-pack");
    // Git and the forges edit bytes and call HTTP: no custom resource, no core.
    let gitops = tree("goodput-gitops");
    assert_eq!(
        found(
            &gitops,
            &["goodput-core", "goodput-api", "kube", "k8s-openapi"]
        ),
        [] as [&str; 0],
        "goodput-gitops"
    );
    // The instruments (the simulated engine served live, the engine metrics over HTTP) do
    // IO, but know nothing of the custom resources or Kubernetes.
    for package in ["goodput-sim", "goodput-engine-metrics"] {
        let reached = tree(package);
        assert!(reached.contains("tokio"), "{package}: {reached:?}");
        assert_eq!(
            found(&reached, &["goodput-api", "kube", "k8s-openapi"]),
            [] as [&str; 0],
            "{package}"
        );
    }
    // The load generator reads a point file made from a spec (the API's types), but has no
    // Kubernetes client: a loadgen pod hands its results over through the operator's crate.
    let loadgen = tree("goodput-loadgen");
    assert!(loadgen.contains("goodput-api"), "{loadgen:?}");
    assert_eq!(
        found(
            &loadgen,
            &["kube-client", "kube-runtime", "goodput-operator"]
        ),
        [] as [&str; 0],
        "goodput-loadgen"
    );
    // Kubernetes' client and controller runtime are the operator's alone.
    let operator = tree("goodput-operator");
    assert!(operator.contains("kube-runtime"), "{operator:?}");
    for package in [
        "goodput-core",
        "goodput-model",
        "goodput-api",
        "goodput-http",
        "goodput-gitops",
        "goodput-pack",
        "goodput-sim",
        "goodput-engine-metrics",
        "goodput-loadgen",
    ] {
        let reached = tree(package);
        assert_eq!(
            found(
                &reached,
                &["kube-client", "kube-runtime", "goodput-operator"]
            ),
            [] as [&str; 0],
            "{package}"
        );
    }
    // The check sees them where they are: the goodput crate reaches every one.
    let shells = tree("goodput");
    assert_eq!(found(&shells, IO), IO, "goodput");
}
