//! `goodput operator`: the cluster shell. A `kube::runtime::Controller` for
//! `CapacityBenchmark` that runs each test point the benchmark driver chooses as a Job of
//! `goodput loadgen` pods, merges their results with the analysis core, and keeps every
//! finished point in the benchmark's status (see [`benchmark`] for the pipeline).
//!
//! - [`benchmark`]: the reconcile pipeline of one benchmark.
//! - [`build`]: the pure builders of the objects a benchmark owns.
//! - [`status`]: finished points, driver records and conclusions, pure.
//! - [`pods`]: why a point's pods failed or have not started, pure.
//! - [`target`]: finding a Service target's address and ready pods.
//! - [`metrics`]: the operator's Prometheus metrics and admin endpoints.
//! - [`lease`]: leader election on a `coordination.k8s.io` Lease.
//! - [`serving_plan`]: the `ServingPlan` controller: proposal, apply, revalidation.
//! - [`workload`]: what a workload declares it runs (annotations, engine arguments).
//! - [`handoff`], [`publish`], [`bucket`]: how a loadgen pod hands its point's results to
//!   the operator (a ConfigMap's layout and the shards' merge, its publication, the
//!   results bucket).
//!
//! Re-exported as `goodput::controller` (the hand-off as `goodput::loadgen::{handoff,
//! publish, bucket}`). The only crate of the workspace with kube's client and runtime.

pub mod benchmark;
pub mod bucket;
pub mod build;
pub mod handoff;
pub mod lease;
pub mod metrics;
pub mod pods;
pub mod publish;
pub mod pull_request;
pub mod serving_plan;
pub mod status;
pub mod target;
pub mod workload;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{FutureExt as _, StreamExt as _};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{Instrument as _, info, info_span, warn};

use goodput_api::placement::ModelPrior;
use goodput_api::{CapacityBenchmark, Phase, ServingPlan};

/// Why the operator could not reach the API server.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// No kubeconfig was given and the process runs outside a cluster.
    #[error("no kubeconfig and no in-cluster configuration")]
    NoConfig(#[source] kube::Error),
    /// The kubeconfig file could not be read or parsed.
    #[error("reading {path}")]
    Read {
        /// The kubeconfig's path.
        path: String,
        /// What went wrong.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig's current context could not be used.
    #[error("using {path}")]
    Use {
        /// The kubeconfig's path.
        path: String,
        /// What went wrong.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The client could not be built from the configuration.
    #[error("building the API client")]
    Build(#[source] kube::Error),
}

/// A client of the API server: from `kubeconfig`'s current context, or without one as kube
/// infers it (`KUBECONFIG`, `~/.kube/config`, then the in-cluster service account).
pub async fn connect(kubeconfig: Option<&std::path::Path>) -> Result<Client, ConnectError> {
    let Some(path) = kubeconfig else {
        return Client::try_default().await.map_err(ConnectError::NoConfig);
    };
    let shown = || path.display().to_string();
    let config =
        kube::config::Kubeconfig::read_from(path).map_err(|source| ConnectError::Read {
            path: shown(),
            source,
        })?;
    let config =
        kube::Config::from_custom_kubeconfig(config, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|source| ConnectError::Use {
                path: shown(),
                source,
            })?;
    Client::try_from(config).map_err(ConnectError::Build)
}

/// The field manager of every write, and the Events' reporting controller.
pub const FIELD_MANAGER: &str = "goodput-operator";

/// How the operator runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// The image loadgen Jobs and simulated targets run (the operator's own).
    pub image: String,
    /// Watch only these namespaces (one controller each); empty: all namespaces.
    pub namespaces: Vec<String>,
    /// Times a point whose pod failed is started again before it is recorded as invalid.
    pub pod_retries: i32,
    /// How long a point's pods may all wait to start (image pull, scheduling) before the
    /// point is recorded as invalid.
    pub pod_start_timeout: Duration,
    /// Time between creating a sharded point's Job and its shards' common start: enough
    /// for every pod to be scheduled, pull the image and start (a shard that starts late
    /// makes the point invalid).
    pub shard_start_lead: Duration,
    /// The loadgen container's requests and limits, for every point Job.
    pub loadgen_resources: Option<k8s_openapi::api::core::v1::ResourceRequirements>,
    /// Where every loadgen pod serves its client metrics (`--loadgen-metrics-addr`, may
    /// name `$(POD_IP)`); `None`: not served.
    pub loadgen_metrics_addr: Option<String>,
    /// How often a serving plan looks at its workload and peak when nothing it watches
    /// changed.
    pub plan_resync: Duration,
}

/// What every reconcile shares.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Probes the targets: identity and engine pages before each point.
    pub http: reqwest::Client,
    /// Publishes Events.
    pub recorder: Recorder,
    /// The image loadgen Jobs and simulated targets run.
    pub image: String,
    /// How the operator runs.
    pub options: Options,
    /// Every benchmark, as the controller's reflector holds them.
    /// The watched benchmarks: one store per watched namespace (one for all namespaces).
    pub benchmarks: Vec<Store<CapacityBenchmark>>,
    /// Consecutive failures per object (`kind/namespace/name`), for exponential backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// Reconcile counters and durations.
    pub metrics: metrics::Metrics,
    /// Taken by a plan while it talks to its forge: pull request writes are serialised,
    /// as the forges' secondary rate limits ask.
    pub gitops: tokio::sync::Mutex<()>,
    /// The engine model's expectations of each simulated target, per benchmark uid, for
    /// the generation they were computed at (see [`Context::model_priors`]).
    model_priors: Mutex<HashMap<String, KeptPriors>>,
}

/// A benchmark's engine-model priors and the generation they were computed for.
type KeptPriors = (i64, Arc<Vec<ModelPrior>>);

/// Why a reconcile failed. Each variant names the call that failed and keeps its source.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object lacks a field the API server always sets.
    #[error("the benchmark has no {0}")]
    MissingField(&'static str),
    /// Reading an object failed.
    #[error("reading a {kind}: {source}")]
    Read {
        /// The kind read.
        kind: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Applying an owned object failed.
    #[error("applying {kind} {name}: {source}")]
    Apply {
        /// The kind applied.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Deleting an owned object failed.
    #[error("deleting {kind} {name}: {source}")]
    Delete {
        /// The kind deleted.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing status failed.
    #[error("writing status: {0}")]
    Status(#[source] kube::Error),
    /// A point file could not be encoded.
    #[error("encoding a point: {0}")]
    Encode(#[source] serde_json::Error),
    /// A recorded result could not be used.
    #[error("{0}")]
    Result(String),
}

impl Error {
    /// A static category for the failure metric (never the message: bounded labels).
    pub fn category(&self) -> &'static str {
        match self {
            Error::MissingField(_) => "missing_field",
            Error::Read { .. } => "read",
            Error::Apply { .. } => "apply",
            Error::Delete { .. } => "delete",
            Error::Status(_) => "status",
            Error::Encode(_) => "encode",
            Error::Result(_) => "result",
        }
    }

    fn read(kind: &'static str) -> impl FnOnce(kube::Error) -> Error {
        move |source| Error::Read { kind, source }
    }

    fn apply(kind: &'static str, name: &str) -> impl FnOnce(kube::Error) -> Error {
        let name = name.to_owned();
        move |source| Error::Apply { kind, name, source }
    }
}

impl Context {
    /// Publishes an Event about a benchmark or a plan; a failure to publish is logged,
    /// never fatal.
    pub async fn publish<K>(&self, object: &K, type_: EventType, reason: &str, note: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note.to_owned()),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &object.object_ref(&())).await {
            warn!(error = %e, object = %object.meta().name.as_deref().unwrap_or_default(),
                "Failed to publish an Event");
        }
    }

    /// The engine model's expectations of benchmark `uid`'s simulated target at
    /// `generation`: `compute`d once, off the runtime's threads (it simulates every
    /// saturation level and bisects the capacity: seconds of CPU), and kept for the
    /// reconciles that replay the driver until the spec changes.
    pub async fn model_priors(
        &self,
        uid: &str,
        generation: i64,
        compute: impl FnOnce() -> Result<Vec<ModelPrior>, String> + Send + 'static,
    ) -> Result<Arc<Vec<ModelPrior>>, String> {
        let kept = self
            .model_priors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .filter(|(g, _)| *g == generation)
            .map(|(_, p)| p.clone());
        if let Some(priors) = kept {
            return Ok(priors);
        }
        let priors = Arc::new(
            tokio::task::spawn_blocking(compute)
                .await
                .map_err(|e| format!("the engine model stopped: {e}"))??,
        );
        self.model_priors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid.to_owned(), (generation, priors.clone()));
        Ok(priors)
    }

    /// The next delay of an object that keeps failing: 5 s doubling to 5 min.
    pub fn backoff<K: Resource<DynamicType = ()>>(&self, object: &K) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = failures.entry(failure_key(object)).or_insert(0);
        *n = n.saturating_add(1);
        Duration::from_secs(5u64.saturating_mul(1 << (*n - 1).min(6)).min(300))
    }

    fn succeeded<K: Resource<DynamicType = ()>>(&self, object: &K) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        failures.remove(&failure_key(object));
    }

    /// The benchmark that holds `target` when it is not `cb`: among the unfinished
    /// benchmarks of that target, one already running, else the oldest (then by name), so
    /// every reconcile picks the same one without a lock object.
    pub fn target_holder(&self, cb: &CapacityBenchmark, target: &str) -> Option<String> {
        let key = |b: &CapacityBenchmark| {
            let running = b.status.as_ref().is_some_and(|s| s.current_point.is_some());
            (
                !running,
                b.metadata.creation_timestamp.clone().map(|t| t.0),
                b.namespace().unwrap_or_default(),
                b.name_any(),
            )
        };
        let holder = self
            .benchmarks
            .iter()
            .flat_map(Store::state)
            .filter(|b| b.metadata.deletion_timestamp.is_none())
            .filter(|b| {
                !b.status.as_ref().is_some_and(|s| {
                    matches!(s.phase, Some(Phase::Succeeded | Phase::Failed))
                        && s.observed_generation == b.metadata.generation
                })
            })
            .filter(|b| target_key(b).as_deref() == Some(target))
            .min_by_key(|b| key(b))?;
        let same = holder.namespace() == cb.namespace() && holder.name_any() == cb.name_any();
        (!same).then(|| {
            format!(
                "{}/{}",
                holder.namespace().unwrap_or_default(),
                holder.name_any()
            )
        })
    }
}

/// The backoff key of an object: `kind/namespace/name`.
fn failure_key<K: Resource<DynamicType = ()>>(object: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default()
    )
}

/// The lock key of a benchmark's target, as far as the spec tells it: `svc/<ns>/<name>`, the
/// URL, or `simulated/<ns>/<name>` (a simulated target is the benchmark's own, never shared).
pub(crate) fn target_key(cb: &CapacityBenchmark) -> Option<String> {
    let t = &cb.spec.target;
    if let Some(url) = &t.url {
        return Some(url.trim_end_matches('/').to_owned());
    }
    if let Some(svc) = &t.service {
        let ns = svc.namespace.clone().or_else(|| cb.namespace())?;
        return Some(format!("svc/{ns}/{}", svc.name));
    }
    Some(format!(
        "simulated/{}/{}",
        cb.namespace().unwrap_or_default(),
        cb.name_any()
    ))
}

/// Backs off per benchmark and counts the failure.
fn error_policy(cb: Arc<CapacityBenchmark>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(benchmark = %cb.name_any(), error = %error, "Failed to reconcile a CapacityBenchmark");
    ctx.metrics.failed(error.category());
    Action::requeue(ctx.backoff(cb.as_ref()))
}

async fn reconcile(cb: Arc<CapacityBenchmark>, ctx: Arc<Context>) -> Result<Action, Error> {
    let span = info_span!(
        "reconcile",
        benchmark = %cb.name_any(),
        namespace = %cb.namespace().unwrap_or_default()
    );
    let started = Instant::now();
    let result = benchmark::reconcile(cb.clone(), ctx.clone())
        .instrument(span)
        .await;
    ctx.metrics.reconciled(started.elapsed());
    if result.is_ok() {
        ctx.succeeded(cb.as_ref());
    }
    ctx.metrics.observe_capacity(&cb);
    result
}

/// Runs the controller until `shutdown` resolves (then it stops starting reconciles and
/// returns once the running ones finish; Jobs keep running in the cluster).
pub async fn run(
    client: Client,
    http: reqwest::Client,
    options: Options,
    metrics: metrics::Metrics,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    // One controller per watched namespace (RBAC then needs nothing cluster-wide), all
    // reconciling with one context, so the one-benchmark-per-target lock sees them all.
    let shutdown = shutdown.shared();
    let scopes: Vec<Option<String>> = if options.namespaces.is_empty() {
        vec![None]
    } else {
        options.namespaces.iter().cloned().map(Some).collect()
    };
    let controllers: Vec<Controller<CapacityBenchmark>> = scopes
        .iter()
        .map(|ns| controller_in(&client, ns.as_deref()).graceful_shutdown_on(shutdown.clone()))
        .collect();
    let context = Arc::new(Context {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
        client,
        http,
        image: options.image.clone(),
        benchmarks: controllers.iter().map(Controller::store).collect(),
        options,
        failures: Mutex::default(),
        metrics,
        gitops: tokio::sync::Mutex::default(),
        model_priors: Mutex::default(),
    });
    // A cluster with only the CapacityBenchmark CRD still benchmarks; plans need theirs.
    let plan_kind = kube::api::GroupVersionKind::gvk(goodput_api::GROUP, "v1alpha1", "ServingPlan");
    let plans_served = kube::discovery::pinned_kind(&context.client, &plan_kind)
        .await
        .is_ok();
    if !plans_served {
        warn!(
            "The ServingPlan CRD is not served: ServingPlans are not reconciled (apply \
             crds/servingplan.yaml and restart the operator)"
        );
    }
    let plans: Vec<Controller<ServingPlan>> = scopes
        .iter()
        .filter(|_| plans_served)
        .map(|ns| {
            plan_controller_in(&context.client, ns.as_deref())
                .graceful_shutdown_on(shutdown.clone())
        })
        .collect();
    info!(namespaces = ?scopes, "Started the CapacityBenchmark and ServingPlan controllers");
    let benchmark_runs = controllers.into_iter().map(|controller| {
        controller
            .run(reconcile, error_policy, context.clone())
            .for_each(|result| async move { log_result(result.map(|_| ())) })
            .boxed()
    });
    let plan_runs = plans.into_iter().map(|controller| {
        controller
            .run(reconcile_plan, plan_error_policy, context.clone())
            .for_each(|result| async move { log_result(result.map(|_| ())) })
            .boxed()
    });
    futures_util::future::join_all(benchmark_runs.chain(plan_runs)).await;
    info!("Stopped the CapacityBenchmark and ServingPlan controllers");
}

/// Logs what a controller's stream yields that is not a reconcile's own result.
fn log_result<E: std::fmt::Display>(
    result: Result<(), kube::runtime::controller::Error<Error, E>>,
) {
    match result {
        Ok(()) => {}
        // Expected after a delete: the queue still held the object.
        Err(kube::runtime::controller::Error::ObjectNotFound(r)) => {
            tracing::debug!(object = %r, "Reconciled an object that is gone")
        }
        Err(e) => warn!(error = %e, "Controller error"),
    }
}

/// Backs off per plan and counts the failure.
fn plan_error_policy(plan: Arc<ServingPlan>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(plan = %plan.name_any(), error = %error, "Failed to reconcile a ServingPlan");
    ctx.metrics.failed(error.category());
    Action::requeue(ctx.backoff(plan.as_ref()))
}

async fn reconcile_plan(plan: Arc<ServingPlan>, ctx: Arc<Context>) -> Result<Action, Error> {
    let span = info_span!(
        "reconcile",
        plan = %plan.name_any(),
        namespace = %plan.namespace().unwrap_or_default()
    );
    let started = Instant::now();
    let result = serving_plan::reconcile(plan.clone(), ctx.clone())
        .instrument(span)
        .await;
    ctx.metrics.reconciled(started.elapsed());
    if result.is_ok() {
        ctx.succeeded(plan.as_ref());
    }
    result
}

/// The ServingPlan controller of one namespace (`None`: all): its own revalidation
/// benchmarks, and the benchmarks plans take their evidence from (a changed capacity is
/// replanned at once).
fn plan_controller_in(client: &Client, namespace: Option<&str>) -> Controller<ServingPlan> {
    let plans: Api<ServingPlan> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let benchmarks: Api<CapacityBenchmark> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let controller = Controller::new(plans, watcher::Config::default());
    let store = controller.store();
    controller.watches(
        benchmarks,
        watcher::Config::default(),
        move |cb: CapacityBenchmark| {
            let namespace = cb.namespace();
            let name = cb.name_any();
            let owners: Vec<ObjectRef<ServingPlan>> = cb
                .owner_references()
                .iter()
                .filter(|o| o.kind == "ServingPlan")
                .map(|o| ObjectRef::new(&o.name).within(namespace.as_deref().unwrap_or_default()))
                .collect();
            let referring: Vec<ObjectRef<ServingPlan>> = store
                .state()
                .into_iter()
                .filter(|p| p.namespace() == namespace)
                .filter(|p| {
                    p.spec
                        .capacity
                        .benchmark_ref
                        .as_ref()
                        .is_some_and(|r| r.name == name)
                })
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect();
            owners.into_iter().chain(referring)
        },
    )
}

/// The CapacityBenchmark controller of one namespace (`None`: all), owning the Jobs,
/// ConfigMaps, Deployments and Services it labels as its own.
fn controller_in(client: &Client, namespace: Option<&str>) -> Controller<CapacityBenchmark> {
    fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    let owned = || watcher::Config::default().labels(&format!("{}=goodput", build::MANAGED_BY));
    Controller::new(api(client, namespace), watcher::Config::default())
        .owns(api::<Job>(client, namespace), owned())
        .owns(api::<ConfigMap>(client, namespace), owned())
        .owns(api::<Deployment>(client, namespace), owned())
        .owns(api::<Service>(client, namespace), owned())
}
