use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::workload::seed_manifest;

const HEADER: &str = "request_id,class,ttft_ms,tpot_ms,e2e_ms,output_tokens,status\n";

const SMOKE: &str = "request_id,class,ttft_ms,tpot_ms,e2e_ms,output_tokens,status
r-0001,interactive,182.0,25.1,3370.0,128,ok
r-0002,long_context,1940.0,44.2,13211.2,256,ok
r-0003,generation_heavy,910.0,47.0,48991.0,1024,ok
r-0004,interactive,0,0,0,0,error
";

fn seed_summary() -> PointSummary {
    PointSummary::new(seed_manifest().gate_config())
}

fn analyse(csv: &str, config: GateConfig, trend: QueueTrend) -> Result<PointReport, CsvError> {
    let mut s = PointSummary::new(config);
    read_requests(csv.as_bytes(), Path::new("requests.csv"), &mut s)?;
    Ok(s.finish(300.0, trend).unwrap())
}

fn one_class(ttft_cutoff: f64, tpot_cutoff: f64) -> GateConfig {
    GateConfig {
        classes: vec![ClassSlo {
            name: "chat".into(),
            ttft_cutoff_ms: ttft_cutoff,
            tpot_cutoff_ms: tpot_cutoff,
        }],
        ..GateConfig::default()
    }
}

/// `n` successful `chat` rows of which the first `passing` meet 100 ms / 10 ms.
fn chat_rows(n: usize, passing: usize) -> String {
    let mut csv = HEADER.to_owned();
    for i in 0..n {
        let ttft = if i < passing { 50.0 } else { 150.0 };
        csv.push_str(&format!("r{i},chat,{ttft},5.0,{},101,ok\n", ttft + 500.0));
    }
    csv
}

#[test]
fn seed_smoke_csv_fails_with_every_class_exploratory() {
    let r = analyse(SMOKE, seed_manifest().gate_config(), QueueTrend::Flat).unwrap();
    assert!(!r.capacity_gate_pass);
    assert!(!r.all_class_slos_pass);
    assert_eq!((r.attempted, r.successful, r.failed), (4, 3, 1));
    assert_eq!(r.error_rate, Some(0.25));
    assert_eq!(r.classes.len(), 3);
    assert!(
        r.classes
            .values()
            .all(|c| !c.sample_adequate && !c.class_slo_pass)
    );
    // 182/25.1 passes interactive; 1940/44.2 passes long_context; 910 > 800 fails.
    assert_eq!(r.classes["interactive"].passing_count, 1);
    assert_eq!(r.classes["long_context"].passing_count, 1);
    assert_eq!(r.classes["generation_heavy"].passing_count, 0);
    assert_eq!(r.classes["interactive"].attempted_count, Some(2));
    assert_eq!(r.failed_by_status["error"], 1);
    assert!((r.observed_goodput_rps - 2.0 / 300.0).abs() < 1e-12);
    assert!((r.output_throughput_tps - 1408.0 / 300.0).abs() < 1e-12);
    assert_eq!(r.verdict, Some(Verdict::Fail)); // the error rate fails too
    assert_eq!(r.tpot_inconsistent_rows, 0);
}

#[test]
fn a_request_exactly_at_the_cutoffs_passes() {
    let csv = format!("{HEADER}a,chat,100,10,1090,100,ok\nb,chat,100.001,10,1090,100,ok\n");
    let r = analyse(&csv, one_class(100.0, 10.0), QueueTrend::Flat).unwrap();
    assert_eq!(r.classes["chat"].passing_count, 1);
}

#[test]
fn attainment_exactly_at_the_minimum_passes() {
    let r = analyse(
        &chat_rows(2000, 1900),
        one_class(100.0, 10.0),
        QueueTrend::Flat,
    )
    .unwrap();
    let c = &r.classes["chat"];
    assert_eq!(c.attainment, Some(0.95));
    assert!(c.class_slo_pass);
    assert!(r.capacity_gate_pass);
    assert_eq!(r.verdict, Some(Verdict::Pass));
    assert!(r.gate_reasons.is_empty());

    let r = analyse(
        &chat_rows(2000, 1899),
        one_class(100.0, 10.0),
        QueueTrend::Flat,
    )
    .unwrap();
    assert!(!r.capacity_gate_pass);
    assert_eq!(r.gate_reasons[0].rule, GateRule::Attainment);
}

#[test]
fn too_few_successes_make_the_point_exploratory() {
    let r = analyse(
        &chat_rows(1999, 1999),
        one_class(100.0, 10.0),
        QueueTrend::Flat,
    )
    .unwrap();
    let c = &r.classes["chat"];
    assert_eq!(c.attainment, Some(1.0));
    assert!(!c.sample_adequate && !c.class_slo_pass);
    assert!(!r.capacity_gate_pass);
    assert_eq!(r.verdict, Some(Verdict::Exploratory));
    assert_eq!(r.gate_reasons.len(), 1);
    assert_eq!(r.gate_reasons[0].rule, GateRule::SampleSize);
}

#[test]
fn p99_needs_ten_thousand_successes() {
    let r = analyse(
        &chat_rows(9_999, 9_999),
        one_class(100.0, 10.0),
        QueueTrend::Flat,
    )
    .unwrap();
    let c = &r.classes["chat"];
    assert!(!c.p99_sample_adequate);
    assert_eq!((c.p99_ttft_ms, c.p99_tpot_ms), (None, None));
    assert!(c.p95_ttft_ms.is_some());

    let r = analyse(
        &chat_rows(10_000, 9_850),
        one_class(100.0, 10.0),
        QueueTrend::Flat,
    )
    .unwrap();
    let c = &r.classes["chat"];
    assert!(c.p99_sample_adequate);
    // 150 slow rows of 10,000: p99 (the 9,900th value) is slow, p95 (9,500th) is fast.
    assert_eq!(c.p99_ttft_ms, Some(150.0));
    assert_eq!(c.p95_ttft_ms, Some(50.0));
    assert_eq!(c.p99_tpot_ms, Some(5.0));
}

#[test]
fn growing_queue_or_errors_fail_a_point_whose_classes_pass() {
    let r = analyse(
        &chat_rows(2000, 2000),
        one_class(100.0, 10.0),
        QueueTrend::Growing,
    )
    .unwrap();
    assert!(r.all_class_slos_pass && !r.capacity_gate_pass);
    assert_eq!(r.gate_reasons[0].rule, GateRule::QueueTrend);

    let mut csv = chat_rows(2000, 2000);
    for i in 0..21 {
        csv.push_str(&format!("e{i},chat,0,0,0,0,timeout\n"));
    }
    let r = analyse(&csv, one_class(100.0, 10.0), QueueTrend::Flat).unwrap();
    assert!(r.error_rate.unwrap() > 0.01);
    assert!(!r.capacity_gate_pass);
    assert_eq!(r.failed_by_status["timeout"], 21);
    assert_eq!(r.gate_reasons[0].rule, GateRule::ErrorRate);
}

#[test]
fn a_class_without_successes_fails() {
    let csv = format!("{HEADER}a,interactive,120,20,2660,128,ok\n");
    let r = analyse(&csv, seed_manifest().gate_config(), QueueTrend::Flat).unwrap();
    let c = &r.classes["long_context"];
    assert_eq!(c.attainment, None);
    assert!(!c.class_slo_pass);
    assert!(
        r.gate_reasons
            .iter()
            .any(|g| g.class.as_deref() == Some("long_context") && g.rule == GateRule::Attainment)
    );
}

#[test]
fn header_only_gives_nulls_not_nan() {
    let r = analyse(HEADER, seed_manifest().gate_config(), QueueTrend::Flat).unwrap();
    assert_eq!(
        (r.attempted, r.error_rate, r.overall_attainment),
        (0, None, None)
    );
    assert!(!r.capacity_gate_pass);
    let json = serde_json::to_string(&r).unwrap();
    assert!(!json.contains("NaN") && !json.contains("inf"), "{json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["error_rate"].is_null());
    assert!(v["classes"]["interactive"]["p50_ttft_ms"].is_null());
    assert_eq!(v["observed_goodput_rps"], 0.0);
}

#[test]
fn report_has_every_required_field() {
    let r = analyse(SMOKE, seed_manifest().gate_config(), QueueTrend::Flat).unwrap();
    let v = serde_json::to_value(&r).unwrap();
    for key in REQUIRED_REPORT_FIELDS {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let c = &v["classes"]["long_context"];
    for key in REQUIRED_CLASS_FIELDS {
        assert!(c.get(key).is_some(), "missing classes.long_context.{key}");
    }
    assert_eq!(v["queue_trend"], "flat");
    assert_eq!(v["percentile_algorithm"], "nearest-rank");
}

fn error_of(csv: &str) -> String {
    analyse(csv, seed_manifest().gate_config(), QueueTrend::Flat)
        .unwrap_err()
        .to_string()
}

#[test]
fn bad_rows_name_file_line_and_column() {
    let e = error_of(&format!(
        "{HEADER}a,interactive,1,2,3,4,ok\nb,interactive,abc,2,3,4,ok\n"
    ));
    assert_eq!(
        e,
        "requests.csv:3: column 3 (ttft_ms): `abc` is not a number"
    );

    let e = error_of(&format!("{HEADER}a,interactive,1,2,-3,4,ok\n"));
    assert_eq!(e, "requests.csv:2: column 5 (e2e_ms): negative latency -3");

    let e = error_of(&format!("{HEADER}a,batch,1,2,3,4,ok\n"));
    assert!(
        e.starts_with("requests.csv:2: column 2 (class): unknown workload class `batch`"),
        "{e}"
    );

    let e = error_of(&format!("{HEADER}a,interactive,1,2,3,4\n"));
    assert!(e.starts_with("requests.csv:2: column 7 (status):"), "{e}");

    let e = error_of(&format!("{HEADER}a,interactive,1,2,3,4.5,ok\n"));
    assert!(
        e.starts_with("requests.csv:2: column 6 (output_tokens):"),
        "{e}"
    );

    let e = error_of(&format!("{HEADER}a,interactive,1,NaN,3,4,ok\n"));
    assert!(e.starts_with("requests.csv:2: column 4 (tpot_ms):"), "{e}");
}

#[test]
fn header_and_empty_file_errors() {
    let e = error_of("request_id,class,ttft_ms,e2e_ms,status\n");
    assert_eq!(
        e,
        "requests.csv: the header lacks required column(s): tpot_ms, output_tokens"
    );
    let e = error_of("");
    assert!(e.starts_with("requests.csv: the file is empty"), "{e}");
}

#[test]
fn extra_columns_reordering_and_other_statuses() {
    let csv = "status,zone,class,output_tokens,e2e_ms,tpot_ms,ttft_ms,request_id\n\
               ok,a,interactive,128,2660,20,120,r1\n\
               cancelled,a,interactive,0,0,0,0,r2\n\
               OK,a,interactive,128,2660,20,120,r3\n";
    let r = analyse(csv, seed_manifest().gate_config(), QueueTrend::Flat).unwrap();
    assert_eq!((r.successful, r.failed), (1, 2));
    assert_eq!(r.failed_by_status["cancelled"], 1);
    assert_eq!(r.failed_by_status["OK"], 1);
    assert_eq!(r.classes["interactive"].p50_ttft_ms, Some(120.0));
}

#[test]
fn itl_column_gives_an_itl_distribution() {
    let csv = "request_id,class,ttft_ms,tpot_ms,e2e_ms,output_tokens,status,itl_ms\n\
               a,interactive,100,10,130,4,ok,10;10;10\n\
               b,interactive,100,20,160,4,ok,10;20;30\n\
               c,interactive,0,0,0,0,error,\n";
    let r = analyse(csv, seed_manifest().gate_config(), QueueTrend::Flat).unwrap();
    let itl = r.classes["interactive"].itl.clone().unwrap();
    assert_eq!(itl.gaps, 6);
    assert!((itl.p50_ms - 10.0).abs() < 0.02, "{itl:?}");
    assert!((itl.max_ms - 30.0).abs() < 0.05, "{itl:?}");
    assert!(r.classes["long_context"].itl.is_none());
}

#[test]
fn inconsistent_tpot_is_counted() {
    // (1090 - 100) / 99 = 10, but the row says 30.
    let csv = format!("{HEADER}a,chat,100,30,1090,100,ok\nb,chat,100,10,1090,100,ok\n");
    let r = analyse(&csv, one_class(100.0, 40.0), QueueTrend::Flat).unwrap();
    assert_eq!(r.tpot_inconsistent_rows, 1);
}

#[test]
fn merging_needs_the_same_gate() {
    let mut a = seed_summary();
    let b = PointSummary::new(one_class(1.0, 1.0));
    assert_eq!(a.merge(b).unwrap_err(), AnalysisError::GateMismatch);
}

#[test]
fn duration_must_be_positive() {
    assert_eq!(
        seed_summary().finish(0.0, QueueTrend::Flat).unwrap_err(),
        AnalysisError::Duration(0.0)
    );
}

/// A row: class index, ok, ttft, tpot, output tokens.
fn row_strategy() -> impl Strategy<Value = (usize, bool, f64, f64, u64)> {
    (
        0usize..3,
        prop::bool::weighted(0.95),
        0.0f64..3000.0,
        0.0f64..80.0,
        1u64..2000,
    )
}

fn csv_of(rows: &[(usize, bool, f64, f64, u64)]) -> String {
    let names = ["interactive", "long_context", "generation_heavy"];
    let mut csv = HEADER.to_owned();
    for (i, &(c, ok, ttft, tpot, tokens)) in rows.iter().enumerate() {
        let e2e = ttft + tpot * tokens.saturating_sub(1) as f64;
        let status = if ok { "ok" } else { "error" };
        csv.push_str(&format!(
            "r{i},{},{ttft},{tpot},{e2e},{tokens},{status}\n",
            names[c]
        ));
    }
    csv
}

fn summary_of(rows: &[(usize, bool, f64, f64, u64)]) -> PointSummary {
    let mut s = seed_summary();
    read_requests(csv_of(rows).as_bytes(), Path::new("p.csv"), &mut s).unwrap();
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn merged_halves_equal_the_whole(
        rows in prop::collection::vec(row_strategy(), 0..400),
        split in 0usize..400,
    ) {
        let split = split.min(rows.len());
        let whole = summary_of(&rows).finish(60.0, QueueTrend::Flat).unwrap();
        let mut first = summary_of(&rows[..split]);
        first.merge(summary_of(&rows[split..])).unwrap();
        let merged = first.finish(60.0, QueueTrend::Flat).unwrap();
        prop_assert_eq!(merged, whole);
    }

    #[test]
    fn a_row_turning_from_pass_to_fail_never_raises_attainment(
        rows in prop::collection::vec(row_strategy(), 1..300),
        pick in 0usize..300,
    ) {
        let i = pick % rows.len();
        let mut worse = rows.clone();
        // Make the row slower than every cutoff (still successful).
        worse[i].2 = 10_000.0;
        let before = summary_of(&rows).finish(60.0, QueueTrend::Flat).unwrap();
        let after = summary_of(&worse).finish(60.0, QueueTrend::Flat).unwrap();
        for (name, b) in &before.classes {
            let a = &after.classes[name];
            prop_assert!(a.attainment.unwrap_or(0.0) <= b.attainment.unwrap_or(0.0));
            prop_assert!(a.passing_count <= b.passing_count);
        }
        prop_assert!(after.observed_goodput_rps <= before.observed_goodput_rps);
    }

    #[test]
    fn gate_pass_agrees_with_its_reasons(
        rows in prop::collection::vec(row_strategy(), 0..200),
        growing in any::<bool>(),
        min in 1u64..80,
    ) {
        let mut cfg = seed_manifest().gate_config();
        cfg.min_successes_per_class = min;
        let mut s = PointSummary::new(cfg.clone());
        read_requests(csv_of(&rows).as_bytes(), Path::new("p.csv"), &mut s).unwrap();
        let trend = if growing { QueueTrend::Growing } else { QueueTrend::Flat };
        let r = s.finish(60.0, trend).unwrap();
        prop_assert_eq!(r.capacity_gate_pass, r.gate_reasons.is_empty());
        prop_assert_eq!(r.gate_reasons.clone(), gate_reasons(&r, &cfg));
    }
}
