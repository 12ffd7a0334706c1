//! Mergeable per-point accumulation: record requests one at a time (or per shard), merge
//! shards, then finish into a [`PointReport`].

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use super::formulas::{
    PERCENTILE_ALGORITHM, attainment, error_rate, meets_slo, nearest_rank_many, tpot_ms,
    wilson_lower_95,
};
use super::gate::{GateConfig, QueueTrend, verdict};
use super::report::{ClassReport, GateThresholds, ItlReport, PointReport, gate_reasons};

/// Why a summary could not be finished or merged.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AnalysisError {
    /// The window length is not a positive number of seconds.
    #[error("duration must be a positive number of seconds, got {0}")]
    Duration(f64),
    /// Two summaries judged by different gates cannot be merged.
    #[error("cannot merge summaries analysed with different classes or thresholds")]
    GateMismatch,
}

/// One successful request, as the analyzer sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Success<'a> {
    /// Time to first token.
    pub ttft_ms: f64,
    /// Time per output token.
    pub tpot_ms: f64,
    /// End-to-end latency.
    pub e2e_ms: f64,
    /// Output tokens generated.
    pub output_tokens: u64,
    /// Gaps between consecutive token arrivals, when known.
    pub itl_ms: &'a [f64],
}

/// Results of one class so far.
#[derive(Clone, Debug, Default)]
struct ClassSummary {
    attempted: u64,
    passing: u64,
    output_tokens: u64,
    ttft_ms: Vec<f64>,
    tpot_ms: Vec<f64>,
    e2e_ms: Vec<f64>,
    /// Gaps in microseconds; a histogram because a point can hold hundreds of millions.
    itl_us: Option<Histogram<u64>>,
}

/// Everything needed to report one point, mergeable across shards: merging the summaries
/// of two halves of a point gives the same report as summarising the whole.
#[derive(Clone, Debug)]
pub struct PointSummary {
    config: GateConfig,
    classes: Vec<ClassSummary>,
    failed_by_status: BTreeMap<String, u64>,
    tpot_inconsistent_rows: u64,
}

/// Percentiles reported for every class.
const PS: [f64; 3] = [0.50, 0.95, 0.99];
/// ITL histogram precision (significant decimal digits).
const ITL_SIGFIG: u8 = 3;

impl PointSummary {
    /// An empty summary judged by `config`.
    pub fn new(config: GateConfig) -> Self {
        PointSummary {
            classes: vec![ClassSummary::default(); config.classes.len()],
            config,
            failed_by_status: BTreeMap::new(),
            tpot_inconsistent_rows: 0,
        }
    }

    /// The gate this summary is judged by.
    pub fn config(&self) -> &GateConfig {
        &self.config
    }

    /// Index of the class called `name`.
    pub fn class_index(&self, name: &[u8]) -> Option<usize> {
        self.config
            .classes
            .iter()
            .position(|c| c.name.as_bytes() == name)
    }

    /// Records a request of class `class` that failed with `status`.
    pub fn record_failure(&mut self, class: usize, status: &str) {
        self.classes[class].attempted += 1;
        match self.failed_by_status.get_mut(status) {
            Some(n) => *n += 1,
            None => {
                self.failed_by_status.insert(status.to_owned(), 1);
            }
        }
    }

    /// Records a successful request of class `class`.
    pub fn record_success(&mut self, class: usize, r: &Success<'_>) {
        let slo = &self.config.classes[class];
        let passes = meets_slo(r.ttft_ms, r.tpot_ms, slo.ttft_cutoff_ms, slo.tpot_cutoff_ms);
        if let Some(derived) = tpot_ms(r.ttft_ms, r.e2e_ms, r.output_tokens)
            && (derived - r.tpot_ms).abs() > 0.01 * derived.abs() + 0.05
        {
            self.tpot_inconsistent_rows += 1;
        }
        let c = &mut self.classes[class];
        c.attempted += 1;
        c.passing += u64::from(passes);
        c.output_tokens += r.output_tokens;
        c.ttft_ms.push(r.ttft_ms);
        c.tpot_ms.push(r.tpot_ms);
        c.e2e_ms.push(r.e2e_ms);
        if !r.itl_ms.is_empty() {
            let hist = c.itl_us.get_or_insert_with(new_itl_histogram);
            for gap in r.itl_ms {
                let us = (gap * 1000.0).round().max(0.0) as u64;
                // `record` grows the histogram; only a value past u64 range saturates.
                if hist.record(us).is_err() {
                    hist.saturating_record(us);
                }
            }
        }
    }

    /// Adds another shard's requests to this summary.
    pub fn merge(&mut self, other: PointSummary) -> Result<(), AnalysisError> {
        if self.config != other.config {
            return Err(AnalysisError::GateMismatch);
        }
        for (mine, theirs) in self.classes.iter_mut().zip(other.classes) {
            mine.attempted += theirs.attempted;
            mine.passing += theirs.passing;
            mine.output_tokens += theirs.output_tokens;
            mine.ttft_ms.extend(theirs.ttft_ms);
            mine.tpot_ms.extend(theirs.tpot_ms);
            mine.e2e_ms.extend(theirs.e2e_ms);
            if let Some(theirs) = theirs.itl_us {
                let hist = mine.itl_us.get_or_insert_with(new_itl_histogram);
                // Both histograms auto-resize, so adding cannot go out of range.
                hist.add(&theirs)
                    .expect("auto-resizing histograms accept any value");
            }
        }
        for (status, n) in other.failed_by_status {
            *self.failed_by_status.entry(status).or_default() += n;
        }
        self.tpot_inconsistent_rows += other.tpot_inconsistent_rows;
        Ok(())
    }

    /// The point report for a window of `duration_s` seconds with the given queue trend.
    pub fn finish(
        self,
        duration_s: f64,
        queue_trend: QueueTrend,
    ) -> Result<PointReport, AnalysisError> {
        if !(duration_s.is_finite() && duration_s > 0.0) {
            return Err(AnalysisError::Duration(duration_s));
        }
        let cfg = self.config;
        let mut classes = BTreeMap::new();
        let (mut attempted, mut successful, mut passing, mut tokens) = (0, 0, 0, 0);
        for (slo, mut c) in cfg.classes.iter().zip(self.classes) {
            let n = c.ttft_ms.len() as u64;
            attempted += c.attempted;
            successful += n;
            passing += c.passing;
            tokens += c.output_tokens;
            let att = attainment(c.passing, n);
            let sample_adequate = n >= cfg.min_successes_per_class;
            let p99_ok = n >= cfg.p99_min_successes;
            let ttft = nearest_rank_many(&mut c.ttft_ms, &PS);
            let tpot = nearest_rank_many(&mut c.tpot_ms, &PS);
            let e2e = nearest_rank_many(&mut c.e2e_ms, &PS);
            let p99 = |v: Option<f64>| if p99_ok { v } else { None };
            classes.insert(
                slo.name.clone(),
                ClassReport {
                    successful_count: n,
                    passing_count: c.passing,
                    request_ttft_cutoff_ms: slo.ttft_cutoff_ms,
                    request_tpot_cutoff_ms: slo.tpot_cutoff_ms,
                    attainment: att,
                    sample_adequate,
                    p99_sample_adequate: p99_ok,
                    class_slo_pass: sample_adequate && att.is_some_and(|a| a >= cfg.attainment_min),
                    p50_ttft_ms: ttft[0],
                    p95_ttft_ms: ttft[1],
                    p99_ttft_ms: p99(ttft[2]),
                    p50_tpot_ms: tpot[0],
                    p95_tpot_ms: tpot[1],
                    p99_tpot_ms: p99(tpot[2]),
                    p95_e2e_ms: e2e[1],
                    output_tokens: c.output_tokens,
                    attempted_count: Some(c.attempted),
                    failed_count: Some(c.attempted - n),
                    attainment_wilson_lower_95: wilson_lower_95(c.passing, n),
                    p50_e2e_ms: e2e[0],
                    itl: c.itl_us.as_ref().map(itl_report),
                },
            );
        }
        let failed = attempted - successful;
        let error_rate = error_rate(failed, attempted);
        let all_class_slos_pass = classes.values().all(|c| c.class_slo_pass);
        let mut report = PointReport {
            attempted,
            successful,
            failed,
            error_rate,
            overall_attainment: attainment(passing, successful),
            observed_goodput_rps: passing as f64 / duration_s,
            request_throughput_rps: successful as f64 / duration_s,
            output_throughput_tps: tokens as f64 / duration_s,
            queue_trend,
            all_class_slos_pass,
            capacity_gate_pass: all_class_slos_pass
                && error_rate.is_some_and(|e| e <= cfg.error_rate_max)
                && queue_trend == cfg.queue_trend_required,
            classes,
            verdict: None,
            gate_reasons: Vec::new(),
            gate: Some(GateThresholds::from(&cfg)),
            duration_s: Some(duration_s),
            percentile_algorithm: Some(PERCENTILE_ALGORITHM.to_owned()),
            failed_by_status: self.failed_by_status,
            tpot_inconsistent_rows: self.tpot_inconsistent_rows,
        };
        report.gate_reasons = gate_reasons(&report, &cfg);
        report.verdict = Some(verdict(&report.gate_reasons));
        Ok(report)
    }
}

fn new_itl_histogram() -> Histogram<u64> {
    // 3 significant digits is a valid precision, so construction cannot fail.
    Histogram::new(ITL_SIGFIG).expect("3 significant digits is in range")
}

fn itl_report(h: &Histogram<u64>) -> ItlReport {
    let ms = |us: u64| us as f64 / 1000.0;
    ItlReport {
        gaps: h.len(),
        p50_ms: ms(h.value_at_quantile(PS[0])),
        p95_ms: ms(h.value_at_quantile(PS[1])),
        p99_ms: ms(h.value_at_quantile(PS[2])),
        max_ms: ms(h.max()),
        algorithm: format!("hdr-histogram ({ITL_SIGFIG} significant digits, microseconds)"),
    }
}
