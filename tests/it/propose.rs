//! `goodput propose`: the operator's Propose-mode edit and pull request body, offline, on
//! the example plan (the seed's worked example: 24 RPS on 4 replicas, a 36 RPS peak at 0.75
//! utilization, so 8 replicas).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn propose(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_goodput"))
        .arg("propose")
        .args(args)
        .current_dir(repo())
        .output()
        .expect("goodput runs")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "goodput propose failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const PLAN: &str = "examples/gitops/servingplan.yaml";
const REPO: &str = "examples/gitops/repo";

#[test]
fn the_seed_example_gives_a_diff_of_exactly_one_line_4_to_8() {
    let diff = stdout(&propose(&["--plan", PLAN, "--repo", REPO]));
    let removed: Vec<&str> = diff
        .lines()
        .filter(|l| l.starts_with('-') && !l.starts_with("---"))
        .collect();
    let added: Vec<&str> = diff
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .collect();
    assert_eq!(
        removed,
        ["-  replicas: 4   # sized by goodput's ServingPlan llm/qwen-7b"],
        "{diff}"
    );
    assert_eq!(
        added,
        ["+  replicas: 8   # sized by goodput's ServingPlan llm/qwen-7b"],
        "{diff}"
    );
    assert!(
        diff.starts_with("--- a/apps/qwen/deployment.yaml\n+++ b/apps/qwen/deployment.yaml\n@@ ")
    );
    // The Service's document before it is context, never changed.
    assert!(!diff.contains("-  name: qwen-7b"));
}

#[test]
fn json_carries_the_arithmetic_the_body_and_a_conventional_commit() {
    let out = stdout(&propose(&[
        "--plan", PLAN, "--repo", REPO, "--output", "json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["from"], 4);
    assert_eq!(v["replicas"], 8);
    assert_eq!(v["gpus"], 8);
    assert_eq!(v["changed"], true);
    assert_eq!(v["arithmetic"][0], "ceil(36 / (6 × 0.75)) = ceil(8) = 8");
    assert_eq!(
        v["title"],
        "Scale deployment/qwen-7b from 4 to 8 replicas (peak 36 RPS)"
    );
    let body = v["body"].as_str().expect("a body");
    assert!(body.contains("ceil(36 / (6 × 0.75)) = ceil(8) = 8"));
    assert!(body.contains("seed worked example: 24 RPS measured on 4 replicas"));
    assert!(body.contains("+  replicas: 8"));
    assert!(body.contains(&format!(
        "goodput:plan-hash={}",
        v["planHash"].as_str().expect("a hash")
    )));
    let message = v["commitMessage"].as_str().expect("a message");
    assert!(
        message.starts_with("chore(capacity): scale deployment/qwen-7b from 4 to 8 replicas\n\n")
    );
}

#[test]
fn write_changes_the_file_in_place_and_a_second_run_has_nothing_to_change() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("apps/qwen/deployment.yaml");
    std::fs::create_dir_all(file.parent().expect("a parent")).expect("mkdir");
    let original = std::fs::read_to_string(repo().join(REPO).join("apps/qwen/deployment.yaml"))
        .expect("the example");
    std::fs::write(&file, &original).expect("copy");
    let repo_arg = dir.path().to_str().expect("a UTF-8 path");
    stdout(&propose(&["--plan", PLAN, "--repo", repo_arg, "--write"]));
    let written = std::fs::read_to_string(&file).expect("the written file");
    assert_eq!(
        written,
        original.replace("replicas: 4   #", "replicas: 8   #"),
        "only the number changes"
    );
    let again = propose(&["--plan", PLAN, "--repo", repo_arg]);
    assert_eq!(stdout(&again), "");
    assert!(String::from_utf8_lossy(&again.stderr).contains("already declares 8 replicas"));
}

fn plan_with(dir: &Path, gitops_tail: &str) -> PathBuf {
    let plan = std::fs::read_to_string(repo().join(PLAN)).expect("the example plan");
    let plan = plan.replace("    edit: {deployment: qwen-7b}\n", gitops_tail);
    let path = dir.join("plan.yaml");
    std::fs::write(&path, plan).expect("write the plan");
    path
}

#[test]
fn a_helm_values_key_is_edited_and_a_missing_key_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let values = "vllm:\n    image: {tag: v0.11.0}\n    replicaCount: 4  # peak sizing\nrouter:\n    replicaCount: 4\n";
    std::fs::create_dir_all(dir.path().join("apps/qwen")).expect("mkdir");
    std::fs::write(dir.path().join("apps/qwen/deployment.yaml"), values).expect("values");
    let plan = plan_with(dir.path(), "    edit: {helmValues: vllm.replicaCount}\n");
    let repo_arg = dir.path().to_str().expect("a UTF-8 path");
    let plan_arg = plan.to_str().expect("a UTF-8 path");
    let diff = stdout(&propose(&["--plan", plan_arg, "--repo", repo_arg]));
    assert!(
        diff.contains("-    replicaCount: 4  # peak sizing\n+    replicaCount: 8  # peak sizing\n"),
        "{diff}"
    );
    assert!(
        !diff.contains("-    replicaCount: 4\n"),
        "the router's is untouched: {diff}"
    );

    let plan = plan_with(dir.path(), "    edit: {helmValues: vllm.replicas}\n");
    let out = propose(&["--plan", plan.to_str().expect("UTF-8"), "--repo", repo_arg]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("vllm.replicas"), "{err}");
}

#[test]
fn a_plan_without_gitops_or_with_a_prometheus_peak_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let plan = std::fs::read_to_string(repo().join(PLAN)).expect("the example plan");
    let cut = plan.find("  gitops:").expect("a gitops section");
    let path = dir.path().join("plan.yaml");
    std::fs::write(&path, &plan[..cut]).expect("write");
    let out = propose(&["--plan", path.to_str().expect("UTF-8"), "--repo", REPO]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no spec.gitops"));

    let prom = plan.replace(
        "  peak:\n    rps: 36\n",
        "  peak:\n    prometheus: {url: \"http://127.0.0.1:9\", query: \"sum(rate(x[5m]))\"}\n",
    );
    std::fs::write(&path, prom).expect("write");
    let out = propose(&["--plan", path.to_str().expect("UTF-8"), "--repo", REPO]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--peak"));
    let out = propose(&[
        "--plan",
        path.to_str().expect("UTF-8"),
        "--repo",
        REPO,
        "--peak",
        "36",
    ]);
    assert!(stdout(&out).contains("+  replicas: 8"));
}
