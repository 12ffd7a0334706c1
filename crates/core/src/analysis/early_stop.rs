//! Early stopping: while an open-loop point runs, what its requests have already settled.
//! A point can only ever be stopped as a *fail*: passing needs the full sample and the full
//! window, so nothing here can pass a point.

use serde::{Deserialize, Serialize};

use super::{
    GateConfig, GateReason, GateRule, PointReport, QueueTrend, Verdict, meets_slo, queue_slope,
    wilson_interval,
};

/// Standard errors of the Wilson bounds: one-sided, a true attainment (or error rate) on
/// the passing side of its limit shows a bound this far beyond the limit with probability
/// about 5 × 10⁻⁵ per look.
pub const EARLY_STOP_Z: f64 = 3.89;

/// Share of a class's (or the point's) scheduled measured requests that must have settled
/// before a bound is looked at, so that one burst early in the window cannot decide it.
pub const EARLY_STOP_MIN_FRACTION: f64 = 0.25;

/// Share of the point's planned measured window the queue must have been watched before
/// its trend can stop the point.
pub const EARLY_STOP_QUEUE_FRACTION: f64 = 0.5;

/// The rule in words (stated in every report).
pub const EARLY_STOP_RULE: &str = "early stopping (open-loop points only; a point is only \
    ever stopped as a fail, never passed early): the point stops as soon as a class has more \
    successes that missed a cutoff than the required attainment allows over all of its \
    scheduled measured requests (it can no longer pass, whatever follows); once at least 25% \
    of a class's scheduled \
    measured requests have succeeded, the point stops when the Wilson upper bound (z = 3.89) \
    of that class's attainment so far is below the required attainment; once at least 25% \
    of the point's scheduled measured requests have settled, when the Wilson lower bound \
    (z = 3.89) of the error rate so far is above the limit; once at least half of the \
    planned measured window has passed, when the client's in-flight count is growing by the \
    queue-trend rule. The point is then a fail (stopped early) with the evidence of that \
    moment; requests still in flight are cancelled and left out of its figures";

/// Why a point was stopped early, as it stood at that moment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EarlyStop {
    /// The gate rule that is already settled as failing.
    pub rule: GateRule,
    /// The class concerned, for the attainment rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The evidence in words, with its figures.
    pub message: String,
    /// Seconds after the schedule's time zero the point was stopped.
    pub at_s: f64,
    /// Measured requests settled (succeeded or failed) by then.
    pub settled: u64,
    /// Measured requests the point had scheduled.
    pub scheduled: u64,
    /// Seconds of schedule left unsent: the planned span after the stop.
    pub unsent_s: f64,
}

impl EarlyStop {
    /// Converts times from the run's clock to model time (an engine `k` times faster).
    pub fn rescale(&mut self, k: f64) {
        self.at_s *= k;
        self.unsent_s *= k;
    }

    /// Marks `report` as failing with this evidence: its own gate reason first, then the
    /// report's; never passing.
    pub fn settle(&self, report: &mut PointReport) {
        report.gate_reasons.insert(
            0,
            GateReason {
                rule: self.rule,
                class: self.class.clone(),
                message: format!("stopped early: {}", self.message),
            },
        );
        report.capacity_gate_pass = false;
        report.verdict = Some(Verdict::Fail);
    }
}

/// What the requests of one running point have settled so far, per class.
#[derive(Clone, Debug)]
pub struct EarlyStopper {
    gate: GateConfig,
    /// Scheduled measured requests per class.
    scheduled: Vec<u64>,
    /// Start of the measured window and its planned length (s, run clock).
    from_s: f64,
    window_s: f64,
    /// Where the schedule's last request is due (s, run clock).
    last_due_s: f64,
    successes: Vec<u64>,
    passing: Vec<u64>,
    failed: u64,
}

impl EarlyStopper {
    /// A stopper for a point whose measured requests are `scheduled` per class (in the
    /// gate's class order) over the planned window `[from_s, from_s + window_s]`, its last
    /// request due at `last_due_s`.
    pub fn new(
        gate: GateConfig,
        scheduled: Vec<u64>,
        from_s: f64,
        window_s: f64,
        last_due_s: f64,
    ) -> Self {
        let n = scheduled.len();
        EarlyStopper {
            gate,
            scheduled,
            from_s,
            window_s,
            last_due_s,
            successes: vec![0; n],
            passing: vec![0; n],
            failed: 0,
        }
    }

    /// One measured request settled: a success with its TTFT and TPOT (ms, model time) or
    /// a failure.
    pub fn observe(&mut self, class: usize, success: Option<(f64, f64)>) {
        let Some(slo) = self.gate.classes.get(class) else {
            return;
        };
        match success {
            Some((ttft_ms, tpot_ms)) => {
                self.successes[class] += 1;
                if meets_slo(ttft_ms, tpot_ms, slo.ttft_cutoff_ms, slo.tpot_cutoff_ms) {
                    self.passing[class] += 1;
                }
            }
            None => self.failed += 1,
        }
    }

    /// The evidence that settles the point as failing at `now_s`, if any. `in_flight` is
    /// the client's `(s, requests in flight)` series on the same clock.
    pub fn check(&self, now_s: f64, in_flight: &[(f64, f64)]) -> Option<EarlyStop> {
        let settled = self.successes.iter().sum::<u64>() + self.failed;
        let scheduled: u64 = self.scheduled.iter().sum();
        let stop = |rule, class: Option<String>, message: String| EarlyStop {
            rule,
            class,
            message,
            at_s: now_s,
            settled,
            scheduled,
            unsent_s: (self.last_due_s - now_s).max(0.0),
        };
        let min = self.gate.attainment_min;
        for (c, slo) in self.gate.classes.iter().enumerate() {
            let misses = self.successes[c] - self.passing[c];
            let allowed = (1.0 - min) * self.scheduled[c] as f64;
            if misses as f64 > allowed {
                return Some(stop(
                    GateRule::Attainment,
                    Some(slo.name.clone()),
                    format!(
                        "class {}: {misses} successes already missed a cutoff, more than the \
                         {allowed:.0} that a {:.1}% attainment allows over its {} scheduled \
                         requests",
                        slo.name,
                        100.0 * min,
                        self.scheduled[c]
                    ),
                ));
            }
        }
        for (c, slo) in self.gate.classes.iter().enumerate() {
            let n = self.successes[c];
            if (n as f64) < EARLY_STOP_MIN_FRACTION * self.scheduled[c] as f64 || n == 0 {
                continue;
            }
            let k = self.passing[c];
            let (_, upper) = wilson_interval(k, n, EARLY_STOP_Z)?;
            if upper < min {
                return Some(stop(
                    GateRule::Attainment,
                    Some(slo.name.clone()),
                    format!(
                        "class {}: {k} of {n} successes so far met both cutoffs ({:.1}%); \
                         the Wilson upper bound {:.1}% (z = {EARLY_STOP_Z}) is below the \
                         required {:.1}%",
                        slo.name,
                        100.0 * k as f64 / n as f64,
                        100.0 * upper,
                        100.0 * min
                    ),
                ));
            }
        }
        if settled > 0 && settled as f64 >= EARLY_STOP_MIN_FRACTION * scheduled as f64 {
            let (lower, _) = wilson_interval(self.failed, settled, EARLY_STOP_Z)?;
            if lower > self.gate.error_rate_max {
                return Some(stop(
                    GateRule::ErrorRate,
                    None,
                    format!(
                        "{} of {settled} settled requests failed ({:.2}%); the Wilson lower \
                         bound {:.2}% (z = {EARLY_STOP_Z}) is above the limit of {:.2}%",
                        self.failed,
                        100.0 * self.failed as f64 / settled as f64,
                        100.0 * lower,
                        100.0 * self.gate.error_rate_max
                    ),
                ));
            }
        }
        let watched = now_s - self.from_s;
        if self.gate.queue_trend_required == QueueTrend::Flat
            && self.window_s > 0.0
            && watched >= EARLY_STOP_QUEUE_FRACTION * self.window_s
        {
            let inside: Vec<(f64, f64)> = in_flight
                .iter()
                .copied()
                .filter(|p| p.0 >= self.from_s && p.0 <= now_s)
                .collect();
            let q = queue_slope(&inside, 5.0);
            if q.trend == QueueTrend::Growing {
                return Some(stop(
                    GateRule::QueueTrend,
                    None,
                    format!(
                        "the client's in-flight count grew by {:.1} requests over the first \
                         {:.0}% of the window (slope {:.2}/s, t = {:.1})",
                        q.growth,
                        100.0 * watched / self.window_s,
                        q.slope_per_s,
                        q.t_stat
                    ),
                ));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::ClassSlo;

    fn gate() -> GateConfig {
        GateConfig {
            classes: vec![
                ClassSlo {
                    name: "chat".into(),
                    ttft_cutoff_ms: 500.0,
                    tpot_cutoff_ms: 40.0,
                },
                ClassSlo {
                    name: "long".into(),
                    ttft_cutoff_ms: 2000.0,
                    tpot_cutoff_ms: 50.0,
                },
            ],
            ..GateConfig::default()
        }
    }

    fn stopper() -> EarlyStopper {
        EarlyStopper::new(gate(), vec![2000, 2000], 10.0, 200.0, 210.0)
    }

    #[test]
    fn a_class_far_below_its_attainment_stops_once_a_quarter_has_settled() {
        let mut s = stopper();
        // 499 successes, 88% within the cutoffs (59 misses, fewer than the 100 that 5% of
        // 2,000 allows): under a quarter of 2,000, nothing is settled yet.
        for i in 0..499 {
            let ttft = if i % 25 < 22 { 100.0 } else { 900.0 };
            s.observe(0, Some((ttft, 20.0)));
        }
        assert_eq!(s.check(60.0, &[]), None);
        s.observe(0, Some((900.0, 20.0)));
        let stop = s.check(60.0, &[]).expect("settled");
        assert_eq!(stop.rule, GateRule::Attainment);
        assert_eq!(stop.class.as_deref(), Some("chat"));
        assert_eq!((stop.settled, stop.scheduled), (500, 4000));
        assert_eq!(stop.unsent_s, 150.0);
        assert!(stop.message.contains("440 of 500"), "{}", stop.message);
    }

    #[test]
    fn more_misses_than_the_whole_sample_allows_stop_at_once() {
        let mut s = stopper();
        // 5% of 2,000 scheduled is 100 misses: the 101st settles the class, whatever
        // the other 1,899 requests do.
        for _ in 0..100 {
            s.observe(1, Some((3000.0, 20.0)));
        }
        assert_eq!(s.check(20.0, &[]), None);
        s.observe(1, Some((3000.0, 20.0)));
        let stop = s.check(20.0, &[]).expect("settled");
        assert_eq!(stop.class.as_deref(), Some("long"));
        assert!(
            stop.message.contains("101 successes already missed"),
            "{}",
            stop.message
        );
    }

    #[test]
    fn a_class_at_its_attainment_never_stops() {
        // 94% observed over 1,000: the bound reaches above 95%, so nothing is settled.
        let mut s = stopper();
        for i in 0..1000 {
            let tpot = if i % 50 < 47 { 30.0 } else { 45.0 };
            s.observe(0, Some((100.0, tpot)));
            s.observe(1, Some((100.0, 30.0)));
        }
        assert_eq!(s.check(100.0, &[]), None);
    }

    #[test]
    fn errors_stop_on_their_lower_bound() {
        let mut s = stopper();
        for i in 0..900 {
            s.observe(i % 2, if i % 20 == 0 { None } else { Some((1.0, 1.0)) });
        }
        // 5% failed of 900: under a quarter of the 4,000 scheduled.
        assert_eq!(s.check(50.0, &[]), None);
        for i in 0..1100 {
            s.observe(i % 2, if i % 20 == 0 { None } else { Some((1.0, 1.0)) });
        }
        let stop = s.check(50.0, &[]).expect("settled");
        assert_eq!(stop.rule, GateRule::ErrorRate);
        // 1.5% would not be settled at z = 3.89 over 2,000.
        let mut s = stopper();
        for i in 0..2000 {
            s.observe(i % 2, if i % 66 == 0 { None } else { Some((1.0, 1.0)) });
        }
        assert_eq!(s.check(50.0, &[]), None);
    }

    #[test]
    fn a_growing_queue_stops_only_after_half_the_window() {
        let s = stopper();
        let growing: Vec<(f64, f64)> = (0..2000)
            .map(|i| (f64::from(i) * 0.1, f64::from(i) * 0.05))
            .collect();
        // 90 s watched of 200: not yet.
        assert_eq!(s.check(100.0, &growing), None);
        let stop = s.check(110.0, &growing).expect("settled");
        assert_eq!(stop.rule, GateRule::QueueTrend);
        let flat: Vec<(f64, f64)> = (0..2000)
            .map(|i| (f64::from(i) * 0.1, 8.0 + f64::from(i % 3)))
            .collect();
        assert_eq!(s.check(150.0, &flat), None);
    }

    #[test]
    fn settling_a_report_fails_it_with_the_evidence_first() {
        let mut summary = crate::analysis::PointSummary::new(gate());
        let ok = crate::analysis::Success {
            ttft_ms: 100.0,
            tpot_ms: 20.0,
            e2e_ms: 2640.0,
            output_tokens: 128,
            itl_ms: &[],
        };
        summary.record_success(0, &ok);
        let mut report = summary.finish(60.0, QueueTrend::Flat).expect("a report");
        let stop = EarlyStop {
            rule: GateRule::Attainment,
            class: Some("chat".into()),
            message: "class chat: 1 of 500".into(),
            at_s: 3.0,
            settled: 500,
            scheduled: 4000,
            unsent_s: 7.0,
        };
        stop.settle(&mut report);
        assert!(!report.capacity_gate_pass);
        assert_eq!(report.verdict, Some(Verdict::Fail));
        assert_eq!(
            report.gate_reasons[0].message,
            "stopped early: class chat: 1 of 500"
        );
        let mut scaled = stop.clone();
        scaled.rescale(25.0);
        assert_eq!((scaled.at_s, scaled.unsent_s), (75.0, 175.0));
    }
}
