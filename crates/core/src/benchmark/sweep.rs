//! The pure arithmetic of a sweep: the rates a knee proposes, the extension of a sweep that
//! does not bracket the capacity, and the spread across repeats. The driver
//! ([`super::driver`]) decides when each applies.

use super::result::{RateSpread, Spread};
use crate::analysis::{GateConfig, PointReport, Verdict};
use crate::planning::assess;

/// How the knee is chosen and the range derived, in words (for the report).
pub fn knee_rule(low: f64, high: f64, points: u32) -> String {
    format!(
        "knee = the highest concurrency at which every class still met its TTFT and TPOT \
         cutoffs at the required attainment (closed loop self-throttles, so this is a \
         candidate, never a capacity); the rate sweep runs {points} open-loop rates evenly \
         from {low} to {high} × the knee's throughput, and is extended by one step at a time \
         (at most {MAX_EXTENSIONS}) until it has a failing rate above a passing one"
    )
}

/// Most points added to a sweep that does not bracket the capacity.
pub const MAX_EXTENSIONS: usize = 3;

/// `points` rates evenly from `low × knee` to `high × knee`, rounded to what a person would
/// write (3 significant digits).
pub fn proposed_rates(knee_rps: f64, low: f64, high: f64, points: u32) -> Vec<f64> {
    let n = points.max(2);
    (0..n)
        .map(|i| {
            let f = low + (high - low) * f64::from(i) / f64::from(n - 1);
            round_sig(knee_rps * f, 3)
        })
        .filter(|r| *r > 0.0)
        .fold(Vec::new(), |mut out, r| {
            if out.last().is_none_or(|l: &f64| r > *l) {
                out.push(r);
            }
            out
        })
}

/// `x` rounded to `digits` significant digits.
pub fn round_sig(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(digits - 1 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

/// What a finished sweep needs next so that capacity is bracketed: a rate above the
/// highest (every rate passed) or below the lowest (every rate failed). `None` when a
/// passing rate has a failing one above it, or when nothing can be said.
pub fn extension(rates_passed: &[(f64, bool)]) -> Option<f64> {
    let mut sorted: Vec<(f64, bool)> = rates_passed.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (lo, hi) = (sorted.first()?.0, sorted.last()?.0);
    let step = if sorted.len() >= 2 {
        (hi - lo) / (sorted.len() - 1) as f64
    } else {
        hi * 0.2
    };
    let highest_pass = sorted.iter().rev().find(|p| p.1).map(|p| p.0);
    match highest_pass {
        None => Some(round_sig(lo / 2.0, 3)).filter(|r| *r > 0.0 && *r < lo),
        Some(p) if p == hi => Some(round_sig(hi + step.max(hi * 0.05), 3)),
        Some(_) => None,
    }
}

/// The first two rates around a predicted capacity: one just below it and one a little
/// under `resolution` above that (3 significant digits), so that a prediction within
/// about ±2% brackets the capacity at once, already narrow enough.
pub fn placed_rates(predicted_rps: f64, resolution: f64) -> Vec<f64> {
    let r = if resolution > 0.0 { resolution } else { 0.05 };
    let low = round_sig(predicted_rps * (1.0 - 0.45 * r), 3);
    let high = round_sig(low * (1.0 + 0.9 * r), 3);
    if high > low && low > 0.0 {
        vec![low, high]
    } else {
        vec![predicted_rps]
    }
}

/// The next rate of a model-placed sweep that does not bracket the capacity yet, after
/// `extensions` others: first a little under `resolution` beyond (a prediction just off
/// still brackets narrowly enough), then 10%, 20%, 40% and 80%, above the highest (every
/// rate passed) or below the lowest (every rate failed), so a prediction far off is still
/// bracketed.
pub fn placed_extension(
    rates_passed: &[(f64, bool)],
    extensions: usize,
    resolution: f64,
) -> Option<f64> {
    let r = if resolution > 0.0 { resolution } else { 0.05 };
    let step = match extensions {
        0 => 0.9 * r,
        n => 0.1 * 2f64.powi((n - 1).min(3) as i32),
    };
    let lo = rates_passed.iter().map(|p| p.0).min_by(f64::total_cmp)?;
    let hi = rates_passed.iter().map(|p| p.0).max_by(f64::total_cmp)?;
    let highest_pass = rates_passed
        .iter()
        .filter(|p| p.1)
        .map(|p| p.0)
        .max_by(f64::total_cmp);
    match highest_pass {
        None => Some(round_sig(lo / (1.0 + step), 3)).filter(|r| *r > 0.0 && *r < lo),
        Some(p) if p == hi => Some(round_sig(hi * (1.0 + step), 3)),
        Some(_) => None,
    }
}

/// Most rates added to a model-placed sweep that does not bracket the capacity (see
/// [`placed_extension`]).
pub const PLACED_MAX_EXTENSIONS: usize = 5;

/// The final bracket of a sweep: the highest rate that passed and the lowest failing rate
/// above it. `None` until a failing rate lies above a passing one.
pub fn bracket(rates_passed: &[(f64, bool)]) -> Option<Bracket> {
    let pass = rates_passed
        .iter()
        .filter(|p| p.1)
        .map(|p| p.0)
        .max_by(f64::total_cmp)?;
    let fail = rates_passed
        .iter()
        .filter(|p| !p.1 && p.0 > pass)
        .map(|p| p.0)
        .min_by(f64::total_cmp)?;
    Some(Bracket { pass, fail })
}

/// Where a capacity lies: at or above `pass`, below `fail` (the status's type).
pub use crate::planning::CapacityBracket as Bracket;

/// The next rate of a refinement: the bracket's midpoint (3 significant digits), while the
/// bracket is wider than `resolution` of its passing rate. `None` when it is narrow enough,
/// or the midpoint rounds onto one of its ends.
pub fn refinement(bracket: Bracket, resolution: f64) -> Option<f64> {
    if resolution <= 0.0 || bracket.width() <= resolution * (1.0 + 1e-9) {
        return None;
    }
    let mid = round_sig((bracket.pass + bracket.fail) / 2.0, 3);
    (mid > bracket.pass && mid < bracket.fail).then_some(mid)
}

/// The spread of every figure over the repeats of each rate (`reports` as
/// `(rate, report)`, any order). `first_class` names the class whose latencies are shown.
pub fn spread(
    reports: &[(f64, &PointReport)],
    first_class: &str,
    gate: &GateConfig,
) -> Vec<RateSpread> {
    let mut rates: Vec<f64> = reports.iter().map(|r| r.0).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    rates
        .into_iter()
        .map(|rate| {
            let here: Vec<&PointReport> = reports
                .iter()
                .filter(|r| r.0 == rate)
                .map(|r| r.1)
                .collect();
            let of = |f: &dyn Fn(&PointReport) -> Option<f64>| {
                spread_of(here.iter().filter_map(|r| f(r)))
            };
            let first = |f: fn(&crate::analysis::ClassReport) -> Option<f64>| {
                move |r: &PointReport| r.classes.get(first_class).and_then(f)
            };
            RateSpread {
                offered_rps: rate,
                repeats: here.len() as u32,
                passed: here
                    .iter()
                    .filter(|r| assess(rate, r, gate).verdict == Verdict::Pass)
                    .count() as u32,
                goodput_rps: of(&|r| Some(r.observed_goodput_rps)),
                weakest_attainment: of(&|r| r.weakest_attainment()),
                error_rate: of(&|r| r.error_rate),
                p95_ttft_ms: of(&first(|c| c.p95_ttft_ms)),
                p95_tpot_ms: of(&first(|c| c.p95_tpot_ms)),
            }
        })
        .collect()
}

fn spread_of(values: impl Iterator<Item = f64>) -> Option<Spread> {
    let v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    Some(Spread {
        min: v.iter().copied().fold(f64::INFINITY, f64::min),
        max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        mean: v.iter().sum::<f64>() / v.len() as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposed_rates_span_the_fractions_and_round() {
        let r = proposed_rates(10.0, 0.6, 1.2, 5);
        assert_eq!(r, vec![6.0, 7.5, 9.0, 10.5, 12.0]);
        let r = proposed_rates(13.37, 0.5, 1.0, 3);
        assert_eq!(r, vec![6.69, 10.0, 13.4]);
    }

    #[test]
    fn extension_brackets_capacity() {
        // Every rate passed: go one step higher.
        assert_eq!(
            extension(&[(6.0, true), (8.0, true), (10.0, true)]),
            Some(12.0)
        );
        // Every rate failed: halve the lowest.
        assert_eq!(extension(&[(6.0, false), (8.0, false)]), Some(3.0));
        // Bracketed.
        assert_eq!(extension(&[(6.0, true), (8.0, true), (10.0, false)]), None);
        assert_eq!(extension(&[]), None);
    }

    #[test]
    fn refinement_bisects_the_bracket_until_it_is_narrow_enough() {
        let b = bracket(&[(10.0, true), (12.0, true), (14.0, false), (16.0, false)])
            .expect("bracketed");
        assert_eq!(
            b,
            Bracket {
                pass: 12.0,
                fail: 14.0
            }
        );
        assert_eq!(refinement(b, 0.05), Some(13.0));
        // 12 → 12.5 is 4.2%: narrow enough.
        let b = Bracket {
            pass: 12.0,
            fail: 12.5,
        };
        assert_eq!(refinement(b, 0.05), None);
        assert_eq!(refinement(b, 0.0), None, "0 turns refinement off");
        // A midpoint that rounds onto an end cannot narrow the bracket.
        assert_eq!(
            refinement(
                Bracket {
                    pass: 100.0,
                    fail: 100.1
                },
                0.0001
            ),
            None
        );
        // A fail below the highest pass is not a bracket (the sweep is not monotonic).
        assert_eq!(bracket(&[(10.0, false), (12.0, true)]), None);
        assert_eq!(bracket(&[(10.0, true), (12.0, true)]), None);
    }

    #[test]
    fn placed_rates_straddle_the_prediction_within_the_resolution() {
        let r = placed_rates(17.0, 0.05);
        assert_eq!(r, vec![16.6, 17.3]);
        let b = Bracket {
            pass: r[0],
            fail: r[1],
        };
        assert!(b.width() <= 0.05, "{b:?}");
        // One resolution step first: a prediction just off still brackets within it.
        assert_eq!(
            placed_extension(&[(16.6, true), (17.3, true)], 0, 0.05),
            Some(18.1)
        );
        assert_eq!(
            placed_extension(&[(16.6, true), (18.1, true)], 1, 0.05),
            Some(19.9)
        );
        assert_eq!(
            placed_extension(&[(16.6, true), (19.9, true)], 2, 0.05),
            Some(23.9)
        );
        assert_eq!(
            placed_extension(&[(16.6, false), (17.3, false)], 0, 0.05),
            Some(15.9)
        );
        let narrow = Bracket {
            pass: 15.9,
            fail: 16.6,
        };
        assert!(narrow.width() <= 0.05, "{narrow:?}");
        assert_eq!(
            placed_extension(&[(16.6, true), (17.3, false)], 0, 0.05),
            None
        );
    }

    #[test]
    fn round_sig_keeps_three_digits() {
        assert_eq!(round_sig(0.012345, 3), 0.0123);
        assert_eq!(round_sig(123456.0, 3), 123000.0);
        assert_eq!(round_sig(0.0, 3), 0.0);
    }
}
