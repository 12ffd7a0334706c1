//! The shipped alert rules (`charts/goodput/files/alerts.yaml`), dashboard
//! (`charts/goodput/files/dashboard.json`) and runbooks (`docs/runbooks.md`): every rule
//! parses and evaluates, every metric they name is one goodput knows, every runbook link
//! lands on a section; and on synthetic series each alert fires where it must (a replica
//! killed, a growing queue, a burning SLO, ...) and stays silent on a healthy fleet.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use goodput::alerts::{
    AlertEvent, CLIENT_METRICS, Rule, SampleStore, evaluate, metric_names, parse, shipped_rules,
};
use goodput::engine_metrics::profile::profile_with;
use goodput::engine_metrics::{EngineKind, MetricKind, MetricsSeries, ScrapeSample};
use goodput::record::RequestRecord;
use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn rules() -> Vec<Rule> {
    shipped_rules().unwrap_or_else(|e| panic!("the shipped rules: {e}"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn run(store: &SampleStore, from: f64, to: f64, step: f64) -> Vec<AlertEvent> {
    evaluate(&rules(), store, from, to, step).unwrap_or_else(|e| panic!("{e}"))
}

fn fired<'a>(events: &'a [AlertEvent], alert: &str) -> Vec<&'a AlertEvent> {
    events
        .iter()
        .filter(|e| e.alert == alert && e.firing_at_s.is_some())
        .collect()
}

fn firing_names(events: &[AlertEvent]) -> BTreeSet<&str> {
    events
        .iter()
        .filter(|e| e.firing_at_s.is_some())
        .map(|e| e.alert.as_str())
        .collect()
}

/// Every metric name goodput's engine profiles know (histograms with their `_sum`,
/// `_count` and `_bucket` series), plus `up` and the load generator's client metrics.
fn known_names() -> BTreeSet<String> {
    let mut names: BTreeSet<String> = CLIENT_METRICS.iter().map(|s| s.to_string()).collect();
    names.insert("up".into());
    for engine in EngineKind::ALL {
        for (concept, refs) in engine.profile().metrics {
            for r in refs.iter() {
                if concept.kind() == MetricKind::Histogram {
                    for suffix in ["_sum", "_count", "_bucket"] {
                        names.insert(format!("{}{suffix}", r.name));
                    }
                } else {
                    names.insert(r.name.to_string());
                }
            }
        }
    }
    names
}

fn check_known(context: &str, expr: &str, known: &BTreeSet<String>) {
    let parsed = parse(expr).unwrap_or_else(|e| panic!("{context}: {e}"));
    let names = metric_names(&parsed).unwrap_or_else(|e| panic!("{context}: {e}"));
    assert!(!names.is_empty(), "{context}: no metric in `{expr}`");
    for name in names {
        assert!(
            known.contains(&name) || name.starts_with("DCGM_FI_"),
            "{context}: `{name}` is neither a client metric, `up`, a DCGM field nor a name \
             crates/core/src/engine_metrics/profile.rs knows"
        );
    }
}

#[test]
fn every_shipped_rule_parses_is_documented_and_evaluates() {
    let rules = rules();
    let names: Vec<&str> = rules.iter().map(|r| r.alert.as_str()).collect();
    for want in [
        "GoodputReplicaDown",
        "GoodputQueueGrowing",
        "GoodputKvPressure",
        "GoodputEngineErrors",
        "GoodputSloBurnFast",
        "GoodputSloBurnSlow",
        "GoodputClientErrorRate",
        "GoodputLoadGeneratorBehindSchedule",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert_eq!(
        names.iter().collect::<BTreeSet<_>>().len(),
        names.len(),
        "duplicate alert names"
    );
    for r in &rules {
        assert!(r.alert.starts_with("Goodput"), "{}", r.alert);
        assert!(
            matches!(
                r.labels.get("severity").map(String::as_str),
                Some("critical" | "warning" | "info")
            ),
            "{}: severity",
            r.alert
        );
        for key in ["summary", "description", "runbook_url"] {
            assert!(
                r.annotations.get(key).is_some_and(|v| !v.trim().is_empty()),
                "{}: no {key}",
                r.alert
            );
        }
        // Bounded labels only: no request id in any grouping or matcher.
        assert!(!r.expr.contains("request_id"), "{}", r.alert);
    }
    // Every rule evaluates (no unsupported construct) on a store holding every kind of
    // series the rules read.
    let mut store = healthy_fleet(4, None);
    store.add_client_records(
        &client_records(600.0, |_, _| (true, 100.0)),
        &classes(),
        &CUTOFFS,
        0.95,
        5.0,
        600.0,
    );
    let events = run(&store, 0.0, 600.0, 15.0);
    assert!(events.is_empty(), "a healthy fleet raises {events:#?}");
}

#[test]
fn rules_and_dashboard_name_only_metrics_goodput_knows() {
    let known = known_names();
    for r in rules() {
        check_known(&r.alert, &r.expr, &known);
    }
    let exprs = dashboard_exprs();
    assert!(exprs.len() >= 15, "only {} dashboard queries", exprs.len());
    for (panel, expr) in &exprs {
        check_known(panel, expr, &known);
    }
}

#[test]
fn every_runbook_url_lands_on_a_runbook_section() {
    let runbooks = read("docs/runbooks.md");
    // GitHub's heading anchors: lowercase, spaces to dashes, punctuation dropped.
    let anchors: BTreeSet<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| {
            h.trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect();
    for r in rules() {
        let url = &r.annotations["runbook_url"];
        let (page, anchor) = url
            .split_once('#')
            .unwrap_or_else(|| panic!("{}: {url} has no anchor", r.alert));
        assert!(page.ends_with("docs/runbooks.md"), "{}: {url}", r.alert);
        assert_eq!(anchor, r.alert.to_lowercase(), "{}: {url}", r.alert);
        assert!(
            anchors.contains(anchor),
            "{}: no `## ` section for #{anchor} in docs/runbooks.md",
            r.alert
        );
    }
}

// ---- The dashboard -----------------------------------------------------------------------

fn dashboard() -> Value {
    serde_json::from_str(&read("charts/goodput/files/dashboard.json"))
        .unwrap_or_else(|e| panic!("dashboard.json: {e}"))
}

/// Every panel, rows' nested panels included.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().into_iter().flatten() {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// Grafana's interval variables as a plain duration, so that promql-parser reads the query.
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h")
}

/// `(panel title, query)` for every panel target and every `label_values` variable.
fn dashboard_exprs() -> Vec<(String, String)> {
    let d = dashboard();
    let mut out = Vec::new();
    for p in panels(&d) {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap_or_else(|| panic!("{p}: no expr"));
            out.push((
                p["title"].as_str().unwrap_or("?").to_string(),
                substitute(expr),
            ));
        }
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        let query = v["query"]["query"].as_str().or(v["query"].as_str());
        if let Some(inner) = query
            .and_then(|q| q.strip_prefix("label_values("))
            .and_then(|q| q.strip_suffix(')'))
        {
            let selector = inner.rsplit_once(',').map_or(inner, |(s, _)| s);
            out.push((format!("variable {}", v["name"]), selector.to_string()));
        }
    }
    out
}

#[test]
fn dashboard_panels_parse_and_tell_failure_modes_apart() {
    let d = dashboard();
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 39));
    assert!(d["uid"].as_str().is_some_and(|u| !u.is_empty()));
    let vars: BTreeMap<&str, &Value> = d["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .map(|v| (v["name"].as_str().expect("variable name"), v))
        .collect();
    assert_eq!(vars["datasource"]["type"], "datasource");
    assert_eq!(vars["datasource"]["query"], "prometheus");
    for v in ["model", "instance"] {
        assert_eq!(vars[v]["type"], "query", "{v}");
    }
    for (panel, expr) in dashboard_exprs() {
        parse(&expr).unwrap_or_else(|e| panic!("{panel}: {e}"));
    }
    // Every query panel reads the chosen datasource.
    for p in panels(&d).into_iter().filter(|p| p["targets"].is_array()) {
        assert_eq!(
            p["datasource"]["uid"], "${datasource}",
            "{}: datasource",
            p["title"]
        );
    }
    // One row per failure mode and for the client view, each opened by a text panel that
    // says which pattern means what.
    let all = panels(&d);
    let rows: Vec<usize> = (0..all.len())
        .filter(|&i| all[i]["type"] == "row")
        .collect();
    let titles: Vec<String> = rows
        .iter()
        .map(|&i| all[i]["title"].as_str().unwrap_or("").to_lowercase())
        .collect();
    for want in ["slo", "queue", "kv", "gpu", "network"] {
        assert!(
            titles.iter().any(|t| t.contains(want)),
            "no row about {want}: {titles:?}"
        );
    }
    for &i in &rows {
        let next = all.get(i + 1).expect("a panel after each row");
        assert_eq!(
            next["type"], "text",
            "row {} opens with a text",
            all[i]["title"]
        );
        assert!(
            next["options"]["content"]
                .as_str()
                .is_some_and(|c| c.len() > 100),
            "row {}: the text says what the pattern means",
            all[i]["title"]
        );
    }
    // The GPU row reads DCGM's XID errors, power and utilisation.
    let text = read("charts/goodput/files/dashboard.json");
    for field in [
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_UTIL",
    ] {
        assert!(text.contains(field), "{field}");
    }
}

// ---- Synthetic engine series -------------------------------------------------------------

/// A vLLM fleet of `n` replicas scraped every 5 s for 240 s: steady queues, half-full KV
/// caches, counters growing at a steady rate; replica `dead` fails every scrape from 60 s.
fn fleet_series(n: usize, dead: Option<usize>) -> MetricsSeries {
    let targets = (0..n).map(|i| format!("http://10.0.0.{i}:8000")).collect();
    let mut m = MetricsSeries::new(targets, 5.0);
    m.profile = Some(profile_with(EngineKind::Vllm, |p, c| {
        p.candidates(c).first()
    }));
    m.target_engines = vec![Some(EngineKind::Vllm); n];
    for round in 0..=48u64 {
        let t = round as f64 * 5.0;
        for target in 0..n {
            let down = dead == Some(target) && t >= 60.0;
            let values: BTreeMap<String, f64> = if down {
                BTreeMap::new()
            } else {
                [
                    ("queue_waiting", 2.0 + (round % 3) as f64),
                    ("running", 12.0),
                    ("kv_usage", 0.5),
                    ("preemptions", 3.0),
                    ("request_success", 5.0 * t),
                    ("ttft_sum", 0.2 * 5.0 * t),
                    ("ttft_count", 5.0 * t),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect()
            };
            m.samples.push(ScrapeSample {
                round,
                t_s: t,
                target,
                ok: !down,
                error: down.then(|| "connection refused".to_string()),
                values,
                skipped_lines: 0,
            });
        }
    }
    m
}

fn healthy_fleet(n: usize, dead: Option<usize>) -> SampleStore {
    SampleStore::from_metrics_series(&fleet_series(n, dead))
}

#[test]
fn replica_down_fires_within_90_s_of_one_of_four_replicas_dying() {
    let events = run(&healthy_fleet(4, Some(2)), 0.0, 240.0, 5.0);
    let down = fired(&events, "GoodputReplicaDown");
    assert_eq!(down.len(), 1, "{events:#?}");
    assert_eq!(down[0].labels["replica"], "2");
    assert_eq!(down[0].labels["instance"], "10.0.0.2:8000");
    assert_eq!(down[0].labels["severity"], "critical");
    let firing = down[0].firing_at_s.unwrap_or(f64::INFINITY);
    assert!(
        firing > 60.0 && firing <= 150.0,
        "killed at 60 s, fired at {firing}"
    );
    assert_eq!(down[0].resolved_at_s, None, "still down at the end");
    // Nothing else: the survivors stay steady in this series.
    assert_eq!(
        firing_names(&events),
        BTreeSet::from(["GoodputReplicaDown"])
    );

    let events = run(&healthy_fleet(4, None), 0.0, 240.0, 5.0);
    assert!(events.is_empty(), "all four up: {events:#?}");
}

/// A waiting-queue gauge on one replica, every 5 s over `seconds`.
fn queue_store(metric: &str, seconds: u32, value: impl Fn(f64) -> f64) -> SampleStore {
    let mut s = SampleStore::default();
    for k in 0..=seconds / 5 {
        let t = f64::from(k * 5);
        s.push(
            metric,
            &[("instance", "10.0.0.1:8000"), ("model_name", "m")],
            t,
            value(t),
        );
    }
    s
}

/// Deterministic noise in [-3, 3] (a linear congruential generator), so that a steady
/// queue looks like a real one.
fn noise(t: f64) -> f64 {
    let x = (t as u64)
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    ((x >> 33) % 7) as f64 - 3.0
}

#[test]
fn queue_growing_fires_on_a_rising_queue_and_not_on_a_steady_one() {
    // Flat at 2 for a minute, then ~1 request per second more for 3 minutes.
    let rising = |t: f64| 2.0 + (t - 60.0).max(0.0) + noise(t).abs() * 0.3;
    for metric in ["vllm:num_requests_waiting", "sglang:num_queue_reqs"] {
        let events = run(&queue_store(metric, 240, rising), 0.0, 240.0, 5.0);
        let growing = fired(&events, "GoodputQueueGrowing");
        assert_eq!(growing.len(), 1, "{metric}: {events:#?}");
        let at = growing[0].firing_at_s.unwrap_or(f64::INFINITY);
        assert!(
            at > 60.0 && at <= 180.0,
            "{metric}: growth from 60 s, fired at {at}"
        );
        assert_eq!(growing[0].labels["instance"], "10.0.0.1:8000");
        assert_eq!(
            firing_names(&events),
            BTreeSet::from(["GoodputQueueGrowing"])
        );
    }
    // Steady at 40 with scrape-to-scrape noise for 15 minutes: never fires. Only while the
    // series is younger than the 2-minute window may a few noisy points make it pending.
    for metric in ["vllm:num_requests_waiting", "sglang:num_queue_reqs"] {
        let events = run(
            &queue_store(metric, 900, |t| 40.0 + noise(t)),
            0.0,
            900.0,
            5.0,
        );
        assert!(
            events
                .iter()
                .all(|e| e.firing_at_s.is_none() && e.pending_at_s < 120.0),
            "{metric} steady at 40: {events:#?}"
        );
    }
    // A queue that grew and then holds at its new level resolves.
    let events = run(
        &queue_store("vllm:num_requests_waiting", 600, |t| {
            2.0 + (t - 60.0).clamp(0.0, 180.0)
        }),
        0.0,
        600.0,
        5.0,
    );
    let growing = fired(&events, "GoodputQueueGrowing");
    assert_eq!(growing.len(), 1, "{events:#?}");
    assert!(
        growing[0]
            .resolved_at_s
            .is_some_and(|t| t > 240.0 && t <= 400.0)
    );
}

#[test]
fn kv_pressure_needs_a_full_cache_and_preemptions() {
    let store = |kv: f64, preempting: bool| {
        let mut s = SampleStore::default();
        let l = [("instance", "10.0.0.1:8000"), ("model_name", "m")];
        for k in 0..=60 {
            let t = f64::from(k * 5);
            s.push("vllm:kv_cache_usage_perc", &l, t, kv);
            let preemptions = if preempting { t / 10.0 } else { 7.0 };
            s.push("vllm:num_preemptions_total", &l, t, preemptions);
        }
        s
    };
    let events = run(&store(0.97, true), 0.0, 300.0, 5.0);
    assert_eq!(fired(&events, "GoodputKvPressure").len(), 1, "{events:#?}");
    for (kv, preempting) in [(0.97, false), (0.5, true)] {
        let events = run(&store(kv, preempting), 0.0, 300.0, 5.0);
        assert!(
            events.is_empty(),
            "kv {kv}, preempting {preempting}: {events:#?}"
        );
    }
    // An old vLLM under the alias name, and SGLang (no preemption counter: requests wait).
    let mut old = SampleStore::default();
    let mut sglang = SampleStore::default();
    let l = [("instance", "10.0.0.1:8000")];
    for k in 0..=60 {
        let t = f64::from(k * 5);
        old.push("vllm:gpu_cache_usage_perc", &l, t, 0.99);
        old.push("vllm:num_preemptions_total", &l, t, t);
        sglang.push("sglang:token_usage", &l, t, 0.96);
        sglang.push("sglang:num_queue_reqs", &l, t, 3.0);
    }
    for (what, s) in [("alias", old), ("sglang", sglang)] {
        let events = run(&s, 0.0, 300.0, 5.0);
        assert_eq!(
            firing_names(&events),
            BTreeSet::from(["GoodputKvPressure"]),
            "{what}"
        );
    }
}

#[test]
fn engine_errors_fire_on_requests_the_engine_failed() {
    let store = |errors_per_s: f64| {
        let mut s = SampleStore::default();
        for k in 0..=120 {
            let t = f64::from(k * 5);
            for (reason, rate) in [("stop", 8.0), ("length", 2.0), ("error", errors_per_s)] {
                s.push(
                    "vllm:request_success_total",
                    &[("instance", "10.0.0.1:8000"), ("finished_reason", reason)],
                    t,
                    rate * t,
                );
            }
        }
        s
    };
    let events = run(&store(0.5), 0.0, 600.0, 15.0);
    let errors = fired(&events, "GoodputEngineErrors");
    assert_eq!(errors.len(), 1, "{events:#?}");
    assert_eq!(errors[0].labels["instance"], "10.0.0.1:8000");
    let events = run(&store(0.0), 0.0, 600.0, 15.0);
    assert!(events.is_empty(), "{events:#?}");
}

// ---- Synthetic client records ------------------------------------------------------------

const CUTOFFS: [(f64, f64); 2] = [(500.0, 50.0), (2_000.0, 100.0)];

fn classes() -> Vec<String> {
    vec!["chat".to_string(), "batch".to_string()]
}

/// 10 requests per second per class for `seconds`; `outcome(class, t)` gives whether the
/// request succeeds and its TTFT (ms); TPOT is 20 ms, lag 0.
fn client_records(seconds: f64, outcome: impl Fn(usize, f64) -> (bool, f64)) -> Vec<RequestRecord> {
    client_records_lagging(seconds, outcome, |_| 0.0)
}

fn client_records_lagging(
    seconds: f64,
    outcome: impl Fn(usize, f64) -> (bool, f64),
    lag: impl Fn(f64) -> f64,
) -> Vec<RequestRecord> {
    let mut out = Vec::new();
    let mut index = 0;
    for k in 0..(seconds * 10.0) as u64 {
        let scheduled = k as f64 / 10.0;
        for class in 0..2 {
            let (ok, ttft_ms) = outcome(class, scheduled);
            let sent = scheduled + lag(scheduled);
            let tokens = 50u32;
            let tpot_ms = 20.0;
            let e2e_ms = ttft_ms + tpot_ms * f64::from(tokens - 1);
            out.push(RequestRecord {
                index,
                class,
                scheduled_s: scheduled,
                sent_s: sent,
                first_token_s: ok.then_some(scheduled + ttft_ms / 1e3),
                last_token_s: ok.then_some(scheduled + e2e_ms / 1e3),
                ended_s: if ok {
                    scheduled + e2e_ms / 1e3
                } else {
                    sent + 0.5
                },
                input_tokens: 100,
                input_tokens_usage: None,
                max_tokens: tokens,
                ttft_ms: if ok { ttft_ms } else { 0.0 },
                tpot_ms: if ok { tpot_ms } else { 0.0 },
                e2e_ms: if ok { e2e_ms } else { 0.0 },
                output_tokens: if ok { tokens } else { 0 },
                output_tokens_counted: if ok { tokens } else { 0 },
                output_tokens_usage: ok.then_some(tokens),
                status: if ok { "ok" } else { "http_status" },
                itl_ms: Vec::new(),
                finish_reason: ok.then(|| "length".to_string()),
                http_status: Some(if ok { 200 } else { 503 }),
                error_message: None,
            });
            index += 1;
        }
    }
    out
}

fn client_store(records: &[RequestRecord], end: f64) -> SampleStore {
    let mut s = SampleStore::default();
    s.add_client_records(records, &classes(), &CUTOFFS, 0.95, 5.0, end);
    s
}

#[test]
fn client_metrics_come_from_the_records() {
    // Every 10th chat request misses its TTFT cutoff; batch requests all pass; 1 in 20
    // batch requests fails.
    let records = client_records(60.0, |class, t| {
        let k = (t * 10.0).round() as u64;
        match class {
            0 => (true, if k.is_multiple_of(10) { 900.0 } else { 100.0 }),
            _ => (!k.is_multiple_of(20), 100.0),
        }
    });
    let s = client_store(&records, 60.0);
    let at = |name: &str, labels: &[(&str, &str)], t: f64| {
        let series = s
            .get(name, labels)
            .unwrap_or_else(|| panic!("no {name}{labels:?}"));
        series
            .points
            .iter()
            .find(|p| p.0 == t)
            .map(|p| p.1)
            .unwrap_or_else(|| panic!("{name}{labels:?} has no point at {t}"))
    };
    // Requests scheduled by 50 s that ended by 60 s: all 500 per class (E2E ≈ 1.1 s).
    let ok_chat = at(
        "goodput_loadgen_requests_total",
        &[("class", "chat"), ("result", "ok")],
        60.0,
    );
    assert!((580.0..=600.0).contains(&ok_chat), "{ok_chat}");
    let met_chat = at(
        "goodput_loadgen_requests_slo_met_total",
        &[("class", "chat")],
        60.0,
    );
    assert!(
        (met_chat / ok_chat - 0.9).abs() < 0.01,
        "{met_chat} of {ok_chat}"
    );
    let errors = at(
        "goodput_loadgen_requests_total",
        &[("class", "batch"), ("result", "error")],
        60.0,
    );
    assert_eq!(errors, 30.0);
    assert_eq!(
        at(
            "goodput_loadgen_requests_total",
            &[("class", "chat"), ("result", "error")],
            60.0
        ),
        0.0,
        "the error series exists from the start"
    );
    assert_eq!(
        at(
            "goodput_loadgen_slo_attainment_target",
            &[("class", "batch")],
            0.0
        ),
        0.95
    );
    assert_eq!(at("goodput_loadgen_schedule_lag_seconds", &[], 30.0), 0.0);
    // Counters never decrease.
    for series in s.series() {
        assert!(series.points.windows(2).all(|w| w[0].0 < w[1].0));
        if series.name.ends_with("_total") {
            assert!(series.points.windows(2).all(|w| w[0].1 <= w[1].1));
        }
    }

    // A client 2 s behind its schedule, and one stuck: unsent requests count with their
    // lag so far.
    let late = client_records_lagging(60.0, |_, _| (true, 100.0), |_| 2.0);
    let s = client_store(&late, 60.0);
    let lag = s
        .get("goodput_loadgen_schedule_lag_seconds", &[])
        .map(|x| x.points.clone())
        .unwrap_or_default();
    assert!(
        lag.iter()
            .filter(|p| p.0 >= 5.0)
            .all(|p| (p.1 - 2.0).abs() < 1e-9),
        "{lag:?}"
    );
    let stuck = client_records_lagging(
        60.0,
        |_, _| (true, 100.0),
        |t| if t >= 30.0 { 100.0 } else { 0.0 },
    );
    let s = client_store(&stuck, 60.0);
    let lag = s
        .get("goodput_loadgen_schedule_lag_seconds", &[])
        .map(|x| x.points.clone())
        .unwrap_or_default();
    let at_60 = lag.iter().find(|p| p.0 == 60.0).map_or(0.0, |p| p.1);
    assert!(
        at_60 > 25.0,
        "nothing sent after 30 s, lag at 60 s: {at_60}"
    );
}

#[test]
fn slo_burn_fires_when_attainment_drops_to_half_and_not_at_99_percent() {
    // 20 minutes; chat meets its cutoffs 99% of the time, then only 50% from minute 10;
    // batch stays at 99%.
    let miss = |k: u64, every: u64| k.is_multiple_of(every);
    let records = client_records(1200.0, |class, t| {
        let k = (t * 10.0).round() as u64;
        let failing = class == 0 && t >= 600.0;
        let slow = if failing { miss(k, 2) } else { miss(k, 100) };
        (true, if slow { 900.0 } else { 100.0 })
    });
    let events = run(&client_store(&records, 1200.0), 0.0, 1200.0, 15.0);
    for alert in ["GoodputSloBurnFast", "GoodputSloBurnSlow"] {
        let burning = fired(&events, alert);
        assert_eq!(burning.len(), 1, "{alert}: {events:#?}");
        assert_eq!(burning[0].labels["class"], "chat");
        let at = burning[0].firing_at_s.unwrap_or(f64::INFINITY);
        assert!(at > 600.0 && at <= 900.0, "{alert} at {at}");
    }
    assert_eq!(
        firing_names(&events),
        BTreeSet::from(["GoodputSloBurnFast", "GoodputSloBurnSlow"])
    );

    let records = client_records(1200.0, |_, t| {
        let k = (t * 10.0).round() as u64;
        (true, if miss(k, 100) { 900.0 } else { 100.0 })
    });
    let events = run(&client_store(&records, 1200.0), 0.0, 1200.0, 15.0);
    assert!(events.is_empty(), "99% attainment: {events:#?}");
}

#[test]
fn client_errors_and_a_lagging_client_fire_their_alerts() {
    // 3% of batch requests fail from minute 2.
    let records = client_records(360.0, |class, t| {
        let k = (t * 10.0).round() as u64;
        (!(class == 1 && t >= 120.0 && k.is_multiple_of(33)), 100.0)
    });
    let events = run(&client_store(&records, 360.0), 0.0, 360.0, 15.0);
    let errors = fired(&events, "GoodputClientErrorRate");
    assert_eq!(errors.len(), 1, "{events:#?}");
    assert_eq!(errors[0].labels["class"], "batch");
    assert_eq!(
        firing_names(&events),
        BTreeSet::from(["GoodputClientErrorRate"])
    );

    // Sends 2 s behind schedule from minute 2.
    let late = client_records_lagging(
        360.0,
        |_, _| (true, 100.0),
        |t| if t >= 120.0 { 2.0 } else { 0.0 },
    );
    let events = run(&client_store(&late, 360.0), 0.0, 360.0, 15.0);
    let behind = fired(&events, "GoodputLoadGeneratorBehindSchedule");
    assert_eq!(behind.len(), 1, "{events:#?}");
    let at = behind[0].firing_at_s.unwrap_or(f64::INFINITY);
    assert!(at > 120.0 && at <= 210.0, "{at}");
}
