//! The garbage collector, after `pkg/controller/garbagecollector`: asynchronous, like the
//! real one.
//!
//! - A dependent none of whose owners exists any more is deleted (background, or as its own
//!   `orphan`/`foregroundDeletion` finalizer asks; foreground when an owner waits for it).
//!   References to missing owners are dropped from a dependent that still has a live owner.
//! - An owner being deleted with finalizer `foregroundDeletion` has its dependents deleted
//!   (foreground, so theirs go first), and loses the finalizer when no dependent is left; the
//!   store then removes it. Unlike the real collector, it waits for every dependent, not only
//!   those with `blockOwnerDeletion`, so "owner gone" always means "dependents gone".
//! - An owner being deleted with finalizer `orphan` has its ownerReference removed from every
//!   dependent, then loses the finalizer.

use std::time::Duration;

use serde_json::Value;

use super::{delete_with, has_finalizer, is_deleting, name, namespace, uid};
use crate::error::ApiError;
use crate::resources::ResKey;
use crate::store::{Event, EventType, Propagation, Store};

const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

/// (kind, namespace, name) of any object.
pub(crate) type ObjKey = (ResKey, String, String);

/// Deletes what lost its owners and carries out foreground and orphan deletion.
pub(crate) struct GarbageCollector;

fn owner_refs(v: &Value) -> &[Value] {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn obj_key(key: &ResKey, v: &Value) -> ObjKey {
    (key.clone(), namespace(v).to_owned(), name(v).to_owned())
}

/// Where the owner an ownerReference names would be stored (namespaced owners live in the
/// dependent's namespace), if its kind is served.
fn owner_key(store: &Store, dependent_ns: &str, r: &Value) -> Option<ObjKey> {
    let api_version = r["apiVersion"].as_str()?;
    let kind = r["kind"].as_str()?;
    let owner_name = r["name"].as_str()?;
    let rt = store.with_registry(|reg| reg.by_kind(api_version, kind))?;
    let ns = if rt.namespaced { dependent_ns } else { "" };
    Some((rt.key(), ns.to_owned(), owner_name.to_owned()))
}

/// What became of an owner.
#[derive(Debug, PartialEq)]
enum Owner {
    /// Exists and is not waiting for its dependents.
    Solid,
    /// Being deleted in the foreground: waits for its dependents.
    Waiting,
    /// Gone (or replaced by an object with another uid).
    Absent,
}

fn owner_state(store: &Store, dependent_ns: &str, r: &Value) -> Owner {
    let want = r["uid"].as_str().unwrap_or_default();
    match owner_key(store, dependent_ns, r) {
        Some((key, ns, n)) => match store.get(&key, &ns, &n) {
            Some(o) if uid(&o) == want => {
                if is_deleting(&o) && has_finalizer(&o, FOREGROUND) {
                    Owner::Waiting
                } else {
                    Owner::Solid
                }
            }
            _ => Owner::Absent,
        },
        // A kind the cluster does not serve (a removed CRD): go by the uid alone.
        None if store.uid_exists(want) => Owner::Solid,
        None => Owner::Absent,
    }
}

/// Removes the ownerReferences whose uid `drop` accepts (a no-op when none does).
fn strip_refs(store: &Store, key: &ObjKey, drop: impl Fn(&str) -> bool) -> Result<(), ApiError> {
    let r = store.modify(&key.0, &key.1, &key.2, false, |cur| {
        let mut new = cur.clone();
        if let Some(refs) = new
            .pointer_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| !drop(r["uid"].as_str().unwrap_or_default()));
        }
        Ok(new)
    });
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

fn remove_finalizer(store: &Store, key: &ObjKey, finalizer: &str) -> Result<(), ApiError> {
    let r = store.modify(&key.0, &key.1, &key.2, false, |cur| {
        let mut new = cur.clone();
        if let Some(f) = new
            .pointer_mut("/metadata/finalizers")
            .and_then(Value::as_array_mut)
        {
            f.retain(|x| x.as_str() != Some(finalizer));
        }
        Ok(new)
    });
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

impl super::Reconciler for GarbageCollector {
    const NAME: &'static str = "garbage-collector";
    type Key = ObjKey;

    fn keys_for(&mut self, store: &Store, ev: &Event, out: &mut Vec<ObjKey>) {
        let obj = &ev.object;
        if ev.type_ == EventType::Deleted {
            // Its dependents may have lost their last owner.
            for (k, d) in store.dependents(uid(obj)) {
                out.push(obj_key(&k, &d));
            }
        } else if !owner_refs(obj).is_empty()
            || (is_deleting(obj) && (has_finalizer(obj, FOREGROUND) || has_finalizer(obj, ORPHAN)))
        {
            out.push(obj_key(&ev.key, obj));
        }
        // An owner waiting for its dependents looks again whenever one changes or goes.
        for r in owner_refs(obj) {
            if let Some(k) = owner_key(store, namespace(obj), r) {
                out.push(k);
            }
        }
    }

    fn resync(&mut self, store: &Store, out: &mut Vec<ObjKey>) {
        for key in store.kinds() {
            for obj in store.list(&key, None).0 {
                if !owner_refs(&obj).is_empty() || is_deleting(&obj) {
                    out.push(obj_key(&key, &obj));
                }
            }
        }
    }

    fn reconcile(&mut self, store: &Store, key: &ObjKey) -> Result<Option<Duration>, ApiError> {
        let Some(obj) = store.get(&key.0, &key.1, &key.2) else {
            return Ok(None);
        };
        let obj_uid = uid(&obj).to_owned();
        if is_deleting(&obj) && has_finalizer(&obj, ORPHAN) {
            for (k, d) in store.dependents(&obj_uid) {
                strip_refs(store, &obj_key(&k, &d), |u| u == obj_uid)?;
            }
            remove_finalizer(store, key, ORPHAN)?;
        }
        let Some(obj) = store
            .get(&key.0, &key.1, &key.2)
            .filter(|o| uid(o) == obj_uid)
        else {
            return Ok(None);
        };
        if is_deleting(&obj) && has_finalizer(&obj, FOREGROUND) {
            let dependents = store.dependents(&obj_uid);
            if dependents.is_empty() {
                remove_finalizer(store, key, FOREGROUND)?;
                return Ok(None);
            }
            for (k, d) in dependents {
                if is_deleting(&d) {
                    continue;
                }
                let dk = obj_key(&k, &d);
                // A dependent another live owner still holds only lets go of this one.
                let held = owner_refs(&d)
                    .iter()
                    .filter(|r| r["uid"].as_str() != Some(obj_uid.as_str()))
                    .any(|r| owner_state(store, &dk.1, r) == Owner::Solid);
                if held {
                    strip_refs(store, &dk, |u| u == obj_uid)?;
                } else {
                    delete_with(
                        store,
                        &k,
                        &dk.1,
                        &dk.2,
                        Propagation::Foreground,
                        Some(uid(&d)),
                    )?;
                }
            }
            return Ok(None);
        }
        let refs = owner_refs(&obj);
        if refs.is_empty() {
            return Ok(None);
        }
        let states: Vec<(String, Owner)> = refs
            .iter()
            .map(|r| {
                (
                    r["uid"].as_str().unwrap_or_default().to_owned(),
                    owner_state(store, &key.1, r),
                )
            })
            .collect();
        if states.iter().any(|(_, s)| *s == Owner::Solid) {
            let gone: Vec<&str> = states
                .iter()
                .filter(|(_, s)| *s != Owner::Solid)
                .map(|(u, _)| u.as_str())
                .collect();
            if !gone.is_empty() {
                strip_refs(store, key, |u| gone.contains(&u))?;
            }
            return Ok(None);
        }
        if is_deleting(&obj) {
            return Ok(None);
        }
        let propagation = if states.iter().any(|(_, s)| *s == Owner::Waiting)
            || has_finalizer(&obj, FOREGROUND)
        {
            Propagation::Foreground
        } else if has_finalizer(&obj, ORPHAN) {
            Propagation::Orphan
        } else {
            Propagation::Background
        };
        delete_with(store, &key.0, &key.1, &key.2, propagation, Some(&obj_uid))?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::controllers::start;
    use crate::controllers::testutil::*;
    use crate::store::DeleteOptions;

    fn cm_key() -> ResKey {
        ResKey::new("", "configmaps")
    }

    fn owner(store: &Store) -> Arc<Value> {
        store
            .create(
                &cm_key(),
                json!({"metadata": {"name": "owner", "namespace": "default"}}),
                false,
            )
            .unwrap()
    }

    fn dependent(store: &Store, name: &str, owner: &Value, finalizers: &[&str]) {
        let obj = json!({"metadata": {
            "name": name, "namespace": "default", "finalizers": finalizers,
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid(owner), "blockOwnerDeletion": true}],
        }});
        store.create(&cm_key(), obj, false).unwrap();
    }

    fn exists(store: &Store, name: &str) -> bool {
        store.get(&cm_key(), "default", name).is_some()
    }

    fn delete(store: &Store, name: &str, p: Propagation) {
        let opts = DeleteOptions {
            propagation: Some(p),
            ..DeleteOptions::default()
        };
        store.delete(&cm_key(), "default", name, &opts).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn background_delete_of_owner_deletes_dependents() {
        let store = store();
        let _c = start(store.clone());
        let o = owner(&store);
        dependent(&store, "d1", &o, &[]);
        dependent(&store, "d2", &o, &[]);
        delete(&store, "owner", Propagation::Background);
        assert!(!exists(&store, "owner"));
        wait_until(&store, 10, "dependents gone", || {
            !exists(&store, "d1") && !exists(&store, "d2")
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn foreground_keeps_owner_until_dependents_are_gone() {
        let store = store();
        let _c = start(store.clone());
        let o = owner(&store);
        dependent(&store, "d1", &o, &["example.com/hold"]);
        dependent(&store, "d2", &o, &[]);
        delete(&store, "owner", Propagation::Foreground);
        // d2 goes; d1 is held by its own finalizer, and so the owner stays.
        wait_until(&store, 10, "d2 gone, d1 deleting", || {
            !exists(&store, "d2")
                && store
                    .get(&cm_key(), "default", "d1")
                    .is_some_and(|d| is_deleting(&d))
        })
        .await;
        let o = store
            .get(&cm_key(), "default", "owner")
            .expect("owner kept");
        assert!(has_finalizer(&o, FOREGROUND));
        store
            .modify(&cm_key(), "default", "d1", false, |d| {
                let mut d = d.clone();
                d["metadata"]["finalizers"] = json!([]);
                Ok(d)
            })
            .unwrap();
        wait_until(&store, 10, "owner gone", || !exists(&store, "owner")).await;
        assert!(!exists(&store, "d1"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn orphan_strips_owner_references() {
        let store = store();
        let _c = start(store.clone());
        let o = owner(&store);
        dependent(&store, "d1", &o, &[]);
        delete(&store, "owner", Propagation::Orphan);
        wait_until(&store, 10, "owner gone", || !exists(&store, "owner")).await;
        let d = store
            .get(&cm_key(), "default", "d1")
            .expect("dependent kept");
        assert!(d.pointer("/metadata/ownerReferences").is_none(), "{d}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dependent_with_a_live_owner_only_loses_the_dead_reference() {
        let store = store();
        let _c = start(store.clone());
        let o = owner(&store);
        let live = store
            .create(
                &cm_key(),
                json!({"metadata": {"name": "live", "namespace": "default"}}),
                false,
            )
            .unwrap();
        let obj = json!({"metadata": {"name": "d", "namespace": "default", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid(&o)},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "live", "uid": uid(&live)},
        ]}});
        store.create(&cm_key(), obj, false).unwrap();
        delete(&store, "owner", Propagation::Background);
        let d = wait_for(&store, 10, "one reference", || {
            store
                .get(&cm_key(), "default", "d")
                .filter(|d| owner_refs(d).len() == 1)
        })
        .await;
        assert_eq!(owner_refs(&d)[0]["name"], "live");
    }
}
