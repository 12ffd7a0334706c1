//! The deployment under test: a URL (its `/metrics` pages found), or simulated replicas
//! started here at a calibrated time scale; and what it says it runs.

use super::*;

/// The simulated engine on its own async runtime and threads, so that its HTTP and SSE work
/// does not delay the load generator's sends (which would show as schedule lag).
pub(super) struct SimulatedEngine {
    url: String,
    /// The replicas' handles, for their frame lateness.
    pub(super) replicas: Vec<Replica>,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl SimulatedEngine {
    pub(super) async fn start(config: FleetConfig) -> Result<Self, BenchError> {
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("simulated-engine".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("simulated-engine-io")
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match start_fleet(config).await {
                        Ok(fleet) => {
                            let replicas =
                                fleet.replicas.iter().map(|r| r.replica().clone()).collect();
                            let _ = ready_tx.send(Ok((fleet.router_url(), replicas)));
                            let _ = stop_rx.await;
                            fleet.shutdown().await;
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                        }
                    }
                });
            })
            .map_err(|e| BenchError::Simulated(e.to_string()))?;
        let (url, replicas) = ready_rx
            .await
            .map_err(|_| BenchError::Simulated("the engine thread ended early".into()))?
            .map_err(BenchError::Simulated)?;
        Ok(SimulatedEngine {
            url,
            replicas,
            stop,
            thread,
        })
    }

    pub(super) async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = tokio::task::spawn_blocking(move || self.thread.join()).await;
    }
}

/// Starts the simulated engine in-process (no `target.url`) or takes the URL.
pub(super) async fn start_target(
    spec: &CapacityBenchmarkSpec,
    manifest: &WorkloadManifest,
    client: &reqwest::Client,
) -> Result<Target, BenchError> {
    let placement = &manifest.engine.placement;
    let gpus_per_replica = spec.gpus_per_replica(manifest);
    if let Some(url) = &spec.target.url {
        let url = url.trim_end_matches('/').to_owned();
        let (metrics_targets, notes) = url_metrics_pages(spec, client, &url).await;
        return Ok(Target {
            fleet: None,
            facts: TargetFacts {
                kind: "url".into(),
                url,
                model: spec.target_model(manifest),
                preset: None,
                engine_profile: None,
                replicas: spec.target.replicas.unwrap_or(placement.replicas).max(1),
                gpus_per_replica,
                stream_interval: None,
                engine_concepts_found: Vec::new(),
                engine_concepts_missing: Vec::new(),
            },
            metrics_targets,
            time_scale: spec.target.time_scale.unwrap_or(1.0),
            calibration: None,
            setup: None,
            notes,
        });
    }
    let sim = spec.target.simulated.clone().unwrap_or_default();
    let setup = sim.setup().map_err(|e| BenchError::Spec(e.to_string()))?;
    if let TimeScale::Fixed(k) = sim.time_scale
        && !(k.is_finite() && k > 0.0)
    {
        return Err(BenchError::Spec(format!(
            "spec.target.simulated.timeScale must be positive, got {k}"
        )));
    }
    let model = spec
        .target
        .model
        .clone()
        .unwrap_or_else(|| setup.model.clone());
    let fleet_config = |k: f64, replicas: u32| FleetConfig {
        replica: ReplicaConfig {
            time_scale: k,
            stream_interval: sim.stream_interval.max(1),
            // Every point states how far the engine drifted from its model clock.
            record_lateness: true,
            ..ReplicaConfig::new(setup.clone())
        },
        replicas,
        host: std::net::Ipv4Addr::LOCALHOST.into(),
        port: 0,
        router: RouterConfig::default(),
        cold_start: Duration::from_secs(1),
        faults: Default::default(),
    };
    let calibration = calibrate(client, manifest, &model, &setup, sim.time_scale, |k| {
        fleet_config(k, 1)
    })
    .await?;
    let k = calibration
        .as_ref()
        .map_or_else(|| sim.time_scale.fixed().unwrap_or(1.0), |c| c.chosen);
    let fleet = SimulatedEngine::start(fleet_config(k, sim.replicas.max(1))).await?;
    let url = fleet.url.clone();
    let metrics_targets = discover_targets(client, &url)
        .await
        .map_err(|e| BenchError::Simulated(e.to_string()))?;
    Ok(Target {
        fleet: Some(fleet),
        facts: TargetFacts {
            kind: "simulated".into(),
            url,
            model,
            preset: Some(sim.preset.clone()),
            engine_profile: None,
            replicas: sim.replicas.max(1),
            gpus_per_replica,
            stream_interval: Some(sim.stream_interval.max(1)),
            engine_concepts_found: Vec::new(),
            engine_concepts_missing: Vec::new(),
        },
        metrics_targets,
        time_scale: k,
        calibration,
        setup: Some(setup),
        notes: Vec::new(),
    })
}

/// The engine pages a URL target's points scrape: `spec.target.metricsUrls` when given;
/// else, unless Prometheus holds the metrics, the server's own `/metrics` when it answers
/// with an engine's names there (vLLM, SGLang and llama.cpp serve them beside the API).
/// With the notes a reviewer should read: where the pages came from, or that the points
/// have no engine evidence and why.
pub(super) async fn url_metrics_pages(
    spec: &CapacityBenchmarkSpec,
    client: &reqwest::Client,
    url: &str,
) -> (Vec<String>, Vec<String>) {
    use crate::engine_metrics::identify::PROBE_TIMEOUT;
    use crate::engine_metrics::profile::detect;
    use crate::engine_metrics::scrape::{metrics_url, scrape_once};
    if !spec.target.metrics_urls.is_empty() || spec.target.prometheus.is_some() {
        return (spec.target.metrics_urls.clone(), Vec::new());
    }
    let page = metrics_url(url);
    match scrape_once(client, &page, PROBE_TIMEOUT).await {
        Ok(exposition) => match detect(&exposition.samples) {
            Some(found) => (
                vec![url.to_owned()],
                vec![format!(
                    "engine metrics: {page} ({} names; spec.target.metricsUrls not given, so \
                    the API's own port is scraped)",
                    found.engine
                )],
            ),
            None => (
                Vec::new(),
                vec![format!(
                    "no engine metrics: {page} answered, but with no engine's names; the queue \
                    trend comes from the client's in-flight count (give \
                    spec.target.metricsUrls)"
                )],
            ),
        },
        Err(e) => (
            Vec::new(),
            vec![format!(
                "no engine metrics: {page} did not answer ({e}); the queue trend comes from \
                the client's in-flight count (give spec.target.metricsUrls)"
            )],
        ),
    }
}

/// Probes a fresh single-replica engine from `config(K)` at the spec's time scale (or, for
/// `auto`, at each candidate from the largest down until one is within the warning bound);
/// `None` when the classes have no finite cutoffs to judge against (nothing can drift past
/// them). A fixed K over the refusal bound is an error before any traffic.
pub(super) async fn calibrate(
    client: &reqwest::Client,
    manifest: &WorkloadManifest,
    model: &str,
    setup: &crate::sim::setup::Setup,
    requested: TimeScale,
    config: impl Fn(f64) -> FleetConfig,
) -> Result<Option<calibration::Calibration>, BenchError> {
    let Some(cutoffs) = calibration::tightest_cutoffs(&manifest.gate_config()) else {
        return Ok(None);
    };
    let candidates = match requested {
        TimeScale::Fixed(k) => vec![k],
        TimeScale::Auto => calibration::AUTO_CANDIDATES.to_vec(),
    };
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut trials = Vec::new();
    for k in candidates {
        let engine = SimulatedEngine::start(config(k)).await?;
        // A fixed K over the refusal bound is probed once more (fresh prompts) and judged
        // on that round: a passing hiccup of the machine spoils one round, a K too fast
        // for it drifts in both. Both rounds go into the pack.
        for round in 0..=calibration::REFUSAL_RETRIES {
            let trial = calibration::probe(
                client,
                &engine.url,
                model,
                setup,
                &manifest.workload,
                cutoffs,
                k,
                nonce.wrapping_add(u64::from(round)),
                || engine.replicas.iter().for_each(Replica::reset_lateness),
                || {
                    engine
                        .replicas
                        .iter()
                        .filter_map(|r| r.lateness().map(|(frames, _)| frames))
                        .collect()
                },
            )
            .await;
            let refused = trial.refused(calibration::REFUSE_FRACTION);
            trials.push(trial);
            if requested == TimeScale::Auto || !refused {
                break;
            }
        }
        engine.shutdown().await;
        if trials
            .last()
            .is_some_and(|t| t.within(calibration::WARN_FRACTION))
        {
            break;
        }
    }
    let chosen = match requested {
        TimeScale::Fixed(k) => k,
        TimeScale::Auto => calibration::auto_choice(&trials).unwrap_or(1.0),
    };
    let found = calibration::Calibration {
        requested: requested.to_string(),
        chosen,
        warn_fraction: calibration::WARN_FRACTION,
        refuse_fraction: calibration::REFUSE_FRACTION,
        tightest_ttft_cutoff_ms: cutoffs.0,
        tightest_tpot_cutoff_ms: cutoffs.1,
        trials,
    };
    match found.refusal() {
        Some(why) => Err(BenchError::Calibration(why)),
        None => Ok(Some(found)),
    }
}

/// What the run found about the system under test, recorded in the frozen manifest.
pub(super) async fn resolve_identity(client: &reqwest::Client, target: &Target) -> Resolved {
    let facts = &target.facts;
    let (engine, version, served) = if target.fleet.is_some() {
        let served = identify(client, &facts.url, &[]).await.served_models;
        (
            "goodput simulated engine".to_owned(),
            Some(env!("CARGO_PKG_VERSION").to_owned()),
            served,
        )
    } else {
        let found = identify(client, &facts.url, &target.metrics_targets).await;
        (
            found
                .engine
                .unwrap_or_else(|| "unknown (from the target URL)".to_owned()),
            found.version,
            found.served_models,
        )
    };
    Resolved {
        target_url: facts.url.clone(),
        engine,
        engine_version: version,
        served_models: served,
        model_sent: facts.model.clone(),
        simulated_preset: facts.preset.clone(),
        time_scale: target.time_scale,
        goodput_version: env!("CARGO_PKG_VERSION").into(),
        client_cpus: client_cpus(),
    }
}

/// The CPUs this process may run on (its `Cpus_allowed_list`) of the machine's: `0 of 2`.
pub(super) fn client_cpus() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
        .trim()
        .to_owned();
    Some(
        match std::fs::read_to_string("/sys/devices/system/cpu/online") {
            Ok(online) => format!("{allowed} of {}", online.trim()),
            Err(_) => allowed,
        },
    )
}
