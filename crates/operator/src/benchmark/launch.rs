//! A point as a Job: its point file, its shards and deadline, a relaunch after a failed
//! pod, and the pods of an attempt.

use super::*;

impl Run<'_> {
    /// Creates the objects of the point the driver chose and marks it current.
    pub(super) async fn start(
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
            nonce: goodput_core::workload::hashing::fnv1a(
                0,
                self.cb.uid().unwrap_or_default().as_bytes(),
            ),
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
    pub(super) async fn launch(
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
    pub(super) async fn launch_at(
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
    pub(super) fn results_dir(&self) -> String {
        format!("{}/g{}", self.owner.base(), self.generation)
    }

    /// Where a point's shards keep their raw results, when the spec names a claim or a
    /// bucket: `<benchmark>/g<generation>/<job>/` in it.
    pub(super) fn results_sink(&self, job_name: &str) -> Option<build::ResultsSink> {
        Some(build::ResultsSink {
            store: build::ResultsStore::of(&self.cb.spec.loadgen)?,
            dir: format!("{}/{job_name}", self.results_dir()),
        })
    }

    /// Starts a failed point again from its own point file (the same load, the same
    /// seeds) as a new Job, and removes the failed attempt.
    pub(super) async fn relaunch(
        &mut self,
        current: &CurrentPoint,
        key: PointKey,
        failed: &Job,
        why: &str,
    ) -> Result<Option<goodput_api::FinishedPoint>, Error> {
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
    pub(super) async fn remove_attempt(&self, job: &str, shards: u32) -> Result<(), Error> {
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
    pub(super) async fn job_pods(&self, job: &str) -> Result<Vec<Pod>, Error> {
        let pods: Api<Pod> = self.api();
        Ok(pods
            .list(&ListParams::default().labels(&format!("job-name={job}")))
            .await
            .map_err(Error::read("Pod"))?
            .items)
    }
}
