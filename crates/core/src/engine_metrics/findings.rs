//! What one point's scraped series say beyond the queue trend: KV pressure, prefix-cache
//! behaviour (and whether the experiment's cache state held), preemptions.

use serde::Serialize;

use super::Concept;
use super::series::MetricsSeries;

/// A warm-cache point whose prefix-cache hit rate is below this did not keep its cache.
pub const WARM_HIT_RATE_MIN: f64 = 0.05;
/// A cold-cache point whose hit rate is above this was not cold.
pub const COLD_HIT_RATE_MAX: f64 = 0.20;

/// Engine-side figures of one point.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct EngineFindings {
    /// Highest KV-cache usage (0–1) of any replica at any scrape.
    pub kv_usage_peak: Option<f64>,
    /// Mean KV-cache usage (0–1) over complete scrape rounds (mean of replicas).
    pub kv_usage_mean: Option<f64>,
    /// Longest waiting queue summed over replicas.
    pub queue_waiting_peak: Option<f64>,
    /// Prefix-cache hits / queries over the point.
    pub prefix_cache_hit_rate: Option<f64>,
    /// Preemptions during the point.
    pub preemptions: Option<f64>,
    /// Preemptions per second of the point.
    pub preemptions_per_s: Option<f64>,
    /// Things that make the point suspect, in words.
    pub flags: Vec<String>,
}

/// The findings of `series` for a point `duration_s` long, run with a `warm` or cold cache.
pub fn findings(series: &MetricsSeries, duration_s: f64, warm: bool) -> EngineFindings {
    let kv = series.kv_usage_series();
    let kv_usage_mean =
        (!kv.is_empty()).then(|| kv.iter().map(|p| p.1).sum::<f64>() / kv.len() as f64);
    let queue_waiting_peak = series.queue_series().iter().map(|p| p.1).reduce(f64::max);
    let hit_rate = series.prefix_cache_hit_rate();
    let preemptions = series.preemptions();
    let mut flags = Vec::new();
    if let Some(flag) = cache_state_flag(warm, hit_rate) {
        flags.push(flag);
    }
    if series.failed_scrapes() > 0 {
        flags.push(format!(
            "{} of {} scrapes failed: engine figures may miss part of the point",
            series.failed_scrapes(),
            series.samples.len()
        ));
    }
    EngineFindings {
        kv_usage_peak: series.peak(Concept::KvUsage),
        kv_usage_mean,
        queue_waiting_peak,
        prefix_cache_hit_rate: hit_rate,
        preemptions,
        preemptions_per_s: preemptions
            .filter(|_| duration_s > 0.0)
            .map(|p| p / duration_s),
        flags,
    }
}

/// A warm run whose hit rate is near zero, or a cold run with a high one, did not hold the
/// cache state the experiment claims.
pub fn cache_state_flag(warm: bool, hit_rate: Option<f64>) -> Option<String> {
    let rate = hit_rate?;
    if warm && rate < WARM_HIT_RATE_MIN {
        Some(format!(
            "warm-cache point with a prefix-cache hit rate of {:.1}%: the cache state did not hold",
            rate * 100.0
        ))
    } else if !warm && rate > COLD_HIT_RATE_MAX {
        Some(format!(
            "cold-cache point with a prefix-cache hit rate of {:.1}%: the cache was not cold",
            rate * 100.0
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_state_flags() {
        assert!(
            cache_state_flag(true, Some(0.01))
                .unwrap()
                .contains("did not hold")
        );
        assert_eq!(cache_state_flag(true, Some(0.6)), None);
        assert!(
            cache_state_flag(false, Some(0.5))
                .unwrap()
                .contains("not cold")
        );
        assert_eq!(cache_state_flag(false, Some(0.0)), None);
        assert_eq!(cache_state_flag(true, None), None);
    }
}
