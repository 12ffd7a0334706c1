//! The end of a benchmark: its capacity and plan per cache mode, the conditions that say
//! so, and what it leaves behind.

use super::*;

impl Run<'_> {
    /// Every point has run: capacity per cache mode, per replica, and the plan (the
    /// benchmark succeeds once its failure tests, if any, have run too).
    pub(super) async fn conclude(
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
                    p.cache == cache && p.kind == goodput_api::PointKind::Rate && p.valid
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
                    .filter(|p| p.cache == cache && p.kind == goodput_api::PointKind::Rate);
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
            goodput_core::planning::cost::placement_saved_gpu_minutes(modes.iter().filter_map(
                |m| {
                    let p = m.placement.as_ref()?;
                    Some((p.replaced_grid_gpu_minutes, p.rate_points_gpu_minutes))
                },
            ));
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
    pub(super) fn starved_message(&self, mode: &ModeCapacity) -> String {
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
    pub(super) async fn succeed(&mut self) {
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
}
