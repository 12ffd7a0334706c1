//! What a benchmark measures: its spec validated and its manifest frozen, its target
//! resolved (a URL, a Service's ready pods, or simulated replicas the operator starts) and
//! what the target says it runs.

use super::*;

impl Run<'_> {
    /// Resolves the manifest and validates the benchmark with the same checks as
    /// `goodput lint`.
    pub(super) async fn validate(&mut self) -> Result<WorkloadManifest, Blocked> {
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
        let (manifest, findings) = goodput_api::check_benchmark(spec, manifest);
        let errors: Vec<String> = findings
            .iter()
            .filter(|f| f.severity == goodput_core::workload::Severity::Error)
            .map(|f| format!("{}: {}", f.path, f.message))
            .collect();
        if !errors.is_empty() {
            return Err(invalid(errors.join("; ")));
        }
        let cluster = goodput_api::lint::cluster_unsupported(spec);
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
    pub(super) async fn target(
        &mut self,
        manifest: &WorkloadManifest,
    ) -> Result<ResolvedTarget, Blocked> {
        let spec = &self.cb.spec;
        let key = crate::target_key(self.cb)
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
    pub(super) async fn resolved_identity(&self, target: &ResolvedTarget) -> ResolvedIdentity {
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
    pub(super) async fn engine_pages_answer(&self, target: &ResolvedTarget) -> Result<(), Blocked> {
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
    pub(super) async fn simulated(
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
            goodput_model::setup::preset(&sim.preset)
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
    pub(super) async fn teardown_simulated(&self) -> Result<(), Error> {
        if self.cb.spec.target.is_simulated() {
            let name = self.owner.simulated_name();
            self.delete::<Deployment>(&name).await?;
            self.delete::<Service>(&name).await?;
        }
        Ok(())
    }
}
