//! Custom resource types (`goodput.dev/v1alpha1`). The same YAML is what `goodput bench`
//! runs locally and what the operator reconciles in a cluster.
//!
//! Types, their validation (`lint`) and the CustomResourceDefinitions: kube's derive and
//! k8s-openapi's types only, no client. Re-exported as `goodput::api`.

// The core's modules and the engine model under the names the types have always used.
use goodput_core::{analysis, benchmark, failure, pack_files, planning, workload};
use goodput_model as sim;

mod capacity_benchmark;
pub mod conditions;
mod failure_test;
pub mod lint;
mod load;
pub mod placement;
mod serving_plan;
mod status;

pub use capacity_benchmark::*;
pub use failure_test::*;
pub use load::*;
pub use serving_plan::*;
pub use status::*;

/// API group of every goodput custom resource.
pub const GROUP: &str = "goodput.dev";
