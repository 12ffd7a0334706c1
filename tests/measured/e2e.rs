//! The operator's end-to-end scenarios (`support/scenarios.rs`, also run on the test
//! cluster by `tests/measured/operator.rs`) on a real cluster, opt-in: set `GOODPUT_E2E_KUBECONFIG`
//! to a cluster where the image `GOODPUT_E2E_IMAGE` (default `goodput:dev`) is loaded, and
//! run `cargo test --test measured e2e::` (CONTRIBUTING.md: kind or k3d). Unset,
//! every test passes at once, saying `SKIPPED:` and why.
//!
//! The operator runs on this machine (`goodput operator --kubeconfig ... --namespace NS
//! --lease-namespace NS`); its loadgen Jobs and the simulated engine run in the cluster.
//! Each test uses `GOODPUT_E2E_NAMESPACE`, else a fresh `goodput-e2e-<random>` namespace
//! it deletes afterwards (kept, and named, when the test fails). The CRD this build
//! generates is applied server-side and left installed. No other goodput operator may
//! watch that namespace meanwhile.

use crate::harness;
use crate::scenarios;
use harness::Env;

/// One benchmark at a time: they measure latency, and the cluster's CPUs are shared.
use crate::MACHINE;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_simulated_benchmark_runs_as_jobs_and_finds_the_capacity_bench_finds() {
    let _machine = MACHINE.whole().await;
    let Some(env) = Env::real_cluster("capacity").await else {
        return;
    };
    scenarios::a_simulated_benchmark_finds_the_capacity_bench_finds(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_saturation_sweep_places_the_rates_with_the_engine_model() {
    let _machine = MACHINE.whole().await;
    let Some(env) = Env::real_cluster("placed").await else {
        return;
    };
    scenarios::a_saturation_sweep_places_the_rates_with_the_engine_model(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_restarted_operator_loses_and_repeats_no_point() {
    let _machine = MACHINE.whole().await;
    let Some(env) = Env::real_cluster("restart").await else {
        return;
    };
    scenarios::a_restarted_operator_loses_and_repeats_no_point(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_an_invalid_spec_is_a_condition_and_an_event_with_no_job_and_no_hot_loop() {
    let _machine = MACHINE.whole().await;
    let Some(env) = Env::real_cluster("invalid spec").await else {
        return;
    };
    scenarios::an_invalid_spec_is_a_condition_and_an_event_with_no_job_and_no_hot_loop(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_deleting_a_running_benchmark_removes_what_it_created() {
    let _machine = MACHINE.whole().await;
    let Some(env) = Env::real_cluster("delete").await else {
        return;
    };
    scenarios::deleting_a_running_benchmark_removes_what_it_created(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_only_the_leader_reconciles_and_a_standby_takes_over_within_the_lease() {
    let _machine = MACHINE.whole().await;
    let Some(env) = Env::real_cluster("leader takeover").await else {
        return;
    };
    scenarios::only_the_leader_reconciles_and_a_standby_takes_over_within_the_lease(&env).await;
}
