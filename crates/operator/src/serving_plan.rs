//! The `ServingPlan` controller, one pipeline per reconcile:
//! the workload (found through discovery, its `/scale` and what it declares it runs) →
//! the evidence (the benchmark's capacity, refused when it does not match) → the peak
//! (static or Prometheus) → the proposal (the planning core's formula, bounds and
//! scale-down rule) → apply (`/scale`, or the autoscaler's minimum) → revalidation (an
//! owned CapacityBenchmark on the new topology) → status, written only when it changed.
//!
//! The steps past the proposal have files of their own: `apply.rs` (the workload's `/scale`
//! or its autoscaler's minimum), `revalidation.rs` (the owned benchmark and its verdict);
//! `offline.rs` is the same proposal from files, for `goodput propose`.
//!
//! Level-triggered like the benchmark controller: every reconcile reads the workload, the
//! benchmark and the revalidation benchmark afresh; what must outlive a reconcile (the
//! scale-down history, the revalidation under way) is in the plan's status.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use super::benchmark::{ManifestError, api_failure, workload_manifest};
use super::pull_request;
use super::workload::{self, DeclaredIdentity};
use super::{Context, Error, FIELD_MANAGER};
use goodput_api::conditions::plan::{self as plan_cond, reason};
use goodput_api::conditions::{self, READY, Status as Cond};
use goodput_api::{
    AppliedScale, CacheMode, CapacityBenchmark, CapacityBenchmarkSpec, CapacityBenchmarkStatus,
    FinishedPoint, GitOps, PeakForecast, Phase, PlanEvidence, PlanMode, PointKind, RateSweep,
    Recommendation, ServiceTarget, ServingPlan, ServingPlanStatus, Target, Verification,
    WorkloadSource,
};
use goodput_core::planning::PlanInput;
use goodput_core::planning::serving::{arithmetic, duration_text, requirement, stabilize};
use goodput_core::workload::WorkloadManifest;

mod apply;
mod offline;
mod revalidation;

pub use offline::{OfflineEvidence, OfflineProposal, offline_proposal};
use offline::{proposal_lines, rate_points};

/// The label naming the plan that owns a revalidation benchmark.
pub const PLAN_LABEL: &str = "goodput.dev/serving-plan";
/// How often a revalidation waiting for replicas, or under way, is looked at.
const REVALIDATION_POLL: Duration = Duration::from_secs(2);

/// When a blocked plan is looked at again.
enum Retry {
    /// After the plan's next backoff delay (5 s doubling to 5 min).
    Backoff,
    /// Only when the plan (or a benchmark it watches) changes, or at the resync.
    Resync,
    /// After this long (a forge's rate limit says when).
    After(Duration),
}

/// Why a plan cannot propose now.
struct Blocked {
    condition: &'static str,
    reason: &'static str,
    message: String,
    retry: Retry,
}

impl Blocked {
    fn new(condition: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Blocked {
            condition,
            reason,
            message: message.into(),
            retry: Retry::Resync,
        }
    }

    fn backoff(mut self) -> Self {
        self.retry = Retry::Backoff;
        self
    }
}

/// An API error met while planning: `Forbidden` when RBAC refused it, else `ApiError`.
fn api_blocked(what: &str, e: kube::Error) -> Blocked {
    let (why, message) = api_failure(&e);
    Blocked::new(READY, why, format!("{what}: {message}")).backoff()
}

/// The workload as found through discovery.
struct Workload {
    api: Api<DynamicObject>,
    object: Value,
    /// `/scale` `spec.replicas`.
    replicas: u32,
    /// `status.readyReplicas`, when the kind reports it.
    ready: Option<u32>,
}

/// The capacity a plan stands on.
#[derive(Debug)]
struct Evidence {
    /// Highest passing rate on the tested deployment.
    capacity_rps: f64,
    /// Replicas it was measured on (1 for a typed-in capacity per replica).
    replicas_tested: u32,
    gpus_per_replica: Option<u32>,
    cache_mode: CacheMode,
    benchmark: Option<CapacityBenchmark>,
    /// The benchmark's frozen manifest.
    manifest: Option<WorkloadManifest>,
    record: PlanEvidence,
}

impl Evidence {
    /// A capacity per replica typed into the spec (`capacity.perReplicaRps`), with its reason.
    fn typed_in(per_replica: f64, capacity: &goodput_api::CapacitySource) -> Self {
        Evidence {
            capacity_rps: per_replica,
            replicas_tested: 1,
            gpus_per_replica: None,
            cache_mode: CacheMode::Cold,
            benchmark: None,
            manifest: None,
            record: PlanEvidence {
                source: "typed-in".into(),
                capacity_rps: Some(per_replica),
                replicas_tested: Some(1),
                reason: capacity.reason.clone(),
                ..Default::default()
            },
        }
    }

    fn per_replica(&self) -> f64 {
        self.capacity_rps / f64::from(self.replicas_tested.max(1))
    }
}

/// Reconciles one plan.
pub async fn reconcile(cached: Arc<ServingPlan>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = cached
        .namespace()
        .ok_or(Error::MissingField(".metadata.namespace"))?;
    let name = cached.name_any();
    let api: Api<ServingPlan> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(plan) = api
        .get_opt(&name)
        .await
        .map_err(Error::read("ServingPlan"))?
    else {
        return Ok(Action::await_change());
    };
    let before = plan.status.clone().unwrap_or_default();
    let mut run = PlanRun {
        ctx: &ctx,
        plan: &plan,
        namespace,
        generation: plan.metadata.generation.unwrap_or(0),
        status: before.clone(),
        before: &before,
        now: Timestamp::now(),
        mismatched: None,
    };
    run.status.observed_generation = Some(run.generation);
    run.status.target = Some(plan.spec.target_ref.printable());
    let action = match run.step().await {
        Ok(action) => action,
        Err(blocked) => run.blocked(blocked).await,
    };
    if run.status != before {
        let mut object = plan.clone();
        object.status = Some(run.status.clone());
        match api
            .replace_status(&name, &PostParams::default(), &object)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                return Ok(Action::requeue(Duration::from_millis(100)));
            }
            Err(e) => return Err(Error::Status(e)),
        }
    }
    if let Some(p) = run.status.proposed_replicas {
        ctx.metrics.observe_proposal(&run.namespace, &name, p);
    }
    Ok(action)
}

/// One reconcile of one plan.
struct PlanRun<'a> {
    ctx: &'a Context,
    plan: &'a ServingPlan,
    namespace: String,
    generation: i64,
    status: ServingPlanStatus,
    before: &'a ServingPlanStatus,
    now: Timestamp,
    /// Evidence refused only because the workload runs something else than it measured.
    mismatched: Option<Evidence>,
}

impl PlanRun<'_> {
    fn time(&self) -> Time {
        Time(self.now)
    }

    fn condition(&mut self, type_: &str, status: Cond, reason: &str, message: impl Into<String>) {
        let c = conditions::new(
            type_,
            status,
            reason,
            message,
            Some(self.generation),
            self.time(),
        );
        conditions::set(&mut self.status.conditions, c);
    }

    /// Whether a condition would change (so an Event is news).
    fn is_news(&self, type_: &str, status: Cond, reason: &str, message: &str) -> bool {
        conditions::find(&self.before.conditions, type_).is_none_or(|c| {
            c.status != status.as_str() || c.reason != reason || c.message != message
        })
    }

    async fn event(&self, type_: EventType, reason: &str, note: &str) {
        self.ctx.publish(self.plan, type_, reason, note).await;
    }

    /// Records why the plan cannot propose (or apply); a Warning Event when that is news.
    /// Short of an apply, the last proposal is withdrawn: nothing stands on evidence that
    /// is refused or a peak that cannot be read.
    async fn blocked(&mut self, b: Blocked) -> Action {
        let news = self.is_news(b.condition, Cond::False, b.reason, &b.message);
        self.condition(b.condition, Cond::False, b.reason, b.message.clone());
        if b.condition != READY {
            self.condition(READY, Cond::False, b.reason, b.message.clone());
        }
        // An apply that cannot be made leaves the proposal standing; anything earlier in
        // the pipeline means there is none.
        if b.condition != plan_cond::APPLIED && b.condition != plan_cond::PULL_REQUEST {
            self.status.proposed_replicas = None;
            self.status.proposed_gpus = None;
            self.status.required_replicas = None;
            self.status.arithmetic.clear();
        }
        if news {
            self.event(EventType::Warning, b.reason, &b.message).await;
            if b.reason == reason::EVIDENCE_REFUSED {
                self.ctx.metrics.plan_event("refused");
            }
        }
        match b.retry {
            Retry::Backoff => Action::requeue(self.ctx.backoff(self.plan)),
            Retry::Resync => Action::requeue(self.ctx.options.plan_resync),
            Retry::After(d) => Action::requeue(d),
        }
    }

    async fn step(&mut self) -> Result<Action, Blocked> {
        let spec = &self.plan.spec;
        let target = self.workload().await?;
        self.status.current_replicas = Some(target.replicas);
        let declared = workload::declared_identity(&target.object);
        let identity = workload::identity_key(&declared);
        let peak = self.peak().await?;
        let evidence = match self.evidence(&declared).await {
            Ok(evidence) => evidence,
            Err(refused) => {
                let Some(measured) = self.mismatched.take() else {
                    return Err(refused);
                };
                match self.revalidated(&measured, &target, &identity) {
                    Some(evidence) => evidence,
                    None => {
                        // The workload changed what it runs since the evidence matched (or
                        // since its last revalidation): measure what it runs now. A
                        // mismatch from the start waits for a benchmark of its own.
                        let changed =
                            conditions::is_true(&self.before.conditions, plan_cond::EVIDENCE_VALID)
                                || self.status.verification.is_some();
                        if changed {
                            self.revalidate(&target, &measured, peak, &identity, &declared, true)
                                .await?;
                        }
                        return Err(refused);
                    }
                }
            }
        };

        // A revalidation of this very topology that fell short replaces linear scaling.
        let shortfall = self.status.verification.as_ref().filter(|v| {
            v.state == Verification::SHORTFALL
                && v.replicas == target.replicas
                && v.identity == identity
        });
        let (capacity_rps, replicas_tested) = match shortfall.and_then(|v| v.measured_fleet_rps) {
            Some(measured) if measured > 0.0 => (measured, target.replicas),
            _ => (evidence.capacity_rps, evidence.replicas_tested),
        };
        let gpus = spec
            .gpus_per_replica
            .or(evidence.gpus_per_replica)
            .unwrap_or(1);
        let input = PlanInput {
            peak_rps: peak,
            capacity_rps,
            replicas_tested,
            gpus_per_replica: gpus,
            target_utilization: spec.target_utilization,
        };
        let required = requirement(input, spec.min_replicas.max(1), spec.max_replicas)
            .map_err(|e| Blocked::new(READY, reason::INVALID_SPEC, e.to_string()))?;
        let history: Vec<(i64, u32)> = self
            .status
            .recommendations
            .iter()
            .map(|r| (r.time.0.as_second(), r.replicas))
            .collect();
        let cooldown = Duration::from(spec.scale_down.cooldown).as_secs() as i64;
        let stable = stabilize(
            self.before.proposed_replicas,
            &history,
            self.now.as_second(),
            required.replicas,
            cooldown,
            spec.scale_down.min_step,
        );
        self.status.recommendations = stable
            .history
            .iter()
            .map(|&(t, replicas)| Recommendation {
                time: Time(Timestamp::from_second(t).unwrap_or(self.now)),
                replicas,
            })
            .collect();
        let proposal = stable.proposal;
        let mut lines = proposal_lines(&required, stable.note, proposal, gpus);
        if replicas_tested == target.replicas && shortfall.is_some() {
            lines.insert(
                0,
                format!(
                    "capacity per replica measured on {} replicas at revalidation: {} / {} = \
                     {:.3} RPS",
                    target.replicas,
                    capacity_rps,
                    target.replicas,
                    required.plan.capacity_per_replica_rps
                ),
            );
        }
        self.status.capacity_per_replica_rps = Some(round3(required.plan.capacity_per_replica_rps));
        self.status.required_replicas = Some(required.replicas);
        self.status.proposed_replicas = Some(proposal);
        self.status.proposed_gpus = Some(u64::from(proposal) * u64::from(gpus));
        self.status.arithmetic = lines;
        self.status.evidence = Some(evidence.record.clone());

        let message = format!(
            "{proposal} replicas ({} GPUs) for a peak of {} RPS at {} RPS per replica \
             and {:.0}% utilization; the workload has {}",
            u64::from(proposal) * u64::from(gpus),
            round3(peak),
            round3(required.plan.capacity_per_replica_rps),
            spec.target_utilization * 100.0,
            target.replicas
        );
        let changed = self.before.proposed_replicas != Some(proposal);
        self.condition(READY, Cond::True, reason::PROPOSED, message.clone());
        if changed {
            self.event(EventType::Normal, reason::PROPOSED, &message)
                .await;
            self.ctx.metrics.plan_event("proposed");
        }

        let mut next = self.ctx.options.plan_resync;
        match spec.mode {
            PlanMode::Apply => self.apply(&target, proposal).await?,
            PlanMode::Propose => {
                self.condition(
                    plan_cond::APPLIED,
                    Cond::False,
                    reason::PROPOSE_ONLY,
                    "mode is Propose: the proposal is not written to the workload",
                );
                if let Some(gitops) = &spec.gitops {
                    let recheck = self
                        .pull_request(gitops, proposal, gpus, peak, &evidence)
                        .await?;
                    next = next.min(recheck);
                }
            }
        }
        let poll = self
            .revalidate(&target, &evidence, peak, &identity, &declared, false)
            .await?;
        if let Some(p) = &spec.peak.prometheus {
            next = next.min(Duration::from(p.refresh).max(Duration::from_secs(1)));
        }
        if let Some(poll) = poll {
            next = next.min(poll);
        }
        Ok(Action::requeue(next))
    }

    /// `spec.gitops`: the proposal as one pull request. Returns when to look again.
    async fn pull_request(
        &mut self,
        gitops: &GitOps,
        proposal: u32,
        gpus: u32,
        peak: f64,
        evidence: &Evidence,
    ) -> Result<Duration, Blocked> {
        let recheck = Duration::from(gitops.recheck).max(Duration::from_secs(1));
        let sweep = evidence
            .benchmark
            .as_ref()
            .map(|b| rate_points(b, evidence.cache_mode))
            .unwrap_or_default();
        let inputs = pull_request::Inputs {
            plan: format!("{}/{}", self.namespace, self.plan.name_any()),
            plan_name: &self.plan.name_any(),
            namespace: &self.namespace,
            target_ref: &self.plan.spec.target_ref,
            gitops,
            replicas: proposal,
            gpus: Some(u64::from(proposal) * u64::from(gpus)),
            peak_rps: peak,
            peak_source: self.status.peak_source.as_deref(),
            arithmetic: &self.status.arithmetic,
            evidence: self.status.evidence.as_ref(),
            sweep,
            gate: evidence
                .manifest
                .as_ref()
                .map(WorkloadManifest::gate_config),
            said_edited: conditions::find(&self.before.conditions, plan_cond::PULL_REQUEST)
                .is_some_and(|c| c.reason == reason::BRANCH_EDITED_BY_HUMAN),
        };
        let prev = self.before.pull_request.as_ref();
        let hash = pull_request::inputs_hash(&inputs);
        let looked = conditions::find(&self.before.conditions, plan_cond::PULL_REQUEST)
            .is_some_and(|c| pull_request::SETTLED.contains(&c.reason.as_str()));
        if looked && pull_request::fresh(prev, &hash, &self.time(), recheck) {
            return Ok(recheck);
        }
        // A rate limit holds until the forge said, whatever wakes the plan meanwhile.
        let wait = prev
            .and_then(|p| p.not_before.as_ref())
            .map(|t| t.0.as_millisecond() - self.now.as_millisecond())
            .filter(|&ms| ms > 0);
        let held =
            conditions::find(&self.before.conditions, plan_cond::PULL_REQUEST).and_then(|c| {
                let reason = pull_request::HELD.into_iter().find(|r| *r == c.reason)?;
                Some((reason, c.message.clone()))
            });
        if let (Some(wait), Some((reason, message))) = (wait, held) {
            return Err(Blocked {
                condition: plan_cond::PULL_REQUEST,
                reason,
                message,
                retry: Retry::After(Duration::from_millis(wait as u64)),
            });
        }
        // One plan at a time talks to the forges: their write limits are per account.
        let _turn = self.ctx.gitops.lock().await;
        match pull_request::sync(&self.ctx.client, &inputs, prev, self.time()).await {
            Ok(done) => {
                self.status.pull_request = Some(done.status);
                let status = if done.holds { Cond::True } else { Cond::False };
                let news =
                    self.is_news(plan_cond::PULL_REQUEST, status, done.reason, &done.message);
                self.condition(
                    plan_cond::PULL_REQUEST,
                    status,
                    done.reason,
                    done.message.clone(),
                );
                if done.news || (news && !done.holds) {
                    let type_ = if done.holds {
                        EventType::Normal
                    } else {
                        EventType::Warning
                    };
                    self.event(type_, done.reason, &done.message).await;
                    self.ctx.metrics.plan_event("pull_request");
                }
                Ok(recheck)
            }
            Err(f) => {
                let mut kept = f.status.map(|k| *k).or_else(|| prev.cloned());
                if let (Some(k), Some(after)) = (kept.as_mut(), f.retry_after) {
                    // Whole seconds, as the status keeps times: rounded up, never early.
                    let ms = self.now.as_millisecond() + after.as_millis() as i64;
                    k.not_before = Timestamp::from_second((ms + 999).div_euclid(1000))
                        .ok()
                        .map(Time);
                }
                if kept.is_some() {
                    self.status.pull_request = kept;
                }
                let retry = match (f.retry_after, f.retryable) {
                    (Some(d), _) => Retry::After(d),
                    (None, true) => Retry::Backoff,
                    (None, false) => Retry::Resync,
                };
                Err(Blocked {
                    condition: plan_cond::PULL_REQUEST,
                    reason: f.reason,
                    message: f.message,
                    retry,
                })
            }
        }
    }

    /// The workload through discovery: its kind must be served and have `/scale`.
    async fn workload(&mut self) -> Result<Workload, Blocked> {
        let r = &self.plan.spec.target_ref;
        let (group, version) = r
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", r.api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &r.kind);
        let (resource, caps) = match kube::discovery::pinned_kind(&self.ctx.client, &gvk).await {
            Ok(found) => found,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                return Err(Blocked::new(
                    READY,
                    reason::TARGET_NOT_FOUND,
                    format!(
                        "spec.targetRef: the API server does not serve {}",
                        r.api_version
                    ),
                )
                .backoff());
            }
            Err(kube::Error::Discovery(_)) => {
                return Err(Blocked::new(
                    READY,
                    reason::TARGET_NOT_FOUND,
                    format!(
                        "spec.targetRef: {} has no kind {} (check apiVersion and kind)",
                        r.api_version, r.kind
                    ),
                )
                .backoff());
            }
            Err(e) => return Err(api_blocked("discovering the target's kind", e)),
        };
        if !caps
            .subresources
            .iter()
            .any(|(sub, _)| sub.plural == "scale")
        {
            return Err(Blocked::new(
                READY,
                reason::NO_SCALE_SUBRESOURCE,
                format!(
                    "spec.targetRef: {} {} has no /scale subresource, so its replicas \
                     cannot be planned",
                    r.api_version, r.kind
                ),
            ));
        }
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.client.clone(), &self.namespace, &resource);
        let object = api
            .get_opt(&r.name)
            .await
            .map_err(|e| api_blocked("reading the target", e))?;
        let Some(object) = object else {
            return Err(Blocked::new(
                READY,
                reason::TARGET_NOT_FOUND,
                format!("{} {}/{} does not exist", r.kind, self.namespace, r.name),
            )
            .backoff());
        };
        let scale = api
            .get_scale(&r.name)
            .await
            .map_err(|e| api_blocked("reading the target's /scale", e))?;
        let object = serde_json::to_value(&object).unwrap_or(Value::Null);
        let ready = object
            .pointer("/status/readyReplicas")
            .and_then(Value::as_u64)
            .map(|n| n as u32)
            .or_else(|| object.pointer("/status").map(|_| 0));
        Ok(Workload {
            api,
            object,
            replicas: scale.spec.and_then(|s| s.replicas).unwrap_or(0).max(0) as u32,
            ready,
        })
    }

    /// The capacity evidence, refused when it does not match the workload or is stale.
    async fn evidence(&mut self, declared: &DeclaredIdentity) -> Result<Evidence, Blocked> {
        let capacity = &self.plan.spec.capacity;
        if let Some(per_replica) = capacity.per_replica_rps {
            if !(per_replica.is_finite() && per_replica > 0.0) {
                return Err(Blocked::new(
                    READY,
                    reason::INVALID_SPEC,
                    format!("spec.capacity.perReplicaRps: {per_replica} must be positive"),
                ));
            }
            let evidence = Evidence::typed_in(per_replica, capacity);
            self.valid_evidence(&evidence.record);
            return Ok(evidence);
        }
        let Some(reference) = &capacity.benchmark_ref else {
            return Err(Blocked::new(
                READY,
                reason::INVALID_SPEC,
                "spec.capacity: give benchmarkRef or perReplicaRps",
            ));
        };
        let api: Api<CapacityBenchmark> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let cb = api
            .get_opt(&reference.name)
            .await
            .map_err(|e| api_blocked("reading the CapacityBenchmark", e))?;
        let Some(cb) = cb else {
            return Err(Blocked::new(
                plan_cond::EVIDENCE_VALID,
                reason::BENCHMARK_NOT_FOUND,
                format!(
                    "CapacityBenchmark {}/{} does not exist",
                    self.namespace, reference.name
                ),
            )
            .backoff());
        };
        let max_age = self.plan.spec.evidence_max_age.map(Duration::from);
        let found = benchmark_capacity(&cb, reference.cache_mode, self.now, max_age);
        let mut found = match found {
            Ok(found) => found,
            Err(refusals) => {
                self.status.evidence = Some(PlanEvidence {
                    source: format!("CapacityBenchmark {}", cb.name_any()),
                    generation: cb.metadata.generation,
                    refused: refusals.clone(),
                    ..Default::default()
                });
                return Err(Blocked::new(
                    plan_cond::EVIDENCE_VALID,
                    reason::EVIDENCE_REFUSED,
                    refusals.join("; "),
                ));
            }
        };
        let manifest = workload_manifest(&self.ctx.client, &self.namespace, &cb.spec.workload)
            .await
            .map_err(|e| match e {
                ManifestError::Api(e) => api_blocked("reading the benchmark's manifest", e),
                ManifestError::Missing(m) | ManifestError::Invalid(m) => Blocked::new(
                    plan_cond::EVIDENCE_VALID,
                    reason::EVIDENCE_REFUSED,
                    format!("the benchmark's workload manifest: {m}"),
                ),
            })?;
        let comparison = workload::compare(&manifest, declared);
        found.record.unchecked = comparison.unchecked;
        let name = cb.name_any();
        found.benchmark = Some(cb);
        found.manifest = Some(manifest);
        if !comparison.refused.is_empty() {
            found.record.refused = comparison.refused.clone();
            self.status.evidence = Some(found.record.clone());
            // Kept for a revalidation of what the workload runs now.
            self.mismatched = Some(found);
            return Err(Blocked::new(
                plan_cond::EVIDENCE_VALID,
                reason::EVIDENCE_REFUSED,
                format!(
                    "CapacityBenchmark {name} measured another deployment: {}",
                    comparison.refused.join("; ")
                ),
            ));
        }
        self.valid_evidence(&found.record);
        Ok(found)
    }

    /// The revalidation of this topology and identity, once it measured a capacity: the
    /// evidence when the benchmark's no longer matches what the workload runs.
    fn revalidated(
        &mut self,
        refused: &Evidence,
        target: &Workload,
        identity: &str,
    ) -> Option<Evidence> {
        let v = self.status.verification.clone()?;
        let done = v.state == Verification::VERIFIED || v.state == Verification::SHORTFALL;
        let measured = v.measured_fleet_rps.filter(|m| *m > 0.0)?;
        if !(done && v.replicas == target.replicas && v.identity == identity) {
            return None;
        }
        let record = PlanEvidence {
            source: format!("CapacityBenchmark {} (revalidation)", v.benchmark),
            cache_mode: Some(refused.cache_mode),
            capacity_rps: Some(measured),
            replicas_tested: Some(v.replicas),
            reason: Some(format!(
                "{} measured another deployment ({}); this revalidation measured {} replicas \
                 running {identity}",
                refused.record.source,
                refused.record.refused.join("; "),
                v.replicas
            )),
            ..Default::default()
        };
        self.status.evidence = Some(record.clone());
        self.condition(
            plan_cond::EVIDENCE_VALID,
            Cond::True,
            reason::REVALIDATED,
            format!(
                "{} is used: {}",
                record.source,
                record.reason.clone().unwrap_or_default()
            ),
        );
        Some(Evidence {
            capacity_rps: measured,
            replicas_tested: v.replicas,
            gpus_per_replica: refused.gpus_per_replica,
            cache_mode: refused.cache_mode,
            benchmark: refused.benchmark.clone(),
            manifest: refused.manifest.clone(),
            record,
        })
    }

    fn valid_evidence(&mut self, record: &PlanEvidence) {
        let mut message = format!("{} is used", record.source);
        if !record.unchecked.is_empty() {
            message.push_str(&format!(
                "; not compared: {}",
                record
                    .unchecked
                    .iter()
                    .map(|u| u.split(':').next().unwrap_or(u))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        self.condition(
            plan_cond::EVIDENCE_VALID,
            Cond::True,
            reason::MATCHED,
            message,
        );
    }

    /// The peak to plan for: static, or read from Prometheus (again after `refresh`).
    async fn peak(&mut self) -> Result<f64, Blocked> {
        let peak = &self.plan.spec.peak;
        if let Some(rps) = peak.rps {
            if !(rps.is_finite() && rps > 0.0) {
                return Err(Blocked::new(
                    READY,
                    reason::INVALID_SPEC,
                    format!("spec.peak.rps: {rps} must be positive"),
                ));
            }
            self.status.peak_rps = Some(rps);
            self.status.peak_source = Some("static (spec.peak.rps)".into());
            self.status.peak_read_at = None;
            return Ok(rps);
        }
        let Some(p) = &peak.prometheus else {
            return Err(Blocked::new(
                READY,
                reason::INVALID_SPEC,
                "spec.peak: give rps or prometheus",
            ));
        };
        let fresh = self.before.observed_generation == Some(self.generation)
            && self.before.peak_read_at.as_ref().is_some_and(|t| {
                let age = self.now.as_second() - t.0.as_second();
                age >= 0 && (age as u64) < Duration::from(p.refresh).as_secs()
            });
        if let (true, Some(rps)) = (fresh, self.before.peak_rps) {
            return Ok(rps);
        }
        // Until this read succeeds no earlier one counts as fresh: a failed read is
        // retried at the next reconcile, not answered from the last good one.
        self.status.peak_read_at = None;
        let end = self.now.as_millisecond() as f64 / 1000.0;
        let start = end - Duration::from(p.lookback).as_secs_f64();
        let step = Duration::from(p.step).as_secs_f64().max(1.0);
        let timeout = Duration::from(p.timeout).max(Duration::from_secs(1));
        let query = goodput_engine_metrics::prometheus_api::query_range_total(
            &self.ctx.http,
            &p.url,
            &p.query,
            start,
            end,
            step,
        );
        let points = match tokio::time::timeout(timeout, query).await {
            Err(_) => {
                return Err(Blocked::new(
                    READY,
                    reason::PEAK_QUERY_FAILED,
                    format!(
                        "the Prometheus peak query did not answer within {}",
                        secs(p.timeout)
                    ),
                )
                .backoff());
            }
            Ok(Err(e)) => {
                return Err(Blocked::new(
                    READY,
                    reason::PEAK_QUERY_FAILED,
                    format!("the Prometheus peak query failed: {e}"),
                )
                .backoff());
            }
            Ok(Ok(points)) => points,
        };
        let rates: Vec<f64> = points.iter().map(|&(_, v)| v).collect();
        let estimate =
            goodput_core::planning::peak::peak_from_rates(&rates, p.quantile, p.growth_factor)
                .map_err(|e| {
                    Blocked::new(
                        READY,
                        reason::PEAK_EMPTY,
                        format!(
                            "the Prometheus peak query over the last {}: {e}",
                            secs(p.lookback)
                        ),
                    )
                    .backoff()
                })?;
        self.status.peak_rps = Some(round3(estimate.peak_rps));
        self.status.peak_source = Some(format!(
            "{} ({} over the last {})",
            estimate.describe(),
            p.query,
            secs(p.lookback)
        ));
        self.status.peak_read_at = Some(self.time());
        Ok(round3(estimate.peak_rps))
    }
}

/// A spec duration as people say it (`336h`).
fn secs(d: kube::core::Duration) -> String {
    duration_text(Duration::from(d).as_secs() as i64)
}

/// Three decimals: rates as people read them, without float noise in the status.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The capacity a benchmark gives a plan, or every reason it gives none: not finished
/// for its current spec, not Ready, no passing point in the cache mode, older than
/// `max_age`.
fn benchmark_capacity(
    cb: &CapacityBenchmark,
    cache: Option<CacheMode>,
    now: Timestamp,
    max_age: Option<Duration>,
) -> Result<Evidence, Vec<String>> {
    let name = cb.name_any();
    let Some(status) = &cb.status else {
        return Err(vec![format!("CapacityBenchmark {name} has not run yet")]);
    };
    let current = status.observed_generation == cb.metadata.generation;
    if status.phase != Some(Phase::Succeeded)
        || !current
        || !conditions::is_true(&status.conditions, READY)
    {
        let phase = status
            .phase
            .map_or("not started".to_owned(), |p| format!("{p:?}"));
        let why = if current {
            format!("phase {phase}")
        } else {
            "its spec changed since the result".to_owned()
        };
        return Err(vec![format!(
            "CapacityBenchmark {name} is not Ready ({why}): no finished result to plan with"
        )]);
    }
    let mut refusals = Vec::new();
    let mode = match cache {
        Some(mode) => status.modes.iter().find(|m| m.cache == mode),
        None => {
            // The lowest capacity among the modes run; a mode without a passing rate is
            // the lowest of all.
            status.modes.iter().min_by(|a, b| {
                let key = |m: &goodput_api::ModeCapacity| m.capacity_rps.unwrap_or(-1.0);
                key(a).total_cmp(&key(b))
            })
        }
    };
    let Some(mode) = mode else {
        let asked = cache.map_or("any cache mode".to_owned(), |c| format!("cache mode {c}"));
        return Err(vec![format!(
            "CapacityBenchmark {name} has no result for {asked}"
        )]);
    };
    let capacity = mode.capacity_rps.filter(|c| *c > 0.0);
    if capacity.is_none() {
        refusals.push(format!(
            "CapacityBenchmark {name} has no passing point in cache mode {}: no rate met \
             every class's SLOs, so there is no capacity to plan with",
            mode.cache
        ));
    }
    let ready_at =
        conditions::find(&status.conditions, READY).map(|c| c.last_transition_time.clone());
    if let (Some(max), Some(at)) = (max_age, &ready_at) {
        let age = now.as_second() - at.0.as_second();
        if age > max.as_secs() as i64 {
            refusals.push(format!(
                "CapacityBenchmark {name} is {} old, more than evidenceMaxAge {}: \
                 measure again",
                hours(age),
                duration_text(max.as_secs() as i64)
            ));
        }
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    let capacity = capacity.unwrap_or_default();
    let replicas_tested = match mode.capacity_per_replica_rps {
        Some(per) if per > 0.0 => (capacity / per).round().max(1.0) as u32,
        _ => 1,
    };
    let point = status.points.iter().find(|p| {
        p.cache == mode.cache
            && p.kind == PointKind::Rate
            && p.verdict == FinishedPoint::PASS
            && p.offered_rps.is_some_and(|r| (r - capacity).abs() < 1e-9)
    });
    Ok(Evidence {
        capacity_rps: capacity,
        replicas_tested,
        gpus_per_replica: cb.spec.target.gpus_per_replica,
        cache_mode: mode.cache,
        benchmark: None,
        manifest: None,
        record: PlanEvidence {
            source: format!("CapacityBenchmark {name}"),
            generation: cb.metadata.generation,
            cache_mode: Some(mode.cache),
            capacity_rps: Some(capacity),
            replicas_tested: Some(replicas_tested),
            weakest_class: point.and_then(|p| p.weakest_class.clone()),
            weakest_attainment: point.and_then(|p| p.weakest_attainment),
            pack: status.pack.clone(),
            measured_at: ready_at,
            ..Default::default()
        },
    })
}

/// `26h`, `3d 2h`: an age as people say it.
fn hours(seconds: i64) -> String {
    let h = seconds / 3600;
    if h >= 48 && h % 24 == 0 {
        format!("{}d", h / 24)
    } else if h >= 48 {
        format!("{}d {}h", h / 24, h % 24)
    } else {
        format!("{h}h")
    }
}

#[cfg(test)]
mod tests;
