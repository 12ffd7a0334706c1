//! The queue-trend rule: does the waiting queue grow through the steady-state window?

use super::gate::QueueTrend;

/// The least-squares line through a queue-length series and the verdict drawn from it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueueSlope {
    /// Fitted growth in requests per second.
    pub slope_per_s: f64,
    /// Slope divided by its standard error (large = the growth is not noise).
    pub t_stat: f64,
    /// Fitted growth over the whole window, in requests.
    pub growth: f64,
    /// The verdict.
    pub trend: QueueTrend,
}

/// `growing` when the least-squares slope of `(time_s, queue_length)` samples is
/// significantly positive (t > 3) **and** the fitted line rises by more than
/// `max(min_growth, 0.5 × mean queue)` over the window; `flat` otherwise, including when
/// there are fewer than 3 samples or no time spread. A queue that holds steady at any level
/// is flat; one that rises by a handful of requests through a long window is not growth that
/// matters.
pub fn queue_slope(samples: &[(f64, f64)], min_growth: f64) -> QueueSlope {
    let flat = QueueSlope {
        slope_per_s: 0.0,
        t_stat: 0.0,
        growth: 0.0,
        trend: QueueTrend::Flat,
    };
    let n = samples.len() as f64;
    if samples.len() < 3 {
        return flat;
    }
    let mean_t = samples.iter().map(|s| s.0).sum::<f64>() / n;
    let mean_q = samples.iter().map(|s| s.1).sum::<f64>() / n;
    let sxx: f64 = samples.iter().map(|s| (s.0 - mean_t).powi(2)).sum();
    if sxx <= 0.0 {
        return flat;
    }
    let sxy: f64 = samples
        .iter()
        .map(|s| (s.0 - mean_t) * (s.1 - mean_q))
        .sum();
    let slope = sxy / sxx;
    let intercept = mean_q - slope * mean_t;
    let sse: f64 = samples
        .iter()
        .map(|s| (s.1 - intercept - slope * s.0).powi(2))
        .sum();
    let se = (sse / (n - 2.0) / sxx).sqrt();
    let t_stat = if se > 0.0 {
        slope / se
    } else if slope > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    let (t0, t1) = samples
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), s| {
            (lo.min(s.0), hi.max(s.0))
        });
    let growth = slope * (t1 - t0);
    let trend = if t_stat > 3.0 && growth > min_growth.max(0.5 * mean_q) {
        QueueTrend::Growing
    } else {
        QueueTrend::Flat
    };
    QueueSlope {
        slope_per_s: slope,
        t_stat,
        growth,
        trend,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_noisy_queue_is_flat_and_a_ramp_is_growing() {
        let noisy: Vec<(f64, f64)> = (0..300)
            .map(|i| (f64::from(i), 20.0 + f64::from((i * 7919) % 11) - 5.0))
            .collect();
        assert_eq!(queue_slope(&noisy, 5.0).trend, QueueTrend::Flat);
        let ramp: Vec<(f64, f64)> = (0..300)
            .map(|i| {
                (
                    f64::from(i),
                    f64::from(i) * 0.5 + f64::from((i * 7919) % 11),
                )
            })
            .collect();
        let s = queue_slope(&ramp, 5.0);
        assert_eq!(s.trend, QueueTrend::Growing);
        assert!((s.slope_per_s - 0.5).abs() < 0.05, "{s:?}");
    }

    #[test]
    fn tiny_or_degenerate_series_are_flat() {
        assert_eq!(queue_slope(&[], 1.0).trend, QueueTrend::Flat);
        assert_eq!(
            queue_slope(&[(0.0, 0.0), (1.0, 9.0)], 1.0).trend,
            QueueTrend::Flat
        );
        assert_eq!(
            queue_slope(&[(1.0, 0.0), (1.0, 5.0), (1.0, 9.0)], 1.0).trend,
            QueueTrend::Flat
        );
        // A perfectly straight rise of 2 requests over the window is below min_growth.
        let small: Vec<(f64, f64)> = (0..100)
            .map(|i| (f64::from(i), f64::from(i) * 0.02))
            .collect();
        assert_eq!(queue_slope(&small, 5.0).trend, QueueTrend::Flat);
    }
}
