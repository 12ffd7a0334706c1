//! Failure tests: what happened when one fault hit a deployment running at a passing rate.
//!
//! [`analyze`] is pure: from the run's request records, the engine's waiting-queue series,
//! the signals watched during the run (readiness, metrics, routing) and the alerts that
//! fired, it derives the report — detection, router removal, errors, windows before, during
//! and after, queue peak and recovery, the request accounting and a verdict with reasons.
//! [`report`] writes `failure-test.md`; the local run against the simulated engine is
//! `goodput::failure::local`, the operator's in its controller.
//!
//! Times are model seconds since the run's time zero (the load generator's), like the
//! records'.

pub mod report;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::analysis::{
    GateConfig, PointReport, PointSummary, QueueTrend, error_rate, mean, queue_slope,
};
use crate::engine_metrics::profile::Concept;
use crate::engine_metrics::series::{Across, Coverage, MetricsSeries};
use crate::record::{CancelPlan, RequestRecord};

/// What a failure test injects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum FaultKind {
    /// The replica dies (locally: the simulated engine's kill; in a cluster: its pod is
    /// deleted). It must be detected and removed from routing, and its replacement must
    /// bring capacity back.
    #[default]
    KillReplica,
    /// A new replica joins cold (locally: a replica kept out of rotation starts at the
    /// injection with its load time; in a cluster: the target is scaled up by one).
    ColdStart,
    /// The replica's usable KV cache is cut to `kvFraction` (simulated engine only).
    KvCapacity,
    /// Latency and jitter added on the replica's link (simulated engine only).
    DegradedLink,
    /// Clients go away mid-stream: for `durationSeconds`, a `cancelFraction` of the
    /// requests are aborted by the load generator after `cancelAfterChunks` content
    /// chunks. The engine must free their slots (count them as aborted, running and KV
    /// back to the baseline) and the other requests keep their SLOs. `replica` is not
    /// used: the clients of every replica cancel.
    RequestCancel,
}

impl FaultKind {
    /// Every kind, in the order the CRD lists them.
    pub const ALL: [FaultKind; 5] = [
        FaultKind::KillReplica,
        FaultKind::ColdStart,
        FaultKind::KvCapacity,
        FaultKind::DegradedLink,
        FaultKind::RequestCancel,
    ];

    /// Whether the operator can inject it in a cluster (it deletes a pod of the target's
    /// Service, or has the load's clients cancel); the others need the simulated engine's
    /// admin API, so only `goodput bench` runs them. The one place the cluster's set is
    /// written: the lint asks here, and the operator validates with the lint before it
    /// injects anything.
    pub fn in_cluster(self) -> bool {
        match self {
            FaultKind::KillReplica | FaultKind::RequestCancel => true,
            FaultKind::ColdStart | FaultKind::KvCapacity | FaultKind::DegradedLink => false,
        }
    }

    /// The name in reports and folders.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::KillReplica => "KillReplica",
            FaultKind::ColdStart => "ColdStart",
            FaultKind::KvCapacity => "KvCapacity",
            FaultKind::DegradedLink => "DegradedLink",
            FaultKind::RequestCancel => "RequestCancel",
        }
    }

    /// The pack folder of this fault's test: `failure/kill-replica`.
    pub fn dir(self) -> &'static str {
        match self {
            FaultKind::KillReplica => "failure/kill-replica",
            FaultKind::ColdStart => "failure/cold-start",
            FaultKind::KvCapacity => "failure/kv-capacity",
            FaultKind::DegradedLink => "failure/degraded-link",
            FaultKind::RequestCancel => "failure/request-cancel",
        }
    }
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The first failed scrape of the victim at or after the injection.
pub fn metrics_gone(series: Option<&MetricsSeries>, victim: usize, injected_s: f64) -> Option<f64> {
    series?
        .samples
        .iter()
        .filter(|s| s.target == victim && !s.ok && s.t_s >= injected_s)
        .map(|s| s.t_s)
        .reduce(f64::min)
}

/// Smallest rise of the queue that counts as growth (requests), as in the point gate's
/// queue-trend rule.
pub const QUEUE_MIN_GROWTH: f64 = 5.0;

/// How recovery is decided (stated in every report).
pub const RECOVERY_RULE: &str = "recovered = the first moment after the queue's peak from \
    which a window of the recovery window's length is flat by the queue-trend rule, its mean \
    is within max(5 requests, half the baseline) of the baseline (the mean queue before \
    the fault), and the requests arriving in it meet every class's attainment minimum and \
    the error-rate bound; the incident (the `during` window) runs from the injection to that moment, \
    and at least until a timed fault is lifted and the lost capacity serves again";

/// How the requests are accounted for (stated in every report).
pub const ACCOUNTING_RULE: &str = "every scheduled request is a record: ok, aborted by the \
    client on purpose (a request-cancellation test; outside the windows' figures), or \
    failed with the status it failed with. Honest failures carry a signal from the system (an HTTP \
    error, an error frame, a reset or closed connection); `rejected` are HTTP 429 and 503 \
    (load shed or back-pressure); `lost` were sent and never answered with an error (the \
    client gave up: timeout, stall, or still open at the end of the run). The load \
    generator never retries: a retry would hide a loss";

/// What was watched during the run (model seconds since time zero; `None`: not seen).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Signals {
    /// First failed readiness / health probe of the replica after the injection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_failed_s: Option<f64>,
    /// First failed scrape of the replica's `/metrics` after the injection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_gone_s: Option<f64>,
    /// When the router (locally) or the EndpointSlice (in a cluster) stopped listing the
    /// replica as ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_removed_s: Option<f64>,
    /// Requests routed to the replica after its removal and before it served again, when
    /// the router counts its picks (a Service's proxy does not: in a cluster the removal is
    /// the EndpointSlice's, which every proxy routes by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed_after_removal: Option<u64>,
    /// When the replica (or its replacement, or the new replica) was ready and routed to
    /// again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_again_s: Option<f64>,
    /// Requests the router received during the run, when it counts them (the system's own
    /// count, checked against the client's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_received: Option<u64>,
    /// Requests the engines counted as finished over the run (their own counters, scraped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_finished: Option<f64>,
    /// Requests the engines counted as aborted over the run, when they count them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_aborted: Option<f64>,
    /// First scrape after the injection at which the engines' abort count had risen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_abort_seen_s: Option<f64>,
}

/// What a failure test reads from the engines' scraped series (model seconds since the
/// load's time zero).
#[derive(Clone, Debug, Default)]
pub struct EngineFacts {
    /// Waiting requests summed over the replicas that answered, per scrape.
    pub queue: Vec<(f64, f64)>,
    /// Running requests summed over the replicas that answered, per scrape.
    pub running: Vec<(f64, f64)>,
    /// KV usage averaged over the replicas that answered, per scrape.
    pub kv_usage: Vec<(f64, f64)>,
    /// Requests the engines counted as finished over the run.
    pub finished: Option<f64>,
    /// Requests the engines counted as aborted over the run.
    pub aborted: Option<f64>,
    /// First scrape after the injection at which the abort count had risen.
    pub abort_seen_s: Option<f64>,
}

impl EngineFacts {
    /// The facts of `series` for a fault injected at `injected_s`.
    pub fn of(series: Option<&MetricsSeries>, injected_s: f64) -> Self {
        let Some(s) = series else {
            return EngineFacts::default();
        };
        let answered = |c: Concept, across: Across| s.concept_series(c, across, Coverage::Answered);
        let aborts = answered(Concept::RequestAborted, Across::Sum);
        let at_injection = aborts
            .iter()
            .rev()
            .find(|(t, _)| *t <= injected_s)
            .map_or(0.0, |p| p.1);
        EngineFacts {
            queue: answered(Concept::QueueWaiting, Across::Sum),
            running: answered(Concept::Running, Across::Sum),
            kv_usage: answered(Concept::KvUsage, Across::Mean),
            finished: s.counter_delta(Concept::RequestSuccess),
            aborted: s.counter_delta(Concept::RequestAborted),
            abort_seen_s: aborts
                .iter()
                .find(|(t, v)| *t >= injected_s && *v > at_injection)
                .map(|p| p.0),
        }
    }
}

/// One alert episode during the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FiredAlert {
    /// Alert name.
    pub alert: String,
    /// Its labels, `k=v` joined by commas.
    pub labels: String,
    /// When its expression first held.
    pub pending_at_s: f64,
    /// When it fired (after its `for`); `None`: pending only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firing_at_s: Option<f64>,
    /// When it stopped holding; `None`: still active at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at_s: Option<f64>,
}

/// Everything [`analyze`] reads.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    /// The fault.
    pub kind: FaultKind,
    /// The replica it hit, as the report names it.
    pub replica: String,
    /// Offered rate (RPS).
    pub rate_rps: f64,
    /// Replicas before the fault.
    pub replicas: u32,
    /// When the fault was injected.
    pub injected_s: f64,
    /// When a timed fault was lifted.
    pub lifted_s: Option<f64>,
    /// End of the run (the last request's end).
    pub end_s: f64,
    /// Every measured request.
    pub records: &'a [RequestRecord],
    /// Requests the client sent before the measured window (the warmup): not analysed,
    /// but the router counted them.
    pub warmup_sent: u64,
    /// The waiting queue summed over the replicas that answered, per scrape.
    pub queue: &'a [(f64, f64)],
    /// Requests running, summed over the replicas that answered, per scrape.
    pub running: &'a [(f64, f64)],
    /// KV-cache usage (0–1), averaged over the replicas that answered, per scrape.
    pub kv_usage: &'a [(f64, f64)],
    /// A request-cancellation test's plan (model time): which requests the client
    /// cancelled.
    pub cancel: Option<CancelPlan>,
    /// What was watched.
    pub signals: Signals,
    /// Alert episodes of the shipped rules over the run.
    pub alerts: Vec<FiredAlert>,
    /// The gate (class names and cutoffs, attainment minimum, error-rate maximum).
    pub gate: &'a GateConfig,
    /// Length of the window a recovery must hold (s).
    pub recovery_window_s: f64,
}

/// One class in one window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WindowClass {
    /// Class name.
    pub class: String,
    /// Requests of the class that arrived in the window.
    pub attempted: u64,
    /// Of them, successful.
    pub successful: u64,
    /// Successful requests meeting both cutoffs over successful ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attainment: Option<f64>,
    /// Median TTFT (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_ttft_ms: Option<f64>,
    /// 95th-percentile TTFT (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95_ttft_ms: Option<f64>,
    /// Median TPOT (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_tpot_ms: Option<f64>,
    /// 95th-percentile TPOT (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95_tpot_ms: Option<f64>,
}

/// Requests that arrived in one window (by their scheduled time).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    /// `before`, `during` or `after`.
    pub name: String,
    /// Start (s).
    pub from_s: f64,
    /// End (s).
    pub to_s: f64,
    /// Requests that arrived in it (those the client aborted on purpose excepted).
    pub attempted: u64,
    /// Requests that arrived in it and that the client aborted on purpose.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub aborted: u64,
    /// Of the attempted, failed.
    pub failed: u64,
    /// `failed / attempted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_rate: Option<f64>,
    /// Successful requests meeting their class's cutoffs, per second.
    pub goodput_rps: f64,
    /// Per class.
    pub classes: Vec<WindowClass>,
}

/// The waiting queue through the incident.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueFacts {
    /// Mean before the fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
    /// Highest value after the injection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak: Option<f64>,
    /// When it peaked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_at_s: Option<f64>,
    /// Trend from the injection to the end, by the queue-trend rule.
    pub trend_after_injection: QueueTrend,
    /// Fitted growth from the injection to the end (requests).
    pub growth_after_injection: f64,
    /// When the queue was back at the baseline ([`RECOVERY_RULE`]); `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_at_s: Option<f64>,
    /// Recovery time from the injection (s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_s: Option<f64>,
    /// Length of the window a recovery must hold (s).
    pub recovery_window_s: f64,
}

/// Where every request went ([`ACCOUNTING_RULE`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Accounting {
    /// Requests sent in the measured window.
    pub attempted: u64,
    /// Requests sent in the warmup before it (outside the analysis, inside the router's
    /// count).
    #[serde(default)]
    pub warmup_sent: u64,
    /// Answered successfully.
    pub ok: u64,
    /// Aborted by the client on purpose (a request-cancellation test).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub aborted: u64,
    /// Failed with a signal from the system.
    pub failed_honestly: u64,
    /// HTTP 429 or 503 among the honest failures: load shed or back-pressure.
    pub rejected: u64,
    /// Sent and never answered with an error (timeout, stall, open at the end).
    pub lost: u64,
    /// Retried by the client (always 0: the load generator never retries).
    pub retried: u64,
    /// Failures by status.
    pub failed_by_status: BTreeMap<String, u64>,
    /// The router's own count of the requests it received, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_received: Option<u64>,
    /// The engines' own count of finished requests, when scraped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_finished: Option<f64>,
}

impl Accounting {
    /// Every request the client sent is ok, aborted on purpose, failed honestly or lost,
    /// and the router counted as many as the client sent, warmup included (when it
    /// counts).
    pub fn balanced(&self) -> bool {
        self.ok + self.aborted + self.failed_honestly + self.lost == self.attempted
            && self
                .router_received
                .is_none_or(|r| r == self.attempted + self.warmup_sent)
    }
}

/// The verdict of one failure test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum FailureVerdict {
    /// Detected, routed around, honest, and back to steady state.
    Pass,
    /// Honest, but a finding about the deployment: the remaining capacity could not hold
    /// the rate and nothing shed load, or a fault went unnoticed.
    Finding,
    /// Silent loss, work sent to a dead replica, or a kill never detected.
    Fail,
}

impl std::fmt::Display for FailureVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FailureVerdict::Pass => "pass",
            FailureVerdict::Finding => "finding",
            FailureVerdict::Fail => "fail",
        })
    }
}

/// One failure test's report: `failure-test.md` and the `failureTest` block of status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureReport {
    /// The fault.
    pub fault: FaultKind,
    /// The replica it hit.
    pub replica: String,
    /// Offered rate (RPS).
    pub rate_rps: f64,
    /// Replicas before the fault.
    pub replicas: u32,
    /// Injection time (s since the run's start).
    pub injected_at_s: f64,
    /// When a timed fault was lifted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifted_at_s: Option<f64>,
    /// End of the run.
    pub end_s: f64,
    /// First moment the system showed the fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detected_at_s: Option<f64>,
    /// Which signal showed it first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detected_by: Option<String>,
    /// The signals watched.
    pub signals: Signals,
    /// Whether the replica stopped getting new requests once removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_receiving_work: Option<bool>,
    /// First failed request's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error_s: Option<f64>,
    /// Last failed request's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_s: Option<f64>,
    /// Before, during and after the incident.
    pub windows: Vec<Window>,
    /// The waiting queue.
    pub queue: QueueFacts,
    /// Where every request went.
    pub accounting: Accounting,
    /// A request-cancellation test: what the engines did with the requests the client
    /// walked away from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancellation: Option<Cancellation>,
    /// Alerts of the shipped rules that fired or were pending.
    pub alerts: Vec<FiredAlert>,
    /// Whether capacity came back without manual repair.
    pub capacity_returned: bool,
    /// Pass, finding or fail.
    pub verdict: FailureVerdict,
    /// Why, one line per criterion.
    pub reasons: Vec<String>,
}

/// How a request-cancellation test decides whether the engines freed the slots (stated in
/// its report).
pub const SLOTS_RULE: &str = "freed = the engines counted at least 95% of the requests \
    the client cancelled as aborted (the rest may have finished before the abort reached \
    them), and after the cancellation the running requests and the KV usage are back \
    within max(2 requests, 20%) and max(0.05, 20%) of their means before it";

/// Share of the client's cancellations the engines must count as aborted.
pub const ABORTS_COUNTED_MIN: f64 = 0.95;

/// What the engines did with the requests the client cancelled (means over the scrapes of
/// each period; running summed over the replicas, KV usage averaged).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cancellation {
    /// Fraction of the requests arriving during the fault that the client cancelled.
    pub fraction: f64,
    /// Content chunks each received before the client went away.
    pub after_chunks: u32,
    /// Requests the client cancelled.
    pub client_aborted: u64,
    /// Requests the engines counted as aborted over the run, when they count them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_aborted: Option<f64>,
    /// Running requests before the fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_before: Option<f64>,
    /// Running requests while the client cancelled (a freed slot lowers it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_during: Option<f64>,
    /// Running requests after the cancellation ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_after: Option<f64>,
    /// KV usage before the fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_before: Option<f64>,
    /// KV usage while the client cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_during: Option<f64>,
    /// KV usage after the cancellation ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_after: Option<f64>,
    /// Whether the engines freed the slots ([`SLOTS_RULE`]); `None`: they count no aborts,
    /// so it cannot be told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots_freed: Option<bool>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Statuses that carry no signal from the system: the client gave up or stopped waiting.
fn is_silent(status: &str) -> bool {
    matches!(status, "timeout" | "stalled" | "cancelled")
}

/// The report of one failure test.
pub fn analyze(o: &Observed<'_>) -> FailureReport {
    let start_s = o
        .records
        .iter()
        .map(|r| r.scheduled_s)
        .fold(f64::INFINITY, f64::min);
    let start_s = if start_s.is_finite() { start_s } else { 0.0 };
    let queue = queue_facts(o, start_s);
    // The incident lasts until the queue is back, and at least while a timed fault is on
    // and until the lost capacity serves again.
    let incident_end = match queue.recovered_at_s {
        None => o.end_s,
        Some(t) => [o.lifted_s, o.signals.serving_again_s]
            .into_iter()
            .flatten()
            .fold(t, f64::max)
            .min(o.end_s),
    }
    .max(o.injected_s);
    // A partition of the requests: `before` finished before the fault touched anything,
    // `after` arrived once the incident was over (served by the recovered system), and
    // `during` is every request the incident touched (in flight at the fault or arriving
    // during it).
    let inj = o.injected_s;
    let windows: Vec<Window> = [
        (
            "before",
            start_s,
            inj,
            &(|r: &RequestRecord| r.ended_s < inj) as &dyn Fn(&_) -> bool,
        ),
        ("during", inj, incident_end, &|r: &RequestRecord| {
            r.ended_s >= inj && r.scheduled_s < incident_end
        }),
        ("after", incident_end, o.end_s, &|r: &RequestRecord| {
            r.scheduled_s >= incident_end
        }),
    ]
    .into_iter()
    .filter_map(|(name, from, to, member)| window(name, from, to, member, o.records, o.gate))
    .collect();
    let accounting = accounting(o);
    let failed_ends = || {
        o.records
            .iter()
            .filter(|r| !r.ok() && !r.aborted())
            .map(|r| r.ended_s)
    };
    let first_error_s = failed_ends().reduce(f64::min);
    let last_error_s = failed_ends().reduce(f64::max);
    let (detected_at_s, detected_by) = detection(o);
    let sig = &o.signals;
    let stopped_receiving_work = match o.kind {
        FaultKind::KillReplica => {
            Some(sig.endpoint_removed_s.is_some() && sig.routed_after_removal.unwrap_or(0) == 0)
        }
        FaultKind::ColdStart
        | FaultKind::KvCapacity
        | FaultKind::DegradedLink
        | FaultKind::RequestCancel => None,
    };
    let capacity_returned = match o.kind {
        FaultKind::KillReplica | FaultKind::ColdStart => sig.serving_again_s.is_some(),
        // A timed fault gives capacity back when lifted; one that lasts to the end does not.
        FaultKind::KvCapacity | FaultKind::DegradedLink | FaultKind::RequestCancel => {
            o.lifted_s.is_some()
        }
    };
    let cancellation = o
        .cancel
        .map(|plan| cancellation(o, &plan, start_s, incident_end, &accounting));
    let mut report = FailureReport {
        fault: o.kind,
        replica: o.replica.clone(),
        rate_rps: o.rate_rps,
        replicas: o.replicas,
        injected_at_s: o.injected_s,
        lifted_at_s: o.lifted_s,
        end_s: o.end_s,
        detected_at_s,
        detected_by,
        signals: o.signals.clone(),
        stopped_receiving_work,
        first_error_s,
        last_error_s,
        windows,
        queue,
        accounting,
        cancellation,
        alerts: o.alerts.clone(),
        capacity_returned,
        verdict: FailureVerdict::Pass,
        reasons: Vec::new(),
    };
    let (verdict, reasons) = verdict(&report, o.gate);
    report.verdict = verdict;
    report.reasons = reasons;
    report
}

/// The first signal that showed the fault: for a kill, the readiness probe, the metrics or
/// the endpoint, whichever came first (or an alert); for a cold start, the new replica
/// becoming ready; for the others, the first alert that fired.
fn detection(o: &Observed<'_>) -> (Option<f64>, Option<String>) {
    let sig = &o.signals;
    let first_alert = o
        .alerts
        .iter()
        .filter_map(|a| Some((a.firing_at_s?, format!("alert {}", a.alert))))
        .filter(|(t, _)| *t >= o.injected_s);
    let candidates: Vec<(f64, String)> = match o.kind {
        FaultKind::KillReplica => [
            (sig.readiness_failed_s, "readiness probe failed"),
            (sig.metrics_gone_s, "metrics scrape failed"),
            (sig.endpoint_removed_s, "endpoint removed"),
        ]
        .into_iter()
        .filter_map(|(t, why)| Some((t?, why.to_owned())))
        .chain(first_alert)
        .collect(),
        FaultKind::ColdStart => sig
            .serving_again_s
            .map(|t| (t, "new replica ready and routed to".to_owned()))
            .into_iter()
            .collect(),
        FaultKind::RequestCancel => sig
            .engine_abort_seen_s
            .map(|t| (t, "the engines counted aborted requests".to_owned()))
            .into_iter()
            .chain(first_alert)
            .collect(),
        FaultKind::KvCapacity | FaultKind::DegradedLink => first_alert.collect(),
    };
    candidates
        .into_iter()
        .filter(|(t, _)| *t >= o.injected_s)
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map_or((None, None), |(t, why)| (Some(t), Some(why)))
}

fn accounting(o: &Observed<'_>) -> Accounting {
    let mut a = Accounting {
        attempted: o.records.len() as u64,
        warmup_sent: o.warmup_sent,
        router_received: o.signals.router_received,
        engine_finished: o.signals.engine_finished,
        ..Accounting::default()
    };
    for r in o.records {
        if r.ok() {
            a.ok += 1;
            continue;
        }
        if r.aborted() {
            a.aborted += 1;
            continue;
        }
        *a.failed_by_status.entry(r.status.to_owned()).or_default() += 1;
        if is_silent(r.status) {
            a.lost += 1;
        } else {
            a.failed_honestly += 1;
            if matches!(r.http_status, Some(429 | 503)) {
                a.rejected += 1;
            }
        }
    }
    a
}

/// The `member` requests of the window `[from, to)`, through the core's summary (one
/// definition of TPOT, attainment and percentiles); `None` for an empty span.
fn window(
    name: &str,
    from: f64,
    to: f64,
    member: &dyn Fn(&RequestRecord) -> bool,
    records: &[RequestRecord],
    gate: &GateConfig,
) -> Option<Window> {
    if to.is_nan() || from.is_nan() || to <= from {
        return None;
    }
    let mut summary = PointSummary::new(gate.clone());
    let mut aborted = 0;
    for r in records.iter().filter(|r| member(r)) {
        if r.aborted() {
            aborted += 1;
        } else if r.ok() {
            summary.record_success(r.class, &r.success());
        } else {
            summary.record_failure(r.class, r.status);
        }
    }
    let report: PointReport = summary.finish(to - from, QueueTrend::Flat).ok()?;
    let classes = gate
        .classes
        .iter()
        .filter_map(|c| {
            let r = report.classes.get(&c.name)?;
            Some(WindowClass {
                class: c.name.clone(),
                attempted: r.attempted_count.unwrap_or(r.successful_count),
                successful: r.successful_count,
                attainment: r.attainment,
                p50_ttft_ms: r.p50_ttft_ms,
                p95_ttft_ms: r.p95_ttft_ms,
                p50_tpot_ms: r.p50_tpot_ms,
                p95_tpot_ms: r.p95_tpot_ms,
            })
        })
        .collect();
    Some(Window {
        name: name.to_owned(),
        from_s: from,
        to_s: to,
        attempted: report.attempted,
        aborted,
        failed: report.failed,
        error_rate: error_rate(report.failed, report.attempted),
        goodput_rps: report.observed_goodput_rps,
        classes,
    })
}

/// The means of `series` over `[from, to)`.
fn mean_over(series: &[(f64, f64)], from: f64, to: f64) -> Option<f64> {
    mean(
        series
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|s| s.1),
    )
}

/// What the engines did with the cancelled requests: their abort count against the
/// client's, and running and KV usage before, during and after ([`SLOTS_RULE`]).
fn cancellation(
    o: &Observed<'_>,
    plan: &CancelPlan,
    start_s: f64,
    incident_end: f64,
    accounting: &Accounting,
) -> Cancellation {
    let lifted = o.lifted_s.unwrap_or(o.end_s);
    let after_from = incident_end.max(lifted);
    let periods = |series: &[(f64, f64)]| {
        (
            mean_over(series, start_s, o.injected_s),
            mean_over(series, o.injected_s, lifted),
            mean_over(series, after_from, o.end_s + 1e-9),
        )
    };
    let (running_before, running_during, running_after) = periods(o.running);
    let (kv_before, kv_during, kv_after) = periods(o.kv_usage);
    let back = |before: Option<f64>, after: Option<f64>, floor: f64| match (before, after) {
        (Some(b), Some(a)) => a <= b + floor.max(0.2 * b),
        _ => true,
    };
    let client_aborted = accounting.aborted;
    let engine_aborted = o.signals.engine_aborted;
    let slots_freed = engine_aborted.map(|n| {
        n + 1e-9 >= ABORTS_COUNTED_MIN * client_aborted as f64
            && back(running_before, running_after, 2.0)
            && back(kv_before, kv_after, 0.05)
    });
    Cancellation {
        fraction: plan.fraction,
        after_chunks: plan.after_chunks,
        client_aborted,
        engine_aborted,
        running_before,
        running_during,
        running_after,
        kv_before,
        kv_during,
        kv_after,
        slots_freed,
    }
}

fn queue_facts(o: &Observed<'_>, start_s: f64) -> QueueFacts {
    let q = o.queue;
    let baseline = mean_over(q, start_s, o.injected_s);
    let after: Vec<(f64, f64)> = q
        .iter()
        .copied()
        .filter(|(t, _)| *t >= o.injected_s && *t <= o.end_s)
        .collect();
    let peak = after
        .iter()
        .copied()
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.total_cmp(&a.0)));
    let slope = queue_slope(&after, QUEUE_MIN_GROWTH);
    // The SLOs are part of the steady state: a replica short, the queue can hold while
    // larger batches still miss TPOT.
    let slos_hold = |from: f64, to: f64| {
        let arrived = |r: &RequestRecord| r.scheduled_s >= from && r.scheduled_s < to;
        window("probe", from, to, &arrived, o.records, o.gate)
            .is_some_and(|w| meets_slos(&w, o.gate))
    };
    let recovered_at_s = baseline.and_then(|base| {
        let from = peak.map_or(o.injected_s, |p| p.0);
        recovered_at(&after, from, base, o.recovery_window_s, o.end_s, &slos_hold)
    });
    QueueFacts {
        baseline,
        peak: peak.map(|p| p.1),
        peak_at_s: peak.map(|p| p.0),
        trend_after_injection: slope.trend,
        growth_after_injection: slope.growth,
        recovered_at_s,
        recovery_s: recovered_at_s.map(|t| t - o.injected_s),
        recovery_window_s: o.recovery_window_s,
    }
}

fn num(v: Option<f64>) -> String {
    v.map_or("—".to_owned(), |v| format!("{v:.2}"))
}

/// Whether a window's classes meet the attainment minimum and its error rate is within the
/// gate's bound (no sample rule: a window is shorter than a point).
fn meets_slos(w: &Window, gate: &GateConfig) -> bool {
    w.attempted > 0
        && w.error_rate.is_none_or(|e| e <= gate.error_rate_max)
        && w.classes
            .iter()
            .all(|c| c.attainment.is_none_or(|x| x >= gate.attainment_min))
}

/// The first sample time `t ≥ from` whose window `[t, t + w]` lies inside the run, is flat
/// by the queue-trend rule, has a mean within max(5, baseline / 2) of the baseline, and
/// for which `slos_hold(t, t + w)`.
pub fn recovered_at(
    samples: &[(f64, f64)],
    from: f64,
    baseline: f64,
    w: f64,
    end_s: f64,
    slos_hold: &dyn Fn(f64, f64) -> bool,
) -> Option<f64> {
    let tolerance = QUEUE_MIN_GROWTH.max(0.5 * baseline);
    samples
        .iter()
        .map(|s| s.0)
        .filter(|&t| t >= from && t + w <= end_s)
        .find(|&t| {
            let win: Vec<(f64, f64)> = samples
                .iter()
                .copied()
                .filter(|(x, _)| *x >= t && *x <= t + w)
                .collect();
            win.len() >= 3
                && queue_slope(&win, QUEUE_MIN_GROWTH).trend == QueueTrend::Flat
                && mean(win.iter().map(|s| s.1)).is_some_and(|m| m <= baseline + tolerance)
                && slos_hold(t, t + w)
        })
}

/// Pass when the fault was detected, the replica stopped getting work (a kill), nothing
/// was lost silently and the steady state returned; a finding when the system stayed
/// honest but could not hold the rate without shedding, or a degradation went unnoticed;
/// a fail otherwise.
fn verdict(r: &FailureReport, gate: &GateConfig) -> (FailureVerdict, Vec<String>) {
    let mut fails = Vec::new();
    let mut findings = Vec::new();
    let mut passes = Vec::new();
    let kill = r.fault == FaultKind::KillReplica;
    match (r.detected_at_s, &r.detected_by) {
        (Some(t), Some(by)) => passes.push(format!(
            "detected {:.1} s after the injection ({by})",
            t - r.injected_at_s
        )),
        _ if kill => fails.push("the lost replica was never detected".to_owned()),
        _ => findings.push("no signal showed the fault (no alert fired)".to_owned()),
    }
    if let Some(stopped) = r.stopped_receiving_work {
        match (stopped, r.signals.endpoint_removed_s) {
            (true, Some(t)) => passes.push(match r.signals.routed_after_removal {
                Some(_) => format!(
                    "removed from routing {:.1} s after the injection; no request routed to \
                     it afterwards",
                    t - r.injected_at_s
                ),
                None => format!(
                    "removed from routing {:.1} s after the injection (its endpoint no \
                     longer ready; the proxy does not count its picks)",
                    t - r.injected_at_s
                ),
            }),
            (_, None) => fails.push("the replica was never removed from routing".to_owned()),
            (false, Some(_)) => fails.push(format!(
                "{} requests were routed to the replica after its removal",
                r.signals.routed_after_removal.unwrap_or(0)
            )),
        }
    }
    if let Some(c) = &r.cancellation {
        let counted = c
            .engine_aborted
            .map_or("no abort count".to_owned(), |n| format!("{n:.0} aborts"));
        match c.slots_freed {
            Some(true) => passes.push(format!(
                "the engines freed the slots of the {} cancelled requests ({counted} \
                 counted; running and KV usage back to their baseline)",
                c.client_aborted
            )),
            Some(false) => fails.push(format!(
                "the engines did not free the slots of the {} cancelled requests ({counted} \
                 counted, running {} before and {} after, KV usage {} before and {} after): \
                 they kept working for clients that had gone",
                c.client_aborted,
                num(c.running_before),
                num(c.running_after),
                num(c.kv_before),
                num(c.kv_after),
            )),
            None => findings.push(format!(
                "the engines count no aborted requests: whether the {} cancelled requests \
                 freed their slots cannot be told (running {} before, {} during the \
                 cancellation)",
                c.client_aborted,
                num(c.running_before),
                num(c.running_during),
            )),
        }
        if c.client_aborted == 0 {
            findings.push(
                "no request was cancelled: every request chosen ended before its cancel \
                 point"
                    .to_owned(),
            );
        }
    }
    let a = &r.accounting;
    if a.lost > 0 {
        fails.push(format!(
            "{} requests were lost silently (sent, never answered with an error)",
            a.lost
        ));
    } else {
        passes.push(format!(
            "no silent loss: {} failures, each with an error the client saw",
            a.failed_honestly
        ));
    }
    if !a.balanced() {
        fails.push(format!(
            "the accounting does not balance: {} sent (and {} in the warmup), {} ok + {} \
             aborted + {} failed + {} lost{}",
            a.attempted,
            a.warmup_sent,
            a.ok,
            a.aborted,
            a.failed_honestly,
            a.lost,
            a.router_received
                .map_or(String::new(), |n| format!(", the router received {n}"))
        ));
    }
    let after_ok = r
        .windows
        .iter()
        .find(|w| w.name == "after")
        .is_some_and(|w| meets_slos(w, gate));
    let recovered = r.queue.recovered_at_s.is_some();
    if recovered && after_ok && r.capacity_returned {
        passes.push(format!(
            "steady state returned {:.1} s after the injection; the after-window meets the \
             SLOs",
            r.queue.recovery_s.unwrap_or(0.0)
        ));
    } else if r.queue.trend_after_injection == QueueTrend::Growing && a.rejected == 0 {
        findings.push(format!(
            "the remaining replicas could not hold {} RPS and nothing shed load: the queue \
             grew by {:.0} requests after the injection with no request rejected",
            r.rate_rps, r.queue.growth_after_injection
        ));
    } else {
        let mut why = Vec::new();
        if !recovered {
            why.push("the queue never returned to its baseline");
        }
        if !after_ok {
            why.push("the after-window misses the SLOs or the error-rate bound");
        }
        if !r.capacity_returned {
            why.push("capacity did not come back");
        }
        let line = format!("no steady state: {}", why.join("; "));
        if a.rejected > 0 && a.lost == 0 {
            // Shedding kept the system honest under the loss: a capacity finding.
            findings.push(format!(
                "{line} ({} requests rejected: load was shed)",
                a.rejected
            ));
        } else {
            fails.push(line);
        }
    }
    let verdict = if !fails.is_empty() {
        FailureVerdict::Fail
    } else if !findings.is_empty() {
        FailureVerdict::Finding
    } else {
        FailureVerdict::Pass
    };
    let reasons = fails
        .into_iter()
        .map(|s| format!("fail: {s}"))
        .chain(findings.into_iter().map(|s| format!("finding: {s}")))
        .chain(passes.into_iter().map(|s| format!("ok: {s}")))
        .collect();
    (verdict, reasons)
}

#[cfg(test)]
mod tests;
