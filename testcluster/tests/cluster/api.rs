//! Conformance through `kube::Client`: the wire behaviours kube-runtime depends on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::support::client as cluster_client;
use crate::support::{client, start, wait_for};

/// A small CRD with status and scale subresources and a CEL rule.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
#[kube(
    group = "test.goodput.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    validation = "self.spec.replicas <= 10"
)]
pub struct WidgetSpec {
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema, PartialEq)]
pub struct WidgetStatus {
    #[serde(default)]
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Deserialize, Serialize, Clone, Debug, JsonSchema, PartialEq)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
}

pub async fn install_widget_crd(client: &kube::Client) {
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.patch(
        "widgets.test.goodput.dev",
        &PatchParams::apply("test").force(),
        &Patch::Apply(Widget::crd()),
    )
    .await
    .expect("CRD applies");
    kube::runtime::wait::await_condition(
        crds,
        "widgets.test.goodput.dev",
        kube::runtime::conditions::is_crd_established(),
    )
    .await
    .expect("CRD established");
}

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

/// The API error (code, reason, message) of a failed call.
pub struct ApiErr {
    pub code: u16,
    pub reason: String,
    pub message: String,
}

pub fn err(e: kube::Error) -> ApiErr {
    match e {
        kube::Error::Api(s) => ApiErr {
            code: s.code,
            reason: s.reason.clone(),
            message: s.message.clone(),
        },
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn crud_conflicts_and_no_op_writes() {
    let cluster = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client(&cluster).await);
    let created = api
        .create(&PostParams::default(), &cm("a", &[("k", "1")]))
        .await
        .unwrap();
    let rv = created.resource_version().unwrap();
    assert!(created.uid().is_some() && created.metadata.creation_timestamp.is_some());
    let e = err(api
        .create(&PostParams::default(), &cm("a", &[("k", "1")]))
        .await
        .unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    // A merge patch to the current value changes nothing: same resourceVersion.
    let same = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(same.resource_version().unwrap(), rv);
    let changed = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "2"}})),
        )
        .await
        .unwrap();
    assert_ne!(changed.resource_version().unwrap(), rv);
    // A replace with the stale resourceVersion is a 409 Conflict.
    let mut stale = created.clone();
    stale.data = Some(BTreeMap::from([("k".into(), "3".into())]));
    let e = err(api
        .replace("a", &PostParams::default(), &stale)
        .await
        .unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    let e = err(api.get("missing").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
    api.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(api.get_opt("a").await.unwrap().is_none());
}

#[tokio::test]
async fn selectors_and_pagination() {
    let cluster = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client(&cluster).await);
    for i in 0..7 {
        let mut c = cm(&format!("c{i}"), &[]);
        c.metadata.labels = Some(BTreeMap::from([
            ("tier".into(), if i % 2 == 0 { "web" } else { "db" }.into()),
            ("idx".into(), i.to_string()),
        ]));
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    };
    let web = api
        .list(&ListParams::default().labels("tier=web"))
        .await
        .unwrap();
    assert_eq!(names(web), ["c0", "c2", "c4", "c6"]);
    let set = api
        .list(&ListParams::default().labels("idx in (1,3),tier!=web"))
        .await
        .unwrap();
    assert_eq!(names(set), ["c1", "c3"]);
    let notin = api
        .list(&ListParams::default().labels("idx notin (0,1,2,3,4,5)"))
        .await
        .unwrap();
    assert_eq!(names(notin), ["c6"]);
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=c5"))
        .await
        .unwrap();
    assert_eq!(names(by_name), ["c5"]);
    let e = err(api
        .list(&ListParams::default().fields("spec.nope=x"))
        .await
        .unwrap_err());
    assert_eq!(e.code, 400);
    // Pages of 3 with continue tokens, from one snapshot.
    let first = api.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(first.items.len(), 3);
    let token = first.metadata.continue_.clone().expect("a continue token");
    api.create(&PostParams::default(), &cm("zz-late", &[]))
        .await
        .unwrap();
    let second = api
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap();
    let third = api
        .list(
            &ListParams::default()
                .limit(3)
                .continue_token(second.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(
        names(third.clone()),
        ["c6"],
        "the snapshot does not see the later object"
    );
    assert!(
        third
            .metadata
            .continue_
            .as_deref()
            .is_none_or(str::is_empty)
    );
}

#[tokio::test]
async fn watcher_replays_then_relists_after_compaction() {
    let cluster = start().await;
    let c = client(&cluster).await;
    let api: Api<ConfigMap> = Api::default_namespaced(c);
    api.create(&PostParams::default(), &cm("before", &[]))
        .await
        .unwrap();
    let mut stream = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut inits = 0;
    let mut seen = Vec::new();
    // Init, InitApply(before), InitDone.
    loop {
        match stream.next().await.unwrap().unwrap() {
            watcher::Event::Init => inits += 1,
            watcher::Event::InitApply(o) => seen.push(format!("init {}", o.name_any())),
            watcher::Event::InitDone => break,
            e => panic!("unexpected {e:?}"),
        }
    }
    api.create(&PostParams::default(), &cm("x", &[("k", "1")]))
        .await
        .unwrap();
    api.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    api.delete("x", &DeleteParams::default()).await.unwrap();
    for expect in ["apply x 1", "apply x 2", "delete x"] {
        let got = match stream.next().await.unwrap().unwrap() {
            watcher::Event::Apply(o) => {
                format!("apply {} {}", o.name_any(), o.data.unwrap_or_default()["k"])
            }
            watcher::Event::Delete(o) => format!("delete {}", o.name_any()),
            e => panic!("unexpected {e:?}"),
        };
        assert_eq!(got, expect);
    }
    // History compacted and the stream cut: the watcher resumes, gets an in-stream 410
    // and starts over with a fresh list (a second Init), rather than retrying forever.
    api.create(&PostParams::default(), &cm("y", &[]))
        .await
        .unwrap();
    match stream.next().await.unwrap().unwrap() {
        watcher::Event::Apply(o) => assert_eq!(o.name_any(), "y"),
        e => panic!("unexpected {e:?}"),
    }
    cluster.store().compact();
    cluster.faults().drop_watches();
    api.create(&PostParams::default(), &cm("z", &[]))
        .await
        .unwrap();
    let relisted = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match stream.next().await {
                Some(Ok(watcher::Event::Init)) => return true,
                Some(_) => continue,
                None => return false,
            }
        }
    })
    .await
    .expect("the watcher relists within 20 s");
    assert!(relisted);
    assert_eq!(inits, 1);
}

#[tokio::test]
async fn watch_of_a_thousand_objects_delivers_every_change() {
    let cluster = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client(&cluster).await);
    let mut stream = watcher(api.clone(), watcher::Config::default()).boxed();
    loop {
        if let watcher::Event::InitDone = stream.next().await.unwrap().unwrap() {
            break;
        }
    }
    let writer = {
        let api = api.clone();
        tokio::spawn(async move {
            for i in 0..1000 {
                api.create(
                    &PostParams::default(),
                    &cm(&format!("o{i:04}"), &[("v", "0")]),
                )
                .await
                .unwrap();
            }
            for i in 0..1000 {
                api.patch(
                    &format!("o{i:04}"),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"v": "1"}})),
                )
                .await
                .unwrap();
            }
        })
    };
    let mut created = std::collections::HashSet::new();
    let mut modified = std::collections::HashSet::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        while modified.len() < 1000 {
            match stream.next().await.unwrap().unwrap() {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                    let v = o
                        .data
                        .as_ref()
                        .and_then(|d| d.get("v").cloned())
                        .unwrap_or_default();
                    if v == "0" {
                        created.insert(o.name_any());
                    } else {
                        modified.insert(o.name_any());
                    }
                }
                _ => {}
            }
        }
    })
    .await
    .expect("every change arrives within 60 s");
    writer.await.unwrap();
    assert_eq!(modified.len(), 1000);
    assert!(created.len() >= 990, "creations seen: {}", created.len());
}

#[tokio::test]
async fn server_side_apply_conflicts_force_and_removal() {
    let cluster = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client(&cluster).await);
    let body = |data: serde_json::Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": data});
    let a = PatchParams::apply("alice");
    let created = api
        .patch("s", &a, &Patch::Apply(body(json!({"x": "1", "y": "1"}))))
        .await
        .unwrap();
    assert_eq!(created.managed_fields().len(), 1);
    // Same body again: a no-op.
    let again = api
        .patch("s", &a, &Patch::Apply(body(json!({"x": "1", "y": "1"}))))
        .await
        .unwrap();
    assert_eq!(again.resource_version(), created.resource_version());
    // Another manager changing alice's field conflicts, unless forced.
    let b = PatchParams::apply("bob");
    let e = err(api
        .patch("s", &b, &Patch::Apply(body(json!({"x": "2"}))))
        .await
        .unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("conflict with \"alice\"") && e.message.contains(".data.x"),
        "{}",
        e.message
    );
    let forced = api
        .patch(
            "s",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(body(json!({"x": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.as_ref().unwrap()["x"], "2");
    // Alice stops applying y: it is removed (she was its only owner).
    let dropped = api
        .patch("s", &a, &Patch::Apply(body(json!({}))))
        .await
        .unwrap();
    let data = dropped.data.unwrap_or_default();
    assert!(!data.contains_key("y"), "{data:?}");
    assert_eq!(data["x"], "2", "bob's field stays");
    // A resourceVersion in the apply body is a precondition.
    let mut stale = body(json!({"x": "2"}));
    stale["metadata"]["resourceVersion"] = json!("1");
    let e = err(api.patch("s", &b, &Patch::Apply(stale)).await.unwrap_err());
    assert_eq!(e.code, 409);
}

#[tokio::test]
async fn custom_resources_status_generation_scale_and_validation() {
    let cluster = start().await;
    let c = client(&cluster).await;
    install_widget_crd(&c).await;
    let api: Api<Widget> = Api::default_namespaced(c);
    let w = Widget::new(
        "w",
        WidgetSpec {
            replicas: 2,
            color: None,
        },
    );
    let mut body = serde_json::to_value(&w).unwrap();
    body["status"] = json!({"replicas": 9});
    body["spec"]["unknown"] = json!(true);
    let created: Widget = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(body.clone()).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.status.is_none(), "status is dropped on create");
    // Status writes go only through /status, and never move generation.
    let st = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"replicas": 2, "selector": "app=w"}, "spec": {"replicas": 5}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(st.status.as_ref().unwrap().replicas, 2);
    assert_eq!(
        st.spec.replicas, 2,
        "spec changes through /status are ignored"
    );
    assert_eq!(st.metadata.generation, Some(1));
    let sp = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"replicas": 0}})),
        )
        .await
        .unwrap();
    assert_eq!(sp.metadata.generation, Some(2));
    assert_eq!(
        sp.status.as_ref().unwrap().replicas,
        2,
        "status changes through the main resource are ignored"
    );
    // /scale reads and writes the CRD's declared paths.
    let scale = api.get_scale("w").await.unwrap();
    assert_eq!(scale.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(
        scale.status.as_ref().unwrap().selector.as_deref(),
        Some("app=w")
    );
    api.patch_scale(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await
    .unwrap();
    let after = api.get("w").await.unwrap();
    assert_eq!(after.spec.replicas, 4);
    assert_eq!(after.metadata.generation, Some(3));
    // The CRD's CEL rule refuses 11 replicas with a 422.
    let e = err(api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 11}})),
        )
        .await
        .unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    // Schema types are enforced.
    let e = err(api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": "many"}})),
        )
        .await
        .unwrap_err());
    assert_eq!(e.code, 422);
    // Strategic merge patch is not for custom resources.
    let e = err(api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap_err());
    assert_eq!(e.code, 415);
}

#[tokio::test]
async fn finalizers_hold_deletion_until_the_reconciler_cleans_up() {
    use kube::runtime::finalizer::{Event as Fin, finalizer};
    let cluster = start().await;
    let c = client(&cluster).await;
    let api: Api<ConfigMap> = Api::default_namespaced(c);
    api.create(&PostParams::default(), &cm("f", &[]))
        .await
        .unwrap();
    let cleaned = Arc::new(AtomicUsize::new(0));
    let run = |obj: Arc<ConfigMap>| {
        let api = api.clone();
        let cleaned = cleaned.clone();
        async move {
            finalizer(&api, "test.goodput.dev/cleanup", obj, |ev| async move {
                match ev {
                    Fin::Apply(_) => Ok::<_, kube::Error>(Action::await_change()),
                    Fin::Cleanup(_) => {
                        cleaned.fetch_add(1, Ordering::SeqCst);
                        Ok(Action::await_change())
                    }
                }
            })
            .await
        }
    };
    // First pass adds the finalizer (a JSON patch whose `test` of the absent list is null).
    run(Arc::new(api.get("f").await.unwrap())).await.unwrap();
    let with = api.get("f").await.unwrap();
    assert_eq!(with.finalizers(), ["test.goodput.dev/cleanup"]);
    api.delete("f", &DeleteParams::default()).await.unwrap();
    let marked = api.get("f").await.unwrap();
    assert!(
        marked.metadata.deletion_timestamp.is_some(),
        "marked, not removed"
    );
    run(Arc::new(marked)).await.unwrap();
    assert_eq!(cleaned.load(Ordering::SeqCst), 1);
    assert!(
        api.get_opt("f").await.unwrap().is_none(),
        "gone once the finalizer is removed"
    );
}

#[tokio::test]
async fn controller_reacts_to_changes_and_is_idle_when_nothing_changes() {
    let cluster = start().await;
    let c = client(&cluster).await;
    install_widget_crd(&c).await;
    let widgets: Api<Widget> = Api::default_namespaced(c.clone());
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let reconciles = Arc::new(AtomicUsize::new(0));
    struct Ctx {
        client: kube::Client,
        reconciles: Arc<AtomicUsize>,
    }
    async fn reconcile(w: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
        ctx.reconciles.fetch_add(1, Ordering::SeqCst);
        let ns = w.namespace().unwrap_or_default();
        let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
        let owner = w.controller_owner_ref(&()).expect("owner ref");
        let child = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{}-child", w.name_any()), "ownerReferences": [owner]},
            "data": {"replicas": w.spec.replicas.to_string()},
        });
        cms.patch(
            &format!("{}-child", w.name_any()),
            &PatchParams::apply("widget-controller").force(),
            &Patch::Apply(child),
        )
        .await?;
        let widgets: Api<Widget> = Api::namespaced(ctx.client.clone(), &ns);
        let status = json!({"apiVersion": "test.goodput.dev/v1", "kind": "Widget", "status": {"replicas": w.spec.replicas, "conditions": [{"type": "Ready", "status": "True"}]}});
        widgets
            .patch_status(
                &w.name_any(),
                &PatchParams::apply("widget-controller").force(),
                &Patch::Apply(status),
            )
            .await?;
        Ok(Action::await_change())
    }
    fn error_policy(_: Arc<Widget>, _: &kube::Error, _: Arc<Ctx>) -> Action {
        Action::requeue(Duration::from_millis(200))
    }
    let ctx = Arc::new(Ctx {
        client: c.clone(),
        reconciles: reconciles.clone(),
    });
    let controller = tokio::spawn(
        Controller::new(widgets.clone(), watcher::Config::default())
            .owns(cms.clone(), watcher::Config::default())
            .run(reconcile, error_policy, ctx)
            .for_each(|_| async {}),
    );
    // Create → child ConfigMap and status.
    widgets
        .create(
            &PostParams::default(),
            &Widget::new(
                "w",
                WidgetSpec {
                    replicas: 1,
                    color: None,
                },
            ),
        )
        .await
        .unwrap();
    wait_for("the child ConfigMap", Duration::from_secs(10), || async {
        cms.get_opt("w-child")
            .await
            .unwrap()
            .filter(|c| c.data.as_ref().unwrap()["replicas"] == "1")
    })
    .await;
    // Spec update → child follows.
    widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    wait_for(
        "the child to follow the spec",
        Duration::from_secs(10),
        || async {
            cms.get_opt("w-child")
                .await
                .unwrap()
                .filter(|c| c.data.as_ref().unwrap()["replicas"] == "3")
        },
    )
    .await;
    // An owned object's change triggers the owner's reconcile, which repairs it.
    cms.patch(
        "w-child",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"replicas": "tampered"}})),
    )
    .await
    .unwrap();
    wait_for(
        "the controller to repair its child",
        Duration::from_secs(10),
        || async {
            cms.get_opt("w-child")
                .await
                .unwrap()
                .filter(|c| c.data.as_ref().unwrap()["replicas"] == "3")
        },
    )
    .await;
    // Steady state: no-op applies produce no events, so no reconciles for 10 s. First let
    // the reconcile the repair itself triggered finish (a second with no reconcile).
    let mut last = reconciles.load(Ordering::SeqCst);
    wait_for("the controller to settle", Duration::from_secs(10), || {
        let reconciles = reconciles.clone();
        let seen = last;
        last = reconciles.load(Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            (reconciles.load(Ordering::SeqCst) == seen).then_some(())
        }
    })
    .await;
    let before = reconciles.load(Ordering::SeqCst);
    let rv = cluster.store().current_rv();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        reconciles.load(Ordering::SeqCst),
        before,
        "reconciles while nothing changed"
    );
    assert_eq!(
        cluster.store().current_rv(),
        rv,
        "writes while nothing changed"
    );
    // Deleting the owner garbage-collects the child.
    widgets
        .delete("w", &DeleteParams::background())
        .await
        .unwrap();
    wait_for(
        "the child to be collected",
        Duration::from_secs(10),
        || async {
            cms.get_opt("w-child")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    controller.abort();
}

#[tokio::test]
async fn deployment_scale_subresource_and_generation() {
    let cluster = start().await;
    let api: Api<Deployment> = Api::default_namespaced(client(&cluster).await);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "unknown:1"}]}}}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let scale = api.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(0));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=web"));
    let scaled = api
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(0));
    let after = api.get("web").await.unwrap();
    assert_eq!(
        after.metadata.generation,
        Some(1),
        "a no-op scale moves nothing"
    );
    let mut s = api.get_scale("web").await.unwrap();
    s.spec.as_mut().unwrap().replicas = Some(0);
    s.metadata.resource_version = Some("1".into());
    let e = err(api
        .replace_scale("web", &PostParams::default(), &s)
        .await
        .unwrap_err());
    assert_eq!(e.code, 409, "a stale Scale resourceVersion is a conflict");
    // Annotation changes bump a Deployment's generation; label changes do not.
    let a = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"x": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(a.metadata.generation, Some(2));
    let l = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(l.metadata.generation, Some(2));
    // A strategic merge patch merges containers by name.
    let p = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "s:1"}]}}}})),
        )
        .await
        .unwrap();
    let names: Vec<String> = p
        .spec
        .template
        .spec
        .unwrap()
        .containers
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[tokio::test]
async fn namespaces_must_exist_and_their_deletion_empties_them() {
    let cluster = start().await;
    let c = client(&cluster).await;
    let e = err(Api::<ConfigMap>::namespaced(c.clone(), "nope")
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap_err());
    assert_eq!(e.code, 404);
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
    )
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "team");
    cms.create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    let mut held = cm("held", &[]);
    held.metadata.finalizers = Some(vec!["test/hold".into()]);
    cms.create(&PostParams::default(), &held).await.unwrap();
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    let ns = nss.get("team").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    let e = err(cms
        .create(&PostParams::default(), &cm("b", &[]))
        .await
        .unwrap_err());
    assert_eq!(e.code, 403, "no new objects in a terminating namespace");
    wait_for(
        "the unheld ConfigMap to go",
        Duration::from_secs(10),
        || async { cms.get_opt("a").await.unwrap().is_none().then_some(()) },
    )
    .await;
    assert!(
        nss.get_opt("team").await.unwrap().is_some(),
        "a finalizer holds the namespace"
    );
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    wait_for("the namespace to go", Duration::from_secs(10), || async {
        nss.get_opt("team").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn garbage_collection_background_foreground_orphan() {
    let cluster = start().await;
    let c = client(&cluster).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c);
    let mk_owner_and_child = |name: &'static str| {
        let cms = cms.clone();
        async move {
            let owner = cms
                .create(&PostParams::default(), &cm(name, &[]))
                .await
                .unwrap();
            let mut child = cm(&format!("{name}-child"), &[]);
            child.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
            cms.create(&PostParams::default(), &child).await.unwrap();
        }
    };
    mk_owner_and_child("bg").await;
    mk_owner_and_child("fg").await;
    mk_owner_and_child("or").await;
    cms.delete("bg", &DeleteParams::background()).await.unwrap();
    wait_for(
        "background: the child goes",
        Duration::from_secs(10),
        || async {
            cms.get_opt("bg-child")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    let mut hold = cms.get("fg-child").await.unwrap();
    hold.metadata.finalizers = Some(vec!["test/hold".into()]);
    hold.metadata.managed_fields = None;
    cms.replace("fg-child", &PostParams::default(), &hold)
        .await
        .unwrap();
    cms.delete("fg", &DeleteParams::foreground()).await.unwrap();
    let owner = wait_for(
        "foreground: the child is being deleted",
        Duration::from_secs(10),
        || async {
            let child = cms.get_opt("fg-child").await.unwrap()?;
            child.metadata.deletion_timestamp.as_ref()?;
            cms.get_opt("fg").await.unwrap()
        },
    )
    .await;
    assert!(
        owner.finalizers().iter().any(|f| f == "foregroundDeletion"),
        "{:?}",
        owner.finalizers()
    );
    cms.patch(
        "fg-child",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    wait_for(
        "foreground: the owner goes after its child",
        Duration::from_secs(10),
        || async { cms.get_opt("fg").await.unwrap().is_none().then_some(()) },
    )
    .await;
    cms.delete("or", &DeleteParams::orphan()).await.unwrap();
    wait_for(
        "orphan: the owner goes",
        Duration::from_secs(10),
        || async { cms.get_opt("or").await.unwrap().is_none().then_some(()) },
    )
    .await;
    let child = cms.get("or-child").await.unwrap();
    assert!(
        child.owner_references().is_empty(),
        "orphaned child keeps no owner reference"
    );
}

#[tokio::test]
async fn metadata_watches_and_tables() {
    let cluster = start().await;
    let c = client(&cluster).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c);
    cms.create(&PostParams::default(), &cm("m", &[("k", "v")]))
        .await
        .unwrap();
    let meta = cms.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(meta.items.len(), 1);
    assert_eq!(meta.items[0].metadata.name.as_deref(), Some("m"));
    let metas: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::default_namespaced(cluster_client(&cluster).await);
    let (reader, writer) = kube::runtime::reflector::store();
    let stream = kube::runtime::reflector(writer, watcher(metas, watcher::Config::default()));
    let mut stream = stream.boxed();
    let mut got = Vec::new();
    while let Some(Ok(ev)) = stream.next().await {
        match ev {
            watcher::Event::InitApply(m) => got.extend(m.metadata.name.clone()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(got, ["m"]);
    // The reflector's cache holds the metadata-only object.
    reader.wait_until_ready().await.unwrap();
    assert_eq!(
        reader
            .state()
            .iter()
            .map(|m| m.name_any())
            .collect::<Vec<_>>(),
        ["m"]
    );
}

#[tokio::test]
async fn selector_watches_see_objects_enter_and_leave() {
    let cluster = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client(&cluster).await);
    let mut stream = watcher(api.clone(), watcher::Config::default().labels("tier=web")).boxed();
    loop {
        if let watcher::Event::InitDone = stream.next().await.unwrap().unwrap() {
            break;
        }
    }
    api.create(&PostParams::default(), &cm("s", &[]))
        .await
        .unwrap();
    let label = |tier: &str| Patch::Merge(json!({"metadata": {"labels": {"tier": tier}}}));
    // Into the selector: the watcher sees it appear; out of it: a delete.
    api.patch("s", &PatchParams::default(), &label("web"))
        .await
        .unwrap();
    match stream.next().await.unwrap().unwrap() {
        watcher::Event::Apply(o) => assert_eq!(o.labels()["tier"], "web"),
        e => panic!("expected the object to enter, got {e:?}"),
    }
    api.patch("s", &PatchParams::default(), &label("db"))
        .await
        .unwrap();
    match stream.next().await.unwrap().unwrap() {
        watcher::Event::Delete(o) => assert_eq!(o.name_any(), "s"),
        e => panic!("expected the object to leave, got {e:?}"),
    }
}

#[tokio::test]
async fn a_watch_ends_at_its_timeout_with_a_bookmark() {
    use kube::api::{WatchEvent, WatchParams};
    let cluster = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client(&cluster).await);
    api.create(&PostParams::default(), &cm("b", &[]))
        .await
        .unwrap();
    let list = api.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let events: Vec<_> = api
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap()
        .collect()
        .await;
    match events.last() {
        Some(Ok(WatchEvent::Bookmark(b))) => assert_eq!(b.metadata.resource_version, rv),
        other => panic!("expected a closing bookmark, got {other:?}"),
    }
}

/// Server-side apply that creates an object needs `create` on it as well as `patch` (the
/// API server's patch handler authorizes a create for that name); applying to an object
/// that exists needs `patch` only.
#[tokio::test]
async fn an_apply_that_creates_needs_the_create_verb() {
    let cluster = start().await;
    let admin = client(&cluster).await;
    let rbac = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "applier"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "cm-patch"},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "applier"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-patch"},
               "subjects": [{"kind": "ServiceAccount", "name": "applier", "namespace": "default"}]}),
    ];
    for object in rbac {
        let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
        let gvk = kube::api::GroupVersionKind::try_from(object.types.as_ref().unwrap()).unwrap();
        let (ar, _) = kube::discovery::pinned_kind(&admin, &gvk).await.unwrap();
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(admin.clone(), "default", &ar);
        api.create(&PostParams::default(), &object).await.unwrap();
    }
    let sa = crate::support::client_from(&cluster.kubeconfig_for("default", "applier")).await;
    let maps: Api<ConfigMap> = Api::default_namespaced(sa);
    let apply = PatchParams::apply("applier");
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"},
                      "data": {"a": "1"}});
    let e = err(maps
        .patch("applied", &apply, &Patch::Apply(&body))
        .await
        .unwrap_err());
    assert_eq!(
        (e.code, e.reason.as_str()),
        (403, "Forbidden"),
        "{}",
        e.message
    );
    assert!(e.message.contains("cannot create"), "{}", e.message);
    // Once the object exists, applying to it is a patch.
    Api::<ConfigMap>::default_namespaced(admin)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "applied"}})).unwrap(),
        )
        .await
        .unwrap();
    let applied = maps
        .patch("applied", &apply, &Patch::Apply(&body))
        .await
        .unwrap();
    assert_eq!(applied.data.unwrap()["a"], "1");
}
