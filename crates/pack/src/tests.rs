use std::collections::BTreeMap;

use super::figures::{pct, rate};
use super::*;
use crate::analysis::{
    ClassReport, ClassSlo, GateConfig, GateReason, GateRule, LittlesLaw, PointReport, QueueTrend,
    Verdict,
};
use crate::api::{CacheMode, PeakForecast, Statistic};
use crate::bench::result::{
    ModeResult, PointResult, RateSpread, SaturationLevel, SaturationResult, Spread, TargetFacts,
};
use crate::engine_metrics::findings::EngineFindings;
use crate::planning::cost::Cost;
use crate::planning::{PlanInput, SweepPoint, plan_replicas, select_capacity};

const CHAT_ATTAINMENT_MESSAGE: &str = "class chat: attainment 81.0% (1701 of 2100) below 95.0%";

fn gate() -> GateConfig {
    GateConfig {
        classes: vec![
            ClassSlo {
                name: "chat".into(),
                ttft_cutoff_ms: 500.0,
                tpot_cutoff_ms: 50.0,
            },
            ClassSlo {
                name: "batch".into(),
                ttft_cutoff_ms: 2000.0,
                tpot_cutoff_ms: 100.0,
            },
        ],
        ..GateConfig::default()
    }
}

fn class(attainment: f64, n: u64, ttft: f64, tpot: f64, slo: &ClassSlo) -> ClassReport {
    ClassReport {
        successful_count: n,
        passing_count: (attainment * n as f64).round() as u64,
        request_ttft_cutoff_ms: slo.ttft_cutoff_ms,
        request_tpot_cutoff_ms: slo.tpot_cutoff_ms,
        attainment: Some(attainment),
        sample_adequate: n >= 2000,
        p99_sample_adequate: false,
        class_slo_pass: n >= 2000 && attainment >= 0.95,
        p50_ttft_ms: Some(ttft * 0.5),
        p95_ttft_ms: Some(ttft),
        p99_ttft_ms: None,
        p50_tpot_ms: Some(tpot * 0.8),
        p95_tpot_ms: Some(tpot),
        p99_tpot_ms: None,
        p95_e2e_ms: Some(ttft + 200.0 * tpot),
        output_tokens: n * 200,
        attempted_count: None,
        failed_count: None,
        attainment_wilson_lower_95: None,
        p50_e2e_ms: None,
        itl: None,
    }
}

/// A report at `rate` whose chat class has `chat_attainment`; `reasons` decide the verdict.
fn report(rate: f64, chat_attainment: f64, reasons: Vec<GateReason>) -> PointReport {
    let g = gate();
    let load = rate / 20.0;
    let mut classes = BTreeMap::new();
    classes.insert(
        "chat".to_owned(),
        class(
            chat_attainment,
            2100,
            300.0 + 400.0 * load,
            30.0 * (1.0 + load),
            &g.classes[0],
        ),
    );
    classes.insert(
        "batch".to_owned(),
        class(
            0.99,
            2050,
            900.0 * (1.0 + load),
            60.0 + 20.0 * load,
            &g.classes[1],
        ),
    );
    let verdict = crate::analysis::verdict(&reasons);
    let growing = reasons.iter().any(|r| r.rule == GateRule::QueueTrend);
    PointReport {
        attempted: 4200,
        successful: 4150,
        failed: 50,
        error_rate: Some(50.0 / 4200.0 * 0.5),
        overall_attainment: Some((chat_attainment + 0.99) / 2.0),
        observed_goodput_rps: rate * (chat_attainment + 0.99) / 2.0,
        request_throughput_rps: rate * 0.99,
        output_throughput_tps: rate * 200.0,
        queue_trend: if growing {
            QueueTrend::Growing
        } else {
            QueueTrend::Flat
        },
        all_class_slos_pass: verdict == Verdict::Pass,
        capacity_gate_pass: verdict == Verdict::Pass,
        classes,
        verdict: Some(verdict),
        gate_reasons: reasons,
        gate: None,
        duration_s: Some(300.0),
        percentile_algorithm: None,
        failed_by_status: BTreeMap::new(),
        tpot_inconsistent_rows: 0,
    }
}

fn failing_reasons() -> Vec<GateReason> {
    vec![
        GateReason {
            rule: GateRule::Attainment,
            class: Some("chat".into()),
            message: CHAT_ATTAINMENT_MESSAGE.into(),
        },
        GateReason {
            rule: GateRule::QueueTrend,
            class: None,
            message: "queue trend growing (required flat)".into(),
        },
    ]
}

fn point(mode: CacheMode, rate: f64, repeat: u32, report: PointReport) -> PointResult {
    let warm = mode == CacheMode::Warm;
    PointResult {
        offered_rps: rate,
        repeat,
        seed: 7 + u64::from(repeat),
        refinement: false,
        dir: format!("points/{rate}rps-r{repeat}"),
        report,
        valid: true,
        validity_reasons: Vec::new(),
        client_behind: false,
        validity_notes: Vec::new(),
        queue_trend_source: "engine".into(),
        engine_findings: Some(EngineFindings {
            prefix_cache_hit_rate: Some(if warm { 0.62 } else { 0.01 }),
            ..EngineFindings::default()
        }),
        engine_truth: None,
        littles_law: None,
        schedule_lag_p99_ms: 1.5,
        engine_lateness: None,
        // 4 replicas × 2 GPUs.
        cost: Cost::of(4600.0 / rate + 15.0, 8, 4600),
        early_stop: None,
    }
}

fn spread(values: &[f64]) -> Option<Spread> {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(Spread {
        min,
        max,
        mean: values.iter().sum::<f64>() / values.len() as f64,
    })
}

/// The spread of each rate of `points`, as the lead's code computes it.
fn spreads(result_class: &str, points: &[PointResult]) -> Vec<RateSpread> {
    let mut rates: Vec<f64> = points.iter().map(|p| p.offered_rps).collect();
    rates.dedup();
    rates
        .into_iter()
        .map(|r| {
            let runs: Vec<&PointResult> = points.iter().filter(|p| p.offered_rps == r).collect();
            let of = |f: &dyn Fn(&PointResult) -> Option<f64>| {
                spread(&runs.iter().filter_map(|p| f(p)).collect::<Vec<_>>())
            };
            RateSpread {
                offered_rps: r,
                repeats: runs.len() as u32,
                passed: runs.iter().filter(|p| p.report.capacity_gate_pass).count() as u32,
                goodput_rps: of(&|p| Some(p.report.observed_goodput_rps)),
                weakest_attainment: of(&|p| {
                    p.report
                        .classes
                        .values()
                        .filter_map(|c| c.attainment)
                        .reduce(f64::min)
                }),
                error_rate: of(&|p| p.report.error_rate),
                p95_ttft_ms: of(&|p| p.report.classes.get(result_class)?.p95_ttft_ms),
                p95_tpot_ms: of(&|p| p.report.classes.get(result_class)?.p95_tpot_ms),
            }
        })
        .collect()
}

fn mode(cache: CacheMode, points: Vec<PointResult>, repeats: u32) -> ModeResult {
    let sweep: Vec<SweepPoint> = points
        .iter()
        .map(|p| SweepPoint {
            offered_rps: p.offered_rps,
            report: p.report.clone(),
        })
        .collect();
    let selection = select_capacity(&sweep, &gate());
    let capacity_rps = selection.capacity_rps;
    let hits: Vec<f64> = points
        .iter()
        .filter_map(|p| p.engine_findings.as_ref()?.prefix_cache_hit_rate)
        .collect();
    let cost = Cost::sum(points.iter().map(|p| &p.cost));
    ModeResult {
        cache,
        saturation: None,
        spread: if repeats > 1 {
            spreads("chat", &points)
        } else {
            Vec::new()
        },
        points,
        selection,
        capacity_rps,
        capacity_per_replica_rps: capacity_rps.map(|c| c / 4.0),
        bracket: None,
        refinements: Vec::new(),
        prediction: None,
        plain_grid: None,
        plan: capacity_rps.and_then(|c| plan(c).ok()),
        mean_prefix_cache_hit_rate: (!hits.is_empty())
            .then(|| hits.iter().sum::<f64>() / hits.len() as f64),
        cost,
        client_limit: None,
    }
}

fn plan(capacity_rps: f64) -> Result<crate::planning::ReplicaPlan, crate::planning::PlanError> {
    plan_replicas(PlanInput {
        peak_rps: 36.0,
        capacity_rps,
        replicas_tested: 4,
        gpus_per_replica: 2,
        target_utilization: 0.75,
    })
}

fn saturation() -> SaturationResult {
    let level = |concurrency: u32, throughput: f64, attainment: f64, met: bool| SaturationLevel {
        concurrency,
        dir: format!("saturation/c{concurrency}"),
        throughput_rps: throughput,
        engine_rps: None,
        output_tps: throughput * 200.0,
        weakest_attainment: Some(attainment),
        p95_ttft_ms: Some(100.0 * f64::from(concurrency).sqrt()),
        p95_tpot_ms: Some(20.0 + f64::from(concurrency)),
        slos_met: met,
        cost: Cost::of(45.0, 8, u64::from(concurrency) * 30),
    };
    let knee = level(32, 17.5, 0.962, true);
    SaturationResult {
        levels: vec![
            level(8, 6.0, 0.999, true),
            level(16, 11.0, 0.99, true),
            knee.clone(),
            level(64, 19.0, 0.71, false),
        ],
        knee: Some(knee),
        rule: "the knee is the highest concurrency meeting every class's cutoffs".into(),
        proposed_rates: vec![10.5, 14.0, 17.5, 21.0],
    }
}

/// Cold: 12, 14, 16 pass, 18 fails (attainment, queue), is invalid and flagged. Warm: 14 to
/// 18 pass, 20 fails; with repeats, repeat 1 of warm 18 fails too.
fn fixture(repeats: u32) -> BenchResult {
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for r in 0..repeats {
        for rate in [12.0, 14.0, 16.0, 18.0] {
            let reasons = if rate == 18.0 {
                failing_reasons()
            } else {
                Vec::new()
            };
            let attainment = if rate == 18.0 { 0.81 } else { 0.97 };
            let mut p = point(CacheMode::Cold, rate, r, report(rate, attainment, reasons));
            if rate == 18.0 {
                p.valid = false;
                p.validity_reasons = vec!["client fell 40 ms behind schedule".into()];
                p.littles_law = Some(LittlesLaw {
                    mean_in_flight: 60.0,
                    completion_rps: 17.8,
                    mean_e2e_s: 2.5,
                    expected_in_flight: 44.5,
                    relative_gap: 0.348,
                    flagged: true,
                });
            }
            if rate == 14.0 {
                p.engine_findings = Some(EngineFindings {
                    prefix_cache_hit_rate: Some(0.31),
                    flags: vec!["cold-cache point with a prefix-cache hit rate of 31.0%".into()],
                    ..EngineFindings::default()
                });
            }
            cold.push(p);
        }
        for rate in [14.0, 16.0, 18.0, 20.0] {
            let fails = rate == 20.0 || (rate == 18.0 && r == 1);
            let reasons = if fails {
                vec![GateReason {
                    rule: GateRule::ErrorRate,
                    class: None,
                    message: "error rate 3.10% (130 of 4200) above 1.00%".into(),
                }]
            } else {
                Vec::new()
            };
            warm.push(point(CacheMode::Warm, rate, r, report(rate, 0.98, reasons)));
        }
    }
    // Points come by rate then repeat.
    let by_rate = |a: &PointResult, b: &PointResult| {
        a.offered_rps
            .total_cmp(&b.offered_rps)
            .then(a.repeat.cmp(&b.repeat))
    };
    cold.sort_by(by_rate);
    warm.sort_by(by_rate);
    let mut cold = mode(CacheMode::Cold, cold, repeats);
    cold.saturation = Some(saturation());
    cold.cost = Cost::sum(
        cold.points.iter().map(|p| &p.cost).chain(
            cold.saturation
                .iter()
                .flat_map(|s| s.levels.iter().map(|l| &l.cost)),
        ),
    );
    let warm = mode(CacheMode::Warm, warm, repeats);
    let (cold_cost, warm_cost) = (cold.cost, warm.cost);
    let plan = cold.plan.clone();
    BenchResult {
        name: "chat-capacity".into(),
        started_at: "2026-11-30T09:00:00Z".into(),
        wall_seconds: 5400.0,
        target: TargetFacts {
            kind: "simulated".into(),
            url: "http://127.0.0.1:8000".into(),
            model: "llama-3-8b".into(),
            preset: Some("h100-llama8b".into()),
            engine_profile: Some("vllm".into()),
            replicas: 4,
            gpus_per_replica: 2,
            stream_interval: None,
            engine_concepts_found: Vec::new(),
            engine_concepts_missing: Vec::new(),
        },
        time_scale: 10.0,
        repeats,
        capacity_rule: "capacity is the highest offered rate whose every repeat passes".into(),
        queue_trend_rule: "growing when the waiting queue's slope is significant".into(),
        placement_rule: String::new(),
        early_stop_rule: "stop a point once its failure is settled".into(),
        gate: gate(),
        class_names: vec!["chat".into(), "batch".into()],
        statistics: vec![Statistic::P50, Statistic::P95],
        modes: vec![cold, warm],
        peak: Some(PeakForecast {
            rps: 36.0,
            target_utilization: Some(0.75),
            cache_mode: None,
        }),
        plan_cache_mode: Some(CacheMode::Cold),
        plan,
        warnings: vec!["the warm pool is smaller than the KV cache".into()],
        failure_tests: Vec::new(),
        calibration: None,
        cost: Cost::sum([&cold_cost, &warm_cost]),
        interrupted: None,
    }
}

/// The text of `## {title}` up to the next `## ` heading.
fn section<'a>(md: &'a str, title: &str) -> &'a str {
    let start = md
        .find(&format!("## {title}\n"))
        .unwrap_or_else(|| panic!("no section {title} in\n{md}"));
    let body = &md[start + 3..];
    let end = body.find("\n## ").map_or(body.len(), |e| e + 1);
    &body[..end]
}

/// The text of `### {title}` up to the next heading.
fn subsection<'a>(text: &'a str, title: &str) -> &'a str {
    let start = text
        .find(&format!("### {title}\n"))
        .unwrap_or_else(|| panic!("no subsection {title} in\n{text}"));
    let body = &text[start + 4..];
    let end = body.find("\n#").map_or(body.len(), |e| e + 1);
    &body[..end]
}

/// The cells of a Markdown table line.
fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches('|')
        .split(" | ")
        .map(|c| c.trim().to_owned())
        .collect()
}

/// The first-column values of the rows of the first table in `text` (before any
/// subsection) whose first cell is a rate.
fn table_rates(text: &str) -> Vec<String> {
    let before_subsections = text.split("\n### ").next().unwrap_or(text);
    before_subsections
        .lines()
        .filter(|l| l.starts_with("| "))
        .map(|l| cells(l)[0].trim_matches('*').to_owned())
        .filter(|c| c.parse::<f64>().is_ok())
        .collect()
}

fn row_starting<'a>(text: &'a str, first_cell: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with(&format!("| {first_cell} |")))
        .collect()
}

#[test]
fn figures_are_written_without_noise() {
    assert_eq!(rate(12.0), "12");
    assert_eq!(rate(12.5), "12.5");
    assert_eq!(rate(1.0 / 3.0), "0.33");
    assert_eq!(rate(0.1 + 0.2), "0.3");
    assert_eq!(rate(f64::NAN), "-");
    assert_eq!(pct(Some(0.951)), "95.1%");
    assert_eq!(pct(None), "-");
    assert_eq!(pct(Some(f64::INFINITY)), "-");
}

#[test]
fn sweep_table_columns_come_in_the_stated_order() {
    let md = sweep_markdown(&fixture(1));
    let header = section(&md, "Cold cache")
        .lines()
        .find(|l| l.starts_with("| offered RPS"))
        .expect("a table header");
    assert_eq!(
        cells(header),
        [
            "offered RPS",
            "completed RPS",
            "error rate",
            "overall attainment",
            "weakest-class attainment",
            "weakest-class n",
            "goodput RPS",
            "output tok/s",
            "chat P95 TTFT ms",
            "chat P95 TPOT ms",
            "queue trend",
            "verdict",
        ]
    );
    let md = sweep_markdown(&fixture(2));
    let header = section(&md, "Warm cache")
        .lines()
        .find(|l| l.starts_with("| offered RPS"))
        .expect("a table header");
    assert_eq!(
        cells(header)[..3],
        ["offered RPS", "repeat", "completed RPS"]
    );
    assert_eq!(cells(header).len(), 13);
}

#[test]
fn sweep_rows_show_the_first_class_and_the_weakest_class() {
    let md = sweep_markdown(&fixture(1));
    let cold = section(&md, "Cold cache");
    let row = cells(row_starting(cold, "18")[0]);
    // offered, completed, errors, overall, weakest, n, goodput, tok/s, ttft, tpot, queue, verdict
    assert_eq!(row[1], "17.82");
    assert_eq!(row[4], "81.0% (chat)");
    assert_eq!(row[5], "2100");
    assert_eq!(row[8], "660.0", "chat P95 TTFT at 18 RPS: 300 + 400 × 0.9");
    assert_eq!(row[10], "growing");
    assert_eq!(row[11], "fail");
}

#[test]
fn the_capacity_row_is_marked_and_only_it() {
    let result = fixture(1);
    let md = sweep_markdown(&result);
    let cold = section(&md, "Cold cache");
    assert!(
        cold.contains("Capacity: **16 RPS** (4 RPS per replica)"),
        "{cold}"
    );
    let marked: Vec<&str> = cold.lines().filter(|l| l.contains("← capacity")).collect();
    assert_eq!(marked.len(), 1, "{cold}");
    assert!(marked[0].starts_with("| **16** |"), "{}", marked[0]);
    let warm = section(&md, "Warm cache");
    let marked: Vec<&str> = warm.lines().filter(|l| l.contains("← capacity")).collect();
    assert_eq!(marked.len(), 1, "{warm}");
    assert!(marked[0].starts_with("| **18** |"), "{}", marked[0]);
}

#[test]
fn the_final_bracket_and_its_refinements_are_shown() {
    let mut result = fixture(1);
    let cold = &mut result.modes[0];
    cold.bracket = Some(crate::bench::sweep::Bracket {
        pass: 16.0,
        fail: 16.8,
    });
    cold.refinements = vec![17.0, 16.8];
    cold.points[2].refinement = true;
    let md = sweep_markdown(&result);
    let section_text = section(&md, "Cold cache");
    assert!(
        section_text.contains(
            "Final bracket: passes at 16 RPS, fails at 16.8 RPS (5.0% apart; refined at 17, \
             16.8 RPS)."
        ),
        "{section_text}"
    );
    assert!(
        section_text.contains("| **16 (refined)** |"),
        "{section_text}"
    );
    let summary = crate::summary_text(&result);
    assert!(
        summary.contains("bracket [16, 16.8] RPS (5.0% wide)"),
        "{summary}"
    );
}

#[test]
fn the_cost_of_every_point_adds_up_to_the_benchmarks() {
    let result = fixture(1);
    let md = sweep_markdown(&result);
    let cost = section(&md, "Cost");
    assert!(cost.contains("(4 replicas × 2 GPUs = 8 GPUs)"), "{cost}");
    // Cold 16 RPS: 4600 / 16 + 15 = 302.5 s on 8 GPUs = 40.3 GPU-minutes.
    let figures = |label: &str| cells(row_starting(cost, label)[0])[1..].to_vec();
    assert_eq!(figures("cold 16 RPS"), ["302", "40.3", "4600"]);
    assert_eq!(figures("cold saturation c=8"), ["45", "6.0", "240"]);
    let total = result.cost;
    let parts: f64 = result.modes.iter().map(|m| m.cost.gpu_minutes).sum();
    assert!((total.gpu_minutes - parts).abs() < 1e-9);
    assert_eq!(
        figures("**benchmark**"),
        [
            format!("{:.0}", total.real_time_seconds),
            format!("{:.1}", total.gpu_minutes),
            total.requests_sent.to_string()
        ]
    );
    let summary = crate::summary_text(&result);
    assert!(
        summary.contains(&format!("cost: {:.1} GPU-minutes", total.gpu_minutes)),
        "{summary}"
    );
}

#[test]
fn model_placement_is_weighed_against_the_plain_grid() {
    let mut result = fixture(1);
    let cold = &mut result.modes[0];
    let (ran, n) = (
        Cost::sum(cold.points.iter().map(|p| &p.cost)),
        cold.points.len(),
    );
    // A grid that would have held 100 GPU-minutes more than the points run.
    cold.plain_grid = Some(crate::bench::result::PlainGrid {
        rates: vec![10.0, 12.5],
        cost: Cost::of((ran.gpu_minutes + 100.0) * 60.0 / 8.0, 8, 9200),
    });
    let md = sweep_markdown(&result);
    let cost = section(&md, "Cost");
    assert!(
        cost.contains(&format!(
            "Model placement, cold cache: {} rate point(s) held {:.1} GPU-minutes where the \
             plain grid's rates (10, 12.5 RPS) would have held at least {:.1}",
            n,
            ran.gpu_minutes,
            ran.gpu_minutes + 100.0
        )),
        "{cost}"
    );
    assert!(cost.contains("at least 100.0 GPU-minutes saved"), "{cost}");
    assert!(!cost.contains("Model placement, warm cache"), "{cost}");
    let summary = crate::summary_text(&result);
    assert!(
        summary.contains(
            "model placement: at least 100.0 GPU-minutes saved against the plain grid's \
             rate points"
        ),
        "{summary}"
    );
    // Without a placed mode, no such line.
    assert!(!crate::summary_text(&fixture(1)).contains("model placement"));
}

#[test]
fn a_point_stopped_early_says_so_and_what_it_saved() {
    let mut result = fixture(1);
    let warm = &mut result.modes[1];
    let last = warm.points.len() - 1;
    warm.points[last].early_stop = Some(crate::analysis::EarlyStop {
        rule: GateRule::Attainment,
        class: Some("chat".into()),
        message: "class chat: 300 of 600 successes so far met both cutoffs".into(),
        at_s: 60.0,
        settled: 1200,
        scheduled: 4600,
        unsent_s: 150.0,
    });
    let md = sweep_markdown(&result);
    let warm_md = section(&md, "Warm cache");
    assert!(warm_md.contains("| fail (stopped early) |"), "{warm_md}");
    // 150 s unsent on 8 GPUs: 20 GPU-minutes.
    assert!(
        section(&md, "Cost").contains(
            "Early stopping ended 1 failing point(s) with 150 s of their schedules unsent: \
             about 20.0 GPU-minutes saved."
        ),
        "{md}"
    );
    assert!(section(&md, "Early stopping rule").contains("once its failure is settled"));
    let summary = crate::summary_text(&result);
    assert!(
        summary.contains("20 FAIL (errors, stopped early)"),
        "{summary}"
    );
    assert!(
        summary.contains("about 20.0 GPU-minutes saved"),
        "{summary}"
    );
}

#[test]
fn cache_modes_get_separate_tables() {
    let md = sweep_markdown(&fixture(1));
    assert_eq!(
        table_rates(section(&md, "Cold cache")),
        ["12", "14", "16", "18"]
    );
    // Warm's table, then nothing else numeric: its spread and saturation are absent.
    assert_eq!(
        table_rates(section(&md, "Warm cache")),
        ["14", "16", "18", "20"]
    );
}

#[test]
fn failing_points_show_their_reasons_and_flags() {
    let md = sweep_markdown(&fixture(1));
    let cold = section(&md, "Cold cache");
    let reasons = subsection(cold, "Gate reasons");
    assert!(reasons.contains("- 18 RPS (fail):"), "{reasons}");
    assert!(reasons.contains(CHAT_ATTAINMENT_MESSAGE), "{reasons}");
    assert!(reasons.contains("queue trend growing (required flat)"));
    assert!(
        !reasons.contains("- 16 RPS"),
        "passing points have no reasons"
    );
    assert!(cold.contains("18 RPS: not evidence — client fell 40 ms behind schedule"));
    assert!(cold.contains("### Engine findings\n\n- 14 RPS: cold-cache point"));
    assert!(
        cold.contains("### Little's Law\n\n- 18 RPS: mean in flight 60.0"),
        "{cold}"
    );
    assert!(cold.contains("(gap 34.8%)"));
    assert!(
        cold.contains("Prefix-cache hit rate: 12 RPS: 1.0% · 14 RPS: 31.0% · 16 RPS: 1.0%"),
        "prefix-cache hit rate per point"
    );
    let warm = section(&md, "Warm cache");
    assert!(
        warm.contains("- 20 RPS (fail):\n  - error rate 3.10%"),
        "{warm}"
    );
    assert!(!warm.contains("Little's Law"));
}

#[test]
fn the_spread_section_appears_only_with_repeats() {
    let once = sweep_markdown(&fixture(1));
    assert!(!once.contains("Spread across repeats"));
    let twice = sweep_markdown(&fixture(2));
    let warm = section(&twice, "Warm cache");
    let spread = subsection(warm, "Spread across repeats");
    let row = cells(row_starting(spread, "18")[0]);
    assert_eq!(row[1], "1 / 2", "repeat 1 of 18 RPS fails");
    assert_eq!(row[0], "18");
    // A repeat that fails is shown with its repeat index.
    assert!(warm.contains("- 18 RPS, repeat 1 (fail):"), "{warm}");
    // Capacity drops to 16: 18 passes in only one of two repeats.
    assert!(warm.contains("Capacity: **16 RPS**"), "{warm}");
    assert!(warm.contains("18 RPS passes in 1 of 2 repeats"));
}

#[test]
fn the_saturation_table_marks_the_knee() {
    let md = sweep_markdown(&fixture(1));
    let cold = section(&md, "Cold cache");
    let sat = subsection(cold, "Saturation (closed loop)");
    assert!(sat.contains("| concurrency | throughput RPS | output tok/s |"));
    let knee: Vec<&str> = sat.lines().filter(|l| l.contains("← knee")).collect();
    assert_eq!(knee.len(), 1);
    assert!(
        knee[0].starts_with("| **32** ← knee | 17.5 | 3500 | 96.2% |"),
        "{}",
        knee[0]
    );
    assert!(sat.contains("| 64 | 19 | 3800 | 71.0% |"));
    assert!(sat.contains("Rule: the knee is the highest concurrency"));
    assert!(sat.contains("Proposed offered rates (RPS): 10.5, 14, 17.5, 21"));
    assert!(!section(&md, "Warm cache").contains("Saturation"));
}

#[test]
fn the_sweep_states_target_time_scale_gate_rules_and_warnings() {
    let md = sweep_markdown(&fixture(1));
    assert!(md.starts_with("# Capacity sweep: chat-capacity\n"));
    let target = section(&md, "Target");
    assert!(target.contains("- Preset: h100-llama8b"));
    assert!(target.contains("- Replicas under test: 4"));
    assert!(target.contains(
        "K = 10: the simulated engine ran 10× faster than real time; \
         all figures are converted back to real-time units"
    ));
    let gate = section(&md, "Gate");
    assert!(gate.contains("at least 95.0%"));
    assert!(gate.contains("| chat | 500.0 | 50.0 |"));
    assert!(section(&md, "Capacity rule").contains("every repeat passes"));
    assert!(section(&md, "Queue trend rule").contains("slope"));
    assert!(section(&md, "Warnings").contains("- the warm pool is smaller than the KV cache"));

    let mut real_time = fixture(1);
    real_time.time_scale = 1.0;
    let md = sweep_markdown(&real_time);
    assert!(md.contains("real time (K = 1)"));
    assert!(!md.contains("faster than real time"));
}

#[test]
fn the_plan_shows_the_arithmetic_and_the_revalidation_note() {
    let md = plan_markdown(&fixture(1));
    let capacity = section(&md, "Capacity per cache mode");
    assert!(capacity.contains("| cold | 16 | 4 | 4 |"), "{capacity}");
    assert!(capacity.contains("| warm | 18 | 4.5 | 4 |"), "{capacity}");
    let peak = section(&md, "Peak forecast");
    assert!(peak.contains("- Cache mode used: **cold**"));
    assert!(peak.contains("lowest capacity"));
    let arithmetic = section(&md, "Replica arithmetic (cold cache)");
    assert!(arithmetic.contains("```text\n"));
    assert!(
        arithmetic.contains("ceil(36 / (4 × 0.75)) = ceil(12) = 12"),
        "{arithmetic}"
    );
    assert!(arithmetic.contains("12 replicas × 2 GPUs/replica = 24"));
    assert!(arithmetic.contains("**12 replicas (24 GPUs)**"));
    assert!(
        arithmetic.contains("| warm | 18 | 11 | 22 |"),
        "{arithmetic}"
    );
    assert!(arithmetic.contains("linearly"));
    assert!(arithmetic.contains("revalidate"));
}

#[test]
fn a_missing_plan_is_explained() {
    let mut no_peak = fixture(1);
    no_peak.peak = None;
    no_peak.plan = None;
    let md = plan_markdown(&no_peak);
    assert!(md.contains("no peak forecast"), "{md}");
    assert!(!md.contains("```"));
    assert!(summary_text(&no_peak).contains("plan: none (no peak forecast given)"));

    let mut nothing_passes = fixture(1);
    for m in &mut nothing_passes.modes {
        m.capacity_rps = None;
        m.capacity_per_replica_rps = None;
        m.plan = None;
    }
    nothing_passes.plan = None;
    nothing_passes.plan_cache_mode = None;
    let md = plan_markdown(&nothing_passes);
    assert!(md.contains("| cold | none passed | - | 4 |"), "{md}");
    assert!(md.contains("No replica plan: no offered rate passed the gate in any cache mode"));
    let summary = summary_text(&nothing_passes);
    assert!(
        summary.contains("cold cache: capacity: none passed"),
        "{summary}"
    );
    assert!(summary.contains("plan: none for a peak of 36 RPS"));

    let mut warm_wanted = nothing_passes.clone();
    warm_wanted.plan_cache_mode = Some(CacheMode::Warm);
    let md = plan_markdown(&warm_wanted);
    assert!(
        md.contains("no offered rate passed the gate in the warm cache sweep"),
        "{md}"
    );
}

#[test]
fn the_summary_fits_a_screen_and_says_what_passed() {
    let text = summary_text(&fixture(1));
    assert!(text.lines().count() <= 25, "{text}");
    assert!(
        text.contains("cold cache: capacity 16 RPS (4 RPS per replica)"),
        "{text}"
    );
    assert!(text.contains("  12 pass · 14 pass · 16 pass · 18 FAIL (attainment, queue, invalid)"));
    assert!(text.contains("  14 pass · 16 pass · 18 pass · 20 FAIL (errors)"));
    assert!(text.contains(
        "warm cache: capacity 18 RPS (4.5 RPS per replica) · prefix-cache hit rate 62.0%"
    ));
    assert!(text.contains("plan (cold cache): peak 36 RPS at 75% → 12 replicas (24 GPUs)"));
    assert!(text.contains("K = 10"));
    assert!(text.contains("1 warning (see sweep.md)"));
    assert!(!text.contains("sweep.json"));

    let text = summary_text(&fixture(2));
    assert!(text.contains("18 FAIL 1/2 (errors)"), "{text}");
}

#[test]
fn plots_are_svg_with_labelled_series_and_guides() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let plots = dir.path().join("plots");
    let written = write_plots(&plots, &fixture(2)).expect("plots");
    let names: Vec<String> = written
        .iter()
        .filter_map(|p| Some(p.file_name()?.to_str()?.to_owned()))
        .collect();
    assert_eq!(
        names,
        [
            "throughput.svg",
            "goodput.svg",
            "attainment.svg",
            "ttft_p95.svg",
            "tpot_p95.svg"
        ]
    );
    let read = |name: &str| std::fs::read_to_string(plots.join(name)).expect("a plot");
    for name in &names {
        let svg = read(name);
        assert!(
            svg.starts_with("<svg"),
            "{name}: {}",
            &svg[..svg.len().min(80)]
        );
        assert!(
            svg.contains("offered requests/s"),
            "{name} has an x-axis label"
        );
    }
    let throughput = read("throughput.svg");
    for label in ["cold", "warm", "offered", "completed requests/s"] {
        assert!(throughput.contains(label), "throughput lacks {label}");
    }
    let attainment = read("attainment.svg");
    for label in ["cold · chat", "warm · batch", "gate 0.95"] {
        assert!(attainment.contains(label), "attainment lacks {label}");
    }
    let ttft = read("ttft_p95.svg");
    assert!(ttft.contains("chat cutoff 500 ms"));
    assert!(ttft.contains("batch cutoff 2000 ms"));
    assert!(read("tpot_p95.svg").contains("chat cutoff 50 ms"));
}

#[test]
fn edge_cases_do_not_panic_and_say_what_is_missing() {
    let mut result = fixture(1);
    // Warm: no points at all. Cold: a single point, with NaN and missing figures.
    result.modes[1].points.clear();
    result.modes[1].selection.points.clear();
    result.modes[1].selection.capacity_rps = None;
    result.modes[1].capacity_rps = None;
    result.modes[1].capacity_per_replica_rps = None;
    result.modes[1].mean_prefix_cache_hit_rate = None;
    let cold = &mut result.modes[0];
    cold.points.truncate(1);
    cold.selection.points.truncate(1);
    cold.selection.capacity_rps = Some(12.0);
    cold.capacity_rps = Some(12.0);
    cold.capacity_per_replica_rps = Some(3.0);
    cold.points[0].report.request_throughput_rps = f64::NAN;
    cold.points[0].report.error_rate = None;
    for c in cold.points[0].report.classes.values_mut() {
        c.attainment = None;
        c.p95_ttft_ms = None;
        c.p95_tpot_ms = Some(f64::NAN);
    }
    cold.saturation = Some(SaturationResult {
        levels: Vec::new(),
        knee: None,
        rule: String::new(),
        proposed_rates: Vec::new(),
    });
    result.plan = None;
    result.peak = None;

    let md = sweep_markdown(&result);
    assert!(section(&md, "Warm cache").contains("No points were measured in this mode."));
    assert!(section(&md, "Warm cache").contains("Capacity: none (no points were measured)."));
    let row = cells(row_starting(section(&md, "Cold cache"), "**12**")[0]);
    assert_eq!(row[1], "-", "NaN completed RPS");
    assert_eq!(row[2], "-", "no error rate");
    assert_eq!(row[8], "-", "no P95 TTFT");
    assert!(md.contains("No concurrency level was measured."));
    assert!(md.contains("No knee"));

    let summary = summary_text(&result);
    assert!(summary.contains("warm cache: capacity: none passed · prefix-cache hit rate -"));
    assert!(summary.contains("  no points measured"));

    let dir = tempfile::tempdir().expect("a temporary directory");
    let written = write_plots(dir.path(), &result).expect("plots");
    assert_eq!(written.len(), 5);
    // Every class attainment is missing: the chart has no series, and says so.
    let attainment = std::fs::read_to_string(dir.path().join("attainment.svg")).expect("plot");
    assert!(attainment.contains("no points measured"));
    assert!(!attainment.contains("cold · chat"));

    let mut empty = fixture(1);
    empty.modes.clear();
    empty.plan = None;
    empty.plan_cache_mode = None;
    empty.class_names.clear();
    assert!(sweep_markdown(&empty).contains("No cache mode was run"));
    assert!(
        plan_markdown(&empty).contains("no cache mode was run, so there is no measured capacity")
    );
    assert!(summary_text(&empty).contains("no cache mode was run"));
    assert_eq!(write_plots(dir.path(), &empty).expect("plots").len(), 5);
}

#[test]
fn write_reports_writes_the_markdown_and_the_plots() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let pack = dir.path().join("pack");
    write_reports(&pack, &fixture(1)).expect("reports");
    let sweep = std::fs::read_to_string(pack.join("sweep.md")).expect("sweep.md");
    assert!(sweep.starts_with("# Capacity sweep: chat-capacity"));
    let plan = std::fs::read_to_string(pack.join("plan.md")).expect("plan.md");
    assert!(plan.starts_with("# Replica plan: chat-capacity"));
    for name in [
        "throughput",
        "goodput",
        "attainment",
        "ttft_p95",
        "tpot_p95",
    ] {
        assert!(
            pack.join("plots").join(format!("{name}.svg")).is_file(),
            "{name}"
        );
    }
}
