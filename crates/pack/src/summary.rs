//! The one-screen terminal summary.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::figures::{mode_name, opt_rate, pct, rate, rule_word};
use super::markdown::time_scale_words;
use super::rows::{RateGroup, point_rows, rate_groups};
use crate::analysis::{GateConfig, Verdict};
use crate::bench::result::{BenchResult, ModeResult};

/// Rates per line of the pass/fail listing.
const RATES_PER_LINE: usize = 6;

/// A one-screen summary for a terminal: per cache mode the capacity, the verdict of every
/// rate and the mean prefix-cache hit rate; then the plan and the time scale.
pub fn summary_text(result: &BenchResult) -> String {
    let mut out = String::new();
    let t = &result.target;
    let _ = writeln!(
        out,
        "{}: {}{} · {} replicas × {} GPUs",
        result.name,
        t.kind,
        t.preset
            .as_ref()
            .map_or_else(String::new, |p| format!(" ({p})")),
        t.replicas,
        t.gpus_per_replica
    );
    if let Some(when) = &result.interrupted {
        let _ = writeln!(
            out,
            "INCOMPLETE: interrupted {when}; what follows is partial, not the benchmark's result"
        );
    }
    if result.modes.is_empty() {
        out.push_str("no cache mode was run\n");
    }
    for mode in &result.modes {
        out.push_str(&mode_lines(mode, &result.gate));
    }
    let _ = writeln!(out, "{}", plan_line(result));
    let c = &result.cost;
    let _ = writeln!(
        out,
        "cost: {:.1} GPU-minutes ({:.0} s of real time on {} GPUs, {} requests)",
        c.gpu_minutes,
        c.real_time_seconds,
        result.target.replicas.max(1) * result.target.gpus_per_replica.max(1),
        c.requests_sent
    );
    let saved = super::markdown::early_stop_savings(result);
    if saved.points > 0 {
        let _ = writeln!(
            out,
            "early stopping: {} failing point(s) stopped, about {:.1} GPU-minutes saved",
            saved.points, saved.gpu_minutes
        );
    }
    if let Some(saved) = super::markdown::placement_savings(result) {
        let _ = writeln!(
            out,
            "model placement: {} against the plain grid's rate points",
            super::markdown::placement_words(saved)
        );
    }
    let _ = writeln!(out, "time scale: {}", time_scale_words(result.time_scale));
    if let Some(t) = result.calibration.as_ref().and_then(|c| c.chosen_trial()) {
        let _ = writeln!(
            out,
            "calibration: idle drift {:.1}% of the tightest cutoff ({})",
            t.drift_fraction * 100.0,
            t.worst
        );
    }
    if !result.warnings.is_empty() {
        let n = result.warnings.len();
        let s = if n == 1 { "" } else { "s" };
        let _ = writeln!(out, "{n} warning{s} (see sweep.md)");
    }
    out
}

fn mode_lines(mode: &ModeResult, gate: &GateConfig) -> String {
    let capacity = match mode.capacity_rps {
        Some(cap) => format!(
            "capacity {} RPS ({} RPS per replica)",
            rate(cap),
            opt_rate(mode.capacity_per_replica_rps)
        ),
        None => match mode.client_limit.filter(|l| l.starved) {
            Some(l) => format!(
                "capacity: not measured (the load generator is starved: it fell behind its \
                 schedule at {} RPS, the lowest rate tried)",
                rate(l.rate)
            ),
            None => "capacity: none passed".into(),
        },
    };
    let capacity = match mode.prediction {
        Some(p) => format!("{capacity} · model predicted {} RPS", rate(p.predicted_rps)),
        None => capacity,
    };
    let capacity = match mode.bracket {
        Some(b) => format!(
            "{capacity} · bracket [{}, {}] RPS ({} wide)",
            rate(b.pass),
            rate(b.fail),
            pct(Some(b.width()))
        ),
        None => capacity,
    };
    let mut out = format!(
        "{} cache: {capacity} · prefix-cache hit rate {}\n",
        mode_name(mode.cache),
        pct(mode.mean_prefix_cache_hit_rate)
    );
    let rows = point_rows(mode, gate);
    let groups = rate_groups(&rows);
    if groups.is_empty() {
        out.push_str("  no points measured\n");
    }
    for line in groups.chunks(RATES_PER_LINE) {
        let parts: Vec<String> = line.iter().map(rate_status).collect();
        let _ = writeln!(out, "  {}", parts.join(" · "));
    }
    out
}

/// `16 FAIL (attainment)`, `14 pass`, `18 FAIL 1/2 (queue)` with repeats.
fn rate_status(group: &RateGroup<'_>) -> String {
    let runs = group.rows.len();
    let passed = group
        .rows
        .iter()
        .filter(|r| r.verdict == Verdict::Pass)
        .count();
    let failed = group.rows.iter().any(|r| r.verdict == Verdict::Fail);
    let rules: BTreeSet<&str> = group
        .rows
        .iter()
        .flat_map(|r| r.reasons.iter().map(|reason| rule_word(reason.rule)))
        .collect();
    let mut why: Vec<&str> = rules.into_iter().collect();
    if group.rows.iter().any(|r| !r.point.valid) {
        why.push("invalid");
    }
    if group.rows.iter().any(|r| r.point.early_stop.is_some()) {
        why.push("stopped early");
    }
    let verdict = if passed == runs {
        "pass".to_owned()
    } else if failed {
        "FAIL".to_owned()
    } else {
        "exploratory".to_owned()
    };
    let mut s = format!("{} {verdict}", rate(group.offered_rps));
    if runs > 1 && passed < runs {
        let _ = write!(s, " {passed}/{runs}");
    }
    if !why.is_empty() {
        let _ = write!(s, " ({})", why.join(", "));
    }
    s
}

fn plan_line(result: &BenchResult) -> String {
    match (&result.peak, &result.plan) {
        (Some(_), Some(p)) => format!(
            "plan ({} cache): peak {} RPS at {} → {} replicas ({} GPUs)",
            result.plan_cache_mode.map_or("-", mode_name),
            rate(p.peak_rps),
            utilization(p.target_utilization),
            p.required_replicas,
            p.required_gpus
        ),
        (Some(peak), None) => format!(
            "plan: none for a peak of {} RPS (no measured capacity to plan from; see plan.md)",
            rate(peak.rps)
        ),
        (None, _) => "plan: none (no peak forecast given)".into(),
    }
}

/// `75%`, or `72.5%` when the utilization is not whole.
fn utilization(u: f64) -> String {
    format!("{}%", rate(u * 100.0))
}
