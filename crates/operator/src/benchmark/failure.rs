//! The failure phase of a benchmark in a cluster (`spec.failureTest`), after the sweep:
//! one test per fault, each a loadgen Job at a passing rate whose time zero is fixed in
//! advance, so the fault goes in on the load's own timeline.
//!
//! Level-triggered like the points: `status.failureTest.current` holds the Job, when the
//! fault is due, the pod deleted and what the operator saw of the target Service's
//! EndpointSlices since; every reconcile reads the Job and the slices afresh. Once the
//! Job completes, its shards' records and engine series go through the same analysis as
//! `goodput bench`'s ([`goodput_core::failure::analyze`], with the shipped alert rules
//! evaluated over the run), and the report joins `status.failureTest.reports`.
//!
//! In a cluster the fault is `KillReplica`: the chosen ready pod of the Service is deleted
//! with no grace period (a crash, not a drain). Detection, removal and return come from
//! the EndpointSlices (read every [`WATCH_POLL`] after the injection: the resolution of
//! those times), metrics loss from the engine scrapes.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};

use super::{Error, Run, build};
use crate::target::ResolvedTarget;
use goodput_api::conditions::{Status as Cond, reason as reasons};
use goodput_api::{CurrentFault, FailureTest, FailureTestStatus, FaultKind, conditions};
use goodput_core::benchmark::driver::{self, PointKey, SweepPlan};
use goodput_core::failure::{
    EngineFacts, FailureReport, FailureVerdict, Observed, Signals, analyze,
};
use goodput_core::workload::WorkloadManifest;
use goodput_loadgen::point_job::{FailureLoad, PointJob};
use goodput_loadgen::record::{RequestRecord, read_records};

/// How often the target's EndpointSlices are read once the fault is in (wall clock).
pub(crate) const WATCH_POLL: Duration = Duration::from_millis(200);
/// How often a test whose replica serves again is looked at until its Job completes.
const AFTER_POLL: Duration = Duration::from_secs(2);

/// The ready endpoints of a Service, by pod name: `(pod, address)`, plus the pods listed as
/// not serving (their readiness probe fails).
#[derive(Debug, Default, PartialEq)]
struct Endpoints {
    ready: Vec<(String, String)>,
    not_serving: Vec<String>,
}

/// The Service's endpoints from its EndpointSlices (pods only, sorted by name).
fn endpoints(slices: &[EndpointSlice]) -> Endpoints {
    let mut out = Endpoints::default();
    for endpoint in slices.iter().flat_map(|s| s.endpoints.iter().flatten()) {
        let Some(pod) = endpoint
            .target_ref
            .as_ref()
            .filter(|r| r.kind.as_deref() == Some("Pod"))
            .and_then(|r| r.name.clone())
        else {
            continue;
        };
        let c = endpoint.conditions.clone().unwrap_or_default();
        // An absent `ready` means ready (discovery/v1); a terminating pod is never ready.
        let ready = c.ready.unwrap_or(true) && c.terminating != Some(true);
        if c.serving == Some(false) {
            out.not_serving.push(pod.clone());
        }
        if let (true, Some(address)) = (ready, endpoint.addresses.first()) {
            out.ready.push((pod, address.clone()));
        }
    }
    out.ready.sort();
    out.ready.dedup();
    out
}

/// What one look at the endpoints adds to the current test's record (first times only).
fn observe(current: &mut CurrentFault, seen: &Endpoints, at_ms: i64) {
    let Some(victim) = current.victim.clone() else {
        return;
    };
    if seen.not_serving.contains(&victim) {
        current.readiness_failed_unix_ms.get_or_insert(at_ms);
    }
    let listed = seen.ready.iter().any(|(pod, _)| *pod == victim);
    if !listed {
        current.endpoint_removed_unix_ms.get_or_insert(at_ms);
    }
    let before = current.ready_before.unwrap_or(0) as usize;
    if current.endpoint_removed_unix_ms.is_some() && seen.ready.len() >= before && before > 0 {
        current.serving_again_unix_ms.get_or_insert(at_ms);
    }
}

fn unix_ms() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond()
}

fn after_ms(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

impl Run<'_> {
    /// Runs the failure tests one after another: `None` once every one has run (or none
    /// was asked for), else when to look again. A test under way needs no `target`: its
    /// load runs whatever the Service's state (its fault may leave no ready endpoint); the
    /// next one starts only on a reconcile that found the target ready.
    pub(super) async fn failure_tests(
        &mut self,
        plan: &SweepPlan,
        manifest: &WorkloadManifest,
        target: Option<&ResolvedTarget>,
    ) -> Result<Option<Action>, Error> {
        let Some(test) = self.cb.spec.failure_test.clone() else {
            return Ok(None);
        };
        let mut st = self.status.failure_test.clone().unwrap_or_default();
        let action = self
            .failure_step(&test, &mut st, plan, manifest, target)
            .await;
        self.status.failure_test = Some(st);
        action
    }

    async fn failure_step(
        &mut self,
        test: &FailureTest,
        st: &mut FailureTestStatus,
        plan: &SweepPlan,
        manifest: &WorkloadManifest,
        target: Option<&ResolvedTarget>,
    ) -> Result<Option<Action>, Error> {
        if st.skipped.is_some() {
            return Ok(None);
        }
        let Some(mut current) = st.current.clone() else {
            if st.next as usize >= test.faults.len() {
                return Ok(None);
            }
            let Some(target) = target else {
                return Ok(Some(Action::requeue(Duration::from_millis(100))));
            };
            let Some(rate) = st
                .rate_rps
                .or_else(|| test.rate_rps(self.status.capacity_rps))
            else {
                let why = "no rate passed the gate and spec.failureTest.rate is not given";
                st.skipped = Some(why.into());
                self.event(
                    EventType::Warning,
                    reasons::FAILURE_TEST_SKIPPED,
                    &format!("Failure tests skipped: {why}"),
                )
                .await;
                return Ok(None);
            };
            st.rate_rps = Some(rate);
            let current = self
                .start_failure_test(test, st.next, rate, plan, manifest, target)
                .await?;
            let wait = after_ms(current.inject_at_unix_ms - unix_ms());
            st.current = Some(current);
            return Ok(Some(Action::requeue(wait)));
        };
        let fault = test
            .faults
            .get(current.fault as usize)
            .cloned()
            .unwrap_or_default();
        let jobs: Api<Job> = self.api();
        let job = jobs
            .get_opt(&current.job)
            .await
            .map_err(Error::read("Job"))?;
        let now = unix_ms();
        let ended = match &job {
            None => Some(Err(format!("Job {} disappeared", current.job))),
            Some(j) if super::job_holds(j, "Failed").is_some() => {
                Some(Err(format!("Job {} failed", current.job)))
            }
            Some(j) if super::job_holds(j, "Complete").is_some() => {
                Some(match current.injected_unix_ms {
                    None => Err(format!(
                        "the load of Job {} ended before the fault went in",
                        current.job
                    )),
                    Some(_) => {
                        self.failure_report(test, &fault, &current, j, manifest)
                            .await?
                    }
                })
            }
            Some(_) if current.injected_unix_ms.is_none() && now >= current.inject_at_unix_ms => {
                match self.inject(&mut current, &fault).await? {
                    Ok(()) => None,
                    Err(why) => {
                        // Nothing was deleted: the load stops, and the test has no report.
                        self.delete::<Job>(&current.job).await?;
                        Some(Err(why))
                    }
                }
            }
            Some(_) => None,
        };
        if let Some(outcome) = ended {
            let label = format!(
                "failure test {} of {} ({} on {})",
                current.fault + 1,
                test.faults.len(),
                fault.kind,
                fault.hits()
            );
            match outcome {
                Ok(report) => {
                    let (reason, type_) = match report.verdict {
                        FailureVerdict::Pass => (reasons::FAILURE_TEST_PASSED, EventType::Normal),
                        FailureVerdict::Finding => {
                            (reasons::FAILURE_TEST_FINDING, EventType::Warning)
                        }
                        FailureVerdict::Fail => (reasons::FAILURE_TEST_FAILED, EventType::Warning),
                    };
                    let why = report.reasons.first().cloned().unwrap_or_default();
                    self.event(
                        type_,
                        reason,
                        &format!("{label}: {}: {why}", report.verdict),
                    )
                    .await;
                    st.reports.push(*report);
                }
                Err(why) => {
                    self.event(
                        EventType::Warning,
                        reasons::FAILURE_TEST_FAILED,
                        &format!("{label} has no report: {why}"),
                    )
                    .await;
                    st.errors.push(format!("{label}: {why}"));
                }
            }
            st.current = None;
            st.next = current.fault + 1;
            return Ok(Some(Action::requeue(Duration::from_millis(100))));
        }

        if current.injected_unix_ms.is_none() {
            // The fault is not due yet.
            return Ok(Some(Action::requeue(after_ms(
                current.inject_at_unix_ms - now,
            ))));
        }
        if fault.kind == FaultKind::RequestCancel {
            // The load's own clients cancel: nothing to watch until its Job ends.
            st.current = Some(current);
            return Ok(Some(Action::requeue(AFTER_POLL)));
        }
        let seen = self.service_endpoints().await?;
        observe(&mut current, &seen, unix_ms());
        let poll = if current.serving_again_unix_ms.is_some() {
            AFTER_POLL
        } else {
            WATCH_POLL
        };
        st.current = Some(current);
        Ok(Some(Action::requeue(poll)))
    }

    /// Launches the load of fault `index` and says when the fault is due.
    async fn start_failure_test(
        &mut self,
        test: &FailureTest,
        index: u32,
        rate: f64,
        plan: &SweepPlan,
        manifest: &WorkloadManifest,
        target: &ResolvedTarget,
    ) -> Result<CurrentFault, Error> {
        let spec = &self.cb.spec;
        let capacities: Vec<_> = self
            .status
            .modes
            .iter()
            .map(|m| (m.cache, m.capacity_rps))
            .collect();
        let cache = driver::plan_cache_mode(spec.peak.as_ref(), &capacities)
            .or_else(|| plan.cache_modes.first().copied())
            .unwrap_or(goodput_api::CacheMode::Cold);
        let key = PointKey::Rate {
            cache,
            rate,
            repeat: 0,
        };
        let fault = test.faults.get(index as usize).cloned().unwrap_or_default();
        let job_name = self.owner.failure_job_name(self.generation, index);
        let uid = self.cb.uid().unwrap_or_default();
        let point = PointJob {
            key,
            spec: spec.clone(),
            manifest: manifest.clone(),
            target: target.point_target(),
            // Prompts of their own: the sweep's never reach these engines' caches.
            nonce: goodput_core::workload::hashing::fnv1a(
                u64::from(index) + 1,
                format!("{uid}/failure").as_bytes(),
            ),
            failure: Some(FailureLoad::new(
                test,
                &fault,
                manifest.client.warmup_seconds,
            )),
        };
        let json = serde_json::to_string(&point).map_err(Error::Encode)?;
        let k = target.time_scale.max(1e-3);
        let load_s = manifest.client.warmup_seconds + test.steady_seconds + test.observe_seconds;
        let shards = super::shards(spec, manifest, key, k);
        let deadline = super::deadline_for(load_s, k);
        let lead_ms = self.ctx.options.shard_start_lead.as_millis() as i64;
        let zero_unix_ms = unix_ms() + lead_ms;
        self.launch_at(
            &job_name,
            json,
            shards,
            deadline,
            Some(zero_unix_ms as f64 / 1000.0),
        )
        .await?;
        let inject_after_ms =
            ((manifest.client.warmup_seconds + test.steady_seconds) / k * 1000.0).round() as i64;
        let message = format!(
            "failure test {} of {}: {} on {} at {rate} RPS (Job {job_name}); the fault \
             goes in {:.1} s after the load starts",
            index + 1,
            test.faults.len(),
            fault.kind,
            fault.hits(),
            inject_after_ms as f64 / 1000.0
        );
        self.condition(
            conditions::PROGRESSING,
            Cond::True,
            reasons::FAILURE_TEST,
            message.clone(),
        );
        self.condition(
            conditions::READY,
            Cond::False,
            reasons::FAILURE_TEST,
            message.clone(),
        );
        self.status.phase = Some(goodput_api::Phase::Running);
        self.event(EventType::Normal, reasons::FAILURE_TEST, &message)
            .await;
        Ok(CurrentFault {
            fault: index,
            job: job_name,
            zero_unix_ms,
            inject_at_unix_ms: zero_unix_ms + inject_after_ms,
            poll_ms: WATCH_POLL.as_millis() as u64,
            ..CurrentFault::default()
        })
    }

    /// The target Service's endpoints now.
    async fn service_endpoints(&self) -> Result<Endpoints, Error> {
        let Some(svc) = &self.cb.spec.target.service else {
            return Ok(Endpoints::default());
        };
        let namespace = svc.namespace.as_deref().unwrap_or(self.namespace());
        let api: Api<EndpointSlice> = Api::namespaced(self.ctx.client.clone(), namespace);
        let list = api
            .list(
                &ListParams::default().labels(&format!("kubernetes.io/service-name={}", svc.name)),
            )
            .await
            .map_err(Error::read("EndpointSlice"))?;
        Ok(endpoints(&list.items))
    }

    /// Deletes the fault's pod (no grace period: a crash), once the load runs; for a
    /// request cancellation, notes that the load's clients have begun to cancel. `Ok(Err)`:
    /// why the fault could not go in.
    async fn inject(
        &self,
        current: &mut CurrentFault,
        fault: &goodput_api::Fault,
    ) -> Result<Result<(), String>, Error> {
        match fault.kind {
            FaultKind::KillReplica => {}
            FaultKind::RequestCancel => {
                // The Job's clients cancel on the load's timeline from the moment due.
                current.injected_unix_ms = Some(current.inject_at_unix_ms);
                self.event(
                    EventType::Normal,
                    reasons::FAULT_INJECTED,
                    &format!(
                        "The load's clients cancel {:.0}% of their requests from now \
                         ({})",
                        fault.cancel().0 * 100.0,
                        fault.kind
                    ),
                )
                .await;
                return Ok(Ok(()));
            }
            FaultKind::ColdStart | FaultKind::KvCapacity | FaultKind::DegradedLink => {
                return Ok(Err(format!(
                    "{} cannot be injected in a cluster; run it with goodput bench",
                    fault.kind
                )));
            }
        }
        let seen = self.service_endpoints().await?;
        let Some((pod, address)) = seen.ready.get(fault.replica as usize).cloned() else {
            return Ok(Err(format!(
                "replica {} does not exist: the Service has {} ready pod(s)",
                fault.replica,
                seen.ready.len()
            )));
        };
        let namespace = self
            .cb
            .spec
            .target
            .service
            .as_ref()
            .and_then(|s| s.namespace.clone())
            .unwrap_or_else(|| self.namespace().to_owned());
        let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &namespace);
        let at = unix_ms();
        match pods
            .delete(
                &pod,
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                },
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {
                return Ok(Err(format!("pod {pod} was gone before the fault")));
            }
            Err(source) => {
                return Err(Error::Delete {
                    kind: "Pod",
                    name: pod,
                    source,
                });
            }
        }
        current.ready_before = Some(seen.ready.len() as u32);
        current.victim = Some(pod.clone());
        current.victim_address = Some(address);
        current.injected_unix_ms = Some(at);
        self.event(
            EventType::Normal,
            reasons::FAULT_INJECTED,
            &format!("Deleted pod {pod} ({})", fault.kind),
        )
        .await;
        Ok(Ok(()))
    }

    /// The report of a test whose load completed, written beside its merged records in the
    /// Job's point ConfigMap (`failure-test.md`, `failure-test.json`). `Ok(Err)`: why there
    /// is none.
    async fn failure_report(
        &self,
        test: &FailureTest,
        fault: &goodput_api::Fault,
        current: &CurrentFault,
        job: &Job,
        manifest: &WorkloadManifest,
    ) -> Result<Result<Box<FailureReport>, String>, Error> {
        let (shards, merged) = match self.shard_results(&current.job, job, manifest).await? {
            Ok(r) => r,
            Err(why) => return Ok(Err(why)),
        };
        let names: Vec<String> = manifest.workload.iter().map(|c| c.name.clone()).collect();
        let mut records: Vec<RequestRecord> = Vec::new();
        for s in &shards {
            let source = format!("shard {}/{}'s requests.csv", s.shard, s.shards);
            match read_records(&s.requests_csv, &source, &names) {
                Ok(r) => records.extend(r),
                Err(why) => return Ok(Err(why)),
            }
        }
        records.sort_by_key(|r| r.index);
        // A Service target's time scale, as the points ran it.
        let k = self.cb.spec.target.time_scale.unwrap_or(1.0).max(1e-3);
        // The load's time zero as it ran: the asked instant, or later by the lateness.
        let client = &merged.summary.client;
        let zero_s = client
            .start_at_unix_s
            .unwrap_or(current.zero_unix_ms as f64 / 1000.0)
            + client.start_lateness_ms / 1000.0 / k;
        let model = |ms: i64| (ms as f64 / 1000.0 - zero_s) * k;
        let Some(injected_ms) = current.injected_unix_ms else {
            return Ok(Err("the fault never went in".into()));
        };
        let cancel = FailureLoad::new(test, fault, manifest.client.warmup_seconds).cancel;
        // A cancellation runs on the load's own timeline: its window is the plan's.
        let injected_s = cancel.map_or_else(|| model(injected_ms), |c| c.from_s);
        let series = merged.engine_series.as_ref();
        let victim_target = current.victim_address.as_ref().and_then(|a| {
            let host = format!("//{a}:");
            series?.targets.iter().position(|t| t.contains(&host))
        });
        let engine = EngineFacts::of(series, injected_s);
        let signals = Signals {
            readiness_failed_s: current.readiness_failed_unix_ms.map(model),
            metrics_gone_s: victim_target
                .and_then(|i| goodput_core::failure::metrics_gone(series, i, injected_s)),
            endpoint_removed_s: current.endpoint_removed_unix_ms.map(model),
            routed_after_removal: None,
            serving_again_s: current.serving_again_unix_ms.map(model),
            router_received: None,
            engine_finished: engine.finished,
            engine_aborted: engine.aborted,
            engine_abort_seen_s: engine.abort_seen_s,
        };
        let end_s = records.iter().map(|r| r.ended_s).fold(injected_s, f64::max);
        let gate = manifest.gate_config();
        let alerts =
            goodput_core::alerts::fired(series, &records, end_s, &gate).unwrap_or_default();
        let report = analyze(&Observed {
            kind: fault.kind,
            replica: match &current.victim {
                Some(pod) => format!("pod {pod}"),
                None => "every replica".to_owned(),
            },
            rate_rps: merged.summary.offered_rps.unwrap_or(0.0),
            replicas: current.ready_before.unwrap_or(0),
            injected_s,
            lifted_s: cancel.map(|c| c.to_s.min(end_s)),
            end_s,
            records: &records,
            // The merge sums the shards' counts.
            warmup_sent: client.sent.saturating_sub(records.len() as u64),
            queue: &engine.queue,
            running: &engine.running,
            kv_usage: &engine.kv_usage,
            cancel,
            signals,
            alerts,
            gate: &gate,
            recovery_window_s: test.recovery_window_s(),
        });
        let maps: Api<ConfigMap> = self.api();
        let point_map = build::point_config_map_name(&current.job);
        let json = serde_json::to_string_pretty(&report).map_err(Error::Encode)?;
        let md = goodput_core::failure::report::render(std::slice::from_ref(&report));
        maps.patch(
            &point_map,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "data": {
                    goodput_core::pack_files::FAILURE_TEST_JSON: json,
                    goodput_core::pack_files::FAILURE_TEST_MD: md
                }
            })),
        )
        .await
        .map_err(Error::apply("ConfigMap", &point_map))?;
        Ok(Ok(Box::new(report)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(endpoints: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "qwen-abc"},
            "addressType": "IPv4",
            "endpoints": endpoints,
        }))
        .expect("an EndpointSlice")
    }

    fn endpoint(
        pod: &str,
        ip: &str,
        ready: bool,
        serving: bool,
        terminating: bool,
    ) -> serde_json::Value {
        serde_json::json!({
            "addresses": [ip],
            "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
            "targetRef": {"kind": "Pod", "name": pod},
        })
    }

    #[test]
    fn endpoints_are_ready_pods_by_name_and_a_terminating_pod_is_not_ready() {
        let s = slice(serde_json::json!([
            endpoint("qwen-c", "127.0.0.3", true, true, false),
            endpoint("qwen-a", "127.0.0.1", true, true, false),
            endpoint("qwen-b", "127.0.0.2", true, true, true),
            endpoint("qwen-d", "127.0.0.4", false, false, false),
        ]));
        let e = endpoints(&[s]);
        assert_eq!(
            e.ready,
            vec![
                ("qwen-a".to_owned(), "127.0.0.1".to_owned()),
                ("qwen-c".to_owned(), "127.0.0.3".to_owned())
            ]
        );
        assert_eq!(e.not_serving, vec!["qwen-d".to_owned()]);
    }

    #[test]
    fn a_kill_is_seen_as_removal_then_a_replacement_serving_again() {
        let mut c = CurrentFault {
            victim: Some("qwen-b".into()),
            ready_before: Some(3),
            ..CurrentFault::default()
        };
        let ready = |pods: &[&str]| Endpoints {
            ready: pods
                .iter()
                .map(|p| ((*p).to_owned(), String::new()))
                .collect(),
            not_serving: Vec::new(),
        };
        observe(&mut c, &ready(&["qwen-a", "qwen-b", "qwen-c"]), 1_000);
        assert_eq!(c.endpoint_removed_unix_ms, None, "still listed");
        observe(&mut c, &ready(&["qwen-a", "qwen-c"]), 1_200);
        assert_eq!(c.endpoint_removed_unix_ms, Some(1_200));
        assert_eq!(c.serving_again_unix_ms, None, "two of three ready");
        observe(&mut c, &ready(&["qwen-a", "qwen-c", "qwen-d"]), 3_400);
        observe(&mut c, &ready(&["qwen-a", "qwen-c", "qwen-d"]), 3_600);
        assert_eq!(
            c.serving_again_unix_ms,
            Some(3_400),
            "the first look counts"
        );
        assert_eq!(c.endpoint_removed_unix_ms, Some(1_200));
        assert_eq!(c.readiness_failed_unix_ms, None);
    }

    #[test]
    fn the_rate_is_given_or_the_capacity_times_the_fraction() {
        let mut t = FailureTest::default();
        assert_eq!(t.rate_rps(Some(24.0)), Some(20.0));
        assert_eq!(t.rate_rps(None), None);
        t.rate = Some(7.5);
        assert_eq!(t.rate_rps(None), Some(7.5));
    }
}
