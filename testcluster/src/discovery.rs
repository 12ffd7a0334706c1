//! API discovery bodies, legacy (`APIVersions`, `APIGroupList`, `APIGroup`, `APIResourceList`)
//! and aggregated (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`), built from the
//! [`Registry`] plus the few virtual resources the server answers without storage.
//!
//! kubectl picks the format by the response Content-Type and kube-rs `Discovery::run()` expects
//! legacy JSON, so the server negotiates on Accept with [`wants_aggregated`].

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::resources::{Registry, ResourceType};

/// Content type of aggregated discovery responses.
pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Verbs of every stored resource, sorted as the real server lists them.
const RESOURCE_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const SUBRESOURCE_VERBS: &[&str] = &["get", "patch", "update"];
const LOG_VERBS: &[&str] = &["get"];

/// A resource served outside the [`Registry`]: no storage, only the listed verbs (review APIs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VirtualResource {
    /// API group, e.g. `authorization.k8s.io`.
    pub group: &'static str,
    /// Version within the group.
    pub version: &'static str,
    /// Resource name in URLs.
    pub plural: &'static str,
    /// Singular resource name.
    pub singular: &'static str,
    /// Kind of request and response bodies.
    pub kind: &'static str,
    /// Whether the URL has a namespace segment.
    pub namespaced: bool,
    /// The only verbs served.
    pub verbs: &'static [&'static str],
}

/// The virtual resources discovery advertises besides the registry's (the server serves them).
pub fn extra_resources() -> &'static [VirtualResource] {
    // `kubectl auth can-i` and helm's capability checks POST SelfSubjectAccessReviews.
    const EXTRA: &[VirtualResource] = &[VirtualResource {
        group: "authorization.k8s.io",
        version: "v1",
        plural: "selfsubjectaccessreviews",
        singular: "selfsubjectaccessreview",
        kind: "SelfSubjectAccessReview",
        namespaced: false,
        verbs: &["create"],
    }];
    EXTRA
}

/// Whether an Accept header asks for aggregated discovery (`as=APIGroupDiscoveryList`, v2 or
/// v2beta1; the answer is always v2). The first range the server can answer decides.
pub fn wants_aggregated(accept: &str) -> bool {
    for m in crate::table::media_ranges(accept) {
        if !m.accepts_json() {
            continue;
        }
        match m.param("as") {
            None => return false,
            Some("APIGroupDiscoveryList")
                if m.param("g").is_none_or(|g| g == "apidiscovery.k8s.io")
                    && m.param("v").is_none_or(|v| v == "v2" || v == "v2beta1") =>
            {
                return true;
            }
            Some(_) => {}
        }
    }
    false
}

/// A subresource entry: name, response GVK and verbs.
struct Sub {
    name: &'static str,
    group: String,
    version: String,
    kind: String,
    verbs: &'static [&'static str],
}

/// One served resource as discovery describes it.
struct Entry {
    group: String,
    version: String,
    plural: String,
    singular: String,
    kind: String,
    namespaced: bool,
    verbs: &'static [&'static str],
    short_names: Vec<String>,
    categories: Vec<String>,
    subresources: Vec<Sub>,
}

impl Entry {
    fn from_type(t: &ResourceType) -> Self {
        let own = |name| Sub {
            name,
            group: t.group.clone(),
            version: t.version.clone(),
            kind: t.kind.clone(),
            verbs: SUBRESOURCE_VERBS,
        };
        // Sorted by name, as the real server lists them.
        let mut subresources = Vec::new();
        if t.log {
            subresources.push(Sub {
                verbs: LOG_VERBS,
                ..own("log")
            });
        }
        if t.scale.is_some() {
            subresources.push(Sub {
                name: "scale",
                group: "autoscaling".into(),
                version: "v1".into(),
                kind: "Scale".into(),
                verbs: SUBRESOURCE_VERBS,
            });
        }
        if t.status {
            subresources.push(own("status"));
        }
        Entry {
            group: t.group.clone(),
            version: t.version.clone(),
            plural: t.plural.clone(),
            singular: t.singular.clone(),
            kind: t.kind.clone(),
            namespaced: t.namespaced,
            verbs: RESOURCE_VERBS,
            short_names: t.short_names.clone(),
            categories: t.categories.clone(),
            subresources,
        }
    }

    fn from_virtual(v: &VirtualResource) -> Self {
        Entry {
            group: v.group.into(),
            version: v.version.into(),
            plural: v.plural.into(),
            singular: v.singular.into(),
            kind: v.kind.into(),
            namespaced: v.namespaced,
            verbs: v.verbs,
            short_names: Vec::new(),
            categories: Vec::new(),
            subresources: Vec::new(),
        }
    }

    /// Legacy `APIResource` entries: the resource, then one `<plural>/<sub>` per subresource.
    fn legacy(&self) -> Vec<Value> {
        let mut r = json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": self.verbs,
        });
        if !self.short_names.is_empty() {
            r["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            r["categories"] = json!(self.categories);
        }
        let mut out = vec![r];
        for s in &self.subresources {
            let mut e = json!({
                "name": format!("{}/{}", self.plural, s.name),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": s.kind,
                "verbs": s.verbs,
            });
            // Only a subresource of another group version names it (client-go's scale
            // resolver reads `group`/`version` of the `/scale` entry).
            if s.group != self.group || s.version != self.version {
                e["group"] = json!(s.group);
                e["version"] = json!(s.version);
            }
            out.push(e);
        }
        out
    }

    /// Aggregated `APIResourceDiscovery`.
    fn aggregated(&self) -> Value {
        let mut r = json!({
            "resource": self.plural,
            "responseKind": {"group": self.group, "version": self.version, "kind": self.kind},
            "scope": if self.namespaced { "Namespaced" } else { "Cluster" },
            "singularResource": self.singular,
            "verbs": self.verbs,
        });
        if !self.short_names.is_empty() {
            r["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            r["categories"] = json!(self.categories);
        }
        if !self.subresources.is_empty() {
            let subs: Vec<Value> = self
                .subresources
                .iter()
                .map(|s| {
                    json!({
                        "subresource": s.name,
                        "responseKind": {"group": s.group, "version": s.version, "kind": s.kind},
                        "verbs": s.verbs,
                    })
                })
                .collect();
            r["subresources"] = Value::Array(subs);
        }
        r
    }
}

/// Every served resource, registry first, grouped by group then version (highest priority
/// version first, as `preferredVersion` and aggregated discovery order them).
fn by_group(reg: &Registry) -> BTreeMap<String, Vec<(String, Vec<Entry>)>> {
    let entries = reg
        .all()
        .map(|t| Entry::from_type(t))
        .chain(extra_resources().iter().map(Entry::from_virtual));
    let mut groups: BTreeMap<String, BTreeMap<String, Vec<Entry>>> = BTreeMap::new();
    for e in entries {
        let versions = groups.entry(e.group.clone()).or_default();
        let list = versions.entry(e.version.clone()).or_default();
        // A virtual resource never shadows a stored one of the same name.
        if !list.iter().any(|x| x.plural == e.plural) {
            list.push(e);
        }
    }
    groups
        .into_iter()
        .map(|(g, versions)| {
            let mut vs: Vec<(String, Vec<Entry>)> = versions
                .into_iter()
                .map(|(v, mut es)| {
                    es.sort_by(|a, b| a.plural.cmp(&b.plural));
                    (v, es)
                })
                .collect();
            vs.sort_by(|a, b| compare_versions(&a.0, &b.0));
            (g, vs)
        })
        .collect()
}

/// Kubernetes version priority (`version.CompareKubeAwareVersionStrings`, highest first): GA
/// before beta before alpha, higher major and minor first, then other names alphabetically.
fn compare_versions(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        if tail.is_empty() {
            return Some((major, 2, 0));
        }
        let (level, minor) = if let Some(m) = tail.strip_prefix("beta") {
            (1, m)
        } else {
            (0, tail.strip_prefix("alpha")?)
        };
        if minor.is_empty() || !minor.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        Some((major, level, minor.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some((ma, la, na)), Some((mb, lb, nb))) => lb.cmp(&la).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// `APIGroup` (without kind/apiVersion, as inside an `APIGroupList`).
fn group_body(name: &str, versions: &[(String, Vec<Entry>)]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|(v, _)| json!({"groupVersion": group_version(name, v), "version": v}))
        .collect();
    let mut g = Map::new();
    g.insert("name".into(), json!(name));
    if let Some(first) = vs.first() {
        g.insert("preferredVersion".into(), first.clone());
    }
    g.insert("versions".into(), Value::Array(vs));
    Value::Object(g)
}

/// GET /api (legacy): kind `APIVersions`.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// GET /apis (legacy): kind `APIGroupList`, every non-core group with its preferredVersion.
pub fn api_group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = by_group(reg)
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_body(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// GET /apis/{group} (legacy): kind `APIGroup`; None for the core group or an unknown one.
pub fn api_group(reg: &Registry, group: &str) -> Option<Value> {
    if group.is_empty() {
        return None;
    }
    let groups = by_group(reg);
    let mut body = group_body(group, groups.get(group)?);
    body["kind"] = json!("APIGroup");
    body["apiVersion"] = json!("v1");
    Some(body)
}

/// GET /api/v1 or /apis/{group}/{version} (legacy): kind `APIResourceList`, with
/// `<plural>/status`, `<plural>/scale` (autoscaling/v1 Scale) and `pods/log` entries.
pub fn api_resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let groups = by_group(reg);
    let (_, entries) = groups.get(group)?.iter().find(|(v, _)| v == version)?;
    let resources: Vec<Value> = entries.iter().flat_map(Entry::legacy).collect();
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(group, version),
        "resources": resources,
    }))
}

fn aggregated_versions(versions: &[(String, Vec<Entry>)]) -> Vec<Value> {
    versions
        .iter()
        .map(|(v, es)| {
            let resources: Vec<Value> = es.iter().map(Entry::aggregated).collect();
            // "Stale" would make client-go report the group version as failed.
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect()
}

fn discovery_list(items: Vec<Value>) -> Value {
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// GET /api (aggregated): one item with an empty `metadata.name` and version v1.
pub fn aggregated_core(reg: &Registry) -> Value {
    let groups = by_group(reg);
    let versions = match groups.get("") {
        Some(vs) => aggregated_versions(vs),
        None => vec![json!({"version": "v1", "resources": [], "freshness": "Current"})],
    };
    discovery_list(vec![
        json!({"metadata": {"name": ""}, "versions": versions}),
    ])
}

/// GET /apis (aggregated): one item per non-core group, versions by priority.
pub fn aggregated_groups(reg: &Registry) -> Value {
    let items: Vec<Value> = by_group(reg)
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| json!({"metadata": {"name": g}, "versions": aggregated_versions(vs)}))
        .collect();
    discovery_list(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<'a>(items: &'a Value, name: &str) -> &'a Value {
        items
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == name || i["resource"] == name || i["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing"))
    }

    #[test]
    fn aggregated_lists_deployment_subresources() {
        let body = aggregated_groups(&Registry::builtin());
        assert_eq!(body["kind"], "APIGroupDiscoveryList");
        assert_eq!(body["apiVersion"], "apidiscovery.k8s.io/v2");
        let apps = find(&body["items"], "apps");
        let v1 = &apps["versions"][0];
        assert_eq!(v1["version"], "v1");
        assert_eq!(v1["freshness"], "Current");
        let d = find(&v1["resources"], "deployments");
        assert_eq!(
            d["responseKind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert_eq!(d["scope"], "Namespaced");
        assert_eq!(d["singularResource"], "deployment");
        assert_eq!(d["verbs"], json!(RESOURCE_VERBS));
        assert_eq!(d["shortNames"], json!(["deploy"]));
        assert_eq!(d["categories"], json!(["all"]));
        assert_eq!(
            d["subresources"],
            json!([
                {"subresource": "scale",
                 "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                 "verbs": ["get", "patch", "update"]},
                {"subresource": "status",
                 "responseKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                 "verbs": ["get", "patch", "update"]},
            ])
        );
        // Cluster scope and the virtual review resource.
        let crds = find(
            &find(&body["items"], "apiextensions.k8s.io")["versions"][0]["resources"],
            "customresourcedefinitions",
        );
        assert_eq!(crds["scope"], "Cluster");
        let ssar = find(
            &find(&body["items"], "authorization.k8s.io")["versions"][0]["resources"],
            "selfsubjectaccessreviews",
        );
        assert_eq!(ssar["verbs"], json!(["create"]));
        assert_eq!(ssar["scope"], "Cluster");
    }

    #[test]
    fn aggregated_core_has_one_unnamed_item() {
        let body = aggregated_core(&Registry::builtin());
        let items = body["items"].as_array().unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["metadata"]["name"], "");
        assert_eq!(items[0]["versions"][0]["version"], "v1");
        let pods = find(&items[0]["versions"][0]["resources"], "pods");
        assert_eq!(pods["subresources"][0]["subresource"], "log");
        assert_eq!(pods["subresources"][0]["verbs"], json!(["get"]));
        assert_eq!(pods["responseKind"]["group"], "");
    }

    #[test]
    fn legacy_resource_list_has_scale_in_autoscaling() {
        let reg = Registry::builtin();
        let list = api_resource_list(&reg, "apps", "v1").unwrap();
        assert_eq!(list["kind"], "APIResourceList");
        assert_eq!(list["groupVersion"], "apps/v1");
        let scale = find(&list["resources"], "deployments/scale");
        assert_eq!(
            scale,
            &json!({"name": "deployments/scale", "singularName": "", "namespaced": true,
                    "group": "autoscaling", "version": "v1", "kind": "Scale",
                    "verbs": ["get", "patch", "update"]})
        );
        let status = find(&list["resources"], "deployments/status");
        assert_eq!(status["kind"], "Deployment");
        assert!(status.get("group").is_none());
        let core = api_resource_list(&reg, "", "v1").unwrap();
        assert_eq!(core["groupVersion"], "v1");
        assert_eq!(
            find(&core["resources"], "pods/log")["verbs"],
            json!(["get"])
        );
        assert_eq!(
            find(&core["resources"], "configmaps")["shortNames"],
            json!(["cm"])
        );
        assert!(api_resource_list(&reg, "apps", "v9").is_none());
        assert!(api_resource_list(&reg, "nope.io", "v1").is_none());
    }

    #[test]
    fn legacy_groups_and_crd_entries() {
        let reg = crate::crd::registry_with_capacity_benchmark();
        let list = api_group_list(&reg);
        assert_eq!(list["kind"], "APIGroupList");
        let groups = list["groups"].as_array().unwrap();
        assert!(groups.iter().all(|g| g["name"] != ""));
        let gp = find(&list["groups"], "goodput.dev");
        assert_eq!(
            gp["preferredVersion"],
            json!({"groupVersion": "goodput.dev/v1alpha1", "version": "v1alpha1"})
        );
        let g = api_group(&reg, "goodput.dev").unwrap();
        assert_eq!(g["kind"], "APIGroup");
        assert!(api_group(&reg, "").is_none());
        assert!(api_group(&reg, "nope.io").is_none());
        let rl = api_resource_list(&reg, "goodput.dev", "v1alpha1").unwrap();
        let cb = find(&rl["resources"], "capacitybenchmarks");
        assert_eq!(cb["kind"], "CapacityBenchmark");
        assert_eq!(cb["shortNames"], json!(["cb", "cbench"]));
        assert_eq!(
            find(&rl["resources"], "capacitybenchmarks/status")["verbs"],
            json!(SUBRESOURCE_VERBS)
        );
        let v = api_versions("127.0.0.1:6443");
        assert_eq!(v["kind"], "APIVersions");
        assert_eq!(
            v["serverAddressByClientCIDRs"][0]["serverAddress"],
            "127.0.0.1:6443"
        );
    }

    #[test]
    fn version_priority() {
        let mut vs = vec!["v1alpha1", "v2", "foo", "v1beta2", "v1", "v1beta1", "v10"];
        vs.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(
            vs,
            ["v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }

    #[test]
    fn negotiates_aggregated_on_accept() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert!(wants_aggregated(kubectl));
        assert!(wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
        ));
        assert!(!wants_aggregated("application/json"));
        assert!(!wants_aggregated(""));
        assert!(!wants_aggregated(
            "application/json, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        ));
        assert!(AGGREGATED_CONTENT_TYPE.contains("as=APIGroupDiscoveryList"));
    }
}
