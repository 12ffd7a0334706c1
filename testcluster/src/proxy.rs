//! kube-proxy on loopback: every Service with a `spec.clusterIP` (the API server allocates
//! them from `127.96.0.0/16`) gets, for each TCP port, a listener on `clusterIP:port` that
//! forwards each new connection to a ready endpoint, round-robin.
//!
//! Endpoints come from the EndpointSlices labelled `kubernetes.io/service-name=<service>`
//! in the Service's namespace: each endpoint whose `conditions.ready` is not false, at its
//! first address, with the slice port named like the Service port (or the slice's only
//! port). They are read afresh for every connection, so endpoint changes apply to the next
//! connection; open connections stay. With no ready endpoint a connection is accepted and
//! closed at once (a real cluster would reject it). An endpoint that refuses the connection
//! is skipped for the next one.
//!
//! Only addresses in `127.0.0.0/8` are served. Ports below 1024 need the privilege to bind
//! them (root, or `net.ipv4.ip_unprivileged_port_start`).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::task::{JoinHandle, JoinSet};

use crate::resources::ResKey;
use crate::store::Store;

/// How long a connection to an endpoint may take before the next one is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How often listeners that failed to bind are retried.
const BIND_RETRY: Duration = Duration::from_secs(1);

/// One listener: a Service port on its cluster IP.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ListenerKey {
    ns: String,
    service: String,
    ip: Ipv4Addr,
    port: u16,
    /// The Service port's name, which picks the EndpointSlice port.
    port_name: String,
}

#[derive(Default)]
struct Listeners {
    closed: bool,
    tasks: HashMap<ListenerKey, JoinHandle<()>>,
}

impl Drop for Listeners {
    fn drop(&mut self) {
        for t in self.tasks.values() {
            t.abort();
        }
    }
}

/// The running proxy. Stops on [`Proxy::shutdown`] or drop.
pub struct Proxy {
    listeners: Arc<Mutex<Listeners>>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Serves every Service that has a `spec.clusterIP` in `127.0.0.0/8`: for each of its
    /// TCP ports, a listener on `clusterIP:port` that forwards each new connection to a
    /// ready endpoint, round-robin. Starts on the current tokio runtime (panics outside one).
    pub fn start(store: Arc<Store>) -> Proxy {
        let listeners = Arc::new(Mutex::new(Listeners::default()));
        let task = tokio::spawn(run(store, listeners.clone()));
        Proxy { listeners, task }
    }

    /// Closes every listener (and the connections they carry) and stops following changes;
    /// also done on drop.
    pub fn shutdown(&self) {
        self.task.abort();
        let mut l = lock(&self.listeners);
        l.closed = true;
        for (_, t) in l.tasks.drain() {
            t.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The map stays consistent whatever panicked while holding it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn run(store: Arc<Store>, listeners: Arc<Mutex<Listeners>>) {
    // Subscribe before the first reconcile so no change falls between.
    let mut events = store.subscribe_all();
    loop {
        let retry = reconcile(&store, &listeners);
        // Wait for a Service change (endpoints are read per connection).
        loop {
            tokio::select! {
                r = events.recv() => match r {
                    Ok(ev) if ev.key.group.is_empty() && ev.key.plural == "services" => break,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                () = tokio::time::sleep(BIND_RETRY), if retry => break,
            }
        }
    }
}

/// Makes the listeners match the Services; true when some listener could not bind yet.
fn reconcile(store: &Arc<Store>, listeners: &Mutex<Listeners>) -> bool {
    let (services, _) = store.list(&ResKey::new("", "services"), None);
    let mut desired = Vec::new();
    for svc in &services {
        let Some(ip) = svc
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<Ipv4Addr>().ok())
            .filter(Ipv4Addr::is_loopback)
        else {
            continue;
        };
        let ns = svc["metadata"]["namespace"].as_str().unwrap_or_default();
        let service = svc["metadata"]["name"].as_str().unwrap_or_default();
        let ports = svc.pointer("/spec/ports").and_then(Value::as_array);
        for p in ports.into_iter().flatten() {
            if p["protocol"].as_str().is_some_and(|proto| proto != "TCP") {
                continue;
            }
            let Some(port) = p["port"].as_u64().and_then(|n| u16::try_from(n).ok()) else {
                continue;
            };
            desired.push(ListenerKey {
                ns: ns.to_owned(),
                service: service.to_owned(),
                ip,
                port,
                port_name: p["name"].as_str().unwrap_or_default().to_owned(),
            });
        }
    }
    let mut l = lock(listeners);
    if l.closed {
        return false;
    }
    l.tasks.retain(|k, t| {
        let keep = desired.contains(k) && !t.is_finished();
        if !keep {
            t.abort();
        }
        keep
    });
    let mut failed = false;
    for key in desired {
        if l.tasks.contains_key(&key) {
            continue;
        }
        match bind(key.ip, key.port) {
            Ok(listener) => {
                let task = tokio::spawn(serve(listener, key.clone(), store.clone()));
                l.tasks.insert(key, task);
            }
            Err(e) => {
                tracing::warn!(
                    "proxy: cannot listen on {}:{} for {}/{}: {e}",
                    key.ip,
                    key.port,
                    key.ns,
                    key.service
                );
                failed = true;
            }
        }
    }
    failed
}

fn bind(ip: Ipv4Addr, port: u16) -> std::io::Result<TcpListener> {
    // std sets SO_REUSEADDR, so a port freed a moment ago binds again.
    let l = std::net::TcpListener::bind(SocketAddr::new(IpAddr::V4(ip), port))?;
    l.set_nonblocking(true)?;
    TcpListener::from_std(l)
}

async fn serve(listener: TcpListener, key: ListenerKey, store: Arc<Store>) {
    let mut next = 0usize;
    // Dropping the set (the listener closes) ends its connections too.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((client, _)) => {
                    let backends = endpoints(&store, &key);
                    if backends.is_empty() {
                        // No ready endpoint: close at once.
                        drop(client);
                        continue;
                    }
                    let start = next % backends.len();
                    next = next.wrapping_add(1);
                    conns.spawn(forward(client, backends, start));
                }
                Err(e) => {
                    // Out of file descriptors and the like: do not spin.
                    tracing::warn!("proxy: accept on {}:{}: {e}", key.ip, key.port);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Carries one connection to the first endpoint (from `start`, round-robin) that accepts it.
async fn forward(mut client: TcpStream, backends: Vec<SocketAddr>, start: usize) {
    let _ = client.set_nodelay(true);
    for i in 0..backends.len() {
        let addr = backends[(start + i) % backends.len()];
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(mut upstream)) => {
                let _ = upstream.set_nodelay(true);
                // Either side closing or failing ends the connection; nothing to report.
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                return;
            }
            Ok(Err(e)) => tracing::debug!("proxy: endpoint {addr}: {e}"),
            Err(_) => tracing::debug!("proxy: endpoint {addr}: connect timed out"),
        }
    }
}

/// The ready endpoints of a Service port, in slice order.
fn endpoints(store: &Store, key: &ListenerKey) -> Vec<SocketAddr> {
    let (slices, _) = store.list(
        &ResKey::new("discovery.k8s.io", "endpointslices"),
        Some(&key.ns),
    );
    let mut out = Vec::new();
    for slice in &slices {
        let owner = slice
            .pointer("/metadata/labels/kubernetes.io~1service-name")
            .and_then(Value::as_str);
        if owner != Some(key.service.as_str()) {
            continue;
        }
        let ports = slice["ports"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let port = ports
            .iter()
            .find(|p| p["name"].as_str().unwrap_or_default() == key.port_name)
            .or(match ports {
                [only] => Some(only),
                _ => None,
            })
            .and_then(|p| p["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok());
        let Some(port) = port else {
            continue;
        };
        for ep in slice["endpoints"].as_array().into_iter().flatten() {
            if ep.pointer("/conditions/ready").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            let addr = ep
                .pointer("/addresses/0")
                .and_then(Value::as_str)
                .and_then(|a| a.parse::<IpAddr>().ok());
            if let Some(addr) = addr {
                out.push(SocketAddr::new(addr, port));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::Instant;

    const NS: &str = "default";

    fn store() -> Arc<Store> {
        let s = Arc::new(Store::default());
        s.create(
            &ResKey::new("", "namespaces"),
            json!({"metadata": {"name": NS}}),
            false,
        )
        .unwrap();
        s
    }

    /// A loopback address for this test alone (tests run in parallel).
    fn unique_ip(net: u8) -> Ipv4Addr {
        let [a, b] = rand::random::<[u8; 2]>();
        Ipv4Addr::new(127, net, a, b.clamp(1, 254))
    }

    /// A server that answers every connection with its name and closes.
    async fn identify_server(ip: Ipv4Addr, name: &'static str) -> u16 {
        let l = TcpListener::bind((ip, 0)).await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(name.as_bytes()).await;
            }
        });
        port
    }

    fn slice_key() -> ResKey {
        ResKey::new("discovery.k8s.io", "endpointslices")
    }

    fn slice(service: &str, port: u16, endpoints: &[(Ipv4Addr, bool)]) -> Value {
        let eps: Vec<Value> = endpoints
            .iter()
            .map(|(ip, ready)| json!({"addresses": [ip.to_string()], "conditions": {"ready": ready}}))
            .collect();
        json!({
            "metadata": {"name": format!("{service}-abc"), "namespace": NS, "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4",
            "ports": [{"name": "web", "port": port, "protocol": "TCP"}],
            "endpoints": eps,
        })
    }

    fn set_endpoints(store: &Store, service: &str, port: u16, endpoints: &[(Ipv4Addr, bool)]) {
        let s = slice(service, port, endpoints);
        store
            .modify(&slice_key(), NS, &format!("{service}-abc"), false, |o| {
                let mut o = o.clone();
                o["endpoints"] = s["endpoints"].clone();
                Ok(o)
            })
            .unwrap();
    }

    /// Connects through the proxy and reads what comes back until the other side closes.
    async fn ask(addr: SocketAddr) -> std::io::Result<String> {
        let mut s = TcpStream::connect(addr).await?;
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await??;
        Ok(out)
    }

    async fn wait_for(
        what: &str,
        addr: SocketAddr,
        pred: impl Fn(&std::io::Result<String>) -> bool,
    ) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = ask(addr).await;
            if pred(&r) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last answer {r:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Two identify servers on two pod IPs behind a Service on a fresh cluster IP.
    async fn setup(store: &Store, service: &str) -> (SocketAddr, Ipv4Addr, Ipv4Addr, u16) {
        let (ip_a, ip_b) = (unique_ip(10), unique_ip(11));
        let port = identify_server(ip_a, "A").await;
        // The same port on both: the slice has one port for all its endpoints.
        let lb = TcpListener::bind((ip_b, port)).await.unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = lb.accept().await {
                let _ = s.write_all(b"B").await;
            }
        });
        let cluster_ip = unique_ip(96);
        let svc_port = 20_000 + rand::random::<u16>() % 20_000;
        store
            .create(
                &ResKey::new("", "services"),
                json!({"metadata": {"name": service, "namespace": NS}, "spec": {
                    "clusterIP": cluster_ip.to_string(),
                    "ports": [{"name": "web", "port": svc_port, "targetPort": port, "protocol": "TCP"}],
                }}),
                false,
            )
            .unwrap();
        store
            .create(
                &slice_key(),
                slice(service, port, &[(ip_a, true), (ip_b, true)]),
                false,
            )
            .unwrap();
        (
            SocketAddr::new(IpAddr::V4(cluster_ip), svc_port),
            ip_a,
            ip_b,
            port,
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_alternate_between_ready_endpoints() {
        let store = store();
        let _proxy = Proxy::start(store.clone());
        let (addr, ..) = setup(&store, "echo").await;
        wait_for("the listener", addr, |r| {
            r.as_ref().is_ok_and(|s| !s.is_empty())
        })
        .await;
        let mut answers = Vec::new();
        for _ in 0..6 {
            answers.push(ask(addr).await.unwrap());
        }
        assert!(
            answers.windows(2).all(|w| w[0] != w[1]),
            "round-robin: {answers:?}"
        );
        assert!(answers.iter().all(|a| a == "A" || a == "B"), "{answers:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unready_endpoint_gets_no_connections() {
        let store = store();
        let _proxy = Proxy::start(store.clone());
        let (addr, ip_a, ip_b, port) = setup(&store, "half").await;
        wait_for("the listener", addr, |r| {
            r.as_ref().is_ok_and(|s| !s.is_empty())
        })
        .await;
        set_endpoints(&store, "half", port, &[(ip_a, true), (ip_b, false)]);
        for _ in 0..6 {
            assert_eq!(ask(addr).await.unwrap(), "A");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_ready_endpoint_closes_the_connection() {
        let store = store();
        let _proxy = Proxy::start(store.clone());
        let (addr, ip_a, ip_b, port) = setup(&store, "none").await;
        wait_for("the listener", addr, |r| {
            r.as_ref().is_ok_and(|s| !s.is_empty())
        })
        .await;
        set_endpoints(&store, "none", port, &[(ip_a, false), (ip_b, false)]);
        // Accepted, then closed at once with nothing sent.
        assert_eq!(ask(addr).await.unwrap(), "");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn removed_service_stops_listening() {
        let store = store();
        let proxy = Proxy::start(store.clone());
        let (addr, ..) = setup(&store, "gone").await;
        wait_for("the listener", addr, |r| {
            r.as_ref().is_ok_and(|s| !s.is_empty())
        })
        .await;
        store.remove(&ResKey::new("", "services"), NS, "gone");
        wait_for("the listener to close", addr, |r| r.is_err()).await;

        // Shutdown closes the others.
        let (addr, ..) = setup(&store, "other").await;
        wait_for("the listener", addr, |r| {
            r.as_ref().is_ok_and(|s| !s.is_empty())
        })
        .await;
        proxy.shutdown();
        wait_for("shutdown", addr, |r| r.is_err()).await;
    }
}
