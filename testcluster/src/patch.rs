//! Patch algorithms over `serde_json::Value`, with the Kubernetes API server's semantics:
//! RFC 7386 JSON merge patch, RFC 6902 JSON patch (as evanphx/json-patch v4 applies it) and
//! strategic merge patch (as apimachinery's `strategicpatch` applies it server-side).

use serde_json::{Map, Value};

/// Why a patch could not be applied. `Display` gives a one-line message fit for a `Status`.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The patch document itself is malformed (wrong shape, missing `op` or `path`, ...).
    #[error("invalid patch: {0}")]
    Invalid(String),
    /// A JSON patch operation did not apply to the document.
    #[error("json patch operation {index} ({op} {path}) failed: {reason}")]
    Operation {
        /// Position of the operation in the patch array.
        index: usize,
        /// The operation's `op`.
        op: String,
        /// The operation's `path`.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// A strategic merge patch did not apply to the document.
    #[error("strategic merge patch failed: {0}")]
    Strategic(String),
}

// ---------------------------------------------------------------------------------------------
// RFC 7386 merge patch
// ---------------------------------------------------------------------------------------------

/// RFC 7386 JSON merge patch, applied in place (null deletes a key; non-object patch replaces).
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(map) = target {
        for (key, value) in patch_map {
            if value.is_null() {
                map.remove(key);
            } else {
                merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// RFC 6902 JSON patch (evanphx/json-patch v4 semantics)
// ---------------------------------------------------------------------------------------------

/// RFC 6902 JSON patch with the Kubernetes API server's semantics (evanphx/json-patch v4):
/// a `test` op whose value is null passes when the path is absent (kube-runtime's finalizer
/// helper relies on this), `add` at `/a/-` appends, negative array indices count from the end,
/// `replace` of a missing object key adds it, and the root path `""` is not addressable except
/// by `test`. Errors carry a message saying which op failed and why.
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| PatchError::Invalid("a JSON patch must be an array of operations".into()))?;
    let mut doc = target.clone();
    for (index, op) in ops.iter().enumerate() {
        apply_json_op(&mut doc, op, index)?;
    }
    Ok(doc)
}

fn apply_json_op(doc: &mut Value, op: &Value, index: usize) -> Result<(), PatchError> {
    let obj = op
        .as_object()
        .ok_or_else(|| PatchError::Invalid(format!("operation {index} is not a JSON object")))?;
    let kind = obj
        .get("op")
        .and_then(Value::as_str)
        .ok_or_else(|| PatchError::Invalid(format!("operation {index} has no string \"op\"")))?;
    let path = obj.get("path").and_then(Value::as_str).ok_or_else(|| {
        PatchError::Invalid(format!("operation {index} ({kind}) has no string \"path\""))
    })?;
    let fail = |reason: String| PatchError::Operation {
        index,
        op: kind.to_string(),
        path: path.to_string(),
        reason,
    };
    // v4 stores a missing "value" as JSON null rather than rejecting the operation.
    let value = obj.get("value").cloned().unwrap_or(Value::Null);
    let from = || {
        obj.get("from").and_then(Value::as_str).ok_or_else(|| {
            PatchError::Invalid(format!("operation {index} ({kind}) has no string \"from\""))
        })
    };
    match kind {
        "add" => {
            let (parent, key) = split_pointer(path).map_err(&fail)?;
            let con = find_container(doc, &parent).ok_or_else(|| {
                fail(format!(
                    "add operation does not apply: doc is missing path: \"{path}\""
                ))
            })?;
            container_add(con, &key, value).map_err(fail)
        }
        "remove" => {
            let (parent, key) = split_pointer(path).map_err(&fail)?;
            let con = find_container(doc, &parent).ok_or_else(|| {
                fail(format!(
                    "remove operation does not apply: doc is missing path: \"{path}\""
                ))
            })?;
            container_remove(con, &key).map(|_| ()).map_err(fail)
        }
        "replace" => {
            let (parent, key) = split_pointer(path).map_err(&fail)?;
            let con = find_container(doc, &parent).ok_or_else(|| {
                fail(format!(
                    "replace operation does not apply: doc is missing path: {path}"
                ))
            })?;
            container_get(con, &key).map_err(|_| {
                fail(format!(
                    "replace operation does not apply: doc is missing key: {path}"
                ))
            })?;
            container_set(con, &key, value).map_err(fail)
        }
        "test" => {
            let tokens = parse_pointer(path).map_err(&fail)?;
            let actual = if tokens.is_empty() {
                Some(&*doc)
            } else {
                let (parent, key) = split_pointer(path).map_err(&fail)?;
                let con = find_container(doc, &parent).ok_or_else(|| {
                    fail(format!(
                        "test operation does not apply: is missing path: {path}"
                    ))
                })?;
                container_get(con, &key)
                    .map_err(|e| fail(format!("error in test for path: '{path}': {e}")))?
                    .map(|v| &*v)
            };
            // v4 represents JSON null and an absent key alike, so a null test value matches both.
            let actual = actual.filter(|v| !v.is_null());
            let passed = match actual {
                None => value.is_null(),
                Some(v) => *v == value,
            };
            if passed {
                Ok(())
            } else {
                Err(fail(format!("testing value {path} failed")))
            }
        }
        "move" => {
            let from = from()?;
            let (fparent, fkey) = split_pointer(from).map_err(&fail)?;
            let con = find_container(doc, &fparent).ok_or_else(|| {
                fail(format!(
                    "move operation does not apply: doc is missing from path: {from}"
                ))
            })?;
            let moved = container_remove(con, &fkey).map_err(&fail)?;
            let (parent, key) = split_pointer(path).map_err(&fail)?;
            let con = find_container(doc, &parent).ok_or_else(|| {
                fail(format!(
                    "move operation does not apply: doc is missing destination path: {path}"
                ))
            })?;
            container_add(con, &key, moved).map_err(fail)
        }
        "copy" => {
            let from = from()?;
            let (fparent, fkey) = split_pointer(from).map_err(&fail)?;
            let con = find_container(doc, &fparent).ok_or_else(|| {
                fail(format!(
                    "copy operation does not apply: doc is missing from path: {from}"
                ))
            })?;
            let copied = container_get(con, &fkey)
                .map_err(&fail)?
                .cloned()
                .ok_or_else(|| {
                    fail(format!(
                        "copy operation does not apply: doc is missing from path: {from}"
                    ))
                })?;
            let (parent, key) = split_pointer(path).map_err(&fail)?;
            let con = find_container(doc, &parent).ok_or_else(|| {
                fail(format!(
                    "copy operation does not apply: doc is missing destination path: {path}"
                ))
            })?;
            container_add(con, &key, copied).map_err(fail)
        }
        other => Err(PatchError::Invalid(format!(
            "operation {index}: Unexpected kind: {other}"
        ))),
    }
}

/// Splits an RFC 6901 pointer into unescaped reference tokens.
fn parse_pointer(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!("path \"{pointer}\" must start with '/'"));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

/// Splits a pointer into its parent tokens and last token; the root has no parent (as in v4).
fn split_pointer(pointer: &str) -> Result<(Vec<String>, String), String> {
    let mut tokens = parse_pointer(pointer)?;
    let key = tokens
        .pop()
        .ok_or_else(|| format!("doc is missing path: \"{pointer}\""))?;
    Ok((tokens, key))
}

/// Walks to the container (object or array) at `tokens`; None when any step is missing or null.
fn find_container<'a>(doc: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    let mut cur = doc;
    for token in tokens {
        cur = match cur {
            Value::Object(map) => map.get_mut(token)?,
            Value::Array(items) => {
                let idx = resolve_index(token, items.len(), false).ok()?;
                items.get_mut(idx)?
            }
            _ => return None,
        };
    }
    matches!(cur, Value::Object(_) | Value::Array(_)).then_some(cur)
}

/// Resolves an array index token (negative counts from the end, as v4 allows).
/// `insert` allows the one-past-the-end position used by `add`.
fn resolve_index(token: &str, len: usize, insert: bool) -> Result<usize, String> {
    let idx: i64 = token
        .parse()
        .map_err(|_| format!("value was not a proper array index: '{token}'"))?;
    let bound = if insert { len + 1 } else { len } as i64;
    let resolved = if idx < 0 { idx + bound } else { idx };
    if resolved < 0 || resolved >= bound {
        return Err(format!("Unable to access invalid index: {idx}"));
    }
    Ok(resolved as usize)
}

fn container_get<'a>(con: &'a mut Value, key: &str) -> Result<Option<&'a mut Value>, String> {
    match con {
        Value::Object(map) => Ok(map.get_mut(key)),
        Value::Array(items) => {
            let idx = resolve_index(key, items.len(), false)?;
            Ok(items.get_mut(idx))
        }
        _ => Err("not a container".into()),
    }
}

fn container_add(con: &mut Value, key: &str, value: Value) -> Result<(), String> {
    match con {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
            Ok(())
        }
        Value::Array(items) => {
            if key == "-" {
                items.push(value);
            } else {
                let idx = resolve_index(key, items.len(), true)?;
                items.insert(idx, value);
            }
            Ok(())
        }
        _ => Err("not a container".into()),
    }
}

fn container_set(con: &mut Value, key: &str, value: Value) -> Result<(), String> {
    match con {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
            Ok(())
        }
        Value::Array(items) => {
            let idx = resolve_index(key, items.len(), false)?;
            items[idx] = value;
            Ok(())
        }
        _ => Err("not a container".into()),
    }
}

fn container_remove(con: &mut Value, key: &str) -> Result<Value, String> {
    match con {
        Value::Object(map) => map
            .remove(key)
            .ok_or_else(|| format!("Unable to remove nonexistent key: {key}")),
        Value::Array(items) => {
            let idx = resolve_index(key, items.len(), false)?;
            Ok(items.remove(idx))
        }
        _ => Err("not a container".into()),
    }
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch
// ---------------------------------------------------------------------------------------------

/// The patch metadata of built-in kinds that strategic merge patch needs: which lists merge,
/// and by which key. Paths are field names from the object root; list items add no element.
pub trait MergeKeys {
    /// The `patchMergeKey` of the list of objects at `path`, or None when it has none.
    fn merge_key(&self, path: &[&str]) -> Option<&str>;
    /// True when the list of scalars at `path` has `patchStrategy: merge` (merged as a set).
    fn is_primitive_set(&self, path: &[&str]) -> bool;
}

/// How a built-in list merges: by key (SMP merge key and SSA list-map keys) or as a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinList {
    /// A list of objects merged by key.
    Keyed {
        /// The strategic-merge-patch `patchMergeKey`.
        merge_key: &'static str,
        /// The server-side-apply `x-kubernetes-list-map-keys`.
        map_keys: &'static [&'static str],
    },
    /// A list of scalars merged as a set (like `metadata.finalizers`).
    Set,
}

/// The merge behaviour of the built-in list at `path` (field names from the root), keyed on
/// the last few field names so that it holds for Pods and every pod template alike.
/// None means the list is atomic (replaced wholesale).
pub fn builtin_list(path: &[&str]) -> Option<BuiltinList> {
    const fn keyed(merge_key: &'static str, map_keys: &'static [&'static str]) -> BuiltinList {
        BuiltinList::Keyed {
            merge_key,
            map_keys,
        }
    }
    let (&last, rest) = path.split_last()?;
    let parent = rest.last().copied();
    let is_container_list = |name: Option<&str>| {
        matches!(
            name,
            Some("containers" | "initContainers" | "ephemeralContainers")
        )
    };
    if is_container_list(parent) {
        return match last {
            "env" => Some(keyed("name", &["name"])),
            "ports" => Some(keyed("containerPort", &["containerPort", "protocol"])),
            "volumeMounts" => Some(keyed("mountPath", &["mountPath"])),
            "volumeDevices" => Some(keyed("devicePath", &["devicePath"])),
            _ => None,
        };
    }
    match (parent, last) {
        (Some("metadata"), "finalizers") => Some(BuiltinList::Set),
        (Some("metadata"), "ownerReferences") => Some(keyed("uid", &["uid"])),
        (Some("spec"), "containers" | "initContainers" | "ephemeralContainers") => {
            Some(keyed("name", &["name"]))
        }
        (Some("spec"), "volumes" | "imagePullSecrets" | "schedulingGates" | "resourceClaims") => {
            Some(keyed("name", &["name"]))
        }
        (Some("spec"), "hostAliases") => Some(keyed("ip", &["ip"])),
        (Some("spec"), "topologySpreadConstraints") => {
            Some(keyed("topologyKey", &["topologyKey", "whenUnsatisfiable"]))
        }
        // Service spec.ports (a pod's container ports are handled above).
        (Some("spec"), "ports") if rest.len() == 1 => Some(keyed("port", &["port", "protocol"])),
        // ServiceAccount's top-level lists.
        (None, "imagePullSecrets" | "secrets") => Some(keyed("name", &["name"])),
        (Some("status"), "conditions" | "addresses") => Some(keyed("type", &["type"])),
        (Some("status"), "podIPs" | "hostIPs") => Some(keyed("ip", &["ip"])),
        _ => None,
    }
}

/// The merge keys of the built-in kinds the cluster serves (see [`builtin_list`]): container
/// lists, env, volumes and imagePullSecrets by name, volumeMounts by mountPath, container ports
/// by containerPort, Service ports by port, status conditions by type, ownerReferences by uid,
/// metadata.finalizers a primitive set; everything else (EndpointSlice endpoints, RBAC rules,
/// ...) is atomic.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuiltinMergeKeys;

impl MergeKeys for BuiltinMergeKeys {
    fn merge_key(&self, path: &[&str]) -> Option<&str> {
        match builtin_list(path)? {
            BuiltinList::Keyed { merge_key, .. } => Some(merge_key),
            BuiltinList::Set => None,
        }
    }

    fn is_primitive_set(&self, path: &[&str]) -> bool {
        builtin_list(path) == Some(BuiltinList::Set)
    }
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER_PREFIX: &str = "$setElementOrder";
const DELETE_PRIMITIVE_PREFIX: &str = "$deleteFromPrimitiveList";

/// Strategic merge patch (built-in kinds only), as the API server applies it
/// (`MergeParallelList` and `IgnoreUnmatchedNulls` on). `keys` tells which lists merge and by
/// which key; other lists are replaced wholesale. Supports `$patch: replace|delete|merge` on
/// maps and list items, `$retainKeys`, `$setElementOrder/<field>`,
/// `$deleteFromPrimitiveList/<field>`; null deletes a key. Order of merged lists follows
/// apimachinery: patch items keep the patch's order and are interleaved with server-only items
/// by their live positions, so an item new to the list comes first.
pub fn strategic_merge_patch(
    target: &Value,
    patch: &Value,
    keys: &dyn MergeKeys,
) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::Strategic(
            "a strategic merge patch must be a JSON object".into(),
        ));
    };
    let original = match target {
        Value::Object(map) => map.clone(),
        Value::Null => Map::new(),
        _ => {
            return Err(PatchError::Strategic(
                "the patched document must be a JSON object".into(),
            ));
        }
    };
    let mut smp = Smp {
        keys,
        path: Vec::new(),
    };
    smp.merge_map(original, patch.clone())
        .map(Value::Object)
        .map_err(PatchError::Strategic)
}

/// How the list at a path merges, from [`MergeKeys`].
enum ListStrategy {
    Replace,
    /// Merge by key; None is a list of primitives merged as a set.
    Merge(Option<String>),
}

/// Whether list elements are maps (merged by key) or scalars.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ElemKind {
    Map,
    Scalar,
}

struct Smp<'k> {
    keys: &'k dyn MergeKeys,
    /// Field names from the root to the value being merged.
    path: Vec<String>,
}

impl Smp<'_> {
    fn strategy(&self) -> ListStrategy {
        let path: Vec<&str> = self.path.iter().map(String::as_str).collect();
        if let Some(key) = self.keys.merge_key(&path) {
            ListStrategy::Merge(Some(key.to_string()))
        } else if self.keys.is_primitive_set(&path) {
            ListStrategy::Merge(None)
        } else {
            ListStrategy::Replace
        }
    }

    fn where_(&self) -> String {
        if self.path.is_empty() {
            "the object".into()
        } else {
            format!(".{}", self.path.join("."))
        }
    }

    fn merge_map(
        &mut self,
        mut original: Map<String, Value>,
        mut patch: Map<String, Value>,
    ) -> Result<Map<String, Value>, String> {
        if let Some(directive) = patch.get(DIRECTIVE) {
            match directive.as_str() {
                Some("replace") => {
                    patch.remove(DIRECTIVE);
                    // Materialise the replacement so nested directives and nulls do not leak.
                    return self.merge_map(Map::new(), patch);
                }
                Some("delete") => return Ok(Map::new()),
                // apimachinery rejects an explicit "merge" on a map; merging is the default, so
                // it is accepted here as a no-op.
                Some("merge") => {
                    patch.remove(DIRECTIVE);
                }
                _ => {
                    return Err(format!(
                        "unknown patch type: {directive} in map at {}",
                        self.where_()
                    ));
                }
            }
        }

        if let Some(retain) = patch.remove(RETAIN_KEYS) {
            let Value::Array(retain) = retain else {
                return Err(format!(
                    "invalid patch format: {RETAIN_KEYS} at {} must be a list",
                    self.where_()
                ));
            };
            let keep = |k: &str| retain.iter().any(|r| r.as_str() == Some(k));
            for (k, v) in &patch {
                if v.is_null()
                    || k.starts_with(DELETE_PRIMITIVE_PREFIX)
                    || k.starts_with(SET_ORDER_PREFIX)
                {
                    continue;
                }
                if !keep(k) {
                    return Err(format!(
                        "invalid patch format: field {k:?} at {} is not in {RETAIN_KEYS}",
                        self.where_()
                    ));
                }
            }
            original.retain(|k, _| keep(k));
        }

        self.merge_set_element_order(&mut original, &mut patch)?;

        for (key, patch_value) in patch {
            let (field, is_delete_list) = if let Some(rest) =
                key.strip_prefix(DELETE_PRIMITIVE_PREFIX)
            {
                let field = rest
                    .strip_prefix('/')
                    .filter(|f| !f.is_empty())
                    .ok_or_else(|| format!("invalid patch format: {key:?} at {}", self.where_()))?;
                (field.to_string(), true)
            } else if key.starts_with('$') {
                // Directives already handled ($patch) or unknown: never stored as fields.
                continue;
            } else {
                (key, false)
            };

            if patch_value.is_null() {
                original.remove(&field);
                continue;
            }

            self.path.push(field.clone());
            let result = match original.remove(&field) {
                None if is_delete_list => None,
                None => Some(self.materialize(patch_value)?),
                Some(Value::Object(orig)) => match patch_value {
                    Value::Object(p) => Some(Value::Object(self.merge_map(orig, p)?)),
                    _ if is_delete_list => Some(Value::Object(orig)),
                    other => Some(self.materialize(other)?),
                },
                Some(Value::Array(orig)) => match patch_value {
                    Value::Array(p) => Some(Value::Array(match self.strategy() {
                        ListStrategy::Merge(merge_key) => {
                            self.merge_slice(orig, p, merge_key.as_deref(), is_delete_list)?
                        }
                        ListStrategy::Replace if is_delete_list => {
                            // A deletion list on a non-merging list: drop the listed values.
                            orig.into_iter()
                                .filter(|v| !p.iter().any(|d| go_eq(v, d)))
                                .collect()
                        }
                        ListStrategy::Replace => p,
                    })),
                    _ if is_delete_list => Some(Value::Array(orig)),
                    other => Some(self.materialize(other)?),
                },
                Some(orig) if is_delete_list => Some(orig),
                Some(_) => Some(self.materialize(patch_value)?),
            };
            self.path.pop();
            if let Some(value) = result {
                original.insert(field, value);
            }
        }
        Ok(original)
    }

    /// A patch value stored where the original has nothing to merge with: directives and nulls
    /// inside it are resolved against an empty original.
    fn materialize(&mut self, value: Value) -> Result<Value, String> {
        match value {
            Value::Object(map) => Ok(Value::Object(self.merge_map(Map::new(), map)?)),
            Value::Array(items) => match self.strategy() {
                ListStrategy::Merge(key) => Ok(Value::Array(self.merge_slice(
                    Vec::new(),
                    items,
                    key.as_deref(),
                    false,
                )?)),
                ListStrategy::Replace => Ok(Value::Array(items)),
            },
            other => Ok(other),
        }
    }

    /// Processes `$setElementOrder/<field>` directives and their lists (apimachinery's
    /// `mergePatchIntoOriginal`), removing both from `patch`.
    fn merge_set_element_order(
        &mut self,
        original: &mut Map<String, Value>,
        patch: &mut Map<String, Value>,
    ) -> Result<(), String> {
        let directives: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with(SET_ORDER_PREFIX))
            .cloned()
            .collect();
        for directive in directives {
            let Some(order) = patch.remove(&directive) else {
                continue;
            };
            let field = directive
                .strip_prefix(SET_ORDER_PREFIX)
                .and_then(|r| r.strip_prefix('/'))
                .filter(|f| !f.is_empty())
                .ok_or_else(|| format!("invalid patch format: {directive:?} at {}", self.where_()))?
                .to_string();
            let Value::Array(order) = order else {
                return Err(format!(
                    "invalid patch format: {directive} at {} must be a list",
                    self.where_()
                ));
            };
            let orig_list = match original.get(&field) {
                None => None,
                Some(Value::Array(items)) => Some(items.clone()),
                Some(_) => {
                    return Err(format!(
                        "{directive} at {} names a field that is not a list",
                        self.where_()
                    ));
                }
            };
            let patch_list = match patch.get(&field) {
                None => None,
                Some(Value::Array(items)) => Some(items.clone()),
                Some(_) => {
                    return Err(format!(
                        "{directive} at {} goes with a value that is not a list",
                        self.where_()
                    ));
                }
            };
            self.path.push(field.clone());
            let ListStrategy::Merge(merge_key) = self.strategy() else {
                // A list that does not merge has no order to keep: the patch list replaces it.
                self.path.pop();
                continue;
            };
            let merge_key = merge_key.as_deref();
            let outcome = (|| {
                if let Some(p) = &patch_list {
                    validate_set_order(p, &order, merge_key)?;
                }
                let kind = elem_kind(
                    orig_list.as_deref().unwrap_or(&[]),
                    patch_list.as_deref().unwrap_or(&[]),
                )?;
                let merged = match (&orig_list, patch_list) {
                    (Some(o), None) => o.clone(),
                    (None, Some(p)) => self.merge_slice(Vec::new(), p, merge_key, false)?,
                    (Some(o), Some(p)) => self.merge_slice(o.clone(), p, merge_key, false)?,
                    (None, None) => return Ok(None),
                };
                let (in_order, server_only) = partition(merged, &order, merge_key, kind)?;
                let server_order = orig_list.clone().unwrap_or_default();
                normalize_element_order(
                    in_order,
                    server_only,
                    &order,
                    &server_order,
                    merge_key,
                    kind,
                )
                .map(Some)
            })();
            self.path.pop();
            if let Some(both) = outcome? {
                original.insert(field.clone(), Value::Array(both));
            }
            patch.remove(&field);
        }
        Ok(())
    }

    /// apimachinery's `mergeSlice` for a list with merge strategy.
    fn merge_slice(
        &mut self,
        original: Vec<Value>,
        patch: Vec<Value>,
        merge_key: Option<&str>,
        is_delete_list: bool,
    ) -> Result<Vec<Value>, String> {
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        let kind = elem_kind(&original, &patch)?;
        let (merged, server_order, patch_order) = if kind == ElemKind::Scalar {
            if is_delete_list {
                return Ok(original
                    .into_iter()
                    .filter(|v| !patch.iter().any(|d| go_eq(v, d)))
                    .collect());
            }
            let mut both = original.clone();
            both.extend(patch.iter().cloned());
            (deduplicate_scalars(both), original, patch)
        } else {
            let Some(key) = merge_key else {
                return Err(format!(
                    "cannot merge lists without merge key for {}",
                    self.where_()
                ));
            };
            let (original, patch) = self.merge_special_elements(original, patch, key)?;
            let merged = self.merge_plain_elements(original.clone(), &patch, key)?;
            (merged, original, patch)
        };
        let key = if kind == ElemKind::Map {
            merge_key
        } else {
            None
        };
        let (patch_items, server_only) = partition(merged, &patch_order, key, kind)?;
        normalize_element_order(
            patch_items,
            server_only,
            &patch_order,
            &server_order,
            key,
            kind,
        )
    }

    /// Handles list items carrying `$patch` (apimachinery's `mergeSliceWithSpecialElements`):
    /// returns the updated original and the patch items without directives.
    fn merge_special_elements(
        &mut self,
        mut original: Vec<Value>,
        patch: Vec<Value>,
        key: &str,
    ) -> Result<(Vec<Value>, Vec<Value>), String> {
        let mut plain = Vec::new();
        let mut replace = false;
        for item in patch {
            let Value::Object(mut map) = item else {
                return Err(format!(
                    "list {} mixes objects and other values",
                    self.where_()
                ));
            };
            let Some(directive) = map.get(DIRECTIVE).cloned() else {
                plain.push(Value::Object(map));
                continue;
            };
            match directive.as_str() {
                Some("delete") => {
                    let Some(value) = map.get(key) else {
                        return Err(no_merge_key(&map, key));
                    };
                    original.retain(|o| !o.get(key).is_some_and(|v| go_eq(v, value)));
                }
                Some("replace") => replace = true,
                // apimachinery rejects "merge" here; merging is what happens anyway.
                Some("merge") => {
                    map.remove(DIRECTIVE);
                    plain.push(Value::Object(map));
                }
                _ => {
                    return Err(format!(
                        "unknown patch type: {directive} in list {}",
                        self.where_()
                    ));
                }
            }
        }
        if replace {
            let mut items = Vec::with_capacity(plain.len());
            for item in plain {
                items.push(self.materialize(item)?);
            }
            return Ok((items, Vec::new()));
        }
        Ok((original, plain))
    }

    /// Merges patch items into the original by merge key, appending new ones.
    fn merge_plain_elements(
        &mut self,
        mut original: Vec<Value>,
        patch: &[Value],
        key: &str,
    ) -> Result<Vec<Value>, String> {
        for item in patch {
            let Value::Object(map) = item else {
                return Err(format!(
                    "list {} mixes objects and other values",
                    self.where_()
                ));
            };
            let Some(value) = map.get(key) else {
                return Err(no_merge_key(map, key));
            };
            let found = original
                .iter()
                .position(|o| o.get(key).is_some_and(|v| go_eq(v, value)));
            match found {
                Some(idx) => {
                    let orig = match std::mem::take(&mut original[idx]) {
                        Value::Object(m) => m,
                        _ => Map::new(),
                    };
                    original[idx] = Value::Object(self.merge_map(orig, map.clone())?);
                }
                None => original.push(self.materialize(item.clone())?),
            }
        }
        Ok(original)
    }
}

fn no_merge_key(map: &Map<String, Value>, key: &str) -> String {
    format!(
        "map: {} does not contain declared merge key: {key}",
        Value::Object(map.clone())
    )
}

/// The element kind shared by both lists; lists of lists and mixed maps/scalars are errors.
fn elem_kind(a: &[Value], b: &[Value]) -> Result<ElemKind, String> {
    let mut kind = None;
    for item in a.iter().chain(b) {
        let this = match item {
            Value::Array(_) => return Err("lists of lists are not supported".into()),
            Value::Object(_) => ElemKind::Map,
            _ => ElemKind::Scalar,
        };
        match kind {
            None => kind = Some(this),
            Some(k) if k != this => return Err("list element types are not identical".into()),
            Some(_) => {}
        }
    }
    Ok(kind.unwrap_or(ElemKind::Scalar))
}

/// Equality as Go's `==` on decoded JSON: every number is a float64.
fn go_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// apimachinery's in-place deduplication (a duplicate is replaced by the last element).
fn deduplicate_scalars(mut s: Vec<Value>) -> Vec<Value> {
    let mut length = s.len() as isize - 1;
    let mut i: isize = 0;
    while i < length {
        let mut j = i + 1;
        while j <= length {
            if go_eq(&s[i as usize], &s[j as usize]) {
                s[j as usize] = s[length as usize].clone();
                s.truncate(length as usize);
                length -= 1;
                j -= 1;
            }
            j += 1;
        }
        i += 1;
    }
    s
}

/// The value an item is ordered and matched by: its merge key's value, or itself for scalars.
fn order_value<'v>(item: &'v Value, key: Option<&str>, kind: ElemKind) -> &'v Value {
    const NULL: &Value = &Value::Null;
    match kind {
        ElemKind::Map => key.and_then(|k| item.get(k)).unwrap_or(NULL),
        ElemKind::Scalar => item,
    }
}

fn index_of(list: &[Value], item: &Value, key: Option<&str>, kind: ElemKind) -> Option<usize> {
    let wanted = order_value(item, key, kind);
    list.iter()
        .position(|v| go_eq(order_value(v, key, kind), wanted))
}

/// Splits `items` into those present in `by` and the rest (server-only), keeping order.
fn partition(
    items: Vec<Value>,
    by: &[Value],
    key: Option<&str>,
    kind: ElemKind,
) -> Result<(Vec<Value>, Vec<Value>), String> {
    let mut present = Vec::new();
    let mut rest = Vec::new();
    for item in items {
        if kind == ElemKind::Map {
            let key = key.unwrap_or_default();
            match &item {
                Value::Object(map) if map.contains_key(key) => {}
                Value::Object(map) => return Err(no_merge_key(map, key)),
                _ => return Err("list mixes objects and other values".into()),
            }
        }
        if index_of(by, &item, key, kind).is_some() {
            present.push(item);
        } else {
            rest.push(item);
        }
    }
    Ok((present, rest))
}

/// Sorts `patch` items by `patch_order` and server-only items by `server_order`, then merges
/// them (apimachinery's `normalizeElementOrder`).
fn normalize_element_order(
    patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
    kind: ElemKind,
) -> Result<Vec<Value>, String> {
    let patch = normalize_slice_order(patch, patch_order, key, kind)?;
    let server_only = normalize_slice_order(server_only, server_order, key, kind)?;
    Ok(merge_sorted_slice(
        server_only,
        patch,
        server_order,
        key,
        kind,
    ))
}

/// apimachinery's `normalizeSliceOrder`: a stable sort by position in `order` (items absent
/// from `order` sort first, exactly as Go's insertion sort with its comparator leaves them),
/// with `$patch: delete` items moved to the end.
fn normalize_slice_order(
    to_sort: Vec<Value>,
    order: &[Value],
    key: Option<&str>,
    kind: ElemKind,
) -> Result<Vec<Value>, String> {
    let mut items = to_sort;
    let mut to_delete = Vec::new();
    if kind == ElemKind::Map {
        let key = key.unwrap_or_default();
        for item in items.iter().chain(order) {
            match item {
                Value::Object(map) if map.contains_key(key) => {}
                Value::Object(map) => return Err(no_merge_key(map, key)),
                _ => return Err("list mixes objects and other values".into()),
            }
        }
        let (keep, delete): (Vec<Value>, Vec<Value>) = items
            .into_iter()
            .partition(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"));
        items = keep;
        to_delete = delete;
    }
    let less =
        |a: &Value, b: &Value| match (index_of(order, a, key, kind), index_of(order, b, key, kind))
        {
            (Some(ia), Some(ib)) => ia < ib,
            _ => true,
        };
    // Go's sort.SliceStable is an insertion sort for short lists; replaying it keeps the exact
    // placement of items the comparator cannot order.
    for i in 1..items.len() {
        let mut j = i;
        while j > 0 && less(&items[j], &items[j - 1]) {
            items.swap(j, j - 1);
            j -= 1;
        }
    }
    items.extend(to_delete);
    Ok(items)
}

/// apimachinery's `mergeSortedSlice`: inserts server-only items (`left`) among patch items
/// (`right`) by their live positions; a patch item absent from the live list goes first.
fn merge_sorted_slice(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    key: Option<&str>,
    kind: ElemKind,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!(
                (
                    index_of(server_order, l, key, kind),
                    index_of(server_order, r, key, kind),
                ),
                (Some(li), Some(ri)) if li < ri
            ),
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

/// Checks that the patch list's items appear in the `$setElementOrder` list in the same
/// relative order (apimachinery's `validatePatchWithSetOrderList`).
fn validate_set_order(patch: &[Value], order: &[Value], key: Option<&str>) -> Result<(), String> {
    if order.is_empty() || patch.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = match key {
        Some(_) => patch
            .iter()
            .filter(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"))
            .collect(),
        None => patch.iter().collect(),
    };
    let key_eq = |a: &Value, b: &Value| -> Result<bool, String> {
        let Some(key) = key else {
            return Ok(go_eq(a, b));
        };
        match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) => Ok(go_eq(x, y)),
            _ => Err(format!(
                "an item of a list or its {SET_ORDER_PREFIX} list lacks merge key {key}"
            )),
        }
    };
    let (mut pi, mut si) = (0, 0);
    while pi < non_delete.len() && si < order.len() {
        if non_delete[pi].get(DIRECTIVE).is_some() {
            pi += 1;
            continue;
        }
        if key_eq(non_delete[pi], &order[si])? {
            pi += 1;
        }
        si += 1;
    }
    if pi < non_delete.len() && si >= order.len() {
        return Err(format!(
            "the order in the patch list {} doesn't match the {SET_ORDER_PREFIX} list {}",
            Value::Array(patch.to_vec()),
            Value::Array(order.to_vec())
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(target: Value, patch: Value) -> Value {
        strategic_merge_patch(&target, &patch, &BuiltinMergeKeys).unwrap()
    }

    #[test]
    fn merge_patch_null_deletes_and_nests() {
        let mut doc = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]});
        merge_patch(
            &mut doc,
            &json!({"a": null, "b": {"c": null, "x": {"y": 1, "z": null}}, "e": [3]}),
        );
        assert_eq!(doc, json!({"b": {"d": 3, "x": {"y": 1}}, "e": [3]}));
        let mut doc = json!({"a": 1});
        merge_patch(&mut doc, &json!(["replaced"]));
        assert_eq!(doc, json!(["replaced"]));
    }

    #[test]
    fn json_patch_test_null_on_absent_path_passes() {
        let doc = json!({"metadata": {"name": "x"}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}
        ]);
        let out = json_patch(&doc, &patch).unwrap();
        assert_eq!(out, json!({"metadata": {"name": "x", "finalizers": ["x"]}}));
        // Once present, the same guard fails.
        let err = json_patch(&out, &patch).unwrap_err();
        assert!(
            matches!(err, PatchError::Operation { index: 0, .. }),
            "{err}"
        );
    }

    #[test]
    fn json_patch_test_on_present_mismatch_fails() {
        let doc = json!({"spec": {"replicas": 2}});
        let err = json_patch(
            &doc,
            &json!([{"op": "test", "path": "/spec/replicas", "value": 3}]),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("test") && msg.contains("/spec/replicas"),
            "{msg}"
        );
        json_patch(
            &doc,
            &json!([{"op": "test", "path": "/spec/replicas", "value": 2}]),
        )
        .unwrap();
        // A test on a path under a missing parent fails too.
        json_patch(
            &doc,
            &json!([{"op": "test", "path": "/nope/x", "value": null}]),
        )
        .unwrap_err();
    }

    #[test]
    fn json_patch_add_append_remove_replace() {
        let doc = json!({"a": [1, 2, 3], "b": "x"});
        let out = json_patch(
            &doc,
            &json!([
                {"op": "add", "path": "/a/-", "value": 4},
                {"op": "add", "path": "/a/0", "value": 0},
                {"op": "remove", "path": "/a/2"},
                {"op": "replace", "path": "/b", "value": "y"},
                {"op": "add", "path": "/c~1d", "value": true}
            ]),
        )
        .unwrap();
        assert_eq!(out, json!({"a": [0, 1, 3, 4], "b": "y", "c/d": true}));
        let err = json_patch(&doc, &json!([{"op": "remove", "path": "/a/7"}])).unwrap_err();
        assert!(err.to_string().contains("invalid index"), "{err}");
        let err = json_patch(&doc, &json!([{"op": "remove", "path": "/zz"}])).unwrap_err();
        assert!(err.to_string().contains("nonexistent key"), "{err}");
        let err =
            json_patch(&doc, &json!([{"op": "add", "path": "/x/y", "value": 1}])).unwrap_err();
        assert!(err.to_string().contains("missing path"), "{err}");
        // A negative index counts from the end.
        let out = json_patch(&doc, &json!([{"op": "remove", "path": "/a/-1"}])).unwrap();
        assert_eq!(out["a"], json!([1, 2]));
    }

    #[test]
    fn json_patch_move_and_copy() {
        let doc = json!({"a": {"x": 1}, "b": [1]});
        let out = json_patch(
            &doc,
            &json!([
                {"op": "copy", "from": "/a/x", "path": "/b/-"},
                {"op": "move", "from": "/a", "path": "/c"}
            ]),
        )
        .unwrap();
        assert_eq!(out, json!({"b": [1, 1], "c": {"x": 1}}));
        let err =
            json_patch(&doc, &json!([{"op": "move", "from": "/zz", "path": "/c"}])).unwrap_err();
        assert!(err.to_string().contains("move"), "{err}");
        let err = json_patch(&doc, &json!([{"op": "frob", "path": "/a"}])).unwrap_err();
        assert!(matches!(err, PatchError::Invalid(_)), "{err}");
    }

    fn pod(containers: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": containers}})
    }

    #[test]
    fn smp_merges_containers_by_name_keeping_others() {
        let target = pod(json!([
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}
        ]));
        let out = smp(
            target,
            json!({"spec": {"containers": [
                {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}]}
            ]}}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([
                {"name": "a", "image": "a:2",
                 "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}]},
                {"name": "b", "image": "b:1"}
            ])
        );
        // A list without a merge key is replaced wholesale.
        let out = smp(
            json!({"spec": {"tolerations": [{"key": "a"}, {"key": "b"}]}}),
            json!({"spec": {"tolerations": [{"key": "c"}]}}),
        );
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "c"}]));
        // Templates use the same keys.
        let out = smp(
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "1"}]}}}}),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "2"}]}}}}),
        );
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a", "image": "2"}])
        );
    }

    #[test]
    fn smp_patch_delete_on_list_item_and_map() {
        let target = pod(json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]));
        let out = smp(
            target,
            json!({"spec": {"containers": [{"name": "b", "$patch": "delete"}]}}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a"}, {"name": "c"}])
        );
        let out = smp(
            json!({"spec": {"selector": {"a": "1"}, "x": 1}}),
            json!({"spec": {"selector": {"$patch": "delete"}}}),
        );
        assert_eq!(out["spec"], json!({"selector": {}, "x": 1}));
        let out = smp(
            json!({"spec": {"selector": {"a": "1", "b": "2"}}}),
            json!({"spec": {"selector": {"$patch": "replace", "c": "3"}}}),
        );
        assert_eq!(out["spec"]["selector"], json!({"c": "3"}));
        let out = smp(
            pod(json!([{"name": "a"}, {"name": "b"}])),
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "z"}]}}),
        );
        assert_eq!(out["spec"]["containers"], json!([{"name": "z"}]));
    }

    #[test]
    fn smp_retain_keys_clears_other_fields() {
        let target = json!({"spec": {"strategy": {
            "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}
        }}});
        let out = smp(
            target.clone(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        );
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        let err = strategic_merge_patch(
            &target,
            &json!({"spec": {"strategy": {"$retainKeys": ["type"], "other": 1}}}),
            &BuiltinMergeKeys,
        )
        .unwrap_err();
        assert!(err.to_string().contains("retainKeys"), "{err}");
    }

    #[test]
    fn smp_set_element_order() {
        let target = pod(json!([
            {"name": "a", "image": "1"}, {"name": "b"}, {"name": "c"}
        ]));
        let out = smp(
            target,
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
                "containers": [{"name": "a", "image": "2"}]
            }}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "c"}, {"name": "a", "image": "2"}, {"name": "b"}])
        );
        // Primitive lists too.
        let out = smp(
            json!({"metadata": {"finalizers": ["x", "y"]}}),
            json!({"metadata": {"$setElementOrder/finalizers": ["y", "z", "x"], "finalizers": ["z"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["y", "z", "x"]));
    }

    #[test]
    fn smp_delete_from_primitive_list_finalizers() {
        let out = smp(
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "c"]));
        // Deleting from an absent list is a no-op.
        let out = smp(
            json!({"metadata": {"name": "x"}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
        );
        assert_eq!(out, json!({"metadata": {"name": "x"}}));
    }

    #[test]
    fn smp_null_deletes_keys() {
        let out = smp(
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"replicas": 3}}),
            json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"replicas": null},
                   "status": {"x": null, "y": 1}}),
        );
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {}, "status": {"y": 1}})
        );
    }

    #[test]
    fn smp_finalizers_merge_as_a_set() {
        // Union without duplicates; a new item goes first, as apimachinery orders it.
        let out = smp(
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["b", "c"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));
        let out = smp(
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"finalizers": ["z"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["z", "a"]));
    }

    #[test]
    fn smp_service_ports_and_owner_references() {
        let out = smp(
            json!({"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443}]}}),
            json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}]}}),
        );
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 80, "name": "http", "targetPort": 8080}, {"port": 443}])
        );
        assert_eq!(
            BuiltinMergeKeys.merge_key(&["metadata", "ownerReferences"]),
            Some("uid")
        );
        assert_eq!(
            BuiltinMergeKeys.merge_key(&["spec", "template", "spec", "containers"]),
            Some("name")
        );
        assert_eq!(
            BuiltinMergeKeys.merge_key(&["spec", "containers", "ports"]),
            Some("containerPort")
        );
        assert_eq!(BuiltinMergeKeys.merge_key(&["endpoints"]), None);
        assert_eq!(BuiltinMergeKeys.merge_key(&["rules"]), None);
        assert!(BuiltinMergeKeys.is_primitive_set(&["metadata", "finalizers"]));
    }
}
