//! Server-side `Table` and `PartialObjectMetadata` representations: what `kubectl get` asks for
//! (`as=Table`) and what kube-runtime metadata watches (`.owns()` with `metadata_watcher`) ask
//! for (`as=PartialObjectMetadata[List]`). Shapes follow `meta.k8s.io/v1` and the CR table
//! convertor of apiextensions-apiserver (`tableconvertor.go`).

use serde_json::{Map, Value, json};

use crate::resources::{ColumnValue, PrinterColumn, ResourceType};

/// Parsed Accept header: what representation the client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Representation {
    /// The plain object or list.
    Object,
    /// `meta.k8s.io` `Table` (`kubectl get`).
    Table,
    /// `meta.k8s.io` `PartialObjectMetadata` (or its list form, for a collection).
    PartialObjectMetadata,
}

/// One media range of an Accept header: `type/subtype` and its parameters (values unquoted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MediaRange<'a> {
    pub essence: &'a str,
    pub params: Vec<(&'a str, &'a str)>,
}

impl MediaRange<'_> {
    /// The value of parameter `name` (case-insensitive name).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }

    /// Whether the body may be JSON: `application/json`, `application/*` or `*/*`.
    pub fn accepts_json(&self) -> bool {
        ["application/json", "application/*", "*/*"]
            .iter()
            .any(|e| self.essence.eq_ignore_ascii_case(e))
    }
}

/// Splits an Accept header into media ranges, in order, leaving out those with `q=0`.
pub(crate) fn media_ranges(accept: &str) -> Vec<MediaRange<'_>> {
    accept
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let essence = parts.next().filter(|e| !e.is_empty())?;
            let params: Vec<(&str, &str)> = parts
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k.trim(), v.trim().trim_matches('"')))
                })
                .collect();
            let m = MediaRange { essence, params };
            let refused = m.param("q").and_then(|q| q.parse::<f64>().ok()) == Some(0.0);
            (!refused).then_some(m)
        })
        .collect()
}

/// `application/json;as=Table;v=v1;g=meta.k8s.io` (also v1beta1) -> Table;
/// `as=PartialObjectMetadata` or `as=PartialObjectMetadataList` -> PartialObjectMetadata;
/// else Object. The Accept list is comma-separated, first supported wins.
pub fn representation(accept: &str) -> Representation {
    for m in media_ranges(accept) {
        // Only JSON is spoken; a protobuf Table request falls through to the next range.
        if !m.accepts_json() {
            continue;
        }
        let meta_group = m.param("g").is_none_or(|g| g == "meta.k8s.io");
        let meta_version = m.param("v").is_none_or(|v| v == "v1" || v == "v1beta1");
        match m.param("as") {
            None => return Representation::Object,
            Some("Table") if meta_group && meta_version => return Representation::Table,
            Some("PartialObjectMetadata" | "PartialObjectMetadataList")
                if meta_group && meta_version =>
            {
                return Representation::PartialObjectMetadata;
            }
            Some(_) => {}
        }
    }
    Representation::Object
}

/// `includeObject` query parameter: None | Metadata (default) | Object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// Rows carry no `object`.
    None,
    /// Rows carry the object's `PartialObjectMetadata` (the default).
    Metadata,
    /// Rows carry the full object.
    Object,
}

/// Parses the `includeObject` query parameter; absent or unknown values give the default.
pub fn include_object(param: Option<&str>) -> IncludeObject {
    match param {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    }
}

/// The description the real server gives the `Name` column (ObjectMeta's `name` doc).
const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// A Table (kind Table, apiVersion meta.k8s.io/v1) of `items` for the type's printer columns.
///
/// "Name" (type string, format name) is always the first column, then the type's columns
/// (those with priority > 0 included; kubectl hides them unless `-o wide`). JSONPath columns
/// use [`json_path`]; `date` cells render as human ages; missing values are null. Each row has
/// `cells` and, per `include`, `object`. For a watch event use `table(rt, &[obj], rv, None, ..)`.
pub fn table(
    rt: &ResourceType,
    items: &[&Value],
    resource_version: &str,
    continue_token: Option<&str>,
    include: IncludeObject,
) -> Value {
    let mut columns = vec![json!({
        "name": "Name",
        "type": "string",
        "format": "name",
        "description": NAME_DESCRIPTION,
        "priority": 0,
    })];
    columns.extend(rt.printer_columns.iter().map(|c| {
        json!({
            "name": c.name,
            "type": c.type_,
            "format": c.format,
            "description": c.description,
            "priority": c.priority,
        })
    }));
    let rows: Vec<Value> = items
        .iter()
        .map(|obj| {
            let name = obj
                .pointer("/metadata/name")
                .cloned()
                .unwrap_or(Value::Null);
            let mut cells = vec![name];
            cells.extend(rt.printer_columns.iter().map(|c| cell(c, obj)));
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array(cells));
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row.insert("object".into(), partial_object_metadata(obj));
                }
                IncludeObject::Object => {
                    row.insert("object".into(), (*obj).clone());
                }
            }
            Value::Object(row)
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta(resource_version, continue_token),
        "columnDefinitions": columns,
        "rows": rows,
    })
}

fn list_meta(resource_version: &str, continue_token: Option<&str>) -> Value {
    let mut meta = json!({ "resourceVersion": resource_version });
    if let Some(c) = continue_token.filter(|c| !c.is_empty()) {
        meta["continue"] = Value::from(c);
    }
    meta
}

/// One cell: the column's value, converted by the column type as `cellForJSONValue` does.
fn cell(col: &PrinterColumn, obj: &Value) -> Value {
    let raw = match &col.value {
        ColumnValue::JsonPath(p) => json_path(obj, p),
        ColumnValue::Computed(f) => Some(f(obj)),
    };
    let Some(v) = raw.filter(|v| !v.is_null()) else {
        return Value::Null;
    };
    match col.type_.as_str() {
        "integer" => match &v {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| n.as_f64().map(|f| f as i64))
                .map_or(Value::Null, Value::from),
            _ => Value::Null,
        },
        "number" => match v {
            Value::Number(_) => v,
            _ => Value::Null,
        },
        "boolean" => match v {
            Value::Bool(_) => v,
            _ => Value::Null,
        },
        "string" => Value::String(plain_text(&v)),
        "date" => match v.as_str() {
            Some(ts) if ts.parse::<jiff::Timestamp>().is_ok() => {
                Value::from(crate::time::human_duration(crate::time::age_seconds(ts)))
            }
            Some(_) => Value::from("<invalid>"),
            None => Value::Null,
        },
        _ => v,
    }
}

/// A value as kubectl's JSONPath printer shows it: strings bare, integral numbers without a
/// fraction, composites as compact JSON.
fn plain_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            // Go prints float64(3) as "3"; serde would print "3.0".
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => {
                format!("{}", f as i64)
            }
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{...}}`
pub fn partial_object_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A `PartialObjectMetadataList` of `items`, with the list's resourceVersion and continue token.
pub fn partial_object_metadata_list(
    items: &[&Value],
    resource_version: &str,
    continue_token: Option<&str>,
) -> Value {
    let items: Vec<Value> = items.iter().map(|o| partial_object_metadata(o)).collect();
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta(resource_version, continue_token),
        "items": items,
    })
}

// ---------- JSONPath ----------

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(i64),
    Wildcard,
    Filter(Filter),
}

#[derive(Debug, Clone, PartialEq)]
struct Filter {
    path: Vec<Step>,
    /// `None`: an existence test, `[?(@.x)]`.
    cmp: Option<(CmpOp, Value)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Evaluates a Kubernetes (kubectl-style) JSONPath as used in additionalPrinterColumns:
/// `.a.b`, `.a[0].b`, `.a[*].b` (several values joined by ","), `.a[?(@.type=="Ready")].status`
/// (filter by comparison with a string/number/bool literal, or `[?(@.x)]` for existence),
/// `['key']` and `\.` in keys; a leading `$` and a `{`/`}` wrapper are allowed.
/// Returns None when absent or when the path does not parse.
pub fn json_path(obj: &Value, path: &str) -> Option<Value> {
    let mut p = path.trim();
    if let Some(inner) = p.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        p = inner.trim();
    }
    let steps = parse_path(p)?;
    let nodes = eval(obj, &steps);
    match nodes.as_slice() {
        [] => None,
        [one] => Some((*one).clone()),
        many => {
            let parts: Vec<String> = many.iter().map(|v| plain_text(v)).collect();
            Some(Value::String(parts.join(",")))
        }
    }
}

fn eval<'a>(root: &'a Value, steps: &[Step]) -> Vec<&'a Value> {
    let mut nodes = vec![root];
    for step in steps {
        let mut next = Vec::new();
        for node in nodes {
            match step {
                Step::Key(k) => next.extend(node.get(k.as_str())),
                Step::Index(i) => {
                    if let Some(a) = node.as_array() {
                        let idx = if *i < 0 { a.len() as i64 + i } else { *i };
                        next.extend(usize::try_from(idx).ok().and_then(|i| a.get(i)));
                    }
                }
                Step::Wildcard => match node {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Step::Filter(f) => {
                    if let Some(a) = node.as_array() {
                        next.extend(a.iter().filter(|e| f.matches(e)));
                    }
                }
            }
        }
        nodes = next;
    }
    nodes
}

impl Filter {
    fn matches(&self, elem: &Value) -> bool {
        let found = eval(elem, &self.path);
        let Some((op, lit)) = &self.cmp else {
            return !found.is_empty();
        };
        found.iter().any(|v| compare(v, *op, lit))
    }
}

fn compare(v: &Value, op: CmpOp, lit: &Value) -> bool {
    use std::cmp::Ordering;
    let ord = match (v, lit) {
        (Value::Number(a), Value::Number(b)) => a
            .as_f64()
            .zip(b.as_f64())
            .and_then(|(a, b)| a.partial_cmp(&b)),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        _ => (v == lit).then_some(Ordering::Equal),
    };
    match op {
        CmpOp::Eq => ord == Some(Ordering::Equal),
        CmpOp::Ne => ord != Some(Ordering::Equal),
        CmpOp::Lt => ord == Some(Ordering::Less),
        CmpOp::Le => matches!(ord, Some(Ordering::Less | Ordering::Equal)),
        CmpOp::Gt => ord == Some(Ordering::Greater),
        CmpOp::Ge => matches!(ord, Some(Ordering::Greater | Ordering::Equal)),
    }
}

/// Parses a path after its wrapper: `$`, `@` or nothing, then `.key`, `[..]` steps.
fn parse_path(p: &str) -> Option<Vec<Step>> {
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    if matches!(chars.first(), Some('$' | '@')) {
        i = 1;
    }
    let mut steps = Vec::new();
    // A bare first key (`status.phase`) is accepted as kubectl's relaxed form.
    let mut expect_key = i < chars.len() && chars[i] != '.' && chars[i] != '[';
    while i < chars.len() || expect_key {
        if expect_key {
            expect_key = false;
            let (key, next) = read_key(&chars, i);
            if key.is_empty() {
                return None;
            }
            steps.push(if key == "*" {
                Step::Wildcard
            } else {
                Step::Key(key)
            });
            i = next;
            continue;
        }
        match chars[i] {
            '.' => {
                // Recursive descent (`..`) is not supported.
                if chars.get(i + 1) == Some(&'.') {
                    return None;
                }
                i += 1;
                expect_key = true;
            }
            '[' => {
                let end = closing_bracket(&chars, i)?;
                let inner: String = chars[i + 1..end].iter().collect();
                steps.push(parse_bracket(inner.trim())?);
                i = end + 1;
            }
            _ => return None,
        }
    }
    Some(steps)
}

/// Reads a key up to an unescaped `.` or `[`; `\.` stands for a literal dot.
fn read_key(chars: &[char], mut i: usize) -> (String, usize) {
    let mut key = String::new();
    while i < chars.len() {
        match chars[i] {
            '\\' if i + 1 < chars.len() => {
                key.push(chars[i + 1]);
                i += 2;
            }
            '.' | '[' => break,
            c => {
                key.push(c);
                i += 1;
            }
        }
    }
    (key, i)
}

/// Index of the `]` closing the `[` at `open`, skipping quoted text and nested brackets.
fn closing_bracket(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for (j, &c) in chars.iter().enumerate().skip(open) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

fn parse_bracket(inner: &str) -> Option<Step> {
    if inner == "*" {
        return Some(Step::Wildcard);
    }
    if let Some(expr) = inner.strip_prefix('?') {
        let expr = expr.trim().strip_prefix('(')?.strip_suffix(')')?.trim();
        return parse_filter(expr).map(Step::Filter);
    }
    if let Some(s) = unquote(inner) {
        return Some(Step::Key(s));
    }
    inner.parse::<i64>().ok().map(Step::Index)
}

fn unquote(s: &str) -> Option<String> {
    let q = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let body = s.strip_prefix(q)?.strip_suffix(q)?;
    Some(body.to_owned())
}

fn parse_filter(expr: &str) -> Option<Filter> {
    // Longer operators first, so `<=` is not read as `<`.
    const OPS: [(&str, CmpOp); 6] = [
        ("==", CmpOp::Eq),
        ("!=", CmpOp::Ne),
        ("<=", CmpOp::Le),
        (">=", CmpOp::Ge),
        ("<", CmpOp::Lt),
        (">", CmpOp::Gt),
    ];
    let split = OPS
        .iter()
        .find_map(|(s, op)| find_unquoted(expr, s).map(|at| (at, s.len(), *op)));
    let Some((at, len, op)) = split else {
        let path = parse_path(expr.strip_prefix('@')?)?;
        return Some(Filter { path, cmp: None });
    };
    let left = expr[..at].trim();
    let right = expr[at + len..].trim();
    let path = parse_path(left.strip_prefix('@')?)?;
    let lit = match unquote(right) {
        Some(s) => Value::String(s),
        None => serde_json::from_str::<Value>(right).ok()?,
    };
    Some(Filter {
        path,
        cmp: Some((op, lit)),
    })
}

/// Byte offset of `needle` in `s` outside quoted text.
fn find_unquoted(s: &str, needle: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if s[i..].starts_with(needle) => return Some(i),
            None => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{GenerationRule, Registry};

    fn cr_type() -> ResourceType {
        let col = |name: &str, type_: &str, path: &str, priority: i64| PrinterColumn {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: String::new(),
            priority,
            value: ColumnValue::JsonPath(path.into()),
        };
        ResourceType {
            group: "goodput.dev".into(),
            version: "v1alpha1".into(),
            kind: "CapacityBenchmark".into(),
            list_kind: "CapacityBenchmarkList".into(),
            plural: "capacitybenchmarks".into(),
            singular: "capacitybenchmark".into(),
            namespaced: true,
            short_names: vec![],
            categories: vec![],
            status: true,
            scale: None,
            log: false,
            generation: GenerationRule::Spec,
            printer_columns: vec![
                col("Phase", "string", ".status.phase", 0),
                col(
                    "Ready",
                    "string",
                    r#".status.conditions[?(@.type=="Ready")].status"#,
                    0,
                ),
                col("Replicas", "integer", ".status.requiredReplicas", 0),
                col("Capacity", "number", ".status.capacityRps", 0),
                col("Missing", "string", ".status.nothing", 0),
                col("Age", "date", ".metadata.creationTimestamp", 0),
                col("Reason", "string", ".status.conditions[0].reason", 1),
            ],
            schema: None,
            crd: true,
            storage_version: "v1alpha1".into(),
        }
    }

    fn cr(created: &str) -> Value {
        json!({
            "apiVersion": "goodput.dev/v1alpha1",
            "kind": "CapacityBenchmark",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1",
                         "resourceVersion": "7", "creationTimestamp": created,
                         "labels": {"app": "web"}},
            "spec": {"x": 1},
            "status": {
                "phase": "Running",
                "requiredReplicas": 3,
                "capacityRps": 12.5,
                "conditions": [
                    {"type": "Progressing", "status": "True", "reason": "Sweeping"},
                    {"type": "Ready", "status": "False", "reason": "NotYet"}
                ]
            }
        })
    }

    #[test]
    fn table_renders_printer_columns_with_condition_filter_and_age() {
        let rt = cr_type();
        // A whole second, so the age is at least 300 s (rounding could make it 299).
        let created = crate::time::format_seconds(
            jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() - 300).unwrap(),
        );
        let obj = cr(&created);
        let t = table(&rt, &[&obj], "42", Some("tok"), IncludeObject::Metadata);
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(
            t["metadata"],
            json!({"resourceVersion": "42", "continue": "tok"})
        );
        let cols = t["columnDefinitions"].as_array().unwrap();
        assert_eq!(cols.len(), 8);
        assert_eq!(cols[0]["name"], "Name");
        assert_eq!(cols[0]["format"], "name");
        assert_eq!(cols[7]["priority"], 1, "priority>0 columns are included");
        let cells = &t["rows"][0]["cells"];
        let age = cells[6].as_str().unwrap();
        assert!(age == "5m" || age == "5m1s", "age {age}");
        assert_eq!(
            cells,
            &json!(["web", "Running", "False", 3, 12.5, null, age, "Sweeping"])
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["rows"][0]["object"]["metadata"]["uid"], "u1");
    }

    #[test]
    fn include_object_controls_row_object() {
        let rt = cr_type();
        let obj = cr("2020-01-01T00:00:00Z");
        let none = table(&rt, &[&obj], "1", None, include_object(Some("None")));
        assert!(none["rows"][0].get("object").is_none());
        assert!(none["metadata"].get("continue").is_none());
        let full = table(&rt, &[&obj], "1", None, include_object(Some("Object")));
        assert_eq!(full["rows"][0]["object"], obj);
        assert_eq!(include_object(None), IncludeObject::Metadata);
    }

    #[test]
    fn builtin_computed_columns_and_default_age() {
        let reg = Registry::builtin();
        let deploy = reg.get("apps", "v1", "deployments").unwrap();
        let obj = json!({"metadata": {"name": "d", "creationTimestamp": "bogus"},
                         "spec": {"replicas": 2}, "status": {"readyReplicas": 1}});
        let t = table(&deploy, &[&obj], "5", None, IncludeObject::None);
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["d", "1/2", "0", "0", "<invalid>"])
        );
        let cm = reg.get("", "v1", "configmaps").unwrap();
        let obj = json!({"metadata": {"name": "c"}});
        let t = table(&cm, &[&obj], "5", None, IncludeObject::None);
        assert_eq!(t["rows"][0]["cells"], json!(["c", null]));
    }

    #[test]
    fn partial_object_metadata_shapes() {
        let obj = cr("2020-01-01T00:00:00Z");
        let p = partial_object_metadata(&obj);
        assert_eq!(
            p,
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                   "metadata": obj["metadata"].clone()})
        );
        let l = partial_object_metadata_list(&[&obj, &obj], "9", None);
        assert_eq!(l["kind"], "PartialObjectMetadataList");
        assert_eq!(l["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(l["metadata"], json!({"resourceVersion": "9"}));
        assert_eq!(l["items"][1], p);
    }

    #[test]
    fn representation_from_accept() {
        let kubectl_get = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(representation(kubectl_get), Representation::Table);
        let kube_meta = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(
            representation(kube_meta),
            Representation::PartialObjectMetadata
        );
        let kube_meta_one = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        assert_eq!(
            representation(kube_meta_one),
            Representation::PartialObjectMetadata
        );
        assert_eq!(representation("application/json"), Representation::Object);
        assert_eq!(representation(""), Representation::Object);
        assert_eq!(representation("*/*"), Representation::Object);
        // Protobuf tables are skipped; an unknown `as` falls through to the next range.
        let proto =
            "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json";
        assert_eq!(representation(proto), Representation::Object);
        let v2 = "application/json;as=Table;v=v2;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io";
        assert_eq!(representation(v2), Representation::Table);
    }

    #[test]
    fn json_path_subset() {
        let o = json!({
            "metadata": {"name": "n", "labels": {"app.kubernetes.io/name": "x"}},
            "spec": {"containers": [{"name": "a", "port": 1}, {"name": "b", "port": 2}]},
            "status": {"conditions": [{"type": "Ready", "status": "True", "n": 3}], "nil": null}
        });
        assert_eq!(json_path(&o, ".metadata.name"), Some(json!("n")));
        assert_eq!(json_path(&o, "{.metadata.name}"), Some(json!("n")));
        assert_eq!(json_path(&o, "$.metadata.name"), Some(json!("n")));
        assert_eq!(json_path(&o, "metadata.name"), Some(json!("n")));
        assert_eq!(json_path(&o, ".spec.containers[1].name"), Some(json!("b")));
        assert_eq!(json_path(&o, ".spec.containers[-1].port"), Some(json!(2)));
        assert_eq!(
            json_path(&o, ".spec.containers[*].name"),
            Some(json!("a,b"))
        );
        assert_eq!(
            json_path(&o, ".spec.containers[*].port"),
            Some(json!("1,2"))
        );
        assert_eq!(
            json_path(&o, r#".status.conditions[?(@.type=="Ready")].status"#),
            Some(json!("True"))
        );
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type=='Ready')].status"),
            Some(json!("True"))
        );
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.n==3)].type"),
            Some(json!("Ready"))
        );
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.n>2)].type"),
            Some(json!("Ready"))
        );
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type==\"Gone\")].status"),
            None
        );
        assert_eq!(
            json_path(&o, ".spec.containers[?(@.port)].name"),
            Some(json!("a,b"))
        );
        assert_eq!(
            json_path(&o, r".metadata.labels.app\.kubernetes\.io/name"),
            Some(json!("x"))
        );
        assert_eq!(
            json_path(&o, ".metadata.labels['app.kubernetes.io/name']"),
            Some(json!("x"))
        );
        assert_eq!(json_path(&o, ".status.nil"), Some(Value::Null));
        assert_eq!(json_path(&o, ".status.missing.deeper"), None);
        assert_eq!(json_path(&o, ".spec.containers[9]"), None);
        assert_eq!(json_path(&o, "..name"), None);
        assert_eq!(json_path(&o, ".spec.containers[0"), None);
    }
}
