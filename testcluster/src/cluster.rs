//! One whole test cluster: the API server on a loopback port, the controllers, the kubelet
//! and the Service proxy, with the objects a fresh cluster has (namespaces, bootstrap RBAC).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::auth::Tokens;
use crate::controllers::{self, Controllers};
use crate::faults::Faults;
use crate::kubelet::{Kubelet, KubeletConfig};
use crate::proxy::Proxy;
use crate::resources::ResKey;
use crate::server::{self, ApiState};
use crate::store::Store;
use crate::tls::Tls;

/// What a cluster is started with.
#[derive(Debug, Clone, Default)]
pub struct ClusterConfig {
    /// Image name (tag and digest ignored) → the local executable its containers run.
    pub images: HashMap<String, PathBuf>,
    /// Where pods keep their volumes and logs; a fresh temporary folder when `None`.
    pub workdir: Option<PathBuf>,
    /// Port of the API server on 127.0.0.1; 0 picks a free one.
    pub port: u16,
}

impl ClusterConfig {
    /// Maps an image to an executable (`goodput` → the built binary).
    pub fn image(mut self, name: &str, executable: impl Into<PathBuf>) -> Self {
        self.images.insert(name.to_owned(), executable.into());
        self
    }
}

/// A running cluster. Dropping it stops everything and kills every pod process.
pub struct Cluster {
    state: Arc<ApiState>,
    addr: SocketAddr,
    url: String,
    kubelet: Kubelet,
    proxy: Proxy,
    controllers: Controllers,
    server: JoinHandle<()>,
    workdir: PathBuf,
    owns_workdir: bool,
    ca_pem: String,
}

static CLUSTERS: AtomicU64 = AtomicU64::new(0);

impl Cluster {
    /// Starts a cluster on the current tokio runtime and returns once it serves.
    pub async fn start(config: ClusterConfig) -> anyhow::Result<Self> {
        let (workdir, owns_workdir) = match config.workdir {
            Some(w) => (w, false),
            None => (
                std::env::temp_dir().join(format!(
                    "testcluster-{}-{}",
                    std::process::id(),
                    CLUSTERS.fetch_add(1, Ordering::Relaxed)
                )),
                true,
            ),
        };
        std::fs::create_dir_all(&workdir)
            .with_context(|| format!("creating {}", workdir.display()))?;
        let store = Arc::new(Store::default());
        let tokens = Arc::new(Tokens::new());
        let faults = Arc::new(Faults::default());
        bootstrap(&store)?;
        let state = Arc::new(ApiState::new(store.clone(), tokens.clone(), faults));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", config.port))
            .await
            .context("binding the API server port")?;
        let addr = listener.local_addr()?;
        let url = format!("https://{addr}");
        let _ = state.address.set(addr.to_string());
        let tls = Tls::generate()?;
        let server = tokio::spawn(serve_tls(
            listener,
            tls.acceptor.clone(),
            server::router(state.clone()),
        ));
        let controllers = controllers::start(store.clone());
        let kubelet = Kubelet::start(
            store.clone(),
            tokens,
            KubeletConfig {
                images: config.images,
                workdir: workdir.clone(),
                api_server: url.clone(),
                ca_pem: tls.ca_pem.clone(),
                node_name: "testcluster".into(),
            },
        );
        let _ = state.kubelet.set(kubelet.clone());
        let proxy = Proxy::start(store);
        Ok(Self {
            state,
            addr,
            url,
            kubelet,
            proxy,
            controllers,
            server,
            workdir,
            owns_workdir,
            ca_pem: tls.ca_pem,
        })
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bearer token of `system:admin` (group `system:masters`).
    pub fn admin_token(&self) -> &str {
        self.state.tokens.admin_token()
    }

    /// The token of a ServiceAccount (what its pods' kubeconfigs carry).
    pub fn token_for(&self, namespace: &str, service_account: &str) -> String {
        self.state
            .tokens
            .for_service_account(namespace, service_account)
    }

    /// A kubeconfig for the admin identity.
    pub fn kubeconfig(&self) -> String {
        kubeconfig_yaml(&self.url, &self.ca_pem, self.admin_token(), "default")
    }

    /// The cluster CA (PEM) that signs the API server's certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A kubeconfig that authenticates as a ServiceAccount.
    pub fn kubeconfig_for(&self, namespace: &str, service_account: &str) -> String {
        kubeconfig_yaml(
            &self.url,
            &self.ca_pem,
            &self.token_for(namespace, service_account),
            namespace,
        )
    }

    /// Writes the admin kubeconfig (mode 0600).
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        write_private(path, &self.kubeconfig())
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.state.store
    }

    pub fn faults(&self) -> &Faults {
        &self.state.faults
    }

    pub fn kubelet(&self) -> &Kubelet {
        &self.kubelet
    }

    pub fn workdir(&self) -> &Path {
        &self.workdir
    }

    /// Stops serving and kills every pod process.
    pub fn shutdown(&self) {
        self.server.abort();
        self.controllers.shutdown();
        self.kubelet.shutdown();
        self.proxy.shutdown();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown();
        if self.owns_workdir {
            let _ = std::fs::remove_dir_all(&self.workdir);
        }
    }
}

/// Accepts TLS connections and serves HTTP/1.1 or HTTP/2 (ALPN) on each.
async fn serve_tls(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    app: axum::Router,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto;
    use hyper_util::service::TowerToHyperService;
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("accept: {e}");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let service = TowerToHyperService::new(app);
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A kubeconfig with one cluster (its CA inline, when the server speaks TLS), one user (a
/// bearer token) and one context. JSON is YAML: every kubeconfig loader reads it.
pub fn kubeconfig_yaml(server: &str, ca_pem: &str, token: &str, namespace: &str) -> String {
    use base64::Engine;
    let mut cluster = json!({"server": server});
    if !ca_pem.is_empty() {
        cluster["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(ca_pem));
    }
    let v = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testcluster", "cluster": cluster}],
        "users": [{"name": "testcluster-user", "user": {"token": token}}],
        "contexts": [{"name": "testcluster", "context": {"cluster": "testcluster", "user": "testcluster-user", "namespace": namespace}}],
        "current-context": "testcluster",
    });
    format!("{v:#}\n")
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    // Renamed into place so a reader waiting for the file never sees half of it.
    std::fs::rename(tmp, path)
}

/// The objects every fresh cluster has: the four namespaces and the bootstrap RBAC that
/// lets any authenticated identity discover the API and ask what it may do.
fn bootstrap(store: &Store) -> anyhow::Result<()> {
    let ns = ResKey::new("", "namespaces");
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        store.create(
            &ns,
            json!({"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
            false,
        )?;
    }
    let roles = ResKey::new("rbac.authorization.k8s.io", "clusterroles");
    let bindings = ResKey::new("rbac.authorization.k8s.io", "clusterrolebindings");
    let bootstrap_labels = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
    let cluster_roles: [(&str, Value); 4] = [
        (
            "cluster-admin",
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        ),
        (
            "system:discovery",
            json!([{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
        ),
        (
            "system:basic-user",
            json!([{"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]}]),
        ),
        (
            "system:public-info-viewer",
            json!([{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
        ),
    ];
    for (name, rules) in cluster_roles {
        store.create(
            &roles,
            json!({"metadata": {"name": name, "labels": bootstrap_labels}, "rules": rules}),
            false,
        )?;
    }
    for (name, group) in [
        ("system:discovery", "system:authenticated"),
        ("system:basic-user", "system:authenticated"),
        ("system:public-info-viewer", "system:authenticated"),
        ("cluster-admin", "system:masters"),
    ] {
        store.create(
            &bindings,
            json!({
                "metadata": {"name": name, "labels": bootstrap_labels},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
            }),
            false,
        )?;
    }
    Ok(())
}
