//! The `goodput` binary end to end: `analyze` and `plan` as a user runs them.

use crate::synth;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn goodput(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_goodput"))
        .args(args)
        .output()
        .expect("the goodput binary runs")
}

fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "goodput failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

fn repo(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(path)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn plan_reproduces_the_worked_example() {
    let args = [
        "plan",
        "--peak-rps",
        "36",
        "--capacity-rps",
        "24",
        "--replicas-tested",
        "4",
        "--gpus-per-replica",
        "2",
        "--target-utilization",
        "0.75",
    ];
    let out = goodput(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("= 24 / 4 = 6 RPS"), "{text}");
    assert!(
        text.contains("ceil(36 / (6 × 0.75)) = ceil(8) = 8"),
        "{text}"
    );
    assert!(text.contains("= 16"), "{text}");

    let mut json_args = args.to_vec();
    json_args.extend(["--output", "json"]);
    let v = stdout_json(&goodput(&json_args));
    assert_eq!(v["capacity_per_replica_rps"], 6.0);
    assert_eq!(v["required_replicas"], 8);
    assert_eq!(v["required_gpus"], 16);
}

#[test]
fn plan_rejects_bad_utilization() {
    let out = goodput(&[
        "plan",
        "--peak-rps",
        "36",
        "--capacity-rps",
        "24",
        "--replicas-tested",
        "4",
        "--gpus-per-replica",
        "2",
        "--target-utilization",
        "1.5",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("target utilization must be in (0, 1]"),
        "{err}"
    );
}

#[test]
fn analyze_the_smoke_csv() {
    let out = goodput(&[
        "analyze",
        &repo("examples/requests-smoke.csv"),
        "--manifest",
        &repo("examples/workload-manifest.yaml"),
        "--duration-s",
        "300",
        "--queue-trend",
        "flat",
    ]);
    let v = stdout_json(&out);
    assert_eq!(v["capacity_gate_pass"], false);
    for class in ["interactive", "long_context", "generation_heavy"] {
        assert_eq!(v["classes"][class]["sample_adequate"], false, "{class}");
    }
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("capacity gate: fail"), "{summary}");
    assert!(summary.contains("generation_heavy"), "{summary}");
}

#[test]
fn analyze_reports_bad_rows_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("bad.csv");
    std::fs::write(
        &csv,
        "request_id,class,ttft_ms,tpot_ms,e2e_ms,output_tokens,status\nr1,interactive,12x,1,2,3,ok\n",
    )
    .unwrap();
    let out = goodput(&[
        "analyze",
        csv.to_str().unwrap(),
        "--duration-s",
        "300",
        "--queue-trend",
        "flat",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.csv:2: column 3 (ttft_ms): `12x` is not a number"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn analyze_rejects_an_invalid_manifest_with_the_field_path() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("m.yaml");
    let yaml = std::fs::read_to_string(repo("examples/workload-manifest.yaml"))
        .unwrap()
        .replace("revision: dense-70b-fixture-r1", "revision: latest");
    std::fs::write(&manifest, yaml).unwrap();
    let out = goodput(&[
        "analyze",
        &repo("examples/requests-smoke.csv"),
        "--manifest",
        manifest.to_str().unwrap(),
        "--duration-s",
        "300",
        "--queue-trend",
        "flat",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("model.revision: `latest` is a mutable reference"),
        "{err}"
    );
}

/// The whole local pipeline on the seed's sweep: four points written as CSVs, analysed by
/// `goodput analyze`, collected in a sweep file, planned by `goodput plan --sweep`.
#[test]
fn sweep_of_the_seed_table_selects_24_rps_and_plans_8_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let mut points = Vec::new();
    for (i, spec) in synth::seed_table().iter().enumerate() {
        let name = format!("point-{}", spec.offered_rps);
        let csv = dir.path().join(format!("{name}.csv"));
        let report = dir.path().join(format!("{name}.json"));
        synth::write_point_csv(&mut std::fs::File::create(&csv).unwrap(), spec, i as u64).unwrap();
        let out = goodput(&[
            "analyze",
            csv.to_str().unwrap(),
            "--duration-s",
            &spec.duration_s.to_string(),
            "--queue-trend",
            spec.queue_trend,
            "--out",
            report.to_str().unwrap(),
            "--quiet",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        points.push(serde_json::json!({
            "offered_rps": spec.offered_rps,
            "report_path": format!("{name}.json"),
        }));
    }
    let sweep = dir.path().join("sweep.json");
    let doc = serde_json::json!({"replicas_tested": 4, "gpus_per_replica": 2, "points": points});
    std::fs::write(&sweep, doc.to_string()).unwrap();

    let v = stdout_json(&goodput(&[
        "plan",
        "--sweep",
        sweep.to_str().unwrap(),
        "--peak-rps",
        "36",
        "--output",
        "json",
    ]));
    assert_eq!(v["capacity_rps"], 24.0);
    assert_eq!(v["capacity_per_replica_rps"], 6.0);
    assert_eq!(v["required_replicas"], 8);
    assert_eq!(v["required_gpus"], 16);
    let p24 = &v["sweep"]["points"][2];
    assert_eq!(p24["weakest_class"]["successful_count"], 2191);
    let p28 = &v["sweep"]["points"][3];
    assert_eq!(p28["verdict"], "fail");
    let mut rules: Vec<&str> = p28["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"].as_str().unwrap())
        .collect();
    rules.dedup();
    assert_eq!(rules, ["attainment", "error_rate", "queue_trend"]);
    // 28 RPS has the highest raw output throughput, and still is not the capacity.
    let tps = |i: usize| {
        v["sweep"]["points"][i]["output_throughput_tps"]
            .as_f64()
            .unwrap()
    };
    assert!(tps(3) > tps(2));

    let out = goodput(&[
        "plan",
        "--sweep",
        sweep.to_str().unwrap(),
        "--peak-rps",
        "36",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("capacity = 24 RPS on 4 replicas"), "{text}");
    assert!(text.contains("28 RPS fail:"), "{text}");
}

#[test]
fn shards_given_together_are_merged() {
    let dir = tempfile::tempdir().unwrap();
    let spec = &synth::seed_table()[2];
    let whole = dir.path().join("whole.csv");
    synth::write_point_csv(&mut std::fs::File::create(&whole).unwrap(), spec, 7).unwrap();
    let text = std::fs::read_to_string(&whole).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let rows: Vec<&str> = lines.collect();
    let (a, b) = rows.split_at(rows.len() / 3);
    let shard = |name: &str, rows: &[&str]| {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("{header}\n{}\n", rows.join("\n"))).unwrap();
        p
    };
    let (sa, sb) = (shard("a.csv", a), shard("b.csv", b));
    let run = |files: &[&Path]| {
        let mut args = vec!["analyze".to_owned()];
        args.extend(files.iter().map(|p| p.to_string_lossy().into_owned()));
        args.extend(["--duration-s", "900", "--queue-trend", "flat", "-q"].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        stdout_json(&goodput(&args))
    };
    assert_eq!(run(&[&whole]), run(&[&sa, &sb]));
}

#[test]
fn the_shipped_example_sweep_plans_8_replicas() {
    let v = stdout_json(&goodput(&[
        "plan",
        "--sweep",
        &repo("examples/seed-sweep/sweep.json"),
        "--peak-rps",
        "36",
        "--manifest",
        &repo("examples/workload-manifest.yaml"),
        "--output",
        "json",
    ]));
    assert_eq!(v["capacity_rps"], 24.0);
    assert_eq!(v["required_replicas"], 8);
    assert_eq!(v["required_gpus"], 16);
    assert_eq!(v["target_utilization"], 0.75);
}

const SEED_SHAPE: [&str; 10] = [
    "--preset",
    "qwen2.5-7b-h100",
    "--requests",
    "2000",
    "--input-tokens",
    "1024",
    "--output-tokens",
    "256",
    "--ttft-slo-ms",
    "1000",
];

#[test]
fn simulate_prints_one_object_per_rate() {
    let mut args = vec!["simulate"];
    args.extend(SEED_SHAPE);
    args.extend([
        "--tpot-slo-ms",
        "40",
        "--rates",
        "1,20,40",
        "--output",
        "json",
    ]);
    let v = stdout_json(&goodput(&args));
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for key in [
        "rate",
        "ttft_p50_ms",
        "ttft_p99_ms",
        "tpot_p50_ms",
        "tpot_p99_ms",
        "output_tps",
        "goodput_rps",
        "slo_met",
    ] {
        assert!(rows[0].get(key).is_some(), "missing {key}");
    }
    assert_eq!(rows[1]["rate"], 20.0);
    assert_eq!(rows[0]["slo_met"], 1.0);
    assert!(rows[2]["slo_met"].as_f64().unwrap() < 0.1);
    assert_eq!(rows[2]["queue_trend"], "growing");
}

#[test]
fn simulate_finds_the_max_rate() {
    let mut args = vec!["simulate"];
    args.extend(SEED_SHAPE);
    args.extend([
        "--tpot-slo-ms",
        "40",
        "--find-max-rate",
        "--slo-met",
        "0.99",
        "--output",
        "json",
    ]);
    let v = stdout_json(&goodput(&args));
    let max = v["max_rate"].as_f64().unwrap();
    assert!((max - 22.6).abs() <= 0.8, "{max}");
    assert_eq!(v["probes"].as_array().unwrap().len(), 12);
}

#[test]
fn simulate_with_a_manifest_applies_the_per_class_gate() {
    let v = stdout_json(&goodput(&[
        "simulate",
        "--manifest",
        &repo("examples/workload-manifest.yaml"),
        "--preset",
        "dense-70b-h200-tp2",
        "--requests",
        "3000",
        "--rates",
        "0.5",
        "--output",
        "json",
    ]));
    let report = &v[0]["report"];
    assert_eq!(report["classes"].as_object().unwrap().len(), 3);
    // 3,000 requests give generation_heavy 300 samples: exploratory at best.
    assert_eq!(
        report["classes"]["generation_heavy"]["successful_count"],
        300
    );
    assert_eq!(report["capacity_gate_pass"], false);
}

#[test]
fn simulate_rejects_unknown_presets_and_fields() {
    let out = goodput(&["simulate", "--preset", "nope", "--rates", "1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown preset `nope`"));
    let mut args = vec!["simulate"];
    args.extend(SEED_SHAPE);
    args.extend(["--tpot-slo-ms", "40", "--rates", "1", "--set", "max_seqs=2"]);
    let out = goodput(&args);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown setup field `max_seqs`"));
}
