//! The one definition of each per-request and per-class formula.

/// Name of the percentile algorithm, recorded next to every percentile we report.
pub const PERCENTILE_ALGORITHM: &str = "nearest-rank";

/// `ceil(x)`, except that a value within float noise of a whole number counts as that
/// number: `36 / (6 × 0.75)` must give 8 even when rounding leaves 8.000000000000002.
pub fn ceil_tolerant(x: f64) -> f64 {
    let whole = x.round();
    if (x - whole).abs() <= 1e-9 * x.abs().max(1.0) {
        whole
    } else {
        x.ceil()
    }
}

/// Index of the nearest-rank `p` percentile in a sorted list of `n` values:
/// `max(0, ceil(p·n) − 1)`. `p` is a fraction in (0, 1]; `n` must be positive.
pub fn nearest_rank_index(n: usize, p: f64) -> usize {
    let rank = ceil_tolerant(p * n as f64);
    (rank as usize).saturating_sub(1).min(n.saturating_sub(1))
}

/// Nearest-rank percentile of an ascending slice; `None` when it is empty.
pub fn nearest_rank(sorted: &[f64], p: f64) -> Option<f64> {
    (!sorted.is_empty()).then(|| sorted[nearest_rank_index(sorted.len(), p)])
}

/// Nearest-rank percentiles of unsorted values for ascending `ps`, without a full sort
/// (one partial selection per percentile). Reorders `values`. `None` for an empty slice.
pub fn nearest_rank_many(values: &mut [f64], ps: &[f64]) -> Vec<Option<f64>> {
    let n = values.len();
    if n == 0 {
        return vec![None; ps.len()];
    }
    let mut out = vec![None; ps.len()];
    let mut order: Vec<usize> = (0..ps.len()).collect();
    order.sort_by_key(|&i| nearest_rank_index(n, ps[i]));
    // After selecting index k, everything right of k is >= values[k], so the next
    // (larger) index can be selected within the right part only.
    let mut lo = 0;
    for i in order {
        let k = nearest_rank_index(n, ps[i]);
        if k >= lo {
            let (_, v, _) = values[lo..].select_nth_unstable_by(k - lo, f64::total_cmp);
            out[i] = Some(*v);
            lo = k;
        } else {
            out[i] = Some(values[k]);
        }
    }
    out
}

/// The mean of the finite values, if any (non-finite ones, such as a missing figure's NaN,
/// are left out).
pub fn mean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / f64::from(n))
}

/// Time per output token of one request: `(e2e − ttft) / (output_tokens − 1)`, defined only
/// for more than one output token.
pub fn tpot_ms(ttft_ms: f64, e2e_ms: f64, output_tokens: u64) -> Option<f64> {
    (output_tokens > 1).then(|| (e2e_ms - ttft_ms) / (output_tokens - 1) as f64)
}

/// A successful request meets its class's SLO when both TTFT and TPOT are at or under the
/// cutoffs (a value exactly at a cutoff passes).
pub fn meets_slo(ttft_ms: f64, tpot_ms: f64, ttft_cutoff_ms: f64, tpot_cutoff_ms: f64) -> bool {
    ttft_ms <= ttft_cutoff_ms && tpot_ms <= tpot_cutoff_ms
}

/// `passing / successful`; undefined (`None`) without successes.
pub fn attainment(passing: u64, successful: u64) -> Option<f64> {
    (successful > 0).then(|| passing as f64 / successful as f64)
}

/// `failed / attempted`; undefined without attempts.
pub fn error_rate(failed: u64, attempted: u64) -> Option<f64> {
    (attempted > 0).then(|| failed as f64 / attempted as f64)
}

/// z for a two-sided 95% interval.
const Z_95: f64 = 1.959_963_984_540_054;

/// Lower end of the Wilson score 95% interval for `passing` of `n`: with the attainment
/// observed, the true attainment is at least this with 97.5% confidence. `None` for n = 0.
pub fn wilson_lower_95(passing: u64, n: u64) -> Option<f64> {
    wilson_interval(passing, n, Z_95).map(|i| i.0)
}

/// The Wilson score interval `(lower, upper)` for `passing` of `n` at `z` standard errors
/// (each end is a one-sided bound at the normal's tail beyond `z`). `None` for n = 0.
pub fn wilson_interval(passing: u64, n: u64, z: f64) -> Option<(f64, f64)> {
    if n == 0 {
        return None;
    }
    let n = n as f64;
    let p = passing as f64 / n;
    let z2 = z * z;
    let centre = p + z2 / (2.0 * n);
    let spread = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    let scale = 1.0 + z2 / n;
    Some((
        ((centre - spread) / scale).max(0.0),
        ((centre + spread) / scale).min(1.0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn nearest_rank_by_hand() {
        let v = [15.0, 20.0, 35.0, 40.0, 50.0];
        // n = 5: p30 -> ceil(1.5) = 2 -> 20; p40 -> ceil(2.0) = 2 -> 20; p50 -> ceil(2.5) = 3.
        assert_eq!(nearest_rank(&v, 0.30), Some(20.0));
        assert_eq!(nearest_rank(&v, 0.40), Some(20.0));
        assert_eq!(nearest_rank(&v, 0.50), Some(35.0));
        assert_eq!(nearest_rank(&v, 0.95), Some(50.0));
        assert_eq!(nearest_rank(&v, 1.0), Some(50.0));
        assert_eq!(nearest_rank(&v, 0.01), Some(15.0));
        // n = 4: p50 -> ceil(2) = 2 -> the second value, not an interpolation.
        assert_eq!(nearest_rank(&[1.0, 2.0, 3.0, 4.0], 0.5), Some(2.0));
        assert_eq!(nearest_rank(&[7.0], 0.99), Some(7.0));
        assert_eq!(nearest_rank(&[], 0.5), None);
        // n = 100: p95 is the 95th value, p99 the 99th.
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&hundred, 0.95), Some(95.0));
        assert_eq!(nearest_rank(&hundred, 0.99), Some(99.0));
        // 0.07 × 100 is 7.000000000000001 in binary: still the 7th value.
        assert_eq!(nearest_rank(&hundred, 0.07), Some(7.0));
    }

    #[test]
    fn tpot_matches_the_seed_rows() {
        let t = tpot_ms(182.0, 3370.0, 128).unwrap();
        assert!((t - 25.1).abs() < 0.01, "{t}");
        assert_eq!(tpot_ms(100.0, 100.0, 1), None);
        assert_eq!(tpot_ms(100.0, 100.0, 0), None);
    }

    #[test]
    fn cutoffs_are_inclusive() {
        assert!(meets_slo(500.0, 40.0, 500.0, 40.0));
        assert!(!meets_slo(500.000001, 40.0, 500.0, 40.0));
        assert!(!meets_slo(500.0, 40.01, 500.0, 40.0));
    }

    #[test]
    fn wilson_bound_known_values() {
        // 95 of 100: Wilson 95% interval is about [0.888, 0.978].
        let lb = wilson_lower_95(95, 100).unwrap();
        assert!((lb - 0.8883).abs() < 5e-4, "{lb}");
        assert_eq!(wilson_lower_95(0, 0), None);
        assert_eq!(wilson_lower_95(0, 10), Some(0.0));
        assert!(wilson_lower_95(2000, 2000).unwrap() > 0.998);
    }

    #[test]
    fn ceil_tolerant_guards_float_noise() {
        assert_eq!(ceil_tolerant(36.0 / 4.5), 8.0);
        assert_eq!(ceil_tolerant(8.000000000000002), 8.0);
        assert_eq!(ceil_tolerant(8.01), 9.0);
        assert_eq!(ceil_tolerant(7.2), 8.0);
    }

    proptest! {
        #[test]
        fn percentile_is_monotone_in_p(
            mut values in proptest::collection::vec(-1e6f64..1e6, 1..300),
            a in 0.001f64..1.0,
            b in 0.001f64..1.0,
        ) {
            values.sort_by(f64::total_cmp);
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(nearest_rank(&values, lo) <= nearest_rank(&values, hi));
        }

        #[test]
        fn selection_equals_sorting(
            values in proptest::collection::vec(-1e3f64..1e3, 0..300),
        ) {
            let ps = [0.5, 0.95, 0.99, 0.999];
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            let expected: Vec<_> = ps.iter().map(|&p| nearest_rank(&sorted, p)).collect();
            let mut scratch = values.clone();
            prop_assert_eq!(nearest_rank_many(&mut scratch, &ps), expected);
        }
    }
}
