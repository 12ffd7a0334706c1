//! The `CapacityBenchmark` controller, one pipeline per reconcile:
//! fetch (the manifest, the target) → validate (pure) → decide (the benchmark driver, from
//! the points recorded in status) → apply (server-side apply of the point's Job and its
//! ConfigMaps, the simulated engine) → status (written only when it changed).
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
use crate::analysis::PointReport;
use crate::api::conditions::{self, Status as Cond, reason as reasons};
use crate::api::{
    CapacityBenchmark, CapacityBenchmarkSpec, CapacityBenchmarkStatus, CurrentPoint, ModeCapacity,
    Phase, Placement, ResolvedIdentity,
};
use crate::bench::driver::{self, PointKey, Step, SweepPlan, TestedDeployment};
use crate::bench::model::ModelPrior;
use crate::bench::point_job::PointJob;
use crate::bench::result::PlainGrid;
use crate::engine_metrics::identify::{check_metrics, identify};
use crate::loadgen::handoff::{MergedPoint, ShardResult, merge_shards};
use crate::workload::WorkloadManifest;

mod failure;

/// The key of the merged report in a point's ConfigMap.
const REPORT_KEY: &str = "slo-report.json";
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
    Finished(Box<crate::api::FinishedPoint>),
}

impl Collected {
    fn finished(point: crate::api::FinishedPoint) -> Self {
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
                        Some(why) if verdict == crate::api::FinishedPoint::INVALID => {
                            format!("Finished {}: {verdict}: {why}", current.label)
                        }
                        _ => format!("Finished {}: {verdict}", current.label),
                    };
                    self.status.points.push(*point);
                    self.status.current_point = None;
                    if verdict == crate::api::FinishedPoint::INVALID {
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
                let setup = sim.setup()?;
                crate::bench::model::model_priors(&spec, &manifest, &setup, sim.replicas.max(1))
                    .map_err(|e| format!("the engine model of the simulated target: {e}"))
            })
            .await
            .map_err(invalid)?;
        Ok(priors.as_ref().clone())
    }

    /// Resolves the manifest and validates the benchmark with the same checks as
    /// `goodput lint`.
    async fn validate(&mut self) -> Result<WorkloadManifest, Blocked> {
        let spec = &self.cb.spec;
        let source = &spec.workload;
        let manifest = workload_manifest(&self.ctx.client, self.namespace(), source)
            .await
            .map_err(|e| match e {
                ManifestError::Api(e) => api_blocked(e),
                ManifestError::Missing(message) => Blocked {
                    condition: conditions::SPEC_VALID,
                    reason: reasons::MANIFEST_NOT_FOUND,
                    message,
                    phase: Phase::Pending,
                    retry: Retry::Backoff,
                },
                ManifestError::Invalid(message) => invalid(message),
            })?;
        let (manifest, findings) = crate::api::check_benchmark(spec, manifest);
        let errors: Vec<String> = findings
            .iter()
            .filter(|f| f.severity == crate::workload::Severity::Error)
            .map(|f| format!("{}: {}", f.path, f.message))
            .collect();
        if !errors.is_empty() {
            return Err(invalid(errors.join("; ")));
        }
        let cluster = crate::api::lint::cluster_unsupported(spec);
        if !cluster.is_empty() {
            let why: Vec<String> = cluster
                .iter()
                .map(|f| format!("{}: {}", f.path, f.message))
                .collect();
            return Err(invalid(why.join("; ")));
        }
        self.condition(
            conditions::SPEC_VALID,
            Cond::True,
            reasons::VALID,
            "the spec and its workload manifest are valid".into(),
        );
        Ok(manifest)
    }

    /// The target, once it can take load.
    async fn target(&mut self, manifest: &WorkloadManifest) -> Result<ResolvedTarget, Blocked> {
        let spec = &self.cb.spec;
        let key = super::target_key(self.cb)
            .ok_or_else(|| invalid("the benchmark has no namespace for its target".into()))?;
        let resolved = if let Some(url) = &spec.target.url {
            Ok(ResolvedTarget {
                key: key.clone(),
                url: url.trim_end_matches('/').to_owned(),
                metrics_targets: spec.target.metrics_urls.clone(),
                discover_metrics: false,
                replicas: spec
                    .target
                    .replicas
                    .unwrap_or(manifest.engine.placement.replicas)
                    .max(1),
                time_scale: spec.target.time_scale.unwrap_or(1.0),
                model: spec.target_model(manifest),
            })
        } else if let Some(svc) = &spec.target.service {
            let namespace = svc
                .namespace
                .clone()
                .unwrap_or_else(|| self.namespace().to_owned());
            target::service(
                &self.ctx.client,
                &namespace,
                spec,
                manifest,
                &svc.name,
                svc.port,
                false,
            )
            .await
            .map_err(api_blocked)?
        } else {
            self.simulated(manifest).await?
        };
        resolved
            .map(|t| ResolvedTarget { key, ..t })
            .map_err(|n: NotReady| Blocked {
                condition: conditions::TARGET_REACHABLE,
                reason: n.reason,
                message: n.message,
                phase: Phase::Pending,
                retry: if n.starting {
                    Retry::After(Duration::from_secs(2))
                } else {
                    Retry::Backoff
                },
            })
    }

    /// What the target runs: the simulated engine is this build; a real server is asked
    /// (its metric names, `/version`, `/v1/models`), and what it does not say stays
    /// `unknown`.
    async fn resolved_identity(&self, target: &ResolvedTarget) -> ResolvedIdentity {
        if self.cb.spec.target.is_simulated() {
            return ResolvedIdentity {
                engine: "goodput simulated engine".into(),
                engine_version: Some(env!("CARGO_PKG_VERSION").to_owned()),
                model: target.model.clone(),
            };
        }
        let found = identify(&self.ctx.http, &target.url, &target.metrics_targets).await;
        ResolvedIdentity {
            engine: found.engine.unwrap_or_else(|| "unknown".into()),
            engine_version: found.version,
            model: target.model.clone(),
        }
    }

    /// Before a point starts: every engine page the points will scrape answers. A point
    /// without them would have no queue, KV or preemption evidence, so none starts; the
    /// benchmark waits with backoff until the pages answer.
    async fn engine_pages_answer(&self, target: &ResolvedTarget) -> Result<(), Blocked> {
        check_metrics(&self.ctx.http, &target.metrics_targets)
            .await
            .map_err(|e| Blocked {
                condition: conditions::TARGET_REACHABLE,
                reason: reasons::METRICS_UNREACHABLE,
                message: format!(
                    "the engine page {e}; no point starts until every page the points \
                     scrape answers"
                ),
                phase: Phase::Pending,
                retry: Retry::Backoff,
            })
    }

    /// Deploys the simulated engine and waits for it.
    async fn simulated(
        &mut self,
        manifest: &WorkloadManifest,
    ) -> Result<Result<ResolvedTarget, NotReady>, Blocked> {
        let spec = &self.cb.spec;
        let sim = spec.target.simulated.clone().unwrap_or_default();
        let (deployment, service) = build::simulated_target(&self.owner, &self.ctx.image, &sim)
            .map_err(|e| invalid(format!("spec.target.simulated.overrides: {e}")))?;
        self.apply(&deployment).await.map_err(api_blocked)?;
        self.apply(&service).await.map_err(api_blocked)?;
        let name = self.owner.simulated_name();
        let found = target::service(
            &self.ctx.client,
            &self.owner.namespace,
            spec,
            manifest,
            &name,
            build::SIMULATED_PORT,
            true,
        )
        .await
        .map_err(api_blocked)?;
        let model = spec.target.model.clone().unwrap_or_else(|| {
            crate::sim::setup::preset(&sim.preset)
                .map_or_else(|| manifest.model.id.clone(), |s| s.model)
        });
        Ok(found.map(|t| ResolvedTarget {
            metrics_targets: Vec::new(),
            discover_metrics: true,
            replicas: sim.replicas.max(1),
            // `auto` never gets here: cluster_unsupported refuses it with the spec.
            time_scale: sim.time_scale.fixed().unwrap_or(1.0),
            model,
            ..t
        }))
    }

    /// Removes the simulated engine once the benchmark no longer needs it.
    async fn teardown_simulated(&self) -> Result<(), Error> {
        if self.cb.spec.target.is_simulated() {
            let name = self.owner.simulated_name();
            self.delete::<Deployment>(&name).await?;
            self.delete::<Service>(&name).await?;
        }
        Ok(())
    }

    /// Creates the objects of the point the driver chose and marks it current.
    async fn start(
        &mut self,
        key: PointKey,
        manifest: &WorkloadManifest,
        target: &ResolvedTarget,
    ) -> Result<(), Error> {
        let job_name = self
            .owner
            .job_name(self.generation, self.status.points.len(), 0);
        let shards = shards(&self.cb.spec, manifest, key, target.time_scale);
        let point = PointJob {
            key,
            spec: self.cb.spec.clone(),
            manifest: manifest.clone(),
            target: target.point_target(),
            nonce: crate::workload::hashing::fnv1a(0, self.cb.uid().unwrap_or_default().as_bytes()),
            failure: None,
        };
        let json = serde_json::to_string(&point).map_err(Error::Encode)?;
        let deadline = deadline_seconds(&self.cb.spec, manifest, key, target.time_scale);
        self.launch(&job_name, json, shards, deadline).await?;
        let (kind, concurrency, offered_rps, repeat) = points::key_fields(key);
        let label = key.label();
        self.status.current_point = Some(CurrentPoint {
            label: label.clone(),
            cache: key.cache(),
            kind,
            concurrency,
            offered_rps,
            repeat,
            job: job_name.clone(),
            attempt: 0,
            started_at: Some(self.now.clone()),
        });
        self.status.phase = Some(Phase::Running);
        if let Some(store) = build::ResultsStore::of(&self.cb.spec.loadgen) {
            self.status.pack = Some(format!("{}/", store.location(&self.results_dir())));
        }
        self.condition(
            conditions::PROGRESSING,
            Cond::True,
            reasons::RUNNING,
            running_message(&label, &job_name, shards, 0, self.ctx.options.pod_retries),
        );
        self.condition(
            conditions::READY,
            Cond::False,
            reasons::RUNNING,
            format!("{} of the points so far finished", self.status.points.len()),
        );
        self.event(
            EventType::Normal,
            "PointStarted",
            &format!("Started {label} as Job {job_name}"),
        )
        .await;
        Ok(())
    }

    /// Applies a point's objects: its point file, one empty result ConfigMap per shard, the
    /// loadgen pods' account (which may write only those), and the Job. A sharded point
    /// starts on a common instant a few seconds ahead, so every shard runs one timeline.
    async fn launch(
        &self,
        job_name: &str,
        point_json: String,
        shards: u32,
        deadline_seconds: i64,
    ) -> Result<(), Error> {
        let start_at = (shards > 1).then(|| {
            k8s_openapi::jiff::Timestamp::now().as_millisecond() as f64 / 1000.0
                + self.ctx.options.shard_start_lead.as_secs_f64()
        });
        self.launch_at(job_name, point_json, shards, deadline_seconds, start_at)
            .await
    }

    /// [`Self::launch`] with the load's time zero given (Unix seconds).
    async fn launch_at(
        &self,
        job_name: &str,
        point_json: String,
        shards: u32,
        deadline_seconds: i64,
        start_at: Option<f64>,
    ) -> Result<(), Error> {
        self.apply(&build::point_config_map(&self.owner, job_name, point_json))
            .await?;
        let results: Vec<String> = (0..shards)
            .map(|i| build::result_config_map_name(job_name, i))
            .collect();
        for shard in 0..shards {
            self.apply(&build::result_config_map(&self.owner, job_name, shard))
                .await?;
        }
        let (account, role, binding) = build::loadgen_rbac(&self.owner, results);
        self.apply(&account).await?;
        self.apply(&role).await?;
        self.apply(&binding).await?;
        self.apply(&build::point_job(
            &self.owner,
            &PointJobSpec {
                name: job_name.to_owned(),
                image: self.ctx.image.clone(),
                shards,
                deadline_seconds,
                start_at,
                results: self.results_sink(job_name),
                resources: self.ctx.options.loadgen_resources.clone(),
                metrics_addr: self.ctx.options.loadgen_metrics_addr.clone(),
            },
        ))
        .await
    }

    /// This generation's directory in the results store: `<benchmark>/g<generation>`.
    fn results_dir(&self) -> String {
        format!("{}/g{}", self.owner.base(), self.generation)
    }

    /// Where a point's shards keep their raw results, when the spec names a claim or a
    /// bucket: `<benchmark>/g<generation>/<job>/` in it.
    fn results_sink(&self, job_name: &str) -> Option<build::ResultsSink> {
        Some(build::ResultsSink {
            store: build::ResultsStore::of(&self.cb.spec.loadgen)?,
            dir: format!("{}/{job_name}", self.results_dir()),
        })
    }

    /// Starts a failed point again from its own point file (the same load, the same
    /// seeds) as a new Job, and removes the failed attempt.
    async fn relaunch(
        &mut self,
        current: &CurrentPoint,
        key: PointKey,
        failed: &Job,
        why: &str,
    ) -> Result<Option<crate::api::FinishedPoint>, Error> {
        let maps: Api<ConfigMap> = self.api();
        let point_map = build::point_config_map_name(&current.job);
        let Some(point_json) = maps
            .get_opt(&point_map)
            .await
            .map_err(Error::read("ConfigMap"))?
            .and_then(|cm| cm.data.and_then(|mut d| d.remove(build::POINT_KEY)))
        else {
            return Ok(Some(points::invalid_point(
                key,
                format!(
                    "{why}; its point file (ConfigMap {point_map}) is gone, so it was not retried"
                ),
            )));
        };
        let shards = completions(failed);
        let deadline = failed
            .spec
            .as_ref()
            .and_then(|s| s.active_deadline_seconds)
            .unwrap_or(3600);
        let attempt = current.attempt + 1;
        let job_name = self
            .owner
            .job_name(self.generation, self.status.points.len(), attempt);
        self.launch(&job_name, point_json, shards, deadline).await?;
        self.remove_attempt(&current.job, shards).await?;
        let retries = self.ctx.options.pod_retries;
        let message = format!(
            "retrying {} as Job {job_name} (attempt {} of {}): {why}",
            current.label,
            attempt + 1,
            retries + 1
        );
        self.status.current_point = Some(CurrentPoint {
            job: job_name,
            attempt,
            started_at: Some(self.now.clone()),
            ..current.clone()
        });
        self.condition(
            conditions::PROGRESSING,
            Cond::True,
            reasons::POINT_RETRIED,
            message.clone(),
        );
        self.event(EventType::Warning, reasons::POINT_RETRIED, &message)
            .await;
        Ok(None)
    }

    /// Deletes a failed or abandoned attempt: its Job (and pods), point file and result
    /// ConfigMaps.
    async fn remove_attempt(&self, job: &str, shards: u32) -> Result<(), Error> {
        self.delete::<Job>(job).await?;
        self.delete::<ConfigMap>(&build::point_config_map_name(job))
            .await?;
        for shard in 0..shards {
            self.delete::<ConfigMap>(&build::result_config_map_name(job, shard))
                .await?;
        }
        Ok(())
    }

    /// The pods of a point's Job.
    async fn job_pods(&self, job: &str) -> Result<Vec<Pod>, Error> {
        let pods: Api<Pod> = self.api();
        Ok(pods
            .list(&ListParams::default().labels(&format!("job-name={job}")))
            .await
            .map_err(Error::read("Pod"))?
            .items)
    }

    /// The current point's result once its Job finished: merged and gated, or invalid with
    /// the reason. A failed Job within the retry budget starts again; one whose pods never
    /// start gives up after the start timeout.
    async fn collect(
        &mut self,
        current: &CurrentPoint,
        manifest: &WorkloadManifest,
    ) -> Result<Collected, Error> {
        let Some(key) = points::point_key_of(
            current.cache,
            current.kind,
            current.concurrency,
            current.offered_rps,
            current.repeat,
        ) else {
            return Ok(Collected::finished(points::invalid_point(
                PointKey::Rate {
                    cache: current.cache,
                    rate: 0.0,
                    repeat: 0,
                },
                "the current point in status names no load".into(),
            )));
        };
        let jobs: Api<Job> = self.api();
        let Some(job) = jobs
            .get_opt(&current.job)
            .await
            .map_err(Error::read("Job"))?
        else {
            return Ok(Collected::finished(points::invalid_point(
                key,
                format!("Job {} disappeared before it finished", current.job),
            )));
        };
        if let Some(failed) = job_holds(&job, "Failed") {
            let pods = self.job_pods(&current.job).await?;
            let mut why = format!(
                "Job {} failed ({})",
                current.job,
                failed.reason.clone().unwrap_or_default()
            );
            match pods::failures(&pods).as_slice() {
                [] => {
                    if let Some(m) = failed.message.as_deref().filter(|m| !m.is_empty()) {
                        why = format!("{why}: {m}");
                    }
                }
                failures => why = format!("{why}: {}", failures.join("; ")),
            }
            // A deadline is the point's own budget; only pod failures are retried.
            let retryable = failed.reason.as_deref() != Some("DeadlineExceeded");
            if retryable && current.attempt < self.ctx.options.pod_retries.max(0) as u32 {
                return Ok(match self.relaunch(current, key, &job, &why).await? {
                    Some(point) => Collected::Finished(Box::new(point)),
                    None => Collected::Retried,
                });
            }
            let attempts = current.attempt + 1;
            let why = if attempts > 1 {
                format!("{why} (attempt {attempts} of {attempts})")
            } else {
                why
            };
            return Ok(Collected::finished(points::invalid_point(key, why)));
        }
        if job_holds(&job, "Complete").is_none() {
            return self.running(current, key, &job).await;
        }
        let (_, merged) = match self.shard_results(&current.job, &job, manifest).await? {
            Ok(r) => r,
            Err(why) => return Ok(Collected::finished(points::invalid_point(key, why))),
        };
        let maps: Api<ConfigMap> = self.api();
        // The merged report joins the point file, so the conclusion reads it back from one
        // place and a restarted operator does not merge again.
        let point_map = build::point_config_map_name(&current.job);
        let report = serde_json::to_string(merged.report()).map_err(Error::Encode)?;
        maps.patch(
            &point_map,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {REPORT_KEY: report}})),
        )
        .await
        .map_err(Error::apply("ConfigMap", &point_map))?;
        let mut point = points::finished_point(
            key,
            merged.report(),
            &merged.summary.validity,
            manifest,
            point_map,
            Some(points::Held::of(&merged.summary.client)),
        );
        point.engine_rps = merged.summary.engine_rps();
        Ok(Collected::finished(point))
    }

    /// The results of a completed Job's shards and their merge, or why there are none.
    async fn shard_results(
        &self,
        job_name: &str,
        job: &Job,
        manifest: &WorkloadManifest,
    ) -> Result<Result<(Vec<ShardResult>, MergedPoint), String>, Error> {
        let maps: Api<ConfigMap> = self.api();
        let mut results = Vec::new();
        for shard in 0..completions(job) {
            let name = build::result_config_map_name(job_name, shard);
            let cm = maps
                .get_opt(&name)
                .await
                .map_err(Error::read("ConfigMap"))?;
            let written = cm.as_ref().is_some_and(ShardResult::is_written);
            match cm
                .filter(|_| written)
                .map(|cm| ShardResult::from_config_map(&cm))
            {
                Some(Ok(r)) => results.push(r),
                Some(Err(e)) => {
                    return Ok(Err(format!(
                        "shard {shard}'s result ConfigMap {name} does not parse: {e}"
                    )));
                }
                None => {
                    return Ok(Err(format!(
                        "shard {shard} never reported (ConfigMap {name} holds no result)"
                    )));
                }
            }
        }
        Ok(match merge_shards(&results, &manifest.gate_config()) {
            Ok(m) => Ok((results, m)),
            Err(e) => Err(format!("the shards of Job {job_name} do not merge: {e}")),
        })
    }

    /// A point whose Job has not finished: says whether its pods have started, and gives
    /// up on a Job none of whose pods started within the start timeout (a pending pod
    /// changes nothing the controller watches, so this polls).
    async fn running(
        &mut self,
        current: &CurrentPoint,
        key: PointKey,
        job: &Job,
    ) -> Result<Collected, Error> {
        let shards = completions(job);
        let pods = self.job_pods(&current.job).await?;
        let waited = current.started_at.as_ref().map_or(Duration::ZERO, |t| {
            Duration::from_secs_f64(self.now.0.duration_since(t.0).as_secs_f64().max(0.0))
        });
        let timeout = self.ctx.options.pod_start_timeout;
        let grace = PENDING_GRACE.min(timeout / 2);
        let pending = if pods.is_empty() {
            Some(format!("Job {} has created no pod", current.job))
        } else {
            pods::not_started(&pods)
        };
        match pending {
            Some(why) if waited >= timeout => {
                self.remove_attempt(&current.job, shards).await?;
                Ok(Collected::finished(points::invalid_point(
                    key,
                    format!(
                        "Job {} never started within {} s: {why}",
                        current.job,
                        timeout.as_secs()
                    ),
                )))
            }
            Some(why) if waited >= grace => {
                self.condition(
                    conditions::PROGRESSING,
                    Cond::True,
                    reasons::PODS_PENDING,
                    format!(
                        "{}: no pod of Job {} has started (the point gives up after {} s): \
                         {why}",
                        current.label,
                        current.job,
                        timeout.as_secs()
                    ),
                );
                Ok(Collected::Running(
                    timeout.saturating_sub(waited).min(PENDING_POLL),
                ))
            }
            Some(_) => Ok(Collected::Running(
                grace.saturating_sub(waited).min(PENDING_POLL),
            )),
            None => {
                let message = running_message(
                    &current.label,
                    &current.job,
                    shards,
                    current.attempt,
                    self.ctx.options.pod_retries,
                );
                self.condition(
                    conditions::PROGRESSING,
                    Cond::True,
                    reasons::RUNNING,
                    message,
                );
                Ok(Collected::Running(Duration::from_secs(60)))
            }
        }
    }

    /// Every point has run: capacity per cache mode, per replica, and the plan (the
    /// benchmark succeeds once its failure tests, if any, have run too).
    async fn conclude(
        &mut self,
        plan: &SweepPlan,
        manifest: &WorkloadManifest,
        target: &ResolvedTarget,
    ) -> Result<(), Error> {
        let spec = &self.cb.spec;
        let maps: Api<ConfigMap> = self.api();
        let gate = manifest.gate_config();
        let tested = TestedDeployment {
            replicas: target.replicas,
            gpus_per_replica: spec.gpus_per_replica(manifest),
        };
        let gpus = tested.replicas.max(1) * tested.gpus_per_replica.max(1);
        let mut modes = Vec::new();
        let mut plans = Vec::new();
        for &cache in &plan.cache_modes {
            let mut reports: Vec<(f64, bool, PointReport)> = Vec::new();
            for p in
                self.status.points.iter().filter(|p| {
                    p.cache == cache && p.kind == crate::api::PointKind::Rate && p.valid
                })
            {
                let (Some(rate), Some(map)) = (p.offered_rps, &p.result_config_map) else {
                    continue;
                };
                let text = maps
                    .get_opt(map)
                    .await
                    .map_err(Error::read("ConfigMap"))?
                    .and_then(|cm| cm.data.and_then(|mut d| d.remove(REPORT_KEY)));
                match text.map(|t| serde_json::from_str::<PointReport>(&t)) {
                    Some(Ok(report)) => reports.push((rate, true, report)),
                    _ => {
                        return Err(Error::Result(format!(
                            "the report of {} RPS in ConfigMap {map} is missing or unreadable",
                            rate
                        )));
                    }
                }
            }
            let rows: Vec<(f64, bool, &PointReport)> =
                reports.iter().map(|(r, v, p)| (*r, *v, p)).collect();
            let conclusion = driver::conclude_mode(
                &rows,
                &gate,
                tested,
                spec.peak.as_ref(),
                manifest.acceptance.target_utilization,
            )
            .map_err(|e| Error::Result(format!("spec.peak: {e}")))?;
            let decision = driver::decide_mode(plan, cache, &points::recorded(&self.status.points));
            let placement = decision.prediction.map(|p| {
                let grid = PlainGrid::planned(
                    decision.replaced_grid.clone(),
                    manifest,
                    spec.repeats,
                    gpus,
                );
                let rate_points = self
                    .status
                    .points
                    .iter()
                    .filter(|p| p.cache == cache && p.kind == crate::api::PointKind::Rate);
                Placement {
                    model_capacity_rps: p.model_capacity_rps,
                    speed: p.speed,
                    predicted_rps: p.predicted_rps,
                    replaced_grid: grid.rates,
                    replaced_grid_gpu_minutes: grid.cost.gpu_minutes,
                    rate_points_gpu_minutes: points::cost(rate_points, gpus).gpu_minutes,
                }
            });
            modes.push(ModeCapacity {
                cache,
                capacity_rps: conclusion.capacity_rps,
                capacity_per_replica_rps: conclusion.capacity_per_replica_rps,
                bracket: decision.bracket,
                refinements: decision.refinements,
                placement,
                client_limit_rps: decision.client_limit.map(|l| l.rate),
                loadgen_starved: decision.client_limit.is_some_and(|l| l.starved),
            });
            plans.push((cache, conclusion.plan));
        }
        self.status.cost = Some(points::cost(&self.status.points, gpus));
        self.status.early_stop_saved_gpu_minutes =
            points::early_stop_saved_gpu_minutes(&self.status.points, gpus);
        self.status.placement_saved_gpu_minutes =
            crate::planning::cost::placement_saved_gpu_minutes(modes.iter().filter_map(|m| {
                let p = m.placement.as_ref()?;
                Some((p.replaced_grid_gpu_minutes, p.rate_points_gpu_minutes))
            }));
        let capacities: Vec<_> = modes.iter().map(|m| (m.cache, m.capacity_rps)).collect();
        let chosen = driver::plan_cache_mode(spec.peak.as_ref(), &capacities);
        let mode = chosen.and_then(|c| modes.iter().find(|m| m.cache == c));
        self.status.capacity_rps = mode.and_then(|m| m.capacity_rps);
        self.status.capacity_per_replica_rps = mode.and_then(|m| m.capacity_per_replica_rps);
        self.status.required_replicas = chosen
            .and_then(|c| plans.iter().find(|p| p.0 == c))
            .and_then(|p| p.1.as_ref())
            .map(|p| u32::try_from(p.required_replicas).unwrap_or(u32::MAX));
        self.status.modes = modes;
        self.status.current_point = None;
        Ok(())
    }

    /// What a starved cache mode's condition says: the driver's words, with the evidence of
    /// the point the client fell behind on (its lag, its start delay: the point's reasons).
    fn starved_message(&self, mode: &ModeCapacity) -> String {
        let rate = mode.client_limit_rps.unwrap_or(0.0);
        let limit = driver::ClientLimit {
            rate,
            starved: true,
        };
        let evidence = self
            .status
            .points
            .iter()
            .find(|p| {
                p.cache == mode.cache
                    && p.client_behind
                    && p.offered_rps.is_some_and(|r| PointKey::same_rate(r, rate))
            })
            .map(|p| p.reasons.join("; "))
            .unwrap_or_default();
        format!(
            "{}. Evidence: {evidence}",
            limit.message(mode.cache.as_str())
        )
    }

    /// The benchmark's answer is complete: `Succeeded`, with the capacity in `Ready`.
    async fn succeed(&mut self) {
        self.status.phase = Some(Phase::Succeeded);
        let message = match self.status.capacity_rps {
            Some(c) => format!(
                "capacity {c} RPS ({} per replica){}",
                self.status
                    .capacity_per_replica_rps
                    .map_or("-".into(), |p| format!("{p:.3}")),
                self.status
                    .required_replicas
                    .map_or(String::new(), |r| format!("; {r} replica(s) for the peak"))
            ),
            None => match self.status.modes.iter().find(|m| m.loadgen_starved) {
                Some(m) => self.starved_message(m),
                None => "no offered rate passed the gate".into(),
            },
        };
        let reason = if self.status.capacity_rps.is_some() {
            reasons::SUCCEEDED
        } else if self.status.modes.iter().any(|m| m.loadgen_starved) {
            reasons::LOADGEN_STARVED
        } else {
            reasons::NO_PASSING_RATE
        };
        self.condition(conditions::READY, Cond::True, reason, message.clone());
        self.condition(
            conditions::PROGRESSING,
            Cond::False,
            reasons::SUCCEEDED,
            match self.status.failure_test.as_ref() {
                Some(f) => format!(
                    "all {} points and {} failure test(s) finished",
                    self.status.points.len(),
                    f.reports.len() + f.errors.len()
                ),
                None => format!("all {} points finished", self.status.points.len()),
            },
        );
        self.event(
            EventType::Normal,
            reasons::SUCCEEDED,
            &format!("Finished: {message}"),
        )
        .await;
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
    source: &crate::api::WorkloadSource,
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
        let yaml = include_str!("../../examples/capacity-benchmark-minimal.yaml");
        let mut cb: CapacityBenchmark = serde_saphyr::from_str(yaml).expect("the example parses");
        cb.spec.loadgen.shards = shards;
        cb.spec
    }

    #[test]
    fn a_point_gets_enough_shards_for_its_rate_and_its_records() {
        let seed = crate::workload::seed_manifest();
        assert_eq!(seed.client.initial_scheduled_requests, 22_000);
        let rate = |rate| PointKey::Rate {
            cache: crate::api::CacheMode::Cold,
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
            cache: crate::api::CacheMode::Cold,
            concurrency: 64,
        };
        assert_eq!(shards(&spec(None), &seed, level, 1.0), 1);
    }
}
