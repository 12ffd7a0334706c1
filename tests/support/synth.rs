//! Deterministic synthetic `requests.csv` files, shared by the integration tests and the
//! `analyze` benchmark (included with `#[path]`). Not part of the library: real points
//! come from the load generator.

#![allow(dead_code)]

use std::io::{self, Write};

/// SplitMix64: a tiny, fully specified generator, so a seed gives the same file everywhere.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// One class of a synthetic point.
#[derive(Clone, Debug)]
pub struct ClassSpec {
    pub name: &'static str,
    pub ttft_cutoff_ms: f64,
    pub tpot_cutoff_ms: f64,
    pub output_tokens: u64,
    /// Successful requests.
    pub successes: u64,
    /// Successful requests meeting both cutoffs.
    pub passing: u64,
    /// Failed requests.
    pub failures: u64,
}

/// A synthetic test point.
#[derive(Clone, Debug)]
pub struct PointSpec {
    pub offered_rps: f64,
    pub duration_s: f64,
    pub queue_trend: &'static str,
    pub classes: Vec<ClassSpec>,
}

fn seed_class(
    name: &'static str,
    ttft: f64,
    tpot: f64,
    tokens: u64,
    (successes, passing, failures): (u64, u64, u64),
) -> ClassSpec {
    ClassSpec {
        name,
        ttft_cutoff_ms: ttft,
        tpot_cutoff_ms: tpot,
        output_tokens: tokens,
        successes,
        passing,
        failures,
    }
}

/// The seed's three classes with (successes, passing, failures) each.
pub fn seed_classes(counts: [(u64, u64, u64); 3]) -> Vec<ClassSpec> {
    vec![
        seed_class("interactive", 500.0, 40.0, 128, counts[0]),
        seed_class("long_context", 2500.0, 50.0, 256, counts[1]),
        seed_class("generation_heavy", 800.0, 45.0, 1024, counts[2]),
    ]
}

/// The four points of the seed's worked example (16, 20, 24, 28 RPS on 4 replicas), with
/// per-class counts that reproduce its table: the weakest class's attainment and successes,
/// the error rate, and the completed rate (which sets the window length).
pub fn seed_table() -> Vec<PointSpec> {
    let p = |offered_rps: f64, completed_rps: f64, trend, counts: [(u64, u64, u64); 3]| {
        let successes: u64 = counts.iter().map(|c| c.0).sum();
        PointSpec {
            offered_rps,
            duration_s: (successes as f64 / completed_rps).round(),
            queue_trend: trend,
            classes: seed_classes(counts),
        }
    };
    vec![
        p(
            16.0,
            16.0,
            "flat",
            [(15_400, 15_354, 0), (4_400, 4_387, 0), (2_200, 2_180, 0)],
        ),
        p(
            20.0,
            20.0,
            "flat",
            [(15_385, 15_259, 15), (4_396, 4_365, 4), (2_197, 2_158, 3)],
        ),
        p(
            24.0,
            23.9,
            "flat",
            [(15_339, 14_649, 61), (4_382, 4_171, 18), (2_191, 2_084, 9)],
        ),
        p(
            28.0,
            25.2,
            "growing",
            [
                (15_092, 13_206, 308),
                (4_312, 3_827, 88),
                (2_156, 1_682, 44),
            ],
        ),
    ]
}

/// A point of `rows` requests in the seed's 70/20/10 mix, 96% passing, 0.5% failed: the
/// shape of the `analyze` benchmark's input.
pub fn large_point(rows: u64) -> PointSpec {
    let split = |share: f64| {
        let n = (rows as f64 * share).round() as u64;
        let failures = n / 200;
        let successes = n - failures;
        (successes, successes * 96 / 100, failures)
    };
    let (a, b) = (split(0.7), split(0.2));
    let rest = rows - (a.0 + a.2) - (b.0 + b.2);
    let c = (
        rest - rest / 200,
        (rest - rest / 200) * 96 / 100,
        rest / 200,
    );
    PointSpec {
        offered_rps: 24.0,
        duration_s: 3600.0,
        queue_trend: "flat",
        classes: seed_classes([a, b, c]),
    }
}

/// Writes the point's rows in a seeded random order. Passing rows sit under both cutoffs;
/// slow rows miss TTFT, TPOT or both; failed rows carry zeros and an error status. TPOT is
/// consistent with the other columns: `(e2e - ttft) / (output_tokens - 1)`.
pub fn write_point_csv(out: &mut impl Write, spec: &PointSpec, seed: u64) -> io::Result<()> {
    #[derive(Clone, Copy)]
    enum Kind {
        Pass,
        Slow,
        Failed,
    }
    let mut rows: Vec<(usize, Kind)> = Vec::new();
    for (i, c) in spec.classes.iter().enumerate() {
        rows.extend(std::iter::repeat_n((i, Kind::Pass), c.passing as usize));
        rows.extend(std::iter::repeat_n(
            (i, Kind::Slow),
            (c.successes - c.passing) as usize,
        ));
        rows.extend(std::iter::repeat_n((i, Kind::Failed), c.failures as usize));
    }
    let mut rng = SplitMix64::new(seed);
    for i in (1..rows.len()).rev() {
        rows.swap(i, rng.below(i + 1));
    }
    let mut out = io::BufWriter::with_capacity(1 << 16, out);
    writeln!(
        out,
        "request_id,class,ttft_ms,tpot_ms,e2e_ms,output_tokens,status"
    )?;
    for (n, (class, kind)) in rows.into_iter().enumerate() {
        let c = &spec.classes[class];
        let (ttft_f, tpot_f) = match kind {
            Kind::Pass => (rng.uniform(0.2, 0.95), rng.uniform(0.3, 0.95)),
            Kind::Slow => match rng.below(3) {
                0 => (rng.uniform(1.05, 3.0), rng.uniform(0.3, 0.95)),
                1 => (rng.uniform(0.2, 0.95), rng.uniform(1.05, 2.0)),
                _ => (rng.uniform(1.05, 3.0), rng.uniform(1.05, 2.0)),
            },
            Kind::Failed => {
                writeln!(out, "r-{n:07},{},0,0,0,0,error", c.name)?;
                continue;
            }
        };
        let ttft = (c.ttft_cutoff_ms * ttft_f * 10.0).round() / 10.0;
        let tpot = (c.tpot_cutoff_ms * tpot_f * 100.0).round() / 100.0;
        let e2e = ttft + tpot * (c.output_tokens - 1) as f64;
        writeln!(
            out,
            "r-{n:07},{},{ttft:.1},{tpot:.2},{e2e:.2},{},ok",
            c.name, c.output_tokens
        )?;
    }
    out.flush()
}
