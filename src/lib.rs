//! goodput: SLO-driven capacity management for GPU LLM inference.
//!
//! The pure core (`workload`, `analysis`, `planning`, `record`, `alerts`, the failure
//! analysis and the engine metrics' text and series) is the crate `goodput-core`,
//! re-exported here under the same paths; this crate wraps it with the shells that do IO:
//! the load generator (`loadgen`), the simulated engine (`sim`), the local benchmark
//! (`bench`, rendered by `pack`), the operator (`controller`, `gitops`) and the `goodput`
//! binary's subcommands. Each formula (TPOT, attainment, nearest-rank percentile, replicas)
//! has exactly one definition, in the core, and every shell calls it.

// Two calls into libc need it (each with its SAFETY comment); nothing else may.
#![deny(unsafe_code)]
// Every public item is documented (CI's clippy denies warnings). `unreachable_pub` stays
// off: kube's `KubeSchema` derive trips it on the CRD types that `api` does export.
#![warn(missing_docs)]

pub use goodput_core::{alerts, analysis, planning, record, workload};

pub use goodput_api as api;
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
pub mod sim;
