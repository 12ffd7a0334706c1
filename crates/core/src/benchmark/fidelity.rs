//! How far the live simulated engine drifted from its own model clock during a point, and
//! whether the point is still evidence.
//!
//! The engine knows when each token frame was due (the end of the step its model scheduled
//! it in) and when the frame was handed to the HTTP layer; the difference is the frame's
//! lateness, in real time. At time scale K one real millisecond is K milliseconds of the
//! reported (model) time, so the lateness is multiplied by K before it is judged against
//! the tightest TTFT cutoff of the point's classes, in two tiers:
//! - over [`LATENESS_WARN_FRACTION`] (2%) at P99 the pack warns: latencies near a cutoff
//!   carry the harness's own delay;
//! - over [`LATENESS_REFUSE_FRACTION`] (10%) at P99 a point that did not pass is not
//!   evidence, like a point whose client fell behind its schedule: the harness, not the
//!   model, may have set the latencies it failed on.
//!
//! Lateness only ever delays a frame, so it only ever raises measured latencies: a point
//! that passes with it passes without it, and stays evidence (with the warning). A lower
//! `timeScale` is the remedy for both.

use serde::{Deserialize, Serialize};

use crate::analysis::{ClassSlo, GateConfig};

/// P99 frame lateness (model time), as a fraction of the tightest TTFT cutoff, above which
/// the pack warns: 2% (10 ms against a 500 ms cutoff).
pub const LATENESS_WARN_FRACTION: f64 = 0.02;

/// P99 frame lateness (model time), as a fraction of the tightest TTFT cutoff, above which
/// a point is not evidence: 10% (50 ms against a 500 ms cutoff).
pub const LATENESS_REFUSE_FRACTION: f64 = 0.10;

/// The simulated engine's frame lateness over one point, in model time.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct EngineLateness {
    /// P99 frame lateness of the latest replica (ms of model time: real lateness × K).
    pub p99_ms: f64,
    /// Largest frame lateness of any replica (ms of model time).
    pub max_ms: f64,
    /// The tightest TTFT cutoff of the point's classes (ms), which the bounds are
    /// fractions of.
    pub tightest_ttft_cutoff_ms: f64,
    /// Frames observed.
    pub frames: u64,
}

/// The tightest finite, positive cutoff of the gate's classes that `cutoff` reads, if any.
pub fn tightest_cutoff_ms(gate: &GateConfig, cutoff: fn(&ClassSlo) -> f64) -> Option<f64> {
    gate.classes
        .iter()
        .map(cutoff)
        .filter(|c| c.is_finite() && *c > 0.0)
        .min_by(f64::total_cmp)
}

/// The tightest finite, positive TTFT cutoff of this gate, if any.
pub fn tightest_ttft_cutoff_ms(gate: &GateConfig) -> Option<f64> {
    tightest_cutoff_ms(gate, |c| c.ttft_cutoff_ms)
}

impl EngineLateness {
    /// The warning bound (ms of model time).
    pub fn warn_ms(&self) -> f64 {
        self.tightest_ttft_cutoff_ms * LATENESS_WARN_FRACTION
    }

    /// The refusal bound (ms of model time).
    pub fn refuse_ms(&self) -> f64 {
        self.tightest_ttft_cutoff_ms * LATENESS_REFUSE_FRACTION
    }

    /// True when the P99 is over the warning bound.
    pub fn warns(&self) -> bool {
        self.p99_ms > self.warn_ms()
    }

    /// True when the P99 is over the refusal bound: a point that did not pass is not
    /// evidence.
    pub fn refuses(&self) -> bool {
        self.p99_ms > self.refuse_ms()
    }

    /// True when this lateness leaves a point with gate result `passed` out of the
    /// evidence: over the refusal bound and not passing (a pass stands: lateness only
    /// ever raised its latencies).
    pub fn refuses_point(&self, passed: bool) -> bool {
        self.refuses() && !passed
    }

    /// The largest delay the harness may have added to any token (ms of model time).
    pub fn relief_ms(&self) -> f64 {
        self.p99_ms.max(self.max_ms)
    }

    /// What the lateness means for a point over the refusal bound whose failure stands:
    /// its attainment stays short with [`Self::relief_ms`] taken off every request.
    pub fn standing_failure(&self, k: f64) -> String {
        format!(
            "the simulated engine's token frames were {:.1} ms late at P99 in model time \
             ({:.0} µs real × K = {k}), over {:.1} ms ({}% of the tightest TTFT cutoff), \
             but the failure stands: its attainment stays short with {:.1} ms taken off \
             every request",
            self.p99_ms,
            self.p99_ms / k * 1e3,
            self.refuse_ms(),
            LATENESS_REFUSE_FRACTION * 100.0,
            self.relief_ms()
        )
    }

    /// What the lateness means for a point whose gate result is `passed`, at time scale
    /// `k`; `None` under the warning bound.
    pub fn finding(&self, k: f64, passed: bool) -> Option<String> {
        let (bound, fraction, meaning) = if self.refuses_point(passed) {
            (
                self.refuse_ms(),
                LATENESS_REFUSE_FRACTION,
                "the harness, not the model, may have set the latencies it failed on",
            )
        } else if self.refuses() {
            (
                self.refuse_ms(),
                LATENESS_REFUSE_FRACTION,
                "it passed with that delay added, so it passes without it",
            )
        } else if self.warns() {
            (
                self.warn_ms(),
                LATENESS_WARN_FRACTION,
                "latencies near a cutoff carry the harness's own delay",
            )
        } else {
            return None;
        };
        Some(format!(
            "the simulated engine's token frames were {:.1} ms late at P99 in model time \
             ({:.0} µs real × K = {k}), over {:.1} ms ({}% of the tightest TTFT cutoff): \
             {meaning}; lower timeScale",
            self.p99_ms,
            self.p99_ms / k * 1e3,
            bound,
            fraction * 100.0
        ))
    }
}
