//! The `ServingPlan` controller, one pipeline per reconcile:
//! the workload (found through discovery, its `/scale` and what it declares it runs) →
//! the evidence (the benchmark's capacity, refused when it does not match) → the peak
//! (static or Prometheus) → the proposal (the planning core's formula, bounds and
//! scale-down rule) → apply (`/scale`, or the autoscaler's minimum) → revalidation (an
//! owned CapacityBenchmark on the new topology) → status, written only when it changed.
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
use crate::api::conditions::plan::{self as plan_cond, reason};
use crate::api::conditions::{self, READY, Status as Cond};
use crate::api::{
    AppliedScale, CacheMode, CapacityBenchmark, CapacityBenchmarkSpec, CapacityBenchmarkStatus,
    FinishedPoint, GitOps, PeakForecast, Phase, PlanEvidence, PlanMode, PointKind, RateSweep,
    Recommendation, ServiceTarget, ServingPlan, ServingPlanStatus, Target, Verification,
    WorkloadSource,
};
use crate::planning::PlanInput;
use crate::planning::serving::{arithmetic, duration_text, requirement, stabilize};
use crate::workload::WorkloadManifest;

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

/// A proposal's arithmetic in words: the formula with its numbers, any clamp or hold, and
/// the GPU count. The controller and `goodput propose` both write it so.
fn proposal_lines(
    required: &crate::planning::serving::Requirement,
    hold: Option<String>,
    proposal: u32,
    gpus: u32,
) -> Vec<String> {
    let mut lines = vec![arithmetic(&required.plan)];
    lines.extend(required.notes.iter().cloned());
    lines.extend(hold);
    lines.push(format!(
        "{proposal} replicas × {gpus} GPUs/replica = {} GPUs",
        u64::from(proposal) * u64::from(gpus)
    ));
    lines
}

/// A plan's proposal computed from files, with no cluster (`goodput propose`).
#[derive(Debug)]
pub struct OfflineProposal {
    /// The replicas proposed.
    pub replicas: u32,
    /// Their GPUs.
    pub gpus: u64,
    /// The peak planned for.
    pub peak_rps: f64,
    /// Where the peak came from.
    pub peak_source: String,
    /// The arithmetic, as the status would have it.
    pub arithmetic: Vec<String>,
    /// The evidence.
    pub evidence: PlanEvidence,
    /// The benchmark's rate points in the evidence's cache mode.
    pub sweep: Vec<FinishedPoint>,
    /// The benchmark's gate, when its manifest is inline.
    pub gate: Option<crate::analysis::GateConfig>,
}

/// A benchmark's rate points in one cache mode: the sweep a proposal shows.
fn rate_points(cb: &CapacityBenchmark, cache: CacheMode) -> Vec<&FinishedPoint> {
    cb.status.as_ref().map_or_else(Vec::new, |s| {
        s.points
            .iter()
            .filter(|p| p.cache == cache && p.kind == PointKind::Rate)
            .collect()
    })
}

/// Where an offline proposal's measured capacity comes from.
pub enum OfflineEvidence<'a> {
    /// None given: the plan's capacity must be typed in.
    None,
    /// The plan's `capacity.benchmarkRef`, as `kubectl get -o yaml` prints it.
    Benchmark(&'a CapacityBenchmark),
    /// A capacity pack `goodput bench` wrote: its `sweep.json` and frozen manifest.
    Pack {
        /// `sweep.json`.
        result: &'a crate::bench::result::BenchResult,
        /// `workload-manifest.yaml`.
        manifest: &'a WorkloadManifest,
        /// Where the pack is, for the evidence.
        path: String,
    },
}

/// The capacity a capacity pack measured, as a plan's evidence: the cache mode the plan
/// names, else the one the pack planned with, else the lowest capacity; its points turned
/// into status entries by the controller's own function.
fn pack_capacity(
    reference: &crate::api::BenchmarkRef,
    result: &crate::bench::result::BenchResult,
    manifest: &WorkloadManifest,
    path: &str,
) -> Result<(Evidence, Vec<FinishedPoint>), Vec<String>> {
    if result.name != reference.name {
        return Err(vec![format!(
            "the pack is of benchmark {}, but the plan names {}",
            result.name, reference.name
        )]);
    }
    let mode = match reference.cache_mode.or(result.plan_cache_mode) {
        Some(cache) => result.modes.iter().find(|m| m.cache == cache),
        None => result
            .modes
            .iter()
            .filter(|m| m.capacity_rps.is_some())
            .min_by(|a, b| {
                let c = |m: &crate::bench::result::ModeResult| m.capacity_rps.unwrap_or(0.0);
                c(a).total_cmp(&c(b))
            }),
    };
    let Some((mode, capacity)) = mode.and_then(|m| Some((m, m.capacity_rps?))) else {
        return Err(vec![format!(
            "the pack at {path} has no passing rate to plan with (its plan.md says why)"
        )]);
    };
    let points: Vec<FinishedPoint> = mode
        .points
        .iter()
        .map(|p| {
            super::status::finished_point(
                crate::bench::driver::PointKey::Rate {
                    cache: mode.cache,
                    rate: p.offered_rps,
                    repeat: p.repeat,
                },
                &p.report,
                &crate::loadgen::point::Validity {
                    valid: p.valid,
                    reasons: p.validity_reasons.clone(),
                    client_behind: p.client_behind,
                    notes: p.validity_notes.clone(),
                },
                manifest,
                p.dir.clone(),
                Some(super::status::Held {
                    busy_seconds: p.cost.real_time_seconds,
                    requests_sent: p.cost.requests_sent,
                    unsent_seconds: p.early_stop.as_ref().map(|e| e.unsent_s),
                }),
            )
        })
        .collect();
    let at_capacity = points
        .iter()
        .find(|p| p.verdict == FinishedPoint::PASS && p.offered_rps == Some(capacity));
    let record = PlanEvidence {
        source: format!("capacity pack of {}", result.name),
        cache_mode: Some(mode.cache),
        capacity_rps: Some(capacity),
        replicas_tested: Some(result.target.replicas),
        weakest_class: at_capacity.and_then(|p| p.weakest_class.clone()),
        weakest_attainment: at_capacity.and_then(|p| p.weakest_attainment),
        pack: Some(path.to_owned()),
        ..Default::default()
    };
    let evidence = Evidence {
        capacity_rps: capacity,
        replicas_tested: result.target.replicas.max(1),
        gpus_per_replica: Some(result.target.gpus_per_replica),
        cache_mode: mode.cache,
        benchmark: None,
        manifest: Some(manifest.clone()),
        record,
    };
    Ok((evidence, points))
}

/// The evidence of an offline proposal, its rate points and gate.
fn offline_evidence(
    plan: &ServingPlan,
    source: OfflineEvidence<'_>,
    now: Timestamp,
) -> Result<(Evidence, Vec<FinishedPoint>), Vec<String>> {
    let spec = &plan.spec;
    if let Some(per_replica) = spec.capacity.per_replica_rps {
        return Ok((Evidence::typed_in(per_replica, &spec.capacity), Vec::new()));
    }
    let Some(reference) = &spec.capacity.benchmark_ref else {
        return Err(vec![
            "spec.capacity: give benchmarkRef or perReplicaRps".into(),
        ]);
    };
    let cb = match source {
        OfflineEvidence::Benchmark(cb) => cb,
        OfflineEvidence::Pack {
            result,
            manifest,
            path,
        } => return pack_capacity(reference, result, manifest, &path),
        OfflineEvidence::None => {
            return Err(vec![format!(
                "spec.capacity.benchmarkRef names CapacityBenchmark {}: give it with \
                 --benchmark (kubectl get capacitybenchmark {} -o yaml), or the capacity pack \
                 `goodput bench` wrote with --pack",
                reference.name, reference.name
            )]);
        }
    };
    if cb.name_any() != reference.name {
        return Err(vec![format!(
            "--benchmark is CapacityBenchmark {}, but the plan names {}",
            cb.name_any(),
            reference.name
        )]);
    }
    let max_age = spec.evidence_max_age.map(Duration::from);
    let mut found = benchmark_capacity(cb, reference.cache_mode, now, max_age)?;
    let sweep = rate_points(cb, found.cache_mode)
        .into_iter()
        .cloned()
        .collect();
    found.manifest = cb.spec.workload.manifest.as_deref().cloned();
    Ok((found, sweep))
}

/// The proposal of `plan` from files: the same evidence checks (a benchmark must be
/// Ready, fresh and have a passing point), formula and arithmetic as the controller, with
/// no scale-down history (there is none offline) and no comparison with a live workload.
/// `peak` replaces a Prometheus peak, which needs a server.
pub fn offline_proposal(
    plan: &ServingPlan,
    source: OfflineEvidence<'_>,
    peak: Option<f64>,
    now: Timestamp,
) -> Result<OfflineProposal, Vec<String>> {
    let spec = &plan.spec;
    let (peak_rps, peak_source) = match (peak, spec.peak.rps) {
        (Some(p), _) => (p, "given on the command line".to_owned()),
        (None, Some(p)) => (p, "static (spec.peak.rps)".to_owned()),
        (None, None) => {
            return Err(vec![
                "spec.peak is a Prometheus query, which needs a server: give the peak with \
                 --peak"
                    .into(),
            ]);
        }
    };
    let (evidence, sweep) = offline_evidence(plan, source, now)?;
    let gpus = spec
        .gpus_per_replica
        .or(evidence.gpus_per_replica)
        .unwrap_or(1);
    let input = PlanInput {
        peak_rps,
        capacity_rps: evidence.capacity_rps,
        replicas_tested: evidence.replicas_tested,
        gpus_per_replica: gpus,
        target_utilization: spec.target_utilization,
    };
    let required = requirement(input, spec.min_replicas.max(1), spec.max_replicas)
        .map_err(|e| vec![e.to_string()])?;
    let replicas = required.replicas;
    Ok(OfflineProposal {
        replicas,
        gpus: u64::from(replicas) * u64::from(gpus),
        peak_rps,
        peak_source,
        arithmetic: proposal_lines(&required, None, replicas, gpus),
        evidence: evidence.record,
        sweep,
        gate: evidence
            .manifest
            .as_ref()
            .map(WorkloadManifest::gate_config),
    })
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
    fn typed_in(per_replica: f64, capacity: &crate::api::CapacitySource) -> Self {
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
        let query = crate::engine_metrics::prometheus_api::query_range_total(
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
        let estimate = crate::planning::peak::peak_from_rates(&rates, p.quantile, p.growth_factor)
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

    /// Apply mode: the workload's `/scale`, or the minimum of the autoscaler that manages
    /// it. Nothing is written when an autoscaler's maximum is below the proposal.
    async fn apply(&mut self, target: &Workload, proposal: u32) -> Result<(), Blocked> {
        let r = &self.plan.spec.target_ref;
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let manager = self.autoscaler().await?;
        let via = match manager {
            Some(Autoscaler {
                via,
                max,
                current_min,
                api,
                name,
                field,
            }) => {
                if proposal > max {
                    let message = format!(
                        "{via} manages {} and its maximum ({max}) is below the proposal \
                         ({proposal}); nothing was written: raise its maximum",
                        r.printable()
                    );
                    return Err(Blocked {
                        condition: plan_cond::APPLIED,
                        reason: reason::AUTOSCALER_MAX_CONFLICT,
                        message,
                        retry: Retry::Resync,
                    });
                }
                if current_min != Some(proposal) {
                    api.patch(
                        &name,
                        &pp,
                        &Patch::Merge(json!({"spec": {field: proposal}})),
                    )
                    .await
                    .map_err(|e| self.scale_failed(&via, e))?;
                    self.applied(proposal, &via).await;
                }
                format!("{via}: its {field} holds the proposal")
            }
            None => {
                if target.replicas != proposal {
                    target
                        .api
                        .patch_scale(
                            &r.name,
                            &pp,
                            &Patch::Merge(json!({"spec": {"replicas": proposal}})),
                        )
                        .await
                        .map_err(|e| self.scale_failed("scale", e))?;
                    self.status.current_replicas = Some(proposal);
                    self.applied(proposal, "scale").await;
                }
                "the workload's /scale holds the proposal".to_owned()
            }
        };
        self.condition(
            plan_cond::APPLIED,
            Cond::True,
            reason::APPLIED,
            format!("{proposal} replicas: {via}"),
        );
        Ok(())
    }

    async fn applied(&mut self, replicas: u32, via: &str) {
        self.status.applied = Some(AppliedScale {
            replicas,
            via: via.to_owned(),
            time: self.time(),
        });
        self.event(
            EventType::Normal,
            reason::APPLIED,
            &format!("Set {replicas} replicas through {via}"),
        )
        .await;
        self.ctx.metrics.plan_event("applied");
    }

    fn scale_failed(&self, via: &str, e: kube::Error) -> Blocked {
        self.ctx.metrics.plan_event("apply_failed");
        Blocked {
            condition: plan_cond::APPLIED,
            reason: reason::SCALE_FAILED,
            message: format!("writing the replicas through {via} failed: {e}; retrying"),
            retry: Retry::Backoff,
        }
    }

    /// The HPA (autoscaling/v2) or KEDA ScaledObject that scales the workload, if any.
    async fn autoscaler(&self) -> Result<Option<Autoscaler>, Blocked> {
        let r = &self.plan.spec.target_ref;
        let hpas: Api<HorizontalPodAutoscaler> =
            Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let list = hpas
            .list(&ListParams::default())
            .await
            .map_err(|e| api_blocked("listing HorizontalPodAutoscalers", e))?;
        for hpa in list {
            let spec = &hpa.spec;
            let t = &spec.scale_target_ref;
            let same_group = t
                .api_version
                .as_deref()
                .is_none_or(|v| group_of(v) == r.group());
            if t.kind == r.kind && t.name == r.name && same_group {
                let api = Api::namespaced_with(
                    self.ctx.client.clone(),
                    &self.namespace,
                    &kube::api::ApiResource::erase::<HorizontalPodAutoscaler>(&()),
                );
                return Ok(Some(Autoscaler {
                    via: format!("hpa/{}", hpa.name_any()),
                    max: spec.max_replicas.max(0) as u32,
                    current_min: spec.min_replicas.map(|m| m.max(0) as u32),
                    api,
                    name: hpa.name_any(),
                    field: "minReplicas",
                }));
            }
        }
        // KEDA is optional: a cluster without its CRD has no ScaledObjects.
        let gvk = GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject");
        let Ok((resource, _)) = kube::discovery::pinned_kind(&self.ctx.client, &gvk).await else {
            return Ok(None);
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.client.clone(), &self.namespace, &resource);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| api_blocked("listing KEDA ScaledObjects", e))?;
        for so in list {
            let spec = so.data.get("spec").cloned().unwrap_or(Value::Null);
            let t = spec.get("scaleTargetRef").cloned().unwrap_or(Value::Null);
            let kind = t
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("Deployment");
            let group = t
                .get("apiVersion")
                .and_then(Value::as_str)
                .map_or("apps", group_of);
            if t.get("name").and_then(Value::as_str) == Some(r.name.as_str())
                && kind == r.kind
                && group == r.group()
            {
                let read = |field: &str, default: u64| {
                    spec.get(field).and_then(Value::as_u64).unwrap_or(default) as u32
                };
                return Ok(Some(Autoscaler {
                    via: format!("scaledobject/{}", so.name_any()),
                    max: read("maxReplicaCount", 100),
                    current_min: spec
                        .get("minReplicaCount")
                        .and_then(Value::as_u64)
                        .map(|m| m as u32),
                    api: api.clone(),
                    name: so.name_any(),
                    field: "minReplicaCount",
                }));
            }
        }
        Ok(None)
    }

    /// Benchmarks the workload again once it reaches a new replica count (or declares
    /// another engine version or model revision) with every replica ready, and reads the
    /// result. Returns how soon to look again while one waits or runs.
    async fn revalidate(
        &mut self,
        target: &Workload,
        evidence: &Evidence,
        peak: f64,
        identity: &str,
        declared: &DeclaredIdentity,
        mismatched: bool,
    ) -> Result<Option<Duration>, Blocked> {
        let spec = &self.plan.spec;
        if !spec.revalidation.enabled {
            self.condition(
                plan_cond::VERIFIED,
                Cond::Unknown,
                reason::NOT_REVALIDATED,
                "revalidation is disabled",
            );
            return Ok(None);
        }
        let n = target.replicas;
        let previous = self.status.verification.clone();
        let needed = match &previous {
            Some(v) => v.replicas != n || v.identity != identity,
            // The benchmarked topology needs none, unless it now runs something else.
            None => mismatched || n != evidence.replicas_tested || evidence.benchmark.is_none(),
        };
        if !needed {
            let Some(v) = previous else {
                self.condition(
                    plan_cond::VERIFIED,
                    Cond::Unknown,
                    reason::NOT_REVALIDATED,
                    format!(
                        "the workload runs the benchmarked topology ({n} replicas); it is \
                         revalidated when it scales"
                    ),
                );
                return Ok(None);
            };
            if v.state != Verification::RUNNING {
                return Ok(None);
            }
            return self.read_verification(v, evidence).await;
        }
        if n == 0 {
            return Ok(None);
        }
        let ready = target.ready.unwrap_or(n);
        if ready < n {
            self.condition(
                plan_cond::VERIFIED,
                Cond::Unknown,
                reason::WAITING_FOR_REPLICAS,
                format!("{ready} of {n} replicas are ready; revalidation starts when all are"),
            );
            return Ok(Some(REVALIDATION_POLL));
        }
        let built = verification_benchmark(
            self.plan,
            evidence,
            VerificationInputs {
                replicas: n,
                peak,
                identity,
                declared,
            },
        );
        let cb = match built {
            Ok(cb) => cb,
            Err(why) => {
                self.condition(
                    plan_cond::VERIFIED,
                    Cond::Unknown,
                    reason::NOT_REVALIDATED,
                    why,
                );
                return Ok(None);
            }
        };
        let api: Api<CapacityBenchmark> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        // One revalidation at a time: an older one (another topology) is removed.
        let owned = api
            .list(&ListParams::default().labels(&format!("{PLAN_LABEL}={}", self.plan.name_any())))
            .await
            .map_err(|e| api_blocked("listing revalidation benchmarks", e))?;
        for old in owned.iter().filter(|o| o.name_any() != cb.name_any()) {
            api.delete(&old.name_any(), &DeleteParams::background())
                .await
                .map(|_| ())
                .or_else(|e| match e {
                    kube::Error::Api(a) if a.code == 404 => Ok(()),
                    e => Err(api_blocked("removing an older revalidation", e)),
                })?;
        }
        match api.create(&PostParams::default(), &cb).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(api_blocked("creating the revalidation benchmark", e)),
        }
        let expected = f64::from(n) * evidence.per_replica();
        let message = format!(
            "benchmarking {n} replicas at the peak ({} RPS) and the linear expectation \
             ({} RPS) in CapacityBenchmark {}",
            round3(peak),
            round3(expected),
            cb.name_any()
        );
        self.status.verification = Some(Verification {
            replicas: n,
            identity: identity.to_owned(),
            benchmark: cb.name_any(),
            state: Verification::RUNNING.into(),
            peak_rps: Some(round3(peak)),
            expected_fleet_rps: Some(round3(expected)),
            message: message.clone(),
            ..Default::default()
        });
        self.condition(
            plan_cond::VERIFIED,
            Cond::Unknown,
            reason::REVALIDATING,
            message.clone(),
        );
        self.event(EventType::Normal, reason::REVALIDATING, &message)
            .await;
        Ok(Some(REVALIDATION_POLL))
    }

    /// The revalidation benchmark's result, once it has one.
    async fn read_verification(
        &mut self,
        v: Verification,
        evidence: &Evidence,
    ) -> Result<Option<Duration>, Blocked> {
        let api: Api<CapacityBenchmark> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let cb = api
            .get_opt(&v.benchmark)
            .await
            .map_err(|e| api_blocked("reading the revalidation benchmark", e))?;
        let Some(cb) = cb else {
            let done = Verification {
                state: Verification::FAILED.into(),
                message: format!(
                    "CapacityBenchmark {} was deleted before it finished",
                    v.benchmark
                ),
                ..v
            };
            self.finish_verification(done).await;
            return Ok(None);
        };
        let status = cb.status.clone().unwrap_or_default();
        let finished = status.observed_generation == cb.metadata.generation
            && matches!(status.phase, Some(Phase::Succeeded | Phase::Failed));
        if !finished {
            return Ok(Some(REVALIDATION_POLL));
        }
        let spec = &self.plan.spec;
        let gpus = spec
            .gpus_per_replica
            .or(evidence.gpus_per_replica)
            .unwrap_or(1);
        let done = verification_outcome(
            v,
            &status,
            evidence.cache_mode,
            PlanBounds {
                utilization: spec.target_utilization,
                gpus_per_replica: gpus,
                min: spec.min_replicas.max(1),
                max: spec.max_replicas,
            },
        );
        self.finish_verification(done).await;
        Ok(None)
    }

    async fn finish_verification(&mut self, done: Verification) {
        let (status, why, kind) = match done.state.as_str() {
            Verification::VERIFIED => (Cond::True, reason::VERIFIED, "verified"),
            Verification::SHORTFALL => (Cond::False, reason::SHORTFALL, "shortfall"),
            _ => (
                Cond::False,
                reason::REVALIDATION_FAILED,
                "revalidation_failed",
            ),
        };
        self.condition(plan_cond::VERIFIED, status, why, done.message.clone());
        let type_ = if status == Cond::True {
            EventType::Normal
        } else {
            EventType::Warning
        };
        self.event(type_, why, &done.message).await;
        self.ctx.metrics.plan_event(kind);
        self.status.verification = Some(done);
    }
}

/// An autoscaler that manages the workload.
struct Autoscaler {
    /// `hpa/<name>` or `scaledobject/<name>`.
    via: String,
    max: u32,
    current_min: Option<u32>,
    api: Api<DynamicObject>,
    name: String,
    /// The field that holds its minimum.
    field: &'static str,
}

/// A spec duration as people say it (`336h`).
fn secs(d: kube::core::Duration) -> String {
    duration_text(Duration::from(d).as_secs() as i64)
}

/// The group of an `apiVersion` (empty for the core group).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
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
                let key = |m: &crate::api::ModeCapacity| m.capacity_rps.unwrap_or(-1.0);
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

/// What a revalidation benchmark measures.
struct VerificationInputs<'a> {
    replicas: u32,
    peak: f64,
    identity: &'a str,
    /// What the workload declares it runs: the revalidation's manifest says so.
    declared: &'a DeclaredIdentity,
}

/// The owned CapacityBenchmark that revalidates `replicas` replicas: the referenced
/// benchmark's workload, acceptance, cache mode and load settings against the workload's
/// Service, at the peak and the linear expectation (replicas × capacity per replica), and
/// at a quarter and a half of the expectation so a shortfall has a measured capacity. `Err` says why none can be built.
fn verification_benchmark(
    plan: &ServingPlan,
    evidence: &Evidence,
    inputs: VerificationInputs<'_>,
) -> Result<CapacityBenchmark, String> {
    let re = &plan.spec.revalidation;
    let base = evidence.benchmark.as_ref().map(|cb| &cb.spec);
    let service: Option<ServiceTarget> = re
        .service
        .clone()
        .or_else(|| base.and_then(|b| b.target.service.clone()));
    let Some(service) = service else {
        return Err(
            "nothing to benchmark: the evidence is not of a Service; set \
             spec.revalidation.service"
                .into(),
        );
    };
    // The evidence's manifest, inline, describing what is measured now: the workload's
    // declared revision, engine version and TP, and the replicas under test.
    let workload: Option<WorkloadSource> = re.workload.clone().or_else(|| {
        evidence.manifest.as_ref().map(|m| WorkloadSource {
            manifest: Some(Box::new(manifest_for(m, inputs.declared, inputs.replicas))),
            ..Default::default()
        })
    });
    let Some(workload) = workload else {
        return Err("no workload to send: set spec.revalidation.workload".into());
    };
    let expected = f64::from(inputs.replicas) * evidence.per_replica();
    // The peak and the linear expectation answer the question; a quarter and a half of
    // the expectation measure what the fleet does carry when the peak falls short.
    let mut rates = vec![
        round3(expected / 4.0),
        round3(expected / 2.0),
        round3(inputs.peak),
        round3(expected),
    ];
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    rates.retain(|r| *r > 0.0);
    let time_scale = re
        .time_scale
        .or_else(|| base.and_then(|b| b.target.time_scale));
    let mut experiments = base.map(|b| b.experiments.clone()).unwrap_or_default();
    experiments.saturation = None;
    experiments.rate_sweep = Some(RateSweep {
        rates,
        ..Default::default()
    });
    experiments.cache_modes = vec![evidence.cache_mode];
    let spec = CapacityBenchmarkSpec {
        target: Target {
            service: Some(service),
            model: base.and_then(|b| b.target.model.clone()),
            api: base.map(|b| b.target.api).unwrap_or_default(),
            replicas: Some(inputs.replicas),
            gpus_per_replica: plan.spec.gpus_per_replica.or(evidence.gpus_per_replica),
            time_scale,
            prometheus: base.and_then(|b| b.target.prometheus.clone()),
            ..Default::default()
        },
        workload,
        experiments,
        acceptance: base.and_then(|b| b.acceptance.clone()),
        repeats: 1,
        peak: Some(PeakForecast {
            rps: round3(inputs.peak),
            target_utilization: Some(plan.spec.target_utilization),
            cache_mode: Some(evidence.cache_mode),
        }),
        reporting: base.map(|b| b.reporting.clone()).unwrap_or_default(),
        loadgen: base.map(|b| b.loadgen.clone()).unwrap_or_default(),
        // A revalidation measures capacity; it never injects faults into the fleet.
        failure_test: None,
    };
    let name = format!(
        "{}-verify-r{}-{}",
        truncate(&plan.name_any(), 40),
        inputs.replicas,
        &short_hash(inputs.identity)
    );
    let owner = plan.controller_owner_ref(&()).map(|mut o: OwnerReference| {
        o.block_owner_deletion = Some(true);
        o
    });
    Ok(CapacityBenchmark {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: plan.namespace(),
            labels: Some(
                [
                    (PLAN_LABEL.to_owned(), plan.name_any()),
                    (
                        "app.kubernetes.io/managed-by".to_owned(),
                        "goodput".to_owned(),
                    ),
                ]
                .into(),
            ),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec,
        status: None,
    })
}

/// `manifest` as it describes `replicas` replicas of what `declared` says the workload
/// runs (the model revision, engine version and TP it declares replace the manifest's).
fn manifest_for(
    manifest: &WorkloadManifest,
    declared: &DeclaredIdentity,
    replicas: u32,
) -> WorkloadManifest {
    let mut m = manifest.clone();
    if let Some(r) = &declared.model_revision {
        m.model.revision = r.value.clone();
    }
    if let Some(v) = &declared.engine_version {
        m.engine.version = v.value.trim_start_matches('v').to_owned();
    }
    let placement = &mut m.engine.placement;
    let mut per_replica = placement.gpus_per_replica().unwrap_or(1);
    if let Some(tp) = &declared.tp
        && tp.value != placement.tp
    {
        placement.tp = tp.value;
        per_replica = tp.value * placement.pp.max(1);
    }
    placement.replicas = replicas.max(1);
    placement.gpus = per_replica.max(1) * replicas.max(1);
    m.resolved = None;
    m
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].trim_end_matches('-'),
        None => s,
    }
}

/// Six hex digits of a string's FNV-1a hash: names one identity in a benchmark's name.
fn short_hash(s: &str) -> String {
    use crate::workload::hashing::{FNV_OFFSET, fnv1a};
    format!("{:06x}", fnv1a(FNV_OFFSET, s.as_bytes()) & 0xff_ffff)
}

/// The plan's bounds, for a proposal from a revalidation's measured capacity.
struct PlanBounds {
    utilization: f64,
    gpus_per_replica: u32,
    min: u32,
    max: Option<u32>,
}

/// What a finished revalidation benchmark says: `Verified` when its peak point passed,
/// else `Shortfall` with the measured fleet capacity (the highest passing rate), the
/// scaling efficiency (measured ÷ linear expectation) and the replicas the measured
/// capacity per replica requires; `Failed` when it ended without a result.
fn verification_outcome(
    v: Verification,
    status: &CapacityBenchmarkStatus,
    cache: CacheMode,
    bounds: PlanBounds,
) -> Verification {
    if status.phase != Some(Phase::Succeeded) {
        let why = conditions::find(&status.conditions, READY)
            .map_or("no reason given".to_owned(), |c| c.message.clone());
        return Verification {
            state: Verification::FAILED.into(),
            message: format!("the revalidation benchmark {} failed: {why}", v.benchmark),
            ..v
        };
    }
    let peak = v.peak_rps.unwrap_or_default();
    let measured = status
        .modes
        .iter()
        .find(|m| m.cache == cache)
        .and_then(|m| m.capacity_rps);
    let peak_passed = status.points.iter().any(|p| {
        p.cache == cache
            && p.kind == PointKind::Rate
            && p.verdict == FinishedPoint::PASS
            && p.offered_rps.is_some_and(|r| (r - peak).abs() < 1e-6)
    });
    let expected = v.expected_fleet_rps.unwrap_or_default();
    let efficiency = match (measured, expected > 0.0) {
        (Some(m), true) => Some(round3(m / expected)),
        _ => None,
    };
    let eff_text = efficiency.map_or("unknown (no rate passed)".to_owned(), |e| {
        format!("{:.0}%", e * 100.0)
    });
    if peak_passed {
        return Verification {
            state: Verification::VERIFIED.into(),
            measured_fleet_rps: measured,
            scaling_efficiency: efficiency,
            shortfall_rps: None,
            proposed_replicas: None,
            message: format!(
                "{} replicas pass at the peak ({peak} RPS); measured fleet capacity {} RPS \
                 of {expected} RPS expected: scaling efficiency {eff_text}",
                v.replicas,
                measured.map_or("-".to_owned(), |m| m.to_string()),
            ),
            ..v
        };
    }
    let shortfall = round3(peak - measured.unwrap_or(0.0));
    let proposal = measured.filter(|m| *m > 0.0).and_then(|m| {
        requirement(
            PlanInput {
                peak_rps: peak,
                capacity_rps: m,
                replicas_tested: v.replicas.max(1),
                gpus_per_replica: bounds.gpus_per_replica,
                target_utilization: bounds.utilization,
            },
            bounds.min,
            bounds.max,
        )
        .ok()
    });
    let message = match (&proposal, measured) {
        (Some(p), Some(m)) => format!(
            "{} replicas fail at the peak ({peak} RPS): the highest passing rate is {m} RPS \
             of {expected} RPS expected (scaling efficiency {eff_text}), {shortfall} RPS \
             short; at the measured {:.3} RPS per replica the peak needs {} replicas ({})",
            v.replicas,
            m / f64::from(v.replicas.max(1)),
            p.replicas,
            arithmetic(&p.plan)
        ),
        _ => format!(
            "{} replicas fail at the peak ({peak} RPS) and at every rate tried: no \
             measured capacity on this topology",
            v.replicas
        ),
    };
    Verification {
        state: Verification::SHORTFALL.into(),
        measured_fleet_rps: measured,
        scaling_efficiency: efficiency,
        shortfall_rps: Some(shortfall),
        proposed_replicas: proposal.map(|p| p.replicas),
        message,
        ..v
    }
}

#[cfg(test)]
mod tests;
