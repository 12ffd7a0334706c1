//! vLLM in the test cluster: a Deployment of two vLLM pods (the kubelet runs the image
//! `vllm-cpu` as `tests/engines/serve-vllm.sh`, each pod on its own loopback address) behind
//! a Service, benchmarked by `goodput bench` through the Service's address and by the
//! operator through the Service itself; a ServingPlan plans replicas on the operator's
//! evidence, applies three, and revalidates them on the three real pods (to its verdict with
//! `GOODPUT_REAL_ENGINE_FULL_REVALIDATION=1`; by default until it measures on them).
//!
//! Two cores: the engines share the engine's CPU ([`engine_fixture::ENGINE_CPUS`]); the
//! cluster, the operator, the load generator's pods and `goodput bench` run on the other
//! ([`engine_fixture::CLIENT_CPUS`]), as nodes would keep them apart. Three engines on one
//! CPU cannot carry three times what one carries, so the revalidation may well find a
//! shortfall: the test holds the plan to what it measured, whichever way it fell.

use std::path::Path;
use std::time::{Duration, Instant};

use goodput::api::conditions::plan as plan_cond;
use goodput::api::{ModeCapacity, Phase, ServingPlan, Verification};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use crate::engine_fixture::{self, CLIENT_CPUS, ENGINE_CPUS, MODEL};
use crate::fixture::{self, NS};
use crate::harness;

/// The Deployment, its pods' `app` label and the Service.
const APP: &str = "tiny-llama";
/// The engine's port in each pod.
const PORT: u16 = 8000;
/// The operator's benchmark, the ServingPlan's evidence.
const BENCHMARK: &str = "tiny-llama-capacity";
const PLAN: &str = "tiny-llama";
/// What the Deployment declares it runs: what the example's manifest measured.
const IDENTITY: [(&str, &str); 5] = [
    ("goodput.dev/model", "goodput/tiny-llama-random"),
    ("goodput.dev/model-revision", "20261206"),
    ("goodput.dev/engine-version", "0.32.0"),
    ("goodput.dev/tp", "1"),
    ("goodput.dev/workload-mix", "short=0.5,long=0.5"),
];

/// The whole process on the client's CPU while it holds the machine (its threads and every
/// process it starts from now on: the cluster's pods, the operator), and back on every CPU
/// when dropped. The engines' script pins them to the engine's CPU itself.
struct OnClientCpus {
    all: String,
}

impl OnClientCpus {
    fn pin() -> OnClientCpus {
        // SAFETY: sysconf reads a system constant.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1);
        let all = format!("0-{}", cpus - 1);
        set_affinity(CLIENT_CPUS);
        OnClientCpus { all }
    }
}

impl Drop for OnClientCpus {
    fn drop(&mut self) {
        set_affinity(&self.all);
    }
}

/// Every thread of this process on `cpus`.
fn set_affinity(cpus: &str) {
    let status = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &std::process::id().to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("taskset runs");
    assert!(status.success(), "taskset -a -p -c {cpus}: {status}");
}

/// The image `vllm-cpu`: the fixture's script serving the tiny model on the pod's address.
fn engine_image(venv: &Path, model: &Path) -> String {
    format!(
        "GOODPUT_ENGINE_HOST=\"$POD_IP\" GOODPUT_ENGINE_CPUS={ENGINE_CPUS} exec bash '{}' '{}' '{}' \"$@\"",
        engine_fixture::serve_vllm().display(),
        venv.display(),
        model.display()
    )
}

/// The Deployment of `replicas` vLLM pods, declaring what they run. Service links are off,
/// as vLLM's own deployment guides advise: a Service named `vllm` would set `VLLM_PORT`,
/// which the engine reads as its own setting.
fn deployment(replicas: u32) -> Deployment {
    let annotations: serde_json::Map<String, serde_json::Value> = IDENTITY
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": APP, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": {
                    "enableServiceLinks": false,
                    "containers": [{
                        "name": "vllm", "image": "vllm-cpu:0.32.0",
                        "args": [PORT.to_string(), MODEL],
                        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                        "ports": [{"name": "http", "containerPort": PORT}],
                        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 2}
                    }]
                }
            }
        }
    }))
    .expect("a Deployment")
}

fn service() -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": APP},
        "spec": {"selector": {"app": APP}, "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]}
    }))
    .expect("a Service")
}

/// `text` with `from` replaced by `to`, which must occur exactly once.
fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "{from:?} in the example");
    text.replacen(from, to, 1)
}

/// The vLLM example as a benchmark of the two-pod Deployment, `target` in place of its URL,
/// with half its work per request (two engines sharing a core batch less well than one
/// owning it) and points of 240 requests (100 successes per class at least), so that three
/// sweeps of real time fit the suite's budget.
fn benchmark_yaml(target: &str) -> String {
    let mut yaml = crate::EXAMPLE.to_owned();
    for (from, to) in [
        ("name: tiny-llama-vllm-cpu", format!("name: {BENCHMARK}")),
        ("    url: http://127.0.0.1:18000\n", target.to_owned()),
        ("    replicas: 1\n", "    replicas: 2\n".to_owned()),
        (
            "placement: {tp: 1, pp: 1, dp: 1, replicas: 1, gpus: 1}",
            "placement: {tp: 1, pp: 1, dp: 1, replicas: 2, gpus: 2}".to_owned(),
        ),
        (
            "initial_scheduled_requests: 360",
            "initial_scheduled_requests: 240".to_owned(),
        ),
        (
            "class_schedule_counts: {short: 180, long: 180}",
            "class_schedule_counts: {short: 120, long: 120}".to_owned(),
        ),
        (
            "input_tokens: 128, output_tokens: 32",
            "input_tokens: 64, output_tokens: 16".to_owned(),
        ),
        (
            "input_tokens: 512, output_tokens: 16",
            "input_tokens: 256, output_tokens: 8".to_owned(),
        ),
        (
            "concurrency: [2, 4, 8, 16]\n      durationSeconds: 15",
            "concurrency: [1, 2, 4, 8]\n      durationSeconds: 10".to_owned(),
        ),
        (
            "min_successful_samples_per_class: 150",
            "min_successful_samples_per_class: 100".to_owned(),
        ),
    ] {
        yaml = replace_once(&yaml, from, &to);
    }
    yaml
}

/// The addresses of `want` ready pods of the Deployment, waited for up to `timeout`.
async fn ready_pods(client: &kube::Client, want: usize, timeout: Duration) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + timeout;
    loop {
        let list = pods
            .list(&ListParams::default().labels(&format!("app={APP}")))
            .await
            .expect("pods list");
        let ready: Vec<String> = list
            .items
            .iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .collect();
        if ready.len() == want {
            return ready;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {want} vLLM pods ready after {timeout:?}",
            ready.len()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The cold mode's capacity and bracket, its ends valid points.
fn capacity_of(mode: &ModeCapacity, who: &str) -> (f64, f64, f64) {
    let capacity = mode
        .capacity_rps
        .unwrap_or_else(|| panic!("{who}: no capacity"));
    let bracket = mode.bracket.unwrap_or_else(|| panic!("{who}: no bracket"));
    assert_eq!(bracket.pass, capacity, "{who}");
    assert!(bracket.width() <= 0.10, "{who}: {bracket:?}");
    (capacity, bracket.pass, bracket.fail)
}

/// Two vLLM pods behind a Service: `goodput bench` (through the Service's address) and the
/// operator (through the Service, engine and version discovered) find a capacity within
/// this fixture's run-to-run spread of each other (not within their brackets: see below),
/// the bracket's ends valid points; a ServingPlan on the operator's
/// evidence proposes and applies three replicas, and the revalidation measures the three real
/// pods (with `GOODPUT_REAL_ENGINE_FULL_REVALIDATION=1` to its verdict, which holds the fleet
/// to what it measured).
#[test]
fn a_two_pod_vllm_deployment_is_benchmarked_planned_and_revalidated_at_three() {
    const TEST: &str = "a_two_pod_vllm_deployment_is_benchmarked_planned_and_revalidated";
    let _machine = crate::machine();
    let Some((venv, model)) = engine_fixture::vllm_for_pods(TEST) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // After the runtime's workers exist: they and everything started from them follow.
    let _pinned = OnClientCpus::pin();
    runtime.block_on(async {
        let s = harness::setup_with_scripts(&[("vllm-cpu", &engine_image(&venv, &model))]).await;
        let c = &s.client;
        Api::<Service>::namespaced(c.clone(), NS)
            .create(&PostParams::default(), &service())
            .await
            .expect("the Service");
        Api::<Deployment>::namespaced(c.clone(), NS)
            .create(&PostParams::default(), &deployment(2))
            .await
            .expect("the Deployment");
        let pods = ready_pods(c, 2, Duration::from_secs(600)).await;
        let cluster_ip = Api::<Service>::namespaced(c.clone(), NS)
            .get(APP)
            .await
            .expect("the Service reads")
            .spec
            .and_then(|s| s.cluster_ip)
            .expect("a cluster IP");

        // `goodput bench` through the Service's address, scraping each pod.
        let metrics: Vec<String> = pods
            .iter()
            .map(|ip| format!("http://{ip}:{PORT}"))
            .collect();
        let target = format!(
            "    url: http://{cluster_ip}:{PORT}\n    metricsUrls: [{}]\n",
            metrics.join(", ")
        );
        let spec = s.dir.path().join("bench.yaml");
        std::fs::write(&spec, benchmark_yaml(&target)).expect("benchmark written");
        let out = s.dir.path().join("pack");
        let started = Instant::now();
        // On a blocking thread: this runtime serves the cluster (its Service proxy too).
        let (stdout, result) = {
            let (spec, out) = (spec.clone(), out.clone());
            tokio::task::spawn_blocking(move || crate::bench(&spec, &out))
                .await
                .expect("goodput bench ran")
        };
        eprintln!(
            "{stdout}(bench wall {:.0} s)",
            started.elapsed().as_secs_f64()
        );
        assert_eq!(result.target.engine_profile.as_deref(), Some("vllm"));
        let cold = &result.modes[0];
        let (bench_capacity, bench_bracket) = crate::measured_capacity(cold);
        // Each pod's cache was emptied at its own address before each cold rate point.
        for p in &cold.points {
            let summary = crate::read_summary(&out.join(&p.dir));
            let said = summary.cache_reset.as_ref().map(|r| r.said.as_str());
            assert_eq!(
                said,
                Some("POST /reset_prefix_cache: emptied on each of 2 replicas"),
                "{} RPS",
                p.offered_rps
            );
        }

        // The operator, through the Service.
        let _operator = s.operator(
            "goodput",
            &["--shard-start-lead-s", "5", "--plan-resync-s", "1"],
        );
        let service_target = format!("    service: {{name: {APP}, port: {PORT}}}\n");
        let started = Instant::now();
        harness::create(c, &benchmark_yaml(&service_target)).await;
        let cb = harness::wait_for(
            c,
            BENCHMARK,
            Duration::from_secs(1500),
            "a finished run",
            |cb| matches!(harness::phase(cb), Some(Phase::Succeeded | Phase::Failed)),
        )
        .await;
        eprintln!("operator wall {:.0} s", started.elapsed().as_secs_f64());
        let status = cb.status.as_ref().expect("a status");
        assert_eq!(status.phase, Some(Phase::Succeeded), "{status:#?}");
        let resolved = status.resolved.as_ref().expect("what the target runs");
        assert_eq!(
            (resolved.engine.as_str(), resolved.engine_version.as_deref()),
            ("vllm", Some("0.32.0")),
            "discovered through the Service"
        );
        let points = harness::points(&cb);
        let invalid: Vec<_> = points
            .iter()
            .filter(|p| !p.valid)
            .map(|p| (p.offered_rps, &p.reasons))
            .collect();
        let (operator_capacity, pass, fail) = capacity_of(&status.modes[0], "operator");
        for end in [pass, fail] {
            assert!(
                points.iter().any(|p| p.offered_rps == Some(end) && p.valid),
                "the bracket's end {end} is a valid point; invalid: {invalid:?}"
            );
        }
        // The same capacity as bench's, within the run-to-run spread of two engines
        // sharing one core, which is far wider than a sweep's bracket: bench measured
        // 4.47, 5.2 and 5.17 RPS in three runs, the operator 3.57, 5.21 and 6.94 beside
        // them (within the bracket once in three). Replicas counted wrong, or a Service
        // path that reached one pod, is twice apart.
        let gap = (fail - pass)
            .max(bench_bracket.fail - bench_bracket.pass)
            .max(0.5 * bench_capacity);
        for (who, rows) in [
            (
                "bench",
                cold.points
                    .iter()
                    .map(|p| {
                        let weakest = p.report.classes.values().filter_map(|c| c.attainment).reduce(f64::min);
                        (p.offered_rps, p.report.verdict.map(|v| format!("{v:?}")), weakest, p.schedule_lag_p99_ms)
                    })
                    .collect::<Vec<_>>(),
            ),
            (
                "operator",
                points
                    .iter()
                    .filter_map(|p| {
                        Some((p.offered_rps?, Some(p.verdict.clone()), p.weakest_attainment, f64::NAN))
                    })
                    .collect(),
            ),
        ] {
            for (rate, verdict, weakest, lag) in rows {
                eprintln!("{who}: {rate} RPS {verdict:?}, weakest attainment {weakest:?}, lag P99 {lag:.2} ms");
            }
        }
        eprintln!(
            "capacity of two pods: bench {bench_capacity} RPS {bench_bracket:?}, operator \
             {operator_capacity} RPS [{pass}, {fail}]; invalid operator points: {invalid:?}"
        );
        let agreement = ((operator_capacity - bench_capacity).abs() <= gap + 1e-9)
            .then_some(())
            .ok_or(format!(
                "operator {operator_capacity} vs bench {bench_capacity}: more apart than {gap}"
            ));
        let per_replica = status
            .capacity_per_replica_rps
            .expect("a capacity per replica");
        assert!(
            (per_replica - operator_capacity / 2.0).abs() < 1e-3,
            "{per_replica}"
        );

        // The plan: a peak of 1.875 replicas' capacity needs ceil(1.875 / 0.75) = 3.
        let peak = (per_replica * 1.875 * 1000.0).round() / 1000.0;
        let plan: ServingPlan = serde_saphyr::from_str(&format!(
            r#"apiVersion: goodput.dev/v1alpha1
kind: ServingPlan
metadata: {{name: {PLAN}, namespace: {NS}}}
spec:
  targetRef: {{apiVersion: apps/v1, kind: Deployment, name: {APP}}}
  capacity: {{benchmarkRef: {{name: {BENCHMARK}}}}}
  peak: {{rps: {peak}}}
  gpusPerReplica: 1
  mode: Apply
"#
        ))
        .expect("plan YAML");
        Api::<ServingPlan>::namespaced(c.clone(), NS)
            .create(&PostParams::default(), &plan)
            .await
            .expect("the plan is accepted");
        let applied = fixture::plan_until(c, PLAN, Duration::from_secs(60), "three replicas applied", |p| {
            p.status
                .as_ref()
                .and_then(|s| s.applied.as_ref())
                .is_some_and(|a| a.replicas == 3)
        })
        .await;
        let st = applied.status.as_ref().expect("a status");
        assert_eq!(st.proposed_replicas, Some(3), "{:?}", st.arithmetic);
        let ev = st.evidence.as_ref().expect("evidence");
        assert_eq!(ev.source, format!("CapacityBenchmark {BENCHMARK}"));
        let deployment = Api::<Deployment>::namespaced(c.clone(), NS)
            .get(APP)
            .await
            .expect("the Deployment reads");
        assert_eq!(deployment.spec.replicas, Some(3));

        if let Err(apart) = &agreement {
            panic!("{apart}");
        }

        // The revalidation measures the three real pods: its benchmark asks them what they
        // run and starts its first point on them. Three engines on one CPU carry far less
        // than two (a whole revalidation measured 1.04 RPS against the 7.8 expected, a
        // Shortfall, in 17 minutes): its end is waited for only with
        // GOODPUT_REAL_ENGINE_FULL_REVALIDATION=1.
        let running = fixture::plan_until(c, PLAN, Duration::from_secs(120), "a revalidation", |p| {
            verification(p).is_some_and(|v| v.replicas == 3)
        })
        .await;
        let name = verification(&running)
            .map(|v| v.benchmark.clone())
            .expect("the revalidation's benchmark");
        let own = harness::wait_for(
            c,
            &name,
            Duration::from_secs(600),
            "the revalidation's first point on three pods",
            |cb| {
                cb.status.as_ref().is_some_and(|s| {
                    s.resolved.as_ref().is_some_and(|r| r.engine == "vllm")
                        && (s.current_point.is_some() || !s.points.is_empty())
                })
            },
        )
        .await;
        ready_pods(c, 3, Duration::from_secs(5)).await;
        assert_eq!(own.spec.target.replicas, Some(3));
        assert_eq!(
            own.metadata
                .owner_references
                .as_ref()
                .and_then(|o| o.first())
                .map(|o| o.kind.as_str()),
            Some("ServingPlan")
        );
        if std::env::var_os("GOODPUT_REAL_ENGINE_FULL_REVALIDATION").is_none() {
            return;
        }
        let started = Instant::now();
        let verified = fixture::plan_until(c, PLAN, Duration::from_secs(1500), "a verification", |p| {
            verification(p).is_some_and(|v| v.state != Verification::RUNNING)
        })
        .await;
        eprintln!("revalidation wall {:.0} s", started.elapsed().as_secs_f64());
        ready_pods(c, 3, Duration::from_secs(5)).await;
        let v = verification(&verified).cloned().expect("a verification");
        eprintln!("verification: {v:#?}");
        assert_eq!(v.replicas, 3);
        let expected = v.expected_fleet_rps.expect("an expectation");
        assert!((expected - 3.0 * per_replica).abs() < 1e-3, "{v:#?}");
        // The verdict is the benchmark's above: vLLM on three replicas.
        assert_eq!(v.benchmark, name);
        // Verified exactly when the three pods carried the peak and the linear expectation
        // (what the plan's verification asks); a shortfall names its measurement.
        let measured = v.measured_fleet_rps;
        let condition = fixture::condition(&verified, plan_cond::VERIFIED).map(|c| c.0);
        match v.state.as_str() {
            Verification::VERIFIED => {
                assert!(measured.is_some_and(|m| m >= expected), "{v:#?}");
                assert_eq!(condition, Some("True"));
            }
            Verification::SHORTFALL => {
                assert!(measured.is_none_or(|m| m < expected), "{v:#?}");
                assert!(v.shortfall_rps.is_some_and(|s| s > 0.0), "{v:#?}");
                assert_eq!(condition, Some("False"));
            }
            other => panic!("the revalidation did not measure: {other}: {v:#?}"),
        }
    });
}

/// The plan's verification, once there is one.
fn verification(plan: &ServingPlan) -> Option<&Verification> {
    plan.status.as_ref()?.verification.as_ref()
}
