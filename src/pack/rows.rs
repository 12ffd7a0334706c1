//! The points of one cache mode as the reports show them: each run with its verdict and
//! reasons, sorted by rate then repeat, and grouped by rate.

use crate::analysis::{ClassReport, GateReason, Verdict};
use crate::bench::result::{ModeResult, PointResult};
use crate::planning::{PointAssessment, WeakestClass};

/// One run of one point, with what the selection concluded about it.
#[derive(Clone, Debug)]
pub struct PointRow<'a> {
    /// The run.
    pub point: &'a PointResult,
    /// Gate verdict (the selection's when it has one for this run).
    pub verdict: Verdict,
    /// The class with the lowest attainment.
    pub weakest: Option<WeakestClass>,
    /// Why the run does not pass.
    pub reasons: &'a [GateReason],
    /// The run is at the mode's chosen capacity.
    pub chosen: bool,
}

impl PointRow<'_> {
    /// The run's offered rate.
    pub fn offered_rps(&self) -> f64 {
        self.point.offered_rps
    }
}

/// The runs of one offered rate.
#[derive(Clone, Debug)]
pub struct RateGroup<'a> {
    /// Offered rate.
    pub offered_rps: f64,
    /// Its runs, by repeat.
    pub rows: Vec<PointRow<'a>>,
}

/// Every run of `mode`, sorted by offered rate then repeat, each paired with the
/// selection's assessment of it.
pub fn point_rows(mode: &ModeResult) -> Vec<PointRow<'_>> {
    let mut points: Vec<&PointResult> = mode.points.iter().collect();
    points.sort_by(|a, b| {
        a.offered_rps
            .total_cmp(&b.offered_rps)
            .then(a.repeat.cmp(&b.repeat))
    });
    let mut rows = Vec::with_capacity(points.len());
    for (i, point) in points.iter().enumerate() {
        // The selection keeps the runs of a rate in the order they were given (by repeat):
        // the k-th run of a rate here is the k-th assessment of that rate there.
        let k = points[..i]
            .iter()
            .filter(|p| p.offered_rps == point.offered_rps)
            .count();
        let assessment = mode
            .selection
            .points
            .iter()
            .filter(|a| a.offered_rps == point.offered_rps)
            .nth(k);
        rows.push(point_row(point, assessment, mode.capacity_rps));
    }
    rows
}

fn point_row<'a>(
    point: &'a PointResult,
    assessment: Option<&'a PointAssessment>,
    capacity_rps: Option<f64>,
) -> PointRow<'a> {
    let report = &point.report;
    let verdict = assessment.map(|a| a.verdict).unwrap_or_else(|| {
        report.verdict.unwrap_or(if report.capacity_gate_pass {
            Verdict::Pass
        } else {
            Verdict::Fail
        })
    });
    let weakest = assessment
        .and_then(|a| a.weakest_class.clone())
        .or_else(|| weakest_class(report.classes.iter()));
    let reasons = match assessment {
        Some(a) if report.gate_reasons.is_empty() => &a.reasons[..],
        _ => &report.gate_reasons[..],
    };
    PointRow {
        point,
        verdict,
        weakest,
        reasons,
        chosen: capacity_rps == Some(point.offered_rps),
    }
}

/// The class with the lowest attainment (a class without successes counts as lowest).
fn weakest_class<'a>(
    classes: impl Iterator<Item = (&'a String, &'a ClassReport)>,
) -> Option<WeakestClass> {
    classes
        .min_by(|a, b| {
            let key = |c: &ClassReport| c.attainment.unwrap_or(-1.0);
            key(a.1).total_cmp(&key(b.1))
        })
        .map(|(name, c)| WeakestClass {
            name: name.clone(),
            attainment: c.attainment,
            successful_count: c.successful_count,
        })
}

/// Sorted rows grouped by offered rate.
pub fn rate_groups<'a>(rows: &[PointRow<'a>]) -> Vec<RateGroup<'a>> {
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
pub fn first_class<'a>(class_names: &[String], point: &'a PointResult) -> Option<&'a ClassReport> {
    point.report.classes.get(class_names.first()?)
}

/// The label of a run: `16 RPS`, or `16 RPS, repeat 1` when rates are repeated.
pub fn run_label(row: &PointRow<'_>, repeats: u32) -> String {
    let rate = super::figures::rate(row.offered_rps());
    if repeats > 1 {
        format!("{rate} RPS, repeat {}", row.point.repeat)
    } else {
        format!("{rate} RPS")
    }
}
