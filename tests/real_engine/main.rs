//! goodput against real engines: vLLM's CPU build and llama.cpp's server, each serving the
//! tiny test model (`tests/support/real_engine.rs`, `tests/engines/`). The client runs as a
//! user runs it, `goodput` started in a session of its own on the CPU the engine does not
//! use; every figure is held to what the engine itself counted.
//!
//! The cluster tests run vLLM as the pods of a Deployment in the in-repo test cluster
//! (`cluster.rs`), benchmarked by the operator through a Service.
//!
//! A binary of its own: an idle vLLM still polls its core, so nothing else may measure
//! while one runs, and it runs only when named (`cargo test --test real_engine`), alone.
//! Within it the tests take the machine one at a time ([`machine`]).

#[path = "../support/real_engine.rs"]
mod engine_fixture;
#[path = "../support/serving_plan.rs"]
mod fixture;
#[path = "../support/operator.rs"]
mod harness;

mod cluster;
mod llama_cpp;
mod vllm;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use goodput::api::CapacityBracket;
use goodput::bench::result::{BenchResult, ModeResult};
use goodput::loadgen::point::PointSummaryFile;

use engine_fixture::{MODEL, RealEngine};

/// The machine, held by each test from its first line to its last: one measurement at a
/// time.
pub fn machine() -> MutexGuard<'static, ()> {
    static MACHINE: Mutex<()> = Mutex::new(());
    // A test that failed while holding it left nothing to repair.
    MACHINE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The vLLM example benchmark, which the llama.cpp tests share.
pub const EXAMPLE: &str = include_str!("../../examples/capacity-benchmark-vllm-cpu.yaml");

/// A point's `summary.json`.
pub fn read_summary(dir: &Path) -> PointSummaryFile {
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json parses")
}

/// `goodput bench SPEC --out OUT` as a user starts it beside the engine, once it has
/// succeeded: its stdout and the pack's `sweep.json`.
pub fn bench(spec: &Path, out: &Path) -> (String, BenchResult) {
    let output = engine_fixture::goodput(&[
        "bench",
        spec.to_str().expect("a UTF-8 path"),
        "--out",
        out.to_str().expect("a UTF-8 path"),
        "--quiet",
    ])
    .output()
    .expect("goodput bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "goodput bench: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(out.join("sweep.json")).expect("sweep.json");
    let result = serde_json::from_str(&text).expect("sweep.json parses");
    (stdout, result)
}

/// A mode of `goodput bench` measured as the bar asks: every point valid, a capacity, and a
/// bracket within 10% that starts at it.
pub fn measured_capacity(mode: &ModeResult) -> (f64, CapacityBracket) {
    let invalid: Vec<_> = mode
        .points
        .iter()
        .filter(|p| !p.valid)
        .map(|p| (p.offered_rps, &p.validity_reasons))
        .collect();
    assert!(invalid.is_empty(), "{invalid:?}");
    let capacity = mode.capacity_rps.expect("a capacity");
    let bracket = mode.bracket.expect("a bracket");
    assert_eq!(bracket.pass, capacity);
    assert!(bracket.width() <= 0.10, "{bracket:?}");
    (capacity, bracket)
}

/// `goodput loadgen` at `rate` with `args`, writing into `out`.
pub fn loadgen(engine: &RealEngine, manifest: &Path, rate: f64, out: &Path, args: &[&str]) {
    let rate = rate.to_string();
    let mut all = vec![
        "loadgen",
        "--target",
        &engine.url,
        "--model",
        MODEL,
        "--manifest",
        manifest.to_str().expect("a UTF-8 path"),
        "--rate",
        &rate,
        "--metrics-url",
        &engine.url,
        "--out",
        out.to_str().expect("a UTF-8 path"),
        "--quiet",
    ];
    all.extend_from_slice(args);
    let output = engine_fixture::goodput(&all)
        .output()
        .expect("goodput loadgen runs");
    assert!(
        output.status.success(),
        "goodput loadgen: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The example's frozen manifest, for `goodput loadgen --manifest`.
pub fn manifest_file(dir: &Path) -> PathBuf {
    let loaded = goodput::api::parse_benchmark(EXAMPLE, Path::new("example.yaml"))
        .expect("the example parses");
    let path = dir.join("workload-manifest.yaml");
    std::fs::write(
        &path,
        serde_saphyr::to_string(&loaded.manifest).expect("the manifest serialises"),
    )
    .expect("manifest written");
    path
}
