//! The StatefulSet controller (apps/v1).
//!
//! Pods are `<sts>-<ordinal>` with a stable hostname (and `subdomain` = `spec.serviceName`),
//! labelled `statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index` and
//! `controller-revision-hash`. The revision is `<sts>-<hash of spec.template>`; there are no
//! ControllerRevision objects, so a pod recreated below a RollingUpdate `partition` gets the
//! current template rather than the old one. `volumeClaimTemplates` are ignored (this cluster
//! has no PersistentVolumeClaims). `OrderedReady` creates ordinal i only when 0..i are
//! available and removes from the highest ordinal, one at a time; `Parallel` creates and
//! removes all at once. A Succeeded or Failed pod is deleted and recreated.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{
    NsName, Reconciler, controller_keys, delete_background, i64_at, is_deleting, is_kind, labels,
    name, namespace, ns_name, owned_pods, owner_ref, pod_available_in, pod_ready, pod_terminal,
    pods_key, set_count, str_at, template_hash, uid, write_status,
};
use crate::error::ApiError;
use crate::resources::ResKey;
use crate::selector::LabelSelector;
use crate::store::{Event, Store};

const REVISION_LABEL: &str = "controller-revision-hash";
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

fn statefulsets_key() -> ResKey {
    ResKey::new("apps", "statefulsets")
}

/// Reconciles StatefulSets and their pods.
pub(crate) struct StatefulSetController;

impl Reconciler for StatefulSetController {
    const NAME: &'static str = "statefulset";
    type Key = NsName;

    fn keys_for(&mut self, _store: &Store, ev: &Event, out: &mut Vec<NsName>) {
        if is_kind(&ev.key, "apps", "statefulsets") {
            out.push(ns_name(&ev.object));
        } else if is_kind(&ev.key, "", "pods") {
            controller_keys(ev, "apps", "StatefulSet", out);
        }
    }

    fn resync(&mut self, store: &Store, out: &mut Vec<NsName>) {
        out.extend(
            store
                .list(&statefulsets_key(), None)
                .0
                .iter()
                .map(|s| ns_name(s)),
        );
    }

    fn reconcile(&mut self, store: &Store, key: &NsName) -> Result<Option<Duration>, ApiError> {
        let Some(sts) = store.get(&statefulsets_key(), &key.0, &key.1) else {
            return Ok(None);
        };
        let selector =
            match LabelSelector::from_object(sts.pointer("/spec/selector").unwrap_or(&Value::Null))
            {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(statefulset = ?key, error = %e, "invalid selector");
                    return Ok(None);
                }
            };
        let set = Set::new(&sts);
        let pods = || -> BTreeMap<i64, Arc<Value>> {
            owned_pods(store, &key.0, uid(&sts))
                .into_iter()
                .filter(|p| selector.matches(labels(p)))
                .filter_map(|p| set.ordinal(&p).map(|o| (o, p)))
                .collect()
        };
        let template_selected = selector.matches(
            sts.pointer("/spec/template/metadata/labels")
                .and_then(Value::as_object),
        );
        let mut wait = None;
        if !is_deleting(&sts) && template_selected {
            set.step(store, &sts, &pods(), &mut wait)?;
        }
        set.status(store, &sts, &pods(), &mut wait)?;
        Ok(wait)
    }
}

struct Set {
    name: String,
    replicas: i64,
    start: i64,
    ordered: bool,
    revision: String,
    min_ready: i64,
    /// `None` for the OnDelete strategy; otherwise the RollingUpdate partition.
    partition: Option<i64>,
}

impl Set {
    fn new(sts: &Value) -> Self {
        let name = name(sts).to_owned();
        let partition = match str_at(sts, "/spec/updateStrategy/type") {
            "OnDelete" => None,
            _ => Some(i64_at(sts, "/spec/updateStrategy/rollingUpdate/partition").unwrap_or(0)),
        };
        Set {
            revision: format!(
                "{name}-{}",
                template_hash(sts.pointer("/spec/template").unwrap_or(&Value::Null))
            ),
            name,
            replicas: i64_at(sts, "/spec/replicas").unwrap_or(1).max(0),
            start: i64_at(sts, "/spec/ordinals/start").unwrap_or(0).max(0),
            ordered: str_at(sts, "/spec/podManagementPolicy") != "Parallel",
            min_ready: i64_at(sts, "/spec/minReadySeconds").unwrap_or(0),
            partition,
        }
    }

    /// The ordinal in a pod's name, if it is `<sts>-<n>`.
    fn ordinal(&self, p: &Value) -> Option<i64> {
        name(p)
            .strip_prefix(&self.name)?
            .strip_prefix('-')?
            .parse()
            .ok()
    }

    fn available(&self, p: &Value, wait: &mut Option<Duration>) -> bool {
        match pod_available_in(p, self.min_ready) {
            Some(d) if d.is_zero() => true,
            Some(d) => {
                *wait = Some(wait.map_or(d, |w| w.min(d)));
                false
            }
            None => false,
        }
    }

    fn revision_of<'a>(&self, p: &'a Value) -> &'a str {
        labels(p)
            .and_then(|l| l.get(REVISION_LABEL))
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    fn step(
        &self,
        store: &Store,
        sts: &Value,
        pods: &BTreeMap<i64, Arc<Value>>,
        wait: &mut Option<Duration>,
    ) -> Result<(), ApiError> {
        let ns = namespace(sts);
        let range = self.start..self.start + self.replicas;
        // A finished pod is replaced: delete it now, recreate it once it is gone.
        for p in pods.values() {
            if pod_terminal(p) && !is_deleting(p) {
                delete_background(store, &pods_key(), ns, name(p))?;
            }
        }
        let mut all_available = true;
        for ord in range.clone() {
            let settled = match pods.get(&ord) {
                None => {
                    store.create(&pods_key(), self.pod(sts, ord), false)?;
                    false
                }
                Some(p) => !is_deleting(p) && !pod_terminal(p) && self.available(p, wait),
            };
            all_available &= settled;
            if !settled && self.ordered {
                return Ok(());
            }
        }
        // Condemned pods: highest ordinal first; one at a time when ordered.
        let condemned: Vec<&Arc<Value>> = pods
            .iter()
            .rev()
            .filter(|(o, _)| !range.contains(o))
            .map(|(_, p)| p)
            .collect();
        for p in &condemned {
            if !is_deleting(p) {
                delete_background(store, &pods_key(), ns, name(p))?;
            }
            if self.ordered {
                return Ok(());
            }
        }
        if !all_available || !condemned.is_empty() {
            return Ok(());
        }
        // Rolling update: the highest outdated ordinal at or above the partition, one at a time.
        if let Some(partition) = self.partition {
            let outdated = range
                .rev()
                .filter(|o| *o >= partition)
                .filter_map(|o| pods.get(&o))
                .find(|p| self.revision_of(p) != self.revision);
            if let Some(p) = outdated {
                delete_background(store, &pods_key(), ns, name(p))?;
            }
        }
        Ok(())
    }

    fn pod(&self, sts: &Value, ord: i64) -> Value {
        let tmpl = &sts["spec"]["template"];
        let pod_name = format!("{}-{ord}", self.name);
        let mut labels = tmpl
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        labels.insert(POD_NAME_LABEL.into(), Value::from(pod_name.clone()));
        labels.insert(POD_INDEX_LABEL.into(), Value::from(ord.to_string()));
        labels.insert(REVISION_LABEL.into(), Value::from(self.revision.clone()));
        let mut meta = Map::new();
        meta.insert("name".into(), Value::from(pod_name.clone()));
        meta.insert("namespace".into(), Value::from(namespace(sts)));
        meta.insert("labels".into(), Value::Object(labels));
        if let Some(a) = tmpl
            .pointer("/metadata/annotations")
            .filter(|a| a.is_object())
        {
            meta.insert("annotations".into(), a.clone());
        }
        meta.insert(
            "ownerReferences".into(),
            json!([owner_ref(sts, "apps/v1", "StatefulSet")]),
        );
        let mut spec = tmpl.get("spec").cloned().unwrap_or_else(|| json!({}));
        spec["hostname"] = Value::from(pod_name);
        match str_at(sts, "/spec/serviceName") {
            "" => {}
            svc => spec["subdomain"] = Value::from(svc),
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    }

    fn status(
        &self,
        store: &Store,
        sts: &Value,
        pods: &BTreeMap<i64, Arc<Value>>,
        wait: &mut Option<Duration>,
    ) -> Result<(), ApiError> {
        let live: Vec<&Arc<Value>> = pods
            .values()
            .filter(|p| !is_deleting(p) && !pod_terminal(p))
            .collect();
        let mut status = sts
            .get("status")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let ready = live.iter().filter(|p| pod_ready(p)).count() as i64;
        let available = live.iter().filter(|p| self.available(p, wait)).count() as i64;
        let updated = live
            .iter()
            .filter(|p| self.revision_of(p) == self.revision)
            .count() as i64;
        let mut current_revision = status
            .get("currentRevision")
            .and_then(Value::as_str)
            .unwrap_or(&self.revision)
            .to_owned();
        let mut current = live
            .iter()
            .filter(|p| self.revision_of(p) == current_revision)
            .count() as i64;
        let total = live.len() as i64;
        // The rollout is complete: the update revision becomes the current one.
        if updated == self.replicas && ready == self.replicas && total == self.replicas {
            current_revision = self.revision.clone();
            current = updated;
        }
        if let Some(g) = i64_at(sts, "/metadata/generation") {
            status.insert("observedGeneration".into(), Value::from(g));
        }
        status.insert("replicas".into(), Value::from(total));
        set_count(&mut status, "readyReplicas", ready);
        set_count(&mut status, "currentReplicas", current);
        set_count(&mut status, "updatedReplicas", updated);
        status.insert("availableReplicas".into(), Value::from(available));
        status.insert("currentRevision".into(), Value::from(current_revision));
        status.insert("updateRevision".into(), Value::from(self.revision.clone()));
        status.insert("collisionCount".into(), Value::from(0));
        write_status(store, &statefulsets_key(), sts, status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::start;
    use crate::controllers::testutil::*;

    fn sts(policy: &str, replicas: i64) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {
                "replicas": replicas, "serviceName": "db", "podManagementPolicy": policy,
                "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
            },
        })
    }

    fn names(store: &Store) -> Vec<String> {
        pods(store)
            .iter()
            .filter(|p| !is_deleting(p))
            .map(|p| name(p).to_owned())
            .collect()
    }

    fn get(store: &Store) -> Arc<Value> {
        store.get(&statefulsets_key(), "default", "db").unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ordered_ready_creates_1_only_after_0_is_ready() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(&statefulsets_key(), sts("OrderedReady", 2), false)
            .unwrap();
        wait_until(&store, 10, "db-0", || names(&store) == ["db-0"]).await;
        // The controller has seen db-0 (status counts it) and still made no db-1.
        wait_until(&store, 10, "status replicas 1", || {
            get(&store)["status"]["replicas"] == 1
        })
        .await;
        assert_eq!(names(&store), ["db-0"]);
        let p0 = store.get(&pods_key(), "default", "db-0").unwrap();
        assert_eq!(p0["spec"]["hostname"], "db-0");
        assert_eq!(p0["spec"]["subdomain"], "db");
        assert_eq!(p0["metadata"]["labels"][POD_NAME_LABEL], "db-0");
        assert_eq!(p0["metadata"]["labels"][POD_INDEX_LABEL], "0");
        set_pod(&store, "db-0", "Running", true, "10.0.0.1");
        wait_until(&store, 10, "db-1", || names(&store) == ["db-0", "db-1"]).await;
        set_pod(&store, "db-1", "Running", true, "10.0.0.2");
        let s = wait_for(&store, 10, "2 ready", || {
            Some(get(&store)).filter(|s| s["status"]["readyReplicas"] == 2)
        })
        .await;
        assert_eq!(
            s["status"]["currentRevision"],
            s["status"]["updateRevision"]
        );
        assert_eq!(s["status"]["observedGeneration"], 1);
        // Scale down goes from the highest ordinal.
        store
            .modify(&statefulsets_key(), "default", "db", false, |s| {
                let mut s = s.clone();
                s["spec"]["replicas"] = json!(1);
                Ok(s)
            })
            .unwrap();
        wait_until(&store, 10, "db-1 gone", || names(&store) == ["db-0"]).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parallel_creates_all_and_failed_pods_are_recreated() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(&statefulsets_key(), sts("Parallel", 3), false)
            .unwrap();
        wait_until(&store, 10, "3 pods", || {
            names(&store) == ["db-0", "db-1", "db-2"]
        })
        .await;
        let uid1 = uid(&store.get(&pods_key(), "default", "db-1").unwrap()).to_owned();
        set_pod(&store, "db-1", "Failed", false, "");
        wait_until(&store, 10, "db-1 recreated", || {
            store
                .get(&pods_key(), "default", "db-1")
                .is_some_and(|p| uid(&p) != uid1 && !pod_terminal(&p))
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn template_change_rolls_from_the_highest_ordinal() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(&statefulsets_key(), sts("OrderedReady", 2), false)
            .unwrap();
        wait_until(&store, 10, "2 ready", || {
            ready_all(&store);
            get(&store)["status"]["readyReplicas"] == 2
        })
        .await;
        let old_revision = get(&store)["status"]["updateRevision"].clone();
        store
            .modify(&statefulsets_key(), "default", "db", false, |s| {
                let mut s = s.clone();
                s["spec"]["template"]["spec"]["containers"][0]["image"] = json!("y");
                Ok(s)
            })
            .unwrap();
        let s = wait_for(&store, 10, "rolled", || {
            ready_all(&store);
            let s = get(&store);
            (s["status"]["updateRevision"] != old_revision
                && s["status"]["updatedReplicas"] == 2
                && s["status"]["readyReplicas"] == 2
                && s["status"]["currentRevision"] == s["status"]["updateRevision"])
                .then_some(s)
        })
        .await;
        for p in pods(&store) {
            assert_eq!(
                p["metadata"]["labels"][REVISION_LABEL],
                s["status"]["updateRevision"]
            );
        }
        assert_eq!(s["status"]["observedGeneration"], 2);
    }
}
