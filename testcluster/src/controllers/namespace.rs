//! The Namespace controller: new namespaces become `Active` (with the
//! `kubernetes.io/metadata.name` label), and a namespace being deleted is emptied of every
//! namespaced object, then removed.
//!
//! Content is deleted with background propagation; objects held by finalizers or a pod's grace
//! period keep the namespace `Terminating` until they go. The namespace's status is not written
//! while it terminates (no `NamespaceDeletion*` conditions): a write to a namespace that is
//! being deleted and has no finalizers would make the store remove it at once.

use std::time::Duration;

use serde_json::Value;

use super::{Reconciler, delete_background, is_deleting, name, namespace, str_at};
use crate::error::ApiError;
use crate::resources::ResKey;
use crate::store::{Event, Store};

const NAME_LABEL: &str = "kubernetes.io/metadata.name";

fn namespaces_key() -> ResKey {
    ResKey::new("", "namespaces")
}

/// Keeps namespaces Active and empties those being deleted.
pub(crate) struct NamespaceController;

impl Reconciler for NamespaceController {
    const NAME: &'static str = "namespace";
    type Key = String;

    fn keys_for(&mut self, store: &Store, ev: &Event, out: &mut Vec<String>) {
        if ev.key == namespaces_key() {
            out.push(name(&ev.object).to_owned());
            return;
        }
        // A change inside a terminating namespace may be the last object going.
        let ns = namespace(&ev.object);
        if !ns.is_empty()
            && store
                .get(&namespaces_key(), "", ns)
                .is_some_and(|n| is_deleting(&n))
        {
            out.push(ns.to_owned());
        }
    }

    fn resync(&mut self, store: &Store, out: &mut Vec<String>) {
        out.extend(
            store
                .list(&namespaces_key(), None)
                .0
                .iter()
                .map(|n| name(n).to_owned()),
        );
    }

    fn reconcile(&mut self, store: &Store, ns_name: &String) -> Result<Option<Duration>, ApiError> {
        let Some(ns) = store.get(&namespaces_key(), "", ns_name) else {
            return Ok(None);
        };
        if !is_deleting(&ns) {
            let labelled = ns
                .pointer("/metadata/labels")
                .and_then(|l| l.get(NAME_LABEL))
                .and_then(Value::as_str)
                == Some(ns_name.as_str());
            if str_at(&ns, "/status/phase") == "Active" && labelled {
                return Ok(None);
            }
            let r = store.modify(&namespaces_key(), "", ns_name, false, |cur| {
                let mut new = cur.clone();
                // Deleted in between: leave it to the next pass.
                if is_deleting(cur) {
                    return Ok(new);
                }
                new["metadata"]["labels"][NAME_LABEL] = Value::from(ns_name.as_str());
                new["status"]["phase"] = Value::from("Active");
                Ok(new)
            });
            return match r {
                Err(e) if e.code != 404 => Err(e),
                _ => Ok(None),
            };
        }
        if remaining(store, ns_name, true)? > 0 {
            return Ok(None);
        }
        // Someone else's finalizers hold it; the store removes it when they go.
        let held = ns
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if !held && remaining(store, ns_name, false)? == 0 {
            store.remove(&namespaces_key(), "", ns_name);
        }
        Ok(None)
    }
}

/// Counts the namespace's objects, deleting those not yet being deleted when `delete`.
fn remaining(store: &Store, ns: &str, delete: bool) -> Result<usize, ApiError> {
    let mut n = 0;
    for key in store.kinds() {
        if !store.storage_type(&key).is_some_and(|t| t.namespaced) {
            continue;
        }
        let (objs, _) = store.list(&key, Some(ns));
        for o in &objs {
            if delete && !is_deleting(o) {
                delete_background(store, &key, ns, name(o))?;
            }
        }
        // Count what is left after the deletions (most objects go at once).
        n += if delete {
            store.list(&key, Some(ns)).0.len()
        } else {
            objs.len()
        };
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::controllers::start;
    use crate::controllers::testutil::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn new_namespace_becomes_active_with_name_label() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(
                &namespaces_key(),
                json!({"metadata": {"name": "team"}}),
                false,
            )
            .unwrap();
        let ns = wait_for(&store, 10, "active", || {
            store
                .get(&namespaces_key(), "", "team")
                .filter(|n| str_at(n, "/status/phase") == "Active")
        })
        .await;
        assert_eq!(ns["metadata"]["labels"][NAME_LABEL], "team");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deleting_a_namespace_empties_it_then_removes_it() {
        let store = store();
        let _c = start(store.clone());
        store
            .create(
                &namespaces_key(),
                json!({"metadata": {"name": "team"}}),
                false,
            )
            .unwrap();
        let cm = ResKey::new("", "configmaps");
        store
            .create(
                &cm,
                json!({"metadata": {"name": "a", "namespace": "team"}}),
                false,
            )
            .unwrap();
        let held = json!({"metadata": {"name": "held", "namespace": "team", "finalizers": ["example.com/hold"]}});
        store.create(&cm, held, false).unwrap();
        let pod = json!({"metadata": {"name": "p", "namespace": "team"}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
        store.create(&ResKey::new("", "pods"), pod, false).unwrap();
        // Other namespaces are untouched.
        store
            .create(
                &cm,
                json!({"metadata": {"name": "keep", "namespace": "default"}}),
                false,
            )
            .unwrap();
        store
            .delete(&namespaces_key(), "", "team", &Default::default())
            .unwrap();
        wait_until(&store, 10, "only the held object left", || {
            store.list(&cm, Some("team")).0.len() == 1
                && store
                    .get(&cm, "team", "held")
                    .is_some_and(|c| is_deleting(&c))
                && store
                    .list(&ResKey::new("", "pods"), Some("team"))
                    .0
                    .is_empty()
        })
        .await;
        let ns = store
            .get(&namespaces_key(), "", "team")
            .expect("namespace kept while content remains");
        assert_eq!(ns["status"]["phase"], "Terminating");
        store
            .modify(&cm, "team", "held", false, |c| {
                let mut c = c.clone();
                c["metadata"]["finalizers"] = json!([]);
                Ok(c)
            })
            .unwrap();
        wait_until(&store, 10, "namespace removed", || {
            store.get(&namespaces_key(), "", "team").is_none()
        })
        .await;
        assert!(store.get(&cm, "default", "keep").is_some());
    }
}
