//! Finding the server under test in the cluster: a Service and its ready pods (through
//! EndpointSlices, one `/metrics` page per pod), a URL, or the simulated engine the operator
//! deploys for the benchmark.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::ListParams;

use goodput_api::{CapacityBenchmarkSpec, conditions::reason as reasons};
use goodput_core::workload::WorkloadManifest;

/// Where the points send their requests.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedTarget {
    /// What holds the one-benchmark-per-target lock: `svc/<ns>/<name>`, the URL, or the
    /// benchmark's own simulated engine.
    pub key: String,
    /// Base URL of the OpenAI-compatible API.
    pub url: String,
    /// Engine `/metrics` pages scraped during every point.
    pub metrics_targets: Vec<String>,
    /// Whether the loadgen pods ask the target's router for its replicas' metrics pages
    /// (the simulated engine serves `/replicas`).
    pub discover_metrics: bool,
    /// Replicas under test (per-replica capacity divides by it).
    pub replicas: u32,
    /// The simulated engine's time scale (1 for a real server).
    pub time_scale: f64,
    /// The model name requests carry.
    pub model: String,
}

impl ResolvedTarget {
    /// Where a point file sends its load.
    pub fn point_target(&self) -> goodput_loadgen::point_job::PointTarget {
        goodput_loadgen::point_job::PointTarget {
            url: self.url.clone(),
            model: self.model.clone(),
            metrics_targets: self.metrics_targets.clone(),
            discover_metrics: self.discover_metrics,
            time_scale: self.time_scale,
        }
    }
}

/// Why the target cannot take load yet.
#[derive(Clone, Debug, PartialEq)]
pub struct NotReady {
    /// The `TargetReachable` condition's reason.
    pub reason: &'static str,
    /// What a person should know.
    pub message: String,
    /// Whether this waits on something the operator started (poll soon) rather than on
    /// the user (back off).
    pub starting: bool,
}

/// Finds a Service target's address and ready pods.
pub async fn service(
    client: &kube::Client,
    namespace: &str,
    spec: &CapacityBenchmarkSpec,
    manifest: &WorkloadManifest,
    name: &str,
    port: i32,
    starting: bool,
) -> Result<Result<ResolvedTarget, NotReady>, kube::Error> {
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let Some(svc) = services.get_opt(name).await? else {
        return Ok(Err(NotReady {
            reason: reasons::TARGET_NOT_FOUND,
            message: format!("Service {namespace}/{name} does not exist"),
            starting,
        }));
    };
    let svc_spec = svc.spec.unwrap_or_default();
    let Some(svc_port) = svc_spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.port == port)
    else {
        return Ok(Err(NotReady {
            reason: reasons::TARGET_NOT_FOUND,
            message: format!("Service {namespace}/{name} has no port {port}"),
            starting,
        }));
    };
    let ip = svc_spec
        .cluster_ip
        .filter(|ip| !ip.is_empty() && ip != "None");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let list = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
        .await?;
    let mut metrics_targets = Vec::new();
    let mut first_ready = None;
    for slice in &list.items {
        let target_port = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name == svc_port.name || slice.ports.as_ref().is_some_and(|v| v.len() == 1))
            .and_then(|p| p.port);
        let Some(target_port) = target_port else {
            continue;
        };
        for endpoint in slice.endpoints.iter().flatten() {
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            if let (true, Some(address)) = (ready, endpoint.addresses.first()) {
                let metrics_port = spec.target.metrics_port.unwrap_or(target_port);
                metrics_targets.push(format!("http://{address}:{metrics_port}"));
                first_ready.get_or_insert_with(|| format!("http://{address}:{target_port}"));
            }
        }
    }
    metrics_targets.sort();
    if metrics_targets.is_empty() {
        return Ok(Err(NotReady {
            reason: reasons::NO_READY_ENDPOINTS,
            message: format!("Service {namespace}/{name} has no ready endpoints"),
            starting,
        }));
    }
    // The Service's virtual IP spreads load over its pods; a headless Service has none, so
    // the points go to its first ready pod.
    let url = match ip {
        Some(ip) => format!("http://{ip}:{port}"),
        None => first_ready.unwrap_or_default(),
    };
    let replicas = spec.target.replicas.unwrap_or(metrics_targets.len() as u32);
    Ok(Ok(ResolvedTarget {
        key: format!("svc/{namespace}/{name}"),
        url,
        metrics_targets,
        discover_metrics: false,
        replicas,
        time_scale: spec.target.time_scale.unwrap_or(1.0),
        model: spec.target_model(manifest),
    }))
}
