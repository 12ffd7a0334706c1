//! `CapacityBenchmarkStatus`: what the operator (or `goodput bench`) found, told so that
//! `kubectl get cb` and `kubectl describe cb` read as the story of the run: where it is
//! (`phase`, `currentPoint`), what each finished point showed (`points`), and the answer
//! (`capacityRps`, `requiredReplicas`).
//!
//! Every field is optional or defaulted, and no type refuses unknown fields, so an operator
//! older than its CRD still reads the objects a newer one wrote. The status stays small
//! (etcd objects are limited to about 1.5 MiB): a point keeps at most
//! [`FinishedPoint::MAX_REASONS`] reasons of at most [`FinishedPoint::MAX_REASON_CHARS`]
//! characters, and bulk results (per-request records, per-class tables) live in ConfigMaps
//! that the points name.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::CacheMode;

/// What the operator (or `goodput bench`) found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBenchmarkStatus {
    /// Where the benchmark is (see [`Phase`]).
    // In the CRD an optional enum's description is the enum's own, so `Phase` holds the
    // text `kubectl explain` shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Progressing`, `SpecValid` and `TargetReachable`, one entry per type, each
    /// with a one-word reason and a message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The server under test, as printed: `svc/<name>`, the URL, or `simulated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The point being measured now; absent between points and once the run has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_point: Option<CurrentPoint>,
    /// Every finished point, in the order run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub points: Vec<FinishedPoint>,
    /// Capacity per cache mode (never averaged across modes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modes: Vec<ModeCapacity>,
    /// What the sweep's points cost in accelerator time (set with the capacity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::planning::cost::Cost>,
    /// What early stopping saved: the schedule time the points it stopped left unsent, on
    /// every GPU under test, in GPU-minutes (set with the capacity when a point stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_stop_saved_gpu_minutes: Option<f64>,
    /// What the engine model's placement saved against the fixed-fraction grid it replaced,
    /// summed over the modes it placed: that grid's planned GPU-minutes less what the
    /// placed rate points held (negative when placement spent more; absent when the model
    /// placed no rates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_saved_gpu_minutes: Option<f64>,
    /// Highest passing offered rate (requests per second) of the plan's cache mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_rps: Option<f64>,
    /// Capacity divided by the replicas under test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_per_replica_rps: Option<f64>,
    /// Replicas for the forecast peak (`spec.peak`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_replicas: Option<u32>,
    /// What the target said it runs (engine, version, model), read from it during the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<ResolvedIdentity>,
    /// Where the raw per-shard results are kept, when `spec.loadgen` names a claim or a
    /// bucket: `pvc/<claim>/<benchmark>/g<generation>/` or
    /// `s3://<bucket>[/<prefix>]/<benchmark>/g<generation>/`. Each point's merged report is
    /// in its `<job>-point` ConfigMap either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack: Option<String>,
    /// The failure tests of `spec.failureTest`, run once the sweep found its rate: the one
    /// running, and each finished one's report (its `failure-test.md` is in the test's
    /// `<job>-point` ConfigMap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_test: Option<super::FailureTestStatus>,
}

/// Where the benchmark is: `Pending` (not started: waiting for a valid spec or its target),
/// `Running`, `Succeeded` (every point ran; the capacity and the plan are here) or `Failed`
/// (stopped without a result). The conditions say why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Phase {
    /// Accepted, not started: waiting for a valid spec or a reachable target.
    Pending,
    /// Points are being measured.
    Running,
    /// Every point ran; the capacity and the plan are in the status.
    Succeeded,
    /// The benchmark stopped without a result; the conditions say why.
    Failed,
}

/// The kind of experiment a point belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PointKind {
    /// Closed loop at a fixed concurrency: finds the knee, never a capacity.
    Saturation,
    /// Open loop at an offered rate: the only experiment that validates a capacity.
    Rate,
}

/// The point being measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CurrentPoint {
    /// The point as people say it: `cold rate 18.0`, `warm saturation c=16`.
    #[serde(default)]
    pub label: String,
    /// The cache state.
    pub cache: CacheMode,
    /// Saturation (closed loop) or rate (open loop).
    pub kind: PointKind,
    /// Requests in flight (saturation points).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Offered arrival rate, requests per second (rate points).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offered_rps: Option<f64>,
    /// Which run of the point (0-based) among `spec.repeats`.
    #[serde(default)]
    pub repeat: u32,
    /// The Job that sends the point's load.
    #[serde(default)]
    pub job: String,
    /// Which attempt this Job is (0: the first): a Job whose pod failed is started again
    /// under a new name, up to the operator's `--pod-retries`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempt: u32,
    /// When the point's load started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One finished run of one point, and its verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FinishedPoint {
    /// The cache state.
    pub cache: CacheMode,
    /// Saturation (closed loop) or rate (open loop).
    pub kind: PointKind,
    /// Requests in flight (saturation points).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Offered arrival rate, requests per second (rate points).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offered_rps: Option<f64>,
    /// Which run of the point (0-based) among `spec.repeats`.
    #[serde(default)]
    pub repeat: u32,
    /// Completed requests per second.
    #[serde(default)]
    pub achieved_rps: f64,
    /// Failed requests as a fraction of those sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_rate: Option<f64>,
    /// The class furthest from its SLO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weakest_class: Option<String>,
    /// That class's SLO attainment (fraction of its requests within both latency cutoffs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weakest_attainment: Option<f64>,
    /// That class's successful requests (the sample rule's count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weakest_successes: Option<u64>,
    /// The queue's trend over the point: `flat`, `growing`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_trend: Option<String>,
    /// Saturation points: every class met its SLOs.
    #[serde(default)]
    pub slos_met: bool,
    /// The point is evidence: enough samples, the load generator kept its schedule, the
    /// cache state was what it claims.
    #[serde(default)]
    pub valid: bool,
    /// The point is not evidence because the load generator fell behind its schedule
    /// (it says nothing about the target; the sweep never moves on it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub client_behind: bool,
    /// `pass`, `fail`, `exploratory` (a saturation point: never a capacity) or `invalid`.
    #[serde(default)]
    pub verdict: String,
    /// Why the verdict, most important first; at most 5, each at most 300 characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// The ConfigMap holding the point's full results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_config_map: Option<String>,
    /// Every class's gate at this point: its successes, attainment and whether it passed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<PointClass>,
    /// Seconds the point held the deployment (real-time equivalent, from the schedule's
    /// time zero to the last response).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_seconds: Option<f64>,
    /// Requests the point sent, warmup included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_sent: Option<u64>,
    /// Stopped early (its failure settled before the schedule ended): the schedule time
    /// it left unsent, in seconds of real-time equivalent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsent_seconds: Option<f64>,
    /// Saturation points: what the engine sustained, its concurrency ÷ the mean end-to-end
    /// latency (Little's law, the client's turnaround left out), requests per second. The
    /// engine model of a simulated target is calibrated against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_rps: Option<f64>,
}

/// One workload class at one point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PointClass {
    /// The class.
    pub name: String,
    /// Successful requests (the sample rule counts these).
    pub successes: u64,
    /// Fraction of successful requests within both its TTFT and TPOT cutoffs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attainment: Option<f64>,
    /// Its attainment met the bar with enough samples.
    pub passed: bool,
}

impl FinishedPoint {
    /// Verdict of a rate point that passed the gate.
    pub const PASS: &'static str = "pass";
    /// Verdict of a rate point that failed the gate.
    pub const FAIL: &'static str = "fail";
    /// Verdict of a saturation point: it locates the knee and never validates a rate.
    pub const EXPLORATORY: &'static str = "exploratory";
    /// Verdict of a point that is no evidence either way.
    pub const INVALID: &'static str = "invalid";
    /// Most reasons one point keeps in the status.
    pub const MAX_REASONS: usize = 5;
    /// Most characters of one reason in the status.
    pub const MAX_REASON_CHARS: usize = 300;

    /// The reasons as the status keeps them: the first [`Self::MAX_REASONS`], each cut to
    /// [`Self::MAX_REASON_CHARS`] characters (ending in `…` when cut), and a last one saying
    /// how many were left out. The full list belongs in the point's ConfigMap.
    pub fn bounded_reasons(reasons: Vec<String>) -> Vec<String> {
        let total = reasons.len();
        let keep = if total > Self::MAX_REASONS {
            Self::MAX_REASONS - 1
        } else {
            total
        };
        let mut out: Vec<String> = reasons
            .into_iter()
            .take(keep)
            .map(|r| cut(r, Self::MAX_REASON_CHARS))
            .collect();
        if total > keep {
            out.push(format!(
                "and {} more (see the point's ConfigMap)",
                total - keep
            ));
        }
        out
    }
}

/// `text` cut to at most `max` characters, ending in `…` when cut.
fn cut(text: String, max: usize) -> String {
    if text.chars().count() <= max {
        return text;
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// The capacity measured in one cache state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModeCapacity {
    /// The cache state.
    pub cache: CacheMode,
    /// Highest passing offered rate (requests per second); absent when no rate passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_rps: Option<f64>,
    /// Capacity divided by the replicas under test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_per_replica_rps: Option<f64>,
    /// The final bracket: the capacity lies at or above `pass` and below `fail`; absent
    /// until a failing rate lies above a passing one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bracket: Option<CapacityBracket>,
    /// Rates added to narrow the bracket (`rateSweep.resolution`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refinements: Vec<f64>,
    /// How the engine model placed the first rates (a simulated target with a saturation
    /// sweep); absent when the fixed-fraction grid ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// The lowest offered rate (requests per second) whose schedule the load generator
    /// could not keep: no rate at or above it ran again; absent when it kept every one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_limit_rps: Option<f64>,
    /// The load generator fell behind at the lowest rate tried: nothing measured the
    /// target in this cache mode (see the points' reasons for its lag and start delay).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub loadgen_starved: bool,
}

/// The engine model's prediction for one cache mode and what it saved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// The uncalibrated model's capacity (requests per second).
    pub model_capacity_rps: f64,
    /// What the engine sustained at the knee and the level below it ÷ what the model
    /// sustains there.
    pub speed: f64,
    /// The predicted capacity, the model's × the speed (requests per second): the first two
    /// rates sit just below and just above it.
    pub predicted_rps: f64,
    /// The fixed-fraction grid's rates the prediction replaced (requests per second).
    pub replaced_grid: Vec<f64>,
    /// What that grid's rates would have held at the least: their planned schedules, every
    /// repeat, on every GPU under test, drain not counted (GPU-minutes).
    pub replaced_grid_gpu_minutes: f64,
    /// What this mode's rate points held (GPU-minutes).
    pub rate_points_gpu_minutes: f64,
}

/// Where a capacity lies, defined with the planning core.
pub use crate::planning::CapacityBracket;

/// What the target said it runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedIdentity {
    /// Engine name, e.g. `vllm`.
    #[serde(default)]
    pub engine: String,
    /// Engine version, when the target reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_version: Option<String>,
    /// The model the target serves.
    #[serde(default)]
    pub model: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_bounded_in_count_and_length() {
        let few = vec!["a".to_string(), "b".to_string()];
        assert_eq!(FinishedPoint::bounded_reasons(few.clone()), few);

        let exactly: Vec<String> = (0..5).map(|i| format!("r{i}")).collect();
        assert_eq!(FinishedPoint::bounded_reasons(exactly.clone()), exactly);

        let many: Vec<String> = (0..9).map(|i| format!("r{i}")).collect();
        let kept = FinishedPoint::bounded_reasons(many);
        assert_eq!(kept.len(), FinishedPoint::MAX_REASONS);
        assert_eq!(kept[..4], ["r0", "r1", "r2", "r3"]);
        assert_eq!(kept[4], "and 5 more (see the point's ConfigMap)");

        // Cut by characters, not bytes: a multi-byte character never splits.
        let long = "é".repeat(400);
        let kept = FinishedPoint::bounded_reasons(vec![long, "x".repeat(300)]);
        assert_eq!(kept[0].chars().count(), FinishedPoint::MAX_REASON_CHARS);
        assert!(kept[0].ends_with('…') && kept[0].starts_with("éé"));
        assert_eq!(kept[1], "x".repeat(300), "exactly the limit is kept whole");
    }

    #[test]
    fn enums_serialize_as_documented() {
        let json = |v: serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        assert_eq!(json(serde_json::json!(Phase::Succeeded)), "Succeeded");
        assert_eq!(json(serde_json::json!(PointKind::Saturation)), "saturation");
        assert_eq!(json(serde_json::json!(PointKind::Rate)), "rate");
    }

    /// An older operator reads a status a newer one wrote: unknown fields are ignored and
    /// absent ones default.
    #[test]
    fn status_reads_unknown_and_missing_fields() {
        let status: CapacityBenchmarkStatus = serde_json::from_value(serde_json::json!({
            "phase": "Running",
            "fromTheFuture": {"x": 1},
            "currentPoint": {"cache": "warm", "kind": "saturation", "concurrency": 16,
                             "newField": true},
            "points": [{"cache": "cold", "kind": "rate", "offeredRps": 18.0}],
        }))
        .unwrap();
        assert_eq!(status.phase, Some(Phase::Running));
        let current = status.current_point.unwrap();
        assert_eq!(current.concurrency, Some(16));
        assert_eq!(current.label, "");
        let point = &status.points[0];
        assert_eq!(point.offered_rps, Some(18.0));
        assert!(!point.valid && point.verdict.is_empty() && point.reasons.is_empty());
    }
}
