//! Unit tests of `lint`.

use super::*;
use crate::workload::{Severity, seed_manifest};
use crate::{Experiments, PeakForecast, RateSweep, Reporting, Saturation, Target, WorkloadSource};

fn spec() -> CapacityBenchmarkSpec {
    CapacityBenchmarkSpec {
        target: Target::default(),
        workload: WorkloadSource {
            manifest: Some(Box::new(seed_manifest())),
            ..WorkloadSource::default()
        },
        experiments: Experiments::default(),
        acceptance: None,
        repeats: 1,
        peak: None,
        reporting: Reporting::default(),
        loadgen: Default::default(),
        failure_test: None,
    }
}

/// Findings of `edit` applied to the seed spec and manifest, as `(severity, path)`.
fn lint_with(edit: impl FnOnce(&mut CapacityBenchmarkSpec, &mut WorkloadManifest)) -> Vec<Finding> {
    let mut s = spec();
    let mut m = seed_manifest();
    edit(&mut s, &mut m);
    s.workload.manifest = Some(Box::new(m.clone()));
    lint(&s, &m)
}

fn errors(findings: &[Finding]) -> Vec<&str> {
    findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.path.as_str())
        .collect()
}

fn warnings(findings: &[Finding]) -> Vec<&str> {
    findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .map(|f| f.path.as_str())
        .collect()
}

#[test]
fn a_real_engines_process_takes_kill_replica_only() {
    use crate::{EngineProcessRef, FailureTest, Fault, FaultKind};
    let with = |kinds: &[FaultKind], process: bool| {
        lint_with(|s, _| {
            s.target.url = Some("http://127.0.0.1:8000".into());
            s.target.model = Some("m".into());
            s.failure_test = Some(FailureTest {
                faults: kinds
                    .iter()
                    .map(|&kind| Fault {
                        kind,
                        ..Fault::default()
                    })
                    .collect(),
                engine_process: process.then(|| EngineProcessRef {
                    pid_file: "/run/engine.pid".into(),
                }),
                ..FailureTest::default()
            });
        })
    };
    let f = with(&[FaultKind::KillReplica], true);
    assert!(
        errors(&f).is_empty() && !warnings(&f).contains(&"spec.failureTest"),
        "{f:?}"
    );
    let f = with(&[FaultKind::KillReplica, FaultKind::KvCapacity], true);
    assert_eq!(errors(&f), ["spec.failureTest.faults[1].kind"]);
    // Without a process, a URL's faults need goodput serve-sim's admin API, and lint says
    // how to name a real engine's process instead.
    let f = with(&[FaultKind::KillReplica], false);
    assert!(
        f.iter()
            .any(|x| x.path == "spec.failureTest" && x.message.contains("engineProcess")),
        "{f:?}"
    );
}

#[test]
fn failure_tests_are_checked() {
    use crate::{FailureTest, Fault, FaultKind, SimulatedTarget};
    let f = lint_with(|s, _| s.failure_test = Some(FailureTest::default()));
    assert!(f.is_empty(), "the defaults are clean: {f:?}");
    let f = lint_with(|s, _| {
        s.target.simulated = Some(SimulatedTarget {
            replicas: 2,
            ..SimulatedTarget::default()
        });
        s.failure_test = Some(FailureTest {
            rate: Some(-1.0),
            rate_fraction: 1.5,
            steady_seconds: 0.0,
            observe_seconds: f64::NAN,
            faults: vec![
                Fault {
                    replica: 2,
                    ..Fault::default()
                },
                Fault {
                    kind: FaultKind::KvCapacity,
                    kv_fraction: Some(1.5),
                    duration_seconds: Some(0.0),
                    ..Fault::default()
                },
                Fault {
                    kind: FaultKind::ColdStart,
                    load_seconds: Some(-3.0),
                    ..Fault::default()
                },
            ],
            engine_process: None,
        });
    });
    assert_eq!(
        errors(&f),
        [
            "spec.failureTest.rate",
            "spec.failureTest.rateFraction",
            "spec.failureTest.steadySeconds",
            "spec.failureTest.observeSeconds",
            "spec.failureTest.faults[0].replica",
            "spec.failureTest.faults[1].kvFraction",
            "spec.failureTest.faults[1].durationSeconds",
            "spec.failureTest.faults[2].loadSeconds",
        ]
    );
    let f = lint_with(|s, _| {
        s.failure_test = Some(FailureTest {
            faults: vec![Fault {
                kind: FaultKind::ColdStart,
                ..Fault::default()
            }],
            ..FailureTest::default()
        });
    });
    assert_eq!(errors(&f), ["spec.failureTest.faults[0].kind"]);
    let f = lint_with(|s, _| {
        s.target.url = Some("http://127.0.0.1:8000".into());
        s.failure_test = Some(FailureTest {
            faults: Vec::new(),
            ..FailureTest::default()
        });
    });
    assert_eq!(errors(&f), ["spec.failureTest.faults"]);
    assert!(warnings(&f).contains(&"spec.failureTest"), "{f:?}");
    let f = lint_with(|s, _| {
        s.failure_test = Some(FailureTest {
            faults: vec![Fault {
                kind: FaultKind::RequestCancel,
                cancel_fraction: Some(0.0),
                ..Fault::default()
            }],
            ..FailureTest::default()
        });
    });
    assert_eq!(errors(&f), ["spec.failureTest.faults[0].cancelFraction"]);
}

#[test]
fn the_operator_runs_kills_against_a_service_and_cancellations_anywhere_but_its_own_sim() {
    use crate::{FailureTest, Fault, FaultKind, ServiceTarget};
    let test = |kinds: &[FaultKind]| {
        Some(FailureTest {
            faults: kinds
                .iter()
                .map(|&kind| Fault {
                    kind,
                    ..Fault::default()
                })
                .collect(),
            ..FailureTest::default()
        })
    };
    let paths = |f: Vec<Finding>| -> Vec<String> { f.into_iter().map(|f| f.path).collect() };
    let mut spec = spec();
    spec.target.service = Some(ServiceTarget {
        name: "qwen".into(),
        namespace: None,
        port: 8000,
    });
    spec.failure_test = test(&[FaultKind::KillReplica, FaultKind::RequestCancel]);
    assert!(cluster_failure_test(&spec).is_empty());
    spec.failure_test = test(&[FaultKind::KvCapacity, FaultKind::DegradedLink]);
    assert_eq!(
        paths(cluster_failure_test(&spec)),
        [
            "spec.failureTest.faults[0].kind",
            "spec.failureTest.faults[1].kind"
        ]
    );
    // Against a URL: the clients can cancel, but there is no pod to kill.
    spec.target.service = None;
    spec.target.url = Some("http://127.0.0.1:8000".into());
    spec.failure_test = test(&[FaultKind::RequestCancel]);
    assert!(cluster_failure_test(&spec).is_empty());
    spec.failure_test = test(&[FaultKind::KillReplica]);
    assert_eq!(paths(cluster_failure_test(&spec)), ["spec.failureTest"]);
    // The operator's own simulated engine: goodput bench's.
    spec.target.url = None;
    spec.target.simulated = Some(crate::SimulatedTarget::default());
    spec.failure_test = test(&[FaultKind::RequestCancel]);
    assert_eq!(paths(cluster_failure_test(&spec)), ["spec.failureTest"]);
    // What the operator cannot run includes timeScale: auto, which calibrates on the
    // machine goodput bench runs on.
    spec.failure_test = None;
    assert!(cluster_unsupported(&spec).is_empty());
    spec.target.simulated = Some(crate::SimulatedTarget {
        time_scale: crate::TimeScale::Auto,
        ..Default::default()
    });
    assert_eq!(
        paths(cluster_unsupported(&spec)),
        ["spec.target.simulated.timeScale"]
    );
}

#[test]
fn a_time_scale_is_a_positive_number_or_auto() {
    use crate::TimeScale;
    let parse = |v: &str| serde_saphyr::from_str::<TimeScale>(v).map_err(|e| e.to_string());
    assert_eq!(parse("25"), Ok(TimeScale::Fixed(25.0)));
    assert_eq!(parse("2.5"), Ok(TimeScale::Fixed(2.5)));
    assert_eq!(parse("auto"), Ok(TimeScale::Auto));
    let e = parse("fast").expect_err("not a time scale");
    assert!(e.contains("a speed-up (a number) or `auto`"), "{e}");
    assert_eq!(
        serde_json::to_string(&[TimeScale::Auto, TimeScale::Fixed(20.0)]).expect("json"),
        r#"["auto",20.0]"#
    );
    let f = lint_with(|spec, _| {
        spec.target.simulated = Some(crate::SimulatedTarget {
            time_scale: TimeScale::Fixed(-1.0),
            ..Default::default()
        });
    });
    assert!(
        f.iter().any(|f| f.path == "spec.target.simulated.timeScale"
            && f.message.contains("positive, finite speed-up, or auto")),
        "{f:?}"
    );
}

#[test]
fn the_seed_with_defaults_is_clean() {
    let f = lint_with(|_, _| {});
    assert!(f.is_empty(), "{f:?}");
    let f = lint_with(|s, _| {
        s.experiments.rate_sweep = Some(RateSweep {
            rates: vec![8.0, 16.0, 24.0],
            ..RateSweep::default()
        });
        s.peak = Some(PeakForecast {
            rps: 36.0,
            target_utilization: Some(0.75),
            cache_mode: Some(CacheMode::Cold),
        });
    });
    assert!(f.is_empty(), "{f:?}");
}

#[test]
fn a_capacity_from_saturation_alone_is_refused() {
    let f = lint_with(|s, _| {
        s.experiments.saturation = Some(Saturation::default());
        s.peak = Some(PeakForecast {
            rps: 36.0,
            target_utilization: None,
            cache_mode: None,
        });
    });
    assert_eq!(errors(&f), ["spec.experiments.rateSweep"]);
    assert!(f[0].message.contains("never validates an arrival rate"));
    // Without a peak it is an exploratory run: a warning.
    let f = lint_with(|s, _| s.experiments.saturation = Some(Saturation::default()));
    assert!(errors(&f).is_empty());
    assert_eq!(warnings(&f), ["spec.experiments.rateSweep"]);
    // A rate sweep without rates and without saturation derives them: fine.
    let f = lint_with(|s, _| s.experiments.rate_sweep = Some(RateSweep::default()));
    assert!(f.is_empty(), "{f:?}");
}

#[test]
fn too_few_scheduled_requests_for_the_sample_rule_are_refused() {
    let f = lint_with(|s, m| {
        s.experiments.max_blocks = 1;
        m.client.initial_scheduled_requests = 100;
        for (name, n) in [
            ("interactive", 70),
            ("long_context", 20),
            ("generation_heavy", 10),
        ] {
            m.client.class_schedule_counts.insert(name.into(), n);
        }
    });
    assert_eq!(
        errors(&f),
        [
            "spec.workload.manifest.client.class_schedule_counts.interactive",
            "spec.workload.manifest.client.class_schedule_counts.long_context",
            "spec.workload.manifest.client.class_schedule_counts.generation_heavy",
        ]
    );
    assert!(
        f[0].message.contains("no point can be adequate"),
        "{}",
        f[0].message
    );
    // Continuation blocks can make up the count: 2,200 × 1 block is enough for 2,000.
    let f = lint_with(|s, _| s.experiments.max_blocks = 1);
    assert!(f.is_empty(), "{f:?}");
    // spec.acceptance replaces the manifest's gate.
    let f = lint_with(|s, m| {
        s.experiments.max_blocks = 1;
        let mut a = m.acceptance.clone();
        a.min_successful_samples_per_class = 30_000;
        s.acceptance = Some(a);
    });
    assert_eq!(errors(&f).len(), 3, "{f:?}");
    assert!(
        f[0].message
            .contains("spec.acceptance.min_successful_samples_per_class")
    );
}

#[test]
fn manifest_file_paths_name_the_file() {
    let mut s = spec();
    s.workload = WorkloadSource {
        manifest_file: Some("m.yaml".into()),
        ..WorkloadSource::default()
    };
    let mut m = seed_manifest();
    m.client.warmup_seconds = 0.0;
    let f = lint(&s, &m);
    assert_eq!(
        warnings(&f),
        ["spec.workload.manifestFile(m.yaml).client.warmup_seconds"]
    );
    assert_eq!(f[0].message, NO_WARMUP);
}

#[test]
fn repeated_cold_prompts_and_a_warm_run_without_prefix_cache() {
    let f = lint_with(|s, _| s.experiments.cold_prompts = ColdPrompts::Repeated);
    assert_eq!(errors(&f), ["spec.experiments.coldPrompts"]);
    let f = lint_with(|s, m| {
        s.experiments.cache_modes = vec![CacheMode::Cold, CacheMode::Warm];
        s.experiments.warm_pool.prefix_tokens = 256;
        m.engine.prefix_cache = Toggle::Disabled;
    });
    assert!(errors(&f).is_empty(), "{f:?}");
    // The manifest's prefix cache and the simulated engine's (the default preset's is off).
    assert_eq!(
        warnings(&f),
        [
            "spec.experiments.cacheModes",
            "spec.target.simulated.overrides"
        ]
    );
    let f = lint_with(|s, _| {
        s.experiments.cache_modes = vec![CacheMode::Warm];
        s.target.simulated = Some(SimulatedTarget {
            overrides: [("prefix_caching".into(), serde_json::Value::Bool(true))].into(),
            ..SimulatedTarget::default()
        });
    });
    // The default 512-token prefix is the whole prompt of generation_heavy (512).
    assert_eq!(warnings(&f), ["spec.experiments.warmPool.prefixTokens"]);
    assert!(
        f[0].message.contains("`generation_heavy` (512)"),
        "{}",
        f[0].message
    );
}

#[test]
fn mean_only_reporting_is_refused() {
    for stats in [vec![Statistic::Mean], vec![]] {
        let f = lint_with(|s, _| s.reporting.statistics = stats);
        assert_eq!(errors(&f), ["spec.reporting.statistics"]);
    }
    let f = lint_with(|s, _| s.reporting.statistics = vec![Statistic::Mean, Statistic::P99]);
    assert!(f.is_empty());
}

#[test]
fn service_targets_are_checked() {
    use crate::ServiceTarget;
    let service = |name: &str, port: i32, namespace: Option<&str>| ServiceTarget {
        name: name.into(),
        port,
        namespace: namespace.map(str::to_owned),
    };
    let f = lint_with(|s, _| {
        s.target.service = Some(service("qwen-7b", 8000, Some("llm")));
        s.target.model = Some("qwen".into());
    });
    assert!(f.is_empty(), "{f:?}");
    // Not the simulated engine: the model name is the manifest's unless given.
    let f = lint_with(|s, _| s.target.service = Some(service("qwen-7b", 8000, None)));
    assert_eq!(warnings(&f), ["spec.target.model"]);

    let f = lint_with(|s, _| {
        s.target.service = Some(service("Qwen_7b", 0, Some("-llm")));
        s.target.model = Some("qwen".into());
    });
    assert_eq!(
        errors(&f),
        [
            "spec.target.service.name",
            "spec.target.service.port",
            "spec.target.service.namespace"
        ]
    );
    assert!(f[1].message.contains("1 to 65535"), "{}", f[1].message);

    // At most one of url, service and simulated (the CRD's rule, also checked locally).
    let f = lint_with(|s, _| {
        s.target.url = Some("http://x:8000".into());
        s.target.service = Some(service("qwen-7b", 8000, None));
        s.target.simulated = Some(SimulatedTarget {
            replicas: 0,
            ..SimulatedTarget::default()
        });
        s.target.model = Some("qwen".into());
    });
    // The simulated setup is not linted: it is not what would run.
    assert_eq!(errors(&f), ["spec.target"]);
    assert!(
        f[0].message
            .starts_with("url, service and simulated are set: give one"),
        "{}",
        f[0].message
    );
    let f = lint_with(|s, _| {
        s.target.service = Some(service("qwen-7b", 8000, None));
        s.target.simulated = Some(SimulatedTarget::default());
        s.target.model = Some("qwen".into());
    });
    assert_eq!(errors(&f), ["spec.target"]);
    assert!(f[0].message.starts_with("service and simulated are set"));
}

#[test]
fn dns_labels() {
    for ok in ["a", "qwen-7b", "a1", &"a".repeat(63)] {
        assert!(is_dns1035_label(ok) && is_dns1123_label(ok), "{ok}");
    }
    for bad in ["", "Qwen", "a_b", "a-", "-a", "a.b", &"a".repeat(64)] {
        assert!(!is_dns1035_label(bad) && !is_dns1123_label(bad), "{bad}");
    }
    // A namespace may start with a digit; a Service may not.
    assert!(is_dns1123_label("7b") && !is_dns1035_label("7b"));
}

#[test]
fn targets_are_checked() {
    let f = lint_with(|s, _| {
        s.target.url = Some("localhost:8000".into());
        s.target.simulated = Some(SimulatedTarget::default());
        s.target.metrics_urls = vec!["http://ok:8001".into(), "ftp://x".into()];
        s.target.prometheus = Some(crate::PrometheusSource {
            url: "prom:9090".into(),
            selector: String::new(),
            step_seconds: 0.0,
        });
        s.target.replicas = Some(0);
    });
    assert_eq!(
        errors(&f),
        [
            "spec.target.url",
            "spec.target",
            "spec.target.metricsUrls[1]",
            "spec.target.prometheus.url",
            "spec.target.prometheus.stepSeconds",
            "spec.target.replicas",
        ]
    );
    assert_eq!(warnings(&f), ["spec.target.model"]);
    assert!(f.last().unwrap().message.contains("dense-70b-class"));

    let f = lint_with(|s, _| {
        s.target.simulated = Some(SimulatedTarget {
            preset: "".into(),
            time_scale: super::TimeScale::Fixed(f64::INFINITY),
            replicas: 0,
            stream_interval: 0,
            ..SimulatedTarget::default()
        });
    });
    assert_eq!(
        errors(&f),
        [
            "spec.target.simulated.preset",
            "spec.target.simulated.replicas",
            "spec.target.simulated.timeScale",
            "spec.target.simulated.streamInterval",
        ]
    );
    let f = lint_with(|s, _| {
        s.target.simulated = Some(SimulatedTarget {
            preset: "gpt-9-tpu".into(),
            ..SimulatedTarget::default()
        });
    });
    assert_eq!(errors(&f), ["spec.target.simulated.preset"]);
    assert!(f[0].message.contains("qwen2.5-7b-h100"));
    let f = lint_with(|s, _| {
        s.target.simulated = Some(SimulatedTarget {
            overrides: [("max_num_sequences".into(), 5.into())].into(),
            ..SimulatedTarget::default()
        });
    });
    assert_eq!(errors(&f), ["spec.target.simulated.overrides"]);
    assert!(
        f[0].message.contains("max_num_sequences"),
        "{}",
        f[0].message
    );
}

#[test]
fn experiment_ranges_are_checked() {
    let f = lint_with(|s, _| {
        s.repeats = 0;
        let e = &mut s.experiments;
        e.saturation = Some(Saturation {
            concurrency: vec![0, 8, 8, 4],
            duration_seconds: 0.0,
        });
        e.rate_sweep = Some(RateSweep {
            rates: vec![4.0, f64::NAN, 2.0, 2.0, -1.0],
            points: 1,
            low_fraction: 0.8,
            high_fraction: 0.8,
            resolution: 1.0,
            max_refinements: 4,
        });
        e.cache_modes = vec![CacheMode::Cold, CacheMode::Cold];
        e.max_blocks = 0;
        e.max_lag_ms = 0.0;
        s.peak = Some(PeakForecast {
            rps: 0.0,
            target_utilization: Some(1.5),
            cache_mode: Some(CacheMode::Warm),
        });
    });
    assert_eq!(
        errors(&f),
        [
            "spec.experiments.saturation.concurrency[0]",
            "spec.experiments.saturation.concurrency[2]",
            "spec.experiments.saturation.concurrency[3]",
            "spec.experiments.saturation.durationSeconds",
            "spec.experiments.rateSweep.rates[1]",
            "spec.experiments.rateSweep.rates[3]",
            "spec.experiments.rateSweep.rates[4]",
            "spec.experiments.rateSweep.points",
            "spec.experiments.rateSweep.highFraction",
            "spec.experiments.rateSweep.resolution",
            "spec.experiments.cacheModes[1]",
            "spec.experiments.maxBlocks",
            "spec.experiments.maxLagMs",
            "spec.repeats",
            "spec.peak.rps",
            "spec.peak.targetUtilization",
            "spec.peak.cacheMode",
        ]
    );
    let f = lint_with(|s, _| s.experiments.cache_modes.clear());
    assert_eq!(errors(&f), ["spec.experiments.cacheModes"]);
}

#[test]
fn a_workload_needs_exactly_one_source() {
    let mut s = spec();
    s.workload = WorkloadSource::default();
    assert_eq!(errors(&lint_spec(&s)), ["spec.workload"]);
    s.workload.manifest = Some(Box::new(seed_manifest()));
    s.workload.manifest_file = Some("m.yaml".into());
    assert_eq!(errors(&lint_spec(&s)), ["spec.workload"]);
}

#[test]
fn results_go_to_at_most_one_sink_and_a_bucket_is_an_s3_url() {
    let bucket = |url: &str| crate::ResultsBucket {
        url: url.into(),
        ..Default::default()
    };
    let mut s = spec();
    s.loadgen.results_bucket = Some(bucket("s3://results/runs"));
    assert!(errors(&lint_spec(&s)).is_empty());
    s.loadgen.results_bucket = Some(bucket("s3://results"));
    assert!(errors(&lint_spec(&s)).is_empty());
    s.loadgen.results_claim = Some("results".into());
    assert_eq!(errors(&lint_spec(&s)), ["spec.loadgen"]);
    s.loadgen.results_claim = None;
    for url in ["results/runs", "s3://", "s3:///runs", "gs://results"] {
        s.loadgen.results_bucket = Some(bucket(url));
        assert_eq!(
            errors(&lint_spec(&s)),
            ["spec.loadgen.resultsBucket.url"],
            "{url}"
        );
    }
    s.loadgen.results_bucket = Some(crate::ResultsBucket {
        endpoint: Some("http://minio:9000".into()),
        ..bucket("s3://results")
    });
    assert_eq!(
        errors(&lint_spec(&s)),
        ["spec.loadgen.resultsBucket.endpoint"]
    );
    if let Some(b) = &mut s.loadgen.results_bucket {
        b.allow_http = true;
    }
    assert!(errors(&lint_spec(&s)).is_empty());
    if let Some(b) = &mut s.loadgen.results_bucket {
        b.endpoint = Some("minio:9000".into());
        b.credentials_secret = Some(" ".into());
    }
    assert_eq!(
        errors(&lint_spec(&s)),
        [
            "spec.loadgen.resultsBucket.endpoint",
            "spec.loadgen.resultsBucket.credentialsSecret"
        ]
    );
}

#[test]
fn trace_arrivals_cannot_be_swept() {
    let f = lint_with(|_, m| m.client.arrival_pattern = ArrivalPattern::Trace);
    assert_eq!(
        errors(&f),
        ["spec.workload.manifest.client.arrival_pattern"]
    );
}
