//! The capacity pack's file names, written once: `goodput bench` writes the pack, the load
//! generator a point's files, the operator keeps them in ConfigMaps and a results bucket,
//! and `goodput propose` and the pack's renderer read them back, all by these names.
//!
//! ```text
//! <pack>/
//!   capacity-benchmark.yaml  workload-manifest.yaml
//!   sweep.json  sweep.md  plan.md  failure-test.md
//!   plots/  throughput.svg  goodput.svg  attainment.svg  ttft_p95.svg  tpot_p95.svg
//!   <mode>/sweep.json
//!   <mode>/rate-<R>rps[-r<i>]/  <mode>/saturation/c<N>/
//!     requests.csv  summary.json  engine-metrics.json  slo-report.json
//!   failure/<kind>/  failure-test.json  requests.csv  engine-metrics.json
//! ```

/// The benchmark as run.
pub const BENCHMARK: &str = "capacity-benchmark.yaml";
/// The frozen workload manifest, with its `resolved` section.
pub const MANIFEST: &str = "workload-manifest.yaml";
/// The whole sweep (`BenchResult`), and each cache mode's in its folder.
pub const SWEEP_JSON: &str = "sweep.json";
/// The sweep's tables.
pub const SWEEP_MD: &str = "sweep.md";
/// The replica arithmetic.
pub const PLAN_MD: &str = "plan.md";
/// The plots' folder.
pub const PLOTS: &str = "plots";
/// Offered rate against throughput.
pub const THROUGHPUT_SVG: &str = "throughput.svg";
/// Offered rate against goodput.
pub const GOODPUT_SVG: &str = "goodput.svg";
/// Per-class attainment with the gate's line.
pub const ATTAINMENT_SVG: &str = "attainment.svg";
/// P95 TTFT per class.
pub const TTFT_P95_SVG: &str = "ttft_p95.svg";
/// P95 TPOT per class.
pub const TPOT_P95_SVG: &str = "tpot_p95.svg";
/// One point's requests, one row each.
pub const REQUESTS_CSV: &str = "requests.csv";
/// One point's summary: the analysis core's report, the client's facts, validity, the
/// engine's findings.
pub const SUMMARY_JSON: &str = "summary.json";
/// The engine's metrics on the point's timeline.
pub const ENGINE_METRICS_JSON: &str = "engine-metrics.json";
/// One point's report alone (what `goodput analyze` writes).
pub const SLO_REPORT_JSON: &str = "slo-report.json";
/// A failure test's report.
pub const FAILURE_TEST_JSON: &str = "failure-test.json";
/// Every failure test's report, rendered.
pub const FAILURE_TEST_MD: &str = "failure-test.md";
