//! `goodput analyze` against the methodology's reference Python analyzer
//! (`benches/reference/analyze_slo.py`): on the same rows, every field the reference
//! writes must come out the same.

use crate::synth;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Compares `reference` against `ours` for every key the reference has.
fn assert_same(reference: &Value, ours: &Value, at: &str) {
    match (reference, ours) {
        (Value::Object(r), Value::Object(o)) => {
            for (k, rv) in r {
                let ov = o.get(k).unwrap_or_else(|| panic!("goodput lacks {at}.{k}"));
                assert_same(rv, ov, &format!("{at}.{k}"));
            }
        }
        (Value::Number(r), Value::Number(o)) => {
            // The reference prints integral cutoffs as integers; compare as numbers.
            assert_eq!(r.as_f64(), o.as_f64(), "{at}");
        }
        _ => assert_eq!(reference, ours, "{at}"),
    }
}

#[test]
fn matches_the_reference_analyzer_on_the_seed_sweep() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("python3 is not installed: the reference comparison cannot run here");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let mut extra = synth::seed_table();
    // A point with classes under the sample minimum, and one under the P99 minimum only.
    extra.push(synth::PointSpec {
        classes: synth::seed_classes([(12_000, 11_500, 40), (1_500, 1_490, 3), (800, 700, 0)]),
        ..extra[0].clone()
    });
    for (i, spec) in extra.iter().enumerate() {
        let csv = dir.path().join(format!("p{i}.csv"));
        synth::write_point_csv(
            &mut std::fs::File::create(&csv).unwrap(),
            spec,
            100 + i as u64,
        )
        .unwrap();
        let duration = spec.duration_s.to_string();
        let reference = Command::new("python3")
            .arg(root.join("benches/reference/analyze_slo.py"))
            .args([csv.to_str().unwrap(), &duration, spec.queue_trend])
            .output()
            .unwrap();
        assert!(
            reference.status.success(),
            "{}",
            String::from_utf8_lossy(&reference.stderr)
        );
        let ours = Command::new(env!("CARGO_BIN_EXE_goodput"))
            .args(["analyze", csv.to_str().unwrap(), "--duration-s", &duration])
            .args(["--queue-trend", spec.queue_trend, "--quiet"])
            .output()
            .unwrap();
        assert!(
            ours.status.success(),
            "{}",
            String::from_utf8_lossy(&ours.stderr)
        );
        let reference: Value = serde_json::from_slice(&reference.stdout).unwrap();
        let ours: Value = serde_json::from_slice(&ours.stdout).unwrap();
        assert_same(&reference, &ours, &format!("point {i}"));
    }
}
