//! goodput: SLO-driven capacity management for GPU LLM inference.
//!
//! The workspace's crates, re-exported here under the paths they had as modules of this
//! one: the pure core `goodput-core` (`workload`, `analysis`, `planning`, `record`,
//! `alerts`, `pack_files`, the benchmark driver and its result, the failure analysis, the
//! engine metrics' text and series), the engine model `goodput-model` (`sim`), the custom
//! resources `goodput-api` (`api`), the HTTP client `goodput-http` (`http_client`), Git and
//! the forges `goodput-gitops` (`gitops`), the pack's rendering `goodput-pack` (`pack`), the
//! engine metrics over HTTP `goodput-engine-metrics` (`engine_metrics`), the simulated
//! engine served live `goodput-sim` (`sim::live`), the load generator `goodput-loadgen`
//! (`loadgen`) and the operator `goodput-operator` (`controller`, with a loadgen pod's
//! hand-over of results as `loadgen::{handoff, publish, bucket}`).
//! This crate adds the local shell (`bench`, with a failure test's local run in
//! `failure::local`) and the `goodput` binary's subcommands. Each formula (TPOT,
//! attainment, nearest-rank percentile, replicas) has exactly one definition, in the core,
//! and every shell calls it.

// Two calls into libc need it (each with its SAFETY comment); nothing else may.
#![deny(unsafe_code)]
// Every public item is documented (CI's clippy denies warnings). `unreachable_pub` stays
// off: kube's `KubeSchema` derive trips it on the CRD types that `api` does export.
#![warn(missing_docs)]

// The workspace's crates under the paths they had as modules of this one.
pub use goodput_api as api;
pub use goodput_core::{alerts, analysis, pack_files, planning, record, workload};
pub use goodput_engine_metrics as engine_metrics;
pub use goodput_gitops as gitops;
pub use goodput_http as http_client;
pub use goodput_operator as controller;
pub use goodput_pack as pack;

pub mod bench;
pub mod failure;
/// The fuzz targets' bodies, one per input parser (run by `fuzz/` and `tests/it/fuzz.rs`).
pub mod fuzzing;
pub mod loadgen;
pub mod sim;
