//! The kubelet of the loopback cluster: it binds every unscheduled pod to its one node (it
//! doubles as the scheduler) and runs each pod as a group of local processes, reporting
//! status the way the real kubelet does.
//!
//! # How a pod maps onto the host
//!
//! - **Containers** are processes. Each is spawned in its own process group, so signals
//!   reach its children and killing it kills the whole group (a process that calls `setsid`
//!   escapes; nothing else does). When a container's main process exits, what is left of its
//!   group is killed, as its cgroup would be.
//! - **Images** are local executables: the image name without `:tag` and `@digest` is looked
//!   up in [`KubeletConfig::images`] (also without a leading `docker.io/` or
//!   `docker.io/library/`). With no `command` the executable runs with `args`; with a
//!   `command`, `command[0]` runs as given (an absolute path, or a name looked up in `PATH`,
//!   like a binary inside the image), so `sh -c ...` works with any known image. An unknown
//!   image, or one marked with [`Kubelet::set_image_pullable`], leaves the container waiting
//!   in `ErrImagePull`, then `ImagePullBackOff`; it starts once the image can be "pulled".
//! - **Network.** Every pod gets its own loopback address from `127.10.0.0/16`
//!   (`status.podIP`; `status.hostIP` is `127.0.0.1`). There is no network namespace, so a
//!   process must bind to its pod IP to be reachable there without clashing with other pods:
//!   pass it in with the downward API (`valueFrom.fieldRef.fieldPath: status.podIP`) and
//!   bind `$(POD_IP)`. Addresses are unique within the process (several clusters may run in
//!   one test binary) and never reused while a live pod holds them.
//! - **Volumes** are directories under `<workdir>/pods/<ns>_<name>_<uid>/volumes/<volume>`:
//!   configMap, secret, downwardAPI and projected volumes are written there (and refreshed
//!   when their sources change), emptyDir is an empty directory, a persistentVolumeClaim is a
//!   link to `<workdir>/pvcs/<ns>/<claim>` (kept across pods), hostPath is the host path.
//!   With no mount namespace a container sees its `volumeMounts` by path rewriting: every
//!   command word, arg and env value (after `$(VAR)` expansion), and `workingDir`, that
//!   starts with a mount's `mountPath` followed by `/` or nothing gets that prefix replaced by
//!   the volume directory (`subPath` honoured); so does the value of a `--flag=/path` arg.
//!   Paths inside a script (`sh -c 'cat /etc/x'`) are not rewritten: pass them through an env
//!   var or an argument.
//! - **Environment**, in Kubernetes order: service links of the namespace's Services,
//!   `envFrom`, `env` (with `$(VAR)` expansion and `valueFrom`); plus `HOSTNAME`, the
//!   cluster process's own `PATH`, `HOME` and `LANG`, and, unless
//!   `automountServiceAccountToken: false`, `KUBECONFIG` pointing at a kubeconfig with the
//!   pod's ServiceAccount token (the token and namespace files are also at the usual
//!   `/var/run/secrets/kubernetes.io/serviceaccount` mount path).
//! - **Logs**: stdout and stderr of each container instance go to
//!   `<poddir>/logs/<container>/<restartCount>.log`; the previous instance's file is kept for
//!   `--previous`.
//! - **Restarts** back off 0.5 s, doubling up to 5 s (the real kubelet: 10 s to 5 min), so
//!   tests stay fast; the backoff resets once an instance ran 10 s.
//! - **Probes**: httpGet (HTTP only), tcpSocket, exec, and grpc approximated by a TCP connect.
//!   `periodSeconds` defaults to 10 and is at least 1.
//!
//! Not modelled: resource limits (`qosClass` is still computed), lifecycle hooks, sidecar
//! init containers, `activeDeadlineSeconds`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::auth::Tokens;
use crate::resources::ResKey;
use crate::store::{Event, EventType, Store};
use crate::time;

/// First restart delay; it doubles per consecutive crash.
const BACKOFF_START: Duration = Duration::from_millis(500);
/// Longest restart delay.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// An instance that ran this long resets the backoff.
const BACKOFF_RESET: Duration = Duration::from_secs(10);
/// How often a waiting container (image pull, config error, volume error) is retried.
const RETRY: Duration = Duration::from_secs(1);
/// Where the ServiceAccount token is "mounted".
const SA_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Volume directory name of the ServiceAccount files.
const SA_VOLUME: &str = "kube-api-access";
const HOST_IP: &str = "127.0.0.1";

/// What a kubelet is started with.
#[derive(Debug, Clone, Default)]
pub struct KubeletConfig {
    /// Image name (without tag or digest) -> local executable that is the image's entrypoint.
    pub images: HashMap<String, PathBuf>,
    /// Per-pod directories (volumes, logs, kubeconfig) go under here.
    pub workdir: PathBuf,
    /// The API server URL pods' kubeconfigs point at (`https://127.0.0.1:PORT`).
    pub api_server: String,
    /// The cluster CA (PEM) pods trust: in their kubeconfig and in the ServiceAccount
    /// volume's `ca.crt`. Empty for a plain-HTTP server.
    pub ca_pem: String,
    /// The one node's name (`spec.nodeName` of every pod it binds), e.g. `testcluster`.
    pub node_name: String,
}

/// A running kubelet. Clones share it; it stops (killing every container process) on
/// [`Kubelet::shutdown`] or when the last clone is dropped.
#[derive(Clone)]
pub struct Kubelet {
    inner: Arc<Inner>,
    _guard: Arc<ShutdownOnDrop>,
}

struct ShutdownOnDrop(Arc<Inner>);

impl Drop for ShutdownOnDrop {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

impl Kubelet {
    /// Starts the kubelet loop on the current tokio runtime (panics outside one).
    pub fn start(store: Arc<Store>, tokens: Arc<Tokens>, config: KubeletConfig) -> Kubelet {
        let inner = Arc::new(Inner {
            store,
            tokens,
            config,
            shared: Mutex::new(Shared::default()),
            nudge: watch::channel(0).0,
            main_task: Mutex::new(None),
        });
        let task = tokio::spawn(main_loop(inner.clone()));
        *lock(&inner.main_task) = Some(task.abort_handle());
        Kubelet {
            inner: inner.clone(),
            _guard: Arc::new(ShutdownOnDrop(inner)),
        }
    }

    /// Kills every container process (SIGKILL to each process group) and stops the loop;
    /// also done when the last clone is dropped. No container process outlives this call
    /// (except one that left its process group with `setsid`).
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }

    /// Log file of a container (the default container when `None`: the
    /// `kubectl.kubernetes.io/default-container` annotation's, else the first). `previous`
    /// is the last terminated instance. `None` when the pod or container is unknown or has
    /// no such instance (not started yet).
    pub fn log_path(
        &self,
        ns: &str,
        pod: &str,
        container: Option<&str>,
        previous: bool,
    ) -> Option<PathBuf> {
        let shared = self.inner.shared();
        let info = shared.pods.get(&(ns.to_owned(), pod.to_owned()))?;
        let name = container.unwrap_or(&info.default_container);
        let c = info.containers.iter().find(|c| c.name == name)?;
        let n = if previous { c.previous? } else { c.latest? };
        Some(log_file(&info.dir, name, n))
    }

    /// Whether a container of the pod still runs (for `kubectl logs -f` to know when to stop
    /// following).
    pub fn is_running(&self, ns: &str, pod: &str) -> bool {
        let shared = self.inner.shared();
        shared
            .pods
            .get(&(ns.to_owned(), pod.to_owned()))
            .is_some_and(|p| p.containers.iter().any(|c| c.pgid.is_some()))
    }

    /// Fault: SIGKILLs the pod's running containers (their restartPolicy then applies).
    pub fn kill(&self, ns: &str, pod: &str) {
        let groups: Vec<i32> = {
            let shared = self.inner.shared();
            shared
                .pods
                .get(&(ns.to_owned(), pod.to_owned()))
                .map(|p| p.containers.iter().filter_map(|c| c.pgid).collect())
                .unwrap_or_default()
        };
        for g in groups {
            signal_group(g, libc::SIGKILL);
        }
    }

    /// Fault: `Some(false)` reports the pod not ready whatever its probes say, `Some(true)`
    /// ready whenever its containers run, `None` goes back to the probes. The override
    /// belongs to the name, so it also applies to a later pod of the same name.
    pub fn set_ready_override(&self, ns: &str, pod: &str, ready: Option<bool>) {
        {
            let mut shared = self.inner.shared();
            let key = (ns.to_owned(), pod.to_owned());
            match ready {
                Some(r) => shared.ready_override.insert(key, r),
                None => shared.ready_override.remove(&key),
            };
        }
        self.inner.nudge();
    }

    /// Fault: `false` makes new containers of this image (tag and digest ignored) wait in
    /// `ErrImagePull`; `true` lets them start.
    pub fn set_image_pullable(&self, image: &str, pullable: bool) {
        {
            let mut shared = self.inner.shared();
            let name = image_name(image).to_owned();
            if pullable {
                shared.unpullable.remove(&name);
            } else {
                shared.unpullable.insert(name);
            }
        }
        self.inner.nudge();
    }
}

// ---------------------------------------------------------------------------------------
// Shared state

type PodKey = (String, String);

/// What the public methods read: published by each pod worker after every sync.
#[derive(Clone)]
struct PodInfo {
    uid: String,
    dir: PathBuf,
    default_container: String,
    containers: Vec<ContainerInfo>,
}

#[derive(Clone)]
struct ContainerInfo {
    name: String,
    latest: Option<u32>,
    previous: Option<u32>,
    pgid: Option<i32>,
}

#[derive(Default)]
struct Shared {
    shutting_down: bool,
    /// Every live process group (containers and exec probes), for shutdown.
    groups: HashSet<i32>,
    pods: HashMap<PodKey, PodInfo>,
    ready_override: HashMap<PodKey, bool>,
    unpullable: HashSet<String>,
}

struct Inner {
    store: Arc<Store>,
    tokens: Arc<Tokens>,
    config: KubeletConfig,
    shared: Mutex<Shared>,
    /// Bumped when something every pod worker may care about changed (ConfigMaps, Secrets,
    /// faults).
    nudge: watch::Sender<u64>,
    main_task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Inner {
    fn shared(&self) -> MutexGuard<'_, Shared> {
        lock(&self.shared)
    }

    fn nudge(&self) {
        self.nudge.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Records a process group; once shutting down the group is killed instead (so a
    /// container spawned during shutdown cannot escape it) and false is returned.
    fn register_group(&self, pgid: i32) -> bool {
        let mut shared = self.shared();
        if shared.shutting_down {
            drop(shared);
            signal_group(pgid, libc::SIGKILL);
            return false;
        }
        shared.groups.insert(pgid);
        true
    }

    fn deregister_group(&self, pgid: i32) {
        self.shared().groups.remove(&pgid);
    }

    fn shutdown(&self) {
        let groups: Vec<i32> = {
            let mut shared = self.shared();
            shared.shutting_down = true;
            shared.groups.iter().copied().collect()
        };
        for g in groups {
            signal_group(g, libc::SIGKILL);
        }
        if let Some(task) = lock(&self.main_task).take() {
            task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves consistent data (plain inserts and
    // removals); keep going rather than poisoning every later call.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn signal_group(pgid: i32, signal: i32) {
    if pgid > 0 {
        // SAFETY: killpg only sends a signal; a stale group id yields ESRCH, which is fine.
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

fn pods_key() -> ResKey {
    ResKey::new("", "pods")
}

/// What `terminationMessagePolicy: FallbackToLogsOnError` puts in a failed container's
/// `terminated.message`: the end of its log, at most 80 lines and 2,048 bytes.
fn log_tail(path: &Path) -> String {
    let Ok(bytes) = std::fs::read(path) else {
        return String::new();
    };
    let mut start = bytes.len().saturating_sub(2048);
    while start < bytes.len() && (bytes[start] & 0xC0) == 0x80 {
        start += 1; // not inside a UTF-8 sequence
    }
    let text = String::from_utf8_lossy(&bytes[start..]);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(80)..].join("\n")
}

fn log_file(pod_dir: &Path, container: &str, n: u32) -> PathBuf {
    pod_dir
        .join("logs")
        .join(container)
        .join(format!("{n}.log"))
}

// ---------------------------------------------------------------------------------------
// Pod IPs

struct IpPool {
    used: HashSet<u16>,
    cursor: u16,
}

/// Shared by every kubelet in the process: several clusters in one test binary must not
/// hand out the same pod IP. The random start makes clashes between processes unlikely.
static IP_POOL: LazyLock<Mutex<IpPool>> = LazyLock::new(|| {
    Mutex::new(IpPool {
        used: HashSet::new(),
        cursor: rand::random(),
    })
});

fn usable_host(h: u16) -> bool {
    let last = h & 0xff;
    last != 0 && last != 255
}

fn pod_ip(h: u16) -> Ipv4Addr {
    let [a, b] = h.to_be_bytes();
    Ipv4Addr::new(127, 10, a, b)
}

fn host_part(ip: Ipv4Addr) -> Option<u16> {
    let o = ip.octets();
    (o[0] == 127 && o[1] == 10).then(|| u16::from_be_bytes([o[2], o[3]]))
}

fn allocate_ip(preferred: Option<Ipv4Addr>) -> Option<Ipv4Addr> {
    let mut pool = lock(&IP_POOL);
    if let Some(h) = preferred.and_then(host_part)
        && usable_host(h)
        && pool.used.insert(h)
    {
        return Some(pod_ip(h));
    }
    for _ in 0..=u16::MAX {
        pool.cursor = pool.cursor.wrapping_add(1);
        let h = pool.cursor;
        if usable_host(h) && pool.used.insert(h) {
            return Some(pod_ip(h));
        }
    }
    None
}

fn release_ip(ip: Ipv4Addr) {
    if let Some(h) = host_part(ip) {
        lock(&IP_POOL).used.remove(&h);
    }
}

// ---------------------------------------------------------------------------------------
// The main loop: binds pods and hands each of this node's pods to its worker.

struct WorkerHandle {
    uid: String,
    tx: watch::Sender<Option<Arc<Value>>>,
    /// Dropping detaches: a worker told its pod is gone still kills and cleans up.
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Workers(HashMap<PodKey, WorkerHandle>);

impl Drop for Workers {
    /// The main loop ends only on shutdown: stop every worker with it.
    fn drop(&mut self) {
        for w in self.0.values() {
            w.task.abort();
        }
    }
}

async fn main_loop(inner: Arc<Inner>) {
    // Subscribe before listing so nothing falls between.
    let mut events = inner.store.subscribe_all();
    let mut workers = Workers::default();
    resync(&inner, &mut workers);
    loop {
        match events.recv().await {
            Ok(ev) => on_event(&inner, &ev, &mut workers),
            Err(broadcast::error::RecvError::Lagged(_)) => resync(&inner, &mut workers),
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

fn on_event(inner: &Arc<Inner>, ev: &Event, workers: &mut Workers) {
    if !ev.key.group.is_empty() {
        return;
    }
    match ev.key.plural.as_str() {
        "pods" if ev.type_ == EventType::Deleted => pod_gone(&ev.object, workers),
        "pods" => pod_seen(inner, &ev.object, workers),
        "configmaps" | "secrets" => inner.nudge(),
        _ => {}
    }
}

fn resync(inner: &Arc<Inner>, workers: &mut Workers) {
    let (pods, _) = inner.store.list(&pods_key(), None);
    let mut seen = HashSet::new();
    for p in &pods {
        if let Some((ns, name, uid)) = pod_ids(p) {
            seen.insert((ns, name, uid));
        }
        pod_seen(inner, p, workers);
    }
    workers.0.retain(|(ns, name), w| {
        let keep = seen.contains(&(ns.clone(), name.clone(), w.uid.clone()));
        if !keep {
            w.tx.send_replace(None);
        }
        keep
    });
}

fn pod_ids(pod: &Value) -> Option<(String, String, String)> {
    let m = &pod["metadata"];
    Some((
        m["namespace"].as_str()?.to_owned(),
        m["name"].as_str()?.to_owned(),
        m["uid"].as_str().unwrap_or_default().to_owned(),
    ))
}

fn is_terminal(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed")
}

fn pod_seen(inner: &Arc<Inner>, pod: &Arc<Value>, workers: &mut Workers) {
    let Some((ns, name, uid)) = pod_ids(pod) else {
        return;
    };
    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
    let node = str_at(pod, "/spec/nodeName");
    if node.is_empty() {
        if !is_terminal(pod) && !deleting {
            bind(inner, &ns, &name, &uid);
        }
        return;
    }
    if node != inner.config.node_name {
        return;
    }
    let key = (ns, name);
    if let Some(w) = workers.0.get(&key) {
        if w.uid == uid {
            w.tx.send_replace(Some(pod.clone()));
            return;
        }
        // A new pod under the same name: the old one is gone.
        if let Some(old) = workers.0.remove(&key) {
            old.tx.send_replace(None);
        }
    }
    if is_terminal(pod) {
        // Left alone; a terminal pod being deleted has nothing left to stop.
        if deleting {
            inner.store.remove(&pods_key(), &key.0, &key.1);
        }
        return;
    }
    let Some(worker) = Worker::new(inner.clone(), pod.clone()) else {
        tracing::error!("no free pod IP for {}/{}", key.0, key.1);
        return;
    };
    let (tx, rx) = watch::channel(Some(pod.clone()));
    let task = tokio::spawn(worker.run(rx));
    workers.0.insert(key, WorkerHandle { uid, tx, task });
}

fn pod_gone(pod: &Value, workers: &mut Workers) {
    let Some((ns, name, uid)) = pod_ids(pod) else {
        return;
    };
    let key = (ns, name);
    if workers.0.get(&key).is_some_and(|w| w.uid == uid)
        && let Some(w) = workers.0.remove(&key)
    {
        w.tx.send_replace(None);
    }
}

/// Binds a pod to this node (the kubelet doubles as the scheduler).
fn bind(inner: &Inner, ns: &str, name: &str, uid: &str) {
    let node = inner.config.node_name.clone();
    let r = inner.store.modify(&pods_key(), ns, name, false, |p| {
        let mut p = p.clone();
        let unbound = str_at(&p, "/spec/nodeName").is_empty();
        if p["metadata"]["uid"].as_str() == Some(uid)
            && unbound
            && !is_terminal(&p)
            && let Some(spec) = child_object(&mut p, "spec")
        {
            spec.insert("nodeName".into(), Value::from(node));
        }
        Ok(p)
    });
    if let Err(e) = r {
        tracing::debug!("binding pod {ns}/{name}: {e}");
    }
}

// ---------------------------------------------------------------------------------------
// Pod workers: one task per pod owns its containers.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Policy {
    Always,
    OnFailure,
    Never,
}

fn restart_policy(pod: &Value) -> Policy {
    match str_at(pod, "/spec/restartPolicy") {
        "Never" => Policy::Never,
        "OnFailure" => Policy::OnFailure,
        _ => Policy::Always,
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Term {
    exit_code: i32,
    signal: Option<i32>,
    reason: &'static str,
    message: String,
    started_at: String,
    finished_at: String,
    container_id: String,
}

#[derive(Clone, Debug, PartialEq)]
enum CState {
    Waiting {
        reason: &'static str,
        message: String,
    },
    Running {
        started_at: String,
        container_id: String,
    },
    Terminated(Term),
}

/// A live container instance.
struct Run {
    instance: u64,
    pgid: i32,
    since: Instant,
    started_at: String,
    container_id: String,
    started_tx: watch::Sender<bool>,
    probes: Vec<JoinHandle<()>>,
    has_readiness: bool,
    /// Set once it was sent SIGTERM (liveness failure): SIGKILL then.
    kill_at: Option<Instant>,
}

impl Drop for Run {
    fn drop(&mut self) {
        for p in &self.probes {
            p.abort();
        }
    }
}

struct Ctr {
    name: String,
    spec: Value,
    init: bool,
    restart_count: u32,
    state: CState,
    last: Option<Term>,
    ready: bool,
    started: bool,
    pull_failures: u32,
    /// After a failed pull: no new attempt before this time unless a nudge came since.
    pull_retry: Option<(Instant, u64)>,
    crashes: u32,
    backoff_until: Option<Instant>,
    run: Option<Run>,
    latest_log: Option<u32>,
    image_id: String,
}

impl Ctr {
    fn new(spec: &Value, init: bool, reason: &'static str) -> Self {
        Self {
            name: spec["name"].as_str().unwrap_or_default().to_owned(),
            spec: spec.clone(),
            init,
            restart_count: 0,
            state: CState::Waiting {
                reason,
                message: String::new(),
            },
            last: None,
            ready: false,
            started: false,
            pull_failures: 0,
            pull_retry: None,
            crashes: 0,
            backoff_until: None,
            run: None,
            latest_log: None,
            image_id: String::new(),
        }
    }

    fn succeeded(&self) -> bool {
        matches!(&self.state, CState::Terminated(t) if t.exit_code == 0)
    }

    /// The log instance `--previous` shows: the one in `lastState`.
    fn previous_log(&self) -> Option<u32> {
        let latest = self.latest_log?;
        match self.state {
            CState::Waiting { .. } if self.last.is_some() => Some(latest),
            _ => latest.checked_sub(1),
        }
    }
}

enum Msg {
    Exited {
        idx: usize,
        instance: u64,
        code: Option<i32>,
        signal: Option<i32>,
    },
    Probe {
        idx: usize,
        instance: u64,
        event: ProbeEvent,
    },
}

#[derive(Debug, Clone, Copy)]
enum ProbeEvent {
    Ready(bool),
    Started,
    Failed(&'static str),
}

/// What a container is started with.
struct Launch {
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
    mounts: Vec<Mount>,
    image_id: String,
}

/// What an exec probe runs in: the container's environment.
struct ExecCtx {
    env: Vec<(String, String)>,
    cwd: PathBuf,
    mounts: Vec<Mount>,
}

#[derive(Clone, Debug)]
struct Mount {
    path: String,
    host: PathBuf,
}

struct Worker {
    inner: Arc<Inner>,
    key: PodKey,
    uid: String,
    pod: Arc<Value>,
    dir: PathBuf,
    ip: Ipv4Addr,
    ip_held: bool,
    start_time: String,
    /// Init containers first, then the app containers.
    ctrs: Vec<Ctr>,
    n_init: usize,
    /// Condition type -> (status, lastTransitionTime).
    conditions: BTreeMap<&'static str, (bool, String)>,
    terminal: Option<&'static str>,
    /// Deletion: when SIGTERM turns into SIGKILL.
    kill_deadline: Option<Instant>,
    killed: bool,
    volume_error: Option<String>,
    tx: mpsc::UnboundedSender<Msg>,
    rx: Option<mpsc::UnboundedReceiver<Msg>>,
    next_instance: u64,
    written: Option<Value>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Normally nothing runs here any more; this covers an aborted or panicked worker.
        for c in &self.ctrs {
            if let Some(r) = &c.run {
                signal_group(r.pgid, libc::SIGKILL);
            }
        }
        if self.ip_held {
            release_ip(self.ip);
        }
    }
}

#[derive(PartialEq, Eq)]
enum Flow {
    Continue,
    Done,
}

impl Worker {
    fn new(inner: Arc<Inner>, pod: Arc<Value>) -> Option<Self> {
        let (ns, name, uid) = pod_ids(&pod)?;
        let preferred = str_at(&pod, "/status/podIP").parse().ok();
        let ip = allocate_ip(preferred)?;
        let dir = inner
            .config
            .workdir
            .join("pods")
            .join(format!("{ns}_{name}_{uid}"));
        let init_specs = items(pod.pointer("/spec/initContainers"));
        let app_reason = if init_specs.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let mut ctrs: Vec<Ctr> = init_specs
            .iter()
            .map(|c| Ctr::new(c, true, "PodInitializing"))
            .collect();
        ctrs.extend(
            items(pod.pointer("/spec/containers"))
                .iter()
                .map(|c| Ctr::new(c, false, app_reason)),
        );
        let start_time = match str_at(&pod, "/status/startTime") {
            "" => time::now(),
            t => t.to_owned(),
        };
        let n_init = init_specs.len();
        let (tx, rx) = mpsc::unbounded_channel();
        Some(Self {
            inner,
            key: (ns, name),
            uid,
            pod,
            dir,
            ip,
            ip_held: true,
            start_time,
            n_init,
            ctrs,
            conditions: BTreeMap::new(),
            terminal: None,
            kill_deadline: None,
            killed: false,
            volume_error: None,
            tx,
            rx: Some(rx),
            next_instance: 0,
            written: None,
        })
    }

    fn ns(&self) -> &str {
        &self.key.0
    }

    fn name(&self) -> &str {
        &self.key.1
    }

    fn deleting(&self) -> bool {
        self.pod.pointer("/metadata/deletionTimestamp").is_some()
    }

    async fn run(mut self, mut pod_rx: watch::Receiver<Option<Arc<Value>>>) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        let mut nudge = self.inner.nudge.subscribe();
        loop {
            if self.sync() == Flow::Done {
                return;
            }
            let wake = self.next_wake();
            tokio::select! {
                r = pod_rx.changed() => {
                    let latest = if r.is_ok() { pod_rx.borrow_and_update().clone() } else { None };
                    match latest {
                        Some(p) => self.pod = p,
                        None => {
                            self.removed(&mut rx).await;
                            return;
                        }
                    }
                }
                Some(m) = rx.recv() => self.on_msg(m),
                Ok(()) = nudge.changed() => {}
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    fn sync(&mut self) -> Flow {
        let now = Instant::now();
        if self.deleting() {
            if self.sync_deleting(now) {
                return Flow::Done;
            }
        } else if self.terminal.is_none() {
            self.enforce_kill_deadlines(now);
            self.volume_error = self.setup_volumes().err();
            self.sync_containers(now);
            self.check_terminal();
        }
        self.write_status();
        self.publish();
        Flow::Continue
    }

    fn next_wake(&self) -> Instant {
        let now = Instant::now();
        let mut wake = now + Duration::from_secs(3600);
        if self.deleting() {
            if let (Some(d), false) = (self.kill_deadline, self.killed) {
                wake = wake.min(d);
            }
            return wake;
        }
        if self.terminal.is_some() {
            return wake;
        }
        for c in &self.ctrs {
            if let Some(k) = c.run.as_ref().and_then(|r| r.kill_at) {
                wake = wake.min(k);
            }
            if let CState::Waiting { reason, .. } = &c.state {
                match *reason {
                    "CrashLoopBackOff" => wake = wake.min(c.backoff_until.unwrap_or(now)),
                    "ErrImagePull" | "ImagePullBackOff" => {
                        wake = wake.min(c.pull_retry.map_or(now + RETRY, |(at, _)| at));
                    }
                    "CreateContainerConfigError" | "ContainerCreating" => {
                        wake = wake.min(now + RETRY)
                    }
                    // Waiting for an init container: its exit wakes the worker.
                    _ => {}
                }
            }
        }
        wake
    }

    fn enforce_kill_deadlines(&mut self, now: Instant) {
        for c in &mut self.ctrs {
            if let Some(r) = &mut c.run
                && r.kill_at.is_some_and(|k| now >= k)
            {
                r.kill_at = None;
                signal_group(r.pgid, libc::SIGKILL);
            }
        }
    }

    fn sync_containers(&mut self, now: Instant) {
        for i in 0..self.n_init {
            if self.ctrs[i].succeeded() {
                continue;
            }
            if self.ctrs[i].run.is_none() && matches!(self.ctrs[i].state, CState::Waiting { .. }) {
                self.try_start(i, now);
            }
            // App containers wait for every init container.
            return;
        }
        for i in self.n_init..self.ctrs.len() {
            let c = &mut self.ctrs[i];
            if c.run.is_none() {
                if let CState::Waiting {
                    reason: "PodInitializing",
                    ..
                } = c.state
                {
                    c.state = CState::Waiting {
                        reason: "ContainerCreating",
                        message: String::new(),
                    };
                }
                if matches!(c.state, CState::Waiting { .. }) {
                    self.try_start(i, now);
                }
            }
        }
    }

    fn check_terminal(&mut self) {
        if self.terminal.is_some() {
            return;
        }
        let init_failed = self.ctrs[..self.n_init]
            .iter()
            .any(|c| matches!(&c.state, CState::Terminated(t) if t.exit_code != 0));
        let app = &self.ctrs[self.n_init..];
        let all_done =
            !app.is_empty() && app.iter().all(|c| matches!(c.state, CState::Terminated(_)));
        if init_failed {
            self.terminal = Some("Failed");
        } else if all_done {
            self.terminal = Some(if app.iter().all(Ctr::succeeded) {
                "Succeeded"
            } else {
                "Failed"
            });
        }
        if self.terminal.is_some() && self.ip_held {
            // A terminal pod is not live: its address may go to another pod.
            release_ip(self.ip);
            self.ip_held = false;
        }
    }

    /// Returns true once the pod is removed.
    fn sync_deleting(&mut self, now: Instant) -> bool {
        if self.kill_deadline.is_none() {
            let grace = self
                .pod
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                .max(0);
            self.kill_deadline = Some(now + Duration::from_secs(grace.unsigned_abs()));
            for c in &mut self.ctrs {
                c.ready = false;
                c.backoff_until = None;
                if let Some(r) = &c.run {
                    signal_group(r.pgid, libc::SIGTERM);
                }
            }
        }
        if !self.killed && self.kill_deadline.is_some_and(|d| now >= d) {
            self.killed = true;
            for c in &self.ctrs {
                if let Some(r) = &c.run {
                    signal_group(r.pgid, libc::SIGKILL);
                }
            }
        }
        if self.ctrs.iter().any(|c| c.run.is_some()) {
            return false;
        }
        // Everything stopped: the final status, then the pod goes.
        if self.terminal.is_none() {
            let app = &self.ctrs[self.n_init..];
            self.terminal = Some(if app.iter().all(Ctr::succeeded) {
                "Succeeded"
            } else {
                "Failed"
            });
        }
        self.write_status();
        let ours = self
            .inner
            .store
            .get(&pods_key(), self.ns(), self.name())
            .is_some_and(|p| p["metadata"]["uid"].as_str() == Some(self.uid.as_str()));
        if ours {
            self.inner.store.remove(&pods_key(), self.ns(), self.name());
        }
        self.cleanup();
        true
    }

    /// The pod left the store outright (or the kubelet stops): kill at once, clean up.
    async fn removed(&mut self, rx: &mut mpsc::UnboundedReceiver<Msg>) {
        for c in &self.ctrs {
            if let Some(r) = &c.run {
                signal_group(r.pgid, libc::SIGKILL);
            }
        }
        // Let the exits come in so no process writes into the directory while it goes.
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.ctrs.iter().any(|c| c.run.is_some()) {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(m)) => self.on_msg(m),
                _ => break,
            }
        }
        self.cleanup();
    }

    fn cleanup(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("removing {}: {e}", self.dir.display());
        }
        let mut shared = self.inner.shared();
        if shared
            .pods
            .get(&self.key)
            .is_some_and(|p| p.uid == self.uid)
        {
            shared.pods.remove(&self.key);
        }
    }

    fn on_msg(&mut self, m: Msg) {
        let now = Instant::now();
        match m {
            Msg::Exited {
                idx,
                instance,
                code,
                signal,
            } => {
                let Some(c) = self.ctrs.get_mut(idx) else {
                    return;
                };
                if c.run.as_ref().map(|r| r.instance) != Some(instance) {
                    return;
                }
                let Some(run) = c.run.take() else {
                    return;
                };
                let exit_code = code.unwrap_or_else(|| 128 + signal.unwrap_or(0));
                let message = if exit_code != 0
                    && c.spec["terminationMessagePolicy"] == "FallbackToLogsOnError"
                {
                    c.latest_log
                        .map(|n| log_tail(&log_file(&self.dir, &c.name, n)))
                        .unwrap_or_default()
                } else {
                    String::new()
                };
                let term = Term {
                    exit_code,
                    signal,
                    reason: if exit_code == 0 { "Completed" } else { "Error" },
                    message,
                    started_at: run.started_at.clone(),
                    finished_at: time::now(),
                    container_id: run.container_id.clone(),
                };
                self.after_exit(idx, term, now.saturating_duration_since(run.since), now);
            }
            Msg::Probe {
                idx,
                instance,
                event,
            } => {
                let grace = self.kill_grace(idx, event);
                let Some(c) = self.ctrs.get_mut(idx) else {
                    return;
                };
                let Some(run) = c.run.as_mut().filter(|r| r.instance == instance) else {
                    return;
                };
                match event {
                    ProbeEvent::Ready(r) => c.ready = r && c.started,
                    ProbeEvent::Started => {
                        c.started = true;
                        run.started_tx.send_replace(true);
                        if !run.has_readiness && !c.init {
                            c.ready = true;
                        }
                    }
                    ProbeEvent::Failed(kind) => {
                        tracing::info!(
                            "{kind} probe of container {} in pod {}/{} failed; killing it",
                            c.name,
                            self.key.0,
                            self.key.1
                        );
                        c.ready = false;
                        signal_group(run.pgid, libc::SIGTERM);
                        run.kill_at = Some(now + grace);
                    }
                }
            }
        }
    }

    /// How long a container killed for a failed probe gets between SIGTERM and SIGKILL.
    fn kill_grace(&self, idx: usize, event: ProbeEvent) -> Duration {
        let probe = match event {
            ProbeEvent::Failed("Startup") => "startupProbe",
            _ => "livenessProbe",
        };
        let secs = self
            .ctrs
            .get(idx)
            .and_then(|c| c.spec[probe]["terminationGracePeriodSeconds"].as_i64())
            .or_else(|| {
                self.pod
                    .pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30)
            .max(0);
        Duration::from_secs(secs.unsigned_abs())
    }

    fn after_exit(&mut self, idx: usize, term: Term, ran: Duration, now: Instant) {
        let policy = restart_policy(&self.pod);
        let stopping = self.deleting() || self.terminal.is_some();
        let (ns, name, uid) = (self.key.0.clone(), self.key.1.clone(), self.uid.clone());
        let c = &mut self.ctrs[idx];
        c.ready = false;
        c.started = false;
        let restart = !stopping
            && if c.init {
                term.exit_code != 0 && policy != Policy::Never
            } else {
                match policy {
                    Policy::Always => true,
                    Policy::OnFailure => term.exit_code != 0,
                    Policy::Never => false,
                }
            };
        if !restart {
            c.state = CState::Terminated(term);
            return;
        }
        if ran >= BACKOFF_RESET {
            c.crashes = 0;
        }
        let delay = backoff(c.crashes);
        c.crashes = c.crashes.saturating_add(1);
        c.backoff_until = Some(now + delay);
        c.state = CState::Waiting {
            reason: "CrashLoopBackOff",
            message: format!(
                "back-off {delay:?} restarting failed container={} pod={name}_{ns}({uid})",
                c.name
            ),
        };
        c.last = Some(term);
    }

    fn try_start(&mut self, idx: usize, now: Instant) {
        if self.ctrs[idx].backoff_until.is_some_and(|b| now < b) {
            return;
        }
        let generation = *self.inner.nudge.borrow();
        if let Some((at, g)) = self.ctrs[idx].pull_retry
            && now < at
            && g == generation
        {
            // Our own status writes wake the worker too: pull again only when due or
            // when a fault was lifted.
            return;
        }
        match self.prepare(idx) {
            Ok(launch) => {
                let c = &mut self.ctrs[idx];
                c.pull_failures = 0;
                c.pull_retry = None;
                c.backoff_until = None;
                self.launch(idx, launch, now);
            }
            Err((reason, message)) => {
                self.ctrs[idx].state = CState::Waiting { reason, message };
            }
        }
    }

    /// Everything a start needs; a failure is the waiting reason and message.
    fn prepare(&mut self, idx: usize) -> Result<Launch, (&'static str, String)> {
        let spec = self.ctrs[idx].spec.clone();
        let image = spec["image"].as_str().unwrap_or_default();
        let exe = match self.resolve_image(image) {
            Ok(exe) => exe,
            Err(message) => {
                let c = &mut self.ctrs[idx];
                c.pull_failures = c.pull_failures.saturating_add(1);
                c.pull_retry = Some((Instant::now() + RETRY, *self.inner.nudge.borrow()));
                let reason = if c.pull_failures == 1 {
                    "ErrImagePull"
                } else {
                    "ImagePullBackOff"
                };
                let message = if reason == "ErrImagePull" {
                    message
                } else {
                    format!("Back-off pulling image \"{image}\"")
                };
                return Err((reason, message));
            }
        };
        if let Some(e) = &self.volume_error {
            return Err(("ContainerCreating", e.clone()));
        }
        let (env, declared) = self
            .build_env(&spec)
            .map_err(|e| ("CreateContainerConfigError", e))?;
        let mounts = self.mounts(&spec);
        let word = |s: &String| rewrite(&expand(s, &declared), &mounts);
        let command: Vec<String> = strings(&spec["command"]).iter().map(word).collect();
        let args: Vec<String> = strings(&spec["args"]).iter().map(word).collect();
        let (program, args) = match command.split_first() {
            Some((first, rest)) => (first.clone(), rest.iter().cloned().chain(args).collect()),
            None => (exe.to_string_lossy().into_owned(), args),
        };
        let env = env
            .into_iter()
            .map(|(k, v)| (k, rewrite(&v, &mounts)))
            .collect();
        let cwd = match spec["workingDir"].as_str() {
            Some(w) if !w.is_empty() => {
                let w = PathBuf::from(rewrite(w, &mounts));
                if w.is_dir() { w } else { self.dir.clone() }
            }
            _ => self.dir.clone(),
        };
        Ok(Launch {
            program,
            args,
            env,
            cwd,
            mounts,
            image_id: format!("testcluster://{}", exe.display()),
        })
    }

    fn launch(&mut self, idx: usize, l: Launch, now: Instant) {
        let instance = self.next_instance;
        self.next_instance += 1;
        let dir = self.dir.clone();
        let c = &mut self.ctrs[idx];
        let n = match c.latest_log {
            None => 0,
            Some(_) => {
                c.restart_count = c.restart_count.saturating_add(1);
                c.restart_count
            }
        };
        c.latest_log = Some(n);
        c.image_id = l.image_id.clone();
        let log = log_file(&dir, &c.name, n);
        if let Some(old) = n.checked_sub(2) {
            let _ = std::fs::remove_file(log_file(&dir, &c.name, old));
        }
        let started_at = time::now();
        let spawned = open_log(&log).and_then(|file| {
            let err = file.try_clone()?;
            let mut cmd = tokio::process::Command::new(&l.program);
            cmd.args(&l.args)
                .env_clear()
                .envs(l.env.iter().map(|(k, v)| (k, v)))
                .current_dir(&l.cwd)
                .stdin(Stdio::null())
                .stdout(file)
                .stderr(err)
                .process_group(0)
                .kill_on_drop(true);
            cmd.spawn()
        });
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let message = format!("failed to start {}: {e}", l.program);
                if let Ok(mut f) = open_log(&log) {
                    let _ = writeln!(f, "{message}");
                }
                let term = Term {
                    exit_code: 128,
                    signal: None,
                    reason: "StartError",
                    message,
                    started_at: started_at.clone(),
                    finished_at: started_at,
                    container_id: String::new(),
                };
                self.after_exit(idx, term, Duration::ZERO, now);
                return;
            }
        };
        let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        self.inner.register_group(pgid);
        let container_id = format!("testcluster://{}-{}-{n}", self.uid, c.name);
        {
            let inner = self.inner.clone();
            let tx = self.tx.clone();
            tokio::spawn(async move {
                let status = child.wait().await;
                // Whatever the main process left in its group goes with it, as a container's
                // cgroup would.
                signal_group(pgid, libc::SIGKILL);
                inner.deregister_group(pgid);
                let (code, signal) = match status {
                    Ok(s) => (s.code(), s.signal()),
                    Err(_) => (None, Some(libc::SIGKILL)),
                };
                let _ = tx.send(Msg::Exited {
                    idx,
                    instance,
                    code,
                    signal,
                });
            });
        }
        let spec = c.spec.clone();
        let has_startup = spec.get("startupProbe").is_some_and(Value::is_object);
        let has_readiness = spec.get("readinessProbe").is_some_and(Value::is_object);
        let (started_tx, started_rx) = watch::channel(!has_startup);
        let ctx = Arc::new(ProbeCtx {
            inner: self.inner.clone(),
            pod_ip: self.ip,
            ports: container_ports(&spec),
            exec: ExecCtx {
                env: l.env,
                cwd: l.cwd,
                mounts: l.mounts,
            },
            idx,
            instance,
            tx: self.tx.clone(),
            since: now,
        });
        let mut probes = Vec::new();
        if !c.init {
            for (field, kind) in [
                ("startupProbe", ProbeKind::Startup),
                ("readinessProbe", ProbeKind::Readiness),
                ("livenessProbe", ProbeKind::Liveness),
            ] {
                if let Some(p) = spec.get(field).filter(|p| p.is_object()) {
                    probes.push(tokio::spawn(probe_loop(
                        kind,
                        p.clone(),
                        ctx.clone(),
                        started_rx.clone(),
                    )));
                }
            }
        }
        c.state = CState::Running {
            started_at: started_at.clone(),
            container_id: container_id.clone(),
        };
        c.started = !has_startup;
        c.ready = !c.init && !has_startup && !has_readiness;
        c.run = Some(Run {
            instance,
            pgid,
            since: now,
            started_at,
            container_id,
            started_tx,
            probes,
            has_readiness,
            kill_at: None,
        });
    }

    fn resolve_image(&self, image: &str) -> Result<PathBuf, String> {
        let name = image_name(image);
        if self.inner.shared().unpullable.contains(name) {
            return Err(format!(
                "failed to pull image \"{image}\": pulls of this image fail (fault)"
            ));
        }
        let images = &self.inner.config.images;
        let found = images.get(name).or_else(|| {
            let short = name
                .strip_prefix("docker.io/")
                .or_else(|| name.strip_prefix("index.docker.io/"))?;
            images
                .get(short)
                .or_else(|| images.get(short.strip_prefix("library/")?))
        });
        found.cloned().ok_or_else(|| {
            format!("failed to pull and unpack image \"{image}\": no executable is configured for image \"{name}\"")
        })
    }

    // -- environment ----------------------------------------------------------------------

    /// The container's environment and the variables `$(VAR)` may refer to.
    fn build_env(&self, c: &Value) -> Result<(Vec<(String, String)>, Declared), String> {
        let mut env = EnvList::default();
        let mut declared: HashMap<String, String> = HashMap::new();
        for k in ["PATH", "HOME", "LANG"] {
            if let Ok(v) = std::env::var(k) {
                env.set(k, v);
            }
        }
        env.set("HOSTNAME", self.name().to_owned());
        if self.automount() {
            env.set(
                "KUBECONFIG",
                self.dir.join("kubeconfig").to_string_lossy().into_owned(),
            );
        }
        fn define(env: &mut EnvList, declared: &mut HashMap<String, String>, k: String, v: String) {
            declared.insert(k.clone(), v.clone());
            env.set(&k, v);
        }
        for (k, v) in self.service_env() {
            define(&mut env, &mut declared, k, v);
        }
        for src in items(c.get("envFrom")) {
            let prefix = src["prefix"].as_str().unwrap_or_default();
            let (data, what, r) = if let Some(r) = src.get("configMapRef") {
                (
                    self.configmap_data(r["name"].as_str().unwrap_or_default()),
                    "configmap",
                    r,
                )
            } else if let Some(r) = src.get("secretRef") {
                (
                    self.secret_data(r["name"].as_str().unwrap_or_default()),
                    "secret",
                    r,
                )
            } else {
                continue;
            };
            let name = r["name"].as_str().unwrap_or_default();
            match data {
                Some(data) => {
                    for (k, v) in data {
                        let v = String::from_utf8_lossy(&v).into_owned();
                        define(&mut env, &mut declared, format!("{prefix}{k}"), v);
                    }
                }
                None if r["optional"].as_bool() == Some(true) => {}
                None => return Err(format!("{what} \"{name}\" not found")),
            }
        }
        for e in items(c.get("env")) {
            let Some(name) = e["name"].as_str() else {
                continue;
            };
            let value = if let Some(v) = e.get("valueFrom").filter(|v| v.is_object()) {
                match self.value_from(c, v)? {
                    Some(v) => v,
                    // An optional source that is missing leaves the variable unset.
                    None => continue,
                }
            } else {
                expand(e["value"].as_str().unwrap_or_default(), &declared)
            };
            define(&mut env, &mut declared, name.to_owned(), value);
        }
        Ok((env.vars, declared))
    }

    fn value_from(&self, c: &Value, v: &Value) -> Result<Option<String>, String> {
        let ns = self.ns();
        let key_ref =
            |r: &Value, what: &str, kind: &str, data: Option<BTreeMap<String, Vec<u8>>>| {
                let name = r["name"].as_str().unwrap_or_default();
                let key = r["key"].as_str().unwrap_or_default();
                let optional = r["optional"].as_bool() == Some(true);
                match data {
                    None if optional => Ok(None),
                    None => Err(format!("{what} \"{name}\" not found")),
                    Some(d) => match d.get(key) {
                        Some(v) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
                        None if optional => Ok(None),
                        None => Err(format!("couldn't find key {key} in {kind} {ns}/{name}")),
                    },
                }
            };
        if let Some(r) = v.get("configMapKeyRef") {
            let data = self.configmap_data(r["name"].as_str().unwrap_or_default());
            return key_ref(r, "configmap", "ConfigMap", data);
        }
        if let Some(r) = v.get("secretKeyRef") {
            let data = self.secret_data(r["name"].as_str().unwrap_or_default());
            return key_ref(r, "secret", "Secret", data);
        }
        if let Some(r) = v.get("fieldRef") {
            return self
                .pod_field(r["fieldPath"].as_str().unwrap_or_default())
                .map(Some);
        }
        if let Some(r) = v.get("resourceFieldRef") {
            let container = match r["containerName"].as_str() {
                Some(n) if !n.is_empty() => self.container_spec(n).unwrap_or(&Value::Null),
                _ => c,
            };
            return Ok(Some(resource_value(container, r)));
        }
        Ok(Some(String::new()))
    }

    fn container_spec(&self, name: &str) -> Option<&Value> {
        self.ctrs.iter().find(|c| c.name == name).map(|c| &c.spec)
    }

    /// A downward-API field of the pod.
    fn pod_field(&self, path: &str) -> Result<String, String> {
        let meta = &self.pod["metadata"];
        let subscript = |prefix: &str| {
            let rest = path
                .strip_prefix(prefix)?
                .strip_prefix('[')?
                .strip_suffix(']')?;
            rest.strip_prefix('\'')
                .and_then(|r| r.strip_suffix('\''))
                .or_else(|| rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
        };
        Ok(match path {
            "metadata.name" => self.name().to_owned(),
            "metadata.namespace" => self.ns().to_owned(),
            "metadata.uid" => self.uid.clone(),
            "metadata.labels" => format_map(&meta["labels"]),
            "metadata.annotations" => format_map(&meta["annotations"]),
            "spec.nodeName" => str_at(&self.pod, "/spec/nodeName").to_owned(),
            "spec.serviceAccountName" => self.service_account().to_owned(),
            "status.podIP" | "status.podIPs" => self.ip.to_string(),
            "status.hostIP" | "status.hostIPs" => HOST_IP.to_owned(),
            _ => {
                if let Some(k) = subscript("metadata.labels") {
                    meta["labels"][k].as_str().unwrap_or_default().to_owned()
                } else if let Some(k) = subscript("metadata.annotations") {
                    meta["annotations"][k]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                } else {
                    return Err(format!("unsupported fieldPath: {path}"));
                }
            }
        })
    }

    fn service_account(&self) -> &str {
        match str_at(&self.pod, "/spec/serviceAccountName") {
            "" => "default",
            sa => sa,
        }
    }

    fn automount(&self) -> bool {
        self.pod
            .pointer("/spec/automountServiceAccountToken")
            .and_then(Value::as_bool)
            != Some(false)
    }

    /// Service links: the namespace's Services that exist now (unless
    /// `enableServiceLinks: false`), and always the API server's `default/kubernetes`.
    fn service_env(&self) -> Vec<(String, String)> {
        let key = ResKey::new("", "services");
        let mut svcs = Vec::new();
        if self
            .pod
            .pointer("/spec/enableServiceLinks")
            .and_then(Value::as_bool)
            != Some(false)
        {
            svcs = self.inner.store.list(&key, Some(self.ns())).0;
        }
        let has_api = svcs
            .iter()
            .any(|s| s["metadata"]["name"] == "kubernetes" && self.ns() == "default");
        if !has_api && let Some(k) = self.inner.store.get(&key, "default", "kubernetes") {
            svcs.push(k);
        }
        svcs.iter().flat_map(|s| service_vars(s)).collect()
    }

    fn configmap_data(&self, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        let cm = self
            .inner
            .store
            .get(&ResKey::new("", "configmaps"), self.ns(), name)?;
        let mut data: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for (k, v) in cm["data"].as_object().into_iter().flatten() {
            data.insert(
                k.clone(),
                v.as_str().unwrap_or_default().as_bytes().to_vec(),
            );
        }
        for (k, v) in cm["binaryData"].as_object().into_iter().flatten() {
            if let Some(b) = v
                .as_str()
                .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            {
                data.insert(k.clone(), b);
            }
        }
        Some(data)
    }

    fn secret_data(&self, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        let s = self
            .inner
            .store
            .get(&ResKey::new("", "secrets"), self.ns(), name)?;
        let mut data = BTreeMap::new();
        for (k, v) in s["data"].as_object().into_iter().flatten() {
            if let Some(b) = v
                .as_str()
                .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            {
                data.insert(k.clone(), b);
            }
        }
        Some(data)
    }

    // -- volumes ---------------------------------------------------------------------------

    fn volumes_dir(&self) -> PathBuf {
        self.dir.join("volumes")
    }

    /// Where a volume's files are on the host.
    fn volume_host_dir(&self, vol: &Value) -> PathBuf {
        match vol.pointer("/hostPath/path").and_then(Value::as_str) {
            Some(p) => PathBuf::from(p),
            None => self
                .volumes_dir()
                .join(vol["name"].as_str().unwrap_or_default()),
        }
    }

    /// Creates and refreshes the pod's volumes, its kubeconfig and ServiceAccount files.
    fn setup_volumes(&self) -> Result<(), String> {
        let fail =
            |vol: &str, e: String| format!("MountVolume.SetUp failed for volume \"{vol}\" : {e}");
        std::fs::create_dir_all(self.volumes_dir()).map_err(|e| fail("", e.to_string()))?;
        for vol in items(self.pod.pointer("/spec/volumes")) {
            let name = vol["name"].as_str().unwrap_or_default();
            if name.is_empty() || !safe_relative(name) {
                continue;
            }
            let dir = self.volumes_dir().join(name);
            let io = |e: std::io::Error| fail(name, e.to_string());
            let files = if let Some(src) = vol.get("configMap") {
                Some(self.configmap_files(src, file_mode(&src["defaultMode"]))?)
            } else if let Some(src) = vol.get("secret") {
                let secret = src["secretName"].as_str().unwrap_or_default();
                Some(self.secret_files(secret, src, file_mode(&src["defaultMode"]))?)
            } else if let Some(src) = vol.get("downwardAPI") {
                Some(self.downward_files(src, file_mode(&src["defaultMode"]))?)
            } else if let Some(src) = vol.get("projected") {
                Some(self.projected_files(src).map_err(|e| fail(name, e))?)
            } else if let Some(claim) = vol
                .pointer("/persistentVolumeClaim/claimName")
                .and_then(Value::as_str)
            {
                let target = self
                    .inner
                    .config
                    .workdir
                    .join("pvcs")
                    .join(self.ns())
                    .join(claim);
                std::fs::create_dir_all(&target).map_err(io)?;
                if std::fs::symlink_metadata(&dir).is_err() {
                    std::os::unix::fs::symlink(&target, &dir).map_err(io)?;
                }
                None
            } else if let Some(h) = vol.get("hostPath") {
                let path = h["path"].as_str().unwrap_or_default();
                match h["type"].as_str().unwrap_or_default() {
                    "DirectoryOrCreate" => std::fs::create_dir_all(path).map_err(io)?,
                    "FileOrCreate" if !Path::new(path).exists() => {
                        std::fs::write(path, b"").map_err(io)?;
                    }
                    _ => {}
                }
                None
            } else {
                // emptyDir, and any other kind as an empty directory.
                std::fs::create_dir_all(&dir).map_err(io)?;
                None
            };
            if let Some(files) = files {
                write_projection(&dir, &files).map_err(io)?;
            }
        }
        if self.automount() {
            let token = self
                .inner
                .tokens
                .for_service_account(self.ns(), self.service_account());
            let files = vec![
                file("token", token.clone().into_bytes(), 0o644),
                file("namespace", self.ns().as_bytes().to_vec(), 0o644),
                file(
                    "ca.crt",
                    self.inner.config.ca_pem.clone().into_bytes(),
                    0o644,
                ),
            ];
            let io = |e: std::io::Error| fail(SA_VOLUME, e.to_string());
            write_projection(&self.volumes_dir().join(SA_VOLUME), &files).map_err(io)?;
            let kubeconfig = crate::cluster::kubeconfig_yaml(
                &self.inner.config.api_server,
                &self.inner.config.ca_pem,
                &token,
                self.ns(),
            );
            write_if_changed(&self.dir.join("kubeconfig"), kubeconfig.as_bytes(), 0o600)
                .map_err(io)?;
        }
        Ok(())
    }

    fn configmap_files(&self, src: &Value, mode: u32) -> Result<Vec<FileSpec>, String> {
        let name = src["name"].as_str().unwrap_or_default();
        let optional = src["optional"].as_bool() == Some(true);
        match self.configmap_data(name) {
            Some(data) => select_items(data, src.get("items"), mode, optional, "configmap"),
            None if optional => Ok(Vec::new()),
            None => Err(format!("configmap \"{name}\" not found")),
        }
    }

    fn secret_files(&self, name: &str, src: &Value, mode: u32) -> Result<Vec<FileSpec>, String> {
        let optional = src["optional"].as_bool() == Some(true);
        match self.secret_data(name) {
            Some(data) => select_items(data, src.get("items"), mode, optional, "secret"),
            None if optional => Ok(Vec::new()),
            None => Err(format!("secret \"{name}\" not found")),
        }
    }

    fn downward_files(&self, src: &Value, mode: u32) -> Result<Vec<FileSpec>, String> {
        let mut out = Vec::new();
        for it in items(src.get("items")) {
            let path = it["path"].as_str().unwrap_or_default();
            let value = if let Some(f) = it.get("fieldRef") {
                self.pod_field(f["fieldPath"].as_str().unwrap_or_default())?
            } else if let Some(r) = it.get("resourceFieldRef") {
                let c = self.container_spec(r["containerName"].as_str().unwrap_or_default());
                resource_value(c.unwrap_or(&Value::Null), r)
            } else {
                continue;
            };
            out.push(file(path, value.into_bytes(), item_mode(it, mode)));
        }
        Ok(out)
    }

    fn projected_files(&self, src: &Value) -> Result<Vec<FileSpec>, String> {
        let mode = file_mode(&src["defaultMode"]);
        let mut out = Vec::new();
        for s in items(src.get("sources")) {
            if let Some(cm) = s.get("configMap") {
                out.extend(self.configmap_files(cm, mode)?);
            } else if let Some(sec) = s.get("secret") {
                out.extend(self.secret_files(
                    sec["name"].as_str().unwrap_or_default(),
                    sec,
                    mode,
                )?);
            } else if let Some(d) = s.get("downwardAPI") {
                out.extend(self.downward_files(d, mode)?);
            } else if let Some(t) = s.get("serviceAccountToken") {
                let token = self
                    .inner
                    .tokens
                    .for_service_account(self.ns(), self.service_account());
                out.push(file(
                    t["path"].as_str().unwrap_or("token"),
                    token.into_bytes(),
                    mode,
                ));
            }
        }
        Ok(out)
    }

    /// The container's mounts, longest path first (the most specific wins).
    fn mounts(&self, c: &Value) -> Vec<Mount> {
        let vols = items(self.pod.pointer("/spec/volumes"));
        let mut out = Vec::new();
        for vm in items(c.get("volumeMounts")) {
            let path = vm["mountPath"]
                .as_str()
                .unwrap_or_default()
                .trim_end_matches('/');
            let name = vm["name"].as_str().unwrap_or_default();
            let Some(vol) = vols.iter().find(|v| v["name"].as_str() == Some(name)) else {
                continue;
            };
            if path.is_empty() {
                continue;
            }
            let base = self.volume_host_dir(vol);
            let host = match vm["subPath"].as_str() {
                Some(sub) if !sub.is_empty() && safe_relative(sub) => {
                    let host = base.join(sub);
                    let writable = ["emptyDir", "persistentVolumeClaim", "hostPath"]
                        .iter()
                        .any(|k| vol.get(*k).is_some());
                    if writable && !host.exists() {
                        let _ = std::fs::create_dir_all(&host);
                    }
                    host
                }
                _ => base,
            };
            out.push(Mount {
                path: path.to_owned(),
                host,
            });
        }
        if self.automount() && !out.iter().any(|m| m.path == SA_MOUNT) {
            out.push(Mount {
                path: SA_MOUNT.to_owned(),
                host: self.volumes_dir().join(SA_VOLUME),
            });
        }
        out.sort_by_key(|m| std::cmp::Reverse(m.path.len()));
        out
    }

    // -- status ------------------------------------------------------------------------------

    fn write_status(&mut self) {
        let status = self.status();
        if self.written.as_ref() == Some(&status) {
            return;
        }
        let uid = self.uid.clone();
        let has_init = self.n_init > 0;
        let st = status.clone();
        let r = self
            .inner
            .store
            .modify(&pods_key(), &self.key.0, &self.key.1, false, |p| {
                let mut p = p.clone();
                if p["metadata"]["uid"].as_str() != Some(uid.as_str()) {
                    return Ok(p);
                }
                if let Some(s) = child_object(&mut p, "status") {
                    for (k, v) in st.as_object().into_iter().flatten() {
                        s.insert(k.clone(), v.clone());
                    }
                    if !has_init {
                        s.remove("initContainerStatuses");
                    }
                }
                Ok(p)
            });
        match r {
            Ok(_) => self.written = Some(status),
            Err(e) => tracing::debug!("writing status of pod {}/{}: {e}", self.key.0, self.key.1),
        }
    }

    fn status(&mut self) -> Value {
        let override_ready = self.inner.shared().ready_override.get(&self.key).copied();
        let deleting = self.deleting();
        let ready_of = |c: &Ctr| {
            !deleting
                && match override_ready {
                    Some(r) => r && c.run.is_some(),
                    None => c.ready,
                }
        };
        let init = &self.ctrs[..self.n_init];
        let app = &self.ctrs[self.n_init..];
        let init_done = init.iter().all(Ctr::succeeded);
        let containers_ready =
            self.terminal.is_none() && !app.is_empty() && app.iter().all(ready_of);
        let unready: Vec<&str> = app
            .iter()
            .filter(|c| !ready_of(c))
            .map(|c| c.name.as_str())
            .collect();
        let incomplete: Vec<&str> = init
            .iter()
            .filter(|c| !c.succeeded())
            .map(|c| c.name.as_str())
            .collect();
        let not_ready = match self.terminal {
            Some(_) => ("PodCompleted", String::new()),
            None => (
                "ContainersNotReady",
                format!("containers with unready status: [{}]", unready.join(" ")),
            ),
        };
        let not_initialized = match self.terminal {
            Some(_) if incomplete.is_empty() => ("PodCompleted", String::new()),
            _ => (
                "ContainersNotInitialized",
                format!(
                    "containers with incomplete status: [{}]",
                    incomplete.join(" ")
                ),
            ),
        };
        let wanted: [(&'static str, bool, (&str, String)); 5] = [
            ("PodReadyToStartContainers", true, ("", String::new())),
            ("Initialized", init_done, not_initialized),
            ("Ready", containers_ready, not_ready.clone()),
            ("ContainersReady", containers_ready, not_ready),
            ("PodScheduled", true, ("", String::new())),
        ];
        let init_statuses: Vec<Value> = init
            .iter()
            .map(|c| container_status(c, c.succeeded()))
            .collect();
        let app_statuses: Vec<Value> = app
            .iter()
            .map(|c| container_status(c, ready_of(c)))
            .collect();
        let phase = self.phase();
        let now = time::now();
        let mut conditions = Vec::new();
        for (type_, status, (reason, message)) in wanted {
            let entry = self
                .conditions
                .entry(type_)
                .or_insert_with(|| (status, now.clone()));
            if entry.0 != status {
                *entry = (status, now.clone());
            }
            let mut c = json!({
                "type": type_,
                "status": if status { "True" } else { "False" },
                "lastProbeTime": null,
                "lastTransitionTime": entry.1,
            });
            if !status && !reason.is_empty() {
                c["reason"] = Value::from(reason);
                if !message.is_empty() {
                    c["message"] = Value::from(message);
                }
            }
            conditions.push(c);
        }
        let ip = self.ip.to_string();
        let mut status = json!({
            "phase": phase,
            "conditions": conditions,
            "hostIP": HOST_IP,
            "hostIPs": [{"ip": HOST_IP}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": self.start_time,
            "qosClass": qos_class(&self.pod),
            "containerStatuses": app_statuses,
        });
        if self.n_init > 0 {
            status["initContainerStatuses"] = Value::from(init_statuses);
        }
        status
    }

    /// The kubelet's `getPhase`.
    fn phase(&self) -> &'static str {
        if let Some(t) = self.terminal {
            return t;
        }
        if !self.ctrs[..self.n_init].iter().all(Ctr::succeeded) {
            return "Pending";
        }
        let (mut running, mut waiting, mut stopped) = (0, 0, 0);
        for c in &self.ctrs[self.n_init..] {
            match c.state {
                CState::Running { .. } => running += 1,
                CState::Terminated(_) => stopped += 1,
                CState::Waiting { .. } if c.last.is_some() => stopped += 1,
                CState::Waiting { .. } => waiting += 1,
            }
        }
        if waiting > 0 {
            "Pending"
        } else if running > 0 || stopped > 0 {
            // Stopped containers of a non-terminal pod are restarting.
            "Running"
        } else {
            "Pending"
        }
    }

    fn publish(&self) {
        let default_container = self
            .pod
            .pointer("/metadata/annotations/kubectl.kubernetes.io~1default-container")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| self.ctrs.get(self.n_init).map(|c| c.name.clone()))
            .unwrap_or_default();
        let info = PodInfo {
            uid: self.uid.clone(),
            dir: self.dir.clone(),
            default_container,
            containers: self
                .ctrs
                .iter()
                .map(|c| ContainerInfo {
                    name: c.name.clone(),
                    latest: c.latest_log,
                    previous: c.previous_log(),
                    pgid: c.run.as_ref().map(|r| r.pgid),
                })
                .collect(),
        };
        self.inner.shared().pods.insert(self.key.clone(), info);
    }
}

fn backoff(crashes: u32) -> Duration {
    BACKOFF_START
        .saturating_mul(1u32 << crashes.min(16))
        .min(BACKOFF_MAX)
}

fn open_log(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

fn container_status(c: &Ctr, ready: bool) -> Value {
    let state = match &c.state {
        CState::Waiting { reason, message } => {
            let mut w = json!({"reason": reason});
            if !message.is_empty() {
                w["message"] = Value::from(message.clone());
            }
            json!({"waiting": w})
        }
        CState::Running { started_at, .. } => json!({"running": {"startedAt": started_at}}),
        CState::Terminated(t) => json!({"terminated": term_json(t)}),
    };
    let mut s = json!({
        "name": c.name,
        "image": c.spec["image"].as_str().unwrap_or_default(),
        "imageID": c.image_id,
        "ready": ready,
        "started": c.started && c.run.is_some(),
        "restartCount": c.restart_count,
        "state": state,
        "lastState": c.last.as_ref().map_or_else(|| json!({}), |t| json!({"terminated": term_json(t)})),
    });
    let id = match &c.state {
        CState::Running { container_id, .. } => Some(container_id.as_str()),
        CState::Terminated(t) => Some(t.container_id.as_str()),
        CState::Waiting { .. } => None,
    };
    if let Some(id) = id.filter(|i| !i.is_empty()) {
        s["containerID"] = Value::from(id);
    }
    s
}

fn term_json(t: &Term) -> Value {
    let mut v = json!({
        "exitCode": t.exit_code,
        "reason": t.reason,
        "startedAt": t.started_at,
        "finishedAt": t.finished_at,
    });
    if let Some(s) = t.signal {
        v["signal"] = Value::from(s);
    }
    if !t.message.is_empty() {
        v["message"] = Value::from(t.message.clone());
    }
    if !t.container_id.is_empty() {
        v["containerID"] = Value::from(t.container_id.clone());
    }
    v
}

/// BestEffort without requests or limits, Guaranteed when every container's cpu and memory
/// limits are set and requests (if given) equal them, else Burstable.
fn qos_class(pod: &Value) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    let all = items(pod.pointer("/spec/containers"))
        .iter()
        .chain(items(pod.pointer("/spec/initContainers")));
    for c in all {
        for r in ["cpu", "memory"] {
            let limit = c.pointer(&format!("/resources/limits/{r}"));
            let request = c.pointer(&format!("/resources/requests/{r}"));
            any |= limit.is_some() || request.is_some();
            match limit {
                None => guaranteed = false,
                Some(l) => {
                    if request.is_some_and(|q| quantity_of(q) != quantity_of(l)) {
                        guaranteed = false;
                    }
                }
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn quantity_of(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => parse_quantity(s),
        _ => None,
    }
}

/// A Kubernetes quantity in base units (`500m` = 0.5, `64Mi` = 67108864).
fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e => 10f64.powi(e.strip_prefix(['e', 'E'])?.parse().ok()?),
    };
    Some(n * mult)
}

/// `resourceFieldRef`: the container's limit or request divided by `divisor`, rounded up;
/// "0" when not set.
fn resource_value(container: &Value, r: &Value) -> String {
    let resource = r["resource"].as_str().unwrap_or_default();
    let Some((kind, name)) = resource.split_once('.') else {
        return "0".into();
    };
    let Some(v) = container
        .pointer(&format!("/resources/{kind}/{name}"))
        .and_then(quantity_of)
    else {
        return "0".into();
    };
    let divisor = quantity_of(&r["divisor"])
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    let x = v / divisor;
    let rounded = x.round();
    // 0.5 / 0.001 is 500.00000000000006: do not let float noise round it up.
    let n = if (x - rounded).abs() <= 1e-9 * x.abs().max(1.0) {
        rounded
    } else {
        x.ceil()
    };
    format!("{n:.0}")
}

fn container_ports(spec: &Value) -> Vec<(String, u16)> {
    items(spec.get("ports"))
        .iter()
        .filter_map(|p| {
            let port = u16::try_from(p["containerPort"].as_u64()?).ok()?;
            Some((p["name"].as_str().unwrap_or_default().to_owned(), port))
        })
        .collect()
}

/// The Docker-links style variables of one Service.
fn service_vars(svc: &Value) -> Vec<(String, String)> {
    let ip = str_at(svc, "/spec/clusterIP");
    let ports = items(svc.pointer("/spec/ports"));
    if ip.is_empty() || ip == "None" || ports.is_empty() {
        return Vec::new();
    }
    let prefix = str_at(svc, "/metadata/name")
        .to_uppercase()
        .replace('-', "_");
    let port_of = |p: &Value| p["port"].as_u64().unwrap_or(0);
    let proto_of = |p: &Value| p["protocol"].as_str().unwrap_or("TCP").to_owned();
    let mut out = vec![
        (format!("{prefix}_SERVICE_HOST"), ip.to_owned()),
        (
            format!("{prefix}_SERVICE_PORT"),
            port_of(&ports[0]).to_string(),
        ),
    ];
    for p in ports {
        if let Some(n) = p["name"].as_str().filter(|n| !n.is_empty()) {
            out.push((
                format!(
                    "{prefix}_SERVICE_PORT_{}",
                    n.to_uppercase().replace('-', "_")
                ),
                port_of(p).to_string(),
            ));
        }
    }
    let first = &ports[0];
    out.push((
        format!("{prefix}_PORT"),
        format!(
            "{}://{ip}:{}",
            proto_of(first).to_lowercase(),
            port_of(first)
        ),
    ));
    for p in ports {
        let (port, proto) = (port_of(p), proto_of(p));
        let base = format!("{prefix}_PORT_{port}_{}", proto.to_uppercase());
        let lower = proto.to_lowercase();
        out.push((base.clone(), format!("{lower}://{ip}:{port}")));
        out.push((format!("{base}_PROTO"), lower));
        out.push((format!("{base}_PORT"), port.to_string()));
        out.push((format!("{base}_ADDR"), ip.to_owned()));
    }
    out
}

/// `k="v"` lines, as the downward API formats labels and annotations.
fn format_map(m: &Value) -> String {
    let mut lines: Vec<String> = m
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", Value::from(v.as_str().unwrap_or_default())))
        .collect();
    lines.sort();
    lines.join("\n")
}

/// The variables a container declares (service links, `envFrom`, `env`): what `$(VAR)` sees.
type Declared = HashMap<String, String>;

/// An ordered environment where a later definition replaces an earlier one in place.
#[derive(Default)]
struct EnvList {
    vars: Vec<(String, String)>,
    index: HashMap<String, usize>,
}

impl EnvList {
    fn set(&mut self, k: &str, v: String) {
        match self.index.get(k) {
            Some(&i) => self.vars[i].1 = v,
            None => {
                self.index.insert(k.to_owned(), self.vars.len());
                self.vars.push((k.to_owned(), v));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Files of projected volumes

struct FileSpec {
    path: String,
    data: Vec<u8>,
    mode: u32,
}

fn file(path: &str, data: Vec<u8>, mode: u32) -> FileSpec {
    FileSpec {
        path: path.to_owned(),
        data,
        mode,
    }
}

fn file_mode(v: &Value) -> u32 {
    v.as_u64()
        .and_then(|m| u32::try_from(m & 0o7777).ok())
        .unwrap_or(0o644)
}

fn item_mode(item: &Value, default: u32) -> u32 {
    if item["mode"].is_u64() {
        file_mode(&item["mode"])
    } else {
        default
    }
}

fn select_items(
    mut data: BTreeMap<String, Vec<u8>>,
    items_spec: Option<&Value>,
    mode: u32,
    optional: bool,
    what: &str,
) -> Result<Vec<FileSpec>, String> {
    let chosen = items(items_spec);
    if chosen.is_empty() {
        return Ok(data.into_iter().map(|(k, v)| file(&k, v, mode)).collect());
    }
    let mut out = Vec::new();
    for it in chosen {
        let key = it["key"].as_str().unwrap_or_default();
        let path = it["path"].as_str().unwrap_or(key);
        match data.remove(key) {
            Some(v) => out.push(file(path, v, item_mode(it, mode))),
            None if optional => {}
            None => return Err(format!("{what} references non-existent config key: {key}")),
        }
    }
    Ok(out)
}

fn safe_relative(p: &str) -> bool {
    !p.is_empty()
        && Path::new(p)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

fn write_if_changed(path: &Path, data: &[u8], mode: u32) -> std::io::Result<()> {
    if std::fs::read(path).ok().as_deref() != Some(data) {
        // Remove first: the old file may be read-only.
        let _ = std::fs::remove_file(path);
        std::fs::write(path, data)?;
    }
    let perms = std::fs::Permissions::from_mode(mode);
    if std::fs::metadata(path)?.permissions().mode() & 0o7777 != mode {
        std::fs::set_permissions(path, perms)?;
    }
    Ok(())
}

/// Makes `dir` hold exactly `files` (ConfigMap and Secret volumes follow their sources).
fn write_projection(dir: &Path, files: &[FileSpec]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut keep = HashSet::new();
    for f in files {
        if !safe_relative(&f.path) {
            continue;
        }
        let path = dir.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        write_if_changed(&path, &f.data, f.mode)?;
        keep.insert(path);
    }
    remove_stale(dir, &keep)
}

fn remove_stale(dir: &Path, keep: &HashSet<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            remove_stale(&path, keep)?;
            if std::fs::read_dir(&path)?.next().is_none() {
                std::fs::remove_dir(&path)?;
            }
        } else if !keep.contains(&path) {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Probes

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ProbeKind {
    Startup,
    Readiness,
    Liveness,
}

struct ProbeCtx {
    inner: Arc<Inner>,
    pod_ip: Ipv4Addr,
    ports: Vec<(String, u16)>,
    exec: ExecCtx,
    idx: usize,
    instance: u64,
    tx: mpsc::UnboundedSender<Msg>,
    since: Instant,
}

impl ProbeCtx {
    fn send(&self, event: ProbeEvent) {
        let _ = self.tx.send(Msg::Probe {
            idx: self.idx,
            instance: self.instance,
            event,
        });
    }
}

async fn probe_loop(
    kind: ProbeKind,
    spec: Value,
    ctx: Arc<ProbeCtx>,
    mut started: watch::Receiver<bool>,
) {
    // Readiness and liveness wait for the startup probe.
    if kind != ProbeKind::Startup && started.wait_for(|s| *s).await.is_err() {
        return;
    }
    let secs = |k: &str, default: f64, min: f64| spec[k].as_f64().unwrap_or(default).max(min);
    let delay = Duration::from_secs_f64(secs("initialDelaySeconds", 0.0, 0.0));
    let period = Duration::from_secs_f64(secs("periodSeconds", 10.0, 1.0));
    let timeout = Duration::from_secs_f64(secs("timeoutSeconds", 1.0, 1.0));
    let failure_threshold = spec["failureThreshold"].as_u64().unwrap_or(3).max(1);
    let success_threshold = spec["successThreshold"].as_u64().unwrap_or(1).max(1);
    tokio::time::sleep_until(ctx.since + delay).await;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut ready, mut successes, mut failures) = (false, 0u64, 0u64);
    loop {
        tick.tick().await;
        let ok = tokio::time::timeout(timeout, probe_once(&spec, &ctx))
            .await
            .unwrap_or(false);
        if ok {
            successes += 1;
            failures = 0;
        } else {
            failures += 1;
            successes = 0;
        }
        match kind {
            ProbeKind::Readiness => {
                if ok && !ready && successes >= success_threshold {
                    ready = true;
                    ctx.send(ProbeEvent::Ready(true));
                } else if !ok && ready && failures >= failure_threshold {
                    ready = false;
                    ctx.send(ProbeEvent::Ready(false));
                }
            }
            ProbeKind::Liveness => {
                if failures >= failure_threshold {
                    ctx.send(ProbeEvent::Failed("Liveness"));
                    return;
                }
            }
            ProbeKind::Startup => {
                if ok {
                    ctx.send(ProbeEvent::Started);
                    return;
                }
                if failures >= failure_threshold {
                    ctx.send(ProbeEvent::Failed("Startup"));
                    return;
                }
            }
        }
    }
}

async fn probe_once(spec: &Value, ctx: &ProbeCtx) -> bool {
    let host_of = |h: &Value| match h["host"].as_str() {
        Some(host) if !host.is_empty() => host.to_owned(),
        _ => ctx.pod_ip.to_string(),
    };
    if let Some(h) = spec.get("httpGet") {
        let Some(port) = resolve_port(&h["port"], &ctx.ports) else {
            return false;
        };
        if h["scheme"]
            .as_str()
            .is_some_and(|s| !s.eq_ignore_ascii_case("HTTP"))
        {
            return false;
        }
        return http_probe(&host_of(h), port, h).await;
    }
    if let Some(t) = spec.get("tcpSocket") {
        let Some(port) = resolve_port(&t["port"], &ctx.ports) else {
            return false;
        };
        return tokio::net::TcpStream::connect((host_of(t).as_str(), port))
            .await
            .is_ok();
    }
    if let Some(g) = spec.get("grpc") {
        // No gRPC client here: a listening port counts as serving.
        let Some(port) = resolve_port(&g["port"], &ctx.ports) else {
            return false;
        };
        return tokio::net::TcpStream::connect((ctx.pod_ip, port))
            .await
            .is_ok();
    }
    if let Some(e) = spec.get("exec") {
        return exec_probe(&strings(&e["command"]), ctx).await;
    }
    false
}

fn resolve_port(v: &Value, ports: &[(String, u16)]) -> Option<u16> {
    match v {
        Value::Number(n) => u16::try_from(n.as_u64()?).ok(),
        Value::String(s) => s
            .parse()
            .ok()
            .or_else(|| ports.iter().find(|(name, _)| name == s).map(|(_, p)| *p)),
        _ => None,
    }
}

async fn http_probe(host: &str, port: u16, h: &Value) -> bool {
    let Ok(mut stream) = tokio::net::TcpStream::connect((host, port)).await else {
        return false;
    };
    let path = match h["path"].as_str() {
        Some(p) if p.starts_with('/') => p.to_owned(),
        Some(p) => format!("/{p}"),
        None => "/".to_owned(),
    };
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for hd in items(h.get("httpHeaders")) {
        if let (Some(n), Some(v)) = (hd["name"].as_str(), hd["value"].as_str()) {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
    }
    req.push_str("\r\n");
    if stream.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 4096 {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let line = String::from_utf8_lossy(&buf);
    let code: Option<u16> = line.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    code.is_some_and(|c| (200..400).contains(&c))
}

/// Kills and forgets an exec probe's process group however the probe ends (a timeout
/// drops the future).
struct GroupGuard {
    inner: Arc<Inner>,
    pgid: i32,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        signal_group(self.pgid, libc::SIGKILL);
        self.inner.deregister_group(self.pgid);
    }
}

async fn exec_probe(command: &[String], ctx: &ProbeCtx) -> bool {
    let Some((program, args)) = command.split_first() else {
        return false;
    };
    let mounts = &ctx.exec.mounts;
    let mut cmd = tokio::process::Command::new(rewrite(program, mounts));
    cmd.args(args.iter().map(|a| rewrite(a, mounts)))
        .env_clear()
        .envs(ctx.exec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&ctx.exec.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    let Ok(mut child) = cmd.spawn() else {
        return false;
    };
    let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    if !ctx.inner.register_group(pgid) {
        return false;
    }
    let _guard = GroupGuard {
        inner: ctx.inner.clone(),
        pgid,
    };
    child.wait().await.is_ok_and(|s| s.success())
}

// ---------------------------------------------------------------------------------------
// Small pure helpers

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn items(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    items(Some(v))
        .iter()
        .map(|x| match x {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// `v[key]` as an object, made one if it is missing or not an object.
fn child_object<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let child = v.as_object_mut()?.entry(key).or_insert_with(|| json!({}));
    if !child.is_object() {
        *child = json!({});
    }
    child.as_object_mut()
}

/// The image's name without `:tag` and `@digest` (a registry's `host:port/` stays).
fn image_name(image: &str) -> &str {
    let name = image.split_once('@').map_or(image, |(n, _)| n);
    let last = name.rfind('/').map_or(0, |i| i + 1);
    match name[last..].rfind(':') {
        Some(colon) => &name[..last + colon],
        None => name,
    }
}

/// Kubernetes `$(VAR)` expansion: defined variables are replaced, `$$` is a literal `$`
/// (so `$$(VAR)` gives `$(VAR)`), anything else (unknown variables included) stays as is.
fn expand(input: &str, vars: &HashMap<String, String>) -> String {
    let b = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let (mut i, mut literal) = (0, 0);
    while i + 1 < b.len() {
        if b[i] != b'$' {
            i += 1;
            continue;
        }
        // Every split below is at an ASCII byte, so on a char boundary.
        out.push_str(&input[literal..i]);
        match b[i + 1] {
            b'$' => {
                out.push('$');
                i += 2;
            }
            b'(' => match input[i + 2..].find(')') {
                Some(len) => {
                    let name = &input[i + 2..i + 2 + len];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    i += len + 3;
                }
                None => {
                    out.push_str("$(");
                    i += 2;
                }
            },
            _ => {
                out.push('$');
                i += 1;
            }
        }
        literal = i;
    }
    out.push_str(&input[literal..]);
    out
}

/// Replaces a leading mount path by its host directory (also in the value of `-x=/path`).
fn rewrite(value: &str, mounts: &[Mount]) -> String {
    if let Some(r) = rewrite_prefix(value, mounts) {
        return r;
    }
    if value.starts_with('-')
        && let Some((flag, rest)) = value.split_once('=')
        && let Some(r) = rewrite_prefix(rest, mounts)
    {
        return format!("{flag}={r}");
    }
    value.to_owned()
}

fn rewrite_prefix(value: &str, mounts: &[Mount]) -> Option<String> {
    mounts.iter().find_map(|m| {
        let rest = value.strip_prefix(m.path.as_str())?;
        (rest.is_empty() || rest.starts_with('/'))
            .then(|| format!("{}{rest}", m.host.to_string_lossy()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "default";

    struct Fx {
        store: Arc<Store>,
        kubelet: Kubelet,
        dir: tempfile::TempDir,
    }

    fn fx() -> Fx {
        let store = Arc::new(Store::default());
        store
            .create(
                &ResKey::new("", "namespaces"),
                json!({"metadata": {"name": NS}}),
                false,
            )
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut images = HashMap::new();
        images.insert("shell".to_owned(), PathBuf::from("/bin/sh"));
        images.insert(
            "registry.local:5000/tools/cat".to_owned(),
            PathBuf::from("/bin/cat"),
        );
        let kubelet = Kubelet::start(
            store.clone(),
            Arc::new(Tokens::new()),
            KubeletConfig {
                images,
                workdir: dir.path().to_owned(),
                api_server: "http://127.0.0.1:1".into(),
                ca_pem: String::new(),
                node_name: "testcluster".into(),
            },
        );
        Fx {
            store,
            kubelet,
            dir,
        }
    }

    fn create(store: &Store, key: &str, obj: Value) {
        let (group, plural) = key.split_once('/').unwrap_or(("", key));
        store
            .create(&ResKey::new(group, plural), obj, false)
            .unwrap();
    }

    fn create_pod(store: &Store, name: &str, spec: Value) {
        create(
            store,
            "pods",
            json!({"metadata": {"name": name, "namespace": NS}, "spec": spec}),
        );
    }

    fn sh_pod(script: &str, policy: &str) -> Value {
        json!({
            "restartPolicy": policy,
            "containers": [{"name": "main", "image": "shell:1.0", "args": ["-c", script]}],
        })
    }

    fn get(store: &Store, name: &str) -> Option<Arc<Value>> {
        store.get(&pods_key(), NS, name)
    }

    /// Polls the pod until `pred` holds (20 s deadline).
    async fn wait_pod(
        store: &Store,
        name: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Arc<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(p) = get(store, name)
                && pred(&p)
            {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {:#}",
                get(store, name).map(|p| (*p).clone()).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn phase(p: &Value) -> &str {
        str_at(p, "/status/phase")
    }

    fn main_status(p: &Value) -> &Value {
        &p["status"]["containerStatuses"][0]
    }

    fn log(fx: &Fx, pod: &str) -> String {
        let path = fx.kubelet.log_path(NS, pod, None, false).expect("log path");
        std::fs::read_to_string(path).unwrap_or_default()
    }

    fn condition(p: &Value, type_: &str) -> String {
        items(p.pointer("/status/conditions"))
            .iter()
            .find(|c| c["type"] == type_)
            .map(|c| str_at(c, "/status").to_owned())
            .unwrap_or_default()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn echo_pod_succeeds_with_expanded_env_in_log() {
        let fx = fx();
        let mut spec = sh_pod("echo hello $MY_VAR $(BASE); exit 0", "Never");
        spec["containers"][0]["env"] = json!([
            {"name": "BASE", "value": "big"},
            {"name": "MY_VAR", "value": "$(BASE)-value $$(BASE) $(UNKNOWN)"},
        ]);
        create_pod(&fx.store, "echo", spec);
        let p = wait_pod(&fx.store, "echo", "Succeeded", |p| phase(p) == "Succeeded").await;
        assert_eq!(log(&fx, "echo"), "hello big-value $(BASE) $(UNKNOWN) big\n");
        assert_eq!(p["spec"]["nodeName"], "testcluster");
        let ip: Ipv4Addr = str_at(&p, "/status/podIP").parse().unwrap();
        assert!(host_part(ip).is_some(), "pod IP {ip} is in 127.10.0.0/16");
        assert_eq!(p["status"]["hostIP"], HOST_IP);
        let t = &main_status(&p)["state"]["terminated"];
        assert_eq!(
            (t["exitCode"].as_i64(), t["reason"].as_str()),
            (Some(0), Some("Completed"))
        );
        assert_eq!(condition(&p, "Ready"), "False");
        assert_eq!(p["status"]["qosClass"], "BestEffort");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn exit_one_with_restart_never_fails() {
        let fx = fx();
        create_pod(&fx.store, "fail", sh_pod("exit 1", "Never"));
        let p = wait_pod(&fx.store, "fail", "Failed", |p| phase(p) == "Failed").await;
        let s = main_status(&p);
        assert_eq!(s["state"]["terminated"]["exitCode"], 1);
        assert_eq!(s["state"]["terminated"]["reason"], "Error");
        assert_eq!(s["restartCount"], 0);
        assert!(
            s["state"]["terminated"].get("message").is_none(),
            "the default policy keeps no message"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fallback_to_logs_on_error_keeps_the_end_of_the_log() {
        let fx = fx();
        let mut spec = sh_pod(
            "i=0; while [ $i -lt 100 ]; do echo line $i; i=$((i+1)); done; echo bad >&2; exit 3",
            "Never",
        );
        spec["containers"][0]["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
        create_pod(&fx.store, "tail", spec);
        let p = wait_pod(&fx.store, "tail", "Failed", |p| phase(p) == "Failed").await;
        let message = main_status(&p)["state"]["terminated"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let lines: Vec<&str> = message.lines().collect();
        assert_eq!(lines.len(), 80, "80 lines at most");
        assert_eq!(lines.last(), Some(&"bad"));
        assert_eq!(lines.first(), Some(&"line 21"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_failure_restarts_with_growing_restart_count() {
        let fx = fx();
        create_pod(&fx.store, "crash", sh_pod("echo run; exit 3", "OnFailure"));
        let p = wait_pod(&fx.store, "crash", "CrashLoopBackOff", |p| {
            main_status(p)["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        })
        .await;
        assert_eq!(main_status(&p)["lastState"]["terminated"]["exitCode"], 3);
        let p = wait_pod(&fx.store, "crash", "restartCount >= 2", |p| {
            main_status(p)["restartCount"].as_u64() >= Some(2)
        })
        .await;
        assert_ne!(phase(&p), "Failed");
        // The previous instance's log is kept.
        let prev = fx
            .kubelet
            .log_path(NS, "crash", Some("main"), true)
            .expect("previous log");
        wait_until("previous log written", || {
            std::fs::read_to_string(&prev).is_ok_and(|s| s == "run\n")
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unknown_image_waits_in_err_image_pull_until_pullable() {
        let fx = fx();
        let mut spec = sh_pod("exit 0", "Never");
        spec["containers"][0]["image"] = json!("nosuch/image:v1");
        create_pod(&fx.store, "unknown", spec);
        let p = wait_pod(&fx.store, "unknown", "ErrImagePull", |p| {
            main_status(p)["state"]["waiting"]["reason"] == "ErrImagePull"
        })
        .await;
        assert_eq!(phase(&p), "Pending");
        assert_eq!(fx.kubelet.log_path(NS, "unknown", None, false), None);

        // A known image marked unpullable waits too, and starts once pullable again.
        fx.kubelet.set_image_pullable("shell", false);
        create_pod(&fx.store, "blocked", sh_pod("exit 0", "Never"));
        wait_pod(&fx.store, "blocked", "ImagePullBackOff", |p| {
            main_status(p)["state"]["waiting"]["reason"] == "ImagePullBackOff"
        })
        .await;
        fx.kubelet.set_image_pullable("shell:1.0", true);
        wait_pod(&fx.store, "blocked", "Succeeded", |p| {
            phase(p) == "Succeeded"
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn env_from_configmap_and_pod_ip_field_ref() {
        let fx = fx();
        create(
            &fx.store,
            "configmaps",
            json!({"metadata": {"name": "cfg", "namespace": NS}, "data": {"A": "1", "B": "two"}}),
        );
        create(
            &fx.store,
            "secrets",
            json!({"metadata": {"name": "sec", "namespace": NS}, "data": {"pw": "c2VjcmV0"}}),
        );
        create(
            &fx.store,
            "services",
            json!({"metadata": {"name": "my-svc", "namespace": NS}, "spec": {"clusterIP": "127.96.0.9", "ports": [{"name": "http", "port": 80}]}}),
        );
        let mut spec = sh_pod(
            "echo $CFG_A $CFG_B $KEY $PW $IP $NAME $MY_SVC_SERVICE_HOST $MY_SVC_PORT_80_TCP_ADDR; test -f \"$KUBECONFIG\"",
            "Never",
        );
        spec["containers"][0]["envFrom"] =
            json!([{"prefix": "CFG_", "configMapRef": {"name": "cfg"}}]);
        spec["containers"][0]["env"] = json!([
            {"name": "KEY", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "B"}}},
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "pw"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ]);
        create_pod(&fx.store, "env", spec);
        let p = wait_pod(&fx.store, "env", "terminal", |p| {
            matches!(phase(p), "Succeeded" | "Failed")
        })
        .await;
        let ip = str_at(&p, "/status/podIP");
        assert_eq!(
            log(&fx, "env"),
            format!("1 two two secret {ip} env 127.96.0.9 127.96.0.9\n")
        );
        assert_eq!(phase(&p), "Succeeded", "the kubeconfig file exists");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn missing_configmap_key_is_create_container_config_error() {
        let fx = fx();
        create(
            &fx.store,
            "configmaps",
            json!({"metadata": {"name": "cfg", "namespace": NS}, "data": {}}),
        );
        let mut spec = sh_pod("exit 0", "Never");
        spec["containers"][0]["env"] =
            json!([{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]);
        create_pod(&fx.store, "cfgerr", spec);
        wait_pod(&fx.store, "cfgerr", "CreateContainerConfigError", |p| {
            main_status(p)["state"]["waiting"]["reason"] == "CreateContainerConfigError"
        })
        .await;
        // The key appears: the container starts.
        fx.store
            .modify(&ResKey::new("", "configmaps"), NS, "cfg", false, |o| {
                let mut o = o.clone();
                o["data"]["k"] = json!("v");
                Ok(o)
            })
            .unwrap();
        wait_pod(&fx.store, "cfgerr", "Succeeded", |p| {
            phase(p) == "Succeeded"
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn configmap_volume_is_read_through_rewritten_path() {
        let fx = fx();
        create(
            &fx.store,
            "configmaps",
            json!({"metadata": {"name": "files", "namespace": NS}, "data": {"key": "from-configmap\n", "other": "x"}}),
        );
        create_pod(
            &fx.store,
            "vol",
            json!({
                "restartPolicy": "Never",
                "containers": [{
                    "name": "main",
                    // A registry with a port, a tag and a digest: the image is still found.
                    "image": "registry.local:5000/tools/cat:1.2@sha256:0123",
                    "args": ["/etc/cfg/key", "/etc/renamed/k2"],
                    "volumeMounts": [
                        {"name": "cfg", "mountPath": "/etc/cfg"},
                        {"name": "renamed", "mountPath": "/etc/renamed/"},
                    ],
                }],
                "volumes": [
                    {"name": "cfg", "configMap": {"name": "files"}},
                    {"name": "renamed", "configMap": {"name": "files", "items": [{"key": "other", "path": "k2"}]}},
                ],
            }),
        );
        let p = wait_pod(&fx.store, "vol", "terminal", |p| {
            matches!(phase(p), "Succeeded" | "Failed")
        })
        .await;
        assert_eq!(phase(&p), "Succeeded");
        assert_eq!(log(&fx, "vol"), "from-configmap\nx");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn init_container_runs_first_and_shares_empty_dir() {
        let fx = fx();
        create_pod(
            &fx.store,
            "init",
            json!({
                "restartPolicy": "Never",
                "initContainers": [{
                    "name": "prepare", "image": "shell", "command": ["sh", "-c", "echo prepared > \"$OUT\""],
                    "env": [{"name": "OUT", "value": "/work/flag"}],
                    "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                }],
                "containers": [{
                    "name": "main", "image": "shell", "command": ["cat", "/work/flag"],
                    "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                }],
                "volumes": [{"name": "work", "emptyDir": {}}],
            }),
        );
        let p = wait_pod(&fx.store, "init", "terminal", |p| {
            matches!(phase(p), "Succeeded" | "Failed")
        })
        .await;
        assert_eq!(phase(&p), "Succeeded");
        assert_eq!(condition(&p, "Initialized"), "True");
        assert_eq!(
            p["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert_eq!(log(&fx, "init"), "prepared\n");
    }

    fn find_in_path(program: &str) -> Option<PathBuf> {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn http_readiness_probe_makes_pod_ready() {
        if find_in_path("python3").is_none() {
            eprintln!("note: python3 not found; skipping the httpGet readiness probe test");
            return;
        }
        let fx = fx();
        create_pod(
            &fx.store,
            "web",
            json!({
                "containers": [{
                    "name": "web", "image": "shell",
                    "command": ["python3", "-m", "http.server", "--bind", "$(POD_IP)", "8080"],
                    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
                    "livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1, "initialDelaySeconds": 1},
                }],
            }),
        );
        let p = wait_pod(&fx.store, "web", "running", |p| phase(p) == "Running").await;
        assert_eq!(
            condition(&p, "Ready"),
            "False",
            "not ready before the probe passes"
        );
        let p = wait_pod(&fx.store, "web", "Ready", |p| {
            condition(p, "Ready") == "True"
        })
        .await;
        assert_eq!(main_status(&p)["ready"], true);
        assert_eq!(condition(&p, "ContainersReady"), "True");
        // The override wins over the probe, and goes back to it when cleared.
        fx.kubelet.set_ready_override(NS, "web", Some(false));
        wait_pod(&fx.store, "web", "not Ready", |p| {
            condition(p, "Ready") == "False"
        })
        .await;
        fx.kubelet.set_ready_override(NS, "web", None);
        let p = wait_pod(&fx.store, "web", "Ready again", |p| {
            condition(p, "Ready") == "True"
        })
        .await;
        assert_eq!(
            main_status(&p)["restartCount"],
            0,
            "the liveness probe passes"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deletion_sends_sigterm_then_removes_pod() {
        let fx = fx();
        create_pod(
            &fx.store,
            "graceful",
            sh_pod(
                "trap 'echo term; exit 0' TERM; echo up; while true; do sleep 0.05; done",
                "Always",
            ),
        );
        wait_pod(&fx.store, "graceful", "running", |p| phase(p) == "Running").await;
        wait_until("the trap is set", || log(&fx, "graceful") == "up\n").await;
        // The directory goes with the pod: keep the log open to read it afterwards.
        let mut log_file =
            std::fs::File::open(fx.kubelet.log_path(NS, "graceful", None, false).unwrap()).unwrap();
        let dir = fx.dir.path().join("pods");
        let opts = crate::store::DeleteOptions {
            grace_period_seconds: Some(10),
            ..Default::default()
        };
        fx.store.delete(&pods_key(), NS, "graceful", &opts).unwrap();
        wait_until("pod removed", || get(&fx.store, "graceful").is_none()).await;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut log_file, &mut text).unwrap();
        // dash also reports the `sleep` the signal ended ("Terminated").
        assert!(
            text.starts_with("up\n") && text.ends_with("\nterm\n"),
            "{text:?}"
        );
        assert!(!fx.kubelet.is_running(NS, "graceful"));
        wait_until("pod directory removed", || {
            std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_none())
        })
        .await;
    }

    fn alive(pid: i32) -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        let exists = unsafe { libc::kill(pid, 0) } == 0;
        // A zombie nobody reaped yet (the test may not run under a reaping init) is dead.
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        });
        exists && !zombie
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_leaves_no_process_alive() {
        let fx = fx();
        create_pod(
            &fx.store,
            "sleeper",
            // `$$$$`: Kubernetes turns `$$` into `$`.
            sh_pod("sleep 1000 & echo $!; echo $$$$; wait", "Always"),
        );
        wait_until("both pids logged", || {
            fx.kubelet.log_path(NS, "sleeper", None, false).is_some()
                && log(&fx, "sleeper").lines().count() == 2
        })
        .await;
        let pids: Vec<i32> = log(&fx, "sleeper")
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert!(pids.iter().all(|p| alive(*p)));
        assert!(fx.kubelet.is_running(NS, "sleeper"));
        fx.kubelet.shutdown();
        wait_until("every process gone", || pids.iter().all(|p| !alive(*p))).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kill_fault_restarts_with_policy_always() {
        let fx = fx();
        create_pod(&fx.store, "victim", sh_pod("echo up; sleep 1000", "Always"));
        wait_pod(&fx.store, "victim", "running", |p| phase(p) == "Running").await;
        wait_until("started", || fx.kubelet.is_running(NS, "victim")).await;
        fx.kubelet.kill(NS, "victim");
        let p = wait_pod(&fx.store, "victim", "restarted", |p| {
            main_status(p)["restartCount"] == 1 && main_status(p)["state"]["running"].is_object()
        })
        .await;
        assert_eq!(main_status(&p)["lastState"]["terminated"]["exitCode"], 137);
    }

    #[test]
    fn image_names_strip_tag_and_digest() {
        assert_eq!(image_name("busybox"), "busybox");
        assert_eq!(image_name("busybox:1.36"), "busybox");
        assert_eq!(image_name("host:5000/img"), "host:5000/img");
        assert_eq!(image_name("host:5000/img:tag"), "host:5000/img");
        assert_eq!(
            image_name("host:5000/a/img:tag@sha256:abc"),
            "host:5000/a/img"
        );
        assert_eq!(image_name("img@sha256:abc"), "img");
    }

    #[test]
    fn expansion_follows_kubernetes_rules() {
        let vars: HashMap<String, String> = [("A".to_owned(), "x".to_owned())].into();
        assert_eq!(expand("$(A)-$(B)", &vars), "x-$(B)");
        assert_eq!(expand("$$(A) $$ $", &vars), "$(A) $ $");
        assert_eq!(expand("$(A", &vars), "$(A");
        assert_eq!(expand("a$b$(A)é$(A)", &vars), "a$bxéx");
        assert_eq!(expand("$()", &vars), "$()");
    }

    #[test]
    fn mount_paths_are_rewritten_only_at_the_start() {
        let mounts = vec![
            Mount {
                path: "/etc/app/conf".into(),
                host: "/v/conf".into(),
            },
            Mount {
                path: "/etc/app".into(),
                host: "/v/app".into(),
            },
        ];
        assert_eq!(rewrite("/etc/app/conf/x", &mounts), "/v/conf/x");
        assert_eq!(rewrite("/etc/app", &mounts), "/v/app");
        assert_eq!(rewrite("/etc/apple", &mounts), "/etc/apple");
        assert_eq!(
            rewrite("--config=/etc/app/c.yaml", &mounts),
            "--config=/v/app/c.yaml"
        );
        assert_eq!(rewrite("cat /etc/app/x", &mounts), "cat /etc/app/x");
    }

    #[test]
    fn service_env_vars_follow_the_docker_links_format() {
        let svc = json!({"metadata": {"name": "my-db"}, "spec": {"clusterIP": "127.96.0.3", "ports": [
            {"name": "sql", "port": 5432}, {"port": 9187, "protocol": "TCP"}]}});
        let vars: HashMap<String, String> = service_vars(&svc).into_iter().collect();
        assert_eq!(vars["MY_DB_SERVICE_HOST"], "127.96.0.3");
        assert_eq!(vars["MY_DB_SERVICE_PORT"], "5432");
        assert_eq!(vars["MY_DB_SERVICE_PORT_SQL"], "5432");
        assert_eq!(vars["MY_DB_PORT"], "tcp://127.96.0.3:5432");
        assert_eq!(vars["MY_DB_PORT_9187_TCP"], "tcp://127.96.0.3:9187");
        assert_eq!(vars["MY_DB_PORT_9187_TCP_PROTO"], "tcp");
        assert_eq!(vars["MY_DB_PORT_9187_TCP_PORT"], "9187");
        assert_eq!(vars["MY_DB_PORT_9187_TCP_ADDR"], "127.96.0.3");
        let headless = json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None", "ports": [{"port": 1}]}});
        assert!(service_vars(&headless).is_empty());
    }

    #[test]
    fn resource_values_divide_and_round_up() {
        let c = json!({"resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}});
        assert_eq!(resource_value(&c, &json!({"resource": "limits.cpu"})), "1");
        assert_eq!(
            resource_value(&c, &json!({"resource": "limits.cpu", "divisor": "1m"})),
            "500"
        );
        assert_eq!(
            resource_value(&c, &json!({"resource": "limits.memory", "divisor": "1Mi"})),
            "64"
        );
        assert_eq!(
            resource_value(&c, &json!({"resource": "requests.cpu"})),
            "0"
        );
    }

    #[test]
    fn pod_ips_are_unique_and_skip_network_and_broadcast_parts() {
        let ips: Vec<Ipv4Addr> = (0..600).filter_map(|_| allocate_ip(None)).collect();
        let unique: HashSet<_> = ips.iter().collect();
        assert_eq!(unique.len(), ips.len());
        assert!(
            ips.iter()
                .all(|ip| ip.octets()[3] != 0 && ip.octets()[3] != 255)
        );
        for ip in ips {
            release_ip(ip);
        }
    }
}
