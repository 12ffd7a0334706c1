//! How fast `ServingPlan`s react to a changed benchmark capacity, on the in-repo test
//! cluster (an HTTPS API server with pods as local processes, in this process), with
//! `goodput operator` as its own release-built process.
//!
//! The cluster holds the world of `tests/measured/serving_plan.rs` (`tests/support/serving_plan.rs`):
//! a Deployment `qwen` that declares what the evidence was measured on (its pods run an
//! image the cluster cannot pull, so they stay Pending: a plan reads only the Deployment
//! and its `/scale`), one finished CapacityBenchmark `qwen-capacity` written through
//! `/status` as the operator writes a finished run (24 RPS on 4 replicas, 6 per replica,
//! Ready), and `N` ServingPlans that all take their capacity from it (Propose mode, static
//! peak 36 RPS, revalidation off, `scaleDown.cooldown: 0s` so a lower proposal shows at
//! once). One benchmark for all plans, not one each: plans of one model share its measured
//! capacity (a plan per region, per class), and one benchmark event fanned out to every
//! plan that references it is both the controller's mapping under test and its heaviest
//! case (`N` reconciles at once).
//!
//! The operator starts once everything is in place, with `--plan-resync-s 30`, so the
//! periodic resync cannot explain a reaction within a second. When every plan proposes
//! `ceil(36 / (6 × 0.75)) = 8` replicas, the benchmark's status capacity alternates
//! between 30 RPS (7.5 per replica: `ceil(36 / (7.5 × 0.75)) = 7` replicas) and 24 RPS
//! (back to 8), and a watch on the plans times, per plan, the API write returning to the
//! first plan event that shows the new `status.capacityPerReplicaRps` and the first that
//! also shows the new `status.proposedReplicas`. The bar: P99 (nearest rank, over every
//! plan of every change) of change → proposal under 1 s, none missed. Also printed: the
//! slowest plan of each change, each direction apart (8 → 7 and 7 → 8), how many plan
//! events each change caused, how often the new capacity first showed with the old
//! proposal, the reconciles, and the operator's `VmRSS` (no bar), settled before the
//! changes and after them.
//!
//! Knobs (environment): `PLAN_BENCH_PLANS` (plans, default 20), `PLAN_BENCH_CHANGES`
//! (capacity changes, default 50), `PLAN_BENCH_KEEP` (keep the temporary directory with
//! the operator's log).
//!
//! Run: `cargo bench --bench serving_plan`. Linux only (reads `/proc`).

#[path = "support/figures.rs"]
mod figures;
#[path = "../tests/support/serving_plan.rs"]
mod fixture;
#[path = "../tests/support/operator.rs"]
mod harness;
#[path = "support/process.rs"]
mod process;
#[path = "support/watch.rs"]
mod watch;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use goodput::api::ServingPlan;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt as _};

use figures::{Figures, MIB, pct, reconcile_failures, rss_hwm, settle, sorted_secs};
use fixture::{BENCHMARK, CAPACITY, IDENTITY, NS, PEAK, REPLICAS, result};
use process::{env_or, proc_rss};
use watch::watch;

/// The plans' target utilization (the default; their static peak is [`PEAK`]).
const UTILIZATION: f64 = 0.75;
/// The benchmark's capacity (RPS on 4 replicas): first the evidence, then alternating.
const CAPACITIES: [f64; 2] = [CAPACITY, 30.0];
/// The operator's periodic plan resync: far above the bar.
const RESYNC_S: &str = "30";
/// The latency bar on P99 of capacity change to proposal.
const LATENCY_BAR: Duration = Duration::from_secs(1);
/// Pause after every plan shows a change (trailing events are counted, then the next
/// change is made).
const GAP: Duration = Duration::from_millis(300);
/// A plan not showing a change after this long counts as missed.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// What every plan's spec adds to [`fixture::plan_yaml`]: a lower proposal shows at once,
/// and no revalidation measures the unstarted engines.
const PLAN_SPEC: &str = "  scaleDown: {cooldown: 0s}\n  revalidation: {enabled: false}\n";

fn plan_name(i: usize) -> String {
    format!("qwen-plan-{i:03}")
}

fn per_replica(capacity: f64) -> f64 {
    capacity / f64::from(REPLICAS)
}

/// The plan's formula, `ceil(peak / (capacity per replica × utilization))`.
fn proposal(capacity: f64) -> u32 {
    (PEAK / (per_replica(capacity) * UTILIZATION)).ceil() as u32
}

/// A plan as the bench's watch saw it, and when.
struct Seen {
    name: String,
    capacity_per_replica: Option<f64>,
    proposed: Option<u32>,
    at: Instant,
}

/// What one change did to one plan.
#[derive(Default, Clone, Copy)]
struct Reaction {
    capacity: Option<Duration>,
    proposal: Option<Duration>,
    /// Plan events (status writes) from the change to the next one.
    events: u32,
    /// An event showed the new capacity with the old proposal (held for a reconcile).
    held: bool,
}

/// `P50 / P95 / P99 / max (n)` of a sorted list.
fn summary(sorted: &[f64]) -> String {
    format!(
        "{} / {} / {} / {} (n {})",
        pct(sorted, 0.50),
        pct(sorted, 0.95),
        pct(sorted, 0.99),
        pct(sorted, 1.0),
        sorted.len()
    )
}

fn same(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9)
}

/// Polls the plans until every one proposes `replicas` at `capacity_per_replica`, or
/// `timeout`; returns how many do.
async fn all_propose(
    api: &Api<ServingPlan>,
    plans: usize,
    capacity_per_replica: f64,
    replicas: u32,
    timeout: Duration,
) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        let done = api
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|p| {
                        p.status.as_ref().is_some_and(|s| {
                            s.proposed_replicas == Some(replicas)
                                && same(s.capacity_per_replica_rps, capacity_per_replica)
                        })
                    })
                    .count()
            })
            .unwrap_or(0);
        if done == plans || Instant::now() > deadline {
            return done;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let plans: usize = env_or("PLAN_BENCH_PLANS", 20).max(1);
    let changes: usize = env_or("PLAN_BENCH_CHANGES", 50);
    let t0 = Instant::now();
    let mut figures = Figures::default();

    let s = harness::setup().await;
    let c = &s.client;
    Api::<Deployment>::namespaced(c.clone(), NS)
        .create(
            &PostParams::default(),
            &fixture::unstarted_engines("qwen", REPLICAS, &IDENTITY),
        )
        .await
        .expect("the Deployment is created");
    let benchmarks = fixture::evidence(c).await;
    let api: Api<ServingPlan> = Api::namespaced(c.clone(), NS);
    for i in 0..plans {
        let yaml = fixture::plan_yaml(&plan_name(i), "Propose", PLAN_SPEC);
        let plan: ServingPlan = serde_saphyr::from_str(&yaml).expect("plan YAML");
        api.create(&PostParams::default(), &plan)
            .await
            .expect("the plan is accepted");
    }
    eprintln!(
        "serving_plan bench: Deployment, benchmark and {plans} plans written ({:.0} s)",
        t0.elapsed().as_secs_f64()
    );

    // The operator, once everything is in place; every plan proposes 8.
    let operator = s.operator("goodput", &["--plan-resync-s", RESYNC_S]);
    let pid = operator.pid();
    let started = Instant::now();
    let first = proposal(CAPACITIES[0]);
    let proposing = all_propose(
        &api,
        plans,
        per_replica(CAPACITIES[0]),
        first,
        Duration::from_secs(120),
    )
    .await;
    let log = s.dir.path().join("operator.log");
    assert!(
        proposing == plans,
        "{proposing} of {plans} plans proposed {first} within 120 s; the operator's log: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let all_in = started.elapsed();
    settle(
        || operator.reconciles(),
        Duration::from_secs(2),
        Instant::now() + Duration::from_secs(30),
    )
    .await;
    let (rss_steady, _) = proc_rss(pid);
    let reconciles_steady = operator.reconciles().await.unwrap_or(0);
    figures.add("plans (all on one benchmark)", plans.to_string());
    figures.add(
        "operator start → all propose 8",
        format!("{:.2} s", all_in.as_secs_f64()),
    );
    figures.add("reconciles to steady", reconciles_steady.to_string());
    figures.add("steady VmRSS", format!("{:.1} MiB", rss_steady / MIB));

    // The watch that times the reactions.
    let (watch, mut rx) = watch(
        api.clone(),
        "serving_plan bench",
        |plan: ServingPlan, at| {
            let status = plan.status.as_ref();
            Seen {
                name: plan.name_any(),
                capacity_per_replica: status.and_then(|s| s.capacity_per_replica_rps),
                proposed: status.and_then(|s| s.proposed_replicas),
                at,
            }
        },
    )
    .await;

    // The changes: 30 RPS (7 replicas), 24 RPS (8 replicas), ...
    let names: Vec<String> = (0..plans).map(plan_name).collect();
    // Per change: its capacity, and each plan's reaction.
    let mut reactions: Vec<(f64, BTreeMap<String, Reaction>)> = Vec::new();
    let mut missed: Vec<String> = Vec::new();
    let phase_started = Instant::now();
    for k in 0..changes {
        // Bounded: stop once the changes took 5 minutes, whatever is left.
        if phase_started.elapsed() > Duration::from_secs(300) {
            eprintln!("serving_plan bench: stopped after {k} changes (5 min)");
            break;
        }
        let capacity = CAPACITIES[(k + 1) % 2];
        let (cpr, replicas) = (per_replica(capacity), proposal(capacity));
        while rx.try_recv().is_ok() {}
        let mut seen: BTreeMap<String, Reaction> = names
            .iter()
            .map(|n| (n.clone(), Reaction::default()))
            .collect();
        benchmarks
            .patch_status(
                BENCHMARK,
                &PatchParams::default(),
                &Patch::Merge(&result(capacity, None)),
            )
            .await
            .expect("the new capacity is written");
        let returned = Instant::now();
        let deadline = tokio::time::Instant::from_std(returned + CHANGE_TIMEOUT);
        let mut proposed = 0;
        let note = |p: Seen, seen: &mut BTreeMap<String, Reaction>| -> bool {
            let Some(r) = seen.get_mut(&p.name) else {
                return false;
            };
            r.events += 1;
            let after = p.at.saturating_duration_since(returned);
            if r.capacity.is_none() && same(p.capacity_per_replica, cpr) {
                r.capacity = Some(after);
            }
            if r.proposal.is_none()
                && same(p.capacity_per_replica, cpr)
                && p.proposed != Some(replicas)
            {
                r.held = true;
            }
            if r.proposal.is_none()
                && same(p.capacity_per_replica, cpr)
                && p.proposed == Some(replicas)
            {
                r.proposal = Some(after);
                return true;
            }
            false
        };
        while proposed < plans {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(p)) => {
                    if note(p, &mut seen) {
                        proposed += 1;
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
        // What trails the change (a second write, writes with nothing new) counts too.
        tokio::time::sleep(GAP).await;
        while let Ok(p) = rx.try_recv() {
            note(p, &mut seen);
        }
        for (name, r) in &seen {
            if r.proposal.is_none() {
                missed.push(format!("change {k} ({capacity} RPS → {replicas}): {name}"));
            }
        }
        reactions.push((capacity, seen));
    }
    watch.abort();
    let spent = phase_started.elapsed();

    let every = || {
        reactions
            .iter()
            .flat_map(|(cap, m)| m.values().map(|r| (*cap, *r)))
    };
    let to_capacity = sorted_secs(every().filter_map(|(_, r)| r.capacity));
    let to_proposal = sorted_secs(every().filter_map(|(_, r)| r.proposal));
    // The last plan of each change to propose (only changes every plan made).
    let all_plans = sorted_secs(reactions.iter().filter_map(|(_, m)| {
        m.values()
            .map(|r| r.proposal)
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .max()
    }));
    // By direction: more capacity proposes fewer replicas, less proposes more.
    let direction = |capacity: f64| {
        sorted_secs(
            every()
                .filter(|(cap, _)| *cap == capacity)
                .filter_map(|(_, r)| r.proposal),
        )
    };
    let (fewer, more) = (direction(CAPACITIES[1]), direction(CAPACITIES[0]));
    let events: Vec<u32> = every().map(|(_, r)| r.events).collect();
    let mean_events =
        events.iter().map(|&e| f64::from(e)).sum::<f64>() / events.len().max(1) as f64;
    let held = |capacity: f64| {
        every()
            .filter(|(cap, r)| *cap == capacity && r.held)
            .count()
    };
    let mut histogram: BTreeMap<u32, usize> = BTreeMap::new();
    for e in &events {
        *histogram.entry(*e).or_default() += 1;
    }
    figures.add(
        "capacity changes (plan reactions missed)",
        format!(
            "{} × {plans} plans ({}) in {:.0} s",
            reactions.len(),
            missed.len(),
            spent.as_secs_f64()
        ),
    );
    figures.add("change→capacity P50/P95/P99/max", summary(&to_capacity));
    figures.latencies("change→proposal", &to_proposal, LATENCY_BAR, missed.len());
    figures.add(
        "change→all plans proposed (per change)",
        summary(&all_plans),
    );
    figures.add("proposal 8→7 (capacity up)", summary(&fewer));
    figures.add("proposal 7→8 (capacity down)", summary(&more));
    figures.add(
        "plan events per plan per change",
        format!(
            "{mean_events:.2} mean ({})",
            histogram
                .iter()
                .map(|(e, n)| format!("{e}: {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    figures.add(
        "new capacity shown with the old proposal",
        format!(
            "8→7: {} of {}, 7→8: {} of {}",
            held(CAPACITIES[1]),
            fewer.len(),
            held(CAPACITIES[0]),
            more.len()
        ),
    );
    figures.add("after: VmRSS / VmHWM", rss_hwm(proc_rss(pid)));
    let reconciles = operator.reconciles().await.unwrap_or(0);
    figures.add(
        "reconciles during the changes",
        format!(
            "{} ({:.2} per plan per change)",
            reconciles.saturating_sub(reconciles_steady),
            reconciles.saturating_sub(reconciles_steady) as f64
                / (reactions.len() * plans).max(1) as f64
        ),
    );
    let metrics = operator.metrics_text().await.unwrap_or_default();
    figures.add("reconcile failures", reconcile_failures(&metrics));

    println!(
        "serving_plan bench: goodput operator (release) on the test cluster, {plans} \
         ServingPlans on one CapacityBenchmark, --plan-resync-s {RESYNC_S} ({:.0} s)",
        t0.elapsed().as_secs_f64()
    );
    figures.print();
    for m in missed.iter().take(20) {
        println!("  missed: {m} within {CHANGE_TIMEOUT:?}");
    }
    if missed.len() > 20 {
        println!("  missed: {} more", missed.len() - 20);
    }
    if std::env::var_os("PLAN_BENCH_KEEP").is_some() {
        eprintln!(
            "serving_plan bench: files kept in {}",
            s.dir.path().display()
        );
        std::mem::forget(s.dir);
    }
    drop(operator);
    drop(s.cluster);
    figures.conclude();
}
