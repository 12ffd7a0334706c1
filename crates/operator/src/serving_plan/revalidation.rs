//! Revalidation: once the workload runs the proposed replicas (or declares another engine
//! version or model revision), an owned CapacityBenchmark measures it again, and its result
//! becomes the plan's verification.

use super::*;

impl PlanRun<'_> {
    /// Benchmarks the workload again once it reaches a new replica count (or declares
    /// another engine version or model revision) with every replica ready, and reads the
    /// result. Returns how soon to look again while one waits or runs.
    pub(super) async fn revalidate(
        &mut self,
        target: &Workload,
        evidence: &Evidence,
        peak: f64,
        identity: &str,
        declared: &DeclaredIdentity,
        mismatched: bool,
    ) -> Result<Option<Duration>, Blocked> {
        let spec = &self.plan.spec;
        if !spec.revalidation.enabled {
            self.condition(
                plan_cond::VERIFIED,
                Cond::Unknown,
                reason::NOT_REVALIDATED,
                "revalidation is disabled",
            );
            return Ok(None);
        }
        let n = target.replicas;
        let previous = self.status.verification.clone();
        let needed = match &previous {
            Some(v) => v.replicas != n || v.identity != identity,
            // The benchmarked topology needs none, unless it now runs something else.
            None => mismatched || n != evidence.replicas_tested || evidence.benchmark.is_none(),
        };
        if !needed {
            let Some(v) = previous else {
                self.condition(
                    plan_cond::VERIFIED,
                    Cond::Unknown,
                    reason::NOT_REVALIDATED,
                    format!(
                        "the workload runs the benchmarked topology ({n} replicas); it is \
                         revalidated when it scales"
                    ),
                );
                return Ok(None);
            };
            if v.state != Verification::RUNNING {
                return Ok(None);
            }
            return self.read_verification(v, evidence).await;
        }
        if n == 0 {
            return Ok(None);
        }
        let ready = target.ready.unwrap_or(n);
        if ready < n {
            self.condition(
                plan_cond::VERIFIED,
                Cond::Unknown,
                reason::WAITING_FOR_REPLICAS,
                format!("{ready} of {n} replicas are ready; revalidation starts when all are"),
            );
            return Ok(Some(REVALIDATION_POLL));
        }
        let built = verification_benchmark(
            self.plan,
            evidence,
            VerificationInputs {
                replicas: n,
                peak,
                identity,
                declared,
            },
        );
        let cb = match built {
            Ok(cb) => cb,
            Err(why) => {
                self.condition(
                    plan_cond::VERIFIED,
                    Cond::Unknown,
                    reason::NOT_REVALIDATED,
                    why,
                );
                return Ok(None);
            }
        };
        let api: Api<CapacityBenchmark> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        // One revalidation at a time: an older one (another topology) is removed.
        let owned = api
            .list(&ListParams::default().labels(&format!("{PLAN_LABEL}={}", self.plan.name_any())))
            .await
            .map_err(|e| api_blocked("listing revalidation benchmarks", e))?;
        for old in owned.iter().filter(|o| o.name_any() != cb.name_any()) {
            api.delete(&old.name_any(), &DeleteParams::background())
                .await
                .map(|_| ())
                .or_else(|e| match e {
                    kube::Error::Api(a) if a.code == 404 => Ok(()),
                    e => Err(api_blocked("removing an older revalidation", e)),
                })?;
        }
        match api.create(&PostParams::default(), &cb).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(api_blocked("creating the revalidation benchmark", e)),
        }
        let expected = f64::from(n) * evidence.per_replica();
        let message = format!(
            "benchmarking {n} replicas at the peak ({} RPS) and the linear expectation \
             ({} RPS) in CapacityBenchmark {}",
            round3(peak),
            round3(expected),
            cb.name_any()
        );
        self.status.verification = Some(Verification {
            replicas: n,
            identity: identity.to_owned(),
            benchmark: cb.name_any(),
            state: Verification::RUNNING.into(),
            peak_rps: Some(round3(peak)),
            expected_fleet_rps: Some(round3(expected)),
            message: message.clone(),
            ..Default::default()
        });
        self.condition(
            plan_cond::VERIFIED,
            Cond::Unknown,
            reason::REVALIDATING,
            message.clone(),
        );
        self.event(EventType::Normal, reason::REVALIDATING, &message)
            .await;
        Ok(Some(REVALIDATION_POLL))
    }

    /// The revalidation benchmark's result, once it has one.
    pub(super) async fn read_verification(
        &mut self,
        v: Verification,
        evidence: &Evidence,
    ) -> Result<Option<Duration>, Blocked> {
        let api: Api<CapacityBenchmark> = Api::namespaced(self.ctx.client.clone(), &self.namespace);
        let cb = api
            .get_opt(&v.benchmark)
            .await
            .map_err(|e| api_blocked("reading the revalidation benchmark", e))?;
        let Some(cb) = cb else {
            let done = Verification {
                state: Verification::FAILED.into(),
                message: format!(
                    "CapacityBenchmark {} was deleted before it finished",
                    v.benchmark
                ),
                ..v
            };
            self.finish_verification(done).await;
            return Ok(None);
        };
        let status = cb.status.clone().unwrap_or_default();
        let finished = status.observed_generation == cb.metadata.generation
            && matches!(status.phase, Some(Phase::Succeeded | Phase::Failed));
        if !finished {
            return Ok(Some(REVALIDATION_POLL));
        }
        let spec = &self.plan.spec;
        let gpus = spec
            .gpus_per_replica
            .or(evidence.gpus_per_replica)
            .unwrap_or(1);
        let done = verification_outcome(
            v,
            &status,
            evidence.cache_mode,
            PlanBounds {
                utilization: spec.target_utilization,
                gpus_per_replica: gpus,
                min: spec.min_replicas.max(1),
                max: spec.max_replicas,
            },
        );
        self.finish_verification(done).await;
        Ok(None)
    }

    pub(super) async fn finish_verification(&mut self, done: Verification) {
        let (status, why, kind) = match done.state.as_str() {
            Verification::VERIFIED => (Cond::True, reason::VERIFIED, "verified"),
            Verification::SHORTFALL => (Cond::False, reason::SHORTFALL, "shortfall"),
            _ => (
                Cond::False,
                reason::REVALIDATION_FAILED,
                "revalidation_failed",
            ),
        };
        self.condition(plan_cond::VERIFIED, status, why, done.message.clone());
        let type_ = if status == Cond::True {
            EventType::Normal
        } else {
            EventType::Warning
        };
        self.event(type_, why, &done.message).await;
        self.ctx.metrics.plan_event(kind);
        self.status.verification = Some(done);
    }
}

/// What a revalidation benchmark measures.
pub(super) struct VerificationInputs<'a> {
    pub(super) replicas: u32,
    pub(super) peak: f64,
    pub(super) identity: &'a str,
    /// What the workload declares it runs: the revalidation's manifest says so.
    pub(super) declared: &'a DeclaredIdentity,
}

/// The owned CapacityBenchmark that revalidates `replicas` replicas: the referenced
/// benchmark's workload, acceptance, cache mode and load settings against the workload's
/// Service, at the peak and the linear expectation (replicas × capacity per replica), and
/// at a quarter and a half of the expectation so a shortfall has a measured capacity. `Err` says why none can be built.
pub(super) fn verification_benchmark(
    plan: &ServingPlan,
    evidence: &Evidence,
    inputs: VerificationInputs<'_>,
) -> Result<CapacityBenchmark, String> {
    let re = &plan.spec.revalidation;
    let base = evidence.benchmark.as_ref().map(|cb| &cb.spec);
    let service: Option<ServiceTarget> = re
        .service
        .clone()
        .or_else(|| base.and_then(|b| b.target.service.clone()));
    let Some(service) = service else {
        return Err(
            "nothing to benchmark: the evidence is not of a Service; set \
             spec.revalidation.service"
                .into(),
        );
    };
    // The evidence's manifest, inline, describing what is measured now: the workload's
    // declared revision, engine version and TP, and the replicas under test.
    let workload: Option<WorkloadSource> = re.workload.clone().or_else(|| {
        evidence.manifest.as_ref().map(|m| WorkloadSource {
            manifest: Some(Box::new(manifest_for(m, inputs.declared, inputs.replicas))),
            ..Default::default()
        })
    });
    let Some(workload) = workload else {
        return Err("no workload to send: set spec.revalidation.workload".into());
    };
    let expected = f64::from(inputs.replicas) * evidence.per_replica();
    // The peak and the linear expectation answer the question; a quarter and a half of
    // the expectation measure what the fleet does carry when the peak falls short.
    let mut rates = vec![
        round3(expected / 4.0),
        round3(expected / 2.0),
        round3(inputs.peak),
        round3(expected),
    ];
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    rates.retain(|r| *r > 0.0);
    let time_scale = re
        .time_scale
        .or_else(|| base.and_then(|b| b.target.time_scale));
    let mut experiments = base.map(|b| b.experiments.clone()).unwrap_or_default();
    experiments.saturation = None;
    experiments.rate_sweep = Some(RateSweep {
        rates,
        ..Default::default()
    });
    experiments.cache_modes = vec![evidence.cache_mode];
    let spec = CapacityBenchmarkSpec {
        target: Target {
            service: Some(service),
            model: base.and_then(|b| b.target.model.clone()),
            api: base.map(|b| b.target.api).unwrap_or_default(),
            replicas: Some(inputs.replicas),
            gpus_per_replica: plan.spec.gpus_per_replica.or(evidence.gpus_per_replica),
            time_scale,
            prometheus: base.and_then(|b| b.target.prometheus.clone()),
            ..Default::default()
        },
        workload,
        experiments,
        acceptance: base.and_then(|b| b.acceptance.clone()),
        repeats: 1,
        peak: Some(PeakForecast {
            rps: round3(inputs.peak),
            target_utilization: Some(plan.spec.target_utilization),
            cache_mode: Some(evidence.cache_mode),
        }),
        reporting: base.map(|b| b.reporting.clone()).unwrap_or_default(),
        loadgen: base.map(|b| b.loadgen.clone()).unwrap_or_default(),
        // A revalidation measures capacity; it never injects faults into the fleet.
        failure_test: None,
    };
    let name = format!(
        "{}-verify-r{}-{}",
        truncate(&plan.name_any(), 40),
        inputs.replicas,
        &short_hash(inputs.identity)
    );
    let owner = plan.controller_owner_ref(&()).map(|mut o: OwnerReference| {
        o.block_owner_deletion = Some(true);
        o
    });
    Ok(CapacityBenchmark {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: plan.namespace(),
            labels: Some(
                [
                    (PLAN_LABEL.to_owned(), plan.name_any()),
                    (
                        "app.kubernetes.io/managed-by".to_owned(),
                        "goodput".to_owned(),
                    ),
                ]
                .into(),
            ),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec,
        status: None,
    })
}

/// `manifest` as it describes `replicas` replicas of what `declared` says the workload
/// runs (the model revision, engine version and TP it declares replace the manifest's).
pub(super) fn manifest_for(
    manifest: &WorkloadManifest,
    declared: &DeclaredIdentity,
    replicas: u32,
) -> WorkloadManifest {
    let mut m = manifest.clone();
    if let Some(r) = &declared.model_revision {
        m.model.revision = r.value.clone();
    }
    if let Some(v) = &declared.engine_version {
        m.engine.version = v.value.trim_start_matches('v').to_owned();
    }
    let placement = &mut m.engine.placement;
    let mut per_replica = placement.gpus_per_replica().unwrap_or(1);
    if let Some(tp) = &declared.tp
        && tp.value != placement.tp
    {
        placement.tp = tp.value;
        per_replica = tp.value * placement.pp.max(1);
    }
    placement.replicas = replicas.max(1);
    placement.gpus = per_replica.max(1) * replicas.max(1);
    m.resolved = None;
    m
}

pub(super) fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].trim_end_matches('-'),
        None => s,
    }
}

/// Six hex digits of a string's FNV-1a hash: names one identity in a benchmark's name.
pub(super) fn short_hash(s: &str) -> String {
    use goodput_core::workload::hashing::{FNV_OFFSET, fnv1a};
    format!("{:06x}", fnv1a(FNV_OFFSET, s.as_bytes()) & 0xff_ffff)
}

/// The plan's bounds, for a proposal from a revalidation's measured capacity.
pub(super) struct PlanBounds {
    pub(super) utilization: f64,
    pub(super) gpus_per_replica: u32,
    pub(super) min: u32,
    pub(super) max: Option<u32>,
}

/// What a finished revalidation benchmark says: `Verified` when its peak point passed,
/// else `Shortfall` with the measured fleet capacity (the highest passing rate), the
/// scaling efficiency (measured ÷ linear expectation) and the replicas the measured
/// capacity per replica requires; `Failed` when it ended without a result.
pub(super) fn verification_outcome(
    v: Verification,
    status: &CapacityBenchmarkStatus,
    cache: CacheMode,
    bounds: PlanBounds,
) -> Verification {
    if status.phase != Some(Phase::Succeeded) {
        let why = conditions::find(&status.conditions, READY)
            .map_or("no reason given".to_owned(), |c| c.message.clone());
        return Verification {
            state: Verification::FAILED.into(),
            message: format!("the revalidation benchmark {} failed: {why}", v.benchmark),
            ..v
        };
    }
    let peak = v.peak_rps.unwrap_or_default();
    let measured = status
        .modes
        .iter()
        .find(|m| m.cache == cache)
        .and_then(|m| m.capacity_rps);
    let peak_passed = status.points.iter().any(|p| {
        p.cache == cache
            && p.kind == PointKind::Rate
            && p.verdict == FinishedPoint::PASS
            && p.offered_rps.is_some_and(|r| (r - peak).abs() < 1e-6)
    });
    let expected = v.expected_fleet_rps.unwrap_or_default();
    let efficiency = match (measured, expected > 0.0) {
        (Some(m), true) => Some(round3(m / expected)),
        _ => None,
    };
    let eff_text = efficiency.map_or("unknown (no rate passed)".to_owned(), |e| {
        format!("{:.0}%", e * 100.0)
    });
    if peak_passed {
        return Verification {
            state: Verification::VERIFIED.into(),
            measured_fleet_rps: measured,
            scaling_efficiency: efficiency,
            shortfall_rps: None,
            proposed_replicas: None,
            message: format!(
                "{} replicas pass at the peak ({peak} RPS); measured fleet capacity {} RPS \
                 of {expected} RPS expected: scaling efficiency {eff_text}",
                v.replicas,
                measured.map_or("-".to_owned(), |m| m.to_string()),
            ),
            ..v
        };
    }
    let shortfall = round3(peak - measured.unwrap_or(0.0));
    let proposal = measured.filter(|m| *m > 0.0).and_then(|m| {
        requirement(
            PlanInput {
                peak_rps: peak,
                capacity_rps: m,
                replicas_tested: v.replicas.max(1),
                gpus_per_replica: bounds.gpus_per_replica,
                target_utilization: bounds.utilization,
            },
            bounds.min,
            bounds.max,
        )
        .ok()
    });
    let message = match (&proposal, measured) {
        (Some(p), Some(m)) => format!(
            "{} replicas fail at the peak ({peak} RPS): the highest passing rate is {m} RPS \
             of {expected} RPS expected (scaling efficiency {eff_text}), {shortfall} RPS \
             short; at the measured {:.3} RPS per replica the peak needs {} replicas ({})",
            v.replicas,
            m / f64::from(v.replicas.max(1)),
            p.replicas,
            arithmetic(&p.plan)
        ),
        _ => format!(
            "{} replicas fail at the peak ({peak} RPS) and at every rate tried: no \
             measured capacity on this topology",
            v.replicas
        ),
    };
    Verification {
        state: Verification::SHORTFALL.into(),
        measured_fleet_rps: measured,
        scaling_efficiency: efficiency,
        shortfall_rps: Some(shortfall),
        proposed_replicas: proposal.map(|p| p.replicas),
        message,
        ..v
    }
}
