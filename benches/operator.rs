//! `goodput operator` at rest and under spec changes, on the in-repo test cluster (an HTTPS
//! API server with pods as local processes, in this process), with the operator as its own
//! release-built process:
//!
//! 1. Steady memory: 100 CapacityBenchmarks in namespace `default`, each with a finished
//!    status of a real run's size (phase `Succeeded`, the four conditions, 8–12 finished
//!    points with reasons, capacity per cache mode, per replica, the replicas for the peak)
//!    written through `/status` before the operator starts, so it reads real-sized objects
//!    without running 100 sweeps. Once it has reconciled all of them and settled, the
//!    operator process's `VmRSS` must stay under 64 MiB (`VmHWM` is reported alongside).
//! 2. Spec-change latency: with the operator steady, the spec of one benchmark after the
//!    other (round robin) gets new offered rates, and the time from the API write returning
//!    to a watch event whose `status.observedGeneration` is the new generation must be under
//!    1 s at P99 (nearest rank).
//!
//! The targets are URLs (no simulated Deployment), half of them one shared URL (those
//! queue on the target lock: `WaitingForTarget`) and half distinct. A spec change starts
//! the run over: the controller launches the first point's Job, whose pods would run the
//! load generator; the cluster refuses to pull the loadgen image, so they stay Pending and
//! nothing sends load. Nothing is deleted by hand.
//!
//! A real run also leaves, per finished point, ConfigMaps the benchmark owns (the point file
//! with the merged report, one result per shard with the gzipped per-request records);
//! the operator's controller watches those too (`.owns()`: their metadata, to find the
//! owner). They are left out by default (the bars are on the benchmarks themselves);
//! `OPERATOR_BENCH_RESULT_KIB=K` adds them, each result holding K KiB of records, to see
//! what they cost.
//!
//! Knobs (environment): `OPERATOR_BENCH_CHANGES` (spec changes, default 100),
//! `OPERATOR_BENCH_RESULT_KIB` (owned ConfigMaps per point, default 0: none),
//! `OPERATOR_BENCH_KEEP` (keep the temporary directory with the operator's log).
//!
//! Run: `cargo bench --bench operator`. Linux only (reads `/proc`).

#[path = "support/figures.rs"]
mod figures;
#[path = "../tests/support/operator.rs"]
mod harness;
#[path = "support/process.rs"]
mod process;
#[path = "support/watch.rs"]
mod watch;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use goodput::api::conditions::{self, Status as Cond, reason};
use goodput::api::{
    CacheMode, CapacityBenchmark, CapacityBenchmarkStatus, FinishedPoint, ModeCapacity, Phase,
    PointKind, ResolvedIdentity,
};
use goodput::controller::build;
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource as _, ResourceExt as _};

use figures::{Figures, MIB, pct, reconcile_failures, rss_hwm, settle, sorted_secs};
use harness::{MANIFEST, Operator};
use process::{env_or, proc_rss};
use watch::watch;

/// Benchmarks in the cluster.
const BENCHMARKS: usize = 100;
/// The memory bar on the operator's steady `VmRSS`.
const RSS_BAR_MIB: f64 = 64.0;
/// The latency bar on P99 of spec change to status.
const LATENCY_BAR: Duration = Duration::from_secs(1);
/// The image the operator hands its Jobs; the cluster is told it cannot pull it.
const IMAGE: &str = "goodput";
/// Pause between spec changes, so each meets the operator as a user's edit would (with
/// the previous change's Job, pods and requeues still going on), not a burst.
const GAP: Duration = Duration::from_millis(200);
/// A spec change not in status after this long counts as missed.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);

fn name(i: usize) -> String {
    format!("cb-{i:03}")
}

/// Even benchmarks share one URL (one target lock), odd ones have their own; all loopback,
/// and nothing ever connects: the load generator's pods never start.
fn url(i: usize) -> String {
    if i.is_multiple_of(2) {
        "http://127.0.0.1:9/".into()
    } else {
        format!("http://127.0.0.1:{}/", 10_000 + i)
    }
}

/// Offered rates of benchmark `i`: 4 to 6 of them, so with two cache modes 8 to 12 points.
fn rates(i: usize) -> Vec<f64> {
    let n = 4 + i % 3;
    (0..n).map(|k| 4.0 + 2.0 * k as f64).collect()
}

fn yaml(i: usize) -> String {
    let rates: Vec<String> = rates(i).iter().map(|r| format!("{r:.1}")).collect();
    format!(
        r#"apiVersion: goodput.dev/v1alpha1
kind: CapacityBenchmark
metadata: {{name: {name}, namespace: default}}
spec:
  target: {{url: "{url}", model: Qwen/Qwen2.5-7B-Instruct, replicas: 1}}
  workload:
    manifest:{MANIFEST}
  experiments:
    cacheModes: [cold, warm]
    rateSweep: {{rates: [{rates}]}}
  peak: {{rps: 30}}
"#,
        name = name(i),
        url = url(i),
        rates = rates.join(", "),
    )
}

/// A finished status of the size a real run leaves: every point of both cache modes with
/// the gate's reasons on the failing ones, capacity per mode, the plan, and the conditions
/// the controller writes, worded as it words them (so its first reconcile finds nothing to
/// write).
fn finished_status(i: usize, cb: &CapacityBenchmark) -> CapacityBenchmarkStatus {
    let generation = cb.metadata.generation.unwrap_or(1);
    let name = cb.name_any();
    let rates = rates(i);
    // Whole seconds: what the API round-trips.
    let at = |s: i64| {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_760_000_000 + s).unwrap_or_default())
    };
    let mut points = Vec::new();
    let mut capacity = BTreeMap::new();
    for (m, (cache, knee)) in [(CacheMode::Cold, 8.0), (CacheMode::Warm, 10.0)]
        .into_iter()
        .enumerate()
    {
        for (k, &rate) in rates.iter().enumerate() {
            let index = m * rates.len() + k;
            let pass = rate <= knee;
            let over = (rate - knee).max(0.0);
            let attainment = if pass {
                0.991 - 0.004 * k as f64
            } else {
                0.93 - 0.05 * over
            };
            let passing = (attainment * 300.0).round() as u64;
            let reasons = if pass {
                Vec::new()
            } else {
                vec![
                    format!(
                        "class long: attainment {:.1}% ({passing} of 300) below 95.0%",
                        attainment * 100.0
                    ),
                    format!(
                        "class chat: attainment {:.1}% ({} of 300) below 95.0%",
                        (attainment + 0.01) * 100.0,
                        passing + 3
                    ),
                    "queue trend growing (required flat)".to_owned(),
                ]
            };
            if pass {
                capacity.insert(m, rate);
            }
            points.push(FinishedPoint {
                cache,
                kind: PointKind::Rate,
                concurrency: None,
                offered_rps: Some(rate),
                repeat: 0,
                achieved_rps: rate * if pass { 0.998 } else { 0.93 },
                error_rate: Some(if pass { 0.0 } else { 0.0033 * over }),
                weakest_class: Some("long".into()),
                weakest_attainment: Some(attainment),
                weakest_successes: Some(300),
                queue_trend: Some(if pass { "flat" } else { "growing" }.into()),
                slos_met: pass,
                valid: true,
                client_behind: false,
                verdict: if pass {
                    FinishedPoint::PASS
                } else {
                    FinishedPoint::FAIL
                }
                .into(),
                reasons,
                result_config_map: Some(format!("{name}-g{generation}-p{index}-point")),
                classes: Vec::new(),
                busy_seconds: None,
                requests_sent: None,
                unsent_seconds: None,
                engine_rps: None,
            });
        }
    }
    let modes: Vec<ModeCapacity> = [CacheMode::Cold, CacheMode::Warm]
        .into_iter()
        .enumerate()
        .map(|(m, cache)| ModeCapacity {
            cache,
            capacity_rps: capacity.get(&m).copied(),
            capacity_per_replica_rps: capacity.get(&m).copied(),
            bracket: None,
            refinements: Vec::new(),
            placement: None,
            client_limit_rps: None,
            loadgen_starved: false,
        })
        .collect();
    let capacity_rps = modes[0].capacity_rps;
    // ceil(30 / (capacity × 0.75)).
    let required = capacity_rps.map(|c| (30.0 / (c * 0.75)).ceil() as u32);
    let target = cb.spec.target.printable();
    let condition = |type_, status, reason, message: String, s| {
        conditions::new(type_, status, reason, message, Some(generation), at(s))
    };
    let conditions = vec![
        condition(
            conditions::SPEC_VALID,
            Cond::True,
            reason::VALID,
            "the spec and its workload manifest are valid".into(),
            0,
        ),
        condition(
            conditions::TARGET_REACHABLE,
            Cond::True,
            reason::REACHABLE,
            format!("{} (1 replica(s) under test)", target.trim_end_matches('/')),
            1,
        ),
        condition(
            conditions::PROGRESSING,
            Cond::False,
            reason::SUCCEEDED,
            format!("all {} points finished", points.len()),
            3600,
        ),
        condition(
            conditions::READY,
            Cond::True,
            reason::SUCCEEDED,
            format!(
                "capacity {} RPS ({:.3} per replica); {} replica(s) for the peak",
                capacity_rps.unwrap_or_default(),
                capacity_rps.unwrap_or_default(),
                required.unwrap_or_default()
            ),
            3600,
        ),
    ];
    CapacityBenchmarkStatus {
        phase: Some(Phase::Succeeded),
        observed_generation: Some(generation),
        conditions,
        target: Some(target),
        current_point: None,
        points,
        modes,
        cost: None,
        early_stop_saved_gpu_minutes: None,
        placement_saved_gpu_minutes: None,
        capacity_rps,
        capacity_per_replica_rps: capacity_rps,
        required_replicas: required,
        resolved: Some(ResolvedIdentity {
            engine: "unknown".into(),
            engine_version: None,
            model: "Qwen/Qwen2.5-7B-Instruct".into(),
        }),
        pack: None,
        failure_test: None,
    }
}

/// The ConfigMaps a finished point leaves, as the operator names and labels them: the
/// point file (with the merged report added) and one shard's result, whose records are
/// `result_kib` KiB of gzip (incompressible bytes stand in for them).
fn point_config_maps(cb: &CapacityBenchmark, result_kib: usize) -> Vec<ConfigMap> {
    let Some(reference) = cb.controller_owner_ref(&()) else {
        return Vec::new();
    };
    let owner = build::Owner {
        name: cb.name_any(),
        namespace: cb.namespace().unwrap_or_default(),
        reference,
    };
    let generation = cb.metadata.generation.unwrap_or(1);
    let spec = serde_json::to_string(&cb.spec).unwrap_or_default();
    let points = cb.status.as_ref().map_or(0, |s| s.points.len());
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ generation as u64;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                // xorshift64*: bytes gzip cannot shrink, like gzip's own output.
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect()
    };
    let mut maps = Vec::new();
    for index in 0..points {
        let job = owner.job_name(generation, index, 0);
        let mut point = build::point_config_map(&owner, &job, spec.clone());
        if let Some(data) = point.data.as_mut() {
            data.insert("slo-report.json".into(), "x".repeat(6 * 1024));
        }
        let mut result = build::result_config_map(&owner, &job, 0);
        result.binary_data = Some(BTreeMap::from([
            (
                "requests.csv.gz".to_owned(),
                ByteString(noise(result_kib * 1024)),
            ),
            ("summary.json.gz".to_owned(), ByteString(noise(2 * 1024))),
        ]));
        maps.extend([point, result]);
    }
    maps
}

/// What the bench's watch saw: the benchmark, the generation its status describes, when.
struct Seen {
    name: String,
    observed: Option<i64>,
    at: Instant,
}

/// Polls `/metrics` until `done` holds for the reconcile count, or `timeout`.
async fn wait_reconciles(
    operator: &Operator,
    timeout: Duration,
    mut done: impl FnMut(u64) -> bool,
) -> Option<u64> {
    let deadline = Instant::now() + timeout;
    loop {
        let n = operator.reconciles().await;
        if n.is_some_and(&mut done) {
            return n;
        }
        if Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let changes: usize = env_or("OPERATOR_BENCH_CHANGES", 100);
    let result_kib: usize = env_or("OPERATOR_BENCH_RESULT_KIB", 0);
    let t0 = Instant::now();
    let mut figures = Figures::default();

    let s = harness::setup().await;
    // Every Job's pods stay Pending (ErrImagePull): a spec change launches no load generator.
    s.cluster.kubelet().set_image_pullable(IMAGE, false);
    let api: Api<CapacityBenchmark> = Api::namespaced(s.client.clone(), "default");

    // 1. 100 finished benchmarks, in place before the operator starts.
    let mut status_bytes = 0usize;
    let maps: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let (mut owned_maps, mut owned_bytes) = (0usize, 0usize);
    for i in 0..BENCHMARKS {
        let mut cb = harness::create(&s.client, &yaml(i)).await;
        let status = finished_status(i, &cb);
        status_bytes += serde_json::to_vec(&status).map_or(0, |v| v.len());
        cb.status = Some(status);
        api.replace_status(&name(i), &PostParams::default(), &cb)
            .await
            .expect("the finished status is written");
        if result_kib > 0 {
            for map in point_config_maps(&cb, result_kib) {
                owned_maps += 1;
                owned_bytes += serde_json::to_vec(&map).map_or(0, |v| v.len());
                maps.create(&PostParams::default(), &map)
                    .await
                    .expect("a point's ConfigMap is created");
            }
        }
    }
    let stored = api
        .list(&ListParams::default())
        .await
        .expect("the benchmarks list")
        .items;
    let object_bytes: usize = stored
        .iter()
        .map(|cb| serde_json::to_vec(cb).map_or(0, |v| v.len()))
        .sum();
    let before: BTreeMap<String, String> = stored
        .iter()
        .map(|cb| (cb.name_any(), cb.resource_version().unwrap_or_default()))
        .collect();
    eprintln!(
        "operator bench: {BENCHMARKS} finished benchmarks written ({:.0} s)",
        t0.elapsed().as_secs_f64()
    );

    let log = s.dir.path().join("operator.log");
    let operator = Operator::start(&s.kubeconfig, IMAGE, &log);
    let pid = operator.pid();
    let started = Instant::now();
    let reconciled = wait_reconciles(&operator, Duration::from_secs(60), |n| {
        n >= BENCHMARKS as u64
    })
    .await
    .unwrap_or(0);
    let all_in = started.elapsed();
    assert!(
        reconciled >= BENCHMARKS as u64,
        "the operator reconciled {reconciled} of {BENCHMARKS} in 60 s; its log: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // Settled: no reconcile for 2 s, then 8 s more at rest before reading its memory.
    settle(
        || operator.reconciles(),
        Duration::from_secs(2),
        started + Duration::from_secs(60),
    )
    .await;
    let mut samples = Vec::new();
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        samples.push(proc_rss(pid).0);
    }
    let (rss, hwm) = proc_rss(pid);
    let steady_reconciles = operator.reconciles().await.unwrap_or(0);
    let after: BTreeMap<String, String> = api
        .list(&ListParams::default())
        .await
        .expect("the benchmarks list")
        .items
        .iter()
        .map(|cb| (cb.name_any(), cb.resource_version().unwrap_or_default()))
        .collect();
    let rewritten = before
        .iter()
        .filter(|(n, rv)| after.get(*n) != Some(*rv))
        .count();
    let spread = samples.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        - samples.iter().copied().fold(f64::INFINITY, f64::min);
    figures.add(
        "benchmarks (status JSON / whole objects)",
        format!(
            "{BENCHMARKS} ({:.1} / {:.1} KiB each)",
            status_bytes as f64 / BENCHMARKS as f64 / 1024.0,
            object_bytes as f64 / BENCHMARKS as f64 / 1024.0
        ),
    );
    if result_kib > 0 {
        figures.add(
            "owned point ConfigMaps (JSON)",
            format!("{owned_maps} ({:.1} MiB)", owned_bytes as f64 / MIB),
        );
    }
    figures.add(
        "reconciles to steady (all in after)",
        format!("{steady_reconciles} ({:.2} s)", all_in.as_secs_f64()),
    );
    figures.add(
        "statuses the operator rewrote at start",
        format!("{rewritten} of {BENCHMARKS}"),
    );
    let rss_met = rss / MIB < RSS_BAR_MIB;
    figures.bar(
        "steady VmRSS",
        format!("{:.1} MiB (±{:.1} over 8 s)", rss / MIB, spread / MIB / 2.0),
        "< 64 MiB",
        rss_met,
    );
    figures.add("VmHWM so far", format!("{:.1} MiB", hwm / MIB));

    // 2. Spec changes, timed by a watch on the benchmarks.
    let (watch, mut rx) = watch(
        api.clone(),
        "operator bench",
        |cb: CapacityBenchmark, at| Seen {
            name: cb.name_any(),
            observed: cb.status.as_ref().and_then(|s| s.observed_generation),
            at,
        },
    )
    .await;
    let mut latencies = Vec::new();
    let mut missed = Vec::new();
    let phase_started = Instant::now();
    for c in 0..changes {
        // Bounded: stop once the changes took 3 minutes, whatever is left.
        if phase_started.elapsed() > Duration::from_secs(180) {
            eprintln!("operator bench: stopped after {c} changes (3 min)");
            break;
        }
        let i = c % BENCHMARKS;
        let target = name(i);
        // A fresh rate list per round: every change is a new generation.
        let round = (c / BENCHMARKS + 1) as f64;
        let mut new_rates = rates(i);
        if let Some(last) = new_rates.last_mut() {
            *last += round;
        }
        while rx.try_recv().is_ok() {}
        let patch =
            serde_json::json!({"spec": {"experiments": {"rateSweep": {"rates": new_rates}}}});
        let written = api
            .patch(&target, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("the spec change is accepted");
        let returned = Instant::now();
        let generation = written.metadata.generation.unwrap_or(0);
        let deadline = tokio::time::Instant::from_std(returned + CHANGE_TIMEOUT);
        let seen = loop {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(Seen { name, observed, at }))
                    if name == target && observed.is_some_and(|o| o >= generation) =>
                {
                    break Some(at.saturating_duration_since(returned));
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break None,
            }
        };
        match seen {
            Some(d) => latencies.push((i, d)),
            None => missed.push(format!("{target} generation {generation}")),
        }
        tokio::time::sleep(GAP).await;
    }
    watch.abort();
    let spent = phase_started.elapsed();

    let sorted_of = |keep: &dyn Fn(usize) -> bool| {
        sorted_secs(latencies.iter().filter(|(i, _)| keep(*i)).map(|(_, d)| *d))
    };
    let sorted = sorted_of(&|_| true);
    // By path: an own URL starts the first point's Job; a shared one waits for its holder.
    let by_path = |shared: bool| {
        let v = sorted_of(&|i| i.is_multiple_of(2) == shared);
        format!("{} / {} (n {})", pct(&v, 0.5), pct(&v, 0.99), v.len())
    };
    figures.add(
        "spec changes timed (missed)",
        format!(
            "{} ({}) in {:.0} s",
            latencies.len(),
            missed.len(),
            spent.as_secs_f64()
        ),
    );
    figures.latencies("change→status", &sorted, LATENCY_BAR, missed.len());
    figures.add("P50 / P99, own URL (starts a Job)", by_path(false));
    figures.add("P50 / P99, shared URL (waits)", by_path(true));

    // What the changes left running: Jobs whose pods never start, and the memory after.
    let jobs = Api::<Job>::namespaced(s.client.clone(), "default")
        .list(&ListParams::default())
        .await
        .map_or(0, |l| l.items.len());
    let pending = Api::<Pod>::namespaced(s.client.clone(), "default")
        .list(&ListParams::default())
        .await
        .map_or(0, |l| {
            l.items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"))
                .count()
        });
    let statuses = api
        .list(&ListParams::default())
        .await
        .expect("the benchmarks list")
        .items;
    let waiting = statuses
        .iter()
        .filter(|cb| {
            cb.status.as_ref().is_some_and(|st| {
                conditions::find(&st.conditions, conditions::PROGRESSING)
                    .is_some_and(|c| c.reason == reason::WAITING_FOR_TARGET)
            })
        })
        .count();
    let running = statuses
        .iter()
        .filter(|cb| harness::phase(cb) == Some(Phase::Running))
        .count();
    figures.add("after: Jobs / Pending pods", format!("{jobs} / {pending}"));
    figures.add(
        "after: Running / WaitingForTarget",
        format!("{running} / {waiting}"),
    );
    figures.add("after: VmRSS / VmHWM", rss_hwm(proc_rss(pid)));
    figures.add(
        "reconciles in all",
        operator
            .reconciles()
            .await
            .map_or("-".into(), |n| n.to_string()),
    );
    // Failed reconciles by category (a status write that lost to a newer object is a
    // `status` failure), and the Events the changes published.
    let metrics = operator.metrics_text().await.unwrap_or_default();
    figures.add("reconcile failures", reconcile_failures(&metrics));
    let events =
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(s.client.clone(), "default")
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
    let published = |reason: &str| -> i32 {
        events
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum()
    };
    figures.add(
        "Events SpecChanged / PointStarted",
        format!(
            "{} / {} (for {} changes, {jobs} Jobs)",
            published(reason::SPEC_CHANGED),
            published("PointStarted"),
            latencies.len() + missed.len()
        ),
    );

    println!(
        "operator bench: goodput operator (release) on the test cluster, {BENCHMARKS} \
         CapacityBenchmarks ({:.0} s)",
        t0.elapsed().as_secs_f64()
    );
    figures.print();
    for m in &missed {
        println!("  missed: {m} never reached status within {CHANGE_TIMEOUT:?}");
    }
    if std::env::var_os("OPERATOR_BENCH_KEEP").is_some() {
        eprintln!("operator bench: files kept in {}", s.dir.path().display());
        std::mem::forget(s.dir);
    }
    drop(operator);
    drop(s.cluster);
    figures.conclude();
}
