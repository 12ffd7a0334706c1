//! The API server: routes every request the way kube-apiserver does (built from the kind
//! registry), authenticates bearer tokens, authorises with RBAC, and runs each verb with
//! the real semantics that controllers and `kubectl` depend on: status and scale
//! subresources, the four patch types, server-side apply, streaming watches with an
//! in-stream 410, Tables for `kubectl get`, metadata-only responses for `.owns()`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::admission::{self, ClusterIps};
use crate::auth::{Identity, Tokens};
use crate::error::ApiError;
use crate::faults::Faults;
use crate::kubelet::Kubelet;
use crate::rbac;
use crate::resources::{ResKey, ResourceType};
use crate::selector::{FieldSelector, LabelSelector};
use crate::ssa::{self, ListSemantics};
use crate::store::{DeleteOptions, Deleted, EventType, Propagation, Store, WatchStart};
use crate::table::{self, Representation};
use crate::{crd, discovery, openapi, patch, protobuf, schema, time};

/// Shared state of one API server.
pub struct ApiState {
    pub store: Arc<Store>,
    pub tokens: Arc<Tokens>,
    pub faults: Arc<Faults>,
    pub ips: ClusterIps,
    /// Set once the kubelet runs (pod logs come from it).
    pub kubelet: OnceLock<Kubelet>,
    /// `host:port` the server listens on (discovery's serverAddressByClientCIDRs).
    pub address: OnceLock<String>,
}

impl ApiState {
    pub fn new(store: Arc<Store>, tokens: Arc<Tokens>, faults: Arc<Faults>) -> Self {
        Self {
            store,
            tokens,
            faults,
            ips: ClusterIps,
            kubelet: OnceLock::new(),
            address: OnceLock::new(),
        }
    }
}

/// The HTTP router: one handler, because routes come from the registry at request time
/// (a CRD applied a moment ago is served at once).
pub fn router(state: Arc<ApiState>) -> Router {
    Router::new().fallback(handle).with_state(state)
}

/// One parsed request.
struct Req {
    method: Method,
    path: String,
    query: HashMap<String, String>,
    headers: HeaderMap,
    body: Bytes,
    user: Identity,
}

impl Req {
    fn q(&self, name: &str) -> Option<&str> {
        self.query
            .get(name)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    fn dry_run(&self) -> bool {
        self.q("dryRun") == Some("All")
    }

    /// `fieldManager`, else the User-Agent's product (`managerOrUserAgent`).
    fn manager(&self) -> String {
        match self.q("fieldManager") {
            Some(m) => m.to_owned(),
            None => {
                let ua = self.header("user-agent");
                let m = ua.split('/').next().unwrap_or_default();
                if m.is_empty() {
                    "unknown".into()
                } else {
                    m.to_owned()
                }
            }
        }
    }

    fn representation(&self) -> Representation {
        table::representation(self.header("accept"))
    }
}

/// What a resource URL names.
struct Target {
    rt: Arc<ResourceType>,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

async fn handle(State(state): State<Arc<ApiState>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, 256 << 20).await {
        Ok(b) => b,
        Err(e) => return error(ApiError::bad_request(format!("reading the body: {e}"))),
    };
    let query: HashMap<String, String> =
        form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .filter(|(k, _)| !k.is_empty())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    let path = parts.uri.path().trim_end_matches('/').to_owned();
    let path = if path.is_empty() {
        "/".to_owned()
    } else {
        path
    };
    let user = match authenticate(&state, &parts.headers) {
        Ok(u) => u,
        Err(e) => return error(e),
    };
    let mut req = Req {
        method: parts.method,
        path,
        query,
        headers: parts.headers,
        body,
        user,
    };
    let response = match serve(&state, &mut req).await {
        Ok(r) => r,
        Err(e) => error(e),
    };
    tracing::debug!(method = %req.method, path = %req.path, query = ?req.query, status = response.status().as_u16(), "request");
    response
}

fn authenticate(state: &ApiState, headers: &HeaderMap) -> Result<Identity, ApiError> {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let Some(token) = auth.strip_prefix("Bearer ") else {
        return Ok(Identity {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        });
    };
    let user = state
        .tokens
        .lookup(token.trim())
        .ok_or_else(ApiError::unauthorized)?;
    // Impersonation (`kubectl --as`), allowed to whoever may `impersonate` users.
    let Some(as_user) = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(user);
    };
    let allowed = user.is_admin() || {
        let attrs = rbac::Attributes {
            user: rbac::UserInfo {
                name: user.name.clone(),
                groups: user.groups.clone(),
            },
            verb: "impersonate".into(),
            resource: "users".into(),
            name: Some(as_user.to_owned()),
            ..Default::default()
        };
        let (r, cr, rb, crb) = rbac_objects(&state.store, None);
        rbac::authorize(&attrs, &r, &cr, &rb, &crb).allowed
    };
    if !allowed {
        return Err(ApiError::forbidden(format!(
            "users \"{as_user}\" is forbidden: User \"{}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
            user.name
        )));
    }
    let mut groups: Vec<String> = headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    if let Some(rest) = as_user.strip_prefix("system:serviceaccount:")
        && let Some((ns, name)) = rest.split_once(':')
    {
        let sa = Identity::service_account(ns, name);
        if groups.is_empty() {
            return Ok(sa);
        }
        groups.extend(sa.groups);
    }
    groups.push("system:authenticated".into());
    groups.dedup();
    Ok(Identity {
        name: as_user.to_owned(),
        groups,
    })
}

fn rbac_objects(
    store: &Store,
    ns: Option<&str>,
) -> (Vec<Value>, Vec<Value>, Vec<Value>, Vec<Value>) {
    let get = |plural: &str, ns: Option<&str>| -> Vec<Value> {
        store
            .list(&ResKey::new("rbac.authorization.k8s.io", plural), ns)
            .0
            .into_iter()
            .map(|v| (*v).clone())
            .collect()
    };
    let (roles, bindings) = match ns {
        Some(ns) => (get("roles", Some(ns)), get("rolebindings", Some(ns))),
        None => (Vec::new(), Vec::new()),
    };
    (
        roles,
        get("clusterroles", None),
        bindings,
        get("clusterrolebindings", None),
    )
}

fn authorize(state: &ApiState, user: &Identity, attrs: rbac::Attributes) -> Result<(), ApiError> {
    if user.is_admin() {
        return Ok(());
    }
    let (r, cr, rb, crb) = rbac_objects(&state.store, attrs.namespace.as_deref());
    let decision = rbac::authorize(&attrs, &r, &cr, &rb, &crb);
    if decision.allowed {
        Ok(())
    } else {
        Err(
            ApiError::forbidden(rbac::forbidden_message(&attrs)).with_details(json!({
                "name": attrs.name.clone().unwrap_or_default(),
                "group": attrs.api_group,
                "kind": attrs.resource,
            })),
        )
    }
}

/// What RBAC is asked for `verb` on the request's target (its resource, subresource,
/// namespace and name).
fn target_attributes(req: &Req, t: &Target, verb: &str) -> rbac::Attributes {
    rbac::Attributes {
        user: user_info(&req.user),
        verb: verb.into(),
        api_group: t.rt.group.clone(),
        resource: t.rt.plural.clone(),
        subresource: t.sub.clone(),
        namespace: t.ns.clone(),
        name: t.name.clone(),
        path: None,
    }
}

fn user_info(user: &Identity) -> rbac::UserInfo {
    rbac::UserInfo {
        name: user.name.clone(),
        groups: user.groups.clone(),
    }
}

fn non_resource(state: &ApiState, req: &Req) -> Result<(), ApiError> {
    // Health and version are public, as in a real cluster (system:public-info-viewer).
    if matches!(
        req.path.as_str(),
        "/healthz" | "/livez" | "/readyz" | "/version"
    ) {
        return Ok(());
    }
    if req.user.name == "system:anonymous" {
        return Err(ApiError::unauthorized());
    }
    authorize(
        state,
        &req.user,
        rbac::Attributes {
            user: user_info(&req.user),
            verb: req.method.as_str().to_lowercase(),
            path: Some(req.path.clone()),
            ..Default::default()
        },
    )
}

async fn serve(state: &Arc<ApiState>, req: &mut Req) -> Result<Response, ApiError> {
    let segs: Vec<String> = req
        .path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let registry = state.store.registry();
    match segs.as_slice() {
        [] => {
            non_resource(state, req)?;
            let paths: Vec<String> = [
                "/api",
                "/api/v1",
                "/apis",
                "/healthz",
                "/livez",
                "/readyz",
                "/version",
                "/openapi/v3",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .chain(
                registry
                    .group_versions()
                    .iter()
                    .filter(|(g, _)| !g.is_empty())
                    .map(|(g, v)| format!("/apis/{g}/{v}")),
            )
            .collect();
            Ok(json_response(StatusCode::OK, &json!({"paths": paths})))
        }
        ["healthz"] | ["livez"] | ["readyz"] => Ok((StatusCode::OK, "ok").into_response()),
        ["version"] => Ok(json_response(
            StatusCode::OK,
            &json!({
                "major": "1", "minor": "34", "gitVersion": "v1.34.0-testcluster", "gitCommit": "",
                "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
                "compiler": "gc", "platform": "linux/amd64"
            }),
        )),
        ["openapi", "v2"] => Err(ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )),
        ["openapi", "v3"] => {
            non_resource(state, req)?;
            Ok(json_response(StatusCode::OK, &openapi::v3_root(&registry)))
        }
        ["openapi", "v3", rest @ ..] => {
            non_resource(state, req)?;
            let gv = rest.join("/");
            match openapi::v3_group_version(&registry, &gv) {
                Some(doc) => Ok(json_response(StatusCode::OK, &doc)),
                None => Err(ApiError::new(
                    404,
                    "NotFound",
                    format!("openapi document for {gv} not found"),
                )),
            }
        }
        ["api"] => {
            non_resource(state, req)?;
            if discovery::wants_aggregated(req.header("accept")) {
                Ok(aggregated(discovery::aggregated_core(&registry)))
            } else {
                let addr = state.address.get().cloned().unwrap_or_default();
                Ok(json_response(
                    StatusCode::OK,
                    &discovery::api_versions(&addr),
                ))
            }
        }
        ["apis"] => {
            non_resource(state, req)?;
            if discovery::wants_aggregated(req.header("accept")) {
                Ok(aggregated(discovery::aggregated_groups(&registry)))
            } else {
                Ok(json_response(
                    StatusCode::OK,
                    &discovery::api_group_list(&registry),
                ))
            }
        }
        ["api", v] => {
            non_resource(state, req)?;
            discovery::api_resource_list(&registry, "", v)
                .map(|b| json_response(StatusCode::OK, &b))
                .ok_or_else(not_found_path)
        }
        ["apis", g] => {
            non_resource(state, req)?;
            discovery::api_group(&registry, g)
                .map(|b| json_response(StatusCode::OK, &b))
                .ok_or_else(not_found_path)
        }
        ["apis", g, v] => {
            non_resource(state, req)?;
            discovery::api_resource_list(&registry, g, v)
                .map(|b| json_response(StatusCode::OK, &b))
                .ok_or_else(not_found_path)
        }
        ["apis", "authorization.k8s.io", "v1", review] if req.method == Method::POST => {
            access_review(state, req, review)
        }
        ["api", v, rest @ ..] => resource_request(state, req, &registry, "", v, rest).await,
        ["apis", g, v, rest @ ..] => resource_request(state, req, &registry, g, v, rest).await,
        _ => Err(not_found_path()),
    }
}

fn not_found_path() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

fn aggregated(body: Value) -> Response {
    let mut r = json_response(StatusCode::OK, &body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(discovery::AGGREGATED_CONTENT_TYPE),
    );
    r
}

/// Self/SubjectAccessReview: what `kubectl auth can-i` asks.
fn access_review(state: &ApiState, req: &Req, kind: &str) -> Result<Response, ApiError> {
    let body = if req
        .header("content-type")
        .starts_with(protobuf::CONTENT_TYPE)
    {
        protobuf::decode_access_review(&req.body).ok_or_else(|| {
            ApiError::bad_request("the access review is not a protobuf this server can read")
        })?
    } else {
        parse_body(req)?
    };
    let (user, groups) = match kind {
        "selfsubjectaccessreviews" => (req.user.name.clone(), req.user.groups.clone()),
        "subjectaccessreviews" => {
            authorize(
                state,
                &req.user,
                rbac::Attributes {
                    user: user_info(&req.user),
                    verb: "create".into(),
                    api_group: "authorization.k8s.io".into(),
                    resource: kind.into(),
                    ..Default::default()
                },
            )?;
            let spec = &body["spec"];
            let groups = spec["groups"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|g| g.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            (spec["user"].as_str().unwrap_or_default().to_owned(), groups)
        }
        _ => return Err(not_found_path()),
    };
    let spec = &body["spec"];
    let attrs = if let Some(ra) = spec.get("resourceAttributes") {
        let s = |k: &str| ra[k].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
        rbac::Attributes {
            user: rbac::UserInfo {
                name: user.clone(),
                groups: groups.clone(),
            },
            verb: s("verb").unwrap_or_default(),
            api_group: s("group").unwrap_or_default(),
            resource: s("resource").unwrap_or_default(),
            subresource: s("subresource"),
            namespace: s("namespace"),
            name: s("name"),
            path: None,
        }
    } else {
        let na = &spec["nonResourceAttributes"];
        rbac::Attributes {
            user: rbac::UserInfo {
                name: user.clone(),
                groups: groups.clone(),
            },
            verb: na["verb"].as_str().unwrap_or_default().to_owned(),
            path: Some(na["path"].as_str().unwrap_or_default().to_owned()),
            ..Default::default()
        }
    };
    let identity = Identity { name: user, groups };
    let decision = if identity.is_admin() {
        rbac::Decision {
            allowed: true,
            reason: "system:masters".into(),
        }
    } else {
        let (r, cr, rb, crb) = rbac_objects(&state.store, attrs.namespace.as_deref());
        rbac::authorize(&attrs, &r, &cr, &rb, &crb)
    };
    let mut out = body.clone();
    out["apiVersion"] = json!("authorization.k8s.io/v1");
    out["kind"] = json!(if kind == "selfsubjectaccessreviews" {
        "SelfSubjectAccessReview"
    } else {
        "SubjectAccessReview"
    });
    out["metadata"] = json!({"creationTimestamp": null});
    out["status"] = if decision.allowed {
        json!({"allowed": true, "reason": decision.reason})
    } else {
        json!({"allowed": false})
    };
    Ok(json_response(StatusCode::CREATED, &out))
}

async fn resource_request(
    state: &Arc<ApiState>,
    req: &mut Req,
    registry: &crate::resources::Registry,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Response, ApiError> {
    let (ns, rest): (Option<String>, &[&str]) = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if !matches!(*plural, "status" | "finalize") || !tail.is_empty() =>
        {
            (Some((*ns).to_owned()), &rest[2..])
        }
        _ => (None, rest),
    };
    let (plural, name, sub) = match rest {
        [p] => (*p, None, None),
        [p, n] => (*p, Some((*n).to_owned()), None),
        [p, n, s] => (*p, Some((*n).to_owned()), Some((*s).to_owned())),
        _ => return Err(not_found_path()),
    };
    let Some(rt) = registry.get(group, version, plural) else {
        return Err(not_found_path());
    };
    if ns.is_some() && !rt.namespaced {
        return Err(not_found_path());
    }
    if name.is_some() && rt.namespaced && ns.is_none() {
        return Err(not_found_path());
    }
    let sub_ok = match sub.as_deref() {
        None => true,
        Some("status") => rt.status,
        Some("scale") => rt.scale.is_some(),
        Some("log") => rt.log,
        Some("finalize") => rt.is("", "namespaces"),
        Some(_) => false,
    };
    if !sub_ok {
        return Err(not_found_path());
    }
    let t = Target { rt, ns, name, sub };
    let watching = matches!(req.q("watch"), Some("true") | Some("1"));
    let verb = match (&req.method, &t.name) {
        (&Method::GET, None) if watching => "watch",
        (&Method::GET, None) => "list",
        (&Method::GET, Some(_)) => "get",
        (&Method::POST, None) => "create",
        (&Method::PUT, Some(_)) => "update",
        (&Method::PATCH, Some(_)) => "patch",
        (&Method::DELETE, Some(_)) => "delete",
        (&Method::DELETE, None) => "deletecollection",
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({})",
                req.method
            )));
        }
    };
    if req.user.name == "system:anonymous" {
        return Err(ApiError::unauthorized());
    }
    authorize(state, &req.user, target_attributes(req, &t, verb))?;
    let fault_resource = match &t.sub {
        Some(s) => format!("{}/{s}", t.rt.plural),
        None => t.rt.plural.clone(),
    };
    if let Some(e) = state.faults.take(verb, &t.rt.group, &fault_resource) {
        let mut r = error(e.clone());
        if e.code == 429 {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        return Ok(r);
    }
    match verb {
        "get" => match t.sub.as_deref() {
            Some("scale") => get_scale(state, &t),
            Some("log") => pod_log(state, req, &t).await,
            _ => get(state, req, &t),
        },
        "list" => list(state, req, &t),
        "watch" => watch(state, req, &t),
        "create" => create(state, req, &t),
        "update" | "patch" => match t.sub.as_deref() {
            Some("scale") => write_scale(state, req, &t, verb),
            Some("finalize") => finalize_namespace(state, req, &t),
            _ => write(state, req, &t, verb),
        },
        "delete" => delete(state, req, &t),
        _ => delete_collection(state, req, &t),
    }
}

// ---------------------------------------------------------------------------------------
// Responses

fn json_response(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

fn error(e: ApiError) -> Response {
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, &e.status())
}

/// The object as served at the requested version.
fn output(rt: &ResourceType, obj: &Value) -> Value {
    let mut o = obj.clone();
    o["apiVersion"] = Value::from(rt.api_version());
    o["kind"] = Value::from(rt.kind.clone());
    o
}

/// One object in the representation the client asked for (a GET's body, a watch event's
/// object).
fn represent(
    rt: &ResourceType,
    obj: &Value,
    rep: Representation,
    include: table::IncludeObject,
) -> Value {
    match rep {
        Representation::Table => {
            let rv = obj
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default();
            table::table(rt, &[obj], rv, None, include)
        }
        Representation::PartialObjectMetadata => table::partial_object_metadata(&output(rt, obj)),
        Representation::Object => output(rt, obj),
    }
}

fn object_response(req: &Req, rt: &ResourceType, code: StatusCode, obj: &Value) -> Response {
    let include = table::include_object(req.q("includeObject"));
    json_response(code, &represent(rt, obj, req.representation(), include))
}

fn parse_body(req: &Req) -> Result<Value, ApiError> {
    if req.body.is_empty() {
        return Ok(json!({}));
    }
    let ct = req.header("content-type");
    if ct.starts_with(protobuf::CONTENT_TYPE) {
        return protobuf::decode_object(&req.body).ok_or_else(|| {
            ApiError::unsupported_media_type(&format!(
                "{ct} (this test cluster reads protobuf only for access reviews, Secrets, \
                 Namespaces and DeleteOptions; send JSON)"
            ))
        });
    }
    if ct.contains("yaml") {
        let text = std::str::from_utf8(&req.body)
            .map_err(|e| ApiError::bad_request(format!("body is not UTF-8: {e}")))?;
        serde_saphyr::from_str::<Value>(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
    } else {
        serde_json::from_slice(&req.body).map_err(|e| {
            ApiError::bad_request(format!(
                "the object provided is unrecognized or malformed: {e}"
            ))
        })
    }
}

fn key_ns(t: &Target) -> (ResKey, &str) {
    (t.rt.key(), t.ns.as_deref().unwrap_or_default())
}

fn name_of(t: &Target) -> &str {
    t.name.as_deref().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Reads

fn get(state: &ApiState, req: &Req, t: &Target) -> Result<Response, ApiError> {
    let (key, ns) = key_ns(t);
    let obj = state
        .store
        .get(&key, ns, name_of(t))
        .ok_or_else(|| ApiError::not_found(&t.rt.group, &t.rt.plural, name_of(t)))?;
    Ok(object_response(req, &t.rt, StatusCode::OK, &obj))
}

struct Filter {
    ns: Option<String>,
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
}

impl Filter {
    fn from(req: &Req, t: &Target) -> Result<Self, ApiError> {
        let labels = req
            .q("labelSelector")
            .map(LabelSelector::parse)
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = req
            .q("fieldSelector")
            .map(FieldSelector::parse)
            .transpose()
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        if let Some(f) = &fields {
            f.validate_for(&t.rt.group, &t.rt.kind)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        Ok(Self {
            ns: t.ns.clone(),
            labels,
            fields,
        })
    }

    fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.ns
            && obj.pointer("/metadata/namespace").and_then(Value::as_str) != Some(ns)
        {
            return false;
        }
        if let Some(l) = &self.labels
            && !l.matches(obj.pointer("/metadata/labels").and_then(Value::as_object))
        {
            return false;
        }
        self.fields.as_ref().is_none_or(|f| f.matches(obj))
    }
}

/// events.k8s.io Events as core/v1 Events (`kubectl describe` lists only the latter).
fn core_event(e: &Value) -> Value {
    let mut c = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": e["metadata"].clone(),
        "involvedObject": e["regarding"].clone(),
        "reason": e["reason"].clone(),
        "message": e["note"].clone(),
        "type": e["type"].clone(),
        "action": e["action"].clone(),
        "reportingComponent": e["reportingController"].clone(),
        "reportingInstance": e["reportingInstance"].clone(),
        "eventTime": e["eventTime"].clone(),
        "count": e.get("deprecatedCount").cloned().unwrap_or(Value::Null),
        "firstTimestamp": e.get("deprecatedFirstTimestamp").cloned().unwrap_or(Value::Null),
        "lastTimestamp": e.get("deprecatedLastTimestamp").cloned().unwrap_or(Value::Null),
        "source": e.get("deprecatedSource").cloned().unwrap_or_else(|| json!({"component": e["reportingController"]})),
    });
    if let Some(series) = e.get("series") {
        c["series"] =
            json!({"count": series["count"], "lastObservedTime": series["lastObservedTime"]});
        c["count"] = series["count"].clone();
    }
    if let Some(o) = c.as_object_mut() {
        o.retain(|_, v| !v.is_null());
    }
    c
}

fn list(state: &ApiState, req: &Req, t: &Target) -> Result<Response, ApiError> {
    let filter = Filter::from(req, t)?;
    let limit = req
        .q("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let (items, rv) = match req.q("continue") {
        Some(token) => state.store.take_snapshot(token).ok_or_else(|| {
            ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. \
                 You can start a new list without the continue parameter.",
            )
        })?,
        None => {
            let (all, rv) = state.store.list(&t.rt.key(), t.ns.as_deref());
            let mut items: Vec<Arc<Value>> =
                all.into_iter().filter(|o| filter.matches(o)).collect();
            if t.rt.is("", "events") {
                let (ev, _) = state
                    .store
                    .list(&ResKey::new("events.k8s.io", "events"), t.ns.as_deref());
                items.extend(
                    ev.iter()
                        .map(|e| Arc::new(core_event(e)))
                        .filter(|o| filter.matches(o)),
                );
            }
            (items, rv)
        }
    };
    let (page, token, remaining) = match limit {
        Some(l) if items.len() > l => {
            let mut items = items;
            let rest = items.split_off(l);
            let remaining = rest.len();
            let token = state.store.save_snapshot(rest, rv);
            (items, Some(token), Some(remaining))
        }
        _ => (items, None, None),
    };
    let rv_s = rv.to_string();
    let refs: Vec<&Value> = page.iter().map(|v| v.as_ref()).collect();
    let body = match req.representation() {
        Representation::Table => table::table(
            &t.rt,
            &refs,
            &rv_s,
            token.as_deref(),
            table::include_object(req.q("includeObject")),
        ),
        Representation::PartialObjectMetadata => {
            let outs: Vec<Value> = refs.iter().map(|o| output(&t.rt, o)).collect();
            let outs: Vec<&Value> = outs.iter().collect();
            table::partial_object_metadata_list(&outs, &rv_s, token.as_deref())
        }
        Representation::Object => {
            let mut meta = json!({"resourceVersion": rv_s});
            if let Some(tok) = &token {
                meta["continue"] = json!(tok);
            }
            if let Some(r) = remaining {
                meta["remainingItemCount"] = json!(r);
            }
            json!({
                "kind": t.rt.list_kind,
                "apiVersion": t.rt.api_version(),
                "metadata": meta,
                "items": refs.iter().map(|o| output(&t.rt, o)).collect::<Vec<_>>(),
            })
        }
    };
    Ok(json_response(StatusCode::OK, &body))
}

// ---------------------------------------------------------------------------------------
// Watch

fn watch(state: &Arc<ApiState>, req: &Req, t: &Target) -> Result<Response, ApiError> {
    let filter = Filter::from(req, t)?;
    let send_initial = req.q("sendInitialEvents") == Some("true");
    let rv_match = req.q("resourceVersionMatch");
    if send_initial && rv_match != Some("NotOlderThan") {
        return Err(ApiError::unprocessable(
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    if rv_match.is_some() && !send_initial {
        return Err(ApiError::unprocessable(
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    let start = match req.q("resourceVersion") {
        // A streaming list starts from the current state whatever version it names.
        None | Some("0") => WatchStart::Current,
        Some(_) if send_initial => WatchStart::Current,
        Some(rv) => WatchStart::After(
            rv.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?,
        ),
    };
    let timeout = req
        .q("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1800);
    let bookmarks = req.q("allowWatchBookmarks") == Some("true");
    let representation = req.representation();
    let include = table::include_object(req.q("includeObject"));
    let rt = t.rt.clone();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(64);
    let line = |v: Value| -> Bytes {
        let mut b = serde_json::to_vec(&v).unwrap_or_default();
        b.push(b'\n');
        Bytes::from(b)
    };
    let sub = match state.store.watch(&rt.key(), start) {
        Ok(s) => s,
        Err(too_old) => {
            // The real cacher answers 200 and puts the 410 in the stream; an HTTP 410 here
            // would make kube's watcher retry the same resourceVersion forever.
            let e = ApiError::expired(format!(
                "too old resource version: {} ({})",
                too_old.requested, too_old.oldest
            ));
            let body = line(json!({"type": "ERROR", "object": e.status()}));
            return Ok(watch_response(Body::from(body)));
        }
    };
    let faults = state.faults.clone();
    let mut dropped = faults.watch_dropped();
    let bookmark = {
        let rt = rt.clone();
        move |rv: u64, initial_end: bool| -> Value {
            let mut meta = json!({"resourceVersion": rv.to_string()});
            if initial_end {
                meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            json!({"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": meta}})
        }
    };
    let render = move |type_: &str, obj: &Value| -> Value {
        json!({"type": type_, "object": represent(&rt, obj, representation, include)})
    };
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
        let mut progress = sub.rv;
        let mut live = sub.live;
        for e in &sub.backlog {
            if filter.matches(&e.object) {
                let delay = faults.watch_delay();
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                if tx
                    .send(Ok(line(render(e.type_.as_str(), &e.object))))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            progress = progress.max(e.rv);
        }
        if send_initial && tx.send(Ok(line(bookmark(progress, true)))).await.is_err() {
            return;
        }
        loop {
            tokio::select! {
                r = live.recv() => match r {
                    Ok(e) => {
                        // Backlog already covered these.
                        if e.rv <= sub.rv {
                            continue;
                        }
                        progress = e.rv;
                        let now = filter.matches(&e.object);
                        let before = e.old.as_ref().is_some_and(|o| filter.matches(o));
                        let type_ = match (e.type_, before, now) {
                            (EventType::Deleted, _, true) => "DELETED",
                            (EventType::Deleted, _, false) => continue,
                            (EventType::Added, _, true) => "ADDED",
                            (EventType::Modified, true, true) => "MODIFIED",
                            (EventType::Modified, false, true) => "ADDED",
                            (EventType::Modified, true, false) => "DELETED",
                            _ => continue,
                        };
                        let delay = faults.watch_delay();
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        if tx.send(Ok(line(render(type_, &e.object)))).await.is_err() {
                            return;
                        }
                    }
                    // Too slow or the store went away: end the stream, the client resumes
                    // from its last resourceVersion out of the kept history.
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
                },
                _ = tokio::time::sleep_until(deadline) => {
                    if bookmarks {
                        let _ = tx.send(Ok(line(bookmark(progress, false)))).await;
                    }
                    return;
                }
                _ = dropped.recv() => return,
                _ = tx.closed() => return,
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Ok(watch_response(Body::from_stream(stream)))
}

fn watch_response(body: Body) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

// ---------------------------------------------------------------------------------------
// Writes

/// How a write validates fields the schema does not know (`fieldValidation`).
#[derive(Clone, Copy, PartialEq)]
enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

fn field_validation(req: &Req) -> FieldValidation {
    match req.q("fieldValidation") {
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        _ => FieldValidation::Warn,
    }
}

/// Paths present in `before` and gone from `after` (what pruning removed).
fn removed_paths(before: &Value, after: &Value, at: &str, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, v) in b {
                let p = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                match a.get(k) {
                    None => out.push(p),
                    Some(av) => removed_paths(v, av, &p, out),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            for (i, (bv, av)) in b.iter().zip(a).enumerate() {
                removed_paths(bv, av, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The common tail of every write: CRD schema (prune, default, validate), CRD objects'
/// own rules, built-in admission. Returns warnings for the `Warning` header.
fn admit(
    state: &ApiState,
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
    validation: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let mut warnings = Vec::new();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Some(schema_v) = rt.schema.as_ref().filter(|_| rt.crd) {
        let before = obj.clone();
        schema::prune(obj, schema_v);
        let mut unknown = Vec::new();
        removed_paths(&before, obj, "", &mut unknown);
        unknown
            .retain(|p| !p.starts_with("metadata") && p != "status" || !rt.status && p == "status");
        if !unknown.is_empty() {
            match validation {
                FieldValidation::Strict => {
                    let msgs: Vec<String> = unknown
                        .iter()
                        .map(|p| format!("unknown field \"{p}\""))
                        .collect();
                    return Err(ApiError::bad_request(format!(
                        "{}.{} \"{name}\" is invalid: strict decoding error: {}",
                        rt.kind,
                        rt.group,
                        msgs.join(", ")
                    )));
                }
                FieldValidation::Warn => {
                    warnings.extend(unknown.iter().map(|p| format!("unknown field \"{p}\"")))
                }
                FieldValidation::Ignore => {}
            }
        }
        schema::apply_defaults(obj, schema_v);
        let errors = schema::validate(obj, old, schema_v);
        if !errors.is_empty() {
            let causes = errors
                .iter()
                .map(|e| (e.field.clone(), e.reason().to_owned(), e.to_string()))
                .collect();
            return Err(ApiError::invalid(&rt.group, &rt.kind, &name, causes));
        }
    }
    if rt.is("apiextensions.k8s.io", "customresourcedefinitions") {
        crd::default(obj);
        let causes = crd::validate(obj);
        if !causes.is_empty() {
            return Err(ApiError::invalid(&rt.group, &rt.kind, &name, causes));
        }
        obj["status"] = crd::accepted_status(obj);
        if let Some(old) = old {
            // Keep the first transition times when nothing changed.
            if old["status"]["conditions"].is_array() {
                obj["status"]["conditions"] = old["status"]["conditions"].clone();
            }
        }
    }
    admission::admit(rt, obj, old, &state.ips)?;
    Ok(warnings)
}

fn lists_for(rt: &ResourceType) -> Box<dyn ListSemantics + '_> {
    match rt.schema.as_ref().filter(|_| rt.crd) {
        Some(schema) => Box::new(ssa::SchemaLists { schema }),
        None => Box::new(ssa::BuiltinLists),
    }
}

fn check_type(rt: &ResourceType, body: &Value) -> Result<(), ApiError> {
    if let Some(av) = body.get("apiVersion").and_then(Value::as_str)
        && av != rt.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    if let Some(k) = body.get("kind").and_then(Value::as_str)
        && k != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    Ok(())
}

fn check_namespace(t: &Target, body: &mut Value) -> Result<(), ApiError> {
    if !t.rt.namespaced {
        return Ok(());
    }
    let url_ns = t.ns.clone().unwrap_or_else(|| "default".into());
    match body.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() && ns != url_ns => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => {
            body["metadata"]["namespace"] = Value::from(url_ns);
            Ok(())
        }
    }
}

fn with_warnings(mut r: Response, warnings: &[String]) -> Response {
    for w in warnings {
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{}\"", w.replace('"', "'"))) {
            r.headers_mut().append("warning", v);
        }
    }
    r
}

/// Registers (or re-registers) the kinds a CRD serves.
fn register_crd(state: &ApiState, crd_obj: &Value) {
    let group = crd_obj
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let plural = crd_obj
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let types = crd::resource_types(crd_obj);
    state.store.with_registry(|r| {
        r.remove_group_resource(&group, &plural);
        for t in types {
            r.insert(t);
        }
    });
}

fn create(state: &Arc<ApiState>, req: &Req, t: &Target) -> Result<Response, ApiError> {
    let mut body = parse_body(req)?;
    check_type(&t.rt, &body)?;
    check_namespace(t, &mut body)?;
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the object provided is unrecognized or malformed",
        ));
    }
    if let Some(o) = body.as_object_mut() {
        if t.rt.status {
            o.remove("status");
        }
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
    }
    let validation = field_validation(req);
    let mut warnings = Vec::new();
    let manager = req.manager();
    let now = time::now();
    let obj = state
        .store
        .create_with(&t.rt.key(), body, req.dry_run(), |o| {
            warnings = admit(state, &t.rt, o, None, validation)?;
            let lists = lists_for(&t.rt);
            *o = ssa::record_update(
                None,
                o,
                &manager,
                None,
                &t.rt.api_version(),
                &now,
                lists.as_ref(),
            );
            Ok(())
        })?;
    if t.rt.is("apiextensions.k8s.io", "customresourcedefinitions") && !req.dry_run() {
        register_crd(state, &obj);
    }
    Ok(with_warnings(
        object_response(req, &t.rt, StatusCode::CREATED, &obj),
        &warnings,
    ))
}

#[derive(Clone, Copy, PartialEq)]
enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

fn patch_type(req: &Req) -> Result<PatchType, ApiError> {
    let ct = req.header("content-type");
    let base = ct.split(';').next().unwrap_or_default().trim();
    match base {
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(PatchType::Apply),
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

fn conflict_error(conflicts: &[ssa::Conflict], message: String) -> ApiError {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|c| json!({"reason": "FieldManagerConflict", "message": c.cause_message(), "field": c.field}))
        .collect();
    ApiError::conflict(message).with_details(json!({"causes": causes}))
}

fn apply_error(e: ssa::ApplyError) -> ApiError {
    match &e {
        ssa::ApplyError::Conflicts(c) => conflict_error(c, e.to_string()),
        ssa::ApplyError::Invalid(m) => ApiError::bad_request(m.clone()),
    }
}

fn patch_error(e: patch::PatchError) -> ApiError {
    ApiError::unprocessable(e.to_string())
}

/// Applies the request's patch (or replacement body) to `old`.
fn candidate(
    req: &Req,
    t: &Target,
    old: &Value,
    body: &Value,
    verb: &str,
    manager: &str,
    now: &str,
) -> Result<(Value, bool), ApiError> {
    let sub = t.sub.as_deref();
    if verb == "update" {
        return Ok((body.clone(), false));
    }
    let pt = patch_type(req)?;
    let new = match pt {
        PatchType::Merge => {
            let mut n = old.clone();
            patch::merge_patch(&mut n, body);
            n
        }
        PatchType::Json => patch::json_patch(old, body).map_err(patch_error)?,
        PatchType::Strategic => {
            if t.rt.crd {
                return Err(ApiError::unsupported_media_type(
                    "application/strategic-merge-patch+json",
                ));
            }
            patch::strategic_merge_patch(old, body, &patch::BuiltinMergeKeys)
                .map_err(patch_error)?
        }
        PatchType::Apply => {
            check_apply_body(t, body)?;
            let lists = lists_for(&t.rt);
            let api_version = t.rt.api_version();
            let areq = ssa::ApplyRequest {
                manager,
                force: req.q("force") == Some("true"),
                subresource: sub,
                api_version: &api_version,
                now,
            };
            ssa::apply(Some(old), body, &areq, lists.as_ref()).map_err(apply_error)?
        }
    };
    Ok((new, pt == PatchType::Apply))
}

fn check_apply_body(t: &Target, body: &Value) -> Result<(), ApiError> {
    let expected = t.rt.api_version();
    match body.get("apiVersion").and_then(Value::as_str) {
        Some(av) if av == expected => {}
        other => {
            return Err(ApiError::bad_request(format!(
                "Incorrect version specified in apply patch. Specified patch version: {}, expected: {expected}",
                other.unwrap_or_default()
            )));
        }
    }
    if body.get("kind").and_then(Value::as_str) != Some(t.rt.kind.as_str()) {
        return Err(ApiError::bad_request(format!(
            "Incorrect kind specified in apply patch: expected {}",
            t.rt.kind
        )));
    }
    if body.pointer("/metadata/managedFields").is_some() {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    if let Some(n) = body.pointer("/metadata/name").and_then(Value::as_str)
        && n != name_of(t)
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({})",
            name_of(t)
        )));
    }
    Ok(())
}

/// PUT and PATCH of an object or its `/status`.
fn write(state: &Arc<ApiState>, req: &Req, t: &Target, verb: &str) -> Result<Response, ApiError> {
    let mut body = parse_body(req)?;
    let (key, ns) = key_ns(t);
    let name = name_of(t).to_owned();
    let manager = req.manager();
    let now = time::now();
    let validation = field_validation(req);
    if verb == "update" {
        check_type(&t.rt, &body)?;
        check_namespace(t, &mut body)?;
        match body.pointer("/metadata/name").and_then(Value::as_str) {
            Some(n) if n == name => {}
            other => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    other.unwrap_or_default()
                )));
            }
        }
        if t.rt.crd
            && body
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            return Err(ApiError::invalid(
                &t.rt.group,
                &t.rt.kind,
                &name,
                vec![(
                    "metadata.resourceVersion".into(),
                    "FieldValueInvalid".into(),
                    "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
                        .into(),
                )],
            ));
        }
    }
    // Server-side apply creates what does not exist (never through a subresource).
    if verb == "patch" && t.sub.is_none() && state.store.get(&key, ns, &name).is_none() {
        if patch_type(req)? == PatchType::Apply {
            // A create through apply needs `create` on this name as well as `patch` (the
            // API server's patch handler authorizes its createAuthorizerAttributes).
            authorize(state, &req.user, target_attributes(req, t, "create"))?;
            check_apply_body(t, &body)?;
            let lists = lists_for(&t.rt);
            let api_version = t.rt.api_version();
            let areq = ssa::ApplyRequest {
                manager: &manager,
                force: req.q("force") == Some("true"),
                subresource: None,
                api_version: &api_version,
                now: &now,
            };
            let mut obj = ssa::apply(None, &body, &areq, lists.as_ref()).map_err(apply_error)?;
            obj["metadata"]["name"] = Value::from(name.clone());
            check_namespace(t, &mut obj)?;
            if t.rt.status
                && let Some(o) = obj.as_object_mut()
            {
                o.remove("status");
            }
            let mut warnings = Vec::new();
            let created = state.store.create_with(&key, obj, req.dry_run(), |o| {
                warnings = admit(state, &t.rt, o, None, validation)?;
                Ok(())
            })?;
            if t.rt.is("apiextensions.k8s.io", "customresourcedefinitions") && !req.dry_run() {
                register_crd(state, &created);
            }
            return Ok(with_warnings(
                object_response(req, &t.rt, StatusCode::CREATED, &created),
                &warnings,
            ));
        }
        return Err(ApiError::not_found(&t.rt.group, &t.rt.plural, &name));
    }
    let mut warnings = Vec::new();
    let written = state.store.modify(&key, ns, &name, req.dry_run(), |old| {
        let (cand, applied) = candidate(req, t, old, &body, verb, &manager, &now)?;
        let mut new = match t.sub.as_deref() {
            Some("status") => {
                // /status takes only status (and the apply's managedFields) from the request.
                let mut n = old.clone();
                n["status"] = cand.get("status").cloned().unwrap_or(Value::Null);
                if let Some(o) = n.as_object_mut()
                    && o.get("status").is_some_and(Value::is_null)
                {
                    o.remove("status");
                }
                if let Some(mf) = cand.pointer("/metadata/managedFields") {
                    n["metadata"]["managedFields"] = mf.clone();
                }
                if let Some(rv) = cand.pointer("/metadata/resourceVersion") {
                    n["metadata"]["resourceVersion"] = rv.clone();
                }
                n
            }
            _ => {
                let mut n = cand;
                if t.rt.status {
                    match old.get("status") {
                        Some(s) => n["status"] = s.clone(),
                        None => {
                            if let Some(o) = n.as_object_mut() {
                                o.remove("status");
                            }
                        }
                    }
                }
                n
            }
        };
        warnings = admit(state, &t.rt, &mut new, Some(old), validation)?;
        if !applied {
            let lists = lists_for(&t.rt);
            new = ssa::record_update(
                Some(old),
                &new,
                &manager,
                t.sub.as_deref(),
                &t.rt.api_version(),
                &now,
                lists.as_ref(),
            );
        }
        Ok(new)
    })?;
    if t.rt.is("apiextensions.k8s.io", "customresourcedefinitions")
        && written.changed
        && !req.dry_run()
    {
        register_crd(state, &written.object);
    }
    Ok(with_warnings(
        object_response(req, &t.rt, StatusCode::OK, &written.object),
        &warnings,
    ))
}

fn finalize_namespace(state: &Arc<ApiState>, req: &Req, t: &Target) -> Result<Response, ApiError> {
    let body = parse_body(req)?;
    let (key, _) = key_ns(t);
    let written = state
        .store
        .modify(&key, "", name_of(t), req.dry_run(), |old| {
            let mut n = old.clone();
            n["spec"]["finalizers"] = body
                .pointer("/spec/finalizers")
                .cloned()
                .unwrap_or(json!([]));
            Ok(n)
        })?;
    Ok(object_response(req, &t.rt, StatusCode::OK, &written.object))
}

// ---------------------------------------------------------------------------------------
// Scale

fn path_get<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted
        .trim_start_matches('.')
        .split('.')
        .try_fold(obj, |v, k| v.get(k))
}

fn path_set(obj: &mut Value, dotted: &str, value: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = dotted.trim_start_matches('.').split('.').collect();
    for (i, k) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if i == parts.len() - 1 {
            map.insert((*k).to_owned(), value);
            return;
        }
        cur = map.entry((*k).to_owned()).or_insert_with(|| json!({}));
    }
}

fn scale_of(rt: &ResourceType, obj: &Value) -> Result<Value, ApiError> {
    let Some(paths) = &rt.scale else {
        return Err(not_found_path());
    };
    let spec = path_get(obj, &paths.spec_replicas).cloned();
    let spec = match (spec, rt.crd) {
        (Some(v), _) => v,
        (None, true) => {
            return Err(ApiError::internal(format!(
                "the spec replicas field \".{}\" does not exist",
                paths.spec_replicas
            )));
        }
        (None, false) => json!(1),
    };
    let status_replicas = path_get(obj, &paths.status_replicas)
        .cloned()
        .unwrap_or(json!(0));
    let selector = if rt.crd {
        paths
            .label_selector
            .as_deref()
            .and_then(|p| path_get(obj, p))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    } else {
        obj.pointer("/spec/selector")
            .and_then(|s| LabelSelector::from_object(s).ok())
            .map(|s| s.to_string())
            .unwrap_or_default()
    };
    let m = &obj["metadata"];
    let mut status = json!({"replicas": status_replicas});
    if !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
            "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"],
        },
        "spec": {"replicas": spec},
        "status": status,
    }))
}

fn get_scale(state: &ApiState, t: &Target) -> Result<Response, ApiError> {
    let (key, ns) = key_ns(t);
    let obj = state
        .store
        .get(&key, ns, name_of(t))
        .ok_or_else(|| ApiError::not_found(&t.rt.group, &t.rt.plural, name_of(t)))?;
    Ok(json_response(StatusCode::OK, &scale_of(&t.rt, &obj)?))
}

fn write_scale(
    state: &Arc<ApiState>,
    req: &Req,
    t: &Target,
    verb: &str,
) -> Result<Response, ApiError> {
    let body = parse_body(req)?;
    let (key, ns) = key_ns(t);
    let manager = req.manager();
    let now = time::now();
    let paths = t.rt.scale.clone().ok_or_else(not_found_path)?;
    let written = state
        .store
        .modify(&key, ns, name_of(t), req.dry_run(), |old| {
            let current = scale_of(&t.rt, old)?;
            let scale = if verb == "update" {
                body.clone()
            } else {
                match patch_type(req)? {
                    PatchType::Merge | PatchType::Strategic => {
                        let mut s = current.clone();
                        patch::merge_patch(&mut s, &body);
                        s
                    }
                    PatchType::Json => patch::json_patch(&current, &body).map_err(patch_error)?,
                    PatchType::Apply => {
                        let mut s = current.clone();
                        if let Some(r) = body.pointer("/spec/replicas") {
                            s["spec"]["replicas"] = r.clone();
                        }
                        s
                    }
                }
            };
            let replicas = scale
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .filter(|r| *r >= 0)
                .ok_or_else(|| {
                    ApiError::invalid(
                        "autoscaling",
                        "Scale",
                        name_of(t),
                        vec![(
                            "spec.replicas".into(),
                            "FieldValueInvalid".into(),
                            "spec.replicas: Invalid value: must be greater than or equal to 0"
                                .into(),
                        )],
                    )
                })?;
            let mut new = old.clone();
            path_set(&mut new, &paths.spec_replicas, json!(replicas));
            // The Scale's resourceVersion is a precondition on the parent.
            if let Some(rv) = scale
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
            {
                new["metadata"]["resourceVersion"] = json!(rv);
            }
            admission::admit(&t.rt, &mut new, Some(old), &state.ips)?;
            let lists = lists_for(&t.rt);
            Ok(ssa::record_update(
                Some(old),
                &new,
                &manager,
                Some("scale"),
                &t.rt.api_version(),
                &now,
                lists.as_ref(),
            ))
        })?;
    Ok(json_response(
        StatusCode::OK,
        &scale_of(&t.rt, &written.object)?,
    ))
}

// ---------------------------------------------------------------------------------------
// Deletes

fn delete_options(req: &Req) -> Result<DeleteOptions, ApiError> {
    let body = parse_body(req)?;
    let policy = body
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| req.q("propagationPolicy").map(str::to_owned));
    let propagation = match policy.as_deref() {
        None => match body
            .get("orphanDependents")
            .and_then(Value::as_bool)
            .or_else(|| req.q("orphanDependents").map(|v| v == "true"))
        {
            Some(true) => Some(Propagation::Orphan),
            Some(false) => Some(Propagation::Background),
            None => None,
        },
        Some("Background") => Some(Propagation::Background),
        Some("Foreground") => Some(Propagation::Foreground),
        Some("Orphan") => Some(Propagation::Orphan),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
            )));
        }
    };
    let grace = body
        .get("gracePeriodSeconds")
        .and_then(Value::as_i64)
        .or_else(|| req.q("gracePeriodSeconds").and_then(|g| g.parse().ok()));
    let dry_run = req.dry_run()
        || body["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == "All"));
    Ok(DeleteOptions {
        propagation,
        grace_period_seconds: grace,
        precondition_uid: body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_owned),
        precondition_rv: body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_owned),
        dry_run,
    })
}

fn delete_one(
    state: &ApiState,
    t: &Target,
    ns: &str,
    name: &str,
    opts: &DeleteOptions,
) -> Result<Deleted, ApiError> {
    let key = t.rt.key();
    let is_crd = t.rt.is("apiextensions.k8s.io", "customresourcedefinitions");
    let crd_obj = if is_crd {
        state.store.get(&key, ns, name)
    } else {
        None
    };
    let d = state.store.delete(&key, ns, name, opts)?;
    if let (Deleted::Gone(_), Some(crd_obj)) = (&d, crd_obj)
        && !opts.dry_run
    {
        // The CRD's objects go with it (the real server's customresourcecleanup).
        let group = crd_obj
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let plural = crd_obj
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let crkey = ResKey::new(group, plural);
        for o in state.store.list(&crkey, None).0 {
            let m = &o["metadata"];
            state.store.remove(
                &crkey,
                m["namespace"].as_str().unwrap_or_default(),
                m["name"].as_str().unwrap_or_default(),
            );
        }
        state
            .store
            .with_registry(|r| r.remove_group_resource(group, plural));
    }
    Ok(d)
}

fn delete(state: &Arc<ApiState>, req: &Req, t: &Target) -> Result<Response, ApiError> {
    let opts = delete_options(req)?;
    let (_, ns) = key_ns(t);
    let name = name_of(t);
    let d = delete_one(state, t, ns, name, &opts)?;
    let mut r = match d {
        Deleted::Pending(obj) => object_response(req, &t.rt, StatusCode::OK, &obj),
        Deleted::Gone(obj) => {
            if t.rt.is("", "pods") || t.rt.is("", "serviceaccounts") {
                object_response(req, &t.rt, StatusCode::OK, &obj)
            } else {
                json_response(
                    StatusCode::OK,
                    &json!({
                        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                        "details": {"name": name, "group": t.rt.group, "kind": t.rt.plural, "uid": obj["metadata"]["uid"]},
                    }),
                )
            }
        }
    };
    if t.rt.is("batch", "jobs") && opts.propagation.is_none() {
        r = with_warnings(
            r,
            &["child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning".to_owned()],
        );
    }
    Ok(r)
}

fn delete_collection(state: &Arc<ApiState>, req: &Req, t: &Target) -> Result<Response, ApiError> {
    let opts = delete_options(req)?;
    let filter = Filter::from(req, t)?;
    let (items, rv) = state.store.list(&t.rt.key(), t.ns.as_deref());
    let mut deleted = Vec::new();
    for o in items.iter().filter(|o| filter.matches(o)) {
        let m = &o["metadata"];
        let ns = m["namespace"].as_str().unwrap_or_default();
        let name = m["name"].as_str().unwrap_or_default();
        match delete_one(state, t, ns, name, &opts) {
            Ok(Deleted::Gone(o) | Deleted::Pending(o)) => deleted.push(output(&t.rt, &o)),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({"kind": t.rt.list_kind, "apiVersion": t.rt.api_version(), "metadata": {"resourceVersion": rv.to_string()}, "items": deleted}),
    ))
}

// ---------------------------------------------------------------------------------------
// Pod logs

async fn pod_log(state: &Arc<ApiState>, req: &Req, t: &Target) -> Result<Response, ApiError> {
    let (key, ns) = key_ns(t);
    let name = name_of(t).to_owned();
    let pod = state
        .store
        .get(&key, ns, &name)
        .ok_or_else(|| ApiError::not_found("", "pods", &name))?;
    let containers: Vec<String> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let container = match req.q("container") {
        Some(c) => c.to_owned(),
        None if containers.len() == 1 => containers[0].clone(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                containers.join(" ")
            )));
        }
    };
    let previous = req.q("previous") == Some("true");
    let Some(kubelet) = state.kubelet.get() else {
        return Err(ApiError::bad_request("this cluster runs no kubelet"));
    };
    let Some(path) = kubelet.log_path(ns, &name, Some(&container), previous) else {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        )));
    };
    let tail = req.q("tailLines").and_then(|n| n.parse::<usize>().ok());
    let text = tokio::fs::read(&path).await.unwrap_or_default();
    let text = match tail {
        Some(n) => {
            let s = String::from_utf8_lossy(&text);
            let lines: Vec<&str> = s.lines().collect();
            let from = lines.len().saturating_sub(n);
            let mut out = lines[from..].join("\n");
            if !out.is_empty() {
                out.push('\n');
            }
            out.into_bytes()
        }
        None => text,
    };
    if req.q("follow") != Some("true") {
        return Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], text).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(16);
    let kubelet = kubelet.clone();
    let ns = ns.to_owned();
    let start = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    tokio::spawn(async move {
        if tx.send(Ok(Bytes::from(text))).await.is_err() {
            return;
        }
        let mut offset = start;
        loop {
            let running = kubelet.is_running(&ns, &name);
            if let Ok(data) = tokio::fs::read(&path).await
                && (data.len() as u64) > offset
            {
                let chunk = Bytes::copy_from_slice(&data[offset as usize..]);
                offset = data.len() as u64;
                if tx.send(Ok(chunk)).await.is_err() {
                    return;
                }
            }
            if !running {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from_stream(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        ))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()))
}
