//! Whether the live simulated engine keeps its model's time at a time scale K on this
//! machine, checked before the sweep.
//!
//! At K every real millisecond the harness adds (HTTP, SSE, the client, the scheduler) is K
//! milliseconds of reported latency. An idle probe measures it: a few requests per
//! workload class, one at a time (so the engine is idle at each arrival and the model's
//! answer is exact), through the same router and client as the sweep, on a fresh
//! single-replica engine at K. Each class's live TTFT and TPOT (median, model time) is
//! compared with what the model predicts for that request alone, and the engine's frame
//! lateness during the probe is recorded; both are judged as fractions of the tightest
//! cutoffs:
//! - a fixed K whose median drift is over [`REFUSE_FRACTION`] (10%) of a tightest cutoff
//!   is refused before any traffic; drift or lateness over [`WARN_FRACTION`] (2%) is
//!   warned about (a P99 of a few hundred idle frames is one scheduler hiccup away, too
//!   noisy to refuse on: under load the per-point frame lateness of [`super::fidelity`],
//!   over thousands of frames, carries that judgement through the sweep);
//! - `timeScale: auto` probes [`AUTO_CANDIDATES`] from the largest down and keeps the first
//!   whose drift and lateness are both within 2%.

pub use goodput_core::benchmark::calibration::*;

use crate::analysis::{nearest_rank, tpot_ms};
use crate::loadgen::client::send;
use crate::loadgen::prompt::prompt_tokens;
use crate::loadgen::record::RequestRecord;
use crate::loadgen::{Api, Prompt, RequestSpec, Timeouts};
use crate::sim::engine::{Engine, NewRequest};
use crate::sim::live::LatenessSnapshot;
use crate::sim::setup::Setup;
use crate::workload::WorkloadClass;

/// The probe's lengths for a class: its prompt, and its output capped at
/// [`PROBE_OUTPUT_TOKENS_MAX`] (at least 2, so a TPOT exists).
pub fn probe_lengths(class: &WorkloadClass) -> (u32, u32) {
    (
        class.input_tokens.max(1),
        class.output_tokens.clamp(2, PROBE_OUTPUT_TOKENS_MAX),
    )
}

/// What the model predicts for one request alone on an idle engine: TTFT and TPOT (ms),
/// through the analysis's own TPOT formula.
pub fn model_alone(setup: &Setup, input_tokens: u32, output_tokens: u32) -> (f64, f64) {
    let mut engine = Engine::new(setup.clone());
    let id = engine.submit(NewRequest {
        input_len: input_tokens,
        output_len: output_tokens,
        block_hashes: Vec::new(),
    });
    let (mut first, mut last) = (None, 0.0);
    'steps: while let Some(step) = engine.step() {
        for ev in engine.events().iter().filter(|e| e.id == id) {
            first.get_or_insert(step.end);
            last = step.end;
            if ev.finished {
                break 'steps;
            }
        }
    }
    let ttft = first.unwrap_or(last) * 1e3;
    let e2e = last * 1e3;
    (
        ttft,
        tpot_ms(ttft, e2e, u64::from(output_tokens)).unwrap_or(0.0),
    )
}

/// Judges a trial's probes against the tightest cutoffs: the worst median drift as a
/// fraction, and what set it.
pub fn judge(classes: &[ClassProbe], (ttft_cutoff, tpot_cutoff): (f64, f64)) -> (f64, String) {
    let mut worst = (0.0, "no drift".to_owned());
    for c in classes {
        let candidates = [
            ("TTFT", c.live_ttft_ms, c.model_ttft_ms, ttft_cutoff, "ms"),
            (
                "TPOT",
                c.live_tpot_ms,
                c.model_tpot_ms,
                tpot_cutoff,
                "ms/token",
            ),
        ];
        for (what, live, model, cutoff, unit) in candidates {
            let drift = live - model;
            let fraction = if live.is_finite() {
                drift.abs() / cutoff
            } else {
                f64::INFINITY
            };
            if fraction > worst.0 {
                worst = (
                    fraction,
                    format!(
                        "{} {what} {drift:+.2} {unit} (live {live:.2} vs model {model:.2}) \
                         against the {cutoff} {unit} cutoff",
                        c.class
                    ),
                );
            }
        }
    }
    worst
}

/// The K `auto` keeps from trials run largest first: the first within the warning bound,
/// else the last tried (the smallest).
pub fn auto_choice(trials: &[Trial]) -> Option<f64> {
    trials
        .iter()
        .find(|t| t.within(WARN_FRACTION))
        .or(trials.last())
        .map(|t| t.time_scale)
}

/// One idle probe of the engine behind `url` (running at `k`) for each class: requests one
/// at a time, each with a fresh prompt (`nonce` keeps it out of any prefix cache), live
/// medians in model time beside the model's own answer, after [`WARMUP_REQUESTS`] unmeasured
/// ones. `lateness_reset` forgets the engine's frame lateness so far and `lateness` reads
/// it over the probe.
#[allow(clippy::too_many_arguments)]
pub async fn probe(
    client: &reqwest::Client,
    url: &str,
    model: &str,
    setup: &Setup,
    classes: &[WorkloadClass],
    cutoffs: (f64, f64),
    k: f64,
    nonce: u64,
    lateness_reset: impl Fn(),
    lateness: impl Fn() -> Vec<LatenessSnapshot>,
) -> Trial {
    let timeouts = Timeouts::default();
    let spec = |index: u64, input: u32, output: u32| RequestSpec {
        model: model.to_owned(),
        api: Api::Completions,
        prompt: Prompt::Tokens(prompt_tokens(
            crate::loadgen::prompt::TokenRange::DEFAULT,
            nonce,
            index,
            input,
            None,
        )),
        max_tokens: output,
        min_tokens: None,
        ignore_eos: true,
        temperature: None,
        close_connection: false,
    };
    // The first requests on a fresh engine open connections (client to router, router to
    // replica) and wake idle threads: a cost of the probe's start, not of K.
    if let Some(first) = classes.first() {
        let (input, output) = probe_lengths(first);
        for i in 0..WARMUP_REQUESTS {
            let _ = send(
                client,
                url,
                &spec(u64::MAX - u64::from(i), input, output),
                &timeouts,
            )
            .await;
        }
    }
    lateness_reset();
    let mut out = Vec::with_capacity(classes.len());
    for (ci, class) in classes.iter().enumerate() {
        let (input, output) = probe_lengths(class);
        let (model_ttft, model_tpot) = model_alone(setup, input, output);
        let (mut ttft, mut tpot, mut failed) = (Vec::new(), Vec::new(), 0);
        for i in 0..PROBES_PER_CLASS {
            let index = (ci as u64) << 32 | u64::from(i);
            let outcome = send(client, url, &spec(index, input, output), &timeouts).await;
            let sent = outcome.sent;
            let mut record = RequestRecord::new(index, ci, sent, sent, input, output, outcome);
            if !record.ok() {
                failed += 1;
                continue;
            }
            record.rescale(k);
            ttft.push(record.ttft_ms);
            tpot.push(record.tpot_ms);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            nearest_rank(v, 0.5).unwrap_or(f64::INFINITY)
        };
        out.push(ClassProbe {
            class: class.name.clone(),
            input_tokens: input,
            output_tokens: output,
            probes: ttft.len() as u32,
            failed,
            model_ttft_ms: model_ttft,
            live_ttft_ms: median(&mut ttft),
            model_tpot_ms: model_tpot,
            live_tpot_ms: median(&mut tpot),
        });
    }
    let lateness_p99_ms = lateness()
        .iter()
        .filter(|s| s.count > 0)
        .map(|s| s.p99_us * 1e-3 * k)
        .fold(0.0, f64::max);
    let (drift_fraction, worst) = judge(&out, cutoffs);
    Trial {
        time_scale: k,
        classes: out,
        lateness_p99_ms,
        lateness_fraction: lateness_p99_ms / cutoffs.0,
        drift_fraction,
        worst,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, live_ttft: f64, model_ttft: f64) -> ClassProbe {
        ClassProbe {
            class: name.into(),
            input_tokens: 100,
            output_tokens: 64,
            probes: 5,
            failed: 0,
            model_ttft_ms: model_ttft,
            live_ttft_ms: live_ttft,
            model_tpot_ms: 10.0,
            live_tpot_ms: 10.05,
        }
    }

    fn trial(k: f64, fraction: f64) -> Trial {
        Trial {
            time_scale: k,
            classes: Vec::new(),
            lateness_p99_ms: 0.0,
            lateness_fraction: 0.0,
            drift_fraction: fraction,
            worst: String::new(),
        }
    }

    #[test]
    fn the_worst_drift_against_the_tightest_cutoff_decides() {
        // chat: +12 ms on a 300 ms cutoff is 4%; TPOT +0.05 on 40 is 0.125%.
        let (fraction, worst) = judge(
            &[class("chat", 60.0, 48.0), class("long", 101.0, 100.0)],
            (300.0, 40.0),
        );
        assert!((fraction - 0.04).abs() < 1e-12, "{fraction}");
        assert!(worst.starts_with("chat TTFT +12.00 ms"), "{worst}");
        // A live figure below the model's is drift too (the harness cannot make the engine
        // faster than its model: that would be a bug).
        let (fraction, worst) = judge(&[class("chat", 40.0, 48.0)], (300.0, 40.0));
        assert!((fraction - 8.0 / 300.0).abs() < 1e-12 && worst.contains("-8.00 ms"));
        // No successful probe: infinitely far.
        let (fraction, _) = judge(&[class("chat", f64::INFINITY, 48.0)], (300.0, 40.0));
        assert!(fraction.is_infinite());
    }

    #[test]
    fn auto_keeps_the_largest_k_within_two_percent() {
        let trials = [trial(100.0, 0.2), trial(50.0, 0.05), trial(25.0, 0.019)];
        assert_eq!(auto_choice(&trials), Some(25.0));
        // Lateness over the bound rules a K out too.
        let mut late = trials.to_vec();
        late[2].lateness_fraction = 0.03;
        assert_eq!(
            auto_choice(&late),
            Some(25.0),
            "none within: the smallest tried"
        );
        late.push(trial(10.0, 0.01));
        assert_eq!(auto_choice(&late), Some(10.0));
        // None within: the smallest tried.
        assert_eq!(auto_choice(&trials[..2]), Some(50.0));
        assert_eq!(auto_choice(&[]), None);
    }

    #[test]
    fn a_fixed_k_over_ten_percent_is_refused_and_over_two_warned() {
        let calibration = |requested: &str, fraction: f64| Calibration {
            requested: requested.into(),
            chosen: 25.0,
            warn_fraction: WARN_FRACTION,
            refuse_fraction: REFUSE_FRACTION,
            tightest_ttft_cutoff_ms: 300.0,
            tightest_tpot_cutoff_ms: 40.0,
            trials: vec![trial(25.0, fraction)],
        };
        let c = calibration("25", 0.11);
        assert!(c.refusal().expect("refused").contains("25 is too fast"));
        let c = calibration("25", 0.05);
        assert!(c.refusal().is_none() && c.warning().expect("a warning").contains("5.0%"));
        assert!(calibration("25", 0.01).warning().is_none());
        // Idle lateness alone warns, never refuses.
        let mut c = calibration("25", 0.01);
        c.trials[0].lateness_fraction = 0.5;
        c.trials[0].lateness_p99_ms = 150.0;
        assert!(c.refusal().is_none());
        assert!(
            c.warning()
                .expect("a warning")
                .contains("frame lateness P99 150.0 ms")
        );
        // auto never refuses: it chose the smallest K it had.
        assert!(calibration("auto", 0.5).refusal().is_none());
        // A fixed K probed twice is judged on its second round, whichever way it went.
        let mut c = calibration("25", 0.15);
        c.trials.push(trial(25.0, 0.03));
        assert!(c.refusal().is_none(), "a first round spoilt by a hiccup");
        let mut c = calibration("25", 0.03);
        c.trials.push(trial(25.0, 0.15));
        assert!(c.refusal().is_some(), "the second round decides");
    }

    #[test]
    fn the_model_alone_is_its_prefill_then_one_step_per_token() {
        let setup = crate::sim::setup::preset("qwen2.5-7b-h100").expect("a preset");
        let (ttft, tpot) = model_alone(&setup, 1000, 64);
        // A 1,000-token prefill on an H100 takes tens of milliseconds, a decode step of a
        // lone 7B request about 7-15 ms.
        assert!(ttft > 5.0 && ttft < 200.0, "{ttft}");
        assert!(tpot > 3.0 && tpot < 30.0, "{tpot}");
        let (longer, _) = model_alone(&setup, 4000, 64);
        assert!(longer > ttft, "a longer prompt takes longer to prefill");
    }
}
