//! Unit tests of `handoff`.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use goodput_core::analysis::{ClassSlo, QueueTrend};
use goodput_core::workload::CacheMode;
use goodput_core::workload::schedule::{Arrival, ScheduleClass, ScheduleSpec};
use goodput_loadgen::point::PointPlan;
use goodput_loadgen::prompt::PromptMethod;
use goodput_loadgen::record::RequestRecord;
use goodput_loadgen::run::{LoadConfig, PointRun};
use goodput_loadgen::{Api, Timeouts};

const RATE: f64 = 16.0;
const REQUESTS: u64 = 400;

fn gate() -> GateConfig {
    GateConfig {
        classes: ["a", "b", "c"]
            .iter()
            .map(|n| ClassSlo {
                name: (*n).into(),
                ttft_cutoff_ms: 103.0,
                tpot_cutoff_ms: 12.0,
            })
            .collect(),
        min_successes_per_class: 50,
        p99_min_successes: 100,
        ..GateConfig::default()
    }
}

fn config() -> LoadConfig {
    LoadConfig {
        target: "http://127.0.0.1:1".into(),
        model: "m".into(),
        api: Api::Completions,
        mode: LoadMode::Rate { rate: RATE },
        cache: CacheMode::Cold,
        shared_prefix: None,
        seed: 7,
        timeouts: Timeouts::default(),
        warmup_s: 0.0,
        warmup_requests: 0,
        ignore_eos: true,
        min_tokens: false,
        temperature: None,
        text_words_per_token: None,
        token_ids: goodput_loadgen::prompt::TokenRange::DEFAULT,
        chat_template_tokens: 0,
        close_connections: false,
        prompt_method: PromptMethod::TokenIds,
        max_in_flight: None,
        progress: false,
        live_metrics: None,
        cancel: None,
        early_stop: None,
    }
}

fn plan(shard: (u32, u32)) -> PointPlan {
    PointPlan {
        schedule: ScheduleSpec {
            classes: ["a", "b", "c"]
                .iter()
                .map(|n| ScheduleClass {
                    name: (*n).into(),
                    mix: 1.0 / 3.0,
                    input_tokens: 64,
                    output_tokens: 32,
                })
                .collect(),
            requests: REQUESTS,
            seed: 7,
            arrival: Arrival::Constant,
            output_jitter: 0.0,
            shared_prefix: None,
        },
        min_duration_s: 0.0,
        min_per_class: 1,
        max_blocks: 1,
        shard,
        gate: gate(),
        metrics_targets: Vec::new(),
        scrape_interval: Duration::from_secs(1),
        max_lag_ms: 10.0,
        record_itl: true,
        start_at_unix_s: None,
    }
}

/// One request of the synthetic point. Times and latencies are multiples of 1/8 ms
/// (exact in binary and in the CSV's 3 decimals), so the in-memory analysis and the
/// CSV's agree to the bit; every 17th request fails.
fn record(i: u64) -> RequestRecord {
    let scheduled_s = i as f64 * 0.0625;
    let sent_s = scheduled_s + (i % 5) as f64 * 0.0001;
    let base = RequestRecord {
        index: i,
        class: (i % 3) as usize,
        scheduled_s,
        sent_s,
        first_token_s: None,
        last_token_s: None,
        ended_s: sent_s + 0.001,
        input_tokens: 64,
        input_tokens_usage: None,
        max_tokens: 32,
        ttft_ms: 0.0,
        tpot_ms: 0.0,
        e2e_ms: 0.0,
        output_tokens: 0,
        output_tokens_counted: 0,
        output_tokens_usage: None,
        status: "http_error",
        itl_ms: Vec::new(),
        finish_reason: None,
        http_status: Some(503),
        error_message: Some("overloaded".into()),
    };
    if i.is_multiple_of(17) {
        return base;
    }
    let ttft = 95.0 + (i % 80) as f64 * 0.125;
    let tpot = 10.0 + (i % 7) as f64 * 0.5;
    let e2e = ttft + tpot * 31.0;
    RequestRecord {
        first_token_s: Some(scheduled_s + ttft / 1e3),
        last_token_s: Some(scheduled_s + e2e / 1e3),
        ended_s: scheduled_s + e2e / 1e3,
        ttft_ms: ttft,
        tpot_ms: tpot,
        e2e_ms: e2e,
        output_tokens: 32,
        output_tokens_counted: 32,
        output_tokens_usage: Some(32),
        status: "ok",
        itl_ms: vec![tpot; 31],
        finish_reason: Some("length".into()),
        http_status: Some(200),
        error_message: None,
        ..base
    }
}

/// Shard `shard` of `shards` of the synthetic point, measured and summarised as a pod
/// does it; its client samples 2 requests in flight every 100 ms.
fn measured(shard: u32, shards: u32) -> (MeasuredPoint, PointSummaryFile, PointPlan) {
    let records: Vec<RequestRecord> = (0..REQUESTS)
        .filter(|i| i % u64::from(shards) == u64::from(shard))
        .map(record)
        .collect();
    let first = records.first().map_or(0.0, |r| r.scheduled_s);
    let last = records.last().map_or(0.0, |r| r.scheduled_s);
    let mut client = ClientFacts {
        sent: records.len() as u64,
        measured: records.len() as u64,
        peak_in_flight: 2,
        window_s: open_loop_window_s(RATE, first, last),
        in_flight_series: (0..=260)
            .map(|k| (f64::from(k) * 0.1, 8.0 / f64::from(shards)))
            .collect(),
        ..ClientFacts::default()
    };
    client.refresh_from(&records);
    let plan = plan((shard, shards));
    let m = MeasuredPoint {
        run: PointRun {
            records,
            client,
            start: Instant::now(),
        },
        series: None,
        prewarmed: 0,
        schedule: ScheduleFacts {
            seed: 7,
            blocks: 1,
            requests_per_block: REQUESTS,
            requests: (REQUESTS / u64::from(shards)) as usize,
            shard: format!("{shard}/{shards}"),
            hash: "00000000000000ab".into(),
            continuations: 0,
            block_reasons: Vec::new(),
        },
        started_unix_s: 1.0e9,
        vocabulary: None,
        chat_sizing: None,
        cache_reset: None,
        drain: None,
        prompt_method: PromptMethod::TokenIds,
    };
    let summary = m.summarize(&config(), &plan).expect("summarises");
    (m, summary, plan)
}

fn shard_result(shard: u32, shards: u32) -> ShardResult {
    let (m, summary, plan) = measured(shard, shards);
    ShardResult::new(&m, summary, &plan).expect("result builds")
}

fn config_map(name: &str, r: &ShardResult) -> ConfigMap {
    let (data, binary) = r.to_config_map_data().expect("fits");
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(data),
        binary_data: Some(binary),
        ..ConfigMap::default()
    }
}

/// Four shards, each through its ConfigMap and back, merged: the same report, to the
/// bit, as the whole point analysed at once (in memory by the pod's summary, and from
/// its one CSV by `goodput analyze`'s function).
#[test]
fn four_shards_through_config_maps_merge_to_the_whole_point() {
    let (whole, whole_summary, whole_plan) = measured(0, 1);
    let mut read = Vec::new();
    for i in 0..4 {
        let r = shard_result(i, 4);
        let cm = config_map(&format!("cb-x-p3-{i}"), &r);
        assert!(ShardResult::is_written(&cm));
        let back = ShardResult::from_config_map(&cm).expect("reads back");
        assert_eq!(back, r, "shard {i} round-trips exactly");
        read.push(back);
    }
    read.reverse(); // any order
    let merged = merge_shards(&read, &gate()).expect("merges");
    let whole_csv = ShardResult::new(&whole, whole_summary.clone(), &whole_plan)
        .expect("whole result")
        .requests_csv;
    let analyzed = analyze_requests(
        gate(),
        [(Path::new("whole.csv"), whole_csv.as_slice())],
        whole_summary.client.window_s,
        QueueTrend::Flat,
    )
    .expect("analyses");
    assert_eq!(analyzed, whole_summary.report, "CSV and in-memory agree");
    assert_eq!(
        merged.report(),
        &whole_summary.report,
        "bit-identical figures"
    );
    let r = merged.report();
    assert_eq!(r.attempted, REQUESTS, "no request counted twice or lost");
    assert_eq!(
        r.failed,
        (0..REQUESTS).filter(|i| i.is_multiple_of(17)).count() as u64
    );
    assert!(r.classes["a"].itl.is_some(), "ITL histograms merged");

    let s = &merged.summary;
    assert!(s.validity.valid, "{:?}", s.validity);
    assert_eq!(s.experiment, "rate_sweep_point");
    assert_eq!(s.client.measured, REQUESTS);
    assert_eq!(s.client.sent, REQUESTS);
    assert_eq!(s.client.window_s, whole_summary.client.window_s);
    let lag = (
        s.client.schedule_lag_ms,
        whole_summary.client.schedule_lag_ms,
    );
    assert!((lag.0.p99 - lag.1.p99).abs() < 1e-3, "{lag:?}");
    assert!((lag.0.max - lag.1.max).abs() < 1e-3, "{lag:?}");
    // Four clients with 2 in flight each: 8 for the point.
    assert!(s.client.in_flight_series.iter().all(|p| p.1 == 8.0));
    assert!(s.queue_trend_source.starts_with("client in-flight"));
    assert_eq!(s.schedule.requests, REQUESTS as usize);
    assert_eq!(s.schedule.shard, "0-3/4");
    let law = s.littles_law.expect("Little's Law checked");
    let whole_law = whole_summary.littles_law.expect("whole law");
    assert!((law.expected_in_flight - whole_law.expected_in_flight).abs() < 1e-9);

    // The merged requests.csv is the whole point's, byte for byte.
    assert_eq!(merged_requests_csv(&read).expect("csv"), whole_csv);
    assert_eq!(s.client.cpu_throttling, None, "no shard read its cgroup");
}

#[test]
fn the_shards_cpu_throttling_adds_up() {
    use goodput_loadgen::cpu_throttle::CpuThrottling;
    let mut shards: Vec<ShardResult> = (0..3).map(|i| shard_result(i, 3)).collect();
    let throttled = CpuThrottling {
        periods: 100,
        throttled_periods: 7,
        throttled_ms: 70.0,
    };
    shards[0].summary.client.cpu_throttling = Some(throttled);
    shards[2].summary.client.cpu_throttling = Some(CpuThrottling {
        throttled_periods: 0,
        throttled_ms: 0.0,
        ..throttled
    });
    let merged = merge_shards(&shards, &gate()).expect("merges");
    assert_eq!(
        merged.summary.client.cpu_throttling,
        Some(CpuThrottling {
            periods: 200,
            throttled_periods: 7,
            throttled_ms: 70.0
        })
    );
}

#[test]
fn a_missing_shard_is_named() {
    let shards: Vec<ShardResult> = [0, 1, 3].iter().map(|&i| shard_result(i, 4)).collect();
    match merge_shards(&shards, &gate()) {
        Err(HandoffError::MissingShard { missing, shards }) => {
            assert_eq!((missing, shards), (vec![2], 4));
        }
        other => panic!("expected MissingShard, got {other:?}"),
    }
    let twice = vec![shard_result(0, 2), shard_result(0, 2)];
    assert!(matches!(
        merge_shards(&twice, &gate()),
        Err(HandoffError::DuplicateShard {
            shard: 0,
            shards: 2
        })
    ));
    let mixed = vec![shard_result(0, 2), shard_result(1, 4)];
    assert!(matches!(
        merge_shards(&mixed, &gate()),
        Err(HandoffError::ShardCount { .. })
    ));
    assert!(matches!(
        merge_shards(&[], &gate()),
        Err(HandoffError::NoShards)
    ));
}

#[test]
fn corrupt_gzip_and_missing_keys_are_typed() {
    let r = shard_result(1, 4);
    let mut cm = config_map("p-1", &r);
    let binary = cm.binary_data.as_mut().expect("binary data");
    let gz = &mut binary.get_mut(REQUESTS_KEY).expect("requests").0;
    gz.truncate(gz.len() / 2);
    match ShardResult::from_config_map(&cm) {
        Err(e @ HandoffError::Gzip { .. }) => {
            assert!(e.to_string().contains("requests.csv.gz"), "{e}");
        }
        other => panic!("expected Gzip, got {other:?}"),
    }
    let mut cm = config_map("p-1", &r);
    cm.binary_data
        .as_mut()
        .expect("binary data")
        .insert(SUMMARY_KEY.into(), ByteString(b"not gzip at all".to_vec()));
    assert!(matches!(
        ShardResult::from_config_map(&cm),
        Err(HandoffError::Gzip {
            key: SUMMARY_KEY,
            ..
        })
    ));
    let empty = ConfigMap {
        metadata: ObjectMeta {
            name: Some("p-1".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    assert!(!ShardResult::is_written(&empty));
    assert!(matches!(
        ShardResult::from_config_map(&empty),
        Err(HandoffError::MissingKey {
            key: SUMMARY_KEY,
            ..
        })
    ));
    let mut cm = config_map("p-1", &r);
    cm.binary_data.as_mut().expect("binary data").insert(
        SUMMARY_KEY.into(),
        ByteString(gzip(SUMMARY_KEY, b"{\"format\": 1,").expect("gz")),
    );
    assert!(matches!(
        ShardResult::from_config_map(&cm),
        Err(HandoffError::Json {
            key: SUMMARY_KEY,
            ..
        })
    ));
}

#[test]
fn a_bad_csv_row_names_its_line_and_column() {
    let mut r = shard_result(2, 4);
    let text = String::from_utf8(r.requests_csv.clone()).expect("utf-8");
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    // Line 4 of the file (third row): scheduled_s is column 8.
    let mut fields: Vec<&str> = lines[3].split(',').collect();
    fields[7] = "soon";
    lines[3] = fields.join(",");
    r.requests_csv = (lines.join("\n") + "\n").into_bytes();
    let cm = config_map("p-2", &r);
    match ShardResult::from_config_map(&cm) {
        Err(HandoffError::Csv(CsvError::Row {
            line, column, name, ..
        })) => assert_eq!((line, column, name.as_str()), (4, 8, "scheduled_s")),
        other => panic!("expected a CSV row error, got {other:?}"),
    }

    // A class the gate does not know: the analysis core names the row when merging.
    let mut shards: Vec<ShardResult> = (0..2).map(|i| shard_result(i, 2)).collect();
    let text = String::from_utf8(shards[1].requests_csv.clone()).expect("utf-8");
    shards[1].requests_csv = text.replacen(",b,", ",zz,", 1).into_bytes();
    match merge_shards(&shards, &gate()) {
        Err(HandoffError::Analyze(AnalyzeError::Csv(CsvError::Row {
            path, column, name, ..
        }))) => {
            assert_eq!((column, name.as_str()), (2, "class"));
            assert_eq!(path, PathBuf::from("shard 1/2 requests.csv"));
        }
        other => panic!("expected the analyzer's row error, got {other:?}"),
    }
}

#[test]
fn requests_of_another_shard_or_twice_are_refused() {
    let mut shards: Vec<ShardResult> = (0..2).map(|i| shard_result(i, 2)).collect();
    // Shard 0's CSV gains a row of shard 1: it would be counted twice.
    let row_of_one = String::from_utf8(shards[1].requests_csv.clone())
        .expect("utf-8")
        .lines()
        .nth(1)
        .expect("a row")
        .to_owned();
    let mut text = String::from_utf8(shards[0].requests_csv.clone()).expect("utf-8");
    text.push_str(&row_of_one);
    text.push('\n');
    shards[0].requests_csv = text.into_bytes();
    shards[0].summary.client.measured += 1;
    assert!(matches!(
        merge_shards(&shards, &gate()),
        Err(HandoffError::ForeignRequest {
            shard: 0,
            owner: 1,
            ..
        })
    ));
    let mut shards: Vec<ShardResult> = (0..2).map(|i| shard_result(i, 2)).collect();
    let text = String::from_utf8(shards[0].requests_csv.clone()).expect("utf-8");
    let again = text.lines().nth(1).expect("a row").to_owned();
    shards[0].requests_csv = format!("{text}{again}\n").into_bytes();
    shards[0].summary.client.measured += 1;
    assert!(matches!(
        merge_shards(&shards, &gate()),
        Err(HandoffError::DuplicateRequest { shard: 0, .. })
    ));
    // A result whose rows and summary disagree (truncated records) is refused.
    let mut shards: Vec<ShardResult> = (0..2).map(|i| shard_result(i, 2)).collect();
    shards[1].summary.client.measured += 1;
    assert!(matches!(
        merge_shards(&shards, &gate()),
        Err(HandoffError::RecordCount { shard: 1, .. })
    ));
}

#[test]
fn the_size_guard_refuses_instead_of_truncating() {
    let mut r = shard_result(0, 4);
    // 2.5 MB of hex digits from a xorshift stream: 4 bits of entropy a byte, so about
    // 1.25 MB after gzip.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let noise: String = (0..2_500_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b"0123456789abcdef"[(x % 16) as usize])
        })
        .collect();
    r.requests_csv.extend_from_slice(noise.as_bytes());
    match r.to_config_map_data() {
        Err(e @ HandoffError::TooLarge { bytes, limit, .. }) => {
            assert!(bytes > limit && limit == CONFIG_MAP_LIMIT_BYTES);
            assert!(e.to_string().contains("more than a ConfigMap holds"), "{e}");
        }
        Err(other) => panic!("expected TooLarge, got {other}"),
        Ok((_, binary)) => panic!(
            "expected TooLarge, got {} bytes of requests",
            binary[REQUESTS_KEY].0.len()
        ),
    }
}

#[test]
fn a_result_for_another_shard_is_refused() {
    let r = shard_result(2, 4);
    let mut cm = config_map("cb-x-p3-1", &r);
    cm.metadata.annotations = Some(BTreeMap::from([(
        SHARD_ANNOTATION.to_owned(),
        "1/4".to_owned(),
    )]));
    match ShardResult::from_config_map(&cm) {
        Err(HandoffError::ShardMismatch {
            result, expected, ..
        }) => assert_eq!((result.as_str(), expected.as_str()), ("2/4", "1/4")),
        other => panic!("expected ShardMismatch, got {other:?}"),
    }
    let mut cm = config_map("cb-x-p3-2", &r);
    cm.data
        .as_mut()
        .expect("data")
        .insert(SHARD_KEY.into(), "3/4".into());
    assert!(matches!(
        ShardResult::from_config_map(&cm),
        Err(HandoffError::ShardMismatch { .. })
    ));
}

#[test]
fn an_invalid_or_late_shard_makes_the_point_invalid_and_shifts_its_timeline() {
    let mut shards: Vec<ShardResult> = (0..4).map(|i| shard_result(i, 4)).collect();
    shards[2].summary.validity = goodput_loadgen::point::Validity {
        valid: false,
        reasons: vec!["the run was stopped before its schedule ended".into()],
        client_behind: false,
        notes: Vec::new(),
    };
    shards[3].summary.client.start_lateness_ms = 250.0;
    let merged = merge_shards(&shards, &gate()).expect("merges");
    let v = &merged.summary.validity;
    assert!(!v.valid);
    assert!(
        v.reasons
            .iter()
            .any(|r| r == "shard 2/4: the run was stopped before its schedule ended"),
        "{v:?}"
    );
    assert!(
        v.reasons
            .iter()
            .any(|r| r.contains("250.00 ms after its start instant")),
        "{v:?}"
    );
    // Shard 3 ran 0.25 s behind: the point's window is that much longer.
    let on_time = merge_shards(
        &(0..4).map(|i| shard_result(i, 4)).collect::<Vec<_>>(),
        &gate(),
    )
    .expect("merges");
    let d = merged.summary.client.window_s - on_time.summary.client.window_s;
    assert!((d - 0.25).abs() < 1e-9, "{d}");
}
