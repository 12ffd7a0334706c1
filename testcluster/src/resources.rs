//! The kinds the cluster serves: the built-ins our operator, chart and tests touch, and every
//! CRD registered at run time. Routing, discovery, OpenAPI and tables are all built from this
//! registry, as the real server builds them from its storage map.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// Storage identity of a kind: group and plural (all served versions share one store).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResKey {
    pub group: String,
    pub plural: String,
}

impl ResKey {
    pub fn new(group: &str, plural: &str) -> Self {
        Self {
            group: group.to_owned(),
            plural: plural.to_owned(),
        }
    }
}

impl std::fmt::Display for ResKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.plural)
        } else {
            write!(f, "{}.{}", self.plural, self.group)
        }
    }
}

/// When `metadata.generation` moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenerationRule {
    /// The kind has no generation (ConfigMap, Secret, Service, Pod, ...).
    None,
    /// Any change outside `metadata` and `status` (built-ins with a spec; CRDs with a status subresource).
    Spec,
    /// Spec or annotations (Deployments copy annotations to their ReplicaSets).
    SpecAndAnnotations,
    /// Any change outside `metadata` (CRDs without a status subresource).
    AllButMetadata,
}

/// The `/scale` subresource's field paths (dot-separated, no leading dot).
#[derive(Debug, Clone, PartialEq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// A column of `kubectl get` (server-side Table).
#[derive(Clone)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub value: ColumnValue,
}

#[derive(Clone)]
pub enum ColumnValue {
    /// A CRD's `additionalPrinterColumns[].jsonPath`.
    JsonPath(String),
    /// A built-in printer, as the real server compiles in.
    Computed(fn(&Value) -> Value),
}

/// One served group/version/resource.
#[derive(Clone)]
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status: bool,
    pub scale: Option<ScalePaths>,
    pub log: bool,
    pub generation: GenerationRule,
    pub printer_columns: Vec<PrinterColumn>,
    /// The CRD's `openAPIV3Schema` for this version.
    pub schema: Option<Value>,
    /// Served by a CRD (merge patch only, schema pruning and validation).
    pub crd: bool,
    /// The version objects are stored at (CRDs: the storage version).
    pub storage_version: String,
}

impl std::fmt::Debug for ResourceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} {}", self.group, self.version, self.plural)
    }
}

impl ResourceType {
    pub fn key(&self) -> ResKey {
        ResKey::new(&self.group, &self.plural)
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Path prefix of the group version: `/api/v1` or `/apis/{g}/{v}`.
    pub fn gv_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    pub fn is(&self, group: &str, plural: &str) -> bool {
        self.group == group && self.plural == plural
    }
}

/// Every served resource, by (group, version, plural).
#[derive(Clone, Default)]
pub struct Registry {
    types: BTreeMap<(String, String, String), Arc<ResourceType>>,
}

impl Registry {
    pub fn builtin() -> Self {
        let mut r = Self::default();
        for t in builtin_types() {
            r.insert(t);
        }
        r
    }

    pub fn insert(&mut self, t: ResourceType) {
        self.types.insert(
            (t.group.clone(), t.version.clone(), t.plural.clone()),
            Arc::new(t),
        );
    }

    /// Removes every version of a CRD's kind.
    pub fn remove_group_resource(&mut self, group: &str, plural: &str) {
        self.types
            .retain(|(g, _, p), _| !(g == group && p == plural));
    }

    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types
            .get(&(group.to_owned(), version.to_owned(), plural.to_owned()))
            .cloned()
    }

    /// The type objects of `key` are stored at.
    pub fn storage(&self, key: &ResKey) -> Option<Arc<ResourceType>> {
        self.types
            .values()
            .find(|t| {
                t.group == key.group && t.plural == key.plural && t.version == t.storage_version
            })
            .cloned()
    }

    /// Finds a served type by apiVersion and kind (ownerReferences, apply bodies).
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        self.types
            .values()
            .find(|t| t.api_version() == api_version && t.kind == kind)
            .cloned()
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.types.values()
    }

    /// Served group versions in a stable order: core first, then groups by name.
    pub fn group_versions(&self) -> Vec<(String, String)> {
        let mut gvs: Vec<(String, String)> = self
            .types
            .keys()
            .map(|(g, v, _)| (g.clone(), v.clone()))
            .collect();
        gvs.dedup();
        gvs
    }
}

fn col(name: &str, type_: &str, description: &str, value: fn(&Value) -> Value) -> PrinterColumn {
    PrinterColumn {
        name: name.to_owned(),
        type_: type_.to_owned(),
        format: String::new(),
        description: description.to_owned(),
        priority: 0,
        value: ColumnValue::Computed(value),
    }
}

fn age() -> PrinterColumn {
    PrinterColumn {
        name: "Age".into(),
        type_: "date".into(),
        format: String::new(),
        description: "CreationTimestamp is a timestamp representing the server time when this object was created.".into(),
        priority: 0,
        value: ColumnValue::JsonPath(".metadata.creationTimestamp".into()),
    }
}

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    short_names: &[&str],
    status: bool,
    generation: GenerationRule,
) -> ResourceType {
    ResourceType {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        namespaced,
        short_names: short_names.iter().map(|s| (*s).to_owned()).collect(),
        categories: Vec::new(),
        status,
        scale: None,
        log: false,
        generation,
        printer_columns: vec![age()],
        schema: None,
        crd: false,
        storage_version: version.into(),
    }
}

fn replicas_scale() -> Option<ScalePaths> {
    Some(ScalePaths {
        spec_replicas: "spec.replicas".into(),
        status_replicas: "status.replicas".into(),
        label_selector: None,
    })
}

fn builtin_types() -> Vec<ResourceType> {
    use GenerationRule as G;
    let mut v = vec![
        builtin(
            "",
            "v1",
            "Namespace",
            "namespaces",
            false,
            &["ns"],
            true,
            G::None,
        ),
        builtin(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            true,
            &["cm"],
            false,
            G::None,
        ),
        builtin("", "v1", "Secret", "secrets", true, &[], false, G::None),
        builtin(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            true,
            &["sa"],
            false,
            G::None,
        ),
        builtin("", "v1", "Event", "events", true, &["ev"], false, G::None),
        builtin(
            "",
            "v1",
            "Endpoints",
            "endpoints",
            true,
            &["ep"],
            false,
            G::None,
        ),
        builtin(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            true,
            &["ev"],
            false,
            G::None,
        ),
        builtin(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
            "endpointslices",
            true,
            &[],
            false,
            G::None,
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            true,
            &[],
            false,
            G::None,
        ),
        builtin(
            "autoscaling",
            "v2",
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
            true,
            &["hpa"],
            true,
            G::Spec,
        ),
        builtin(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            &["pdb"],
            true,
            G::Spec,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            true,
            &[],
            false,
            G::None,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            true,
            &[],
            false,
            G::None,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            false,
            &[],
            false,
            G::None,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
            &[],
            false,
            G::None,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            &["crd", "crds"],
            true,
            G::Spec,
        ),
    ];
    let mut pod = builtin("", "v1", "Pod", "pods", true, &["po"], true, G::None);
    pod.log = true;
    pod.categories = vec!["all".into()];
    pod.printer_columns = vec![
        col(
            "Ready",
            "string",
            "The aggregate readiness state of this pod for accepting traffic.",
            printers::pod_ready,
        ),
        col(
            "Status",
            "string",
            "The aggregate status of the containers in this pod.",
            printers::pod_status,
        ),
        col(
            "Restarts",
            "string",
            "The number of times the containers in this pod have been restarted.",
            printers::pod_restarts,
        ),
        age(),
        PrinterColumn {
            priority: 1,
            ..col(
                "IP",
                "string",
                "IP address allocated to the pod.",
                printers::pod_ip,
            )
        },
    ];
    v.push(pod);
    let mut svc = builtin(
        "",
        "v1",
        "Service",
        "services",
        true,
        &["svc"],
        true,
        G::None,
    );
    svc.categories = vec!["all".into()];
    svc.printer_columns = vec![
        col("Type", "string", "The type of service.", printers::svc_type),
        col(
            "Cluster-IP",
            "string",
            "The cluster IP of the service.",
            printers::svc_cluster_ip,
        ),
        col(
            "External-IP",
            "string",
            "The external IP of the service.",
            |_| Value::from("<none>"),
        ),
        col(
            "Port(s)",
            "string",
            "The ports of the service.",
            printers::svc_ports,
        ),
        age(),
    ];
    v.push(svc);
    let mut deploy = builtin(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        true,
        &["deploy"],
        true,
        G::SpecAndAnnotations,
    );
    deploy.scale = replicas_scale();
    deploy.categories = vec!["all".into()];
    deploy.printer_columns = vec![
        col(
            "Ready",
            "string",
            "Number of the pod with ready state",
            printers::ready_of_replicas,
        ),
        col(
            "Up-to-date",
            "string",
            "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
            |o| {
                o.pointer("/status/updatedReplicas")
                    .cloned()
                    .unwrap_or(Value::from(0))
            },
        ),
        col(
            "Available",
            "string",
            "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
            |o| {
                o.pointer("/status/availableReplicas")
                    .cloned()
                    .unwrap_or(Value::from(0))
            },
        ),
        age(),
    ];
    v.push(deploy);
    let mut sts = builtin(
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        true,
        &["sts"],
        true,
        G::Spec,
    );
    sts.scale = replicas_scale();
    sts.categories = vec!["all".into()];
    sts.printer_columns = vec![
        col(
            "Ready",
            "string",
            "Number of the pod with ready state",
            printers::ready_of_replicas,
        ),
        age(),
    ];
    v.push(sts);
    let mut job = builtin("batch", "v1", "Job", "jobs", true, &[], true, G::Spec);
    job.categories = vec!["all".into()];
    job.printer_columns = vec![
        col(
            "Status",
            "string",
            "Status of the job.",
            printers::job_status,
        ),
        col(
            "Completions",
            "string",
            "The completion status of the job",
            printers::job_completions,
        ),
        col(
            "Duration",
            "string",
            "Time required to complete the job.",
            printers::job_duration,
        ),
        age(),
    ];
    v.push(job);
    v
}

/// Computed columns of the built-in kinds, after kubernetes `pkg/printers/internalversion`.
mod printers {
    use serde_json::Value;

    fn s(v: &Value, p: &str) -> String {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }

    fn n(v: &Value, p: &str) -> i64 {
        v.pointer(p).and_then(Value::as_i64).unwrap_or(0)
    }

    fn statuses(v: &Value) -> Vec<&Value> {
        v.pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default()
    }

    pub fn pod_ready(v: &Value) -> Value {
        let total = v
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let ready = statuses(v)
            .iter()
            .filter(|c| c["ready"] == Value::Bool(true))
            .count();
        Value::from(format!("{ready}/{total}"))
    }

    pub fn pod_status(v: &Value) -> Value {
        if v.pointer("/metadata/deletionTimestamp").is_some() {
            return Value::from("Terminating");
        }
        for c in statuses(v) {
            if let Some(r) = c.pointer("/state/waiting/reason").and_then(Value::as_str) {
                return Value::from(r);
            }
            // kubectl prints a finished container's reason: Completed, Error, OOMKilled.
            if let Some(r) = c
                .pointer("/state/terminated/reason")
                .and_then(Value::as_str)
            {
                return Value::from(r);
            }
        }
        let phase = s(v, "/status/phase");
        Value::from(if phase.is_empty() {
            "Pending".to_owned()
        } else {
            phase
        })
    }

    pub fn pod_restarts(v: &Value) -> Value {
        let r: i64 = statuses(v)
            .iter()
            .map(|c| c["restartCount"].as_i64().unwrap_or(0))
            .sum();
        Value::from(r.to_string())
    }

    pub fn pod_ip(v: &Value) -> Value {
        let ip = s(v, "/status/podIP");
        Value::from(if ip.is_empty() {
            "<none>".to_owned()
        } else {
            ip
        })
    }

    pub fn svc_type(v: &Value) -> Value {
        let t = s(v, "/spec/type");
        Value::from(if t.is_empty() {
            "ClusterIP".to_owned()
        } else {
            t
        })
    }

    pub fn svc_cluster_ip(v: &Value) -> Value {
        let ip = s(v, "/spec/clusterIP");
        Value::from(if ip.is_empty() {
            "<none>".to_owned()
        } else {
            ip
        })
    }

    pub fn svc_ports(v: &Value) -> Value {
        let ports: Vec<String> = v
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
                    .collect()
            })
            .unwrap_or_default();
        Value::from(if ports.is_empty() {
            "<none>".to_owned()
        } else {
            ports.join(",")
        })
    }

    pub fn ready_of_replicas(v: &Value) -> Value {
        Value::from(format!(
            "{}/{}",
            n(v, "/status/readyReplicas"),
            n(v, "/spec/replicas")
        ))
    }

    fn condition(v: &Value, type_: &str) -> bool {
        v.pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == type_ && c["status"] == "True")
            })
    }

    pub fn job_status(v: &Value) -> Value {
        let st = if condition(v, "Complete") {
            "Complete"
        } else if condition(v, "Failed") {
            "Failed"
        } else if v.pointer("/metadata/deletionTimestamp").is_some()
            || condition(v, "SuccessCriteriaMet")
            || condition(v, "FailureTarget")
        {
            "Terminating"
        } else if condition(v, "Suspended") {
            "Suspended"
        } else {
            "Running"
        };
        Value::from(st)
    }

    pub fn job_completions(v: &Value) -> Value {
        let completions = v.pointer("/spec/completions").and_then(Value::as_i64);
        let succeeded = n(v, "/status/succeeded");
        Value::from(match completions {
            Some(c) => format!("{succeeded}/{c}"),
            None => format!("{succeeded}/1 of {}", n(v, "/spec/parallelism").max(1)),
        })
    }

    pub fn job_duration(v: &Value) -> Value {
        let start = s(v, "/status/startTime");
        let end = s(v, "/status/completionTime");
        let (Ok(a), end) = (start.parse::<jiff::Timestamp>(), end) else {
            return Value::from("");
        };
        let b = end
            .parse::<jiff::Timestamp>()
            .unwrap_or_else(|_| jiff::Timestamp::now());
        Value::from(crate::time::human_duration(b.as_second() - a.as_second()))
    }
}
