//! CustomResourceDefinitions (apiextensions.k8s.io/v1): validation and defaulting as the
//! apiextensions server does them, the status it writes once names are accepted, and the
//! [`ResourceType`]s a CRD makes the cluster serve.

use serde_json::{Value, json};

use crate::resources::{ColumnValue, GenerationRule, PrinterColumn, ResourceType, ScalePaths};

/// A field error as `(field, reason, message)`, the triple [`crate::error::ApiError::invalid`] takes.
type FieldError = (String, String, String);

const DNS1035_HELP: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

const COLUMN_TYPES: &[&str] = &["integer", "number", "string", "boolean", "date"];

/// A value as Go's `field.Error` prints it: strings quoted, everything else as JSON.
fn go_value(v: &Value) -> String {
    v.to_string()
}

fn required(field: &str, detail: &str) -> FieldError {
    let mut msg = format!("{field}: Required value");
    if !detail.is_empty() {
        msg.push_str(": ");
        msg.push_str(detail);
    }
    (field.into(), "FieldValueRequired".into(), msg)
}

fn invalid(field: &str, value: &Value, detail: &str) -> FieldError {
    let msg = format!("{field}: Invalid value: {}: {detail}", go_value(value));
    (field.into(), "FieldValueInvalid".into(), msg)
}

fn unsupported(field: &str, value: &Value, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
    let msg = format!(
        "{field}: Unsupported value: {}: supported values: {}",
        go_value(value),
        list.join(", ")
    );
    (field.into(), "FieldValueNotSupported".into(), msg)
}

fn duplicate(field: &str, value: &Value) -> FieldError {
    let msg = format!("{field}: Duplicate value: {}", go_value(value));
    (field.into(), "FieldValueDuplicate".into(), msg)
}

fn is_dns1035_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn versions(crd: &Value) -> &[Value] {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Validates a CRD object as the apiextensions server does on create/update: group, names
/// (plural, singular, kind, listKind, shortNames), scope, `metadata.name == <plural>.<group>`,
/// versions (at least one, unique names, exactly one storage version, each with an
/// `openAPIV3Schema` of type object), scale paths and printer columns. Absent `singular` and
/// `listKind` are fine (they are defaulted). Returns `(field, reason, message)` triples.
pub fn validate(crd: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/spec/names/plural");
    let kind = str_at(crd, "/spec/names/kind");

    let name = str_at(crd, "/metadata/name");
    if name != format!("{plural}.{group}") {
        errs.push(invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }

    if group.is_empty() {
        errs.push(required("spec.group", ""));
    } else if !group.contains('.') {
        errs.push(invalid(
            "spec.group",
            &json!(group),
            "should be a domain with at least one dot",
        ));
    }

    if plural.is_empty() {
        errs.push(required("spec.names.plural", ""));
    } else if !is_dns1035_label(plural) {
        errs.push(invalid("spec.names.plural", &json!(plural), DNS1035_HELP));
    }
    let singular = str_at(crd, "/spec/names/singular");
    if !singular.is_empty() && !is_dns1035_label(singular) {
        errs.push(invalid(
            "spec.names.singular",
            &json!(singular),
            DNS1035_HELP,
        ));
    }
    if kind.is_empty() {
        errs.push(required("spec.names.kind", ""));
    } else if !is_dns1035_label(&kind.to_lowercase()) {
        errs.push(invalid(
            "spec.names.kind",
            &json!(kind),
            &format!("may have mixed case, but should otherwise match: {DNS1035_HELP}"),
        ));
    }
    let list_kind = str_at(crd, "/spec/names/listKind");
    if !list_kind.is_empty() && list_kind == kind {
        errs.push(invalid(
            "spec.names.listKind",
            &json!(list_kind),
            "kind and listKind may not be the same",
        ));
    }
    let short_names = crd
        .pointer("/spec/names/shortNames")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for (i, s) in short_names.iter().enumerate() {
        if !s.as_str().is_some_and(is_dns1035_label) {
            errs.push(invalid(
                &format!("spec.names.shortNames[{i}]"),
                s,
                DNS1035_HELP,
            ));
        }
    }

    match crd.pointer("/spec/scope") {
        None => errs.push(required("spec.scope", "")),
        Some(s) if s == "Namespaced" || s == "Cluster" => {}
        Some(s) => errs.push(unsupported("spec.scope", s, &["Cluster", "Namespaced"])),
    }

    if let Some(s) = crd.pointer("/spec/conversion/strategy")
        && s != "None"
        && s != "Webhook"
    {
        errs.push(unsupported(
            "spec.conversion.strategy",
            s,
            &["None", "Webhook"],
        ));
    }

    let vs = versions(crd);
    if vs.is_empty() {
        errs.push(required(
            "spec.versions",
            "must have exactly one version marked as storage version",
        ));
    } else {
        let storage = vs.iter().filter(|v| v["storage"] == true).count();
        if storage != 1 {
            let names: Vec<&Value> = vs.iter().map(|v| &v["name"]).collect();
            errs.push(invalid(
                "spec.versions",
                &json!(names),
                "must have exactly one version marked as storage version",
            ));
        }
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, v) in vs.iter().enumerate() {
        errs.extend(validate_version(
            v,
            &format!("spec.versions[{i}]"),
            &mut seen,
        ));
    }
    errs
}

fn validate_version<'a>(v: &'a Value, path: &str, seen: &mut Vec<&'a str>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = v["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        errs.push(required(&format!("{path}.name"), ""));
    } else if !is_dns1035_label(name) {
        errs.push(invalid(&format!("{path}.name"), &json!(name), DNS1035_HELP));
    } else if seen.contains(&name) {
        errs.push(duplicate(&format!("{path}.name"), &json!(name)));
    } else {
        seen.push(name);
    }

    // apiextensions.k8s.io/v1 requires a structural schema for every version.
    let schema_path = format!("{path}.schema.openAPIV3Schema");
    match v.pointer("/schema/openAPIV3Schema") {
        None | Some(Value::Null) => errs.push(required(&schema_path, "schemas are required")),
        Some(s) => match s.get("type") {
            None => errs.push(required(
                &format!("{schema_path}.type"),
                "must not be empty at the root",
            )),
            Some(t) if t == "object" => {}
            Some(t) => errs.push(invalid(
                &format!("{schema_path}.type"),
                t,
                "must be object at the root",
            )),
        },
    }

    if let Some(scale) = v.pointer("/subresources/scale") {
        let sp = format!("{path}.subresources.scale");
        let check = |field: &str, prefixes: &[&str], detail: &str, errs: &mut Vec<FieldError>| {
            let f = format!("{sp}.{field}");
            match scale.get(field).and_then(Value::as_str) {
                None | Some("") => errs.push(required(&f, "")),
                Some(p) if prefixes.iter().any(|pre| p.starts_with(pre)) => {}
                Some(p) => errs.push(invalid(&f, &json!(p), detail)),
            }
        };
        check(
            "specReplicasPath",
            &[".spec."],
            "should be a json path under .spec",
            &mut errs,
        );
        check(
            "statusReplicasPath",
            &[".status."],
            "should be a json path under .status",
            &mut errs,
        );
        if scale.get("labelSelectorPath").is_some() {
            check(
                "labelSelectorPath",
                &[".spec.", ".status."],
                "should be a json path under either .spec or .status",
                &mut errs,
            );
        }
    }

    let columns = v["additionalPrinterColumns"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    for (j, c) in columns.iter().enumerate() {
        let cp = format!("{path}.additionalPrinterColumns[{j}]");
        if c["name"].as_str().is_none_or(str::is_empty) {
            errs.push(required(&format!("{cp}.name"), ""));
        }
        match c.get("type") {
            None => errs.push(required(&format!("{cp}.type"), "")),
            Some(t) if t.as_str().is_some_and(|t| COLUMN_TYPES.contains(&t)) => {}
            Some(t) => errs.push(unsupported(&format!("{cp}.type"), t, COLUMN_TYPES)),
        }
        if c["jsonPath"].as_str().is_none_or(str::is_empty) {
            errs.push(required(&format!("{cp}.jsonPath"), ""));
        }
    }
    errs
}

/// Fills in the defaults of `SetDefaults_CustomResourceDefinition`: `names.listKind`
/// (`<Kind>List`), `names.singular` (lowercase kind) and `conversion.strategy: None`.
/// Called before storing.
pub fn default(crd: &mut Value) {
    let kind = str_at(crd, "/spec/names/kind").to_owned();
    let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut)
        && !kind.is_empty()
    {
        let empty = |v: Option<&Value>| v.and_then(Value::as_str).is_none_or(str::is_empty);
        if empty(names.get("listKind")) {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
        if empty(names.get("singular")) {
            names.insert("singular".into(), json!(kind.to_lowercase()));
        }
    }
    let conversion = spec.entry("conversion").or_insert_with(|| json!({}));
    if let Some(c) = conversion.as_object_mut() {
        c.entry("strategy").or_insert_with(|| json!("None"));
    }
}

/// The status the server writes once the names are accepted: `acceptedNames` (= spec.names),
/// `storedVersions` (those already recorded plus the storage version), and conditions
/// `NamesAccepted=True` (NoConflicts) and `Established=True` (InitialNamesAccepted). A
/// condition already True keeps its `lastTransitionTime`.
pub fn accepted_status(crd: &Value) -> Value {
    let mut stored: Vec<Value> = crd
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(storage) = storage_version(crd)
        && !stored.iter().any(|s| s == storage)
    {
        stored.push(json!(storage));
    }
    let now = crate::time::now();
    let condition = |type_: &str, reason: &str, message: &str| {
        let since = crd
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c["type"] == type_ && c["status"] == "True")
            })
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
        json!({
            "type": type_,
            "status": "True",
            "lastTransitionTime": since,
            "reason": reason,
            "message": message,
        })
    };
    json!({
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or_else(|| json!({})),
        "storedVersions": stored,
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
    })
}

fn storage_version(crd: &Value) -> Option<&str> {
    versions(crd)
        .iter()
        .find(|v| v["storage"] == true)
        .and_then(|v| v["name"].as_str())
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// A scale path as `ScalePaths` stores it: the leading `.` trimmed.
fn scale_path(p: &str) -> String {
    p.strip_prefix('.').unwrap_or(p).to_owned()
}

/// The Age column the server shows for a CRD without printer columns (`serveDefaultColumnsIfEmpty`).
fn default_age_column() -> PrinterColumn {
    PrinterColumn {
        name: "Age".into(),
        type_: "date".into(),
        format: String::new(),
        description: "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata".into(),
        priority: 0,
        value: ColumnValue::JsonPath(".metadata.creationTimestamp".into()),
    }
}

fn printer_columns(version: &Value) -> Vec<PrinterColumn> {
    let declared: Vec<PrinterColumn> = version["additionalPrinterColumns"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| PrinterColumn {
                    name: c["name"].as_str().unwrap_or_default().to_owned(),
                    type_: c["type"].as_str().unwrap_or("string").to_owned(),
                    format: c["format"].as_str().unwrap_or_default().to_owned(),
                    description: c["description"].as_str().unwrap_or_default().to_owned(),
                    priority: c["priority"].as_i64().unwrap_or(0),
                    value: ColumnValue::JsonPath(
                        c["jsonPath"].as_str().unwrap_or_default().to_owned(),
                    ),
                })
                .collect()
        })
        .unwrap_or_default();
    if declared.is_empty() {
        vec![default_age_column()]
    } else {
        declared
    }
}

/// One [`ResourceType`] per served version: `crd = true`, the version's `openAPIV3Schema`,
/// status/scale from its `subresources`, printer columns from `additionalPrinterColumns`
/// (default: a single Age column), generation `Spec` with a status subresource else
/// `AllButMetadata`, names from `spec.names` (defaults applied), and the storage version.
/// Empty when group, plural or kind is missing.
pub fn resource_types(crd: &Value) -> Vec<ResourceType> {
    let group = str_at(crd, "/spec/group");
    let names = crd
        .pointer("/spec/names")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let plural = str_at(&names, "/plural");
    let kind = str_at(&names, "/kind");
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Vec::new();
    }
    let list_kind = match str_at(&names, "/listKind") {
        "" => format!("{kind}List"),
        lk => lk.to_owned(),
    };
    let singular = match str_at(&names, "/singular") {
        "" => kind.to_lowercase(),
        s => s.to_owned(),
    };
    let namespaced = str_at(crd, "/spec/scope") != "Cluster";
    let storage = storage_version(crd).unwrap_or_default().to_owned();
    versions(crd)
        .iter()
        .filter(|v| v["served"] == true)
        .filter_map(|v| {
            let version = v["name"].as_str().filter(|n| !n.is_empty())?;
            let status = v.pointer("/subresources/status").is_some();
            let scale = v.pointer("/subresources/scale").map(|s| ScalePaths {
                spec_replicas: scale_path(str_at(s, "/specReplicasPath")),
                status_replicas: scale_path(str_at(s, "/statusReplicasPath")),
                label_selector: s
                    .get("labelSelectorPath")
                    .and_then(Value::as_str)
                    .filter(|p| !p.is_empty())
                    .map(scale_path),
            });
            Some(ResourceType {
                group: group.to_owned(),
                version: version.to_owned(),
                kind: kind.to_owned(),
                list_kind: list_kind.clone(),
                plural: plural.to_owned(),
                singular: singular.clone(),
                namespaced,
                short_names: strings(names.get("shortNames")),
                categories: strings(names.get("categories")),
                status,
                scale,
                log: false,
                generation: if status {
                    GenerationRule::Spec
                } else {
                    GenerationRule::AllButMetadata
                },
                printer_columns: printer_columns(v),
                schema: v.pointer("/schema/openAPIV3Schema").cloned(),
                crd: true,
                storage_version: storage.clone(),
            })
        })
        .collect()
}

/// The built-in kinds plus the repository's CapacityBenchmark CRD (tests of the modules that
/// serve kinds).
#[cfg(test)]
pub(crate) fn registry_with_capacity_benchmark() -> crate::resources::Registry {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crds/capacitybenchmark.yaml"
    ))
    .expect("the committed CRD is readable");
    let crd: Value = serde_saphyr::from_str(&text).expect("the committed CRD parses");
    let mut reg = crate::resources::Registry::builtin();
    for t in resource_types(&crd) {
        reg.insert(t);
    }
    reg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn real_crd() -> Value {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../crds/capacitybenchmark.yaml"
        ))
        .unwrap();
        serde_saphyr::from_str::<Value>(&text).unwrap()
    }

    fn small_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Widget", "plural": "widgets", "categories": ["all"]},
                "scope": "Cluster",
                "versions": [
                    {"name": "v1beta1", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object"}},
                     "subresources": {"scale": {"specReplicasPath": ".spec.replicas",
                                                "statusReplicasPath": ".status.replicas",
                                                "labelSelectorPath": ".status.selector"}}},
                    {"name": "v0", "served": false, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}}
                ]
            }
        })
    }

    #[test]
    fn real_crd_validates_and_serves_its_columns() {
        let crd = real_crd();
        assert_eq!(validate(&crd), Vec::<FieldError>::new());
        let types = resource_types(&crd);
        assert_eq!(types.len(), 1);
        let t = &types[0];
        assert_eq!(
            (t.group.as_str(), t.version.as_str()),
            ("goodput.dev", "v1alpha1")
        );
        assert_eq!(t.kind, "CapacityBenchmark");
        assert_eq!(t.list_kind, "CapacityBenchmarkList");
        assert_eq!(t.singular, "capacitybenchmark");
        assert!(t.namespaced);
        assert!(t.crd);
        assert!(t.status, "status subresource on");
        assert!(t.scale.is_none());
        assert_eq!(t.generation, GenerationRule::Spec);
        assert_eq!(t.short_names, ["cb", "cbench"]);
        assert_eq!(t.storage_version, "v1alpha1");
        assert_eq!(t.schema.as_ref().unwrap()["type"], "object");
        let cols: Vec<(&str, &str)> = t
            .printer_columns
            .iter()
            .map(|c| (c.name.as_str(), c.type_.as_str()))
            .collect();
        assert_eq!(
            cols,
            [
                ("Target", "string"),
                ("Phase", "string"),
                ("Point", "string"),
                ("Capacity", "number"),
                ("Per-replica", "number"),
                ("Replicas", "integer"),
                ("Age", "date")
            ]
        );
        assert_eq!(
            t.printer_columns[3].description,
            "Highest passing offered rate (RPS)"
        );
        assert!(
            matches!(&t.printer_columns[1].value, ColumnValue::JsonPath(p) if p == ".status.phase")
        );
    }

    #[test]
    fn served_versions_scale_and_defaults() {
        let crd = small_crd();
        assert_eq!(validate(&crd), Vec::<FieldError>::new());
        let types = resource_types(&crd);
        let vs: Vec<&str> = types.iter().map(|t| t.version.as_str()).collect();
        assert_eq!(vs, ["v1beta1", "v1"], "unserved v0 left out");
        let v1 = &types[1];
        assert!(!v1.namespaced);
        assert!(!v1.status);
        assert_eq!(v1.generation, GenerationRule::AllButMetadata);
        assert_eq!(v1.storage_version, "v1");
        assert_eq!(types[0].storage_version, "v1");
        assert_eq!(v1.categories, ["all"]);
        assert_eq!(
            v1.scale,
            Some(ScalePaths {
                spec_replicas: "spec.replicas".into(),
                status_replicas: "status.replicas".into(),
                label_selector: Some("status.selector".into()),
            })
        );
        assert_eq!(v1.printer_columns.len(), 1);
        assert_eq!(v1.printer_columns[0].name, "Age");
        assert_eq!(v1.list_kind, "WidgetList");

        let mut d = crd.clone();
        default(&mut d);
        assert_eq!(d["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(d["spec"]["names"]["singular"], "widget");
        assert_eq!(d["spec"]["conversion"], json!({"strategy": "None"}));
        let mut again = d.clone();
        default(&mut again);
        assert_eq!(again, d, "defaulting is idempotent");
    }

    #[test]
    fn accepted_status_establishes() {
        let mut crd = small_crd();
        default(&mut crd);
        let st = accepted_status(&crd);
        assert_eq!(st["acceptedNames"], crd["spec"]["names"]);
        assert_eq!(st["storedVersions"], json!(["v1"]));
        let conds = st["conditions"].as_array().unwrap();
        assert_eq!(conds[0]["type"], "NamesAccepted");
        assert_eq!(conds[0]["reason"], "NoConflicts");
        assert_eq!(conds[1]["type"], "Established");
        assert_eq!(conds[1]["status"], "True");
        assert_eq!(conds[1]["reason"], "InitialNamesAccepted");
        assert!(
            conds
                .iter()
                .all(|c| c["lastTransitionTime"].is_string() && c["message"].is_string())
        );

        // An update that moves storage keeps the old stored version and condition times.
        crd["status"] = json!({"storedVersions": ["v1"],
            "conditions": [{"type": "Established", "status": "True",
                            "lastTransitionTime": "2020-01-01T00:00:00Z"}]});
        crd["spec"]["versions"][1]["storage"] = json!(false);
        crd["spec"]["versions"][0]["storage"] = json!(true);
        let st = accepted_status(&crd);
        assert_eq!(st["storedVersions"], json!(["v1", "v1beta1"]));
        assert_eq!(
            st["conditions"][1]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
    }

    #[test]
    fn validation_errors() {
        let fields =
            |crd: &Value| -> Vec<String> { validate(crd).into_iter().map(|e| e.0).collect() };
        let mut crd = small_crd();
        crd["metadata"]["name"] = json!("widget.example.com");
        let errs = validate(&crd);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].0, "metadata.name");
        assert_eq!(errs[0].1, "FieldValueInvalid");
        assert_eq!(
            errs[0].2,
            r#"metadata.name: Invalid value: "widget.example.com": must be spec.names.plural+"."+spec.group"#
        );

        let mut crd = small_crd();
        crd["spec"]["scope"] = json!("Global");
        crd["spec"]["names"]["listKind"] = json!("Widget");
        assert_eq!(fields(&crd), ["spec.names.listKind", "spec.scope"]);
        assert_eq!(validate(&crd)[1].1, "FieldValueNotSupported");

        let mut crd = small_crd();
        crd["spec"]["versions"][0]["storage"] = json!(true);
        crd["spec"]["versions"][2]["name"] = json!("v1");
        crd["spec"]["versions"][1]["schema"] = json!({"openAPIV3Schema": {"type": "array"}});
        crd["spec"]["versions"][0]
            .as_object_mut()
            .unwrap()
            .remove("schema");
        assert_eq!(
            fields(&crd),
            [
                "spec.versions",
                "spec.versions[0].schema.openAPIV3Schema",
                "spec.versions[1].schema.openAPIV3Schema.type",
                "spec.versions[2].name"
            ]
        );

        let mut crd = small_crd();
        crd["spec"]["versions"] = json!([]);
        crd["spec"]["names"] = json!({"plural": "Widgets"});
        crd["metadata"]["name"] = json!("Widgets.example.com");
        assert_eq!(
            fields(&crd),
            ["spec.names.plural", "spec.names.kind", "spec.versions"]
        );

        let mut crd = small_crd();
        crd["spec"]["versions"][1]["subresources"]["scale"]["specReplicasPath"] =
            json!(".status.x");
        crd["spec"]["versions"][1]["additionalPrinterColumns"] =
            json!([{"name": "X", "type": "float", "jsonPath": ".x"}, {"type": "string"}]);
        assert_eq!(
            fields(&crd),
            [
                "spec.versions[1].subresources.scale.specReplicasPath",
                "spec.versions[1].additionalPrinterColumns[0].type",
                "spec.versions[1].additionalPrinterColumns[1].name",
                "spec.versions[1].additionalPrinterColumns[1].jsonPath"
            ]
        );
    }
}
