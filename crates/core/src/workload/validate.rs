//! Validation of a workload manifest: every finding names the field path it is about.

use std::fmt;

use super::manifest::WorkloadManifest;
use super::schedule::MAX_SCHEDULED_REQUESTS;
use super::stratified_counts;
use crate::analysis::QueueTrend;

/// How much a finding matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The manifest can still be used, but the result may not mean what the user expects.
    Warning,
    /// The manifest must not be used.
    Error,
}

/// One problem found in a manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// How much it matters.
    pub severity: Severity,
    /// Dotted field path, e.g. `workload[1].mix`.
    pub path: String,
    /// What is wrong, in words a user can act on.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        write!(f, "{level}: {}: {}", self.path, self.message)
    }
}

/// Mixes must sum to 1 within this tolerance.
pub const MIX_SUM_TOLERANCE: f64 = 1e-9;

/// Checks a manifest and returns every finding, errors and warnings, in field order.
pub fn validate(m: &WorkloadManifest) -> Vec<Finding> {
    let mut out = Findings::default();

    out.immutable("model.revision", &m.model.revision);
    out.immutable("model.tokenizer_revision", &m.model.tokenizer_revision);
    out.immutable("engine.version", &m.engine.version);
    out.non_empty("model.id", &m.model.id);
    out.non_empty("model.precision", &m.model.precision);
    out.non_empty("engine.name", &m.engine.name);

    let p = &m.engine.placement;
    for (field, value) in [
        ("tp", p.tp),
        ("pp", p.pp),
        ("dp", p.dp),
        ("replicas", p.replicas),
        ("gpus", p.gpus),
    ] {
        if value == 0 {
            out.error(format!("engine.placement.{field}"), "must be at least 1");
        }
    }
    if p.replicas > 0 && p.gpus > 0 && p.gpus_per_replica().is_none() {
        out.error(
            "engine.placement.gpus",
            format!(
                "{} GPUs do not divide evenly among {} replicas",
                p.gpus, p.replicas
            ),
        );
    }

    let c = &m.client;
    out.positive(
        "client.minimum_duration_seconds",
        c.minimum_duration_seconds,
    );
    if !(c.warmup_seconds.is_finite() && c.warmup_seconds >= 0.0) {
        out.error("client.warmup_seconds", "must be zero or more");
    } else if c.warmup_seconds == 0.0 {
        out.warning(
            "client.warmup_seconds",
            "no warmup: compilation and cache fill land in the measurement window",
        );
    }
    if c.initial_scheduled_requests == 0 {
        out.error("client.initial_scheduled_requests", "must be at least 1");
    } else if c.initial_scheduled_requests > MAX_SCHEDULED_REQUESTS {
        out.error(
            "client.initial_scheduled_requests",
            format!(
                "{} is over the limit of {MAX_SCHEDULED_REQUESTS} requests per schedule block \
                 (a point's schedule is held in memory; a longer run continues in blocks)",
                c.initial_scheduled_requests
            ),
        );
    }
    if let Some(shape) = c.burstiness
        && !(shape.is_finite() && shape > 0.0)
    {
        out.error("client.burstiness", "must be a positive gamma shape");
    }
    if c.arrival_pattern == super::ArrivalPattern::Gamma && c.burstiness.is_none() {
        out.error(
            "client.burstiness",
            "the gamma arrival pattern needs a burstiness shape (1 = Poisson)",
        );
    }

    validate_classes(m, &mut out);

    let a = &m.acceptance;
    if !(a.class_slo_attainment_min > 0.0 && a.class_slo_attainment_min <= 1.0) {
        out.error(
            "acceptance.class_slo_attainment_min",
            format!("{} is outside (0, 1]", a.class_slo_attainment_min),
        );
    }
    if a.min_successful_samples_per_class == 0 {
        out.error(
            "acceptance.min_successful_samples_per_class",
            "must be at least 1",
        );
    }
    if !(a.error_rate_max >= 0.0 && a.error_rate_max <= 1.0) {
        out.error(
            "acceptance.error_rate_max",
            format!("{} is outside [0, 1]", a.error_rate_max),
        );
    }
    if a.queue_trend_required != QueueTrend::Flat {
        out.error(
            "acceptance.queue_trend_required",
            "must be `flat`: a growing queue is never a sustainable operating point",
        );
    }
    if !(a.target_utilization > 0.0 && a.target_utilization <= 1.0) {
        out.error(
            "acceptance.target_utilization",
            format!("{} is outside (0, 1]", a.target_utilization),
        );
    }

    if let Some(cancel) = &m.cancellation {
        out.positive(
            "cancellation.request_timeout_seconds",
            cancel.request_timeout_seconds,
        );
    }
    out.0
}

fn validate_classes(m: &WorkloadManifest, out: &mut Findings) {
    if m.workload.is_empty() {
        out.error("workload", "declare at least one workload class");
        return;
    }
    let mut mix_ok = true;
    for (i, class) in m.workload.iter().enumerate() {
        let at = |field: &str| format!("workload[{i}].{field}");
        if class.name.trim().is_empty() {
            out.error(at("name"), "must not be empty");
        }
        if m.workload[..i].iter().any(|c| c.name == class.name) {
            out.error(
                at("name"),
                format!("class `{}` is declared twice", class.name),
            );
        }
        if !(class.mix > 0.0 && class.mix <= 1.0) {
            out.error(at("mix"), format!("{} is outside (0, 1]", class.mix));
            mix_ok = false;
        }
        if class.input_tokens == 0 {
            out.error(at("input_tokens"), "must be at least 1");
        }
        if class.output_tokens == 0 {
            out.error(at("output_tokens"), "must be at least 1");
        }
        out.positive(&at("request_ttft_cutoff_ms"), class.request_ttft_cutoff_ms);
        out.positive(&at("request_tpot_cutoff_ms"), class.request_tpot_cutoff_ms);
    }
    let sum: f64 = m.workload.iter().map(|c| c.mix).sum();
    if mix_ok && (sum - 1.0).abs() > MIX_SUM_TOLERANCE {
        out.error("workload", format!("class mixes sum to {sum}, not 1"));
        mix_ok = false;
    }

    let counts = &m.client.class_schedule_counts;
    for name in counts.keys() {
        if !m.workload.iter().any(|c| &c.name == name) {
            out.error(
                format!("client.class_schedule_counts.{name}"),
                "no workload class has this name",
            );
        }
    }
    // Summed wide: counts near u64::MAX must not overflow the sum.
    let total: u128 = counts.values().map(|&c| u128::from(c)).sum();
    let total_matches = total == u128::from(m.client.initial_scheduled_requests);
    if !total_matches {
        out.error(
            "client.class_schedule_counts",
            format!(
                "counts sum to {total}, but client.initial_scheduled_requests is {}",
                m.client.initial_scheduled_requests
            ),
        );
    }
    let expected = mix_ok.then(|| {
        let mixes: Vec<f64> = m.workload.iter().map(|c| c.mix).collect();
        stratified_counts(&mixes, m.client.initial_scheduled_requests)
    });
    let min = m.acceptance.min_successful_samples_per_class;
    for (i, class) in m.workload.iter().enumerate() {
        let path = format!("client.class_schedule_counts.{}", class.name);
        let Some(&count) = counts.get(&class.name) else {
            out.error(path, "missing: every class needs an exact scheduled count");
            continue;
        };
        if let Some(expected) = &expected
            && total_matches
            && count != expected[i]
        {
            out.error(
                path.clone(),
                format!(
                    "{count} does not match mix {} of {} requests (expected {})",
                    class.mix, m.client.initial_scheduled_requests, expected[i]
                ),
            );
        }
        if count < min {
            out.warning(
                path,
                format!(
                    "{count} scheduled requests cannot give {min} successes; the schedule \
                     must be continued before any capacity decision"
                ),
            );
        }
    }
}

/// Collects findings; the helpers keep each rule to one line (the manifest's rules above,
/// the custom resources' lint in `goodput-api`).
#[derive(Default)]
pub struct Findings(pub Vec<Finding>);

impl Findings {
    /// A finding of `severity` at `path`.
    pub fn push(
        &mut self,
        severity: Severity,
        path: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.0.push(Finding {
            severity,
            path: path.into(),
            message: message.into(),
        });
    }

    /// An error at `path`.
    pub fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.push(Severity::Error, path, message);
    }

    /// A warning at `path`.
    pub fn warning(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.push(Severity::Warning, path, message);
    }

    /// An error unless `value` has more than white space.
    pub fn non_empty(&mut self, path: &str, value: &str) {
        if value.trim().is_empty() {
            self.error(path, "must not be empty");
        }
    }

    /// Revisions and versions must name one immutable thing, so results can be reproduced.
    pub fn immutable(&mut self, path: &str, value: &str) {
        let v = value.trim().to_ascii_lowercase();
        if v.is_empty() {
            self.error(path, "must not be empty: pin an immutable revision");
        } else if matches!(v.as_str(), "latest" | "main" | "master" | "head" | "stable") {
            self.error(
                path,
                format!("`{value}` is a mutable reference: pin an immutable revision"),
            );
        }
    }

    /// An error unless `value` is a finite number above zero.
    pub fn positive(&mut self, path: &str, value: f64) {
        if !(value.is_finite() && value > 0.0) {
            self.error(path, format!("{value} must be a positive number"));
        }
    }
}
