//! A replica proposal as a pull request: its title, its body (the evidence: the arithmetic
//! with its numbers, the sweep, the per-class gate at the capacity point, a chart, the
//! benchmark and pack) and its commit message. The operator and `goodput propose` render
//! from the same [`Proposal`], with the tables and figures `plan.md` uses.

use super::figures::{MISSING, mode_name, opt_rate, pct, rate};
use super::markdown::table;
use crate::analysis::GateConfig;
use crate::api::{FinishedPoint, PlanEvidence, PointKind};

/// The marker that carries the plan hash in a pull request body.
pub const PLAN_HASH_MARKER: &str = "goodput:plan-hash=";

/// Everything a proposal's pull request says.
#[derive(Clone, Debug)]
pub struct Proposal<'a> {
    /// The plan, `namespace/name` (or the file `goodput propose` read).
    pub plan: &'a str,
    /// The workload, as `kubectl` names it: `deployment/qwen-7b`.
    pub target: &'a str,
    /// The file changed, relative to the repository root.
    pub file: &'a str,
    /// The number changed in it, in words: `Deployment qwen-7b spec.replicas`.
    pub field: String,
    /// The replicas the file declares now.
    pub from: u64,
    /// The replicas proposed.
    pub to: u32,
    /// GPUs of the proposed replicas.
    pub gpus: Option<u64>,
    /// The forecast peak (requests per second) and how it was found.
    pub peak_rps: f64,
    /// How the peak was found.
    pub peak_source: Option<&'a str>,
    /// The plan's arithmetic lines, exactly as its status has them.
    pub arithmetic: &'a [String],
    /// The capacity the plan stands on.
    pub evidence: Option<&'a PlanEvidence>,
    /// The benchmark's rate points in the evidence's cache mode.
    pub sweep: Vec<&'a FinishedPoint>,
    /// The benchmark's gate (class cutoffs and bars), when its manifest is known.
    pub gate: Option<GateConfig>,
    /// The change, as a unified diff.
    pub diff: &'a str,
    /// A hash of everything above, so an unchanged proposal is not rewritten.
    pub plan_hash: String,
}

/// The pull request's title.
pub fn title(p: &Proposal<'_>) -> String {
    format!(
        "Scale {} from {} to {} replicas (peak {} RPS)",
        p.target,
        p.from,
        p.to,
        rate(p.peak_rps)
    )
}

/// The commit message: a Conventional Commits subject, a blank line, and the arithmetic.
pub fn commit_message(prefix: &str, p: &Proposal<'_>) -> String {
    let mut out = format!(
        "{prefix}: scale {} from {} to {} replicas\n\n",
        p.target, p.from, p.to
    );
    for line in p.arithmetic {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&format!("\nProposed by goodput ServingPlan {}.\n", p.plan));
    out
}

/// The pull request's body, at most `limit` characters: the sections that matter most
/// come first, and the sweep and chart are left out (saying so) when the whole would not
/// fit.
pub fn body(p: &Proposal<'_>, limit: usize) -> String {
    let head = head_section(p);
    let footer = footer(p);
    let essential = [
        arithmetic_section(p),
        evidence_section(p),
        gate_section(p),
        change_section(p),
    ];
    let optional = [sweep_section(p), chart_section(p)];
    let mut out = head;
    for s in &essential {
        out.push_str(s);
    }
    let room = limit.saturating_sub(chars(&out) + chars(&footer));
    let extra: String = optional.concat();
    if chars(&extra) <= room {
        out.push_str(&extra);
    } else {
        out.push_str(
            "\n_The sweep table and chart are left out to fit the forge's size limit; the \
             CapacityBenchmark's status has every point._\n",
        );
    }
    out.push_str(&footer);
    if chars(&out) > limit {
        // Even the essentials do not fit (a huge diff): cut, keeping the marker.
        let keep = limit.saturating_sub(chars(&footer) + 2);
        let mut cut: String = out.chars().take(keep).collect();
        cut.push_str("…\n");
        cut.push_str(&footer);
        return cut;
    }
    out
}

/// The plan hash a body carries, if any.
pub fn plan_hash_of(body: &str) -> Option<&str> {
    let start = body.find(PLAN_HASH_MARKER)? + PLAN_HASH_MARKER.len();
    let rest = &body[start..];
    let end = rest.find(|c: char| !c.is_ascii_alphanumeric())?;
    Some(&rest[..end])
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

fn head_section(p: &Proposal<'_>) -> String {
    let direction = if u64::from(p.to) > p.from {
        "up"
    } else {
        "down"
    };
    let gpus = p.gpus.map(|g| format!(" ({g} GPUs)")).unwrap_or_default();
    format!(
        "## Scale {} {direction} from {} to {} replicas{gpus}\n\n\
         goodput's ServingPlan `{}` sizes `{}` for a forecast peak of **{} RPS**{}. This \
         pull request changes exactly one number, {} in `{}`; after it merges, the next \
         sync scales the workload and the plan benchmarks the new topology.\n",
        p.target,
        p.from,
        p.to,
        p.plan,
        p.target,
        rate(p.peak_rps),
        p.peak_source
            .map(|s| format!(" (peak source: {s})"))
            .unwrap_or_default(),
        p.field,
        p.file
    )
}

fn arithmetic_section(p: &Proposal<'_>) -> String {
    let mut out = String::from("\n### Arithmetic\n\n```text\n");
    for line in p.arithmetic {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str("```\n");
    out
}

fn evidence_section(p: &Proposal<'_>) -> String {
    let Some(e) = p.evidence else {
        return String::new();
    };
    let mut rows = vec![vec!["Source".to_owned(), format!("`{}`", e.source)]];
    let mut row = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            rows.push(vec![k.to_owned(), v]);
        }
    };
    row("Generation", e.generation.map(|g| g.to_string()));
    row("Cache mode", e.cache_mode.map(|m| mode_name(m).to_owned()));
    row(
        "Capacity (highest passing offered rate)",
        e.capacity_rps.map(|c| format!("{} RPS", rate(c))),
    );
    row(
        "Replicas measured",
        e.replicas_tested.map(|r| r.to_string()),
    );
    row(
        "Weakest class at capacity",
        e.weakest_class
            .as_ref()
            .map(|c| format!("{c} ({})", pct(e.weakest_attainment))),
    );
    row("Capacity pack", e.pack.as_ref().map(|p| format!("`{p}`")));
    row(
        "Measured at",
        e.measured_at.as_ref().map(|t| t.0.to_string()),
    );
    row("Why trusted", e.reason.clone());
    row(
        "Not compared",
        (!e.unchecked.is_empty()).then(|| e.unchecked.join("; ")),
    );
    format!("\n### Evidence\n\n{}", table(&["", ""], &rows))
}

/// The capacity point: the highest passing rate point of the sweep.
fn capacity_point<'a>(p: &Proposal<'a>) -> Option<&'a FinishedPoint> {
    let capacity = p.evidence.and_then(|e| e.capacity_rps)?;
    p.sweep
        .iter()
        .copied()
        .filter(|pt| pt.verdict == FinishedPoint::PASS)
        .find(|pt| pt.offered_rps.is_some_and(|r| (r - capacity).abs() < 1e-9))
}

fn gate_section(p: &Proposal<'_>) -> String {
    let Some(point) = capacity_point(p) else {
        return String::new();
    };
    let mut out = format!(
        "\n### Gate at the capacity point ({} RPS offered, {} achieved)\n\n",
        opt_rate(point.offered_rps),
        rate(point.achieved_rps)
    );
    let cutoffs = |name: &str| {
        p.gate
            .as_ref()
            .and_then(|g| g.classes.iter().find(|c| c.name == name))
            .map_or((MISSING.to_owned(), MISSING.to_owned()), |c| {
                (
                    format!("{} ms", rate(c.ttft_cutoff_ms)),
                    format!("{} ms", rate(c.tpot_cutoff_ms)),
                )
            })
    };
    let rows: Vec<Vec<String>> = point
        .classes
        .iter()
        .map(|c| {
            let (ttft, tpot) = cutoffs(&c.name);
            vec![
                c.name.clone(),
                ttft,
                tpot,
                c.successes.to_string(),
                pct(c.attainment),
                if c.passed { "pass" } else { "fail" }.to_owned(),
            ]
        })
        .collect();
    if rows.is_empty() {
        out.push_str(&format!(
            "Weakest class: {} at {} attainment.\n",
            point.weakest_class.as_deref().unwrap_or(MISSING),
            pct(point.weakest_attainment)
        ));
    } else {
        out.push_str(&table(
            &[
                "Class",
                "TTFT cutoff",
                "TPOT cutoff",
                "Successes",
                "Attainment",
                "Gate",
            ],
            &rows,
        ));
    }
    let mut bars = vec![format!(
        "error rate {} (≤ {})",
        pct(point.error_rate),
        p.gate
            .as_ref()
            .map_or(MISSING.to_owned(), |g| pct(Some(g.error_rate_max)))
    )];
    bars.push(format!(
        "queue {}",
        point.queue_trend.as_deref().unwrap_or(MISSING)
    ));
    if let Some(g) = &p.gate {
        bars.insert(
            0,
            format!(
                "each class needs ≥ {} of its successful requests within both cutoffs and ≥ {} \
                 successes",
                pct(Some(g.attainment_min)),
                g.min_successes_per_class
            ),
        );
    }
    out.push_str(&format!("\n{}.\n", bars.join("; ")));
    out
}

fn sweep_section(p: &Proposal<'_>) -> String {
    let rows: Vec<Vec<String>> = sweep_points(p)
        .map(|pt| {
            vec![
                opt_rate(pt.offered_rps),
                rate(pt.achieved_rps),
                pt.verdict.clone(),
                pct(pt.error_rate),
                pt.weakest_class.clone().unwrap_or_else(|| MISSING.into()),
                pct(pt.weakest_attainment),
                pt.queue_trend.clone().unwrap_or_else(|| MISSING.into()),
            ]
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "\n### Sweep\n\n{}",
        table(
            &[
                "Offered RPS",
                "Achieved RPS",
                "Verdict",
                "Errors",
                "Weakest class",
                "Attainment",
                "Queue",
            ],
            &rows,
        )
    )
}

fn sweep_points<'a, 'b>(p: &'b Proposal<'a>) -> impl Iterator<Item = &'a FinishedPoint> + 'b {
    p.sweep
        .iter()
        .copied()
        .filter(|pt| pt.kind == PointKind::Rate && pt.offered_rps.is_some())
}

/// A Mermaid `xychart-beta` (both GitHub and GitLab render it): the weakest class's
/// attainment per offered rate, beside the gate's bar.
fn chart_section(p: &Proposal<'_>) -> String {
    let points: Vec<&FinishedPoint> = sweep_points(p)
        .filter(|pt| pt.weakest_attainment.is_some())
        .collect();
    if points.len() < 2 {
        return String::new();
    }
    let x: Vec<String> = points
        .iter()
        .map(|pt| format!("\"{}\"", opt_rate(pt.offered_rps)))
        .collect();
    let y: Vec<String> = points
        .iter()
        .map(|pt| format!("{:.1}", pt.weakest_attainment.unwrap_or(0.0) * 100.0))
        .collect();
    let mut out = format!(
        "\n### Chart\n\n```mermaid\nxychart-beta\n    title \"Weakest class's SLO attainment by offered rate\"\n    \
         x-axis \"offered RPS\" [{}]\n    y-axis \"attainment (%)\" 0 --> 100\n    bar [{}]\n",
        x.join(", "),
        y.join(", ")
    );
    if let Some(g) = &p.gate {
        let bar = format!("{:.1}", g.attainment_min * 100.0);
        out.push_str(&format!(
            "    line [{}]\n",
            vec![bar; points.len()].join(", ")
        ));
    }
    out.push_str("```\n");
    out
}

fn change_section(p: &Proposal<'_>) -> String {
    format!("\n### Change\n\n```diff\n{}```\n", p.diff)
}

fn footer(p: &Proposal<'_>) -> String {
    format!(
        "\n---\n_Opened by goodput for ServingPlan `{}`. goodput updates this pull request when \
         the proposal changes and closes it when it no longer applies; a commit pushed to its \
         branch by anyone else stops goodput's updates._\n<!-- {PLAN_HASH_MARKER}{} -->\n",
        p.plan, p.plan_hash
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::ClassSlo;
    use crate::api::{CacheMode, PointClass};

    fn point(rate: f64, verdict: &str, attainment: f64) -> FinishedPoint {
        FinishedPoint {
            cache: CacheMode::Cold,
            kind: PointKind::Rate,
            concurrency: None,
            offered_rps: Some(rate),
            repeat: 0,
            achieved_rps: rate * 0.99,
            error_rate: Some(0.0),
            weakest_class: Some("chat".into()),
            weakest_attainment: Some(attainment),
            weakest_successes: Some(2400),
            queue_trend: Some("flat".into()),
            slos_met: verdict == FinishedPoint::PASS,
            valid: true,
            client_behind: false,
            verdict: verdict.into(),
            reasons: vec![],
            result_config_map: None,
            classes: vec![
                PointClass {
                    name: "chat".into(),
                    successes: 2400,
                    attainment: Some(attainment),
                    passed: attainment >= 0.95,
                },
                PointClass {
                    name: "long".into(),
                    successes: 2100,
                    attainment: Some(0.99),
                    passed: true,
                },
            ],
            busy_seconds: None,
            unsent_seconds: None,
            requests_sent: None,
            engine_rps: None,
        }
    }

    fn fixture(points: &[FinishedPoint]) -> (Vec<String>, PlanEvidence, Vec<&FinishedPoint>) {
        let arithmetic = vec![
            "capacity per replica = 24 RPS / 4 replicas = 6 RPS".to_owned(),
            "ceil(36 / (6 × 0.75)) = ceil(8) = 8".to_owned(),
        ];
        let evidence = PlanEvidence {
            source: "qwen-7b-sweep".into(),
            generation: Some(3),
            cache_mode: Some(CacheMode::Cold),
            capacity_rps: Some(24.0),
            replicas_tested: Some(4),
            weakest_class: Some("chat".into()),
            weakest_attainment: Some(0.962),
            pack: Some("s3://packs/qwen".into()),
            ..Default::default()
        };
        (arithmetic, evidence, points.iter().collect())
    }

    fn proposal<'a>(
        arithmetic: &'a [String],
        evidence: &'a PlanEvidence,
        sweep: Vec<&'a FinishedPoint>,
        diff: &'a str,
    ) -> Proposal<'a> {
        Proposal {
            plan: "llm/qwen-7b",
            target: "deployment/qwen-7b",
            file: "apps/qwen/deployment.yaml",
            field: "Deployment qwen-7b spec.replicas".into(),
            from: 4,
            to: 8,
            gpus: Some(8),
            peak_rps: 36.0,
            peak_source: Some("static"),
            arithmetic,
            evidence: Some(evidence),
            sweep,
            gate: Some(GateConfig {
                classes: vec![ClassSlo {
                    name: "chat".into(),
                    ttft_cutoff_ms: 2000.0,
                    tpot_cutoff_ms: 50.0,
                }],
                attainment_min: 0.95,
                min_successes_per_class: 2000,
                error_rate_max: 0.01,
                ..GateConfig::default()
            }),
            diff,
            plan_hash: "0123abcd".into(),
        }
    }

    const DIFF: &str = "--- a/apps/qwen/deployment.yaml\n+++ b/apps/qwen/deployment.yaml\n@@ -5 +5 @@\n-  replicas: 4\n+  replicas: 8\n";

    #[test]
    fn the_body_carries_the_arithmetic_evidence_gate_sweep_chart_and_diff() {
        let points = [
            point(12.0, FinishedPoint::PASS, 0.99),
            point(24.0, FinishedPoint::PASS, 0.962),
            point(30.0, FinishedPoint::FAIL, 0.81),
        ];
        let (arithmetic, evidence, sweep) = fixture(&points);
        let p = proposal(&arithmetic, &evidence, sweep, DIFF);
        let body = body(&p, 65_536);
        for line in &arithmetic {
            assert!(body.contains(line.as_str()), "{line} missing:\n{body}");
        }
        assert!(body.contains("### Gate at the capacity point (24 RPS offered"));
        assert!(
            body.contains("| chat | 2000 ms | 50 ms | 2400 | 96.2% | pass |"),
            "{body}"
        );
        assert!(
            body.contains("| long | - | - | 2100 | 99.0% | pass |"),
            "{body}"
        );
        assert!(
            body.contains("| 30 | 29.7 | fail | 0.0% | chat | 81.0% | flat |"),
            "{body}"
        );
        assert!(body.contains("```mermaid\nxychart-beta"));
        assert!(body.contains("bar [99.0, 96.2, 81.0]"), "{body}");
        assert!(body.contains("line [95.0, 95.0, 95.0]"));
        assert!(body.contains("-  replicas: 4\n+  replicas: 8\n"));
        assert!(body.contains("`qwen-7b-sweep`"));
        assert!(body.contains("`s3://packs/qwen`"));
        assert_eq!(plan_hash_of(&body), Some("0123abcd"));
        assert_eq!(
            title(&p),
            "Scale deployment/qwen-7b from 4 to 8 replicas (peak 36 RPS)"
        );
    }

    #[test]
    fn a_body_over_the_limit_drops_the_sweep_first_and_keeps_the_hash() {
        let points: Vec<FinishedPoint> = (1..=400)
            .map(|r| point(f64::from(r) * 0.1, FinishedPoint::PASS, 0.99))
            .collect();
        let (arithmetic, mut evidence, sweep) = fixture(&points);
        evidence.capacity_rps = Some(40.0);
        let p = proposal(&arithmetic, &evidence, sweep, DIFF);
        let full = body(&p, usize::MAX);
        assert!(full.contains("### Sweep"));
        let limit = 4_000;
        assert!(full.chars().count() > limit);
        let cut = body(&p, limit);
        assert!(cut.chars().count() <= limit, "{}", cut.chars().count());
        assert!(!cut.contains("### Sweep"));
        assert!(cut.contains("left out to fit"));
        assert!(cut.contains(&arithmetic[1]));
        assert_eq!(plan_hash_of(&cut), Some("0123abcd"));
        // A diff too big for any room is cut, and the hash still survives.
        let huge = "+x\n".repeat(10_000);
        let p = proposal(&arithmetic, &evidence, vec![], &huge);
        let cut = body(&p, limit);
        assert!(cut.chars().count() <= limit);
        assert_eq!(plan_hash_of(&cut), Some("0123abcd"));
    }

    #[test]
    fn the_commit_message_is_a_conventional_subject_over_the_arithmetic() {
        let points = [point(24.0, FinishedPoint::PASS, 0.962)];
        let (arithmetic, evidence, sweep) = fixture(&points);
        let p = proposal(&arithmetic, &evidence, sweep, DIFF);
        let msg = commit_message("chore(capacity)", &p);
        let mut lines = msg.lines();
        assert_eq!(
            lines.next(),
            Some("chore(capacity): scale deployment/qwen-7b from 4 to 8 replicas")
        );
        assert_eq!(lines.next(), Some(""));
        assert!(msg.contains(&arithmetic[1]));
    }
}
