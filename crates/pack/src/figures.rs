//! How figures are written in the pack: rates, percentages, milliseconds, and `-` for a
//! missing value.

use crate::analysis::GateRule;
use crate::workload::CacheMode;

/// Shown for a missing or non-finite value.
pub(crate) const MISSING: &str = "-";

/// A rate (RPS) with at most two decimals and no trailing zeros: `12`, `12.5`, `0.33`.
pub(crate) fn rate(x: f64) -> String {
    if !x.is_finite() {
        return MISSING.into();
    }
    crate::analysis::decimal(x, 2)
}

/// An optional rate.
pub(crate) fn opt_rate(x: Option<f64>) -> String {
    x.map_or_else(|| MISSING.into(), rate)
}

/// A fraction as a percentage with one decimal: `0.951` → `95.1%`.
pub(crate) fn pct(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{:.1}%", v * 100.0),
        _ => MISSING.into(),
    }
}

/// A latency in milliseconds with one decimal.
pub(crate) fn ms(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.1}"),
        _ => MISSING.into(),
    }
}

/// A throughput in tokens per second, whole.
pub(crate) fn tokens_per_s(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.0}")
    } else {
        MISSING.into()
    }
}

/// The cache mode as it is written in the spec.
pub(crate) fn mode_name(mode: CacheMode) -> &'static str {
    match mode {
        CacheMode::Cold => "cold",
        CacheMode::Warm => "warm",
    }
}

/// A gate rule in one word, for compact listings.
pub(crate) fn rule_word(rule: GateRule) -> &'static str {
    match rule {
        GateRule::SampleSize => "samples",
        GateRule::Attainment => "attainment",
        GateRule::ErrorRate => "errors",
        GateRule::QueueTrend => "queue",
    }
}
