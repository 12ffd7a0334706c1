//! The forecast peak of a serving plan: the request rates of a lookback window (from a
//! Prometheus range query), reduced to one rate by a nearest-rank quantile, times a growth
//! factor.
//!
//! `peak_rps = nearest_rank(rates, quantile) × growth_factor`. Samples that are not finite
//! or are negative (a counter reset read as a negative rate, a division by zero) are
//! dropped before ranking. The quantile is the same nearest-rank percentile the SLO reports
//! use ([`crate::analysis::nearest_rank`]): the value at rank `ceil(quantile × n)` of the
//! `n` samples sorted ascending, so the peak is always a rate that was observed.

use serde::{Deserialize, Serialize};

use super::num;
use crate::analysis::nearest_rank;

/// A peak estimated from a window of request rates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeakEstimate {
    /// Samples ranked: the window's finite, non-negative rates.
    pub samples: usize,
    /// The quantile taken, a fraction in [0, 1] (0.99 is P99, 1 the window's maximum).
    pub quantile: f64,
    /// The nearest-rank `quantile` of the samples (requests per second).
    pub quantile_rps: f64,
    /// Multiplier for the growth expected by the plan's horizon (1.2 plans for 20% more).
    pub growth_factor: f64,
    /// `quantile_rps × growth_factor`: the forecast peak (requests per second).
    pub peak_rps: f64,
}

/// Why no peak could be estimated.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PeakError {
    /// The query returned no finite, non-negative sample in the window.
    #[error(
        "the request-rate query returned no finite, non-negative sample in the lookback window"
    )]
    NoSamples,
    /// The quantile is not in [0, 1].
    #[error("the peak quantile must be a fraction in [0, 1] (0.99 for P99), got {0}")]
    BadQuantile(f64),
    /// The growth factor is not a finite number above 0.
    #[error("the growth factor must be a finite number above 0 (1.2 for 20% growth), got {0}")]
    BadGrowth(f64),
}

/// The forecast peak of `rates` (requests per second, any order): their nearest-rank
/// `quantile` times `growth_factor`. Non-finite and negative rates are dropped first; an
/// error when none is left, when `quantile` is outside [0, 1] or when `growth_factor` is
/// not a finite number above 0.
pub fn peak_from_rates(
    rates: &[f64],
    quantile: f64,
    growth_factor: f64,
) -> Result<PeakEstimate, PeakError> {
    if !(0.0..=1.0).contains(&quantile) {
        return Err(PeakError::BadQuantile(quantile));
    }
    if !(growth_factor.is_finite() && growth_factor > 0.0) {
        return Err(PeakError::BadGrowth(growth_factor));
    }
    let sorted = usable_sorted(rates);
    let quantile_rps = nearest_rank(&sorted, quantile).ok_or(PeakError::NoSamples)?;
    Ok(PeakEstimate {
        samples: sorted.len(),
        quantile,
        quantile_rps,
        growth_factor,
        peak_rps: quantile_rps * growth_factor,
    })
}

/// The finite, non-negative rates, ascending.
fn usable_sorted(rates: &[f64]) -> Vec<f64> {
    let mut kept: Vec<f64> = rates
        .iter()
        .copied()
        .filter(|r| r.is_finite() && *r >= 0.0)
        .collect();
    kept.sort_by(f64::total_cmp);
    kept
}

impl PeakEstimate {
    /// The arithmetic in one line, e.g.
    /// `P99 of 4032 samples = 30 RPS × growth 1.2 = 36 RPS`.
    pub fn describe(&self) -> String {
        format!(
            "P{} of {} samples = {} RPS × growth {} = {} RPS",
            num(self.quantile * 100.0),
            self.samples,
            num(self.quantile_rps),
            num(self.growth_factor),
            num(self.peak_rps),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_to_hundred() -> Vec<f64> {
        // Shuffled, so the function's own sort is what ranks them.
        (1..=100).rev().map(f64::from).collect()
    }

    #[test]
    fn p99_of_one_to_hundred_is_99() {
        // n = 100: rank ceil(0.99 × 100) = 99 → the 99th smallest, 99.
        let p = peak_from_rates(&one_to_hundred(), 0.99, 1.0).unwrap();
        assert_eq!(
            p,
            PeakEstimate {
                samples: 100,
                quantile: 0.99,
                quantile_rps: 99.0,
                growth_factor: 1.0,
                peak_rps: 99.0,
            }
        );
    }

    #[test]
    fn quantile_one_is_the_maximum_and_zero_the_minimum() {
        assert_eq!(
            peak_from_rates(&one_to_hundred(), 1.0, 1.0)
                .unwrap()
                .quantile_rps,
            100.0
        );
        assert_eq!(
            peak_from_rates(&one_to_hundred(), 0.0, 1.0)
                .unwrap()
                .quantile_rps,
            1.0
        );
        // n = 100, P50: rank ceil(50) = 50 → 50.
        assert_eq!(
            peak_from_rates(&one_to_hundred(), 0.5, 1.0)
                .unwrap()
                .quantile_rps,
            50.0
        );
    }

    #[test]
    fn growth_multiplies_the_quantile() {
        // P99 = 99; 99 × 1.2 = 118.8.
        let p = peak_from_rates(&one_to_hundred(), 0.99, 1.2).unwrap();
        assert_eq!(p.quantile_rps, 99.0);
        assert_eq!(p.growth_factor, 1.2);
        assert!((p.peak_rps - 118.8).abs() < 1e-9, "{}", p.peak_rps);
        // A factor under 1 plans for shrinking traffic.
        let p = peak_from_rates(&one_to_hundred(), 1.0, 0.5).unwrap();
        assert_eq!(p.peak_rps, 50.0);
    }

    #[test]
    fn unusable_samples_are_dropped_before_ranking() {
        // Kept: 10, 20, 30, 40 (n = 4). P50: rank ceil(2) = 2 → 20; P99: rank ceil(3.96)
        // = 4 → 40. Had the NaN, infinities and negative rate been ranked, n would be 8.
        let rates = [
            40.0,
            f64::NAN,
            10.0,
            f64::INFINITY,
            -5.0,
            30.0,
            f64::NEG_INFINITY,
            20.0,
        ];
        let p = peak_from_rates(&rates, 0.5, 1.0).unwrap();
        assert_eq!((p.samples, p.quantile_rps), (4, 20.0));
        let p = peak_from_rates(&rates, 0.99, 1.0).unwrap();
        assert_eq!((p.samples, p.quantile_rps), (4, 40.0));
        // A zero rate (an idle night) is a sample.
        let p = peak_from_rates(&[0.0, 0.0, 3.0], 0.5, 2.0).unwrap();
        assert_eq!((p.samples, p.quantile_rps, p.peak_rps), (3, 0.0, 0.0));
    }

    #[test]
    fn no_usable_sample_is_an_error() {
        assert_eq!(peak_from_rates(&[], 0.99, 1.2), Err(PeakError::NoSamples));
        assert_eq!(
            peak_from_rates(&[f64::NAN, f64::INFINITY, -1.0], 0.99, 1.2),
            Err(PeakError::NoSamples)
        );
    }

    #[test]
    fn bad_quantiles_and_growth_factors_are_errors() {
        let rates = one_to_hundred();
        assert_eq!(
            peak_from_rates(&rates, 1.5, 1.2),
            Err(PeakError::BadQuantile(1.5))
        );
        assert_eq!(
            peak_from_rates(&rates, -0.1, 1.2),
            Err(PeakError::BadQuantile(-0.1))
        );
        // 99 means P99 written as a percent: refused rather than read as a fraction.
        assert_eq!(
            peak_from_rates(&rates, 99.0, 1.2),
            Err(PeakError::BadQuantile(99.0))
        );
        assert!(matches!(
            peak_from_rates(&rates, f64::NAN, 1.2),
            Err(PeakError::BadQuantile(q)) if q.is_nan()
        ));
        assert_eq!(
            peak_from_rates(&rates, 0.99, 0.0),
            Err(PeakError::BadGrowth(0.0))
        );
        assert_eq!(
            peak_from_rates(&rates, 0.99, -1.2),
            Err(PeakError::BadGrowth(-1.2))
        );
        assert_eq!(
            peak_from_rates(&rates, 0.99, f64::INFINITY),
            Err(PeakError::BadGrowth(f64::INFINITY))
        );
        assert!(matches!(
            peak_from_rates(&rates, 0.99, f64::NAN),
            Err(PeakError::BadGrowth(g)) if g.is_nan()
        ));
        // Arguments are checked before the samples.
        assert_eq!(
            peak_from_rates(&[], 2.0, 1.2),
            Err(PeakError::BadQuantile(2.0))
        );
        assert_eq!(
            PeakError::BadQuantile(99.0).to_string(),
            "the peak quantile must be a fraction in [0, 1] (0.99 for P99), got 99"
        );
    }

    #[test]
    fn describe_shows_the_arithmetic() {
        let p = PeakEstimate {
            samples: 4032,
            quantile: 0.99,
            quantile_rps: 30.0,
            growth_factor: 1.2,
            peak_rps: 30.0 * 1.2,
        };
        assert_eq!(
            p.describe(),
            "P99 of 4032 samples = 30 RPS × growth 1.2 = 36 RPS"
        );
        let p = peak_from_rates(&one_to_hundred(), 0.999, 1.0).unwrap();
        assert_eq!(
            p.describe(),
            "P99.9 of 100 samples = 100 RPS × growth 1 = 100 RPS"
        );
    }

    #[test]
    fn estimates_round_trip_through_json() {
        let p = peak_from_rates(&one_to_hundred(), 0.99, 1.2).unwrap();
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<PeakEstimate>(&json).unwrap(), p);
    }
}
