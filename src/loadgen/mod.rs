//! The load generator (`goodput-loadgen`, re-exported here under its old path) and what
//! carries a point's results from a loadgen pod to the operator: the ConfigMap hand-off
//! (`handoff`), its publication (`publish`) and the results bucket (`bucket`).

pub use goodput_loadgen::*;

pub mod bucket;
pub mod handoff;
pub mod publish;
