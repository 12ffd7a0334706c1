//! Sample stores: the time series the evaluator reads, built by hand, from the engine
//! metrics the scraper kept ([`SampleStore::from_metrics_series`]) or from the load
//! generator's per-request records ([`SampleStore::add_client_records`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::analysis::{meets_slo, nearest_rank};
use crate::engine_metrics::{Concept, EngineKind, MetricKind, MetricsSeries};
use crate::record::RequestRecord;

/// Client metric: completed requests by `class` and `result` (`ok` or `error`), counter.
pub const CLIENT_REQUESTS_TOTAL: &str = "goodput_loadgen_requests_total";
/// Client metric: successful requests meeting both cutoffs of their `class`, counter.
pub const CLIENT_SLO_MET_TOTAL: &str = "goodput_loadgen_requests_slo_met_total";
/// Client metric: the per-`class` attainment target (0–1), gauge.
pub const CLIENT_ATTAINMENT_TARGET: &str = "goodput_loadgen_slo_attainment_target";
/// Client metric: p99 lag of sends behind the open-loop schedule, seconds, gauge.
pub const CLIENT_SCHEDULE_LAG: &str = "goodput_loadgen_schedule_lag_seconds";
/// Every client metric name.
pub const CLIENT_METRICS: [&str; 4] = [
    CLIENT_REQUESTS_TOTAL,
    CLIENT_SLO_MET_TOTAL,
    CLIENT_ATTAINMENT_TARGET,
    CLIENT_SCHEDULE_LAG,
];

/// Bits of Prometheus' staleness marker (`value.StaleNaN`): a NaN with this payload ends a
/// series, so an instant selector stops returning it at once instead of after the 5-minute
/// lookback. Copies keep the payload; arithmetic does not, so only stored points carry it.
const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// Prometheus' staleness marker value.
pub fn stale_marker() -> f64 {
    f64::from_bits(STALE_NAN_BITS)
}

/// Whether a stored value is the staleness marker (an ordinary NaN is not).
pub fn is_stale_marker(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// One time series: a metric name, its labels (without `__name__`) and its points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Metric name.
    pub name: String,
    /// Labels, `__name__` excluded.
    pub labels: BTreeMap<String, String>,
    /// `(t seconds, value)`, ascending in `t`, one point per time. A value for which
    /// [`is_stale_marker`] holds marks the series stale from then on (until the next point).
    pub points: Vec<(f64, f64)>,
}

/// Time series keyed by name and labels, the input of [`super::evaluate`].
#[derive(Clone, Debug, Default)]
pub struct SampleStore {
    series: Vec<Series>,
    index: BTreeMap<(String, BTreeMap<String, String>), usize>,
}

impl SampleStore {
    /// Adds the point `(t_s, value)` to the series `name{labels}`, creating it. Points may
    /// come in any order (kept ascending); a second point at the same time replaces the
    /// first. A `__name__` label is ignored: the name is `name`.
    pub fn push(&mut self, name: &str, labels: &[(&str, &str)], t_s: f64, value: f64) {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .filter(|(k, _)| *k != "__name__")
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.push_owned(name, labels, t_s, value);
    }

    /// Marks the series `name{labels}` stale at `t_s`, as Prometheus does when a target's
    /// scrape fails or a series disappears from its page: instant selectors find nothing
    /// from then until the next point, range selectors skip the marker.
    pub fn push_stale(&mut self, name: &str, labels: &[(&str, &str)], t_s: f64) {
        self.push(name, labels, t_s, stale_marker());
    }

    fn push_owned(&mut self, name: &str, labels: BTreeMap<String, String>, t_s: f64, value: f64) {
        let key = (name.to_string(), labels);
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                let i = self.series.len();
                self.series.push(Series {
                    name: key.0.clone(),
                    labels: key.1.clone(),
                    points: Vec::new(),
                });
                self.index.insert(key, i);
                i
            }
        };
        let points = &mut self.series[i].points;
        match points.last() {
            Some(&(last, _)) if last < t_s => points.push((t_s, value)),
            None => points.push((t_s, value)),
            _ => {
                let at = points.partition_point(|p| p.0 < t_s);
                if points.get(at).is_some_and(|p| p.0 == t_s) {
                    points[at].1 = value;
                } else {
                    points.insert(at, (t_s, value));
                }
            }
        }
    }

    /// Every series, in creation order.
    pub fn series(&self) -> &[Series] {
        &self.series
    }

    /// The series `name{labels}` (labels exactly), if any.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<&Series> {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.index
            .get(&(name.to_string(), labels))
            .map(|&i| &self.series[i])
    }

    /// The engine metrics of one test point as Prometheus would have stored them, scraping
    /// the same targets at the same times:
    ///
    /// - `up{instance, replica}`: 1 for every successful scrape, 0 for every failed one;
    /// - every concept value of a successful scrape under the metric name the profile
    ///   resolved (`series.profile.names`; a target whose own engine differs from the
    ///   profile's gets that engine's current name), histograms as `<name>_sum` and
    ///   `<name>_count`, with the same `instance` and `replica` labels;
    /// - a staleness marker for each of a target's series when its scrape fails or the
    ///   series is missing from a successful scrape, as Prometheus writes one.
    ///
    /// `instance` is the target URL's `host:port` (the scheme's default port when the URL
    /// has none), `replica` the target's index. A reconstructed series carries the value
    /// the profile aggregated per target (label sets summed or averaged: vLLM's DP ranks,
    /// `model_name`, `finished_reason`), not the engine's own label sets; buckets are not
    /// kept, so `_bucket` series and `histogram_quantile` have nothing to read.
    pub fn from_metrics_series(series: &MetricsSeries) -> SampleStore {
        let mut store = SampleStore::default();
        let names = KeyNames::new(series);
        // Per target: the series its previous scrape gave, to mark the missing ones stale.
        let mut live: Vec<BTreeSet<(String, BTreeMap<String, String>)>> =
            vec![BTreeSet::new(); series.targets.len()];
        for s in &series.samples {
            let Some(url) = series.targets.get(s.target) else {
                continue; // a sample of a target the series does not list names no instance
            };
            let base: BTreeMap<String, String> = [
                ("instance".to_string(), instance_of(url)),
                ("replica".to_string(), s.target.to_string()),
            ]
            .into();
            store.push_owned("up", base.clone(), s.t_s, if s.ok { 1.0 } else { 0.0 });
            let mut now = BTreeSet::new();
            if s.ok {
                for (key, &value) in &s.values {
                    let Some((name, label)) = names.metric(s.target, key) else {
                        continue;
                    };
                    let mut labels = base.clone();
                    if let Some((k, v)) = label {
                        labels.insert(k, v);
                    }
                    store.push_owned(&name, labels.clone(), s.t_s, value);
                    now.insert((name, labels));
                }
            }
            for (name, labels) in live[s.target].difference(&now) {
                store.push_owned(name, labels.clone(), s.t_s, stale_marker());
            }
            live[s.target] = now;
        }
        store
    }

    /// Adds the load generator's client metrics, sampled every `step_s` from 0 to `end_s`
    /// (as a scrape of the load generator would see them), from its per-request records:
    ///
    /// - `goodput_loadgen_requests_total{class, result}`: requests completed by then, with
    ///   `result` `ok` or `error` (both series exist from 0 on for every class);
    /// - `goodput_loadgen_requests_slo_met_total{class}`: successes meeting both cutoffs of
    ///   their class ([`crate::analysis::meets_slo`] on the record's TTFT and TPOT);
    /// - `goodput_loadgen_slo_attainment_target{class}`: `attainment_target`;
    /// - `goodput_loadgen_schedule_lag_seconds`: nearest-rank p99 of the lag of the
    ///   requests sent in the last step (`sent_s − scheduled_s`), counting a request still
    ///   unsent past its schedule with its lag so far; 0 when there is none.
    ///
    /// A request counts when its response ended (`ended_s`). `class_names[i]` and
    /// `cutoffs[i]` (`(ttft_ms, tpot_ms)`) belong to class index `i`; a class without a name
    /// is named by its index, one without cutoffs never meets its SLO. Nothing is added
    /// unless `step_s` is positive and `end_s` finite.
    pub fn add_client_records(
        &mut self,
        records: &[RequestRecord],
        class_names: &[String],
        cutoffs: &[(f64, f64)],
        attainment_target: f64,
        step_s: f64,
        end_s: f64,
    ) {
        if !(step_s > 0.0 && step_s.is_finite() && end_s.is_finite()) {
            return;
        }
        let n_classes = records
            .iter()
            .map(|r| r.class + 1)
            .max()
            .unwrap_or(0)
            .max(class_names.len());
        let name = |c: usize| class_names.get(c).cloned().unwrap_or_else(|| c.to_string());
        // Completion times per class: ok, error, SLO met.
        let mut done: Vec<[Vec<f64>; 3]> = vec![Default::default(); n_classes];
        // A request the client aborted on purpose is neither ok nor an error, as live.
        for r in records.iter().filter(|r| !r.aborted()) {
            let d = &mut done[r.class];
            if r.ok() {
                d[0].push(r.ended_s);
                let met = cutoffs
                    .get(r.class)
                    .is_some_and(|&(ttft, tpot)| meets_slo(r.ttft_ms, r.tpot_ms, ttft, tpot));
                if met {
                    d[2].push(r.ended_s);
                }
            } else {
                d[1].push(r.ended_s);
            }
        }
        for d in &mut done {
            for times in d.iter_mut() {
                times.sort_by(f64::total_cmp);
            }
        }
        let count = |times: &[f64], t: f64| times.partition_point(|&x| x <= t) as f64;
        let steps = (end_s / step_s + 1e-9).floor().max(-1.0) as i64;
        for k in 0..=steps {
            let t = k as f64 * step_s;
            for (c, d) in done.iter().enumerate() {
                let class = name(c);
                let class = class.as_str();
                for (result, times) in [("ok", &d[0]), ("error", &d[1])] {
                    self.push(
                        CLIENT_REQUESTS_TOTAL,
                        &[("class", class), ("result", result)],
                        t,
                        count(times, t),
                    );
                }
                self.push(
                    CLIENT_SLO_MET_TOTAL,
                    &[("class", class)],
                    t,
                    count(&d[2], t),
                );
                self.push(
                    CLIENT_ATTAINMENT_TARGET,
                    &[("class", class)],
                    t,
                    attainment_target,
                );
            }
            let mut lags: Vec<f64> = records
                .iter()
                .filter_map(|r| {
                    if r.sent_s > t - step_s && r.sent_s <= t {
                        Some(r.schedule_lag_ms() / 1e3)
                    } else if r.scheduled_s <= t && r.sent_s > t {
                        Some(t - r.scheduled_s)
                    } else {
                        None
                    }
                })
                .collect();
            lags.sort_by(f64::total_cmp);
            let p99 = nearest_rank(&lags, 0.99).unwrap_or(0.0);
            self.push(CLIENT_SCHEDULE_LAG, &[], t, p99);
        }
    }
}

/// The `host:port` of a target URL, as Prometheus' `instance` label has it.
fn instance_of(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let has_port = match authority.rfind(']') {
        Some(i) => authority[i..].contains(':'),
        None => authority.contains(':'),
    };
    if has_port {
        authority.to_string()
    } else {
        let port = if scheme.eq_ignore_ascii_case("https") {
            443
        } else {
            80
        };
        format!("{authority}:{port}")
    }
}

/// Maps a [`crate::engine_metrics::ScrapeSample`] value key back to a metric name.
struct KeyNames<'a> {
    series: &'a MetricsSeries,
}

impl<'a> KeyNames<'a> {
    fn new(series: &'a MetricsSeries) -> Self {
        KeyNames { series }
    }

    /// `(name, extra label)` of value `key` scraped from `target`; `None` for a key that
    /// is no concept's, or when no engine is known for the target.
    fn metric(&self, target: usize, key: &str) -> Option<(String, Option<(String, String)>)> {
        let (concept, suffix) = concept_of_key(key)?;
        let profile = self.series.profile.as_ref();
        let engine: EngineKind = self
            .series
            .target_engines
            .get(target)
            .copied()
            .flatten()
            .or(profile.map(|p| p.engine))?;
        let resolved = match profile {
            Some(p) if p.engine == engine => p.names.get(&concept).cloned(),
            _ => None,
        };
        let full = match resolved {
            Some(n) => n,
            None => engine.profile().candidates(concept).first()?.to_string(),
        };
        let (base, label) = split_selector(&full);
        Some((format!("{base}{suffix}"), label))
    }
}

/// The concept a value key belongs to, and the suffix its metric name takes (`_sum`,
/// `_count` for histograms, empty otherwise).
fn concept_of_key(key: &str) -> Option<(Concept, &'static str)> {
    Concept::ALL.into_iter().find_map(|c| match c.kind() {
        MetricKind::Histogram => ["_sum", "_count"]
            .into_iter()
            .find_map(|suffix| (key.strip_suffix(suffix) == Some(c.key())).then_some((c, suffix))),
        _ => (key == c.key()).then_some((c, "")),
    })
}

/// `name{k="v"}` (how a profile writes a label-restricted metric) → `(name, (k, v))`.
fn split_selector(s: &str) -> (&str, Option<(String, String)>) {
    let Some((name, rest)) = s.split_once('{') else {
        return (s, None);
    };
    let label = rest
        .strip_suffix('}')
        .and_then(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()));
    (name, label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_metrics::ScrapeSample;
    use crate::engine_metrics::profile::profile_with;

    #[test]
    fn push_keeps_points_ascending_and_replaces_equal_times() {
        let mut s = SampleStore::default();
        s.push("m", &[("a", "1")], 2.0, 20.0);
        s.push("m", &[("a", "1")], 1.0, 10.0);
        s.push("m", &[("a", "1")], 3.0, 30.0);
        s.push("m", &[("a", "1")], 2.0, 21.0);
        s.push("m", &[("a", "2")], 1.0, 1.0);
        assert_eq!(s.series().len(), 2);
        let m = s.get("m", &[("a", "1")]).map(|x| x.points.clone());
        assert_eq!(m, Some(vec![(1.0, 10.0), (2.0, 21.0), (3.0, 30.0)]));
        assert!(is_stale_marker(stale_marker()));
        assert!(!is_stale_marker(f64::NAN));
    }

    #[test]
    fn instances_are_host_and_port() {
        assert_eq!(instance_of("http://10.0.0.5:8000"), "10.0.0.5:8000");
        assert_eq!(instance_of("http://10.0.0.5:8000/metrics"), "10.0.0.5:8000");
        assert_eq!(instance_of("https://engine.svc"), "engine.svc:443");
        assert_eq!(instance_of("http://[::1]"), "[::1]:80");
        assert_eq!(instance_of("http://[::1]:9000/x"), "[::1]:9000");
        assert_eq!(instance_of("engine:8000"), "engine:8000");
    }

    #[test]
    fn keys_map_to_concepts_and_selectors_split() {
        assert_eq!(concept_of_key("ttft_sum"), Some((Concept::Ttft, "_sum")));
        assert_eq!(
            concept_of_key("queue_time_count"),
            Some((Concept::QueueTime, "_count"))
        );
        assert_eq!(concept_of_key("kv_usage"), Some((Concept::KvUsage, "")));
        assert_eq!(concept_of_key("ttft"), None);
        assert_eq!(concept_of_key("nonsense"), None);
        assert_eq!(
            split_selector("nv_trt_llm_request_metrics{request_type=\"waiting\"}"),
            (
                "nv_trt_llm_request_metrics",
                Some(("request_type".into(), "waiting".into()))
            )
        );
    }

    fn scrape(t: f64, target: usize, ok: bool, values: &[(&str, f64)]) -> ScrapeSample {
        ScrapeSample {
            round: t as u64,
            t_s: t,
            target,
            ok,
            error: (!ok).then(|| "connection refused".to_string()),
            values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            skipped_lines: 0,
        }
    }

    #[test]
    fn metrics_series_become_named_series_with_up_and_staleness() {
        let mut m = MetricsSeries::new(
            vec!["http://a:8000".into(), "http://b:8000/metrics".into()],
            1.0,
        );
        // An old vLLM: KV usage under its alias.
        let mut profile = profile_with(EngineKind::Vllm, |p, c| p.candidates(c).first());
        profile
            .names
            .insert(Concept::KvUsage, "vllm:gpu_cache_usage_perc".into());
        m.profile = Some(profile);
        m.target_engines = vec![Some(EngineKind::Vllm), Some(EngineKind::Sglang)];
        m.samples = vec![
            scrape(0.0, 0, true, &[("queue_waiting", 3.0), ("kv_usage", 0.5)]),
            scrape(0.0, 1, true, &[("queue_waiting", 4.0), ("ttft_sum", 1.5)]),
            scrape(1.0, 0, true, &[("queue_waiting", 5.0)]),
            scrape(1.0, 1, false, &[]),
        ];
        let s = SampleStore::from_metrics_series(&m);
        let a = [("instance", "a:8000"), ("replica", "0")];
        let b = [("instance", "b:8000"), ("replica", "1")];
        let points = |name: &str, l: &[(&str, &str)]| {
            s.get(name, l)
                .map(|x| x.points.clone())
                .unwrap_or_else(|| panic!("no {name}{l:?}"))
        };
        assert_eq!(points("up", &a), vec![(0.0, 1.0), (1.0, 1.0)]);
        assert_eq!(points("up", &b), vec![(0.0, 1.0), (1.0, 0.0)]);
        assert_eq!(
            points("vllm:num_requests_waiting", &a),
            vec![(0.0, 3.0), (1.0, 5.0)]
        );
        // Gone from the second page: stale there.
        let kv = points("vllm:gpu_cache_usage_perc", &a);
        assert_eq!(kv[0], (0.0, 0.5));
        assert!(is_stale_marker(kv[1].1));
        // Target 1 runs SGLang: its own names; its failed scrape ends its series.
        let q = points("sglang:num_queue_reqs", &b);
        assert_eq!(q[0], (0.0, 4.0));
        assert!(is_stale_marker(q[1].1));
        assert_eq!(
            points("sglang:time_to_first_token_seconds_sum", &b)[0],
            (0.0, 1.5)
        );
        assert!(s.get("vllm:num_requests_waiting", &b).is_none());
    }
}
