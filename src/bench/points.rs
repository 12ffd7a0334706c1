//! One point run here: a saturation level or a rate, its load from the point file's
//! definition, time-scaled, measured, analysed and written into the pack.

use super::*;

impl Runner<'_> {
    /// One closed-loop level.
    pub(super) async fn saturation_level(
        &self,
        cache: CacheMode,
        concurrency: u32,
    ) -> Result<SaturationLevel, BenchError> {
        let key = PointKey::Saturation { cache, concurrency };
        let dir = point_job::point_dir(key, self.spec.repeats.max(1));
        self.bar
            .set_message(format!("{cache} saturation: {concurrency} in flight"));
        let (summary, _lateness) = self.point(key, &dir).await?;
        self.bar.inc(1);
        let r = &summary.report;
        let first = self
            .manifest
            .workload
            .first()
            .and_then(|c| r.classes.get(&c.name));
        Ok(SaturationLevel {
            concurrency,
            dir,
            throughput_rps: r.request_throughput_rps,
            engine_rps: summary.engine_rps(),
            output_tps: r.output_throughput_tps,
            weakest_attainment: r.weakest_attainment(),
            p95_ttft_ms: first.and_then(|c| c.p95_ttft_ms),
            p95_tpot_ms: first.and_then(|c| c.p95_tpot_ms),
            slos_met: driver::slos_met(r, &self.manifest.gate_config()),
            cost: self.cost(&summary),
        })
    }

    /// What a point cost: its busy time (real-time units) on every GPU under test.
    pub(super) fn cost(&self, summary: &PointSummaryFile) -> Cost {
        Cost::of(summary.client.busy_s, self.gpus(), summary.client.sent)
    }

    /// Replicas × GPUs per replica under test.
    pub(super) fn gpus(&self) -> u32 {
        let facts = &self.target.facts;
        facts.replicas.max(1) * facts.gpus_per_replica.max(1)
    }

    /// One open-loop point (one repeat).
    pub(super) async fn rate_point(
        &self,
        key: PointKey,
        cache: CacheMode,
        rate: f64,
        repeat: u32,
    ) -> Result<PointResult, BenchError> {
        let seed = key.seed(self.manifest.client.request_schedule_seed);
        let dir = point_job::point_dir(key, self.spec.repeats.max(1));
        self.bar.set_message(format!(
            "{cache} {} RPS{}",
            rate_label(rate),
            if repeat >= self.spec.repeats.max(1) {
                " (again: the first was not evidence)".to_owned()
            } else if self.spec.repeats > 1 {
                format!(" repeat {}", repeat + 1)
            } else {
                String::new()
            }
        ));
        let (summary, engine_lateness) = self.point(key, &dir).await?;
        self.bar.inc(1);
        write_json(
            &self.out.join(&dir).join(pack_files::SLO_REPORT_JSON),
            &summary.report,
        )?;
        Ok(PointResult {
            offered_rps: rate,
            repeat,
            seed,
            refinement: false,
            dir,
            valid: summary.validity.valid,
            validity_reasons: summary.validity.reasons.clone(),
            client_behind: summary.validity.client_behind,
            validity_notes: summary.validity.notes.clone(),
            queue_trend_source: summary.queue_trend_source.clone(),
            engine_findings: summary.engine_findings.clone(),
            engine_truth: summary.engine_truth.clone(),
            littles_law: summary.littles_law,
            schedule_lag_p99_ms: summary.client.schedule_lag_ms.p99,
            engine_lateness,
            cost: self.cost(&summary),
            early_stop: summary.client.early_stop.clone(),
            report: summary.report,
        })
    }

    /// Runs one point on the run's clock, converts it to model time and writes its files.
    /// Returns the summary and, on the simulated engine, its frame lateness over the point
    /// (a point that did not pass with lateness over the bound is marked not evidence in
    /// its summary).
    pub(super) async fn point(
        &self,
        key: PointKey,
        dir: &str,
    ) -> Result<(PointSummaryFile, Option<fidelity::EngineLateness>), BenchError> {
        let k = self.target.time_scale;
        let target = PointTarget {
            url: self.target.facts.url.clone(),
            model: self.target.facts.model.clone(),
            metrics_targets: self.target.metrics_targets.clone(),
            discover_metrics: false,
            time_scale: k,
        };
        let (real, real_plan) =
            point_job::point_load(self.spec, self.manifest, key, &target, self.nonce)
                .map_err(|e| BenchError::Spec(e.to_string()))?;
        // One definition of time scaling (the load generator's): the run uses the scaled
        // forms, and the measured point is rescaled to real time below.
        let scaled = real.time_scaled(k);
        let scaled_plan = real_plan.time_scaled(k);
        let replicas = self
            .target
            .fleet
            .as_ref()
            .map_or(&[][..], |f| &f.replicas[..]);
        for r in replicas {
            r.reset_lateness();
        }
        let mut measured: MeasuredPoint = measure_point(
            self.client.clone(),
            &scaled,
            &scaled_plan,
            self.stop.clone(),
        )
        .await?;
        if let Some(p) = &self.spec.target.prometheus {
            let end = measured.started_unix_s + measured.run.start.elapsed().as_secs_f64();
            match prometheus_series(&self.client, p, measured.started_unix_s, end).await {
                Ok(series) => measured.series = Some(series),
                // The point stands on the client's records; the queue trend then comes
                // from the client's in-flight count, and the summary says so.
                Err(e) => self
                    .bar
                    .println(format!("warning: {dir}: engine metrics: {e}")),
            }
        }
        if let Some(found) = measured.series.as_ref().and_then(|s| s.profile.as_ref())
            && let Ok(mut slot) = self.profile.lock()
        {
            slot.get_or_insert_with(|| found.clone());
        }
        let frames: Vec<_> = replicas
            .iter()
            .filter_map(|r| r.lateness().map(|(frames, _steps)| frames))
            .collect();
        let lateness = fidelity::tightest_ttft_cutoff_ms(&real_plan.gate)
            .and_then(|cutoff| fidelity::engine_lateness(&frames, k, cutoff));
        measured.rescale(k);
        let mut summary = measured.summarize(&real, &real_plan)?;
        if let Some(note) = failure_note(dir, &summary, &real_plan.gate) {
            self.bar.println(format!("warning: {note}"));
            if let Ok(mut f) = self.failures.lock() {
                f.push(note);
            }
        }
        let passed = summary.report.capacity_gate_pass;
        if let Some(l) = lateness.filter(|l| l.refuses_point(passed))
            && let Some(finding) = l.finding(k, passed)
        {
            // The harness's delay voids only a failure it could have caused: one whose
            // attainment stays short with the largest lateness taken off every request
            // stands (a late engine can grow its own queue, so that rule alone does not).
            let short = crate::analysis::attainment_short_beyond(
                &real_plan.gate,
                measured
                    .run
                    .records
                    .iter()
                    .filter(|r| r.ok())
                    .map(|r| (r.class, r.ttft_ms, r.tpot_ms, u64::from(r.output_tokens))),
                l.relief_ms(),
            );
            if short {
                summary.validity.notes.push(l.standing_failure(k));
            } else {
                summary.validity.valid = false;
                summary.validity.reasons.push(finding);
            }
        }
        measured.write(&summary, &real_plan, &self.out.join(dir))?;
        Ok((summary, lateness))
    }
}

/// What a reviewer reads about a point that lost more requests than the gate allows: how
/// many, and the server's most frequent words for it (an out-of-vocabulary token id, a
/// closed connection).
pub(super) fn failure_note(
    dir: &str,
    summary: &PointSummaryFile,
    gate: &crate::analysis::GateConfig,
) -> Option<String> {
    let r = &summary.report;
    let most = summary.client.errors.first()?;
    (r.error_rate? > gate.error_rate_max).then(|| {
        format!(
            "{dir}: {} of {} requests failed; most often {most}",
            r.failed, r.attempted
        )
    })
}
