use super::*;
use crate::analysis::ClassSlo;

fn gate() -> GateConfig {
    GateConfig {
        classes: vec![ClassSlo {
            name: "chat".into(),
            ttft_cutoff_ms: 1000.0,
            tpot_cutoff_ms: 40.0,
        }],
        ..GateConfig::default()
    }
}

/// A request scheduled at `t` that succeeded fast, or failed with `status` 0.1 s later.
fn record(i: u64, t: f64, status: &'static str, http: Option<u16>) -> RequestRecord {
    let ok = status == "ok";
    RequestRecord {
        index: i,
        class: 0,
        scheduled_s: t,
        sent_s: t,
        first_token_s: ok.then_some(t + 0.2),
        last_token_s: ok.then_some(t + 2.0),
        ended_s: if ok { t + 2.0 } else { t + 0.1 },
        input_tokens: 1024,
        input_tokens_usage: None,
        max_tokens: 64,
        ttft_ms: if ok { 200.0 } else { 0.0 },
        tpot_ms: if ok { 1800.0 / 63.0 } else { 0.0 },
        e2e_ms: if ok { 2000.0 } else { 0.0 },
        output_tokens: if ok { 64 } else { 0 },
        output_tokens_counted: if ok { 64 } else { 0 },
        output_tokens_usage: ok.then_some(64),
        status,
        itl_ms: Vec::new(),
        finish_reason: ok.then(|| "length".into()),
        http_status: http,
        error_message: None,
    }
}

/// 10 RPS for 100 s; requests scheduled in `[50, 52)` fail with `status`.
fn records(status: &'static str, http: Option<u16>) -> Vec<RequestRecord> {
    (0..1000)
        .map(|i| {
            let t = i as f64 * 0.1;
            if (50.0..52.0).contains(&t) {
                record(i, t, status, http)
            } else {
                record(i, t, "ok", Some(200))
            }
        })
        .collect()
}

/// A queue at 2, rising to 10 at 55 s and back at 2 from 65 s, sampled every second.
fn recovering_queue() -> Vec<(f64, f64)> {
    (0..=100)
        .map(|t| {
            let t = f64::from(t);
            let q = if (50.0..55.0).contains(&t) {
                2.0 + (t - 50.0) * 1.6
            } else if (55.0..65.0).contains(&t) {
                10.0 - (t - 55.0) * 0.8
            } else {
                2.0
            };
            (t, q)
        })
        .collect()
}

fn kill_signals() -> Signals {
    Signals {
        readiness_failed_s: Some(50.4),
        metrics_gone_s: Some(51.0),
        endpoint_removed_s: Some(55.0),
        routed_after_removal: Some(0),
        serving_again_s: Some(80.0),
        router_received: Some(1000),
        engine_finished: Some(980.0),
        ..Signals::default()
    }
}

fn observed<'a>(
    records: &'a [RequestRecord],
    queue: &'a [(f64, f64)],
    signals: Signals,
    gate: &'a GateConfig,
) -> Observed<'a> {
    Observed {
        kind: FaultKind::KillReplica,
        replica: "replica 1".into(),
        rate_rps: 10.0,
        replicas: 4,
        injected_s: 50.0,
        lifted_s: None,
        end_s: 101.9,
        records,
        warmup_sent: 0,
        queue,
        running: &[],
        kv_usage: &[],
        cancel: None,
        signals,
        alerts: vec![FiredAlert {
            alert: "GoodputReplicaDown".into(),
            labels: "replica=1".into(),
            pending_at_s: 51.0,
            firing_at_s: Some(81.0),
            resolved_at_s: Some(82.0),
        }],
        gate,
        recovery_window_s: 10.0,
    }
}

#[test]
fn a_detected_routed_around_honest_recovered_kill_passes() {
    let (gate, records, queue) = (gate(), records("disconnected", None), recovering_queue());
    let r = analyze(&observed(&records, &queue, kill_signals(), &gate));
    assert_eq!(r.verdict, FailureVerdict::Pass, "{:#?}", r.reasons);
    // The readiness probe showed the loss first.
    assert_eq!(r.detected_at_s, Some(50.4));
    assert_eq!(r.detected_by.as_deref(), Some("readiness probe failed"));
    assert_eq!(r.stopped_receiving_work, Some(true));
    // 20 requests failed, the first ending at 50.1 s and the last at 52.0 s.
    assert_eq!(r.accounting.failed_honestly, 20);
    assert_eq!(r.accounting.lost, 0);
    assert!(r.accounting.balanced());
    assert_eq!(r.first_error_s, Some(50.1));
    assert!((r.last_error_s.unwrap_or(0.0) - 52.0).abs() < 1e-9);
    // Baseline 2, peak 10 at 55 s; recovered at the first sample from the peak whose
    // 10-second window is flat by the rule with a mean within 5 of the baseline.
    assert_eq!(r.queue.baseline, Some(2.0));
    assert_eq!((r.queue.peak, r.queue.peak_at_s), (Some(10.0), Some(55.0)));
    let recovered = r.queue.recovered_at_s.expect("the queue recovers");
    assert!((55.0..=65.0).contains(&recovered), "{recovered}");
    let names: Vec<&str> = r.windows.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["before", "during", "after"]);
    let before = &r.windows[0];
    // Finished before 50 s: the requests scheduled before 48 s (each takes 2 s).
    assert_eq!((before.attempted, before.failed), (480, 0));
    assert_eq!(before.classes[0].attainment, Some(1.0));
    // Every request is in exactly one window.
    assert_eq!(r.windows.iter().map(|w| w.attempted).sum::<u64>(), 1000);
    assert!(r.capacity_returned);
}

#[test]
fn a_request_that_times_out_is_a_silent_loss_and_fails_the_test() {
    let (gate, records, queue) = (gate(), records("timeout", None), recovering_queue());
    let r = analyze(&observed(&records, &queue, kill_signals(), &gate));
    assert_eq!(r.accounting.lost, 20);
    assert_eq!(r.accounting.failed_honestly, 0);
    assert_eq!(r.verdict, FailureVerdict::Fail);
    assert!(
        r.reasons.iter().any(|s| s.contains("lost silently")),
        "{:?}",
        r.reasons
    );
}

#[test]
fn work_routed_to_a_removed_replica_fails_the_test() {
    let (gate, records, queue) = (gate(), records("connect_error", None), recovering_queue());
    let signals = Signals {
        routed_after_removal: Some(3),
        ..kill_signals()
    };
    let r = analyze(&observed(&records, &queue, signals, &gate));
    assert_eq!(r.stopped_receiving_work, Some(false));
    assert_eq!(r.verdict, FailureVerdict::Fail);
    assert!(
        r.reasons
            .iter()
            .any(|s| s.contains("3 requests were routed"))
    );
}

#[test]
fn an_undetected_kill_fails_and_a_disagreeing_router_count_unbalances() {
    let (gate, records, queue) = (gate(), records("disconnected", None), recovering_queue());
    let signals = Signals {
        readiness_failed_s: None,
        metrics_gone_s: None,
        endpoint_removed_s: None,
        router_received: Some(999),
        ..kill_signals()
    };
    let mut o = observed(&records, &queue, signals, &gate);
    o.alerts.clear();
    let r = analyze(&o);
    assert_eq!(r.detected_at_s, None);
    assert!(!r.accounting.balanced());
    assert_eq!(r.verdict, FailureVerdict::Fail);
    assert!(r.reasons.iter().any(|s| s.contains("never detected")));
    assert!(r.reasons.iter().any(|s| s.contains("never removed")));
    assert!(r.reasons.iter().any(|s| s.contains("does not balance")));
}

#[test]
fn a_queue_growing_without_shedding_is_a_finding_with_the_growth() {
    let gate = gate();
    let records = records("disconnected", None);
    // Baseline 2, then +1 request per second to the end: no recovery.
    let queue: Vec<(f64, f64)> = (0..=100)
        .map(|t| {
            let t = f64::from(t);
            (t, if t < 50.0 { 2.0 } else { 2.0 + (t - 50.0) })
        })
        .collect();
    let signals = Signals {
        serving_again_s: None,
        ..kill_signals()
    };
    let r = analyze(&observed(&records, &queue, signals, &gate));
    assert_eq!(r.queue.trend_after_injection, QueueTrend::Growing);
    assert_eq!(r.queue.recovered_at_s, None);
    assert!(!r.capacity_returned);
    assert_eq!(r.verdict, FailureVerdict::Finding, "{:?}", r.reasons);
    assert!(
        r.reasons
            .iter()
            .any(|s| s.contains("nothing shed load") && s.contains("no request rejected")),
        "{:?}",
        r.reasons
    );
    // The incident runs to the end: no after-window.
    assert!(r.windows.iter().all(|w| w.name != "after"));
}

#[test]
fn the_steady_state_needs_the_slos_back_not_only_the_queue() {
    let gate = gate();
    // The queue is back at once, but requests arriving before 70 s miss TTFT.
    let records: Vec<RequestRecord> = records("disconnected", None)
        .into_iter()
        .map(|mut r| {
            if r.ok() && (50.0..70.0).contains(&r.scheduled_s) {
                r.ttft_ms = 1500.0;
            }
            r
        })
        .collect();
    let queue: Vec<(f64, f64)> = (0..=100).map(|t| (f64::from(t), 2.0)).collect();
    let signals = Signals {
        serving_again_s: Some(52.0),
        ..kill_signals()
    };
    let r = analyze(&observed(&records, &queue, signals, &gate));
    let recovered = r.queue.recovered_at_s.expect("recovered");
    assert!(recovered >= 70.0 - 1.0, "{recovered}");
    let after = r.windows.iter().find(|w| w.name == "after").expect("after");
    assert_eq!(after.classes[0].attainment, Some(1.0));
    assert_eq!(r.verdict, FailureVerdict::Pass, "{:?}", r.reasons);
}

#[test]
fn rejections_are_counted_as_shed_load() {
    let (gate, records, queue) = (gate(), records("http_error", Some(503)), recovering_queue());
    let r = analyze(&observed(&records, &queue, kill_signals(), &gate));
    assert_eq!(r.accounting.rejected, 20);
    assert_eq!(r.accounting.failed_by_status.get("http_error"), Some(&20));
}

#[test]
fn a_degradation_no_alert_saw_is_a_finding() {
    let (gate, records, queue) = (gate(), records("ok", Some(200)), recovering_queue());
    let mut o = observed(&records, &queue, Signals::default(), &gate);
    o.kind = FaultKind::DegradedLink;
    o.lifted_s = Some(70.0);
    o.alerts.clear();
    let r = analyze(&o);
    assert_eq!(r.detected_at_s, None);
    assert_eq!(r.stopped_receiving_work, None);
    assert_eq!(r.verdict, FailureVerdict::Finding);
    // With an alert firing after the injection, it is the detection.
    o.alerts = observed(&records, &queue, Signals::default(), &gate).alerts;
    let r = analyze(&o);
    assert_eq!(r.detected_at_s, Some(81.0));
    assert_eq!(r.verdict, FailureVerdict::Pass, "{:?}", r.reasons);
}

#[test]
fn recovery_needs_a_whole_flat_window_near_the_baseline() {
    let q: Vec<(f64, f64)> = (0..=40).map(|t| (f64::from(t), 20.0)).collect();
    let always = |_: f64, _: f64| true;
    // Flat at 20 against a baseline of 2: not recovered (tolerance 5).
    assert_eq!(recovered_at(&q, 0.0, 2.0, 10.0, 40.0, &always), None);
    // Against a baseline of 16 it is (tolerance max(5, 8)).
    assert_eq!(recovered_at(&q, 3.0, 16.0, 10.0, 40.0, &always), Some(3.0));
    // A window running past the end does not count.
    assert_eq!(recovered_at(&q, 35.0, 16.0, 10.0, 40.0, &always), None);
    // Nor one whose requests still miss the SLOs.
    let from_20 = |t: f64, _: f64| t >= 20.0;
    assert_eq!(
        recovered_at(&q, 3.0, 16.0, 10.0, 40.0, &from_20),
        Some(20.0)
    );
}

#[test]
fn the_report_has_every_field_of_the_methodology() {
    let (gate, records, queue) = (gate(), records("disconnected", None), recovering_queue());
    let r = analyze(&observed(&records, &queue, kill_signals(), &gate));
    let md = report::render(std::slice::from_ref(&r));
    for field in [
        "fault injected",
        "detected (readiness probe failed)",
        "endpoint removed from routing",
        "first error",
        "last error",
        "### Before, during and after",
        "| before |",
        "| during |",
        "| after |",
        "queue peak",
        "queue recovered",
        "lost silently",
        "retried",
        "rejected",
        "GoodputReplicaDown",
        "Capacity came back without manual repair: **yes**",
        "stopped getting new requests",
        "## KillReplica on replica 1: pass",
        "The router counted 1000 requests received; the client sent 1000 (1000 measured, 0 \
         in the warmup): they agree",
    ] {
        assert!(md.contains(field), "missing {field:?} in\n{md}");
    }
}

/// A cancellation from 50 to 70 s: every fourth request scheduled in it aborted after 8
/// chunks, running 40 before and after (30 while cancelling when the engine frees the
/// slots), and the engines' abort count as given.
fn cancel_case(engine_aborted: Option<f64>, running_after: f64) -> FailureReport {
    let gate = gate();
    let mut records: Vec<RequestRecord> = (0..1000)
        .map(|i| record(i, i as f64 * 0.1, "ok", Some(200)))
        .collect();
    for r in records
        .iter_mut()
        .filter(|r| (50.0..70.0).contains(&r.scheduled_s) && r.index % 4 == 0)
    {
        *r = RequestRecord {
            status: "aborted",
            ended_s: r.scheduled_s + 0.5,
            ..record(r.index, r.scheduled_s, "ok", Some(200))
        };
    }
    let flat: Vec<(f64, f64)> = (0..=100).map(|t| (f64::from(t), 2.0)).collect();
    let running: Vec<(f64, f64)> = (0..=100)
        .map(|t| {
            let t = f64::from(t);
            let v = match t {
                t if t < 50.0 => 40.0,
                t if t < 70.0 => 30.0,
                _ => running_after,
            };
            (t, v)
        })
        .collect();
    let kv: Vec<(f64, f64)> = running.iter().map(|&(t, v)| (t, v / 100.0)).collect();
    let plan = CancelPlan {
        from_s: 50.0,
        to_s: 70.0,
        fraction: 0.25,
        after_chunks: 8,
    };
    analyze(&Observed {
        kind: FaultKind::RequestCancel,
        replica: "replica 0".into(),
        lifted_s: Some(70.0),
        running: &running,
        kv_usage: &kv,
        cancel: Some(plan),
        signals: Signals {
            router_received: Some(1000),
            engine_aborted,
            engine_abort_seen_s: engine_aborted.filter(|n| *n > 0.0).map(|_| 51.0),
            ..Signals::default()
        },
        alerts: Vec::new(),
        ..observed(&records, &flat, Signals::default(), &gate)
    })
}

#[test]
fn cancelled_requests_are_counted_apart_and_freed_slots_pass() {
    let r = cancel_case(Some(50.0), 40.0);
    let a = &r.accounting;
    // 200 requests scheduled in [50, 70), every fourth aborted.
    assert_eq!(a.aborted, 50);
    assert_eq!((a.ok, a.failed_honestly, a.lost), (950, 0, 0));
    assert!(a.balanced(), "{a:#?}");
    // Aborted requests are neither failures nor errors.
    assert_eq!((r.first_error_s, r.last_error_s), (None, None));
    let during = r
        .windows
        .iter()
        .find(|w| w.name == "during")
        .expect("during");
    assert_eq!(during.failed, 0);
    assert!(during.aborted > 0, "{during:#?}");
    let total: u64 = r.windows.iter().map(|w| w.aborted).sum();
    assert!(total <= 50);
    let c = r.cancellation.as_ref().expect("a cancellation block");
    assert_eq!(c.client_aborted, 50);
    assert_eq!(
        (c.running_before, c.running_during, c.running_after),
        (Some(40.0), Some(30.0), Some(40.0))
    );
    assert_eq!(c.slots_freed, Some(true));
    assert_eq!(r.detected_at_s, Some(51.0));
    assert_eq!(r.verdict, FailureVerdict::Pass, "{:#?}", r.reasons);
    assert!(r.capacity_returned);
}

#[test]
fn an_engine_that_keeps_working_for_gone_clients_fails() {
    // No abort counted: the engine ran the cancelled requests to their end.
    let r = cancel_case(Some(0.0), 40.0);
    let c = r.cancellation.as_ref().expect("a cancellation block");
    assert_eq!(c.slots_freed, Some(false));
    assert_eq!(r.verdict, FailureVerdict::Fail, "{:#?}", r.reasons);
    assert!(
        r.reasons
            .iter()
            .any(|l| l.starts_with("fail: the engines did not free the slots of the 50")),
        "{:#?}",
        r.reasons
    );
    // Aborts counted but running stays high afterwards: also not freed.
    let r = cancel_case(Some(50.0), 60.0);
    assert_eq!(r.cancellation.and_then(|c| c.slots_freed), Some(false));
    // Just under 95% of the aborts counted: not freed; at 95%: freed.
    assert_eq!(
        cancel_case(Some(47.0), 40.0)
            .cancellation
            .and_then(|c| c.slots_freed),
        Some(false)
    );
    assert_eq!(
        cancel_case(Some(47.5), 40.0)
            .cancellation
            .and_then(|c| c.slots_freed),
        Some(true)
    );
    // An engine that counts no aborts at all: a finding, not a pass.
    let r = cancel_case(None, 40.0);
    assert_eq!(r.cancellation.as_ref().and_then(|c| c.slots_freed), None);
    assert_eq!(r.verdict, FailureVerdict::Finding, "{:#?}", r.reasons);
}
