//! The points of one cache mode as the reports show them: each run with its verdict and
//! reasons, sorted by rate then repeat, and grouped by rate.

use crate::analysis::{ClassReport, GateConfig, GateReason, Verdict};
use crate::bench::result::{ModeResult, PointResult};
use crate::planning::{WeakestClass, assess};

/// One run of one point, with what the selection concluded about it.
#[derive(Clone, Debug)]
pub(crate) struct PointRow<'a> {
    /// The run.
    pub point: &'a PointResult,
    /// Gate verdict.
    pub verdict: Verdict,
    /// The class with the lowest attainment.
    pub weakest: Option<WeakestClass>,
    /// Why the run does not pass.
    pub reasons: Vec<GateReason>,
    /// The run is at the mode's chosen capacity.
    pub chosen: bool,
}

impl PointRow<'_> {
    /// The run's offered rate.
    pub(crate) fn offered_rps(&self) -> f64 {
        self.point.offered_rps
    }
}

/// The runs of one offered rate.
#[derive(Clone, Debug)]
pub(crate) struct RateGroup<'a> {
    /// Offered rate.
    pub offered_rps: f64,
    /// Its runs, by repeat.
    pub rows: Vec<PointRow<'a>>,
}

/// Every run of `mode`, sorted by offered rate then repeat, each judged by the planning
/// core's [`assess`] (the same judgement the capacity selection makes).
pub(crate) fn point_rows<'a>(mode: &'a ModeResult, gate: &GateConfig) -> Vec<PointRow<'a>> {
    let mut points: Vec<&PointResult> = mode.points.iter().collect();
    points.sort_by(|a, b| {
        a.offered_rps
            .total_cmp(&b.offered_rps)
            .then(a.repeat.cmp(&b.repeat))
    });
    points
        .into_iter()
        .map(|point| {
            let a = assess(point.offered_rps, &point.report, gate);
            PointRow {
                point,
                verdict: a.verdict,
                weakest: a.weakest_class,
                reasons: a.reasons,
                chosen: mode.capacity_rps == Some(point.offered_rps),
            }
        })
        .collect()
}

/// Sorted rows grouped by offered rate.
pub(crate) fn rate_groups<'a>(rows: &[PointRow<'a>]) -> Vec<RateGroup<'a>> {
    let mut groups: Vec<RateGroup<'a>> = Vec::new();
    for row in rows {
        match groups.last_mut() {
            Some(g) if g.offered_rps == row.offered_rps() => g.rows.push(row.clone()),
            _ => groups.push(RateGroup {
                offered_rps: row.offered_rps(),
                rows: vec![row.clone()],
            }),
        }
    }
    groups
}

/// The report of the class the sweep table details (the first in manifest order).
pub(crate) fn first_class<'a>(
    class_names: &[String],
    point: &'a PointResult,
) -> Option<&'a ClassReport> {
    point.report.classes.get(class_names.first()?)
}

/// The label of a run: `16 RPS`, or `16 RPS, repeat 1` when rates are repeated.
pub(crate) fn run_label(row: &PointRow<'_>, repeats: u32) -> String {
    let rate = super::figures::rate(row.offered_rps());
    if repeats > 1 {
        format!("{rate} RPS, repeat {}", row.point.repeat)
    } else {
        format!("{rate} RPS")
    }
}
