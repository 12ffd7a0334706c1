//! The EndpointSlice controller (discovery.k8s.io/v1).
//!
//! Every Service with a `spec.selector` gets one IPv4 EndpointSlice (named from
//! `generateName: <svc>-`, reused once created) listing the selected pods that have an IP and
//! are not Succeeded or Failed, in pod-name order. The real controller splits slices at 100
//! endpoints and by port mapping; here there is one slice, and its ports are resolved against
//! the first listed pod. Services without a selector are left alone (their slices are written
//! by hand). The legacy `v1/Endpoints` object is not maintained.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{
    NsName, Reconciler, delete_background, is_deleting, is_kind, labels, name, namespace, ns_name,
    owner_ref, pod_ready, pod_terminal, pods_key, str_at, uid,
};
use crate::error::ApiError;
use crate::resources::ResKey;
use crate::selector::LabelSelector;
use crate::store::{Event, Store};

const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

fn services_key() -> ResKey {
    ResKey::new("", "services")
}

fn slices_key() -> ResKey {
    ResKey::new("discovery.k8s.io", "endpointslices")
}

/// The Service's selector, when it has a non-empty one (an ExternalName Service has no
/// endpoints whatever its selector).
fn selector(svc: &Value) -> Option<LabelSelector> {
    if str_at(svc, "/spec/type") == "ExternalName" {
        return None;
    }
    svc.pointer("/spec/selector")
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
        .map(LabelSelector::from_map)
}

/// Keeps each selecting Service's EndpointSlice in line with its pods.
pub(crate) struct EndpointSliceController;

impl Reconciler for EndpointSliceController {
    const NAME: &'static str = "endpointslice";
    type Key = NsName;

    fn keys_for(&mut self, store: &Store, ev: &Event, out: &mut Vec<NsName>) {
        if is_kind(&ev.key, "", "services") {
            out.push(ns_name(&ev.object));
        } else if is_kind(&ev.key, "", "pods") {
            let ns = namespace(&ev.object);
            for svc in store.list(&services_key(), Some(ns)).0 {
                let Some(sel) = selector(&svc) else { continue };
                // The labels before and after: a pod that stops matching leaves the slice.
                if std::iter::once(&ev.object)
                    .chain(ev.old.iter())
                    .any(|p| sel.matches(labels(p)))
                {
                    out.push(ns_name(&svc));
                }
            }
        } else if is_kind(&ev.key, "discovery.k8s.io", "endpointslices") {
            let l = labels(&ev.object);
            let get = |k: &str| l.and_then(|l| l.get(k)).and_then(Value::as_str);
            if let (Some(MANAGED_BY), Some(svc)) = (get(MANAGED_BY_LABEL), get(SERVICE_NAME_LABEL))
            {
                out.push((namespace(&ev.object).to_owned(), svc.to_owned()));
            }
        }
    }

    fn resync(&mut self, store: &Store, out: &mut Vec<NsName>) {
        out.extend(
            store
                .list(&services_key(), None)
                .0
                .iter()
                .map(|s| ns_name(s)),
        );
    }

    fn reconcile(&mut self, store: &Store, key: &NsName) -> Result<Option<Duration>, ApiError> {
        let (ns, svc_name) = (key.0.as_str(), key.1.as_str());
        let mut slices: Vec<Arc<Value>> = store
            .list(&slices_key(), Some(ns))
            .0
            .into_iter()
            .filter(|s| {
                let l = labels(s);
                let get = |k: &str| l.and_then(|l| l.get(k)).and_then(Value::as_str);
                get(MANAGED_BY_LABEL) == Some(MANAGED_BY)
                    && get(SERVICE_NAME_LABEL) == Some(svc_name)
            })
            .collect();
        let svc = store
            .get(&services_key(), ns, svc_name)
            .filter(|s| !is_deleting(s));
        let Some(svc) = svc else {
            // Our slices of a Service that is gone (the garbage collector would get there too).
            for s in &slices {
                delete_background(store, &slices_key(), ns, name(s))?;
            }
            return Ok(None);
        };
        let Some(sel) = selector(&svc) else {
            return Ok(None);
        };
        // Oldest first, so the slice kept is the one clients saw first.
        slices.sort_by(|a, b| {
            str_at(a, "/metadata/creationTimestamp")
                .cmp(str_at(b, "/metadata/creationTimestamp"))
                .then_with(|| name(a).cmp(name(b)))
        });
        let pods: Vec<Arc<Value>> = store
            .list(&pods_key(), Some(ns))
            .0
            .into_iter()
            .filter(|p| sel.matches(labels(p)))
            .filter(|p| !pod_terminal(p) && is_ipv4(str_at(p, "/status/podIP")))
            .collect();
        let publish_not_ready = svc
            .pointer("/spec/publishNotReadyAddresses")
            .and_then(Value::as_bool)
            == Some(true);
        let endpoints: Vec<Value> = pods
            .iter()
            .map(|p| endpoint(p, svc_name, publish_not_ready))
            .collect();
        let ports: Vec<Value> = pods.first().map(|p| ports(&svc, p)).unwrap_or_default();

        let mut slice_labels: Map<String, Value> = labels(&svc).cloned().unwrap_or_default();
        slice_labels.insert(SERVICE_NAME_LABEL.into(), Value::from(svc_name));
        slice_labels.insert(MANAGED_BY_LABEL.into(), Value::from(MANAGED_BY));
        if str_at(&svc, "/spec/clusterIP") == "None" {
            slice_labels.insert(HEADLESS_LABEL.into(), Value::from(""));
        }
        let fill = |obj: &mut Value| {
            obj["metadata"]["labels"] = Value::Object(slice_labels.clone());
            obj["metadata"]["ownerReferences"] = json!([owner_ref(&svc, "v1", "Service")]);
            obj["addressType"] = json!("IPv4");
            obj["endpoints"] = Value::Array(endpoints.clone());
            match obj.as_object_mut() {
                Some(o) if ports.is_empty() => {
                    o.remove("ports");
                }
                _ => obj["ports"] = Value::Array(ports.clone()),
            }
        };
        match slices.split_first() {
            Some((keep, extra)) => {
                let slice_uid = uid(keep).to_owned();
                let r = store.modify(&slices_key(), ns, name(keep), false, |cur| {
                    if uid(cur) != slice_uid {
                        return Err(ApiError::conflict("the slice was replaced"));
                    }
                    let mut new = cur.clone();
                    fill(&mut new);
                    Ok(new)
                });
                match r {
                    Ok(_) => {}
                    // Deleted meanwhile: its event brings us back to create a new one.
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
                for s in extra {
                    delete_background(store, &slices_key(), ns, name(s))?;
                }
            }
            None => {
                let mut obj = json!({
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {"generateName": format!("{svc_name}-"), "namespace": ns},
                });
                fill(&mut obj);
                store.create(&slices_key(), obj, false)?;
            }
        }
        Ok(None)
    }
}

fn is_ipv4(ip: &str) -> bool {
    ip.parse::<std::net::Ipv4Addr>().is_ok()
}

/// One pod as an endpoint. `ready: nil` would also mean true, but the real controller always
/// writes all three conditions.
fn endpoint(p: &Value, svc_name: &str, publish_not_ready: bool) -> Value {
    let terminating = is_deleting(p);
    let serving = pod_ready(p);
    let ready = publish_not_ready || (serving && !terminating);
    let mut e = json!({
        "addresses": [str_at(p, "/status/podIP")],
        "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
        "targetRef": {"kind": "Pod", "namespace": namespace(p), "name": name(p), "uid": uid(p)},
    });
    if let Some(node) = p
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        e["nodeName"] = Value::from(node);
    }
    // A pod in the Service's subdomain is addressable by hostname.
    if let Some(h) = p
        .pointer("/spec/hostname")
        .and_then(Value::as_str)
        .filter(|h| !h.is_empty())
        && str_at(p, "/spec/subdomain") == svc_name
    {
        e["hostname"] = Value::from(h);
    }
    e
}

/// The Service's ports with target ports resolved against a pod: a number as is, a name
/// looked up among the pod's container ports (a port whose name the pod lacks is left out),
/// unset as the service port.
fn ports(svc: &Value, pod: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for sp in svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let protocol = sp["protocol"].as_str().unwrap_or("TCP");
        let port = match &sp["targetPort"] {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => match s.parse::<i64>() {
                Ok(n) => Some(n),
                Err(_) => container_port(pod, s, protocol),
            },
            _ => sp["port"].as_i64(),
        };
        let Some(port) = port else { continue };
        let mut p = json!({"protocol": protocol, "port": port});
        if let Some(n) = sp["name"].as_str().filter(|n| !n.is_empty()) {
            p["name"] = Value::from(n);
        }
        if let Some(a) = sp["appProtocol"].as_str() {
            p["appProtocol"] = Value::from(a);
        }
        out.push(p);
    }
    out
}

fn container_port(pod: &Value, port_name: &str, protocol: &str) -> Option<i64> {
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)?
        .iter()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .find(|p| p["name"] == port_name && p["protocol"].as_str().unwrap_or("TCP") == protocol)
        .and_then(|p| p["containerPort"].as_i64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::start;
    use crate::controllers::testutil::*;

    fn pod(name: &str, app: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "x", "ports": [{"name": "http", "containerPort": 8080}]}]},
        })
    }

    fn slice(store: &Store) -> Option<Arc<Value>> {
        store
            .list(&slices_key(), Some("default"))
            .0
            .into_iter()
            .next()
    }

    fn endpoint_names(s: &Value) -> Vec<(String, bool)> {
        s["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    str_at(e, "/targetRef/name").to_owned(),
                    e["conditions"]["ready"] == true,
                )
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slice_lists_ready_pods_as_ready_resolves_named_port_and_drops_removed_pods() {
        let store = store();
        let _c = start(store.clone());
        let svc = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default", "labels": {"tier": "front"}},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "web", "port": 80, "targetPort": "http"}, {"port": 81}]},
        });
        store.create(&services_key(), svc, false).unwrap();
        for (n, app) in [("a", "web"), ("b", "web"), ("c", "web"), ("other", "db")] {
            store.create(&pods_key(), pod(n, app), false).unwrap();
        }
        set_pod(&store, "a", "Running", true, "10.0.0.1");
        set_pod(&store, "b", "Running", false, "10.0.0.2");
        set_pod(&store, "other", "Running", true, "10.0.0.9");
        // "c" has no IP yet: not listed.
        let s = wait_for(&store, 10, "2 endpoints", || {
            slice(&store).filter(|s| endpoint_names(s).len() == 2)
        })
        .await;
        assert_eq!(
            endpoint_names(&s),
            [("a".to_owned(), true), ("b".to_owned(), false)]
        );
        assert!(name(&s).starts_with("web-"));
        assert_eq!(s["addressType"], "IPv4");
        assert_eq!(s["metadata"]["labels"][SERVICE_NAME_LABEL], "web");
        assert_eq!(s["metadata"]["labels"][MANAGED_BY_LABEL], MANAGED_BY);
        assert_eq!(s["metadata"]["labels"]["tier"], "front");
        assert_eq!(s["metadata"]["ownerReferences"][0]["kind"], "Service");
        assert_eq!(s["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(
            s["ports"],
            json!([{"name": "web", "protocol": "TCP", "port": 8080}, {"protocol": "TCP", "port": 81}])
        );
        let a = &s["endpoints"][0];
        assert_eq!(a["addresses"], json!(["10.0.0.1"]));
        assert_eq!(
            a["conditions"],
            json!({"ready": true, "serving": true, "terminating": false})
        );
        assert_eq!(a["targetRef"]["kind"], "Pod");
        assert_eq!(
            a["targetRef"]["uid"],
            uid(&store.get(&pods_key(), "default", "a").unwrap())
        );
        let slice_name = name(&s).to_owned();

        // b becomes ready, c gets an IP, a goes away: the same slice follows.
        set_pod(&store, "b", "Running", true, "10.0.0.2");
        set_pod(&store, "c", "Running", true, "10.0.0.3");
        store
            .delete(&pods_key(), "default", "a", &Default::default())
            .unwrap();
        let s = wait_for(&store, 10, "b and c", || {
            slice(&store)
                .filter(|s| endpoint_names(s) == [("b".to_owned(), true), ("c".to_owned(), true)])
        })
        .await;
        assert_eq!(name(&s), slice_name);
        assert_eq!(store.list(&slices_key(), Some("default")).0.len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn terminating_pod_is_serving_not_ready_and_selectorless_service_is_left_alone() {
        let store = store();
        let _c = start(store.clone());
        let svc = json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}});
        store.create(&services_key(), svc, false).unwrap();
        let bare = json!({"metadata": {"name": "bare", "namespace": "default"}, "spec": {"ports": [{"port": 80}]}});
        store.create(&services_key(), bare, false).unwrap();
        let mut p = pod("a", "web");
        p["spec"]["nodeName"] = json!("node");
        store.create(&pods_key(), p, false).unwrap();
        set_pod(&store, "a", "Running", true, "10.0.0.1");
        wait_until(&store, 10, "a ready", || {
            slice(&store).is_some_and(|s| endpoint_names(&s) == [("a".to_owned(), true)])
        })
        .await;
        // Graceful deletion (the pod is bound and running): it stays, terminating.
        store
            .delete(&pods_key(), "default", "a", &Default::default())
            .unwrap();
        let s = wait_for(&store, 10, "terminating", || {
            slice(&store).filter(|s| s["endpoints"][0]["conditions"]["terminating"] == true)
        })
        .await;
        assert_eq!(
            s["endpoints"][0]["conditions"],
            json!({"ready": false, "serving": true, "terminating": true})
        );
        assert_eq!(s["endpoints"][0]["nodeName"], "node");
        let slices = store.list(&slices_key(), Some("default")).0;
        assert_eq!(slices.len(), 1, "none for the selectorless service");
        assert_eq!(slices[0]["metadata"]["labels"][SERVICE_NAME_LABEL], "web");
    }
}
