//! Conformance through the real `kubectl` (v1.33): apply (client-side and server-side), get
//! with printer columns, describe with Events, wait, scale, delete, explain, auth can-i.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::api::{Widget, WidgetSpec, install_widget_crd};
use crate::support::{Kubectl, client, start, wait_for};

const CRD_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../crds/capacitybenchmark.yaml"
);
const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/capacity-benchmark.yaml"
);

#[tokio::test]
async fn apply_get_explain_and_describe_our_crd() {
    let cluster = start().await;
    let Some(k) = Kubectl::new(&cluster) else {
        return;
    };
    let out = k.ok(&["apply", "-f", CRD_FILE]).await;
    assert!(
        out.contains(
            "customresourcedefinition.apiextensions.k8s.io/capacitybenchmarks.goodput.dev created"
        ),
        "{out}"
    );
    // Client-side apply of a custom resource (merge patch), then again: unchanged.
    let out = k.ok(&["apply", "-f", EXAMPLE]).await;
    assert!(out.contains("created"), "{out}");
    let out = k.ok(&["apply", "-f", EXAMPLE]).await;
    assert!(out.contains("unchanged"), "{out}");
    // Printer columns from the CRD, by short name.
    let out = k.ok(&["get", "cbench"]).await;
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "TARGET",
            "PHASE",
            "POINT",
            "CAPACITY",
            "PER-REPLICA",
            "REPLICAS",
            "AGE"
        ],
        "{out}"
    );
    // kubectl explain reads the CRD's schema from /openapi/v3.
    let out = k.ok(&["explain", "capacitybenchmarks.spec.peak"]).await;
    assert!(
        out.contains("KIND:       CapacityBenchmark") && out.contains("rps"),
        "{out}"
    );
    // Server-side apply of the same file by another manager: no conflict on equal values.
    let out = k
        .ok(&["apply", "--server-side", "--force-conflicts", "-f", EXAMPLE])
        .await;
    assert!(out.contains("serverside-applied"), "{out}");
    // Unknown fields are refused under kubectl's default strict validation.
    let bad = std::fs::read_to_string(EXAMPLE)
        .unwrap()
        .replace("spec:\n", "spec:\n  notAField: 1\n");
    let out = k.run(&["apply", "-f", "-"], Some(&bad)).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("notAField"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // describe shows Events recorded through events.k8s.io (kube's Recorder) as core Events.
    let cb: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "cbench", "-o", "json"]).await).unwrap();
    let item = &cb["items"][0];
    let recorder =
        kube::runtime::events::Recorder::new(client(&cluster).await, "goodput-test".into());
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("goodput.dev/v1alpha1".into()),
        kind: Some("CapacityBenchmark".into()),
        name: item["metadata"]["name"].as_str().map(str::to_owned),
        namespace: Some("default".into()),
        uid: item["metadata"]["uid"].as_str().map(str::to_owned),
        ..Default::default()
    };
    recorder
        .publish(
            &kube::runtime::events::Event {
                type_: kube::runtime::events::EventType::Normal,
                reason: "PointStarted".into(),
                note: Some("cold rate 18.0".into()),
                action: "Benchmark".into(),
                secondary: None,
            },
            &reference,
        )
        .await
        .unwrap();
    let out = k
        .ok(&[
            "describe",
            "cbench",
            item["metadata"]["name"].as_str().unwrap(),
        ])
        .await;
    assert!(
        out.contains("PointStarted") && out.contains("cold rate 18.0"),
        "{out}"
    );
}

#[tokio::test]
async fn wait_scale_and_foreground_delete() {
    let cluster = start().await;
    let c = client(&cluster).await;
    install_widget_crd(&c).await;
    let widgets: Api<Widget> = Api::default_namespaced(c.clone());
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
    let Some(k) = Kubectl::new(&cluster) else {
        return;
    };
    // kubectl wait watches by name until the condition appears.
    let waiter = {
        let kubeconfig = cluster.kubeconfig();
        tokio::spawn(async move {
            Kubectl::with_kubeconfig(&kubeconfig)
                .expect("kubectl is installed")
                .run(
                    &[
                        "wait",
                        "widgets/w",
                        "--for=condition=Ready",
                        "--timeout=30s",
                    ],
                    None,
                )
                .await
        })
    };
    // The condition lands only once the waiter is watching.
    let key = testcluster::resources::ResKey::new("test.goodput.dev", "widgets");
    wait_for("kubectl wait to watch", Duration::from_secs(20), || async {
        (cluster.store().watchers(&key) > 0).then_some(())
    })
    .await;
    widgets
        .patch_status(
            "w",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"replicas": 1, "conditions": [{"type": "Ready", "status": "True"}]}})),
        )
        .await
        .unwrap();
    let out = waiter.await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("condition met"));
    let out = k.ok(&["get", "widgets"]).await;
    assert!(
        out.lines().nth(1).unwrap_or_default().contains("True"),
        "printer column with a condition filter: {out}"
    );
    // kubectl scale through the CRD's /scale.
    k.ok(&["scale", "widgets/w", "--replicas=4"]).await;
    assert_eq!(widgets.get("w").await.unwrap().spec.replicas, 4);
    // delete --cascade=foreground waits for dependents; a held child keeps the owner.
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let owner = widgets.get("w").await.unwrap();
    let child: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "child", "ownerReferences": [kube::Resource::controller_owner_ref(&owner, &()).unwrap()]}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &child).await.unwrap();
    let out = k
        .ok(&[
            "delete",
            "widgets/w",
            "--cascade=foreground",
            "--wait=true",
            "--timeout=30s",
        ])
        .await;
    assert!(out.contains("deleted"), "{out}");
    assert!(widgets.get_opt("w").await.unwrap().is_none());
    assert!(
        cms.get_opt("child").await.unwrap().is_none(),
        "the dependent went first"
    );
}

#[tokio::test]
async fn server_side_apply_of_builtins_and_rbac_checks() {
    let cluster = start().await;
    let Some(k) = Kubectl::new(&cluster) else {
        return;
    };
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: c\n        image: example/web:1\n";
    let out = k
        .ok_in(&["apply", "--server-side", "-f", "-"], Some(deployment))
        .await;
    assert!(out.contains("serverside-applied"), "{out}");
    // Another manager taking replicas conflicts without --force-conflicts.
    let other = deployment.replace("replicas: 0", "replicas: 2");
    let out = k
        .run(
            &["apply", "--server-side", "--field-manager=other", "-f", "-"],
            Some(&other),
        )
        .await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("conflict"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Client-side apply of a built-in (strategic merge patch).
    let out = k
        .ok_in(
            &["apply", "-f", "-"],
            Some(&deployment.replace("image: example/web:1", "image: example/web:2")),
        )
        .await;
    assert!(out.contains("configured"), "{out}");
    let image = k
        .ok(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ])
        .await;
    assert_eq!(image, "example/web:2");
    // RBAC: a ServiceAccount allowed only `get` on ConfigMaps.
    let rbac = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: reader}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: cm-get}\nrules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: reader}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm-get}\nsubjects:\n- {kind: ServiceAccount, name: reader, namespace: default}\n";
    k.ok_in(&["apply", "-f", "-"], Some(rbac)).await;
    let sa = "--as=system:serviceaccount:default:reader";
    assert_eq!(
        k.ok(&["auth", "can-i", "get", "configmaps", sa])
            .await
            .trim(),
        "yes"
    );
    let out = k
        .run(&["auth", "can-i", "create", "configmaps", sa], None)
        .await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    let out = k
        .run(
            &["create", "configmap", "x", "--from-literal=a=b", sa],
            None,
        )
        .await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The same through the ServiceAccount's own token and kube::Client: a real 403.
    let sa_client = crate::support::client_from(&cluster.kubeconfig_for("default", "reader")).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sa_client);
    let e = crate::api::err(
        cms.create(&PostParams::default(), &ConfigMap::default())
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    let admin: Api<ConfigMap> = Api::default_namespaced(client(&cluster).await);
    admin
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "visible"}})).unwrap(),
        )
        .await
        .unwrap();
    assert!(cms.get("visible").await.is_ok(), "get is allowed");
}
