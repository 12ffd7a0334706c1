//! The load generator's live client metrics (`goodput loadgen --metrics-addr`) against the
//! simulated engine: scraped over HTTP while a point runs and at its end, the counters equal
//! the records' counts and what the offline alert store derives from the same records; and
//! the CLI flag serves them while the command runs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use goodput::alerts::SampleStore;
use goodput::analysis::{ClassSlo, GateConfig, meets_slo};
use goodput::api::CacheMode;
use goodput::loadgen::live_metrics::{LiveMetrics, serve};
use goodput::loadgen::point::{PointPlan, measure_point};
use goodput::loadgen::prompt::PromptMethod;
use goodput::loadgen::run::{LoadConfig, LoadMode};
use goodput::loadgen::{Api, Timeouts};
use goodput::sim::live::fleet::{Fleet, FleetConfig, start_fleet};
use goodput::sim::live::router::RouterConfig;
use goodput::sim::live::{FaultConfig, ReplicaConfig};
use goodput::sim::preset;
use goodput::workload::schedule::{Arrival, ScheduleClass, ScheduleSpec};
use tokio::sync::{oneshot, watch};

/// The tests time a live engine: one at a time, so that on a 2-core machine one test's
/// load does not slow the other's.
use crate::MACHINE;

const MODEL: &str = "Qwen/Qwen2.5-7B-Instruct";

/// One replica of the simulated engine, 20 times faster than real time.
async fn fleet(faults: FaultConfig) -> Fleet {
    start_fleet(FleetConfig {
        replica: ReplicaConfig {
            time_scale: 20.0,
            ..ReplicaConfig::new(preset("qwen2.5-7b-h100").unwrap())
        },
        replicas: 1,
        host: [127, 0, 0, 1].into(),
        port: 0,
        router: RouterConfig::default(),
        cold_start: Duration::ZERO,
        faults,
    })
    .await
    .unwrap()
}

/// `series → value` of a text exposition (`name{labels}` exactly as written).
fn parse(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// `GET url`: the content type and the parsed series, or `None` when it does not answer.
async fn scrape(
    client: &reqwest::Client,
    url: &str,
) -> Option<(String, String, BTreeMap<String, f64>)> {
    let r = client.get(url).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    let content_type = r
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let text = r.text().await.ok()?;
    let series = parse(&text);
    Some((content_type, text, series))
}

fn requests(class: &str, result: &str) -> String {
    format!("goodput_loadgen_requests_total{{class=\"{class}\",result=\"{result}\"}}")
}

fn slo_met(class: &str) -> String {
    format!("goodput_loadgen_requests_slo_met_total{{class=\"{class}\"}}")
}

fn target(class: &str) -> String {
    format!("goodput_loadgen_slo_attainment_target{{class=\"{class}\"}}")
}

/// Requests completed, every class and result summed.
fn completed(series: &BTreeMap<String, f64>) -> f64 {
    series
        .iter()
        .filter(|(k, _)| k.starts_with("goodput_loadgen_requests_total{"))
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_counters_equal_the_records_and_the_offline_store() {
    let _machine = MACHINE.whole().await;
    // One request in ten fails with a 503, so both results of every class move.
    let f = fleet(FaultConfig {
        error_fraction: 0.1,
        error_status: 503,
        ..FaultConfig::default()
    })
    .await;
    // "tight" can never meet its TPOT cutoff (below zero; a stream whose tokens arrive in
    // one frame has a TPOT of exactly 0), "loose" always does, "mid" has a TTFT cutoff near
    // the engine's: whatever share meets it, the counts must agree.
    let cutoffs = [("tight", 1e6, -1.0), ("loose", 1e6, 1e6), ("mid", 5.0, 1e6)];
    let gate = GateConfig {
        classes: cutoffs
            .iter()
            .map(|&(name, ttft, tpot)| ClassSlo {
                name: name.into(),
                ttft_cutoff_ms: ttft,
                tpot_cutoff_ms: tpot,
            })
            .collect(),
        attainment_min: 0.9,
        min_successes_per_class: 1,
        ..GateConfig::default()
    };
    let metrics = Arc::new(LiveMetrics::new(&gate, 1.0));
    // Port 0: the listener is bound first and its port read back, so nothing can take it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    let (stop_server, server_stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, metrics.clone(), async move {
        let _ = server_stopped.await;
    }));

    let http = reqwest::Client::new();
    // Before any load: every series at 0, both results of every class.
    let (_, _, at_start) = scrape(&http, &url).await.expect("the server answers");
    for (class, ..) in cutoffs {
        assert_eq!(
            at_start.get(&requests(class, "ok")),
            Some(&0.0),
            "{at_start:?}"
        );
        assert_eq!(at_start.get(&requests(class, "error")), Some(&0.0));
        assert_eq!(at_start.get(&slo_met(class)), Some(&0.0));
        assert_eq!(at_start.get(&target(class)), Some(&0.9));
    }

    // Scrape every 100 ms while the point runs.
    let (done_tx, mut done_rx) = watch::channel(false);
    let scraper = {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !*done_rx.borrow() {
                if let Some(s) = scrape(&http, &url).await {
                    seen.push(s);
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = done_rx.changed() => {}
                }
            }
            seen
        })
    };

    let requests_n = 300;
    let config = LoadConfig {
        target: f.replicas[0].url(),
        model: MODEL.into(),
        api: Api::Completions,
        mode: LoadMode::Rate { rate: 100.0 },
        cache: CacheMode::Cold,
        shared_prefix: None,
        seed: 1,
        timeouts: Timeouts {
            request: Duration::from_secs(30),
            stall: Duration::from_secs(10),
            connect: Duration::from_secs(2),
        },
        warmup_s: 0.0,
        warmup_requests: 0,
        ignore_eos: true,
        min_tokens: false,
        temperature: None,
        text_words_per_token: None,
        token_ids: goodput::loadgen::prompt::TokenRange::DEFAULT,
        chat_template_tokens: 0,
        close_connections: false,
        prompt_method: PromptMethod::TokenIds,
        max_in_flight: None,
        progress: false,
        live_metrics: Some(metrics.clone()),
        cancel: None,
        early_stop: None,
    };
    let class = |name: &str, mix: f64| ScheduleClass {
        name: name.into(),
        mix,
        input_tokens: 64,
        output_tokens: 8,
    };
    let plan = PointPlan {
        schedule: ScheduleSpec {
            classes: vec![class("tight", 0.5), class("loose", 0.3), class("mid", 0.2)],
            requests: requests_n,
            seed: 7,
            arrival: Arrival::Poisson,
            output_jitter: 0.0,
            shared_prefix: None,
        },
        min_duration_s: 0.0,
        min_per_class: 1,
        max_blocks: 1,
        shard: (0, 1),
        gate: gate.clone(),
        metrics_targets: Vec::new(),
        scrape_interval: Duration::from_millis(100),
        max_lag_ms: 10.0,
        record_itl: false,
        start_at_unix_s: None,
    };
    let client = goodput::http_client::default_http_client(Duration::from_secs(2)).unwrap();
    let (_stop_tx, stop_rx) = watch::channel(false);
    // About 3 s of arrivals; the bound only keeps a broken run from hanging the suite.
    let measured = tokio::time::timeout(
        Duration::from_secs(120),
        measure_point(client, &config, &plan, stop_rx),
    )
    .await
    .expect("the point ends within 2 minutes")
    .unwrap();
    done_tx.send(true).unwrap();
    let during = scraper.await.unwrap();
    let (content_type, text, end) = scrape(&http, &url).await.expect("the server answers");
    let _ = stop_server.send(());
    server.await.unwrap().unwrap();
    f.shutdown().await;

    let records = &measured.run.records;
    assert_eq!(
        records.len() as u64,
        requests_n,
        "no warmup: every request is a record"
    );
    assert_eq!(measured.run.client.sent, requests_n);

    // While it ran: scrapes answered, in OpenMetrics text, with counters that only grow,
    // and at least one caught the point part-way.
    assert!(during.len() >= 5, "{} scrapes while running", during.len());
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let totals: Vec<f64> = during.iter().map(|(_, _, s)| completed(s)).collect();
    assert!(totals.windows(2).all(|w| w[0] <= w[1]), "{totals:?}");
    assert!(
        totals.iter().any(|&t| t > 0.0 && t < requests_n as f64),
        "no scrape saw the point part-way: {totals:?}"
    );
    for (_, _, s) in &during {
        let lag = s["goodput_loadgen_schedule_lag_seconds"];
        assert!(lag.is_finite() && lag >= 0.0, "lag {lag}");
    }

    // At the end: exactly the records' counts, per class and result, and SLO met by the
    // core's definition.
    let mut errors = 0;
    for (c, &(name, ttft, tpot)) in cutoffs.iter().enumerate() {
        let mine: Vec<_> = records.iter().filter(|r| r.class == c).collect();
        let ok = mine.iter().filter(|r| r.ok()).count() as f64;
        let failed = mine.iter().filter(|r| !r.ok()).count() as f64;
        let met = mine
            .iter()
            .filter(|r| r.ok() && meets_slo(r.ttft_ms, r.tpot_ms, ttft, tpot))
            .count() as f64;
        assert_eq!(end[&requests(name, "ok")], ok, "{name} ok in\n{text}");
        assert_eq!(end[&requests(name, "error")], failed, "{name} error");
        assert_eq!(end[&slo_met(name)], met, "{name} SLO met");
        assert_eq!(end[&target(name)], 0.9);
        assert!(ok > 0.0, "{name} has successes");
        errors += failed as u64;
    }
    assert!(errors > 0, "the injected 503s show as errors");
    assert_eq!(end[&slo_met("tight")], 0.0);
    assert_eq!(end[&slo_met("loose")], end[&requests("loose", "ok")]);
    assert_eq!(completed(&end), requests_n as f64);
    // Bounded labels: only the class and the result, never a request.
    for series in end.keys().filter(|k| k.starts_with("goodput_loadgen_")) {
        let labels = series.split_once('{').map_or("", |(_, l)| l);
        let keys: Vec<&str> = labels
            .trim_end_matches('}')
            .split(',')
            .filter(|l| !l.is_empty())
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .collect();
        assert!(
            keys.iter().all(|k| *k == "class" || *k == "result"),
            "{series}"
        );
    }

    // The offline store's last sample from the same records agrees, series by series.
    let names: Vec<String> = gate.classes.iter().map(|c| c.name.clone()).collect();
    let cuts: Vec<(f64, f64)> = gate
        .classes
        .iter()
        .map(|c| (c.ttft_cutoff_ms, c.tpot_cutoff_ms))
        .collect();
    let end_s = records.iter().map(|r| r.ended_s).fold(0.0, f64::max) + 1.0;
    let mut store = SampleStore::default();
    store.add_client_records(records, &names, &cuts, gate.attainment_min, 0.5, end_s);
    let mut compared = 0;
    for s in store.series() {
        if s.name == goodput::alerts::CLIENT_SCHEDULE_LAG {
            continue; // a gauge of the moment, not a total
        }
        let labels: Vec<String> = s
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect();
        let series = format!("{}{{{}}}", s.name, labels.join(","));
        let last = s.points.last().map(|p| p.1);
        assert_eq!(end.get(&series).copied(), last, "{series}");
        compared += 1;
    }
    assert_eq!(
        compared,
        3 * 4,
        "ok, error, SLO met and target of 3 classes"
    );
}

#[test]
fn the_cli_serves_the_client_metrics_while_it_runs() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _machine = rt.block_on(MACHINE.whole());
    let f = rt.block_on(fleet(FaultConfig::default()));
    // A free port, released for the command to bind (the command binds it before any load).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_goodput"))
        .args(["loadgen", "--target", &f.router_url(), "--model", MODEL])
        .args(["--rate", "50", "--requests", "150", "--warmup-s", "0"])
        .args(["--min-duration-s", "0", "--max-blocks", "1", "--quiet"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}"), "--out"])
        .arg(dir.path())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let http = reqwest::Client::new();
    let mut seen = Vec::new();
    // Scrape until the command exits (the server goes with it); about 3 s of load.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("goodput loadgen did not end within 2 minutes");
        }
        if let Some((_, _, s)) = rt.block_on(scrape(&http, &url)) {
            seen.push(s);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    rt.block_on(f.shutdown());
    assert!(status.success(), "{status}");
    assert!(!seen.is_empty(), "no scrape answered");
    // The seed manifest's classes, both results each, the target and the lag gauge.
    let last = seen.last().unwrap();
    for class in ["interactive", "long_context", "generation_heavy"] {
        assert!(last.contains_key(&requests(class, "ok")), "{last:?}");
        assert!(last.contains_key(&requests(class, "error")), "{last:?}");
        assert!(last.contains_key(&slo_met(class)), "{last:?}");
        assert_eq!(last.get(&target(class)), Some(&0.95), "{last:?}");
    }
    assert!(last.contains_key("goodput_loadgen_schedule_lag_seconds"));
    let totals: Vec<f64> = seen.iter().map(completed).collect();
    assert!(totals.windows(2).all(|w| w[0] <= w[1]), "{totals:?}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    let sent = summary["client"]["sent"].as_f64().unwrap();
    assert_eq!(sent, 150.0);
    assert!(
        totals.iter().any(|&t| t > 0.0) && totals.iter().all(|&t| t <= sent),
        "{totals:?}"
    );
}
