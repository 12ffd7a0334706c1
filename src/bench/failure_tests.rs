//! A benchmark's failure tests on this machine, after its sweep: each fault injected into
//! the simulated replicas at the load the spec names, and its verdict.

use super::*;

impl Runner<'_> {
    /// The failure tests of `spec.failureTest`, one after another, at the given rate or the
    /// capacity × `rateFraction`; each writes its folder and comes back as its report.
    pub(super) async fn failure_tests(
        &self,
        test: &crate::api::FailureTest,
        cache: CacheMode,
        capacity_rps: Option<f64>,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<crate::failure::FailureReport>, BenchError> {
        use crate::failure::local::{EngineProcess, FaultSite, SimulatedFleet, run_test};
        let Some(rate) = test.rate_rps(capacity_rps) else {
            warnings.push(
                "failure tests skipped: no rate passed the gate and failureTest.rate is not \
                 given"
                    .into(),
            );
            return Ok(Vec::new());
        };
        let k = self.target.time_scale;
        // A real engine's process when one is named; otherwise the simulated engine's
        // admin API (in-process, or `goodput serve-sim` behind a URL).
        let site = match (&self.target.fleet, &test.engine_process) {
            (None, Some(p)) => FaultSite::Process(EngineProcess {
                url: self.target.facts.url.clone(),
                pid_file: p.pid_file.clone().into(),
            }),
            _ => FaultSite::Fleet(SimulatedFleet {
                router_url: self.target.facts.url.clone(),
                time_scale: k,
            }),
        };
        let gate = self.manifest.gate_config();
        let point_target = PointTarget {
            url: self.target.facts.url.clone(),
            model: self.target.facts.model.clone(),
            metrics_targets: self.target.metrics_targets.clone(),
            discover_metrics: false,
            time_scale: k,
        };
        let key = PointKey::Rate {
            cache,
            rate,
            repeat: 0,
        };
        let mut reports = Vec::new();
        for (i, fault) in test.faults.iter().enumerate() {
            self.bar.set_message(format!(
                "failure test {}: {} on {} at {} RPS",
                i + 1,
                fault.kind,
                fault.hits(),
                rate_label(rate)
            ));
            // Prompts of their own: the sweep's never reach these engines' caches.
            let nonce = self.nonce.wrapping_add(0x9e37_79b9 * (i as u64 + 1));
            let (config, plan) =
                point_job::point_load(self.spec, self.manifest, key, &point_target, nonce)
                    .map_err(|e| BenchError::Spec(e.to_string()))?;
            let done = run_test(
                &self.client,
                &site,
                test,
                fault,
                (&config, &plan),
                self.target.facts.replicas,
                &gate,
                self.stop.clone(),
            )
            .await
            .map_err(|e| BenchError::Spec(format!("failure test {}: {e}", fault.kind)))?;
            if let Some(e) = &done.alerts_error {
                warnings.push(format!(
                    "failure test {}: alerts not evaluated: {e}",
                    fault.kind
                ));
            }
            let (report, run, config, plan) = (done.report, done.run, done.config, done.plan);
            let dir = self.out.join(fault.kind.dir());
            let summary = run.measured.summarize(&config, &plan)?;
            run.measured.write(&summary, &plan, &dir)?;
            write_json(&dir.join(pack_files::FAILURE_TEST_JSON), &report)?;
            self.bar.inc(1);
            reports.push(report);
        }
        Ok(reports)
    }
}
