//! The object store: every kind's objects, one global `resourceVersion` counter, a bounded
//! event log per kind for watch resumption, and broadcast channels for live watchers and the
//! in-process controllers.
//!
//! The rules that keep controllers honest live here, once: a write that changes nothing is
//! no write (no new resourceVersion, no event); `generation` moves only on the changes its
//! kind counts; an object with finalizers is marked for deletion, not removed, and goes away
//! when its last finalizer does.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::error::ApiError;
use crate::resources::{GenerationRule, Registry, ResKey, ResourceType};
use crate::ssa::equal_ignoring_managed_times;
use crate::time;

/// Events kept per kind for watches that resume from a resourceVersion.
const LOG_CAPACITY: usize = 20_000;
/// Live events buffered per watcher before it is cut off (it then resumes from the log).
const CHANNEL_CAPACITY: usize = 8_192;
/// List snapshots kept for `continue` tokens.
const SNAPSHOTS: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as watchers see it.
#[derive(Debug)]
pub struct Event {
    pub key: ResKey,
    pub type_: EventType,
    pub rv: u64,
    pub object: Arc<Value>,
    /// The state before a modification (selector-filtered watches turn MODIFIED into ADDED or DELETED).
    pub old: Option<Arc<Value>>,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub enum WatchStart {
    /// `resourceVersion` unset or "0": synthetic ADDED for every object, then live changes.
    Current,
    /// Every change after this resourceVersion, then live changes.
    After(u64),
}

/// A watch's backlog and its live channel, taken under one lock so nothing falls between.
pub struct Subscription {
    pub backlog: Vec<Arc<Event>>,
    pub live: broadcast::Receiver<Arc<Event>>,
    pub rv: u64,
}

/// The requested resourceVersion is older than the kept history.
#[derive(Debug)]
pub struct TooOld {
    pub requested: u64,
    pub oldest: u64,
}

/// How a delete should treat dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub propagation: Option<Propagation>,
    pub grace_period_seconds: Option<i64>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

/// What a delete did.
#[derive(Debug)]
pub enum Deleted {
    /// Removed; the object as it was, with the deletion's resourceVersion.
    Gone(Arc<Value>),
    /// Marked (finalizers or a grace period hold it); the updated object.
    Pending(Arc<Value>),
}

/// The result of a modification.
#[derive(Debug)]
pub struct Written {
    pub object: Arc<Value>,
    /// False for a no-op write.
    pub changed: bool,
    /// True when the write emptied the finalizers of an object being deleted.
    pub deleted: bool,
}

struct KindStore {
    objects: BTreeMap<(String, String), Arc<Value>>,
    log: VecDeque<Arc<Event>>,
    /// Watches must start at or after this resourceVersion; older ones get 410.
    horizon: u64,
    tx: broadcast::Sender<Arc<Event>>,
}

impl KindStore {
    /// A kind seen for the first time has lost no history: nothing of it happened before.
    fn new() -> Self {
        Self {
            objects: BTreeMap::new(),
            log: VecDeque::new(),
            horizon: 0,
            tx: broadcast::channel(CHANNEL_CAPACITY).0,
        }
    }
}

struct Snapshot {
    items: Vec<Arc<Value>>,
    rv: u64,
}

struct Inner {
    rv: u64,
    registry: Registry,
    kinds: HashMap<ResKey, KindStore>,
    snapshots: HashMap<String, Snapshot>,
    snapshot_order: VecDeque<String>,
}

impl Inner {
    fn kind(&mut self, key: &ResKey) -> &mut KindStore {
        self.kinds.entry(key.clone()).or_insert_with(KindStore::new)
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// Records and broadcasts an event.
    fn emit(&mut self, all: &broadcast::Sender<Arc<Event>>, event: Event) {
        let event = Arc::new(event);
        let k = self.kind(&event.key);
        if k.log.len() >= LOG_CAPACITY
            && let Some(dropped) = k.log.pop_front()
        {
            k.horizon = dropped.rv;
        }
        k.log.push_back(event.clone());
        // No receivers is normal (nobody watches this kind).
        let _ = k.tx.send(event.clone());
        let _ = all.send(event);
    }

    /// Stores a change under the next resourceVersion (or removes the object, for a
    /// deletion) and tells the watchers.
    fn commit(
        &mut self,
        all: &broadcast::Sender<Arc<Event>>,
        key: &ResKey,
        id: (String, String),
        mut new: Value,
        old: Arc<Value>,
        type_: EventType,
    ) -> Arc<Value> {
        let rv = self.next_rv();
        new["metadata"]["resourceVersion"] = Value::from(rv.to_string());
        let new = Arc::new(new);
        let objects = &mut self.kind(key).objects;
        if type_ == EventType::Deleted {
            objects.remove(&id);
        } else {
            objects.insert(id, new.clone());
        }
        self.emit(
            all,
            Event {
                key: key.clone(),
                type_,
                rv,
                object: new.clone(),
                old: Some(old),
            },
        );
        new
    }

    fn namespace_usable(&self, ns: &str) -> Result<(), ApiError> {
        let nss = self.kinds.get(&ResKey::new("", "namespaces"));
        match nss.and_then(|k| k.objects.get(&(String::new(), ns.to_owned()))) {
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
                Err(ApiError::forbidden(format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                )))
            }
            Some(_) => Ok(()),
        }
    }
}

/// The cluster's state.
pub struct Store {
    inner: Mutex<Inner>,
    all: broadcast::Sender<Arc<Event>>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new(Registry::builtin())
    }
}

impl Store {
    pub fn new(registry: Registry) -> Self {
        Self {
            inner: Mutex::new(Inner {
                rv: 1,
                registry,
                kinds: HashMap::new(),
                snapshots: HashMap::new(),
                snapshot_order: VecDeque::new(),
            }),
            all: broadcast::channel(CHANNEL_CAPACITY).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock is a bug in the store itself; keep serving rather
        // than poisoning every later request.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn registry(&self) -> Registry {
        self.lock().registry.clone()
    }

    pub fn with_registry<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        f(&mut self.lock().registry)
    }

    /// Every change to every kind, for the in-process controllers.
    pub fn subscribe_all(&self) -> broadcast::Receiver<Arc<Event>> {
        self.all.subscribe()
    }

    pub fn get(&self, key: &ResKey, ns: &str, name: &str) -> Option<Arc<Value>> {
        let inner = self.lock();
        inner
            .kinds
            .get(key)?
            .objects
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Objects of a kind (in one namespace, or all), in (namespace, name) order, with the
    /// current resourceVersion.
    pub fn list(&self, key: &ResKey, ns: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let inner = self.lock();
        let items = match inner.kinds.get(key) {
            None => Vec::new(),
            Some(k) => match ns {
                Some(ns) => k
                    .objects
                    .range((ns.to_owned(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
                None => k.objects.values().cloned().collect(),
            },
        };
        (items, inner.rv)
    }

    /// Keeps the rest of a paginated list; returns the `continue` token.
    pub fn save_snapshot(&self, items: Vec<Arc<Value>>, rv: u64) -> String {
        let mut inner = self.lock();
        let token = format!("{rv}-{:016x}", rand::random::<u64>());
        inner
            .snapshots
            .insert(token.clone(), Snapshot { items, rv });
        inner.snapshot_order.push_back(token.clone());
        while inner.snapshot_order.len() > SNAPSHOTS {
            if let Some(old) = inner.snapshot_order.pop_front() {
                inner.snapshots.remove(&old);
            }
        }
        token
    }

    /// The rest of a paginated list, or None when the token is unknown or expired.
    pub fn take_snapshot(&self, token: &str) -> Option<(Vec<Arc<Value>>, u64)> {
        let mut inner = self.lock();
        let s = inner.snapshots.remove(token)?;
        Some((s.items, s.rv))
    }

    /// Creates an object. Fills in what the server owns (uid, creationTimestamp,
    /// resourceVersion, generation, a name from generateName) and drops what a client may not
    /// set (deletionTimestamp).
    pub fn create(&self, key: &ResKey, obj: Value, dry_run: bool) -> Result<Arc<Value>, ApiError> {
        self.create_with(key, obj, dry_run, |_| Ok(()))
    }

    /// [`Store::create`] with a last step that sees the server's fields (the uid a Job's
    /// selector is made from) and may refuse the object.
    pub fn create_with(
        &self,
        key: &ResKey,
        mut obj: Value,
        dry_run: bool,
        prepare: impl FnOnce(&mut Value) -> Result<(), ApiError>,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        let Some(rt) = inner.registry.storage(key) else {
            return Err(ApiError::not_found(&key.group, &key.plural, ""));
        };
        let meta = metadata_mut(&mut obj)?;
        let ns = if rt.namespaced {
            let ns = meta
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_owned();
            meta.insert("namespace".into(), Value::from(ns.clone()));
            ns
        } else {
            meta.remove("namespace");
            String::new()
        };
        if rt.namespaced {
            inner.namespace_usable(&ns)?;
        }
        let meta = metadata_mut(&mut obj)?;
        let name = match meta.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => match meta.get("generateName").and_then(Value::as_str) {
                Some(prefix) if !prefix.is_empty() => format!("{prefix}{}", random_suffix()),
                _ => {
                    return Err(ApiError::invalid(
                        &rt.group,
                        &rt.kind,
                        "",
                        vec![(
                            "metadata.name".into(),
                            "FieldValueRequired".into(),
                            "metadata.name: Required value: name or generateName is required"
                                .into(),
                        )],
                    ));
                }
            },
        };
        if inner
            .kind(key)
            .objects
            .contains_key(&(ns.clone(), name.clone()))
        {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        let meta = metadata_mut(&mut obj)?;
        meta.insert("name".into(), Value::from(name.clone()));
        meta.insert("uid".into(), Value::from(new_uid()));
        meta.insert("creationTimestamp".into(), Value::from(time::now()));
        meta.remove("resourceVersion");
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        meta.remove("selfLink");
        if rt.generation != GenerationRule::None {
            meta.insert("generation".into(), Value::from(1));
        } else {
            meta.remove("generation");
        }
        prepare(&mut obj)?;
        let rv = if dry_run { inner.rv } else { inner.next_rv() };
        obj["metadata"]["resourceVersion"] = Value::from(rv.to_string());
        normalize_metadata(&mut obj);
        set_type(&mut obj, &rt);
        let obj = Arc::new(obj);
        if !dry_run {
            inner.kind(key).objects.insert((ns, name), obj.clone());
            inner.emit(
                &self.all,
                Event {
                    key: key.clone(),
                    type_: EventType::Added,
                    rv,
                    object: obj.clone(),
                    old: None,
                },
            );
        }
        Ok(obj)
    }

    /// Read-modify-write under the lock. `f` gets the stored object and returns the
    /// candidate. A `metadata.resourceVersion` in the candidate is a precondition. The server's
    /// fields are kept, generation moves by the kind's rule, and a candidate equal to the
    /// stored object (managedFields timestamps aside) is a no-op.
    pub fn modify(
        &self,
        key: &ResKey,
        ns: &str,
        name: &str,
        dry_run: bool,
        f: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Written, ApiError> {
        let mut inner = self.lock();
        let Some(rt) = inner.registry.storage(key) else {
            return Err(ApiError::not_found(&key.group, &key.plural, name));
        };
        let id = (ns.to_owned(), name.to_owned());
        let Some(old) = inner.kind(key).objects.get(&id).cloned() else {
            return Err(ApiError::not_found(&rt.group, &rt.plural, name));
        };
        let mut new = f(&old)?;
        let old_rv = old["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default();
        match new
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
        {
            Some(rv) if !rv.is_empty() && rv != old_rv => {
                return Err(ApiError::stale(&rt.group, &rt.plural, name));
            }
            _ => {}
        }
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            let before = string_set(old.pointer("/metadata/finalizers"));
            let added: Vec<String> = string_set(new.pointer("/metadata/finalizers"))
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    &rt.group,
                    &rt.kind,
                    name,
                    vec![(
                        "metadata.finalizers".into(),
                        "FieldValueForbidden".into(),
                        format!(
                            "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                        ),
                    )],
                ));
            }
        }
        // What the server owns is not the client's to change.
        {
            let meta = metadata_mut(&mut new)?;
            for field in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old["metadata"].get(field) {
                    Some(v) => meta.insert(field.into(), v.clone()),
                    None => meta.remove(field),
                };
            }
            meta.insert("resourceVersion".into(), Value::from(old_rv));
        }
        if !rt.namespaced
            && let Some(m) = new["metadata"].as_object_mut()
        {
            m.remove("namespace");
        }
        normalize_metadata(&mut new);
        set_type(&mut new, &rt);
        if generation_moves(rt.generation, &old, &new) {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            new["metadata"]["generation"] = Value::from(g);
        }
        if equal_ignoring_managed_times(&old, &new) {
            return Ok(Written {
                object: old,
                changed: false,
                deleted: false,
            });
        }
        let finalized = new.pointer("/metadata/deletionTimestamp").is_some()
            && string_set(new.pointer("/metadata/finalizers")).is_empty()
            && !graceful_pending(key, &new);
        if dry_run {
            return Ok(Written {
                object: Arc::new(new),
                changed: true,
                deleted: finalized,
            });
        }
        let type_ = if finalized {
            EventType::Deleted
        } else {
            EventType::Modified
        };
        let new = inner.commit(&self.all, key, id, new, old, type_);
        Ok(Written {
            object: new,
            changed: true,
            deleted: finalized,
        })
    }

    /// Deletes an object the way the registry store does: preconditions, finalizers for
    /// foreground and orphan propagation, graceful deletion of pods, namespaces that
    /// terminate before they go.
    pub fn delete(
        &self,
        key: &ResKey,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        let mut inner = self.lock();
        let Some(rt) = inner.registry.storage(key) else {
            return Err(ApiError::not_found(&key.group, &key.plural, name));
        };
        let id = (ns.to_owned(), name.to_owned());
        let Some(old) = inner.kind(key).objects.get(&id).cloned() else {
            return Err(ApiError::not_found(&rt.group, &rt.plural, name));
        };
        let meta = &old["metadata"];
        if let Some(uid) = &opts.precondition_uid
            && meta["uid"].as_str() != Some(uid)
        {
            return Err(ApiError::conflict(format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta["uid"].as_str().unwrap_or_default()
            )));
        }
        if let Some(rv) = &opts.precondition_rv
            && meta["resourceVersion"].as_str() != Some(rv)
        {
            return Err(ApiError::conflict(format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta["resourceVersion"].as_str().unwrap_or_default()
            )));
        }
        let mut new = (*old).clone();
        let mut finalizers = string_set(meta.get("finalizers"));
        let propagation =
            opts.propagation
                .unwrap_or(if key.group == "batch" && key.plural == "jobs" {
                    Propagation::Orphan
                } else {
                    Propagation::Background
                });
        let gc_finalizer = match propagation {
            Propagation::Foreground => Some("foregroundDeletion"),
            Propagation::Orphan => Some("orphan"),
            Propagation::Background => None,
        };
        let has_dependents = gc_finalizer.is_some()
            && inner_has_dependents(&inner, meta["uid"].as_str().unwrap_or_default());
        if let Some(f) = gc_finalizer {
            // The real GC also removes these at once when nothing depends on the object.
            if has_dependents && !finalizers.iter().any(|x| x == f) {
                finalizers.push(f.to_owned());
            }
        }
        let is_namespace = key.group.is_empty() && key.plural == "namespaces";
        let grace = if key.group.is_empty() && key.plural == "pods" && pod_running(&old) {
            let g = opts
                .grace_period_seconds
                .or_else(|| {
                    old.pointer("/spec/terminationGracePeriodSeconds")
                        .and_then(Value::as_i64)
                })
                .unwrap_or(30);
            // A second delete may shorten the grace period, never lengthen it.
            let current = meta
                .get("deletionGracePeriodSeconds")
                .and_then(Value::as_i64);
            Some(current.map_or(g, |c| c.min(g)))
        } else {
            None
        };
        if finalizers.is_empty() && !is_namespace && grace.is_none_or(|g| g == 0) {
            if opts.dry_run {
                return Ok(Deleted::Gone(old));
            }
            let gone = inner.commit(&self.all, key, id, new, old, EventType::Deleted);
            return Ok(Deleted::Gone(gone));
        }
        let m = metadata_mut(&mut new)?;
        let first = !m.contains_key("deletionTimestamp");
        if first {
            let when = match grace {
                Some(g) => time::format_seconds(
                    jiff::Timestamp::now()
                        .checked_add(jiff::SignedDuration::from_secs(g))
                        .unwrap_or_else(|_| jiff::Timestamp::now()),
                ),
                None => time::now(),
            };
            m.insert("deletionTimestamp".into(), Value::from(when));
            if let Some(g) = m.get("generation").and_then(Value::as_i64)
                && g > 0
            {
                m.insert("generation".into(), Value::from(g + 1));
            }
        }
        m.insert(
            "deletionGracePeriodSeconds".into(),
            Value::from(grace.unwrap_or(0)),
        );
        if !finalizers.is_empty() {
            m.insert("finalizers".into(), json!(finalizers));
        }
        if is_namespace {
            new["status"]["phase"] = Value::from("Terminating");
        }
        if equal_ignoring_managed_times(&old, &new) || opts.dry_run {
            return Ok(Deleted::Pending(if opts.dry_run {
                Arc::new(new)
            } else {
                old
            }));
        }
        let marked = inner.commit(&self.all, key, id, new, old, EventType::Modified);
        Ok(Deleted::Pending(marked))
    }

    /// Removes an object whatever holds it: the end of a pod's graceful deletion, a
    /// namespace the namespace controller emptied, a CRD's objects when the CRD goes.
    pub fn remove(&self, key: &ResKey, ns: &str, name: &str) -> Option<Arc<Value>> {
        let mut inner = self.lock();
        let id = (ns.to_owned(), name.to_owned());
        let old = inner.kind(key).objects.get(&id)?.clone();
        let last = (*old).clone();
        Some(inner.commit(&self.all, key, id, last, old, EventType::Deleted))
    }

    /// Subscribes to a kind's changes from a starting point. Fails when the start is older
    /// than the kept history (the caller answers with an in-stream 410).
    pub fn watch(&self, key: &ResKey, start: WatchStart) -> Result<Subscription, TooOld> {
        let mut inner = self.lock();
        let rv = inner.rv;
        let k = inner.kind(key);
        let live = k.tx.subscribe();
        let backlog = match start {
            WatchStart::Current => k
                .objects
                .values()
                .map(|o| {
                    Arc::new(Event {
                        key: key.clone(),
                        type_: EventType::Added,
                        rv: o["metadata"]["resourceVersion"]
                            .as_str()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0),
                        object: o.clone(),
                        old: None,
                    })
                })
                .collect(),
            WatchStart::After(from) => {
                if from < k.horizon {
                    return Err(TooOld {
                        requested: from,
                        oldest: k.horizon,
                    });
                }
                k.log.iter().filter(|e| e.rv > from).cloned().collect()
            }
        };
        Ok(Subscription { backlog, live, rv })
    }

    /// Forgets the watch history of every kind: a watch from any resourceVersion handed out
    /// so far gets 410 Gone (a fault for tests; etcd compaction does it for real, short of
    /// the newest revision).
    pub fn compact(&self) {
        let mut inner = self.lock();
        let rv = inner.rv + 1;
        for k in inner.kinds.values_mut() {
            k.log.clear();
            k.horizon = rv;
        }
        inner.snapshots.clear();
        inner.snapshot_order.clear();
    }

    /// Every stored object whose ownerReferences name `uid`, as (kind key, namespace, name).
    pub fn dependents(&self, uid: &str) -> Vec<(ResKey, Arc<Value>)> {
        let inner = self.lock();
        let mut out = Vec::new();
        for (key, k) in &inner.kinds {
            for o in k.objects.values() {
                if owned_by(o, uid) {
                    out.push((key.clone(), o.clone()));
                }
            }
        }
        out
    }

    /// Whether any object of any kind has this uid.
    pub fn uid_exists(&self, uid: &str) -> bool {
        let inner = self.lock();
        inner.kinds.values().any(|k| {
            k.objects
                .values()
                .any(|o| o["metadata"]["uid"].as_str() == Some(uid))
        })
    }

    /// Every kind that has objects (for the garbage and namespace controllers).
    pub fn kinds(&self) -> Vec<ResKey> {
        let inner = self.lock();
        inner
            .kinds
            .iter()
            .filter(|(_, k)| !k.objects.is_empty())
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// How many watches of a kind are open (tests wait for a client to be watching).
    pub fn watchers(&self, key: &ResKey) -> usize {
        self.lock()
            .kinds
            .get(key)
            .map_or(0, |k| k.tx.receiver_count())
    }

    /// Memory-free count of objects (tests and the bench).
    pub fn len(&self, key: &ResKey) -> usize {
        self.lock().kinds.get(key).map_or(0, |k| k.objects.len())
    }

    pub fn is_empty(&self, key: &ResKey) -> bool {
        self.len(key) == 0
    }

    /// The storage type of a kind.
    pub fn storage_type(&self, key: &ResKey) -> Option<Arc<ResourceType>> {
        self.lock().registry.storage(key)
    }
}

fn inner_has_dependents(inner: &Inner, uid: &str) -> bool {
    inner
        .kinds
        .values()
        .any(|k| k.objects.values().any(|o| owned_by(o, uid)))
}

/// Whether `o` lists `uid` among its owners.
pub fn owned_by(o: &Value, uid: &str) -> bool {
    o.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| refs.iter().any(|r| r["uid"].as_str() == Some(uid)))
}

/// A pod the kubelet has started and not finished: its deletion is graceful.
fn pod_running(pod: &Value) -> bool {
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending");
    pod.pointer("/spec/nodeName").is_some() && phase != "Succeeded" && phase != "Failed"
}

/// A pod marked for graceful deletion stays until the kubelet removes it.
fn graceful_pending(key: &ResKey, obj: &Value) -> bool {
    key.group.is_empty()
        && key.plural == "pods"
        && obj
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            > 0
}

fn metadata_mut(obj: &mut Value) -> Result<&mut Map<String, Value>, ApiError> {
    let Some(o) = obj.as_object_mut() else {
        return Err(ApiError::bad_request("the object must be a JSON object"));
    };
    let meta = o.entry("metadata").or_insert_with(|| json!({}));
    if meta.is_null() {
        *meta = json!({});
    }
    meta.as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be an object"))
}

/// Empty lists and maps in metadata are never stored (the real server round-trips metadata
/// through a typed ObjectMeta with omitempty); a JSON patch `test` against
/// `/metadata/finalizers` with value null relies on that.
pub fn normalize_metadata(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|_, v| match v {
            Value::Null => false,
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            Value::String(s) => !s.is_empty(),
            _ => true,
        });
    }
}

fn set_type(obj: &mut Value, rt: &ResourceType) {
    if let Some(o) = obj.as_object_mut() {
        let api_version = if rt.group.is_empty() {
            rt.storage_version.clone()
        } else {
            format!("{}/{}", rt.group, rt.storage_version)
        };
        o.insert("apiVersion".into(), Value::from(api_version));
        o.insert("kind".into(), Value::from(rt.kind.clone()));
    }
}

fn generation_moves(rule: GenerationRule, old: &Value, new: &Value) -> bool {
    let body_changed = |skip_status: bool| {
        let keys = |v: &Value| -> Vec<String> {
            v.as_object()
                .map(|o| {
                    o.keys()
                        .filter(|k| {
                            !(matches!(k.as_str(), "metadata" | "apiVersion" | "kind")
                                || skip_status && k.as_str() == "status")
                        })
                        .cloned()
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut all = keys(old);
        all.extend(keys(new));
        all.iter().any(|k| old.get(k) != new.get(k))
    };
    match rule {
        GenerationRule::None => false,
        GenerationRule::Spec => body_changed(true),
        GenerationRule::SpecAndAnnotations => {
            body_changed(true)
                || old.pointer("/metadata/annotations") != new.pointer("/metadata/annotations")
        }
        GenerationRule::AllButMetadata => body_changed(false),
    }
}

fn string_set(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn new_uid() -> String {
    let b: [u8; 16] = rand::random();
    let mut b = b;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Five characters from the alphabet apimachinery's `rand.String` uses.
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with_ns() -> Store {
        let s = Store::default();
        s.create(
            &ResKey::new("", "namespaces"),
            json!({"metadata": {"name": "default"}}),
            false,
        )
        .unwrap();
        s
    }

    fn cm(name: &str, data: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": {"k": data}})
    }

    #[test]
    fn no_op_write_keeps_resource_version_and_emits_nothing() {
        let s = store_with_ns();
        let key = ResKey::new("", "configmaps");
        let created = s.create(&key, cm("a", "1"), false).unwrap();
        let mut rx = s.subscribe_all();
        let w = s
            .modify(&key, "default", "a", false, |o| Ok(o.clone()))
            .unwrap();
        assert!(!w.changed);
        assert_eq!(
            w.object["metadata"]["resourceVersion"],
            created["metadata"]["resourceVersion"]
        );
        assert!(rx.try_recv().is_err(), "a no-op write must emit no event");
        let w = s
            .modify(&key, "default", "a", false, |o| {
                let mut o = o.clone();
                o["data"]["k"] = json!("2");
                Ok(o)
            })
            .unwrap();
        assert!(w.changed);
        assert_eq!(rx.try_recv().unwrap().type_, EventType::Modified);
    }

    #[test]
    fn stale_resource_version_is_a_conflict() {
        let s = store_with_ns();
        let key = ResKey::new("", "configmaps");
        s.create(&key, cm("a", "1"), false).unwrap();
        let err = s
            .modify(&key, "default", "a", false, |o| {
                let mut o = o.clone();
                o["metadata"]["resourceVersion"] = json!("1");
                o["data"]["k"] = json!("x");
                Ok(o)
            })
            .unwrap_err();
        assert_eq!((err.code, err.reason), (409, "Conflict"));
    }

    #[test]
    fn finalizers_hold_deletion_until_removed() {
        let s = store_with_ns();
        let key = ResKey::new("", "configmaps");
        let mut o = cm("a", "1");
        o["metadata"]["finalizers"] = json!(["x/y"]);
        s.create(&key, o, false).unwrap();
        let d = s
            .delete(&key, "default", "a", &DeleteOptions::default())
            .unwrap();
        let Deleted::Pending(p) = d else {
            panic!("expected pending")
        };
        assert!(p["metadata"]["deletionTimestamp"].is_string());
        // Adding a finalizer now is refused.
        let err = s
            .modify(&key, "default", "a", false, |o| {
                let mut o = o.clone();
                o["metadata"]["finalizers"] = json!(["x/y", "new"]);
                Ok(o)
            })
            .unwrap_err();
        assert_eq!(err.code, 422);
        let w = s
            .modify(&key, "default", "a", false, |o| {
                let mut o = o.clone();
                o["metadata"]["finalizers"] = json!([]);
                Ok(o)
            })
            .unwrap();
        assert!(w.deleted);
        assert!(s.get(&key, "default", "a").is_none());
    }

    #[test]
    fn generation_counts_spec_changes_only() {
        let s = store_with_ns();
        let key = ResKey::new("apps", "deployments");
        let d = json!({"metadata": {"name": "d", "namespace": "default"}, "spec": {"replicas": 1}});
        let c = s.create(&key, d, false).unwrap();
        assert_eq!(c["metadata"]["generation"], 1);
        let w = s
            .modify(&key, "default", "d", false, |o| {
                let mut o = o.clone();
                o["status"] = json!({"replicas": 1});
                o["metadata"]["labels"] = json!({"a": "b"});
                Ok(o)
            })
            .unwrap();
        assert_eq!(w.object["metadata"]["generation"], 1);
        let w = s
            .modify(&key, "default", "d", false, |o| {
                let mut o = o.clone();
                o["spec"]["replicas"] = json!(2);
                Ok(o)
            })
            .unwrap();
        assert_eq!(w.object["metadata"]["generation"], 2);
    }

    #[test]
    fn watch_from_compacted_history_is_too_old() {
        let s = store_with_ns();
        let key = ResKey::new("", "configmaps");
        s.create(&key, cm("a", "1"), false).unwrap();
        let rv = s.current_rv();
        s.create(&key, cm("b", "1"), false).unwrap();
        let sub = s.watch(&key, WatchStart::After(rv)).unwrap();
        assert_eq!(sub.backlog.len(), 1);
        s.compact();
        assert!(s.watch(&key, WatchStart::After(rv)).is_err());
    }

    #[test]
    fn namespace_must_exist() {
        let s = Store::default();
        let err = s
            .create(&ResKey::new("", "configmaps"), cm("a", "1"), false)
            .unwrap_err();
        assert_eq!(err.code, 404);
    }
}
