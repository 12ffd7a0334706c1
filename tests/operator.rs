//! `goodput operator` on the in-repo test cluster: real HTTPS API server, the real
//! `kube::Client`, pods as processes of the real `goodput` binary. A benchmark against the
//! simulated engine runs its points as Jobs and reaches the capacity `goodput bench` finds
//! on the same spec; a restarted operator loses and repeats nothing; an invalid spec waits
//! quietly; deleting a benchmark removes what it created. The scenarios are shared with the
//! real-cluster suite (`tests/e2e.rs`) in `support/scenarios.rs`.

#[path = "support/operator.rs"]
mod harness;
#[path = "support/scenarios.rs"]
mod scenarios;
use harness::Env;

/// Benchmarks measure latency on a 2-core machine: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_benchmark_runs_as_jobs_and_finds_the_capacity_bench_finds() {
    let _serial = SERIAL.lock().await;
    let env = Env::test_cluster().await;
    scenarios::a_simulated_benchmark_finds_the_capacity_bench_finds(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_operator_loses_and_repeats_no_point() {
    let _serial = SERIAL.lock().await;
    let env = Env::test_cluster().await;
    scenarios::a_restarted_operator_loses_and_repeats_no_point(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_spec_is_a_condition_and_an_event_with_no_job_and_no_hot_loop() {
    let _serial = SERIAL.lock().await;
    let env = Env::test_cluster().await;
    scenarios::an_invalid_spec_is_a_condition_and_an_event_with_no_job_and_no_hot_loop(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_benchmark_removes_what_it_created() {
    let _serial = SERIAL.lock().await;
    let env = Env::test_cluster().await;
    scenarios::deleting_a_running_benchmark_removes_what_it_created(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_reconciles_and_a_standby_takes_over_within_the_lease() {
    let _serial = SERIAL.lock().await;
    let env = Env::test_cluster().await;
    scenarios::only_the_leader_reconciles_and_a_standby_takes_over_within_the_lease(&env).await;
}
