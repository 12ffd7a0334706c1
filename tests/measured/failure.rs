//! Failure tests against the simulated engine, end to end over loopback: four TP2 replicas
//! (about 6 RPS each for the class, time-scaled 5×) behind the router, the load generator
//! as a client, faults through the fleet's admin API, the shipped alert rules evaluated
//! over what was scraped.

use std::path::Path;
use std::time::Duration;

use goodput::alerts::fired as alerts;
use goodput::analysis::QueueTrend;
use goodput::api::{CacheMode, FailureTest, Fault, FaultKind, LoadedBenchmark, parse_benchmark};
use goodput::bench::driver::PointKey;
use goodput::bench::point_job::{PointTarget, point_load};
use goodput::bench::{BenchOptions, run_bench};
use goodput::engine_metrics::scrape::discover_targets;
use goodput::failure::local::{FaultSite, SimulatedFleet, TestDone, run_test};
use goodput::failure::{FailureReport, FailureVerdict};
use goodput::loadgen::point::{PointPlan, measure_time_scaled};
use goodput::loadgen::run::LoadConfig;
use goodput::sim::live::ReplicaConfig;
use goodput::sim::live::fleet::{FleetConfig, start_fleet};
use goodput::sim::live::router::RouterConfig;

/// Load tests share two cores: one at a time.
use crate::MACHINE;

const EXAMPLE: &str = include_str!("../../examples/failure-test.yaml");
/// The example's engines run this many times faster than real time.
const K: f64 = 5.0;
/// The router's detection delay (wall clock) in model seconds.
const DETECTION_S: f64 = 1.0 * K;

fn example() -> LoadedBenchmark {
    parse_benchmark(EXAMPLE, Path::new("failure-test.yaml")).expect("the example parses")
}

fn serial() -> tokio::sync::SemaphorePermit<'static> {
    MACHINE.whole_blocking()
}

/// The example's four simulated replicas, on a thread and runtime of their own (as
/// `goodput bench` runs them), until dropped.
struct Fleet {
    url: String,
    /// The model the simulated engines serve.
    model: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn fleet() -> Fleet {
    fleet_of(ReplicaConfig::new)
}

/// The example's fleet with its replicas' configuration changed by `replica`.
fn fleet_of(replica: impl FnOnce(goodput::sim::Setup) -> ReplicaConfig + Send + 'static) -> Fleet {
    let setup = goodput::sim::setup::preset("dense-70b-fp8-h100-tp2").expect("preset");
    let model = setup.model.clone();
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let fleet = start_fleet(FleetConfig {
                replica: ReplicaConfig {
                    time_scale: K,
                    stream_interval: 8,
                    ..replica(setup)
                },
                replicas: 4,
                host: std::net::Ipv4Addr::LOCALHOST.into(),
                port: 0,
                router: RouterConfig::default(),
                cold_start: Duration::from_secs(1),
                faults: Default::default(),
            })
            .await
            .expect("the fleet starts");
            url_tx.send(fleet.router_url()).expect("send the URL");
            let _ = stop_rx.await;
            fleet.shutdown().await;
        });
    });
    let url = url_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("fleet URL");
    Fleet {
        url,
        model,
        stop: Some(stop),
        thread: Some(thread),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The example's point at `rate` against `fleet`, prompts seeded by `nonce`.
async fn load(
    client: &reqwest::Client,
    fleet: &Fleet,
    loaded: &LoadedBenchmark,
    rate: f64,
    nonce: u64,
) -> (LoadConfig, PointPlan) {
    let target = PointTarget {
        url: fleet.url.clone(),
        model: fleet.model.clone(),
        metrics_targets: discover_targets(client, &fleet.url)
            .await
            .expect("replicas"),
        discover_metrics: false,
        time_scale: K,
    };
    let key = PointKey::Rate {
        cache: CacheMode::Cold,
        rate,
        repeat: 0,
    };
    point_load(
        &loaded.benchmark.spec,
        &loaded.manifest,
        key,
        &target,
        nonce,
    )
    .expect("the load")
}

/// Runs `fault` at `rate` on a fresh fleet with the example's manifest.
fn run_fault(fault: Fault, rate: f64, steady_s: f64, observe_s: f64) -> TestDone {
    run_fault_on(fleet(), fault, rate, steady_s, observe_s)
}

/// Runs `fault` at `rate` on `fleet` with the example's manifest.
fn run_fault_on(fleet: Fleet, fault: Fault, rate: f64, steady_s: f64, observe_s: f64) -> TestDone {
    let loaded = example();
    runtime().block_on(async {
        let client = goodput::http_client::load_client(false).expect("client");
        let load = load(&client, &fleet, &loaded, rate, 7).await;
        let test = FailureTest {
            steady_seconds: steady_s,
            observe_seconds: observe_s,
            ..FailureTest::default()
        };
        let (_stop_tx, stop) = tokio::sync::watch::channel(false);
        run_test(
            &client,
            &FaultSite::Fleet(SimulatedFleet {
                router_url: fleet.url.clone(),
                time_scale: K,
            }),
            &test,
            &fault,
            (&load.0, &load.1),
            4,
            &loaded.manifest.gate_config(),
            stop,
        )
        .await
        .expect("the failure test runs")
    })
}

fn fired<'a>(r: &'a FailureReport, alert: &str) -> Vec<&'a goodput::failure::FiredAlert> {
    r.alerts
        .iter()
        .filter(|a| a.alert == alert && a.firing_at_s.is_some())
        .collect()
}

/// The example end to end: the sweep finds 24 RPS on four replicas, the failure test runs
/// 20 RPS and kills replica 1; the loss is detected, the router stops sending it work no
/// sooner than its detection delay allows, every request is accounted for against the
/// router's own count, the replacement serves no sooner than its 45 seconds, the queue
/// recovers, the replica-down alert fires (it holds 30 s; the replacement takes 45), and `failure-test.md` has every field.
#[test]
fn the_example_kills_one_of_four_replicas_and_the_pack_reports_it() {
    let _serial = serial();
    let loaded = example();
    let dir = tempfile::tempdir().expect("tempdir");
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let options = BenchOptions {
        out: dir.path().to_path_buf(),
        progress: false,
    };
    let result = runtime()
        .block_on(run_bench(
            &loaded.benchmark,
            &loaded.manifest,
            &options,
            stop,
        ))
        .expect("the benchmark runs");
    goodput::pack::write_reports(dir.path(), &result).expect("the pack's reports are written");
    let cold = &result.modes[0];
    assert_eq!(cold.capacity_rps, Some(24.0), "the sweep's capacity");
    let [r] = result.failure_tests.as_slice() else {
        panic!("one failure test: {:?}", result.failure_tests);
    };
    let md = std::fs::read_to_string(dir.path().join("failure-test.md")).expect("failure-test.md");
    println!("{md}");
    assert_eq!(r.fault, FaultKind::KillReplica);
    assert_eq!(r.rate_rps, 20.0, "capacity × 20/24");
    assert_eq!(r.verdict, FailureVerdict::Pass, "{:#?}", r.reasons);
    let inj = r.injected_at_s;
    let detected = r.detected_at_s.expect("detected");
    let removed = r.signals.endpoint_removed_s.expect("removed from routing");
    let first_probe = r.signals.readiness_failed_s.expect("a probe failed");
    assert!(detected >= inj && detected <= removed, "{r:#?}");
    // The router removes a replica only after its probes failed for the detection delay.
    assert!(removed - first_probe >= DETECTION_S - 0.5, "{r:#?}");
    assert!(removed - inj < DETECTION_S + 5.0, "{r:#?}");
    assert_eq!(r.stopped_receiving_work, Some(true));
    assert_eq!(r.signals.routed_after_removal, Some(0));
    // The replacement cannot serve before it was started, 45 s after the kill.
    let back = r.signals.serving_again_s.expect("the replacement serves");
    assert!(back - inj >= 45.0 - 0.5, "{r:#?}");
    assert!(r.capacity_returned);
    // Every request: ok, failed with an error, or lost; the router counted as many.
    let a = &r.accounting;
    assert!(a.balanced(), "{a:#?}");
    assert_eq!(a.router_received, Some(a.attempted + a.warmup_sent));
    assert_eq!((a.lost, a.retried), (0, 0));
    assert!(
        a.failed_honestly > 0,
        "requests in flight on the killed replica fail"
    );
    // The engines cannot finish more requests than the router handed them.
    let finished = a.engine_finished.expect("engine counters");
    assert!(finished <= (a.attempted + a.warmup_sent) as f64, "{a:#?}");
    let first_error = r.first_error_s.expect("an error");
    assert!(
        first_error >= inj - 0.5,
        "no error before the fault: {r:#?}"
    );
    assert!(r.queue.recovered_at_s.is_some(), "{:#?}", r.queue);
    // The incident costs attainment; the after-window is back within the SLOs.
    let att = |name: &str| {
        r.windows
            .iter()
            .find(|w| w.name == name)
            .and_then(|w| w.classes[0].attainment)
            .unwrap_or_else(|| panic!("{name} window"))
    };
    assert!(att("during") < att("before"), "{:#?}", r.windows);
    assert!(att("after") >= 0.95, "{:#?}", r.windows);
    let down = fired(r, "GoodputReplicaDown");
    assert!(!down.is_empty(), "replica down fired: {:#?}", r.alerts);
    assert!(down.iter().all(|a| a.pending_at_s >= inj - 1.0));
    for field in [
        "## KillReplica on replica 1: pass",
        "| fault injected (4 replicas at 20 RPS)",
        "| detected (",
        "| endpoint removed from routing |",
        "| serving again (capacity back) |",
        "| first error |",
        "| last error |",
        "| queue peak |",
        "| queue recovered |",
        "| before |",
        "| during |",
        "| after |",
        "lost silently",
        "GoodputReplicaDown",
        "Capacity came back without manual repair: **yes**",
        "they agree",
    ] {
        assert!(md.contains(field), "missing {field:?} in\n{md}");
    }
    let records = dir.path().join("failure/kill-replica/requests.csv");
    assert!(records.exists(), "the run's records are in the pack");
}

/// 24 RPS passes on four replicas (6 each) but not on three (8 each, above what one can
/// drain): with no replacement the queue grows, nothing is rejected, and the report says
/// so as a finding; the queue-growth alert fires.
#[test]
fn three_replicas_cannot_hold_what_four_passed_and_nothing_sheds_load() {
    let _serial = serial();
    let fault = Fault {
        kind: FaultKind::KillReplica,
        replica: 0,
        recreate_after_seconds: Some(-1.0),
        ..Fault::default()
    };
    let done = run_fault(fault, 24.0, 30.0, 120.0);
    let r = &done.report;
    assert!(done.alerts_error.is_none(), "{:?}", done.alerts_error);
    assert_eq!(
        r.queue.trend_after_injection,
        QueueTrend::Growing,
        "{:#?}",
        r.queue
    );
    assert!(r.queue.growth_after_injection > 20.0, "{:#?}", r.queue);
    assert_eq!(r.queue.recovered_at_s, None);
    assert!(!r.capacity_returned);
    assert_eq!(r.accounting.rejected, 0);
    assert_eq!(r.verdict, FailureVerdict::Finding, "{:#?}", r.reasons);
    assert!(
        r.reasons.iter().any(|s| s.contains("nothing shed load")),
        "{:?}",
        r.reasons
    );
    assert!(
        !fired(r, "GoodputQueueGrowing").is_empty(),
        "{:#?}",
        r.alerts
    );
    assert!(
        !fired(r, "GoodputReplicaDown").is_empty(),
        "{:#?}",
        r.alerts
    );
}

/// The same rules stay silent on a healthy run at the passing rate.
#[test]
fn a_healthy_run_fires_no_alert() {
    let _serial = serial();
    let loaded = example();
    let fleet = fleet();
    let gate = loaded.manifest.gate_config();
    let (records, series, end_s) = runtime().block_on(async {
        let client = goodput::http_client::load_client(false).expect("client");
        let (config, plan) = load(&client, &fleet, &loaded, 20.0, 9).await;
        let (config, plan) = goodput::bench::point_job::FailureLoad {
            steady_seconds: 60.0,
            observe_seconds: 60.0,
            cancel: None,
        }
        .apply(&config, &plan, 20.0);
        let (_stop_tx, stop) = tokio::sync::watch::channel(false);
        let m = measure_time_scaled(client, &config, &plan, K, stop)
            .await
            .expect("the run");
        let end = m.run.records.iter().map(|r| r.ended_s).fold(0.0, f64::max);
        (m.run.records, m.series, end)
    });
    assert!(records.len() > 2000);
    assert!(
        records.iter().all(|r| r.ok()),
        "a healthy run has no failure"
    );
    let fired = alerts(series.as_ref(), &records, end_s, &gate).expect("the rules evaluate");
    assert!(
        fired.iter().all(|a| a.firing_at_s.is_none()),
        "no alert fires on a healthy run: {fired:#?}"
    );
}

/// A new replica that joins cold, a KV cut and a degraded link each get their own report:
/// the new replica serves no sooner than its load time; the degraded link's requests
/// cannot beat its added latency.
#[test]
fn each_other_fault_produces_its_own_report() {
    let _serial = serial();
    let cold = run_fault(
        Fault {
            kind: FaultKind::ColdStart,
            replica: 3,
            load_seconds: Some(20.0),
            ..Fault::default()
        },
        18.0,
        30.0,
        60.0,
    );
    let r = &cold.report;
    assert_eq!(r.fault, FaultKind::ColdStart);
    assert_eq!(r.replica, "replica 3");
    let ready = r.signals.serving_again_s.expect("the new replica serves");
    assert!(ready - r.injected_at_s >= 20.0 - 0.5, "{r:#?}");
    assert_eq!(r.detected_at_s, Some(ready));
    assert!(r.capacity_returned);
    assert!(r.accounting.balanced(), "{:#?}", r.accounting);
    assert_eq!(r.accounting.lost, 0);

    let kv = run_fault(
        Fault {
            kind: FaultKind::KvCapacity,
            replica: 0,
            duration_seconds: Some(30.0),
            ..Fault::default()
        },
        20.0,
        30.0,
        60.0,
    );
    let r = &kv.report;
    assert_eq!(r.fault, FaultKind::KvCapacity);
    let lifted = r.lifted_at_s.expect("lifted");
    assert!(lifted - r.injected_at_s >= 30.0 - 0.5, "{r:#?}");
    assert!(r.accounting.balanced(), "{:#?}", r.accounting);
    assert_eq!(r.windows.len(), 3, "{:#?}", r.windows);

    let link = run_fault(
        Fault {
            kind: FaultKind::DegradedLink,
            replica: 0,
            added_latency_ms: Some(400),
            jitter_ms: Some(0),
            duration_seconds: Some(30.0),
            ..Fault::default()
        },
        20.0,
        30.0,
        60.0,
    );
    let r = &link.report;
    assert_eq!(r.fault, FaultKind::DegradedLink);
    // A quarter of the requests crossed the slow link: the incident's TTFT P95 cannot be
    // under the added 400 ms, while the baseline's is well under it.
    let p95 = |name: &str| {
        r.windows
            .iter()
            .find(|w| w.name == name)
            .and_then(|w| w.classes[0].p95_ttft_ms)
            .unwrap_or_else(|| panic!("{name} window: {:#?}", r.windows))
    };
    assert!(p95("during") >= 400.0, "{:#?}", r.windows);
    assert!(p95("before") < 400.0, "{:#?}", r.windows);
    let md = goodput::failure::report::render(&[
        cold.report.clone(),
        kv.report.clone(),
        link.report.clone(),
    ]);
    for section in [
        "## ColdStart on replica 3",
        "## KvCapacity on replica 0",
        "## DegradedLink on replica 0",
    ] {
        assert!(md.contains(section), "{md}");
    }
}

/// Clients walking away mid-stream: a quarter of the requests arriving in 30 s are
/// cancelled after 4 chunks. The engines count every one as aborted and free the slots
/// (fewer requests running while the client cancels), the rest keep their SLOs, and the
/// accounting balances with the aborted requests counted apart. An engine that keeps
/// generating for clients that have gone fails the same test.
#[test]
fn cancelled_requests_free_their_slots_and_a_leaking_engine_fails() {
    let _serial = serial();
    let fault = Fault {
        kind: FaultKind::RequestCancel,
        cancel_fraction: Some(0.25),
        cancel_after_chunks: Some(4),
        duration_seconds: Some(30.0),
        ..Fault::default()
    };
    let done = run_fault(fault.clone(), 20.0, 30.0, 60.0);
    let r = &done.report;
    assert_eq!(r.fault, FaultKind::RequestCancel);
    let c = r.cancellation.as_ref().expect("a cancellation block");
    // About a quarter of the ~600 requests arriving in the 30 s.
    assert!((100..=200).contains(&c.client_aborted), "{c:#?}");
    assert_eq!(c.after_chunks, 4);
    // The engines' own count: every cancellation reached them as an abort (none in the
    // warmup or elsewhere), so the count is within the race of a stream ending first.
    let engine = c.engine_aborted.expect("the simulated vLLM counts aborts");
    assert!(
        engine <= c.client_aborted as f64 && engine >= 0.95 * c.client_aborted as f64,
        "{c:#?}"
    );
    assert_eq!(c.slots_freed, Some(true), "{:#?}", r.reasons);
    // A cancelled request holds its slot for 4 of its 32 chunks: fewer requests run while
    // the client cancels.
    let (before, during) = (
        c.running_before.expect("before"),
        c.running_during.expect("during"),
    );
    assert!(during < 0.95 * before, "{c:#?}");
    let a = &r.accounting;
    assert_eq!(a.aborted, c.client_aborted);
    assert_eq!((a.lost, a.failed_honestly), (0, 0), "{a:#?}");
    assert!(a.balanced(), "{a:#?}");
    assert_eq!(r.first_error_s, None);
    assert!(
        r.detected_by.as_deref() == Some("the engines counted aborted requests"),
        "{r:#?}"
    );
    assert_eq!(r.verdict, FailureVerdict::Pass, "{:#?}", r.reasons);
    let md = goodput::failure::report::render(std::slice::from_ref(r));
    for needle in [
        "## RequestCancel on",
        "### Cancelled requests",
        "Slots freed: **yes**",
    ] {
        assert!(md.contains(needle), "{needle} in\n{md}");
    }

    let leaking = fleet_of(|setup| ReplicaConfig {
        abort_on_disconnect: false,
        ..ReplicaConfig::new(setup)
    });
    let done = run_fault_on(leaking, fault, 20.0, 30.0, 60.0);
    let r = &done.report;
    let c = r.cancellation.as_ref().expect("a cancellation block");
    assert!(c.client_aborted >= 100, "{c:#?}");
    assert_eq!(c.engine_aborted, Some(0.0), "{c:#?}");
    assert_eq!(c.slots_freed, Some(false));
    assert_eq!(r.verdict, FailureVerdict::Fail, "{:#?}", r.reasons);
    assert!(
        r.reasons
            .iter()
            .any(|l| l.contains("did not free the slots")),
        "{:#?}",
        r.reasons
    );
}
