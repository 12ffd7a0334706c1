//! The Job controller (batch/v1), after `pkg/controller/job` of Kubernetes 1.33, and the TTL
//! controller for finished Jobs.
//!
//! Simplifications, each invisible to a client that reads Jobs the robust way:
//! - counts are derived from the pods that exist (no `batch.kubernetes.io/job-tracking` pod
//!   finalizer): `succeeded` and `failed` never go down, but a terminal pod deleted by someone
//!   else before it was seen is not counted;
//! - failed pods are replaced at once (no exponential back-off delay);
//! - `podFailurePolicy` and `successPolicy` are not evaluated.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{
    NsName, Reconciler, condition_true, controller_keys, delete_background, format_ranges, i64_at,
    is_deleting, is_kind, labels, name, namespace, ns_name, owned_pods, owner_ref, parse_ranges,
    pod_phase, pod_ready, pods_key, scale_down_order, set_condition, set_count, str_at, uid, until,
    write_status,
};
use crate::error::ApiError;
use crate::resources::ResKey;
use crate::store::{Event, Store};

const INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";
const FAILURE_COUNT_ANNOTATION: &str = "batch.kubernetes.io/job-index-failure-count";
const JOB_CONTROLLER: &str = "kubernetes.io/job-controller";
/// `backoffLimit` when unset; with `backoffLimitPerIndex` it defaults to MaxInt32 instead.
const DEFAULT_BACKOFF_LIMIT: i64 = 6;

fn jobs_key() -> ResKey {
    ResKey::new("batch", "jobs")
}

/// Reconciles Jobs and their pods.
pub(crate) struct JobController;

impl Reconciler for JobController {
    const NAME: &'static str = "job";
    type Key = NsName;

    fn keys_for(&mut self, _store: &Store, ev: &Event, out: &mut Vec<NsName>) {
        if is_kind(&ev.key, "batch", "jobs") {
            out.push(ns_name(&ev.object));
        } else if is_kind(&ev.key, "", "pods") {
            controller_keys(ev, "batch", "Job", out);
        }
    }

    fn resync(&mut self, store: &Store, out: &mut Vec<NsName>) {
        out.extend(store.list(&jobs_key(), None).0.iter().map(|j| ns_name(j)));
    }

    fn reconcile(&mut self, store: &Store, key: &NsName) -> Result<Option<Duration>, ApiError> {
        let Some(job) = store.get(&jobs_key(), &key.0, &key.1) else {
            return Ok(None);
        };
        match str_at(&job, "/spec/managedBy") {
            "" | JOB_CONTROLLER => {}
            _ => return Ok(None),
        }
        // A Job being deleted is the garbage collector's (its pods go with it).
        if is_deleting(&job) {
            return Ok(None);
        }
        if finished(&job).is_some() {
            return ttl_after_finished(store, &job);
        }
        sync(store, &job)
    }
}

/// The finished condition (`Complete` or `Failed`, status True), if any.
fn finished(job: &Value) -> Option<&Value> {
    condition_true(job, "Complete").or_else(|| condition_true(job, "Failed"))
}

/// Deletes a finished Job once `ttlSecondsAfterFinished` has passed (the TTL-after-finished
/// controller); otherwise asks to run again when it will have.
fn ttl_after_finished(store: &Store, job: &Value) -> Result<Option<Duration>, ApiError> {
    let Some(ttl) = i64_at(job, "/spec/ttlSecondsAfterFinished") else {
        return Ok(None);
    };
    let finished_at = match job
        .pointer("/status/completionTime")
        .and_then(Value::as_str)
    {
        Some(t) => t.to_owned(),
        None => finished(job)
            .map(|c| str_at(c, "/lastTransitionTime").to_owned())
            .unwrap_or_default(),
    };
    match until(&finished_at, ttl) {
        Some(left) if !left.is_zero() => Ok(Some(left)),
        // Due, or no usable finish time (expire it, as the TTL controller does for a Job
        // without one).
        _ => {
            let opts_uid = uid(job).to_owned();
            super::delete_with(
                store,
                &jobs_key(),
                namespace(job),
                name(job),
                crate::store::Propagation::Background,
                Some(&opts_uid),
            )?;
            Ok(None)
        }
    }
}

/// The Job's pods, sorted into what the controller counts.
#[derive(Default)]
struct Pods {
    /// Not terminal, not being deleted.
    active: Vec<Arc<Value>>,
    /// Being deleted, not yet terminal.
    terminating: usize,
    succeeded: Vec<Arc<Value>>,
    failed: Vec<Arc<Value>>,
}

impl Pods {
    fn of(pods: Vec<Arc<Value>>) -> Self {
        let mut out = Pods::default();
        for p in pods {
            match pod_phase(&p) {
                "Succeeded" => out.succeeded.push(p),
                "Failed" => out.failed.push(p),
                _ if is_deleting(&p) => out.terminating += 1,
                _ => out.active.push(p),
            }
        }
        out
    }

    /// Pods that are still running or shutting down.
    fn running(&self) -> usize {
        self.active.len() + self.terminating
    }
}

fn pod_index(p: &Value) -> Option<i64> {
    p.pointer("/metadata/annotations")
        .and_then(|a| a.get(INDEX_ANNOTATION))
        .or_else(|| labels(p).and_then(|l| l.get(INDEX_ANNOTATION)))
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

/// Failures so far of an index: the most any of its pods records (the count it was created
/// with, plus one when it failed itself).
fn index_failures(pods: &[&Arc<Value>]) -> BTreeMap<i64, i64> {
    let mut out = BTreeMap::new();
    for p in pods {
        let Some(ix) = pod_index(p) else { continue };
        let before = p
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(FAILURE_COUNT_ANNOTATION))
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<i64>().ok())
            .unwrap_or(0);
        let n = before + i64::from(pod_phase(p) == "Failed");
        let e = out.entry(ix).or_insert(0);
        *e = (*e).max(n);
    }
    out
}

/// Container restarts of running pods: what `restartPolicy: OnFailure` counts toward the
/// backoff limit.
fn restarts(pods: &[Arc<Value>]) -> i64 {
    pods.iter()
        .filter(|p| matches!(pod_phase(p), "Pending" | "Running"))
        .flat_map(|p| {
            ["/status/containerStatuses", "/status/initContainerStatuses"]
                .into_iter()
                .filter_map(|ptr| p.pointer(ptr).and_then(Value::as_array))
                .flatten()
                .map(|s| s["restartCount"].as_i64().unwrap_or(0))
                .collect::<Vec<_>>()
        })
        .sum()
}

/// One pass of the Job controller over an unfinished Job.
fn sync(store: &Store, job: &Value) -> Result<Option<Duration>, ApiError> {
    let ns = namespace(job);
    let spec = &job["spec"];
    let indexed = str_at(spec, "/completionMode") == "Indexed";
    let completions = i64_at(spec, "/completions");
    let parallelism = i64_at(spec, "/parallelism").unwrap_or(1).max(0);
    let per_index = if indexed {
        i64_at(spec, "/backoffLimitPerIndex")
    } else {
        None
    };
    let backoff_limit = i64_at(spec, "/backoffLimit").unwrap_or(if per_index.is_some() {
        i64::from(i32::MAX)
    } else {
        DEFAULT_BACKOFF_LIMIT
    });
    let on_failure = str_at(spec, "/template/spec/restartPolicy") == "OnFailure";
    let suspended = spec["suspend"].as_bool() == Some(true);

    let mut status = job
        .get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut conds: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let pods = Pods::of(owned_pods(store, ns, uid(job)));

    // Counts never go down: a terminal pod someone deleted stays counted.
    let prev_succeeded = i64_at(job, "/status/succeeded").unwrap_or(0);
    let prev_failed = i64_at(job, "/status/failed").unwrap_or(0);
    let failed = prev_failed.max(pods.failed.len() as i64);
    let mut completed: BTreeSet<i64> = parse_ranges(str_at(job, "/status/completedIndexes"));
    let mut failed_indexes: BTreeSet<i64> = parse_ranges(str_at(job, "/status/failedIndexes"));
    let mut failures_by_index = BTreeMap::new();
    if indexed {
        let c = completions.unwrap_or(0);
        completed.extend(
            pods.succeeded
                .iter()
                .filter_map(|p| pod_index(p))
                .filter(|ix| (0..c).contains(ix)),
        );
        if let Some(limit) = per_index {
            let all: Vec<&Arc<Value>> = pods
                .active
                .iter()
                .chain(&pods.succeeded)
                .chain(&pods.failed)
                .collect();
            failures_by_index = index_failures(&all);
            failed_indexes.extend(
                failures_by_index
                    .iter()
                    .filter(|(ix, n)| {
                        **n > limit && !completed.contains(ix) && (0..c).contains(*ix)
                    })
                    .map(|(ix, _)| *ix),
            );
        }
    }
    let succeeded = if indexed {
        completed.len() as i64
    } else {
        prev_succeeded.max(pods.succeeded.len() as i64)
    };

    // The outcome, once decided, is the interim condition (Kubernetes >= 1.31).
    let interim = |conds: &[Value], t: &str| {
        conds
            .iter()
            .any(|c| c["type"] == t && c["status"] == "True")
    };
    let mut again = None;
    if !interim(&conds, "FailureTarget") && !interim(&conds, "SuccessCriteriaMet") && !suspended {
        let past_deadline = match (
            i64_at(spec, "/activeDeadlineSeconds"),
            status.get("startTime").and_then(Value::as_str),
        ) {
            (Some(ads), Some(start)) => match until(start, ads) {
                Some(left) if left.is_zero() => true,
                Some(left) => {
                    // A little past the deadline, so the next pass sees it passed.
                    again = Some(left + Duration::from_millis(10));
                    false
                }
                None => false,
            },
            _ => false,
        };
        let failure = if failed > backoff_limit
            || (on_failure && {
                let r = restarts(&pods.active);
                if backoff_limit == 0 {
                    r > 0
                } else {
                    r >= backoff_limit
                }
            }) {
            Some((
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            ))
        } else if past_deadline {
            Some((
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            ))
        } else if per_index.is_some()
            && i64_at(spec, "/maxFailedIndexes").is_some_and(|m| failed_indexes.len() as i64 > m)
        {
            Some((
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes",
            ))
        } else if indexed
            && !failed_indexes.is_empty()
            && (completed.len() + failed_indexes.len()) as i64 >= completions.unwrap_or(0)
        {
            Some(("FailedIndexes", "Job has failed indexes"))
        } else {
            None
        };
        let success = match (indexed, completions) {
            (true, c) => failed_indexes.is_empty() && completed.len() as i64 >= c.unwrap_or(0),
            (false, Some(c)) => succeeded >= c,
            // A work queue: done when one pod succeeded and none is left running.
            (false, None) => succeeded > 0 && pods.active.is_empty(),
        };
        if let Some((reason, message)) = failure {
            set_condition(
                &mut conds,
                "FailureTarget",
                "True",
                reason,
                message,
                &["lastProbeTime"],
            );
            again = None;
        } else if success {
            set_condition(
                &mut conds,
                "SuccessCriteriaMet",
                "True",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                &["lastProbeTime"],
            );
            again = None;
        }
    }

    let decided = interim(&conds, "FailureTarget") || interim(&conds, "SuccessCriteriaMet");
    if decided || suspended {
        for p in &pods.active {
            delete_background(store, &pods_key(), ns, name(p))?;
        }
    }
    if suspended && !decided {
        set_condition(
            &mut conds,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            &["lastProbeTime"],
        );
        status.remove("startTime");
        again = None;
    } else if !decided {
        if conds.iter().any(|c| c["type"] == "Suspended") {
            set_condition(
                &mut conds,
                "Suspended",
                "False",
                "JobResumed",
                "Job resumed",
                &["lastProbeTime"],
            );
        }
        if !status.contains_key("startTime") {
            status.insert("startTime".into(), Value::from(crate::time::now()));
            if let Some(ads) = i64_at(spec, "/activeDeadlineSeconds") {
                again = Some(
                    Duration::from_secs(u64::try_from(ads.max(0)).unwrap_or(0))
                        + Duration::from_millis(10),
                );
            }
        }
        let plan = Plan {
            job,
            indexed,
            completions,
            parallelism,
            succeeded,
            completed: &completed,
            failed_indexes: &failed_indexes,
            failures_by_index: &failures_by_index,
            per_index: per_index.is_some(),
        };
        plan.apply(store, &pods)?;
    }

    // Status from the pods as they are now.
    let pods = Pods::of(owned_pods(store, ns, uid(job)));
    if decided && pods.running() == 0 {
        if let Some(target) = conds
            .iter()
            .find(|c| c["type"] == "FailureTarget" && c["status"] == "True")
        {
            let (reason, message) = (
                str_at(target, "/reason").to_owned(),
                str_at(target, "/message").to_owned(),
            );
            set_condition(
                &mut conds,
                "Failed",
                "True",
                &reason,
                &message,
                &["lastProbeTime"],
            );
        } else {
            set_condition(
                &mut conds,
                "Complete",
                "True",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                &["lastProbeTime"],
            );
            status.insert("completionTime".into(), Value::from(crate::time::now()));
        }
        // Finished: the TTL clock starts now.
        if let Some(ttl) = i64_at(spec, "/ttlSecondsAfterFinished") {
            again = Some(Duration::from_secs(u64::try_from(ttl.max(0)).unwrap_or(0)));
        }
    }
    set_count(&mut status, "active", pods.active.len() as i64);
    status.insert(
        "ready".into(),
        Value::from(pods.active.iter().filter(|p| pod_ready(p)).count()),
    );
    status.insert("terminating".into(), Value::from(pods.terminating));
    set_count(&mut status, "succeeded", succeeded);
    set_count(&mut status, "failed", failed);
    if indexed && !completed.is_empty() {
        status.insert(
            "completedIndexes".into(),
            Value::from(format_ranges(&completed)),
        );
    } else {
        status.remove("completedIndexes");
    }
    if per_index.is_some() {
        status.insert(
            "failedIndexes".into(),
            Value::from(format_ranges(&failed_indexes)),
        );
    }
    status.insert("uncountedTerminatedPods".into(), json!({}));
    if conds.is_empty() {
        status.remove("conditions");
    } else {
        status.insert("conditions".into(), Value::Array(conds));
    }
    write_status(store, &jobs_key(), job, status)?;
    Ok(again)
}

/// What a running Job should have: which pods to create and which to delete.
struct Plan<'a> {
    job: &'a Value,
    indexed: bool,
    completions: Option<i64>,
    parallelism: i64,
    succeeded: i64,
    completed: &'a BTreeSet<i64>,
    failed_indexes: &'a BTreeSet<i64>,
    failures_by_index: &'a BTreeMap<i64, i64>,
    per_index: bool,
}

impl Plan<'_> {
    fn apply(&self, store: &Store, pods: &Pods) -> Result<(), ApiError> {
        let ns = namespace(self.job);
        // Pods being replaced still hold their slot when the Job asks for that.
        let holding = if str_at(self.job, "/spec/podReplacementPolicy") == "Failed" {
            pods.terminating as i64
        } else {
            0
        };
        if !self.indexed {
            let have = pods.active.len() as i64 + holding;
            let want = match self.completions {
                Some(c) => self.parallelism.min(c - self.succeeded),
                // A work queue starts no pod once one succeeded, and lets the rest finish.
                None if self.succeeded > 0 => have,
                None => self.parallelism,
            }
            .max(0);
            if have > want {
                let mut extra = pods.active.clone();
                scale_down_order(&mut extra);
                for p in extra.iter().take(usize::try_from(have - want).unwrap_or(0)) {
                    delete_background(store, &pods_key(), ns, super::name(p))?;
                }
            }
            for _ in have..want {
                store.create(&pods_key(), self.pod(None, None), false)?;
            }
            return Ok(());
        }
        let c = self.completions.unwrap_or(0);
        // One active pod per index still to do; duplicates and pods of finished indexes go.
        let mut running: BTreeSet<i64> = BTreeSet::new();
        let mut sorted = pods.active.clone();
        sorted.sort_by(|a, b| name(a).cmp(name(b)));
        let mut keep = 0i64;
        for p in &sorted {
            let wanted = pod_index(p).filter(|ix| {
                (0..c).contains(ix)
                    && !self.completed.contains(ix)
                    && !self.failed_indexes.contains(ix)
            });
            match wanted {
                Some(ix) if !running.contains(&ix) && keep < self.parallelism => {
                    running.insert(ix);
                    keep += 1;
                }
                _ => delete_background(store, &pods_key(), ns, name(p))?,
            }
        }
        let room = (self.parallelism - keep - holding).max(0);
        let todo = (0..c).filter(|ix| {
            !running.contains(ix)
                && !self.completed.contains(ix)
                && !self.failed_indexes.contains(ix)
        });
        for ix in todo.take(usize::try_from(room).unwrap_or(0)) {
            let failures = self
                .per_index
                .then(|| self.failures_by_index.get(&ix).copied().unwrap_or(0));
            store.create(&pods_key(), self.pod(Some(ix), failures), false)?;
        }
        Ok(())
    }

    /// A pod from the Job's template.
    fn pod(&self, index: Option<i64>, failures: Option<i64>) -> Value {
        let job = self.job;
        let job_name = name(job);
        let tmpl = &job["spec"]["template"];
        let mut meta: Map<String, Value> = Map::new();
        let mut labels = tmpl
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut annotations = tmpl
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        // Admission puts these on the template; a Job written straight to the store may lack them.
        for (k, v) in [
            ("batch.kubernetes.io/controller-uid", uid(job)),
            ("controller-uid", uid(job)),
            ("batch.kubernetes.io/job-name", job_name),
            ("job-name", job_name),
        ] {
            labels.entry(k).or_insert_with(|| Value::from(v));
        }
        let mut spec = tmpl.get("spec").cloned().unwrap_or_else(|| json!({}));
        match index {
            Some(ix) => {
                meta.insert(
                    "generateName".into(),
                    Value::from(format!("{job_name}-{ix}-")),
                );
                labels.insert(INDEX_ANNOTATION.into(), Value::from(ix.to_string()));
                annotations.insert(INDEX_ANNOTATION.into(), Value::from(ix.to_string()));
                if let Some(n) = failures {
                    annotations.insert(FAILURE_COUNT_ANNOTATION.into(), Value::from(n.to_string()));
                }
                if str_at(&spec, "/hostname").is_empty() {
                    spec["hostname"] = Value::from(format!("{job_name}-{ix}"));
                }
                for list in ["containers", "initContainers"] {
                    for c in spec
                        .get_mut(list)
                        .and_then(Value::as_array_mut)
                        .into_iter()
                        .flatten()
                    {
                        add_index_env(c);
                    }
                }
            }
            None => {
                meta.insert("generateName".into(), Value::from(format!("{job_name}-")));
            }
        }
        meta.insert("namespace".into(), Value::from(namespace(job)));
        meta.insert("labels".into(), Value::Object(labels));
        if !annotations.is_empty() {
            meta.insert("annotations".into(), Value::Object(annotations));
        }
        meta.insert(
            "ownerReferences".into(),
            json!([owner_ref(job, "batch/v1", "Job")]),
        );
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    }
}

/// Prepends `JOB_COMPLETION_INDEX` (from the index annotation) to a container's env, unless
/// the container sets it itself.
fn add_index_env(container: &mut Value) {
    let env = container
        .as_object_mut()
        .map(|c| c.entry("env").or_insert_with(|| json!([])));
    let Some(Value::Array(env)) = env else { return };
    if env.iter().any(|e| e["name"] == "JOB_COMPLETION_INDEX") {
        return;
    }
    env.insert(
        0,
        json!({
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.annotations['{INDEX_ANNOTATION}']")}},
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testutil::*;
    use crate::controllers::{condition_true, start};

    fn job(name: &str, spec: Value) -> Value {
        let mut spec = spec;
        spec["template"] = json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}});
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    }

    fn get_job(store: &Store, name: &str) -> Option<Arc<Value>> {
        store.get(&jobs_key(), "default", name)
    }

    fn active_pods(store: &Store) -> Vec<Arc<Value>> {
        pods(store)
            .into_iter()
            .filter(|p| super::super::pod_active(p))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn indexed_job_runs_each_index_once_then_completes() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(
                &jobs_key(),
                job(
                    "idx",
                    json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed"}),
                ),
                false,
            )
            .unwrap();
        let created = wait_for(&store, 10, "3 pods", || {
            let p = active_pods(&store);
            (p.len() == 3).then_some(p)
        })
        .await;
        let mut indexes: Vec<i64> = created.iter().filter_map(|p| pod_index(p)).collect();
        indexes.sort_unstable();
        assert_eq!(indexes, [0, 1, 2]);
        for p in &created {
            let ix = pod_index(p).unwrap();
            assert!(name(p).starts_with(&format!("idx-{ix}-")), "{}", name(p));
            assert_eq!(p["spec"]["hostname"], format!("idx-{ix}"));
            assert_eq!(p["metadata"]["labels"][INDEX_ANNOTATION], ix.to_string());
            assert_eq!(p["metadata"]["labels"]["job-name"], "idx");
            let env = &p["spec"]["containers"][0]["env"][0];
            assert_eq!(env["name"], "JOB_COMPLETION_INDEX");
            assert_eq!(
                env["valueFrom"]["fieldRef"]["fieldPath"],
                format!("metadata.annotations['{INDEX_ANNOTATION}']")
            );
            assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "Job");
            assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
        }
        // Two succeed and one stays running: the outcome is not decided yet.
        for p in &created[..2] {
            set_pod(&store, name(p), "Succeeded", false, "10.0.0.1");
        }
        set_pod(&store, name(&created[2]), "Running", true, "10.0.0.2");
        wait_until(&store, 10, "2 succeeded", || {
            let j = get_job(&store, "idx").unwrap();
            j["status"]["succeeded"] == 2 && j["status"]["ready"] == 1
        })
        .await;
        let j = get_job(&store, "idx").unwrap();
        assert!(condition_true(&j, "SuccessCriteriaMet").is_none());
        assert_eq!(j["status"]["ready"], 1);
        set_pod(&store, name(&created[2]), "Succeeded", false, "10.0.0.2");
        let j = wait_for(&store, 10, "Complete", || {
            get_job(&store, "idx").filter(|j| condition_true(j, "Complete").is_some())
        })
        .await;
        assert!(condition_true(&j, "SuccessCriteriaMet").is_some(), "{j}");
        assert_eq!(j["status"]["completedIndexes"], "0-2");
        assert_eq!(j["status"]["succeeded"], 3);
        assert!(j["status"]["completionTime"].is_string());
        assert!(j["status"].get("active").is_none());
        assert_eq!(pods(&store).len(), 3, "no pod beyond the three");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_pod_is_replaced_until_backoff_limit_then_job_fails() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(&jobs_key(), job("bo", json!({"backoffLimit": 1})), false)
            .unwrap();
        let first = wait_for(&store, 10, "first pod", || active_pods(&store).pop()).await;
        set_pod(&store, name(&first), "Failed", false, "");
        let second = wait_for(&store, 10, "replacement", || {
            active_pods(&store)
                .into_iter()
                .find(|p| name(p) != name(&first))
        })
        .await;
        wait_until(&store, 10, "failed 1, active 1", || {
            let j = get_job(&store, "bo").unwrap();
            j["status"]["failed"] == 1 && j["status"]["active"] == 1
        })
        .await;
        let j = get_job(&store, "bo").unwrap();
        assert!(condition_true(&j, "FailureTarget").is_none());
        set_pod(&store, name(&second), "Failed", false, "");
        let j = wait_for(&store, 10, "Failed", || {
            get_job(&store, "bo").filter(|j| condition_true(j, "Failed").is_some())
        })
        .await;
        let target = condition_true(&j, "FailureTarget").expect("FailureTarget before Failed");
        assert_eq!(target["reason"], "BackoffLimitExceeded");
        assert_eq!(
            condition_true(&j, "Failed").unwrap()["reason"],
            "BackoffLimitExceeded"
        );
        assert_eq!(j["status"]["failed"], 2);
        assert!(j["status"].get("completionTime").is_none());
        assert_eq!(pods(&store).len(), 2, "no third pod");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn active_deadline_fails_the_job_with_deadline_exceeded() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(
                &jobs_key(),
                job("dl", json!({"activeDeadlineSeconds": 1})),
                false,
            )
            .unwrap();
        let j = wait_for(&store, 10, "Failed", || {
            get_job(&store, "dl").filter(|j| condition_true(j, "Failed").is_some())
        })
        .await;
        assert_eq!(
            condition_true(&j, "Failed").unwrap()["reason"],
            "DeadlineExceeded"
        );
        assert_eq!(
            condition_true(&j, "FailureTarget").unwrap()["reason"],
            "DeadlineExceeded"
        );
        assert!(
            active_pods(&store).is_empty(),
            "the running pod was deleted"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ttl_zero_deletes_the_finished_job() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(
                &jobs_key(),
                job("ttl", json!({"ttlSecondsAfterFinished": 0})),
                false,
            )
            .unwrap();
        let p = wait_for(&store, 10, "pod", || active_pods(&store).pop()).await;
        set_pod(&store, name(&p), "Succeeded", false, "");
        wait_until(&store, 10, "job deleted", || {
            get_job(&store, "ttl").is_none()
        })
        .await;
        // Background propagation: the garbage collector takes the pod too.
        wait_until(&store, 10, "pod deleted", || pods(&store).is_empty()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn per_index_backoff_fails_only_that_index() {
        let store = store();
        let _c = start(store.clone());
        let spec = json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed", "backoffLimitPerIndex": 0});
        store.create(&jobs_key(), job("pi", spec), false).unwrap();
        let pods = wait_for(&store, 10, "2 pods", || {
            let p = active_pods(&store);
            (p.len() == 2).then_some(p)
        })
        .await;
        for p in &pods {
            assert_eq!(p["metadata"]["annotations"][FAILURE_COUNT_ANNOTATION], "0");
            let phase = if pod_index(p) == Some(0) {
                "Failed"
            } else {
                "Succeeded"
            };
            set_pod(&store, name(p), phase, false, "");
        }
        let j = wait_for(&store, 10, "Failed", || {
            get_job(&store, "pi").filter(|j| condition_true(j, "Failed").is_some())
        })
        .await;
        assert_eq!(
            condition_true(&j, "Failed").unwrap()["reason"],
            "FailedIndexes"
        );
        assert_eq!(j["status"]["failedIndexes"], "0");
        assert_eq!(j["status"]["completedIndexes"], "1");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn suspended_job_has_no_pods_until_resumed() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(&jobs_key(), job("sus", json!({"suspend": true})), false)
            .unwrap();
        let j = wait_for(&store, 10, "Suspended", || {
            get_job(&store, "sus").filter(|j| condition_true(j, "Suspended").is_some())
        })
        .await;
        assert_eq!(
            condition_true(&j, "Suspended").unwrap()["reason"],
            "JobSuspended"
        );
        assert!(pods(&store).is_empty());
        assert!(j["status"].get("startTime").is_none());
        store
            .modify(&jobs_key(), "default", "sus", false, |j| {
                let mut j = j.clone();
                j["spec"]["suspend"] = json!(false);
                Ok(j)
            })
            .unwrap();
        wait_until(&store, 10, "a pod", || {
            active_pods(&store).len() == 1
                && get_job(&store, "sus").unwrap()["status"]["active"] == 1
        })
        .await;
        let j = get_job(&store, "sus").unwrap();
        let c = j["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Suspended")
            .unwrap()
            .clone();
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("False"), Some("JobResumed"))
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn job_managed_elsewhere_is_left_alone() {
        let store = store();
        let _c = start(store.clone());
        let mut j = job("ext", json!({}));
        j["spec"]["managedBy"] = json!("example.com/other");
        store.create(&jobs_key(), j, false).unwrap();
        store
            .create(&jobs_key(), job("ours", json!({})), false)
            .unwrap();
        // Ours gets a pod; by then the other one has had its turn (keys are reconciled in order).
        wait_until(&store, 10, "our pod", || active_pods(&store).len() == 1).await;
        assert!(get_job(&store, "ext").unwrap().get("status").is_none());
        assert!(
            pods(&store)
                .iter()
                .all(|p| p["metadata"]["labels"]["job-name"] == "ours")
        );
    }
}
