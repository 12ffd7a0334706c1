//! The integration tests, one binary: every file beside this one is a module, the shared
//! fixtures under `tests/support/` are mounted once here. One binary links once, where
//! one binary per file linked the library and its dependencies once per file.

#[path = "../support/crd.rs"]
mod crd_install;
#[path = "../support/prometheus.rs"]
mod fake_prometheus;
#[path = "../support/serving_plan.rs"]
mod fixture;
#[path = "../support/forge_stub.rs"]
mod forge_stub;
#[path = "../support/git_remote.rs"]
mod git_remote;
#[path = "../support/operator.rs"]
mod harness;
#[path = "../support/live.rs"]
mod live;
#[path = "../support/scenarios.rs"]
mod scenarios;
#[path = "../support/synth.rs"]
mod synth;

mod alerts;
mod bench;
mod chart;
mod cli;
mod crd;
mod e2e;
mod engine_metrics;
mod examples;
mod failure;
mod fleet;
mod forge;
mod git;
mod gitops;
mod handoff;
mod lease;
mod lint;
mod loadgen;
mod loadgen_client;
mod loadgen_metrics;
mod operator;
mod operator_failure;
mod prometheus_api;
mod propose;
mod reference;
mod router;
mod serve_sim;
mod serving_plan;
mod sim_reference;

/// Held by every test that measures time or drives load (simulated engines, load generators,
/// the operator on the test cluster): they share two cores with nothing else that measures,
/// so one test's load never becomes another's latency. Tests that measure nothing run
/// beside them.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
