//! What the real API server does to built-in objects on the way in: defaults (Pod
//! restartPolicy, Job selector and labels, Deployment strategy, Service cluster IP, ...),
//! validation that our clients trip over (a Job's restartPolicy, a Deployment's selector),
//! and immutability (a Job's template and selector).

use std::net::Ipv4Addr;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU32, Ordering};

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::resources::ResourceType;
use crate::selector::LabelSelector;

/// Cluster IPs from 127.96.0.0/16 (loopback, so the proxy can listen on them). The counter
/// is shared by every cluster in the process, so two test clusters never give two Services
/// the same address (their proxies would fight over the port), and starts at a random
/// point, so clusters in different processes are unlikely to meet either.
#[derive(Default)]
pub struct ClusterIps;

static NEXT_CLUSTER_IP: LazyLock<AtomicU32> =
    LazyLock::new(|| AtomicU32::new(rand::random::<u32>() % 65_536));

impl ClusterIps {
    pub fn allocate(&self) -> String {
        loop {
            let n = NEXT_CLUSTER_IP.fetch_add(1, Ordering::Relaxed) % 65_536;
            // Skip .0 and .255 host parts: some clients treat them as network or broadcast.
            if !n.is_multiple_of(256) && n % 256 != 255 {
                return Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 96, 0, 0)) + n).to_string();
            }
        }
    }
}

type Cause = (String, String, String);

fn invalid(rt: &ResourceType, obj: &Value, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(
        &rt.group,
        &rt.kind,
        obj.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        causes,
    )
}

fn cause(field: &str, reason: &str, message: String) -> Cause {
    (field.to_owned(), reason.to_owned(), message)
}

fn set_default(obj: &mut Map<String, Value>, key: &str, v: Value) {
    if obj.get(key).is_none_or(Value::is_null) {
        obj.insert(key.to_owned(), v);
    }
}

/// Defaults and validates a built-in object before it is stored. `old` is the stored
/// object on updates. `ips` allocates Service cluster IPs.
pub fn admit(
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
    ips: &ClusterIps,
) -> Result<(), ApiError> {
    if rt.crd {
        return Ok(());
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces") => {
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                let labels = m.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), Value::from(name));
                }
            }
            if old.is_none() {
                obj["status"] = json!({"phase": "Active"});
            }
            if let Some(o) = obj.as_object_mut() {
                let spec = o.entry("spec").or_insert_with(|| json!({}));
                if let Some(s) = spec.as_object_mut() {
                    set_default(s, "finalizers", json!(["kubernetes"]));
                }
            }
        }
        ("", "pods") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                default_pod_spec(spec, true);
            }
            validate_pod_spec(rt, obj, "spec")?;
            if old.is_none() {
                obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            } else if let Some(old) = old {
                // Only the scheduler binding (nodeName) and a few fields may change on a pod.
                let mut a = old["spec"].clone();
                let mut b = obj["spec"].clone();
                for s in [&mut a, &mut b] {
                    if let Some(m) = s.as_object_mut() {
                        m.remove("nodeName");
                        m.remove("activeDeadlineSeconds");
                        m.remove("tolerations");
                    }
                    strip_images(s);
                }
                if a != b {
                    return Err(invalid(
                        rt,
                        obj,
                        vec![cause(
                            "spec",
                            "FieldValueForbidden",
                            "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) or `spec.terminationGracePeriodSeconds`".into(),
                        )],
                    ));
                }
            }
        }
        ("", "services") => {
            let old_ip = old.and_then(|o| o.pointer("/spec/clusterIP")).cloned();
            let spec = obj
                .as_object_mut()
                .map(|o| o.entry("spec").or_insert_with(|| json!({})))
                .and_then(Value::as_object_mut);
            if let Some(spec) = spec {
                set_default(spec, "type", Value::from("ClusterIP"));
                set_default(spec, "sessionAffinity", Value::from("None"));
                set_default(spec, "internalTrafficPolicy", Value::from("Cluster"));
                set_default(spec, "ipFamilies", json!(["IPv4"]));
                set_default(spec, "ipFamilyPolicy", Value::from("SingleStack"));
                match (&old_ip, spec.get("clusterIP").and_then(Value::as_str)) {
                    (Some(old), None) | (Some(old), Some("")) => {
                        spec.insert("clusterIP".into(), old.clone());
                    }
                    (Some(old), Some(new)) if old.as_str() != Some(new) => {
                        return Err(ApiError::invalid(
                            "",
                            "Service",
                            "",
                            vec![cause(
                                "spec.clusterIPs[0]",
                                "FieldValueInvalid",
                                format!(
                                    "spec.clusterIPs[0]: Invalid value: []string{{\"{new}\"}}: may not change once set"
                                ),
                            )],
                        ));
                    }
                    (None, None) | (None, Some("")) => {
                        spec.insert("clusterIP".into(), Value::from(ips.allocate()));
                    }
                    _ => {}
                }
                if let Some(ip) = spec.get("clusterIP").cloned() {
                    spec.insert("clusterIPs".into(), json!([ip]));
                }
                if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        if let Some(p) = p.as_object_mut() {
                            set_default(p, "protocol", Value::from("TCP"));
                            if let Some(port) = p.get("port").cloned() {
                                set_default(p, "targetPort", port);
                            }
                        }
                    }
                }
            }
            if old.is_none() {
                obj["status"] = json!({"loadBalancer": {}});
            }
        }
        ("", "secrets") => {
            if let Some(o) = obj.as_object_mut() {
                set_default(o, "type", Value::from("Opaque"));
                if let Some(Value::Object(string_data)) = o.remove("stringData") {
                    let data = o.entry("data").or_insert_with(|| json!({}));
                    if let Some(d) = data.as_object_mut() {
                        for (k, v) in string_data {
                            let s = v.as_str().unwrap_or_default();
                            d.insert(
                                k,
                                Value::from(base64::engine::general_purpose::STANDARD.encode(s)),
                            );
                        }
                    }
                }
            }
        }
        ("batch", "jobs") => admit_job(rt, obj, old)?,
        ("apps", "deployments") | ("apps", "statefulsets") => admit_workload(rt, obj, old)?,
        _ => {}
    }
    Ok(())
}

fn strip_images(spec: &mut Value) {
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                if let Some(c) = c.as_object_mut() {
                    c.remove("image");
                }
            }
        }
    }
    if let Some(m) = spec.as_object_mut() {
        m.remove("terminationGracePeriodSeconds");
    }
}

/// Pod spec defaults (`pkg/apis/core/v1/defaults.go`). A template of a Job must choose its
/// restart policy itself, so `restart_default` is false there.
fn default_pod_spec(spec: &mut Map<String, Value>, restart_default: bool) {
    if restart_default {
        set_default(spec, "restartPolicy", Value::from("Always"));
    }
    set_default(spec, "terminationGracePeriodSeconds", Value::from(30));
    set_default(spec, "dnsPolicy", Value::from("ClusterFirst"));
    set_default(spec, "schedulerName", Value::from("default-scheduler"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "enableServiceLinks", Value::from(true));
    let sa = spec
        .get("serviceAccountName")
        .or_else(|| spec.get("serviceAccount"))
        .cloned()
        .unwrap_or(Value::from("default"));
    spec.insert("serviceAccountName".into(), sa.clone());
    spec.insert("serviceAccount".into(), sa);
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
                let latest = image.ends_with(":latest")
                    || !image.rsplit('/').next().unwrap_or(image).contains(':');
                set_default(
                    c,
                    "imagePullPolicy",
                    Value::from(if latest && !image.contains('@') {
                        "Always"
                    } else {
                        "IfNotPresent"
                    }),
                );
                set_default(
                    c,
                    "terminationMessagePath",
                    Value::from("/dev/termination-log"),
                );
                set_default(c, "terminationMessagePolicy", Value::from("File"));
                set_default(c, "resources", json!({}));
                if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                        set_default(p, "protocol", Value::from("TCP"));
                    }
                }
            }
        }
    }
}

fn validate_pod_spec(rt: &ResourceType, obj: &Value, at: &str) -> Result<(), ApiError> {
    let spec = obj
        .pointer(&format!("/{}", at.replace('.', "/")))
        .cloned()
        .unwrap_or(Value::Null);
    let mut causes = Vec::new();
    let containers = spec["containers"].as_array().cloned().unwrap_or_default();
    if containers.is_empty() {
        causes.push(cause(
            &format!("{at}.containers"),
            "FieldValueRequired",
            format!("{at}.containers: Required value"),
        ));
    }
    let mut names = Vec::new();
    for (i, c) in containers.iter().enumerate() {
        let name = c["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            causes.push(cause(
                &format!("{at}.containers[{i}].name"),
                "FieldValueRequired",
                format!("{at}.containers[{i}].name: Required value"),
            ));
        } else if names.contains(&name) {
            causes.push(cause(
                &format!("{at}.containers[{i}].name"),
                "FieldValueDuplicate",
                format!("{at}.containers[{i}].name: Duplicate value: \"{name}\""),
            ));
        }
        names.push(name);
        if c["image"].as_str().unwrap_or_default().is_empty() {
            causes.push(cause(
                &format!("{at}.containers[{i}].image"),
                "FieldValueRequired",
                format!("{at}.containers[{i}].image: Required value"),
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(invalid(rt, obj, causes))
    }
}

fn admit_job(rt: &ResourceType, obj: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
    let uid = obj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if old.is_none() {
        obj["status"] = json!({});
    }
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return Err(invalid(
            rt,
            &Value::Null,
            vec![cause(
                "spec",
                "FieldValueRequired",
                "spec: Required value".into(),
            )],
        ));
    };
    let manual = spec
        .get("manualSelector")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if old.is_none() && !manual {
        let labels = json!({
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        });
        spec.insert(
            "selector".into(),
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        );
        let template = spec.entry("template").or_insert_with(|| json!({}));
        if let Some(t) = template.as_object_mut() {
            let meta = t.entry("metadata").or_insert_with(|| json!({}));
            if let Some(m) = meta.as_object_mut() {
                let l = m.entry("labels").or_insert_with(|| json!({}));
                if let (Some(l), Some(add)) = (l.as_object_mut(), labels.as_object()) {
                    for (k, v) in add {
                        l.insert(k.clone(), v.clone());
                    }
                }
            }
        }
    }
    let indexed = spec.get("completionMode").and_then(Value::as_str) == Some("Indexed");
    match (
        spec.get("completions").is_some_and(|c| !c.is_null()),
        spec.get("parallelism").is_some_and(|p| !p.is_null()),
    ) {
        (false, false) => {
            spec.insert("completions".into(), Value::from(1));
            spec.insert("parallelism".into(), Value::from(1));
        }
        (true, false) => {
            spec.insert("parallelism".into(), Value::from(1));
        }
        _ => {}
    }
    if spec
        .get("backoffLimitPerIndex")
        .is_some_and(|v| !v.is_null())
    {
        set_default(spec, "backoffLimit", Value::from(i32::MAX));
    } else {
        set_default(spec, "backoffLimit", Value::from(6));
    }
    set_default(spec, "completionMode", Value::from("NonIndexed"));
    set_default(spec, "suspend", Value::from(false));
    set_default(spec, "manualSelector", Value::from(false));
    set_default(
        spec,
        "podReplacementPolicy",
        Value::from("TerminatingOrFailed"),
    );
    if let Some(ts) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        default_pod_spec(ts, false);
    }
    let mut causes = Vec::new();
    let restart = obj
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str);
    match restart {
        Some("Never") | Some("OnFailure") => {}
        Some(other) => causes.push(cause(
            "spec.template.spec.restartPolicy",
            "FieldValueNotSupported",
            format!("spec.template.spec.restartPolicy: Unsupported value: \"{other}\": supported values: \"OnFailure\", \"Never\""),
        )),
        None => causes.push(cause(
            "spec.template.spec.restartPolicy",
            "FieldValueRequired",
            "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"".into(),
        )),
    }
    if indexed && obj.pointer("/spec/completions").is_none_or(Value::is_null) {
        causes.push(cause(
            "spec.completions",
            "FieldValueRequired",
            "spec.completions: Required value: when completion mode is Indexed".into(),
        ));
    }
    if let Some(old) = old {
        for field in ["template", "selector", "completionMode"] {
            let suspended_template = field == "template"
                && old.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true)
                && old.pointer("/status/startTime").is_none();
            if old["spec"][field] != obj["spec"][field] && !suspended_template {
                causes.push(cause(
                    &format!("spec.{field}"),
                    "FieldValueInvalid",
                    format!(
                        "spec.{field}: Invalid value: {}: field is immutable",
                        obj["spec"][field]
                    ),
                ));
            }
        }
    }
    if causes.is_empty() {
        validate_pod_spec(rt, obj, "spec.template.spec")
    } else {
        Err(invalid(rt, obj, causes))
    }
}

fn admit_workload(rt: &ResourceType, obj: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
    if old.is_none()
        && let Some(o) = obj.as_object_mut()
    {
        o.insert("status".into(), json!({}));
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        set_default(spec, "replicas", Value::from(1));
        set_default(spec, "revisionHistoryLimit", Value::from(10));
        if rt.plural == "deployments" {
            set_default(spec, "progressDeadlineSeconds", Value::from(600));
            set_default(
                spec,
                "strategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
            );
        } else {
            set_default(spec, "podManagementPolicy", Value::from("OrderedReady"));
            set_default(
                spec,
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            );
            set_default(
                spec,
                "persistentVolumeClaimRetentionPolicy",
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
        }
        if let Some(ts) = spec
            .get_mut("template")
            .and_then(|t| t.get_mut("spec"))
            .and_then(Value::as_object_mut)
        {
            default_pod_spec(ts, true);
        }
    }
    let mut causes = Vec::new();
    match obj.pointer("/spec/selector") {
        None | Some(Value::Null) => causes.push(cause(
            "spec.selector",
            "FieldValueRequired",
            "spec.selector: Required value".into(),
        )),
        Some(sel) => match LabelSelector::from_object(sel) {
            Err(e) => causes.push(cause(
                "spec.selector",
                "FieldValueInvalid",
                format!("spec.selector: Invalid value: {sel}: {e}"),
            )),
            Ok(s) if s.is_empty() => causes.push(cause(
                "spec.selector",
                "FieldValueInvalid",
                format!(
                    "spec.selector: Invalid value: {sel}: empty selector is invalid for deployment"
                ),
            )),
            Ok(s) => {
                let labels = obj
                    .pointer("/spec/template/metadata/labels")
                    .and_then(Value::as_object);
                if !s.matches(labels) {
                    causes.push(cause(
                        "spec.template.metadata.labels",
                        "FieldValueInvalid",
                        format!(
                            "spec.template.metadata.labels: Invalid value: {}: `selector` does not match template `labels`",
                            labels.map_or(Value::Null, |l| Value::Object(l.clone()))
                        ),
                    ));
                }
            }
        },
    }
    if let Some(old) = old
        && old.pointer("/spec/selector") != obj.pointer("/spec/selector")
    {
        causes.push(cause(
            "spec.selector",
            "FieldValueInvalid",
            format!(
                "spec.selector: Invalid value: {}: field is immutable",
                obj["spec"]["selector"]
            ),
        ));
    }
    if causes.is_empty() {
        validate_pod_spec(rt, obj, "spec.template.spec")
    } else {
        Err(invalid(rt, obj, causes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;

    fn rt(group: &str, plural: &str) -> ResourceType {
        let reg = Registry::builtin();
        (*reg
            .get(
                group,
                if group == "autoscaling" { "v2" } else { "v1" },
                plural,
            )
            .unwrap())
        .clone()
    }

    #[test]
    fn job_gets_selector_labels_and_defaults() {
        let mut job = json!({"metadata": {"name": "j", "uid": "u1"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}});
        admit(&rt("batch", "jobs"), &mut job, None, &ClusterIps).unwrap();
        assert_eq!(
            job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
            "u1"
        );
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"]["job-name"],
            "j"
        );
        assert_eq!(job["spec"]["backoffLimit"], 6);
        assert_eq!(job["spec"]["completions"], 1);
        assert_eq!(job["spec"]["parallelism"], 1);
    }

    #[test]
    fn job_restart_policy_always_is_refused() {
        let mut job = json!({"metadata": {"name": "j", "uid": "u1"}, "spec": {"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "x"}]}}}});
        let err = admit(&rt("batch", "jobs"), &mut job, None, &ClusterIps).unwrap_err();
        assert_eq!(err.code, 422);
        assert!(err.message.contains("restartPolicy"), "{}", err.message);
    }

    #[test]
    fn job_template_is_immutable() {
        let mut job = json!({"metadata": {"name": "j", "uid": "u1"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}});
        admit(&rt("batch", "jobs"), &mut job, None, &ClusterIps).unwrap();
        let old = job.clone();
        job["spec"]["template"]["spec"]["containers"][0]["image"] = json!("y");
        let err = admit(&rt("batch", "jobs"), &mut job, Some(&old), &ClusterIps).unwrap_err();
        assert_eq!(err.code, 422);
        assert!(
            err.message.contains("field is immutable"),
            "{}",
            err.message
        );
    }

    #[test]
    fn deployment_selector_must_match_template() {
        let mut d = json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
        let err = admit(&rt("apps", "deployments"), &mut d, None, &ClusterIps).unwrap_err();
        assert_eq!(err.code, 422);
        d["spec"]["template"]["metadata"]["labels"]["app"] = json!("a");
        admit(&rt("apps", "deployments"), &mut d, None, &ClusterIps).unwrap();
        assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
    }

    #[test]
    fn service_gets_a_loopback_cluster_ip_that_stays() {
        let ips = ClusterIps;
        let mut s = json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}});
        admit(&rt("", "services"), &mut s, None, &ips).unwrap();
        let ip = s["spec"]["clusterIP"].as_str().unwrap().to_owned();
        assert!(ip.starts_with("127.96."), "{ip}");
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
        let old = s.clone();
        let mut s2 = json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 81}]}});
        admit(&rt("", "services"), &mut s2, Some(&old), &ips).unwrap();
        assert_eq!(s2["spec"]["clusterIP"], ip.as_str());
    }

    #[test]
    fn secret_string_data_is_encoded() {
        let mut s = json!({"metadata": {"name": "s"}, "stringData": {"token": "abc"}});
        admit(&rt("", "secrets"), &mut s, None, &ClusterIps).unwrap();
        assert_eq!(s["data"]["token"], "YWJj");
        assert!(s.get("stringData").is_none());
    }
}
