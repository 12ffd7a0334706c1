//! A plan's proposal from files, with no cluster (`goodput propose`), and the arithmetic in
//! words that the controller writes too.

use super::*;

/// A proposal's arithmetic in words: the formula with its numbers, any clamp or hold, and
/// the GPU count. The controller and `goodput propose` both write it so.
pub(super) fn proposal_lines(
    required: &goodput_core::planning::serving::Requirement,
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
    pub gate: Option<goodput_core::analysis::GateConfig>,
}

/// A benchmark's rate points in one cache mode: the sweep a proposal shows.
pub(super) fn rate_points(cb: &CapacityBenchmark, cache: CacheMode) -> Vec<&FinishedPoint> {
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
        result: &'a goodput_core::benchmark::result::BenchResult,
        /// `workload-manifest.yaml`.
        manifest: &'a WorkloadManifest,
        /// Where the pack is, for the evidence.
        path: String,
    },
}

/// The capacity a capacity pack measured, as a plan's evidence: the cache mode the plan
/// names, else the one the pack planned with, else the lowest capacity; its points turned
/// into status entries by the controller's own function.
pub(super) fn pack_capacity(
    reference: &goodput_api::BenchmarkRef,
    result: &goodput_core::benchmark::result::BenchResult,
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
                let c =
                    |m: &goodput_core::benchmark::result::ModeResult| m.capacity_rps.unwrap_or(0.0);
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
            crate::status::finished_point(
                goodput_core::benchmark::driver::PointKey::Rate {
                    cache: mode.cache,
                    rate: p.offered_rps,
                    repeat: p.repeat,
                },
                &p.report,
                &goodput_loadgen::point::Validity {
                    valid: p.valid,
                    reasons: p.validity_reasons.clone(),
                    client_behind: p.client_behind,
                    notes: p.validity_notes.clone(),
                },
                manifest,
                p.dir.clone(),
                Some(crate::status::Held {
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
pub(super) fn offline_evidence(
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
