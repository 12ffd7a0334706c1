//! Regenerates the example files shaped like the worked example's sweep (16, 20, 24 and
//! 28 RPS on 4 replicas): `examples/point-24rps/requests.csv` and `examples/seed-sweep/`
//! (one `slo-report.json` per point and a `sweep.json` for `goodput plan --sweep`).
//!
//!     cargo run --example seed_sweep
//!
//! The rows are synthetic (seeded), not measured: they reproduce the table's per-class
//! counts, attainments and error rates so the analysis and the plan can be followed by hand.

#[path = "../tests/support/synth.rs"]
mod synth;

use std::path::Path;

use goodput::analysis::{PointSummary, QueueTrend, read_requests_csv};
use goodput::workload::seed_manifest;

fn main() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let sweep_dir = root.join("seed-sweep");
    std::fs::create_dir_all(&sweep_dir)?;
    let scratch = tempfile::tempdir()?;
    let mut points = Vec::new();
    for (i, spec) in synth::seed_table().iter().enumerate() {
        let rate = spec.offered_rps;
        let csv = if rate == 24.0 {
            let dir = root.join("point-24rps");
            std::fs::create_dir_all(&dir)?;
            dir.join("requests.csv")
        } else {
            scratch.path().join(format!("{rate}.csv"))
        };
        synth::write_point_csv(&mut std::fs::File::create(&csv)?, spec, i as u64)?;
        let mut summary = PointSummary::new(seed_manifest().gate_config());
        read_requests_csv(&csv, &mut summary)?;
        let trend = match spec.queue_trend {
            "flat" => QueueTrend::Flat,
            _ => QueueTrend::Growing,
        };
        let report = summary.finish(spec.duration_s, trend)?;
        let name = format!("point-{rate}rps.json");
        std::fs::write(
            sweep_dir.join(&name),
            serde_json::to_string_pretty(&report)? + "\n",
        )?;
        println!(
            "{rate} RPS: {} rows, window {} s, queue {}",
            report.attempted, spec.duration_s, spec.queue_trend
        );
        points.push(serde_json::json!({"offered_rps": rate, "report_path": name}));
    }
    let sweep = serde_json::json!({
        "replicas_tested": 4,
        "gpus_per_replica": 2,
        "points": points,
    });
    std::fs::write(
        sweep_dir.join("sweep.json"),
        serde_json::to_string_pretty(&sweep)? + "\n",
    )?;
    Ok(())
}
