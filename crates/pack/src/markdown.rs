//! `sweep.md` and `plan.md`.

use std::fmt::Write as _;

use super::figures::{MISSING, mode_name, ms, opt_rate, pct, rate, tokens_per_s};
use super::rows::{PointRow, first_class, point_rows, run_label};
use crate::analysis::{GateConfig, Verdict};
use crate::bench::fidelity::{EngineLateness, LATENESS_REFUSE_FRACTION, LATENESS_WARN_FRACTION};
use crate::bench::result::{
    BenchResult, ModeResult, RateSpread, SaturationResult, Spread, TargetFacts,
};
use crate::planning::cost::Cost;

/// `sweep.md`: the target, the gate, and per cache mode the sweep table with every failing
/// point's reasons, the points' engine and Little's Law flags, the spread across repeats and
/// the saturation experiment; then the rules and the warnings.
pub fn sweep_markdown(result: &BenchResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Capacity sweep: {}\n", result.name);
    if let Some(when) = &result.interrupted {
        let _ = writeln!(
            out,
            "**INCOMPLETE: the run was interrupted {when}.** The points after it never ran: \
             no capacity or plan below is the benchmark's result.\n"
        );
    }
    let _ = writeln!(
        out,
        "Started {}, ran {:.0} s (wall clock). {}\n",
        result.started_at,
        result.wall_seconds,
        repeats_sentence(result.repeats)
    );
    out.push_str(&target_section(&result.target, result.time_scale));
    out.push_str(&calibration_section(result));
    out.push_str(&lateness_section(result));
    out.push_str(&gate_section(&result.gate));
    if result.modes.is_empty() {
        out.push_str("No cache mode was run: there is no sweep to show.\n\n");
    }
    for mode in &result.modes {
        out.push_str(&mode_section(result, mode));
    }
    out.push_str(&cost_section(result));
    let _ = writeln!(
        out,
        "## Capacity rule\n\n{}\n",
        or_missing(&result.capacity_rule)
    );
    let _ = writeln!(
        out,
        "## Queue trend rule\n\n{}\n",
        or_missing(&result.queue_trend_rule)
    );
    if !result.placement_rule.is_empty() {
        let _ = writeln!(out, "## Placement rule\n\n{}\n", result.placement_rule);
    }
    if !result.early_stop_rule.is_empty() {
        let _ = writeln!(
            out,
            "## Early stopping rule\n\n{}\n",
            result.early_stop_rule
        );
    }
    out.push_str(&warnings_section(result));
    out
}

fn repeats_sentence(repeats: u32) -> String {
    if repeats > 1 {
        format!("Every rate was run {repeats} times; a rate passes only if every repeat passes.")
    } else {
        "Every rate was run once.".into()
    }
}

fn or_missing(text: &str) -> &str {
    if text.trim().is_empty() {
        "(not stated)"
    } else {
        text
    }
}

fn target_section(target: &TargetFacts, time_scale: f64) -> String {
    let mut out = String::from("## Target\n\n");
    let _ = writeln!(out, "- Kind: {}", target.kind);
    let _ = writeln!(out, "- URL: {}", target.url);
    let _ = writeln!(out, "- Model: {}", target.model);
    let _ = writeln!(
        out,
        "- Preset: {}",
        target.preset.as_deref().unwrap_or(MISSING)
    );
    if let Some(engine) = &target.engine_profile {
        let _ = writeln!(out, "- Engine: {engine}");
    }
    if !target.engine_concepts_found.is_empty() || !target.engine_concepts_missing.is_empty() {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.join(", ")
            }
        };
        let _ = writeln!(
            out,
            "- Engine metrics found: {}; missing: {}",
            list(&target.engine_concepts_found),
            list(&target.engine_concepts_missing)
        );
    }
    if let Some(n) = target.stream_interval.filter(|n| *n > 1) {
        let _ = writeln!(
            out,
            "- Stream interval: {n} tokens per SSE frame (TPOT is unaffected; ITL is per frame)"
        );
    }
    let _ = writeln!(out, "- Replicas under test: {}", target.replicas);
    let _ = writeln!(out, "- GPUs per replica: {}", target.gpus_per_replica);
    let _ = writeln!(out, "- Time scale: {}\n", time_scale_words(time_scale));
    out
}

/// How the simulated engine's time scale was checked (or, for `auto`, chosen) before the
/// sweep: one row per probe; empty for a server that is not the simulated engine.
fn calibration_section(result: &BenchResult) -> String {
    let Some(c) = &result.calibration else {
        return String::new();
    };
    let mut out = String::from(
        "## Time-scale calibration

",
    );
    let how = if c.requested == "auto" {
        format!(
            "`timeScale: auto` chose K = {}: the largest tried whose idle probe drifted at \
             most {}% of the tightest cutoff, with frame lateness as low",
            rate(c.chosen),
            c.warn_fraction * 100.0
        )
    } else {
        format!(
            "`timeScale: {}` was probed idle before the sweep (refused over {}% of the \
             tightest cutoff after a second round of probes, which it is then judged on; \
             warned over {}%)",
            c.requested,
            c.refuse_fraction * 100.0,
            c.warn_fraction * 100.0
        )
    };
    let _ = writeln!(
        out,
        "{how}. Each probe sends {} requests per class one at a time to a fresh engine and \
         compares the median live TTFT and TPOT (model time) with the model's answer for the \
         request alone; the tightest cutoffs are {} ms TTFT and {} ms/token TPOT.\n",
        crate::bench::calibration::PROBES_PER_CLASS,
        c.tightest_ttft_cutoff_ms,
        c.tightest_tpot_cutoff_ms
    );
    out.push_str(
        "| K | class | TTFT live / model (ms) | TPOT live / model (ms) | frame lateness P99 (ms) | worst drift |\n\
         |---|---|---|---|---|---|\n",
    );
    for t in &c.trials {
        for (i, p) in t.classes.iter().enumerate() {
            let (lateness, drift) = if i == 0 {
                (
                    format!("{:.2}", t.lateness_p99_ms),
                    format!("{:.1}%: {}", t.drift_fraction * 100.0, t.worst),
                )
            } else {
                (String::new(), String::new())
            };
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} / {:.2} | {:.3} / {:.3} | {lateness} | {drift} |",
                rate(t.time_scale),
                p.class,
                p.live_ttft_ms,
                p.model_ttft_ms,
                p.live_tpot_ms,
                p.model_tpot_ms
            );
        }
    }
    out.push('\n');
    out
}

/// The simulated engine's worst frame lateness over the run, against its bound; empty when
/// no point recorded one (a server under test that is not the simulated engine).
fn lateness_section(result: &BenchResult) -> String {
    let points = || result.modes.iter().flat_map(|m| &m.points);
    let Some(worst) = points()
        .filter_map(|p| p.engine_lateness)
        .max_by(|a, b| a.p99_ms.total_cmp(&b.p99_ms))
    else {
        return String::new();
    };
    let count = |f: &dyn Fn(&EngineLateness, bool) -> bool| {
        points()
            .filter(|p| {
                p.engine_lateness
                    .as_ref()
                    .is_some_and(|l| f(l, p.report.capacity_gate_pass))
            })
            .count()
    };
    format!(
        "Simulated engine fidelity: its token frames were at worst {:.2} ms late at P99 in \
         model time. Over {:.1} ms ({}% of the tightest TTFT cutoff) a point's latencies \
         carry the harness's own delay: {} point(s); over {:.1} ms ({}%) a point that did \
         not pass is not evidence unless it misses by more than the delay (lateness only \
         raises latencies, so a pass stands): {} point(s) over it, {} of them not \
         evidence.\n\n",
        worst.p99_ms,
        worst.warn_ms(),
        LATENESS_WARN_FRACTION * 100.0,
        count(&|l, _| l.warns()),
        worst.refuse_ms(),
        LATENESS_REFUSE_FRACTION * 100.0,
        count(&|l, passed| l.refuses_point(passed)),
        points()
            .filter(|p| {
                p.engine_lateness
                    .as_ref()
                    .is_some_and(|l| l.refuses_point(p.report.capacity_gate_pass))
                    && !p.valid
            })
            .count(),
    )
}

/// K in words.
pub(super) fn time_scale_words(k: f64) -> String {
    if k == 1.0 {
        "real time (K = 1)".into()
    } else {
        format!(
            "K = {k}: the simulated engine ran {k}× faster than real time; \
             all figures are converted back to real-time units",
            k = rate(k)
        )
    }
}

fn gate_section(gate: &GateConfig) -> String {
    let mut out = String::from("## Gate\n\n");
    let _ = writeln!(
        out,
        "- Every class meets its cutoffs in at least {} of its successful requests",
        pct(Some(gate.attainment_min))
    );
    let _ = writeln!(
        out,
        "- Every class has at least {} successes (fewer: the point is exploratory, never capacity)",
        gate.min_successes_per_class
    );
    let _ = writeln!(
        out,
        "- P99 is reported from {} successes per class",
        gate.p99_min_successes
    );
    let _ = writeln!(
        out,
        "- Error rate at most {:.2}%",
        gate.error_rate_max * 100.0
    );
    let _ = writeln!(out, "- Queue trend: {}\n", gate.queue_trend_required);
    if !gate.classes.is_empty() {
        let rows: Vec<Vec<String>> = gate
            .classes
            .iter()
            .map(|c| {
                vec![
                    c.name.clone(),
                    ms(Some(c.ttft_cutoff_ms)),
                    ms(Some(c.tpot_cutoff_ms)),
                ]
            })
            .collect();
        out.push_str(&table(
            &["class", "TTFT cutoff ms", "TPOT cutoff ms"],
            &rows,
        ));
        out.push('\n');
    }
    out
}

fn mode_section(result: &BenchResult, mode: &ModeResult) -> String {
    let name = mode_name(mode.cache);
    let mut out = format!("## {} cache\n\n", capitalised(name));
    let _ = writeln!(out, "{}\n", capacity_sentence(mode));
    let rows = point_rows(mode, &result.gate);
    if rows.is_empty() {
        out.push_str("No points were measured in this mode.\n\n");
    } else {
        out.push_str(&sweep_table(result, &rows));
        out.push('\n');
        out.push_str(&point_notes(result, &rows));
    }
    if !mode.selection.warnings.is_empty() {
        out.push_str("### Selection warnings\n\n");
        for w in &mode.selection.warnings {
            let _ = writeln!(out, "- {w}");
        }
        out.push('\n');
    }
    if result.repeats > 1 {
        out.push_str(&spread_section(result, &mode.spread));
    }
    if let Some(saturation) = &mode.saturation {
        out.push_str(&saturation_section(saturation, result.class_names.first()));
    }
    out
}

fn capitalised(s: &str) -> String {
    let mut chars = s.chars();
    chars.next().map_or_else(String::new, |c| {
        c.to_uppercase().chain(chars).collect::<String>()
    })
}

fn capacity_sentence(mode: &ModeResult) -> String {
    let mut capacity = capacity_words(mode);
    if let Some(p) = mode.prediction {
        let measured = mode.capacity_rps.map_or_else(
            || "no measured capacity".to_owned(),
            |c| format!("measured {} RPS", rate(c)),
        );
        let levels = match p.below_knee_concurrency {
            Some(b) => format!("c={b} and the knee c={}", p.knee_concurrency),
            None => format!("the knee c={}", p.knee_concurrency),
        };
        let _ = write!(
            capacity,
            "\n\nModel placement: the engine model's capacity {} RPS, calibrated at {levels} \
             (what the engine sustained ÷ what the model sustains = {:.3}), predicted **{} \
             RPS**; {measured}.",
            rate(p.model_capacity_rps),
            p.speed,
            rate(p.predicted_rps)
        );
    }
    match mode.bracket {
        Some(b) => format!("{capacity}\n\n{}", bracket_sentence(b, &mode.refinements)),
        None => capacity,
    }
}

/// Where the capacity lies and how the sweep narrowed it.
pub(super) fn bracket_sentence(b: crate::bench::sweep::Bracket, refinements: &[f64]) -> String {
    let refined = match refinements {
        [] => "no refinement".to_owned(),
        r => format!(
            "refined at {} RPS",
            r.iter().map(|&x| rate(x)).collect::<Vec<_>>().join(", ")
        ),
    };
    format!(
        "Final bracket: passes at {} RPS, fails at {} RPS ({} apart; {refined}).",
        rate(b.pass),
        rate(b.fail),
        pct(Some(b.width()))
    )
}

fn capacity_words(mode: &ModeResult) -> String {
    match mode.capacity_rps {
        Some(cap) => format!(
            "Capacity: **{} RPS** ({} RPS per replica), the highest offered rate that passes the gate.",
            rate(cap),
            opt_rate(mode.capacity_per_replica_rps)
        ),
        None if mode.points.is_empty() => "Capacity: none (no points were measured).".into(),
        None => "Capacity: none — no offered rate passed the gate.".into(),
    }
}

/// The sweep table's header for `class_names`.
pub(super) fn sweep_header(class_names: &[String], repeats: u32) -> Vec<String> {
    let first = class_names.first().map_or("first class", String::as_str);
    let mut header = vec!["offered RPS".to_owned()];
    if repeats > 1 {
        header.push("repeat".into());
    }
    header.extend([
        "completed RPS".into(),
        "error rate".into(),
        "overall attainment".into(),
        "weakest-class attainment".into(),
        "weakest-class n".into(),
        "goodput RPS".into(),
        "output tok/s".into(),
        format!("{first} P95 TTFT ms"),
        format!("{first} P95 TPOT ms"),
        "queue trend".into(),
        "verdict".into(),
    ]);
    header
}

fn sweep_table(result: &BenchResult, rows: &[PointRow<'_>]) -> String {
    let header = sweep_header(&result.class_names, result.repeats);
    let cells: Vec<Vec<String>> = rows.iter().map(|row| sweep_row(result, row)).collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    table(&header, &cells)
}

fn sweep_row(result: &BenchResult, row: &PointRow<'_>) -> Vec<String> {
    let report = &row.point.report;
    let first = first_class(&result.class_names, row.point);
    let mut offered = rate(row.offered_rps());
    if row.point.refinement {
        offered.push_str(" (refined)");
    }
    let mut cells = vec![if row.chosen {
        format!("**{offered}**")
    } else {
        offered
    }];
    if result.repeats > 1 {
        cells.push(row.point.repeat.to_string());
    }
    let (weakest, weakest_n) = row.weakest.as_ref().map_or_else(
        || (MISSING.to_owned(), MISSING.to_owned()),
        |w| {
            (
                format!("{} ({})", pct(w.attainment), w.name),
                w.successful_count.to_string(),
            )
        },
    );
    let verdict = if row.chosen {
        format!("**{} ← capacity**", row.verdict)
    } else if row.point.early_stop.is_some() {
        format!("{} (stopped early)", row.verdict)
    } else {
        row.verdict.to_string()
    };
    cells.extend([
        rate(report.request_throughput_rps),
        pct(report.error_rate),
        pct(report.overall_attainment),
        weakest,
        weakest_n,
        rate(report.observed_goodput_rps),
        tokens_per_s(report.output_throughput_tps),
        ms(first.and_then(|c| c.p95_ttft_ms)),
        ms(first.and_then(|c| c.p95_tpot_ms)),
        report.queue_trend.to_string(),
        verdict,
    ]);
    cells
}

/// Everything below a mode's table that concerns single points.
fn point_notes(result: &BenchResult, rows: &[PointRow<'_>]) -> String {
    let label = |row: &PointRow<'_>| run_label(row, result.repeats);
    let mut out = String::new();

    let failing: Vec<&PointRow<'_>> = rows.iter().filter(|r| r.verdict != Verdict::Pass).collect();
    if !failing.is_empty() {
        out.push_str("### Gate reasons\n\n");
        for row in failing {
            let _ = writeln!(out, "- {} ({}):", label(row), row.verdict);
            if row.reasons.is_empty() {
                let _ = writeln!(out, "  - no reason recorded (the report's own gate failed)");
            }
            for reason in &row.reasons {
                let _ = writeln!(out, "  - {}", reason.message);
            }
        }
        out.push('\n');
    }

    let mut validity = String::new();
    for row in rows.iter().filter(|r| !r.point.valid) {
        let why = if row.point.validity_reasons.is_empty() {
            "no reason recorded".to_owned()
        } else {
            row.point.validity_reasons.join("; ")
        };
        let _ = writeln!(validity, "- {}: not evidence — {why}", label(row));
    }
    for row in rows.iter().filter(|r| r.point.valid) {
        for note in &row.point.validity_notes {
            let _ = writeln!(validity, "- {}: evidence, although {note}", label(row));
        }
    }
    section(&mut out, "Validity", &validity);

    let mut engine = String::new();
    for row in rows {
        let flags = row.point.engine_findings.iter().flat_map(|f| &f.flags);
        for flag in flags {
            let _ = writeln!(engine, "- {}: {flag}", label(row));
        }
    }
    section(&mut out, "Engine findings", &engine);

    let mut truth = String::new();
    for row in rows {
        if let Some(t) = &row.point.engine_truth {
            let _ = writeln!(truth, "- {}: {}", label(row), truth_line(t));
        }
    }
    section(&mut out, "Client beside engine", &truth);

    let mut littles = String::new();
    for row in rows {
        if let Some(l) = row.point.littles_law.filter(|l| l.flagged) {
            let _ = writeln!(
                littles,
                "- {}: mean in flight {:.1}, but completion rate × mean latency = {:.1} \
                 (gap {}): client and server boundaries disagree or the queue was not stable",
                label(row),
                l.mean_in_flight,
                l.expected_in_flight,
                pct(Some(l.relative_gap))
            );
        }
    }
    section(&mut out, "Little's Law", &littles);

    let hits: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            let hit = row.point.engine_findings.as_ref()?.prefix_cache_hit_rate?;
            Some(format!("{}: {}", label(row), pct(Some(hit))))
        })
        .collect();
    if !hits.is_empty() {
        let _ = writeln!(out, "Prefix-cache hit rate: {}.\n", hits.join(" · "));
    }
    out
}

/// One point's truth checks in a line: each figure as the client and the engine have it.
fn truth_line(t: &crate::engine_metrics::truth::EngineTruth) -> String {
    let mut parts = Vec::new();
    let pair = |c: &crate::engine_metrics::truth::Counted| {
        if c.equal() {
            format!("{:.0} both", c.client)
        } else {
            format!("{:.0} client / {:.0} engine", c.client, c.engine)
        }
    };
    if let Some(c) = &t.requests {
        parts.push(format!("requests {}", pair(c)));
    }
    if let Some(p) = &t.prompt_tokens {
        parts.push(format!(
            "prompt tokens {} ({})",
            pair(&p.counted),
            p.client_source
        ));
        if let Some(e) = p.sizing_error {
            parts.push(format!("prompt sizing {:+.1}% off the schedule", e * 100.0));
        }
    }
    if let Some(c) = &t.output_tokens {
        parts.push(format!("output tokens {}", pair(c)));
    }
    if let Some(x) = &t.ttft {
        let mut ttft = format!(
            "TTFT mean {:.1} ms client / {:.1} ms engine ({:+.1} ms)",
            x.client_mean_ms, x.engine_mean_ms, x.mean_gap_ms
        );
        if let (Some(c), Some(e), Some((lo, hi))) =
            (x.client_p50_ms, x.engine_p50_ms, x.engine_p50_bucket_ms)
        {
            let _ = write!(
                ttft,
                ", P50 {c:.1} / {e:.1} ms (engine bucket {lo:.0}–{hi:.0} ms)"
            );
        }
        parts.push(ttft);
    }
    if let Some(p) = &t.prefix_cache {
        parts.push(format!(
            "prefix-cache hit rate {} engine / {} the workload's share",
            pct(Some(p.engine_hit_rate)),
            pct(Some(p.expected_hit_rate))
        ));
    }
    parts.join(" · ")
}

/// Appends `### title` and `body` when `body` says something.
fn section(out: &mut String, title: &str, body: &str) {
    if !body.is_empty() {
        let _ = writeln!(out, "### {title}\n\n{body}");
    }
}

fn spread_section(result: &BenchResult, spreads: &[RateSpread]) -> String {
    let first = result
        .class_names
        .first()
        .map_or("first class", String::as_str);
    let mut out = String::from("### Spread across repeats\n\nEach cell: min / mean / max.\n\n");
    if spreads.is_empty() {
        out.push_str("No spread was recorded.\n\n");
        return out;
    }
    let mut sorted: Vec<&RateSpread> = spreads.iter().collect();
    sorted.sort_by(|a, b| a.offered_rps.total_cmp(&b.offered_rps));
    let rows: Vec<Vec<String>> = sorted
        .iter()
        .map(|s| {
            vec![
                rate(s.offered_rps),
                format!("{} / {}", s.passed, s.repeats),
                spread(s.goodput_rps.as_ref(), rate),
                spread(s.weakest_attainment.as_ref(), |v| pct(Some(v))),
                spread(s.error_rate.as_ref(), |v| pct(Some(v))),
                spread(s.p95_ttft_ms.as_ref(), |v| ms(Some(v))),
                spread(s.p95_tpot_ms.as_ref(), |v| ms(Some(v))),
            ]
        })
        .collect();
    let ttft = format!("{first} P95 TTFT ms");
    let tpot = format!("{first} P95 TPOT ms");
    out.push_str(&table(
        &[
            "offered RPS",
            "passed / repeats",
            "goodput RPS",
            "weakest-class attainment",
            "error rate",
            &ttft,
            &tpot,
        ],
        &rows,
    ));
    out.push('\n');
    out
}

fn spread(s: Option<&Spread>, fmt: impl Fn(f64) -> String) -> String {
    s.map_or_else(
        || MISSING.into(),
        |s| format!("{} / {} / {}", fmt(s.min), fmt(s.mean), fmt(s.max)),
    )
}

fn saturation_section(saturation: &SaturationResult, first: Option<&String>) -> String {
    let first = first.map_or("first class", String::as_str);
    let mut out = String::from("### Saturation (closed loop)\n\n");
    let knee = saturation.knee.as_ref().map(|k| k.concurrency);
    if saturation.levels.is_empty() {
        out.push_str("No concurrency level was measured.\n\n");
    } else {
        let rows: Vec<Vec<String>> = saturation
            .levels
            .iter()
            .map(|l| {
                let at_knee = knee == Some(l.concurrency);
                vec![
                    if at_knee {
                        format!("**{}** ← knee", l.concurrency)
                    } else {
                        l.concurrency.to_string()
                    },
                    rate(l.throughput_rps),
                    tokens_per_s(l.output_tps),
                    pct(l.weakest_attainment),
                    ms(l.p95_ttft_ms),
                    ms(l.p95_tpot_ms),
                    if l.slos_met { "yes" } else { "no" }.into(),
                ]
            })
            .collect();
        let ttft = format!("{first} P95 TTFT ms");
        let tpot = format!("{first} P95 TPOT ms");
        out.push_str(&table(
            &[
                "concurrency",
                "throughput RPS",
                "output tok/s",
                "weakest-class attainment",
                &ttft,
                &tpot,
                "SLOs met",
            ],
            &rows,
        ));
        out.push('\n');
    }
    if knee.is_none() {
        out.push_str("No knee: no concurrency level met every class's cutoffs.\n\n");
    }
    let _ = writeln!(out, "Rule: {}\n", or_missing(&saturation.rule));
    if !saturation.proposed_rates.is_empty() {
        let rates: Vec<String> = saturation.proposed_rates.iter().map(|r| rate(*r)).collect();
        let _ = writeln!(out, "Proposed offered rates (RPS): {}\n", rates.join(", "));
    }
    out
}

/// What every point held: real-time seconds on every GPU under test, per point and in all.
fn cost_section(result: &BenchResult) -> String {
    let gpus = result.target.replicas.max(1) * result.target.gpus_per_replica.max(1);
    let mut out = format!(
        "## Cost\n\nEvery point holds the deployment under test ({} replicas × {} GPUs = \
         {gpus} GPUs) from its schedule's time zero to its last response, warmup and drain \
         included; times are real-time equivalents.\n\n",
        result.target.replicas, result.target.gpus_per_replica
    );
    let row = |label: String, c: &Cost| {
        vec![
            label,
            format!("{:.0}", c.real_time_seconds),
            format!("{:.1}", c.gpu_minutes),
            c.requests_sent.to_string(),
        ]
    };
    let mut rows = Vec::new();
    for mode in &result.modes {
        let name = mode_name(mode.cache);
        for level in mode.saturation.iter().flat_map(|s| &s.levels) {
            rows.push(row(
                format!("{name} saturation c={}", level.concurrency),
                &level.cost,
            ));
        }
        for p in &mode.points {
            let repeat = if result.repeats > 1 {
                format!(" repeat {}", p.repeat + 1)
            } else {
                String::new()
            };
            rows.push(row(
                format!("{name} {} RPS{repeat}", rate(p.offered_rps)),
                &p.cost,
            ));
        }
        rows.push(row(format!("**{name} cache**"), &mode.cost));
    }
    rows.push(row("**benchmark**".into(), &result.cost));
    out.push_str(&table(
        &["point", "real-time s", "GPU-minutes", "requests sent"],
        &rows,
    ));
    out.push('\n');
    let saved = early_stop_savings(result);
    if saved.points > 0 {
        let _ = writeln!(
            out,
            "Early stopping ended {} failing point(s) with {:.0} s of their schedules unsent: \
             about {:.1} GPU-minutes saved.\n",
            saved.points, saved.real_time_seconds, saved.gpu_minutes
        );
    }
    for (mode, grid) in result
        .modes
        .iter()
        .filter_map(|m| m.plain_grid.as_ref().map(|g| (m, g)))
    {
        let ran = mode.rate_points_cost();
        let rates: Vec<String> = grid.rates.iter().map(|&r| rate(r)).collect();
        let _ = writeln!(
            out,
            "Model placement, {} cache: {} rate point(s) held {:.1} GPU-minutes where the \
             plain grid's rates ({} RPS) would have held at least {:.1} (their planned \
             schedules, drain not counted): {}.\n",
            mode_name(mode.cache),
            mode.points.len(),
            ran.gpu_minutes,
            rates.join(", "),
            grid.cost.gpu_minutes,
            placement_words(grid.cost.gpu_minutes - ran.gpu_minutes)
        );
    }
    out
}

/// What the model's placement saved against the plain grid (GPU-minutes; negative when
/// it spent more), summed over the modes it placed; `None` when it placed none.
pub(super) fn placement_savings(result: &BenchResult) -> Option<f64> {
    crate::planning::cost::placement_saved_gpu_minutes(result.modes.iter().filter_map(|m| {
        let grid = m.plain_grid.as_ref()?;
        Some((grid.cost.gpu_minutes, m.rate_points_cost().gpu_minutes))
    }))
}

/// "about X GPU-minutes saved", or "X GPU-minutes more" when placement cost more.
pub(super) fn placement_words(saved_gpu_minutes: f64) -> String {
    if saved_gpu_minutes >= 0.0 {
        format!("at least {saved_gpu_minutes:.1} GPU-minutes saved")
    } else {
        format!("{:.1} GPU-minutes more", -saved_gpu_minutes)
    }
}

/// What early stopping saved: the points it stopped and the schedule they left unsent.
pub(super) struct Savings {
    pub points: usize,
    pub real_time_seconds: f64,
    pub gpu_minutes: f64,
}

/// The schedule time early stopping left unsent, on every GPU under test.
pub(super) fn early_stop_savings(result: &BenchResult) -> Savings {
    let gpus = result.target.replicas.max(1) * result.target.gpus_per_replica.max(1);
    let stops: Vec<f64> = result
        .modes
        .iter()
        .flat_map(|m| &m.points)
        .filter_map(|p| p.early_stop.as_ref().map(|e| e.unsent_s))
        .collect();
    let seconds: f64 = stops.iter().sum();
    Savings {
        points: stops.len(),
        real_time_seconds: seconds,
        gpu_minutes: Cost::of(seconds, gpus, 0).gpu_minutes,
    }
}

fn warnings_section(result: &BenchResult) -> String {
    // Selection warnings are shown with their mode; don't repeat them here.
    let shown: Vec<&String> = result
        .modes
        .iter()
        .flat_map(|m| &m.selection.warnings)
        .collect();
    let rest: Vec<&String> = result
        .warnings
        .iter()
        .filter(|w| !shown.iter().any(|s| w.contains(s.as_str())))
        .collect();
    let mut out = String::from("## Warnings\n\n");
    if rest.is_empty() {
        out.push_str("None.\n");
    }
    for w in rest {
        let _ = writeln!(out, "- {w}");
    }
    out
}

/// A Markdown table; `|` inside a cell is escaped.
pub(super) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let cells: Vec<String> = cells.map(|c| c.replace('|', "\\|")).collect();
        format!("| {} |\n", cells.join(" | "))
    };
    let mut out = line(&mut header.iter().copied());
    out.push_str(&line(&mut header.iter().map(|_| "---")));
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// `plan.md`: capacity per cache mode and per replica, the cache mode the plan uses and
/// why, the replica arithmetic, and the caveat that it assumes linear scaling.
pub fn plan_markdown(result: &BenchResult) -> String {
    let mut out = format!("# Replica plan: {}\n\n", result.name);
    if let Some(when) = &result.interrupted {
        let _ = writeln!(
            out,
            "**INCOMPLETE: the run was interrupted {when}; this plan is not the benchmark's \
             result.**\n"
        );
    }
    out.push_str(&capacity_section(result));
    out.push_str(&peak_section(result));
    match (&result.peak, &result.plan) {
        (Some(_), Some(plan)) => {
            let mode = result.plan_cache_mode.map_or(MISSING, mode_name);
            let _ = writeln!(
                out,
                "## Replica arithmetic ({mode} cache)\n\n```text\n{}```\n",
                plan.explain()
            );
            let _ = writeln!(
                out,
                "**{} replicas ({} GPUs)** serve a peak of {} RPS at {} of measured capacity.\n",
                plan.required_replicas,
                plan.required_gpus,
                rate(plan.peak_rps),
                pct(Some(plan.target_utilization))
            );
            out.push_str(&other_mode_plans(result));
            out.push_str(LINEAR_SCALING_NOTE);
        }
        (Some(_), None) => {
            let _ = writeln!(
                out,
                "## Replica arithmetic\n\nNo replica plan: {}\n",
                missing_plan_reason(result)
            );
        }
        (None, _) => {
            out.push_str(
                "## Replica arithmetic\n\nNo replica plan: the benchmark gives no peak \
                 forecast (`peak`), so there is nothing to size for. The capacities above are \
                 what the tested deployment sustains.\n\n",
            );
        }
    }
    out
}

/// Shown with every plan.
const LINEAR_SCALING_NOTE: &str = "> The arithmetic assumes capacity scales linearly with \
    replicas (no shared bottleneck such as a router, network or storage). Deploy the new \
    topology and revalidate it with a benchmark at the planned load before buying hardware.\n";

fn capacity_section(result: &BenchResult) -> String {
    let mut out = String::from("## Capacity per cache mode\n\n");
    if result.modes.is_empty() {
        out.push_str("No cache mode was run: there is no measured capacity.\n\n");
        return out;
    }
    let rows: Vec<Vec<String>> = result
        .modes
        .iter()
        .map(|m| {
            vec![
                mode_name(m.cache).into(),
                m.capacity_rps.map_or_else(|| "none passed".into(), rate),
                opt_rate(m.capacity_per_replica_rps),
                result.target.replicas.to_string(),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "cache mode",
            "capacity RPS",
            "per replica RPS",
            "replicas tested",
        ],
        &rows,
    ));
    let _ = writeln!(
        out,
        "\nCapacity is the highest offered rate that passes the gate, measured with {} \
         replicas of {} GPUs each.\n",
        result.target.replicas, result.target.gpus_per_replica
    );
    out
}

fn peak_section(result: &BenchResult) -> String {
    let Some(peak) = &result.peak else {
        return String::new();
    };
    let mut out = String::from("## Peak forecast\n\n");
    let _ = writeln!(out, "- Peak: {} RPS (same workload mix)", rate(peak.rps));
    let utilization = peak
        .target_utilization
        .or(result.plan.as_ref().map(|p| p.target_utilization));
    let _ = writeln!(out, "- Target utilization: {}", pct(utilization));
    match result.plan_cache_mode {
        Some(mode) => {
            let why = if peak.cache_mode.is_some() {
                "the peak forecast asks for this cache state"
            } else {
                "the forecast names no cache state, so the plan takes the lowest capacity \
                 among the cache modes run (the conservative choice)"
            };
            let _ = writeln!(out, "- Cache mode used: **{}**: {why}", mode_name(mode));
        }
        None => {
            let _ = writeln!(
                out,
                "- Cache mode used: none (no cache mode has a capacity)"
            );
        }
    }
    out.push('\n');
    out
}

/// Why the plan is missing although a peak was given.
fn missing_plan_reason(result: &BenchResult) -> String {
    let wanted = result
        .plan_cache_mode
        .or(result.peak.as_ref().and_then(|p| p.cache_mode));
    let mode = wanted.and_then(|w| result.modes.iter().find(|m| m.cache == w));
    match (wanted, mode) {
        (_, None) if result.modes.is_empty() => {
            "no cache mode was run, so there is no measured capacity to plan from.".into()
        }
        (Some(w), None) => format!(
            "the {} cache mode was not run, so there is no capacity for it.",
            mode_name(w)
        ),
        (_, Some(m)) if m.capacity_rps.is_none() => format!(
            "no offered rate passed the gate in the {} cache sweep, so there is no measured \
             capacity to plan from. Lower the rates, or fix what the gate reasons in sweep.md \
             point to.",
            mode_name(m.cache)
        ),
        (None, None) if result.modes.iter().all(|m| m.capacity_rps.is_none()) => {
            "no offered rate passed the gate in any cache mode, so there is no measured \
             capacity to plan from. Lower the rates, or fix what the gate reasons in sweep.md \
             point to."
                .into()
        }
        _ => "the replica arithmetic could not be computed from the inputs (see the warnings \
              in sweep.md)."
            .into(),
    }
}

/// The required replicas every other mode's capacity would give, for comparison.
fn other_mode_plans(result: &BenchResult) -> String {
    let others: Vec<Vec<String>> = result
        .modes
        .iter()
        .filter(|m| Some(m.cache) != result.plan_cache_mode)
        .map(|m| match &m.plan {
            Some(p) => vec![
                mode_name(m.cache).into(),
                rate(p.capacity_rps),
                p.required_replicas.to_string(),
                p.required_gpus.to_string(),
            ],
            None => vec![
                mode_name(m.cache).into(),
                opt_rate(m.capacity_rps),
                MISSING.into(),
                MISSING.into(),
            ],
        })
        .collect();
    if others.is_empty() {
        return String::new();
    }
    let mut out = String::from("With the other cache modes' capacity, for comparison:\n\n");
    out.push_str(&table(
        &[
            "cache mode",
            "capacity RPS",
            "required replicas",
            "required GPUs",
        ],
        &others,
    ));
    out.push('\n');
    out
}
