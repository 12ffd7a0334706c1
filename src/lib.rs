//! goodput: SLO-driven capacity management for GPU LLM inference.
//!
//! The workspace's crates, re-exported here under the paths they had as modules of this
//! one: the pure core `goodput-core` (`workload`, `analysis`, `planning`, `record`,
//! `alerts`, the benchmark driver and its result, the failure analysis, the engine
//! metrics' text and series), the engine model `goodput-model` (`sim`), the custom
//! resources `goodput-api` (`api`), the HTTP client `goodput-http` (`http_client`), Git and
//! the forges `goodput-gitops` (`gitops`), the pack's rendering `goodput-pack` (`pack`) and
//! the engine metrics over HTTP `goodput-engine-metrics` (`engine_metrics`).
//! This crate adds the shells that do IO: the load generator (`loadgen`), the simulated
//! engine served live (`sim::live`), the local benchmark (`bench`), the operator
//! (`controller`) and the `goodput` binary's subcommands. Each formula (TPOT, attainment,
//! nearest-rank percentile, replicas) has exactly one definition, in the core, and every
//! shell calls it.

// Two calls into libc need it (each with its SAFETY comment); nothing else may.
#![deny(unsafe_code)]
// Every public item is documented (CI's clippy denies warnings). `unreachable_pub` stays
// off: kube's `KubeSchema` derive trips it on the CRD types that `api` does export.
#![warn(missing_docs)]

// The workspace's crates under the paths they had as modules of this one.
pub use goodput_api as api;
pub use goodput_core::{alerts, analysis, planning, record, workload};
pub use goodput_engine_metrics as engine_metrics;
pub use goodput_gitops as gitops;
pub use goodput_http as http_client;
pub use goodput_pack as pack;

pub mod bench;
pub mod controller;
pub mod failure;
/// The fuzz targets' bodies, one per input parser (run by `fuzz/` and `tests/it/fuzz.rs`).
pub mod fuzzing;
pub mod loadgen;
pub mod sim;
