//! The integration tests that assert no time or rate: parsers, the CLI, the CRDs on the test
//! cluster, the chart with the real `helm`, Git and the forges, alert rules on recorded
//! series. They run side by side; whatever measures is in `tests/measured/`, a binary of
//! its own that runs alone. The shared fixtures under `tests/support/` are mounted once
//! here: one binary links once, where one binary per file linked the library and its
//! dependencies once per file.

#[path = "../support/crd.rs"]
mod crd_install;
#[path = "../support/prometheus.rs"]
mod fake_prometheus;
#[path = "../support/forge_stub.rs"]
mod forge_stub;
#[path = "../support/git_remote.rs"]
mod git_remote;
#[path = "../support/synth.rs"]
mod synth;

mod alerts;
mod chart;
mod cli;
mod crd;
mod early_stop;
mod examples;
mod forge;
mod fuzz;
mod git;
mod handoff;
mod layering;
mod lease;
mod lint;
mod prometheus_api;
mod propose;
mod reference;
mod sim_reference;
