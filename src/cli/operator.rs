//! `goodput operator`: the controllers, the admin endpoints and graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::ResourceRequirements;
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
    /// Watch only these namespaces (repeat the flag, or separate with commas; default: all
    /// namespaces). With namespaces, the operator needs no cluster-wide permission.
    #[arg(long, env = "GOODPUT_WATCH_NAMESPACE", value_delimiter = ',')]
    namespace: Vec<String>,
    /// Requests and limits of every loadgen container, as the JSON of a Kubernetes
    /// ResourceRequirements (e.g. `{"requests":{"cpu":"1","memory":"256Mi"}}`). Default:
    /// none (the namespace's LimitRange, if any, applies).
    #[arg(long, env = "GOODPUT_LOADGEN_RESOURCES", value_parser = parse_resources)]
    loadgen_resources: Option<ResourceRequirements>,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8080")]
    admin_addr: SocketAddr,
    /// Where every loadgen pod serves its client metrics (`goodput loadgen --metrics-addr`:
    /// the series the `goodput-client` alert rules read), e.g. `$(POD_IP):9090` (`$(POD_IP)`
    /// is the pod's address, which the Job sets; `[$(POD_IP)]:9090` on IPv6). The pods
    /// name the port `metrics` for a PodMonitor. Default: not served.
    #[arg(long, env = "GOODPUT_LOADGEN_METRICS_ADDR", value_parser = parse_pod_addr)]
    loadgen_metrics_addr: Option<String>,
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
    /// Seconds between looks at a ServingPlan's workload and peak when nothing it watches
    /// changed (the workload's replicas or annotations changed by hand, an HPA's minimum).
    #[arg(long, env = "GOODPUT_PLAN_RESYNC_S", default_value_t = 30.0)]
    plan_resync_s: f64,
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
        let client = goodput::controller::connect(args.kubeconfig.as_deref()).await?;
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
            namespaces: args.namespace,
            loadgen_resources: args.loadgen_resources,
            loadgen_metrics_addr: args.loadgen_metrics_addr,
            pod_retries: args.pod_retries.max(0),
            pod_start_timeout: std::time::Duration::from_secs(args.pod_start_timeout_s),
            shard_start_lead: std::time::Duration::from_secs_f64(
                args.shard_start_lead_s.clamp(0.0, 3600.0),
            ),
            plan_resync: std::time::Duration::from_secs_f64(args.plan_resync_s.clamp(0.1, 3600.0)),
        };
        let signal = tokio::spawn(async move {
            super::shutdown_signal().await;
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

/// `--loadgen-metrics-addr`: `HOST:PORT` where HOST may be `$(POD_IP)` (or `[$(POD_IP)]`),
/// with a fixed port (a PodMonitor names it).
fn parse_pod_addr(text: &str) -> Result<String, String> {
    goodput::controller::build::pod_addr_port(text)
        .map(|_| text.to_owned())
        .ok_or_else(|| {
            format!(
                "`{text}` is not HOST:PORT with a port above 0 (HOST an address, `$(POD_IP)` \
                 or `[$(POD_IP)]`)"
            )
        })
}

/// `--loadgen-resources`: a ResourceRequirements in JSON, unknown fields refused.
fn parse_resources(text: &str) -> Result<ResourceRequirements, String> {
    let mut value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    // A quantity may be a bare number (`cpu: 1` in YAML), as the API server accepts it.
    if let Some(object) = value.as_object_mut() {
        for part in ["requests", "limits"] {
            let Some(map) = object.get_mut(part).and_then(|m| m.as_object_mut()) else {
                continue;
            };
            for quantity in map.values_mut().filter(|q| q.is_number()) {
                *quantity = quantity.to_string().into();
            }
        }
    }
    let known = ["requests", "limits", "claims"];
    if let Some(key) = value
        .as_object()
        .and_then(|o| o.keys().find(|k| !known.contains(&k.as_str())))
    {
        return Err(format!(
            "unknown field `{key}`; expected requests or limits"
        ));
    }
    serde_json::from_value(value).map_err(|e| format!("not a ResourceRequirements: {e}"))
}

#[cfg(test)]
mod tests {
    use super::parse_resources;

    #[test]
    fn loadgen_resources_are_resource_requirements_in_json() {
        let r =
            parse_resources(r#"{"requests":{"cpu":1,"memory":"256Mi"},"limits":{"memory":"1Gi"}}"#)
                .expect("parses");
        let requests = r.requests.expect("requests");
        assert_eq!(requests["cpu"].0, "1");
        assert_eq!(r.limits.expect("limits")["memory"].0, "1Gi");
        let e = parse_resources(r#"{"request":{"cpu":"1"}}"#).unwrap_err();
        assert!(e.contains("unknown field `request`"), "{e}");
        let e = parse_resources("cpu=1").unwrap_err();
        assert!(e.starts_with("not JSON"), "{e}");
    }
}
