//! `goodput lint` and `goodput crds` end to end: each anti-pattern of the methodology is
//! refused (or flagged) with its field path, one line per finding.

use std::path::Path;
use std::process::{Command, Output};

fn goodput(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_goodput"))
        .args(args)
        .output()
        .expect("the goodput binary runs")
}

/// A lint fixture's path.
fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/lint")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// Runs `goodput lint` on fixtures; returns the exit code and stdout's lines.
fn lint(names: &[&str]) -> (i32, Vec<String>) {
    let files: Vec<String> = names.iter().map(|n| fixture(n)).collect();
    let mut args = vec!["lint"];
    args.extend(files.iter().map(String::as_str));
    let out = goodput(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    (
        out.status.code().expect("exit code"),
        stdout.lines().map(str::to_owned).collect(),
    )
}

/// Asserts one fixture fails with exactly the given error paths (in order), and returns its
/// lines.
fn refused(name: &str, error_paths: &[&str]) -> Vec<String> {
    let (code, lines) = lint(&[name]);
    assert_eq!(code, 1, "{name}: {lines:#?}");
    let prefix = format!("{}: error: ", fixture(name));
    let errors: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|l| l.split_once(": ").map_or(l, |(path, _)| path))
        .collect();
    assert_eq!(errors, error_paths, "{name}: {lines:#?}");
    assert!(!lines.iter().any(|l| l.ends_with(": ok")), "{lines:#?}");
    lines
}

/// Asserts one fixture passes with exactly the given warning paths, and returns its lines.
fn accepted(name: &str, warning_paths: &[&str]) -> Vec<String> {
    let (code, lines) = lint(&[name]);
    assert_eq!(code, 0, "{name}: {lines:#?}");
    let file = fixture(name);
    let prefix = format!("{file}: warning: ");
    let warnings: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|l| l.split_once(": ").map_or(l, |(path, _)| path))
        .collect();
    assert_eq!(warnings, warning_paths, "{name}: {lines:#?}");
    assert_eq!(lines.last(), Some(&format!("{file}: ok")), "{lines:#?}");
    assert_eq!(lines.len(), warning_paths.len() + 1, "{lines:#?}");
    lines
}

#[test]
fn valid_benchmarks_pass() {
    accepted("valid.yaml", &[]);
    accepted("valid-inline.yaml", &[]);
}

#[test]
fn a_capacity_from_a_closed_loop_is_refused() {
    let lines = refused("saturation-only.yaml", &["spec.experiments.rateSweep"]);
    assert!(
        lines[0].contains("never validates an arrival rate"),
        "{lines:#?}"
    );
}

#[test]
fn too_few_scheduled_requests_are_refused() {
    let lines = refused(
        "few-requests.yaml",
        &[
            "spec.workload.manifest.client.class_schedule_counts.interactive",
            "spec.workload.manifest.client.class_schedule_counts.long_context",
            "spec.workload.manifest.client.class_schedule_counts.generation_heavy",
        ],
    );
    assert!(lines[0].contains("no point can be adequate"), "{lines:#?}");
    assert!(
        lines[2].contains("100 requests give no tail evidence"),
        "{lines:#?}"
    );
}

#[test]
fn a_repeated_prompt_in_a_cold_run_is_refused() {
    refused(
        "repeated-cold-prompt.yaml",
        &["spec.experiments.coldPrompts"],
    );
}

#[test]
fn a_warm_run_without_prefix_cache_is_flagged() {
    accepted(
        "warm-without-prefix-cache.yaml",
        &["spec.experiments.cacheModes"],
    );
}

#[test]
fn no_warmup_is_flagged_once() {
    accepted(
        "no-warmup.yaml",
        &["spec.workload.manifest.client.warmup_seconds"],
    );
}

#[test]
fn mean_only_reporting_is_refused() {
    let lines = refused("mean-only.yaml", &["spec.reporting.statistics"]);
    assert!(lines[0].contains("hides the tail"), "{lines:#?}");
}

#[test]
fn mutable_versions_and_empty_presets_are_refused() {
    let lines = refused(
        "mutable-revision.yaml",
        &["spec.workload.manifest.model.revision"],
    );
    assert!(lines[0].contains("mutable"), "{lines:#?}");
    refused("empty-preset.yaml", &["spec.target.simulated.preset"]);
    accepted("url-without-model.yaml", &["spec.target.model"]);
}

#[test]
fn a_config_map_manifest_cannot_be_linted_locally() {
    let lines = refused("config-map.yaml", &["spec.workload.manifestConfigMap"]);
    assert!(lines[0].contains("resolved by the operator"), "{lines:#?}");
}

#[test]
fn parse_errors_name_the_field_path_and_line() {
    let (code, lines) = lint(&["bad-rate.yaml"]);
    assert_eq!(code, 1);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let line = &lines[0];
    assert!(
        line.starts_with(&format!("{}: error: ", fixture("bad-rate.yaml"))),
        "{line}"
    );
    assert!(
        line.contains("field `spec.experiments.rateSweep.rates[1]`"),
        "{line}"
    );
    assert!(line.contains("line 19"), "{line}");

    let (code, lines) = lint(&["unknown-field.yaml"]);
    assert_eq!(code, 1);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].contains("unknown field `rateSweeps`"),
        "{lines:#?}"
    );
    assert!(lines[0].contains("line 18"), "{lines:#?}");
}

#[test]
fn a_workload_manifest_is_not_a_benchmark() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/workload-manifest.yaml");
    let out = goodput(&["lint", manifest.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("`apiVersion` is missing"), "{stdout}");
    assert!(
        stdout.contains("looks like a workload manifest"),
        "{stdout}"
    );
}

#[test]
fn several_files_give_a_line_per_finding_and_fail_if_any_fails() {
    let names = [
        "valid.yaml",
        "mean-only.yaml",
        "no-warmup.yaml",
        "bad-rate.yaml",
        "no-such-file.yaml",
    ];
    let (code, lines) = lint(&names);
    assert_eq!(code, 1, "{lines:#?}");
    let expected = [
        ("valid.yaml", "ok"),
        ("mean-only.yaml", "error: spec.reporting.statistics: "),
        (
            "no-warmup.yaml",
            "warning: spec.workload.manifest.client.warmup_seconds: ",
        ),
        ("no-warmup.yaml", "ok"),
        (
            "bad-rate.yaml",
            "error: field `spec.experiments.rateSweep.rates[1]`",
        ),
        ("no-such-file.yaml", "error: cannot read"),
    ];
    assert_eq!(lines.len(), expected.len(), "{lines:#?}");
    for (line, (name, start)) in lines.iter().zip(expected) {
        let want = format!("{}: {start}", fixture(name));
        assert!(
            line.starts_with(&want),
            "{line}\n  does not start with\n{want}"
        );
    }

    // Warnings alone do not fail.
    let (code, _) = lint(&["valid.yaml", "no-warmup.yaml", "url-without-model.yaml"]);
    assert_eq!(code, 0);
}

/// `goodput crds` prints what `--write` writes and `--check` holds a folder to it (CI's drift
/// check of `crds/` is that command, run once by `.ci/run`).
#[test]
fn crds_prints_writes_and_checks_the_same_crds() {
    let out = goodput(&["crds"]);
    assert!(out.status.success());
    let tmp = tempfile::tempdir().unwrap();
    let written = goodput(&["crds", "--write", tmp.path().to_str().unwrap()]);
    assert!(written.status.success());
    let read = |f: &str| std::fs::read_to_string(tmp.path().join(f)).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "{}---\n{}",
            read("capacitybenchmark.yaml"),
            read("servingplan.yaml")
        )
    );
    let check = goodput(&["crds", "--check", tmp.path().to_str().unwrap()]);
    assert!(check.status.success(), "what was written passes the check");

    // A drifted copy fails the check and the message names the file.
    std::fs::write(tmp.path().join("servingplan.yaml"), "# edited by hand\n").unwrap();
    let check = goodput(&["crds", "--check", tmp.path().to_str().unwrap()]);
    assert!(!check.status.success());
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(
        err.contains("servingplan.yaml") && !err.contains("capacitybenchmark.yaml"),
        "{err}"
    );
}

#[test]
fn a_benchmark_file_that_cannot_be_read_is_named() {
    let out = goodput(&["bench", "no-such-benchmark.yaml"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no-such-benchmark.yaml: cannot read"),
        "{stderr}"
    );
}
