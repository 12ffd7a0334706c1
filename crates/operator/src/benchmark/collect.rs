//! A point's result read back: the shards' ConfigMaps merged into one report, or why the
//! point is still running or was invalid.

use super::*;

impl Run<'_> {
    /// The current point's result once its Job finished: merged and gated, or invalid with
    /// the reason. A failed Job within the retry budget starts again; one whose pods never
    /// start gives up after the start timeout.
    pub(super) async fn collect(
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
    pub(super) async fn shard_results(
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
    pub(super) async fn running(
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
}
