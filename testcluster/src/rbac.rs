//! Kubernetes RBAC authorisation over stored Roles, ClusterRoles and their bindings, with the
//! rule matching of `k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac`.

use std::collections::HashSet;

use serde_json::Value;

use crate::selector::LabelSelector;

/// The authenticated user making a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name, e.g. `system:serviceaccount:ns:sa` or `alice`.
    pub name: String,
    /// The user's groups, e.g. `system:authenticated`, `system:serviceaccounts:ns`.
    pub groups: Vec<String>,
}

/// What is being asked: a resource request (verb get/list/watch/create/update/patch/delete/
/// deletecollection, API group, resource plural, subresource, namespace — `None` for
/// cluster-scoped resources or all namespaces — and name) or a non-resource request (`path`
/// Some, e.g. `/healthz`, `/version`, `/api`, `/openapi/v3`, with a lowercase HTTP verb).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// Who asks.
    pub user: UserInfo,
    /// The verb.
    pub verb: String,
    /// The API group ("" for the core group).
    pub api_group: String,
    /// The resource plural, e.g. `configmaps`.
    pub resource: String,
    /// The subresource, e.g. `status` or `log`.
    pub subresource: Option<String>,
    /// The namespace; `None` for cluster-scoped resources or requests across namespaces.
    pub namespace: Option<String>,
    /// The object's name, when the request names one.
    pub name: Option<String>,
    /// The URL path of a non-resource request; `None` for resource requests.
    pub path: Option<String>,
}

impl Attributes {
    /// Whether this is a resource request (no `path`).
    pub fn is_resource_request(&self) -> bool {
        self.path.is_none()
    }
}

/// The outcome of [`authorize`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request is allowed.
    pub allowed: bool,
    /// Why: for an allowed request the binding and role that allowed it, as the real RBAC
    /// authoriser words it; for a denied one a short note.
    pub reason: String,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        match cur.get(*p) {
            Some(next) => cur = next,
            None => return "",
        }
    }
    cur.as_str().unwrap_or("")
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a binding subject applies to the user. `binding_ns` is the RoleBinding's namespace
/// ("" for a ClusterRoleBinding), the default namespace of ServiceAccount subjects.
fn applies_to_user(user: &UserInfo, subject: &Value, binding_ns: &str) -> bool {
    let name = str_at(subject, &["name"]);
    match str_at(subject, &["kind"]) {
        "User" => user.name == name,
        "Group" => user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let ns = match str_at(subject, &["namespace"]) {
                "" => binding_ns,
                ns => ns,
            };
            !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

/// How the real authoriser names a subject in its reasons.
fn describe_subject(subject: &Value, binding_ns: &str) -> String {
    let name = str_at(subject, &["name"]);
    match str_at(subject, &["kind"]) {
        "ServiceAccount" => {
            let ns = match str_at(subject, &["namespace"]) {
                "" => binding_ns,
                ns => ns,
            };
            format!("ServiceAccount \"{name}/{ns}\"")
        }
        kind => format!("{kind} \"{name}\""),
    }
}

fn verb_matches(rule: &Value, verb: &str) -> bool {
    strings(rule, "verbs").iter().any(|v| v == "*" || v == verb)
}

fn api_group_matches(rule: &Value, group: &str) -> bool {
    strings(rule, "apiGroups")
        .iter()
        .any(|g| g == "*" || g == group)
}

fn resource_matches(rule: &Value, combined: &str, subresource: &str) -> bool {
    strings(rule, "resources").iter().any(|r| {
        r == "*"
            || r == combined
            || (!subresource.is_empty()
                && r.strip_prefix("*/").is_some_and(|sub| sub == subresource))
    })
}

fn resource_name_matches(rule: &Value, name: &str) -> bool {
    let names = strings(rule, "resourceNames");
    names.is_empty() || names.iter().any(|n| n == name)
}

fn non_resource_url_matches(rule: &Value, path: &str) -> bool {
    strings(rule, "nonResourceURLs").iter().any(|u| {
        u == "*"
            || u == path
            || u.strip_suffix('*')
                .is_some_and(|prefix| path.starts_with(prefix))
    })
}

/// Whether one PolicyRule allows the request.
fn rule_allows(attrs: &Attributes, rule: &Value) -> bool {
    if let Some(path) = &attrs.path {
        return verb_matches(rule, &attrs.verb) && non_resource_url_matches(rule, path);
    }
    let sub = attrs.subresource.as_deref().unwrap_or("");
    let combined = if sub.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{sub}", attrs.resource)
    };
    verb_matches(rule, &attrs.verb)
        && api_group_matches(rule, &attrs.api_group)
        && resource_matches(rule, &combined, sub)
        && resource_name_matches(rule, attrs.name.as_deref().unwrap_or(""))
}

/// The rules of a ClusterRole, with those of the ClusterRoles its `aggregationRule` selects
/// (transitively, as the aggregation controller's results would be).
fn cluster_role_rules<'a>(role: &'a Value, cluster_roles: &'a [Value]) -> Vec<&'a Value> {
    let mut rules = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut stack = vec![role];
    while let Some(r) = stack.pop() {
        if !seen.insert(str_at(r, &["metadata", "name"])) {
            continue;
        }
        if let Some(own) = r.get("rules").and_then(Value::as_array) {
            rules.extend(own.iter());
        }
        let selectors = r
            .get("aggregationRule")
            .and_then(|a| a.get("clusterRoleSelectors"))
            .and_then(Value::as_array);
        for sel in selectors.into_iter().flatten() {
            // A malformed selector selects nothing, as the controller would skip it.
            let Ok(sel) = LabelSelector::from_object(sel) else {
                continue;
            };
            if sel.is_empty() {
                // An empty selector would select every ClusterRole; the API server rejects it.
                continue;
            }
            for candidate in cluster_roles {
                let labels = candidate
                    .get("metadata")
                    .and_then(|m| m.get("labels"))
                    .and_then(Value::as_object);
                if sel.matches(labels) {
                    stack.push(candidate);
                }
            }
        }
    }
    rules
}

fn find_by_name<'a>(objs: &'a [Value], name: &str, namespace: Option<&str>) -> Option<&'a Value> {
    objs.iter().find(|o| {
        str_at(o, &["metadata", "name"]) == name
            && namespace.is_none_or(|ns| str_at(o, &["metadata", "namespace"]) == ns)
    })
}

/// Authorises against the stored RBAC objects (plain JSON as a client would write them):
/// RoleBindings in the request's namespace (subjects User, Group, ServiceAccount{name,
/// namespace}; roleRef a Role in the same namespace or a ClusterRole) and ClusterRoleBindings
/// (roleRef a ClusterRole). Rules: verbs, apiGroups, resources (`res/sub` for subresources,
/// `*`, `*/sub`), resourceNames (never matching a request without a name), nonResourceURLs
/// (exact or `prefix*`, only through ClusterRoleBindings). A ServiceAccount subject matches
/// user `system:serviceaccount:<ns>:<name>`; groups come from the caller's `UserInfo`.
/// `system:admin` and the `system:masters` group are always allowed. Aggregated ClusterRoles
/// contribute the rules of the ClusterRoles their selectors match.
pub fn authorize(
    attrs: &Attributes,
    roles: &[Value],
    cluster_roles: &[Value],
    role_bindings: &[Value],
    cluster_role_bindings: &[Value],
) -> Decision {
    let user = &attrs.user;
    if user.name == "system:admin" || user.groups.iter().any(|g| g == "system:masters") {
        return Decision {
            allowed: true,
            reason: "superuser (system:admin or group system:masters)".to_string(),
        };
    }

    for crb in cluster_role_bindings {
        if str_at(crb, &["roleRef", "kind"]) != "ClusterRole" {
            continue;
        }
        let Some(subject) = binding_subject(crb, user, "") else {
            continue;
        };
        let role_name = str_at(crb, &["roleRef", "name"]);
        let Some(role) = find_by_name(cluster_roles, role_name, None) else {
            continue;
        };
        if cluster_role_rules(role, cluster_roles)
            .into_iter()
            .any(|r| rule_allows(attrs, r))
        {
            return Decision {
                allowed: true,
                reason: format!(
                    "RBAC: allowed by ClusterRoleBinding \"{}\" of ClusterRole \"{role_name}\" to {}",
                    str_at(crb, &["metadata", "name"]),
                    describe_subject(subject, "")
                ),
            };
        }
    }

    // Namespaced grants apply to resource requests in their namespace only.
    if let (Some(ns), true) = (attrs.namespace.as_deref(), attrs.is_resource_request()) {
        for rb in role_bindings {
            if str_at(rb, &["metadata", "namespace"]) != ns {
                continue;
            }
            let Some(subject) = binding_subject(rb, user, ns) else {
                continue;
            };
            let kind = str_at(rb, &["roleRef", "kind"]);
            let role_name = str_at(rb, &["roleRef", "name"]);
            let rules = match kind {
                "Role" => find_by_name(roles, role_name, Some(ns))
                    .and_then(|r| r.get("rules"))
                    .and_then(Value::as_array)
                    .map(|a| a.iter().collect())
                    .unwrap_or_default(),
                "ClusterRole" => find_by_name(cluster_roles, role_name, None)
                    .map(|r| cluster_role_rules(r, cluster_roles))
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            if rules.into_iter().any(|r| rule_allows(attrs, r)) {
                return Decision {
                    allowed: true,
                    reason: format!(
                        "RBAC: allowed by RoleBinding \"{}/{ns}\" of {kind} \"{role_name}\" to {}",
                        str_at(rb, &["metadata", "name"]),
                        describe_subject(subject, ns)
                    ),
                };
            }
        }
    }

    Decision {
        allowed: false,
        reason: "no RBAC policy matched".to_string(),
    }
}

/// The first subject of the binding that applies to the user.
fn binding_subject<'a>(binding: &'a Value, user: &UserInfo, ns: &str) -> Option<&'a Value> {
    binding
        .get("subjects")
        .and_then(Value::as_array)?
        .iter()
        .find(|s| applies_to_user(user, s, ns))
}

/// The forbidden message the real server returns, e.g.
/// `configmaps "x" is forbidden: User "system:serviceaccount:ns:sa" cannot create resource
/// "configmaps" in API group "" in the namespace "ns"`; the name part is omitted when there is
/// no name, subresources are written `configmaps/status`, cluster-wide requests end `at the
/// cluster scope`, and non-resource requests read `forbidden: User "u" cannot get path "/x"`.
pub fn forbidden_message(attrs: &Attributes) -> String {
    let user = &attrs.user.name;
    if let Some(path) = &attrs.path {
        return format!(
            "forbidden: User {} cannot {} path {}",
            quote(user),
            attrs.verb,
            quote(path)
        );
    }
    let mut resource = attrs.resource.clone();
    if let Some(sub) = attrs.subresource.as_deref().filter(|s| !s.is_empty()) {
        resource = format!("{resource}/{sub}");
    }
    let scope = match attrs.namespace.as_deref().filter(|n| !n.is_empty()) {
        Some(ns) => format!("in the namespace {}", quote(ns)),
        None => "at the cluster scope".to_string(),
    };
    let detail = format!(
        "User {} cannot {} resource {} in API group {} {scope}",
        quote(user),
        attrs.verb,
        quote(&resource),
        quote(&attrs.api_group)
    );
    let qualified = if attrs.api_group.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}.{}", attrs.resource, attrs.api_group)
    };
    match attrs.name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => format!("{qualified} {} is forbidden: {detail}", quote(name)),
        None => format!("{qualified} is forbidden: {detail}"),
    }
}

/// Go's `%q` for the plain strings found here (JSON quoting is the same for them).
fn quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn req(u: &UserInfo, verb: &str, group: &str, resource: &str, ns: Option<&str>) -> Attributes {
        Attributes {
            user: u.clone(),
            verb: verb.to_string(),
            api_group: group.to_string(),
            resource: resource.to_string(),
            namespace: ns.map(str::to_string),
            ..Default::default()
        }
    }

    fn role(ns: &str, name: &str, rules: Value) -> Value {
        json!({"kind": "Role", "metadata": {"namespace": ns, "name": name}, "rules": rules})
    }

    fn rb(ns: &str, name: &str, kind: &str, role: &str, subjects: Value) -> Value {
        json!({"metadata": {"namespace": ns, "name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
               "subjects": subjects})
    }

    fn crb(name: &str, role: &str, subjects: Value) -> Value {
        json!({"metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
               "subjects": subjects})
    }

    #[test]
    fn role_allowing_only_get_denies_create() {
        let alice = user("alice", &["system:authenticated"]);
        let roles = [role(
            "ns",
            "cm-reader",
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}]),
        )];
        let rbs = [rb(
            "ns",
            "b",
            "Role",
            "cm-reader",
            json!([{"kind": "User", "name": "alice"}]),
        )];
        let get = req(&alice, "get", "", "configmaps", Some("ns"));
        let d = authorize(&get, &roles, &[], &rbs, &[]);
        assert!(d.allowed, "{d:?}");
        assert_eq!(
            d.reason,
            "RBAC: allowed by RoleBinding \"b/ns\" of Role \"cm-reader\" to User \"alice\""
        );
        let create = req(&alice, "create", "", "configmaps", Some("ns"));
        assert!(!authorize(&create, &roles, &[], &rbs, &[]).allowed);
        // Wrong group, wrong namespace.
        assert!(
            !authorize(
                &req(&alice, "get", "apps", "configmaps", Some("ns")),
                &roles,
                &[],
                &rbs,
                &[]
            )
            .allowed
        );
        assert!(
            !authorize(
                &req(&alice, "get", "", "configmaps", Some("other")),
                &roles,
                &[],
                &rbs,
                &[]
            )
            .allowed
        );
        let mut named = create.clone();
        named.name = Some("x".into());
        assert_eq!(
            forbidden_message(&named),
            "configmaps \"x\" is forbidden: User \"alice\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"ns\""
        );
    }

    #[test]
    fn resource_names_restrict() {
        let bob = user("bob", &[]);
        let roles = [role(
            "ns",
            "one",
            json!([{"verbs": ["get", "list", "update"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s1"]}]),
        )];
        let rbs = [rb(
            "ns",
            "b",
            "Role",
            "one",
            json!([{"kind": "User", "name": "bob"}]),
        )];
        let mut get = req(&bob, "get", "", "secrets", Some("ns"));
        get.name = Some("s1".into());
        assert!(authorize(&get, &roles, &[], &rbs, &[]).allowed);
        get.name = Some("s2".into());
        assert!(!authorize(&get, &roles, &[], &rbs, &[]).allowed);
        // list has no name: a rule with resourceNames never matches it.
        let list = req(&bob, "list", "", "secrets", Some("ns"));
        assert!(!authorize(&list, &roles, &[], &rbs, &[]).allowed);
    }

    #[test]
    fn cluster_role_via_role_binding_is_namespace_scoped() {
        let sa = user(
            "system:serviceaccount:team:runner",
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:team",
                "system:authenticated",
            ],
        );
        let crs = [json!({"metadata": {"name": "pod-admin"},
            "rules": [{"verbs": ["*"], "apiGroups": [""], "resources": ["pods"]}]})];
        let rbs = [rb(
            "team",
            "b",
            "ClusterRole",
            "pod-admin",
            json!([{"kind": "Group", "name": "system:serviceaccounts:team"}]),
        )];
        assert!(
            authorize(
                &req(&sa, "delete", "", "pods", Some("team")),
                &[],
                &crs,
                &rbs,
                &[]
            )
            .allowed
        );
        assert!(
            !authorize(
                &req(&sa, "delete", "", "pods", Some("other")),
                &[],
                &crs,
                &rbs,
                &[]
            )
            .allowed
        );
        // Listing across all namespaces needs a cluster-wide grant.
        let all = req(&sa, "list", "", "pods", None);
        assert!(!authorize(&all, &[], &crs, &rbs, &[]).allowed);
        assert_eq!(
            forbidden_message(&all),
            "pods is forbidden: User \"system:serviceaccount:team:runner\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
        );
    }

    #[test]
    fn cluster_role_binding_is_cluster_wide() {
        let carol = user("carol", &["ops"]);
        let crs = [json!({"metadata": {"name": "deploy-editor"},
            "rules": [{"verbs": ["get", "list", "watch", "update", "patch"], "apiGroups": ["apps"], "resources": ["deployments"]}]})];
        let crbs = [crb(
            "c",
            "deploy-editor",
            json!([{"kind": "Group", "name": "ops"}]),
        )];
        for ns in [Some("a"), Some("b"), None] {
            let d = authorize(
                &req(&carol, "patch", "apps", "deployments", ns),
                &[],
                &crs,
                &[],
                &crbs,
            );
            assert!(d.allowed, "{ns:?}");
        }
        let d = authorize(
            &req(&carol, "list", "apps", "deployments", None),
            &[],
            &crs,
            &[],
            &crbs,
        );
        assert_eq!(
            d.reason,
            "RBAC: allowed by ClusterRoleBinding \"c\" of ClusterRole \"deploy-editor\" to Group \"ops\""
        );
        assert!(
            !authorize(
                &req(&carol, "delete", "apps", "deployments", Some("a")),
                &[],
                &crs,
                &[],
                &crbs
            )
            .allowed
        );
        let mut del = req(&carol, "delete", "apps", "deployments", Some("a"));
        del.name = Some("d".into());
        assert_eq!(
            forbidden_message(&del),
            "deployments.apps \"d\" is forbidden: User \"carol\" cannot delete resource \"deployments\" in API group \"apps\" in the namespace \"a\""
        );
    }

    #[test]
    fn subresource_needs_explicit_rule() {
        let dev = user("dev", &[]);
        let roles = [
            role(
                "ns",
                "pods",
                json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]),
            ),
            role(
                "ns",
                "logs",
                json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]}]),
            ),
            role(
                "ns",
                "status",
                json!([{"verbs": ["patch"], "apiGroups": ["*"], "resources": ["*/status"]}]),
            ),
        ];
        let mut log = req(&dev, "get", "", "pods", Some("ns"));
        log.subresource = Some("log".into());
        log.name = Some("p".into());
        let only_pods = [rb(
            "ns",
            "b1",
            "Role",
            "pods",
            json!([{"kind": "User", "name": "dev"}]),
        )];
        assert!(
            authorize(
                &req(&dev, "get", "", "pods", Some("ns")),
                &roles,
                &[],
                &only_pods,
                &[]
            )
            .allowed
        );
        assert!(!authorize(&log, &roles, &[], &only_pods, &[]).allowed);
        let with_logs = [rb(
            "ns",
            "b2",
            "Role",
            "logs",
            json!([{"kind": "User", "name": "dev"}]),
        )];
        assert!(authorize(&log, &roles, &[], &with_logs, &[]).allowed);
        let star = [rb(
            "ns",
            "b3",
            "Role",
            "status",
            json!([{"kind": "User", "name": "dev"}]),
        )];
        let mut status = req(&dev, "patch", "apps", "deployments", Some("ns"));
        status.subresource = Some("status".into());
        assert!(authorize(&status, &roles, &[], &star, &[]).allowed);
        assert!(!authorize(&log, &roles, &[], &star, &[]).allowed);
        let mut denied = req(&dev, "patch", "", "configmaps", Some("ns"));
        denied.subresource = Some("status".into());
        assert_eq!(
            forbidden_message(&denied),
            "configmaps is forbidden: User \"dev\" cannot patch resource \"configmaps/status\" in API group \"\" in the namespace \"ns\""
        );
    }

    #[test]
    fn service_account_subject() {
        let sa = user("system:serviceaccount:ns:sa", &["system:serviceaccounts"]);
        let roles = [role(
            "ns",
            "r",
            json!([{"verbs": ["create"], "apiGroups": [""], "resources": ["configmaps"]}]),
        )];
        // Namespace defaults to the binding's.
        let implicit = [rb(
            "ns",
            "b",
            "Role",
            "r",
            json!([{"kind": "ServiceAccount", "name": "sa"}]),
        )];
        assert!(
            authorize(
                &req(&sa, "create", "", "configmaps", Some("ns")),
                &roles,
                &[],
                &implicit,
                &[]
            )
            .allowed
        );
        let other_ns = [rb(
            "ns",
            "b",
            "Role",
            "r",
            json!([{"kind": "ServiceAccount", "name": "sa", "namespace": "elsewhere"}]),
        )];
        assert!(
            !authorize(
                &req(&sa, "create", "", "configmaps", Some("ns")),
                &roles,
                &[],
                &other_ns,
                &[]
            )
            .allowed
        );
        // A different SA of the same name elsewhere is not matched.
        let other = user("system:serviceaccount:x:sa", &[]);
        assert!(
            !authorize(
                &req(&other, "create", "", "configmaps", Some("ns")),
                &roles,
                &[],
                &implicit,
                &[]
            )
            .allowed
        );
        let mut named = req(&sa, "create", "", "configmaps", Some("ns"));
        named.name = Some("x".into());
        assert_eq!(
            forbidden_message(&named),
            "configmaps \"x\" is forbidden: User \"system:serviceaccount:ns:sa\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"ns\""
        );
    }

    #[test]
    fn system_masters_and_admin_allowed() {
        let m = user("someone", &["system:masters"]);
        assert!(
            authorize(
                &req(&m, "delete", "x.io", "things", None),
                &[],
                &[],
                &[],
                &[]
            )
            .allowed
        );
        let a = user("system:admin", &[]);
        assert!(
            authorize(
                &req(&a, "create", "", "namespaces", None),
                &[],
                &[],
                &[],
                &[]
            )
            .allowed
        );
        let nobody = user("nobody", &["system:authenticated"]);
        assert!(
            !authorize(
                &req(&nobody, "get", "", "pods", Some("ns")),
                &[],
                &[],
                &[],
                &[]
            )
            .allowed
        );
    }

    #[test]
    fn non_resource_urls() {
        let u = user("u", &["system:authenticated"]);
        let crs = [json!({"metadata": {"name": "discovery"},
            "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/openapi/*", "/version"]}]})];
        let crbs = [crb(
            "d",
            "discovery",
            json!([{"kind": "Group", "name": "system:authenticated"}]),
        )];
        let path = |p: &str, verb: &str| Attributes {
            user: u.clone(),
            verb: verb.to_string(),
            path: Some(p.to_string()),
            ..Default::default()
        };
        assert!(authorize(&path("/healthz", "get"), &[], &crs, &[], &crbs).allowed);
        assert!(authorize(&path("/openapi/v3", "get"), &[], &crs, &[], &crbs).allowed);
        assert!(!authorize(&path("/healthz", "post"), &[], &crs, &[], &crbs).allowed);
        assert!(!authorize(&path("/metrics", "get"), &[], &crs, &[], &crbs).allowed);
        // Not through a RoleBinding.
        let rbs = [rb(
            "ns",
            "b",
            "ClusterRole",
            "discovery",
            json!([{"kind": "Group", "name": "system:authenticated"}]),
        )];
        let mut ns_path = path("/healthz", "get");
        ns_path.namespace = Some("ns".into());
        assert!(!authorize(&ns_path, &[], &crs, &rbs, &[]).allowed);
        assert_eq!(
            forbidden_message(&path("/metrics", "get")),
            "forbidden: User \"u\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn aggregation() {
        let u = user("viewer", &[]);
        let crs = [
            json!({"metadata": {"name": "view"},
                   "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.example.com/aggregate-to-view": "true"}}]},
                   "rules": []}),
            json!({"metadata": {"name": "widgets-view", "labels": {"rbac.example.com/aggregate-to-view": "true"}},
                   "rules": [{"verbs": ["get", "list"], "apiGroups": ["example.com"], "resources": ["widgets"]}]}),
            json!({"metadata": {"name": "unrelated", "labels": {"other": "true"}},
                   "rules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]}),
        ];
        let crbs = [crb(
            "v",
            "view",
            json!([{"kind": "User", "name": "viewer"}]),
        )];
        assert!(
            authorize(
                &req(&u, "list", "example.com", "widgets", Some("ns")),
                &[],
                &crs,
                &[],
                &crbs
            )
            .allowed
        );
        assert!(
            !authorize(
                &req(&u, "delete", "example.com", "widgets", Some("ns")),
                &[],
                &crs,
                &[],
                &crbs
            )
            .allowed
        );
        assert!(
            !authorize(
                &req(&u, "get", "", "secrets", Some("ns")),
                &[],
                &crs,
                &[],
                &crbs
            )
            .allowed
        );
    }
}
