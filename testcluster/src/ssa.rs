//! Server-side apply and `metadata.managedFields` bookkeeping, following apimachinery's
//! structured-merge-diff: field sets as tries of `f:`/`k:`/`v:` path elements, conflicts
//! against other managers' sets, merge by list semantics, and removal of fields an applier
//! stopped applying.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::patch::{BuiltinList, builtin_list};

/// How a list merges under server-side apply (`x-kubernetes-list-type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole and owned as one field.
    Atomic,
    /// A set of scalars: items are owned one by one (`v:<value>`).
    Set,
    /// Objects identified by these key fields (`k:{...}`), merged item by item.
    Map(Vec<String>),
}

/// Tells SSA how lists at a path merge. Path = field names from the object root, list items
/// contributing nothing.
pub trait ListSemantics {
    /// The list type of the list at `path`.
    fn list_type(&self, path: &[&str]) -> ListType;
    /// The default of key field `field` for items of the map-list at `path` that omit it
    /// (structured-merge-diff keys such items by the schema default, e.g. `protocol: TCP`).
    fn key_default(&self, _path: &[&str], _field: &str) -> Option<Value> {
        None
    }
}

/// Built-ins: map-lists keyed like [`crate::patch::BuiltinMergeKeys`] (containers by name, env
/// by name, ports by containerPort+protocol, Service ports by port+protocol, conditions by
/// type, ownerReferences by uid, volumes by name, volumeMounts by mountPath),
/// metadata.finalizers a set, everything else atomic.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuiltinLists;

impl ListSemantics for BuiltinLists {
    fn list_type(&self, path: &[&str]) -> ListType {
        match builtin_list(path) {
            Some(BuiltinList::Keyed { map_keys, .. }) => {
                ListType::Map(map_keys.iter().map(|k| k.to_string()).collect())
            }
            Some(BuiltinList::Set) => ListType::Set,
            None => ListType::Atomic,
        }
    }

    fn key_default(&self, path: &[&str], field: &str) -> Option<Value> {
        match builtin_list(path) {
            Some(BuiltinList::Keyed { map_keys, .. })
                if field == "protocol" && map_keys.contains(&"protocol") =>
            {
                Some(Value::from("TCP"))
            }
            _ => None,
        }
    }
}

/// CRDs: reads `x-kubernetes-list-type` (atomic default, set, map) and
/// `x-kubernetes-list-map-keys` from the CRD's openAPIV3Schema (walking properties / items /
/// additionalProperties along the path). `metadata.*` falls back to [`BuiltinLists`].
#[derive(Debug, Clone, Copy)]
pub struct SchemaLists<'a> {
    /// The version's `schema.openAPIV3Schema`.
    pub schema: &'a Value,
}

impl ListSemantics for SchemaLists<'_> {
    fn list_type(&self, path: &[&str]) -> ListType {
        if path.first() == Some(&"metadata") {
            return BuiltinLists.list_type(path);
        }
        let Some(node) = schema_at(self.schema, path) else {
            return ListType::Atomic;
        };
        match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map(
                node.get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|keys| {
                        keys.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            _ => ListType::Atomic,
        }
    }

    fn key_default(&self, path: &[&str], field: &str) -> Option<Value> {
        if path.first() == Some(&"metadata") {
            return BuiltinLists.key_default(path, field);
        }
        schema_at(self.schema, path)?
            .get("items")?
            .get("properties")?
            .get(field)?
            .get("default")
            .cloned()
    }
}

/// The schema node of the field at `path`, stepping through array `items` (list items add no
/// path element) and map `additionalProperties`.
fn schema_at<'s>(schema: &'s Value, path: &[&str]) -> Option<&'s Value> {
    let mut node = schema;
    for name in path {
        node = through_items(node);
        node = node
            .get("properties")
            .and_then(|p| p.get(*name))
            .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))?;
    }
    Some(node)
}

fn through_items(mut node: &Value) -> &Value {
    loop {
        let is_array = match node.get("type").and_then(Value::as_str) {
            Some(t) => t == "array",
            None => node.get("properties").is_none(),
        };
        match node.get("items").filter(|i| i.is_object()) {
            Some(items) if is_array => node = items,
            _ => return node,
        }
    }
}

/// One server-side apply request's parameters.
#[derive(Debug, Clone, Copy)]
pub struct ApplyRequest<'a> {
    /// The field manager (`fieldManager` query parameter).
    pub manager: &'a str,
    /// `force=true`: take conflicting fields from their owners instead of failing.
    pub force: bool,
    /// The subresource applied to (`Some("status")`), None for the main resource.
    pub subresource: Option<&'a str>,
    /// The `apiVersion` the request was made in, recorded in the entry.
    pub api_version: &'a str,
    /// The time to record, RFC 3339 (`2026-01-01T00:00:00Z`).
    pub now: &'a str,
}

/// A field the applier would change that another manager owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The owning manager.
    pub manager: String,
    /// The field, like `.spec.replicas` or `.spec.containers[name="c"].image`.
    pub field: String,
    /// The owner's operation, `Apply` or `Update`.
    pub operation: String,
    /// The owner entry's apiVersion.
    pub api_version: String,
    /// The owner entry's time.
    pub time: String,
    /// The owner entry's subresource, if any.
    pub subresource: Option<String>,
}

impl Conflict {
    /// `conflict with "mgr"` (with ` using <apiVersion>` for an Update manager), the message
    /// of the `FieldManagerConflict` cause the server puts in `details.causes[]`.
    pub fn cause_message(&self) -> String {
        format!("conflict with {}", self.owner())
    }

    /// How the API server prints the owning manager.
    fn owner(&self) -> String {
        let mut out = quote(&self.manager);
        if let Some(sub) = &self.subresource {
            let _ = write!(out, " with subresource {}", quote(sub));
        }
        if self.operation == "Update" {
            let _ = write!(out, " using {}", self.api_version);
        }
        out
    }

    fn owner_key(&self) -> (&str, &str, Option<&str>, &str) {
        let version = if self.operation == "Update" {
            self.api_version.as_str()
        } else {
            ""
        };
        (
            &self.manager,
            &self.operation,
            self.subresource.as_deref(),
            version,
        )
    }
}

/// Why an apply was refused.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Fields owned by other managers would change (HTTP 409, reason Conflict).
    #[error("{}", conflicts_message(.0))]
    Conflicts(Vec<Conflict>),
    /// The apply body is malformed (HTTP 400/422).
    #[error("{0}")]
    Invalid(String),
}

/// The API server's conflict message: one line for one conflict, else grouped by manager.
fn conflicts_message(conflicts: &[Conflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            only.owner(),
            only.field
        );
    }
    let mut lines = Vec::new();
    let mut last: Option<(&str, &str, Option<&str>, &str)> = None;
    for c in conflicts {
        if last != Some(c.owner_key()) {
            lines.push(format!("conflicts with {}:", c.owner()));
            last = Some(c.owner_key());
        }
        lines.push(format!("- {}", c.field));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Go's `%q`, near enough: a JSON string literal.
fn quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

// ---------------------------------------------------------------------------------------------
// Field paths and sets
// ---------------------------------------------------------------------------------------------

/// One step of a field path. The derived order (fields, keys, values, indices) is the order
/// structured-merge-diff sorts sets in.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Pe {
    /// `f:<name>`: a field of a map.
    Field(String),
    /// `k:{...}`: a map-list item by its key fields (name, canonical JSON value), sorted.
    Key(Vec<(String, String)>),
    /// `v:<json>`: a set item by its canonical JSON value.
    Value(String),
    /// `i:<n>`: an item by position (only read back from entries written elsewhere).
    Index(usize),
}

type Path = Vec<Pe>;
type FieldSet = BTreeSet<Path>;

impl Pe {
    /// The fieldsV1 trie key.
    fn encode(&self) -> String {
        match self {
            Pe::Field(name) => format!("f:{name}"),
            Pe::Key(fields) => {
                let body: Vec<String> = fields
                    .iter()
                    .map(|(name, value)| format!("{}:{value}", quote(name)))
                    .collect();
                format!("k:{{{}}}", body.join(","))
            }
            Pe::Value(value) => format!("v:{value}"),
            Pe::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(key: &str) -> Option<Pe> {
        if let Some(name) = key.strip_prefix("f:") {
            return Some(Pe::Field(name.to_string()));
        }
        if let Some(json) = key.strip_prefix("k:") {
            let Value::Object(map) = serde_json::from_str::<Value>(json).ok()? else {
                return None;
            };
            let mut fields: Vec<(String, String)> =
                map.iter().map(|(k, v)| (k.clone(), canon(v))).collect();
            fields.sort();
            return Some(Pe::Key(fields));
        }
        if let Some(json) = key.strip_prefix("v:") {
            return Some(Pe::Value(canon(&serde_json::from_str(json).ok()?)));
        }
        key.strip_prefix("i:")?.parse().ok().map(Pe::Index)
    }

    /// structured-merge-diff's `PathElement.String()`.
    fn display(&self) -> String {
        match self {
            Pe::Field(name) => format!(".{name}"),
            Pe::Key(fields) => {
                let body: Vec<String> = fields.iter().map(|(n, v)| format!("{n}={v}")).collect();
                format!("[{}]", body.join(","))
            }
            Pe::Value(value) => format!("[={value}]"),
            Pe::Index(i) => format!("[{i}]"),
        }
    }
}

fn path_string(path: &[Pe]) -> String {
    path.iter().map(Pe::display).collect()
}

/// Compact JSON with object keys sorted, the form keys and set values are compared in.
fn canon(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let body: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", quote(k), canon(&map[k])))
                .collect();
            format!("{{{}}}", body.join(","))
        }
        Value::Array(items) => {
            let body: Vec<String> = items.iter().map(canon).collect();
            format!("[{}]", body.join(","))
        }
        other => other.to_string(),
    }
}

/// A fieldsV1 trie → set of paths.
fn decode_fields(node: &Value, prefix: &mut Path, out: &mut FieldSet) {
    let Value::Object(map) = node else {
        return;
    };
    if map.is_empty() && !prefix.is_empty() {
        out.insert(prefix.clone());
    }
    for (key, child) in map {
        if key == "." {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
            continue;
        }
        // An element this code cannot read is skipped rather than failing the whole write.
        let Some(pe) = Pe::decode(key) else {
            continue;
        };
        prefix.push(pe);
        decode_fields(child, prefix, out);
        prefix.pop();
    }
}

/// A set of paths → fieldsV1 trie (`".": {}` marks an owned node that also has children).
fn encode_fields(set: &FieldSet) -> Value {
    #[derive(Default)]
    struct Trie {
        member: bool,
        children: BTreeMap<String, Trie>,
    }
    fn to_value(trie: &Trie) -> Value {
        let mut map = Map::new();
        if trie.member && !trie.children.is_empty() {
            map.insert(".".into(), Value::Object(Map::new()));
        }
        for (key, child) in &trie.children {
            map.insert(key.clone(), to_value(child));
        }
        Value::Object(map)
    }
    let mut root = Trie::default();
    for path in set {
        let mut node = &mut root;
        for pe in path {
            node = node.children.entry(pe.encode()).or_default();
        }
        node.member = true;
    }
    to_value(&root)
}

// ---------------------------------------------------------------------------------------------
// Objects → field sets
// ---------------------------------------------------------------------------------------------

/// Metadata fields the server sets, which no manager owns.
const UNOWNED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Metadata collections dropped when pruning leaves them empty (they are `omitempty`).
const OMITEMPTY_METADATA: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];

/// Owned paths of an object: leaves with their values, list items (set and map-list) with None.
type Flat<'a> = BTreeMap<Path, Option<&'a Value>>;

/// The list type in effect (a map-list without keys cannot be keyed, so it is atomic).
fn list_type_at(lists: &dyn ListSemantics, names: &[String]) -> ListType {
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    match lists.list_type(&names) {
        ListType::Map(keys) if keys.is_empty() => ListType::Atomic,
        other => other,
    }
}

/// The path element of a list item, and the key fields it lacks (map-lists only).
fn item_pe(
    item: &Value,
    list_type: &ListType,
    names: &[String],
    lists: &dyn ListSemantics,
) -> (Pe, Vec<String>) {
    let ListType::Map(keys) = list_type else {
        return (Pe::Value(canon(item)), Vec::new());
    };
    let Value::Object(map) = item else {
        return (
            Pe::Value(canon(item)),
            vec!["(the item is not an object)".into()],
        );
    };
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut fields = Vec::with_capacity(keys.len());
    let mut missing = Vec::new();
    for key in keys {
        match map.get(key).filter(|v| !v.is_null()) {
            Some(v) => fields.push((key.clone(), canon(v))),
            None => match lists.key_default(&names, key) {
                Some(v) => fields.push((key.clone(), canon(&v))),
                None => missing.push(key.clone()),
            },
        }
    }
    fields.sort();
    (Pe::Key(fields), missing)
}

struct Walker<'l, 'a> {
    lists: &'l dyn ListSemantics,
    /// Field names from the root (list items add none).
    names: Vec<String>,
    path: Path,
    out: Flat<'a>,
    /// Reject items without keys and duplicate items (for apply bodies).
    strict: bool,
    errors: Vec<String>,
}

/// The owned paths of `obj`, skipping apiVersion, kind and server-set metadata. In strict mode
/// the second value lists what makes `obj` unfit as an apply body.
fn flatten<'a>(obj: &'a Value, lists: &dyn ListSemantics, strict: bool) -> (Flat<'a>, Vec<String>) {
    let mut w = Walker {
        lists,
        names: Vec::new(),
        path: Vec::new(),
        out: BTreeMap::new(),
        strict,
        errors: Vec::new(),
    };
    if let Value::Object(map) = obj {
        for (key, value) in map {
            match (key.as_str(), value) {
                ("apiVersion" | "kind", _) => {}
                ("metadata", Value::Object(meta)) => {
                    w.enter(key);
                    for (mkey, mvalue) in meta {
                        if !UNOWNED_METADATA.contains(&mkey.as_str()) {
                            w.enter(mkey);
                            w.visit(mvalue);
                            w.leave();
                        }
                    }
                    w.leave();
                }
                _ => {
                    w.enter(key);
                    w.visit(value);
                    w.leave();
                }
            }
        }
    }
    (w.out, w.errors)
}

impl<'a> Walker<'_, 'a> {
    fn enter(&mut self, name: &str) {
        self.names.push(name.to_string());
        self.path.push(Pe::Field(name.to_string()));
    }

    fn leave(&mut self) {
        self.names.pop();
        self.path.pop();
    }

    fn visit(&mut self, value: &'a Value) {
        match value {
            // A map is owned through its fields; an empty map contributes nothing.
            Value::Object(map) => {
                for (key, child) in map {
                    self.enter(key);
                    self.visit(child);
                    self.leave();
                }
            }
            Value::Array(items) => self.visit_list(value, items),
            _ => {
                self.out.insert(self.path.clone(), Some(value));
            }
        }
    }

    fn visit_list(&mut self, whole: &'a Value, items: &'a [Value]) {
        let list_type = list_type_at(self.lists, &self.names);
        if list_type == ListType::Atomic {
            self.out.insert(self.path.clone(), Some(whole));
            return;
        }
        for (i, item) in items.iter().enumerate() {
            let (pe, missing) = item_pe(item, &list_type, &self.names, self.lists);
            if self.strict && !missing.is_empty() {
                self.errors.push(format!(
                    "{}: element {i}: associative list with keys has an element that omits key \
                     field {} (and doesn't have default value)",
                    path_string(&self.path),
                    quote(&missing.join(", "))
                ));
                continue;
            }
            self.path.push(pe);
            if self.out.contains_key(&self.path) {
                if self.strict {
                    let (item_pe, parent) = self.path.split_last().map_or_else(
                        || (String::new(), String::new()),
                        |(last, rest)| (last.display(), path_string(rest)),
                    );
                    self.errors
                        .push(format!("{parent}: duplicate entries for key {item_pe}"));
                }
                self.path.pop();
                continue;
            }
            self.out.insert(self.path.clone(), None);
            if let (ListType::Map(_), Value::Object(map)) = (&list_type, item) {
                for (key, child) in map {
                    self.names.push(key.clone());
                    self.path.push(Pe::Field(key.clone()));
                    self.visit(child);
                    self.path.pop();
                    self.names.pop();
                }
            }
            self.path.pop();
        }
    }
}

/// Equality as structured-merge-diff compares values: an int equals the same float.
fn value_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if x.is_f64() || y.is_f64() {
                x.as_f64() == y.as_f64()
            } else {
                x == y
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| value_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| value_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Paths added or modified, and paths removed, between two objects.
struct Comparison {
    changed: FieldSet,
    removed: FieldSet,
}

fn compare(old: &Flat, new: &Flat) -> Comparison {
    let mut changed = FieldSet::new();
    for (path, value) in new {
        let differs = match old.get(path) {
            None => true,
            Some(Some(a)) => !value.is_some_and(|b| value_eq(a, b)),
            Some(None) => value.is_some(),
        };
        if differs {
            changed.insert(path.clone());
        }
    }
    let removed = old
        .keys()
        .filter(|p| !new.contains_key(*p))
        .cloned()
        .collect();
    Comparison { changed, removed }
}

// ---------------------------------------------------------------------------------------------
// managedFields entries
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: Option<String>,
    subresource: Option<String>,
    set: FieldSet,
}

impl Entry {
    fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }

    fn decode(value: &Value) -> Option<Entry> {
        let map = value.as_object()?;
        let text = |key: &str| {
            map.get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let mut set = FieldSet::new();
        if let Some(fields) = map.get("fieldsV1") {
            decode_fields(fields, &mut Vec::new(), &mut set);
        }
        Some(Entry {
            manager: text("manager").unwrap_or_default(),
            operation: text("operation").unwrap_or_default(),
            api_version: text("apiVersion").unwrap_or_default(),
            time: text("time"),
            subresource: text("subresource"),
            set,
        })
    }

    fn encode(&self) -> Value {
        let mut map = Map::new();
        map.insert("manager".into(), Value::from(self.manager.as_str()));
        map.insert("operation".into(), Value::from(self.operation.as_str()));
        map.insert("apiVersion".into(), Value::from(self.api_version.as_str()));
        if let Some(time) = &self.time {
            map.insert("time".into(), Value::from(time.as_str()));
        }
        map.insert("fieldsType".into(), Value::from("FieldsV1"));
        map.insert("fieldsV1".into(), encode_fields(&self.set));
        if let Some(sub) = &self.subresource {
            map.insert("subresource".into(), Value::from(sub.as_str()));
        }
        Value::Object(map)
    }
}

fn decode_entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|entries| entries.iter().filter_map(Entry::decode).collect())
        .unwrap_or_default()
}

/// `[{}]`: the documented way for a non-apply write to clear managedFields.
fn is_reset(obj: &Value) -> bool {
    match obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    {
        Some(entries) => entries.len() == 1 && entries[0].as_object().is_some_and(|m| m.is_empty()),
        None => false,
    }
}

/// Writes entries into `obj`: empty ones dropped, sorted as the API server sorts them
/// (operation, time, manager, apiVersion, subresource), no key at all when none remain.
fn write_entries(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.set.is_empty());
    entries.sort_by(|a, b| {
        (
            &a.operation,
            a.time.as_deref().unwrap_or(""),
            &a.manager,
            &a.api_version,
            a.subresource.as_deref().unwrap_or(""),
        )
            .cmp(&(
                &b.operation,
                b.time.as_deref().unwrap_or(""),
                &b.manager,
                &b.api_version,
                b.subresource.as_deref().unwrap_or(""),
            ))
    });
    let Value::Object(root) = obj else {
        return;
    };
    if entries.is_empty() {
        if let Some(Value::Object(meta)) = root.get_mut("metadata") {
            meta.remove("managedFields");
        }
        return;
    }
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(meta) = meta {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::encode).collect()),
        );
    }
}

fn without_managed_fields(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
        meta.remove("managedFields");
    }
    obj
}

// ---------------------------------------------------------------------------------------------
// Merge and prune
// ---------------------------------------------------------------------------------------------

struct Merger<'l> {
    lists: &'l dyn ListSemantics,
    names: Vec<String>,
}

impl Merger<'_> {
    /// `live` merged with `applied`: maps recursively, map-lists by key, sets as unions,
    /// atomic lists and scalars replaced.
    fn merge(&mut self, live: &Value, applied: &Value) -> Value {
        match (live, applied) {
            (Value::Object(l), Value::Object(a)) => {
                let mut out = l.clone();
                for (key, value) in a {
                    self.names.push(key.clone());
                    let merged = match l.get(key) {
                        Some(lv) => self.merge(lv, value),
                        None => value.clone(),
                    };
                    self.names.pop();
                    out.insert(key.clone(), merged);
                }
                Value::Object(out)
            }
            (Value::Array(l), Value::Array(a)) => {
                let list_type = list_type_at(self.lists, &self.names);
                if list_type == ListType::Atomic {
                    return applied.clone();
                }
                let pe = |v: &Value| item_pe(v, &list_type, &self.names, self.lists).0;
                let lpes: Vec<Pe> = l.iter().map(pe).collect();
                let rpes: Vec<Pe> = a.iter().map(pe).collect();
                let is_map = matches!(list_type, ListType::Map(_));
                Value::Array(merge_list(l, a, &lpes, &rpes, &mut |lv, rv| match lv {
                    Some(lv) if is_map => self.merge(lv, rv),
                    _ => rv.clone(),
                }))
            }
            _ => applied.clone(),
        }
    }
}

/// structured-merge-diff's list merge order: live-only items keep their place, applied items
/// follow the applied order, items in both are merged where the applied order reaches them.
fn merge_list(
    lhs: &[Value],
    rhs: &[Value],
    lpes: &[Pe],
    rpes: &[Pe],
    merge_item: &mut dyn FnMut(Option<&Value>, &Value) -> Value,
) -> Vec<Value> {
    let mut lidx: HashMap<&Pe, usize> = HashMap::new();
    for (i, pe) in lpes.iter().enumerate() {
        lidx.entry(pe).or_insert(i);
    }
    let mut ridx: HashMap<&Pe, usize> = HashMap::new();
    for (i, pe) in rpes.iter().enumerate() {
        ridx.entry(pe).or_insert(i);
    }
    let mut shared = rpes.iter().filter(|pe| lidx.contains_key(pe));
    let mut next_shared = shared.next();
    let mut merged_rhs: HashSet<&Pe> = HashSet::new();
    let mut out = Vec::with_capacity(lhs.len() + rhs.len());
    let (mut li, mut ri) = (0, 0);
    while li < lhs.len() || ri < rhs.len() {
        if li < lhs.len() && ri < rhs.len() {
            let pe = &lpes[li];
            if *pe == rpes[ri] {
                merged_rhs.insert(pe);
                out.push(merge_item(Some(&lhs[lidx[pe]]), &rhs[ridx[pe]]));
                li += 1;
                ri += 1;
                next_shared = shared.next();
                continue;
            }
            if ridx.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < lhs.len() {
            let pe = &lpes[li];
            if !ridx.contains_key(pe) {
                out.push(lhs[li].clone());
                li += 1;
                continue;
            }
            if merged_rhs.contains(pe) {
                li += 1;
                continue;
            }
        }
        if ri < rhs.len() {
            let pe = &rpes[ri];
            merged_rhs.insert(pe);
            out.push(merge_item(lidx.get(pe).map(|&i| &lhs[i]), &rhs[ridx[pe]]));
            ri += 1;
            if next_shared == Some(pe) {
                next_shared = shared.next();
            }
        }
    }
    out
}

/// Removes `path` from `obj`, if it is there.
fn remove_path(obj: &mut Value, path: &[Pe], lists: &dyn ListSemantics) {
    let mut names: Vec<String> = Vec::new();
    let mut cur = obj;
    for (i, pe) in path.iter().enumerate() {
        let last = i + 1 == path.len();
        let next = match (cur, pe) {
            (Value::Object(map), Pe::Field(name)) => {
                if last {
                    map.remove(name);
                    return;
                }
                names.push(name.clone());
                match map.get_mut(name) {
                    Some(v) => v,
                    None => return,
                }
            }
            (Value::Array(items), Pe::Key(_) | Pe::Value(_) | Pe::Index(_)) => {
                let pos = match pe {
                    Pe::Index(i) => Some(*i).filter(|i| *i < items.len()),
                    _ => {
                        let list_type = list_type_at(lists, &names);
                        items
                            .iter()
                            .position(|item| item_pe(item, &list_type, &names, lists).0 == *pe)
                    }
                };
                let Some(pos) = pos else {
                    return;
                };
                if last {
                    items.remove(pos);
                    return;
                }
                &mut items[pos]
            }
            _ => return,
        };
        cur = next;
    }
}

/// Removes the fields in `remove` from `merged`, except where a field in `keep` lies at or
/// under them, and except the key fields of a list-map item (they go with the item).
fn prune(merged: &mut Value, remove: &[Path], keep: &FieldSet, lists: &dyn ListSemantics) {
    let nonempty_before: Vec<&str> = OMITEMPTY_METADATA
        .iter()
        .copied()
        .filter(|name| {
            merged
                .get("metadata")
                .and_then(|m| m.get(*name))
                .is_some_and(|v| !is_empty_container(v))
        })
        .collect();
    for path in remove {
        let kept_below = keep
            .range::<Path, _>(path..)
            .next()
            .is_some_and(|k| k.starts_with(path));
        if kept_below {
            continue;
        }
        if let [.., Pe::Key(fields), Pe::Field(name)] = path.as_slice()
            && fields.iter().any(|(k, _)| k == name)
        {
            continue;
        }
        remove_path(merged, path, lists);
    }
    if let Some(Value::Object(meta)) = merged.get_mut("metadata") {
        for name in nonempty_before {
            if meta.get(name).is_some_and(is_empty_container) {
                meta.remove(name);
            }
        }
    }
}

fn is_empty_container(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// Drops the keys the apply body set to null (they were merged in as null so that changing a
/// value to null counts as a change; the stored object has no nulls for them).
fn strip_applied_nulls(merged: &mut Value, applied: &Value) {
    let (Value::Object(out), Value::Object(applied)) = (merged, applied) else {
        return;
    };
    for (key, value) in applied {
        if value.is_null() {
            if out.get(key).is_some_and(Value::is_null) {
                out.remove(key);
            }
        } else if let Some(child) = out.get_mut(key) {
            strip_applied_nulls(child, value);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Apply and update
// ---------------------------------------------------------------------------------------------

/// Server-side apply: `live` is the stored object (None when creating), `applied` the request
/// body (already parsed). Returns the new object including updated `metadata.managedFields`.
///
/// The applier's field set is every leaf, list-map item and set item of `applied` (apiVersion,
/// kind and server-set metadata excepted). A field in it whose value would change and that
/// another manager owns is a conflict unless `req.force`, which takes the field from its
/// owners; applying a field's current value makes the applier a co-owner. Fields the applier's
/// previous Apply entry held that this body omits and no one else owns are removed. A live
/// object without any managedFields has its fields attributed to `before-first-apply`
/// (operation Update), as the API server does.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    req: &ApplyRequest,
    lists: &dyn ListSemantics,
) -> Result<Value, ApplyError> {
    if !applied.is_object() {
        return Err(ApplyError::Invalid(
            "the apply body must be a JSON object".into(),
        ));
    }
    if applied
        .pointer("/metadata/managedFields")
        .is_some_and(|mf| !(mf.is_null() || mf.as_array().is_some_and(Vec::is_empty)))
    {
        return Err(ApplyError::Invalid(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let empty = Value::Object(Map::new());
    let live_obj = live.unwrap_or(&empty);
    let live_plain = without_managed_fields(live_obj);
    let applied_plain = without_managed_fields(applied);

    let (applied_flat, errors) = flatten(&applied_plain, lists, true);
    if !errors.is_empty() {
        return Err(ApplyError::Invalid(errors.join("; ")));
    }
    let applied_set: FieldSet = applied_flat.into_keys().collect();
    let (live_flat, _) = flatten(&live_plain, lists, false);

    let mut entries = decode_entries(live_obj);
    if live.is_some() && entries.is_empty() && !live_flat.is_empty() {
        entries.push(Entry {
            manager: "before-first-apply".into(),
            operation: "Update".into(),
            api_version: req.api_version.into(),
            time: Some(req.now.into()),
            subresource: None,
            set: live_flat.keys().cloned().collect(),
        });
    }
    let mine = entries
        .iter()
        .position(|e| e.is(req.manager, "Apply", req.subresource));

    let mut merged = Merger {
        lists,
        names: Vec::new(),
    }
    .merge(&live_plain, &applied_plain);

    // Fields this applier stopped applying go, unless someone (this body included) owns them.
    let mut keep = applied_set.clone();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) != mine {
            keep.extend(e.set.iter().cloned());
        }
    }
    if let Some(i) = mine {
        let remove: Vec<Path> = entries[i].set.difference(&keep).cloned().collect();
        prune(&mut merged, &remove, &keep, lists);
    }

    let cmp = {
        let (merged_flat, _) = flatten(&merged, lists, false);
        compare(&live_flat, &merged_flat)
    };

    let mut conflicts = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) == mine {
            continue;
        }
        for path in e.set.intersection(&cmp.changed) {
            conflicts.push(Conflict {
                manager: e.manager.clone(),
                field: path_string(path),
                operation: e.operation.clone(),
                api_version: e.api_version.clone(),
                time: e.time.clone().unwrap_or_default(),
                subresource: e.subresource.clone(),
            });
        }
    }
    if !conflicts.is_empty() && !req.force {
        conflicts.sort_by(|a, b| a.owner_key().cmp(&b.owner_key()));
        return Err(ApplyError::Conflicts(conflicts));
    }
    for (i, e) in entries.iter_mut().enumerate() {
        if Some(i) != mine {
            e.set
                .retain(|p| !cmp.changed.contains(p) && !cmp.removed.contains(p));
        }
    }

    strip_applied_nulls(&mut merged, &applied_plain);
    let object_changed = live.is_none() || !value_eq(&live_plain, &merged);
    match mine {
        Some(i) => {
            let e = &mut entries[i];
            if object_changed || e.set != applied_set {
                e.time = Some(req.now.into());
            }
            e.set = applied_set;
            e.api_version = req.api_version.into();
        }
        None => entries.push(Entry {
            manager: req.manager.into(),
            operation: "Apply".into(),
            api_version: req.api_version.into(),
            time: Some(req.now.into()),
            subresource: req.subresource.map(str::to_string),
            set: applied_set,
        }),
    }
    write_entries(&mut merged, entries);
    Ok(merged)
}

/// For non-apply writes (create/update/patch by `manager`, operation "Update"): every field
/// whose value changed between `old` (None on create: all fields of `new`) and `new` becomes
/// owned by `manager`'s Update entry and is removed from other managers' sets; fields that
/// disappeared are removed from all sets. Returns `new` with the updated managedFields; the
/// entry's time (and apiVersion) moves to `now` only when the write changed a field.
///
/// As on the API server, managedFields sent in `new` replace the stored ones (a main-resource
/// write only), `[{}]` clears them, and an empty or absent list keeps the stored ones.
pub fn record_update(
    old: Option<&Value>,
    new: &Value,
    manager: &str,
    subresource: Option<&str>,
    api_version: &str,
    now: &str,
    lists: &dyn ListSemantics,
) -> Value {
    let empty = Value::Object(Map::new());
    let old_obj = old.unwrap_or(&empty);
    let mut entries = if subresource.is_some() {
        decode_entries(old_obj)
    } else if is_reset(new) {
        Vec::new()
    } else {
        let sent = decode_entries(new);
        if sent.is_empty() {
            decode_entries(old_obj)
        } else {
            sent
        }
    };
    let old_plain = without_managed_fields(old_obj);
    let new_plain = without_managed_fields(new);
    let cmp = {
        let (old_flat, _) = flatten(&old_plain, lists, false);
        let (new_flat, _) = flatten(&new_plain, lists, false);
        compare(&old_flat, &new_flat)
    };
    let mine = entries
        .iter()
        .position(|e| e.is(manager, "Update", subresource));
    for (i, e) in entries.iter_mut().enumerate() {
        if Some(i) == mine {
            e.set.retain(|p| !cmp.removed.contains(p));
        } else {
            e.set
                .retain(|p| !cmp.changed.contains(p) && !cmp.removed.contains(p));
        }
    }
    if !cmp.changed.is_empty() {
        match mine {
            Some(i) => {
                let e = &mut entries[i];
                e.set.extend(cmp.changed);
                e.time = Some(now.into());
                e.api_version = api_version.into();
            }
            None => entries.push(Entry {
                manager: manager.into(),
                operation: "Update".into(),
                api_version: api_version.into(),
                time: Some(now.into()),
                subresource: subresource.map(str::to_string),
                set: cmp.changed,
            }),
        }
    }
    let mut out = new.clone();
    write_entries(&mut out, entries);
    out
}

/// True when `a` and `b` are equal apart from managedFields[].time — the API server's rule
/// that a write changing nothing but timestamps is a no-op.
pub fn equal_ignoring_managed_times(a: &Value, b: &Value) -> bool {
    fn strip(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(Value::Array(entries)) = v.pointer_mut("/metadata/managedFields") {
            for entry in entries {
                if let Value::Object(map) = entry {
                    map.remove("time");
                }
            }
        }
        v
    }
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T1: &str = "2026-01-01T00:00:00Z";
    const T2: &str = "2026-01-01T00:01:00Z";
    const T3: &str = "2026-01-01T00:02:00Z";

    fn req<'a>(manager: &'a str, force: bool, now: &'a str) -> ApplyRequest<'a> {
        ApplyRequest {
            manager,
            force,
            subresource: None,
            api_version: "apps/v1",
            now,
        }
    }

    fn deploy(spec: Value) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ns"},
            "spec": spec
        })
    }

    fn entry<'v>(obj: &'v Value, manager: &str) -> &'v Value {
        obj["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["manager"] == manager)
            .unwrap_or_else(|| panic!("no entry for {manager} in {obj}"))
    }

    fn owns(obj: &Value, manager: &str, pointer: &str) -> bool {
        obj["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["manager"] == manager)
            .any(|e| e["fieldsV1"].pointer(pointer).is_some())
    }

    fn conflicts(err: ApplyError) -> Vec<Conflict> {
        match err {
            ApplyError::Conflicts(c) => c,
            other => panic!("expected conflicts, got {other}"),
        }
    }

    #[test]
    fn create_by_apply_records_entry() {
        let body = deploy(json!({
            "replicas": 3,
            "template": {"spec": {"containers": [{"name": "app", "image": "app:1"}]}}
        }));
        let out = apply(None, &body, &req("m", false, T1), &BuiltinLists).unwrap();
        assert_eq!(out["spec"], body["spec"]);
        assert_eq!(
            out["metadata"]["managedFields"],
            json!([{
                "manager": "m",
                "operation": "Apply",
                "apiVersion": "apps/v1",
                "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {
                    "f:replicas": {},
                    "f:template": {"f:spec": {"f:containers": {
                        "k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}
                    }}}
                }}
            }])
        );
    }

    #[test]
    fn reapply_identical_body_is_a_no_op() {
        let body = deploy(json!({"replicas": 3}));
        let first = apply(None, &body, &req("m", false, T1), &BuiltinLists).unwrap();
        let second = apply(Some(&first), &body, &req("m", false, T2), &BuiltinLists).unwrap();
        assert!(equal_ignoring_managed_times(&first, &second));
        assert_eq!(entry(&second, "m")["time"], T1);
        assert_eq!(first, second);
        // A changed value moves the time.
        let third = apply(
            Some(&second),
            &deploy(json!({"replicas": 4})),
            &req("m", false, T3),
            &BuiltinLists,
        )
        .unwrap();
        assert_eq!(entry(&third, "m")["time"], T3);
        assert!(!equal_ignoring_managed_times(&second, &third));
    }

    #[test]
    fn two_managers_conflict_with_field_path() {
        let live = apply(
            None,
            &deploy(json!({
                "replicas": 3,
                "template": {"spec": {"containers": [{"name": "app", "image": "app:1"}]}}
            })),
            &req("a", false, T1),
            &BuiltinLists,
        )
        .unwrap();
        let err = apply(
            Some(&live),
            &deploy(json!({"replicas": 5})),
            &req("b", false, T2),
            &BuiltinLists,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"a\": .spec.replicas"
        );
        let c = conflicts(err);
        assert_eq!(c[0].field, ".spec.replicas");
        assert_eq!(c[0].manager, "a");
        assert_eq!(c[0].operation, "Apply");
        assert_eq!(c[0].time, T1);
        assert_eq!(c[0].cause_message(), "conflict with \"a\"");

        let err = apply(
            Some(&live),
            &deploy(json!({
                "replicas": 5,
                "template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}
            })),
            &req("b", false, T2),
            &BuiltinLists,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.replicas\n\
             - .spec.template.spec.containers[name=\"app\"].image"
        );
    }

    #[test]
    fn same_value_makes_co_owner_and_drop_keeps_co_owned_field() {
        let live = apply(
            None,
            &deploy(json!({"replicas": 3, "paused": false})),
            &req("a", false, T1),
            &BuiltinLists,
        )
        .unwrap();
        let live = apply(
            Some(&live),
            &deploy(json!({"replicas": 3})),
            &req("b", false, T2),
            &BuiltinLists,
        )
        .unwrap();
        assert!(owns(&live, "a", "/f:spec/f:replicas"));
        assert!(owns(&live, "b", "/f:spec/f:replicas"));
        // a drops both fields: the co-owned one stays, the sole-owned one goes.
        let out = apply(
            Some(&live),
            &deploy(json!({})),
            &req("a", false, T3),
            &BuiltinLists,
        )
        .unwrap();
        assert_eq!(out["spec"], json!({"replicas": 3}));
        assert!(owns(&out, "b", "/f:spec/f:replicas"));
        // a's entry is now empty and dropped.
        let managers: Vec<&Value> = out["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["manager"])
            .collect();
        assert_eq!(managers, vec!["b"]);
    }

    #[test]
    fn force_moves_ownership() {
        let live = apply(
            None,
            &deploy(json!({"replicas": 3, "paused": true})),
            &req("a", false, T1),
            &BuiltinLists,
        )
        .unwrap();
        let out = apply(
            Some(&live),
            &deploy(json!({"replicas": 5})),
            &req("b", true, T2),
            &BuiltinLists,
        )
        .unwrap();
        assert_eq!(out["spec"], json!({"replicas": 5, "paused": true}));
        assert!(owns(&out, "b", "/f:spec/f:replicas"));
        assert!(!owns(&out, "a", "/f:spec/f:replicas"));
        assert!(owns(&out, "a", "/f:spec/f:paused"));
        // a re-applying its old value now conflicts with b.
        let err = apply(
            Some(&out),
            &deploy(json!({"replicas": 3, "paused": true})),
            &req("a", false, T3),
            &BuiltinLists,
        )
        .unwrap_err();
        assert_eq!(conflicts(err)[0].manager, "b");
    }

    #[test]
    fn dropping_a_field_removes_it() {
        let mut body = deploy(json!({"replicas": 3, "paused": true}));
        body["metadata"]["labels"] = json!({"app": "x"});
        let live = apply(None, &body, &req("a", false, T1), &BuiltinLists).unwrap();
        let out = apply(
            Some(&live),
            &deploy(json!({"replicas": 3})),
            &req("a", false, T2),
            &BuiltinLists,
        )
        .unwrap();
        assert_eq!(out["spec"], json!({"replicas": 3}));
        assert!(out["metadata"].get("labels").is_none(), "{out}");
        assert_eq!(out["metadata"]["name"], "d");
        assert_eq!(entry(&out, "a")["time"], T2);
    }

    #[test]
    fn list_map_merge_of_containers_from_two_managers() {
        let containers = |c: Value| deploy(json!({"template": {"spec": {"containers": c}}}));
        let live = apply(
            None,
            &containers(json!([{"name": "app", "image": "app:1"}])),
            &req("a", false, T1),
            &BuiltinLists,
        )
        .unwrap();
        let live = apply(
            Some(&live),
            &containers(json!([{"name": "sidecar", "image": "s:1"}])),
            &req("b", false, T2),
            &BuiltinLists,
        )
        .unwrap();
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "app:1"}, {"name": "sidecar", "image": "s:1"}])
        );
        let item =
            |n: &str| format!("/f:spec/f:template/f:spec/f:containers/k:{{\"name\":\"{n}\"}}");
        assert!(owns(&live, "a", &item("app")));
        assert!(owns(&live, "b", &item("sidecar")));
        assert!(!owns(&live, "a", &item("sidecar")));
        // a updates its container and keeps b's.
        let live = apply(
            Some(&live),
            &containers(json!([{"name": "app", "image": "app:2"}])),
            &req("a", false, T3),
            &BuiltinLists,
        )
        .unwrap();
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "app:2"}, {"name": "sidecar", "image": "s:1"}])
        );
        // b drops its container: the item goes.
        let live = apply(
            Some(&live),
            &containers(json!([])),
            &req("b", false, T3),
            &BuiltinLists,
        )
        .unwrap();
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "app:2"}])
        );
        // Container ports are keyed by containerPort and the defaulted protocol.
        let live = apply(
            Some(&live),
            &containers(json!([{"name": "app", "ports": [{"containerPort": 80}]}])),
            &req("a", false, T3),
            &BuiltinLists,
        )
        .unwrap();
        assert!(owns(
            &live,
            "a",
            &format!(
                "{}/f:ports/k:{{\"containerPort\":80,\"protocol\":\"TCP\"}}",
                item("app")
            )
        ));
    }

    #[test]
    fn crd_schema_list_types() {
        let schema = json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "items": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "properties": {
                                "name": {"type": "string"}, "v": {"type": "integer"}
                            }}
                        },
                        "tags": {
                            "type": "array",
                            "x-kubernetes-list-type": "set",
                            "items": {"type": "string"}
                        },
                        "args": {"type": "array", "items": {"type": "string"}}
                    }
                }
            }
        });
        let lists = SchemaLists { schema: &schema };
        assert_eq!(
            lists.list_type(&["spec", "items"]),
            ListType::Map(vec!["name".into()])
        );
        assert_eq!(lists.list_type(&["spec", "tags"]), ListType::Set);
        assert_eq!(lists.list_type(&["spec", "args"]), ListType::Atomic);
        assert_eq!(lists.list_type(&["metadata", "finalizers"]), ListType::Set);

        let cr = |spec: Value| json!({"apiVersion": "x.io/v1", "kind": "W", "metadata": {"name": "w"}, "spec": spec});
        let r = |m: &'static str, now: &'static str| ApplyRequest {
            manager: m,
            force: false,
            subresource: None,
            api_version: "x.io/v1",
            now,
        };
        let live = apply(
            None,
            &cr(json!({"items": [{"name": "a", "v": 1}], "tags": ["x"], "args": ["1", "2"]})),
            &r("a", T1),
            &lists,
        )
        .unwrap();
        assert!(owns(&live, "a", "/f:spec/f:tags/v:\"x\""));
        assert!(owns(&live, "a", "/f:spec/f:items/k:{\"name\":\"a\"}/f:v"));
        assert!(owns(&live, "a", "/f:spec/f:args"));
        let out = apply(
            Some(&live),
            &cr(json!({"items": [{"name": "b", "v": 2}], "tags": ["y"]})),
            &r("b", T2),
            &lists,
        )
        .unwrap();
        assert_eq!(
            out["spec"],
            json!({
                "items": [{"name": "a", "v": 1}, {"name": "b", "v": 2}],
                "tags": ["x", "y"],
                "args": ["1", "2"]
            })
        );
        let err = apply(Some(&out), &cr(json!({"args": ["3"]})), &r("b", T3), &lists).unwrap_err();
        assert_eq!(conflicts(err)[0].field, ".spec.args");
        // A map-list item without its key is rejected.
        let err = apply(
            Some(&out),
            &cr(json!({"items": [{"v": 3}]})),
            &r("b", T3),
            &lists,
        )
        .unwrap_err();
        assert!(matches!(err, ApplyError::Invalid(_)), "{err}");
    }

    #[test]
    fn record_update_takes_ownership_from_applier() {
        let live = apply(
            None,
            &deploy(json!({"replicas": 3, "paused": false})),
            &req("a", false, T1),
            &BuiltinLists,
        )
        .unwrap();
        let mut edited = live.clone();
        edited["spec"]["replicas"] = json!(5);
        let out = record_update(
            Some(&live),
            &edited,
            "kubectl-edit",
            None,
            "apps/v1",
            T2,
            &BuiltinLists,
        );
        assert_eq!(out["spec"]["replicas"], 5);
        let e = entry(&out, "kubectl-edit");
        assert_eq!(e["operation"], "Update");
        assert_eq!(e["time"], T2);
        assert_eq!(e["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
        assert!(!owns(&out, "a", "/f:spec/f:replicas"));
        assert!(owns(&out, "a", "/f:spec/f:paused"));

        let err = apply(
            Some(&out),
            &deploy(json!({"replicas": 3, "paused": false})),
            &req("a", false, T3),
            &BuiltinLists,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using apps/v1: \
             .spec.replicas"
        );
        let c = conflicts(err);
        assert_eq!(
            c[0].cause_message(),
            "conflict with \"kubectl-edit\" using apps/v1"
        );

        // A field that disappears leaves every set; a no-op write keeps the entry's time.
        let mut removed = out.clone();
        removed["spec"].as_object_mut().unwrap().remove("paused");
        let after = record_update(
            Some(&out),
            &removed,
            "kubectl-edit",
            None,
            "apps/v1",
            T3,
            &BuiltinLists,
        );
        assert!(!owns(&after, "a", "/f:spec/f:paused"));
        assert_eq!(entry(&after, "kubectl-edit")["time"], T2);

        // Create records every field.
        let created = record_update(
            None,
            &deploy(json!({"replicas": 1})),
            "ctl",
            None,
            "apps/v1",
            T1,
            &BuiltinLists,
        );
        assert!(owns(&created, "ctl", "/f:spec/f:replicas"));
    }

    #[test]
    fn status_subresource_entry_is_separate() {
        let live = apply(
            None,
            &deploy(json!({"replicas": 3})),
            &req("a", false, T1),
            &BuiltinLists,
        )
        .unwrap();
        let status_req = ApplyRequest {
            subresource: Some("status"),
            ..req("a", false, T2)
        };
        let mut body = deploy(json!({}));
        body.as_object_mut().unwrap().remove("spec");
        body["status"] = json!({"readyReplicas": 1});
        let out = apply(Some(&live), &body, &status_req, &BuiltinLists).unwrap();
        assert_eq!(out["spec"]["replicas"], 3);
        assert_eq!(out["status"]["readyReplicas"], 1);
        let entries = out["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        let main = entries
            .iter()
            .find(|e| e.get("subresource").is_none())
            .unwrap();
        let status = entries
            .iter()
            .find(|e| e["subresource"] == "status")
            .unwrap();
        assert_eq!(main["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
        assert_eq!(
            status["fieldsV1"],
            json!({"f:status": {"f:readyReplicas": {}}})
        );
        assert_eq!(status["manager"], "a");
        assert_eq!(status["time"], T2);
        // An Update to status is an entry of its own too.
        let mut bumped = out.clone();
        bumped["status"]["readyReplicas"] = json!(2);
        let out = record_update(
            Some(&out),
            &bumped,
            "ctrl",
            Some("status"),
            "apps/v1",
            T3,
            &BuiltinLists,
        );
        let e = entry(&out, "ctrl");
        assert_eq!(e["subresource"], "status");
        assert!(!owns(&out, "a", "/f:status/f:readyReplicas"));
    }

    #[test]
    fn live_object_without_managed_fields_belongs_to_before_first_apply() {
        let live = deploy(json!({"replicas": 1}));
        let err = apply(
            Some(&live),
            &deploy(json!({"replicas": 2})),
            &req("a", false, T1),
            &BuiltinLists,
        )
        .unwrap_err();
        assert_eq!(
            conflicts(err)[0].cause_message(),
            "conflict with \"before-first-apply\" using apps/v1"
        );
    }

    #[test]
    fn apply_rejects_managed_fields_and_duplicate_keys() {
        let mut body = deploy(json!({}));
        body["metadata"]["managedFields"] = json!([{"manager": "x"}]);
        let err = apply(None, &body, &req("a", false, T1), &BuiltinLists).unwrap_err();
        assert!(matches!(err, ApplyError::Invalid(_)));
        let body = deploy(json!({"template": {"spec": {"containers": [
            {"name": "a"}, {"name": "a"}
        ]}}}));
        let err = apply(None, &body, &req("a", false, T1), &BuiltinLists).unwrap_err();
        assert!(err.to_string().contains("duplicate entries"), "{err}");
    }

    #[test]
    fn fields_v1_round_trips() {
        let mut set = FieldSet::new();
        set.insert(vec![Pe::Field("spec".into()), Pe::Field("a".into())]);
        set.insert(vec![
            Pe::Field("spec".into()),
            Pe::Key(vec![("name".into(), "\"x\"".into())]),
        ]);
        set.insert(vec![
            Pe::Field("spec".into()),
            Pe::Key(vec![("name".into(), "\"x\"".into())]),
            Pe::Field("v".into()),
        ]);
        set.insert(vec![Pe::Field("t".into()), Pe::Value("\"q\"".into())]);
        let encoded = encode_fields(&set);
        let mut back = FieldSet::new();
        decode_fields(&encoded, &mut Vec::new(), &mut back);
        assert_eq!(set, back);
    }
}
