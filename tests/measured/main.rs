//! The integration tests that measure time or rates: simulated engines, load generators,
//! the router and the operator running benchmarks on the test cluster. Every test here
//! holds [`SERIAL`] for its whole run, and cargo runs this binary after `it` has finished,
//! so a measurement has the machine to itself: nothing else's load becomes its latency.
//! The shared fixtures under `tests/support/` are mounted once here.

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

mod bench;
mod e2e;
mod engine_metrics;
mod failure;
mod fleet;
mod gitops;
mod loadgen;
mod loadgen_client;
mod loadgen_metrics;
mod operator;
mod operator_failure;
mod router;
mod serve_sim;
mod serving_plan;

/// Held by every test of this binary from its first line to its last: with two cores, a
/// second test beside a measurement would be measured too.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
