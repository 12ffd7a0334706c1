//! `spec.failureTest`: faults injected at a passing rate, each its own test with its own
//! report (never folded into one score).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Failure tests run after the rate sweep: at a rate the deployment passes, after a steady
/// period, one fault is injected while the load keeps running through detection and
/// recovery. Each fault is its own test and its own report (`failure-test.md`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct FailureTest {
    /// Offered rate (requests per second). Default: the highest passing rate of the plan's
    /// cache mode × `rateFraction`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Fraction of the highest passing rate run when `rate` is not given. Default 20/24,
    /// the methodology's 20 RPS on a deployment whose capacity is 24.
    pub rate_fraction: f64,
    /// Seconds of load before the fault (model time): the baseline window.
    pub steady_seconds: f64,
    /// Seconds of load after the fault (model time): detection, recovery and the
    /// after-window.
    pub observe_seconds: f64,
    /// The faults, each run as its own test in this order. Default: kill one replica.
    pub faults: Vec<Fault>,
    /// A `url` target's engine process on the machine that runs `goodput bench` (not in a
    /// cluster, where a fault deletes a pod): a real engine has no fault API, so
    /// `KillReplica` sends SIGKILL to the process whose id this file holds, and the kill is
    /// detected through the engine's `/health` and `/metrics`. Whatever restarts it (a
    /// service manager, a supervisor that rewrites the file) is what brings capacity back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_process: Option<EngineProcessRef>,
}

/// Where a local engine's process id is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EngineProcessRef {
    /// A file holding the engine's process id.
    pub pid_file: String,
}

impl Default for FailureTest {
    fn default() -> Self {
        FailureTest {
            rate: None,
            rate_fraction: 20.0 / 24.0,
            steady_seconds: 60.0,
            observe_seconds: 120.0,
            faults: vec![Fault::default()],
            engine_process: None,
        }
    }
}

impl FailureTest {
    /// The tests' rate: `rate`, or the plan mode's capacity × `rateFraction`, to the
    /// thousandth; `None` when neither is known.
    pub fn rate_rps(&self, capacity_rps: Option<f64>) -> Option<f64> {
        self.rate
            .or_else(|| capacity_rps.map(|c| c * self.rate_fraction))
            .map(|r| (r * 1000.0).round() / 1000.0)
            .filter(|r| *r > 0.0)
    }

    /// How long the queue must hold its baseline (and the SLOs) for a recovery to count:
    /// half the steady period, within 5 to 30 model seconds.
    pub fn recovery_window_s(&self) -> f64 {
        (self.steady_seconds / 2.0).clamp(5.0, 30.0)
    }
}

/// The kind lives with the failure analysis (the pure core); the CRD field is this type.
pub use crate::failure::FaultKind;

/// One fault.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    /// The fault.
    #[serde(default)]
    pub kind: FaultKind,
    /// Which replica (0-based; in a cluster, the target's ready pods sorted by name).
    #[serde(default)]
    pub replica: u32,
    /// `KillReplica` on the simulated engine: seconds (model time) after the kill at which
    /// a replacement serves again, as a Deployment's new pod would. Absent: 30. Negative:
    /// never (the remaining replicas must hold the rate, or shed load).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recreate_after_seconds: Option<f64>,
    /// `ColdStart`: seconds (model time) the new replica takes to load before it serves.
    /// Absent: 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_seconds: Option<f64>,
    /// `KvCapacity`: usable fraction of the replica's KV cache. Absent: 0.25.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_fraction: Option<f64>,
    /// `DegradedLink`: latency added to every request on the link (ms). Absent: 200.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_latency_ms: Option<u64>,
    /// `DegradedLink`: extra uniform jitter (ms). Absent: 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<u64>,
    /// `RequestCancel`: fraction of the requests arriving during the fault that the
    /// client aborts. Absent: 0.25.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_fraction: Option<f64>,
    /// `RequestCancel`: content chunks a cancelled request receives before the client
    /// closes its connection (one token per chunk on engines that stream every token; a
    /// stream interval puts several in one). Absent: 8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_after_chunks: Option<u32>,
    /// `KvCapacity`, `DegradedLink` and `RequestCancel`: seconds (model time) the fault
    /// lasts. Absent: to the end of the run (`RequestCancel`: 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
}

impl Fault {
    /// Model seconds after the kill at which the replacement serves; `None`: never.
    pub fn recreate_after_s(&self) -> Option<f64> {
        match self.recreate_after_seconds {
            None => Some(30.0),
            Some(s) if s < 0.0 => None,
            Some(s) => Some(s),
        }
    }

    /// Model seconds a cold-starting replica loads before it serves.
    pub fn load_s(&self) -> f64 {
        self.load_seconds.unwrap_or(20.0).max(0.0)
    }

    /// Usable KV fraction under `KvCapacity`.
    pub fn kv_fraction(&self) -> f64 {
        self.kv_fraction.unwrap_or(0.25)
    }

    /// What the fault hits, as reports name it: `replica 1`, or `every replica` for a
    /// request cancellation (the clients of all replicas cancel).
    pub fn hits(&self) -> String {
        match self.kind {
            FaultKind::RequestCancel => "every replica".to_owned(),
            _ => format!("replica {}", self.replica),
        }
    }

    /// Fraction of requests cancelled and chunks each receives first under
    /// `RequestCancel`.
    pub fn cancel(&self) -> (f64, u32) {
        (
            self.cancel_fraction.unwrap_or(0.25),
            self.cancel_after_chunks.unwrap_or(8),
        )
    }

    /// Model seconds a timed fault lasts; `None`: to the end of the run.
    pub fn duration_s(&self) -> Option<f64> {
        match self.kind {
            FaultKind::RequestCancel => Some(self.duration_seconds.unwrap_or(30.0)),
            _ => self.duration_seconds,
        }
    }

    /// Added latency and jitter under `DegradedLink` (ms).
    pub fn link(&self) -> (u64, u64) {
        (
            self.added_latency_ms.unwrap_or(200),
            self.jitter_ms.unwrap_or(100),
        )
    }
}

/// Where the failure tests of a benchmark stand (`status.failureTest`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureTestStatus {
    /// Offered rate of the tests (requests per second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_rps: Option<f64>,
    /// Why no test ran (no rate passed the gate and `rate` is not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Index in `spec.failureTest.faults` of the next test to run; all have run when it
    /// equals their number.
    #[serde(default)]
    pub next: u32,
    /// The test running now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<CurrentFault>,
    /// Each finished test's report, in the order of the faults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reports: Vec<crate::failure::FailureReport>,
    /// Tests that ended without a report, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// The failure test running now: its load's Job, when the fault goes in, and what the
/// operator saw of the target's EndpointSlices since (Unix milliseconds).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CurrentFault {
    /// Index in `spec.failureTest.faults`.
    pub fault: u32,
    /// The load's Job.
    pub job: String,
    /// The load's time zero (its `--start-at`).
    pub zero_unix_ms: i64,
    /// When the fault is due: the time zero plus the warmup and the steady period.
    pub inject_at_unix_ms: i64,
    /// How often the EndpointSlices are read after the injection (ms): the resolution of
    /// the times below.
    pub poll_ms: u64,
    /// The pod deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub victim: Option<String>,
    /// Its address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub victim_address: Option<String>,
    /// Ready endpoints just before the fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_before: Option<u32>,
    /// When the pod was deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected_unix_ms: Option<i64>,
    /// First look at which the victim's endpoint was listed as not serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_failed_unix_ms: Option<i64>,
    /// First look at which the victim was no longer a ready endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_removed_unix_ms: Option<i64>,
    /// First look, after the removal, at which as many endpoints were ready as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_again_unix_ms: Option<i64>,
}
