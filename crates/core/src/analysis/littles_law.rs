//! Little's Law on a steady window: mean requests in flight ≈ completion rate × mean time
//! in the system. A large gap means the client's and the server's boundaries disagree,
//! telemetry was lost, requests were retried, or the queue was not stable.

use serde::Serialize;

/// Gap above which the check is flagged.
pub const LITTLES_LAW_TOLERANCE: f64 = 0.10;

/// The check's figures.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct LittlesLaw {
    /// Mean requests in flight, as sampled.
    pub mean_in_flight: f64,
    /// Completions per second.
    pub completion_rps: f64,
    /// Mean end-to-end latency of completed requests (s).
    pub mean_e2e_s: f64,
    /// `completion_rps × mean_e2e_s`.
    pub expected_in_flight: f64,
    /// `|mean_in_flight − expected| / expected`.
    pub relative_gap: f64,
    /// The gap exceeds [`LITTLES_LAW_TOLERANCE`].
    pub flagged: bool,
}

/// The rate a closed loop of `concurrency` requests in flight sustains when each spends
/// `mean_e2e_s` seconds in the system (Little's law solved for the rate); `None` without a
/// positive latency.
pub fn sustained_rps(concurrency: f64, mean_e2e_s: f64) -> Option<f64> {
    (mean_e2e_s > 0.0).then(|| concurrency / mean_e2e_s)
}

/// The check for a window; `None` when nothing completed.
pub fn littles_law(
    mean_in_flight: f64,
    completion_rps: f64,
    mean_e2e_s: f64,
) -> Option<LittlesLaw> {
    let expected = completion_rps * mean_e2e_s;
    if !(expected.is_finite() && expected > 0.0 && mean_in_flight.is_finite()) {
        return None;
    }
    let relative_gap = (mean_in_flight - expected).abs() / expected;
    Some(LittlesLaw {
        mean_in_flight,
        completion_rps,
        mean_e2e_s,
        expected_in_flight: expected,
        relative_gap,
        flagged: relative_gap > LITTLES_LAW_TOLERANCE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_example_and_a_flagged_gap() {
        // 23.9 completed RPS × 1.8 s = 43.02 in flight.
        let l = littles_law(43.0, 23.9, 1.8).unwrap();
        assert!((l.expected_in_flight - 43.02).abs() < 1e-9);
        assert!(!l.flagged);
        assert!(littles_law(60.0, 23.9, 1.8).unwrap().flagged);
        assert_eq!(littles_law(1.0, 0.0, 1.8), None);
    }
}
