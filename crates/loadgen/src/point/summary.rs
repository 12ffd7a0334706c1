//! A point's `summary.json` assembled from its facts: the queue trend (engine or client),
//! the engine pages it asked for, validity, and the analysis core's report.

use super::*;

/// Queue trend over the measured window: the engine's waiting queue when scraped, else the
/// client's in-flight count.
pub(super) fn queue_trend(
    in_flight: &[(f64, f64)],
    series: Option<&MetricsSeries>,
    from_s: f64,
    to_s: f64,
) -> (QueueTrend, String) {
    let inside = |v: Vec<(f64, f64)>| -> Vec<(f64, f64)> {
        v.into_iter()
            .filter(|p| p.0 >= from_s && p.0 <= to_s)
            .collect()
    };
    if let Some(s) = series {
        let q = inside(s.queue_series());
        if q.len() >= 3 {
            let waiting = queue_slope(&q, 5.0).trend;
            // An engine that admits every request into its running batch (vLLM with a KV
            // cache far larger than the load needs: 57 running at twice its capacity, none
            // waiting) keeps its waiting queue flat while the requests inside it grow.
            let engine = inside(s.in_engine_series());
            if waiting != QueueTrend::Growing
                && engine.len() >= 3
                && queue_slope(&engine, 5.0).trend == QueueTrend::Growing
            {
                return (
                    QueueTrend::Growing,
                    "requests inside the engine, running plus waiting (least-squares slope; \
                     the waiting queue alone stayed flat)"
                        .into(),
                );
            }
            // Requests the client sent that the engine has not taken in: a front end
            // (vLLM's API server on a starved core, its tokenizer) holds them. The queue the
            // user sees grows though the engine's own stays flat.
            if waiting != QueueTrend::Growing
                && client_trend(in_flight, from_s, to_s) == QueueTrend::Growing
            {
                return (
                    QueueTrend::Growing,
                    "client in-flight requests (least-squares slope; the engine's running plus \
                     waiting stayed flat: requests queued in front of the engine, in its HTTP \
                     server or tokenizer)"
                        .into(),
                );
            }
            return (
                waiting,
                "engine waiting-queue gauge (least-squares slope)".into(),
            );
        }
    }
    (
        client_trend(in_flight, from_s, to_s),
        "client in-flight requests (no engine metrics)".into(),
    )
}

/// Why a point whose engine pages were asked for has no engine evidence: a page that never
/// answered, or most scrapes failed. A point judged without the engine's queue, KV and
/// preemption figures it asked for is not evidence (the client's in-flight count stands in
/// for the queue only where no page was asked for).
pub(super) fn unanswered_pages(
    targets: &[String],
    series: Option<&MetricsSeries>,
) -> Option<String> {
    if targets.is_empty() {
        return None;
    }
    let Some(series) = series.filter(|s| !s.samples.is_empty()) else {
        return Some(format!(
            "the engine's /metrics pages were never scraped ({}): the point has no engine \
             evidence",
            targets.join(", ")
        ));
    };
    let failed = series.samples.iter().filter(|x| !x.ok).count();
    let last_error = series
        .samples
        .iter()
        .rev()
        .filter(|x| !x.ok)
        .find_map(|x| x.error.as_deref())
        .unwrap_or("no reason recorded");
    let silent: Vec<&str> = series
        .targets
        .iter()
        .enumerate()
        .filter(|(i, _)| !series.samples.iter().any(|x| x.target == *i && x.ok))
        .map(|(_, t)| t.as_str())
        .collect();
    if !silent.is_empty() {
        return Some(format!(
            "engine page(s) {} never answered ({last_error}): the point has no engine evidence \
             for them",
            silent.join(", ")
        ));
    }
    (failed * 2 > series.samples.len()).then(|| {
        format!(
            "{failed} of {} engine scrapes failed ({last_error}): the point's engine evidence \
             is partial",
            series.samples.len()
        )
    })
}

/// The queue-trend rule applied to the client's in-flight count over the window.
pub(super) fn client_trend(in_flight: &[(f64, f64)], from_s: f64, to_s: f64) -> QueueTrend {
    let f: Vec<(f64, f64)> = in_flight
        .iter()
        .copied()
        .filter(|p| p.0 >= from_s && p.0 <= to_s)
        .collect();
    queue_slope(&f, 5.0).trend
}

/// Everything a point's `summary.json` is assembled from besides its report: one run's
/// facts ([`MeasuredPoint::summarize`]) or those of a point's shards merged
/// (`goodput::loadgen::handoff::merge_shards`). One assembly for both, so a merged
/// point is judged by the same rules as a single run.
pub struct PointFacts<'a> {
    /// Open or closed loop, in real-time units.
    pub mode: LoadMode,
    /// Cache state.
    pub cache: CacheMode,
    /// How prompts were made.
    pub prompt_method: PromptMethod,
    /// Token-id prompts: the served vocabulary and the ids drawn.
    pub vocabulary: Option<crate::vocabulary::Vocabulary>,
    /// Chat prompts: their sizing against the server's tokenizer.
    pub chat_sizing: Option<ChatSizing>,
    /// A cold point: the engine's cache reset, or why not.
    pub cache_reset: Option<crate::cache_reset::CacheReset>,
    /// What the point waited for its engines to finish before its baseline.
    pub drain: Option<crate::drain::Drain>,
    /// Prefixes prewarmed.
    pub prewarmed: usize,
    /// Schedule facts.
    pub schedule: ScheduleFacts,
    /// Client facts over the measured requests.
    pub client: ClientFacts,
    /// Engine series on the point's timeline.
    pub series: Option<&'a MetricsSeries>,
    /// `/metrics` targets asked for.
    pub metrics_targets: Vec<String>,
    /// The lag bound (ms).
    pub max_lag_ms: f64,
    /// First and last scheduled send of the measured requests (s), if any.
    pub span: Option<(f64, f64)>,
    /// Successful measured requests and the sum of their end-to-end latencies (ms).
    pub ok: (usize, f64),
    /// Reasons found before assembly (a merge's shards), after the assembly's own.
    pub reasons: Vec<String>,
    /// Among them, a shard's client fell behind its schedule.
    pub client_behind: bool,
}

impl PointFacts<'_> {
    /// The window (s) the report's rates are taken over.
    pub fn window_s(&self) -> f64 {
        self.client.window_s.max(1e-3)
    }

    /// Queue trend over the measured span and where it came from.
    pub fn queue_trend(&self) -> (QueueTrend, String) {
        let (from, to) = self.span.unwrap_or((f64::INFINITY, 0.0));
        queue_trend(&self.client.in_flight_series, self.series, from, to)
    }

    /// `summary.json` of the point whose analysis core report is `report` (computed over
    /// [`Self::window_s`] with the trend of [`Self::queue_trend`]).
    pub fn assemble(self, report: PointReport, source: String) -> PointSummaryFile {
        let trend = report.queue_trend;
        let (from, to) = self.span.unwrap_or((f64::INFINITY, 0.0));
        let window = self.window_s();
        let client = &self.client;
        let closed = matches!(self.mode, LoadMode::Concurrency { .. });
        let mut reasons = Vec::new();
        if closed {
            reasons.push("closed loop: a saturation experiment, never a capacity".to_owned());
        }
        // A client behind its schedule only ever adds delay to what it measures (latencies
        // count from the scheduled send) and never sends more than the schedule: a point
        // that passed despite it stands, and so does a failure the lag cannot cause (the
        // queue grew although less arrived on time, or requests failed). Only a failure
        // it may explain (attainment, too few samples) is not evidence.
        let lag_explains = report.verdict != Some(goodput_core::analysis::Verdict::Pass)
            && !report.gate_reasons.iter().any(|r| {
                matches!(
                    r.rule,
                    goodput_core::analysis::GateRule::QueueTrend
                        | goodput_core::analysis::GateRule::ErrorRate
                )
            });
        let lagging = !closed && client.schedule_lag_ms.p99 > self.max_lag_ms;
        let late_start = client.start_lateness_ms > self.max_lag_ms;
        let mut notes = Vec::new();
        if lagging {
            let mut why = format!(
                "the client fell behind its schedule: lag P99 {:.2} ms > {} ms (max {:.2} ms)",
                client.schedule_lag_ms.p99, self.max_lag_ms, client.schedule_lag_ms.max
            );
            if let Some(throttled) = client.cpu_throttling.as_ref().and_then(|t| t.evidence()) {
                why.push_str("; ");
                why.push_str(&throttled);
            }
            if lag_explains {
                reasons.push(why);
            } else {
                notes.push(format!("{why}; the verdict stands (lag only adds delay)"));
            }
        }
        // A run off the point's shared timeline changed the arrivals themselves (its
        // requests came later than its sibling shards'): never evidence.
        if late_start {
            reasons.push(format!(
                "the run started {:.2} ms after its start instant (bound {} ms): it is off the \
                 point's shared timeline",
                client.start_lateness_ms, self.max_lag_ms
            ));
        }
        let lagging = lagging && lag_explains;
        if client.incomplete {
            reasons.push("the run was stopped before its schedule ended".to_owned());
        }
        if client.measured == 0 {
            reasons.push("no request was measured".to_owned());
        }
        if let Some(why) = unanswered_pages(&self.metrics_targets, self.series) {
            reasons.push(why);
        }
        for r in self.reasons {
            if !reasons.contains(&r) {
                reasons.push(r);
            }
        }
        let series = self.series;
        let warm = self.cache == CacheMode::Warm;
        let mut engine_findings = series.map(|s| findings(s, window, warm));
        let engine_truth = series.filter(|s| s.profile.is_some()).map(|s| {
            goodput_engine_metrics::truth::check(
                &self.client.totals,
                s,
                self.prompt_method == PromptMethod::TokenIds,
                warm,
            )
        });
        if let (Some(f), Some(t)) = (engine_findings.as_mut(), engine_truth.as_ref()) {
            f.flags.extend(t.flags.iter().cloned());
        }
        // Cross-check: an engine queue that grows while the client's in-flight count stays
        // flat counts requests the client did not send (lost telemetry, retries, other
        // traffic): the boundaries disagree. The reverse, a queue in front of the engine, is
        // growth ([`queue_trend`]).
        if let Some(f) = engine_findings.as_mut()
            && source.starts_with("engine")
        {
            let client_says = client_trend(&client.in_flight_series, from, to);
            if client_says != trend {
                f.flags.push(format!(
                    "queue trend {trend} from the engine's waiting queue, but {client_says} from \
                     the client's in-flight count: client and engine boundaries disagree"
                ));
            }
        }
        let law = {
            let inside: Vec<f64> = client
                .in_flight_series
                .iter()
                .filter(|p| p.0 >= from && p.0 <= to)
                .map(|p| p.1)
                .collect();
            let (ok, e2e_sum_ms) = self.ok;
            let mean_e2e_s = e2e_sum_ms / ok.max(1) as f64 / 1e3;
            let mean_in_flight = inside.iter().sum::<f64>() / inside.len().max(1) as f64;
            (!inside.is_empty() && ok > 0)
                .then(|| littles_law(mean_in_flight, ok as f64 / window, mean_e2e_s))
                .flatten()
        };
        let offered = match self.mode {
            LoadMode::Rate { rate } => Some(rate),
            LoadMode::Concurrency { .. } => None,
        };
        PointSummaryFile {
            experiment: if closed {
                "saturation_experiment"
            } else {
                "rate_sweep_point"
            }
            .to_owned(),
            mode: self.mode,
            offered_rps: offered,
            achieved_send_rps: client.measured as f64 / window,
            cache: self.cache,
            prompt_method: self.prompt_method,
            vocabulary: self.vocabulary,
            chat_sizing: self.chat_sizing,
            cache_reset: self.cache_reset,
            drain: self.drain,
            prewarmed_prefixes: self.prewarmed,
            schedule: self.schedule,
            validity: Validity {
                valid: reasons.is_empty(),
                reasons,
                client_behind: lagging || late_start || self.client_behind,
                notes,
            },
            queue_trend_source: source,
            report,
            engine_metrics: EngineFacts {
                targets: self.metrics_targets,
                samples: series.map_or(0, |s| s.samples.len()),
                failed: series.map_or(0, |s| s.samples.iter().filter(|x| !x.ok).count()),
            },
            engine_findings,
            littles_law: law,
            client: self.client,
            engine_truth,
        }
    }
}

pub(super) fn summarize(
    config: &LoadConfig,
    plan: &PointPlan,
    point: &MeasuredPoint,
) -> Result<PointSummaryFile, PointError> {
    let run = &point.run;
    let series = point.series.as_ref();
    let mut summary = PointSummary::new(plan.gate.clone());
    let (mut ok, mut e2e_sum_ms) = (0, 0.0);
    for r in &run.records {
        if r.ok() {
            summary.record_success(r.class, &r.success());
            ok += 1;
            e2e_sum_ms += r.e2e_ms;
        } else {
            summary.record_failure(r.class, r.status);
        }
    }
    let span = run
        .records
        .iter()
        .map(|r| r.scheduled_s)
        .fold(None, |acc, t| {
            Some(acc.map_or((t, t), |(lo, hi): (f64, f64)| (lo.min(t), hi.max(t))))
        });
    let facts = PointFacts {
        mode: config.mode,
        cache: config.cache,
        prompt_method: point.prompt_method,
        vocabulary: point.vocabulary.clone(),
        chat_sizing: point.chat_sizing.clone(),
        cache_reset: point.cache_reset.clone(),
        drain: point.drain.clone(),
        prewarmed: point.prewarmed,
        schedule: point.schedule.clone(),
        client: run.client.clone(),
        series,
        metrics_targets: plan.metrics_targets.clone(),
        max_lag_ms: plan.max_lag_ms,
        span,
        ok: (ok, e2e_sum_ms),
        reasons: Vec::new(),
        client_behind: false,
    };
    let (trend, source) = facts.queue_trend();
    let mut report = summary.finish(facts.window_s(), trend)?;
    if let Some(stop) = &run.client.early_stop {
        stop.settle(&mut report);
    }
    Ok(facts.assemble(report, source))
}
