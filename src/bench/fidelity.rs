//! The simulated engine's frame lateness over a point, read from its replicas. What it
//! means (the bounds, the findings) is the core's (`goodput_core::benchmark::fidelity`),
//! re-exported here.

pub use goodput_core::benchmark::fidelity::*;

use crate::sim::live::LatenessSnapshot;

/// The lateness of replicas' frame snapshots (real microseconds) at time scale `k`;
/// `None` when no frame was observed.
pub fn engine_lateness(
    frames: &[LatenessSnapshot],
    k: f64,
    tightest_ttft_cutoff_ms: f64,
) -> Option<EngineLateness> {
    let observed: Vec<&LatenessSnapshot> = frames.iter().filter(|s| s.count > 0).collect();
    if observed.is_empty() {
        return None;
    }
    let worst = |f: fn(&LatenessSnapshot) -> f64| {
        observed.iter().map(|s| f(s)).fold(0.0, f64::max) * 1e-3 * k
    };
    Some(EngineLateness {
        p99_ms: worst(|s| s.p99_us),
        max_ms: worst(|s| s.max_us),
        tightest_ttft_cutoff_ms,
        frames: observed.iter().map(|s| s.count).sum(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{ClassSlo, GateConfig};

    fn snap(count: u64, p99_us: f64, max_us: f64) -> LatenessSnapshot {
        LatenessSnapshot {
            count,
            p99_us,
            max_us,
            ..LatenessSnapshot::default()
        }
    }

    #[test]
    fn the_tightest_ttft_cutoff_sets_the_bounds() {
        let class = |name: &str, ttft: f64| ClassSlo {
            name: name.into(),
            ttft_cutoff_ms: ttft,
            tpot_cutoff_ms: 40.0,
        };
        let gate = GateConfig {
            classes: vec![class("long", 2_000.0), class("chat", 500.0)],
            ..GateConfig::default()
        };
        assert_eq!(tightest_ttft_cutoff_ms(&gate), Some(500.0));
        assert_eq!(tightest_ttft_cutoff_ms(&GateConfig::default()), None);
        let l = engine_lateness(&[snap(1, 1.0, 1.0)], 1.0, 500.0).expect("frames");
        assert_eq!((l.warn_ms(), l.refuse_ms()), (10.0, 50.0));
    }

    #[test]
    fn real_lateness_is_multiplied_by_k_and_the_latest_replica_counts() {
        // 300 µs real at K = 25 is 7.5 ms of model time: under 2% of 500 ms.
        let l = engine_lateness(&[snap(10, 300.0, 900.0), snap(0, 0.0, 0.0)], 25.0, 500.0)
            .expect("frames");
        assert!((l.p99_ms - 7.5).abs() < 1e-9 && (l.max_ms - 22.5).abs() < 1e-9);
        assert_eq!(l.frames, 10);
        assert!(!l.warns() && l.finding(25.0, false).is_none());
        // The latest replica at K = 50: 15 ms, a warning, still evidence.
        let l = engine_lateness(
            &[snap(10, 100.0, 100.0), snap(5, 300.0, 400.0)],
            50.0,
            500.0,
        )
        .expect("frames");
        assert!(l.warns() && !l.refuses());
        let finding = l.finding(50.0, false).expect("a warning");
        assert!(finding.contains("15.0 ms late at P99") && finding.contains("over 10.0 ms (2%"));
        // At K = 200: 60 ms, not evidence unless the point passed.
        let l = engine_lateness(&[snap(5, 300.0, 400.0)], 200.0, 500.0).expect("frames");
        assert!(l.refuses() && l.refuses_point(false) && !l.refuses_point(true));
        assert!(
            l.finding(200.0, true)
                .expect("a warning")
                .contains("it passed with that delay added")
        );
        assert!(
            l.finding(200.0, false)
                .expect("a refusal")
                .contains("over 50.0 ms (10%")
        );
        assert_eq!(engine_lateness(&[snap(0, 0.0, 0.0)], 25.0, 500.0), None);
    }
}
