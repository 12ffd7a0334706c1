//! The crates below the shells keep to themselves. The core (`crates/core`), the engine
//! model (`crates/model`), the custom resources (`crates/api`), the pack (`crates/pack`),
//! Git (`crates/gitops`) and the instruments (`crates/sim`, `crates/engine-metrics`,
//! `crates/loadgen`)
//! cannot name the shells (the compiler holds that); this holds what they may depend on, as
//! `cargo tree` resolves each alone: the core and the model nothing that brings an async
//! runtime, HTTP or Kubernetes, the API types and the pack kube's derive but no client or
//! runtime, Git and the instruments no custom resource or Kubernetes type. So they build,
//! and their tests run, without the rest.

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
    // The instruments (the simulated engine served live, the engine metrics over HTTP, the
    // load generator) do IO, but know nothing of the custom resources or Kubernetes.
    for package in ["goodput-sim", "goodput-engine-metrics", "goodput-loadgen"] {
        let reached = tree(package);
        assert!(reached.contains("tokio"), "{package}: {reached:?}");
        assert_eq!(
            found(&reached, &["goodput-api", "kube", "k8s-openapi"]),
            [] as [&str; 0],
            "{package}"
        );
    }
    // The check sees them where they are: the goodput crate reaches every one.
    let shells = tree("goodput");
    assert_eq!(found(&shells, IO), IO, "goodput");
}
