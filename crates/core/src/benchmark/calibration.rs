//! The time-scale calibration's record: the probes at each K, the bounds they are judged
//! against and the choice (`sweep.json`'s `calibration`). The probes themselves run in
//! `goodput::bench::calibration`.

use serde::{Deserialize, Serialize};

use super::fidelity::{tightest_cutoff_ms, tightest_ttft_cutoff_ms};
use crate::analysis::GateConfig;

/// Drift, as a fraction of the tightest cutoff, above which the pack warns (and `auto`
/// looks for a smaller K): 2%, the frame-lateness warning bound.
pub const WARN_FRACTION: f64 = super::fidelity::LATENESS_WARN_FRACTION;

/// Drift, as a fraction of the tightest cutoff, above which a fixed K is refused: 10%, the
/// frame-lateness refusal bound.
pub const REFUSE_FRACTION: f64 = super::fidelity::LATENESS_REFUSE_FRACTION;

/// Idle probes per class at each K.
pub const PROBES_PER_CLASS: u32 = 5;

/// Further rounds of probes a fixed K gets before it is refused (judged on the last).
pub const REFUSAL_RETRIES: u32 = 1;

/// Unmeasured requests before the probes at each K.
pub const WARMUP_REQUESTS: u32 = 2;

/// A probe generates at most this many tokens (enough for a TPOT; keeps the probe short
/// at small K).
pub const PROBE_OUTPUT_TOKENS_MAX: u32 = 64;

/// The time scales `auto` tries, largest first.
pub const AUTO_CANDIDATES: [f64; 7] = [100.0, 50.0, 25.0, 10.0, 5.0, 2.0, 1.0];

/// One class's idle probe at one K, in model time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassProbe {
    /// The workload class whose lengths the probe used.
    pub class: String,
    /// Prompt tokens of each probe.
    pub input_tokens: u32,
    /// Output tokens of each probe (the class's, at most [`PROBE_OUTPUT_TOKENS_MAX`]).
    pub output_tokens: u32,
    /// Probes that succeeded; the medians are over these.
    pub probes: u32,
    /// Probes that failed.
    pub failed: u32,
    /// What the model predicts for one request alone (ms).
    pub model_ttft_ms: f64,
    /// The live engine's median, measured by the client and converted to model time (ms).
    pub live_ttft_ms: f64,
    /// What the model predicts (ms per token).
    pub model_tpot_ms: f64,
    /// The live engine's median (ms per token, model time).
    pub live_tpot_ms: f64,
}

/// The idle probe at one time scale.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// K.
    pub time_scale: f64,
    /// One probe per workload class.
    pub classes: Vec<ClassProbe>,
    /// The engine's P99 frame lateness during the probe (ms of model time).
    pub lateness_p99_ms: f64,
    /// The frame lateness as a fraction of the tightest TTFT cutoff.
    pub lateness_fraction: f64,
    /// The worst median drift (TTFT or TPOT, live − model, either sign) as a fraction of
    /// the tightest cutoff of its kind.
    pub drift_fraction: f64,
    /// What set it, e.g. `chat TTFT +12.1 ms (live 60.1 vs model 48.0) against the 300 ms
    /// cutoff`.
    pub worst: String,
}

impl Trial {
    /// True when drift and lateness are both within the warning bound.
    pub fn within(&self, warn_fraction: f64) -> bool {
        self.drift_fraction <= warn_fraction && self.lateness_fraction <= warn_fraction
    }

    /// True when the median drift is over `refuse_fraction` (lateness alone never refuses).
    pub fn refused(&self, refuse_fraction: f64) -> bool {
        self.drift_fraction > refuse_fraction
    }

    /// The larger of the two fractions, and what set it.
    fn worst_words(&self) -> (f64, String) {
        if self.lateness_fraction > self.drift_fraction {
            (
                self.lateness_fraction,
                format!(
                    "frame lateness P99 {:.1} ms of model time",
                    self.lateness_p99_ms
                ),
            )
        } else {
            (self.drift_fraction, self.worst.clone())
        }
    }
}

/// The time scale a run used and the probes that chose or checked it (`sweep.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// `auto` or the K the spec gave.
    pub requested: String,
    /// The K the run used.
    pub chosen: f64,
    /// [`WARN_FRACTION`].
    pub warn_fraction: f64,
    /// [`REFUSE_FRACTION`].
    pub refuse_fraction: f64,
    /// The tightest TTFT cutoff of the classes (ms): TTFT drift and frame lateness are
    /// fractions of it.
    pub tightest_ttft_cutoff_ms: f64,
    /// The tightest TPOT cutoff (ms per token): TPOT drift is a fraction of it.
    pub tightest_tpot_cutoff_ms: f64,
    /// The probes, in the order run (for `auto`, largest K first; a fixed K over the
    /// refusal bound has a second round).
    pub trials: Vec<Trial>,
}

impl Calibration {
    /// The trial of the chosen K (its last round, when a fixed K was probed again).
    pub fn chosen_trial(&self) -> Option<&Trial> {
        self.trials
            .iter()
            .rev()
            .find(|t| t.time_scale == self.chosen)
    }

    /// A warning for the pack when the chosen K drifts over the warning bound.
    pub fn warning(&self) -> Option<String> {
        let t = self.chosen_trial()?;
        let (fraction, worst) = t.worst_words();
        (!t.within(self.warn_fraction)).then(|| {
            format!(
                "time scale {}: the idle calibration was off by {:.1}% of the tightest cutoff \
                 ({worst}), over {}%: latencies near a cutoff carry the harness's own delay; \
                 lower timeScale or set it to auto",
                t.time_scale,
                fraction * 100.0,
                self.warn_fraction * 100.0
            )
        })
    }

    /// Why a fixed K is refused: its drift is over the refusal bound.
    pub fn refusal(&self) -> Option<String> {
        let t = self.chosen_trial()?;
        (self.requested != "auto" && t.refused(self.refuse_fraction)).then(|| {
            format!(
                "spec.target.simulated.timeScale: {} is too fast for this machine: the idle \
                 calibration drifted {:.1}% of the tightest cutoff ({}), over the {}% a \
                 benchmark can stand on; lower timeScale or set it to auto",
                t.time_scale,
                t.drift_fraction * 100.0,
                t.worst,
                self.refuse_fraction * 100.0
            )
        })
    }
}

/// The tightest finite, positive TTFT and TPOT cutoffs of the gate's classes.
pub fn tightest_cutoffs(gate: &GateConfig) -> Option<(f64, f64)> {
    Some((
        tightest_ttft_cutoff_ms(gate)?,
        tightest_cutoff_ms(gate, |c| c.tpot_cutoff_ms)?,
    ))
}
