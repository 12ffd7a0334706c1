//! The alert rules goodput ships (`charts/goodput/files/alerts.yaml`) and an evaluator
//! that runs them on recorded series, without a Prometheus.
//!
//! - [`shipped_rules`] / [`parse_rules`]: a Prometheus rule file → [`Rule`]s.
//! - [`SampleStore`]: the series to evaluate on, built by hand, from the engine metrics of
//!   a test point ([`SampleStore::from_metrics_series`]) or from the load generator's
//!   per-request records ([`SampleStore::add_client_records`]).
//! - [`evaluate`]: every rule at every step of a window, through Prometheus' pending →
//!   firing → resolved state machine, as [`AlertEvent`]s: which alerts a failure test
//!   would have raised, and when.
//!
//! The PromQL evaluator covers the subset the rules and the dashboard use (see
//! [`mod@eval`]); anything else is refused with [`AlertError::Unsupported`] rather than
//! evaluated wrongly.

pub mod eval;
pub mod store;

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use crate::analysis::GateConfig;
use crate::engine_metrics::MetricsSeries;
use crate::failure::FiredAlert;
use crate::record::RequestRecord;

pub use eval::{InstantSample, LOOKBACK_S, eval_instant, metric_names, parse};
pub use store::{
    CLIENT_ATTAINMENT_TARGET, CLIENT_METRICS, CLIENT_REQUESTS_TOTAL, CLIENT_SCHEDULE_LAG,
    CLIENT_SLO_MET_TOTAL, SampleStore, Series, is_stale_marker, stale_marker,
};

/// The rule file the chart ships, as Prometheus loads it.
pub const SHIPPED_RULES_YAML: &str = include_str!("../../../../charts/goodput/files/alerts.yaml");

/// Why rules could not be read or evaluated.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AlertError {
    /// An expression that is not PromQL.
    #[error("PromQL `{expr}` does not parse: {message}")]
    Parse {
        /// The expression.
        expr: String,
        /// The parser's message.
        message: String,
    },
    /// PromQL the evaluator does not implement.
    #[error("unsupported PromQL: {0} (the evaluator covers what the shipped rules use)")]
    Unsupported(String),
    /// An evaluation error Prometheus would also raise (duplicate series, ...).
    #[error("PromQL evaluation: {0}")]
    Eval(String),
    /// The rule file's structure or a duration in it.
    #[error("rule file: {0}")]
    RuleFile(String),
    /// A bad evaluation window.
    #[error("evaluation window: {0}")]
    Window(String),
    /// An error in one rule.
    #[error("alert {alert}: {source}")]
    InRule {
        /// The alert's name.
        alert: String,
        /// What went wrong.
        #[source]
        source: Box<AlertError>,
    },
}

/// One alerting rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// The alert's name (`alertname`).
    pub alert: String,
    /// The PromQL expression.
    pub expr: String,
    /// Seconds the expression must hold before the alert fires (`for`; 0 when absent).
    pub for_s: f64,
    /// Labels added to every alert (`severity`, ...).
    pub labels: BTreeMap<String, String>,
    /// Annotations (`summary`, `description`, `runbook_url`), templates unexpanded.
    pub annotations: BTreeMap<String, String>,
}

/// One episode of one alert instance (an alert name and a label set): from the first
/// evaluation that returned it to the first that did not.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertEvent {
    /// The alert's name.
    pub alert: String,
    /// The instance's labels: the expression's result labels (without `__name__`) plus
    /// the rule's labels, which win on a clash.
    pub labels: BTreeMap<String, String>,
    /// The first evaluation that returned the instance.
    pub pending_at_s: f64,
    /// The first evaluation at least `for` after `pending_at_s` (with `for: 0`,
    /// `pending_at_s` itself); `None` when it never got there.
    pub firing_at_s: Option<f64>,
    /// The first evaluation that no longer returned it (for an episode that never fired:
    /// when it was dropped while pending); `None` while still active at the window's end.
    pub resolved_at_s: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    groups: Vec<RuleGroup>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleGroup {
    name: String,
    #[serde(default)]
    rules: Vec<RawRule>,
    // Accepted and not used: the evaluation step is `evaluate`'s argument.
    #[serde(default)]
    #[allow(dead_code)]
    interval: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(default)]
    alert: Option<String>,
    #[serde(default)]
    record: Option<String>,
    expr: String,
    #[serde(default, rename = "for")]
    for_: Option<String>,
    #[serde(default)]
    keep_firing_for: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// Seconds of a Prometheus duration (`30s`, `1m`, `1h30m`).
fn duration_s(s: &str) -> Result<f64, AlertError> {
    promql_parser::util::parse_duration(s.trim())
        .map(|d| d.as_secs_f64())
        .map_err(|e| AlertError::RuleFile(format!("duration `{s}`: {e}")))
}

/// The alerting rules of a Prometheus rule file, in file order. Recording rules and
/// `keep_firing_for` are refused ([`AlertError::Unsupported`]); unknown keys are refused,
/// as Prometheus refuses them; every expression must parse.
pub fn parse_rules(yaml: &str) -> Result<Vec<Rule>, AlertError> {
    let file: RuleFile =
        serde_saphyr::from_str(yaml).map_err(|e| AlertError::RuleFile(e.to_string()))?;
    let mut rules = Vec::new();
    for group in file.groups {
        for raw in group.rules {
            let alert = match (raw.alert, raw.record) {
                (Some(a), None) => a,
                (None, Some(r)) => {
                    return Err(AlertError::Unsupported(format!(
                        "recording rule `{r}` in group `{}`",
                        group.name
                    )));
                }
                _ => {
                    return Err(AlertError::RuleFile(format!(
                        "a rule in group `{}` needs exactly one of `alert` and `record`",
                        group.name
                    )));
                }
            };
            let in_rule = |e: AlertError| AlertError::InRule {
                alert: alert.clone(),
                source: Box::new(e),
            };
            if raw.keep_firing_for.is_some() {
                return Err(in_rule(AlertError::Unsupported("`keep_firing_for`".into())));
            }
            parse(&raw.expr).map_err(in_rule)?;
            let for_s = match &raw.for_ {
                Some(d) => duration_s(d).map_err(in_rule)?,
                None => 0.0,
            };
            rules.push(Rule {
                alert,
                expr: raw.expr,
                for_s,
                labels: raw.labels,
                annotations: raw.annotations,
            });
        }
    }
    Ok(rules)
}

/// The rules of `charts/goodput/files/alerts.yaml`, compiled in.
pub fn shipped_rules() -> Result<Vec<Rule>, AlertError> {
    parse_rules(SHIPPED_RULES_YAML)
}

/// Evaluates every rule at `from_s`, `from_s + step_s`, ... up to `to_s` (as Prometheus'
/// rule manager would at that interval) and returns each alert instance's episodes: in
/// rule order, then by the time they began. An error names the rule it came from.
pub fn evaluate(
    rules: &[Rule],
    store: &SampleStore,
    from_s: f64,
    to_s: f64,
    step_s: f64,
) -> Result<Vec<AlertEvent>, AlertError> {
    if !(step_s > 0.0 && step_s.is_finite()) {
        return Err(AlertError::Window(format!(
            "step must be a positive number of seconds, got {step_s}"
        )));
    }
    if !(from_s.is_finite() && to_s.is_finite() && from_s <= to_s) {
        return Err(AlertError::Window(format!(
            "need a finite window with from <= to, got {from_s}..{to_s}"
        )));
    }
    // Times as from + k × step, so that no rounding error accumulates over a long window.
    let steps = ((to_s - from_s) / step_s + 1e-9).floor() as u64;
    let mut events = Vec::new();
    for rule in rules {
        let in_rule = |e: AlertError| AlertError::InRule {
            alert: rule.alert.clone(),
            source: Box::new(e),
        };
        let expr = parse(&rule.expr).map_err(in_rule)?;
        let first = events.len();
        // Active instances → their episode's index in `events`.
        let mut active: BTreeMap<BTreeMap<String, String>, usize> = BTreeMap::new();
        for k in 0..=steps {
            let t = from_s + k as f64 * step_s;
            let mut now: BTreeSet<BTreeMap<String, String>> = BTreeSet::new();
            for sample in eval_instant(&expr, store, t).map_err(in_rule)? {
                let mut labels = sample.labels;
                labels.remove("__name__");
                labels.extend(rule.labels.clone());
                if !now.insert(labels.clone()) {
                    return Err(in_rule(AlertError::Eval(format!(
                        "two results with labels {labels:?} once the rule's labels are added"
                    ))));
                }
                match active.get(&labels) {
                    Some(&i) => {
                        let e: &mut AlertEvent = &mut events[i];
                        // 1 µs of slack: `for` is met at the evaluation `for` later.
                        if e.firing_at_s.is_none() && t - e.pending_at_s >= rule.for_s - 1e-6 {
                            e.firing_at_s = Some(t);
                        }
                    }
                    None => {
                        active.insert(labels.clone(), events.len());
                        events.push(AlertEvent {
                            alert: rule.alert.clone(),
                            labels,
                            pending_at_s: t,
                            firing_at_s: (rule.for_s <= 0.0).then_some(t),
                            resolved_at_s: None,
                        });
                    }
                }
            }
            active.retain(|labels, &mut i| {
                let still = now.contains(labels);
                if !still {
                    events[i].resolved_at_s = Some(t);
                }
                still
            });
        }
        events[first..].sort_by(|a: &AlertEvent, b: &AlertEvent| {
            a.pending_at_s
                .total_cmp(&b.pending_at_s)
                .then_with(|| a.labels.cmp(&b.labels))
        });
    }
    Ok(events)
}

/// The shipped alert rules (`charts/goodput/files/alerts.yaml`) evaluated over the run:
/// the engines' scraped series (with `up` from every scrape) and the load generator's
/// client series derived from the records, at the scrape interval.
pub fn fired(
    series: Option<&MetricsSeries>,
    records: &[RequestRecord],
    end_s: f64,
    gate: &GateConfig,
) -> Result<Vec<FiredAlert>, String> {
    let rules = shipped_rules().map_err(|e| e.to_string())?;
    let mut store = series.map_or_else(SampleStore::default, SampleStore::from_metrics_series);
    let step = series.map_or(1.0, |s| s.interval_s).max(0.1);
    let names: Vec<String> = gate.classes.iter().map(|c| c.name.clone()).collect();
    let cutoffs: Vec<(f64, f64)> = gate
        .classes
        .iter()
        .map(|c| (c.ttft_cutoff_ms, c.tpot_cutoff_ms))
        .collect();
    store.add_client_records(records, &names, &cutoffs, gate.attainment_min, step, end_s);
    let events = evaluate(&rules, &store, 0.0, end_s, step).map_err(|e| e.to_string())?;
    Ok(events
        .into_iter()
        .map(|e| FiredAlert {
            alert: e.alert,
            labels: e
                .labels
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "alertname" | "severity"))
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
            pending_at_s: e.pending_at_s,
            firing_at_s: e.firing_at_s,
            resolved_at_s: e.resolved_at_s,
        })
        .collect())
}

#[cfg(test)]
mod tests;
