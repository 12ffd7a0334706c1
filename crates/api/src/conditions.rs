//! The condition types and reasons of a `CapacityBenchmark`'s `status.conditions`, and
//! setting one condition in a list the way Kubernetes does (`meta.SetStatusCondition`):
//! one entry per type, `lastTransitionTime` moved only when the status flips, and the
//! generation the condition was computed from recorded on it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Summary: `True` once the benchmark has its result (capacity and plan).
pub const READY: &str = "Ready";
/// `True` while points are being measured.
pub const PROGRESSING: &str = "Progressing";
/// `True` when the spec passed validation (the lint, with the manifest resolved).
pub const SPEC_VALID: &str = "SpecValid";
/// `True` when the target answers: the Service has ready endpoints, or the URL responds.
pub const TARGET_REACHABLE: &str = "TargetReachable";

/// The one-word `reason` of a condition.
pub mod reason {
    /// Every point ran and the capacity was decided.
    pub const SUCCEEDED: &str = "Succeeded";
    /// Points are being measured.
    pub const RUNNING: &str = "Running";
    /// The benchmark has not started yet.
    pub const PENDING: &str = "Pending";
    /// The spec passed validation.
    pub const VALID: &str = "Valid";
    /// The spec breaks a rule; the message names the field.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The workload manifest could not be read (ConfigMap or key missing, not a manifest).
    pub const MANIFEST_NOT_FOUND: &str = "ManifestNotFound";
    /// The target answered.
    pub const REACHABLE: &str = "Reachable";
    /// The target Service does not exist.
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
    /// The target Service exists but has no ready endpoints.
    pub const NO_READY_ENDPOINTS: &str = "NoReadyEndpoints";
    /// The target is being waited for (deploying, starting).
    pub const WAITING_FOR_TARGET: &str = "WaitingForTarget";
    /// An engine `/metrics` page the points scrape does not answer.
    pub const METRICS_UNREACHABLE: &str = "MetricsUnreachable";
    /// A point could not be measured (its Job failed); not a verdict on the target.
    pub const POINT_FAILED: &str = "PointFailed";
    /// A point's pod failed and its Job was started again (within `--pod-retries`).
    pub const POINT_RETRIED: &str = "PointRetried";
    /// No pod of the current point has started yet (image pull, scheduling, config).
    pub const PODS_PENDING: &str = "PodsPending";
    /// The operator may not read or write what it needs (its RBAC).
    pub const FORBIDDEN: &str = "Forbidden";
    /// An API call failed; the reconcile is retried with backoff.
    pub const API_ERROR: &str = "ApiError";
    /// The spec changed during the run; the run starts over for the new generation.
    pub const SPEC_CHANGED: &str = "SpecChanged";
    /// Every point ran, yet no offered rate passed the gate: no capacity.
    pub const NO_PASSING_RATE: &str = "NoPassingRate";
    /// The load generator could not keep its schedule at the lowest rate tried: the
    /// benchmark measured its client, not the target.
    pub const LOADGEN_STARVED: &str = "LoadGeneratorStarved";
    /// A failure test of `spec.failureTest` is running.
    pub const FAILURE_TEST: &str = "FailureTest";
    /// A failure test's fault went in: the pod deleted (an Event).
    pub const FAULT_INJECTED: &str = "FaultInjected";
    /// A failure test passed: the fault was detected, routed around, honest, and the
    /// steady state returned (an Event).
    pub const FAILURE_TEST_PASSED: &str = "FailureTestPassed";
    /// A failure test's verdict is a finding about the deployment (an Event).
    pub const FAILURE_TEST_FINDING: &str = "FailureTestFinding";
    /// A failure test failed, or ended without a report (an Event).
    pub const FAILURE_TEST_FAILED: &str = "FailureTestFailed";
    /// The failure tests did not run: no rate passed and none was given (an Event).
    pub const FAILURE_TEST_SKIPPED: &str = "FailureTestSkipped";
}

/// The condition types and reasons of a `ServingPlan` (`Ready` is shared).
pub mod plan {
    /// `True` when the evidence matches what the workload runs and is fresh.
    pub const EVIDENCE_VALID: &str = "EvidenceValid";
    /// Apply mode: `True` once the workload (or its autoscaler) holds the proposal.
    pub const APPLIED: &str = "Applied";
    /// `True` when the workload's current topology passed at the peak.
    pub const VERIFIED: &str = "Verified";
    /// `spec.gitops`: `True` while a pull request carries the proposal (or none is needed
    /// because the base branch already holds it).
    pub const PULL_REQUEST: &str = "PullRequest";

    /// The one-word `reason` of a plan's condition.
    pub mod reason {
        /// A proposal stands on valid evidence.
        pub const PROPOSED: &str = "Proposed";
        /// The evidence is used.
        pub const MATCHED: &str = "Matched";
        /// The benchmark no longer matches what the workload runs; a revalidation of the
        /// workload as it runs now is used instead.
        pub const REVALIDATED: &str = "Revalidated";
        /// The evidence does not match the workload, is stale, or has no passing point.
        pub const EVIDENCE_REFUSED: &str = "EvidenceRefused";
        /// The referenced CapacityBenchmark does not exist.
        pub const BENCHMARK_NOT_FOUND: &str = "BenchmarkNotFound";
        /// The workload, its kind or its API version does not exist.
        pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
        /// The workload's kind has no `/scale` subresource.
        pub const NO_SCALE_SUBRESOURCE: &str = "NoScaleSubresource";
        /// The Prometheus peak query failed or timed out.
        pub const PEAK_QUERY_FAILED: &str = "PeakQueryFailed";
        /// The Prometheus peak query returned no samples.
        pub const PEAK_EMPTY: &str = "PeakEmpty";
        /// The spec cannot be planned (a zero peak, a bad source).
        pub const INVALID_SPEC: &str = "InvalidSpec";
        /// The workload holds the proposal.
        pub const APPLIED: &str = "Applied";
        /// Propose mode: nothing is written.
        pub const PROPOSE_ONLY: &str = "ProposeOnly";
        /// An autoscaler's maximum is below the proposal; nothing was written.
        pub const AUTOSCALER_MAX_CONFLICT: &str = "AutoscalerMaxConflict";
        /// Writing the replicas failed; retried with backoff.
        pub const SCALE_FAILED: &str = "ScaleFailed";
        /// The new topology is being benchmarked.
        pub const REVALIDATING: &str = "Revalidating";
        /// The peak passed on the new topology.
        pub const VERIFIED: &str = "Verified";
        /// The peak failed on the new topology.
        pub const SHORTFALL: &str = "Shortfall";
        /// The revalidation benchmark ended without a result.
        pub const REVALIDATION_FAILED: &str = "RevalidationFailed";
        /// No revalidation has run (disabled, not needed yet, or nothing to benchmark).
        pub const NOT_REVALIDATED: &str = "NotRevalidated";
        /// Waiting for every replica of the new topology to be ready.
        pub const WAITING_FOR_REPLICAS: &str = "WaitingForReplicas";
        /// A pull request carrying the proposal was opened.
        pub const PULL_REQUEST_OPENED: &str = "PullRequestOpened";
        /// The open pull request was brought up to the current proposal.
        pub const PULL_REQUEST_UPDATED: &str = "PullRequestUpdated";
        /// The open pull request already carries the current proposal.
        pub const PULL_REQUEST_CURRENT: &str = "PullRequestCurrent";
        /// The base branch already holds the proposal: no pull request is needed (one that
        /// was open is closed with a comment).
        pub const UP_TO_DATE: &str = "UpToDate";
        /// A person closed the pull request; it is not reopened until the plan changes.
        pub const CLOSED_BY_HUMAN: &str = "ClosedByHuman";
        /// Someone else pushed to the plan's branch; goodput stops pushing to it.
        pub const BRANCH_EDITED_BY_HUMAN: &str = "BranchEditedByHuman";
        /// `dryRun`: the diff is in the status; nothing is pushed.
        pub const DRY_RUN: &str = "DryRun";
        /// The credentials Secret is missing or lacks the keys the repository needs.
        pub const CREDENTIALS_INVALID: &str = "CredentialsInvalid";
    }
}

/// The `status` of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known yet (the first visit).
    Unknown,
}

impl Status {
    /// `True`, `False` or `Unknown`, as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

impl From<bool> for Status {
    fn from(holds: bool) -> Self {
        if holds { Status::True } else { Status::False }
    }
}

/// A condition as computed now: `now` is its `lastTransitionTime` should it be new or its
/// status flip, and `generation` the `metadata.generation` it was computed from.
pub fn new(
    type_: &str,
    status: Status,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.as_str().to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: now,
    }
}

/// Sets `condition` in `conditions`, replacing the entry of its type (other types are left
/// as they are, in place) or appending it. The old `lastTransitionTime` is kept when the
/// status did not change; `reason`, `message` and `observedGeneration` always take the new
/// values. Returns whether anything other than a timestamp changed, so that a caller can
/// skip a no-op status write.
pub fn set(conditions: &mut Vec<Condition>, condition: Condition) -> bool {
    let Some(old) = conditions.iter_mut().find(|c| c.type_ == condition.type_) else {
        conditions.push(condition);
        return true;
    };
    let last_transition_time = if old.status == condition.status {
        old.last_transition_time.clone()
    } else {
        condition.last_transition_time.clone()
    };
    let changed = old.status != condition.status
        || old.reason != condition.reason
        || old.message != condition.message
        || old.observed_generation != condition.observed_generation;
    *old = Condition {
        last_transition_time,
        ..condition
    };
    changed
}

/// The condition of type `type_`, if set.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of type `type_` is set and `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == Status::True.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    #[test]
    fn set_appends_a_new_type_and_replaces_an_existing_one_in_place() {
        let mut list = Vec::new();
        assert!(set(
            &mut list,
            new(SPEC_VALID, Status::True, reason::VALID, "", Some(1), at(10))
        ));
        assert!(set(
            &mut list,
            new(READY, Status::Unknown, reason::PENDING, "", Some(1), at(10))
        ));
        assert!(set(
            &mut list,
            new(
                SPEC_VALID,
                Status::False,
                reason::INVALID_SPEC,
                "bad",
                Some(2),
                at(20)
            )
        ));
        let types: Vec<&str> = list.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [SPEC_VALID, READY], "one entry per type, order kept");
        let spec = find(&list, SPEC_VALID).unwrap();
        assert_eq!(spec.status, "False");
        assert_eq!(spec.reason, reason::INVALID_SPEC);
        assert_eq!(spec.message, "bad");
        assert_eq!(spec.observed_generation, Some(2));
        assert_eq!(spec.last_transition_time, at(20), "the status flipped");
        assert_eq!(find(&list, READY).unwrap().last_transition_time, at(10));
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_flips() {
        let mut list = vec![new(
            PROGRESSING,
            Status::True,
            reason::RUNNING,
            "cold rate 18.0",
            Some(3),
            at(100),
        )];
        // Same status, new message and generation: the time stays, the rest is updated.
        assert!(set(
            &mut list,
            new(
                PROGRESSING,
                Status::True,
                reason::RUNNING,
                "cold rate 24.0",
                Some(4),
                at(200)
            )
        ));
        assert_eq!(list[0].last_transition_time, at(100));
        assert_eq!(list[0].message, "cold rate 24.0");
        assert_eq!(list[0].observed_generation, Some(4));
        // Nothing but the clock changed: reported as no change, time still kept.
        assert!(!set(
            &mut list,
            new(
                PROGRESSING,
                Status::True,
                reason::RUNNING,
                "cold rate 24.0",
                Some(4),
                at(300)
            )
        ));
        assert_eq!(list[0].last_transition_time, at(100));
        // The status flips: the time moves.
        assert!(set(
            &mut list,
            new(
                PROGRESSING,
                Status::False,
                reason::SUCCEEDED,
                "done",
                Some(4),
                at(400)
            )
        ));
        assert_eq!(list[0].last_transition_time, at(400));
        assert_eq!(list.len(), 1);
    }

    #[test]
    fn find_and_is_true() {
        let list = vec![
            new(
                READY,
                Status::from(true),
                reason::SUCCEEDED,
                "",
                None,
                at(1),
            ),
            new(
                TARGET_REACHABLE,
                Status::from(false),
                reason::NO_READY_ENDPOINTS,
                "",
                None,
                at(1),
            ),
        ];
        assert_eq!(
            find(&list, READY).map(|c| c.reason.as_str()),
            Some("Succeeded")
        );
        assert!(find(&list, PROGRESSING).is_none());
        assert!(is_true(&list, READY));
        assert!(!is_true(&list, TARGET_REACHABLE));
        assert!(!is_true(&list, PROGRESSING), "absent is not true");
        assert_eq!(list[1].status, "False");
    }
}
