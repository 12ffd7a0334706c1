//! The kube-controller-manager of the test cluster: Job, Deployment, StatefulSet,
//! EndpointSlice, garbage collector, Namespace and ServiceAccount controllers.
//!
//! Every controller is the same loop ([`run`]): it subscribes to every store change, maps each
//! change to the keys of the objects it manages (a dirty set), reconciles each key against the
//! store's current state, and resyncs everything when the broadcast lags. Reconciles read the
//! store directly (there is no informer cache to go stale), so they need no "expectations":
//! each one is idempotent, and a write that changes nothing is dropped by the store, so a
//! settled cluster makes no writes. Where time matters (deadlines, TTLs, `minReadySeconds`) a
//! reconcile asks to be run again after a delay.

mod deployment;
mod endpointslice;
mod gc;
mod job;
mod namespace;
mod serviceaccount;
mod statefulset;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::ApiError;
use crate::resources::ResKey;
use crate::store::{DeleteOptions, Deleted, Event, Propagation, Store};

/// The running controllers. Dropping the handle stops them, as does [`Controllers::shutdown`].
pub struct Controllers {
    tasks: Vec<JoinHandle<()>>,
}

/// Runs every controller on the current tokio runtime until the returned handle is dropped or
/// shut down.
///
/// # Panics
/// Outside a tokio runtime (as `tokio::spawn` does).
#[must_use = "dropping the handle stops the controllers"]
pub fn start(store: Arc<Store>) -> Controllers {
    let tasks = vec![
        tokio::spawn(run(store.clone(), job::JobController)),
        tokio::spawn(run(store.clone(), deployment::DeploymentController)),
        tokio::spawn(run(store.clone(), statefulset::StatefulSetController)),
        tokio::spawn(run(store.clone(), endpointslice::EndpointSliceController)),
        tokio::spawn(run(store.clone(), gc::GarbageCollector)),
        tokio::spawn(run(store.clone(), namespace::NamespaceController)),
        tokio::spawn(run(store, serviceaccount::ServiceAccountController)),
    ];
    Controllers { tasks }
}

impl Controllers {
    /// Stops every controller (idempotent). A reconcile in progress finishes its current
    /// store call; nothing is left half-written because every write is a single store call.
    pub fn shutdown(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// (namespace, name): the key of a namespaced object (namespace "" for cluster-scoped ones).
pub(crate) type NsName = (String, String);

/// One controller: which keys a change touches, every key (for a resync), and the reconcile.
pub(crate) trait Reconciler: Send + 'static {
    /// The controller's name, for logs.
    const NAME: &'static str;
    /// What the dirty set holds.
    type Key: Ord + Clone + Debug + Send;

    /// Appends the keys a store change makes dirty.
    fn keys_for(&mut self, store: &Store, ev: &Event, out: &mut Vec<Self::Key>);

    /// Appends every key (start-up and after a lagged broadcast).
    fn resync(&mut self, store: &Store, out: &mut Vec<Self::Key>);

    /// Brings one key's objects to the desired state. `Ok(Some(d))` asks to run again after
    /// `d` (a deadline or a minimum-ready wait); an error is retried with backoff.
    fn reconcile(&mut self, store: &Store, key: &Self::Key) -> Result<Option<Duration>, ApiError>;
}

/// First retry delay after a failed reconcile; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The loop every controller runs.
async fn run<R: Reconciler>(store: Arc<Store>, mut r: R) {
    let mut rx = store.subscribe_all();
    let mut dirty: BTreeSet<R::Key> = BTreeSet::new();
    let mut timers: BTreeMap<R::Key, Instant> = BTreeMap::new();
    let mut failures: BTreeMap<R::Key, u32> = BTreeMap::new();
    let mut buf = Vec::new();
    r.resync(&store, &mut buf);
    dirty.extend(buf.drain(..));
    loop {
        // Take whatever changes are queued before reconciling, so a burst is one pass.
        loop {
            match rx.try_recv() {
                Ok(ev) => r.keys_for(&store, &ev, &mut buf),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Lagged(_)) => r.resync(&store, &mut buf),
                Err(TryRecvError::Closed) => return,
            }
        }
        dirty.extend(buf.drain(..));
        let now = Instant::now();
        timers.retain(|k, due| {
            if *due <= now {
                dirty.insert(k.clone());
                false
            } else {
                true
            }
        });
        if let Some(key) = dirty.pop_first() {
            let (again, failed) = match r.reconcile(&store, &key) {
                Ok(again) => {
                    failures.remove(&key);
                    (again, false)
                }
                Err(e) => {
                    let n = failures.entry(key.clone()).or_insert(0);
                    *n = n.saturating_add(1);
                    let delay = MIN_BACKOFF
                        .saturating_mul(1 << (*n - 1).min(10))
                        .min(MAX_BACKOFF);
                    tracing::debug!(controller = R::NAME, ?key, error = %e, ?delay, "reconcile failed");
                    (Some(delay), true)
                }
            };
            if let Some(d) = again {
                let due = Instant::now() + d;
                timers
                    .entry(key)
                    .and_modify(|t| {
                        // A failure's backoff replaces an earlier timer; otherwise the earliest wins.
                        if failed || due < *t {
                            *t = due;
                        }
                    })
                    .or_insert(due);
            }
            // Reconciles are synchronous store calls: let the other tasks in between.
            tokio::task::yield_now().await;
            continue;
        }
        let next = timers.values().min().copied();
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => r.keys_for(&store, &ev, &mut buf),
                Err(RecvError::Lagged(_)) => r.resync(&store, &mut buf),
                Err(RecvError::Closed) => return,
            },
            () = sleep_until(next) => {}
        }
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

// ---- keys and object accessors -------------------------------------------------------------

/// The storage key of v1 Pods.
pub(crate) fn pods_key() -> ResKey {
    ResKey::new("", "pods")
}

/// Whether `key` is group `group`, resource `plural`.
pub(crate) fn is_kind(key: &ResKey, group: &str, plural: &str) -> bool {
    key.group == group && key.plural == plural
}

/// The string at a JSON pointer, or "".
pub(crate) fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The integer at a JSON pointer.
pub(crate) fn i64_at(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

/// `metadata.name`.
pub(crate) fn name(v: &Value) -> &str {
    str_at(v, "/metadata/name")
}

/// `metadata.namespace` ("" for cluster-scoped objects).
pub(crate) fn namespace(v: &Value) -> &str {
    str_at(v, "/metadata/namespace")
}

/// `metadata.uid`.
pub(crate) fn uid(v: &Value) -> &str {
    str_at(v, "/metadata/uid")
}

/// The object's (namespace, name).
pub(crate) fn ns_name(v: &Value) -> NsName {
    (namespace(v).to_owned(), name(v).to_owned())
}

/// `metadata.labels`, in the form label selectors match.
pub(crate) fn labels(v: &Value) -> Option<&Map<String, Value>> {
    v.pointer("/metadata/labels").and_then(Value::as_object)
}

/// `metadata.deletionTimestamp` is set.
pub(crate) fn is_deleting(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp").is_some()
}

/// `metadata.finalizers` holds `f`.
pub(crate) fn has_finalizer(v: &Value, f: &str) -> bool {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(f)))
}

/// The ownerReference marked `controller: true`, if any.
pub(crate) fn controller_ref(v: &Value) -> Option<&Value> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
}

/// Whether `v`'s controller is the object with this uid.
pub(crate) fn controlled_by(v: &Value, owner_uid: &str) -> bool {
    controller_ref(v).is_some_and(|r| r["uid"].as_str() == Some(owner_uid))
}

/// The keys of the owners of kind `kind` (group `group`) that control the object before and
/// after a change: how a pod change finds its Job, Deployment or StatefulSet.
pub(crate) fn controller_keys(ev: &Event, group: &str, kind: &str, out: &mut Vec<NsName>) {
    for obj in std::iter::once(&ev.object).chain(ev.old.iter()) {
        if let Some(r) = controller_ref(obj) {
            let api_version = r["apiVersion"].as_str().unwrap_or_default();
            let api_group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            if r["kind"].as_str() == Some(kind)
                && api_group == group
                && let Some(n) = r["name"].as_str()
            {
                out.push((namespace(obj).to_owned(), n.to_owned()));
            }
        }
    }
}

/// The ownerReference a controller puts on what it creates.
pub(crate) fn owner_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": name(owner),
        "uid": uid(owner),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The pods of a namespace that `owner_uid` controls.
pub(crate) fn owned_pods(store: &Store, ns: &str, owner_uid: &str) -> Vec<Arc<Value>> {
    store
        .list(&pods_key(), Some(ns))
        .0
        .into_iter()
        .filter(|p| controlled_by(p, owner_uid))
        .collect()
}

// ---- pods ----------------------------------------------------------------------------------

/// `status.phase`, Pending when unset.
pub(crate) fn pod_phase(p: &Value) -> &str {
    match str_at(p, "/status/phase") {
        "" => "Pending",
        s => s,
    }
}

/// Succeeded or Failed: the pod will not run again.
pub(crate) fn pod_terminal(p: &Value) -> bool {
    matches!(pod_phase(p), "Succeeded" | "Failed")
}

/// Not terminal and not being deleted: what controllers count as a live replica.
pub(crate) fn pod_active(p: &Value) -> bool {
    !pod_terminal(p) && !is_deleting(p)
}

fn pod_ready_condition(p: &Value) -> Option<&Value> {
    p.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// The pod's `Ready` condition is True.
pub(crate) fn pod_ready(p: &Value) -> bool {
    pod_ready_condition(p).is_some_and(|c| c["status"] == "True")
}

/// How long until a ready pod has been ready for `min_ready` seconds: `Some(ZERO)` when it is
/// available now, `None` when it is not ready.
pub(crate) fn pod_available_in(p: &Value, min_ready: i64) -> Option<Duration> {
    if !pod_ready(p) {
        return None;
    }
    if min_ready <= 0 {
        return Some(Duration::ZERO);
    }
    let since = pod_ready_condition(p)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .and_then(parse_time);
    let Some(since) = since else {
        // No transition time: count it as ready since forever, like a nil time in Go.
        return Some(Duration::ZERO);
    };
    let due = since.as_millisecond() + min_ready.saturating_mul(1000);
    let left = due - jiff::Timestamp::now().as_millisecond();
    Some(Duration::from_millis(
        u64::try_from(left.max(0)).unwrap_or(0),
    ))
}

/// Deletes an object with background propagation; one already gone is fine.
pub(crate) fn delete_background(
    store: &Store,
    key: &ResKey,
    ns: &str,
    name: &str,
) -> Result<(), ApiError> {
    delete_with(store, key, ns, name, Propagation::Background, None)
}

/// Deletes an object with a propagation policy and a uid precondition; one already gone is
/// fine.
pub(crate) fn delete_with(
    store: &Store,
    key: &ResKey,
    ns: &str,
    name: &str,
    propagation: Propagation,
    precondition_uid: Option<&str>,
) -> Result<(), ApiError> {
    let opts = DeleteOptions {
        propagation: Some(propagation),
        precondition_uid: precondition_uid.map(str::to_owned),
        ..DeleteOptions::default()
    };
    match store.delete(key, ns, name, &opts) {
        Ok(Deleted::Gone(_) | Deleted::Pending(_)) => Ok(()),
        Err(e) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Orders pods for deletion when scaling down, as `controller.ActivePods` ranks them: not
/// ready before ready, ready for less time before longer, newer before older (name breaks
/// ties, so the order is deterministic).
pub(crate) fn scale_down_order(pods: &mut [Arc<Value>]) {
    pods.sort_by(|a, b| {
        let ready_since = |p: &Value| {
            pod_ready_condition(p)
                .and_then(|c| c["lastTransitionTime"].as_str())
                .unwrap_or_default()
                .to_owned()
        };
        pod_ready(a)
            .cmp(&pod_ready(b))
            .then_with(|| ready_since(b).cmp(&ready_since(a)))
            .then_with(|| {
                str_at(b, "/metadata/creationTimestamp")
                    .cmp(str_at(a, "/metadata/creationTimestamp"))
            })
            .then_with(|| name(b).cmp(name(a)))
    });
}

// ---- conditions, times, hashes, ranges -----------------------------------------------------

/// Parses an RFC 3339 timestamp.
pub(crate) fn parse_time(s: &str) -> Option<jiff::Timestamp> {
    s.parse().ok()
}

/// Time left until `start + seconds` (zero when past); `None` when `start` does not parse.
pub(crate) fn until(start: &str, seconds: i64) -> Option<Duration> {
    let start = parse_time(start)?;
    let left = start.as_millisecond() + seconds.saturating_mul(1000)
        - jiff::Timestamp::now().as_millisecond();
    Some(Duration::from_millis(
        u64::try_from(left.max(0)).unwrap_or(0),
    ))
}

/// Sets condition `type_` in `conds`. `lastTransitionTime` moves only when the status changes;
/// the fields in `touched` (`lastProbeTime`, `lastUpdateTime`) move whenever anything does.
/// Returns whether anything changed.
pub(crate) fn set_condition(
    conds: &mut Vec<Value>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    touched: &[&str],
) -> bool {
    let now = crate::time::now();
    if let Some(c) = conds.iter_mut().find(|c| c["type"] == type_) {
        if c["status"] == status && c["reason"] == reason && c["message"] == message {
            return false;
        }
        if c["status"] != status {
            c["lastTransitionTime"] = Value::from(now.clone());
        }
        c["status"] = Value::from(status);
        c["reason"] = Value::from(reason);
        c["message"] = Value::from(message);
        for t in touched {
            c[*t] = Value::from(now.clone());
        }
        return true;
    }
    let mut c = json!({"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": now});
    for t in touched {
        c[*t] = Value::from(now.clone());
    }
    conds.push(c);
    true
}

/// The condition of this type, if it is True.
pub(crate) fn condition_true<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == "True")
}

/// JSON with object keys sorted at every level, whatever map order serde_json was built with.
fn canonical_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(k.as_str()).to_string());
                out.push(':');
                canonical_json(&m[k.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A stable hash of a pod template in the form of `pod-template-hash`: FNV-1a (32 bit) of the
/// canonical JSON, its decimal digits mapped onto apimachinery's safe alphabet (as
/// `rand.SafeEncodeString(fmt.Sprint(hash))` does).
pub(crate) fn template_hash(template: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut s = String::new();
    canonical_json(template, &mut s);
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h.to_string()
        .bytes()
        .map(|b| ALPHABET[usize::from(b) % ALPHABET.len()] as char)
        .collect()
}

/// The compressed range form of a set of indexes: `0-2,5`.
pub(crate) fn format_ranges(set: &BTreeSet<i64>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(first) = iter.next() {
        let mut last = first;
        while iter.peek() == Some(&(last + 1)) {
            last += 1;
            iter.next();
        }
        out.push(if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        });
    }
    out.join(",")
}

/// Parses `0-2,5`; malformed parts are skipped.
pub(crate) fn parse_ranges(s: &str) -> BTreeSet<i64> {
    let mut set = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<i64>(), b.trim().parse::<i64>()) {
                    set.extend(a..=b);
                }
            }
            None => {
                if let Ok(n) = part.parse() {
                    set.insert(n);
                }
            }
        }
    }
    set
}

/// Resolves an int-or-percent (`maxSurge`, `maxUnavailable`) against `total`; percentages
/// round up or down as the caller says. Unset or unparsable gives `default`.
pub(crate) fn int_or_percent(v: Option<&Value>, total: i64, round_up: bool, default: i64) -> i64 {
    match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(default),
        Some(Value::String(s)) => match s
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<i64>().ok())
        {
            Some(p) => {
                let x = p * total;
                if round_up {
                    (x + 99).div_euclid(100)
                } else {
                    x.div_euclid(100)
                }
            }
            None => s.parse().unwrap_or(default),
        },
        _ => default,
    }
}

/// Inserts `key: n` into a status map, or removes the key when `n` is zero (the `omitempty`
/// of the Go types).
pub(crate) fn set_count(status: &mut Map<String, Value>, key: &str, n: i64) {
    if n == 0 {
        status.remove(key);
    } else {
        status.insert(key.to_owned(), Value::from(n));
    }
}

/// Replaces an object's `status` (a no-op write when it is unchanged).
pub(crate) fn write_status(
    store: &Store,
    key: &ResKey,
    obj: &Value,
    status: Map<String, Value>,
) -> Result<(), ApiError> {
    if obj.get("status").and_then(Value::as_object) == Some(&status) {
        return Ok(());
    }
    let uid = uid(obj).to_owned();
    let status = Value::Object(status);
    let r = store.modify(key, namespace(obj), name(obj), false, |cur| {
        if crate::controllers::uid(cur) != uid {
            return Err(ApiError::conflict("the object was replaced"));
        }
        let mut new = cur.clone();
        new["status"] = status;
        Ok(new)
    });
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    //! What the controller tests share: a store with namespaces, condition waits, and a
    //! hand-played kubelet.

    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::{Value, json};
    use tokio::time::Instant;

    use crate::resources::ResKey;
    use crate::store::Store;

    /// A store holding namespace `default`.
    pub fn store() -> Arc<Store> {
        let s = Arc::new(Store::default());
        s.create(
            &ResKey::new("", "namespaces"),
            json!({"metadata": {"name": "default"}}),
            false,
        )
        .expect("create namespace");
        s
    }

    /// Waits until `f` holds, re-checking on every store change and every 50 ms (for
    /// time-based conditions); panics with `what` after `secs` seconds.
    pub async fn wait_for<T>(
        store: &Store,
        secs: u64,
        what: &str,
        mut f: impl FnMut() -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut rx = store.subscribe_all();
        loop {
            if let Some(v) = f() {
                return v;
            }
            let now = Instant::now();
            assert!(now < deadline, "timed out waiting for {what}");
            let step = (deadline - now).min(Duration::from_millis(50));
            // Either a change or the tick: re-check in both cases.
            let _ = tokio::time::timeout(step, rx.recv()).await;
        }
    }

    /// Like [`wait_for`] for a boolean condition.
    pub async fn wait_until(store: &Store, secs: u64, what: &str, mut f: impl FnMut() -> bool) {
        wait_for(store, secs, what, || f().then_some(())).await;
    }

    /// The pods of a namespace.
    pub fn pods(store: &Store) -> Vec<Arc<Value>> {
        store.list(&ResKey::new("", "pods"), Some("default")).0
    }

    /// Plays the kubelet: sets a pod's phase, IP and Ready condition.
    pub fn set_pod(store: &Store, name: &str, phase: &str, ready: bool, ip: &str) {
        store
            .modify(&ResKey::new("", "pods"), "default", name, false, |p| {
                let mut p = p.clone();
                let since = p
                    .pointer("/status/conditions/0/lastTransitionTime")
                    .cloned()
                    .filter(|_| p.pointer("/status/conditions/0/status") == Some(&json!(if ready { "True" } else { "False" })))
                    .unwrap_or_else(|| json!(crate::time::now()));
                p["status"] = json!({
                    "phase": phase,
                    "podIP": ip,
                    "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }, "lastTransitionTime": since}],
                });
                Ok(p)
            })
            .expect("set pod status");
    }

    /// Marks every pod that is not yet Running and Ready as such, with an IP derived from its
    /// name.
    pub fn ready_all(store: &Store) {
        for p in pods(store) {
            let name = p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if !super::pod_ready(&p) && !super::pod_terminal(&p) && !super::is_deleting(&p) {
                let n = name
                    .bytes()
                    .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
                set_pod(
                    store,
                    &name,
                    "Running",
                    true,
                    &format!("10.{}.{}.{}", n % 200, (n >> 8) % 250, (n >> 16) % 250 + 1),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testutil::*;

    #[test]
    fn ranges_compress_and_parse() {
        let set: BTreeSet<i64> = [0, 1, 2, 5, 7, 8].into_iter().collect();
        assert_eq!(format_ranges(&set), "0-2,5,7-8");
        assert_eq!(parse_ranges("0-2,5,7-8"), set);
        assert_eq!(format_ranges(&BTreeSet::new()), "");
    }

    #[test]
    fn template_hash_ignores_key_order() {
        let a = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": [1, 2]}});
        let b: Value =
            serde_json::from_str(r#"{"spec":{"x":[1,2]},"metadata":{"labels":{"b":"2","a":"1"}}}"#)
                .unwrap();
        assert_eq!(template_hash(&a), template_hash(&b));
        assert_ne!(template_hash(&a), template_hash(&json!({})));
    }

    #[test]
    fn int_or_percent_rounds_as_asked() {
        assert_eq!(int_or_percent(Some(&json!("25%")), 2, true, 0), 1);
        assert_eq!(int_or_percent(Some(&json!("25%")), 2, false, 0), 0);
        assert_eq!(int_or_percent(Some(&json!(3)), 2, false, 0), 3);
        assert_eq!(int_or_percent(None, 2, false, 7), 7);
    }

    /// Everything at once, then quiet: the controllers must not write to settled objects.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_cluster_makes_no_writes() {
        let store = store();
        let _c = start(store.clone());
        let create = |g: &str, p: &str, v: Value| {
            store.create(&ResKey::new(g, p), v, false).expect("create");
        };
        create(
            "apps",
            "deployments",
            json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 2, "minReadySeconds": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x", "ports": [{"name": "http", "containerPort": 8080}]}]}}}}),
        );
        create(
            "apps",
            "statefulsets",
            json!({"metadata": {"name": "db", "namespace": "default"}, "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
        );
        create(
            "batch",
            "jobs",
            json!({"metadata": {"name": "once", "namespace": "default"}, "spec": {"completions": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}),
        );
        create(
            "",
            "services",
            json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}}),
        );
        create(
            "",
            "configmaps",
            json!({"metadata": {"name": "orphaned", "namespace": "default", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "no-such-uid"}]}}),
        );
        wait_until(&store, 20, "everything settled", || {
            ready_all(&store);
            for p in pods(&store) {
                if p["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("once-"))
                    && pod_phase(&p) != "Succeeded"
                {
                    set_pod(&store, name(&p), "Succeeded", false, "10.9.9.9");
                }
            }
            let dep = store.get(&ResKey::new("apps", "deployments"), "default", "web");
            let sts = store.get(&ResKey::new("apps", "statefulsets"), "default", "db");
            let job = store.get(&ResKey::new("batch", "jobs"), "default", "once");
            let slices = store
                .list(
                    &ResKey::new("discovery.k8s.io", "endpointslices"),
                    Some("default"),
                )
                .0;
            dep.is_some_and(|d| d["status"]["availableReplicas"] == 2)
                && sts.is_some_and(|s| s["status"]["readyReplicas"] == 2)
                && job.is_some_and(|j| condition_true(&j, "Complete").is_some())
                && slices
                    .first()
                    .is_some_and(|s| s["endpoints"].as_array().is_some_and(|e| e.len() == 2))
                && store
                    .get(&ResKey::new("", "configmaps"), "default", "orphaned")
                    .is_none()
                && store
                    .get(&ResKey::new("", "serviceaccounts"), "default", "default")
                    .is_some()
        })
        .await;
        let rv = store.current_rv();
        let mut rx = store.subscribe_all();
        let quiet = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await;
        assert!(
            quiet.is_err(),
            "a write after settling: {:?}",
            quiet.map(|e| e.map(|e| (e.key.clone(), e.object.clone())))
        );
        assert_eq!(store.current_rv(), rv);
    }
}
