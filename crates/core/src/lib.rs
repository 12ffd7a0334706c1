//! goodput's pure core: what a benchmark means, with no IO in it.
//!
//! The frozen workload and its seeded schedule (`workload`), requests → a point's report and
//! the per-class gate (`analysis`), sweep → capacity → replicas (`planning`), what the client
//! saw of each request (`record`), the benchmark driver and its result (`benchmark`), a
//! failure test's analysis (`failure`), the alert rules' evaluator (`alerts`) and the
//! engines' Prometheus text, profiles and series (`engine_metrics`). Each formula (TPOT, attainment, nearest-rank percentile, replicas) has
//! exactly one definition here; the load generator, the local benchmark, the operator and
//! the binary call it. No async runtime, HTTP or Kubernetes client is a dependency: the
//! shells that do IO sit above (the `goodput` crate).

pub mod alerts;
pub mod analysis;
pub mod benchmark;
pub mod engine_metrics;
pub mod failure;
pub mod pack_files;
pub mod planning;
pub mod record;
pub mod workload;
