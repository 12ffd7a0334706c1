//! `failure-test.md`: every failure test of a run, each its own section with its own
//! verdict (never one combined score).

use std::fmt::Write as _;

use super::{ACCOUNTING_RULE, Cancellation, FailureReport, RECOVERY_RULE, SLOTS_RULE, Window};

fn secs(t: Option<f64>) -> String {
    t.map_or("—".to_owned(), |t| format!("{t:.1} s"))
}

fn after(t: Option<f64>, injected: f64) -> String {
    t.map_or("—".to_owned(), |t| {
        format!("{t:.1} s (+{:.1} s)", t - injected)
    })
}

fn ms(v: Option<f64>) -> String {
    v.map_or("—".to_owned(), |v| format!("{v:.0}"))
}

fn pct(v: Option<f64>) -> String {
    v.map_or("—".to_owned(), |v| format!("{:.1}%", v * 100.0))
}

/// The whole file: a header, then one section per test.
pub fn render(reports: &[FailureReport]) -> String {
    let mut out = String::from("# Failure tests\n\n");
    if reports.is_empty() {
        out.push_str("No failure test ran.\n");
        return out;
    }
    out.push_str(
        "Each fault is its own test with its own verdict. Times are seconds of model time \
         since the test's load started; `+x s` is the time since the injection.\n\n",
    );
    out.push_str("| test | replica | rate | verdict | detected | recovered |\n");
    out.push_str("|---|---|---:|---|---:|---:|\n");
    for r in reports {
        let _ = writeln!(
            out,
            "| {} | {} | {} RPS | **{}** | {} | {} |",
            r.fault,
            r.replica,
            r.rate_rps,
            r.verdict,
            r.detected_at_s.map_or("no".to_owned(), |t| format!(
                "+{:.1} s",
                t - r.injected_at_s
            )),
            r.queue
                .recovery_s
                .map_or("no".to_owned(), |t| format!("+{t:.1} s")),
        );
    }
    out.push('\n');
    for r in reports {
        section(&mut out, r);
    }
    let _ = write!(
        out,
        "## Rules\n\n- Recovery: {RECOVERY_RULE}.\n- Accounting: {ACCOUNTING_RULE}.\n"
    );
    if reports.iter().any(|r| r.cancellation.is_some()) {
        let _ = writeln!(out, "- Slots after a request cancellation: {SLOTS_RULE}.");
    }
    out
}

fn section(out: &mut String, r: &FailureReport) {
    let inj = r.injected_at_s;
    let _ = writeln!(out, "## {} on {}: {}\n", r.fault, r.replica, r.verdict);
    for reason in &r.reasons {
        let _ = writeln!(out, "- {reason}");
    }
    let s = &r.signals;
    let _ = writeln!(
        out,
        "\n### Timeline\n\n| event | time |\n|---|---:|\n\
         | fault injected ({} replicas at {} RPS) | {} |\n\
         | detected{} | {} |\n\
         | readiness probe failed | {} |\n\
         | metrics gone | {} |\n\
         | endpoint removed from routing | {} |\n\
         | serving again (capacity back) | {} |\n\
         | fault lifted | {} |\n\
         | first error | {} |\n\
         | last error | {} |\n\
         | queue peak | {} |\n\
         | queue recovered | {} |\n\
         | end of the run | {} |\n",
        r.replicas,
        r.rate_rps,
        secs(Some(inj)),
        r.detected_by
            .as_ref()
            .map_or(String::new(), |b| format!(" ({b})")),
        after(r.detected_at_s, inj),
        after(s.readiness_failed_s, inj),
        after(s.metrics_gone_s, inj),
        after(s.endpoint_removed_s, inj),
        after(s.serving_again_s, inj),
        after(r.lifted_at_s, inj),
        after(r.first_error_s, inj),
        after(r.last_error_s, inj),
        after(r.queue.peak_at_s, inj),
        after(r.queue.recovered_at_s, inj),
        secs(Some(r.end_s)),
    );
    if let Some(stopped) = r.stopped_receiving_work {
        let _ = match s.routed_after_removal {
            Some(routed) => writeln!(
                out,
                "Router removal: the replica {} new requests after its removal ({routed} \
                 routed to it while out of rotation).\n",
                if stopped {
                    "stopped getting"
                } else {
                    "kept getting"
                },
            ),
            None => writeln!(
                out,
                "Router removal: the replica's endpoint {} (the Service's proxy routes by \
                 it and does not count its picks).\n",
                if stopped {
                    "was removed"
                } else {
                    "was never removed"
                },
            ),
        };
    }
    let _ = writeln!(
        out,
        "Capacity came back without manual repair: **{}**.\n",
        if r.capacity_returned { "yes" } else { "no" }
    );
    if let Some(c) = &r.cancellation {
        cancellation(out, c);
    }
    windows(out, &r.windows);
    let q = &r.queue;
    let _ = writeln!(
        out,
        "### Queue\n\nWaiting requests summed over the replicas that answered; recovery \
         window {:.0} s.\n\n| baseline | peak | trend after the injection | growth | recovery |\n\
         |---:|---:|---|---:|---:|\n| {} | {} | {} | {:.1} | {} |\n",
        q.recovery_window_s,
        q.baseline.map_or("—".to_owned(), |v| format!("{v:.1}")),
        q.peak.map_or("—".to_owned(), |v| format!("{v:.0}")),
        q.trend_after_injection,
        q.growth_after_injection,
        q.recovery_s
            .map_or("not recovered".to_owned(), |t| format!("{t:.1} s")),
    );
    let a = &r.accounting;
    let _ = writeln!(
        out,
        "### Requests\n\n| sent | ok | aborted by the client | failed with an error | of them \
         rejected (429/503) | lost silently | retried |\n|---:|---:|---:|---:|---:|---:|---:|\n\
         | {} | {} | {} | {} | {} | {} | {} |\n",
        a.attempted, a.ok, a.aborted, a.failed_honestly, a.rejected, a.lost, a.retried
    );
    if !a.failed_by_status.is_empty() {
        let by: Vec<String> = a
            .failed_by_status
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(out, "Failures by status: {}.\n", by.join(", "));
    }
    if let Some(n) = a.router_received {
        let _ = writeln!(
            out,
            "The router counted {n} requests received; the client sent {} ({} measured, {} \
             in the warmup): {}.\n",
            a.attempted + a.warmup_sent,
            a.attempted,
            a.warmup_sent,
            if n == a.attempted + a.warmup_sent {
                "they agree"
            } else {
                "they DISAGREE"
            }
        );
    }
    if let Some(n) = a.engine_finished {
        let aborted = r
            .signals
            .engine_aborted
            .filter(|&x| x > 0.0)
            .map_or(String::new(), |x| format!(" ({x:.0} of them aborted)"));
        let _ = writeln!(
            out,
            "The engines' own counters show {n:.0} requests finished{aborted}, warmup \
             included (a killed replica's count up to its last scrape); the client saw {} of \
             the measured requests succeed.\n",
            a.ok
        );
    }
    let _ = writeln!(out, "### Alerts\n");
    if r.alerts.is_empty() {
        let _ = writeln!(out, "No alert of the shipped rules fired or was pending.\n");
    } else {
        let _ = writeln!(
            out,
            "| alert | labels | pending | firing | resolved |\n|---|---|---:|---:|---:|"
        );
        for al in &r.alerts {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                al.alert,
                al.labels,
                after(Some(al.pending_at_s), inj),
                after(al.firing_at_s, inj),
                after(al.resolved_at_s, inj),
            );
        }
        out.push('\n');
    }
}

fn cancellation(out: &mut String, c: &Cancellation) {
    let n = |v: Option<f64>| v.map_or("—".to_owned(), |v| format!("{v:.1}"));
    let share = |v: Option<f64>| v.map_or("—".to_owned(), |v| format!("{:.0}%", v * 100.0));
    let _ = writeln!(
        out,
        "### Cancelled requests\n\nThe client cancelled {} requests ({:.0}% of those \
         arriving during the fault, each after {} content chunks); the engines counted {} \
         aborted. Slots freed: **{}**.\n\n\
         | engines | before | while cancelling | after |\n|---|---:|---:|---:|\n\
         | running requests | {} | {} | {} |\n\
         | KV usage | {} | {} | {} |\n",
        c.client_aborted,
        c.fraction * 100.0,
        c.after_chunks,
        c.engine_aborted
            .map_or("no abort count".to_owned(), |v| format!("{v:.0}")),
        match c.slots_freed {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "unknown",
        },
        n(c.running_before),
        n(c.running_during),
        n(c.running_after),
        share(c.kv_before),
        share(c.kv_during),
        share(c.kv_after),
    );
}

fn windows(out: &mut String, windows: &[Window]) {
    let _ = writeln!(
        out,
        "### Before, during and after\n\n`before`: requests finished before the fault; `during`: every request the incident \
         touched (in flight at the fault or arriving before it ended); `after`: requests \
         arriving once it was over.\n\n\
         | window | from | to | sent | error rate | goodput | class | attainment | \
         TTFT p50 / p95 ms | TPOT p50 / p95 ms |\n\
         |---|---:|---:|---:|---:|---:|---|---:|---:|---:|"
    );
    for w in windows {
        for (i, c) in w.classes.iter().enumerate() {
            let head = if i == 0 {
                let sent = match w.aborted {
                    0 => w.attempted.to_string(),
                    n => format!("{} (+{n} aborted)", w.attempted),
                };
                format!(
                    "| {} | {:.1} | {:.1} | {sent} | {} | {:.2} RPS |",
                    w.name,
                    w.from_s,
                    w.to_s,
                    pct(w.error_rate),
                    w.goodput_rps
                )
            } else {
                "| | | | | | |".to_owned()
            };
            let _ = writeln!(
                out,
                "{head} {} | {} | {} / {} | {} / {} |",
                c.class,
                pct(c.attainment),
                ms(c.p50_ttft_ms),
                ms(c.p95_ttft_ms),
                ms(c.p50_tpot_ms),
                ms(c.p95_tpot_ms),
            );
        }
    }
    out.push('\n');
}
