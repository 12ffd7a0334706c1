//! Just enough OpenAPI v3 for kubectl 1.33 and helm 4:
//!
//! - the `fieldValidation` probe (cli-runtime `query_param_verifier_v3.go`): a PATCH operation
//!   whose object-valued `x-kubernetes-group-version-kind` matches, with a `fieldValidation`
//!   query parameter;
//! - the client-side apply patch type (kubectl `patcher.go`): built-ins list
//!   `application/strategic-merge-patch+json`, CRDs do not (so kubectl sends a merge patch);
//!   built-in component schemas carry no GVK extension, so kubectl builds that strategic
//!   merge patch from its compiled-in types (see `kind_schema`);
//! - `kubectl explain`: `components.schemas` entries found by their array-valued
//!   `x-kubernetes-group-version-kind`, the CRD's `openAPIV3Schema` for custom resources.

use serde_json::{Map, Value, json};

use crate::resources::{Registry, ResourceType};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const SCALE: &str = "io.k8s.api.autoscaling.v1.Scale";

/// GET /openapi/v3: `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=<hex>"},..}}`.
/// The hash is taken over the group version's document, so it changes whenever the GV's
/// resources or schemas do (kubectl caches documents by this URL).
pub fn v3_root(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for (group, version) in reg.group_versions() {
        let key = gv_key(&group, &version);
        let Some(doc) = v3_group_version(reg, &key) else {
            continue;
        };
        let hash = fingerprint(&doc.to_string());
        paths.insert(
            key.clone(),
            json!({ "serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}") }),
        );
    }
    json!({ "paths": paths })
}

/// `api/v1` or `apis/{group}/{version}`: the key of a GV in the root document.
fn gv_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// 128-bit FNV-1a as uppercase hex (the real server sends a SHA-512; only change matters).
fn fingerprint(text: &str) -> String {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let h = text
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u128::from(b)).wrapping_mul(PRIME));
    format!("{h:032X}")
}

/// The GV document for `gv_path` like "api/v1" or "apis/goodput.dev/v1alpha1", None if not served.
pub fn v3_group_version(reg: &Registry, gv_path: &str) -> Option<Value> {
    let gv_path = gv_path.trim_matches('/');
    let (group, version) = match gv_path.split('/').collect::<Vec<_>>().as_slice() {
        ["api", v] => (String::new(), (*v).to_owned()),
        ["apis", g, v] => ((*g).to_owned(), (*v).to_owned()),
        _ => return None,
    };
    let types: Vec<_> = reg
        .all()
        .filter(|t| t.group == group && t.version == version)
        .collect();
    if types.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let mut schemas = Map::new();
    schemas.insert(OBJECT_META.into(), object_meta_schema());
    schemas.insert(PATCH.into(), patch_schema());
    for t in &types {
        schemas.insert(schema_name(t), kind_schema(t));
        if t.scale.is_some() {
            schemas.insert(SCALE.into(), scale_schema());
        }
        paths.extend(resource_paths(t));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// Component name of a kind: `<reversed group>.<version>.<Kind>` for CRDs (as the
/// apiextensions server names them), upstream's `io.k8s.api.<group>.<version>.<Kind>` for
/// built-ins.
fn schema_name(t: &ResourceType) -> String {
    if t.crd {
        let reversed: Vec<&str> = t.group.split('.').rev().collect();
        return format!("{}.{}.{}", reversed.join("."), t.version, t.kind);
    }
    match t.group.as_str() {
        "apiextensions.k8s.io" => format!(
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{}.{}",
            t.version, t.kind
        ),
        "" => format!("io.k8s.api.core.{}.{}", t.version, t.kind),
        g => {
            let short = g.split('.').next().unwrap_or(g);
            format!("io.k8s.api.{short}.{}.{}", t.version, t.kind)
        }
    }
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The standard `apiVersion`, `kind` and `metadata` properties of a top-level kind.
fn type_meta_properties() -> Map<String, Value> {
    let mut p = Map::new();
    p.insert("apiVersion".into(), json!({
        "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
        "type": "string",
    }));
    p.insert("kind".into(), json!({
        "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
        "type": "string",
    }));
    // The real server wraps the reference in allOf (with a description beside it);
    // kubectl's explain templates and SMP lookup resolve allOf[0].
    p.insert("metadata".into(), json!({
        "allOf": [schema_ref(OBJECT_META)],
        "default": {},
        "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    }));
    p
}

/// The kind's component schema. For CRDs it carries the array-valued GVK extension that
/// `kubectl explain` looks schemas up by.
fn kind_schema(t: &ResourceType) -> Value {
    if let Some(schema) = t.schema.as_ref().filter(|_| t.crd) {
        let ext = json!([gvk(&t.group, &t.version, &t.kind)]);
        let mut s = match schema {
            Value::Object(m) => m.clone(),
            _ => Map::new(),
        };
        let props = s.entry("properties").or_insert_with(|| json!({}));
        if let Some(props) = props.as_object_mut() {
            props.extend(type_meta_properties());
        }
        s.insert("x-kubernetes-group-version-kind".into(), ext);
        return Value::Object(s);
    }
    // Built-ins: a plain object schema WITHOUT the GVK extension. kubectl's client-side apply
    // (`patcher.go`) builds its strategic merge patch from the component schema whose array
    // GVK matches; with a schema lacking `spec` it prints "warning: error calculating patch
    // from openapi v3 spec" on every apply and then falls back to its compiled-in Go types.
    // Untagged, it finds no schema and silently uses those types, which carry the real merge
    // keys. (`kubectl explain` of built-ins is therefore not served.)
    json!({
        "description": format!(
            "{} ({}). The test cluster publishes no field schema for built-in kinds.",
            t.kind,
            t.api_version()
        ),
        "type": "object",
        "properties": type_meta_properties(),
    })
}

fn object_meta_schema() -> Value {
    let s = |d: &str| json!({"type": "string", "description": d});
    let time = |d: &str| json!({"type": "string", "format": "date-time", "description": d});
    let string_map = |d: &str| json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": d});
    json!({
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        "type": "object",
        "properties": {
            "name": s("Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Cannot be updated."),
            "generateName": s("GenerateName is an optional prefix, used by the server, to generate a unique name ONLY IF the Name field has not been provided."),
            "namespace": s("Namespace defines the space within which each name must be unique. An empty namespace is equivalent to the \"default\" namespace. Cannot be updated."),
            "uid": s("UID is the unique in time and space value for this object. Populated by the system. Read-only."),
            "resourceVersion": s("An opaque value that represents the internal version of this object, used for optimistic concurrency and watches. Populated by the system. Read-only."),
            "generation": {"type": "integer", "format": "int64", "description": "A sequence number representing a specific generation of the desired state. Populated by the system. Read-only."},
            "creationTimestamp": time("CreationTimestamp is a timestamp representing the server time when this object was created. Populated by the system. Read-only."),
            "deletionTimestamp": time("DeletionTimestamp is the time after which this resource will be deleted, set by the server when a graceful deletion is requested. Read-only."),
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64", "description": "Number of seconds allowed for this object to gracefully terminate before it will be removed from the system. Read-only."},
            "labels": string_map("Map of string keys and values that can be used to organize and categorize (scope and select) objects."),
            "annotations": string_map("Annotations is an unstructured key value map stored with a resource that may be set by external tools to store and retrieve arbitrary metadata."),
            "finalizers": {
                "type": "array",
                "items": {"type": "string", "default": ""},
                "description": "Must be empty before the object is deleted from the registry. Each entry is an identifier for the responsible component that will remove the entry from the list.",
                "x-kubernetes-list-type": "set",
                "x-kubernetes-patch-strategy": "merge",
            },
            "ownerReferences": {
                "type": "array",
                "items": {
                    "type": "object",
                    "description": "OwnerReference contains enough information to let you identify an owning object.",
                    "properties": {
                        "apiVersion": s("API version of the referent."),
                        "kind": s("Kind of the referent."),
                        "name": s("Name of the referent."),
                        "uid": s("UID of the referent."),
                        "controller": {"type": "boolean", "description": "If true, this reference points to the managing controller."},
                        "blockOwnerDeletion": {"type": "boolean", "description": "If true, AND if the owner has the \"foregroundDeletion\" finalizer, then the owner cannot be deleted from the key-value store until this reference is removed."},
                    },
                    "required": ["apiVersion", "kind", "name", "uid"],
                    "x-kubernetes-map-type": "atomic",
                },
                "description": "List of objects depended by this object. If ALL objects in the list have been deleted, this object will be garbage collected.",
                "x-kubernetes-list-map-keys": ["uid"],
                "x-kubernetes-list-type": "map",
                "x-kubernetes-patch-merge-key": "uid",
                "x-kubernetes-patch-strategy": "merge",
            },
            "managedFields": {
                "type": "array",
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "description": "ManagedFields maps workflow-id and version to the set of fields that are managed by that workflow. This is mostly for internal housekeeping.",
                "x-kubernetes-list-type": "atomic",
            },
        },
    })
}

fn patch_schema() -> Value {
    json!({
        "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.",
        "type": "object",
    })
}

fn scale_schema() -> Value {
    let mut props = type_meta_properties();
    props.insert("spec".into(), json!({
        "type": "object",
        "description": "defines the behavior of the scale.",
        "properties": {"replicas": {"type": "integer", "format": "int32", "description": "replicas is the desired number of instances for the scaled object."}},
    }));
    props.insert("status".into(), json!({
        "type": "object",
        "description": "current status of the scale.",
        "properties": {
            "replicas": {"type": "integer", "format": "int32", "description": "replicas is the actual number of observed instances of the scaled object."},
            "selector": {"type": "string", "description": "selector is the label query over pods that should match the replicas count."},
        },
    }));
    json!({
        "description": "Scale represents a scaling request for a resource.",
        "type": "object",
        "properties": props,
        "x-kubernetes-group-version-kind": [gvk("autoscaling", "v1", "Scale")],
    })
}

fn query_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string"}, "uniqueItems": true})
}

fn dry_run() -> Value {
    query_param(
        "dryRun",
        "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed",
    )
}

fn field_manager() -> Value {
    query_param(
        "fieldManager",
        "fieldManager is a name associated with the actor or entity that is making these changes.",
    )
}

fn field_validation() -> Value {
    query_param(
        "fieldValidation",
        "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.",
    )
}

/// Which object an operation reads or writes: its schema and GVK.
struct Target {
    schema: String,
    gvk: Value,
    /// Kind name for operation ids, e.g. `Deployment` or `DeploymentScale`.
    label: String,
    /// Built-ins accept strategic merge patches; CRDs do not.
    smp: bool,
}

fn json_body(schema: &str) -> Value {
    json!({"content": {"application/json": {"schema": schema_ref(schema)}}, "required": true})
}

fn ok_responses(schema: &str, created: bool) -> Value {
    let body = json!({"description": "OK", "content": {"application/json": {"schema": schema_ref(schema)}}});
    let mut r = json!({"200": body, "401": {"description": "Unauthorized"}});
    if created {
        r["201"] = json!({"description": "Created", "content": {"application/json": {"schema": schema_ref(schema)}}});
    }
    r
}

fn operation(action: &str, target: &Target, scope: &str) -> Value {
    let (id, verb) = match action {
        "get" => ("read", "read"),
        "put" => ("replace", "replace"),
        "delete" => ("delete", "delete"),
        _ => ("patch", "partially update"),
    };
    let mut op = json!({
        "description": format!("{verb} the specified {}", target.label),
        "operationId": format!("{id}{scope}{}", target.label),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": target.gvk,
    });
    match action {
        "get" => {
            op["responses"] = ok_responses(&target.schema, false);
        }
        "put" => {
            op["parameters"] = json!([dry_run(), field_manager(), field_validation()]);
            op["requestBody"] = json_body(&target.schema);
            op["responses"] = ok_responses(&target.schema, true);
        }
        "delete" => {
            op["parameters"] = json!([dry_run()]);
            op["responses"] = ok_responses(&target.schema, false);
        }
        _ => {
            op["parameters"] = json!([
                dry_run(),
                field_manager(),
                field_validation(),
                {"name": "force", "in": "query", "uniqueItems": true, "schema": {"type": "boolean"},
                 "description": "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests."},
            ]);
            let patch = schema_ref(PATCH);
            let mut content = Map::new();
            for ct in [
                "application/apply-patch+yaml",
                "application/json-patch+json",
                "application/merge-patch+json",
            ] {
                content.insert(ct.into(), json!({"schema": patch}));
            }
            if target.smp {
                content.insert(
                    "application/strategic-merge-patch+json".into(),
                    json!({"schema": patch}),
                );
            }
            op["requestBody"] = json!({"content": content, "required": true});
            op["responses"] = ok_responses(&target.schema, true);
        }
    }
    op
}

/// The item path of `t` and, when served, its `/status` and `/scale` paths.
fn resource_paths(t: &ResourceType) -> Map<String, Value> {
    let scope = if t.namespaced { "Namespaced" } else { "" };
    let item = if t.namespaced {
        format!(
            "{}/namespaces/{{namespace}}/{}/{{name}}",
            t.gv_path(),
            t.plural
        )
    } else {
        format!("{}/{}/{{name}}", t.gv_path(), t.plural)
    };
    let mut path_params = vec![json!({
        "name": "name", "in": "path", "required": true, "uniqueItems": true,
        "description": format!("name of the {}", t.kind), "schema": {"type": "string"},
    })];
    if t.namespaced {
        path_params.push(json!({
            "name": "namespace", "in": "path", "required": true, "uniqueItems": true,
            "description": "object name and auth scope, such as for teams and projects",
            "schema": {"type": "string"},
        }));
    }
    let own = Target {
        schema: schema_name(t),
        gvk: gvk(&t.group, &t.version, &t.kind),
        label: t.kind.clone(),
        smp: !t.crd,
    };
    let mut out = Map::new();
    let item_ops = json!({
        "parameters": path_params,
        "get": operation("get", &own, scope),
        "put": operation("put", &own, scope),
        "delete": operation("delete", &own, scope),
        "patch": operation("patch", &own, scope),
    });
    out.insert(item.clone(), item_ops);

    let mut sub = |name: &str, target: Target| {
        let ops = json!({
            "parameters": path_params,
            "get": operation("get", &target, scope),
            "put": operation("put", &target, scope),
            "patch": operation("patch", &target, scope),
        });
        out.insert(format!("{item}/{name}"), ops);
    };
    if t.status {
        sub(
            "status",
            Target {
                label: format!("{}Status", t.kind),
                ..own
            },
        );
    }
    if t.scale.is_some() {
        sub(
            "scale",
            Target {
                schema: SCALE.into(),
                gvk: gvk("autoscaling", "v1", "Scale"),
                label: format!("{}Scale", t.kind),
                smp: !t.crd,
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PATCH ops whose object-valued GVK extension matches, as kubectl's verifier scans.
    fn patch_ops<'a>(doc: &'a Value, group: &str, version: &str, kind: &str) -> Vec<&'a Value> {
        doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .filter_map(|p| p.get("patch"))
            .filter(|op| op["x-kubernetes-group-version-kind"] == gvk(group, version, kind))
            .collect()
    }

    fn has_field_validation(op: &Value) -> bool {
        op["parameters"].as_array().unwrap().iter().any(|p| {
            p["name"] == "fieldValidation" && p["in"] == "query" && p["schema"]["type"] == "string"
        })
    }

    #[test]
    fn root_lists_every_gv_with_a_content_hash() {
        let reg = crate::crd::registry_with_capacity_benchmark();
        let root = v3_root(&reg);
        let paths = root["paths"].as_object().unwrap();
        for (g, v) in reg.group_versions() {
            let key = gv_key(&g, &v);
            let url = paths[&key]["serverRelativeURL"].as_str().unwrap();
            assert!(
                url.starts_with(&format!("/openapi/v3/{key}?hash=")),
                "{url}"
            );
            assert!(v3_group_version(&reg, &key).is_some());
        }
        assert_eq!(paths.len(), reg.group_versions().len());
        assert!(paths.contains_key("api/v1"));
        assert!(paths.contains_key("apis/apps/v1"));
        assert!(paths.contains_key("apis/goodput.dev/v1alpha1"));

        // The hash follows the GV's content and nothing else.
        let builtin_root = v3_root(&Registry::builtin());
        assert_eq!(
            builtin_root["paths"]["apis/apps/v1"],
            root["paths"]["apis/apps/v1"]
        );
        let mut changed = reg.clone();
        let mut t = (*changed
            .get("goodput.dev", "v1alpha1", "capacitybenchmarks")
            .unwrap())
        .clone();
        t.schema.as_mut().unwrap()["description"] = json!("changed");
        changed.insert(t);
        assert_ne!(
            v3_root(&changed)["paths"]["apis/goodput.dev/v1alpha1"],
            root["paths"]["apis/goodput.dev/v1alpha1"]
        );
        assert!(v3_group_version(&reg, "apis/nope.io/v1").is_none());
        assert!(v3_group_version(&reg, "apis/apps").is_none());
    }

    #[test]
    fn crd_doc_supports_field_validation_and_explain() {
        let reg = crate::crd::registry_with_capacity_benchmark();
        let doc = v3_group_version(&reg, "apis/goodput.dev/v1alpha1").unwrap();
        assert_eq!(doc["openapi"], "3.0.0");
        let item = &doc["paths"]["/apis/goodput.dev/v1alpha1/namespaces/{namespace}/capacitybenchmarks/{name}"];
        for verb in ["get", "put", "delete", "patch"] {
            assert_eq!(
                item[verb]["x-kubernetes-group-version-kind"],
                json!({"group": "goodput.dev", "version": "v1alpha1", "kind": "CapacityBenchmark"}),
                "{verb}"
            );
            assert_eq!(item[verb]["x-kubernetes-action"], verb);
        }
        // Every matching PATCH (item and /status) has the parameter: Go map order is random.
        let ops = patch_ops(&doc, "goodput.dev", "v1alpha1", "CapacityBenchmark");
        assert_eq!(ops.len(), 2);
        for op in &ops {
            assert!(has_field_validation(op));
            let content = op["requestBody"]["content"].as_object().unwrap();
            assert!(content.contains_key("application/apply-patch+yaml"));
            assert!(content.contains_key("application/merge-patch+json"));
            assert!(content.contains_key("application/json-patch+json"));
            assert!(!content.contains_key("application/strategic-merge-patch+json"));
            let names: Vec<&str> = op["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["name"].as_str().unwrap())
                .collect();
            for p in ["dryRun", "fieldManager", "fieldValidation", "force"] {
                assert!(names.contains(&p), "{p}");
            }
        }
        // explain: the schema found by its array-valued GVK extension, with spec and metadata.
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let (name, s) = schemas
            .iter()
            .find(|(_, s)| {
                s["x-kubernetes-group-version-kind"]
                    .as_array()
                    .is_some_and(|a| a.contains(&json!({"group": "goodput.dev", "version": "v1alpha1", "kind": "CapacityBenchmark"})))
            })
            .unwrap();
        assert_eq!(name, "dev.goodput.v1alpha1.CapacityBenchmark");
        assert_eq!(s["type"], "object");
        assert!(s["properties"]["spec"]["properties"]["experiments"].is_object());
        assert_eq!(s["properties"]["apiVersion"]["type"], "string");
        assert_eq!(s["properties"]["kind"]["type"], "string");
        let meta_ref = s["properties"]["metadata"]["allOf"][0]["$ref"]
            .as_str()
            .unwrap();
        let meta = meta_ref.strip_prefix("#/components/schemas/").unwrap();
        assert!(schemas[meta]["properties"]["annotations"].is_object());
        assert!(schemas[meta]["properties"]["name"]["description"].is_string());
        // Every $ref resolves within the document.
        let text = doc.to_string();
        for part in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let target = &part[..part.find('"').unwrap()];
            assert!(schemas.contains_key(target), "{target}");
        }
    }

    #[test]
    fn builtin_doc_lists_strategic_merge_patch() {
        let reg = Registry::builtin();
        let doc = v3_group_version(&reg, "apis/apps/v1").unwrap();
        let ops = patch_ops(&doc, "apps", "v1", "Deployment");
        assert_eq!(ops.len(), 2, "item and status");
        for op in ops {
            assert!(has_field_validation(op));
            assert!(
                op["requestBody"]["content"]["application/strategic-merge-patch+json"].is_object()
            );
        }
        let scale = patch_ops(&doc, "autoscaling", "v1", "Scale");
        assert_eq!(scale.len(), 2, "deployments and statefulsets /scale");
        let schemas = &doc["components"]["schemas"];
        let d = &schemas["io.k8s.api.apps.v1.Deployment"];
        // Untagged, so kubectl's client-side apply uses its compiled-in merge keys.
        assert!(d.get("x-kubernetes-group-version-kind").is_none());
        assert_eq!(d["type"], "object");
        assert!(d["description"].is_string());
        assert!(d.get("x-kubernetes-preserve-unknown-fields").is_none());
        assert!(schemas[SCALE].is_object());

        let core = v3_group_version(&reg, "api/v1").unwrap();
        assert!(
            core["paths"]["/api/v1/namespaces/{name}"]["patch"].is_object(),
            "cluster-scoped form"
        );
        assert!(
            core["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"].is_object()
        );
        assert_eq!(
            core["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]["x-kubernetes-group-version-kind"],
            gvk("", "v1", "ConfigMap")
        );
        assert!(core["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"].is_object());
        let rbac = v3_group_version(&reg, "apis/rbac.authorization.k8s.io/v1").unwrap();
        assert!(rbac["components"]["schemas"]["io.k8s.api.rbac.v1.ClusterRole"].is_object());
    }
}
