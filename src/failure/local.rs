//! A failure test on this machine. Against the simulated engine (`goodput serve-sim`, or the
//! fleet `goodput bench` starts) the load runs through the router as a client would, the
//! fault goes in through the fleet's admin API at its time, and a watcher polls the
//! router's `GET /replicas` (readiness probe, removal, return, requests routed). Against a
//! real engine's process (a URL target with `failureTest.engineProcess`) the fault is a
//! SIGKILL to the process whose id its pid file holds (a real engine has no fault API),
//! and the watcher polls the engine's own `GET /health`. Either way the engines'
//! `/metrics` are scraped as at every point.

use std::time::Duration;

use serde::Deserialize;
use tokio::sync::watch;

use super::{EngineFacts, FailureReport, FiredAlert, Observed, Signals, analyze};
use crate::analysis::GateConfig;
use crate::api::{FailureTest, Fault, FaultKind};
use crate::bench::point_job::FailureLoad;
use crate::loadgen::point::{MeasuredPoint, PointError, PointPlan, measure_point};
use crate::loadgen::run::{CancelPlan, LoadConfig, LoadMode};

/// How often the watcher polls the router (wall clock).
const POLL: Duration = Duration::from_millis(50);

/// Why a failure test could not run.
#[derive(Debug, thiserror::Error)]
pub enum FailureError {
    /// The fleet's admin API or router refused or could not be reached.
    #[error("simulated fleet at {url}: {message}")]
    Fleet {
        /// The URL called.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The load could not run.
    #[error(transparent)]
    Point(#[from] PointError),
    /// The test cannot run as configured.
    #[error("{0}")]
    Config(String),
}

/// One replica in the router's `GET /replicas`.
#[derive(Clone, Debug, Deserialize)]
pub struct RouterReplica {
    /// Whether the router sends work to it.
    pub in_rotation: bool,
    /// Last removal from rotation (Unix ms).
    pub last_removal_unix_ms: Option<u64>,
    /// Last return to rotation (Unix ms).
    pub last_return_unix_ms: Option<u64>,
    /// First failed probe of the current failing streak (Unix ms).
    pub failing_since_unix_ms: Option<u64>,
    /// Requests routed to it.
    pub routed: u64,
    /// `routed` at its last removal.
    pub routed_at_last_removal: u64,
}

/// The router's `GET /replicas`.
#[derive(Clone, Debug, Deserialize)]
pub struct RouterState {
    /// Replicas by index.
    pub replicas: Vec<RouterReplica>,
    /// Requests refused because no replica was in rotation.
    pub no_replica: u64,
}

impl RouterState {
    /// Requests the router received: routed to a replica or refused for want of one.
    pub fn received(&self) -> u64 {
        self.replicas.iter().map(|r| r.routed).sum::<u64>() + self.no_replica
    }
}

/// What a local failure test injects its fault into and watches.
#[derive(Clone, Debug)]
pub enum FaultSite {
    /// The simulated engine's fleet, through its router's admin API.
    Fleet(SimulatedFleet),
    /// A real engine's process on this machine.
    Process(EngineProcess),
}

impl FaultSite {
    fn time_scale(&self) -> f64 {
        match self {
            FaultSite::Fleet(f) => f.time_scale,
            FaultSite::Process(_) => 1.0,
        }
    }
}

/// A real engine on this machine: its API (`GET /health` answers while it serves) and the
/// file holding its process id (a service manager's, or `serve-vllm.sh`'s supervisor's,
/// rewritten when it restarts the engine).
#[derive(Clone, Debug)]
pub struct EngineProcess {
    /// The engine's base URL.
    pub url: String,
    /// The file holding its process id.
    pub pid_file: std::path::PathBuf,
}

impl EngineProcess {
    /// Whether `GET /health` answers 2xx within a second.
    async fn healthy(&self, client: &reqwest::Client) -> bool {
        client
            .get(format!("{}/health", self.url))
            .timeout(Duration::from_secs(1))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    /// The process id in the pid file.
    fn pid(&self) -> Result<u32, FailureError> {
        let text = std::fs::read_to_string(&self.pid_file).map_err(|e| {
            FailureError::Config(format!(
                "failureTest.engineProcess.pidFile {}: {e}",
                self.pid_file.display()
            ))
        })?;
        text.trim().parse().map_err(|_| {
            FailureError::Config(format!(
                "failureTest.engineProcess.pidFile {} holds {:?}, not a process id",
                self.pid_file.display(),
                text.trim()
            ))
        })
    }

    /// Only `KillReplica` applies to a process, and the engine must be serving.
    async fn prepare(&self, client: &reqwest::Client, fault: &Fault) -> Result<(), FailureError> {
        if fault.kind != FaultKind::KillReplica {
            return Err(FailureError::Config(format!(
                "failureTest: {} needs the simulated engine's fault API; a real engine's \
                 process takes KillReplica only",
                fault.kind
            )));
        }
        self.pid()?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        while !self.healthy(client).await {
            if tokio::time::Instant::now() > deadline {
                return Err(FailureError::Config(format!(
                    "the engine at {} did not answer /health within 300 s",
                    self.url
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(())
    }

    /// SIGKILL to the engine's process, now; its Unix time (ms).
    async fn kill(&self) -> Result<u64, FailureError> {
        let pid = self.pid()?;
        let at = unix_ms();
        let status = tokio::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .await
            .map_err(|e| FailureError::Config(format!("kill -KILL {pid}: {e}")))?;
        if !status.success() {
            return Err(FailureError::Config(format!(
                "kill -KILL {pid} failed ({status}): is the engine's pid file current?"
            )));
        }
        Ok(at)
    }
}

/// The signals of a killed engine process from `(Unix ms, /health answered)` polls: the
/// first failed probe after the kill is its detection (and, with no router in front, the
/// moment clients stop reaching it), the first answer after that its return.
fn health_signals(polls: &[(u64, bool)], injected_ms: u64, model: &impl Fn(u64) -> f64) -> Signals {
    let failed = polls
        .iter()
        .find(|(t, ok)| *t >= injected_ms && !ok)
        .map(|(t, _)| *t);
    let back = failed.and_then(|f| polls.iter().find(|(t, ok)| *t > f && *ok).map(|(t, _)| *t));
    Signals {
        readiness_failed_s: failed.map(model),
        endpoint_removed_s: failed.map(model),
        serving_again_s: back.map(model),
        ..Signals::default()
    }
}

/// The fleet behind a router with the admin API (`goodput serve-sim`).
#[derive(Clone, Debug)]
pub struct SimulatedFleet {
    /// The router's base URL (also the admin API's).
    pub router_url: String,
    /// How many times faster than real time the engines run.
    pub time_scale: f64,
}

impl SimulatedFleet {
    async fn call(
        &self,
        client: &reqwest::Client,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<serde_json::Value, FailureError> {
        let url = format!("{}{path}", self.router_url);
        let fail = |message: String| FailureError::Fleet {
            url: url.clone(),
            message,
        };
        let req = match body {
            Some(b) => client.post(&url).json(&b),
            None => client.get(&url),
        };
        let resp = req
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| fail(e.to_string()))?;
        if !status.is_success() {
            return Err(fail(format!("HTTP {status}: {text}")));
        }
        serde_json::from_str(&text).map_err(|e| fail(format!("unreadable answer: {e}")))
    }

    /// The router's view of the replicas.
    pub async fn state(&self, client: &reqwest::Client) -> Result<RouterState, FailureError> {
        let v = self.call(client, "/replicas", None).await?;
        serde_json::from_value(v).map_err(|e| FailureError::Fleet {
            url: format!("{}/replicas", self.router_url),
            message: format!("unreadable answer: {e}"),
        })
    }

    fn wall(&self, model_s: f64) -> Duration {
        Duration::from_secs_f64((model_s / self.time_scale).max(0.0))
    }

    async fn wait_rotation(
        &self,
        client: &reqwest::Client,
        want: impl Fn(usize) -> bool,
    ) -> Result<(), FailureError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let state = self.state(client).await?;
            if state
                .replicas
                .iter()
                .enumerate()
                .all(|(i, r)| r.in_rotation == want(i))
            {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(FailureError::Fleet {
                    url: self.router_url.clone(),
                    message: "the router's rotation did not settle within 20 s".into(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Every replica healthy, fault-free and in rotation; for a cold start, the fault's
    /// replica out (it joins at the injection).
    async fn prepare(&self, client: &reqwest::Client, fault: &Fault) -> Result<(), FailureError> {
        let listed = self.call(client, "/admin/replicas", None).await?;
        let serving: Vec<bool> = listed["replicas"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| r["serving"].as_bool() == Some(true))
                    .collect()
            })
            .unwrap_or_default();
        let n = serving.len();
        let victim = fault.replica as usize;
        if victim >= n {
            return Err(FailureError::Config(format!(
                "failureTest: replica {victim} does not exist (the fleet has {n})"
            )));
        }
        for (i, up) in serving.iter().enumerate() {
            let base = format!("/admin/replicas/{i}");
            if !up {
                // Only a stopped replica: a restore is scheduled on the fleet's side and
                // would bring back one killed below.
                self.call(
                    client,
                    &format!("{base}/restore"),
                    Some(serde_json::json!({"cold_start_ms": 0})),
                )
                .await?;
            }
            self.call(
                client,
                &format!("{base}/faults"),
                Some(serde_json::json!({})),
            )
            .await?;
            self.call(
                client,
                &format!("{base}/kv"),
                Some(serde_json::json!({"factor": 1.0})),
            )
            .await?;
        }
        self.wait_rotation(client, |_| true).await?;
        if fault.kind == FaultKind::ColdStart {
            self.call(
                client,
                &format!("/admin/replicas/{victim}/kill"),
                Some(serde_json::json!({})),
            )
            .await?;
            self.wait_rotation(client, |i| i != victim).await?;
        }
        Ok(())
    }

    /// Injects the fault now; returns its Unix time (ms) and, for a timed fault, when it
    /// was lifted (after sleeping through it).
    async fn inject(
        &self,
        client: &reqwest::Client,
        fault: &Fault,
    ) -> Result<(u64, Option<u64>), FailureError> {
        let base = format!("/admin/replicas/{}", fault.replica);
        let at = match fault.kind {
            FaultKind::KillReplica => {
                let v = self
                    .call(client, &format!("{base}/kill"), Some(serde_json::json!({})))
                    .await?;
                let at = v["killed_at_unix_ms"].as_u64().unwrap_or_else(unix_ms);
                if let Some(after) = fault.recreate_after_s() {
                    // The replacement, as a Deployment's new pod: serving after its delay.
                    let ms = self.wall(after).as_millis() as u64;
                    self.call(
                        client,
                        &format!("{base}/restore"),
                        Some(serde_json::json!({"cold_start_ms": ms})),
                    )
                    .await?;
                }
                at
            }
            FaultKind::ColdStart => {
                let ms = self.wall(fault.load_s()).as_millis() as u64;
                let v = self
                    .call(
                        client,
                        &format!("{base}/restore"),
                        Some(serde_json::json!({"cold_start_ms": ms})),
                    )
                    .await?;
                v["requested_at_unix_ms"].as_u64().unwrap_or_else(unix_ms)
            }
            FaultKind::KvCapacity => {
                let v = self
                    .call(
                        client,
                        &format!("{base}/kv"),
                        Some(serde_json::json!({"factor": fault.kv_fraction()})),
                    )
                    .await?;
                v["at_unix_ms"].as_u64().unwrap_or_else(unix_ms)
            }
            FaultKind::DegradedLink => {
                let (latency, jitter) = fault.link();
                // The replica runs `k` times faster: its link does too, so the model's
                // latency is the wall latency × k.
                let scale = |ms: u64| (ms as f64 / self.time_scale).round() as u64;
                let v = self
                    .call(
                        client,
                        &format!("{base}/faults"),
                        Some(serde_json::json!({
                            "added_latency_ms": scale(latency),
                            "latency_jitter_ms": scale(jitter),
                        })),
                    )
                    .await?;
                v["at_unix_ms"].as_u64().unwrap_or_else(unix_ms)
            }
            // The client cancels on the load's own schedule (its `CancelPlan`), from now.
            FaultKind::RequestCancel => unix_ms(),
        };
        let lifted = match (fault.kind, fault.duration_s()) {
            (FaultKind::RequestCancel, Some(d)) => {
                tokio::time::sleep(self.wall(d)).await;
                Some(unix_ms())
            }
            (FaultKind::KvCapacity | FaultKind::DegradedLink, Some(d)) => {
                tokio::time::sleep(self.wall(d)).await;
                let (path, body) = if fault.kind == FaultKind::KvCapacity {
                    ("kv", serde_json::json!({"factor": 1.0}))
                } else {
                    ("faults", serde_json::json!({}))
                };
                self.call(client, &format!("{base}/{path}"), Some(body))
                    .await?;
                Some(unix_ms())
            }
            // Not timed: it lasts to the end of the test.
            (FaultKind::KillReplica | FaultKind::ColdStart, _)
            | (FaultKind::RequestCancel | FaultKind::KvCapacity | FaultKind::DegradedLink, None) => {
                None
            }
        };
        Ok((at, lifted))
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What one local failure test measured, in model time.
#[derive(Debug)]
pub struct LocalRun {
    /// The load's records and engine series.
    pub measured: MeasuredPoint,
    /// Injection time (model s since the load's time zero).
    pub injected_s: f64,
    /// When a timed fault was lifted.
    pub lifted_s: Option<f64>,
    /// The signals watched.
    pub signals: Signals,
    /// The engines' series.
    pub engine: EngineFacts,
    /// End of the run (the last request's end).
    pub end_s: f64,
    /// The requests the client cancelled (model time), in a request-cancellation test.
    pub cancel: Option<CancelPlan>,
}

impl LocalRun {
    /// The analysis input.
    pub fn observed<'a>(
        &'a self,
        fault: &Fault,
        rate_rps: f64,
        replicas: u32,
        gate: &'a GateConfig,
        alerts: Vec<FiredAlert>,
        recovery_window_s: f64,
    ) -> Observed<'a> {
        Observed {
            kind: fault.kind,
            replica: fault.hits(),
            rate_rps,
            replicas,
            injected_s: self.injected_s,
            lifted_s: self.lifted_s,
            end_s: self.end_s,
            records: &self.measured.run.records,
            warmup_sent: self
                .measured
                .run
                .client
                .sent
                .saturating_sub(self.measured.run.records.len() as u64),
            queue: &self.engine.queue,
            running: &self.engine.running,
            kv_usage: &self.engine.kv_usage,
            cancel: self.cancel,
            signals: self.signals.clone(),
            alerts,
            gate,
            recovery_window_s,
        }
    }
}

/// Runs one failure test: prepares the fleet, runs the load (`config` and `plan` in real
/// time, from [`FailureLoad::apply`]), injects the fault `inject_after_s` model seconds after the
/// load's time zero, watches the router throughout, and returns everything in model time.
pub async fn run_fault(
    client: &reqwest::Client,
    site: &FaultSite,
    fault: &Fault,
    config: &LoadConfig,
    plan: &PointPlan,
    inject_after_s: f64,
    stop: watch::Receiver<bool>,
) -> Result<LocalRun, FailureError> {
    let k = site.time_scale();
    let before = match site {
        FaultSite::Fleet(fleet) => {
            fleet.prepare(client, fault).await?;
            Some(fleet.state(client).await?)
        }
        FaultSite::Process(process) => {
            process.prepare(client, fault).await?;
            None
        }
    };
    let mut scaled_plan = plan.time_scaled(k);
    // A time zero known in advance: the injection is scheduled on the same clock.
    let zero_unix_s = unix_ms() as f64 / 1e3 + 0.5;
    scaled_plan.start_at_unix_s = Some(zero_unix_s);
    let scaled = config.time_scaled(k);

    let (done_tx, done_rx) = watch::channel(false);
    let watcher = {
        let (client, site, mut done) = (client.clone(), site.clone(), done_rx.clone());
        tokio::spawn(async move {
            let mut snaps: Vec<(u64, RouterState)> = Vec::new();
            let mut polls: Vec<(u64, bool)> = Vec::new();
            loop {
                match &site {
                    FaultSite::Fleet(fleet) => {
                        if let Ok(s) = fleet.state(&client).await {
                            snaps.push((unix_ms(), s));
                        }
                    }
                    FaultSite::Process(process) => {
                        let at = unix_ms();
                        polls.push((at, process.healthy(&client).await));
                    }
                }
                tokio::select! {
                    _ = done.wait_for(|d| *d) => break,
                    () = tokio::time::sleep(POLL) => {}
                }
            }
            (snaps, polls)
        })
    };
    let injector = {
        let (client, site, fault) = (client.clone(), site.clone(), fault.clone());
        let at = zero_unix_s + inject_after_s / k;
        tokio::spawn(async move {
            let wait = at - unix_ms() as f64 / 1e3;
            tokio::time::sleep(Duration::from_secs_f64(wait.max(0.0))).await;
            match &site {
                FaultSite::Fleet(fleet) => fleet.inject(&client, &fault).await,
                FaultSite::Process(process) => Ok((process.kill().await?, None)),
            }
        })
    };
    let measured = measure_point(client.clone(), &scaled, &scaled_plan, stop).await;
    let _ = done_tx.send(true);
    let (snaps, polls) = watcher.await.unwrap_or_default();
    let injected = injector
        .await
        .map_err(|e| FailureError::Config(format!("the injection task failed: {e}")));
    let mut measured = measured?;
    let (injected_ms, lifted_ms) = injected??;
    measured.rescale(k);

    let zero = measured.started_unix_s;
    let model = |ms: u64| (ms as f64 / 1e3 - zero) * k;
    let injected_s = model(injected_ms);
    let victim = fault.replica as usize;
    let engine = EngineFacts::of(measured.series.as_ref(), injected_s);
    let mut signals = match (site, before) {
        (FaultSite::Fleet(fleet), Some(before)) => {
            let after = fleet.state(client).await?;
            let mut signals = watched(&snaps, victim, injected_ms, fault.kind, &model);
            // The load generator's vocabulary probes and cache reset went through the
            // router before the load: not the load's requests.
            let probes = measured
                .vocabulary
                .as_ref()
                .map_or(0, |v| u64::from(v.probes))
                + measured
                    .cache_reset
                    .as_ref()
                    .map_or(0, |r| u64::from(r.requests));
            let received = after.received().saturating_sub(before.received());
            signals.router_received = Some(received.saturating_sub(probes));
            signals
        }
        _ => health_signals(&polls, injected_ms, &model),
    };
    signals.metrics_gone_s = super::metrics_gone(measured.series.as_ref(), victim, injected_s);
    signals.engine_finished = engine.finished;
    signals.engine_aborted = engine.aborted;
    signals.engine_abort_seen_s = engine.abort_seen_s;
    let end_s = measured
        .run
        .records
        .iter()
        .map(|r| r.ended_s)
        .fold(injected_s, f64::max);
    Ok(LocalRun {
        measured,
        injected_s,
        lifted_s: lifted_ms.map(model),
        signals,
        engine,
        end_s,
        cancel: config.cancel,
    })
}

/// A finished local failure test.
#[derive(Debug)]
pub struct TestDone {
    /// The report.
    pub report: FailureReport,
    /// What was measured.
    pub run: LocalRun,
    /// The load's configuration (real time).
    pub config: LoadConfig,
    /// The load's plan (real time).
    pub plan: PointPlan,
    /// Why the alerts could not be evaluated, if they could not (the report then lists
    /// none).
    pub alerts_error: Option<String>,
}

/// One failure test end to end: `load` is the point's configuration and plan at the
/// test's rate (real time, as `point_load` builds them); the load spans the warmup,
/// `steadySeconds` and `observeSeconds`, the fault goes in after the steady period, and
/// the run is analysed with the shipped alert rules evaluated over it.
#[allow(clippy::too_many_arguments)]
pub async fn run_test(
    client: &reqwest::Client,
    site: &FaultSite,
    test: &FailureTest,
    fault: &Fault,
    load: (&LoadConfig, &PointPlan),
    replicas: u32,
    gate: &GateConfig,
    stop: watch::Receiver<bool>,
) -> Result<TestDone, FailureError> {
    let LoadMode::Rate { rate } = load.0.mode else {
        return Err(FailureError::Config(
            "a failure test runs an open-loop rate".into(),
        ));
    };
    let (config, plan) = FailureLoad::new(test, fault, load.0.warmup_s).apply(load.0, load.1, rate);
    let inject_after = FailureLoad::inject_after_s(test, config.warmup_s);
    let run = run_fault(client, site, fault, &config, &plan, inject_after, stop).await?;
    let (alerts, alerts_error) = match crate::alerts::fired(
        run.measured.series.as_ref(),
        &run.measured.run.records,
        run.end_s,
        gate,
    ) {
        Ok(a) => (a, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let report = analyze(&run.observed(
        fault,
        rate,
        replicas,
        gate,
        alerts,
        test.recovery_window_s(),
    ));
    Ok(TestDone {
        report,
        run,
        config,
        plan,
        alerts_error,
    })
}

/// The router's signals about the victim from the watcher's snapshots.
fn watched(
    snaps: &[(u64, RouterState)],
    victim: usize,
    injected_ms: u64,
    kind: FaultKind,
    model: &impl Fn(u64) -> f64,
) -> Signals {
    let replica = |s: &RouterState| s.replicas.get(victim).cloned();
    // The router counts its picks: zero unless it made some after a removal.
    let mut sig = Signals {
        routed_after_removal: Some(0),
        ..Signals::default()
    };
    let mut removed_ms = None;
    for (_, s) in snaps {
        let Some(r) = replica(s) else { continue };
        if let Some(f) = r.failing_since_unix_ms.filter(|&f| f >= injected_ms) {
            sig.readiness_failed_s.get_or_insert(model(f));
        }
        if let Some(t) = r.last_removal_unix_ms.filter(|&t| t >= injected_ms) {
            removed_ms.get_or_insert(t);
            if !r.in_rotation {
                // Picks while out of rotation: the router must make none.
                let picks = r.routed.saturating_sub(r.routed_at_last_removal);
                sig.routed_after_removal = Some(sig.routed_after_removal.unwrap_or(0).max(picks));
            }
        }
        let back_after = match kind {
            FaultKind::ColdStart => Some(injected_ms),
            FaultKind::KillReplica
            | FaultKind::KvCapacity
            | FaultKind::DegradedLink
            | FaultKind::RequestCancel => removed_ms,
        };
        if let (Some(from), Some(t)) = (back_after, r.last_return_unix_ms)
            && t >= from
            && r.in_rotation
        {
            sig.serving_again_s.get_or_insert(model(t));
        }
    }
    sig.endpoint_removed_s = removed_ms.map(model);
    sig
}
