//! goodput: SLO-driven capacity management for GPU LLM inference.
//!
//! The crate is a pure core (`workload`, `analysis`, `planning`) wrapped by shells that do
//! IO: the `goodput` binary's subcommands today, the operator and the load generator later.
//! Each formula (TPOT, attainment, nearest-rank percentile, replicas) has exactly one
//! definition here, and every shell calls it.

pub mod alerts;
pub mod analysis;
pub mod api;
pub mod bench;
pub mod controller;
pub mod engine_metrics;
pub mod failure;
/// The fuzz targets' bodies, one per input parser (run by `fuzz/` and `tests/it/fuzz.rs`).
pub mod fuzzing;
pub mod gitops;
pub mod http_client;
pub mod loadgen;
pub mod pack;
pub mod planning;
pub mod sim;
pub mod workload;
