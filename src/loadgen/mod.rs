//! The load generator (`goodput-loadgen`) and what carries a point's results from a loadgen
//! pod to the operator (`goodput-operator`'s `handoff`, `publish` and `bucket`), under the
//! paths they had as modules of this crate.

pub use goodput_loadgen::*;
pub use goodput_operator::{bucket, handoff, publish};
