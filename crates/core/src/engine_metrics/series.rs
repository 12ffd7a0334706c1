//! The engine-metrics time series of one test point (`engine-metrics.json`, next to
//! `requests.csv`) and what is derived from it.
//!
//! JSON shape:
//!
//! ```json
//! {
//!   "targets": ["http://10.0.0.5:8000", "http://10.0.0.6:8000"],
//!   "interval_s": 1.0,
//!   "profile": {"engine": "vllm", "found": ["queue_waiting", ...], "missing": [...],
//!               "names": {"queue_waiting": "vllm:num_requests_waiting", ...}},
//!   "target_engines": ["vllm", "vllm"],
//!   "samples": [
//!     {"round": 0, "t_s": 0.0012, "target": 0, "ok": true, "error": null,
//!      "values": {"queue_waiting": 3.0, "running": 12.0, "ttft_sum": 0.5, "ttft_count": 4.0, ...}},
//!     {"round": 0, "t_s": 0.0012, "target": 1, "ok": false,
//!      "error": "http://10.0.0.6:8000/metrics: ...", "values": {}}
//!   ]
//! }
//! ```
//!
//! Rules across targets (replicas): per scrape round, counts (waiting, running) are summed
//! and fractions (KV usage) averaged, over the rounds in which every target answered
//! ([`Coverage::AllTargets`]): a round missing a replica would show a false dip.
//! [`MetricsSeries::concept_series`] offers the other choices. Counter deltas are taken
//! per target over its successful scrapes (a decrease counts as a restart, as Prometheus'
//! `increase` does) and summed over targets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::profile::{Aggregation, Concept, DetectedProfile, EngineKind};

/// One scrape of one target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScrapeSample {
    /// Scrape round (0, 1, ...; round k was due at `k × interval` after the start).
    #[serde(default)]
    pub round: u64,
    /// Seconds since the point's start when the round's requests were sent.
    pub t_s: f64,
    /// Index into [`MetricsSeries::targets`].
    pub target: usize,
    /// Whether the page was fetched (HTTP 200, read in time).
    pub ok: bool,
    /// Why the scrape failed.
    pub error: Option<String>,
    /// Concept values by [`Concept::key`] (histograms as `<key>_sum` / `<key>_count`); empty
    /// when the scrape failed or no engine was recognised on the page.
    pub values: BTreeMap<String, f64>,
    /// Lines of the page that could not be parsed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_lines: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The series kept while a test point runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricsSeries {
    /// Base URLs scraped (`/metrics` appended unless already there).
    pub targets: Vec<String>,
    /// Scrape interval, seconds.
    #[serde(default)]
    pub interval_s: f64,
    /// The engine recognised on the first target that answered with known names.
    pub profile: Option<DetectedProfile>,
    /// The engine recognised on each target (`null` until one is).
    #[serde(default)]
    pub target_engines: Vec<Option<EngineKind>>,
    /// Every scrape, in round order then target order.
    pub samples: Vec<ScrapeSample>,
}

/// How per-target values of one round combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Across {
    /// Added (fleet-wide counts).
    Sum,
    /// Averaged (fleet-wide fractions when replicas are alike).
    Mean,
    /// The largest (the worst replica).
    Max,
}

/// Which rounds a series keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// Only rounds in which every target answered with the value.
    AllTargets,
    /// Every round in which at least one target answered with it, over those that did.
    Answered,
}

impl MetricsSeries {
    /// An empty series over `targets`.
    pub fn new(targets: Vec<String>, interval_s: f64) -> Self {
        MetricsSeries {
            target_engines: vec![None; targets.len()],
            targets,
            interval_s,
            profile: None,
            samples: Vec::new(),
        }
    }

    /// Multiplies every time by `k`: sample times, the interval, histogram sums and bucket
    /// bounds (all latency histograms, in seconds). For an engine that ran `k` times faster
    /// than real time, converted back to model time.
    pub fn rescale(&mut self, k: f64) {
        use super::profile::{bucket_bound, bucket_key};
        self.interval_s *= k;
        for s in &mut self.samples {
            s.t_s *= k;
            let values = std::mem::take(&mut s.values);
            s.values = values
                .into_iter()
                .map(|(key, v)| match bucket_bound(Concept::Ttft, &key) {
                    Some(le) => (bucket_key(Concept::Ttft, le * k), v),
                    None if key.ends_with("_sum") => (key, v * k),
                    None => (key, v),
                })
                .collect();
        }
    }

    /// The increase of each cumulative bucket of `concept`'s histogram over the window
    /// (per target from its first to its last successful scrape holding it, summed over
    /// targets), by ascending bound: the histogram of the observations made during the
    /// point. Empty when no target has the buckets twice.
    pub fn bucket_deltas(&self, concept: Concept) -> Vec<(f64, f64)> {
        let mut by: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for target in 0..self.targets.len() {
            let held: Vec<&ScrapeSample> = self
                .samples
                .iter()
                .filter(|s| s.target == target && s.ok)
                .filter(|s| {
                    s.values
                        .keys()
                        .any(|k| super::profile::bucket_bound(concept, k).is_some())
                })
                .collect();
            let (Some(first), Some(last)) = (held.first(), held.last()) else {
                continue;
            };
            if held.len() < 2 {
                continue;
            }
            for (key, end) in &last.values {
                let Some(le) = super::profile::bucket_bound(concept, key) else {
                    continue;
                };
                let start = first.values.get(key).copied().unwrap_or(0.0);
                // A counter that went down restarted: all of its count is new.
                let increase = if *end >= start { end - start } else { *end };
                by.entry(le.to_bits()).or_insert((le, 0.0)).1 += increase;
            }
        }
        let mut out: Vec<(f64, f64)> = by.into_values().collect();
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        out
    }

    /// Samples grouped by round, in round order.
    fn rounds(&self) -> BTreeMap<u64, Vec<&ScrapeSample>> {
        let mut out: BTreeMap<u64, Vec<&ScrapeSample>> = BTreeMap::new();
        for s in &self.samples {
            out.entry(s.round).or_default().push(s);
        }
        out
    }

    /// `(t_s, value)` per round of the value under `key` (a [`Concept::key`], or a
    /// histogram's `<key>_sum` / `<key>_count`) combined over targets. A round's time is
    /// the earliest `t_s` among its samples.
    pub fn key_series(&self, key: &str, across: Across, coverage: Coverage) -> Vec<(f64, f64)> {
        let n_targets = self.targets.len();
        let mut out = Vec::new();
        for samples in self.rounds().values() {
            let t = samples.iter().map(|s| s.t_s).fold(f64::INFINITY, f64::min);
            let mut per_target: BTreeMap<usize, f64> = BTreeMap::new();
            for s in samples.iter().filter(|s| s.ok) {
                if let Some(&v) = s.values.get(key) {
                    per_target.insert(s.target, v);
                }
            }
            let complete = (0..n_targets).all(|i| per_target.contains_key(&i));
            if per_target.is_empty() || (coverage == Coverage::AllTargets && !complete) {
                continue;
            }
            let vals = per_target.values();
            let v = match across {
                Across::Sum => vals.sum(),
                Across::Mean => vals.sum::<f64>() / per_target.len() as f64,
                Across::Max => vals.fold(f64::NEG_INFINITY, |a, &b| a.max(b)),
            };
            out.push((t, v));
        }
        out
    }

    /// `(t_s, value)` per round of a gauge or counter concept, combined over targets.
    pub fn concept_series(
        &self,
        concept: Concept,
        across: Across,
        coverage: Coverage,
    ) -> Vec<(f64, f64)> {
        self.key_series(concept.key(), across, coverage)
    }

    /// Waiting-queue depth summed over targets, per round in which every target answered.
    pub fn queue_series(&self) -> Vec<(f64, f64)> {
        self.concept_series(Concept::QueueWaiting, Across::Sum, Coverage::AllTargets)
    }

    /// Running requests summed over targets, per round in which every target answered.
    pub fn running_series(&self) -> Vec<(f64, f64)> {
        self.concept_series(Concept::Running, Across::Sum, Coverage::AllTargets)
    }

    /// Requests inside the engines (waiting plus running, summed over targets), per round in
    /// which every target answered both.
    pub fn in_engine_series(&self) -> Vec<(f64, f64)> {
        let running: BTreeMap<u64, f64> = self
            .running_series()
            .into_iter()
            .map(|(t, v)| (t.to_bits(), v))
            .collect();
        self.queue_series()
            .into_iter()
            .filter_map(|(t, w)| Some((t, w + running.get(&t.to_bits())?)))
            .collect()
    }

    /// KV usage (0–1) averaged over targets, per round in which every target answered.
    /// For the fullest replica use `concept_series(Concept::KvUsage, Across::Max, ..)`.
    pub fn kv_usage_series(&self) -> Vec<(f64, f64)> {
        self.concept_series(Concept::KvUsage, Across::Mean, Coverage::AllTargets)
    }

    /// Increase of the counter under `key` over the window: per target, the sum of the
    /// positive steps between its successive successful scrapes, a decrease counting as a
    /// restart from zero; summed over targets. `None` when no target has two scrapes with
    /// the value.
    pub fn key_delta(&self, key: &str) -> Option<f64> {
        let mut total = None;
        for target in 0..self.targets.len() {
            let mut prev: Option<f64> = None;
            let mut increase = 0.0;
            let mut steps = 0usize;
            for s in self.samples.iter().filter(|s| s.target == target && s.ok) {
                let Some(&v) = s.values.get(key) else {
                    continue;
                };
                if let Some(p) = prev {
                    increase += if v >= p { v - p } else { v };
                    steps += 1;
                }
                prev = Some(v);
            }
            if steps > 0 {
                *total.get_or_insert(0.0) += increase;
            }
        }
        total
    }

    /// Increase of a counter concept over the window (see [`MetricsSeries::key_delta`]).
    pub fn counter_delta(&self, concept: Concept) -> Option<f64> {
        self.key_delta(concept.key())
    }

    /// Mean of a histogram concept over the window: Δ`_sum` / Δ`_count`; `None` without
    /// observations in the window.
    pub fn histogram_mean(&self, concept: Concept) -> Option<f64> {
        let count = self.key_delta(&format!("{}_count", concept.key()))?;
        let sum = self.key_delta(&format!("{}_sum", concept.key()))?;
        (count > 0.0).then(|| sum / count)
    }

    /// Prefix-cache hit rate over the window: Δhits / Δqueries when the engine has the
    /// counters and queries grew; otherwise the mean of the engine's hit-rate gauge over
    /// the successful scrapes; `None` when neither is available.
    pub fn prefix_cache_hit_rate(&self) -> Option<f64> {
        let queries = self.counter_delta(Concept::PrefixCacheQueries);
        let hits = self.counter_delta(Concept::PrefixCacheHits);
        if let (Some(q), Some(h)) = (queries, hits)
            && q > 0.0
        {
            return Some(h / q);
        }
        let gauge: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.ok)
            .filter_map(|s| s.values.get(Concept::PrefixCacheHitRate.key()).copied())
            .collect();
        (!gauge.is_empty()).then(|| gauge.iter().sum::<f64>() / gauge.len() as f64)
    }

    /// Preemptions during the window (vLLM's counter; `None` for engines without one).
    pub fn preemptions(&self) -> Option<f64> {
        self.counter_delta(Concept::Preemptions)
    }

    /// Largest value of a gauge concept in any successful scrape of any target (the worst
    /// replica at its worst moment); for DCGM's XID, any nonzero value is an error code.
    pub fn peak(&self, concept: Concept) -> Option<f64> {
        self.samples
            .iter()
            .filter(|s| s.ok)
            .filter_map(|s| s.values.get(concept.key()).copied())
            .reduce(f64::max)
    }

    /// Scrapes that failed.
    pub fn failed_scrapes(&self) -> usize {
        self.samples.iter().filter(|s| !s.ok).count()
    }

    /// The default way `concept` combines over targets.
    pub fn default_across(concept: Concept) -> Across {
        match concept.aggregation() {
            Aggregation::Sum => Across::Sum,
            Aggregation::Mean => Across::Mean,
            Aggregation::Max => Across::Max,
        }
    }
}

/// Least-squares slope of `(t, v)` points (value units per second); `None` with fewer than
/// two distinct times. A queue that keeps growing under load has a clearly positive slope.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_t = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_v = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for &(t, v) in points {
        num += (t - mean_t) * (v - mean_v);
        den += (t - mean_t) * (t - mean_t);
    }
    (den > 0.0).then(|| num / den)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(round: u64, target: usize, values: &[(&str, f64)]) -> ScrapeSample {
        ScrapeSample {
            round,
            t_s: round as f64 * 0.5 + target as f64 * 0.001,
            target,
            ok: true,
            error: None,
            values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            skipped_lines: 0,
        }
    }

    fn failed(round: u64, target: usize) -> ScrapeSample {
        ScrapeSample {
            ok: false,
            error: Some("connection refused".into()),
            values: BTreeMap::new(),
            ..sample(round, target, &[])
        }
    }

    fn two_targets() -> MetricsSeries {
        let mut m = MetricsSeries::new(vec!["http://a".into(), "http://b".into()], 0.5);
        m.samples = vec![
            sample(
                0,
                0,
                &[
                    ("queue_waiting", 1.0),
                    ("running", 4.0),
                    ("kv_usage", 0.2),
                    ("prefix_cache_queries", 100.0),
                    ("prefix_cache_hits", 10.0),
                    ("preemptions", 0.0),
                    ("ttft_sum", 1.0),
                    ("ttft_count", 10.0),
                ],
            ),
            sample(
                0,
                1,
                &[
                    ("queue_waiting", 2.0),
                    ("running", 4.0),
                    ("kv_usage", 0.4),
                    ("prefix_cache_queries", 50.0),
                    ("prefix_cache_hits", 0.0),
                    ("preemptions", 3.0),
                ],
            ),
            // Round 1: target 1 fails.
            sample(
                1,
                0,
                &[
                    ("queue_waiting", 5.0),
                    ("running", 8.0),
                    ("kv_usage", 0.6),
                    ("prefix_cache_queries", 300.0),
                    ("prefix_cache_hits", 60.0),
                    ("preemptions", 1.0),
                    ("ttft_sum", 4.0),
                    ("ttft_count", 20.0),
                ],
            ),
            failed(1, 1),
            sample(
                2,
                0,
                &[
                    ("queue_waiting", 9.0),
                    ("running", 8.0),
                    ("kv_usage", 0.8),
                    ("prefix_cache_queries", 400.0),
                    ("prefix_cache_hits", 100.0),
                    ("preemptions", 2.0),
                ],
            ),
            // Target 1 restarted: its counters went back to zero.
            sample(
                2,
                1,
                &[
                    ("queue_waiting", 3.0),
                    ("running", 2.0),
                    ("kv_usage", 0.6),
                    ("prefix_cache_queries", 30.0),
                    ("prefix_cache_hits", 40.0),
                    ("preemptions", 1.0),
                ],
            ),
        ];
        m
    }

    #[test]
    fn gauges_combine_over_complete_rounds() {
        let m = two_targets();
        assert_eq!(m.queue_series(), vec![(0.0, 3.0), (1.0, 12.0)]);
        assert_eq!(m.running_series(), vec![(0.0, 8.0), (1.0, 10.0)]);
        let kv = m.kv_usage_series();
        assert_eq!(kv.len(), 2);
        assert!((kv[0].1 - 0.3).abs() < 1e-12 && (kv[1].1 - 0.7).abs() < 1e-12);
        assert_eq!(
            m.concept_series(Concept::QueueWaiting, Across::Sum, Coverage::Answered),
            vec![(0.0, 3.0), (0.5, 5.0), (1.0, 12.0)]
        );
        assert_eq!(
            m.concept_series(Concept::KvUsage, Across::Max, Coverage::AllTargets),
            vec![(0.0, 0.4), (1.0, 0.8)]
        );
        assert_eq!(m.peak(Concept::QueueWaiting), Some(9.0));
        assert_eq!(m.failed_scrapes(), 1);
        let s = slope(&m.queue_series()).unwrap_or_default();
        assert!((s - 9.0).abs() < 1e-12, "{s}");
    }

    #[test]
    fn counter_deltas_span_failures_and_restarts() {
        let m = two_targets();
        // Target 0: 100 → 300 → 400 = 300; target 1: 50, (failed), restart → 30 = 30.
        assert_eq!(m.counter_delta(Concept::PrefixCacheQueries), Some(330.0));
        // Hits: 10 → 60 → 100 = 90; 0 → restart 40 = 40.
        assert_eq!(m.counter_delta(Concept::PrefixCacheHits), Some(130.0));
        assert_eq!(m.prefix_cache_hit_rate(), Some(130.0 / 330.0));
        // Preemptions: 0 → 1 → 2 = 2; 3 → restart 1 = 1.
        assert_eq!(m.preemptions(), Some(3.0));
        // TTFT only on target 0: (4 - 1) / (20 - 10).
        assert_eq!(m.histogram_mean(Concept::Ttft), Some(0.3));
        assert_eq!(m.counter_delta(Concept::GenerationTokens), None);
    }

    #[test]
    fn hit_rate_falls_back_to_the_gauge() {
        let mut m = MetricsSeries::new(vec!["http://a".into()], 1.0);
        m.samples = vec![
            sample(0, 0, &[("prefix_cache_hit_rate", 0.2)]),
            sample(1, 0, &[("prefix_cache_hit_rate", 0.4)]),
            failed(2, 0),
        ];
        let r = m.prefix_cache_hit_rate().unwrap_or_default();
        assert!((r - 0.3).abs() < 1e-12);
        assert_eq!(m.preemptions(), None);
        assert!(m.queue_series().is_empty());
    }

    #[test]
    fn json_round_trip_and_shape() {
        let mut m = two_targets();
        m.target_engines = vec![Some(EngineKind::Vllm), None];
        let json = serde_json::to_value(&m).unwrap_or_default();
        assert_eq!(json["samples"][0]["values"]["queue_waiting"], 1.0);
        assert_eq!(json["samples"][3]["ok"], false);
        assert_eq!(json["samples"][3]["error"], "connection refused");
        assert_eq!(json["target_engines"][0], "vllm");
        assert!(json["samples"][0].get("skipped_lines").is_none());
        let back: MetricsSeries = serde_json::from_value(json).unwrap_or_default();
        assert_eq!(back, m);
        assert_eq!(slope(&[(1.0, 1.0)]), None);
        assert_eq!(slope(&[(1.0, 1.0), (1.0, 2.0)]), None);
    }
}
