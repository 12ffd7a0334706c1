//! The Deployment controller (apps/v1).
//!
//! This cluster has no ReplicaSets: a Deployment owns its pods directly (controller
//! ownerReference to the Deployment), named `<deployment>-<hash>-<random5>` and labelled
//! `pod-template-hash=<hash>`, where the hash is [`template_hash`] of `spec.template`. Pods
//! carrying the current hash are the "new ReplicaSet", every other pod an "old" one, and the
//! rollout moves pods from old to new the way the RollingUpdate and Recreate strategies move
//! replicas between ReplicaSets (simplified: no proportional scaling of several old
//! ReplicaSets, no `progressDeadlineSeconds`, no revision history). A paused Deployment keeps
//! its pods as they are and only reports status.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{
    NsName, Reconciler, controller_keys, delete_background, i64_at, int_or_percent, is_deleting,
    is_kind, labels, name, namespace, ns_name, owned_pods, owner_ref, pod_active, pod_available_in,
    pod_ready, pods_key, scale_down_order, set_condition, set_count, str_at, template_hash, uid,
    write_status,
};
use crate::error::ApiError;
use crate::resources::ResKey;
use crate::selector::LabelSelector;
use crate::store::{Event, Store};

const HASH_LABEL: &str = "pod-template-hash";

fn deployments_key() -> ResKey {
    ResKey::new("apps", "deployments")
}

/// Reconciles Deployments and their pods.
pub(crate) struct DeploymentController;

impl Reconciler for DeploymentController {
    const NAME: &'static str = "deployment";
    type Key = NsName;

    fn keys_for(&mut self, _store: &Store, ev: &Event, out: &mut Vec<NsName>) {
        if is_kind(&ev.key, "apps", "deployments") {
            out.push(ns_name(&ev.object));
        } else if is_kind(&ev.key, "", "pods") {
            controller_keys(ev, "apps", "Deployment", out);
        }
    }

    fn resync(&mut self, store: &Store, out: &mut Vec<NsName>) {
        out.extend(
            store
                .list(&deployments_key(), None)
                .0
                .iter()
                .map(|d| ns_name(d)),
        );
    }

    fn reconcile(&mut self, store: &Store, key: &NsName) -> Result<Option<Duration>, ApiError> {
        let Some(d) = store.get(&deployments_key(), &key.0, &key.1) else {
            return Ok(None);
        };
        let selector =
            match LabelSelector::from_object(d.pointer("/spec/selector").unwrap_or(&Value::Null)) {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(deployment = ?key, error = %e, "invalid selector");
                    return Ok(None);
                }
            };
        let rollout = Rollout::new(&d);
        let pods = || -> Vec<Arc<Value>> {
            owned_pods(store, &key.0, uid(&d))
                .into_iter()
                .filter(|p| selector.matches(labels(p)))
                .collect()
        };
        // Pods the selector would not see would be created for ever.
        let template_selected = selector.matches(
            d.pointer("/spec/template/metadata/labels")
                .and_then(Value::as_object),
        );
        let paused = d.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);
        let mut again = None;
        if !is_deleting(&d) && !paused && template_selected {
            again = rollout.step(store, &d, pods())?;
        }
        let status_again = rollout.status(store, &d, &pods(), paused)?;
        Ok(match (again, status_again) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }
}

/// A Deployment's parameters.
struct Rollout {
    replicas: i64,
    hash: String,
    min_ready: i64,
    recreate: bool,
    max_surge: i64,
    max_unavailable: i64,
}

impl Rollout {
    fn new(d: &Value) -> Self {
        let replicas = i64_at(d, "/spec/replicas").unwrap_or(1).max(0);
        let recreate = str_at(d, "/spec/strategy/type") == "Recreate";
        let ru = d.pointer("/spec/strategy/rollingUpdate");
        let (max_surge, max_unavailable) = if recreate {
            (0, 0)
        } else {
            let quarter = json!("25%");
            let surge = int_or_percent(
                Some(ru.and_then(|r| r.get("maxSurge")).unwrap_or(&quarter)),
                replicas,
                true,
                0,
            );
            let unavailable = int_or_percent(
                Some(ru.and_then(|r| r.get("maxUnavailable")).unwrap_or(&quarter)),
                replicas,
                false,
                0,
            );
            // Both zero would deadlock; the API rejects it and the controller uses 1.
            if surge == 0 && unavailable == 0 {
                (0, 1)
            } else {
                (surge, unavailable)
            }
        };
        Rollout {
            replicas,
            hash: template_hash(d.pointer("/spec/template").unwrap_or(&Value::Null)),
            min_ready: i64_at(d, "/spec/minReadySeconds").unwrap_or(0),
            recreate,
            max_surge,
            max_unavailable,
        }
    }

    fn is_new(&self, p: &Value) -> bool {
        labels(p)
            .and_then(|l| l.get(HASH_LABEL))
            .and_then(Value::as_str)
            == Some(self.hash.as_str())
    }

    /// Available now; otherwise notes in `wait` when it will be.
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

    /// Creates and deletes pods toward the desired state; returns when to look again for
    /// pods that become available by time alone.
    fn step(
        &self,
        store: &Store,
        d: &Value,
        pods: Vec<Arc<Value>>,
    ) -> Result<Option<Duration>, ApiError> {
        let ns = namespace(d);
        let mut wait = None;
        let (new, old): (Vec<_>, Vec<_>) = pods.iter().cloned().partition(|p| self.is_new(p));
        let new_active: Vec<Arc<Value>> = new.into_iter().filter(|p| pod_active(p)).collect();
        let old_active: Vec<Arc<Value>> = old.iter().filter(|p| pod_active(p)).cloned().collect();
        if old_active.is_empty() {
            // Recreate also waits for old pods to stop before starting new ones.
            let old_running = old.iter().any(|p| !super::pod_terminal(p));
            if !(self.recreate && old_running) {
                self.scale(store, d, &new_active, self.replicas)?;
            }
            return Ok(None);
        }
        if self.recreate {
            for p in &old_active {
                delete_background(store, &pods_key(), ns, name(p))?;
            }
            return Ok(None);
        }
        // Scale the new pods up within the surge.
        let total = (new_active.len() + old_active.len()) as i64;
        let new_target = self
            .replicas
            .min(new_active.len() as i64 + (self.replicas + self.max_surge - total).max(0));
        let new_count = if (new_active.len() as i64) < new_target {
            self.scale(store, d, &new_active, new_target)?;
            new_target
        } else {
            new_active.len() as i64
        };
        // Scale the old ones down within the unavailability budget: unhealthy ones first.
        let min_available = self.replicas - self.max_unavailable;
        let new_available = new_active
            .iter()
            .filter(|p| self.available(p, &mut wait))
            .count() as i64;
        let mut old_sorted = old_active;
        scale_down_order(&mut old_sorted);
        let all = new_count + old_sorted.len() as i64;
        let mut budget = all - min_available - (new_count - new_available);
        let mut kept = Vec::new();
        for p in old_sorted {
            if budget > 0 && !self.available(&p, &mut wait) {
                delete_background(store, &pods_key(), ns, name(&p))?;
                budget -= 1;
            } else {
                kept.push(p);
            }
        }
        let old_available = kept.iter().filter(|p| self.available(p, &mut wait)).count() as i64;
        let mut budget = new_available + old_available - min_available;
        for p in kept {
            if budget <= 0 {
                break;
            }
            delete_background(store, &pods_key(), ns, name(&p))?;
            budget -= 1;
        }
        Ok(wait)
    }

    /// Brings the current template's pods to `want`.
    fn scale(
        &self,
        store: &Store,
        d: &Value,
        current: &[Arc<Value>],
        want: i64,
    ) -> Result<(), ApiError> {
        let have = current.len() as i64;
        if have > want {
            let mut extra = current.to_vec();
            scale_down_order(&mut extra);
            for p in extra.iter().take(usize::try_from(have - want).unwrap_or(0)) {
                delete_background(store, &pods_key(), namespace(d), name(p))?;
            }
        }
        for _ in have..want {
            store.create(&pods_key(), self.pod(d), false)?;
        }
        Ok(())
    }

    fn pod(&self, d: &Value) -> Value {
        let tmpl = &d["spec"]["template"];
        let mut meta = Map::new();
        let mut labels = tmpl
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        labels.insert(HASH_LABEL.into(), Value::from(self.hash.clone()));
        meta.insert(
            "generateName".into(),
            Value::from(format!("{}-{}-", name(d), self.hash)),
        );
        meta.insert("namespace".into(), Value::from(namespace(d)));
        meta.insert("labels".into(), Value::Object(labels));
        if let Some(a) = tmpl
            .pointer("/metadata/annotations")
            .filter(|a| a.is_object())
        {
            meta.insert("annotations".into(), a.clone());
        }
        meta.insert(
            "ownerReferences".into(),
            json!([owner_ref(d, "apps/v1", "Deployment")]),
        );
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": tmpl.get("spec").cloned().unwrap_or_else(|| json!({})),
        })
    }

    /// Writes the status the pods give; returns when a pod becomes available by time alone.
    fn status(
        &self,
        store: &Store,
        d: &Value,
        pods: &[Arc<Value>],
        paused: bool,
    ) -> Result<Option<Duration>, ApiError> {
        let mut wait = None;
        let active: Vec<&Arc<Value>> = pods.iter().filter(|p| pod_active(p)).collect();
        let updated = active.iter().filter(|p| self.is_new(p)).count() as i64;
        let ready = active.iter().filter(|p| pod_ready(p)).count() as i64;
        let available = active
            .iter()
            .filter(|p| self.available(p, &mut wait))
            .count() as i64;
        let total = active.len() as i64;
        let mut status = d
            .get("status")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if let Some(g) = i64_at(d, "/metadata/generation") {
            status.insert("observedGeneration".into(), Value::from(g));
        }
        set_count(&mut status, "replicas", total);
        set_count(&mut status, "updatedReplicas", updated);
        set_count(&mut status, "readyReplicas", ready);
        set_count(&mut status, "availableReplicas", available);
        set_count(
            &mut status,
            "unavailableReplicas",
            (self.replicas - available).max(0),
        );
        let mut conds: Vec<Value> = status
            .get("conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let touched = ["lastUpdateTime"];
        if available >= self.replicas - self.max_unavailable {
            set_condition(
                &mut conds,
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
                &touched,
            );
        } else {
            set_condition(
                &mut conds,
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
                &touched,
            );
        }
        let rs = format!("{}-{}", name(d), self.hash);
        if paused {
            set_condition(
                &mut conds,
                "Progressing",
                "Unknown",
                "DeploymentPaused",
                "Deployment is paused",
                &touched,
            );
        } else if updated == self.replicas && total == self.replicas && available == self.replicas {
            set_condition(
                &mut conds,
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                &format!("ReplicaSet \"{rs}\" has successfully progressed."),
                &touched,
            );
        } else {
            set_condition(
                &mut conds,
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                &format!("ReplicaSet \"{rs}\" is progressing."),
                &touched,
            );
        }
        status.insert("conditions".into(), Value::Array(conds));
        write_status(store, &deployments_key(), d, status)?;
        Ok(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::start;
    use crate::controllers::testutil::*;

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": image}]}},
            },
        })
    }

    fn get(store: &Store) -> Arc<Value> {
        store.get(&deployments_key(), "default", "web").unwrap()
    }

    fn live(store: &Store) -> Vec<Arc<Value>> {
        pods(store).into_iter().filter(|p| pod_active(p)).collect()
    }

    fn update(store: &Store, f: impl FnOnce(&mut Value)) {
        store
            .modify(&deployments_key(), "default", "web", false, |d| {
                let mut d = d.clone();
                f(&mut d);
                Ok(d)
            })
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replicas_2_gives_2_pods_and_scaling_to_4_gives_4() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(&deployments_key(), deployment(2, "a"), false)
            .unwrap();
        wait_until(&store, 10, "2 pods", || live(&store).len() == 2).await;
        let hash = template_hash(&get(&store)["spec"]["template"]);
        for p in live(&store) {
            assert_eq!(p["metadata"]["labels"][HASH_LABEL], hash);
            assert!(
                name(&p).starts_with(&format!("web-{hash}-")),
                "{}",
                name(&p)
            );
            assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "Deployment");
        }
        update(&store, |d| d["spec"]["replicas"] = json!(4));
        wait_until(&store, 10, "4 pods", || live(&store).len() == 4).await;
        update(&store, |d| d["spec"]["replicas"] = json!(1));
        wait_until(&store, 10, "1 pod, observed", || {
            let d = get(&store);
            live(&store).len() == 1
                && d["status"]["replicas"] == 1
                && d["status"]["observedGeneration"] == d["metadata"]["generation"]
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn status_counts_follow_ready_pods() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(&deployments_key(), deployment(2, "a"), false)
            .unwrap();
        let pods = wait_for(&store, 10, "2 pods", || {
            let p = live(&store);
            (p.len() == 2).then_some(p)
        })
        .await;
        wait_until(&store, 10, "replicas 2", || {
            get(&store)["status"]["replicas"] == 2
        })
        .await;
        let d = get(&store);
        assert!(d["status"].get("readyReplicas").is_none());
        assert_eq!(d["status"]["unavailableReplicas"], 2);
        let available = |d: &Value| {
            d["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Available")
                .unwrap()["status"]
                .clone()
        };
        assert_eq!(available(&d), "False");
        set_pod(&store, name(&pods[0]), "Running", true, "10.0.0.1");
        wait_until(&store, 10, "1 ready", || {
            get(&store)["status"]["readyReplicas"] == 1
        })
        .await;
        set_pod(&store, name(&pods[1]), "Running", true, "10.0.0.2");
        wait_until(&store, 10, "2 available", || {
            get(&store)["status"]["availableReplicas"] == 2
        })
        .await;
        let d = get(&store);
        assert_eq!(d["status"]["readyReplicas"], 2);
        assert_eq!(d["status"]["updatedReplicas"], 2);
        assert!(d["status"].get("unavailableReplicas").is_none());
        assert_eq!(available(&d), "True");
        let progressing = d["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Progressing")
            .unwrap()
            .clone();
        assert_eq!(progressing["reason"], "NewReplicaSetAvailable");
        // A pod losing readiness shows at once.
        set_pod(&store, name(&pods[1]), "Running", false, "10.0.0.2");
        wait_until(&store, 10, "1 ready", || {
            get(&store)["status"]["readyReplicas"] == 1
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn template_change_rolls_every_pod_to_the_new_hash() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(&deployments_key(), deployment(3, "a"), false)
            .unwrap();
        wait_until(&store, 10, "3 ready pods", || {
            ready_all(&store);
            get(&store)["status"]["availableReplicas"] == 3
        })
        .await;
        let old_hash = template_hash(&get(&store)["spec"]["template"]);
        update(&store, |d| {
            d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("b")
        });
        let new_hash = template_hash(&get(&store)["spec"]["template"]);
        assert_ne!(old_hash, new_hash);
        let mut max_live = 0;
        wait_until(&store, 20, "rolled", || {
            ready_all(&store);
            let live = live(&store);
            max_live = max_live.max(live.len());
            let d = get(&store);
            live.len() == 3
                && live
                    .iter()
                    .all(|p| p["metadata"]["labels"][HASH_LABEL] == new_hash.as_str())
                && d["status"]["replicas"] == 3
                && d["status"]["updatedReplicas"] == 3
                && d["status"]["availableReplicas"] == 3
        })
        .await;
        // 25% surge of 3 rounds up to 1.
        assert!(max_live <= 4, "surge exceeded: {max_live}");
        let d = get(&store);
        let progressing = d["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Progressing")
            .unwrap()
            .clone();
        assert_eq!(progressing["reason"], "NewReplicaSetAvailable");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn recreate_deletes_old_pods_before_creating_new() {
        let store = store();
        let _c = start(store.clone());
        let mut d = deployment(2, "a");
        d["spec"]["strategy"] = json!({"type": "Recreate"});
        store.create(&deployments_key(), d, false).unwrap();
        wait_until(&store, 10, "2 ready", || {
            ready_all(&store);
            get(&store)["status"]["readyReplicas"] == 2
        })
        .await;
        let mut rx = store.subscribe_all();
        update(&store, |d| {
            d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("b")
        });
        let new_hash = template_hash(&get(&store)["spec"]["template"]);
        wait_until(&store, 10, "2 new pods", || {
            live(&store)
                .iter()
                .filter(|p| p["metadata"]["labels"][HASH_LABEL] == new_hash.as_str())
                .count()
                == 2
        })
        .await;
        // No new pod was created while an old one still existed.
        let mut old_left = 2;
        while let Ok(ev) = rx.try_recv() {
            if is_kind(&ev.key, "", "pods") {
                let is_new = ev.object["metadata"]["labels"][HASH_LABEL] == new_hash.as_str();
                match ev.type_ {
                    crate::store::EventType::Deleted if !is_new => old_left -= 1,
                    crate::store::EventType::Added if is_new => {
                        assert_eq!(old_left, 0, "new pod before old ones went")
                    }
                    _ => {}
                }
            }
        }
    }
}
