//! A serving plan's proposal over time: the requirement of [`plan_replicas`] held within
//! the plan's bounds, and the scale-down rule that keeps it from flapping. Pure: the
//! controller keeps the history in the plan's status and passes the clock in.
//!
//! The scale-down rule is the one the Kubernetes HPA uses for its stabilization window: the
//! proposal is the highest requirement computed during the cooldown, so it rises at once
//! and falls only after every requirement of a whole cooldown was lower. A peak
//! oscillating around a boundary (8, 9, 8, 9, ...) keeps the proposal at 9.

use super::{PlanError, PlanInput, ReplicaPlan, num, plan_replicas};

/// The requirement for now, within the plan's bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct Requirement {
    /// The arithmetic, unclamped.
    pub plan: ReplicaPlan,
    /// The required replicas within `[min, max]`.
    pub replicas: u32,
    /// Why `replicas` differs from the formula's, in words (empty when it does not).
    pub notes: Vec<String>,
}

/// The formula's requirement for `input`, raised to `min` and capped at `max`.
pub fn requirement(input: PlanInput, min: u32, max: Option<u32>) -> Result<Requirement, PlanError> {
    let plan = plan_replicas(input)?;
    let raw = u32::try_from(plan.required_replicas).unwrap_or(u32::MAX);
    let mut replicas = raw.max(min);
    let mut notes = Vec::new();
    if replicas > raw {
        notes.push(format!("raised to minReplicas {min}"));
    }
    if let Some(max) = max
        && replicas > max
    {
        // What the capped fleet would carry: the peak over its measured capacity.
        let load = plan.peak_rps / (plan.capacity_per_replica_rps * f64::from(max));
        notes.push(format!(
            "capped at maxReplicas {max}: the peak would load them to {:.0}% of measured \
             capacity (the plan allows {:.0}%)",
            load * 100.0,
            plan.target_utilization * 100.0
        ));
        replicas = max;
    }
    Ok(Requirement {
        plan,
        replicas,
        notes,
    })
}

/// The arithmetic with its numbers, as `kubectl describe` shows it:
/// `ceil(36 / (6 × 0.75)) = ceil(8) = 8`.
pub fn arithmetic(plan: &ReplicaPlan) -> String {
    format!(
        "ceil({} / ({} × {})) = ceil({}) = {}",
        num(plan.peak_rps),
        num(plan.capacity_per_replica_rps),
        num(plan.target_utilization),
        num(plan.replicas_unrounded),
        plan.required_replicas
    )
}

/// A requirement and when it took that value (unix seconds).
pub type Entry = (i64, u32);

/// The proposal after the scale-down rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Stabilized {
    /// Replicas proposed.
    pub proposal: u32,
    /// The history to keep: the requirement in effect when the cooldown began, then each
    /// change since, ending with the current requirement.
    pub history: Vec<Entry>,
    /// Why the proposal is above the requirement, when it is.
    pub note: Option<String>,
}

/// The proposal for `required` at `now`, given the `previous` proposal and the `history`
/// of requirements (each change, oldest first):
/// - the highest requirement in effect during the last `cooldown_s` seconds (the current
///   one included) is the candidate, so the proposal rises at once and falls only after a
///   whole cooldown of lower requirements;
/// - a candidate lower than `previous` by less than `min_step` keeps `previous`.
pub fn stabilize(
    previous: Option<u32>,
    history: &[Entry],
    now: i64,
    required: u32,
    cooldown_s: i64,
    min_step: u32,
) -> Stabilized {
    let window_start = now.saturating_sub(cooldown_s.max(0));
    let mut kept: Vec<Entry> = Vec::with_capacity(history.len() + 1);
    // The last entry at or before the window's start was in effect when it began (a
    // window of no length has no start to be in effect at).
    if cooldown_s > 0
        && let Some(at_start) = history.iter().rev().find(|(t, _)| *t <= window_start)
    {
        kept.push(*at_start);
    }
    kept.extend(
        history
            .iter()
            .filter(|(t, _)| *t > window_start && *t <= now),
    );
    if kept.last().map(|(_, r)| *r) != Some(required) {
        kept.push((now, required));
    }
    let candidate = kept.iter().map(|(_, r)| *r).max().unwrap_or(required);
    let proposal = match previous {
        Some(p) if candidate < p && p - candidate < min_step.max(1) => p,
        _ => candidate,
    };
    let note = (proposal > required).then(|| {
        if proposal == candidate {
            format!(
                "held at {proposal}: a requirement of {candidate} was computed within the \
                 scale-down cooldown ({}); {required} takes effect once a whole cooldown \
                 stays at or below it",
                duration_text(cooldown_s)
            )
        } else {
            format!(
                "held at {proposal}: {candidate} is less than the scale-down minStep \
                 ({min_step}) below it"
            )
        }
    });
    Stabilized {
        proposal,
        history: kept,
        note,
    }
}

/// `15m`, `90s`, `336h`: a duration as people (and Kubernetes' durations) say it.
pub fn duration_text(seconds: i64) -> String {
    match seconds {
        s if s % 3600 == 0 && s > 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 && s > 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(peak: f64, capacity: f64, replicas_tested: u32) -> PlanInput {
        PlanInput {
            peak_rps: peak,
            capacity_rps: capacity,
            replicas_tested,
            gpus_per_replica: 2,
            target_utilization: 0.75,
        }
    }

    /// The seed's worked example: 24 RPS on 4 replicas, peak 36 → 8 replicas, 16 GPUs.
    #[test]
    fn the_worked_example_and_its_arithmetic() {
        let r = requirement(input(36.0, 24.0, 4), 1, None).unwrap();
        assert_eq!(r.replicas, 8);
        assert_eq!(r.plan.required_gpus, 16);
        assert!(r.notes.is_empty());
        assert_eq!(arithmetic(&r.plan), "ceil(36 / (6 × 0.75)) = ceil(8) = 8");
    }

    #[test]
    fn bounds_raise_and_cap_with_a_reason() {
        let low = requirement(input(3.0, 24.0, 4), 2, None).unwrap();
        assert_eq!((low.plan.required_replicas, low.replicas), (1, 2));
        assert_eq!(low.notes, ["raised to minReplicas 2"]);

        let capped = requirement(input(36.0, 24.0, 4), 1, Some(6)).unwrap();
        assert_eq!(capped.replicas, 6);
        // 36 RPS over 6 × 6 RPS of measured capacity: 100%.
        assert!(capped.notes[0].contains("capped at maxReplicas 6"));
        assert!(capped.notes[0].contains("100%"), "{}", capped.notes[0]);
        assert!(requirement(input(36.0, 0.0, 4), 1, None).is_err());
    }

    #[test]
    fn scaling_up_is_immediate_and_down_waits_a_whole_cooldown() {
        let cooldown = 600;
        let s = stabilize(None, &[], 0, 8, cooldown, 1);
        assert_eq!((s.proposal, s.history.clone()), (8, vec![(0, 8)]));

        let up = stabilize(Some(8), &s.history, 60, 10, cooldown, 1);
        assert_eq!(up.proposal, 10, "up at once");

        let down = stabilize(Some(10), &up.history, 120, 7, cooldown, 1);
        assert_eq!(down.proposal, 10, "10 was required 60 s ago");
        assert!(down.note.as_deref().unwrap().contains("10m"));

        // 599 s after the 10 stopped, it is still within the window.
        let still = stabilize(Some(10), &down.history, 120 + 599, 7, cooldown, 1);
        assert_eq!(still.proposal, 10);
        let after = stabilize(Some(10), &still.history, 120 + 600, 7, cooldown, 1);
        assert_eq!(after.proposal, 7);
        assert!(after.note.is_none());
        assert_eq!(
            after.history,
            vec![(120, 7)],
            "only what is in effect is kept"
        );
    }

    #[test]
    fn a_peak_oscillating_around_a_boundary_does_not_flap() {
        let mut previous = None;
        let mut history = Vec::new();
        let mut proposals = Vec::new();
        // Every 2 minutes for 4 hours the requirement alternates 8, 9.
        for step in 0..120i64 {
            let required = if step % 2 == 0 { 8 } else { 9 };
            let s = stabilize(previous, &history, step * 120, required, 900, 1);
            previous = Some(s.proposal);
            history = s.history;
            proposals.push(s.proposal);
            assert!(history.len() <= 10, "the history stays bounded");
        }
        assert_eq!(proposals[0], 8);
        assert!(
            proposals[1..].iter().all(|&p| p == 9),
            "once 9 is reached it holds: {proposals:?}"
        );
    }

    #[test]
    fn without_a_cooldown_a_lower_requirement_takes_effect_at_once() {
        let s = stabilize(Some(8), &[(0, 8)], 10, 7, 0, 1);
        assert_eq!((s.proposal, s.history.clone()), (7, vec![(10, 7)]));
        assert!(s.note.is_none());
    }

    #[test]
    fn a_reduction_smaller_than_the_min_step_keeps_the_proposal() {
        // A whole cooldown at 9 after 10: one replica fewer is less than the step of 2.
        let s = stabilize(Some(10), &[(0, 10), (5_000, 9)], 10_000, 9, 600, 2);
        assert_eq!(s.proposal, 10);
        assert!(s.note.unwrap().contains("minStep"));
        let s = stabilize(Some(10), &[(0, 10), (5_000, 8)], 10_000, 8, 600, 2);
        assert_eq!(s.proposal, 8);
        // A requirement recorded once stays in effect until it changes: 10 since t=0 is
        // still the requirement at 10,000 s, so the first 9 waits a cooldown.
        let s = stabilize(Some(10), &[(0, 10)], 10_000, 9, 600, 1);
        assert_eq!(s.proposal, 10);
    }
}
