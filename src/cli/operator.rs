//! `goodput operator`: the controllers, the admin endpoints and graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use std::time::Duration;

use goodput::controller::lease::{self, LeaseConfig};
use goodput::controller::{self, Options, metrics::Metrics};
use tracing::info;

/// Flags of `goodput operator`.
#[derive(clap::Args)]
pub struct OperatorArgs {
    /// The image its loadgen Jobs and simulated targets run: the operator's own
    /// (the chart sets it).
    #[arg(long, env = "GOODPUT_IMAGE")]
    image: String,
    /// A kubeconfig file. Default: `KUBECONFIG`, `~/.kube/config`, then the in-cluster
    /// ServiceAccount.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "GOODPUT_WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8080")]
    admin_addr: SocketAddr,
    /// Times a point whose loadgen pod failed (exit code, OOM kill, eviction) is started
    /// again, every shard anew, before the point is recorded as invalid with the reason.
    #[arg(long, default_value_t = 2)]
    pod_retries: i32,
    /// Seconds a point's pods may all wait to start (image pull, scheduling) before the
    /// point is recorded as invalid.
    #[arg(long, default_value_t = 600)]
    pod_start_timeout_s: u64,
    /// Seconds from creating a sharded point's Job to its shards' common start: time for
    /// every pod to be scheduled, pull the image and start. A shard that starts after it
    /// makes the point invalid, so raise it on a slow cluster.
    #[arg(long, default_value_t = 30.0)]
    shard_start_lead_s: f64,
    /// The Lease that elects the one replica that writes.
    #[arg(long, default_value = "goodput-operator")]
    lease_name: String,
    /// The Lease's namespace (default: the pod's namespace, else `default`).
    #[arg(long, env = "POD_NAMESPACE")]
    lease_namespace: Option<String>,
    /// This replica's identity in the Lease (default: the pod name, else host and process).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Seconds a leader's claim lasts without renewal: a successor takes over this long
    /// after a leader dies without releasing it.
    #[arg(long, default_value_t = 15.0)]
    lease_duration_s: f64,
    /// Seconds between renewals of the claim.
    #[arg(long, default_value_t = 5.0)]
    lease_renew_s: f64,
}

/// Runs the operator until SIGTERM or Ctrl-C.
pub fn run(args: OperatorArgs) -> Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let lost_lease = runtime.block_on(async move {
        let client = client(args.kubeconfig.as_deref()).await?;
        let metrics = Metrics::default();
        let listener = controller::metrics::bind(args.admin_addr)
            .await
            .with_context(|| format!("binding the admin address {}", args.admin_addr))?;
        let admin_addr = listener.local_addr().unwrap_or(args.admin_addr);
        info!(addr = %admin_addr, "Serving /metrics, /healthz and /readyz");
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let admin = tokio::spawn(controller::metrics::serve(
            listener,
            metrics.clone(),
            stopped(stop_rx.clone()),
        ));
        let options = Options {
            image: args.image,
            namespace: args.namespace,
            pod_retries: args.pod_retries.max(0),
            pod_start_timeout: std::time::Duration::from_secs(args.pod_start_timeout_s),
            shard_start_lead: std::time::Duration::from_secs_f64(
                args.shard_start_lead_s.clamp(0.0, 3600.0),
            ),
        };
        let signal = tokio::spawn(async move {
            crate::shutdown_signal().await;
            info!("Stopping: no new points start; running Jobs go on in the cluster");
            let _ = stop_tx.send(true);
        });

        // Every replica stands by; only the Lease holder runs the controller and writes.
        let identity = args.identity.unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "operator".into());
            format!("{host}-{}", std::process::id())
        });
        let lease = LeaseConfig::new(
            args.lease_namespace.unwrap_or_else(|| "default".into()),
            args.lease_name,
            identity.clone(),
        )
        .with_timing(
            Duration::from_secs_f64(args.lease_duration_s.max(1.0)),
            Duration::from_secs_f64(args.lease_renew_s.max(0.1)),
        );
        let mut leadership = lease::lead(client.clone(), lease)
            .await
            .context("joining the leader election")?;
        metrics.set_ready(true);
        let mut stop = stop_rx.clone();
        tokio::select! {
            _ = leadership.leading() => {}
            _ = stop.wait_for(|s| *s) => {
                leadership.release().await;
                signal.abort();
                let _ = admin.await;
                return anyhow::Ok(false);
            }
        }
        info!(identity = %identity, "Leading: starting the controller");
        metrics.set_leader(true);
        let mut claim = leadership.subscribe();
        let lost = async move {
            let _ = claim.wait_for(|leading| !*leading).await;
        };
        let stopped_or_lost = {
            let stop = stopped(stop_rx.clone());
            async move {
                tokio::select! {
                    _ = stop => {}
                    _ = lost => {}
                }
            }
        };
        // Probes of the targets (identity, engine pages) before each point.
        let http = goodput::http_client::default_http_client(Duration::from_secs(5))
            .context("building the HTTP client")?;
        controller::run(client, http, options, metrics.clone(), stopped_or_lost).await;
        metrics.set_leader(false);
        let lost_lease = !*stop_rx.borrow() && !leadership.is_leader();
        leadership.release().await;
        signal.abort();
        let _ = admin.await;
        anyhow::Ok(lost_lease)
    })?;
    if lost_lease {
        // Another replica holds the Lease now: exit so this one restarts as a standby.
        eprintln!("error: lost the leader lease; exiting");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client> {
    let Some(path) = kubeconfig else {
        return kube::Client::try_default()
            .await
            .context("no kubeconfig and no in-cluster configuration");
    };
    let config = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let config =
        kube::Config::from_custom_kubeconfig(config, &kube::config::KubeConfigOptions::default())
            .await
            .with_context(|| format!("using {}", path.display()))?;
    kube::Client::try_from(config).context("building the API client")
}
