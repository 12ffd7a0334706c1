//! Structural schemas of CustomResourceDefinitions, with apiextensions-apiserver semantics:
//! pruning of unknown fields, defaulting, OpenAPI value validation and
//! `x-kubernetes-validations` CEL rules (including transition rules over `oldSelf`).
//!
//! Schemas are the plain JSON of a CRD version's `schema.openAPIV3Schema`.

use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};

// ---------- pruning ----------

/// Removes fields not declared in the schema (`properties`), except under
/// `x-kubernetes-preserve-unknown-fields: true`; `x-kubernetes-embedded-resource: true` keeps
/// `apiVersion`/`kind`/`metadata`; `additionalProperties` schemas apply to map values; at the
/// root, `apiVersion`, `kind` and `metadata` are always kept (metadata is not pruned by the CR
/// schema).
pub fn prune(obj: &mut Value, schema: &Value) {
    prune_node(obj, schema, true);
}

fn flag(s: &Value, name: &str) -> bool {
    s.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn schema_type(s: &Value) -> &str {
    s.get("type").and_then(Value::as_str).unwrap_or("")
}

/// The `additionalProperties` schema, when it is one (not a bare boolean).
fn additional_schema(s: &Value) -> Option<&Value> {
    s.get("additionalProperties").filter(|a| a.is_object())
}

fn prune_node(v: &mut Value, s: &Value, root: bool) {
    match v {
        Value::Object(m) => {
            let embedded = root || flag(s, "x-kubernetes-embedded-resource");
            let preserve = flag(s, "x-kubernetes-preserve-unknown-fields")
                || s.get("additionalProperties") == Some(&Value::Bool(true));
            let props = s.get("properties").and_then(Value::as_object);
            let additional = additional_schema(s);
            m.retain(|k, child| {
                if embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    return true;
                }
                if let Some(ps) = props.and_then(|p| p.get(k)) {
                    prune_node(child, ps, false);
                    true
                } else if let Some(a) = additional {
                    prune_node(child, a, false);
                    true
                } else {
                    preserve
                }
            });
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items").filter(|i| i.is_object()) {
                for item in items {
                    prune_node(item, is, false);
                }
            }
        }
        _ => {}
    }
}

// ---------- defaulting ----------

/// Applies `default` values from the schema for absent properties (recursively, also inside
/// array items and `additionalProperties` values; a default is itself pruned and defaulted).
/// A null value of a non-nullable field with a default gets the default.
pub fn apply_defaults(obj: &mut Value, schema: &Value) {
    default_node(obj, schema);
}

fn nullable(s: &Value) -> bool {
    flag(s, "nullable")
}

/// The schema's default, pruned by that schema (as the API server does when it stores a CRD).
fn pruned_default(s: &Value) -> Option<Value> {
    let mut d = s.get("default")?.clone();
    prune_node(&mut d, s, false);
    Some(d)
}

fn is_non_nullable_null(v: &Value, s: &Value) -> bool {
    v.is_null() && !nullable(s)
}

fn default_node(v: &mut Value, s: &Value) {
    match v {
        Value::Object(m) => {
            let props = s.get("properties").and_then(Value::as_object);
            if let Some(props) = props {
                for (k, ps) in props {
                    let missing = m.get(k).is_none_or(|cur| is_non_nullable_null(cur, ps));
                    if missing && let Some(d) = pruned_default(ps) {
                        m.insert(k.clone(), d);
                    }
                }
            }
            let additional = additional_schema(s);
            for (k, child) in m.iter_mut() {
                if let Some(ps) = props.and_then(|p| p.get(k)) {
                    default_node(child, ps);
                } else if let Some(a) = additional {
                    default_child(child, a);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items").filter(|i| i.is_object()) {
                for item in items {
                    default_child(item, is);
                }
            }
        }
        _ => {}
    }
}

/// A map value or list item: a non-nullable null takes the default, anything else recurses.
fn default_child(child: &mut Value, s: &Value) {
    if is_non_nullable_null(child, s)
        && let Some(d) = pruned_default(s)
    {
        *child = d;
        default_node(child, s);
    } else {
        default_node(child, s);
    }
}

// ---------- field errors ----------

/// The type of a [`FieldError`], as `k8s.io/apimachinery/pkg/util/validation/field` has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// A required field is missing (`FieldValueRequired`).
    Required,
    /// A value is invalid (`FieldValueInvalid`).
    Invalid,
    /// A value is not one of the enumerated ones (`FieldValueNotSupported`).
    Unsupported,
    /// A string is too long (`FieldValueTooLong`).
    TooLong,
    /// A list or map has too many entries (`FieldValueTooMany`).
    TooMany,
    /// A value is forbidden (`FieldValueForbidden`).
    Forbidden,
    /// A set or map list repeats an entry (`FieldValueDuplicate`).
    Duplicate,
}

impl FieldErrorKind {
    /// The human text the real server prints, e.g. `Invalid value`.
    pub fn as_str(&self) -> &'static str {
        match self {
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Invalid => "Invalid value",
            FieldErrorKind::Unsupported => "Unsupported value",
            FieldErrorKind::TooLong => "Too long",
            FieldErrorKind::TooMany => "Too many",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::Duplicate => "Duplicate value",
        }
    }
}

/// One validation failure of a custom resource.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The path, like `spec.rateSweep.points` or `spec.items[0].name`; empty for the root.
    pub field: String,
    /// What kind of failure.
    pub kind: FieldErrorKind,
    /// The bad value as the server reports it (for type errors the actual type's name, for
    /// CEL rules the schema type); `None` where the server omits it.
    pub value: Option<Value>,
    /// The detail, e.g. `spec.replicas in body must be of type integer: "string"`.
    pub message: String,
}

impl FieldError {
    fn new(field: &str, kind: FieldErrorKind, value: Option<Value>, message: String) -> Self {
        FieldError {
            field: field.to_string(),
            kind,
            value,
            message,
        }
    }

    /// The `StatusCause.reason` for this error, e.g. `FieldValueInvalid`.
    pub fn reason(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::Unsupported => "FieldValueNotSupported",
            FieldErrorKind::TooLong => "FieldValueTooLong",
            FieldErrorKind::TooMany => "FieldValueTooMany",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
        }
    }

    /// The message without the field prefix (Go's `field.Error.ErrorBody`), as used in
    /// `StatusCause.message`.
    pub fn body(&self) -> String {
        let kind = self.kind.as_str();
        let mut s = match (&self.kind, &self.value) {
            (FieldErrorKind::Required | FieldErrorKind::Forbidden | FieldErrorKind::TooLong, _)
            | (_, None) => kind.to_string(),
            (_, Some(v)) => format!("{kind}: {}", go_value(v)),
        };
        if !self.message.is_empty() {
            s.push_str(": ");
            s.push_str(&self.message);
        }
        s
    }
}

impl fmt::Display for FieldError {
    /// Like the real server: `spec.replicas: Invalid value: "string": spec.replicas in body
    /// must be of type integer: "string"`; the root prints as `<nil>`, as Go's nil path does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = if self.field.is_empty() {
            "<nil>"
        } else {
            &self.field
        };
        write!(f, "{field}: {}", self.body())
    }
}

/// Joins errors as Go's `ErrorList.ToAggregate().Error()` does: one error alone, several as
/// `[e1, e2]`. The server's message is then `<Kind>.<group> "<name>" is invalid: <this>`.
pub fn aggregate_message(errors: &[FieldError]) -> String {
    match errors {
        [one] => one.to_string(),
        _ => {
            let parts: Vec<String> = errors.iter().map(ToString::to_string).collect();
            format!("[{}]", parts.join(", "))
        }
    }
}

/// A top-level bad value as Go's `ErrorBody` prints it: strings quoted, scalars bare, null as
/// `"null"`, composites with `%#v`.
fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "\"null\"".to_string(),
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => go_sharp_v(v),
    }
}

/// Go's `%#v` of an unstructured JSON value.
fn go_sharp_v(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".to_string(),
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(go_sharp_v).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        Value::Object(m) => {
            // Go prints map keys sorted.
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let items: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), go_sharp_v(v)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", items.join(", "))
        }
    }
}

// ---------- paths ----------

fn child_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn index_path(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn key_path(path: &str, key: &str) -> String {
    format!("{path}[{key}]")
}

/// The name kube-openapi puts before "in body".
fn body_name(path: &str) -> &str {
    if path.is_empty() { "body" } else { path }
}

/// A rule's `fieldPath` (`.a.b`, `['x.y']`, `[0]`) appended to `base`; `None` if malformed.
fn join_field_path(base: &str, field_path: &str) -> Option<String> {
    let mut out = base.to_string();
    let chars: Vec<char> = field_path.trim().chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                let start = i + 1;
                i = start;
                while i < chars.len() && (chars[i].is_alphanumeric() || "_-$".contains(chars[i])) {
                    i += 1;
                }
                if i == start {
                    return None;
                }
                let name: String = chars[start..i].iter().collect();
                out = child_path(&out, &name);
            }
            '[' => {
                let close = chars[i..].iter().position(|c| *c == ']')? + i;
                let inner: String = chars[i + 1..close].iter().collect();
                let inner = inner.trim();
                if let Ok(n) = inner.parse::<usize>() {
                    out = index_path(&out, n);
                } else {
                    let unquoted = inner
                        .strip_prefix('\'')
                        .and_then(|s| s.strip_suffix('\''))
                        .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')))?;
                    out = key_path(&out, unquoted);
                }
                i = close + 1;
            }
            _ => return None,
        }
    }
    Some(out)
}

// ---------- CEL ----------

/// The CEL environment: the standard library plus the strings, lists and math extensions
/// Kubernetes also enables. Built once; an `Env` is immutable after construction.
fn cel_env() -> Arc<cel::Env> {
    static ENV: OnceLock<Arc<cel::Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = cel::Env::stdlib();
        // The extensions only fail on a name already declared, which a fresh stdlib `Env`
        // does not have; should that ever change, the rules using them fail to resolve
        // instead of the server failing.
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(cel::extensions::lists);
        let _ = env.add_extension(cel::extensions::math);
        Arc::new(env)
    })
    .clone()
}

/// Compiles and evaluates CEL source, caching programs for one validation run.
struct Cel {
    env: Arc<cel::Env>,
    programs: HashMap<String, Result<Rc<cel::Program>, String>>,
}

impl Cel {
    fn new() -> Self {
        Cel {
            env: cel_env(),
            programs: HashMap::new(),
        }
    }

    fn compile(&mut self, src: &str) -> Result<Rc<cel::Program>, String> {
        if let Some(p) = self.programs.get(src) {
            return p.clone();
        }
        let compiled = self
            .env
            .compile(src)
            .map(Rc::new)
            .map_err(|e| e.to_string().replace('\n', " "));
        self.programs.insert(src.to_string(), compiled.clone());
        compiled
    }

    fn eval(
        &mut self,
        program: &cel::Program,
        vars: Vec<(&str, cel::Value)>,
    ) -> Result<cel::Value, String> {
        let mut ctx = cel::Context::with_env(self.env.clone());
        for (name, value) in vars {
            ctx.add_variable_from_value(name, value);
        }
        program.execute(&ctx).map_err(|e| e.to_string())
    }

    fn eval_src(&mut self, src: &str, vars: Vec<(&str, cel::Value)>) -> Result<cel::Value, String> {
        let p = self.compile(src)?;
        self.eval(&p, vars)
    }

    /// `s` as a CEL timestamp (RFC 3339), if it parses.
    fn timestamp(&mut self, s: &str) -> Option<cel::Value> {
        self.eval_src("timestamp(s)", vec![("s", cel::Value::from(s))])
            .ok()
    }

    /// `s` as a CEL duration (Go syntax such as `1h30m`), if it parses.
    fn duration(&mut self, s: &str) -> Option<cel::Value> {
        self.eval_src("duration(s)", vec![("s", cel::Value::from(s))])
            .ok()
    }

    /// Whether `s` matches the RE2-syntax pattern; `None` for an invalid pattern.
    fn regex_match(&mut self, s: &str, pattern: &str) -> Option<bool> {
        match self.eval_src(
            "s.matches(p)",
            vec![("s", cel::Value::from(s)), ("p", cel::Value::from(pattern))],
        ) {
            Ok(cel::Value::Bool(b)) => Some(b),
            _ => None,
        }
    }

    /// JSON to CEL as Kubernetes maps it: objects to maps with string keys, `number` fields to
    /// doubles, `date-time` strings to timestamps and `duration` strings to durations.
    fn convert(&mut self, v: &Value, s: Option<&Value>) -> cel::Value {
        match v {
            Value::Null => cel::Value::Null,
            Value::Bool(b) => cel::Value::Bool(*b),
            Value::Number(n) => {
                let is_number = s.is_some_and(|s| schema_type(s) == "number");
                if is_number {
                    cel::Value::Float(n.as_f64().unwrap_or(f64::NAN))
                } else if let Some(i) = n.as_i64() {
                    cel::Value::Int(i)
                } else if let Some(u) = n.as_u64() {
                    cel::Value::UInt(u)
                } else {
                    cel::Value::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(text) => {
                let format = s
                    .filter(|s| schema_type(s) == "string")
                    .and_then(|s| s.get("format"))
                    .and_then(Value::as_str);
                let converted = match format {
                    Some("date-time") => self.timestamp(text),
                    Some("duration") => self.duration(text),
                    _ => None,
                };
                converted.unwrap_or_else(|| cel::Value::from(text.as_str()))
            }
            Value::Array(items) => {
                let is = s.and_then(|s| s.get("items")).filter(|i| i.is_object());
                let list = items.iter().map(|i| self.convert(i, is)).collect();
                cel::Value::List(Arc::new(list))
            }
            Value::Object(m) => {
                let props = s
                    .and_then(|s| s.get("properties"))
                    .and_then(Value::as_object);
                let additional = s.and_then(additional_schema);
                let mut out = HashMap::with_capacity(m.len());
                for (k, child) in m {
                    let cs = props.and_then(|p| p.get(k)).or(additional);
                    out.insert(cel::objects::Key::from(k.as_str()), self.convert(child, cs));
                }
                cel::Value::Map(cel::objects::Map { map: Arc::new(out) })
            }
        }
    }
}

// ---------- validation ----------

/// Validates `obj` against the schema: type (object, array, string, integer, number, boolean;
/// `nullable`; `x-kubernetes-int-or-string`), required, enum, minimum/maximum (+exclusive),
/// multipleOf, minLength/maxLength, minItems/maxItems, uniqueItems, minProperties/maxProperties,
/// pattern, format (int32, date-time, date, duration), `oneOf`/`anyOf`/`allOf`/`not`,
/// `x-kubernetes-list-type` set/map uniqueness, and `x-kubernetes-validations` CEL rules.
///
/// Rules (`{rule, message, messageExpression?, fieldPath?, reason?, optionalOldSelf?}`) are
/// evaluated where they are declared, with `self` = the node's value and, on update (`old` is
/// Some and the node existed before), `oldSelf` = the old value. Transition rules (those
/// referring to `oldSelf`) are skipped when there is no old node, unless `optionalOldSelf`,
/// where `oldSelf` is an optional. Old nodes are matched by path: object properties, map
/// values, and list-type=map items by key; other list items have no old value.
///
/// Schema errors come first, then rule errors, as the server lists them.
pub fn validate(obj: &Value, old: Option<&Value>, schema: &Value) -> Vec<FieldError> {
    let mut v = Validator {
        cel: Cel::new(),
        schema_errors: Vec::new(),
        rule_errors: Vec::new(),
    };
    v.node(obj, old, schema, "");
    let mut errors = v.schema_errors;
    errors.append(&mut v.rule_errors);
    errors
}

struct Validator {
    cel: Cel,
    schema_errors: Vec<FieldError>,
    rule_errors: Vec<FieldError>,
}

/// The type name kube-openapi reports for a value.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integer(v: &Value) -> bool {
    matches!(v, Value::Number(n) if n.is_i64() || n.is_u64())
}

/// JSON equality with numbers compared by value (`1` equals `1.0`).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else {
                x.as_f64() == y.as_f64()
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, a)| y.get(k).is_some_and(|b| json_eq(a, b)))
        }
        _ => a == b,
    }
}

fn num_text(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

fn invalid(path: &str, value: Value, message: String) -> FieldError {
    FieldError::new(path, FieldErrorKind::Invalid, Some(value), message)
}

/// `strfmt`'s `date`: `YYYY-MM-DD`.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
        && matches!(s[5..7].parse::<u32>(), Ok(1..=12))
        && matches!(s[8..10].parse::<u32>(), Ok(1..=31))
}

/// The key of a list-type=map item: its key fields' values (absent keys as null).
fn list_map_key(item: &Value, keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .filter_map(|k| item.get(*k).map(|v| ((*k).to_string(), v.clone())))
        .collect()
}

fn list_map_keys(s: &Value) -> Vec<&str> {
    s.get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

impl Validator {
    /// Full validation of a node: type, value validations, list types, children, rules.
    fn node(&mut self, v: &Value, old: Option<&Value>, s: &Value, path: &str) {
        let mut errs = Vec::new();
        let ok = self.structural_checks(v, s, path, &mut errs, true);
        self.schema_errors.append(&mut errs);
        if !ok {
            return;
        }
        match v {
            Value::Object(m) => {
                let props = s.get("properties").and_then(Value::as_object);
                let additional = additional_schema(s);
                for (k, child) in m {
                    let old_child = old.and_then(|o| o.get(k));
                    if let Some(ps) = props.and_then(|p| p.get(k)) {
                        self.node(child, old_child, ps, &child_path(path, k));
                    } else if let Some(a) = additional {
                        self.node(child, old_child, a, &key_path(path, k));
                    }
                }
            }
            Value::Array(items) => {
                if let Some(is) = s.get("items").filter(|i| i.is_object()) {
                    let map_keys = (s.get("x-kubernetes-list-type").and_then(Value::as_str)
                        == Some("map"))
                    .then(|| list_map_keys(s));
                    let old_items = old.and_then(Value::as_array);
                    for (i, item) in items.iter().enumerate() {
                        let old_item = match (&map_keys, old_items) {
                            (Some(keys), Some(olds)) if !keys.is_empty() => {
                                let key = list_map_key(item, keys);
                                olds.iter().find(|o| {
                                    o.is_object()
                                        && json_eq(
                                            &Value::Object(list_map_key(o, keys)),
                                            &Value::Object(key.clone()),
                                        )
                                })
                            }
                            _ => None,
                        };
                        self.node(item, old_item, is, &index_path(path, i));
                    }
                }
            }
            _ => {}
        }
        if !v.is_null() {
            self.rules(v, old, s, path);
        }
    }

    /// Type and value validations of one node (without its children's own schemas, which
    /// `node` visits; `sub` schemas of `allOf`/... are visited here, children included).
    /// Returns false when the type is wrong or the value is an allowed null, so that nothing
    /// below it is checked.
    fn structural_checks(
        &mut self,
        v: &Value,
        s: &Value,
        path: &str,
        errs: &mut Vec<FieldError>,
        full: bool,
    ) -> bool {
        let name = body_name(path);
        let ty = schema_type(s);
        let int_or_string = flag(s, "x-kubernetes-int-or-string");
        if v.is_null() {
            if nullable(s) || (ty.is_empty() && !int_or_string) {
                return false;
            }
            let want = if int_or_string {
                "integer or string"
            } else {
                ty
            };
            errs.push(invalid(
                path,
                Value::from("null"),
                format!("{name} in body must be of type {want}: \"null\""),
            ));
            return false;
        }
        let type_ok = if int_or_string {
            is_integer(v) || v.is_string()
        } else {
            match ty {
                "" => true,
                "object" => v.is_object(),
                "array" => v.is_array(),
                "string" => v.is_string(),
                "integer" => is_integer(v),
                "number" => v.is_number(),
                "boolean" => v.is_boolean(),
                _ => true,
            }
        };
        if !type_ok {
            let want = if int_or_string {
                "integer or string"
            } else {
                ty
            };
            let actual = json_type(v);
            errs.push(invalid(
                path,
                Value::from(actual),
                format!("{name} in body must be of type {want}: \"{actual}\""),
            ));
            return false;
        }
        self.value_checks(v, s, path, errs);
        if full {
            self.list_type_checks(v, s, path, errs);
        }
        self.combinator_checks(v, s, path, errs);
        true
    }

    fn value_checks(&mut self, v: &Value, s: &Value, path: &str, errs: &mut Vec<FieldError>) {
        let name = body_name(path);
        if let Some(options) = s.get("enum").and_then(Value::as_array)
            && !options.iter().any(|o| json_eq(o, v))
        {
            let quoted: Vec<String> = options
                .iter()
                .map(|o| match o {
                    Value::String(s) => Value::String(s.clone()).to_string(),
                    other => Value::String(other.to_string()).to_string(),
                })
                .collect();
            errs.push(FieldError::new(
                path,
                FieldErrorKind::Unsupported,
                Some(v.clone()),
                format!("supported values: {}", quoted.join(", ")),
            ));
        }
        let get_u64 = |k: &str| s.get(k).and_then(Value::as_u64);
        match v {
            Value::String(text) => {
                let len = text.chars().count() as u64;
                if let Some(min) = get_u64("minLength")
                    && len < min
                {
                    errs.push(invalid(
                        path,
                        v.clone(),
                        format!("{name} in body should be at least {min} chars long"),
                    ));
                }
                if let Some(max) = get_u64("maxLength")
                    && len > max
                {
                    let unit = if max == 1 { "byte" } else { "bytes" };
                    errs.push(FieldError::new(
                        path,
                        FieldErrorKind::TooLong,
                        None,
                        format!("may not be more than {max} {unit}"),
                    ));
                }
                if let Some(p) = s.get("pattern").and_then(Value::as_str)
                    && self.cel.regex_match(text, p) == Some(false)
                {
                    errs.push(invalid(
                        path,
                        v.clone(),
                        format!("{name} in body should match '{p}'"),
                    ));
                }
                if let Some(format) = s.get("format").and_then(Value::as_str) {
                    let ok = match format {
                        "date-time" => self.cel.timestamp(text).is_some(),
                        "date" => is_date(text),
                        "duration" => self.cel.duration(text).is_some(),
                        _ => true,
                    };
                    if !ok {
                        errs.push(invalid(
                            path,
                            v.clone(),
                            format!("{name} in body must be of type {format}: {v}"),
                        ));
                    }
                }
            }
            Value::Number(n) => {
                let x = n.as_f64().unwrap_or(f64::NAN);
                if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
                    let exclusive = flag(s, "exclusiveMinimum");
                    if (exclusive && x <= min) || x < min {
                        let rel = if exclusive {
                            "greater than"
                        } else {
                            "greater than or equal to"
                        };
                        errs.push(invalid(
                            path,
                            v.clone(),
                            format!("{name} in body should be {rel} {}", num_text(&s["minimum"])),
                        ));
                    }
                }
                if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
                    let exclusive = flag(s, "exclusiveMaximum");
                    if (exclusive && x >= max) || x > max {
                        let rel = if exclusive {
                            "less than"
                        } else {
                            "less than or equal to"
                        };
                        errs.push(invalid(
                            path,
                            v.clone(),
                            format!("{name} in body should be {rel} {}", num_text(&s["maximum"])),
                        ));
                    }
                }
                if let Some(m) = s.get("multipleOf").and_then(Value::as_f64)
                    && m > 0.0
                    && (x / m).fract().abs() > 1e-9
                {
                    errs.push(invalid(
                        path,
                        v.clone(),
                        format!(
                            "{name} in body should be a multiple of {}",
                            num_text(&s["multipleOf"])
                        ),
                    ));
                }
                if s.get("format").and_then(Value::as_str) == Some("int32")
                    && n.as_i64().is_some_and(|i| i32::try_from(i).is_err())
                {
                    errs.push(invalid(
                        path,
                        v.clone(),
                        format!("{name} in body must be of type int32: \"{n}\""),
                    ));
                }
            }
            Value::Array(items) => {
                let len = items.len() as u64;
                if let Some(min) = get_u64("minItems")
                    && len < min
                {
                    errs.push(invalid(
                        path,
                        Value::from(len),
                        format!("{name} in body should have at least {min} items"),
                    ));
                }
                if let Some(max) = get_u64("maxItems")
                    && len > max
                {
                    errs.push(FieldError::new(
                        path,
                        FieldErrorKind::TooMany,
                        Some(Value::from(len)),
                        format!("must have at most {max} items"),
                    ));
                }
                if flag(s, "uniqueItems")
                    && items
                        .iter()
                        .enumerate()
                        .any(|(i, a)| items[..i].iter().any(|b| json_eq(a, b)))
                {
                    errs.push(invalid(
                        path,
                        v.clone(),
                        format!("{name} in body shouldn't contain duplicates"),
                    ));
                }
            }
            Value::Object(m) => {
                let len = m.len() as u64;
                if let Some(min) = get_u64("minProperties")
                    && len < min
                {
                    errs.push(invalid(
                        path,
                        Value::from(len),
                        format!("{name} in body should have at least {min} properties"),
                    ));
                }
                if let Some(max) = get_u64("maxProperties")
                    && len > max
                {
                    errs.push(FieldError::new(
                        path,
                        FieldErrorKind::TooMany,
                        Some(Value::from(len)),
                        format!("must have at most {max} items"),
                    ));
                }
                if let Some(required) = s.get("required").and_then(Value::as_array) {
                    for r in required.iter().filter_map(Value::as_str) {
                        if !m.contains_key(r) {
                            errs.push(FieldError::new(
                                &child_path(path, r),
                                FieldErrorKind::Required,
                                None,
                                String::new(),
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// `x-kubernetes-list-type: set | map` uniqueness.
    fn list_type_checks(&mut self, v: &Value, s: &Value, path: &str, errs: &mut Vec<FieldError>) {
        let Value::Array(items) = v else { return };
        match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => {
                for (i, a) in items.iter().enumerate() {
                    if items[..i].iter().any(|b| json_eq(a, b)) {
                        errs.push(FieldError::new(
                            &index_path(path, i),
                            FieldErrorKind::Duplicate,
                            Some(a.clone()),
                            String::new(),
                        ));
                    }
                }
            }
            Some("map") => {
                let keys = list_map_keys(s);
                let mut seen: Vec<Value> = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let ip = index_path(path, i);
                    match item {
                        Value::Object(m) if m.is_empty() => {
                            errs.push(invalid(&ip, item.clone(), "cannot be empty".into()));
                        }
                        Value::Object(_) => {
                            let key = Value::Object(list_map_key(item, &keys));
                            if seen.iter().any(|k| json_eq(k, &key)) {
                                errs.push(FieldError::new(
                                    &ip,
                                    FieldErrorKind::Duplicate,
                                    Some(key),
                                    String::new(),
                                ));
                            } else {
                                seen.push(key);
                            }
                        }
                        _ => errs.push(invalid(
                            &ip,
                            item.clone(),
                            "must be an object for an array of list-type map".into(),
                        )),
                    }
                }
            }
            _ => {}
        }
    }

    /// `allOf`, `anyOf`, `oneOf`, `not`: value validations by sub-schemas.
    fn combinator_checks(&mut self, v: &Value, s: &Value, path: &str, errs: &mut Vec<FieldError>) {
        let name = body_name(path);
        let subs = |k: &str| -> Vec<Value> {
            s.get(k)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        for sub in subs("allOf") {
            self.sub_schema(v, &sub, path, errs);
        }
        let any_of = subs("anyOf");
        if !any_of.is_empty() {
            let passing = any_of
                .iter()
                .filter(|sub| self.passes(v, sub, path))
                .count();
            if passing == 0 {
                errs.push(invalid(
                    path,
                    Value::from(""),
                    format!("{name} in body must validate at least one schema (anyOf)"),
                ));
            }
        }
        let one_of = subs("oneOf");
        if !one_of.is_empty() {
            let passing = one_of
                .iter()
                .filter(|sub| self.passes(v, sub, path))
                .count();
            if passing != 1 {
                errs.push(invalid(
                    path,
                    Value::from(""),
                    format!("{name} in body must validate one and only one schema (oneOf)"),
                ));
            }
        }
        if let Some(not) = s.get("not").filter(|n| n.is_object()).cloned()
            && self.passes(v, &not, path)
        {
            errs.push(invalid(
                path,
                Value::from(""),
                format!("{name} in body must not validate the schema (not)"),
            ));
        }
    }

    fn passes(&mut self, v: &Value, sub: &Value, path: &str) -> bool {
        let mut errs = Vec::new();
        self.sub_schema(v, sub, path, &mut errs);
        errs.is_empty()
    }

    /// Validates a value against a sub-schema of a combinator, its own children included.
    fn sub_schema(&mut self, v: &Value, s: &Value, path: &str, errs: &mut Vec<FieldError>) {
        if !self.structural_checks(v, s, path, errs, false) {
            return;
        }
        match v {
            Value::Object(m) => {
                let props = s.get("properties").and_then(Value::as_object);
                let additional = additional_schema(s);
                for (k, child) in m {
                    if let Some(ps) = props.and_then(|p| p.get(k)) {
                        self.sub_schema(child, ps, &child_path(path, k), errs);
                    } else if let Some(a) = additional {
                        self.sub_schema(child, a, &key_path(path, k), errs);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(is) = s.get("items").filter(|i| i.is_object()) {
                    for (i, item) in items.iter().enumerate() {
                        self.sub_schema(item, is, &index_path(path, i), errs);
                    }
                }
            }
            _ => {}
        }
    }

    /// Evaluates the node's `x-kubernetes-validations`.
    fn rules(&mut self, v: &Value, old: Option<&Value>, s: &Value, path: &str) {
        let Some(rules) = s.get("x-kubernetes-validations").and_then(Value::as_array) else {
            return;
        };
        if rules.is_empty() {
            return;
        }
        let type_name = Value::from(schema_type(s));
        let self_val = self.cel.convert(v, Some(s));
        let mut old_val: Option<cel::Value> = None;
        for rule in rules {
            let Some(src) = rule.get("rule").and_then(Value::as_str) else {
                continue;
            };
            let rule_text = rule_error_string(rule, src);
            let program = match self.cel.compile(src) {
                Ok(p) => p,
                Err(e) => {
                    self.rule_errors.push(invalid(
                        path,
                        type_name.clone(),
                        format!("rule compile error: {e}"),
                    ));
                    continue;
                }
            };
            let uses_old = program.references().has_variable("oldSelf");
            let optional_old = flag(rule, "optionalOldSelf");
            if uses_old && old.is_none() && !optional_old {
                continue;
            }
            let mut vars = vec![("self", self_val.clone())];
            if uses_old {
                let plain_old = match old {
                    Some(o) => {
                        let converted = match &old_val {
                            Some(c) => c.clone(),
                            None => {
                                let c = self.cel.convert(o, Some(s));
                                old_val = Some(c.clone());
                                c
                            }
                        };
                        Some(converted)
                    }
                    None => None,
                };
                let bound = if optional_old {
                    let opt = match plain_old {
                        Some(c) => cel::objects::OptionalValue::of(c),
                        None => cel::objects::OptionalValue::none(),
                    };
                    cel::Value::Opaque(Arc::new(opt))
                } else {
                    plain_old.unwrap_or(cel::Value::Null)
                };
                vars.push(("oldSelf", bound));
            }
            let result = self.cel.eval(&program, vars.clone());
            let passed = match result {
                Ok(cel::Value::Bool(b)) => b,
                Ok(_) => false,
                Err(e) => {
                    let detail = if e.starts_with("found no matching overload") {
                        format!(
                            "'{e}': call arguments did not match a supported operator, function or macro signature for rule: {rule_text}"
                        )
                    } else {
                        format!("{e} evaluating rule: {rule_text}")
                    };
                    self.rule_errors
                        .push(invalid(path, type_name.clone(), detail));
                    continue;
                }
            };
            if passed {
                continue;
            }
            let mut message = rule_text;
            if let Some(expr) = rule.get("messageExpression").and_then(Value::as_str)
                && let Ok(cel::Value::String(m)) = self.cel.eval_src(expr, vars)
                && !m.trim().is_empty()
            {
                message = m.trim().to_string();
            }
            let field = rule
                .get("fieldPath")
                .and_then(Value::as_str)
                .and_then(|fp| join_field_path(path, fp))
                .unwrap_or_else(|| path.to_string());
            let err = match rule.get("reason").and_then(Value::as_str) {
                Some("FieldValueRequired") => {
                    FieldError::new(&field, FieldErrorKind::Required, None, message)
                }
                Some("FieldValueForbidden") => {
                    FieldError::new(&field, FieldErrorKind::Forbidden, None, message)
                }
                Some("FieldValueDuplicate") => FieldError::new(
                    &field,
                    FieldErrorKind::Duplicate,
                    Some(type_name.clone()),
                    message,
                ),
                _ => invalid(&field, type_name.clone(), message),
            };
            self.rule_errors.push(err);
        }
    }
}

/// The rule's `message`, or `failed rule: <rule>`, as `ruleErrorString` makes it.
fn rule_error_string(rule: &Value, src: &str) -> String {
    match rule.get("message").and_then(Value::as_str).map(str::trim) {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => format!("failed rule: {}", src.trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec_schema(spec: Value) -> Value {
        json!({"type": "object", "properties": {"spec": spec}})
    }

    #[test]
    fn prune_unknown_nested_field() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {
                "model": {"type": "string"},
                "sweep": {"type": "object", "properties": {"points": {"type": "integer"}}},
                "items": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "object", "properties": {"x": {"type": "string"}}}}
            }
        }));
        let mut obj = json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "annotations": {"a": "b"}},
            "status": {"x": 1},
            "spec": {
                "model": "m", "bogus": true,
                "sweep": {"points": 3, "extra": "drop"},
                "items": [{"a": "1", "b": "2"}],
                "labels": {"k": {"x": "keep", "y": "drop"}}
            }
        });
        prune(&mut obj, &schema);
        assert_eq!(
            obj,
            json!({
                "apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w", "annotations": {"a": "b"}},
                "spec": {
                    "model": "m",
                    "sweep": {"points": 3},
                    "items": [{"a": "1"}],
                    "labels": {"k": {"x": "keep"}}
                }
            })
        );
    }

    #[test]
    fn prune_keeps_preserve_unknown_fields_and_embedded() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {
                "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                           "properties": {"known": {"type": "object", "properties": {}}}},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                             "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
            }
        }));
        let mut obj = json!({"spec": {
            "config": {"anything": {"deep": [1, 2]}, "known": {"gone": 1}},
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"a": 1}, "other": 2}
        }});
        prune(&mut obj, &schema);
        assert_eq!(
            obj,
            json!({"spec": {
                "config": {"anything": {"deep": [1, 2]}, "known": {}},
                "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"a": 1}}
            }})
        );
    }

    #[test]
    fn defaults_nested_and_in_array_items() {
        let schema = spec_schema(json!({
            "type": "object",
            "default": {},
            "properties": {
                "replicas": {"type": "integer", "default": 1},
                "mode": {"type": "string", "default": "Propose"},
                "sweep": {
                    "type": "object",
                    "default": {"unknown": 1},
                    "properties": {"points": {"type": "integer", "default": 5}}
                },
                "classes": {
                    "type": "array",
                    "items": {"type": "object", "properties": {
                        "weight": {"type": "number", "default": 1.0},
                        "name": {"type": "string"}
                    }}
                },
                "opt": {"type": "string", "nullable": true, "default": "d"}
            }
        }));
        let mut obj = json!({"spec": {"replicas": null, "mode": "Apply", "classes": [{"name": "a"}, {"name": "b", "weight": 2}], "opt": null}});
        apply_defaults(&mut obj, &schema);
        assert_eq!(
            obj,
            json!({"spec": {
                "replicas": 1, "mode": "Apply",
                "sweep": {"points": 5},
                "classes": [{"name": "a", "weight": 1.0}, {"name": "b", "weight": 2}],
                "opt": null
            }})
        );
        // An absent spec gets its `{}` default, then the nested defaults.
        let mut empty = json!({});
        apply_defaults(&mut empty, &schema);
        assert_eq!(empty["spec"]["replicas"], json!(1));
        assert_eq!(empty["spec"]["sweep"], json!({"points": 5}));
    }

    #[test]
    fn type_errors_with_message_format() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {
                "replicas": {"type": "integer"},
                "ratio": {"type": "number"},
                "on": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}}
            }
        }));
        let errs = validate(
            &json!({"spec": {"replicas": "string", "ratio": 1, "on": true, "tags": ["a", 3]}}),
            None,
            &schema,
        );
        let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert!(msgs.contains(&"spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"".to_string()), "{msgs:?}");
        assert!(msgs.contains(&"spec.tags[1]: Invalid value: \"integer\": spec.tags[1] in body must be of type string: \"integer\"".to_string()), "{msgs:?}");
        assert_eq!(errs.len(), 2, "{msgs:?}");
        assert_eq!(errs[0].reason(), "FieldValueInvalid");
        let errs = validate(&json!({"spec": {"replicas": 1.5}}), None, &schema);
        assert_eq!(errs.len(), 1);
        let errs = validate(&json!({"spec": {"replicas": null}}), None, &schema);
        assert_eq!(
            errs[0].to_string(),
            "spec.replicas: Invalid value: \"null\": spec.replicas in body must be of type integer: \"null\""
        );
    }

    #[test]
    fn required_and_bounds() {
        let schema = spec_schema(json!({
            "type": "object",
            "required": ["model"],
            "properties": {
                "model": {"type": "string", "maxLength": 5, "minLength": 2, "pattern": "^[a-z]+$"},
                "replicas": {"type": "integer", "minimum": 0, "maximum": 10, "exclusiveMaximum": true},
                "points": {"type": "array", "maxItems": 2, "items": {"type": "integer"}}
            }
        }));
        let errs = validate(&json!({"spec": {}}), None, &schema);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].to_string(), "spec.model: Required value");
        assert_eq!(errs[0].reason(), "FieldValueRequired");
        let errs = validate(
            &json!({"spec": {"model": "ABCDEFG", "replicas": 10, "points": [1, 2, 3]}}),
            None,
            &schema,
        );
        let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert!(
            msgs.contains(&"spec.model: Too long: may not be more than 5 bytes".to_string()),
            "{msgs:?}"
        );
        assert!(
            msgs.contains(
                &"spec.model: Invalid value: \"ABCDEFG\": spec.model in body should match '^[a-z]+$'"
                    .to_string()
            ),
            "{msgs:?}"
        );
        assert!(
            msgs.contains(
                &"spec.replicas: Invalid value: 10: spec.replicas in body should be less than 10"
                    .to_string()
            ),
            "{msgs:?}"
        );
        assert!(
            msgs.contains(&"spec.points: Too many: 3: must have at most 2 items".to_string()),
            "{msgs:?}"
        );
        assert_eq!(errs.len(), 4, "{msgs:?}");
        // A missing required field is reported whatever the order of its siblings.
        assert!(validate(&json!({"spec": {"model": "ok"}}), None, &schema).is_empty());
    }

    #[test]
    fn enum_unsupported_value() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {"mode": {"type": "string", "enum": ["Propose", "Apply"]}}
        }));
        let errs = validate(&json!({"spec": {"mode": "X"}}), None, &schema);
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].to_string(),
            "spec.mode: Unsupported value: \"X\": supported values: \"Propose\", \"Apply\""
        );
        assert_eq!(errs[0].reason(), "FieldValueNotSupported");
        assert!(validate(&json!({"spec": {"mode": "Apply"}}), None, &schema).is_empty());
    }

    #[test]
    fn int_or_string() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {"port": {
                "x-kubernetes-int-or-string": true,
                "anyOf": [{"type": "integer"}, {"type": "string"}]
            }}
        }));
        assert!(validate(&json!({"spec": {"port": 8080}}), None, &schema).is_empty());
        assert!(validate(&json!({"spec": {"port": "http"}}), None, &schema).is_empty());
        let errs = validate(&json!({"spec": {"port": true}}), None, &schema);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "spec.port");
        assert!(errs[0].message.contains("integer or string"), "{errs:?}");
    }

    #[test]
    fn one_of_and_not() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer"}, "b": {"type": "integer"}
            },
            "oneOf": [{"required": ["a"]}, {"required": ["b"]}]
        }));
        assert!(validate(&json!({"spec": {"a": 1}}), None, &schema).is_empty());
        let errs = validate(&json!({"spec": {"a": 1, "b": 2}}), None, &schema);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.contains("oneOf"));
        assert_eq!(validate(&json!({"spec": {}}), None, &schema).len(), 1);
    }

    #[test]
    fn cel_rule_passing_and_failing_with_message() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {
                "min": {"type": "integer"},
                "max": {"type": "integer"},
                "ratio": {"type": "number"},
                "items": {"type": "array", "items": {"type": "string"}}
            },
            "x-kubernetes-validations": [
                {"rule": "self.min <= self.max", "message": "min must not exceed max"},
                {"rule": "!has(self.items) || self.items.all(i, i.size() < 5)"},
                {"rule": "!has(self.ratio) || self.ratio < 1.0", "messageExpression": "'ratio ' + string(self.ratio) + ' too big'"},
                {"rule": "self.min >= 0", "message": "min is negative", "fieldPath": ".min", "reason": "FieldValueForbidden"}
            ]
        }));
        assert!(
            validate(
                &json!({"spec": {"min": 1, "max": 2, "items": ["ab"], "ratio": 0}}),
                None,
                &schema
            )
            .is_empty()
        );
        let errs = validate(
            &json!({"spec": {"min": 3, "max": 2, "items": ["abcdef"], "ratio": 2}}),
            None,
            &schema,
        );
        let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            msgs,
            vec![
                "spec: Invalid value: \"object\": min must not exceed max".to_string(),
                "spec: Invalid value: \"object\": failed rule: !has(self.items) || self.items.all(i, i.size() < 5)".to_string(),
                "spec: Invalid value: \"object\": ratio 2 too big".to_string(),
            ]
        );
        let errs = validate(&json!({"spec": {"min": -1, "max": 2}}), None, &schema);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].to_string(), "spec.min: Forbidden: min is negative");
        // An evaluation error (no such key) is reported, not a panic.
        let errs = validate(&json!({"spec": {"max": 2}}), None, &schema);
        assert!(errs[0].message.contains("evaluating rule"), "{errs:?}");
        // A rule that does not compile.
        let bad = spec_schema(
            json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a ==="}]}),
        );
        let errs = validate(&json!({"spec": {}}), None, &bad);
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].message.starts_with("rule compile error"),
            "{errs:?}"
        );
    }

    #[test]
    fn transition_rule_immutability() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {
                "model": {"type": "string", "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "model is immutable"}
                ]},
                "size": {"type": "integer", "x-kubernetes-validations": [
                    {"rule": "!oldSelf.hasValue() || self >= oldSelf.value()", "message": "size may only grow", "optionalOldSelf": true}
                ]}
            }
        }));
        let old = json!({"spec": {"model": "a", "size": 5}});
        // Create: skipped (no oldSelf); optionalOldSelf rules run with an absent oldSelf.
        assert!(validate(&json!({"spec": {"model": "b", "size": 1}}), None, &schema).is_empty());
        // Update keeping the value: fine.
        assert!(
            validate(
                &json!({"spec": {"model": "a", "size": 6}}),
                Some(&old),
                &schema
            )
            .is_empty()
        );
        // Update changing it: fails.
        let errs = validate(
            &json!({"spec": {"model": "b", "size": 4}}),
            Some(&old),
            &schema,
        );
        let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            msgs,
            vec![
                "spec.model: Invalid value: \"string\": model is immutable".to_string(),
                "spec.size: Invalid value: \"integer\": size may only grow".to_string(),
            ]
        );
        // A field that did not exist before has no oldSelf: skipped.
        let errs = validate(
            &json!({"spec": {"model": "b"}}),
            Some(&json!({"spec": {}})),
            &schema,
        );
        assert!(errs.is_empty(), "{errs:?}");
    }

    #[test]
    fn list_type_map_duplicate_key_and_correlation() {
        let schema = spec_schema(json!({
            "type": "object",
            "properties": {
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "required": ["name"], "properties": {
                        "name": {"type": "string"},
                        "port": {"type": "integer", "x-kubernetes-validations": [
                            {"rule": "self == oldSelf", "message": "port is immutable"}
                        ]}
                    }}
                },
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
            }
        }));
        let errs = validate(
            &json!({"spec": {"ports": [{"name": "a", "port": 1}, {"name": "b", "port": 2}, {"name": "a", "port": 3}], "tags": ["x", "y", "x"]}}),
            None,
            &schema,
        );
        let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            msgs,
            vec![
                "spec.ports[2]: Duplicate value: map[string]interface {}{\"name\":\"a\"}"
                    .to_string(),
                "spec.tags[2]: Duplicate value: \"x\"".to_string(),
            ]
        );
        assert_eq!(errs[0].reason(), "FieldValueDuplicate");
        // Items are correlated with the old list by key, not by index.
        let old = json!({"spec": {"ports": [{"name": "b", "port": 2}, {"name": "a", "port": 1}]}});
        let ok = json!({"spec": {"ports": [{"name": "a", "port": 1}, {"name": "b", "port": 2}, {"name": "c", "port": 9}]}});
        assert!(validate(&ok, Some(&old), &schema).is_empty());
        let changed =
            json!({"spec": {"ports": [{"name": "a", "port": 7}, {"name": "b", "port": 2}]}});
        let errs = validate(&changed, Some(&old), &schema);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.ports[0].port");
    }

    #[test]
    fn root_rule_and_aggregate() {
        let schema = json!({
            "type": "object",
            "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('w')", "message": "bad name"}],
            "properties": {"spec": {"type": "object", "properties": {"ts": {"type": "string", "format": "date-time"}}}}
        });
        let errs = validate(
            &json!({"metadata": {"name": "x"}, "spec": {"ts": "nope"}}),
            None,
            &schema,
        );
        assert_eq!(
            aggregate_message(&errs),
            "[spec.ts: Invalid value: \"nope\": spec.ts in body must be of type date-time: \"nope\", <nil>: Invalid value: \"object\": bad name]"
        );
        assert!(
            validate(
                &json!({"metadata": {"name": "w"}, "spec": {"ts": "2024-01-02T03:04:05Z"}}),
                None,
                &schema
            )
            .is_empty()
        );
    }
}
