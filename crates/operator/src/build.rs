//! Pure builders: the objects a benchmark owns, from the validated benchmark and the point
//! the driver chose. Nothing here talks to the API server; `apply` writes what these return.
//!
//! Every object is named deterministically from the benchmark (so a restarted operator finds
//! what it created), carries the benchmark's labels and a controller `ownerReference` to it
//! (so deleting the benchmark deletes them), and has `apiVersion`/`kind` set for server-side
//! apply.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource,
    EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector, PersistentVolumeClaimVolumeSource,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile,
    SecretKeySelector, SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec, Volume,
    VolumeMount,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use goodput_api::{LoadgenSettings, ResultsBucket, SimulatedTarget};
use goodput_core::workload::hashing::fnv1a;

/// Labels every owned object carries.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The benchmark an object belongs to (its name, shortened to a label value).
pub const BENCHMARK_LABEL: &str = "goodput.dev/benchmark";
/// The role of an owned object: `loadgen`, `simulated-engine`, `result`, `point`.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// The port the simulated engine serves on.
pub const SIMULATED_PORT: i32 = 8000;
/// Where a loadgen pod finds its point file.
const POINT_MOUNT: &str = "/etc/goodput";
/// Key of the point file in the point ConfigMap.
pub const POINT_KEY: &str = "point.json";

/// The owner of everything built here.
#[derive(Clone, Debug)]
pub struct Owner {
    /// The benchmark's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its controller `ownerReference`.
    pub reference: OwnerReference,
}

impl Owner {
    /// Up to 40 characters of the benchmark's name, with a hash of the whole name when cut,
    /// so derived names stay within 63 characters (Job names become pod label values).
    pub fn base(&self) -> String {
        short_name(&self.name, 40)
    }

    fn meta(&self, name: String, component: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels(component)),
            owner_references: Some(vec![self.reference.clone()]),
            ..Default::default()
        }
    }

    /// The labels of an owned object with this component.
    pub fn labels(&self, component: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (MANAGED_BY.to_owned(), "goodput".to_owned()),
            (BENCHMARK_LABEL.to_owned(), short_name(&self.name, 63)),
            (COMPONENT_LABEL.to_owned(), component.to_owned()),
        ])
    }

    /// The Job of the point with this index in this generation of the spec; a retry
    /// (`attempt` > 0) gets its own name, so its pods and results never mix with the
    /// failed attempt's.
    pub fn job_name(&self, generation: i64, index: usize, attempt: u32) -> String {
        match attempt {
            0 => format!("{}-g{generation}-p{index}", self.base()),
            a => format!("{}-g{generation}-p{index}-a{a}", self.base()),
        }
    }

    /// The Job of the load of failure test `index` (of `spec.failureTest.faults`).
    pub fn failure_job_name(&self, generation: i64, index: u32) -> String {
        format!("{}-g{generation}-f{index}", self.base())
    }

    /// The simulated engine's Deployment and Service.
    pub fn simulated_name(&self) -> String {
        format!("{}-sim", self.base())
    }

    /// The loadgen pods' ServiceAccount, Role and RoleBinding.
    pub fn loadgen_name(&self) -> String {
        format!("{}-loadgen", self.base())
    }
}

/// `name` if it fits in `max` characters, else its first part and a hash of the whole.
fn short_name(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_owned();
    }
    let hash = format!("{:08x}", fnv1a(0, name.as_bytes()) as u32);
    let keep = max - hash.len() - 1;
    let head: String = name.chars().take(keep).collect();
    format!("{}-{hash}", head.trim_end_matches(['-', '.']))
}

/// The ConfigMap a shard writes its result into.
pub fn result_config_map_name(job: &str, shard: u32) -> String {
    format!("{job}-{shard}")
}

/// The ConfigMap holding a point's file (what the loadgen pods run).
pub fn point_config_map_name(job: &str) -> String {
    format!("{job}-point")
}

/// The point file's ConfigMap.
pub fn point_config_map(owner: &Owner, job: &str, point_json: String) -> ConfigMap {
    ConfigMap {
        metadata: owner.meta(point_config_map_name(job), "point"),
        data: Some(BTreeMap::from([(POINT_KEY.to_owned(), point_json)])),
        ..Default::default()
    }
}

/// An empty result ConfigMap for one shard; the shard's pod fills it.
pub fn result_config_map(owner: &Owner, job: &str, shard: u32) -> ConfigMap {
    ConfigMap {
        metadata: owner.meta(result_config_map_name(job, shard), "result"),
        ..Default::default()
    }
}

/// The loadgen pods' identity: it may read and write only the result ConfigMaps named.
pub fn loadgen_rbac(owner: &Owner, results: Vec<String>) -> (ServiceAccount, Role, RoleBinding) {
    let name = owner.loadgen_name();
    let account = ServiceAccount {
        metadata: owner.meta(name.clone(), "loadgen"),
        ..Default::default()
    };
    let role = Role {
        metadata: owner.meta(name.clone(), "loadgen"),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            resource_names: Some(results),
            verbs: vec!["get".into(), "patch".into(), "update".into()],
            ..Default::default()
        }]),
    };
    let binding = RoleBinding {
        metadata: owner.meta(name.clone(), "loadgen"),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name,
            namespace: Some(owner.namespace.clone()),
            ..Default::default()
        }]),
    };
    (account, role, binding)
}

/// What a point's Job runs.
#[derive(Clone, Debug)]
pub struct PointJobSpec {
    /// The Job's name.
    pub name: String,
    /// The image (`goodput`) the pods run.
    pub image: String,
    /// Shards: pods that each drive `1/shards` of the schedule (an Indexed Job).
    pub shards: u32,
    /// Seconds the Job may run before it fails (a Job that never starts times out).
    pub deadline_seconds: i64,
    /// The shards' common start (Unix seconds), when sharded.
    pub start_at: Option<f64>,
    /// Where shards keep their raw results: a claim or a bucket, and the point's directory.
    pub results: Option<ResultsSink>,
    /// The loadgen container's requests and limits (the operator's `--loadgen-resources`).
    pub resources: Option<ResourceRequirements>,
    /// Where the pods serve their client metrics (`--loadgen-metrics-addr`); `None`: not
    /// served.
    pub metrics_addr: Option<String>,
}

/// `POD_IP`: the pod's address, from the downward API (`$(POD_IP)` in args).
fn pod_ip_env() -> EnvVar {
    EnvVar {
        name: "POD_IP".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "status.podIP".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The port of a `HOST:PORT` whose HOST may be `$(POD_IP)` or `[$(POD_IP)]` (the pod's
/// address, which the kubelet substitutes); `None` unless it parses with a port above 0.
pub fn pod_addr_port(addr: &str) -> Option<u16> {
    let concrete = addr
        .replace("[$(POD_IP)]", "[::1]")
        .replace("$(POD_IP)", "127.0.0.1");
    concrete
        .parse::<std::net::SocketAddr>()
        .ok()
        .map(|a| a.port())
        .filter(|p| *p > 0)
}

/// Where a point's shards keep their raw results, and the point's directory there
/// (`<benchmark>/g<generation>/<job>`); shard `i` writes `shard-<i>/` under it.
#[derive(Clone, Debug)]
pub struct ResultsSink {
    /// The claim or the bucket.
    pub store: ResultsStore,
    /// The point's directory in it.
    pub dir: String,
}

/// The place raw results go: `spec.loadgen.resultsClaim` or `spec.loadgen.resultsBucket`.
#[derive(Clone, Debug)]
pub enum ResultsStore {
    /// A PersistentVolumeClaim, mounted in every pod of the point.
    Claim(String),
    /// An S3-compatible bucket the pods upload to.
    Bucket(ResultsBucket),
}

impl ResultsStore {
    /// The spec's results store, if it names one (the lint allows at most one).
    pub fn of(loadgen: &LoadgenSettings) -> Option<Self> {
        match (&loadgen.results_claim, &loadgen.results_bucket) {
            (Some(claim), _) => Some(ResultsStore::Claim(claim.clone())),
            (None, Some(bucket)) => Some(ResultsStore::Bucket(bucket.clone())),
            (None, None) => None,
        }
    }

    /// Where directory `dir` of the store is, as `status.pack` and the loadgen pods name
    /// it: `pvc/<claim>/<dir>` or `s3://<bucket>[/<prefix>]/<dir>`.
    pub fn location(&self, dir: &str) -> String {
        match self {
            ResultsStore::Claim(claim) => format!("pvc/{claim}/{dir}"),
            ResultsStore::Bucket(bucket) => match bucket.bucket_and_prefix() {
                Some((name, "")) => format!("s3://{name}/{dir}"),
                Some((name, prefix)) => format!("s3://{name}/{prefix}/{dir}"),
                // Refused by the lint before any Job; kept verbatim so the pod says why.
                None => format!("{}/{dir}", bucket.url.trim_end_matches('/')),
            },
        }
    }
}

/// Where the results claim is mounted in a loadgen pod.
const RESULTS_MOUNT: &str = "/var/lib/goodput-results";
/// Where a loadgen pod writes its files when they go nowhere else (an emptyDir); a bucket
/// sink uploads them from here.
const LOCAL_OUT: &str = "/var/lib/goodput/point";
/// The keys of a bucket's credentials Secret, given to the pod as variables of the same
/// name, and whether each must be there.
const BUCKET_CREDENTIALS: [(&str, bool); 3] = [
    ("AWS_ACCESS_KEY_ID", true),
    ("AWS_SECRET_ACCESS_KEY", true),
    ("AWS_SESSION_TOKEN", false),
];

/// The UID and GID of the pods the operator creates: the image's `nonroot` user.
const POD_USER: i64 = 65532;

/// The pod-level half of the lock-down the `restricted` Pod Security Standard asks for: a
/// non-root user and group (which also own mounted volumes, so a results claim is
/// writable) and the runtime's default seccomp profile.
fn restricted_pod() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(POD_USER),
        run_as_group: Some(POD_USER),
        fs_group: Some(POD_USER),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The container-level half: a read-only root filesystem (pods write only to their
/// volumes), no privilege escalation, every capability dropped.
fn restricted_container() -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A point's Job: `goodput loadgen --point-file` in every pod, pod `i` running shard `i`
/// and writing its result ConfigMap.
pub fn point_job(owner: &Owner, spec: &PointJobSpec) -> Job {
    let mut env = Vec::new();
    let mut mounts = vec![
        VolumeMount {
            name: "point".into(),
            mount_path: POINT_MOUNT.into(),
            read_only: Some(true),
            ..Default::default()
        },
        VolumeMount {
            name: "out".into(),
            mount_path: "/var/lib/goodput".into(),
            ..Default::default()
        },
    ];
    let mut volumes = vec![
        Volume {
            name: "point".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: point_config_map_name(&spec.name),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: "out".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    ];
    // The files go to the claim's directory, else to the pod's emptyDir (uploaded from
    // there to a bucket, or kept only in the result ConfigMap).
    let mut out = LOCAL_OUT.to_owned();
    let mut upload = Vec::new();
    if let Some(sink) = &spec.results {
        match &sink.store {
            ResultsStore::Claim(claim) => {
                out = format!("{RESULTS_MOUNT}/{}/shard-$(JOB_COMPLETION_INDEX)", sink.dir);
                mounts.push(VolumeMount {
                    name: "results".into(),
                    mount_path: RESULTS_MOUNT.into(),
                    ..Default::default()
                });
                volumes.push(Volume {
                    name: "results".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: claim.clone(),
                        read_only: None,
                    }),
                    ..Default::default()
                });
            }
            ResultsStore::Bucket(bucket) => {
                upload.extend([
                    "--results-url".to_owned(),
                    format!(
                        "{}/shard-$(JOB_COMPLETION_INDEX)",
                        sink.store.location(&sink.dir)
                    ),
                ]);
                if let Some(endpoint) = &bucket.endpoint {
                    upload.extend(["--results-endpoint".to_owned(), endpoint.clone()]);
                }
                if let Some(region) = &bucket.region {
                    upload.extend(["--results-region".to_owned(), region.clone()]);
                }
                if bucket.allow_http {
                    upload.push("--results-allow-http".to_owned());
                }
                // The credentials stay in the Secret: the pod reads them as variables.
                if let Some(secret) = &bucket.credentials_secret {
                    env.extend(BUCKET_CREDENTIALS.iter().map(|&(key, required)| EnvVar {
                        name: key.into(),
                        value_from: Some(EnvVarSource {
                            secret_key_ref: Some(SecretKeySelector {
                                name: secret.clone(),
                                key: key.into(),
                                optional: (!required).then_some(true),
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }));
                }
            }
        }
    }
    let mut args = vec![
        "loadgen".to_owned(),
        "--point-file".to_owned(),
        format!("{POINT_MOUNT}/{POINT_KEY}"),
        "--shard".to_owned(),
        format!("$(JOB_COMPLETION_INDEX)/{}", spec.shards),
        "--result-config-map".to_owned(),
        format!("{}-$(JOB_COMPLETION_INDEX)", spec.name),
        "--out".to_owned(),
        out,
        "--quiet".to_owned(),
    ];
    args.extend(upload);
    if let Some(at) = spec.start_at {
        args.extend(["--start-at".to_owned(), format!("{at:.3}")]);
    }
    // The client metrics on the pod's address, on a port named for a PodMonitor.
    let metrics_port = spec.metrics_addr.as_deref().and_then(|addr| {
        let port = pod_addr_port(addr)?;
        args.extend(["--metrics-addr".to_owned(), addr.to_owned()]);
        env.push(pod_ip_env());
        Some(ContainerPort {
            name: Some("metrics".into()),
            container_port: i32::from(port),
            ..Default::default()
        })
    });
    let labels = owner.labels("loadgen");
    Job {
        metadata: owner.meta(spec.name.clone(), "loadgen"),
        spec: Some(JobSpec {
            completions: Some(spec.shards as i32),
            parallelism: Some(spec.shards as i32),
            completion_mode: Some("Indexed".into()),
            // A failed pod fails the Job: the operator starts the whole point again (every
            // shard on a new common start), since a lone shard rerun late is off the timeline.
            backoff_limit: Some(0),
            active_deadline_seconds: Some(spec.deadline_seconds),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    service_account_name: Some(owner.loadgen_name()),
                    security_context: Some(restricted_pod()),
                    containers: vec![Container {
                        name: "loadgen".into(),
                        image: Some(spec.image.clone()),
                        args: Some(args),
                        volume_mounts: Some(mounts),
                        env: (!env.is_empty()).then_some(env),
                        ports: metrics_port.map(|p| vec![p]),
                        resources: spec.resources.clone(),
                        security_context: Some(restricted_container()),
                        // A failed pod's reason in the point's status is its log's last line.
                        termination_message_policy: Some("FallbackToLogsOnError".into()),
                        ..Default::default()
                    }],
                    volumes: Some(volumes),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The simulated engine (`goodput serve-sim`: its replicas behind its router, in one pod) as
/// a Deployment and a Service, the way `goodput bench` starts it in-process.
pub fn simulated_target(
    owner: &Owner,
    image: &str,
    sim: &SimulatedTarget,
) -> Result<(Deployment, Service), serde_json::Error> {
    let name = owner.simulated_name();
    let mut args = vec![
        "serve-sim".to_owned(),
        "--host".to_owned(),
        "$(POD_IP)".to_owned(),
        "--port".to_owned(),
        SIMULATED_PORT.to_string(),
        "--preset".to_owned(),
        sim.preset.clone(),
        "--replicas".to_owned(),
        sim.replicas.max(1).to_string(),
        "--time-scale".to_owned(),
        // `auto` never gets here: cluster_unsupported refuses it with the spec.
        sim.time_scale.fixed().unwrap_or(1.0).to_string(),
        "--stream-interval".to_owned(),
        sim.stream_interval.max(1).to_string(),
        "--cold-start-ms".to_owned(),
        "1000".to_owned(),
    ];
    for (field, value) in &sim.overrides {
        // JSON is YAML: `--set` parses the value as YAML.
        args.extend([
            "--set".to_owned(),
            format!("{field}={}", serde_json::to_string(value)?),
        ]);
    }
    let mut selector = owner.labels("simulated-engine");
    selector.remove(MANAGED_BY);
    let labels = owner.labels("simulated-engine");
    let deployment = Deployment {
        metadata: owner.meta(name.clone(), "simulated-engine"),
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(selector.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    security_context: Some(restricted_pod()),
                    containers: vec![Container {
                        name: "engine".into(),
                        image: Some(image.to_owned()),
                        args: Some(args),
                        security_context: Some(restricted_container()),
                        env: Some(vec![pod_ip_env()]),
                        ports: Some(vec![ContainerPort {
                            name: Some("http".into()),
                            container_port: SIMULATED_PORT,
                            ..Default::default()
                        }]),
                        readiness_probe: Some(Probe {
                            http_get: Some(HTTPGetAction {
                                path: Some("/health".into()),
                                port: IntOrString::String("http".into()),
                                ..Default::default()
                            }),
                            period_seconds: Some(1),
                            // An engine under a load test answers slowly: it is not gone.
                            timeout_seconds: Some(5),
                            failure_threshold: Some(30),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let service = Service {
        metadata: owner.meta(name, "simulated-engine"),
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: SIMULATED_PORT,
                target_port: Some(IntOrString::String("http".into())),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok((deployment, service))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(name: &str) -> Owner {
        Owner {
            name: name.into(),
            namespace: "llm".into(),
            reference: OwnerReference {
                api_version: "goodput.dev/v1alpha1".into(),
                kind: "CapacityBenchmark".into(),
                name: name.into(),
                uid: "u-1".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
        }
    }

    #[test]
    fn names_stay_within_label_limits_and_are_stable() {
        let long = "a-very-long-benchmark-name-that-goes-on-and-on-for-far-too-many-characters";
        let o = owner(long);
        let job = o.job_name(12, 345, 0);
        assert!(job.len() <= 63, "{job}");
        assert_eq!(job, owner(long).job_name(12, 345, 0), "deterministic");
        assert_ne!(
            o.base(),
            owner(&format!("{long}-2")).base(),
            "two long names that share a prefix stay apart"
        );
        assert_eq!(owner("qwen").job_name(1, 0, 0), "qwen-g1-p0");
        assert_eq!(owner("qwen").job_name(1, 0, 2), "qwen-g1-p0-a2");
        assert!(o.labels("loadgen")[BENCHMARK_LABEL].len() <= 63);
    }

    #[test]
    fn loadgen_pods_serve_client_metrics_on_their_address_when_asked() {
        let o = owner("qwen");
        let spec = |metrics_addr: Option<&str>| PointJobSpec {
            metrics_addr: metrics_addr.map(str::to_owned),
            name: o.job_name(1, 0, 0),
            image: "goodput:test".into(),
            shards: 1,
            deadline_seconds: 600,
            start_at: None,
            results: None,
            resources: None,
        };
        let container = |job: &Job| {
            job.spec
                .as_ref()
                .expect("spec")
                .template
                .spec
                .as_ref()
                .expect("pod")
                .containers[0]
                .clone()
        };
        let c = container(&point_job(&o, &spec(Some("$(POD_IP):9090"))));
        let args = c.args.clone().unwrap_or_default();
        let at = args
            .iter()
            .position(|a| a == "--metrics-addr")
            .expect("the flag");
        assert_eq!(args[at + 1], "$(POD_IP):9090");
        let port = &c.ports.as_ref().expect("a port")[0];
        assert_eq!(
            (port.name.as_deref(), port.container_port),
            (Some("metrics"), 9090)
        );
        let pod_ip = c
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "POD_IP")
            .expect("POD_IP");
        assert_eq!(
            pod_ip
                .value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.as_str()),
            Some("status.podIP")
        );
        let off = container(&point_job(&o, &spec(None)));
        assert!(off.ports.is_none());
        assert!(
            !off.args
                .unwrap_or_default()
                .contains(&"--metrics-addr".to_owned())
        );
        assert_eq!(pod_addr_port("[$(POD_IP)]:9100"), Some(9100));
        assert_eq!(pod_addr_port("0.0.0.0:9090"), Some(9090));
        assert_eq!(
            pod_addr_port("$(POD_IP):0"),
            None,
            "a PodMonitor needs a fixed port"
        );
        assert_eq!(pod_addr_port("$(POD_IP)"), None);
    }

    #[test]
    fn a_point_job_is_indexed_owned_and_writes_its_shard_result() {
        let o = owner("qwen");
        let job = point_job(
            &o,
            &PointJobSpec {
                metrics_addr: None,
                name: o.job_name(1, 3, 0),
                image: "goodput:test".into(),
                shards: 4,
                deadline_seconds: 600,
                start_at: Some(1_700_000_000.5),
                results: None,
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "cpu".to_owned(),
                        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
                    )])),
                    ..Default::default()
                }),
            },
        );
        let spec = job.spec.as_ref().expect("a spec");
        assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
        assert_eq!((spec.completions, spec.parallelism), (Some(4), Some(4)));
        assert_eq!(
            spec.backoff_limit,
            Some(0),
            "the operator retries whole points"
        );
        assert_eq!(
            job.metadata.owner_references.as_ref().map(Vec::len),
            Some(1)
        );
        let pod = spec.template.spec.as_ref().expect("a pod");
        let args = pod.containers[0].args.clone().unwrap_or_default();
        let joined = args.join(" ");
        assert!(
            joined.contains("--shard $(JOB_COMPLETION_INDEX)/4"),
            "{joined}"
        );
        assert!(
            joined.contains("--result-config-map qwen-g1-p3-$(JOB_COMPLETION_INDEX)"),
            "{joined}"
        );
        assert!(joined.contains("--start-at 1700000000.500"), "{joined}");
        assert_eq!(pod.service_account_name.as_deref(), Some("qwen-loadgen"));
        assert_eq!(result_config_map_name("qwen-g1-p3", 2), "qwen-g1-p3-2");
        let requests = pod.containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .expect("the operator's loadgen requests");
        assert_eq!(requests["cpu"].0, "1");
        assert_locked_down(pod);
    }

    /// What the `restricted` Pod Security Standard asks of every pod the operator creates.
    fn assert_locked_down(pod: &PodSpec) {
        let p = pod
            .security_context
            .as_ref()
            .expect("a pod security context");
        assert_eq!(p.run_as_non_root, Some(true));
        assert!(p.run_as_user.is_some_and(|u| u != 0));
        assert_eq!(
            p.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
            Some("RuntimeDefault")
        );
        for c in &pod.containers {
            let s = c
                .security_context
                .as_ref()
                .expect("a container security context");
            assert_eq!(s.read_only_root_filesystem, Some(true), "{}", c.name);
            assert_eq!(s.allow_privilege_escalation, Some(false), "{}", c.name);
            let drop = s.capabilities.as_ref().and_then(|c| c.drop.clone());
            assert_eq!(drop, Some(vec!["ALL".to_owned()]), "{}", c.name);
        }
    }

    #[test]
    fn a_bucket_sink_passes_the_shards_location_and_the_secrets_keys_never_their_values() {
        let o = owner("qwen");
        let bucket = ResultsBucket {
            url: "s3://results/runs/".into(),
            endpoint: Some("http://minio:9000".into()),
            region: Some("eu-west-1".into()),
            credentials_secret: Some("s3-credentials".into()),
            allow_http: true,
        };
        let store = ResultsStore::Bucket(bucket.clone());
        assert_eq!(store.location("qwen/g1"), "s3://results/runs/qwen/g1");
        let bare = ResultsStore::Bucket(ResultsBucket {
            url: "s3://results".into(),
            ..bucket.clone()
        });
        assert_eq!(bare.location("qwen/g1"), "s3://results/qwen/g1");
        assert_eq!(
            ResultsStore::Claim("keep".into()).location("qwen/g1"),
            "pvc/keep/qwen/g1"
        );
        let job = point_job(
            &o,
            &PointJobSpec {
                metrics_addr: None,
                name: o.job_name(1, 0, 0),
                image: "goodput:test".into(),
                shards: 2,
                deadline_seconds: 600,
                start_at: None,
                results: Some(ResultsSink {
                    store,
                    dir: "qwen/g1/qwen-g1-p0".into(),
                }),
                resources: None,
            },
        );
        let pod = job.spec.and_then(|s| s.template.spec).expect("a pod");
        let c = &pod.containers[0];
        let args = c.args.clone().unwrap_or_default().join(" ");
        assert!(args.contains("--out /var/lib/goodput/point "), "{args}");
        assert!(
            args.contains(
                "--results-url s3://results/runs/qwen/g1/qwen-g1-p0/shard-$(JOB_COMPLETION_INDEX) \
                 --results-endpoint http://minio:9000 --results-region eu-west-1 \
                 --results-allow-http"
            ),
            "{args}"
        );
        assert!(
            !pod.volumes
                .unwrap_or_default()
                .iter()
                .any(|v| v.persistent_volume_claim.is_some())
        );
        let env = c.env.clone().unwrap_or_default();
        let refs: Vec<(String, String, Option<bool>)> = env
            .iter()
            .map(|e| {
                assert!(e.value.is_none(), "{e:?}");
                let r = e
                    .value_from
                    .as_ref()
                    .and_then(|v| v.secret_key_ref.clone())
                    .expect("from the Secret");
                assert_eq!(r.name, "s3-credentials");
                (e.name.clone(), r.key, r.optional)
            })
            .collect();
        assert_eq!(
            refs,
            [
                ("AWS_ACCESS_KEY_ID".into(), "AWS_ACCESS_KEY_ID".into(), None),
                (
                    "AWS_SECRET_ACCESS_KEY".into(),
                    "AWS_SECRET_ACCESS_KEY".into(),
                    None
                ),
                (
                    "AWS_SESSION_TOKEN".into(),
                    "AWS_SESSION_TOKEN".into(),
                    Some(true)
                ),
            ]
        );
    }

    #[test]
    fn the_loadgen_role_writes_only_the_named_results() {
        let (_, role, binding) = loadgen_rbac(&owner("qwen"), vec!["qwen-g1-p0-0".into()]);
        let rules = role.rules.unwrap_or_default();
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].resource_names.as_deref(),
            Some(&["qwen-g1-p0-0".to_owned()][..])
        );
        assert!(
            !rules[0]
                .verbs
                .iter()
                .any(|v| v == "create" || v == "delete")
        );
        assert_eq!(binding.role_ref.name, "qwen-loadgen");
    }

    #[test]
    fn the_simulated_target_runs_serve_sim_with_the_spec_setup() {
        let sim = SimulatedTarget {
            preset: "qwen2.5-7b-h100".into(),
            overrides: BTreeMap::from([("prefix_caching".into(), serde_json::json!(true))]),
            replicas: 2,
            time_scale: goodput_api::TimeScale::Fixed(25.0),
            stream_interval: 16,
        };
        let (deployment, service) =
            simulated_target(&owner("qwen"), "goodput:test", &sim).expect("builds");
        let pod = deployment.spec.template.spec.expect("a pod");
        let args = pod.containers[0].args.clone().unwrap_or_default().join(" ");
        assert!(
            args.starts_with("serve-sim --host $(POD_IP) --port 8000"),
            "{args}"
        );
        assert!(args.contains("--replicas 2 --time-scale 25"), "{args}");
        assert!(args.contains("--set prefix_caching=true"), "{args}");
        assert_locked_down(&pod);
        assert_eq!(
            service.spec.and_then(|s| s.selector),
            Some(BTreeMap::from([
                (BENCHMARK_LABEL.to_owned(), "qwen".to_owned()),
                (COMPONENT_LABEL.to_owned(), "simulated-engine".to_owned()),
            ]))
        );
    }
}
