//! The `CapacityBenchmark` controller, one pipeline per reconcile:
//! fetch (the manifest, the target) → validate (pure) → decide (the benchmark driver, from
//! the points recorded in status) → apply (server-side apply of the point's Job and its
//! ConfigMaps, the simulated engine) → status (written only when it changed).
//!
//! Each step has its file: `resolve.rs` (the spec validated, the target found, what it
//! runs), `launch.rs` (a point as a Job, and its relaunch), `collect.rs` (the shards'
//! results merged, or why the point still runs), `conclude.rs` (capacity, plan and
//! conditions), `failure.rs` (a failure test's injection and verdict); this file holds
//! the pipeline (`Run::step`) and what the steps share.
//!
//! Level-triggered: every reconcile reads the whole state (status, the current Job, the
//! result ConfigMaps) and never the reason it ran. All progress lives in status and in
//! ConfigMaps the benchmark owns, so a restarted operator resumes where the last one was:
//! a finished point is never lost or run again.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::build::{self, Owner, PointJobSpec};
use super::target::{self, NotReady, ResolvedTarget};
use super::{Context, Error, FIELD_MANAGER, pods, status as points};
use crate::handoff::{MergedPoint, ShardResult, merge_shards};
use goodput_api::conditions::{self, Status as Cond, reason as reasons};
use goodput_api::placement::ModelPrior;
use goodput_api::{
    CapacityBenchmark, CapacityBenchmarkSpec, CapacityBenchmarkStatus, CurrentPoint, ModeCapacity,
    Phase, Placement, ResolvedIdentity,
};
use goodput_core::analysis::PointReport;
use goodput_core::benchmark::driver::{self, PointKey, Step, SweepPlan, TestedDeployment};
use goodput_core::benchmark::result::PlainGrid;
use goodput_core::workload::WorkloadManifest;
use goodput_engine_metrics::identify::{check_metrics, identify};
use goodput_loadgen::point_job::PointJob;

mod collect;
mod conclude;
mod failure;
mod launch;
mod resolve;

/// The key of the merged report in a point's ConfigMap.
const REPORT_KEY: &str = goodput_core::pack_files::SLO_REPORT_JSON;
/// Most requests per second one loadgen pod is asked to send (wall clock) before a point
/// is sharded, when the spec does not say.
const RATE_PER_SHARD: f64 = 400.0;
/// Most scheduled requests one loadgen pod is given when the spec does not say: its
/// records gzip to about 47 bytes each (measured), and its result ConfigMap holds
/// `CONFIG_MAP_LIMIT_BYTES` (1,000,000) with the engine series beside them.
const REQUESTS_PER_SHARD: f64 = 16_000.0;

/// How long a point's pods may all wait before the benchmark says so in a condition (or
/// half the start timeout, when that is shorter).
const PENDING_GRACE: Duration = Duration::from_secs(10);
/// How often a point whose pods have not started is looked at again.
const PENDING_POLL: Duration = Duration::from_secs(5);

/// What became of the current point.
enum Collected {
    /// Its Job runs; look again after this long (or on a change to the Job).
    Running(Duration),
    /// Its Job failed and was started again.
    Retried,
    /// Its result, or why it has none (boxed: a point is far larger than the others).
    Finished(Box<goodput_api::FinishedPoint>),
}

impl Collected {
    fn finished(point: goodput_api::FinishedPoint) -> Self {
        Collected::Finished(Box::new(point))
    }
}

/// When a blocked benchmark is looked at again.
enum Retry {
    /// After this long (something it waits for is on its way).
    After(Duration),
    /// After the benchmark's next backoff delay (5 s doubling to 5 min).
    Backoff,
    /// Only when the benchmark changes.
    OnChange,
}

/// A reconcile's findings about a benchmark that cannot run (yet).
struct Blocked {
    condition: &'static str,
    reason: &'static str,
    message: String,
    phase: Phase,
    /// When to look again.
    retry: Retry,
}

/// Reconciles one benchmark.
pub async fn reconcile(cached: Arc<CapacityBenchmark>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = cached
        .namespace()
        .ok_or(Error::MissingField(".metadata.namespace"))?;
    let name = cached.name_any();
    // Decide from the object as it is now, not as the cache last saw it: a reconcile that
    // an owned Job's change queued can start before the cache holds the status this
    // operator just wrote, and acting on the older status would run a step twice.
    let api: Api<CapacityBenchmark> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(cb) = api
        .get_opt(&name)
        .await
        .map_err(Error::read("CapacityBenchmark"))?
    else {
        return Ok(Action::await_change());
    };
    let reference = cb
        .controller_owner_ref(&())
        .ok_or(Error::MissingField(".metadata.uid"))?;
    let owner = Owner {
        name: name.clone(),
        namespace: namespace.clone(),
        reference,
    };
    let generation = cb.metadata.generation.unwrap_or(0);
    let before = cb.status.clone().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut run = Run {
        ctx: &ctx,
        cb: &cb,
        owner,
        generation,
        status: before.clone(),
        now,
    };

    // A new generation: nothing measured for the old spec is evidence for this one.
    if before
        .observed_generation
        .is_some_and(|observed| observed != generation)
    {
        if let Some(current) = &before.current_point {
            run.delete::<Job>(&current.job).await?;
        }
        if let Some(current) = before
            .failure_test
            .as_ref()
            .and_then(|f| f.current.as_ref())
        {
            run.delete::<Job>(&current.job).await?;
        }
        run.status = CapacityBenchmarkStatus {
            conditions: before.conditions.clone(),
            ..Default::default()
        };
        run.condition(
            conditions::PROGRESSING,
            Cond::True,
            reasons::SPEC_CHANGED,
            format!("the spec changed (generation {generation}); starting over"),
        );
        run.event(
            EventType::Normal,
            reasons::SPEC_CHANGED,
            "Spec changed; stopped the running point and started over",
        )
        .await;
    }
    run.status.observed_generation = Some(generation);
    run.status.target = Some(cb.spec.target.printable());

    let action = match run.step().await {
        Ok(action) => action,
        Err(blocked) => run.blocked(blocked).await,
    };
    if !run.write_status(&before).await? {
        // Someone changed the benchmark since it was read: decide again from the new one.
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    Ok(action)
}

/// One reconcile of one benchmark.
struct Run<'a> {
    ctx: &'a Context,
    cb: &'a CapacityBenchmark,
    owner: Owner,
    generation: i64,
    status: CapacityBenchmarkStatus,
    now: Time,
}

impl Run<'_> {
    fn namespace(&self) -> &str {
        &self.owner.namespace
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.ctx.client.clone(), self.namespace())
    }

    fn condition(&mut self, type_: &str, status: Cond, reason: &str, message: String) {
        conditions::set(
            &mut self.status.conditions,
            conditions::new(
                type_,
                status,
                reason,
                message,
                Some(self.generation),
                self.now.clone(),
            ),
        );
    }

    async fn event(&self, type_: EventType, reason: &str, note: &str) {
        self.ctx.publish(self.cb, type_, reason, note).await;
    }

    /// Records why the benchmark waits or stopped; a Warning Event when that is news.
    async fn blocked(&mut self, b: Blocked) -> Action {
        let news = conditions::find(&self.status.conditions, b.condition)
            .is_none_or(|c| c.status != "False" || c.reason != b.reason || c.message != b.message);
        self.condition(b.condition, Cond::False, b.reason, b.message.clone());
        if b.condition != conditions::READY {
            self.condition(conditions::READY, Cond::False, b.reason, b.message.clone());
        }
        self.status.phase = Some(b.phase);
        if news {
            self.event(EventType::Warning, b.reason, &b.message).await;
        }
        match b.retry {
            Retry::After(d) => Action::requeue(d),
            Retry::Backoff => Action::requeue(self.ctx.backoff(self.cb)),
            Retry::OnChange => Action::await_change(),
        }
    }

    /// Validate, find the target, take it, and run or collect the points.
    async fn step(&mut self) -> Result<Action, Blocked> {
        let manifest = self.validate().await?;
        let spec = &self.cb.spec;
        let mut plan = spec.sweep_plan(manifest.client.request_schedule_seed);
        if self.status.phase == Some(Phase::Succeeded) {
            self.teardown_simulated().await.map_err(api_blocked)?;
            return Ok(Action::await_change());
        }

        // A running point is collected whatever the target's state now (an engine under
        // load may fail its readiness probe): its Job carries on regardless.
        if let Some(current) = self.status.current_point.clone() {
            match self
                .collect(&current, &manifest)
                .await
                .map_err(api_blocked)?
            {
                Collected::Running(after) => return Ok(Action::requeue(after)),
                Collected::Retried => return Ok(Action::requeue(Duration::from_secs(60))),
                Collected::Finished(point) => {
                    let verdict = point.verdict.clone();
                    let note = match point.reasons.first() {
                        Some(why) if verdict == goodput_api::FinishedPoint::INVALID => {
                            format!("Finished {}: {verdict}: {why}", current.label)
                        }
                        _ => format!("Finished {}: {verdict}", current.label),
                    };
                    self.status.points.push(*point);
                    self.status.current_point = None;
                    if verdict == goodput_api::FinishedPoint::INVALID {
                        self.event(EventType::Warning, reasons::POINT_FAILED, &note)
                            .await;
                    } else {
                        self.event(EventType::Normal, "PointFinished", &note).await;
                    }
                }
            }
        }

        // A failure test under way carries on whatever the target's state: its fault may
        // leave the Service without a ready endpoint for a while.
        if self
            .status
            .failure_test
            .as_ref()
            .is_some_and(|f| f.current.is_some())
            && let Some(action) = self
                .failure_tests(&plan, &manifest, None)
                .await
                .map_err(api_blocked)?
        {
            return Ok(action);
        }
        let target = self.target(&manifest).await?;
        self.condition(
            conditions::TARGET_REACHABLE,
            Cond::True,
            reasons::REACHABLE,
            format!("{} ({} replica(s) under test)", target.url, target.replicas),
        );
        if let Some(holder) = self.ctx.target_holder(self.cb, &target.key) {
            return Err(Blocked {
                condition: conditions::PROGRESSING,
                reason: reasons::WAITING_FOR_TARGET,
                message: format!(
                    "benchmark {holder} is measuring {}; two load tests on one target \
                     corrupt both",
                    target.key
                ),
                phase: Phase::Pending,
                retry: Retry::After(Duration::from_secs(10)),
            });
        }
        plan.model = self.model_priors(&plan, &manifest).await?;
        let recorded = points::recorded(&self.status.points);
        match driver::next_step(&plan, &recorded) {
            Step::Run(key) => {
                self.engine_pages_answer(&target).await?;
                if self.status.resolved.is_none() {
                    self.status.resolved = Some(self.resolved_identity(&target).await);
                }
                self.start(key, &manifest, &target)
                    .await
                    .map_err(api_blocked)?;
                Ok(Action::requeue(Duration::from_secs(60)))
            }
            Step::Done => {
                if self.status.modes.is_empty() {
                    self.conclude(&plan, &manifest, &target)
                        .await
                        .map_err(api_blocked)?;
                }
                if let Some(action) = self
                    .failure_tests(&plan, &manifest, Some(&target))
                    .await
                    .map_err(api_blocked)?
                {
                    return Ok(action);
                }
                self.succeed().await;
                self.teardown_simulated().await.map_err(api_blocked)?;
                Ok(Action::await_change())
            }
        }
    }

    /// The engine model of a simulated target, which places the first rates once the knee
    /// calibrates it, as in `goodput bench`; empty for a real target or fixed rates (the
    /// grid stays).
    async fn model_priors(
        &self,
        plan: &SweepPlan,
        manifest: &WorkloadManifest,
    ) -> Result<Vec<ModelPrior>, Blocked> {
        let target = &self.cb.spec.target;
        if !target.is_simulated() || !matches!(plan.rates, driver::RateSource::Knee { .. }) {
            return Ok(Vec::new());
        }
        let sim = target.simulated.clone().unwrap_or_default();
        let (spec, manifest) = (self.cb.spec.clone(), manifest.clone());
        let uid = self.cb.uid().unwrap_or_default();
        let priors = self
            .ctx
            .model_priors(&uid, self.generation, move || {
                let setup = sim.setup().map_err(|e| e.to_string())?;
                goodput_api::placement::model_priors(&spec, &manifest, &setup, sim.replicas.max(1))
                    .map_err(|e| format!("the engine model of the simulated target: {e}"))
            })
            .await
            .map_err(invalid)?;
        Ok(priors.as_ref().clone())
    }

    /// Server-side apply of an owned object with the operator's field manager.
    async fn apply<K>(&self, object: &K) -> Result<(), Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + k8s_openapi::Resource
            + Clone
            + Serialize
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let name = object.meta().name.clone().unwrap_or_default();
        self.api::<K>()
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(object),
            )
            .await
            .map_err(Error::apply(<K as k8s_openapi::Resource>::KIND, &name))?;
        Ok(())
    }

    /// Deletes an owned object and what it owns; absent is fine.
    async fn delete<K>(&self, name: &str) -> Result<(), Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + k8s_openapi::Resource
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        match self.api::<K>().delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(Error::Delete {
                kind: <K as k8s_openapi::Resource>::KIND,
                name: name.to_owned(),
                source: e,
            }),
        }
    }

    /// Writes status through `/status` when it differs from what was read. A replace, not
    /// an apply: the operator owns the whole status, fields it drops must go, and the
    /// resourceVersion guards against writing over a newer object (a conflict retries).
    /// `false` when the benchmark changed since it was read (a conflict): nothing written.
    async fn write_status(&self, before: &CapacityBenchmarkStatus) -> Result<bool, Error> {
        if &self.status == before {
            return Ok(true);
        }
        let api: Api<CapacityBenchmark> = self.api();
        let mut object = self.cb.clone();
        object.status = Some(self.status.clone());
        match api
            .replace_status(&self.owner.name, &PostParams::default(), &object)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(Error::Status(e)),
        }
    }
}

/// Why a workload source gave no manifest.
pub(crate) enum ManifestError {
    /// Reading the ConfigMap failed.
    Api(kube::Error),
    /// The ConfigMap or its key is missing.
    Missing(String),
    /// The source is not usable in a cluster, or its text is not a manifest.
    Invalid(String),
}

/// The workload manifest of `source` in a cluster: inline, or a ConfigMap key in
/// `namespace` (a `manifestFile` is for local runs only).
pub(crate) async fn workload_manifest(
    client: &kube::Client,
    namespace: &str,
    source: &goodput_api::WorkloadSource,
) -> Result<WorkloadManifest, ManifestError> {
    match (&source.manifest, &source.manifest_config_map) {
        (Some(m), _) => Ok((**m).clone()),
        (None, Some(key)) => {
            let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            let text = maps
                .get_opt(&key.name)
                .await
                .map_err(ManifestError::Api)?
                .and_then(|cm| cm.data.and_then(|mut d| d.remove(&key.key)));
            let Some(text) = text else {
                return Err(ManifestError::Missing(format!(
                    "ConfigMap {namespace}/{} has no key `{}`",
                    key.name, key.key
                )));
            };
            serde_saphyr::from_str(&text).map_err(|e| {
                ManifestError::Invalid(format!(
                    "spec.workload.manifestConfigMap {}/{}: {e}",
                    key.name, key.key
                ))
            })
        }
        (None, None) => Err(ManifestError::Invalid(
            "spec.workload: in a cluster the manifest is inline (`manifest`) or in a \
             ConfigMap (`manifestConfigMap`); `manifestFile` is for local runs"
                .into(),
        )),
    }
}

fn invalid(message: String) -> Blocked {
    Blocked {
        condition: conditions::SPEC_VALID,
        reason: reasons::INVALID_SPEC,
        message,
        phase: Phase::Failed,
        retry: Retry::OnChange,
    }
}

/// An API error met while deciding: the benchmark waits and the reconcile is retried with
/// backoff. A refusal by RBAC says so (`Forbidden`): it will not pass until the operator's
/// role changes.
fn api_blocked(e: impl std::error::Error + 'static) -> Blocked {
    let (reason, message) = api_failure(&e);
    Blocked {
        condition: conditions::PROGRESSING,
        reason,
        message,
        phase: Phase::Pending,
        retry: Retry::Backoff,
    }
}

/// The reason and message of a failed API call: `Forbidden` when RBAC refused it anywhere
/// in the error's source chain (the message then names the refused permission), else
/// `ApiError`.
pub(crate) fn api_failure(e: &(dyn std::error::Error + 'static)) -> (&'static str, String) {
    let chain: Vec<&(dyn std::error::Error + 'static)> =
        std::iter::successors(Some(e), |e| e.source()).collect();
    let forbidden = chain.iter().any(
        |e| matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(a)) if a.code == 403),
    );
    match chain.last() {
        Some(root) if forbidden => (
            reasons::FORBIDDEN,
            format!("{e} (the operator's role lacks this permission: {root})"),
        ),
        _ => (reasons::API_ERROR, e.to_string()),
    }
}

/// The `Progressing` message of a running point: `running cold rate 6 (Job x, 2 shard(s),
/// attempt 2 of 3)`, the attempt only on a retry.
fn running_message(label: &str, job: &str, shards: u32, attempt: u32, retries: i32) -> String {
    let attempt = match attempt {
        0 => String::new(),
        a => format!(", attempt {} of {}", a + 1, retries.max(0) + 1),
    };
    format!("running {label} (Job {job}, {shards} shard(s){attempt})")
}

/// A Job's shard count.
/// Whether the Job's condition `type_` (`Complete`, `Failed`) holds.
fn job_holds<'a>(
    job: &'a Job,
    type_: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_ && c.status == "True"))
}

fn completions(job: &Job) -> u32 {
    job.spec
        .as_ref()
        .and_then(|s| s.completions)
        .unwrap_or(1)
        .max(1) as u32
}

/// Pods a point needs: the spec's `loadgen.shards`, else enough that none sends more than
/// [`RATE_PER_SHARD`] requests per second of wall time. A closed loop runs in one pod.
fn shards(
    spec: &CapacityBenchmarkSpec,
    manifest: &WorkloadManifest,
    key: PointKey,
    time_scale: f64,
) -> u32 {
    match key {
        PointKey::Saturation { .. } => 1,
        PointKey::Rate { rate, .. } => spec.loadgen.shards.unwrap_or_else(|| {
            // Enough pods that none sends too fast, and none holds too many records.
            let by_rate = (rate * time_scale / RATE_PER_SHARD).ceil();
            let by_size =
                (manifest.client.initial_scheduled_requests as f64 / REQUESTS_PER_SHARD).ceil();
            (by_rate.max(by_size) as u32).clamp(1, 64)
        }),
    }
    .max(1)
}

/// How long a point's Job may run: its longest schedule (every block of the minimum
/// duration, the warmup) on the run's clock, plus time to start pods.
fn deadline_seconds(
    spec: &CapacityBenchmarkSpec,
    manifest: &WorkloadManifest,
    key: PointKey,
    time_scale: f64,
) -> i64 {
    let c = &manifest.client;
    let model_s = match key {
        PointKey::Saturation { .. } => {
            spec.experiments
                .saturation
                .as_ref()
                .map_or(60.0, |s| s.duration_seconds)
                + c.warmup_seconds
        }
        PointKey::Rate { .. } => {
            (c.minimum_duration_seconds + c.warmup_seconds)
                * f64::from(spec.experiments.max_blocks.max(1))
        }
    };
    deadline_for(model_s, time_scale)
}

/// A Job's deadline for `model_s` of load at time scale `k`: twice its length on the
/// run's clock, plus time to start pods.
fn deadline_for(model_s: f64, k: f64) -> i64 {
    (model_s / k.max(1e-3) * 2.0 + 300.0).ceil() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(shards: Option<u32>) -> CapacityBenchmarkSpec {
        let yaml = include_str!("../../../examples/capacity-benchmark-minimal.yaml");
        let mut cb: CapacityBenchmark = serde_saphyr::from_str(yaml).expect("the example parses");
        cb.spec.loadgen.shards = shards;
        cb.spec
    }

    #[test]
    fn a_point_gets_enough_shards_for_its_rate_and_its_records() {
        let seed = goodput_core::workload::seed_manifest();
        assert_eq!(seed.client.initial_scheduled_requests, 22_000);
        let rate = |rate| PointKey::Rate {
            cache: goodput_api::CacheMode::Cold,
            rate,
            repeat: 0,
        };
        // 22,000 records do not fit one result ConfigMap: 2 pods even at a low rate.
        assert_eq!(shards(&spec(None), &seed, rate(10.0), 1.0), 2);
        // 1,000 RPS of wall time: no pod above 400.
        assert_eq!(shards(&spec(None), &seed, rate(50.0), 20.0), 3);
        // The spec's count wins; saturation levels run in one pod.
        assert_eq!(shards(&spec(Some(5)), &seed, rate(10.0), 1.0), 5);
        let level = PointKey::Saturation {
            cache: goodput_api::CacheMode::Cold,
            concurrency: 64,
        };
        assert_eq!(shards(&spec(None), &seed, level, 1.0), 1);
    }
}
